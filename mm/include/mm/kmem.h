// SPDX-License-Identifier: Apache-2.0
// The kernel memory allocator: object caches with per-CPU magazines, after
// Bonwick, "The Slab Allocator" (1994) and Bonwick & Adams, "Magazines and
// Vmem" (2001), with the Solaris kmem_cache_create(9F) interface.
//
// A host program can use it like libumem: #include <mm/kmem.h>, link the
// CMake target `mm`. The allocator sets itself up on first use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/alloc_tag.h>
#include <mm/flags.h>
#include <mm/platform_inline.h>
#include <mm/vmem.h>

struct kmem_cache;
typedef struct kmem_cache kmem_cache_t;

typedef enum kmem_cbrc {
  KMEM_CBRC_YES,
  KMEM_CBRC_NO,
  KMEM_CBRC_LATER,
  KMEM_CBRC_DONT_NEED,
  KMEM_CBRC_DONT_KNOW
} kmem_cbrc_t;

// kmem_cache_create cflags (Solaris values).
#define KMC_NOTOUCH 0x00010000     // do not touch free buffers (no poisoning)
#define KMC_NODEBUG 0x00020000     // exclude from debugging features
#define KMC_NOMAGAZINE 0x00040000  // no per-CPU magazine layer
#define KMC_NOHASH 0x00080000      // (internal) bookkeeping inside the slab
#define KMC_QCACHE 0x00100000      // (internal) a vmem quantum cache
#define KMC_KMEM_ALLOC 0x00200000  // (internal) a kmem_alloc size cache
// Not leak-tracked: buffers are never kmemleak objects nor scanned (the
// allocators' own metadata; kmemleak's own state).
#define KMC_NOTRACK 0x00400000
// Debug modes for this cache (mm/kmem_debug.h), as illumos's kmem_flags
// KMF_AUDIT, KMF_DEADBEEF, KMF_REDZONE and KMF_CONTENTS give them to every
// cache: KMC_DEBUG_FLAGS(KMF_...) or the KMC_ names below.
#define KMC_DEBUG_SHIFT 24
#define KMC_DEBUG_FLAGS(kmf) ((kmf) << KMC_DEBUG_SHIFT)
#define KMC_AUDIT 0x01000000     // last alloc and free per buffer, and the transaction log
#define KMC_DEADBEEF 0x02000000  // poison: free buffers 0xdeadbeef, new ones 0xbaddcafe
#define KMC_REDZONE 0x04000000   // guard bytes after each buffer, checked on free
#define KMC_CONTENTS 0x08000000  // the log keeps the first bytes of each freed buffer (implies KMC_AUDIT)

kmem_cache_t* kmem_cache_create(const char* name, size_t bufsize, size_t align,
                                int (*constructor)(void* buf, void* priv, int kmflags),
                                void (*destructor)(void* buf, void* priv), void (*reclaim)(void* priv), void* priv,
                                vmem_t* vmp, int cflags);
// Destroying a cache with live objects is reported (name, count) and
// refused: returns false.
bool kmem_cache_destroy(kmem_cache_t* cp);
void* kmem_cache_alloc(kmem_cache_t* cp, int kmflag);
void kmem_cache_free(kmem_cache_t* cp, void* obj);
void kmem_cache_set_move(kmem_cache_t* cp, kmem_cbrc_t (*move)(void* old, void* new_, size_t size, void* priv));
void kmem_cache_move_notify(kmem_cache_t* cp, void* obj);

void* kmem_alloc(size_t size, int kmflag);
void* kmem_zalloc(size_t size, int kmflag);
void kmem_free(void* buf, size_t size);

// Allocation profiling (mm/alloc_tag.h): the tagged entry points, and the
// public names as macros that call them with the call site's tag while the
// allocators' hooks are on (one static branch at the call site: a nop while
// they are off). The macros' own uses of the names call the functions.
void* kmem_cache_alloc_tagged(kmem_cache_t* cp, int kmflag, const mm::AllocTag* tag);
void* kmem_alloc_tagged(size_t size, int kmflag, const mm::AllocTag* tag);
void* kmem_zalloc_tagged(size_t size, int kmflag, const mm::AllocTag* tag);
// kmemtrace's own fast paths, which a call site's three-way static branch
// (MM_ALLOC_HOOKS3; mm/hook_mode.h) calls while kmemtrace alone
// has the hooks on, with the call site's tag (profiling does not count
// then; a miss passes it on).
void* kmem_cache_alloc_trace_only(kmem_cache_t* cp, int kmflag, const mm::AllocTag* tag);
void* kmem_alloc_trace_only(size_t size, int kmflag, const mm::AllocTag* tag);
#define MM_ALLOC_HOOKS(tagged, plain) (::mm::plat::alloc_hooks_on() ? (tagged) : (plain))
// One site (alloc_hooks_mode() once) and one tag (MM_ALLOC_TAG once) per
// call: fn_trace_only / fn_tagged take (a, b, tag), fn (a, b).
#define MM_ALLOC_HOOKS3(fn_trace_only, fn_tagged, fn, a, b)                                       \
  ({                                                                                              \
    ::mm::plat::HookMode mm_mode_ = ::mm::plat::alloc_hooks_mode();                               \
    void* mm_p_;                                                                                  \
    if (mm_mode_ == ::mm::plat::HookMode::kOff) {                                                 \
      mm_p_ = fn((a), (b));                                                                       \
    } else {                                                                                      \
      const ::mm::AllocTag* mm_tag_ = MM_ALLOC_TAG(kKmem);                                        \
      if (mm_mode_ == ::mm::plat::HookMode::kTraceOnly) mm_p_ = fn_trace_only((a), (b), mm_tag_); \
      else mm_p_ = fn_tagged((a), (b), mm_tag_);                                                  \
    }                                                                                             \
    mm_p_;                                                                                        \
  })
