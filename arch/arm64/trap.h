// SPDX-License-Identifier: Apache-2.0
// The AArch64 trap frame, as vectors.S saves it.
#pragma once
#include <cstdint>

struct TrapFrame {
  uint64_t x[31];  // x0..x30 (x29 = fp, x30 = lr)
  uint64_t sp;
  uint64_t elr;
  uint64_t spsr;
  uint64_t esr;
  uint64_t far;
};
static_assert(sizeof(TrapFrame) == 288);
