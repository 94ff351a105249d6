// SPDX-License-Identifier: Apache-2.0
// The kernel's first page tables: see kernel/include/kernel/boot_map.h.
#include <kernel/align.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/boot_map.h>
#include <kernel/fdt.h>
#include <kernel/stack.h>

namespace boot_map {

bool open_dtb(uintptr_t dtb, fdt::Tree& tree) {
  if (!dtb || (dtb & 7)) return false;
  uint32_t total = fdt::be32(reinterpret_cast<const uint8_t*>(dtb) + 4);
  return tree.open(reinterpret_cast<const void*>(dtb), total < kMaxDtbSize ? total : kMaxDtbSize) == fdt::Error::kOk;
}

namespace {
// [start, end) rounded out to pages, identity-mapped with flags (0: unmapped).
void map(uint64_t start, uint64_t end, unsigned flags) {
  start = align_down(start, kPageSize);
  end = align_up(end, kPageSize);
  if (end > start) arch::boot_map_range(start, end, flags);
}
}  // namespace

void map_kernel(uintptr_t dtb) {
  constexpr unsigned kRam = arch::kMapRead | arch::kMapWrite;
  fdt::Tree tree;
  bool dtb_ok = open_dtb(dtb, tree);
  // a. RAM. What lies at and above kDirectMapLimit would meet the heap
  // window: it stays unmapped, and mm/ leaves it unused.
  if (dtb_ok) {
    for (fdt::Node n = tree.find_device_type("memory"); n != fdt::kNoNode; n = tree.find_device_type("memory", n)) {
      uint64_t base, size;
      for (uint32_t i = 0; tree.reg(n, i, base, size); i++) {
        if (!size || base >= arch::kDirectMapLimit) continue;
        uint64_t end = base + size > arch::kDirectMapLimit ? arch::kDirectMapLimit : base + size;
        // Page 0 stays unmapped where RAM starts at 0 (raspi3b): a null
        // pointer faults there as everywhere else. Whatever the firmware
        // keeps there (the Pi's spin table, in /memreserve/) is reached
        // through a mapping of its own (arch/arm64/spin_table.cpp).
        if (base == 0) base = kPageSize;
        if (end > base) map(base, end, kRam);
      }
    }
  }
  // b. The DTB, whatever it said.
  if (dtb) map(dtb, dtb + (dtb_ok ? tree.total_size() : kMaxDtbSize), arch::kMapRead);
  // c. The image, W^X.
  map(reinterpret_cast<uintptr_t>(__kernel_start), reinterpret_cast<uintptr_t>(__kernel_end), kRam);
  map(reinterpret_cast<uintptr_t>(__text_start), reinterpret_cast<uintptr_t>(__text_end),
      arch::kMapRead | arch::kMapExec);
  map(reinterpret_cast<uintptr_t>(__rodata_start), reinterpret_cast<uintptr_t>(__rodata_end), arch::kMapRead);
  // d. The early UART.
  map(EARLY_UART_BASE, EARLY_UART_BASE + kPageSize, kRam | arch::kMapDevice);
  // e. Stack guards.
  for (unsigned i = 0; i < kstack::kGuardPages; i++)
    map(kstack::guard_page(i), kstack::guard_page(i) + KSTACK_GUARD_SIZE, 0);
}

}  // namespace boot_map
