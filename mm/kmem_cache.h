// SPDX-License-Identifier: Apache-2.0
// kmem's internals: the cache structure and what kmem's layers call in one
// another. Not a public header (that is mm/include/mm/kmem.h).
//
// Where each part of kmem lives:
//   kmem.cpp              caches: creation, the cache list, destruction,
//                         init, statistics, errors; the public cache entry
//                         points
//   kmem_fastpath.h       the magazine fast paths (inlined into the entry
//                         points of kmem.cpp and kmem_alloc.cpp)
//   kmem_magazine.cpp     magazines, the depot, the per-CPU slow paths,
//                         working-set reaping and magazine resizing
//   kmem_slab.cpp         the slab layer: layout, slabs, the off-slab hash,
//                         the page index entries of slab pages
//   kmem_consolidate.cpp  the consolidator (move callbacks)
//   kmem_alloc.cpp        kmem_alloc's size classes and large allocations
//   kmem_whatis.cpp       any address to its owner (kmem_whatis)
#pragma once
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/page.h>
#include <mm/platform.h>
#include "assert.h"
#include "alloc_tag_internal.h"
#include "lock.h"

namespace mm {

constexpr uint32_t kNone = ~0u;
constexpr size_t kMinAlign = 8;
constexpr unsigned kNameLen = 32;
constexpr uint32_t kMaxChunks = 512;  // buffers per slab, at most

// Relaxed single-copy-atomic access to words that one CPU writes and others
// read without a lock (statistics, per-CPU counters, hints checked again
// under a lock): no ordering, no tearing, the same instructions as a plain
// access. Use them only where nothing is published by the value; each use
// says why relaxed is enough.
template <typename T>
inline T ld_relaxed(const T& v) {
  return __atomic_load_n(&v, __ATOMIC_RELAXED);
}
#define MM_RACY_STATS_READER __attribute__((no_sanitize("thread")))
#define MM_RACY_READ(x) (*static_cast<const volatile decltype(x)*>(&(x)))

template <typename T>
struct NonDeduced {
  using type = T;
};
template <typename T>
inline void st_relaxed(T& v, typename NonDeduced<T>::type x) {
  __atomic_store_n(&v, x, __ATOMIC_RELAXED);
}

struct Magazine {
  Magazine* next;
  uintptr_t cap;  // rounds it holds when full: the depot may hold old sizes after a resize
  // slot[0] is null while the magazine is in use (on a CPU or in the depot);
  // while it is destroyed it holds the rounds left (kmem_magazine.cpp,
  // Draining).
  // The rounds are slot[1..n]. With the sentinel,
  // the allocation fast path's load of the top round is its emptiness test
  // (null: empty), and "is obj on top of the magazine?" needs none: the
  // free fast path uses it to catch an immediate double free.
  void* slot[1];
};

// Where a CPU with no loaded magazine points top and limit: a null word, so
// that a pop finds it empty (the sentinel below), and top == limit, so that
// a push finds it full. Nothing ever writes it.
inline constinit void* g_no_rounds[1] = {nullptr};

// The per-CPU layer: touched only by its CPU, with interrupts masked or in
// restartable sections (kmem.cpp, Interrupts and the per-CPU layer).
// The loaded magazine is held as the fast paths use it: top points at its
// top round (slot[rounds], the null sentinel slot[0] when it is empty) and
// limit at its last slot (slot[magsize]). A pop loads *top (null: empty) and
// stores top - 1; a push compares top with limit, checks *top against the
// buffer (an immediate double free), stores the buffer at top + 1 and then
// top + 1. The store of top commits either; there is no count to scale.
// The magazine itself is the one limit ends: held says its size (loaded()).
// Invariant: a loaded magazine has held == its cap, and top <= limit in it;
// none loaded: top == limit == g_no_rounds.
// Other CPUs touch a slot in three cases, none needing an order of its own:
//   - kmem_cache_stats reads top, limit, held, prounds, frees and extra
//     without a lock, for a snapshot (statistics only): word-sized and
//     aligned, so never torn, written plainly by their CPU (an atomic store
//     costs the fast path instructions on every arch: GCC will not fold it
//     into its addressing), read with MM_RACY_READ in functions marked
//     MM_RACY_STATS_READER (ThreadSanitizer does not instrument them: the
//     race is by design); racy_rounds() never dereferences what it reads;
//   - kmem_cache_destroy (and the teardown of a destroyed cache) flushes
//     every slot of a cache nobody uses any more: the caller's own
//     synchronisation that makes the cache unused orders each CPU's last
//     fast-path stores before; cpu_flush holds depot_lock against a CPU
//     flushing its own slot at the same time;
//   - kmem_whatis reads every slot with the other CPUs stopped
//     (plat::stop_others orders what they wrote before they stopped).
struct alignas(64) CpuCache {
  // --- the fast paths' fields, first (the restartable sections address
  // them as the CPU's base plus their offset; top and limit adjacent, for
  // arm64's ldp) ----------------------------------------------------------
  void** top = g_no_rounds;
  void** limit = g_no_rounds;
  // Operations: frees counted (each free, on the fast path a section of
  // its own), allocations not, since every allocation takes a round out of
  // a magazine or comes from the slab layer: allocations = frees + extra -
  // rounds - prounds, extra counting what enters this CPU's magazines
  // without a free (a full magazine from the depot: +its rounds) and what
  // leaves them without an allocation (a full one to the depot, a flush:
  // -their rounds), plus allocations from the slab layer (+1) and frees to
  // it (-1). Only the slow paths write extra. Word-sized: plain stores on
  // every arch (they wrap on 32-bit, the sum modulo 2^32 is exact).
  uintptr_t frees = 0;
  // Allocation profiling's counters of this CPU, biased so that a
  // reference's counter is at prof + ref * 8 (alloc_tag_internal.h,
  // prof_counter_base), for the profiled fast paths (kmem_fastpath.h,
  // Profiled fast paths); 0 where they may not run: the counters are not
  // there yet, or the cache keeps no references, is off-slab or has no
  // magazines. Written under g_caches_lock: by kmem_prof_bases_set for the
  // caches that exist when the counters appear, before counters_ready's
  // cross-call, which orders these stores and the zeroed counters before
  // every CPU's later loads; by cache_create for a later cache, before the
  // cache is published.
  uintptr_t prof = 0;
  // The image's references, g_prof_ref0 | g_prof_ntags << 32
  // (prof_refs_pack), copied here so that the fast allocation checks a
  // tag with one load: a tag outside the section (a call site in a
  // template: alloc_tag.h) is then not counted rather than a write outside
  // the counters.
  uint64_t prof_refs = 0;
  // --- the slow paths' ---------------------------------------------------
  Magazine* prev = nullptr;
  int32_t prounds = 0;  // rounds in prev
  int32_t held = 0;     // size of the magazines this CPU holds (0: none)
  uintptr_t extra = 0;

