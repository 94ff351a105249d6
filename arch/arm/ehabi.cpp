// SPDX-License-Identifier: Apache-2.0
// Backtraces of Thumb code from the ARM EHABI unwind tables (.ARM.exidx,
// .ARM.extab), which -funwind-tables makes for every function: ARMv7-A
// built in Thumb-2 and ARMv7-M (ehabi.h).
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
//    frame's registers, or the caller's own); each step finds the entry for
//    pc, runs its opcodes on the virtual registers (popping from the stack
//    at vsp), and the caller's pc is the popped r15 or else r14. A return
//    address (not a trapped pc) is looked up at pc - 2, inside the call.
//    The walk ends at a function without an entry (the assembly entry
//    points), a CANTUNWIND or refuse opcode, a read off this core's stacks,
//    or a pc that is not in the text. A return into the arch's exception
//    entry (ehabi::enter_trap) is a trap: the walk goes on from the trap
//    frame's registers, on their stack (one change of stack at most).
// 4. What is reported matches the frame-pointer walk (backtrace.h): the
//    return addresses of the frames at or above fp (GCC's r7 for a frame
//    lies inside it: between its sp and its caller's).
// 5. Recipes. Nearly every frame GCC builds undoes as "vsp += 4 * words
//    (from sp, or from r7), then pop registers in ascending order", so its
//    opcodes reduce to {words, mask}. Each CPU caches 128 of them (1 KiB),
//    keyed by the pc looked up, which skips the table search and the
//    opcodes for the call sites a workload keeps unwinding through
//    (kmemleak's and the audit trail's backtraces): on qemu-virt-arm a
//    frame with its recipe costs well under half of one without (KTEST
//    stackdepot_cost_per_call under --icount). Only its own CPU touches a
//    cache (no thread migrates), and interrupts are all that interleave: a
//    writer masks them and counts its write in the cache's generation,
//    which a reader loads before and after the key and the recipe; a
//    change between (a handler wrote, perhaps twice) makes it a miss.
#include "ehabi.h"
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/boot.h>
#include <kernel/config.h>
#include <kernel/percpu.h>
#include <kernel/stack.h>
#include <arch/ops.h>

extern "C" const uint32_t __exidx_start[], __exidx_end[];

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

using ehabi::Regs;

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

// What a frame's opcodes did, if that was "vsp = r7 (from_r7) or sp,
// vsp += 4 * words, then pop the registers of mask (r0..r15) in ascending
// order" (Recipes, above): its cached form. (vsp = r7: a function that keeps GCC's
// Thumb frame pointer, such as one that reads __builtin_frame_address.)
struct Recipe {
  uint32_t words = 0;
  uint32_t mask = 0;
  bool from_r7 = false;
  bool started = false;
  bool simple = true;
  void add(uint32_t w) {
    started = true;
    if (mask) simple = false;
    else words += w;
  }
  // Another list continues the ascending order only above the last one
  // (GCC's push {r3, lr} undoes as pop {r3}, then pop {r14}); r13 popped
  // would move vsp itself.
  void pops(uint32_t m) {
    started = true;
    if ((m & (1u << 13)) || (mask && __builtin_ctz(m) <= 31 - __builtin_clz(mask))) simple = false;
    mask |= m;
  }
  void vsp_from(unsigned reg) {
    if (started || reg != 7) simple = false;
    started = true;
    from_r7 = true;
  }
  void other() { simple = false; }
  // Encoded: words in bits 0-10 (a frame below 8 KiB: the kernel's are
  // below 2 KiB, -Wframe-larger-than), from_r7 in bit 11, the number of
  // registers in bits 12-15 (at most 15: never r13), mask in 16-31.
  bool cacheable() const { return simple && words <= 0x7ff; }
  uint32_t encode() const {
    return words | (from_r7 ? 1u << 11 : 0) | (static_cast<uint32_t>(__builtin_popcount(mask)) << 12) | (mask << 16);
  }
};

// Undoes a frame by its recipe (Recipe::encode).
bool apply(Regs& s, uint32_t recipe) {
  uintptr_t base = (recipe & (1u << 11)) ? s.r[7] : s.r[13];
  uintptr_t vsp = base + (uintptr_t{recipe & 0x7ffu} << 2);
  uint32_t mask = recipe >> 16;
  uintptr_t n = (recipe >> 12) & 0xf;
  // The checks execute's pops make (pop), once for all of them.
  if (n && (vsp < s.lo || vsp > s.hi || (vsp & 3) || n * 4 > s.hi - vsp)) return false;
  const auto* w = reinterpret_cast<const uintptr_t*>(vsp);
  s.pc_set = mask & (1u << 15);
  for (; mask; mask &= mask - 1) s.r[__builtin_ctz(mask)] = *w++;
  s.r[13] = vsp + n * 4;
  return true;
}

