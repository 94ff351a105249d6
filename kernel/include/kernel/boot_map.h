// SPDX-License-Identifier: Apache-2.0
// The kernel's first page tables: what the boot core maps before it turns
// its MMU on. The same on every arch; how an entry is written is the
// arch's (arch::boot_map_range).
//
// 1. Who calls it. Each arch's early MMU entry (arm64_early_mmu,
//    arm_early_mmu, riscv_early_mmu), called by its start.S on the boot
//    stack with the MMU off, empties its root table and calls
//    boot_map::map_kernel(dtb). On ARM that runs before .bss is cleared,
//    and on arm64 every data access is to Device memory with the MMU off:
//    nothing here uses .bss or statics, or makes an unaligned access
//    (the kernel is built with -mstrict-align / -mno-unaligned-access).
// 2. What it maps, in this order (a later range replaces an earlier one
//    where they overlap), all identity-mapped (virtual = physical):
//    a. every RAM bank the DTB lists, up to arch::kDirectMapLimit:
//       read-write, never executable;
//    b. the DTB itself, read-only: its own size if it parses, else a
//       kMaxDtbSize window so kernel_main can read enough to say why;
//    c. the kernel image W^X: all of it read-write, then its text
//       read-execute and its rodata read-only;
//    d. the early UART's page as device memory;
//    e. the guard page below every stack, left unmapped (kernel/stack.h).
// 3. The arch hook maps at page granularity and splits larger leaves where
//    a range cuts through them; it takes its tables from a pool in .noinit.
#pragma once
#include <cstdint>

namespace fdt {
class Tree;
}

namespace boot_map {

// Fills the arch's page tables as What it maps says. dtb is the bootloader's
// pointer (0 if it passed none).
void map_kernel(uintptr_t dtb);

// Opens the DTB at dtb (up to kMaxDtbSize of it) into tree; false if there
// is none or it does not parse. Safe with the MMU off.
bool open_dtb(uintptr_t dtb, fdt::Tree& tree);

}  // namespace boot_map
