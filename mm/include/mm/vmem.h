// SPDX-License-Identifier: Apache-2.0
// vmem: resource arenas after Bonwick & Adams, "Magazines and Vmem" (2001),
// with the illumos interface. "An arena is nothing more than a set of
// integers": address ranges, ids, anything with a base, a size and a quantum.
//
// Design statement (details in mm/vmem.cpp):
//  1. Boundary tags: every span and segment of an arena is a vmem_seg on one
//     address-ordered list; adjacent free segments coalesce on free.
//  2. Free segments sit on power-of-two free lists (list i holds sizes in
//     [2^i, 2^(i+1))) with a bitmap of the non-empty lists. VM_INSTANTFIT
//     (the default) takes the first segment of the smallest list that is
//     guaranteed to fit: constant time. VM_BESTFIT searches for the smallest
//     fit; VM_NEXTFIT walks on from the last allocation (a rotor).
//  3. Allocated segments are found on free through a hash table keyed by
//     address, which grows as the arena does.
//  4. Quantum caches: for sizes up to qcache_max, per-arena kmem caches of
//     1..n quanta front the arena, so small allocations get magazines.
//  5. Importing: an arena with a source calls afunc(source, size, flags) to
//     get a new span when it runs dry, and gives a span back with ffunc when
//     all of it is free again.
//  6. Segment reserve: boundary tags come from a per-system pool refilled
//     with whole pages from the page allocator, never from vmem itself, and
//     a minimum is kept in reserve for VM_PUSHPAGE allocations. Frees only
//     merge segments, so they never need a tag and cannot fail.
//  7. Locking: one lock per arena (IRQs masked). afunc/ffunc are called with
//     it dropped.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/alloc_tag.h>
#include <mm/flags.h>
#include <mm/platform_inline.h>

struct vmem;
typedef struct vmem vmem_t;
struct kmem_cache;
typedef struct kmem_cache kmem_cache_t;
typedef void* vmem_alloc_t(vmem_t*, size_t, int);
typedef void vmem_free_t(vmem_t*, void*, size_t);

#define VMEM_ALLOC 0x01
#define VMEM_FREE 0x02
#define VMEM_SPAN 0x10
#define VMEM_NAMELEN 32

vmem_t* vmem_create(const char* name, void* base, size_t size, size_t quantum, vmem_alloc_t* afunc, vmem_free_t* ffunc,
                    vmem_t* source, size_t qcache_max, int vmflag);
// Destroying an arena with live allocations, or one another arena imports
// from, is reported (name and what is outstanding) and refused: returns
// false. (illumos returns void and panics.)
bool vmem_destroy(vmem_t* vmp);
void* vmem_alloc(vmem_t* vmp, size_t size, int vmflag);
void vmem_free(vmem_t* vmp, void* vaddr, size_t size);
void* vmem_xalloc(vmem_t* vmp, size_t size, size_t align, size_t phase, size_t nocross, void* minaddr, void* maxaddr,
                  int vmflag);
void vmem_xfree(vmem_t* vmp, void* vaddr, size_t size);
void* vmem_add(vmem_t* vmp, void* vaddr, size_t size, int vmflag);

// Allocation profiling (mm/alloc_tag.h): the tagged entry points, and the
// names as macros that call them with the call site's tag while the
// allocators' hooks are on. Counted: allocations that get a segment of
// their own (vmem_xalloc, and vmem_alloc of sizes above the arena's
// quantum caches); sizes the quantum caches serve are not counted.
void* vmem_alloc_tagged(vmem_t* vmp, size_t size, int vmflag, const mm::AllocTag* tag);
void* vmem_xalloc_tagged(vmem_t* vmp, size_t size, size_t align, size_t phase, size_t nocross, void* minaddr,
                         void* maxaddr, int vmflag, const mm::AllocTag* tag);
#define vmem_alloc(vmp, size, vmflag)                                                               \
  (::mm::plat::alloc_hooks_on() ? ::vmem_alloc_tagged((vmp), (size), (vmflag), MM_ALLOC_TAG(kVmem)) \
                                : ::vmem_alloc((vmp), (size), (vmflag)))
