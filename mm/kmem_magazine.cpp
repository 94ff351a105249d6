// SPDX-License-Identifier: Apache-2.0
// kmem's magazine layer: per-CPU magazines, the depot, reaping.
//
// 1. A magazine is a stack of constructed buffers (Bonwick & Adams 2001).
//    Each CPU holds a loaded and a previous magazine per cache (CpuCache);
//    the fast paths (kmem_fastpath.h) pop and push the loaded one. The
//    previous one is always either full or empty, so one swap turns a miss
//    into a hit with no lock. When both are exhausted (alloc) or full (free)
//    the CPU trades the previous one with the depot: a full one for an empty
//    one or the reverse, under the depot lock. No full magazine in the depot:
//    the allocation goes to the slab layer. No empty one: a new magazine is
//    allocated (KM_NOSLEEP) or the free goes to the slab layer.
// 2. Magazine types. Sizes come from a ladder (1, 3, 7, ... 143 rounds), each
//    type a KMC_NOMAGAZINE cache of its own. A cache starts at a size that
//    suits its chunk. When the depot lock was found taken at least 4 times
//    since the last reap (Guard's contention count), the reap moves the cache
//    to the next type and empties the depot of old-size magazines; each CPU
//    flushes its own old-size magazines at its next slow path (held != want).
// 3. Working set (Bonwick & Adams 3.6). Each depot list remembers the fewest
//    magazines it held since the last reap (min): that many were never
//    needed. kmem_reap(false), every 15 s in the kernel, frees exactly that
//    many of each list and starts a new interval; kmem_reap(true) and the
//    memory-pressure reaper (reap_local) free the whole depot, and
//    kmem_reap(true) first has every CPU flush its own magazines
//    (plat::on_each_cpu).
// 4. Interrupts and locks. The per-CPU state is touched only by its CPU
//    (here with interrupts masked; the fast paths may use restartable
//    sections instead: kmem.cpp, Interrupts and the per-CPU layer), or by
//    kmem_cache_destroy for a cache nobody uses any more. Destroying a
//    magazine runs destructors, slab frees, vmem frees and heap unmaps (on
//    riscv64 a TLB shootdown that may wait): so magazines are first detached
//    with interrupts masked (cpu_detach, under the depot lock when flushing,
//    so that a CPU's own flush and destroy's flush of that CPU never overlap)
//    and destroyed after interrupts are restored. The depot lock is never
//    held while calling anything outside this file; no lock at all is held
//    while reclaim callbacks run, so a callback may do anything, destroy a
//    cache included.
// 5. Reapers do not exclude one another: every step takes the per-cache
//    locks it needs, and the cache list is walked with references
//    (for_each_cache). Only the memory-pressure reaper is one at a time
//    (g_reaping): others short of memory wait for its result instead.
// 6. Draining. A magazine leaves the depot or a CPU for destruction in the
//    same critical section that puts it on the cache's draining list
//    (depot_lock), its slot[0] set to its rounds; its destroyer lowers that
//    count before each round goes to the slab layer, and takes it off the
//    list at the end. So at every point where interrupts are on (the kernel)
//    or no depot lock is held (the host), each round is in exactly one of a
//    CPU's magazines, the depot, a draining magazine's first slot[0] rounds,
//    or the slab layer (or the destroyer's registers, on its way there):
//    kmemleak, which stops the world at such points, counts every magazine
//    round as free. Without the list, rounds halfway through a reap would
//    look allocated and referenced by nothing (a magazine is not an object),
//    and a scan would report them.
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include "kmem_cache.h"