  // What top, limit and held say (one derivation for the CPU's own reads
  // and the racy ones below): the magazine whose last slot limit is, and
  // the rounds in it; none at g_no_rounds.
  static Magazine* magazine_ending_at(void** l, int32_t h) {
    if (l == g_no_rounds) return nullptr;
    return reinterpret_cast<Magazine*>(reinterpret_cast<char*>(l - h) - offsetof(Magazine, slot));
  }
  static intptr_t rounds_of(void** t, void** l, int32_t h) { return l == g_no_rounds ? 0 : h - (l - t); }
  Magazine* loaded() const { return magazine_ending_at(limit, held); }
  int32_t rounds() const { return static_cast<int32_t>(rounds_of(top, limit, held)); }
  // Loads m (held == m->cap) with n rounds in it, or none (m null).
  void load(Magazine* m, int32_t n) {
    if (!m) {
      top = limit = g_no_rounds;
      return;
    }
    MM_DEBUG_ASSERT(m->cap == static_cast<uintptr_t>(held) && n >= 0 && n <= held);
    top = m->slot + n;
    limit = m->slot + held;
  }
  // loaded() and rounds() for a reader on another CPU: statistics, or a
  // stopped one (kmem_whatis, kmemleak), which on the host may have stopped
  // halfway through load(). From one racy read of each word, nothing
  // dereferenced. held does not change while a magazine is loaded (a new
  // size detaches first), so the magazine is the old one or the new one,
  // and the rounds are clamped to its size: a reader may look at its slots.
  MM_RACY_STATS_READER Magazine* racy_loaded() const {
    return magazine_ending_at(MM_RACY_READ(limit), MM_RACY_READ(held));
  }
  MM_RACY_STATS_READER int32_t racy_rounds() const {
    int32_t h = MM_RACY_READ(held);
    intptr_t r = rounds_of(MM_RACY_READ(top), MM_RACY_READ(limit), h);
    return r < 0 ? 0 : r > h ? h : static_cast<int32_t>(r);
  }
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

enum SlabFlags : uint32_t {
  kSlabVictim = 1,    // the consolidator is emptying it (kmem_consolidate.cpp)
  kSlabDiverted = 2,  // its frees go out of line (Slab::check): kmemleak's annotations
};

struct LeakSlab;  // kmemleak's per-buffer metadata (kmemleak_meta.h)

struct Slab {
  // What the free fast path's owner check compares with the cache (first:
  // the page index's g_no_owner reads as a Slab whose check is null): the
  // cache while its frees may go the fast way; null while they must go out
  // of line (a slab diverted for kmemleak's annotations, kmemleak_meta.h,
  // Annotations; a slab being destroyed, so that a stale free into its page
  // is refused). Everything else reads cache.
  kmem_cache_t* check;
  kmem_cache_t* cache;
  Slab* next;
  Slab* prev;
  uintptr_t mem;        // start of the slab's memory (vmem address)
  uintptr_t base;       // first buffer (mem + colour + the cache's lead)
  uint32_t chunks;
  uint32_t refcnt;      // buffers out of the slab layer
  uint32_t free_head;   // index of the first free buffer or kNone
  uint32_t flags;
  HashEnt* ents;        // off-slab only: one per buffer
  LeakSlab* leak;       // kmemleak's metadata while it is on and the cache is tracked, else null
  uint32_t* tags;       // allocation profiling: each buffer's tag reference (alloc_tag.cpp, References), or null
  uint64_t freemap[kMaxChunks / 64];  // bit set = free in the slab layer
};
static_assert(__builtin_offsetof(Slab, check) == 0, "the page index's g_no_owner stands for a Slab with no cache");
// On-slab slabs are one page with the header at its end: buffer -> slab is
// a mask, the same for every on-slab cache.
constexpr uintptr_t kOnSlabHeader = kPageBytes - sizeof(Slab);

// A cache's name: prefix, then v in decimal ("kmem_alloc_96"). (vmem's
// quantum caches have their own: vmem builds without kmem.)
inline void cache_size_name(char (&out)[kNameLen], const char* prefix, uint32_t v) {
  unsigned n = 0;
  for (; prefix[n] && n < kNameLen - 11; n++) out[n] = prefix[n];
  char digits[10];
  unsigned d = 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (d) out[n++] = digits[--d];
  out[n] = 0;
}

inline Slab* onslab_header(uintptr_t buf) {
#if defined(__riscv)
  // The next page's start minus the header: RISC-V's 12-bit immediates
  // reach neither the mask nor kOnSlabHeader, and this way (shift, add,
  // shift, then a negative load offset) is shorter.
  return reinterpret_cast<Slab*>((((buf >> kPageShift) + 1) << kPageShift) - sizeof(Slab));
#else
  return reinterpret_cast<Slab*>((buf & ~(uintptr_t{kPageBytes} - 1)) + kOnSlabHeader);
#endif
}
inline bool slab_buffer_free(const Slab* sp, uint32_t i) { return sp->freemap[i / 64] & (uint64_t{1} << (i % 64)); }

// Slab lists: partial (some buffers free), full (none free), empty (all
// free; kept until reaped or until the next slab-layer allocation).
struct SlabList {
  Slab* head = nullptr;
  uint64_t count = 0;
};

// How the free fast path checks that a buffer belongs to the cache
// (kmem_cache::owner_check): kOwnerOnSlab, an owner id, or one of the two
// values past the ids.
// - An off-slab cache of heap memory has an owner id, 1 to kOwnerIds - 1,
//   while it lives: the byte of the heap's owner ids (heap_index.h) of each
//   page of its slabs. The check compares the buffer's page's byte with it.
//   A mismatch, and a cache created while every id was taken
//   (kOwnerIndex, which no byte holds), take the page index's check.
// - A byte, so 255 ids: riscv64 has no scaled index, and a 16-bit word's
//   address would cost it a shift more on every free. An embedded kernel
//   has a few dozen caches of buffers above 512 bytes (kmem_alloc's 19
//   among them); past 255 live ones, the next are exact but slower (the
//   index's check, out of line, on every free).
// - Ids are taken when a cache is published and given back once its last
//   slab is gone (kmem.cpp, owner_id_take, owner_id_give), so no page of a
//   live slab carries a stale one.
enum OwnerCheck : uint32_t {
  kOwnerOnSlab = 0,         // the slab header at the end of the buffer's page
  kOwnerIds = 256,          // ids are 1 to kOwnerIds - 1: a byte per page (a bitmap of kOwnerIds / 8 bytes)
  kOwnerIndex = 0x10000,    // no id: the heap page index (segkmem_page_of) -> Slab
  kOwnerNone = 0x10001,     // memory that is no heap memory (integer arenas)
};
inline bool owner_has_id(uint32_t check) { return check != kOwnerOnSlab && check < kOwnerIds; }
inline bool owner_heap_offslab(uint32_t check) { return check != kOwnerOnSlab && check != kOwnerNone; }

}  // namespace mm

struct kmem_cache {
  // --- hot: read by the fast paths, and small offsets for every arch's
  // loads (arm's ldrd reaches 255 bytes): the owner check on every free,
  // the profiled paths' fields, then the per-CPU layer, whose every
  // CpuCache field is then a small offset from its CPU's base (cpu_base:
  // arm64's ldp reaches 504) ---------------------------------------------
  uint32_t owner_check;    // mm::OwnerCheck: kOwnerOnSlab, an owner id, kOwnerIndex or kOwnerNone
  uint32_t flags;
  uint64_t chunk;
  bool tracked;  // kmemleak objects: not KMC_NOTRACK, not a quantum cache, heap memory
  bool profiled;  // allocation profiling keeps tag references: as tracked (not the allocators' own)
  uint32_t prof_recip;  // ceil(2^32 / chunk): a buffer's index without a division (prof_slot)
  // On-slab: a buffer's reference is entry (address % page) >> prof_shift
  // of its slab's array (prof_shift: log2 of the largest power of two <=
  // chunk, so no two buffers share an entry; the array has page >>
  // prof_shift entries, fewer than 2 per buffer).
  uint32_t prof_shift;
  int64_t prof_delta;  // prof_delta(chunk): what one buffer adds to its tag's counter
  // The heap's owner ids (heap_index.h: base, id_span, ids), copied here
  // when the cache is published (g_heap_index is written once, before any
  // cache is made): the free's owner check of an off-slab cache (an owner
  // id in owner_check) loads them from the cache it already addresses,
  // with no address of a global to form and no register to hold one. In
  // the line's room before cpu (kmem_fastpath.h checks it stays at 64).
  uintptr_t ids_base;
  uintptr_t ids_span;
  const uint8_t* ids;
  mm::CpuCache cpu[mm::plat::kCpuSlots];  // [kMaxCpus]: always empty (see cpu_slot)
  // --- cold -------------------------------------------------------------
  char name[mm::kNameLen];
  char arena_name[mm::kNameLen];
  uint64_t bufsize, align;
  int (*ctor)(void*, void*, int);
  void (*dtor)(void*, void*);
  void (*reclaim)(void*);
  // Set at any time: stored with release (what the client set up for the
  // callback before kmem_cache_set_move), loaded with acquire by move_cache.
  kmem_cbrc_t (*move)(void*, void*, size_t, void*);
  void* priv;
  vmem_t* arena;
  bool offslab;

