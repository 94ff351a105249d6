/* SPDX-License-Identifier: Apache-2.0 */
// ARMv7-A exception vectors (VBAR). Every exception is handled in SVC mode,
// the mode the kernel runs in, on the stack of the interrupted code: the
// stub saves a full TrapFrame there and calls arm_trap(frame, kind). The
// handler may change the frame (pc, r0) before rfe resumes it.
//
// Aborts, undefined instructions, IRQs and FIQs arrive in modes of their
// own. Their stub keeps r0-r2, the return address and the SPSR in a small
// per-CPU save area that the mode's banked sp points at (arch.cpp,
// set_mode_stacks), then switches to SVC mode and checks that the frame
// fits above PerCpu::stack_bottom (kernel/stack.h) before it stores
// anything on the SVC stack: a stack that ran into its guard page would
// fault again while saving the frame. If it does not fit, the frame goes
// on the core's overflow stack and arm_trap gets kind | TRAP_OVERFLOW.
// SVC exceptions are taken in SVC mode itself (the kernel's own svc, for
// semihosting): their stub pushes the return state with srsdb, as do the
// reset and HYP vectors, which a kernel in SVC mode never takes.
//
// TrapFrame layout (struct TrapFrame in trap.h, offsets in sysregs.h):
// r0..r12, sp, lr, fsr, far, kind, pc, cpsr: 20 words = 80 bytes. Its end
// is the SVC stack pointer at the exception (overflow: see above).

#include "sysregs.h"

// C++ in Thumb-2 (arch/arm/CMakeLists.txt): backtraces walk the unwind
// tables (ehabi.cpp), so the functions here that C++ calls carry entries of
// their own, which describe them in ARM state as well as GCC's describe
// Thumb code. (ARM state's walk follows frame records: no tables.)
#if defined(__thumb__)
#define UNWIND(...) __VA_ARGS__
#else
#define UNWIND(...)
#endif

.syntax unified
.arm

