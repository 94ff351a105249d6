// SPDX-License-Identifier: Apache-2.0
// kmem: object caches with per-CPU magazines (Bonwick 1994, Bonwick & Adams
// 2001), with the Solaris kmem_cache_create(9F) interface.
//
// 1. Concepts. A cache hands out buffers of one size, kept constructed
//    between free and alloc. Three layers, each in its own file (the list is
//    in kmem_cache.h): per-CPU magazines (kmem_fastpath.h, kmem_magazine.cpp:
//    no lock; restartable sections or interrupts masked, section 7), the depot of full and empty magazines
//    (kmem_magazine.cpp: one lock per cache), and slabs carved into buffers
//    (kmem_slab.cpp). kmem_alloc's size classes are ordinary caches
//    (kmem_alloc.cpp); the consolidator moves objects out of sparse slabs
//    (kmem_consolidate.cpp); kmem_whatis.cpp maps any address to its owner.
// 2. This file: creating and destroying caches, the cache list, kmem_init,
//    statistics and the public kmem_cache_alloc/kmem_cache_free.
// 3. The cache list. Every cache is on one list (creation order) guarded by
//    g_caches_lock, which is taken with interrupts masked and held only to
//    step along the list. A cache is published by linking it, fully
//    initialised, under the lock: the unlock releases its fields, the next
//    walker's lock acquires them. Walkers (reaping, per-CPU flushes, reclaim
//    callbacks, the consolidator, kmem_cache_walk, statistics) hold a
//    reference on the cache they are at (cache_next), never the lock, so a
//    walker may call anything, a reclaim callback may destroy its own cache.
//    kmem_cache_destroy empties the cache and marks it dead under the lock;
//    walkers skip dead caches; the cache is unlinked and freed when its last
//    reference goes (at once when there is none).
// 4. Locking order: g_caches_lock and the per-cache depot_lock and
//    slab_lock are leaves: none is held while taking another, or while
//    calling a constructor, destructor, callback, vmem or another cache.
// 5. Bad input is reported through mm::report_error (report.cpp) with the
//    cache name, the address and the caller, and refused:
//      - on the free fast path, every cache checks that the buffer belongs
//        to it (kmem_fastpath.h): catches frees to the wrong cache, wrong
//        kmem_free sizes and pointers into no slab of the cache, for
//        on-slab caches through the slab header, for off-slab caches
//        through the heap page index;
//      - an immediate double free (the buffer on top of the magazine) is
//        caught on the free;
//      - at the slab layer, the free bitmap and the buffer's index catch the
//        other double frees and pointers that are no buffer boundary;
//      - kmem_cache_destroy with live objects is refused and reported
//        (with the live buffers and who allocated them, for an audited
//        cache);
//      - the slab free list's links are checked when followed
//        (kmem_slab.cpp, Free-list hardening), and a debugged cache checks
//        every buffer's redzone, poison and state (kmem_debug.cpp);
//      - requests that can never be met (a buffer larger than the arena can
//        ever provide, a kmem_alloc larger than the heap) are refused with a
//        report, whatever the sleep flag says.
// 6. Allocated or free? A buffer in a per-CPU magazine or in the depot is
//    free, though the slab layer counts it out. Two ways to know that state
//    per buffer:
//      - a bit per buffer kept by the fast paths (set on alloc; tested and
//        cleared on free, in the slab header, indexed by the buffer's page
//        offset / 8): it makes a magazine-hit alloc+free pair of on-slab
//        buffers about half as dear again (host, callgrind). It would also
//        catch, on the free itself, a double free of a buffer deeper in a
//        magazine and an interior pointer, which otherwise reach the slab
//        layer first;
//      - asking when needed: kmem_whatis (and the leak scanner) stop the
//        other CPUs (plat::stop_others) and search every CPU's magazines
//        and the depot for that cache: nothing on the fast path, a pause of
//        the other CPUs per query for a walk of CPUs x magazine rounds.
//    The fast path is the product's reason to exist: kmem asks when needed.
//    Per-buffer state belongs to the debug modes (kmem_debug.cpp): a
//    debugged cache has a tag per buffer and no magazines, so its checks
//    cost its own operations, and nothing on any fast path tests for them.
// 7. Interrupts and the per-CPU layer. A CPU's CpuCache is changed by that
//    CPU only, and by its interrupt handlers (which may allocate and free:
//    kmemtrace, the timer; cross-calls flush magazines, cpu_flush; a freeze
//    for kmem_whatis reads them). Two ways keep an interrupt from landing
//    in the middle of an update:
//      - restartable sections (kernel/include/kernel/rseq.h), where the
//        platform has them (plat::kRestartable: the kernel on arm64,
//        riscv64 and arm): the untraced magazine pop and push each end in
//        one commit store (CpuCache::top), and the push's count of frees is a
//        section of its own right after (allocations are not counted but
//        derived: kmem_cache.h, CpuCache::extra), with interrupts
//        enabled; an interrupt inside one rewinds it to its start before
//        any handler runs, so handlers always see a magazine either before
//        or after an operation. No masking on the magazine-hit paths;
//      - interrupts masked everywhere else. Where a section cannot be made
//        restartable, masking stays: the hooked copies while kmemtrace
//        records beside another hook, or on the Cortex-M3 (the record is
//        written inside the same critical section as the pop or push, so
//        that it is there before the buffer can change hands; while
//        kmemtrace alone has the hooks on, arm64, arm and riscv64 write it
//        as a restartable section of its own, after the pop and before the
//        push: kmem_fastpath.h, kmemtrace's fast paths, and trace/record.h;
//        with only kmemleak or profiling on, the hooked copies run the
//        restartable sections and stamp afterwards), the slow paths
//        (kmem_magazine.cpp: swaps and depot trades change several words and
//        take the depot lock), the unmagazined counters (alloc_unmagazined,
//        free_unmagazined: off the fast path), cpu_flush's detach, and the
//        host (no interrupts: masking is free there and a thread is its CPU).
//    Both agree because neither is ever interrupted halfway from this
//    CPU's point of view: a masked update cannot be, a restartable one is
//    undone. Memory order: none is needed on these paths. Only this CPU
//    and its handlers write its slot, and a CPU observes its own accesses
//    in program order, interrupts included; other CPUs read a slot only
//    while this one is stopped (kmem_whatis, the leak scanner:
//    stop_others and freeze_others order what it wrote before it stopped),
//    through a cross-call run on it (cpu_flush from plat::on_each_cpu,
//    ordered by the call's mailbox), when the cache is no longer used
//    (kmem_cache_destroy), or for statistics (kmem_cache_stats: racy by
//    design, kmem_cache.h).
#include <mm/segkmem.h>
#include <mm/stackdepot.h>
#include <mm/vmem.h>
#include <new>
#include "heap_index.h"
#include "kmem_fastpath.h"
#include "kmemleak_meta.h"