namespace mm {
namespace {

// Constant but for `cache`, written once by magazine_init inside kmem_init,
// before g_ready's release: any CPU holding a cache is ordered after it.
struct MagType {
  uint32_t rounds;
  uint32_t max_chunk;  // start caches with chunks up to this size here
  kmem_cache_t* cache;
};
MagType g_magtypes[] = {{1, 0, nullptr},  {3, 0, nullptr},  {7, 16384, nullptr}, {15, 4096, nullptr},
                        {31, 512, nullptr}, {47, 0, nullptr}, {63, 0, nullptr},   {95, 0, nullptr},
                        {143, 0, nullptr}};
constexpr unsigned kMagTypes = sizeof(g_magtypes) / sizeof(g_magtypes[0]);
constexpr uint64_t kResizeContention = 4;  // contended depot locks per interval that grow the magazines

// reap_local is running: a try-lock, taken by an exchange with acquire and
// dropped with a release store, so one reaper's work is ordered before the
// next one's. Word-sized: no sub-word atomics on riscv64.
uintptr_t g_reaping;

// Relaxed: a hint (kmem_cache.h, magtype); g_magtypes' rounds never change.
int mag_rounds(const kmem_cache_t* cp) { return static_cast<int>(g_magtypes[ld_relaxed(cp->magtype)].rounds); }

unsigned magtype_of(uintptr_t cap) {
  for (unsigned i = 0; i < kMagTypes; i++)
    if (g_magtypes[i].rounds == cap) return i;
  plat::fatal("kmem: magazine of unknown capacity %lu", static_cast<unsigned long>(cap));
}

// Destroys a magazine holding n constructed rounds: destructs them, returns
// them to the slab layer, frees the magazine to its own magazine cache (its
// capacity says which).
// Puts m on cp's draining list with n rounds (6). Depot lock held.
void drain_begin(kmem_cache_t* cp, Magazine* m, uintptr_t n) {
  assert_held(cp->depot_lock);
  MM_ASSERT(n <= m->cap);
  __atomic_store_n(&m->slot[0], reinterpret_cast<void*>(n), __ATOMIC_RELAXED);
  m->next = cp->draining;
  cp->draining = m;
}

// Destroys m, which drain_begin put on the draining list: its rounds go to
// the slab layer, top first, the count in slot[0] lowered before each
// leaves (6), then m leaves the list and goes back to its magazine cache
// (its capacity says which).
void magazine_destroy(kmem_cache_t* cp, Magazine* m) {
  for (auto n = reinterpret_cast<uintptr_t>(m->slot[0]); n > 0; n--) {
    void* obj = m->slot[n];
    // Relaxed: read only with this CPU stopped (kmemleak), which orders it.
    __atomic_store_n(&m->slot[0], reinterpret_cast<void*>(n - 1), __ATOMIC_RELAXED);
    slab_free(cp, obj, true, 0);
  }
  {
    Guard<> g(cp->depot_lock);
    Magazine** pp = &cp->draining;
    while (*pp != m) pp = &(*pp)->next;
    *pp = m->next;
  }
  m->slot[0] = nullptr;
  kmem_cache_free(g_magtypes[magtype_of(m->cap)].cache, m);
}

Magazine* maglist_pop(MagList& l) {
  Magazine* m = l.head;
  if (!m) return nullptr;
  l.head = m->next;
  if (--l.count < l.min) l.min = l.count;
  return m;
}

void maglist_push(MagList& l, Magazine* m) {
  m->next = l.head;
  l.head = m;
  l.count++;
}

// A CPU's magazines, detached from it to be destroyed with interrupts on.
struct Detached {
  Magazine* loaded = nullptr;
  int32_t rounds = 0;
  Magazine* prev = nullptr;
  int32_t prounds = 0;
};

// Interrupts masked, depot lock held; the CPU's own slot, or any slot of
// an unused cache (kmem_cache.h, CpuCache: what orders another CPU's
// stores before this). The magazines go on the draining list (6).
Detached cpu_detach(kmem_cache_t* cp, CpuCache* cc) {
  Detached d{cc->loaded(), cc->rounds(), cc->prev, cc->prounds};
  cc->extra -= static_cast<uintptr_t>(d.rounds + d.prounds);  // leave without an allocation (kmem_cache.h)
  cc->load(nullptr, 0);
  cc->prev = nullptr;
  cc->prounds = 0;
  cc->held = 0;
  if (d.loaded) drain_begin(cp, d.loaded, static_cast<uintptr_t>(d.rounds));
  if (d.prev) drain_begin(cp, d.prev, static_cast<uintptr_t>(d.prounds));
  return d;
}

void destroy_detached(kmem_cache_t* cp, const Detached& d) {
  if (d.loaded) magazine_destroy(cp, d.loaded);
  if (d.prev) magazine_destroy(cp, d.prev);
}

// What a slow path leaves to do once interrupts are back on (rarely: after
// a magazine resize). Only `any` is set on the common paths.
struct Leftover {
  bool any = false;
  Detached stale;             // this CPU's magazines of an old size
  Magazine* old = nullptr;    // a depot magazine of an old size (draining)
  __attribute__((noinline)) void run(kmem_cache_t* cp) {
    destroy_detached(cp, stale);
    if (old) magazine_destroy(cp, old);
  }
};

// The allocation slow path's magazine part (interrupts masked): refills the
// loaded magazine from the previous one or the depot and pops. nullptr with
// *to_slab: go to the slab layer; nullptr without: do `left`, then retry.
__attribute__((always_inline)) inline void* reload_and_pop(kmem_cache_t* cp, CpuCache* cc, Leftover& left,
                                                             bool* to_slab) {
  const int want = mag_rounds(cp);
  if (cc->held && cc->held != want) {  // the magazine size changed
    Guard<NoIrqSave> g(cp->depot_lock);
    left.any = true;
    left.stale = cpu_detach(cp, cc);
    return nullptr;
  }
  cc->held = want;
  for (;;) {
    MM_DEBUG_ASSERT(cc->prounds == 0 || cc->prounds == want);  // prev is empty or full
    if (void* obj = *cc->top) {  // null: the empty magazine's sentinel, or none loaded
      cc->top--;
      return obj;
    }
    if (cc->prounds > 0) {  // swap loaded and previous
      Magazine* m = cc->loaded();
      int32_t r = cc->rounds();
      cc->load(cc->prev, cc->prounds);
      cc->prev = m;
      cc->prounds = r;
      continue;
    }
    // Both empty: trade the previous (empty) one for a full one.
    Guard<NoIrqSave> g(cp->depot_lock, &cp->depot_contention);
    Magazine* full = maglist_pop(cp->full_mags);
    if (!full) {
      g.unlock();
      cc->extra++;  // an allocation from the slab layer (kmem_cache.h)
      *to_slab = true;
      return nullptr;
    }
    if (full->cap != static_cast<uintptr_t>(want)) {  // from before a resize
      left.any = true;
      left.old = full;
      drain_begin(cp, full, full->cap);
      return nullptr;
    }
    if (cc->prev) maglist_push(cp->empty_mags, cc->prev);
    g.unlock();
    cc->prev = cc->loaded();
    cc->prounds = 0;
    cc->load(full, want);
    cc->extra += static_cast<uintptr_t>(want);  // rounds in without a free
  }
}

enum class FreeStep { kDone, kRetry, kNeedMagazine, kToSlab };

// The free slow path's magazine part (interrupts masked): makes room in the
// loaded magazine (swap, or trade the full previous one for an empty one
// from the depot) and pushes obj.
__attribute__((always_inline)) inline FreeStep reload_and_push(kmem_cache_t* cp, CpuCache* cc, void* obj,
                                                                Leftover& left) {
  const int want = mag_rounds(cp);
  if (cc->held && cc->held != want) {  // the magazine size changed
    Guard<NoIrqSave> g(cp->depot_lock);
    left.any = true;
    left.stale = cpu_detach(cp, cc);
    return FreeStep::kRetry;
  }
  cc->held = want;
  for (;;) {
    MM_DEBUG_ASSERT(cc->prounds == 0 || cc->prounds == want);
    if (cc->top < cc->limit) {  // never with none loaded (top == limit)
      *++cc->top = obj;
      cc->frees++;
      return FreeStep::kDone;
    }
    if (cc->prev && cc->prounds == 0) {  // swap with the empty previous
      Magazine* m = cc->loaded();
      int32_t r = cc->rounds();
      cc->load(cc->prev, 0);
      cc->prev = m;
      cc->prounds = r;
      continue;
    }
    // Trade the previous (full) one for an empty one.
    Guard<NoIrqSave> g(cp->depot_lock, &cp->depot_contention);
    Magazine* empty = maglist_pop(cp->empty_mags);
    if (!empty) return FreeStep::kNeedMagazine;
    if (empty->cap != static_cast<uintptr_t>(want)) {  // from before a resize
      left.any = true;
      left.old = empty;
      drain_begin(cp, empty, 0);
      return FreeStep::kRetry;
    }
    if (cc->prev) maglist_push(cp->full_mags, cc->prev);
    g.unlock();
    cc->extra -= static_cast<uintptr_t>(cc->prounds);  // rounds out without an allocation
    cc->prounds = cc->rounds();  // 0 with none loaded
    cc->prev = cc->loaded();
    cc->load(empty, 0);
  }
}

}  // namespace

void magazine_init() {
  for (auto& mt : g_magtypes) {
    char name[kNameLen];
    cache_size_name(name, "kmem_magazine_", mt.rounds);
    mt.cache = cache_create(name, sizeof(Magazine) + mt.rounds * sizeof(void*), 64, nullptr, nullptr, nullptr,
                            nullptr, nullptr, KMC_NOMAGAZINE | KMC_NOTRACK);
  }
}

unsigned initial_magtype(size_t chunk) {
  unsigned best = 0;
  for (unsigned i = 0; i < kMagTypes; i++)
    if (g_magtypes[i].max_chunk && chunk <= g_magtypes[i].max_chunk) best = i;
  return best;
}

uint32_t magtype_rounds(unsigned magtype) { return g_magtypes[magtype].rounds; }

// Slow path of kmem_cache_alloc: the loaded magazine is empty.
// Tail-calls alloc_slow, whose own tail calls then still see the entry
// point's caller as their return address.
__attribute__((noinline)) void* alloc_slow_at(void*, int kmflag, char* base) {
  return alloc_slow(cache_at(base), kmflag);
}

// kmem_alloc's tables before kmem_init (kmem_alloc.cpp, Before kmem_init),
// out of line and tail-called so that the slow paths keep their shape: the
// report, and nothing allocated or freed.
[[gnu::noinline, gnu::cold]] void* no_class_alloc() {
  report("kmem_alloc before kmem_init", "kmem_alloc", nullptr, caller_of_api(), 0);
  return nullptr;
}
[[gnu::noinline, gnu::cold]] void no_class_free(void* obj, uintptr_t caller) {
  report("kmem_free before kmem_init", "kmem_alloc", obj, caller ? caller : caller_of_api(), 0);
}

// The magazine part of alloc_slow, a function of its own so that
// alloc_slow's tests and tail calls above it need no frame: GCC saves
// every register this loop uses before the first test otherwise (riscv64:
// their saves and restores on every pair of a cache without magazines).
[[gnu::noinline]] static void* alloc_magazine(kmem_cache_t* cp, int kmflag) {
  for (;;) {
    Leftover left;
    bool to_slab = false;
    void* obj = nullptr;
    {
      auto s = plat::irq_save();
      CpuCache* cc = &cp->cpu[plat::cpu_id()];
      obj = reload_and_pop(cp, cc, left, &to_slab);
      plat::irq_restore(s);
    }
    if (__builtin_expect(left.any, 0)) left.run(cp);
    if (obj) return obj;
    if (to_slab) return slab_alloc(cp, kmflag);
  }
}

__attribute__((noinline)) void* alloc_slow(kmem_cache_t* cp, int kmflag) {
#if !defined(MM_KERNEL)
  // Host, where kmem starts on first use: a thread may have found cp in
  // kmem_alloc's size table (read plainly, kmem_alloc.cpp, Before kmem_init)
  // while another thread was still in kmem_init. Its first allocation from
  // any cache comes here (its magazines start empty): g_ready's acquire, or
  // kmem_init's lock while init still runs, orders all that kmem_init wrote
  // before this thread reads it. (The kernel runs kmem_init before the
  // other CPUs start.)
  if (__builtin_expect(!kmem_ready(), 0)) kmem_init();
#endif
  // No magazine layer (a debugged cache among them): untraced, alloc_slow
  // is the entry point's tail call, so its return address is the caller.
  if (cp->flags & KMC_NOMAGAZINE) return alloc_unmagazined(cp, kmflag, 0, caller_of_api());
  // (After the test above, which keeps its frameless tail call.)
  if (__builtin_expect(cp == &g_no_class, 0)) return no_class_alloc();  // (kmem_alloc.cpp, Before kmem_init)
  return alloc_magazine(cp, kmflag);
}

void* alloc_unmagazined(kmem_cache_t* cp, int kmflag, size_t requested, uintptr_t caller) {
  auto s = plat::irq_save();
  cp->cpu[plat::cpu_id()].extra++;  // an allocation from the slab layer (kmem_cache.h)
  plat::irq_restore(s);
  return slab_alloc(cp, kmflag, requested, caller);
}

void free_unmagazined(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t size) {
  auto s = plat::irq_save();
  CpuCache& cc = cp->cpu[plat::cpu_id()];
  cc.frees++;
  cc.extra--;  // a free to the slab layer
  plat::irq_restore(s);
  slab_free(cp, obj, true, caller, size);
}

// The magazine part of free_slow (a function of its own: alloc_magazine
// says why).
[[gnu::noinline]] static void free_magazine(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  for (;;) {
    Leftover left;
    FreeStep step;
    unsigned mt = 0;
    {
      auto s = plat::irq_save();
      CpuCache* cc = &cp->cpu[plat::cpu_id()];
      step = reload_and_push(cp, cc, obj, left);
      mt = ld_relaxed(cp->magtype);  // a hint: checked again under depot_lock below
      plat::irq_restore(s);
    }
    if (__builtin_expect(left.any, 0)) left.run(cp);
    if (step == FreeStep::kDone) return;
    if (step == FreeStep::kNeedMagazine) {
      // No empty magazine in the depot: make one (without blocking).
      auto* m = static_cast<Magazine*>(kmem_cache_alloc(g_magtypes[mt].cache, KM_NOSLEEP));
      if (m) {
        m->slot[0] = nullptr;
        m->cap = g_magtypes[mt].rounds;
        {
          Guard<> g(cp->depot_lock, &cp->depot_contention);
          if (ld_relaxed(cp->magtype) == mt) {
            maglist_push(cp->empty_mags, m);
            m = nullptr;
          }
        }
        if (m) kmem_cache_free(g_magtypes[mt].cache, m);  // resized meanwhile: start over
        continue;
      }
      auto s = plat::irq_save();
      CpuCache* cc = &cp->cpu[plat::cpu_id()];
      cc->frees++;
      cc->extra--;  // a free to the slab layer
      plat::irq_restore(s);
      step = FreeStep::kToSlab;
    }
    if (step == FreeStep::kToSlab) return slab_free(cp, obj, true, caller);
  }
}

// Slow path of kmem_cache_free: the loaded magazine is full (or absent).
__attribute__((noinline)) void free_slow(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  if (cp->flags & KMC_NOMAGAZINE) return free_unmagazined(cp, obj, caller, 0);
  if (__builtin_expect(cp == &g_no_class, 0)) return no_class_free(obj, caller);  // before kmem_init
  return free_magazine(cp, obj, caller);
}

void cpu_flush(kmem_cache_t* cp, unsigned cpu) {
  if (cp->flags & KMC_NOMAGAZINE) return;
  Detached d;
  {
    Guard<> g(cp->depot_lock);
    d = cpu_detach(cp, &cp->cpu[cpu]);
    if (!d.loaded && !d.prev) return;
    __atomic_fetch_add(&cp->inflight, 1u, __ATOMIC_RELAXED);  // under depot_lock: destroy takes it before it waits
  }
  destroy_detached(cp, d);
  __atomic_fetch_sub(&cp->inflight, 1u, __ATOMIC_RELEASE);  // kmem_cache.h, inflight
}

void flush_this_cpu(void*) {
  unsigned cpu = plat::cpu_slot();
  if (cpu >= plat::kMaxCpus) return;  // a host thread that never allocated
  for_each_cache([cpu](kmem_cache_t* cp) { cpu_flush(cp, cpu); });
}

// Frees the depot magazines the working set did not use since the last
// reap (all of them with `all`), and starts a new interval. The fewest
// magazines a list held over the interval (min) were never needed: that
// many go, each taken onto the draining list under the depot lock and
// destroyed without it (6).
void depot_reap(kmem_cache_t* cp, bool all) {
  uint64_t fulls, empties;
  {
    Guard<> g(cp->depot_lock);
    fulls = all ? cp->full_mags.count : cp->full_mags.min;
    empties = all ? cp->empty_mags.count : cp->empty_mags.min;
    // The new interval starts here; the takes below lower min with count.
    cp->full_mags.min = cp->full_mags.count;
    cp->empty_mags.min = cp->empty_mags.count;
    if (fulls || empties) __atomic_fetch_add(&cp->inflight, 1u, __ATOMIC_RELAXED);  // as in cpu_flush
  }
  __atomic_fetch_add(&cp->reaps, uint64_t{1}, __ATOMIC_RELAXED);  // statistics only
  if (!fulls && !empties) return;
  auto take = [cp](MagList& l, bool full) {
    Guard<> g(cp->depot_lock);
    Magazine* m = maglist_pop(l);
    if (m) drain_begin(cp, m, full ? m->cap : 0);
    return m;
  };
  for (; fulls; fulls--) {
    Magazine* m = take(cp->full_mags, true);
    if (!m) break;
    magazine_destroy(cp, m);
  }
  for (; empties; empties--) {
    Magazine* m = take(cp->empty_mags, false);
    if (!m) break;
    magazine_destroy(cp, m);
  }
  __atomic_fetch_sub(&cp->inflight, 1u, __ATOMIC_RELEASE);
}

// Grows the magazine size when the depot lock was contended since the last
// reap: the magazines of the old size leave the depot now, and each CPU's
// at its next slow path.
void magazine_resize_check(kmem_cache_t* cp) {
  if (cp->flags & KMC_NOMAGAZINE) return;
  bool grew = false;
  {
    Guard<> g(cp->depot_lock);
    uint64_t delta = cp->depot_contention - cp->depot_contention_last;
    cp->depot_contention_last = cp->depot_contention;
    if (delta >= kResizeContention && cp->magtype + 1 < kMagTypes) {
      st_relaxed(cp->magtype, cp->magtype + 1);
      grew = true;
    }
  }
  if (grew) depot_reap(cp, true);
}

// Pulls obj out of a full depot magazine, if one holds it, freeing that
// magazine's rounds to the slab layer. Returns true if found.
bool depot_evict(kmem_cache_t* cp, void* obj) {
  Magazine* found = nullptr;
  {
    Guard<> g(cp->depot_lock);
    Magazine** pp = &cp->full_mags.head;
    for (; *pp; pp = &(*pp)->next) {
      bool hit = false;
      for (uintptr_t r = 1; r <= (*pp)->cap && !hit; r++) hit = (*pp)->slot[r] == obj;
      if (hit) break;
    }
    found = *pp;
    if (!found) return false;
    *pp = found->next;
    cp->full_mags.count--;
    if (cp->full_mags.min > cp->full_mags.count) cp->full_mags.min = cp->full_mags.count;
    drain_begin(cp, found, found->cap);
    __atomic_fetch_add(&cp->inflight, 1u, __ATOMIC_RELAXED);  // under depot_lock: destroy takes it before it waits
  }
  magazine_destroy(cp, found);
  __atomic_fetch_sub(&cp->inflight, 1u, __ATOMIC_RELEASE);
  return true;
}

// Each cache with a reclaim callback is asked to give memory back. No lock
// is held: a callback may allocate, free, create or destroy caches.
void run_reclaim_callbacks() {
  for_each_cache([](kmem_cache_t* cp) {
    if (cp->reclaim) cp->reclaim(cp->priv);
  });
}

// Memory is short and this CPU cannot wait for others: flush its own
// magazines, empty every depot and give empty slabs back. If another CPU
// is already doing this, leave it to that one.
void reap_local() {
  if (__atomic_exchange_n(&g_reaping, uintptr_t{1}, __ATOMIC_ACQUIRE)) return;
  run_reclaim_callbacks();
  flush_this_cpu(nullptr);
  for_each_cache([](kmem_cache_t* cp) { depot_reap(cp, true); });
  slab_reap_all();
  __atomic_store_n(&g_reaping, uintptr_t{0}, __ATOMIC_RELEASE);
  segkmem_flush();
}

void kmem_reap(bool all) {
  if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE)) return;  // kmem_init's release
  run_reclaim_callbacks();
  if (all) plat::on_each_cpu(flush_this_cpu, nullptr);
  for_each_cache([all](kmem_cache_t* cp) {
    if (!all) magazine_resize_check(cp);
    depot_reap(cp, all);
  });
  slab_reap_all();
  vmem_qcache_reap();
  segkmem_flush();
}

}  // namespace mm
