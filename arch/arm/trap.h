// SPDX-License-Identifier: Apache-2.0
// The ARMv7-A trap frame, as vectors.S saves it. Every exception is handled
// in SVC mode on the stack of the interrupted code (the kernel runs in SVC).
#pragma once
#include <cstddef>
#include <cstdint>
#include "sysregs.h"

struct TrapFrame {
  uint32_t r[13];  // r0..r12 (the frame pointer: r11 in ARM state, r7 in Thumb-2)
  uint32_t sp;     // sp_svc at the exception
  uint32_t lr;     // lr_svc at the exception
  uint32_t fsr;    // DFSR or IFSR (aborts), else 0
  uint32_t far;    // DFAR or IFAR (aborts), else 0
  uint32_t kind;   // TRAP_*
  uint32_t pc;     // the interrupted or faulting instruction; where to resume
  uint32_t cpsr;   // CPSR to resume with (the exception mode's SPSR)
};
static_assert(offsetof(TrapFrame, sp) == TF_SP);
static_assert(offsetof(TrapFrame, lr) == TF_LR);
static_assert(offsetof(TrapFrame, fsr) == TF_FSR);
static_assert(offsetof(TrapFrame, far) == TF_FAR);
static_assert(offsetof(TrapFrame, kind) == TF_KIND);
static_assert(offsetof(TrapFrame, pc) == TF_PC);
static_assert(offsetof(TrapFrame, cpsr) == TF_CPSR);
static_assert(sizeof(TrapFrame) == TF_SIZE);