  // The cache list (g_caches_lock in kmem.cpp).
  kmem_cache* list_next;
  kmem_cache* list_prev;
  uint32_t refs;  // walkers holding this cache (cache_next)
  bool dead;      // destroyed: freed when the last walker lets go
  // Bytes before a slab's first buffer: a debugged cache's left redzone
  // word and audit tag of that buffer (the others' end the chunk before
  // them), rounded up to the alignment (kmem_debug.cpp, The layout); 0 for
  // other caches. In dead's padding: the fields after keep their offsets.
  uint16_t lead;


  // Debug modes (kmem_debug.cpp): KMF_ flags, 0 for none. A debugged cache
  // has KMC_NOMAGAZINE set and a BufTag at tag_off in every buffer.
  uint32_t debug;
  uint32_t tag_off;
  // On-slab caches: where a free buffer keeps its slab free-list link (0, or
  // inside the BufTag of a debugged cache), and the link's secret
  // (kmem_slab.cpp, Free-list hardening).
  uint32_t link_off;
  uint32_t link_secret;

  // Slab layer (slab_lock).
  mm::plat::Lock slab_lock;
  uint64_t slab_size;
  uint32_t objs_per_slab;
  uint32_t color, color_max;
  uint64_t header_bytes;   // off-slab header size
  mm::SlabList partial, full, empty;
  mm::HashEnt** hash;
  uint64_t hash_buckets, hash_count, hash_rescales;
  // The first hash table, inside the cache (as vmem's hash0): a cache that
  // never holds more than a few slabs takes no metadata page for one. The
  // first growth moves the table to a metadata page.
  static constexpr unsigned kHash0Buckets = 8;
  mm::HashEnt* hash0[kHash0Buckets];
  uint64_t buf_total, buf_slab_inuse;
  uint64_t slab_creates, slab_destroys, alloc_fail, ctor_fail;
  uint64_t slab_allocs, slab_frees;
  uint64_t moves[5];
  uint64_t reaps;
  uint64_t move_notify;

