// SPDX-License-Identifier: Apache-2.0
// Backtraces of ARMv7-A built in Thumb-2 (MAGPIE_ARM_ISA=thumb): what the
// EHABI walk (ehabi.cpp, arch::unwind) needs of the exception entry.
// vectors.S's trap path (ARM state, no tables) calls arm_trap with the
// word at its sp holding the trap frame's address: a return to
// trap_called is a trap, and the walk goes on from that frame's registers.
#include <kernel/arch.h>
#include "ehabi.h"
#include "trap.h"

extern "C" char trap_called[];

void ehabi::from_trap(Regs& s, const TrapFrame* t) {
  for (unsigned i = 0; i < 13; i++) s.r[i] = t->r[i];
  s.r[13] = t->sp;
  s.r[14] = t->lr;
  s.r[15] = t->pc;
}

bool ehabi::enter_trap(Regs& s) {
  if ((s.r[15] & ~uintptr_t{1}) != reinterpret_cast<uintptr_t>(trap_called)) return false;
  uintptr_t sp = s.r[13];
  if (sp < s.lo || sp + 4 > s.hi || (sp & 3)) return false;
  uintptr_t frame = *reinterpret_cast<const uintptr_t*>(sp);
  // The frame lies above the word that names it, on the same stack.
  if (frame < sp || frame + sizeof(TrapFrame) > s.hi || (frame & 3)) return false;
  from_trap(s, reinterpret_cast<const TrapFrame*>(frame));
  return true;
}
