// SPDX-License-Identifier: Apache-2.0
// The frame-pointer backtrace walker, one for every arch.
//
// The kernel is built with frame pointers, so each function that calls
// another keeps a frame record: the caller's frame pointer and the return
// address, at fixed offsets from its own frame pointer. The arch says where
// (arch::kFrameSavedFp, arch::kFrameSavedRa in <arch/ops.h>):
//
//   arm64    fp -> [caller's fp][return address]        offsets 0, +8
//   arm      [caller's fp][return address] <- fp        offsets -4, 0
//   riscv64  [caller's fp][return address] <- fp        offsets -16, -8
//
// On arm and riscv64 GCC gives a function that calls nothing a record with
// only the caller's fp, in the return address's place
// (arch::kLeafFramesSaveOnlyFp): the walker tells it by that word being an
// address on the stack above fp, and takes that leaf's return address from
// the trap frame it was interrupted in, if any (arch::trap_frame_ra). Trap
// entry code pushes an ordinary record whose return address is the
// interrupted pc, so walks cross traps; riscv64 also marks it, so that a
// trap frame met mid-walk (arch::trap_frame_at) lends its ra to the leaf
// below it.
//
// The walk stays on this core's kernel stack and overflow stack
// (kstack::find): it may move from the overflow stack to the kernel stack
// once, and within a stack frames grow toward its top. Every word is read
// only inside those bounds, so a corrupt chain ends the walk, never faults.
#pragma once
#include <cstddef>
#include <cstdint>

struct TrapFrame;

namespace backtrace {

// Fills pcs with the return addresses of the frames from fp upward (fp 0:
// the caller's frame). trap: the trap frame fp came from, if any (a leaf's
// return address is in its registers). With repeats, consecutive equal
// return addresses (a recursion) take one slot, counted in repeats[i], so
// the walk reaches past them. Returns how many slots it filled.
size_t walk(uintptr_t fp, const TrapFrame* trap, uintptr_t* pcs, size_t max, unsigned* repeats = nullptr);

// Appends pc as walk's result holds it (n slots filled so far): with
// repeats, a pc equal to the last one counts there instead of taking a slot.
inline void append(uintptr_t* pcs, unsigned* repeats, size_t& n, uintptr_t pc) {
  if (repeats && n && pcs[n - 1] == pc) {
    repeats[n - 1]++;
    return;
  }
  if (repeats) repeats[n] = 1;
  pcs[n++] = pc;
}

}  // namespace backtrace
