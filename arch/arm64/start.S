/* SPDX-License-Identifier: Apache-2.0 */
// AArch64 entry: the Linux arm64 boot protocol.
//
// The bootloader (QEMU, U-Boot booti, the Raspberry Pi firmware) loads this
// raw Image at a 2 MiB-aligned base + text_offset and jumps to its first
// byte with x0 = physical address of the DTB, MMU off, at EL2 or EL1.
// The header asks for the base nearest the start of RAM (flags bit 3
// clear), which is where the image is linked; a loader may still choose a
// higher base.
//
// Primary core:
//   0. if not at the link address, move there (relocate, below);
//   1. drop from EL2 to EL1 if needed;
//   2. invalidate the cache lines over the boot stack and page-table pool
//      (written with the MMU off, they must not meet stale lines later);
//   3. build the page tables in C with the MMU off (arm64_early_mmu);
//   4. turn on the MMU and caches, then clear .bss with caches on;
//   5. call kernel_main(dtb, mpidr).
// Secondary cores enter at secondary_entry (PSCI CPU_ON) with x0 = their
// PerCpu; they turn the MMU on with the same tables before touching memory.

#include <kernel/stack_layout.h>
#include "sysregs.h"

.section .text.boot, "ax"
.global _start
_start:
    // Linux arm64 Image header (Documentation/arch/arm64/booting.rst).
    b       primary_entry               // code0
    .long   0                           // code1
    .quad   TEXT_OFFSET                 // text_offset
    .quad   __image_size                // image_size (from the linker script)
    .quad   0x2                         // flags: little endian, 4K pages, 2 MiB-aligned base
    .quad   0, 0, 0                     // reserved
    .ascii  "ARM\x64"                   // magic
    .long   0                           // reserved (PE header offset)

primary_entry:
    mov     x19, x0                     // DTB
    adr     x20, _start                 // where the image runs
    ldr     x21, =_start                // where it was linked to run
    cmp     x20, x21
    b.ne    relocate
linked_entry:
    bl      drop_to_el1
    msr     tpidrro_el0, xzr            // cpu_index(): the boot core is 0 (arch/ops.h)
    mrs     x20, mpidr_el1

    // Invalidate [__noinit_start, __noinit_end): boot stack and page tables.
    adrp    x0, __noinit_start
    add     x0, x0, :lo12:__noinit_start
    adrp    x1, __noinit_end
    add     x1, x1, :lo12:__noinit_end
    bl      dcache_invalidate_range

    adrp    x0, g_kernel_stacks             // slot 0's kernel stack (kernel/stack_layout.h)
    add     x0, x0, :lo12:g_kernel_stacks
    add     x0, x0, #KSTACK_SLOT_SIZE
    mov     sp, x0
    mov     x29, #0
    mov     x0, x19
    bl      arm64_early_mmu             // builds the tables, MMU still off
    bl      enable_mmu

    // .bss is cleared with the caches on so no stale line can survive.
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __bss_end
    add     x1, x1, :lo12:__bss_end
1:  cmp     x0, x1
    b.hs    2f
    stp     xzr, xzr, [x0], #16
    b       1b
2:
    mov     x0, x19
    ldr     x1, =0xff00ffffff           // MPIDR affinity fields
    and     x1, x20, x1
    bl      kernel_main
3:  wfe
    b       3b