namespace mm {

bool g_ready;  // see kmem_cache.h

namespace {

plat::Lock g_caches_lock;
kmem_cache_t* g_caches;       // first cache (creation order)
kmem_cache_t* g_caches_last;  // last cache, where creation appends
uint64_t g_meta_pages;        // pages of cache structures and hash tables (relaxed: statistics only)

void copy_name(char* dst, const char* src) {
  unsigned i = 0;
  for (; src && src[i] && i + 1 < kNameLen; i++) dst[i] = src[i];
  dst[i] = 0;
}

bool is_pow2(size_t v) { return v && !(v & (v - 1)); }

// The free-list links' secret (kmem_slab.cpp, Free-list hardening): the cycle
// counter, the time and the cache's address, mixed (splitmix64's finaliser).
uint32_t link_secret_for(const kmem_cache_t* cp) {
  static uint64_t counter;
  uint64_t x = plat::cycles() ^ plat::ticks() << 32 ^ reinterpret_cast<uintptr_t>(cp) ^
               __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(x ^ (x >> 31));
}

// Cache structures: several to a metadata page (a kmem_cache is 704 bytes
// on mps2-an385's one core, 1152 on 32-bit ARM and 1216 on 64-bit with 8
// cores: mostly one 64-byte CpuCache per core; a page each would cost a board with
// 64 pages of RAM half of it for the size classes alone). Free slots wait
// on g_free_structs; a page's count (its Page::count) is its slots in use,
// and a page whose last slot is freed goes back, its other slots taken off
// the list first. Under g_struct_lock (cache creation and destruction only).
// (Where a structure is larger than half a page, the host's with its many
// CPU slots, each takes its own block of pages.)
constexpr size_t kStructBytes = (sizeof(kmem_cache) + 63) / 64 * 64;
constexpr unsigned kStructsPerPage = kPageBytes / kStructBytes;
constexpr unsigned struct_order() {
  unsigned order = 0;
  while ((kPageBytes << order) < sizeof(kmem_cache)) order++;
  return order;
}
struct FreeStruct {
  FreeStruct* next;
};
plat::Lock g_struct_lock;
FreeStruct* g_free_structs;

kmem_cache_t* cache_alloc_struct() {
  if constexpr (kStructsPerPage < 2) {
    void* p = meta_alloc(struct_order(), KM_SLEEP);
    __builtin_memset(p, 0, kPageBytes << struct_order());
    return new (p) kmem_cache;
  }
  // A slot is counted in its page's count in the same critical section
  // that takes it: between the two, the page's last other slot could be
  // freed, and the page with it (cache_free_struct), under the slot taken.
  void* p = nullptr;
  {
    Guard<> g(g_struct_lock);
    if (FreeStruct* f = g_free_structs) {
      g_free_structs = f->next;
      p = f;
      Page* pg = page_of(p);
      MM_ASSERT(pg);
      pg->count++;
    }
  }
  if (!p) {
    auto* page = static_cast<char*>(meta_alloc(0, KM_SLEEP));
    Page* pg = page_of(page);
    MM_ASSERT(pg);
    Guard<> g(g_struct_lock);
    pg->count++;  // slot 0, ours, before the others can be taken and freed
    for (unsigned i = kStructsPerPage; i-- > 1;) {
      auto* f = reinterpret_cast<FreeStruct*>(page + i * kStructBytes);
      f->next = g_free_structs;
      g_free_structs = f;
    }
    p = page;
  }
  __builtin_memset(p, 0, kStructBytes);
  return new (p) kmem_cache;
}

void cache_free_struct(kmem_cache_t* cp) {
  cp->~kmem_cache();
  if constexpr (kStructsPerPage < 2) {
    meta_free(cp, struct_order());
    return;
  }
  auto* f = reinterpret_cast<FreeStruct*>(cp);
  uintptr_t page = reinterpret_cast<uintptr_t>(cp) & ~(uintptr_t{kPageBytes} - 1);
  Page* pg = page_of(cp);
  {
    Guard<> g(g_struct_lock);
    if (--pg->count != 0) {
      f->next = g_free_structs;
      g_free_structs = f;
      return;
    }
    // The page's last structure: its other slots leave the free list.
    for (FreeStruct** pp = &g_free_structs; *pp;) {
      if ((reinterpret_cast<uintptr_t>(*pp) & ~(uintptr_t{kPageBytes} - 1)) == page) *pp = (*pp)->next;
      else pp = &(*pp)->next;
    }
  }
  meta_free(reinterpret_cast<void*>(page), 0);
}

// Allocation profiling's per-CPU counter bases, for the profiled fast
// paths (kmem_fastpath.h, Profiled fast paths): only on-slab caches that keep
// references.
// Under g_caches_lock, so that a cache created while the counters appear
// gets them from one side or the other.
// Not for caches without magazines (a debugged cache among them): their
// allocations take the slow path anyway, and their frees must go through
// the hooked copy's exact reference lookup (a debugged cache refuses an
// interior pointer only after the free path has run).
void prof_bases_copy(kmem_cache_t* cp) {
  assert_held(g_caches_lock);
  if (!cp->profiled || cp->offslab || (cp->flags & KMC_NOMAGAZINE)) return;
  for (unsigned c = 0; c < plat::kCpuSlots; c++) {
    CpuCache& cc = cp->cpu[c];
    cc.prof_refs = prof_refs_pack();
    cc.prof = prof_counter_base(c);  // last: the fast paths test it (ordered for them by counters_ready's cross-call)
  }
}

// Owner ids (kmem_cache.h, OwnerCheck): bit i set = id i is some cache's.
// Id 0 is no cache's (a page with no id). Under g_caches_lock.
uint64_t g_owner_ids_used[kOwnerIds / 64] = {1};

// An id for a cache being published, or kOwnerIndex when every one is
// taken (its frees then take the page index's check).
uint32_t owner_id_take() {
  assert_held(g_caches_lock);
  for (unsigned w = 0; w < kOwnerIds / 64; w++) {
    if (uint64_t free = ~g_owner_ids_used[w]) {
      unsigned b = static_cast<unsigned>(__builtin_ctzll(free));
      g_owner_ids_used[w] |= uint64_t{1} << b;
      return w * 64 + b;
    }
  }
  return kOwnerIndex;
}

// Gives back the id of a cache whose every slab is gone: no page carries
// it any more, so the next cache to take it cannot match a stale one.
void owner_id_give(kmem_cache_t* cp) {
  if (!owner_has_id(cp->owner_check)) return;
  Guard<> g(g_caches_lock);
  g_owner_ids_used[cp->owner_check / 64] &= ~(uint64_t{1} << (cp->owner_check % 64));
}

void unlink(kmem_cache_t* cp) {
  assert_held(g_caches_lock);
  if (cp->list_prev) cp->list_prev->list_next = cp->list_next;
  else g_caches = cp->list_next;
  if (cp->list_next) cp->list_next->list_prev = cp->list_prev;
  else g_caches_last = cp->list_prev;
}

// Frees a destroyed cache nobody holds any more (unlinked, no lock held).
// A walker that held it may have left magazines or an empty slab behind
// (a reap, a consolidator pass): those go first.
void cache_teardown(kmem_cache_t* cp) {
  for (unsigned i = 0; i < plat::kCpuSlots; i++) cpu_flush(cp, i);
  depot_reap(cp, true);
  slab_reap(cp);
  MM_ASSERT(cp->buf_slab_inuse == 0 && cp->buf_total == 0);
  owner_id_give(cp);
  if (cp->hash && cp->hash != cp->hash0) {
    size_t bytes = cp->hash_buckets * sizeof(HashEnt*);
    unsigned order = 0;
    while ((kPageBytes << order) < bytes) order++;
    meta_free(cp->hash, order);
  }
  cache_free_struct(cp);
  slab_reap_all();  // off-slab headers freed above may have emptied size-cache slabs
}

__attribute__((noinline, cold)) void report_owner(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  // The page index tells a buffer of another cache from a stranger.
  const Slab* sp = slab_of_heap_address(reinterpret_cast<uintptr_t>(obj));
  const kmem_cache_t* owner = sp ? sp->cache : nullptr;
  uintptr_t start;
  size_t size;
  if (owner && (cp->flags & KMC_KMEM_ALLOC) && (owner->flags & KMC_KMEM_ALLOC))
    report("kmem_free with the wrong size (the buffer belongs to another size class)", cp->name, obj, caller,
           owner->bufsize);
  else if (owner)
    report("free to the wrong cache (the buffer belongs to another cache)", cp->name, obj, caller, owner->bufsize);
  else if ((cp->flags & KMC_KMEM_ALLOC) && segkmem_large_span(reinterpret_cast<uintptr_t>(obj), start, size))
    report("kmem_free with the wrong size (the buffer is a large allocation)", cp->name, obj, caller, size);
  else if (!obj)
    report("free of a null pointer", cp->name, obj, caller);
  else
    report("free of a pointer kmem never allocated", cp->name, obj, caller);
}

__attribute__((noinline, cold)) void report_double_free(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report("double free", cp->name, obj, caller);
}

}  // namespace

void report(const char* kind, const char* where, const void* addr, uintptr_t caller, uint64_t detail) {
  report_error(MemError{kind, where, reinterpret_cast<uintptr_t>(addr), caller, detail});
}

void* meta_alloc(unsigned order, int kmflag) {
  void* p = page_alloc_va(order, kmflag);
  if (p) __atomic_fetch_add(&g_meta_pages, uint64_t{1} << order, __ATOMIC_RELAXED);
  return p;
}

void meta_free(void* p, unsigned order) {
  page_free_va(p, order);
  __atomic_fetch_sub(&g_meta_pages, uint64_t{1} << order, __ATOMIC_RELAXED);
}

// ---------------------------------------------------------------------------
// The cache list.

kmem_cache_t* cache_next(kmem_cache_t* prev) {
  kmem_cache_t* next;
  {
    Guard<> g(g_caches_lock);
    next = prev ? prev->list_next : g_caches;
    while (next && next->dead) next = next->list_next;
    if (next) next->refs++;
  }
  if (prev) cache_put(prev);
  return next;
}

kmem_cache_t* cache_list_first() { return g_caches; }
plat::Lock& cache_list_lock() { return g_caches_lock; }

void cache_put(kmem_cache_t* cp) {
  bool teardown = false;
  {
    Guard<> g(g_caches_lock);
    MM_ASSERT(cp->refs > 0);
    if (--cp->refs == 0 && cp->dead) {
      unlink(cp);
      teardown = true;
    }
  }
  if (teardown) cache_teardown(cp);
}

// ---------------------------------------------------------------------------
// Creation.

kmem_cache_t* cache_create(const char* name, size_t bufsize, size_t align, int (*ctor)(void*, void*, int),
                           void (*dtor)(void*, void*), void (*reclaim)(void*), void* priv, vmem_t* vmp,
                           int cflags) {
  uintptr_t caller = caller_of_api();
  const char* shown = name ? name : "anonymous";
  if (bufsize == 0) {
    report("kmem_cache_create with buffer size 0", shown, nullptr, caller, 0);
    return nullptr;
  }
  if (align == 0) align = kMinAlign;
  if (!is_pow2(align)) {
    report("kmem_cache_create with an alignment that is not a power of two", shown, nullptr, caller, align);
    return nullptr;
  }
  if (align < kMinAlign && !(cflags & KMC_QCACHE)) align = kMinAlign;
  vmem_t* arena = vmp ? vmp : segkmem_default_arena();
  VmemStats vs;
  vmem_stats(arena, vs);
  size_t quantum = static_cast<size_t>(vs.quantum);
  if (cflags & KMC_QCACHE) align = quantum;
  // A buffer (with its alignment) the arena can never provide would make
  // every allocation fail, or KM_SLEEP wait for ever: refuse the cache.
  // The buffer rounded up to its alignment, checked not to wrap first: with
  // an arena of unbounded reach (an import function and no source), a
  // bufsize near SIZE_MAX wrapped to a chunk of 0 and cache setup divided
  // by it.
  uint64_t capacity = vmem_capacity(arena);
  bool fits = bufsize <= SIZE_MAX - (align - 1);
  size_t chunk = fits ? (bufsize + align - 1) / align * align : 0;
  if (!fits || chunk > capacity || align > capacity) {
    report("kmem_cache_create with a buffer size the arena can never provide", shown, nullptr, caller, bufsize);
    return nullptr;
  }
  kmem_cache_t* cp = cache_alloc_struct();
  copy_name(cp->name, shown);
  cp->bufsize = bufsize;
  cp->align = align;
  cp->chunk = chunk;
  cp->ctor = ctor;
  cp->dtor = dtor;
  cp->reclaim = reclaim;
  cp->priv = priv;
  cp->arena = arena;
  cp->flags = static_cast<uint32_t>(cflags);
  copy_name(cp->arena_name, vs.name);
  bool heap_memory = vmem_imports_from(arena, segkmem_heap_arena());
  cp->debug = debug_flags_for(cp->name, cflags, heap_memory);
  if (cp->debug) debug_layout(cp);  // the buffer tag after each buffer; no magazines
  cache_layout(cp, quantum);
  // The on-slab free list's link: the first word of a free buffer, or its
  // tag's (kmem_debug.cpp, The layout), stored xor a key (kmem_slab.cpp,
  // Free-list hardening).
  if (cp->debug && !cp->offslab) cp->link_off = cp->tag_off + 16;
  cp->link_secret = link_secret_for(cp);
  if (cp->slab_size > capacity) {
    report("kmem_cache_create with a buffer size the arena can never provide", shown, nullptr, caller, bufsize);
    cache_free_struct(cp);
    return nullptr;
  }
  if (!cp->offslab) cp->owner_check = kOwnerOnSlab;
  else if (heap_memory) cp->owner_check = kOwnerIndex;
  else cp->owner_check = kOwnerNone;
  // kmemleak objects: buffers of heap memory that are nobody's bookkeeping.
  cp->tracked = !(cflags & (KMC_NOTRACK | KMC_QCACHE)) && heap_memory;
  cp->profiled = cp->tracked;  // the allocators' own caches (KMC_NOTRACK) take their references from the internal ladder
  cp->prof_recip = static_cast<uint32_t>(((uint64_t{1} << 32) + cp->chunk - 1) / cp->chunk);
  cp->prof_shift = 63 - static_cast<uint32_t>(__builtin_clzll(cp->chunk));
  cp->prof_delta = prof_delta(cp->chunk);
  if (cp->offslab) {
    cp->hash = cp->hash0;  // zeroed with the structure
    cp->hash_buckets = kmem_cache::kHash0Buckets;
  }
  cp->magtype = initial_magtype(cp->chunk);
  // Publish: linked under the lock, whose release orders every store above
  // before the link; walkers read the list only under the lock (acquire).
  // Callers that get cp from the return value are ordered by their own
  // thread (kmem_cache_create) or by kmem_init's release of g_ready
  // (magazine and size caches).
  Guard<> g(g_caches_lock);
  if (cp->owner_check == kOwnerIndex) cp->owner_check = owner_id_take();  // no slab yet: no page to mark
  cp->ids_base = g_heap_index.base;
  // A cache with no id gets no span: its frees skip the array's load
  // (integer arenas' caches among them, whose check is only for null).
  cp->ids_span = owner_has_id(cp->owner_check) ? g_heap_index.id_span : 0;
  cp->ids = g_heap_index.ids;
  prof_bases_copy(cp);  // under the lock: kmem_prof_bases_set sets them for the caches it finds linked
  cp->list_prev = g_caches_last;
  cp->list_next = nullptr;
  if (g_caches_last) g_caches_last->list_next = cp;
  else g_caches = cp;
  g_caches_last = cp;
  return cp;
}

// ---------------------------------------------------------------------------
// Set-up.

void kmem_prof_bases_set() {
  Guard<> g(g_caches_lock);
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next) prof_bases_copy(cp);
}