  // Depot (depot_lock).
  mm::plat::Lock depot_lock;
  // Index into the magazine types: written under depot_lock (st_relaxed),
  // read without it (ld_relaxed) by the slow paths as a hint: a stale value
  // only delays a CPU's switch to the new size, and every magazine's own
  // cap is checked against it (kmem_magazine.cpp, Magazine types).
  unsigned magtype;
  mm::MagList full_mags, empty_mags;
  uint64_t depot_contention, depot_contention_last;
  // Batches of magazines taken off this cache (depot or a CPU) by a reaper
  // and not yet destroyed: incremented (relaxed) under depot_lock, so that
  // kmem_cache_destroy, which takes depot_lock before it waits, sees every
  // batch taken before; decremented with release once the batch's buffers
  // are back in the slab layer. kmem_cache_destroy waits (acquire) for zero
  // before it counts live objects: the decrement is the batch's last touch
  // of the cache.
  uint32_t inflight;
  // Magazines taken off the depot or a CPU and being destroyed with
  // interrupts on (kmem_magazine.cpp, Draining): chained through next, under
  // depot_lock; each one's slot[0] holds the rounds it has left (written by
  // its destroyer alone), which kmemleak's marking reads as free buffers.
  mm::Magazine* draining;
};

// x / chunk (a buffer's index from its offset in the slab, or the offslab
// hash's key), in the word size: 32-bit ARM then divides with one udiv,
// where the 64-bit chunk would call libgcc's 64-bit division
// (__aeabi_uldivmod, dozens of instructions). A chunk always fits a word.
inline uintptr_t div_chunk(const kmem_cache_t* cp, uintptr_t x) { return x / static_cast<uintptr_t>(cp->chunk); }

namespace mm {

// --- kmem.cpp -------------------------------------------------------------
kmem_cache_t* cache_create(const char* name, size_t bufsize, size_t align, int (*ctor)(void*, void*, int),
                           void (*dtor)(void*, void*), void (*reclaim)(void*), void* priv, vmem_t* vmp,
                           int cflags);
void report(const char* kind, const char* where, const void* addr, uintptr_t caller, uint64_t detail = 0);
// What kmem_alloc's size table names before kmem_init (kmem_alloc.cpp, Before
// kmem_init): no magazines (its pops and pushes miss), no owner check;
// alloc_slow and free_slow refuse it with a report.
extern kmem_cache g_no_class;
#if !defined(MM_KERNEL)
// A hooked kmem_alloc's miss on g_no_class: kmem's first use on the host
// (kmem_alloc.cpp, Before kmem_init).
void* kmem_alloc_first_use(size_t size, int kmflag, uintptr_t caller, const AllocTag* tag);
#endif
inline uintptr_t caller_of_api() {
  return reinterpret_cast<uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0)));
}
// The same in a frameless function whose every call is a tail call, where
// the link register holds the return address throughout (BOARD/frameless
// checks that nothing in such a function writes it): one move, where
// __builtin_return_address costs a save and a restore of the link
// register (arm64: its xpaclri strips a pointer authentication code from
// x30 in place; riscv64: GCC saves ra whenever it is read). Return
// addresses are never signed here: the arm64 kernel is built with
// -mbranch-protection=none.
__attribute__((always_inline)) inline uintptr_t caller_of_leaf() {
#if defined(MM_KERNEL) && defined(__aarch64__)
  uintptr_t r;
  asm("mov %0, x30" : "=r"(r));
  return r;
#elif defined(MM_KERNEL) && defined(__riscv)
  uintptr_t r;
  asm("mv %0, ra" : "=r"(r));
  return r;
#else
  return caller_of_api();
#endif
}
// kmem_init is done: stored with release by kmem_init after everything it
// set up (arenas, magazine and size caches, hooks), loaded with acquire
// (kmem_ready and the entry points' checks). kmem.cpp.
extern bool g_ready;
// The cache list, walked with a reference on the current cache: the cache
// after prev (the first when prev is null) with a reference held, prev's
// reference dropped; nullptr at the end. Destroyed caches are skipped. A
// walker may do anything with the cache it holds, destroy it included.
kmem_cache_t* cache_next(kmem_cache_t* prev);
// The raw list, for a reader with the world stopped (kmemleak), which holds
// cache_list_lock() first where stopped CPUs may hold it.
kmem_cache_t* cache_list_first();
plat::Lock& cache_list_lock();
void cache_put(kmem_cache_t* cp);
template <typename F>
void for_each_cache(F&& f) {
  for (kmem_cache_t* cp = cache_next(nullptr); cp; cp = cache_next(cp)) f(cp);
}
// Pages of kmem's own bookkeeping (cache structures, hash tables).
void* meta_alloc(unsigned order, int kmflag);
void meta_free(void* p, unsigned order);

