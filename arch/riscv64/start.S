/* SPDX-License-Identifier: Apache-2.0 */
// RISC-V 64 entry: the Linux RISC-V boot protocol under SBI firmware.
//
// The firmware (OpenSBI, or U-Boot on top of it) loads this raw Image at a
// 2 MiB-aligned address (OpenSBI's configured one, U-Boot's booti RAM base
// + text_offset) and jumps to its first byte in S-mode with paging off,
// a0 = this hart's id and a1 = physical address of the DTB. Any hart may
// be the boot hart.
//
// Boot hart:
//   0. if not at the link address, move there (relocate, below);
//   1. mask interrupts, park stray traps, set the boot stack;
//   2. clear .bss (RISC-V caches are coherent with paging off as on);
//   3. build the Sv39 tables in C++ (riscv_early_mmu: the page-table pool
//      lives in .noinit, like arm64's);
//   4. turn paging on (satp + sfence.vma) and call kernel_main(dtb, hartid).
// Other harts enter at secondary_entry through SBI HSM hart_start with
// a0 = hartid, a1 = their PerCpu; they turn paging on with the same root
// table, set tp and their stack, and call secondary_main.
//
// Only one hart may take the boot path: the first to swap boot_lottery.
// Any later hart that enters at _start goes to stray_start and waits to be
// named in riscv_starting_cpu. That happens with OpenSBI 1.1 (QEMU 7.2's):
// its hart_start marks the target START_PENDING before it stores the entry
// address, and a target that is awake in that window jumps to the previous
// entry address (this image's _start) with the previous argument (the DTB).
// It also lets firmware that starts every hart here (SBI without HSM) work.
// Both assume the image runs where it was loaded: after relocate moved it,
// such a hart enters the old copy, whose pages the kernel has given to the
// page allocator. With OpenSBI 1.1 (whose hart_start has that window) or
// without HSM, load the image at its link address (U-Boot's booti and
// OpenSBI's payloads do).

#include <kernel/stack_layout.h>
#include "csr.h"

.option norvc                       // a fixed-size header and entry

.section .text.boot, "ax"
.global _start
_start:
    // Linux RISC-V Image header (Documentation/arch/riscv/boot-image-header.rst).
    j       primary_entry           // code0
    .word   0                       // code1
    .dword  TEXT_OFFSET             // text_offset
    .dword  __image_size            // image_size (from the linker script)
    .dword  0                       // flags: little endian
    .word   0x2                     // version 0.2
    .word   0                       // res1
    .dword  0                       // res2
    .ascii  "RISCV\0\0\0"           // magic (deprecated)
    .ascii  "RSC\x05"               // magic2
    .word   0                       // res3 (PE header offset)

primary_entry:
    la      t0, boot_lottery
    li      t1, 1
    amoswap.w.aq t1, t1, (t0)
    bnez    t1, stray_start
    mv      s1, a0                  // hartid
    mv      s2, a1                  // DTB
    la      s10, boot_moved         // the flag strays here wait on (relocate)
relocation_check:
    lla     t0, _start              // where the image runs
    ld      t1, link_start          // where it was linked to run
    bne     t0, t1, relocate
    csrw    sie, zero
    csrci   sstatus, SSTATUS_SIE
    la      t0, early_trap
    csrw    stvec, t0
    li      tp, 0
    li      gp, 0
    la      sp, g_kernel_stacks     // slot 0's kernel stack (kernel/stack_layout.h)
    li      t0, KSTACK_SLOT_SIZE
    add     sp, sp, t0
    li      s0, 0

    la      t0, __bss_start
    la      t1, __bss_end
1:  bgeu    t0, t1, 2f
    sd      zero, 0(t0)
    sd      zero, 8(t0)
    addi    t0, t0, 16
    j       1b
2:
    mv      a0, s2
    call    riscv_early_mmu
    call    enable_paging
    mv      a0, s2
    mv      a1, s1
    call    kernel_main
3:  wfi
    j       3b

.global secondary_entry
secondary_entry:
    csrw    sie, zero
    csrci   sstatus, SSTATUS_SIE
    la      t0, early_trap
    csrw    stvec, t0
    li      gp, 0
    mv      s1, a1                  // PerCpu*
    call    enable_paging           // touches no memory: no stack needed yet
    mv      tp, s1
    ld      sp, PERCPU_STACK_TOP(s1)
    li      s0, 0
    mv      a0, s1
    call    secondary_main