namespace {
// What vmem asks of kmem (vmem.h: VmemCacheLayer), registered at init.
kmem_cache_t* qcache_create(const char* name, size_t size, size_t align, vmem_t* arena) {
  return cache_create(name, size, align, nullptr, nullptr, nullptr, nullptr, arena, KMC_QCACHE | KMC_NOTOUCH);
}
void qcache_usage(const kmem_cache_t* cp, uint64_t& out, uint64_t& slabs, uint64_t& slab_bytes) {
  KmemCacheStats ks;
  kmem_cache_stats(cp, ks);
  out = ks.buf_inuse;
  slabs = ks.slabs;
  slab_bytes = ks.slabs * ks.slab_size;
}
constexpr VmemCacheLayer kVmemLayer = {qcache_create, kmem_cache_destroy, kmem_cache_alloc, kmem_cache_free,
                                       qcache_usage, [] { kmem_reap(false); }};
}  // namespace

bool kmem_ready() { return __atomic_load_n(&g_ready, __ATOMIC_ACQUIRE); }

// Once. A second caller waits on init_lock while the first runs, so it
// returns after kmem is up (the lock orders it; g_ready's plain read here is
// under the lock that its only store is made under).
void kmem_init() {
  static plat::Lock init_lock;
  Guard<> g(init_lock);
  if (g_ready) return;
  debug_init();    // the host's MM_KMEM_DEBUG, before the first cache
  prof_host_init();  // the host's MM_MEM_PROFILING, before the page allocator
  segkmem_init();  // page allocator, heap and kmem_default arenas
  internal_init();  // off-slab headers and kmemleak's records come from these
  // Magazine caches next: every other cache's free path may need them.
  magazine_init();
  kmem_alloc_init();
  plat::set_cpu_exit_hook([] { flush_this_cpu(nullptr); });
  page_set_reclaim_hook(reap_local);
  __atomic_store_n(&g_ready, true, __ATOMIC_RELEASE);  // releases all of the above
  g.unlock();
  vmem_set_cache_layer(&kVmemLayer);
  debug_init_done();
  prof_host_start();
}

