// SPDX-License-Identifier: Apache-2.0
// The RISC-V trap frame, as trap.S saves it (layout constants in csr.h).
#pragma once
#include <cstdint>
#include "csr.h"

struct TrapFrame {
  uint64_t x[32];  // x[0] unused; x[1] = ra, x[2] = sp at the trap, x[8] = s0/fp
  uint64_t sepc;
  uint64_t sstatus;
  uint64_t scause;
  uint64_t stval;
};
static_assert(sizeof(TrapFrame) == TF_SIZE);
static_assert(__builtin_offsetof(TrapFrame, sepc) == TF_SEPC);
static_assert(__builtin_offsetof(TrapFrame, stval) == TF_STVAL);
