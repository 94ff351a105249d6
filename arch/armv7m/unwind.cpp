// SPDX-License-Identifier: Apache-2.0
// Backtraces on ARMv7-M: what the EHABI walk (arch/arm/ehabi.cpp,
// arch::unwind) needs of the exception entry. A return into
// exception_entry (start.S) is a trap: the trap frame is at its sp.
#include <kernel/arch.h>
#include "../arm/ehabi.h"
#include "trap.h"

extern "C" char exception_entry[];
extern "C" char exception_entry_end[];

void ehabi::from_trap(Regs& s, const TrapFrame* t) {
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

bool ehabi::enter_trap(Regs& s) {
  uintptr_t p = s.r[15] & ~uintptr_t{1};
  if (p <= reinterpret_cast<uintptr_t>(exception_entry) || p > reinterpret_cast<uintptr_t>(exception_entry_end))
    return false;
  if (s.r[13] < s.lo || s.r[13] + sizeof(TrapFrame) > s.hi) return false;
  from_trap(s, reinterpret_cast<const TrapFrame*>(s.r[13]));
  return true;
}
