// SPDX-License-Identifier: Apache-2.0
// Backtraces of Thumb code from the ARM EHABI unwind tables (.ARM.exidx,
// .ARM.extab): ARMv7-A built in Thumb-2 (arch/arm) and ARMv7-M
// (arch/armv7m) share the walk in ehabi.cpp; each arch says how the walk
// crosses its exception entry.
#pragma once
#include <cstddef>
#include <cstdint>

struct TrapFrame;

namespace ehabi {

// Virtual registers r0-r15 and the stack [lo, hi) the walk must stay on.
struct Regs {
  uintptr_t r[16];
  uintptr_t lo, hi;
  bool pc_set;
};

// The walk itself is arch::unwind (kernel/arch.h), in ehabi.cpp. What each
// arch's unwind.cpp gives it of its exception entry:
// - from_trap: the registers a trap frame holds, into s.r.
// - enter_trap: whether s.r[15], a return address, is the one the entry's
//   call into the C trap handler leaves; if so, s becomes the trapped
//   registers (pc the trapped instruction) and it returns true. Reads only
//   [s.lo, s.hi).
void from_trap(Regs& s, const TrapFrame* t);
bool enter_trap(Regs& s);

}  // namespace ehabi
