// SPDX-License-Identifier: Apache-2.0
// The heap page index: any kernel heap address to its page descriptor in
// O(1), without walking page tables (segkmem.cpp, The page index, which
// owns it). Internal to mm/.
#pragma once
#include <mm/page.h>

namespace mm {

// Two levels: dir[(va - base) >> kIndexLeafShift] is a leaf of
// kIndexLeafEntries Page pointers, one per heap page. Nothing is ever null,
// so the lookup needs no test: a stretch where no page was ever mapped has
// g_empty_leaf, and an unmapped page's entry is &g_no_page. Likewise a heap
// page's owner is its kmem Slab, or g_no_owner: a word of zeroes where a
// Slab has its cache pointer, so "is this page a slab of cache c?" is one
// compare. base, size and dir are written once by segkmem_init, inside
// kmem_init and before g_ready's release, before any heap address exists.
constexpr unsigned kIndexLeafEntries = 512;
constexpr unsigned kIndexLeafShift = kPageShift + 9;
//
// Beside it, the owner ids: one byte per heap page, the owner id of
// the cache whose off-slab slab holds the page (kmem_cache.h, OwnerCheck),
// 0 for any other page. They make the magazine free's owner check of an
// off-slab cache one compare (kmem_fastpath.h, wrong_owner) where the
// index takes four dependent loads. A flat array, taken whole at init
// (heap / 4096 bytes: 0.1% of RAM for a heap window of four times RAM), up
// to a buddy block's worth: ids covers the first id_span bytes of the heap
// (all of it up to 16 GiB of heap); a page past it has no id, and its
// buffers take the index's check. Written by kmem (mark_slab_pages) with
// relaxed stores, read with plain loads: a legitimate free is ordered
// after its slab's store by the buffer's way out of the slab layer (under
// slab_lock); a stray pointer may read an old byte, as it may an old owner.
struct HeapIndex {
  uintptr_t base;
  uintptr_t id_span;  // bytes of heap, from base, that ids covers
  uint8_t* ids;       // [id_span >> kPageShift]
  uintptr_t size;     // bytes of heap the index covers (the heap arena's size)
  Page*** dir;
};
extern HeapIndex g_heap_index;
extern Page g_no_page;
extern void* const g_no_owner[1];  // {nullptr}
struct EmptyLeaf {
  Page* e[kIndexLeafEntries];
};
extern const EmptyLeaf g_empty_leaf;

// The descriptor of the heap page holding va, or nullptr (not a heap
// address, or not mapped). Ordering (segkmem.cpp): a leaf is filled and
// then published in dir with a release store, read here with an acquire
// load; an entry is set with a release store (after the descriptor's
// flags and owner) before the page is handed to vmem, and cleared
// (relaxed) before it goes back to the page allocator. The entry is loaded
// relaxed: the caller reads the descriptor through it, an address
// dependency that keeps those loads after it on every arch we run on. A
// caller holding memory it was given by the allocator sees that memory's
// entries through the allocator's own synchronisation; a caller asking
// about an arbitrary address (whatis, a stray free) sees null or a
// descriptor at least as set up as when its entry was set, never a torn
// value.
inline Page* segkmem_page_of(uintptr_t va) {
  uintptr_t off = va - g_heap_index.base;
  if (off >= g_heap_index.size) return nullptr;
  Page** leaf = __atomic_load_n(&g_heap_index.dir[off >> kIndexLeafShift], __ATOMIC_ACQUIRE);
  Page* p = __atomic_load_n(&leaf[(off >> kPageShift) & (kIndexLeafEntries - 1)], __ATOMIC_RELAXED);
  return p == &g_no_page ? nullptr : p;
}

}  // namespace mm
