// SPDX-License-Identifier: Apache-2.0
// The allocators the host benchmarks compare, behind one adapter shape.
//
// 1. An adapter is a small value type with alloc() and release(p) for one
//    object size. The patterns (patterns.h) are templates over adapters, so
//    every allocator call is a direct call (or one indirect call for the
//    loaded peers) with nothing of ours in between.
// 2. Ours: kmem_cache_alloc/kmem_cache_free on a cache per size created once
//    (bench_cache), and kmem_alloc/kmem_free, which pick a size cache.
//    glibc: the process's own malloc/free.
// 3. Peers (jemalloc, tcmalloc_minimal, mimalloc) are loaded with
//    dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) and called through their
//    malloc/free found with dlsym on the library's handle. Debian builds all
//    three to export unprefixed malloc/free, so linking any of them would
//    replace glibc's malloc for the whole process (and one another):
//    RTLD_LOCAL keeps them out of the global scope, RTLD_DEEPBIND makes each
//    bind its own internal references to itself. One run then measures all
//    six side by side.
// 4. jemalloc's TLS is initial-exec ("STATIC_TLS"): dlopen needs more
//    surplus static TLS than glibc reserves by default. ensure_static_tls()
//    re-executes the program once with GLIBC_TUNABLES raising
//    glibc.rtld.optional_static_tls; under valgrind (which would run the
//    re-executed program natively) the caller must set it, as
//    tools/bench-host does. A peer that does not load is reported by
//    allocator_available() with the reason, never silently skipped.
// 5. NullAllocator is the baseline: the same loops with no allocator, so
//    instruction counts can be given net of the loop.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/vmem.h>

#include "patterns.h"  // escape

namespace bench {

enum class AllocatorId : unsigned { kKmemCache, kKmemAlloc, kGlibc, kJemalloc, kTcmalloc, kMimalloc };
constexpr AllocatorId kAllocators[] = {AllocatorId::kKmemCache, AllocatorId::kKmemAlloc, AllocatorId::kGlibc,
                                       AllocatorId::kJemalloc,  AllocatorId::kTcmalloc,  AllocatorId::kMimalloc};
constexpr size_t kSizes[] = {16, 64, 256, 1024, 4096};

// The value GLIBC_TUNABLES needs for jemalloc to dlopen.
constexpr const char* kStaticTlsTunable = "glibc.rtld.optional_static_tls=4096";

const char* allocator_name(AllocatorId id);  // "kmem_cache", "glibc", ...
// Loads the peers on first call. False (and *why, if given, says what
// failed) if this allocator cannot be used in this process.
bool allocator_available(AllocatorId id, const char** why = nullptr);
// The benchmark's cache for objects of `size` bytes ("bench_<size>"),
// created on first use.
kmem_cache_t* bench_cache(size_t size);
// Re-executes the program with kStaticTlsTunable in GLIBC_TUNABLES unless it
// is there already or the program runs under valgrind. Call first in main.
void ensure_static_tls(char** argv);

struct KmemCacheAllocator {
  kmem_cache_t* cache;
  void* alloc() const { return kmem_cache_alloc(cache, KM_SLEEP); }
  void release(void* p) const { kmem_cache_free(cache, p); }
};

struct KmemAllocAllocator {
  size_t size;
  void* alloc() const { return kmem_alloc(size, KM_SLEEP); }
  void release(void* p) const { kmem_free(p, size); }
};

struct GlibcAllocator {
  size_t size;
  void* alloc() const { return malloc(size); }
  void release(void* p) const { free(p); }
};

struct LoadedAllocator {
  size_t size;
  void* (*malloc_fn)(size_t);
  void (*free_fn)(void*);
  void* alloc() const { return malloc_fn(size); }
  void release(void* p) const { free_fn(p); }
};

struct NullAllocator {
  void* alloc() const { return escape(const_cast<NullAllocator*>(this)); }
  void release(void* p) const { escape(p); }
};

// vmem and the page allocator in the same shape, for the same loops.
struct VmemAllocator {
  vmem_t* arena;
  size_t size;
  void* alloc() const { return vmem_alloc(arena, size, VM_NOSLEEP); }
  void release(void* p) const { vmem_free(arena, p, size); }
};

struct PageAllocator {
  void* alloc() const { return reinterpret_cast<void*>(mm::page_alloc(0, KM_NOSLEEP)); }
  void release(void* p) const { mm::page_free(reinterpret_cast<uint64_t>(p), 0); }
};

// Peer malloc/free as loaded (null if the peer is unavailable).
void peer_functions(AllocatorId id, void* (**malloc_fn)(size_t), void (**free_fn)(void*));

// Calls f(adapter) with the adapter for allocator `id` and object `size`.
// The allocator must be available.
template <class F>
void with_allocator(AllocatorId id, size_t size, F&& f) {
  switch (id) {
    case AllocatorId::kKmemCache: return f(KmemCacheAllocator{bench_cache(size)});
    case AllocatorId::kKmemAlloc: return f(KmemAllocAllocator{size});
    case AllocatorId::kGlibc: return f(GlibcAllocator{size});
    default: {
      LoadedAllocator a{size, nullptr, nullptr};
      peer_functions(id, &a.malloc_fn, &a.free_fn);
      return f(a);
    }
  }
}

// vmem arenas over integers (no memory behind them), quantum kVmemQuantum,
// no quantum caches, so every call reaches the arena itself. The usual size
// is a power of two (as the heap window is): taking one quantum from such a
// fresh arena leaves its one free segment below its free list's size class
// (vmem keeps it there as the lazy segment, mm/vmem.cpp, Free lists), and
// freeing it makes it whole again. kVmemOddArenaBytes avoids that, for
// comparison.
constexpr size_t kVmemQuantum = 4096;
constexpr size_t kVmemArenaBytes = size_t{1} << 30;
constexpr size_t kVmemOddArenaBytes = (size_t{3} << 30) / 2;
vmem_t* make_fresh_arena(const char* name, size_t bytes = kVmemArenaBytes);
// A kVmemArenaBytes arena holding `free_segments` free one-quantum segments, each between
// two allocated ones: allocates 2 * free_segments + 1 quanta and frees every
// other one (the allocated quanta stay allocated for the process's life).
vmem_t* make_fragmented_arena(const char* name, unsigned free_segments);

}  // namespace bench