#define kmem_cache_alloc(cp, kmflag) \
  MM_ALLOC_HOOKS3(::kmem_cache_alloc_trace_only, ::kmem_cache_alloc_tagged, ::kmem_cache_alloc, cp, kmflag)
#define kmem_alloc(size, kmflag) \
  MM_ALLOC_HOOKS3(::kmem_alloc_trace_only, ::kmem_alloc_tagged, ::kmem_alloc, size, kmflag)
#define kmem_zalloc(size, kmflag) \
  MM_ALLOC_HOOKS(::kmem_zalloc_tagged((size), (kmflag), MM_ALLOC_TAG(kKmem)), ::kmem_zalloc((size), (kmflag)))

namespace mm {

struct KmemCacheStats {
  char name[32];
  uint64_t bufsize, align, chunksize;
  uint64_t buf_inuse, buf_total, buf_constructed;
  uint64_t slabs, slab_size, objs_per_slab, color_max;
  uint64_t allocs, frees, alloc_fail, ctor_fail;
  uint64_t slab_creates, slab_destroys;
  uint64_t magazine_size, depot_full, depot_empty, depot_contention;
  uint64_t reaps, moves_yes, moves_no, moves_later, moves_dont_need, moves_dont_know;
  uint64_t cpu_rounds;  // objects held in per-CPU magazines
  uint64_t pages;       // pages held by the cache's slabs
  bool offslab;         // bookkeeping kept outside the slab
  uint32_t owner_id;    // an off-slab heap cache's owner id (the free's check), 0 if it has none
  const char* arena;
};
void kmem_cache_stats(const kmem_cache_t* cp, KmemCacheStats& out);
void kmem_cache_walk(void (*fn)(const kmem_cache_t* cp, void* arg), void* arg);

// Reaping: every cache gives back its depot's unused working set, empty
// slabs and (with `all`) every magazine, so pages return to the page
// allocator. Called periodically and under memory pressure.
void kmem_reap(bool all = false);
// One pass of the consolidator over caches with a move callback.
void kmem_move_pass();
// Bytes held by the slabs of caches whose memory is page-backed (every cache
// but vmem quantum caches over integer arenas).
uint64_t kmem_slab_bytes();
// Where the heap's kmem memory is, for allocation profiling's totals
// (allocinfo --totals): a snapshot, exact when nothing allocates or frees
// meanwhile.
struct KmemBooks {
  uint64_t slab_bytes_profiled;   // slabs of heap caches allocation profiling counts (not the allocators' own)
  uint64_t live_bytes_profiled;   // their buffers allocated to callers (each its chunk)
  uint64_t slab_bytes_internal;   // slabs of the allocators' own heap caches
  uint64_t large_bytes;           // large kmem_alloc allocations, the allocators' own included
  uint64_t large_internal_bytes;  // of which the allocators' own
};
void kmem_books(KmemBooks& out);
// Pages kmem took straight from the page allocator for its own bookkeeping
// (cache structures, off-slab hash tables, the heap page index) and for its
// debugging features' stack depot (mm/stackdepot.h).
uint64_t kmem_metadata_pages();

// Errors kmem and vmem detect on bad input (double free, foreign pointer,
// wrong cache, wrong size, destroy with live objects...). The default hook
// logs the report and the bad operation is refused; tests may install their
// own to capture it.
struct MemDetail;  // what a debug mode found (mm/kmem_debug.h)
struct MemError {
  const char* kind;   // "double free", "free of unallocated buffer", ...
  const char* where;  // cache or arena name
  uintptr_t address;
  uintptr_t caller;
  uint64_t detail;  // size passed, count outstanding, ...
  // Reports of the debug modes: the buffer, the bytes found and its audit
  // trail (null otherwise). Valid during the hook only.
  const MemDetail* more = nullptr;
};
using MemErrorHook = void (*)(const MemError& e);
MemErrorHook set_error_hook(MemErrorHook hook);
void report_error(const MemError& e);
uint64_t error_count();

// Brings up vmem and kmem over the page allocator (page_init first). The
// kernel calls it at boot; on the host it runs on first use.
void kmem_init();
// The cache kmem_alloc's size tables name before kmem_init: every
// allocation from it fails and every free is refused, each with a report
// ("kmem_alloc before kmem_init", "kmem_free before kmem_init"). (On the
// host, kmem_alloc itself brings kmem up when it meets it.)
kmem_cache_t* kmem_no_class();
bool kmem_ready();

}  // namespace mm
