// SPDX-License-Identifier: Apache-2.0
// The tests' own count of meminfo's "reserved" (kernel/mm/accounting.h),
// for the books-balance checks (test_mm.cpp, test_allocinfo.cpp). The
// kernel computes it as RAM less the page allocator's frames, a
// difference that holds whatever the allocator got wrong; this counts it
// from what boot found instead: RAM the arch does not map, the parts of
// frames at a bank's ends, the frames any reserved range touches (rounded
// outwards, as page_init marks them; overlaps counted once) and the page
// descriptors (placed clear of the reserved ranges). Banks do not overlap
// (the DTBs of every board). Defined in reserved_count.cpp, not inline: a
// function inline in two units leaves the discarded copy's entry in the
// linked .debug_aranges as zeros, which libdw (kmtrace) rejects on riscv64.
#pragma once
#include <cstdint>

namespace books {
uint64_t counted_reserved_bytes();
}  // namespace books