// A stub for an exception taken in its own mode. adjust: what to subtract
// from the mode's lr to get the interrupted (IRQ, FIQ) or faulting (aborts)
// instruction.
.macro STUB name, adjust, kind
\name:
    .if \adjust
    sub     lr, lr, #\adjust
    .endif
    stmia   sp, {r0-r2, lr}             // save area: r0, r1, r2, pc
    mrs     r0, spsr
    str     r0, [sp, #MODE_SAVE_CPSR]
    mov     r0, sp
    mov     r1, #\kind
    b       trap_svc
.endm

// A stub for an exception taken in SVC mode, or never: the return state
// goes straight onto the SVC stack.
.macro STUB_SRS name, kind
\name:
    srsdb   sp!, #PSR_MODE_SVC          // {pc, cpsr} onto the SVC stack
    cps     #PSR_MODE_SVC
    sub     sp, sp, #(TF_SIZE - 8)
    stmia   sp, {r0-r12}
    add     r1, sp, #TF_SIZE
    str     r1, [sp, #TF_SP]            // sp at the exception
    str     lr, [sp, #TF_LR]            // lr_svc at the exception
    mov     r0, #\kind
    b       trap_saved
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

    STUB_SRS reset_entry, TRAP_RESET
    STUB    undef_entry, 0, TRAP_UNDEF  // arm_trap finds the instruction (ARM or Thumb)
    STUB_SRS svc_entry, TRAP_SVC        // pc = the instruction after the svc
    STUB    pabt_entry, 4, TRAP_PABT
    STUB    dabt_entry, 8, TRAP_DABT
    STUB_SRS hyp_entry, TRAP_HYP
    STUB    irq_entry, 4, TRAP_IRQ
    STUB    fiq_entry, 4, TRAP_FIQ

// r0 = the exception mode's save area {r0, r1, r2, pc, cpsr, sp}, r1 = kind;
// still in the exception mode, interrupts masked.
trap_svc:
    cps     #PSR_MODE_SVC               // sp, lr: the interrupted code's
    str     sp, [r0, #MODE_SAVE_SP]     // sp at the exception
    mrc     p15, 0, r2, c13, c0, 4      // this core's PerCpu
    ldr     r2, [r2, #PERCPU_STACK_BOTTOM]
    add     r2, r2, #(TF_SIZE + 8)      // the frame and the 8 bytes trap_saved pushes
    cmp     sp, r2
    bhs     1f
    mrc     p15, 0, r2, c13, c0, 4      // no room: the overflow stack
    ldr     r2, [r2, #PERCPU_OVERFLOW_TOP]
    mov     sp, r2
    orr     r1, r1, #TRAP_OVERFLOW
1:  sub     sp, sp, #TF_SIZE
    add     r2, sp, #12
    stmia   r2, {r3-r12}                // r3..r12
    str     lr, [sp, #TF_LR]            // lr_svc at the exception
    ldr     r2, [r0, #MODE_SAVE_R0]
    str     r2, [sp, #0]
    ldr     r2, [r0, #MODE_SAVE_R1]
    str     r2, [sp, #4]
    ldr     r2, [r0, #MODE_SAVE_R2]
    str     r2, [sp, #8]
    ldr     r2, [r0, #MODE_SAVE_PC]
    str     r2, [sp, #TF_PC]
    ldr     r2, [r0, #MODE_SAVE_CPSR]
    str     r2, [sp, #TF_CPSR]
    ldr     r2, [r0, #MODE_SAVE_SP]
    str     r2, [sp, #TF_SP]
    mov     r0, r1

// r0 = kind (| TRAP_OVERFLOW); the frame at sp has all but kind, fsr, far.
trap_saved:
    bic     r1, r0, #TRAP_OVERFLOW
    str     r1, [sp, #TF_KIND]
    mov     r2, #0
    mov     r3, #0
    cmp     r1, #TRAP_DABT
    mrceq   p15, 0, r2, c5, c0, 0       // DFSR
    mrceq   p15, 0, r3, c6, c0, 0       // DFAR
    cmp     r1, #TRAP_PABT
    mrceq   p15, 0, r2, c5, c0, 1       // IFSR
    mrceq   p15, 0, r3, c6, c0, 2       // IFAR
    str     r2, [sp, #TF_FSR]
    str     r3, [sp, #TF_FAR]
    mov     r4, sp                      // the frame; r4 survives the call
    bic     sp, sp, #7                  // AAPCS: 8-byte aligned stack at calls
#if defined(__thumb__)
    // C++ in Thumb-2: backtraces unwind with the tables (ehabi.cpp), which
    // do not describe this code; the unwinder (unwind.cpp) knows the return
    // address trap_called and finds the trap frame in the word at its sp.
    mov     r2, r4
#else
    mov     r2, fp                      // frame record {fp, pc}: backtraces cross the trap
#endif
    ldr     r3, [r4, #TF_PC]
    push    {r2, r3}
#if !defined(__thumb__)
    add     fp, sp, #4
#endif
    mov     r1, r0
    mov     r0, r4
    bl      arm_trap
.global trap_called
trap_called:
    mov     sp, r4

// Not reached from an overflow: kstack::overflow does not return.
trap_return:
    clrex                               // an ldrex/strex pair must not span a trap
    ldr     lr, [sp, #TF_LR]
    ldmia   sp, {r0-r12}
    add     sp, sp, #TF_PC
    rfeia   sp!                         // pc, cpsr; sp back where it was

// bool arch::call_with_recovery(void (*fn)(void*), void* arg, RecoveryPoint& rp)
// RecoveryPoint: r4..r11 (reg[0..7]), sp, lr, cpsr (reg[8..10]).
.section .text, "ax"
.global arch_call_with_recovery
.type arch_call_with_recovery, %function
arch_call_with_recovery:
UNWIND(.fnstart)
    stmia   r2, {r4-r11}
    str     sp, [r2, #32]
    str     lr, [r2, #36]
    mrs     r3, cpsr
    str     r3, [r2, #40]
    push    {fp, lr}                    // frame record: backtraces from fn reach the caller
UNWIND(.save {fp, lr})                  // and the tables say so
    add     fp, sp, #4
    mov     r3, r0
    mov     r0, r1
    blx     r3
    mov     r0, #1
    pop     {fp, pc}
UNWIND(.fnend)
.size arch_call_with_recovery, . - arch_call_with_recovery

// [[noreturn]] void arch::resume_recovery(RecoveryPoint& rp): returns false
// from the arch_call_with_recovery that filled rp. From a trap handler (in
// SVC mode, like the caller), on any stack: the interrupt masks come from
// rp.
.global arch_resume_recovery
.type arch_resume_recovery, %function
arch_resume_recovery:
    ldmia   r0, {r4-r11}
    ldr     r1, [r0, #32]
    mov     sp, r1
    ldr     lr, [r0, #36]
    ldr     r1, [r0, #40]
    clrex                               // no exclusive spans the jump
    msr     cpsr_c, r1
    mov     r0, #0
    bx      lr
.size arch_resume_recovery, . - arch_resume_recovery

// bool arch::probe_write(uintptr_t addr, uint32_t value)
// Returns false when the store succeeds; when it faults, the trap handler
// finds probe_write_insn in __extable and resumes at probe_write_fixup.
.global _ZN4arch11probe_writeEjm
.type _ZN4arch11probe_writeEjm, %function
_ZN4arch11probe_writeEjm:
UNWIND(.fnstart)                        // a leaf: its caller is lr
probe_write_insn:
    str     r1, [r0]
    mov     r0, #0
    bx      lr
probe_write_fixup:
    mov     r0, #1
    bx      lr
UNWIND(.fnend)
.size _ZN4arch11probe_writeEjm, . - _ZN4arch11probe_writeEjm

.section __extable, "a"
    .long   probe_write_insn, probe_write_fixup
