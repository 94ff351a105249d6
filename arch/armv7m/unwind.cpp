// Backtraces on ARMv7-M from the ARM EHABI unwind tables (.ARM.exidx,
// .ARM.extab), which -funwind-tables makes for every function.
//
// 1. Why. Thumb code keeps no frame records: GCC's r7 points at a
//    function's locals, not at a saved {fp, lr}, so kernel/backtrace.cpp's
//    walk cannot follow it. The tables say, for every function, how to undo
//    its prologue: which registers it pushed and how far it moved sp.
// 2. The tables. .ARM.exidx is sorted by function address: pairs {prel31
//    function start, entry}. The entry is EXIDX_CANTUNWIND (1), an inline
//    compact entry (bit 31: personality 0, three opcode bytes), or a prel31
//    offset to a .ARM.extab entry (compact personality 0, 1 or 2, with
//    more opcode words). Only the compact models appear: the kernel has no
//    exceptions, so no personality routine ever runs (the __aeabi_unwind_*
//    symbols the tables name are empty).
// 3. The walk: virtual registers r0-r15 start at the given point (a trap
//    frame's registers, or this function's own); each step finds the
//    entry for pc, runs its opcodes on the virtual registers (popping from
//    the stack at vsp), and the caller's pc is the popped r15 or else r14.
//    A return address (not a trapped pc) is looked up at pc - 2, inside the
//    call. The walk ends at a function without an entry (the assembly entry
//    points), a CANTUNWIND or refuse opcode, a read off this core's stacks,
//    or a pc that is not in the text. A frame of exception_entry (start.S)
//    is a trap: the walk goes on from the trap frame's registers.
// 4. What is reported matches the frame-pointer walk (backtrace.h): the
//    return addresses of the frames at or above fp (GCC's r7 for a frame
//    lies inside it: between its sp and its caller's).
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/boot.h>
#include <kernel/stack.h>
#include "trap.h"

extern "C" const uint32_t __exidx_start[], __exidx_end[];
extern "C" char exception_entry[];
extern "C" char exception_entry_end[];

// The personality routines the compact tables name; never called.
extern "C" void __aeabi_unwind_cpp_pr0() {}
extern "C" void __aeabi_unwind_cpp_pr1() {}
extern "C" void __aeabi_unwind_cpp_pr2() {}