.global secondary_entry
secondary_entry:
    mov     x19, x0                     // PerCpu*
    bl      drop_to_el1
    bl      enable_mmu
    msr     tpidr_el1, x19
    ldr     w0, [x19, #PERCPU_INDEX]
    msr     tpidrro_el0, x0             // cpu_index() (arch/ops.h)
    ldr     x0, [x19, #PERCPU_STACK_TOP]
    mov     sp, x0
    mov     x29, #0
    mov     x0, x19
    bl      secondary_main
1:  wfe
    b       1b

// Spin-table entry (arch/arm64/cpu_start.cpp): a core the firmware held in
// its wfe loop jumps here at EL2 or EL1 with the MMU and caches off and
// x0-x3 = 0. It takes its PerCpu from arm64_spin_release, {PerCpu*, hwid},
// once the hwid there is its own MPIDR affinity; the releasing core
// cleaned that line to the point of coherency before its sev (these loads
// bypass the caches). A core released late (after start_cpu gave up on
// it) keeps waiting rather than take another core's PerCpu.
.global spin_table_entry
spin_table_entry:
    adrp    x1, arm64_spin_release
    add     x1, x1, :lo12:arm64_spin_release
    mrs     x3, mpidr_el1
    ldr     x4, =0xff00ffffff           // MPIDR affinity fields
    and     x3, x3, x4
1:  ldr     x2, [x1, #8]
    cmp     x2, x3
    b.eq    2f
    wfe
    b       1b
2:  ldr     x0, [x1]
    b       secondary_entry

// Moves the image from where the loader put it (x20) to its link address
// (x21), RAM base + text_offset, and continues at linked_entry there with
// x19 = the DTB; the DTB moves too if it lies where the image will live.
// The image holds absolute addresses (literal pools, tables of pointers),
// so it must run where it was linked. Position-independent: PC-relative
// branches and adr, and literals whose values are link addresses. Uses no
// stack and no memory but the copies; runs at EL2 or EL1, MMU off.
//
// Three cases, as arch/arm/start.S has them:
//   - the copy does not overlap the loaded image: one move;
//   - it overlaps below the loaded image: a forward copy would overwrite
//     this code before it finished, so first move the image 4 KiB-aligned
//     above both (and above the DTB if it would land on it) and start again
//     from there, which is then the first case;
//   - it overlaps above (loaded below the link address): copied backwards
//     from the end, which reaches this code only if the two are less than
//     its offset apart; a 2 MiB-aligned base puts them 2 MiB apart.
// Whatever the kernel uses past the loaded bytes (.bss, page tables,
// stacks: up to __kernel_end) must not hold the DTB: if it does, the DTB
// moves just above both the kernel's footprint and the loaded image first.
//
// Caches: the protocol has the data cache off, so the copies reach memory.
// Each destination's lines are invalidated before its copy (the protocol
// has only the image's range clean: a dirty line elsewhere must not be
// written back over the copy) and after (stale lines must not be read once
// the caches are on); then the instruction cache, before the jump. A loader
// that left the data cache on breaks the protocol, and this move with it.
// The link range must be free RAM: nothing here checks the DTB's reserved
// ranges (they are honoured from the kernel's start on), and a loader picks
// a higher base than RAM's when firmware lives low.
relocate:
    ldr     x22, =__loaded_size         // x22: bytes loaded (a multiple of 8)
    ldr     x23, =__image_size          // x23: the kernel's whole footprint
    add     x24, x21, x22               // x24: end of the destination's loaded part
    // x27: the DTB's size rounded to 8, or 0 when x19 is no DTB (null,
    // misaligned, or no FDT magic: nothing of it is moved); x25: its end.
    mov     x27, #0
    cbz     x19, 0f
    tst     x19, #7
    b.ne    0f
    ldr     w0, [x19]
    ldr     w1, =0xedfe0dd0             // 0xd00dfeed, big-endian
    cmp     w0, w1
    b.ne    0f
    ldr     w27, [x19, #4]              // totalsize, big-endian
    rev     w27, w27
    add     x27, x27, #7
    and     x27, x27, #~7
0:  add     x25, x19, x27
    // Overlap below: link < run < link + loaded.
    cmp     x20, x21
    ccmp    x24, x20, #0, hi            // (hi) then compare end with run
    b.ls    2f
    add     x26, x20, x22               // x26: the first move's target
    add     x26, x26, #0xfff
    and     x26, x26, #~0xfff
    cbz     x27, 1f
    add     x0, x26, x22
    cmp     x19, x0                     // DTB start < target end
    ccmp    x26, x25, #2, lo            // and target start < DTB end: overlap
    b.hs    1f
    add     x26, x25, #0xfff
    and     x26, x26, #~0xfff
1:  mov     x0, x26
    add     x1, x26, x22
    bl      dcache_invalidate_range     // no dirty line may land on the copy
    mov     x0, x26
    mov     x1, x20
    mov     x2, x22
    bl      boot_memmove
    mov     x0, x26
    add     x1, x26, x22
    bl      sync_moved_code
    add     x1, x26, #(primary_entry - _start)
    mov     x0, x19                     // primary_entry again, in the new copy
    br      x1
2:  // Does the DTB lie in [link, link + footprint)?
    cbz     x27, 3f
    add     x0, x21, x23                // footprint end
    cmp     x19, x0
    ccmp    x21, x25, #2, lo
    b.hs    3f
    add     x26, x20, x22               // above the loaded image
    cmp     x26, x0
    csel    x26, x26, x0, hs            // and the footprint
    add     x26, x26, #7
    and     x26, x26, #~7               // (a DTB is 8-byte aligned)
    mov     x0, x26
    add     x1, x26, x27
    bl      dcache_invalidate_range
    mov     x0, x26
    mov     x1, x19
    mov     x2, x27
    bl      boot_memmove
    mov     x0, x26                     // stale lines over the DTB's new place
    add     x1, x26, x27
    bl      dcache_invalidate_range
    mov     x19, x26
3:  mov     x0, x21
    mov     x1, x24
    bl      dcache_invalidate_range
    mov     x0, x21
    mov     x1, x20
    mov     x2, x22
    bl      boot_memmove
    mov     x0, x21
    mov     x1, x24
    bl      sync_moved_code
    ldr     x0, =linked_entry
    br      x0

// Copies x2 bytes (a multiple of 8) from x1 to x0, both 8-byte aligned, in
// the direction that is safe when the two overlap. Clobbers x0-x3.
boot_memmove:
    cmp     x0, x1
    b.eq    3f
    b.hi    2f
1:  cbz     x2, 3f                      // forward
    ldr     x3, [x1], #8
    str     x3, [x0], #8
    sub     x2, x2, #8
    b       1b
2:  add     x0, x0, x2                  // backward, from the end
    add     x1, x1, x2
4:  cbz     x2, 3f
    ldr     x3, [x1, #-8]!
    str     x3, [x0, #-8]!
    sub     x2, x2, #8
    b       4b
3:  ret

// Makes code just written to [x0, x1) with the caches off safe to run:
// invalidates the data cache's stale lines over it, then the instruction
// cache. Clobbers x0-x3, x28.
sync_moved_code:
    mov     x28, lr
    bl      dcache_invalidate_range
    ic      iallu
    dsb     sy
    isb
    ret     x28

// If entered at EL2, configure EL1 as AArch64 with access to the counters
// and return to the caller at EL1h with interrupts masked. Clobbers x0-x2.
drop_to_el1:
    mrs     x0, CurrentEL
    lsr     x0, x0, #2
    cmp     x0, #2
    b.ne    1f
    mov     x0, #HCR_EL2_RW
    msr     hcr_el2, x0
    mrs     x0, cnthctl_el2
    orr     x0, x0, #3                  // EL1PCEN | EL1PCTEN
    msr     cnthctl_el2, x0
    msr     cntvoff_el2, xzr
    mrs     x0, midr_el1
    msr     vpidr_el2, x0
    mrs     x0, mpidr_el1
    msr     vmpidr_el2, x0
    ldr     x0, =SCTLR_EL1_RES1
    msr     sctlr_el1, x0
    mov     x0, #0x3c5                  // EL1h, DAIF masked
    msr     spsr_el2, x0
    msr     elr_el2, lr
    eret
1:  msr     daifset, #0xf
    ret

// Invalidates data cache lines over [x0, x1). Clobbers x0-x3.
.global dcache_invalidate_range
dcache_invalidate_range:
    mrs     x3, ctr_el0
    ubfx    x3, x3, #16, #4             // DminLine: log2(words)
    mov     x2, #4
    lsl     x2, x2, x3                  // line size in bytes
    sub     x3, x2, #1
    bic     x0, x0, x3
1:  cmp     x0, x1
    b.hs    2f
    dc      ivac, x0
    add     x0, x0, x2
    b       1b
2:  dsb     sy
    ret

// Turns on the MMU and caches with the tables arm64_early_mmu built.
// Same on every core; touches no memory. Clobbers x0-x1.
enable_mmu:
    ldr     x0, =MAIR_VALUE
    msr     mair_el1, x0
    mrs     x0, id_aa64mmfr0_el1
    and     x0, x0, #0xf                // PARange
    cmp     x0, #5
    mov     x1, #5
    csel    x0, x0, x1, ls              // at most 48-bit physical addresses
    lsl     x0, x0, #32                 // TCR.IPS
    ldr     x1, =TCR_VALUE
    orr     x0, x0, x1
    msr     tcr_el1, x0
    adrp    x0, arm64_root_table
    add     x0, x0, :lo12:arm64_root_table
    msr     ttbr0_el1, x0
    msr     ttbr1_el1, xzr
    isb
    tlbi    vmalle1
    dsb     nsh
    ic      iallu
    dsb     nsh
    isb
    ldr     x0, =(SCTLR_EL1_RES1 | SCTLR_M | SCTLR_C | SCTLR_SA | SCTLR_I)
    msr     sctlr_el1, x0
    isb
    ret