// ---------------------------------------------------------------------------
// Statistics and walking.

MM_RACY_STATS_READER void kmem_cache_stats(const kmem_cache_t* cp, KmemCacheStats& o) {
  auto* c = const_cast<kmem_cache_t*>(cp);
  o = KmemCacheStats{};
  copy_name(o.name, cp->name);
  o.bufsize = cp->bufsize;
  o.align = cp->align;
  o.chunksize = cp->chunk;
  o.slab_size = cp->slab_size;
  o.objs_per_slab = cp->objs_per_slab;
  o.color_max = cp->color_max;
  o.offslab = cp->offslab;
  o.owner_id = owner_has_id(cp->owner_check) ? cp->owner_check : 0;
  o.arena = cp->arena_name;
  uint64_t cpu_rounds = 0, frees = 0;
  // Allocations are derived (kmem_cache.h, CpuCache::extra): frees plus
  // the sum of every CPU's extra - rounds held, taken modulo the word and
  // then as signed (allocations minus frees, which a snapshot taken while
  // a CPU is between two of its stores may catch a little off, either
  // way, on any one CPU).
  uintptr_t outstanding = 0;
  for (unsigned i = 0; i < plat::kMaxCpus; i++) {
    const CpuCache& cc = cp->cpu[i];
    auto held = static_cast<uintptr_t>(cc.racy_rounds() + MM_RACY_READ(cc.prounds));
    cpu_rounds += held;
    frees += MM_RACY_READ(cc.frees);
    outstanding += MM_RACY_READ(cc.extra) - held;
  }
  uint64_t allocs = frees + static_cast<uint64_t>(static_cast<int64_t>(static_cast<intptr_t>(outstanding)));
  uint64_t depot_rounds = 0;
  {
    Guard<> g(c->depot_lock);
    o.magazine_size = cp->flags & KMC_NOMAGAZINE ? 0 : magtype_rounds(cp->magtype);
    o.depot_full = cp->full_mags.count;
    o.depot_empty = cp->empty_mags.count;
    o.depot_contention = cp->depot_contention;
    for (const Magazine* m = cp->full_mags.head; m; m = m->next) depot_rounds += m->cap;
  }
  uint64_t slab_inuse;
  {
    Guard<> g(c->slab_lock);
    o.buf_total = cp->buf_total;
    o.slabs = cp->partial.count + cp->full.count + cp->empty.count;
    o.pages = o.slabs * cp->slab_size / kPageBytes;
    o.alloc_fail = cp->alloc_fail;
    o.ctor_fail = cp->ctor_fail;
    o.slab_creates = cp->slab_creates;
    o.slab_destroys = cp->slab_destroys;
    o.moves_yes = cp->moves[KMEM_CBRC_YES];
    o.moves_no = cp->moves[KMEM_CBRC_NO];
    o.moves_later = cp->moves[KMEM_CBRC_LATER];
    o.moves_dont_need = cp->moves[KMEM_CBRC_DONT_NEED];
    o.moves_dont_know = cp->moves[KMEM_CBRC_DONT_KNOW];
    slab_inuse = cp->buf_slab_inuse;
  }
  o.reaps = ld_relaxed(cp->reaps);  // statistics only
  o.cpu_rounds = cpu_rounds;
  o.buf_constructed = cpu_rounds + depot_rounds;
  o.buf_inuse = slab_inuse > o.buf_constructed ? slab_inuse - o.buf_constructed : 0;
  o.allocs = allocs;
  o.frees = frees;
}