// --- kmem_debug.cpp -------------------------------------------------------
// What a check found while a lock was held, reported once it is dropped.
struct Finding {
  const char* kind = nullptr;  // null: nothing found
  uintptr_t addr = 0;
  uint64_t detail = 0;
  MemDetail* d = nullptr;  // the caller's, filled when kind is set
};
void report_finding(kmem_cache_t* cp, const Finding& f, uintptr_t caller);
// At creation: the KMF_ flags a cache gets (its cflags, and the configured
// ones for caches that can be debugged), and its layout with a BufTag.
uint32_t debug_flags_for(const char* name, int cflags, bool heap_memory);
void debug_layout(kmem_cache_t* cp);
// A new slab's buffers: free, tagged (and poisoned).
void debug_slab_init(kmem_cache_t* cp, Slab* sp);
// The audit backtrace of an operation (taken before any lock).
uint32_t debug_stack(const kmem_cache_t* cp, uintptr_t caller);
// slab_lock held: buffer i of sp was just taken for an allocation of
// `requested` bytes (0: not known, the buffer size): check its poison and
// tag (f gets what was wrong, and the buffer is repaired), fill it, mark
// it allocated, audit it.
void debug_take(kmem_cache_t* cp, Slab* sp, uint32_t i, size_t requested, uint32_t stack, Finding& f);
// slab_lock held: a buffer whose constructor failed goes back as free.
void debug_untake(kmem_cache_t* cp, uintptr_t buf);
// slab_lock held, on a free of buffer i of sp (size: what kmem_free was
// given, 0: none): false to refuse the free (freed already, a wrong size:
// f says which); true to go on (f may hold an overrun, repaired), with the
// buffer marked as being freed.
bool debug_free_check(kmem_cache_t* cp, Slab* sp, uint32_t i, size_t size, Finding& f);
// slab_lock held, once the destructor ran: keep the contents (log), poison,
// mark free, audit the free.
void debug_free_commit(kmem_cache_t* cp, uintptr_t buf, uint32_t stack);
// A free of a pointer that is no buffer of cp: inside one, or someone else's.
void debug_report_bad_pointer(kmem_cache_t* cp, void* buf, uintptr_t caller);
// kmem_cache_destroy found live objects: report them, with their trails.
void debug_report_live(kmem_cache_t* cp, uint64_t live, uintptr_t caller);
// kmem_init, first: the host's MM_KMEM_DEBUG; last: kmem_alloc's hooks if
// its caches are debugged (they need the size the caller asked for).
void debug_init();
void debug_init_done();
// kmem_magazine.cpp: an allocation or free of a KMC_NOMAGAZINE cache,
// counted as the magazine layer counts (requested, caller, size: as
// slab_alloc and slab_free take them).
void* alloc_unmagazined(kmem_cache_t* cp, int kmflag, size_t requested, uintptr_t caller);
void free_unmagazined(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t size);

