// SPDX-License-Identifier: Apache-2.0
// RISC-V privileged-architecture constants shared by assembly and C++.
#pragma once

// sstatus
#define SSTATUS_SIE (1 << 1)
#define SSTATUS_SPIE (1 << 5)
#define SSTATUS_SPP (1 << 8)

// sie / sip bits: supervisor software (IPI), timer, external interrupts.
#define SIE_SSIE (1 << 1)
#define SIE_STIE (1 << 5)
#define SIE_SEIE (1 << 9)

// scause: the top bit marks an interrupt; the rest is the code.
#define IRQ_S_SOFT 1
#define IRQ_S_TIMER 5
#define IRQ_S_EXT 9

// satp: Sv39 (mode 8) in bits 63..60, root table PPN in bits 43..0.
#define SATP_MODE_SV39 8
#define SATP_MODE_SHIFT 60

// Offsets in struct PerCpu (checked by static_asserts in arch.cpp).
#define PERCPU_HWID 8
#define PERCPU_STACK_TOP 16
#define PERCPU_ARCH_SCRATCH 96
#define PERCPU_STACK_BOTTOM 136
#define PERCPU_OVERFLOW_TOP 144

// TrapFrame layout (struct TrapFrame in trap.h): x0..x31 (x0 unused), then
// sepc, sstatus, scause, stval: 36 doublewords.
#define TF_SEPC (32 * 8)
#define TF_SSTATUS (33 * 8)
#define TF_SCAUSE (34 * 8)
#define TF_STVAL (35 * 8)
#define TF_SIZE (36 * 8)

// Below each TrapFrame the entry code pushes a frame record (previous fp,
// return address = sepc) so backtraces cross the trap, and a marker that
// tells the backtrace walker a TrapFrame sits right above the record.
#define TRAP_RECORD_SIZE 32
#define TRAP_MARKER 0x5452415046524d21  // "TRAPFRM!"