void kmem_cache_walk(void (*fn)(const kmem_cache_t*, void*), void* arg) {
  for_each_cache([&](kmem_cache_t* cp) { fn(cp, arg); });
}

uint64_t kmem_slab_bytes() {
  uint64_t total = 0;
  for_each_cache([&](kmem_cache_t* cp) {
    Guard<> g(cp->slab_lock);
    if (!(cp->flags & KMC_QCACHE)) total += (cp->partial.count + cp->full.count + cp->empty.count) * cp->slab_size;
  });
  return total;
}

void kmem_books(KmemBooks& out) {
  out = KmemBooks{};
  for_each_cache([&](kmem_cache_t* cp) {
    if ((cp->flags & KMC_QCACHE) || cp->owner_check == kOwnerNone) return;  // not heap memory
    uint64_t slabs;
    {
      Guard<> g(cp->slab_lock);
      slabs = (cp->partial.count + cp->full.count + cp->empty.count) * cp->slab_size;
    }
    if (!cp->profiled) {
      out.slab_bytes_internal += slabs;
      return;
    }
    KmemCacheStats st;
    kmem_cache_stats(cp, st);
    out.slab_bytes_profiled += slabs;
    out.live_bytes_profiled += st.buf_inuse * cp->chunk;
  });
  segkmem_for_each_large(
      [](uintptr_t start, size_t size, void* arg) {
        auto& b = *static_cast<KmemBooks*>(arg);
        b.large_bytes += size;
        LargeLeakWords w;
        if (segkmem_large_leak_words(start, w) && (*w.w[LargeLeakWords::kFlagsWord] & kLargeUntracked))
          b.large_internal_bytes += size;
      },
      &out);
}

