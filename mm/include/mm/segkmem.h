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
// Frees the spans waiting in the release batch (see segkmem.cpp). Returns
// true if there were any. kmem_reap calls it.
bool segkmem_flush();
// Pages currently mapped into the heap by segkmem (including queued ones).
uint64_t segkmem_mapped_pages();
// Pages of the heap page index (directory and leaves).
uint64_t segkmem_index_pages();

}  // namespace mm
