// kmem: object caches with per-CPU magazines.
//
// 1. Concepts. A cache hands out objects ("buffers") of one size, kept in
//    their constructed state between free and alloc. Three layers:
//      - per-CPU: each CPU has a loaded and a previous magazine (a stack of
//        buffer pointers). alloc pops, free pushes; no lock, only interrupts
//        masked. This is the fast path.
//      - depot: full and empty magazines shared by all CPUs, under the depot
//        lock. A CPU trades a magazine with the depot when both of its own
//        are exhausted (alloc) or full (free).
//      - slab: slabs of memory from the cache's vmem arena, carved into
//        buffers. Buffers in the slab layer are NOT constructed: the
//        constructor runs when a buffer leaves the slab layer, the destructor
//        when it goes back (magazine destroyed at reap, or no magazine to
//        hold it).
// 2. Slabs. Small buffers (chunk <= page/8, memory we may write to) live in
//    one-page slabs with the Slab header at the end of the page: buffer ->
//    slab is a mask. The free list is threaded through free buffers. Other
//    caches (large buffers, KMC_NOTOUCH, vmem quantum caches over integer
//    arenas) keep the header off-slab with one hash entry per buffer, and a
//    per-cache hash finds buffer -> slab. Every slab has a bitmap of free
//    buffers, so a double free reaching the slab layer is caught. Slabs are
//    coloured: successive slabs start their buffers at offsets 0, align,
//    2*align, ... within the slab's slack, to spread buffers over cache lines.
// 3. Magazine sizes come from a ladder of magazine types (1, 3, 7, ... 143
//    rounds), each a KMC_NOMAGAZINE cache. When the depot lock is found
//    contended often, the cache moves to the next larger type.
// 4. Reaping: the depot remembers the fewest full and empty magazines it
//    held since the last update (the working set it did not need) and frees
//    that many; kmem_reap(true) frees all of them, and flushes per-CPU
//    magazines through plat::on_each_cpu. Empty slabs go back to vmem.
// 5. Moving (the consolidator): for caches with a move callback that are
//    sparse, objects in the emptiest slabs are offered to the client's
//    callback, one at a time, with a new constructed buffer from a fuller
//    slab. YES frees the old, NO/LATER the new, DONT_NEED both, DONT_KNOW the
//    new and looks for the old one in the magazine layer.
// 6. Locking. Per cache: depot_lock (magazine lists) and slab_lock (slabs,
//    hash, colour). Neither is held while calling a constructor, destructor,
//    vmem or another cache. Both are taken with interrupts masked. The
//    global g_caches_lock protects the cache list.
// 7. Bad input is reported through mm::report_error with the cache name,
//    the address and the caller, and the bad operation is refused:
//      - on the free fast path, small-object caches check the slab header's
//        owner (catches frees to the wrong cache, wrong kmem_free sizes and
//        pointers kmem never handed out, as long as they are mapped);
//      - at the slab layer, the free bitmap and hash catch double frees and
//        foreign pointers of every cache;
//      - kmem_cache_destroy with live objects is refused and reported.
//    Full debugging (redzones, poisoning, audit trails) is a later layer.
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include <new>
#include "trace_hooks.h"
#include <trace/record.h>

namespace mm {
namespace {

#define KMEM_ASSERT(c)                                                          \
  do {                                                                          \
    if (__builtin_expect(!(c), 0)) plat::fatal("kmem: %s:%d: %s", __FILE__, __LINE__, #c); \
  } while (0)

constexpr uint32_t kNone = ~0u;
constexpr size_t kMinAlign = 8;
constexpr unsigned kNameLen = 32;
constexpr unsigned kMaxMoveCalls = 256;   // per cache per pass

inline uintptr_t caller_of_api() {
  return reinterpret_cast<uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0)));
}
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
bool is_pow2(size_t v) { return v && !(v & (v - 1)); }
void copy_name(char* dst, const char* src) {
  unsigned i = 0;
  for (; src && src[i] && i + 1 < kNameLen; i++) dst[i] = src[i];
  dst[i] = 0;
}

struct Magazine {
  Magazine* next;
  uintptr_t cap;  // rounds it holds when full: the depot may hold old sizes after a resize
  // slot[0] is always null; the rounds are slot[1..n]. With the sentinel,
  // "is obj on top of the magazine?" needs no emptiness test: the free fast
  // path uses it to catch an immediate double free.
  void* slot[1];
};

struct MagType {
  uint32_t rounds;
  uint32_t max_chunk;  // start caches with chunks up to this size here
  kmem_cache_t* cache;
};
MagType g_magtypes[] = {{1, 0, nullptr},  {3, 0, nullptr},  {7, 16384, nullptr}, {15, 4096, nullptr},
                        {31, 512, nullptr}, {47, 0, nullptr}, {63, 0, nullptr},   {95, 0, nullptr},
                        {143, 0, nullptr}};
constexpr unsigned kMagTypes = sizeof(g_magtypes) / sizeof(g_magtypes[0]);

// The per-CPU layer: touched only by its CPU, with interrupts masked.
// Invariant: magsize is the capacity of `loaded`, or 0 when there is no
// loaded magazine, so the fast paths never touch a missing magazine.
struct alignas(64) CpuCache {
  Magazine* loaded;
  int32_t rounds;   // rounds in loaded
  int32_t magsize;  // capacity of loaded; 0 when loaded is null
  Magazine* prev;
  int32_t prounds;  // rounds in prev
  int32_t held;     // size of the magazines this CPU holds (0: none)
  uint64_t allocs;
  uint64_t frees;
};

struct MagList {
  Magazine* head = nullptr;
  uint64_t count = 0;
  uint64_t min = 0;  // fewest held since the last working-set update
};

struct Slab;

// One per buffer of an off-slab slab: found through the cache's hash.
struct HashEnt {
  HashEnt* next;
  uintptr_t addr;
  Slab* slab;
  uint32_t link;  // next free index in this slab
};

enum SlabFlags : uint32_t { kSlabVictim = 1 };

struct Slab {
  kmem_cache_t* cache;  // first: the owner check on the free fast path reads it
  Slab* next;
  Slab* prev;
  uintptr_t mem;        // start of the slab's memory (vmem address)
  uintptr_t base;       // first buffer (mem + colour)
  uint32_t chunks;
  uint32_t refcnt;      // buffers out of the slab layer
  uint32_t free_head;   // index of the first free buffer or kNone
  uint32_t flags;
  HashEnt* ents;        // off-slab only: one per buffer
  uint64_t freemap[8];  // bit set = free; at most kMaxChunks buffers
};
constexpr uint32_t kMaxChunks = 512;
// On-slab slabs are one page with the header at its end: buffer -> slab is
// a mask, the same for every on-slab cache.
constexpr uintptr_t kOnSlabHeader = kPageBytes - sizeof(Slab);

// Slab lists: partial (some buffers free), full (none free), empty (all
// free; kept until reaped or until the next slab-layer allocation).
struct SlabList {
  Slab* head = nullptr;
  uint64_t count = 0;
};

}  // namespace
}  // namespace mm

struct kmem_cache {
  // --- hot: read on every free ------------------------------------------
  uint32_t check_owner;    // on-slab: verify the slab header's owner on free
  uint32_t flags;
  // --- cold -------------------------------------------------------------
  uint64_t chunk;
  char name[mm::kNameLen];
  char arena_name[mm::kNameLen];
  uint64_t bufsize, align;
  int (*ctor)(void*, void*, int);
  void (*dtor)(void*, void*);
  void (*reclaim)(void*);
  kmem_cbrc_t (*move)(void*, void*, size_t, void*);
  void* priv;
  vmem_t* arena;
  kmem_cache* list_next;
  kmem_cache* list_prev;
  bool offslab;