uint64_t kmem_metadata_pages() {
  return __atomic_load_n(&g_meta_pages, __ATOMIC_RELAXED) + segkmem_index_pages() + stackdepot_pages() +
         kmemleak_metadata_pages() + (prof_metadata_bytes() + kPageBytes - 1) / kPageBytes;
}

// ---------------------------------------------------------------------------
// The fast paths' cold paths (kmem_fastpath.h). Untraced, they are tail
// calls, so their own return address is the caller of the entry point.

__attribute__((noinline, cold)) void report_wrong_owner(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report_owner(cp, obj, caller);
}
// The page index decides what the fast path's owner check could not
// (kmem_fastpath.h, wrong_owner): cp's buffer after all (an off-slab cache
// with no id, a page past the ids; a slab diverted for kmemleak, Slab::check,
// whose buffer's annotation leaves with it first) is freed as the fast path
// frees it: recorded first if kmemtrace records (the record precedes the
// push, as on the masked path), then the magazine push with its test of the
// buffer on top (an immediate double free), else the slow path. Anything
// else is reported. Null is nobody's (page 0 of a physical heap may be a
// slab's).
namespace {
// A slab of cp whose frees go out of line holds obj: its annotation, if
// it keeps one, is dropped (kmemleak_meta.h, Annotations).
bool diverted_slab_holds(kmem_cache_t* cp, void* obj) {
  auto a = reinterpret_cast<uintptr_t>(obj);
  Slab* sp = slab_of_heap_address(a);
  if (!sp || sp->cache != cp) return false;
  if (leak_free_diverted(cp, sp, a) & kLeakAreas) leak_forget_areas(a);
  return true;
}

template <bool kRecord>
__attribute__((always_inline)) inline void bad_owner_body(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  if (!obj || cp->owner_check == kOwnerNone) return report_owner(cp, obj, caller);
  // Off-slab: the index's answer (through the slabs' check words) first.
  bool mine = owner_heap_offslab(cp->owner_check) && owner_by_index(cp, obj);
  if (!mine && !diverted_slab_holds(cp, obj)) return report_owner(cp, obj, caller);
  if constexpr (kRecord)
    kmemtrace::record_free(cp->flags & KMC_KMEM_ALLOC ? kmemtrace::kTypeKmalloc : kmemtrace::kTypeCache, caller,
                           obj);
  plat::RseqPush r = magazine_push(cp, cpu_base(cp), obj);
  if (r == plat::kRseqPushed) return;
  if (r == plat::kRseqOnTop) return report_double_free(cp, obj, caller);
  free_slow(cp, obj, caller);
}
}  // namespace
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void free_bad_owner(kmem_cache_t* cp, void* obj,
                                                                        uintptr_t caller) {
  bad_owner_body<true>(cp, obj, caller ? caller : caller_of_api());
}
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void free_bad_owner_untraced(kmem_cache_t* cp, void* obj,
                                                                                 uintptr_t caller) {
  bad_owner_body<false>(cp, obj, caller ? caller : caller_of_api());
}
__attribute__((noinline, cold)) void free_twice(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report_double_free(cp, obj, caller ? caller : caller_of_api());
}
__attribute__((noinline)) void free_slow_entry(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  free_slow(cp, obj, caller ? caller : caller_of_api());
}
__attribute__((noinline, cold)) void free_twice_at(char* base, void* obj, uintptr_t caller) {
  report_double_free(cache_at(base), obj, caller ? caller : caller_of_api());
}
__attribute__((noinline)) void free_slow_at(char* base, void* obj, uintptr_t caller) {
  free_slow(cache_at(base), obj, caller ? caller : caller_of_api());
}
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void* alloc_failslab(kmem_cache_t* cp, int kmflag, uint8_t type, size_t requested,
                                                     uintptr_t caller, const AllocTag* tag) {
  if ((kmflag & KM_NOSLEEP) && failslab_should_fail(cp->name, cp->bufsize)) return nullptr;
  return cache_alloc<true, false>(cp, kmflag, type, requested, caller, tag);
}
__attribute__((noinline)) void* alloc_stamp(kmem_cache_t* cp, void* obj, uintptr_t caller, const AllocTag* tag) {
  if (!leak_stamping()) return prof_stamp_irq(cp, obj, tag);
  prof_stamp_irq(cp, obj, tag);
  return leak_stamp(cp, obj, caller ? caller : caller_of_api());  // no size: four arguments at most
}
MM_RESTARTABLE_TEXT __attribute__((noinline)) void free_unstamp(kmem_cache_t* cp, void* obj, uint8_t type, uintptr_t caller) {
  if (!caller) caller = caller_of_api();
  prof_unstamp(cp, obj, caller);
  cache_free<true, false>(cp, obj, type, caller);
}
__attribute__((noinline)) void* alloc_slow_prof(kmem_cache_t* cp, int kmflag, size_t requested,
                                                const AllocTag* tag) {
  return alloc_slow_prof_from(cp, kmflag, requested, tag, caller_of_api());
}
__attribute__((noinline)) void* alloc_slow_traced(kmem_cache_t* cp, int kmflag, uint8_t type, size_t requested,
                                                  uintptr_t caller, const AllocTag* tag) {
#if !defined(MM_KERNEL)
  // kmem_alloc's first use on the host, through a hooked copy
  // (kmem_alloc.cpp, Before kmem_init).
  if (__builtin_expect(cp == &g_no_class, 0) && type == kmemtrace::kTypeKmalloc)
    return kmem_alloc_first_use(requested, kmflag, caller, tag);
#endif
  // A debugged cache gets the size asked for (its redzone starts there).
  void* obj = cp->debug ? alloc_unmagazined(cp, kmflag, requested, caller) : alloc_slow(cp, kmflag);
  kmemtrace::note_alloc(type, caller, obj, requested, cp->chunk, kmflag);
  if (obj && prof_counting()) prof_stamp_irq(cp, obj, tag);
  if (obj && leak_stamping()) leak_stamp_typed(cp, obj, caller, type, requested);
  return obj;
}
#if defined(ARCH_HAS_RSEQ_RECORD)
// One function for each type, not a template: 32-bit ARM's GCC makes no
// tail call to a weak symbol, which an instantiation is.
__attribute__((always_inline)) inline void* alloc_trace_full_of(uint8_t type, void* obj, size_t requested,
                                                                 size_t allocated, int kmflag, uintptr_t caller) {
  kmemtrace::record_alloc_slow(kmemtrace::Ring::alloc_tag(type), caller, reinterpret_cast<uintptr_t>(obj), requested,
                               allocated, static_cast<uint32_t>(kmflag));
  return obj;
}
__attribute__((noinline, cold)) void* alloc_trace_full_cache(void* obj, size_t requested, size_t allocated,
                                                             int kmflag) {
  return alloc_trace_full_of(kmemtrace::kTypeCache, obj, requested, allocated, kmflag, caller_of_api());
}
__attribute__((noinline, cold)) void* alloc_trace_full_kmalloc(void* obj, size_t requested, size_t allocated,
                                                               int kmflag) {
  return alloc_trace_full_of(kmemtrace::kTypeKmalloc, obj, requested, allocated, kmflag, caller_of_api());
}
__attribute__((noinline)) void* alloc_slow_traced_cache(kmem_cache_t* cp, int kmflag, size_t requested,
                                                        const AllocTag* tag) {
  return alloc_slow_traced(cp, kmflag, kmemtrace::kTypeCache, requested, caller_of_api(), tag);
}
__attribute__((noinline)) void* alloc_slow_traced_kmalloc(kmem_cache_t* cp, int kmflag, size_t requested,
                                                          const AllocTag* tag) {
  return alloc_slow_traced(cp, kmflag, kmemtrace::kTypeKmalloc, requested, caller_of_api(), tag);
}
// The record, then the untraced free (its owner check again: a cold path).
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void free_trace_full(kmem_cache_t* cp, void* obj, uint8_t type,
                                                                         uintptr_t caller) {
  kmemtrace::record_free_slow(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
  cache_free(cp, obj, 0, caller);
}
#endif

}  // namespace mm

