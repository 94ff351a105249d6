// SPDX-License-Identifier: Apache-2.0
// Where every page of RAM is, each figure from the subsystem that owns it.
#pragma once
#include <cstdint>

namespace mm_boot {

struct MemAccounting {
  uint64_t ram;          // bytes in the DTB's memory banks
  uint64_t reserved;     // kernel, DTB, reserved ranges, page descriptors, unmappable RAM
  uint64_t free;         // page allocator: buddy lists + per-CPU caches
  uint64_t heap;         // pages mapped into the kernel heap (segkmem)
  uint64_t heap_slabs;   //   of which kmem slabs
  uint64_t kmem_meta;    // kmem's own pages (cache structures, hash tables)
  uint64_t vmem_tags;    // vmem's boundary-tag pages
  uint64_t page_tables;  // page-table pages taken after boot
  uint64_t other;        // allocated pages none of the above claims
};

void init();
bool ready();
void accounting(MemAccounting& out);
uint64_t boot_free_pages();
uint64_t page_table_pages();
// Page tables + boundary tags + kmem bookkeeping pages when boot_free_pages()
// was taken.
uint64_t kept_pages_at_boot();

}  // namespace mm_boot