1:  wfi
    j       1b

// Moves the image from where the firmware put it (t0) to its link address
// (t1) and continues at relocation_check there with s1 = hart id and s2 =
// the DTB; the DTB moves too if it lies where the image will live. The
// image holds absolute addresses (tables of pointers), so it must run
// where it was linked. Position-independent: PC-relative jumps and lla,
// and literals whose values are link addresses. Uses no stack and no
// memory but the copies.
//
// Three cases, as arch/arm/start.S has them:
//   - the copy does not overlap the loaded image: one move;
//   - it overlaps below the loaded image: a forward copy would overwrite
//     this code before it finished, so first move the image 4 KiB-aligned
//     above both (and above the DTB if it would land on it) and start
//     again from there, which is then the first case; with 2 MiB-aligned
//     addresses only an image over 2 MiB overlaps;
//   - it overlaps above (loaded below the link address): copied backwards
//     from the end, which reaches this code only if the two are less than
//     its offset apart.
// Whatever the kernel uses past the loaded bytes (.bss, page tables,
// stacks: up to __kernel_end) must not hold the DTB: if it does, the DTB
// moves just above both the kernel's footprint and the loaded image first.
//
// Harts that entered this copy at _start after the boot hart (stray_start;
// only firmware without SBI HSM starts them so) wait on boot_moved in it,
// s10: the release store below publishes the moved image to them; each
// then runs fence.i itself before jumping to it (fence.i orders only the
// executing hart's instruction fetches). When the two copies overlap (an
// image over 2 MiB), the move overwrites the code such harts spin in, and
// the flag's word is the kernel's: it is not written, and they are lost.
relocate:
    mv      s3, t0                  // s3: run
    mv      s4, t1                  // s4: link
    ld      s5, loaded_size         // s5: bytes loaded (a multiple of 8)
    ld      s6, image_size          // s6: the kernel's whole footprint
    add     s7, s4, s5              // s7: end of the destination's loaded part
    // t0: the DTB's size rounded to 8, or 0 when s2 is no DTB (null,
    // misaligned, or no FDT magic: nothing of it is moved); s8: its end.
    li      t0, 0
    beqz    s2, 0f
    andi    t1, s2, 7
    bnez    t1, 0f
    lwu     t1, 0(s2)
    li      t2, 0xedfe0dd0          // 0xd00dfeed, big-endian
    bne     t1, t2, 0f
    lbu     t0, 4(s2)               // totalsize, big-endian
    lbu     t1, 5(s2)
    lbu     t2, 6(s2)
    lbu     t3, 7(s2)
    slli    t0, t0, 24
    slli    t1, t1, 16
    slli    t2, t2, 8
    or      t0, t0, t1
    or      t0, t0, t2
    or      t0, t0, t3
    addi    t0, t0, 7
    andi    t0, t0, -8
0:  add     s8, s2, t0              // s8: DTB end (s2 when there is none)
    li      s11, -4096              // s11: the 4 KiB mask
    // Overlap below: link < run < link + loaded.
    bleu    s3, s4, 2f
    bleu    s7, s3, 2f
    add     s9, s3, s5              // s9: the first move's target
    sub     s9, s9, s11             // + 4096 - 1, rounded down: 4 KiB up
    addi    s9, s9, -1
    and     s9, s9, s11
    beq     s2, s8, 1f              // no DTB
    add     t0, s9, s5
    bgeu    s2, t0, 1f              // DTB at or past the target's end
    bgeu    s9, s8, 1f              // or ends before it: no overlap
    sub     s9, s8, s11
    addi    s9, s9, -1
    and     s9, s9, s11
1:  mv      a0, s9
    mv      a1, s3
    mv      a2, s5
    call    boot_memmove
    fence.i
    lla     t0, relocation_check    // its offset in the image, added to the copy's base
    lla     t1, _start
    sub     t0, t0, t1
    add     t0, t0, s9
    jr      t0                      // s1, s2, s10 carried over