// Runs the opcodes, noting their recipe in rc; false if the frame cannot
// be unwound.
bool execute(Regs& s, Opcodes ops, Recipe& rc) {
  uint8_t op;
  s.pc_set = false;
  while (ops.next(op)) {
    if ((op & 0xc0) == 0x00) {
      s.r[13] += (uintptr_t{op & 0x3fu} << 2) + 4;
      rc.add((op & 0x3fu) + 1);
    } else if ((op & 0xc0) == 0x40) {
      s.r[13] -= (uintptr_t{op & 0x3fu} << 2) + 4;
      rc.other();
    } else if ((op & 0xf0) == 0x80) {
      uint8_t op2;
      if (!ops.next(op2)) return false;
      unsigned mask = (unsigned{op & 0x0fu} << 8) | op2;  // r15..r4
      if (!mask) return false;  // refuse to unwind
      rc.pops(mask << 4);
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
      rc.vsp_from(n);
    } else if ((op & 0xf0) == 0xa0) {
      unsigned last = 4 + (op & 0x07);
      rc.pops(((2u << last) - (1u << 4)) | ((op & 0x08) ? 1u << 14 : 0));  // r4..rlast, lr
      for (unsigned i = 4; i <= last; i++)
        if (!pop(s, s.r[i])) return false;
      if (op & 0x08)
        if (!pop(s, s.r[14])) return false;
    } else if (op == 0xb0) {
      break;  // finish
    } else if (op == 0xb1) {
      uint8_t mask;
      if (!ops.next(mask) || !mask || (mask & 0xf0)) return false;
      rc.pops(mask);
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
      if (v <= 0xffff) rc.add(0x81 + static_cast<uint32_t>(v));
      else rc.other();
    } else if (op == 0xb3 || op == 0xc8 || op == 0xc9) {
      uint8_t b;  // VFP registers: soft float here, but step over them
      if (!ops.next(b)) return false;
      s.r[13] += (uintptr_t{b & 0x0fu} + 1) * 8 + (op == 0xb3 ? 4 : 0);
      rc.other();
    } else if ((op & 0xf8) == 0xb8) {
      s.r[13] += (uintptr_t{op & 0x07u} + 1) * 8 + 4;
      rc.other();
    } else if ((op & 0xf8) == 0xd0) {
      s.r[13] += (uintptr_t{op & 0x07u} + 1) * 8;
      rc.other();
    } else {
      return false;  // spare or iWMMXt: not ours
    }
  }
  return true;
}

// Each CPU's recipes (Recipes, above): 64 sets of two, the set picked by a
// multiplicative hash of the pc (so that call sites a multiple of some
// power of two apart do not share one), key = the pc looked up, | 1 (0:
// empty). A new recipe goes first in its set and the first moves second:
// with one way, two hot frames of one walk that share a slot would evict
// each other on every walk (audit's backtraces would miss on every pair).
// gen counts the writes, odd while one is under way: a reader that finds
// it changed across its loads of a key and its recipe (an interrupt
// handler wrote meanwhile, perhaps twice), or odd (an NMI or FIQ on its way
// to a panic, inside a write), takes neither.
constexpr unsigned kRecipeSets = 64;
struct RecipeSlot {
  volatile uintptr_t key;
  volatile uint32_t recipe;
};
using RecipeSet = RecipeSlot[2];
struct RecipeCache {
  volatile uint32_t gen;
  RecipeSet sets[kRecipeSets];
};
RecipeCache g_recipes[kMaxCpus];

RecipeCache& recipe_cache() {
  unsigned cpu = kMaxCpus == 1 ? 0 : cpu_id();
  return g_recipes[cpu < kMaxCpus ? cpu : 0];
}

RecipeSet& recipe_set(RecipeCache& c, uintptr_t lookup) {
  static_assert((kRecipeSets & (kRecipeSets - 1)) == 0);
  uint32_t h = (static_cast<uint32_t>(lookup) * 0x9e3779b1u) >> (32 - __builtin_ctz(kRecipeSets));
  return c.sets[h];
}

// The recipe cached for key, if any, read between two loads of gen that
// agree (an even one).
bool read_recipe(const RecipeCache& c, const RecipeSet& set, uintptr_t key, uint32_t& recipe) {
  uint32_t gen = c.gen;
  if (gen & 1) return false;
  if (set[0].key == key) recipe = set[0].recipe;
  else if (set[1].key == key) recipe = set[1].recipe;
  else return false;
  return c.gen == gen;
}

