// SPDX-License-Identifier: Apache-2.0
// The frame-pointer backtrace walker: see kernel/include/kernel/backtrace.h.
#include <arch/ops.h>
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/stack.h>

namespace backtrace {

namespace {
// The stack being walked: [lo, hi); may switch once.
struct Bounds {
  uintptr_t lo = 0, hi = 0;
  unsigned switches = 0;
  bool contains(uintptr_t a) const { return a >= lo && a < hi; }
  // The word at fp + off, if it lies on this stack.
  bool read(uintptr_t fp, int off, uintptr_t& out) const {
    uintptr_t a = fp + static_cast<uintptr_t>(static_cast<intptr_t>(off));
    if (a < lo || a + sizeof(uintptr_t) > hi || (a & (sizeof(uintptr_t) - 1))) return false;
    out = *reinterpret_cast<const uintptr_t*>(a);
    return true;
  }
};

// Whether a is on one of this core's stacks.
bool on_a_stack(uintptr_t a) {
  uintptr_t lo, hi;
  return kstack::find(a, lo, hi);
}

// A frame record's address: fp itself, or (where records sit below fp)
// a word below it, so that an outermost fp equal to the stack's top still
// counts as on the stack.
uintptr_t probe_address(uintptr_t fp) {
  int lowest = arch::kFrameSavedFp < arch::kFrameSavedRa ? arch::kFrameSavedFp : arch::kFrameSavedRa;
  return fp + static_cast<uintptr_t>(static_cast<intptr_t>(lowest));
}
}  // namespace

size_t walk(uintptr_t fp, const TrapFrame* trap, uintptr_t* pcs, size_t max, unsigned* repeats) {
  if (!fp) fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if constexpr (!arch::kHasFrameRecords) return arch::unwind(fp, trap, pcs, max, repeats);
  Bounds b;
  if (!kstack::find(probe_address(fp), b.lo, b.hi)) return 0;
  size_t n = 0;
  auto push = [&](uintptr_t pc) { append(pcs, repeats, n, pc); };
  for (unsigned steps = 0; n < max && steps < 4096; steps++) {
    if (const TrapFrame* t = arch::trap_frame_at(fp)) trap = t;
    uintptr_t ra, next;
    if (!b.read(fp, arch::kFrameSavedRa, ra)) break;
    if (arch::kLeafFramesSaveOnlyFp && ra > fp && on_a_stack(ra)) {
      // A leaf: the slot holds the caller's fp. Its return address stayed in
      // a register, which the trap it was interrupted in saved.
      next = ra;
      ra = trap && fp == arch::trap_frame_fp(trap) ? arch::trap_frame_ra(trap) : 0;
    } else if (!b.read(fp, arch::kFrameSavedFp, next)) {
      break;
    }
    if (ra) push(ra);
    else if (!arch::kLeafFramesSaveOnlyFp) break;  // the outermost record
    if (b.contains(probe_address(next))) {
      if (next <= fp) break;  // frames grow toward the stack top
    } else if (b.switches++ || !kstack::find(probe_address(next), b.lo, b.hi)) {
      break;  // off the stack (the end), or a second switch
    }
    fp = next;
  }
  return n;
}

}  // namespace backtrace
