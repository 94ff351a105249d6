// ARMv7-A exception vectors (VBAR). Every exception is handled in SVC mode,
// the mode the kernel runs in: the stub stores the return address and SPSR
// on the SVC stack with srsdb, switches to SVC, saves a full TrapFrame and
// calls arm_trap(frame, kind). The handler may change the frame (pc, r0)
// before rfe resumes it. IRQ, FIQ, abort and undefined modes need no stacks.
//
// TrapFrame layout (struct TrapFrame in trap.h, offsets in sysregs.h):
// r0..r12, sp, lr, fsr, far, kind, pc, cpsr: 20 words = 80 bytes. Its end
// is the SVC stack pointer at the exception.

#include "sysregs.h"

.syntax unified
.arm

// adjust: what to subtract from the exception mode's lr to get the
// interrupted (IRQ, FIQ) or faulting (aborts) instruction.
.macro STUB name, adjust, kind
\name:
    .if \adjust
    sub     lr, lr, #\adjust
    .endif
    srsdb   sp!, #PSR_MODE_SVC          // {pc, cpsr} onto the SVC stack
    cps     #PSR_MODE_SVC
    sub     sp, sp, #(TF_SIZE - 8)
    stmia   sp, {r0-r12}
    mov     r0, #\kind
    b       trap_common
.endm

.section .text.vectors, "ax"
.balign 32
.global arm_vectors
arm_vectors:
    b       reset_entry
    b       undef_entry
    b       svc_entry
    b       pabt_entry
    b       dabt_entry
    b       hyp_entry
    b       irq_entry
    b       fiq_entry

    STUB    reset_entry, 0, TRAP_RESET
    STUB    undef_entry, 0, TRAP_UNDEF  // arm_trap finds the instruction (ARM or Thumb)
    STUB    svc_entry, 0, TRAP_SVC      // pc = the instruction after the svc
    STUB    pabt_entry, 4, TRAP_PABT
    STUB    dabt_entry, 8, TRAP_DABT
    STUB    hyp_entry, 0, TRAP_HYP
    STUB    irq_entry, 4, TRAP_IRQ
    STUB    fiq_entry, 4, TRAP_FIQ

// r0 = kind; r0-r12, pc, cpsr saved.
trap_common:
    add     r1, sp, #TF_SIZE
    str     r1, [sp, #TF_SP]            // sp at the exception
    str     lr, [sp, #TF_LR]            // lr_svc at the exception
    str     r0, [sp, #TF_KIND]
    mov     r1, #0
    mov     r2, #0
    cmp     r0, #TRAP_DABT
    mrceq   p15, 0, r1, c5, c0, 0       // DFSR
    mrceq   p15, 0, r2, c6, c0, 0       // DFAR
    cmp     r0, #TRAP_PABT
    mrceq   p15, 0, r1, c5, c0, 1       // IFSR
    mrceq   p15, 0, r2, c6, c0, 2       // IFAR
    str     r1, [sp, #TF_FSR]
    str     r2, [sp, #TF_FAR]
    mov     r4, sp                      // the frame; r4 survives the call
    bic     sp, sp, #7                  // AAPCS: 8-byte aligned stack at calls
    mov     r2, fp
    ldr     r3, [r4, #TF_PC]
    push    {r2, r3}                    // frame record {fp, pc}: backtraces cross the trap
    add     fp, sp, #4
    mov     r1, r0
    mov     r0, r4
    bl      arm_trap
    mov     sp, r4

trap_return:
    clrex                               // an ldrex/strex pair must not span a trap
    ldr     lr, [sp, #TF_LR]
    ldmia   sp, {r0-r12}
    add     sp, sp, #TF_PC
    rfeia   sp!                         // pc, cpsr; sp back where it was

// bool arch::probe_write(uintptr_t addr, uint32_t value)
// Returns false when the store succeeds; when it faults, the trap handler
// finds probe_write_insn in __extable and resumes at probe_write_fixup.
.section .text, "ax"
.global _ZN4arch11probe_writeEjm
.type _ZN4arch11probe_writeEjm, %function
_ZN4arch11probe_writeEjm:
probe_write_insn:
    str     r1, [r0]
    mov     r0, #0
    bx      lr
probe_write_fixup:
    mov     r0, #1
    bx      lr
.size _ZN4arch11probe_writeEjm, . - _ZN4arch11probe_writeEjm

.section __extable, "a"
    .long   probe_write_insn, probe_write_fixup
