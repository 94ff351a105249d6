// SPDX-License-Identifier: Apache-2.0
// RISC-V Sv39 checks on the live page tables: satp selects Sv39 (the only
// mode SiFive's U54 has), every leaf has A and D set (the U54 raises a
// page fault where they are clear; QEMU sets them itself, so only reading
// the entries shows a missing one), and no table pointer has them.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/ktest.h>
#include "arch/riscv64/csr.h"

namespace riscv {
void visit_entries(void (*fn)(uint64_t pte, unsigned level, void* arg), void* arg);
uint64_t leaf_entry(uintptr_t va);
}  // namespace riscv

namespace {
constexpr uint64_t kPteV = 1 << 0, kPteR = 1 << 1, kPteW = 1 << 2, kPteX = 1 << 3, kPteU = 1 << 4, kPteA = 1 << 6,
                   kPteD = 1 << 7;

struct Census {
  unsigned leaves, tables, leaves_without_ad, tables_with_adu;
  uint64_t first_bad;
};
}  // namespace

KTEST(riscv_satp_selects_sv39) {
  uint64_t satp;
  asm volatile("csrr %0, satp" : "=r"(satp));
  KEXPECT_EQ(satp >> SATP_MODE_SHIFT, uint64_t{SATP_MODE_SV39});
}

KTEST(riscv_every_leaf_has_accessed_and_dirty_set) {
  Census c{};
  riscv::visit_entries(
      [](uint64_t pte, unsigned, void* arg) {
        Census& c = *static_cast<Census*>(arg);
        if (pte & (kPteR | kPteW | kPteX)) {
          c.leaves++;
          if ((pte & (kPteA | kPteD)) != (kPteA | kPteD) && !c.leaves_without_ad++) c.first_bad = pte;
        } else {
          c.tables++;
          if ((pte & (kPteA | kPteD | kPteU)) && !c.tables_with_adu++) c.first_bad = pte;
        }
      },
      &c);
  KEXPECT(c.leaves > 0);
  KEXPECT(c.tables > 0);
  KEXPECT_EQ(c.leaves_without_ad, 0u);
  KEXPECT_EQ(c.tables_with_adu, 0u);
  if (c.leaves_without_ad || c.tables_with_adu)
    ktest::fail(__FILE__, __LINE__, "first bad entry 0x%llx", static_cast<unsigned long long>(c.first_bad));
}

// A new mapping, read before anything touches it (a touch would let QEMU
// set the bits): A and D are there from the start, writable or not.
KTEST(riscv_new_mappings_have_accessed_and_dirty_before_any_access) {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  const uintptr_t va = base + size - 8 * kPageSize;  // the window's top: the heap grows from its bottom
  const uint64_t pa = reinterpret_cast<uintptr_t>(__kernel_start);
  KASSERT(riscv::leaf_entry(va) == 0 && riscv::leaf_entry(va + kPageSize) == 0);
  KASSERT(arch::map(va, pa, kPageSize, arch::kMapRead | arch::kMapWrite));
  KASSERT(arch::map(va + kPageSize, pa, kPageSize, arch::kMapRead));
  uint64_t rw = riscv::leaf_entry(va), ro = riscv::leaf_entry(va + kPageSize);
  arch::unmap(va, 2 * kPageSize);
  KEXPECT_EQ(rw & (kPteV | kPteR | kPteW | kPteX | kPteA | kPteD), kPteV | kPteR | kPteW | kPteA | kPteD);
  KEXPECT_EQ(ro & (kPteV | kPteR | kPteW | kPteX | kPteA | kPteD), kPteV | kPteR | kPteA | kPteD);
  KEXPECT_EQ(riscv::leaf_entry(va), 0u);
}