namespace {

constexpr uint32_t kCantUnwind = 1;

uintptr_t prel31(const uint32_t* p) {
  int32_t off = static_cast<int32_t>(*p << 1) >> 1;
  return reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(off);
}

bool in_text(uintptr_t a) {
  return a >= reinterpret_cast<uintptr_t>(__text_start) && a < reinterpret_cast<uintptr_t>(__text_end);
}

// The exidx pair of the function holding pc, or null.
const uint32_t* find_entry(uintptr_t pc) {
  const uint32_t* lo = __exidx_start;
  size_t n = static_cast<size_t>(__exidx_end - __exidx_start) / 2;
  if (!n || pc < (prel31(lo) & ~uintptr_t{1})) return nullptr;
  size_t a = 0, b = n;  // the last entry whose start <= pc
  while (b - a > 1) {
    size_t m = (a + b) / 2;
    if ((prel31(lo + 2 * m) & ~uintptr_t{1}) <= pc) a = m;
    else b = m;
  }
  return lo + 2 * a;
}

struct Regs {
  uintptr_t r[16];
  uintptr_t lo, hi;  // the stack vsp must stay on
  bool pc_set;
};

bool pop(Regs& s, uintptr_t& out) {
  uintptr_t vsp = s.r[13];
  if (vsp < s.lo || vsp + 4 > s.hi || (vsp & 3)) return false;
  out = *reinterpret_cast<const uintptr_t*>(vsp);
  s.r[13] = vsp + 4;
  return true;
}

// The opcode bytes of an entry, one at a time.
struct Opcodes {
  const uint32_t* word;
  unsigned byte;   // next byte in *word: 3 (bits 31-24) down to 0
  unsigned words;  // words left after *word
  bool next(uint8_t& op) {
    if (byte > 3) {
      if (!words) return false;
      word++;
      words--;
      byte = 3;
    }
    op = static_cast<uint8_t>(*word >> (8 * byte));
    byte = byte ? byte - 1 : 4;
    return true;
  }
};

// Runs the opcodes; false if the frame cannot be unwound.
bool execute(Regs& s, Opcodes ops) {
  uint8_t op;
  s.pc_set = false;
  while (ops.next(op)) {
    if ((op & 0xc0) == 0x00) {
      s.r[13] += (uintptr_t{op & 0x3fu} << 2) + 4;
    } else if ((op & 0xc0) == 0x40) {
      s.r[13] -= (uintptr_t{op & 0x3fu} << 2) + 4;
    } else if ((op & 0xf0) == 0x80) {
      uint8_t op2;
      if (!ops.next(op2)) return false;
      unsigned mask = (unsigned{op & 0x0fu} << 8) | op2;  // r15..r4
      if (!mask) return false;  // refuse to unwind
      for (unsigned i = 0; i < 12; i++) {
        if (!(mask & (1u << i))) continue;
        uintptr_t v;
        if (!pop(s, v)) return false;
        s.r[4 + i] = v;
        if (4 + i == 15) s.pc_set = true;
      }
    } else if ((op & 0xf0) == 0x90) {
      unsigned n = op & 0x0f;
      if (n == 13 || n == 15) return false;
      s.r[13] = s.r[n];
    } else if ((op & 0xf0) == 0xa0) {
      unsigned last = 4 + (op & 0x07);
      for (unsigned i = 4; i <= last; i++)
        if (!pop(s, s.r[i])) return false;
      if (op & 0x08)
        if (!pop(s, s.r[14])) return false;
    } else if (op == 0xb0) {
      break;  // finish
    } else if (op == 0xb1) {
      uint8_t mask;
      if (!ops.next(mask) || !mask || (mask & 0xf0)) return false;
      for (unsigned i = 0; i < 4; i++)
        if ((mask & (1u << i)) && !pop(s, s.r[i])) return false;
    } else if (op == 0xb2) {
      uintptr_t v = 0;
      unsigned shift = 0;
      uint8_t b;
      do {
        if (!ops.next(b)) return false;
        v |= uintptr_t{b & 0x7fu} << shift;
        shift += 7;
      } while ((b & 0x80) && shift < 32);
      s.r[13] += 0x204 + (v << 2);
    } else if (op == 0xb3 || op == 0xc8 || op == 0xc9) {
      uint8_t b;  // VFP registers: soft float here, but step over them
      if (!ops.next(b)) return false;
      s.r[13] += (uintptr_t{b & 0x0fu} + 1) * 8 + (op == 0xb3 ? 4 : 0);
    } else if ((op & 0xf8) == 0xb8) {
      s.r[13] += (uintptr_t{op & 0x07u} + 1) * 8 + 4;
    } else if ((op & 0xf8) == 0xd0) {
      s.r[13] += (uintptr_t{op & 0x07u} + 1) * 8;
    } else {
      return false;  // spare or iWMMXt: not ours
    }
  }
  return true;
}

// One frame: from s at pc (looked up at lookup), to its caller.
bool step(Regs& s, uintptr_t lookup) {
  const uint32_t* e = find_entry(lookup & ~uintptr_t{1});
  if (!e || e[1] == kCantUnwind) return false;
  Opcodes ops{};
  if (e[1] & 0x80000000u) {
    if ((e[1] >> 24) != 0x80) return false;  // inline: personality 0 only
    ops = {&e[1], 2, 0};
  } else {
    const uint32_t* x = reinterpret_cast<const uint32_t*>(prel31(&e[1]));
    if (!(*x & 0x80000000u)) return false;  // a generic personality: not ours
    unsigned pers = (*x >> 24) & 0x0f;
    if (pers == 0) ops = {x, 2, 0};
    else if (pers == 1 || pers == 2) ops = {x, 1, (*x >> 16) & 0xff};
    else return false;
  }
  uintptr_t sp_before = s.r[13];
  if (!execute(s, ops)) return false;
  if (!s.pc_set) s.r[15] = s.r[14];
  // The stack only shrinks going out; a caller is in the text.
  return s.r[13] >= sp_before && in_text(s.r[15] & ~uintptr_t{1});
}

bool is_trap_return(uintptr_t pc) {
  uintptr_t p = pc & ~uintptr_t{1};
  return p > reinterpret_cast<uintptr_t>(exception_entry) && p <= reinterpret_cast<uintptr_t>(exception_entry_end);
}

void from_trap(Regs& s, const TrapFrame* t) {
  s.r[0] = t->r0;
  s.r[1] = t->r1;
  s.r[2] = t->r2;
  s.r[3] = t->r3;
  for (unsigned i = 0; i < 8; i++) s.r[4 + i] = t->r4_r11[i];
  s.r[12] = t->r12;
  s.r[13] = arch::trap_frame_sp(t);
  s.r[14] = t->lr;
  s.r[15] = t->pc;
}

}  // namespace

namespace arch {

__attribute__((noinline)) size_t unwind(uintptr_t fp, const TrapFrame* trap, uintptr_t* pcs, size_t max,
                                        unsigned* repeats) {
  Regs s{};
  bool exact;  // r[15] is where the frame is (a trapped pc), not a return address
  if (trap) {
    from_trap(s, trap);
    exact = true;
  } else {
    uintptr_t sp, pc;
    asm volatile("mov %0, sp\n 1: adr %1, 1b" : "=r"(sp), "=r"(pc));
    s.r[13] = sp;
    s.r[15] = pc;
    s.r[14] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
    s.r[7] = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    exact = true;
    if (!fp) fp = sp;  // from this function's caller's view: its return address first
  }
  if (!kstack::find(s.r[13], s.lo, s.hi)) return 0;
  size_t n = 0;
  auto push = [&](uintptr_t pc) {
    if (repeats && n && pcs[n - 1] == pc) {
      repeats[n - 1]++;
      return;
    }
    if (repeats) repeats[n] = 1;
    pcs[n++] = pc;
  };
  if (trap && n < max) push(s.r[15]);
  for (unsigned steps = 0; n < max && steps < 256; steps++) {
    uintptr_t pc = s.r[15];
    if (!exact && is_trap_return(pc)) {
      // exception_entry's frame: the trap frame is at its sp.
      const auto* t = reinterpret_cast<const TrapFrame*>(s.r[13]);
      if (s.r[13] < s.lo || s.r[13] + sizeof(TrapFrame) > s.hi) break;
      from_trap(s, t);
      exact = true;
      push(s.r[15]);
      continue;
    }
    if (!step(s, exact ? pc : pc - 2)) break;
    exact = false;
    // The frame just undone spans [its sp, the caller's sp): it is at or
    // above fp if it ends above it (fp, a frame's r7, lies inside it).
    if (s.r[13] > fp || trap) push(s.r[15]);
  }
  return n;
}

}  // namespace arch