// Runs write with interrupts masked and gen odd, unless a write is under
// way (this is an NMI or a FIQ inside it): then not at all.
template <typename F>
void write_recipes(RecipeCache& c, F&& write) {
  arch::IrqState irq = arch::irq_save();
  uint32_t gen = c.gen;
  if (!(gen & 1)) {
    c.gen = gen + 1;
    write();
    c.gen = gen + 2;
  }
  arch::irq_restore(irq);
}

// Undoes the frame by the opcodes, and caches their recipe if it has one.
bool decode(Regs& s, uintptr_t lookup, RecipeCache& c, RecipeSet& set) {
  const uint32_t* e = find_entry(lookup);
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
  Recipe rc;
  if (!execute(s, ops, rc)) return false;
  if (rc.cacheable()) {
    write_recipes(c, [&] {
      set[1].key = set[0].key;
      set[1].recipe = set[0].recipe;
      set[0].key = lookup | 1;
      set[0].recipe = rc.encode();
    });
  }
  return true;
}

// One frame: from s at pc (looked up at lookup), to its caller, by the
// recipes of c (this CPU's).
bool step(Regs& s, uintptr_t lookup, RecipeCache& c) {
  lookup &= ~uintptr_t{1};
  RecipeSet& set = recipe_set(c, lookup);
  uintptr_t sp_before = s.r[13];
  uint32_t recipe;
  if (read_recipe(c, set, lookup | 1, recipe)) {
    if (!apply(s, recipe)) return false;
  } else if (!decode(s, lookup, c, set)) {
    return false;
  }
  if (!s.pc_set) s.r[15] = s.r[14];
  // The stack only shrinks going out; a caller is in the text.
  return s.r[13] >= sp_before && in_text(s.r[15] & ~uintptr_t{1});
}

// The stack of a trapped sp, into s.lo and s.hi. It may lie in the guard
// page below its stack (an overflow): the frames to undo are on the stack
// above it.
bool trapped_stack(Regs& s) {
  return kstack::find(s.r[13], s.lo, s.hi) || kstack::find(s.r[13] + KSTACK_GUARD_SIZE, s.lo, s.hi);
}

}  // namespace

void arch::unwind_forget() {
  RecipeCache& c = recipe_cache();
  write_recipes(c, [&] {
    for (RecipeSet& set : c.sets) set[0].key = set[1].key = 0;
  });
}

__attribute__((noinline)) size_t arch::unwind(uintptr_t fp, const TrapFrame* trap, uintptr_t* pcs, size_t max,
                                               unsigned* repeats) {
  Regs s{};
  bool trapped = trap != nullptr;
  if (trapped) {
    ehabi::from_trap(s, trap);
  } else {
    // This function's own frame, which the tables describe.
    uintptr_t sp, pc;
    asm volatile("mov %0, sp\n 1: adr %1, 1b" : "=r"(sp), "=r"(pc));
    s.r[13] = sp;
    s.r[15] = pc;
    s.r[14] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
    s.r[7] = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (!fp) fp = sp;  // from this function's caller's view: its return address first
  }
  if (!(trapped ? trapped_stack(s) : kstack::find(s.r[13], s.lo, s.hi))) return 0;
  RecipeCache& recipes = recipe_cache();
  bool exact = true;  // r[15] is where the frame is (a trapped pc), not a return address
  unsigned switched = 0;  // stacks changed at a trap (at most once, as backtrace::walk)
  size_t n = 0;
  auto push = [&](uintptr_t pc) { backtrace::append(pcs, repeats, n, pc); };
  if (trapped && max) push(s.r[15]);
  for (unsigned steps = 0; n < max && steps < 256; steps++) {
    uintptr_t pc = s.r[15];
    if (!exact && ehabi::enter_trap(s)) {
      exact = true;
      push(s.r[15]);
      // A trap taken on another stack (the overflow stack's frame of a trap
      // on the kernel stack): the walk goes on there, once.
      if ((s.r[13] < s.lo || s.r[13] >= s.hi) && (switched++ || !trapped_stack(s))) break;
      continue;
    }
    if (!step(s, exact ? pc : pc - 2, recipes)) break;
    exact = false;
    // The frame just undone spans [its sp, the caller's sp): it is at or
    // above fp if it ends above it (fp, a frame's r7, lies inside it).
    if (s.r[13] > fp || trapped) push(s.r[15]);
  }
  return n;
}
