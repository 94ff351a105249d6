// SPDX-License-Identifier: Apache-2.0
// segkmem: the kernel heap. Two vmem arenas:
//   "heap"         the kernel heap's virtual window (plat::heap_window);
//   "kmem_default" imports from "heap" and backs every span it takes with
//                  page frames mapped in through plat::map_heap.
// kmem's slabs come from kmem_default unless a cache names another arena;
// kmem_alloc sizes above the size caches come from it directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/vmem.h>

namespace mm {

// Brings up the heap arenas (the page allocator must be initialised; on
// the host it is set up here over the host's "physical memory").
void segkmem_init();
vmem_t* segkmem_heap_arena();
vmem_t* segkmem_default_arena();
// Bytes of virtual space the heap arena manages (at most the platform's
// heap window; see segkmem.cpp).
uint64_t segkmem_heap_bytes();
// Page-granular allocations for kmem_alloc sizes beyond the size caches.
// A size the heap can never hold is refused with a report (caller named),
// whatever kmflag says. The free checks that buf starts a live large
// allocation of that size, and refuses (with a report) if not.
void* segkmem_alloc_large(size_t size, int kmflag, uintptr_t caller);
void segkmem_free_large(void* buf, size_t size, uintptr_t caller);
// If addr is inside a live large allocation: its start and size.
bool segkmem_large_span(uintptr_t addr, uintptr_t& start, size_t& size);
// kmemleak's four words for the large allocation at start: the `count`
// fields of its 2nd to 5th page descriptors, unused otherwise (a large
// allocation has at least 5 pages) and zeroed by allocation and free. Word
// kFlagsWord holds the CPU (bits 0-7), kmemleak's flags (8-15) and its
// per-scan bits (16-23); false if start is not a live large allocation.
struct LargeLeakWords {
  static constexpr unsigned kWords = 4;
  static constexpr unsigned kTicksWord = 0, kFlagsWord = 1, kStackWord = 2, kCrcWord = 3;
  uint32_t* w[kWords];
};
constexpr uint32_t kLargeUntracked = 0x80u << 8;  // kmemleak's kLeakInternal in kFlagsWord
// kFlagsWord: the CPU (bits 0-7), kmemleak's flags (8-15), its per-scan
// bits (16, 17), and from this bit up the bytes of the pages past what
// kmem_alloc was asked for, plus 1 (0: not known).
constexpr unsigned kLargeSlackShift = 19;
bool segkmem_large_leak_words(uintptr_t start, LargeLeakWords& out);
// Marks a large allocation as the allocators' own (never a kmemleak object).
void segkmem_large_set_untracked(void* start);
// Calls fn for every live large allocation (start, bytes): a walk of the
// heap page index, lock-free (for the leak scanner, with the world stopped).
void segkmem_for_each_large(void (*fn)(uintptr_t start, size_t size, void* arg), void* arg);
// Frees the spans waiting in the release batch (see segkmem.cpp). Returns
// true if there were any. kmem_reap calls it.
bool segkmem_flush();
// Pages currently mapped into the heap by segkmem (including queued ones).
uint64_t segkmem_mapped_pages();
// Pages of the heap page index (directory and leaves).
uint64_t segkmem_index_pages();

}  // namespace mm
