/* SPDX-License-Identifier: Apache-2.0 */
// ARMv7-A entry: the Linux ARM boot protocol.
//
// The bootloader (QEMU, U-Boot bootz) loads this raw image anywhere in RAM
// (a zImage is not tied to an address) and jumps to its first byte in SVC
// (or HYP) mode with the MMU and data cache off, r0 = 0, r1 = machine type,
// r2 = physical address of the DTB.
//
// Primary core:
//   0. if not at the link address, move there (relocate, below);
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
    .word   0                           // load and run address: 0, any (relocate)
    .word   __loaded_size               // end of the loaded image, from its start
    .word   0x04030201                  // little endian

primary_entry:
    mov     r8, r2                      // DTB
    adr     r4, _start                  // where the image runs
    ldr     r5, =_start                 // where it was linked to run
    cmp     r4, r5
    bne     relocate
linked_entry:
    bl      enter_svc
    mov     r0, #0
    mcr     p15, 0, r0, c13, c0, 3      // TPIDRURO: cpu_index(), the boot core is 0 (arch/ops.h)
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
    ldr     r0, [r8, #PERCPU_INDEX]
    mcr     p15, 0, r0, c13, c0, 3      // TPIDRURO = its index: cpu_index() (arch/ops.h)
    ldr     sp, [r8, #PERCPU_STACK_TOP]
    mov     fp, #0
    mov     r0, r8
    bl      secondary_main
1:  wfe
    b       1b

// Moves the image from where the bootloader put it (r4) to its link address
// (r5) and continues at linked_entry there with r8 = the DTB; the DTB moves
// too if it lies where the image will live. The link address is RAM base +
// 64 KiB on the boards this arch has; the image holds only absolute
// addresses (literal pools, tables of pointers), so it must run there.
// Position-independent: PC-relative branches and adr, and literals whose
// values are link addresses. Uses no stack and no memory but the copies.
//
// Three cases, as Linux's zImage head has them:
//   - the copy does not overlap the loaded image: one move;
//   - it overlaps below the loaded image (loaded at most one image size
//     above the link address): a forward copy would overwrite this code
//     before it finished, so first move the image above both and start
//     again from there (then it is the first case);
//   - it overlaps above (loaded below the link address, as at RAM + 32 KiB,
//     a common zImage address): copied backwards from the end, which
//     reaches this code (.text.boot, up to boot_text_end) only if the two
//     are less than that apart: then two moves as well.
// Whatever the kernel will use past the loaded bytes (.bss, the page
// tables, the stacks: up to __kernel_end) must not hold the DTB: if it
// does, the DTB moves just above both the kernel's footprint and the
// loaded image first.
//
// Caches: the protocol has the data cache off, so the copies reach memory.
// Each destination's lines are invalidated before its copy (a dirty line
// left there must not be written back over it) and after (stale lines must
// not be read once the caches are on); then the instruction cache and the
// branch predictor, before the jump. A bootloader that left the data cache
// on breaks the protocol, and this move with it.
// The link range must be free RAM: nothing here checks the DTB's reserved
// ranges (they are honoured from the kernel's start on).
relocate:
    ldr     r6, =__data_end
    sub     r6, r6, r5                  // r6: bytes loaded (a multiple of 8)
    ldr     r7, =__kernel_end
    sub     r7, r7, r5                  // r7: the kernel's whole footprint
    add     r9, r5, r6                  // r9: end of the destination's loaded part
    // r11: the DTB's size, or 0 when r8 is no DTB (null, misaligned, or no
    // FDT magic: nothing of it is moved, and the kernel will say so).
    mov     r11, #0
    cmp     r8, #0
    beq     0f
    tst     r8, #7
    bne     0f
    ldr     r0, [r8]
    ldr     r1, =0xedfe0dd0             // 0xd00dfeed, big-endian
    cmp     r0, r1
    bne     0f
    ldr     r11, [r8, #4]               // totalsize, big-endian
    rev     r11, r11
    add     r11, r11, #7
    bic     r11, r11, #7
0:  // Overlap below (link < run < link + loaded), or this code within reach
    // of the backward copy (run < link < run + .text.boot): two moves.
    cmp     r4, r5
    bhi     4f
    sub     r0, r5, r4
    ldr     r1, =boot_text_end
    ldr     r2, =_start
    sub     r1, r1, r2                  // .text.boot's size
    cmp     r0, r1
    bhs     2f
    b       5f
4:  cmp     r9, r4
    bls     2f
5:  add     r10, r4, r6                 // r10: the first move's target: the
    add     r10, r10, #0xff0            // loaded image's end rounded up to
    add     r10, r10, #0xf              // 4 KiB, or the DTB's end if the move
    bic     r10, r10, #0xff0            // would land on it
    bic     r10, r10, #0xf
    cmp     r11, #0
    beq     1f
    add     r0, r10, r6
    add     r1, r8, r11                 // DTB end
    cmp     r8, r0                      // DTB start < target end
    cmplo   r10, r1                     // and target start < DTB end: overlap
    bhs     1f
    add     r10, r1, #0xff0
    add     r10, r10, #0xf
    bic     r10, r10, #0xff0
    bic     r10, r10, #0xf
1:  mov     r0, r10
    add     r1, r10, r6
    bl      dcache_invalidate_range     // no dirty line may land on the copy
    mov     r0, r10
    mov     r1, r4
    mov     r2, r6
    bl      boot_memmove
    mov     r0, r10
    add     r1, r10, r6
    bl      sync_moved_code
    add     r0, r10, #(primary_entry - _start)
    mov     r2, r8                      // primary_entry again, in the new copy
    bx      r0
2:  // Does the DTB lie in [link, link + footprint)?
    cmp     r11, #0
    beq     3f
    add     r0, r5, r7                  // footprint end
    add     r1, r8, r11                 // DTB end
    cmp     r8, r0
    cmplo   r5, r1
    bhs     3f
    add     r10, r4, r6                 // above the loaded image
    cmp     r10, r0
    movlo   r10, r0                     // and the footprint
    add     r10, r10, #7
    bic     r10, r10, #7                // (a DTB is 8-byte aligned)
    mov     r0, r10
    add     r1, r10, r11
    bl      dcache_invalidate_range
    mov     r0, r10
    mov     r1, r8
    mov     r2, r11
    bl      boot_memmove
    mov     r0, r10                     // stale lines over the DTB's new place
    add     r1, r10, r11
    bl      dcache_invalidate_range
    mov     r8, r10
3:  mov     r0, r5
    mov     r1, r9
    bl      dcache_invalidate_range
    mov     r0, r5
    mov     r1, r4
    mov     r2, r6
    bl      boot_memmove
    mov     r0, r5
    mov     r1, r9
    bl      sync_moved_code
    ldr     pc, =linked_entry
    .ltorg

// Copies r2 bytes (a multiple of 4) from r1 to r0, word-aligned, in the
// direction that is safe when the two overlap. Clobbers r0-r3.
boot_memmove:
    cmp     r0, r1
    bxeq    lr
    bhi     2f
1:  subs    r2, r2, #4                  // forward
    ldrhs   r3, [r1], #4
    strhs   r3, [r0], #4
    bhi     1b
    bx      lr
2:  add     r0, r0, r2                  // backward, from the end
    add     r1, r1, r2
3:  subs    r2, r2, #4
    ldrhs   r3, [r1, #-4]!
    strhs   r3, [r0, #-4]!
    bhi     3b
    bx      lr

// Makes code just written to [r0, r1) with the caches off safe to run:
// invalidates the data cache's stale lines over it, then the instruction
// cache and the branch predictor. Clobbers r0-r3, r12.
sync_moved_code:
    mov     r12, lr
    bl      dcache_invalidate_range
    mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 0       // ICIALLU
    mcr     p15, 0, r0, c7, c5, 6       // BPIALL
    dsb
    isb
    bx      r12

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

// The end of the code relocate and its helpers run, literal pools included
// (relocate's backward copy must not reach it).
    .ltorg
boot_text_end:
