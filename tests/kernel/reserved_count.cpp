// SPDX-License-Identifier: Apache-2.0
// The tests' own count of meminfo's "reserved": see reserved_count.h.
#include "reserved_count.h"
#include <arch/ops.h>
#include <kernel/boot.h>
#include <mm/page.h>

namespace books {

uint64_t counted_reserved_bytes() {
  constexpr uint64_t kPage = mm::kPageBytes;
  uint64_t reserved = 0;
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t base = g_boot.mem[i].base, end = base + g_boot.mem[i].size;
    if (end > arch::kDirectMapLimit) {
      uint64_t cut = base > arch::kDirectMapLimit ? base : arch::kDirectMapLimit;
      reserved += end - cut;
      end = cut;
    }
    if (end <= base) continue;
    uint64_t first = (base + kPage - 1) / kPage, last = end / kPage;  // frames [first, last)
    reserved += (end - base) - (last > first ? (last - first) * kPage : 0);
    // The reserved ranges' frames inside [first, last), each once: sorted
    // by start (insertion sort, a handful of ranges), then merged.
    uint64_t from[kMaxReserved], to[kMaxReserved];
    unsigned n = 0;
    for (unsigned r = 0; r < g_boot.reserved_count; r++) {
      const MemRange& m = g_boot.reserved[r];
      if (!m.size) continue;
      uint64_t f = m.base / kPage, e = (m.base + m.size + kPage - 1) / kPage;
      if (f < first) f = first;
      if (e > last) e = last;
      if (f >= e) continue;
      unsigned j = n++;
      for (; j > 0 && from[j - 1] > f; j--) {
        from[j] = from[j - 1];
        to[j] = to[j - 1];
      }
      from[j] = f;
      to[j] = e;
    }
    uint64_t covered_to = 0;
    for (unsigned r = 0; r < n; r++) {
      uint64_t f = from[r] > covered_to ? from[r] : covered_to;
      if (to[r] > f) reserved += (to[r] - f) * kPage;
      if (to[r] > covered_to) covered_to = to[r];
    }
  }
  mm::PageStats ps;
  mm::page_stats(ps);
  return reserved + ps.descriptor_pages * kPage;
}

}  // namespace books