// --- kmem_slab.cpp --------------------------------------------------------
void internal_init();
// kmem's own bookkeeping (off-slab headers, kmemleak's per-slab metadata):
// from the internal ladder of KMC_NOTRACK caches' slab layer, never through
// magazines; above 16 KiB whole heap pages (marked ignored by kmemleak).
void* internal_alloc(size_t size, int kmflag);
void internal_free(void* p, size_t size);
void cache_layout(kmem_cache_t* cp, size_t quantum);
// requested and caller matter to debugged caches only (the redzone starts
// at requested; the audit trail starts at caller, 0: the whole backtrace).
void* slab_alloc(kmem_cache_t* cp, int kmflag, size_t requested = 0, uintptr_t caller = 0);
// size: what kmem_free was given (debugged caches check it; 0: unknown).
void slab_free(kmem_cache_t* cp, void* buf, bool constructed, uintptr_t caller, size_t size = 0);
// slab_lock held: rebuilds sp's on-slab free list from its bitmap (a debug
// check that repaired free buffers' tags, where their links live).
void slab_freelist_rebuild(kmem_cache_t* cp, Slab* sp);
// The on-slab free list's links, stored encoded (kmem_slab.cpp, Free-list
// hardening).
inline uint32_t link_key(const kmem_cache_t* cp, uintptr_t at) {
  return static_cast<uint32_t>(at >> 2) * 0x9e3779b1u ^ cp->link_secret;
}
inline void link_store(const kmem_cache_t* cp, uintptr_t buf, uint32_t next) {
  uintptr_t at = buf + cp->link_off;
  *reinterpret_cast<uint32_t*>(at) = next ^ link_key(cp, at);
}
inline uint32_t link_load(const kmem_cache_t* cp, uintptr_t buf) {
  uintptr_t at = buf + cp->link_off;
  return *reinterpret_cast<const uint32_t*>(at) ^ link_key(cp, at);
}
Slab* slab_lookup(kmem_cache_t* cp, uintptr_t buf, uint32_t& index);
unsigned slab_reap(kmem_cache_t* cp);
void slab_reap_all();
// The slab that owns addr, through the heap page index: any address inside
// a slab's memory, for caches whose slabs are heap pages; nullptr if none.
Slab* slab_of_heap_address(uintptr_t addr);

