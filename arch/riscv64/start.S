// RISC-V 64 entry: the Linux RISC-V boot protocol under SBI firmware.
//
// The firmware (OpenSBI, or U-Boot on top of it) loads this raw Image at
// RAM base + text_offset and jumps to its first byte in S-mode with paging
// off, a0 = this hart's id and a1 = physical address of the DTB. Any hart
// may be the boot hart.
//
// Boot hart:
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
    csrw    sie, zero
    csrci   sstatus, SSTATUS_SIE
    la      t0, early_trap
    csrw    stvec, t0
    mv      s1, a0                  // hartid
    mv      s2, a1                  // DTB
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

// A hart that entered at _start after the boot hart (see above), paging off,
// a0 = its hart id. Waits until riscv_starting_cpu names a PerCpu with this
// hart id, marks it (arch_scratch[0] = 1, reported by init_secondary_cpu)
// and continues as the secondary it is. Touches no stack.
stray_start:
    csrw    sie, zero
    csrci   sstatus, SSTATUS_SIE
    la      t2, riscv_starting_cpu
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
