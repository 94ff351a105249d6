// ARMv7-A entry: the Linux ARM boot protocol.
//
// The bootloader (QEMU, U-Boot bootz) loads this raw image at its link
// address and jumps to its first byte in SVC (or HYP) mode with the MMU and
// data cache off, r0 = 0, r1 = machine type, r2 = physical address of the
// DTB.
//
// Primary core:
//   1. drop from HYP to SVC if needed; mask interrupts;
//   2. invalidate the cache lines over the boot stack and page-table pool
//      (written with the MMU off, they must not meet stale lines later);
//   3. build the page tables in C++ with the MMU off (arm_early_mmu);
//   4. turn on the MMU and caches, then clear .bss with caches on;
//   5. call kernel_main(dtb, mpidr affinity).
// Secondary cores enter at secondary_entry (PSCI CPU_ON) with r0 = their
// PerCpu; they turn the MMU on with the same tables before touching memory.
//
// Exceptions are handled in SVC mode (vectors.S); the other modes' banked
// sp point at small per-CPU save areas (arch.cpp, set_mode_stacks).

#include <kernel/stack_layout.h>
#include "sysregs.h"

.syntax unified
.arm
.arch_extension virt
.arch_extension sec

.section .text.boot, "ax"
.global _start
_start:
    // zImage header (what U-Boot's bootz checks): eight no-ops, a branch,
    // then the magic at offset 0x24.
    .rept 8
    mov     r0, r0
    .endr
    b       primary_entry
    .word   0x016f2818                  // zImage magic
    .word   _start                      // load and run address
    .word   __data_end                  // end of the loaded image
    .word   0x04030201                  // little endian

primary_entry:
    mov     r8, r2                      // DTB
    bl      enter_svc
    mrc     p15, 0, r9, c0, c0, 5       // MPIDR

    // Invalidate [__noinit_start, __noinit_end): boot stack and page tables.
    ldr     r0, =__noinit_start
    ldr     r1, =__noinit_end
    bl      dcache_invalidate_range

    ldr     sp, =(g_kernel_stacks + KSTACK_SLOT_SIZE)   // slot 0's kernel stack (kernel/stack_layout.h)
    mov     fp, #0
    mov     r0, r8
    bl      arm_early_mmu               // builds the tables, MMU still off
    bl      enable_mmu

    // .bss is cleared with the caches on so no stale line can survive.
    ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    mov     r2, #0
    mov     r3, #0
1:  cmp     r0, r1
    strdlo  r2, r3, [r0], #8
    blo     1b

    mov     r0, r8
    bic     r1, r9, #0xff000000         // MPIDR affinity fields
    bl      kernel_main
2:  wfe
    b       2b

.global secondary_entry
secondary_entry:
    mov     r8, r0                      // PerCpu*
    bl      enter_svc
    bl      enable_mmu
    mcr     p15, 0, r8, c13, c0, 4      // TPIDRPRW = PerCpu*
    ldr     sp, [r8, #PERCPU_STACK_TOP]
    mov     fp, #0
    mov     r0, r8
    bl      secondary_main
1:  wfe
    b       1b

// If entered in HYP mode, let SVC mode use the counter and timers, give it
// the real ID registers, and return to the caller in SVC mode with
// interrupts masked. Clobbers r0-r2.
enter_svc:
    mrs     r0, cpsr
    and     r1, r0, #PSR_MODE_MASK
    cmp     r1, #PSR_MODE_HYP
    bne     1f
    mrc     p15, 4, r1, c14, c1, 0      // CNTHCTL
    orr     r1, r1, #3                  // PL1PCTEN | PL1PCEN
    mcr     p15, 4, r1, c14, c1, 0
    mov     r1, #0
    mov     r2, #0
    mcrr    p15, 4, r1, r2, c14         // CNTVOFF = 0
    mcr     p15, 4, r1, c1, c1, 0       // HCR = 0: no traps, no stage 2
    mcr     p15, 4, r1, c1, c1, 3       // HSTR = 0
    mrc     p15, 0, r1, c0, c0, 0       // MIDR
    mcr     p15, 4, r1, c0, c0, 0       // VPIDR
    mrc     p15, 0, r1, c0, c0, 5       // MPIDR
    mcr     p15, 4, r1, c0, c0, 5       // VMPIDR
    bic     r0, r0, #(PSR_MODE_MASK | PSR_T)
    orr     r0, r0, #(PSR_MODE_SVC | PSR_I | PSR_F)
    orr     r0, r0, #PSR_A
    msr     spsr_cxsf, r0
    msr     elr_hyp, lr
    isb
    eret
1:  cpsid   aif
    bx      lr

// Invalidates data cache lines over [r0, r1). Clobbers r0-r3.
.global dcache_invalidate_range
dcache_invalidate_range:
    mrc     p15, 0, r3, c0, c0, 1       // CTR
    ubfx    r3, r3, #16, #4             // DminLine: log2(words)
    mov     r2, #4
    lsl     r2, r2, r3                  // line size in bytes
    sub     r3, r2, #1
    bic     r0, r0, r3
1:  cmp     r0, r1
    bhs     2f
    mcr     p15, 0, r0, c7, c6, 1       // DCIMVAC
    add     r0, r0, r2
    b       1b
2:  dsb
    bx      lr

// Turns on the MMU and caches with the tables arm_early_mmu built.
// Same on every core; touches no memory. Clobbers r0-r1.
enable_mmu:
    mrc     p15, 0, r0, c1, c0, 1       // ACTLR: join the coherency domain
    tst     r0, #ACTLR_SMP              // (writes are ignored where the
    orreq   r0, r0, #ACTLR_SMP          //  secure side owns the bit)
    mcreq   p15, 0, r0, c1, c0, 1
    mov     r0, #0
    mcr     p15, 0, r0, c2, c0, 2       // TTBCR: short descriptors, TTBR0 only
    mcr     p15, 0, r0, c13, c0, 1      // CONTEXTIDR: ASID 0
    ldr     r0, =arm_l1_table
    orr     r0, r0, #TTBR_FLAGS
    mcr     p15, 0, r0, c2, c0, 0       // TTBR0
    ldr     r0, =DACR_CLIENT
    mcr     p15, 0, r0, c3, c0, 0       // DACR
    isb
    mov     r0, #0
    mcr     p15, 0, r0, c8, c7, 0       // TLBIALL
    mcr     p15, 0, r0, c7, c5, 0       // ICIALLU
    mcr     p15, 0, r0, c7, c5, 6       // BPIALL
    dsb
    isb
    mrc     p15, 0, r0, c1, c0, 0       // SCTLR
    ldr     r1, =SCTLR_CLEAR
    bic     r0, r0, r1
    ldr     r1, =SCTLR_SET
    orr     r0, r0, r1
    mcr     p15, 0, r0, c1, c0, 0
    isb
    bx      lr