// ---------------------------------------------------------------------------
// The public API.

using namespace mm;

kmem_cache_t* kmem_cache_create(const char* name, size_t bufsize, size_t align, int (*constructor)(void*, void*, int),
                                void (*destructor)(void*, void*), void (*reclaim)(void*), void* priv, vmem_t* vmp,
                                int cflags) {
  if (!kmem_ready()) kmem_init();
  return cache_create(name, bufsize, align, constructor, destructor, reclaim, priv, vmp, cflags);
}

void kmem_cache_set_move(kmem_cache_t* cp, kmem_cbrc_t (*move)(void*, void*, size_t, void*)) {
  __atomic_store_n(&cp->move, move, __ATOMIC_RELEASE);  // acquired by move_cache
}

void kmem_cache_move_notify(kmem_cache_t* cp, void*) {
  mm::Guard<> g(cp->slab_lock);
  cp->move_notify++;
}

bool kmem_cache_destroy(kmem_cache_t* cp) {
  uintptr_t caller = caller_of_api();
  if (!cp) return false;
  // Bring every CPU's magazines back so the count of live objects is exact.
  // The caller guarantees nothing uses the cache any more (kmem_cache_destroy
  // (9F)), so other CPUs' magazines may be taken from here: the caller's
  // synchronisation orders their last fast-path stores before this (cpu_flush
  // takes the depot lock, so a CPU flushing its own at the same time is
  // harmless).
  for (unsigned i = 0; i < plat::kCpuSlots; i++) cpu_flush(cp, i);
  depot_reap(cp, true);
  // A reaper may still be returning magazines it took off this cache.
  while (__atomic_load_n(&cp->inflight, __ATOMIC_ACQUIRE)) plat::cpu_relax();
  uint64_t live;
  {
    mm::Guard<> g(cp->slab_lock);
    live = cp->buf_slab_inuse;
  }
  if (live) {
    if (cp->debug) debug_report_live(cp, live, caller);  // with the live buffers and their trails
    else report("kmem_cache_destroy of a cache with live objects", cp->name, cp, caller, live);
    return false;
  }
  slab_reap(cp);
  bool teardown;
  {
    mm::Guard<> g(g_caches_lock);
    MM_ASSERT(!cp->dead);
    cp->dead = true;
    teardown = cp->refs == 0;
    if (teardown) unlink(cp);
  }
  if (teardown) cache_teardown(cp);
  return true;
}

