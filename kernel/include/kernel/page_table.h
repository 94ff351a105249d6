// SPDX-License-Identifier: Apache-2.0
// What arm64's and riscv64's page tables share (arch/*/mmu.cpp): 4 KiB
// tables of 512 64-bit entries; entries of live tables read and written
// one single-copy-atomic access at a time; and where new tables come from.
// The descriptor formats, the barriers that publish a table (each arch's
// publish_table) and the TLB maintenance are the arch's.
#pragma once
#include <kernel/arch.h>
#include <cstdint>

namespace page_table {

constexpr unsigned kEntries = 512;

struct alignas(4096) Table {
  uint64_t e[kEntries];
};

// A table that no walk can reach yet: plain stores (the arch's
// publish_table orders them before the store that links the table).
inline void zero_table(Table* t) {
  for (auto& e : t->e) e = 0;
}

// One read of a live entry: single-copy atomic, never torn, never repeated
// by the compiler. Walks work on the value it returns.
inline uint64_t load_entry(const uint64_t* slot) { return __atomic_load_n(slot, __ATOMIC_RELAXED); }
inline void store_entry(uint64_t* slot, uint64_t v) { __atomic_store_n(slot, v, __ATOMIC_RELAXED); }

// A new, zeroed table: from the image's pool while it lasts (boot's tables,
// written with the MMU off), then, once the MMU is live, from the page
// allocator (arch::set_table_allocator: identity-mapped, comes zeroed).
// nullptr if neither has one. Under the arch's map lock.
template <unsigned kPoolPages>
Table* new_table(Table (&pool)[kPoolPages], unsigned& pool_used, bool mmu_live, arch::TableAllocator alloc) {
  if (pool_used < kPoolPages) {
    Table* t = &pool[pool_used++];
    zero_table(t);
    return t;
  }
  if (mmu_live && alloc) return reinterpret_cast<Table*>(alloc());
  return nullptr;
}

}  // namespace page_table