// --- kmem_magazine.cpp ----------------------------------------------------
void magazine_init();
unsigned initial_magtype(size_t chunk);
uint32_t magtype_rounds(unsigned magtype);
void* alloc_slow(kmem_cache_t* cp, int kmflag);
// The same for the cache whose CpuCache of this CPU is at base +
// offsetof(kmem_cache, cpu) (kmem_fastpath.h, cpu_base); the first
// argument is unused (kmem_fastpath.h, cache_alloc, says why).
void* alloc_slow_at(void*, int kmflag, char* base);
// That cache: the inverse of cpu_base, on the same CPU.
inline kmem_cache_t* cache_at(char* base) {
  return reinterpret_cast<kmem_cache_t*>(base - plat::cpu_line_offset());
}
void free_slow(kmem_cache_t* cp, void* obj, uintptr_t caller);
void depot_reap(kmem_cache_t* cp, bool all);
bool depot_evict(kmem_cache_t* cp, void* obj);
void magazine_resize_check(kmem_cache_t* cp);
// Empties cp's magazines of CPU slot `cpu` (the calling CPU's, or any when
// the cache is no longer used: destroy): they are detached with interrupts
// masked and destroyed (destructors run) with interrupts as the caller had
// them.
void cpu_flush(kmem_cache_t* cp, unsigned cpu);
void flush_this_cpu(void*);
void reap_local();
void run_reclaim_callbacks();