  // Slab layer (slab_lock).
  mm::plat::Lock slab_lock;
  uint64_t slab_size;
  uint32_t objs_per_slab;
  uint32_t color, color_max;
  uint64_t header_bytes;   // off-slab header size
  mm::SlabList partial, full, empty;
  mm::HashEnt** hash;
  uint64_t hash_buckets, hash_count, hash_rescales;
  uint64_t buf_total, buf_slab_inuse;
  uint64_t slab_creates, slab_destroys, alloc_fail, ctor_fail;
  uint64_t slab_allocs, slab_frees;
  uint64_t moves[5];
  uint64_t reaps;
  uint64_t move_notify;

  // Depot (depot_lock).
  mm::plat::Lock depot_lock;
  unsigned magtype;        // index into g_magtypes
  mm::MagList full_mags, empty_mags;
  uint64_t depot_contention, depot_contention_last;

  mm::CpuCache cpu[mm::plat::kCpuSlots];  // [kMaxCpus]: always empty (see cpu_slot)
};

namespace mm {
namespace {

// ---------------------------------------------------------------------------
// Global state.

void reap_local();
void run_reclaim_callbacks();
void* meta_alloc(unsigned order, int kmflag);
void meta_free(void* p, unsigned order);

plat::Lock g_caches_lock;
kmem_cache_t* g_caches;  // list of all caches, creation order
bool g_ready;
MemErrorHook g_error_hook;
uint64_t g_errors;
// Held by whoever walks the cache list to reap, flush or move, and by
// kmem_cache_destroy: a cache is never freed under a walker.
plat::Lock g_reap_lock;

// kmem_alloc's size ladder.
constexpr uint32_t kAllocSizes[] = {8,    16,   32,   48,   64,   80,   96,    112,  128,  160,  192,
                                    224,  256,  320,  384,  448,  512,   640,  768,  896,  1024, 1280,
                                    1536, 1792, 2048, 2560, 3072, 3584,  4096, 5120, 6144, 7168, 8192,
                                    10240, 12288, 16384};
constexpr unsigned kAllocCaches = sizeof(kAllocSizes) / sizeof(kAllocSizes[0]);
constexpr size_t kSmallMax = 1024;                   // table step 8 up to here
constexpr size_t kAllocMax = 16384;                  // table step 1024 up to here
kmem_cache_t* g_alloc_caches[kAllocCaches];

// Size -> cache. Null until kmem_init: kmem_alloc then takes its large
// path, which brings kmem up on first use (host) and retries.
kmem_cache_t* g_small_table[kSmallMax / 8];          // (size - 1) >> 3
kmem_cache_t* g_large_table[kAllocMax / 1024];       // (size - 1) >> 10

// ---------------------------------------------------------------------------
// Errors.

void default_error_hook(const MemError& e) {
  plat::log("kmem: %s in '%s': address %p, caller %p, detail %llu", e.kind, e.where,
            reinterpret_cast<void*>(e.address), reinterpret_cast<void*>(e.caller),
            static_cast<unsigned long long>(e.detail));
}

void report(const char* kind, const char* where, const void* addr, uintptr_t caller, uint64_t detail = 0) {
  report_error(MemError{kind, where, reinterpret_cast<uintptr_t>(addr), caller, detail});
}

// ---------------------------------------------------------------------------
// Slab layer. Called with slab_lock held unless noted.

size_t freemap_words(uint32_t chunks) { return (chunks + 63) / 64; }

inline Slab* onslab_header(uintptr_t buf) {
  return reinterpret_cast<Slab*>((buf & ~(uintptr_t{kPageBytes} - 1)) + kOnSlabHeader);
}

void list_insert(SlabList& l, Slab* sp) {
  sp->prev = nullptr;
  sp->next = l.head;
  if (l.head) l.head->prev = sp;
  l.head = sp;
  l.count++;
}

void list_remove(SlabList& l, Slab* sp) {
  if (sp->prev) sp->prev->next = sp->next;
  else l.head = sp->next;
  if (sp->next) sp->next->prev = sp->prev;
  sp->next = sp->prev = nullptr;
  l.count--;
}

size_t hash_index(const kmem_cache_t* cp, uintptr_t addr) {
  uint64_t h = static_cast<uint64_t>(addr) / cp->chunk;
  h ^= h >> 17;
  return static_cast<size_t>(h & (cp->hash_buckets - 1));
}

// Grows the off-slab hash when it averages more than 2 entries per bucket.
// Called without slab_lock; takes it.
void hash_maybe_grow(kmem_cache_t* cp) {
  uint64_t want;
  {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    want = cp->hash_count > 2 * cp->hash_buckets ? cp->hash_buckets * 4 : 0;
    cp->slab_lock.unlock();
    plat::irq_restore(s);
  }
  if (!want) return;
  size_t bytes = want * sizeof(HashEnt*);
  unsigned order = 0;
  while ((kPageBytes << order) < bytes && order < kMaxOrder) order++;
  if ((kPageBytes << order) < bytes) return;
  auto** nb = static_cast<HashEnt**>(meta_alloc(order, KM_NOSLEEP));
  if (!nb) return;
  __builtin_memset(nb, 0, kPageBytes << order);
  want = (kPageBytes << order) / sizeof(HashEnt*);
  HashEnt** old;
  uint64_t old_buckets;
  {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    old = cp->hash;
    old_buckets = cp->hash_buckets;
    cp->hash = nb;
    cp->hash_buckets = want;
    for (uint64_t i = 0; i < old_buckets; i++) {
      for (HashEnt* e = old[i]; e;) {
        HashEnt* n = e->next;
        size_t j = hash_index(cp, e->addr);
        e->next = nb[j];
        nb[j] = e;
        e = n;
      }
    }
    cp->hash_rescales++;
    cp->slab_lock.unlock();
    plat::irq_restore(s);
  }
  size_t old_bytes = old_buckets * sizeof(HashEnt*);
  unsigned old_order = 0;
  while ((kPageBytes << old_order) < old_bytes) old_order++;
  meta_free(old, old_order);
}

// Off-slab headers come from the kmem_alloc size caches' slab layer
// directly, not through magazines: a reap that destroys slabs then leaves
// no headers cached in magazines behind it.
kmem_cache_t* size_cache_of(size_t size);
void* slab_alloc(kmem_cache_t* cp, int kmflag);
void slab_free(kmem_cache_t* cp, void* buf, bool constructed, uintptr_t caller);

void* header_alloc(size_t size, int kmflag) {
  kmem_cache_t* hc = size_cache_of(size);
  if (hc) return slab_alloc(hc, kmflag | KM_NOSLEEP);
  return segkmem_alloc_large(size, kmflag | KM_NOSLEEP);
}

void header_free(void* p, size_t size) {
  kmem_cache_t* hc = size_cache_of(size);
  if (hc) slab_free(hc, p, true, 0);
  else segkmem_free_large(p, size, 0);
}

// Creates a slab (no lock held: it calls vmem and the header cache).
// Returns it ready to insert, all buffers free.
Slab* slab_create(kmem_cache_t* cp, int kmflag) {
  int vmflag = (kmflag & KM_VMFLAGS) | VM_NOSLEEP;  // KM_SLEEP waits in the caller
  size_t align = cp->offslab ? cp->align : cp->slab_size;
  void* mem = vmem_xalloc(cp->arena, cp->slab_size, align, 0, 0, nullptr, nullptr, vmflag);
  if (!mem) return nullptr;
  Slab* sp;
  if (cp->offslab) {
    sp = static_cast<Slab*>(header_alloc(cp->header_bytes, kmflag));
    if (!sp) {
      vmem_xfree(cp->arena, mem, cp->slab_size);
      return nullptr;
    }
  } else {
    sp = onslab_header(reinterpret_cast<uintptr_t>(mem));
  }
  uint32_t color;
  {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    color = cp->color;
    cp->color = cp->color + cp->align > cp->color_max ? 0 : cp->color + static_cast<uint32_t>(cp->align);
    cp->slab_lock.unlock();
    plat::irq_restore(s);
  }
  sp->cache = cp;
  sp->next = sp->prev = nullptr;
  sp->mem = reinterpret_cast<uintptr_t>(mem);
  sp->base = sp->mem + color;
  sp->chunks = cp->objs_per_slab;
  sp->refcnt = 0;
  sp->flags = 0;
  size_t words = freemap_words(sp->chunks);
  for (size_t w = 0; w < words; w++) sp->freemap[w] = ~uint64_t{0};
  if (sp->chunks % 64) sp->freemap[words - 1] = (uint64_t{1} << (sp->chunks % 64)) - 1;
  sp->free_head = 0;
  if (cp->offslab) {
    sp->ents = reinterpret_cast<HashEnt*>(sp + 1);
    for (uint32_t i = 0; i < sp->chunks; i++) {
      sp->ents[i].addr = sp->base + i * cp->chunk;
      sp->ents[i].slab = sp;
      sp->ents[i].link = i + 1 < sp->chunks ? i + 1 : kNone;
    }
  } else {
    sp->ents = nullptr;
    for (uint32_t i = 0; i < sp->chunks; i++)
      *reinterpret_cast<uint32_t*>(sp->base + i * cp->chunk) = i + 1 < sp->chunks ? i + 1 : kNone;
  }
  return sp;
}

// Gives a wholly free slab's memory back (no lock held).
void slab_destroy(kmem_cache_t* cp, Slab* sp) {
  void* mem = reinterpret_cast<void*>(sp->mem);
  if (cp->offslab) header_free(sp, cp->header_bytes);
  vmem_xfree(cp->arena, mem, cp->slab_size);
}

// Links a new slab's hash entries into the cache's hash (slab_lock held).
void hash_insert_slab(kmem_cache_t* cp, Slab* sp) {
  for (uint32_t i = 0; i < sp->chunks; i++) {
    HashEnt* e = &sp->ents[i];
    size_t j = hash_index(cp, e->addr);
    e->next = cp->hash[j];
    cp->hash[j] = e;
  }
  cp->hash_count += sp->chunks;
}

void hash_remove_slab(kmem_cache_t* cp, Slab* sp) {
  for (uint32_t i = 0; i < sp->chunks; i++) {
    HashEnt* e = &sp->ents[i];
    HashEnt** pp = &cp->hash[hash_index(cp, e->addr)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
  }
  cp->hash_count -= sp->chunks;
}

// Takes one buffer out of sp (slab_lock held).
void* slab_take(kmem_cache_t* cp, Slab* sp) {
  uint32_t i = sp->free_head;
  KMEM_ASSERT(i != kNone);
  uintptr_t buf = sp->base + i * cp->chunk;
  sp->free_head = cp->offslab ? sp->ents[i].link : *reinterpret_cast<uint32_t*>(buf);
  sp->freemap[i / 64] &= ~(uint64_t{1} << (i % 64));
  sp->refcnt++;
  cp->buf_slab_inuse++;
  cp->slab_allocs++;
  if (sp->refcnt == 1) {
    list_remove(cp->empty, sp);
    list_insert(sp->refcnt == sp->chunks ? cp->full : cp->partial, sp);
  } else if (sp->refcnt == sp->chunks) {
    list_remove(cp->partial, sp);
    list_insert(cp->full, sp);
  }
  return reinterpret_cast<void*>(buf);
}

// Finds the slab and index of buf; nullptr if buf is not a buffer of this
// cache (slab_lock held).
Slab* slab_lookup(kmem_cache_t* cp, uintptr_t buf, uint32_t& index) {
  Slab* sp;
  if (cp->offslab) {
    HashEnt* e = cp->hash ? cp->hash[hash_index(cp, buf)] : nullptr;
    while (e && e->addr != buf) e = e->next;
    if (!e) return nullptr;
    sp = e->slab;
  } else {
    sp = onslab_header(buf);
    if (sp->cache != cp) return nullptr;
  }
  if (buf < sp->base || (buf - sp->base) % cp->chunk) return nullptr;
  index = static_cast<uint32_t>((buf - sp->base) / cp->chunk);
  if (index >= sp->chunks) return nullptr;
  return sp;
}

// Returns an unconstructed buffer to its slab. Returns a slab that became
// empty and should be destroyed (the caller does it without the lock), or
// nullptr. Bad buffers are reported and ignored.
Slab* slab_put(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  auto buf = reinterpret_cast<uintptr_t>(obj);
  uint32_t i;
  Slab* sp = slab_lookup(cp, buf, i);
  if (!sp) {
    cp->slab_lock.unlock();
    report("free of a buffer this cache never allocated", cp->name, obj, caller);
    cp->slab_lock.lock();
    return nullptr;
  }
  if (sp->freemap[i / 64] & (uint64_t{1} << (i % 64))) {
    cp->slab_lock.unlock();
    report("double free", cp->name, obj, caller);
    cp->slab_lock.lock();
    return nullptr;
  }
  sp->freemap[i / 64] |= uint64_t{1} << (i % 64);
  if (cp->offslab) sp->ents[i].link = sp->free_head;
  else *reinterpret_cast<uint32_t*>(buf) = sp->free_head;
  sp->free_head = i;
  cp->buf_slab_inuse--;
  cp->slab_frees++;
  if (sp->refcnt-- == sp->chunks) {
    list_remove(cp->full, sp);
    if (sp->refcnt) list_insert(cp->partial, sp);
  } else if (sp->refcnt == 0) {
    list_remove(cp->partial, sp);
  }
  if (sp->refcnt == 0) {
    // Keep one empty slab to absorb alloc/free churn at the slab boundary,
    // and any the consolidator is emptying; destroy the rest at once.
    if (cp->empty.count == 0 || (sp->flags & kSlabVictim)) {
      list_insert(cp->empty, sp);
      return nullptr;
    }
    if (cp->offslab) hash_remove_slab(cp, sp);
    cp->buf_total -= sp->chunks;
    cp->slab_destroys++;
    return sp;
  }
  return nullptr;
}

// Allocates one constructed buffer from the slab layer.
void* slab_alloc(kmem_cache_t* cp, int kmflag) {
  for (;;) {
    void* buf = nullptr;
    {
      auto s = plat::irq_save();
      cp->slab_lock.lock();
      Slab* sp = cp->partial.head;
      while (sp && (sp->flags & kSlabVictim)) sp = sp->next;
      if (!sp) sp = cp->empty.head;
      if (sp) buf = slab_take(cp, sp);
      cp->slab_lock.unlock();
      plat::irq_restore(s);
    }
    if (!buf) {
      Slab* sp = slab_create(cp, kmflag);
      if (sp) {
        auto s = plat::irq_save();
        cp->slab_lock.lock();
        if (cp->offslab) hash_insert_slab(cp, sp);
        list_insert(cp->empty, sp);
        cp->buf_total += sp->chunks;
        cp->slab_creates++;
        buf = slab_take(cp, sp);
        cp->slab_lock.unlock();
        plat::irq_restore(s);
        if (cp->offslab) hash_maybe_grow(cp);
      }
    }
    if (!buf) {
      if (!(kmflag & KM_NOSLEEP)) {
        // KM_SLEEP: never fail. Reclaim what this CPU can, then wait.
        reap_local();
        plat::wait_for_memory();
        continue;
      }
      auto s = plat::irq_save();
      cp->slab_lock.lock();
      cp->alloc_fail++;
      cp->slab_lock.unlock();
      plat::irq_restore(s);
      return nullptr;
    }
    if (cp->ctor && cp->ctor(buf, cp->priv, kmflag) != 0) {
      auto s = plat::irq_save();
      cp->slab_lock.lock();
      cp->ctor_fail++;
      Slab* dead = slab_put(cp, buf, 0);
      cp->slab_lock.unlock();
      plat::irq_restore(s);
      if (dead) slab_destroy(cp, dead);
      if (!(kmflag & KM_NOSLEEP)) {
        plat::wait_for_memory();
        continue;
      }
      return nullptr;
    }
    return buf;
  }
}

// Destructs (if constructed) and returns a buffer to the slab layer.
void slab_free(kmem_cache_t* cp, void* buf, bool constructed, uintptr_t caller) {
  if (constructed && cp->dtor) {
    // Only destruct a buffer the slab layer will accept: check first.
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    uint32_t i;
    Slab* sp = slab_lookup(cp, reinterpret_cast<uintptr_t>(buf), i);
    bool ok = sp && !(sp->freemap[i / 64] & (uint64_t{1} << (i % 64)));
    cp->slab_lock.unlock();
    plat::irq_restore(s);
    if (ok) cp->dtor(buf, cp->priv);
  }
  auto s = plat::irq_save();
  cp->slab_lock.lock();
  Slab* dead = slab_put(cp, buf, caller);
  cp->slab_lock.unlock();
  plat::irq_restore(s);
  if (dead) slab_destroy(cp, dead);
}

// ---------------------------------------------------------------------------
// Magazines and the depot.

int mag_rounds(const kmem_cache_t* cp) { return static_cast<int>(g_magtypes[cp->magtype].rounds); }

unsigned magtype_of(uintptr_t cap) {
  for (unsigned i = 0; i < kMagTypes; i++)
    if (g_magtypes[i].rounds == cap) return i;
  plat::fatal("kmem: magazine of unknown capacity %lu", static_cast<unsigned long>(cap));
}

// Destroys a magazine holding n constructed rounds: destructs them, returns
// them to the slab layer, frees the magazine to its own magazine cache (its
// capacity says which).
void magazine_destroy(kmem_cache_t* cp, Magazine* m, int n) {
  KMEM_ASSERT(n >= 0 && static_cast<uintptr_t>(n) <= m->cap);
  for (int i = 1; i <= n; i++) slab_free(cp, m->slot[i], true, 0);
  kmem_cache_free(g_magtypes[magtype_of(m->cap)].cache, m);
}

void lock_depot(kmem_cache_t* cp) {
  if (!cp->depot_lock.try_lock()) {
    cp->depot_lock.lock();
    cp->depot_contention++;
  }
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

// Empties a CPU's magazines (its own CPU, interrupts masked by the caller).
// The magazines go to the depot (full or empty) when the cache's magazine
// type is unchanged, else they are destroyed.
void cpu_flush(kmem_cache_t* cp, CpuCache* cc) {
  Magazine* loaded = cc->loaded;
  Magazine* prev = cc->prev;
  int rounds = cc->rounds, prounds = cc->prounds;
  cc->loaded = cc->prev = nullptr;
  cc->rounds = cc->prounds = 0;
  cc->magsize = 0;
  cc->held = 0;
  if (loaded) magazine_destroy(cp, loaded, rounds);
  if (prev) magazine_destroy(cp, prev, prounds);
}

// Slow path of kmem_cache_alloc: the loaded magazine is empty.
__attribute__((noinline)) void* alloc_slow(kmem_cache_t* cp, int kmflag) {
  auto s = plat::irq_save();
  CpuCache* cc = &cp->cpu[plat::cpu_id()];
  if (!(cp->flags & KMC_NOMAGAZINE)) {
    const int want = mag_rounds(cp);
    if (cc->held && cc->held != want) cpu_flush(cp, cc);  // the magazine size changed
    cc->held = want;
    for (;;) {
      if (cc->rounds > 0) {
        void* obj = cc->loaded->slot[cc->rounds--];
        cc->allocs++;
        plat::irq_restore(s);
        return obj;
      }
      if (cc->prounds > 0) {  // swap loaded and previous
        Magazine* m = cc->loaded;
        cc->loaded = cc->prev;
        cc->prev = m;
        int r = cc->rounds;
        cc->rounds = cc->prounds;
        cc->prounds = r;
        cc->magsize = want;
        continue;
      }
      // Both empty: trade the previous (empty) one for a full one.
      lock_depot(cp);
      Magazine* full = maglist_pop(cp->full_mags);
      if (full && full->cap != static_cast<uintptr_t>(want)) {  // from before a resize
        cp->depot_lock.unlock();
        plat::irq_restore(s);
        magazine_destroy(cp, full, static_cast<int>(full->cap));
        s = plat::irq_save();
        cc = &cp->cpu[plat::cpu_id()];
        continue;
      }
      if (full) {
        if (cc->prev) maglist_push(cp->empty_mags, cc->prev);
        cp->depot_lock.unlock();
        cc->prev = cc->loaded;
        cc->prounds = 0;
        cc->loaded = full;
        cc->rounds = want;
        cc->magsize = want;
        continue;
      }
      cp->depot_lock.unlock();
      break;
    }
  }
  cc->allocs++;
  plat::irq_restore(s);
  return slab_alloc(cp, kmflag);
}

// Slow path of kmem_cache_free: the loaded magazine is full (or absent).
__attribute__((noinline)) void free_slow(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  auto s = plat::irq_save();
  CpuCache* cc = &cp->cpu[plat::cpu_id()];
  if (!(cp->flags & KMC_NOMAGAZINE)) {
    int want = mag_rounds(cp);
    if (cc->held && cc->held != want) cpu_flush(cp, cc);  // the magazine size changed
    cc->held = want;
    for (;;) {
      if (cc->loaded && cc->rounds < cc->magsize) {
        cc->loaded->slot[++cc->rounds] = obj;
        cc->frees++;
        plat::irq_restore(s);
        return;
      }
      if (cc->prev && cc->prounds == 0) {  // swap with the empty previous
        Magazine* m = cc->loaded;
        cc->loaded = cc->prev;
        cc->prev = m;
        cc->prounds = cc->rounds;
        cc->rounds = 0;
        cc->magsize = want;
        continue;
      }
      // Trade the previous (full) one for an empty one.
      lock_depot(cp);
      Magazine* empty = maglist_pop(cp->empty_mags);
      if (empty && empty->cap != static_cast<uintptr_t>(want)) {  // from before a resize
        cp->depot_lock.unlock();
        plat::irq_restore(s);
        magazine_destroy(cp, empty, 0);
        s = plat::irq_save();
        cc = &cp->cpu[plat::cpu_id()];
        continue;
      }
      if (empty) {
        if (cc->prev) maglist_push(cp->full_mags, cc->prev);
        cp->depot_lock.unlock();
        cc->prev = cc->loaded;
        cc->prounds = cc->loaded ? cc->rounds : 0;
        cc->loaded = empty;
        cc->rounds = 0;
        cc->magsize = want;
        continue;
      }
      cp->depot_lock.unlock();
      // No empty magazine in the depot: make one (without blocking).
      unsigned mt = cp->magtype;
      plat::irq_restore(s);
      auto* m = static_cast<Magazine*>(kmem_cache_alloc(g_magtypes[mt].cache, KM_NOSLEEP));
      if (m) {
        m->slot[0] = nullptr;
        m->cap = g_magtypes[mt].rounds;
      }
      s = plat::irq_save();
      cc = &cp->cpu[plat::cpu_id()];
      if (!m) break;
      if (mt != cp->magtype) {  // resized meanwhile: start over with the new size
        kmem_cache_free(g_magtypes[mt].cache, m);
        want = mag_rounds(cp);
        if (cc->held && cc->held != want) cpu_flush(cp, cc);
        cc->held = want;
        continue;
      }
      lock_depot(cp);
      maglist_push(cp->empty_mags, m);
      cp->depot_lock.unlock();
    }
  }
  cc->frees++;
  plat::irq_restore(s);
  slab_free(cp, obj, true, caller);
}

__attribute__((noinline, cold)) void report_double_free(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report("double free", cp->name, obj, caller);
}

__attribute__((noinline, cold)) void report_owner(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  // What is at the header position tells a wrong cache from a stranger.
  const Slab* sp = onslab_header(reinterpret_cast<uintptr_t>(obj));
  kmem_cache_t* owner = nullptr;
  for (kmem_cache_t* c = g_caches; c; c = c->list_next)
    if (c == sp->cache) owner = c;
  if (owner)
    report(cp->flags & KMC_KMEM_ALLOC ? "kmem_free with the wrong size (buffer belongs to another cache)"
                                      : "free to the wrong cache",
           cp->name, obj, caller, owner->bufsize);
  else
    report("free of a pointer kmem never allocated", cp->name, obj, caller);
}

// ---------------------------------------------------------------------------
// Cache creation.

uint64_t g_meta_pages;  // pages of cache structures and hash tables

void* meta_alloc(unsigned order, int kmflag) {
  void* p = page_alloc_va(order, kmflag);
  if (p) __atomic_fetch_add(&g_meta_pages, uint64_t{1} << order, __ATOMIC_RELAXED);
  return p;
}

void meta_free(void* p, unsigned order) {
  page_free_va(p, order);
  __atomic_fetch_sub(&g_meta_pages, uint64_t{1} << order, __ATOMIC_RELAXED);
}

kmem_cache_t* cache_alloc_struct() {
  unsigned order = 0;
  while ((kPageBytes << order) < sizeof(kmem_cache)) order++;
  void* p = meta_alloc(order, KM_SLEEP);
  __builtin_memset(p, 0, kPageBytes << order);
  return new (p) kmem_cache;
}

void cache_free_struct(kmem_cache_t* cp) {
  unsigned order = 0;
  while ((kPageBytes << order) < sizeof(kmem_cache)) order++;
  cp->~kmem_cache();
  meta_free(cp, order);
}

// Chooses slab size and layout.
void cache_layout(kmem_cache_t* cp, size_t quantum) {
  const size_t chunk = cp->chunk;
  bool may_touch = !(cp->flags & (KMC_NOTOUCH | KMC_QCACHE));
  if (may_touch && chunk <= kPageBytes / 8 && quantum == kPageBytes) {
    cp->offslab = false;
    cp->slab_size = kPageBytes;
    cp->header_bytes = sizeof(Slab);
    uint32_t objs = static_cast<uint32_t>(kOnSlabHeader / chunk);
    cp->objs_per_slab = objs < kMaxChunks ? objs : kMaxChunks;
  } else {
    cp->offslab = true;
    size_t q = quantum ? quantum : kPageBytes;
    size_t best = 0;
    // Smallest slab (in quanta) wasting at most 1/8, at least 8 buffers
    // for quantum caches (vmem asks for n * quantum at a time).
    for (size_t n = 1; n <= 64; n++) {
      size_t sz = n * q;
      if (sz < chunk) continue;
      size_t objs = sz / chunk;
      if (objs > kMaxChunks) break;
      if ((cp->flags & KMC_QCACHE) && objs < 8) continue;
      best = sz;
      if ((sz - objs * chunk) * 8 <= sz) break;
    }
    if (!best) best = round_up(chunk, q);
    cp->slab_size = best;
    uint32_t objs = static_cast<uint32_t>(best / chunk);
    cp->objs_per_slab = objs < kMaxChunks ? objs : kMaxChunks;
    cp->header_bytes = sizeof(Slab) + cp->objs_per_slab * sizeof(HashEnt);
  }
  size_t slack = cp->slab_size - (cp->offslab ? 0 : cp->header_bytes) - cp->objs_per_slab * chunk;
  cp->color_max = static_cast<uint32_t>(slack / cp->align * cp->align);
  cp->color = 0;
  cp->check_owner = cp->offslab ? 0 : 1;
}

unsigned initial_magtype(size_t chunk) {
  unsigned best = 0;
  for (unsigned i = 0; i < kMagTypes; i++)
    if (g_magtypes[i].max_chunk && chunk <= g_magtypes[i].max_chunk) best = i;
  return best;
}

kmem_cache_t* cache_create(const char* name, size_t bufsize, size_t align, int (*ctor)(void*, void*, int),
                           void (*dtor)(void*, void*), void (*reclaim)(void*), void* priv, vmem_t* vmp,
                           int cflags) {
  if (bufsize == 0) {
    plat::log("kmem_cache_create('%s'): buffer size 0 refused", name ? name : "?");
    return nullptr;
  }
  if (align == 0) align = kMinAlign;
  if (!is_pow2(align)) {
    plat::log("kmem_cache_create('%s'): alignment %zu is not a power of two", name ? name : "?", align);
    return nullptr;
  }
  if (align < kMinAlign && !(cflags & KMC_QCACHE)) align = kMinAlign;
  kmem_cache_t* cp = cache_alloc_struct();
  copy_name(cp->name, name ? name : "anonymous");
  cp->bufsize = bufsize;
  cp->align = align;
  cp->chunk = round_up(bufsize, align);
  cp->ctor = ctor;
  cp->dtor = dtor;
  cp->reclaim = reclaim;
  cp->priv = priv;
  cp->arena = vmp ? vmp : segkmem_default_arena();
  cp->flags = static_cast<uint32_t>(cflags);
  VmemStats vs;
  vmem_stats(cp->arena, vs);
  copy_name(cp->arena_name, vs.name);
  size_t quantum = static_cast<size_t>(vs.quantum);
  if (cp->flags & KMC_QCACHE) cp->align = quantum;
  cache_layout(cp, quantum);
  if (cp->offslab) {
    cp->hash = static_cast<HashEnt**>(meta_alloc(0, KM_SLEEP));
    __builtin_memset(cp->hash, 0, kPageBytes);
    cp->hash_buckets = kPageBytes / sizeof(HashEnt*);
  }
  cp->magtype = initial_magtype(cp->chunk);
  for (auto& cc : cp->cpu) cc.magsize = 0;
  auto s = plat::irq_save();
  g_caches_lock.lock();
  kmem_cache_t** pp = &g_caches;
  kmem_cache_t* last = nullptr;
  while (*pp) {
    last = *pp;
    pp = &(*pp)->list_next;
  }
  *pp = cp;
  cp->list_prev = last;
  g_caches_lock.unlock();
  plat::irq_restore(s);
  return cp;
}

// ---------------------------------------------------------------------------
// Working set and reaping.

// Frees the depot magazines the working set did not use since the last
// update (all of them with `all`). The fewest magazines a list held over
// the interval (its min) were never needed: exactly that many go, counted
// before the first pop, since popping lowers min along with count.
void depot_reap(kmem_cache_t* cp, bool all) {
  for (int which = 0; which < 2; which++) {
    uint64_t budget;
    {
      auto s = plat::irq_save();
      lock_depot(cp);
      MagList& l = which ? cp->empty_mags : cp->full_mags;
      budget = all ? l.count : l.min;
      cp->depot_lock.unlock();
      plat::irq_restore(s);
    }
    for (; budget; budget--) {
      auto s = plat::irq_save();
      lock_depot(cp);
      Magazine* m = maglist_pop(which ? cp->empty_mags : cp->full_mags);
      cp->depot_lock.unlock();
      plat::irq_restore(s);
      if (!m) break;
      magazine_destroy(cp, m, which ? 0 : static_cast<int>(m->cap));
    }
  }
  auto s = plat::irq_save();
  lock_depot(cp);
  cp->full_mags.min = cp->full_mags.count;
  cp->empty_mags.min = cp->empty_mags.count;
  cp->depot_lock.unlock();
  plat::irq_restore(s);
}

// Destroys the kept empty slab(s); returns how many.
unsigned slab_reap(kmem_cache_t* cp) {
  unsigned n = 0;
  for (;;) {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    Slab* sp = cp->empty.head;
    while (sp && (sp->flags & kSlabVictim)) sp = sp->next;  // the consolidator is on it
    if (sp) {
      list_remove(cp->empty, sp);
      if (cp->offslab) hash_remove_slab(cp, sp);
      cp->buf_total -= sp->chunks;
      cp->slab_destroys++;
    }
    cp->slab_lock.unlock();
    plat::irq_restore(s);
    if (!sp) break;
    slab_destroy(cp, sp);
    n++;
  }
  return n;
}

// Destroying a slab frees its off-slab header into a size cache, which may
// then hold an empty slab of its own: repeat until a pass frees nothing.
void slab_reap_all() {
  for (unsigned freed = 1; freed;) {
    freed = 0;
    for (kmem_cache_t* c = g_caches; c; c = c->list_next) freed += slab_reap(c);
  }
}

// Grows the magazine size when the depot lock was contended since the last
// update: the magazines of the old size are flushed out (lazily per CPU).
void magazine_resize_check(kmem_cache_t* cp) {
  uint64_t c = cp->depot_contention;
  uint64_t delta = c - cp->depot_contention_last;
  cp->depot_contention_last = c;
  if (delta < 4 || cp->magtype + 1 >= kMagTypes || (cp->flags & KMC_NOMAGAZINE)) return;
  auto s = plat::irq_save();
  lock_depot(cp);
  cp->magtype++;
  cp->depot_lock.unlock();
  plat::irq_restore(s);
  depot_reap(cp, true);  // old-size magazines leave the depot
}

void flush_this_cpu(void*) {
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next) {
    if (cp->flags & KMC_NOMAGAZINE) continue;
    auto s = plat::irq_save();
    cpu_flush(cp, &cp->cpu[plat::cpu_id()]);
    plat::irq_restore(s);
  }
}

void cpu_exit_hook() {
  g_reap_lock.lock();
  flush_this_cpu(nullptr);
  g_reap_lock.unlock();
}

// Memory is short and this CPU cannot wait for others: flush its own
// magazines, empty every depot and give empty slabs back. If another reaper
// is at work, leave it to that one.
void reap_local() {
  if (!g_reap_lock.try_lock()) return;
  run_reclaim_callbacks();
  flush_this_cpu(nullptr);
  for (kmem_cache_t* c = g_caches; c; c = c->list_next) depot_reap(c, true);
  slab_reap_all();
  g_reap_lock.unlock();
  segkmem_flush();
}

// Each cache with a reclaim callback is asked to give memory back.
void run_reclaim_callbacks() {
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next)
    if (cp->reclaim) cp->reclaim(cp->priv);
}

// ---------------------------------------------------------------------------
// Consolidation (move callbacks).

// Moves objects out of the emptiest partial slabs while the cache is sparse
// (at most 3/4 of its slab-layer buffers in use). A slab being emptied is
// marked kSlabVictim: allocations skip it and slab_put never destroys it, so
// the mover may look at it between callbacks; an emptied victim is left on
// the empty list for the next reap.
void set_victim(kmem_cache_t* cp, Slab* sp, bool on) {
  auto s = plat::irq_save();
  cp->slab_lock.lock();
  if (on) sp->flags |= kSlabVictim;
  else sp->flags &= ~kSlabVictim;
  cp->slab_lock.unlock();
  plat::irq_restore(s);
}

// Pulls obj out of a full depot magazine, if one holds it, freeing that
// magazine's rounds to the slab layer. Returns true if found.
bool depot_evict(kmem_cache_t* cp, void* obj) {
  auto s = plat::irq_save();
  lock_depot(cp);
  Magazine** pp = &cp->full_mags.head;
  while (*pp) {
    bool hit = false;
    const int n = static_cast<int>((*pp)->cap);
    for (int r = 1; r <= n && !hit; r++) hit = (*pp)->slot[r] == obj;
    if (hit) break;
    pp = &(*pp)->next;
  }
  Magazine* found = *pp;
  if (found) {
    *pp = found->next;
    cp->full_mags.count--;
    if (cp->full_mags.min > cp->full_mags.count) cp->full_mags.min = cp->full_mags.count;
  }
  cp->depot_lock.unlock();
  plat::irq_restore(s);
  if (found) magazine_destroy(cp, found, static_cast<int>(found->cap));
  return found != nullptr;
}

void move_cache(kmem_cache_t* cp) {
  unsigned calls = 0;
  for (;;) {
    Slab* victim = nullptr;
    {
      auto s = plat::irq_save();
      cp->slab_lock.lock();
      if (cp->partial.count >= 2 && cp->buf_slab_inuse * 4 <= cp->buf_total * 3) {
        for (Slab* sp = cp->partial.head; sp; sp = sp->next)
          if (!(sp->flags & kSlabVictim) && (!victim || sp->refcnt < victim->refcnt)) victim = sp;
      }
      if (victim) victim->flags |= kSlabVictim;
      cp->slab_lock.unlock();
      plat::irq_restore(s);
    }
    if (!victim) return;
    bool stop = false;
    for (;;) {
      uintptr_t old = 0;
      {
        auto s = plat::irq_save();
        cp->slab_lock.lock();
        for (uint32_t i = 0; i < victim->chunks && !old; i++)
          if (!(victim->freemap[i / 64] & (uint64_t{1} << (i % 64)))) old = victim->base + i * cp->chunk;
        cp->slab_lock.unlock();
        plat::irq_restore(s);
      }
      if (!old) break;  // emptied
      if (calls++ >= kMaxMoveCalls) {
        stop = true;
        break;
      }
      // A constructed destination from another slab (victims are skipped).
      void* dst = slab_alloc(cp, KM_NOSLEEP);
      if (!dst) {
        stop = true;
        break;
      }
      kmem_cbrc_t rc = cp->move(reinterpret_cast<void*>(old), dst, cp->bufsize, cp->priv);
      {
        auto s = plat::irq_save();
        cp->slab_lock.lock();
        if (rc <= KMEM_CBRC_DONT_KNOW) cp->moves[rc]++;
        cp->slab_lock.unlock();
        plat::irq_restore(s);
      }
      if (rc == KMEM_CBRC_YES) {
        slab_free(cp, reinterpret_cast<void*>(old), true, 0);
      } else if (rc == KMEM_CBRC_DONT_NEED) {
        slab_free(cp, reinterpret_cast<void*>(old), true, 0);
        slab_free(cp, dst, true, 0);
      } else if (rc == KMEM_CBRC_DONT_KNOW) {
        slab_free(cp, dst, true, 0);
        // The old buffer may be sitting free in the depot: get it out so its
        // slab can empty. Otherwise leave this slab.
        if (!depot_evict(cp, reinterpret_cast<void*>(old))) break;
      } else {  // NO or LATER: leave this slab alone for this pass
        slab_free(cp, dst, true, 0);
        break;
      }
    }
    set_victim(cp, victim, false);
    if (stop) return;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Errors.

MemErrorHook set_error_hook(MemErrorHook hook) {
  MemErrorHook old = g_error_hook;
  g_error_hook = hook;
  return old;
}

void report_error(const MemError& e) {
  __atomic_fetch_add(&g_errors, 1, __ATOMIC_RELAXED);
  (g_error_hook ? g_error_hook : default_error_hook)(e);
}

uint64_t error_count() { return __atomic_load_n(&g_errors, __ATOMIC_RELAXED); }

// ---------------------------------------------------------------------------
// Set-up.

bool kmem_ready() { return g_ready; }

void kmem_init() {
  static plat::Lock init_lock;
  auto s = plat::irq_save();
  init_lock.lock();
  if (g_ready) {
    init_lock.unlock();
    plat::irq_restore(s);
    return;
  }
  segkmem_init();  // page allocator, heap and kmem_default arenas
  // Magazine caches first: every other cache's free path may need them.
  for (auto& mt : g_magtypes) {
    char name[kNameLen];
    unsigned n = 0;
    const char* prefix = "kmem_magazine_";
    for (; prefix[n]; n++) name[n] = prefix[n];
    uint32_t r = mt.rounds;
    char digits[8];
    unsigned d = 0;
    do {
      digits[d++] = static_cast<char>('0' + r % 10);
      r /= 10;
    } while (r);
    while (d) name[n++] = digits[--d];
    name[n] = 0;
    mt.cache = cache_create(name, sizeof(Magazine) + mt.rounds * sizeof(void*), 64, nullptr, nullptr, nullptr,
                            nullptr, nullptr, KMC_NOMAGAZINE);
  }
  for (unsigned i = 0; i < kAllocCaches; i++) {
    char name[kNameLen];
    const char* prefix = "kmem_alloc_";
    unsigned n = 0;
    for (; prefix[n]; n++) name[n] = prefix[n];
    uint32_t v = kAllocSizes[i];
    char digits[8];
    unsigned d = 0;
    do {
      digits[d++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    while (d) name[n++] = digits[--d];
    name[n] = 0;
    size_t align = kAllocSizes[i] >= 64 ? 64 : kAllocSizes[i] >= 16 ? 16 : 8;
    if (kAllocSizes[i] % align) align = 8;
    g_alloc_caches[i] = cache_create(name, kAllocSizes[i], align, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     KMC_KMEM_ALLOC);
  }
  // Size tables: the smallest cache that fits.
  unsigned c = 0;
  for (size_t i = 0; i < kSmallMax / 8; i++) {
    size_t size = (i + 1) * 8;
    while (kAllocSizes[c] < size) c++;
    g_small_table[i] = g_alloc_caches[c];
  }
  c = 0;
  for (size_t i = 0; i < kAllocMax / 1024; i++) {
    size_t size = (i + 1) * 1024;
    while (kAllocSizes[c] < size) c++;
    g_large_table[i] = g_alloc_caches[c];
  }
  plat::set_cpu_exit_hook(cpu_exit_hook);
  page_set_reclaim_hook(reap_local);
  __atomic_store_n(&g_ready, true, __ATOMIC_RELEASE);
  init_lock.unlock();
  plat::irq_restore(s);
  vmem_kmem_ready();
}

// ---------------------------------------------------------------------------
// Statistics and walking.

void kmem_cache_stats(const kmem_cache_t* cp, KmemCacheStats& o) {
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
  o.arena = cp->arena_name;
  uint64_t cpu_rounds = 0, allocs = 0, frees = 0;
  for (unsigned i = 0; i < plat::kMaxCpus; i++) {
    const CpuCache& cc = cp->cpu[i];
    cpu_rounds += static_cast<uint64_t>(cc.rounds + cc.prounds);
    allocs += cc.allocs;
    frees += cc.frees;
  }
  auto s = plat::irq_save();
  c->depot_lock.lock();
  o.magazine_size = cp->flags & KMC_NOMAGAZINE ? 0 : g_magtypes[cp->magtype].rounds;
  o.depot_full = cp->full_mags.count;
  o.depot_empty = cp->empty_mags.count;
  o.depot_contention = cp->depot_contention;
  uint64_t depot_rounds = cp->full_mags.count * g_magtypes[cp->magtype].rounds;
  c->depot_lock.unlock();
  c->slab_lock.lock();
  o.buf_total = cp->buf_total;
  o.slabs = cp->partial.count + cp->full.count + cp->empty.count;
  o.pages = o.slabs * cp->slab_size / kPageBytes;
  o.alloc_fail = cp->alloc_fail;
  o.ctor_fail = cp->ctor_fail;
  o.slab_creates = cp->slab_creates;
  o.slab_destroys = cp->slab_destroys;
  o.reaps = cp->reaps;
  o.moves_yes = cp->moves[KMEM_CBRC_YES];
  o.moves_no = cp->moves[KMEM_CBRC_NO];
  o.moves_later = cp->moves[KMEM_CBRC_LATER];
  o.moves_dont_need = cp->moves[KMEM_CBRC_DONT_NEED];
  o.moves_dont_know = cp->moves[KMEM_CBRC_DONT_KNOW];
  uint64_t slab_inuse = cp->buf_slab_inuse;
  c->slab_lock.unlock();
  plat::irq_restore(s);
  o.cpu_rounds = cpu_rounds;
  o.buf_constructed = cpu_rounds + depot_rounds;
  o.buf_inuse = slab_inuse > o.buf_constructed ? slab_inuse - o.buf_constructed : 0;
  o.allocs = allocs;
  o.frees = frees;
}

void kmem_cache_walk(void (*fn)(const kmem_cache_t*, void*), void* arg) {
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next) fn(cp, arg);
}

uint64_t kmem_slab_bytes() {
  uint64_t total = 0;
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next) {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    if (!(cp->flags & KMC_QCACHE))
      total += (cp->partial.count + cp->full.count + cp->empty.count) * cp->slab_size;
    cp->slab_lock.unlock();
    plat::irq_restore(s);
  }
  return total;
}

uint64_t kmem_metadata_pages() { return __atomic_load_n(&g_meta_pages, __ATOMIC_RELAXED); }

void kmem_reap(bool all) {
  if (!g_ready) return;
  g_reap_lock.lock();
  run_reclaim_callbacks();
  if (all) plat::on_each_cpu(flush_this_cpu, nullptr);
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next) {
    if (!all) magazine_resize_check(cp);
    depot_reap(cp, all);
    cp->reaps++;
  }
  slab_reap_all();
  g_reap_lock.unlock();
  vmem_qcache_reap();
  segkmem_flush();
}

void kmem_move_pass() {
  if (!g_ready) return;
  if (!g_reap_lock.try_lock()) return;  // one consolidator (or reaper) at a time
  for (kmem_cache_t* cp = g_caches; cp; cp = cp->list_next)
    if (cp->move) move_cache(cp);
  g_reap_lock.unlock();
}

}  // namespace mm

// ---------------------------------------------------------------------------
// The public API.

using namespace mm;

kmem_cache_t* kmem_cache_create(const char* name, size_t bufsize, size_t align, int (*constructor)(void*, void*, int),
                                void (*destructor)(void*, void*), void (*reclaim)(void*), void* priv, vmem_t* vmp,
                                int cflags) {
  if (!g_ready) kmem_init();
  return cache_create(name, bufsize, align, constructor, destructor, reclaim, priv, vmp, cflags);
}

void kmem_cache_set_move(kmem_cache_t* cp, kmem_cbrc_t (*move)(void*, void*, size_t, void*)) { cp->move = move; }

void kmem_cache_move_notify(kmem_cache_t* cp, void*) {
  auto s = plat::irq_save();
  cp->slab_lock.lock();
  cp->move_notify++;
  cp->slab_lock.unlock();
  plat::irq_restore(s);
}

bool kmem_cache_destroy(kmem_cache_t* cp) {
  uintptr_t caller = caller_of_api();
  if (!cp) return false;
  g_reap_lock.lock();
  // Bring every CPU's magazines back so the count of live objects is exact.
  // The caller guarantees nothing uses the cache any more (kmem_cache_destroy
  // (9F)), so other CPUs' magazines may be taken from here.
  for (unsigned i = 0; i < plat::kCpuSlots; i++) {
    auto s = plat::irq_save();
    cpu_flush(cp, &cp->cpu[i]);
    plat::irq_restore(s);
  }
  depot_reap(cp, true);
  uint64_t live;
  {
    auto s = plat::irq_save();
    cp->slab_lock.lock();
    live = cp->buf_slab_inuse;
    cp->slab_lock.unlock();
    plat::irq_restore(s);
  }
  if (live) {
    g_reap_lock.unlock();
    report("kmem_cache_destroy of a cache with live objects", cp->name, cp, caller, live);
    return false;
  }
  slab_reap(cp);
  auto s = plat::irq_save();
  g_caches_lock.lock();
  if (cp->list_prev) cp->list_prev->list_next = cp->list_next;
  else g_caches = cp->list_next;
  if (cp->list_next) cp->list_next->list_prev = cp->list_prev;
  g_caches_lock.unlock();
  plat::irq_restore(s);
  slab_reap_all();  // off-slab headers freed above may have emptied size-cache slabs
  g_reap_lock.unlock();
  if (cp->hash) {
    size_t bytes = cp->hash_buckets * sizeof(HashEnt*);
    unsigned order = 0;
    while ((kPageBytes << order) < bytes) order++;
    meta_free(cp->hash, order);
  }
  cache_free_struct(cp);
  return true;
}

namespace {
// cache_alloc<true>'s slow path, out of line so that its magazine path
// needs no frame.
__attribute__((noinline)) void* alloc_slow_traced(kmem_cache_t* cp, int kmflag, uint8_t type, size_t requested,
                                                  uintptr_t caller) {
  void* obj = alloc_slow(cp, kmflag);
  mm::tracing::alloc(type, caller, obj, requested, cp->chunk, kmflag);
  return obj;
}

// The magazine layer's allocation. kmem_cache_alloc and kmem_alloc use it
// untraced, and traced (kTraced) from their out-of-line traced copies:
// then it records the event (type, requested, caller) as well, inside the
// masked region on the magazine path (trace/record.h: no second masking,
// no call), after the fact on the slow path.
template <bool kTraced = false>
__attribute__((always_inline)) inline void* cache_alloc(kmem_cache_t* cp, int kmflag, uint8_t type = 0,
                                                        size_t requested = 0, uintptr_t caller = 0) {
  auto s = plat::irq_save();
  CpuCache* cc = &cp->cpu[plat::cpu_slot()];
  if (__builtin_expect(cc->rounds > 0, 1)) {
    void* obj = cc->loaded->slot[cc->rounds--];
    cc->allocs++;
    if constexpr (kTraced)
      kmemtrace::detail::alloc_masked(kmemtrace::Ring::alloc_tag(type), caller, reinterpret_cast<uintptr_t>(obj),
                                      requested, cp->chunk, static_cast<uint32_t>(kmflag));
    plat::irq_restore(s);
    return obj;
  }
  plat::irq_restore(s);
  if constexpr (kTraced) return alloc_slow_traced(cp, kmflag, type, requested, caller);
  return alloc_slow(cp, kmflag);
}
}  // namespace

// Traced, every entry point leaves its untraced body at once for an out of
// line copy that records: off, tracing costs the body mm::tracing::on()
// (one patched nop in the kernel), and the fast paths stay leaf functions
// without a frame. The entry points pass their own return address, read
// only on that branch.
namespace {
__attribute__((noinline)) void* cache_alloc_traced(kmem_cache_t* cp, int kmflag, uintptr_t caller) {
  return cache_alloc<true>(cp, kmflag, mm::tracing::kTypeCache, cp->bufsize, caller);
}
}  // namespace

void* kmem_cache_alloc(kmem_cache_t* cp, int kmflag) {
  if (mm::tracing::on()) return cache_alloc_traced(cp, kmflag, caller_of_api());
  return cache_alloc(cp, kmflag);
}

// The cold paths are tail calls, so (untraced) their own return address is
// the caller of kmem_cache_free, and the fast path needs no stack frame.
// The traced copies pass the caller they were given (0: take our own).
namespace {
__attribute__((noinline, cold)) void free_bad_owner(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report_owner(cp, obj, caller ? caller : caller_of_api());
}
__attribute__((noinline, cold)) void free_twice(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  report_double_free(cp, obj, caller ? caller : caller_of_api());
}
__attribute__((noinline)) void free_slow_entry(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  free_slow(cp, obj, caller ? caller : caller_of_api());
}
}  // namespace

namespace {
// The magazine layer's free, untraced. Always inlined into the public entry
// points: the cold paths' tail calls then still return to their caller.
// kTraced: record the free (type, caller) inside the masked region, before
// the object can be handed out again. A free refused on the magazine path
// (wrong cache, freed twice in a row) records nothing; one refused by the
// slab layer has been recorded.
template <bool kTraced = false>
__attribute__((always_inline)) inline void cache_free(kmem_cache_t* cp, void* obj, uint8_t type = 0,
                                                      uintptr_t caller = 0) {
  if (cp->check_owner && __builtin_expect(onslab_header(reinterpret_cast<uintptr_t>(obj))->cache != cp, 0))
    return free_bad_owner(cp, obj, caller);
  auto s = plat::irq_save();
  CpuCache* cc = &cp->cpu[plat::cpu_slot()];
  if (__builtin_expect(cc->rounds < cc->magsize, 1)) {
    Magazine* m = cc->loaded;
    if (__builtin_expect(m->slot[cc->rounds] == obj, 0)) {  // freed twice in a row
      plat::irq_restore(s);
      return free_twice(cp, obj, caller);
    }
    if constexpr (kTraced)
      kmemtrace::detail::free_masked(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
    m->slot[++cc->rounds] = obj;
    cc->frees++;
    plat::irq_restore(s);
    return;
  }
  if constexpr (kTraced)
    kmemtrace::detail::free_masked(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
  plat::irq_restore(s);
  return free_slow_entry(cp, obj, caller);
}

__attribute__((noinline)) void cache_free_traced(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  cache_free<true>(cp, obj, mm::tracing::kTypeCache, caller);
}
}  // namespace

void kmem_cache_free(kmem_cache_t* cp, void* obj) {
  if (mm::tracing::on()) return cache_free_traced(cp, obj, caller_of_api());
  cache_free(cp, obj);
}

namespace {
inline kmem_cache_t* size_cache(size_t size) {
  if (size - 1 < kSmallMax) return g_small_table[(size - 1) >> 3];
  if (size - 1 < kAllocMax) return g_large_table[(size - 1) >> 10];
  return nullptr;
}
}  // namespace

namespace mm {
namespace {
kmem_cache_t* size_cache_of(size_t size) { return ::size_cache(size); }
}  // namespace
}  // namespace mm

namespace {
// Sizes no size cache serves (before kmem_init on the host: every size).
// *chunk (if chunk is not null) gets the bytes allocated.
__attribute__((noinline)) void* alloc_uncached(size_t size, int kmflag, size_t* chunk) {
  size_t unused;
  if (!chunk) chunk = &unused;
  *chunk = 0;
  if (size == 0) return nullptr;
  if (!g_ready) {  // first use (host): bring kmem up
    kmem_init();
    if (kmem_cache_t* cp = size_cache(size)) {
      *chunk = cp->chunk;
      return cache_alloc(cp, kmflag);
    }
  }
  *chunk = round_up(size, kPageBytes);
  return segkmem_alloc_large(size, kmflag);
}

// kmem_alloc's body, untraced.
__attribute__((always_inline)) inline void* kmem_alloc_body(size_t size, int kmflag) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return cache_alloc(cp, kmflag);
  return alloc_uncached(size, kmflag, nullptr);
}

__attribute__((noinline)) void* kmem_alloc_traced(size_t size, int kmflag, uintptr_t caller) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1))
    return cache_alloc<true>(cp, kmflag, mm::tracing::kTypeKmalloc, size, caller);
  size_t chunk;
  void* p = alloc_uncached(size, kmflag, &chunk);
  mm::tracing::alloc(mm::tracing::kTypeKmalloc, caller, p, size, chunk, kmflag);
  return p;
}
}  // namespace