#define vmem_xalloc(vmp, size, align, phase, nocross, minaddr, maxaddr, vmflag)                           \
  (::mm::plat::alloc_hooks_on()                                                                           \
       ? ::vmem_xalloc_tagged((vmp), (size), (align), (phase), (nocross), (minaddr), (maxaddr), (vmflag), \
                              MM_ALLOC_TAG(kVmem))                                                        \
       : ::vmem_xalloc((vmp), (size), (align), (phase), (nocross), (minaddr), (maxaddr), (vmflag)))
// Bytes allocated (VMEM_ALLOC), free (VMEM_FREE) or both.
size_t vmem_size(vmem_t* vmp, int typemask);

namespace mm {

struct VmemStats {
  char name[VMEM_NAMELEN];
  uint64_t quantum;
  uint64_t span_bytes;      // total of all spans (added + imported)
  uint64_t imported_bytes;  // of span_bytes: imported from the source
  uint64_t alloc_bytes;     // currently allocated
  uint64_t free_bytes;
  uint64_t spans, segs_alloc, segs_free;
  uint64_t allocs, frees, failures, imports, span_returns;
  uint64_t searches;  // free segments examined by searching allocations
                      // (instant fit's fast path examines none)
  uint64_t hash_buckets, hash_rescales;
  uint64_t qcache_max;
  const char* source;  // source arena name or nullptr
};
void vmem_stats(const vmem_t* vmp, VmemStats& out);
// An upper bound of the largest allocation the arena could ever satisfy:
// its own spans' bytes plus, if it imports, its source's capacity (all ones
// for an import function with no source arena). A request above it can
// never be met.
uint64_t vmem_capacity(const vmem_t* vmp);
// vmp is ancestor, or imports from it (directly or through other arenas).
bool vmem_imports_from(const vmem_t* vmp, const vmem_t* ancestor);
// Visits every arena in creation order, with the arena list locked: fn
// must not create or destroy arenas.
void vmem_walk(void (*fn)(const vmem_t* vmp, void* arg), void* arg);
// Boundary-tag pool usage: tags held, free, and pages taken for them.
void vmem_seg_pool_stats(uint64_t& tags_total, uint64_t& tags_free, uint64_t& pages);
// Pages vmem took from the page allocator for itself: boundary-tag pages
// plus grown hash tables.
uint64_t vmem_metadata_pages();
// What vmem asks of the object-cache layer above it: quantum caches (one
// object cache per multiple of the quantum up to qcache_max) and, when a
// VM_SLEEP allocation must wait, a reap. kmem registers its own at
// kmem_init; until then, and in a program without kmem, arenas run without
// quantum caches (requests go to the arena) and VM_SLEEP simply waits.
struct VmemCacheLayer {
  // A cache of size-byte buffers aligned to align, whose slabs come from
  // arena through vmem_xalloc/vmem_xfree (never through the quantum caches).
  kmem_cache_t* (*create)(const char* name, size_t size, size_t align, vmem_t* arena);
  bool (*destroy)(kmem_cache_t* cp);  // false (and reported) if busy
  void* (*alloc)(kmem_cache_t* cp, int kmflag);
  void (*free)(kmem_cache_t* cp, void* buf);
  // Buffers the cache has handed out and not had back, and the slabs it
  // holds (count and bytes of arena taken).
  void (*usage)(const kmem_cache_t* cp, uint64_t& buffers_out, uint64_t& slabs, uint64_t& slab_bytes);
  void (*reap)();  // give cached memory back (VM_SLEEP is about to wait)
};
// Registers the layer (once; it must outlive vmem) and creates the quantum
// caches of arenas that asked for them before it existed.
void vmem_set_cache_layer(const VmemCacheLayer* layer);
// kmem_reap reaps the quantum caches with every other cache and then calls
// this, which gives back what vmem holds itself: arenas' spare boundary
// tags (down to the minimum an operation needs) go back to the tag pool.
void vmem_qcache_reap();
// Walks the arena checking every invariant (boundary tags tile their spans,
// free lists, bitmap, hash, totals); logs the first violation and returns
// false. O(segments); for tests and debugging.
bool vmem_verify(const vmem_t* vmp);

}  // namespace mm
