/* SPDX-License-Identifier: Apache-2.0 */
// ARMv7-M entry: the vector table, reset, and the one exception entry.
//
// There is no bootloader. At reset the core loads SP from word 0 of the
// vector table and jumps to word 1; the table sits at the image's start,
// LOAD_ADDR = 0 (SSRAM1 on the MPS2, flash on a microcontroller).
//
// Reset (the only core):
//   1. copy .data from its load address in the image to its place in RAM
//      (DATA_ADDR), clear .bss, and paint the stacks (no MMU, so no guard
//      page: how deep a stack went is read from the paint, arch.cpp);
//   2. stack alignment on exception entry (CCR.STKALIGN), the vector table
//      base (VTOR), separate MemManage, BusFault and UsageFault handlers;
//   3. call kernel_main(embedded DTB, hwid 0) on slot 0's kernel stack.
//
// Every exception but reset enters exception_entry, on the main stack the
// kernel runs on (Thread mode uses MSP too). The core has pushed
// {r0-r3, r12, lr, pc, xPSR}; the entry pushes {r3 (padding), r4-r11,
// EXC_RETURN} below it, which makes a TrapFrame (trap.h), and calls
// armv7m_trap(frame). The handler may change the frame's pc and r0 before
// the exception return restores them.

#include <kernel/stack_layout.h>

.syntax unified
.thumb

.section .vectors, "a"
.balign 128
.global armv7m_vectors
armv7m_vectors:
    .word   g_kernel_stacks + KSTACK_SLOT_SIZE  // slot 0's kernel stack top
    .word   reset_entry
    .rept   14                                  // NMI .. SysTick
    .word   exception_entry
    .endr
    .rept   ARMV7M_EXTERNAL_IRQS                // the NVIC's external interrupts
    .word   exception_entry
    .endr

.section .text.boot, "ax"
.global _start
.type _start, %function
.thumb_func
_start:
.type reset_entry, %function
.thumb_func
reset_entry:
    cpsid   i
    ldr     r0, =__data_start
    ldr     r1, =__data_end
    ldr     r2, =__data_load
1:  cmp     r0, r1
    bhs     2f
    ldr     r3, [r2], #4
    str     r3, [r0], #4
    b       1b
2:  ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    movs    r2, #0
3:  cmp     r0, r1
    bhs     4f
    str     r2, [r0], #4
    b       3b
4:  ldr     r0, =__kstacks_start                // paint the stacks (arch.cpp: stack_use)
    ldr     r1, =__kstacks_end
    ldr     r2, =0x5354414b                   // "KATS"
5:  cmp     r0, r1
    bhs     6f
    str     r2, [r0], #4
    b       5b
6:  ldr     r0, =0xe000ed14                 // CCR
    ldr     r1, [r0]
    orr     r1, r1, #(1 << 9)               // STKALIGN: 8-byte aligned frames
    str     r1, [r0]
    ldr     r0, =0xe000ed08                 // VTOR
    ldr     r1, =armv7m_vectors
    str     r1, [r0]
    ldr     r0, =0xe000ed24                 // SHCSR
    ldr     r1, [r0]
    orr     r1, r1, #(7 << 16)              // MEMFAULTENA, BUSFAULTENA, USGFAULTENA
    str     r1, [r0]
    dsb
    isb
    ldr     r0, =g_kernel_stacks + KSTACK_SLOT_SIZE
    mov     sp, r0
    movs    r7, #0
    ldr     r0, =g_board_dtb
    movs    r1, #0
    bl      kernel_main
7:  wfi
    b       7b
.ltorg

.section .text, "ax"
.global exception_entry
.type exception_entry, %function
.thumb_func
exception_entry:
    push    {r3-r11, lr}                    // 40 bytes: the frame stays 8-byte aligned
    mov     r0, sp
    bl      armv7m_trap
    pop     {r3-r11, lr}
    bx      lr                              // EXC_RETURN
.global exception_entry_end
exception_entry_end:
.size exception_entry, . - exception_entry

// uintptr_t arch_semihost(uintptr_t op, uintptr_t arg): a semihosting call (r0 = op,
// r1 = arg, result in r0). With no debugger to take it, the bkpt is a
// HardFault that armv7m_trap answers with -1.
.global arch_semihost
.type arch_semihost, %function
.thumb_func
arch_semihost:
    bkpt    0xab
    bx      lr
.size arch_semihost, . - arch_semihost

// bool arch::call_with_recovery(void (*fn)(void*), void* arg, RecoveryPoint& rp)
// RecoveryPoint: r4..r11 (reg[0..7]), sp, lr, PRIMASK (reg[8..10]).
.global arch_call_with_recovery
.type arch_call_with_recovery, %function
.thumb_func
arch_call_with_recovery:
    stmia   r2!, {r4-r11}
    mov     r3, sp
    str     r3, [r2], #4
    str     lr, [r2], #4
    mrs     r3, primask
    str     r3, [r2]
    push    {r7, lr}
    mov     r3, r0
    mov     r0, r1
    blx     r3
    movs    r0, #1
    pop     {r7, pc}
.size arch_call_with_recovery, . - arch_call_with_recovery

// [[noreturn]] void arch::resume_recovery(RecoveryPoint& rp), from Thread
// mode (arch.cpp makes a trap handler return into it).
.global arch_resume_recovery
.type arch_resume_recovery, %function
.thumb_func
arch_resume_recovery:
    ldmia   r0!, {r4-r11}
    ldr     r1, [r0], #4
    mov     sp, r1
    ldr     lr, [r0], #4
    ldr     r1, [r0]
    clrex
    msr     primask, r1
    movs    r0, #0
    bx      lr
.size arch_resume_recovery, . - arch_resume_recovery

// bool arch::probe_write(uintptr_t addr, uint32_t value): false when the
// store succeeds; a BusFault on it resumes at probe_write_fixup (__extable).
.global _ZN4arch11probe_writeEjm
.type _ZN4arch11probe_writeEjm, %function
.thumb_func
_ZN4arch11probe_writeEjm:
probe_write_insn:
    str     r1, [r0]
    dsb                                     // an imprecise fault is taken here at the latest
    movs    r0, #0
    bx      lr
probe_write_fixup:
    movs    r0, #1
    bx      lr
.size _ZN4arch11probe_writeEjm, . - _ZN4arch11probe_writeEjm

.section __extable, "a"
    .long   probe_write_insn, probe_write_fixup