// --- kmemleak (kmem_slab.cpp: records and diverted slabs; kmemleak.cpp: the rest)
struct LeakMeta;
// New slabs of tracked caches get records while this is set (kmemleak
// sets it before the hooks go on, clears it after they go off; read
// relaxed: a slab made just before sees it off, and the switch's fill
// gives it records).
extern bool g_leak_records;
// A slab of a tracked cache went without records while they were wanted
// (memory was short): the next scan tries again (relaxed: a hint).
extern uint32_t g_leak_records_short;  // word-sized: riscv64 has no sub-word atomics
// Gives every slab of cp records, as many batches as that takes, until
// none lacks them; false if memory ran out first (those slabs are scanned
// as roots and their buffers counted as untracked).
bool leak_records_fill(kmem_cache_t* cp);
// With every other CPU stopped (the switch on): every record of cp loses
// its stamp and scan state and keeps its annotations (kmemleak_meta.h,
// Stamps and Annotations). Stopped, so that a stamp still on its way from
// before the switch off lands after the zeroing, not in the middle of it.
void leak_records_forget_stamps(kmem_cache_t* cp);
// The record of buffer buf of cp (allocated or not), or null (untracked
// cache, or a slab without records).
LeakMeta* leak_meta_of(kmem_cache_t* cp, const void* buf);
// Sets (then clears) flags in the record of buffer buf of slab sp of cp,
// making the slab's records if it has none, and diverts the slab while a
// buffer of it keeps an annotation (kmemleak_meta.h, Annotations). buf must
// be an allocated buffer's start, and the caller's (its slab stays
// meanwhile).
enum class LeakAnnotation { kDone, kNoObject, kNoMemory };
LeakAnnotation leak_annotate(kmem_cache_t* cp, Slab* sp, uintptr_t buf, uint8_t set, uint8_t clear);
// A free of buffer buf of cp's slab sp that went out of line (kmem.cpp,
// free_bad_owner): clears its record if it keeps an annotation, before
// the buffer can be handed out again. Returns the flags it had (0 if
// none, or buf is no allocated buffer of sp: the slab layer reports that).
uint8_t leak_free_diverted(kmem_cache_t* cp, Slab* sp, uintptr_t buf);
// Buffer i of sp gets flags in its record; its slab is diverted while it
// has a buffer with annotations (kLeakKept), and no longer once none is
// left (slab_lock held, or every other CPU stopped: kmemleak_clear).
void leak_record_flags(kmem_cache_t* cp, Slab* sp, uint32_t i, uint8_t flags);
// The consolidator moved an object from buffer from to buffer to: its
// record goes with it.
void leak_move(kmem_cache_t* cp, uintptr_t from, uintptr_t to);
uint64_t leak_records_bytes();
// kmemleak.cpp: is it on (the hooked copies stamp objects), and the stamps.
extern uint32_t g_leak_on;  // written under kmemleak's control lock, read relaxed (kmemleak.cpp, Switching)
inline bool leak_stamping() { return __atomic_load_n(&g_leak_on, __ATOMIC_RELAXED) != 0; }
// Stamps obj's record (a tail call from the magazine path: returns obj):
// a kmem_cache_alloc's (the buffer's size is the size asked for), or a
// kmem_alloc's of requested bytes (a class's: 16 KiB at most).
void* leak_stamp(kmem_cache_t* cp, void* obj, uintptr_t caller);
void* leak_stamp_sized(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t requested);

void leak_note_large(void* obj, uintptr_t caller, size_t requested);
// An annotated buffer's free went out of line and found scan areas
// registered for it: they go with it (leak_free_diverted's caller).
void leak_forget_areas(uintptr_t object);
uint64_t kmemleak_metadata_pages();

// --- Allocation profiling (alloc_tag.cpp; the references: kmem_slab.cpp) ---
// Stamps obj with tag and counts it; before a free, subtracts obj from its
// tag and clears the reference (each masks interrupts for the counters).
// prof_stamp_irq returns obj (a tail call's value).
void* prof_stamp_irq(const kmem_cache_t* cp, void* obj, const AllocTag* tag);
void prof_unstamp(const kmem_cache_t* cp, void* obj, uintptr_t caller);
// An object the consolidator moved from one buffer to another keeps its
// reference (or, if the new buffer's slab has none, leaves its tag).
void prof_move(const kmem_cache_t* cp, void* from, void* to);

// --- kmem_consolidate.cpp -------------------------------------------------
void move_cache(kmem_cache_t* cp);

// --- kmem_alloc.cpp -------------------------------------------------------
void kmem_alloc_init();

}  // namespace mm