void* kmem_alloc(size_t size, int kmflag) {
  if (mm::tracing::on()) return kmem_alloc_traced(size, kmflag, caller_of_api());
  return kmem_alloc_body(size, kmflag);
}

void* kmem_zalloc(size_t size, int kmflag) {
  void* p;
  if (mm::tracing::on()) {
    p = kmem_alloc_traced(size, kmflag, caller_of_api());
  } else {
    p = kmem_alloc_body(size, kmflag);
  }
  if (p) __builtin_memset(p, 0, size);
  return p;
}

namespace {
// kmem_free's body, untraced; caller for the reports.
__attribute__((always_inline)) inline void kmem_free_body(void* buf, size_t size, uintptr_t caller) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return cache_free(cp, buf);
  if (!g_ready) {
    report("kmem_free before any allocation", "kmem_alloc", buf, caller, size);
    return;
  }
  if (size == 0) {
    report("kmem_free with size 0", "kmem_alloc", buf, caller, size);
    return;
  }
  segkmem_free_large(buf, size, caller);
}

__attribute__((noinline)) void kmem_free_traced(void* buf, size_t size, uintptr_t caller) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return cache_free<true>(cp, buf, mm::tracing::kTypeKmalloc, caller);
  if (g_ready && size != 0) mm::tracing::free(mm::tracing::kTypeKmalloc, caller, buf);  // else refused below
  kmem_free_body(buf, size, caller);
}
}  // namespace

void kmem_free(void* buf, size_t size) {
  if (!buf) return;
  if (mm::tracing::on()) return kmem_free_traced(buf, size, caller_of_api());
  kmem_free_body(buf, size, caller_of_api());
}