// Traced, every entry point leaves its untraced body at once for an out of
// line copy that records: off, tracing costs the body kmemtrace::on()
// (one patched nop in the kernel), and the fast paths stay leaf functions
// without a frame. In the kernel the entry points tail-call the copies with
// caller 0 (MM_ENTRY_CALLER), and the copies read the return address
// themselves: it is still the entry point's caller. (Read in the entry
// point, even only on that branch, it costs the entry point a frame on
// every call where GCC does not shrink-wrap: riscv64 and arm.)
namespace {
MM_RESTARTABLE_TEXT __attribute__((noinline)) void* cache_alloc_traced(kmem_cache_t* cp, int kmflag,
                                                                       uintptr_t caller, const AllocTag* tag) {
  if (!caller) caller = caller_of_api();
  return cache_alloc<true>(cp, kmflag, kmemtrace::kTypeCache, cp->bufsize, caller, tag);
}
// The hooked free with another hook on (or kmemtrace's, where it has no
// restartable record: a kernel without ARCH_HAS_RSEQ_RECORD), out of line,
// as the profiled free and kmemtrace's, so that each saves only the
// registers it needs: kmem_cache_free picks one of the three by the free
// word (GCC places one prologue for a function, whichever path runs).
MM_RESTARTABLE_TEXT __attribute__((noinline))
void cache_free_hooked(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  if (!caller) caller = caller_of_api();
  cache_free<true>(cp, obj, kmemtrace::kTypeCache, caller);
}
// The profiled free, while profiling alone has the free hooks on
// (kmem_fastpath.h, Profiled fast paths).
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void cache_free_prof_only(kmem_cache_t* cp, void* obj,
                                                                                     uintptr_t caller) {
  return cache_free_prof<kmemtrace::kTypeCache>(cp, obj, caller);
}
#if defined(ARCH_HAS_RSEQ_RECORD)
// kmemtrace alone (kmem_fastpath.h, kmemtrace's fast paths), with caller 0. A
// function of its own, so that it saves only the registers its record needs:
// inline in the profiled free's function, it would pay that one's frame of
// six.
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void cache_free_trace_only(kmem_cache_t* cp, void* obj) {
  return cache_free_trace<kmemtrace::kTypeCache>(cp, obj);
}
#endif
}  // namespace

// kmemtrace alone (kmem_fastpath.h, kmemtrace's fast paths): while it is the
// only feature with the allocation hooks on, the macro's call sites
// (mm/kmem.h) call it straight from their three-way site, and
// kmem_cache_alloc tail-calls it from its own; with caller 0 (the kernel's
// MM_ENTRY_CALLER). Where there is no restartable record, the tagged copy (no
// site branches here then: every arch with three-way sites has the record,
// and elsewhere plat::alloc_hooks_mode never says kTraceOnly).
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void* kmem_cache_alloc_trace_only(kmem_cache_t* cp,
                                                                                            int kmflag,
                                                                                            const AllocTag* tag) {
#if defined(ARCH_HAS_RSEQ_RECORD)
  return cache_alloc_trace<kmemtrace::kTypeCache>(cp, kmflag, cp->bufsize, tag);
#else
  return kmem_cache_alloc_tagged(cp, kmflag, tag);
#endif
}

// The Solaris name, for calls that do not go through the macro (mm/kmem.h):
// counted at this function's own tag. One three-way site (HookMode): the
// nop, kmemtrace's fast path alone, or the traced copy.
MM_RESTARTABLE_TEXT MM_FRAMELESS void* (kmem_cache_alloc)(kmem_cache_t* cp, int kmflag) {
  plat::HookMode mode = plat::alloc_hooks_mode();
  if (mode != plat::HookMode::kOff) {
    if (mode == plat::HookMode::kTraceOnly) return kmem_cache_alloc_trace_only(cp, kmflag, MM_ALLOC_TAG_INDIRECT(kKmem));
    return cache_alloc_traced(cp, kmflag, MM_ENTRY_CALLER(), MM_ALLOC_TAG_INDIRECT(kKmem));
  }
  return cache_alloc(cp, kmflag);
}

// The hooked copy itself (the macro's call lands here while another
// feature than kmemtrace has the hooks on): the profiled fast path while
// profiling alone has them (kmem_fastpath.h, Profiled fast paths), else the
// traced copy (kmemtrace's path where kmemtrace alone is on, where the
// platform has no three-way sites, or for a call in a switch's change).
MM_RESTARTABLE_TEXT MM_FRAMELESS void* kmem_cache_alloc_tagged(kmem_cache_t* cp, int kmflag, const AllocTag* tag) {
  if (__builtin_expect(!alloc_hooks_beside_prof(), 1))
    return cache_alloc_prof(cp, kmflag, 0, tag, MM_ENTRY_CALLER());  // 0: a kmem_cache_alloc (alloc_slow_prof)
#if defined(ARCH_HAS_RSEQ_RECORD)
  if (__builtin_expect(alloc_trace_only(), 1)) return kmem_cache_alloc_trace_only(cp, kmflag, tag);
#endif
  return cache_alloc_traced(cp, kmflag, MM_ENTRY_CALLER(), tag);
}

// Hooked, kmemtrace alone gets its own free from the three-way site
// (HookMode); otherwise the free word (alloc_tag_internal.h) is read once,
// here, and picks the profiled free, kmemtrace's, or the general one.
MM_RESTARTABLE_TEXT MM_FRAMELESS void kmem_cache_free(kmem_cache_t* cp, void* obj) {
  plat::HookMode mode = plat::free_hooks_mode();
  if (mode != plat::HookMode::kOff) {
#if defined(ARCH_HAS_RSEQ_RECORD)
    if (mode == plat::HookMode::kTraceOnly) return cache_free_trace_only(cp, obj);
#endif
    uint32_t beside = free_hooks_beside_prof_word();
    if (__builtin_expect(beside == 0, 1)) return cache_free_prof_only(cp, obj, MM_ENTRY_CALLER());
#if defined(ARCH_HAS_RSEQ_RECORD)
    if (__builtin_expect(beside == kFreeTraceOnly, 1)) return cache_free_trace_only(cp, obj);
#endif
    return cache_free_hooked(cp, obj, MM_ENTRY_CALLER());
  }
  cache_free(cp, obj);
}
