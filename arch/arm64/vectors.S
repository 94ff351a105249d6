/* SPDX-License-Identifier: Apache-2.0 */
// AArch64 exception vectors. Every exception saves a full TrapFrame on the
// current stack and calls arm64_trap(frame, kind); the handler may change
// the frame (ELR, x0) before it is restored.
//
// The kernel runs on SP_EL1 and so do its exceptions: a stack overflow
// would fault again while saving its frame. So every vector first checks
// that the frame fits above PerCpu::stack_bottom (kernel/stack.h), with
// TPIDR_EL0 as the scratch register (no user space uses it). If it does
// not fit, the frame goes on the core's overflow stack instead, and
// arm64_trap gets kind | TRAP_OVERFLOW.
//
// TrapFrame layout (struct TrapFrame in trap.h): x0..x30, sp, elr, spsr,
// esr, far: 36 doublewords = 288 bytes.

#include "sysregs.h"

#define FRAME_SIZE 288
#define FRAME_SP (16 * 15 + 8)

.macro VECTOR kind
    .balign 0x80
    msr     tpidr_el0, x0
    mrs     x0, tpidr_el1                       // this core's PerCpu
    ldr     x0, [x0, #PERCPU_STACK_BOTTOM]
    add     x0, x0, #(FRAME_SIZE + 16)          // the frame and trap_common's frame record
    cmp     sp, x0
    b.lo    1f
    mrs     x0, tpidr_el0
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #16 * 0]
    mov     x1, #\kind
    b       trap_common
1:  // No room: build the frame on the overflow stack, x1 as a second scratch.
    mrs     x0, tpidr_el1
    ldr     x0, [x0, #PERCPU_OVERFLOW_TOP]
    sub     x0, x0, #FRAME_SIZE
    str     x1, [x0, #8]                        // x1
    mov     x1, sp
    str     x1, [x0, #FRAME_SP]                 // sp at the exception
    mrs     x1, tpidr_el0
    str     x1, [x0]                            // x0
    mov     sp, x0
    mov     x1, #(\kind | TRAP_OVERFLOW)
    b       trap_common_overflow
.endm

.section .text.vectors, "ax"
.balign 0x800
.global arm64_vectors
arm64_vectors:
    // Current EL with SP_EL0: never used.
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    // Current EL with SP_ELx: the kernel.
    VECTOR TRAP_SYNC
    VECTOR TRAP_IRQ
    VECTOR TRAP_FIQ
    VECTOR TRAP_SERROR
    // Lower EL, AArch64 and AArch32: no user space yet.
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD

.macro SAVE_X2_X29
    stp     x2, x3, [sp, #16 * 1]
    stp     x4, x5, [sp, #16 * 2]
    stp     x6, x7, [sp, #16 * 3]
    stp     x8, x9, [sp, #16 * 4]
    stp     x10, x11, [sp, #16 * 5]
    stp     x12, x13, [sp, #16 * 6]
    stp     x14, x15, [sp, #16 * 7]
    stp     x16, x17, [sp, #16 * 8]
    stp     x18, x19, [sp, #16 * 9]
    stp     x20, x21, [sp, #16 * 10]
    stp     x22, x23, [sp, #16 * 11]
    stp     x24, x25, [sp, #16 * 12]
    stp     x26, x27, [sp, #16 * 13]
    stp     x28, x29, [sp, #16 * 14]
.endm

// x0, x1 saved, x1 = kind.
trap_common:
    SAVE_X2_X29
    add     x2, sp, #FRAME_SIZE
    stp     x30, x2, [sp, #16 * 15]     // lr, sp at the exception
    b       trap_saved

// x0, x1 and sp saved (on the overflow stack), x1 = kind | TRAP_OVERFLOW.
trap_common_overflow:
    SAVE_X2_X29
    str     x30, [sp, #16 * 15]

trap_saved:
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x2, x3, [sp, #16 * 16]
    mrs     x4, esr_el1
    mrs     x5, far_el1
    stp     x4, x5, [sp, #16 * 17]
    stp     x29, x2, [sp, #-16]!        // frame record: backtraces cross the trap
    mov     x29, sp
    add     x0, sp, #16
    bl      arm64_trap
    add     sp, sp, #16

// Not reached from an overflow: kstack::overflow does not return.
trap_return:
    ldp     x0, x1, [sp, #16 * 16]
    msr     elr_el1, x0
    msr     spsr_el1, x1
    ldp     x0, x1, [sp, #16 * 0]
    ldp     x2, x3, [sp, #16 * 1]
    ldp     x4, x5, [sp, #16 * 2]
    ldp     x6, x7, [sp, #16 * 3]
    ldp     x8, x9, [sp, #16 * 4]
    ldp     x10, x11, [sp, #16 * 5]
    ldp     x12, x13, [sp, #16 * 6]
    ldp     x14, x15, [sp, #16 * 7]
    ldp     x16, x17, [sp, #16 * 8]
    ldp     x18, x19, [sp, #16 * 9]
    ldp     x20, x21, [sp, #16 * 10]
    ldp     x22, x23, [sp, #16 * 11]
    ldp     x24, x25, [sp, #16 * 12]
    ldp     x26, x27, [sp, #16 * 13]
    ldp     x28, x29, [sp, #16 * 14]
    ldr     x30, [sp, #16 * 15]
    add     sp, sp, #FRAME_SIZE
    eret

// bool arch::call_with_recovery(void (*fn)(void*), void* arg, RecoveryPoint& rp)
// RecoveryPoint: x19..x30 (reg[0..11]), sp (reg[12]), DAIF (reg[13]).
.section .text, "ax"
.global arch_call_with_recovery
arch_call_with_recovery:
    stp     x19, x20, [x2, #8 * 0]
    stp     x21, x22, [x2, #8 * 2]
    stp     x23, x24, [x2, #8 * 4]
    stp     x25, x26, [x2, #8 * 6]
    stp     x27, x28, [x2, #8 * 8]
    stp     x29, x30, [x2, #8 * 10]
    mov     x3, sp
    mrs     x4, daif
    stp     x3, x4, [x2, #8 * 12]
    stp     x29, x30, [sp, #-16]!       // frame record: backtraces from fn reach the caller
    mov     x29, sp
    mov     x16, x0
    mov     x0, x1
    blr     x16
    ldp     x29, x30, [sp], #16
    mov     x0, #1
    ret

// [[noreturn]] void arch::resume_recovery(RecoveryPoint& rp): returns false
// from the arch_call_with_recovery that filled rp. From a trap handler, on
// any stack: ELR/SPSR are left alone (no eret), DAIF comes from rp.
.global arch_resume_recovery
arch_resume_recovery:
    ldp     x19, x20, [x0, #8 * 0]
    ldp     x21, x22, [x0, #8 * 2]
    ldp     x23, x24, [x0, #8 * 4]
    ldp     x25, x26, [x0, #8 * 6]
    ldp     x27, x28, [x0, #8 * 8]
    ldp     x29, x30, [x0, #8 * 10]
    ldp     x3, x4, [x0, #8 * 12]
    mov     sp, x3
    clrex                               // as an eret would: no exclusive spans the jump
    msr     daif, x4
    mov     x0, #0
    ret

// bool arch::probe_write(uintptr_t addr, uint32_t value)
// Returns false when the store succeeds; when it faults, the trap handler
// finds probe_write_insn in __extable and resumes at probe_write_fixup.
.global _ZN4arch11probe_writeEmj
_ZN4arch11probe_writeEmj:
probe_write_insn:
    str     w1, [x0]
    mov     x0, #0
    ret
probe_write_fixup:
    mov     x0, #1
    ret

// uintptr_t arch_semihost(uintptr_t op, uintptr_t arg)
// A semihosting call (`hlt #0xf000`). Without a debugger or QEMU's
// -semihosting the instruction is UNDEFINED (a real board): the trap
// handler finds it in __extable and resumes at the fixup, which returns -1.
.global arch_semihost
arch_semihost:
semihost_insn:
    hlt     #0xf000
    ret
semihost_fixup:
    mov     x0, #-1
    ret

.section __extable, "a"
    .quad   probe_write_insn, probe_write_fixup
    .quad   semihost_insn, semihost_fixup