2:  // Does the DTB lie in [link, link + footprint)?
    beq     s2, s8, 3f              // no DTB
    add     t0, s4, s6              // footprint end
    bgeu    s2, t0, 3f
    bgeu    s4, s8, 3f
    add     s9, s3, s5              // above the loaded image
    bgeu    s9, t0, 4f
    mv      s9, t0                  // and the footprint
4:  addi    s9, s9, 7
    andi    s9, s9, -8              // (a DTB is 8-byte aligned)
    mv      a0, s9
    mv      a1, s2
    sub     a2, s8, s2
    call    boot_memmove
    mv      s2, s9
3:  mv      a0, s4
    mv      a1, s3
    mv      a2, s5
    call    boot_memmove
    fence.i
    sub     t0, s10, s4             // the flag's copy now lies inside the
    bltu    t0, s6, 5f              // kernel (overlapping moves): no strays can be saved
    li      t0, 1
    fence   rw, w                   // release: the copy before the flag
    sw      t0, 0(s10)
5:  lla     t0, relocation_check
    lla     t1, _start
    sub     t0, t0, t1
    add     t0, t0, s4
    jr      t0

// Copies a2 bytes (a multiple of 8) from a1 to a0, both 8-byte aligned, in
// the direction that is safe when the two overlap. Clobbers a0-a3.
boot_memmove:
    beq     a0, a1, 3f
    bgtu    a0, a1, 2f
1:  beqz    a2, 3f                  // forward
    ld      a3, 0(a1)
    sd      a3, 0(a0)
    addi    a0, a0, 8
    addi    a1, a1, 8
    addi    a2, a2, -8
    j       1b
2:  add     a0, a0, a2              // backward, from the end
    add     a1, a1, a2
4:  beqz    a2, 3f
    addi    a0, a0, -8
    addi    a1, a1, -8
    ld      a3, 0(a1)
    sd      a3, 0(a0)
    addi    a2, a2, -8
    j       4b
3:  ret

.balign 8
link_start:
    .dword  _start
link_stray:
    .dword  stray_start
loaded_size:
    .dword  __loaded_size
image_size:
    .dword  __image_size

// A hart that entered at _start after the boot hart (see above), paging off,
// a0 = its hart id. Waits until riscv_starting_cpu names a PerCpu with this
// hart id, marks it (arch_scratch[0] = 1, reported by init_secondary_cpu)
// and continues as the secondary it is. Touches no stack. One that entered
// a copy the boot hart is moving away from (relocate) first waits for the
// move and continues in the moved image.
stray_start:
    csrw    sie, zero
    csrci   sstatus, SSTATUS_SIE
    lla     t0, _start
    ld      t1, link_start
    beq     t0, t1, 3f
    la      t2, boot_moved
4:  lw      t0, 0(t2)
    fence   r, rw                   // acquire: pairs with relocate's release store
    bnez    t0, 5f
    .insn   i 0x0f, 0, x0, x0, 0x010    // pause
    j       4b
5:  fence.i                         // this hart's fetches see the moved code
    ld      t0, link_stray
    jr      t0
3:  la      t2, riscv_starting_cpu
1:  ld      t0, 0(t2)
    fence   r, rw                   // acquire: pairs with start_cpu's release store
    beqz    t0, 2f
    ld      t1, PERCPU_HWID(t0)
    bne     t1, a0, 2f
    li      t1, 1
    sd      t1, PERCPU_ARCH_SCRATCH(t0)
    mv      a1, t0
    j       secondary_entry
2:  .insn   i 0x0f, 0, x0, x0, 0x010    // pause
    j       1b

// Turns on Sv39 translation with riscv_root_table. Same on every hart;
// touches no memory. Clobbers t0-t1.
enable_paging:
    la      t0, riscv_root_table
    srli    t0, t0, 12
    li      t1, SATP_MODE_SV39
    slli    t1, t1, SATP_MODE_SHIFT
    or      t0, t0, t1
    sfence.vma
    csrw    satp, t0
    sfence.vma
    ret

// A trap before arch::init_*_cpu installed the real handler: nothing can
// report it yet, so park the hart (a debugger finds it here).
.balign 4
early_trap:
    wfi
    j       early_trap

.section .data
.balign 8
boot_lottery:
    .word   0
boot_moved:                         // set in the copy the boot hart moved from
    .word   0
