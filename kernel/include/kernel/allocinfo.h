// SPDX-License-Identifier: Apache-2.0
// Allocation profiling's bootarg (kernel/mm/allocinfo.cpp; the commands are
// `allocinfo` and `sysctl vm.mem_profiling`).
#pragma once

#include <cstdint>

// allocinfo --totals: where every byte of RAM is, from the tags' counts and
// the allocators' own statistics (kernel/mm/allocinfo.cpp says how each is
// made). tagged + untagged + held + metadata + free + reserved = ram, the
// figure meminfo adds up to; untagged is what the allocators hold live that
// no tag counts (allocated while profiling was off): 0 when it was on from
// boot. A snapshot: exact when nothing allocates or frees meanwhile.
struct AllocTotals {
  int64_t tagged;     // live objects and pages at call sites outside mm/ (kmem and the page allocator)
  int64_t untagged;   // live ones no tag counts
  uint64_t held;      // held for reuse: free buffers, slab overhead, per-CPU page caches, mapped free heap
  uint64_t metadata;  // the allocators' own: kmem's and vmem's pages, mm's caches and tables, page tables
  uint64_t free;      // the page allocator's free lists
  uint64_t reserved;  // kernel image, DTB, reserved ranges, page descriptors and their tag references
  uint64_t ram;
  int64_t sum() const { return tagged + untagged + static_cast<int64_t>(held + metadata + free + reserved); }
};
bool allocinfo_totals(AllocTotals& out);  // false before mm is up

namespace allocinfo_boot {
// sysctl.vm.mem_profiling=0|1|never: before kmem_init (never: no slab gets
// tag references).
void setup();
// Switches counting on if the bootarg asked for it: right after kmem_init,
// before anything outside mm/ allocates.
void start();
// Has counting been on since then?
bool counting_since_boot();
}  // namespace allocinfo_boot
