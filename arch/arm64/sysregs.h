// SPDX-License-Identifier: Apache-2.0
// AArch64 system register values shared by assembly and C++.
#pragma once

#define HCR_EL2_RW (1 << 31)
#define SCTLR_EL1_RES1 0x30d00800
#define SCTLR_M (1 << 0)
#define SCTLR_C (1 << 2)
#define SCTLR_SA (1 << 3)
#define SCTLR_I (1 << 12)

// MAIR: attr0 normal write-back RW-allocate, attr1 Device-nGnRE.
#define MAIR_VALUE 0x04ff
#define MAIR_IDX_NORMAL 0
#define MAIR_IDX_DEVICE 1

// TCR: 39-bit VA from TTBR0 (T0SZ 25, walks start at level 1), 4K granule,
// inner-shareable write-back walks; TTBR1 walks disabled (EPD1).
#define TCR_T0SZ 25
#define TCR_VALUE ((TCR_T0SZ) | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23))

// Offsets in struct PerCpu (checked by static_asserts in arch.cpp).
#define PERCPU_INDEX 0
#define PERCPU_STACK_TOP 16
#define PERCPU_STACK_BOTTOM 136
#define PERCPU_OVERFLOW_TOP 144

// Exception kinds passed to arm64_trap.
#define TRAP_SYNC 0
#define TRAP_IRQ 1
#define TRAP_FIQ 2
#define TRAP_SERROR 3
#define TRAP_BAD 4           // from SP_EL0 or a lower EL: never expected
#define TRAP_OVERFLOW 0x100  // or'ed in: the frame is on the overflow stack (kernel/stack.h)
