// SPDX-License-Identifier: Apache-2.0
// ARMv7-A system register values shared by assembly and C++.
#pragma once

// CPSR mode and mask bits.
#define PSR_MODE_MASK 0x1f
#define PSR_MODE_SVC 0x13
#define PSR_MODE_HYP 0x1a
#define PSR_MODE_FIQ 0x11
#define PSR_MODE_IRQ 0x12
#define PSR_MODE_ABT 0x17
#define PSR_MODE_UND 0x1b
#define PSR_F (1 << 6)
#define PSR_I (1 << 7)
#define PSR_A (1 << 8)
#define PSR_T (1 << 5)
// ITSTATE: IT[1:0] in bits 26:25, IT[7:2] in bits 15:10.
#define PSR_IT_MASK ((3 << 25) | (0x3f << 10))

// SCTLR: what the kernel sets and what it clears when turning the MMU on.
#define SCTLR_M (1 << 0)     // MMU
#define SCTLR_A (1 << 1)     // alignment checks (off: -mno-unaligned-access does it)
#define SCTLR_C (1 << 2)     // data and unified caches
#define SCTLR_Z (1 << 11)    // branch prediction
#define SCTLR_I (1 << 12)    // instruction cache
#define SCTLR_V (1 << 13)    // high vectors (off: VBAR is used)
#define SCTLR_TRE (1 << 28)  // TEX remap (off: TEX/C/B encode the memory type)
#define SCTLR_AFE (1 << 29)  // access flag (off: AP[0] is a permission bit)
#define SCTLR_TE (1 << 30)   // exceptions in Thumb state (off)
#define SCTLR_EE (1 << 25)   // big-endian exceptions (off)
#define SCTLR_SET (SCTLR_M | SCTLR_C | SCTLR_Z | SCTLR_I)
#define SCTLR_CLEAR (SCTLR_A | SCTLR_V | SCTLR_TRE | SCTLR_AFE | SCTLR_TE | SCTLR_EE)

// ACTLR.SMP: Cortex-A9/A15 take part in coherency only with it set.
#define ACTLR_SMP (1 << 6)

// TTBR0 walk attributes (multiprocessing extensions): inner and outer
// write-back write-allocate, shareable, inner shareable.
#define TTBR_FLAGS ((1 << 6) | (1 << 5) | (1 << 3) | (1 << 1))

// DACR: all 16 domains "client" (permissions come from the descriptors).
#define DACR_CLIENT 0x55555555

// Offsets in struct PerCpu (checked by static_asserts in arch.cpp).
#define PERCPU_INDEX 0
#define PERCPU_STACK_TOP 16
#define PERCPU_STACK_BOTTOM 88
#define PERCPU_OVERFLOW_TOP 92

// Exception kinds passed to arm_trap.
#define TRAP_RESET 0
#define TRAP_UNDEF 1
#define TRAP_SVC 2
#define TRAP_PABT 3
#define TRAP_DABT 4
#define TRAP_HYP 5
#define TRAP_IRQ 6
#define TRAP_FIQ 7
#define TRAP_OVERFLOW 0x100  // or'ed in: the frame is on the overflow stack (kernel/stack.h)

// The save area an exception mode's banked sp points at (struct ModeSave
// in arch.cpp): what its stub keeps until it is in SVC mode.
#define MODE_SAVE_R0 0
#define MODE_SAVE_R1 4
#define MODE_SAVE_R2 8
#define MODE_SAVE_PC 12
#define MODE_SAVE_CPSR 16
#define MODE_SAVE_SP 20
#define MODE_SAVE_SIZE 24

// TrapFrame layout (struct TrapFrame in trap.h).
#define TF_SP 52
#define TF_LR 56
#define TF_FSR 60
#define TF_FAR 64
#define TF_KIND 68
#define TF_PC 72
#define TF_CPSR 76
#define TF_SIZE 80
