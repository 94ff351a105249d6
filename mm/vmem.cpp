// SPDX-License-Identifier: Apache-2.0
// vmem: resource arenas (interface and summary in mm/vmem.h).
//
// 1. An arena is a set of integers: callers add ranges ("spans", vmem_add,
//    or imported) and allocate pieces ("segments") in multiples of its
//    quantum. Nothing here touches the integers themselves.
// 2. Boundary tags. Every span and segment has one vmem_seg ("tag"), all on
//    one circular segment list (knext/kprev) through the sentinel seg0: each
//    span's tag, then its segments in address order, tiling it. Spans follow
//    in creation order (an import is O(1)), also on the span list. So list
//    neighbours are address neighbours, and a span tag (seg0 is typed as
//    one) fences coalescing: a free merges with the free segments before and
//    after, never across spans. No two free segments are ever adjacent.
// 3. Free lists. Free segments sit on free lists by size (list i:
//    [2^i, 2^(i+1)), circular, newest first; bit i of freemap: list i
//    non-empty). Instant fit (the default) takes the first segment of the
//    lowest non-empty list whose every member fits (list highbit(size), or
//    the next when size is no power of two): a mask and a ctz, constant time;
//    else it searches the one list that may hold a fit. Best fit takes the
//    smallest fit of the first list from highbit(size) up that has one. Next
//    fit resumes after its last allocation (the rotor), reusing integers as
//    late as possible (ids). Constrained requests (align, phase, nocross,
//    minaddr, maxaddr) search in the same orders. A segment is carved from
//    the front of a free one; a free is the mirror image.
//    Each free tag notes the list it is on. One free segment per arena may
//    sit above its list: the lazy one. When the fast path carves from the
//    head of list i and the rest falls to list j < i while lists j..i-1 are
//    empty, the rest stays at the head of list i (so taking a quantum from
//    a fresh 2^n arena and giving it back moves nothing). Only the fast
//    path sees it there: it takes the head of the list it picks only if
//    that is at least 2^sure (the lazy one may be smaller: then it settles
//    it, i.e. moves it to its own list, and picks again); a free moves a
//    segment only once it outgrows the list it is on; any insertion into a
//    free list, and any search, first settles the lazy segment. So nothing
//    enters lists j..i-1 meanwhile, and every choice, and every list's
//    order once settled, is what exact lists give (vmem_verify checks
//    this placement; the host tests compare with exact lists).
// 4. Allocated segments are found on free through a hash on the start
//    (Fibonacci, chained through the tag's link): 16 buckets in the arena,
//    grown about 4x past two per bucket (pages taken with no lock held, after
//    the allocation that triggered it). A free checks the size: a wrong size,
//    a double free or an unallocated address is refused.
// 5. Quantum caches. An arena created with qcache_max > 0 is fronted by kmem
//    object caches of 1..n quanta ("<arena>_<n>", KMC_QCACHE | KMC_NOTOUCH)
//    for vmem_alloc/vmem_free up to qcache_max. Their slabs come through
//    vmem_xalloc/vmem_xfree, which NEVER use the caches: kmem -> vmem cannot
//    recurse (as in illumos). Until there is a cache layer (10) the request
//    is recorded, and registering the layer creates the caches; segments
//    allocated directly for cacheable sizes before then are marked early
//    and counted, so their vmem_free goes back to the arena.
// 6. Importing. When nothing fits (and the request has no nocross, minaddr
//    or maxaddr), afunc(source, size, flags) runs with the lock dropped and
//    its result becomes an imported span; a free that empties an imported
//    span hands it back with ffunc (lock dropped).
// 7. The tag pool. Global, refilled with pages from page_alloc_va, never
//    from vmem. Each arena keeps spare tags, at least kSegMinFree (a span and
//    two splits) before any change; kPoolReserve tags are kept for
//    VM_PUSHPAGE callers. Frees never need a tag. So an arena needs the page
//    allocator: vmem_create refuses one before page_init, with a report; on
//    the host it brings the page allocator up first (an arena may be a
//    program's first call into the library).
// 8. Locking and ordering. One spinlock per arena (IRQs masked) guards it;
//    the pool lock nests inside; g_arenas_lock (the arena list, in_use) is
//    taken before an arena lock, never inside. No vmem lock is held across
//    afunc/ffunc, the page allocator or the cache layer. Read without the
//    lock: what vmem_create wrote before handing the arena out (quantum,
//    policy, qcache_want, fast_span, source, afunc, ffunc); qcache_max,
//    whose release store publishes qcache[]; early_segs, a hint
//    (free_small); g_layer, published with release (10).
// 9. Debugging. MM_ASSERT always, off the fast paths; MM_DEBUG_ASSERT on
//    them too under MM_DEBUG (budget: at most about doubling an instant-fit
//    alloc and free). vmem_verify checks every invariant above. Bad input
//    is reported (mm::report_error, arena and caller) and refused.
// 10. The cache layer is optional: vmem reaches kmem (quantum caches, a reap
//    before VM_SLEEP waits) only through the VmemCacheLayer kmem registers
//    at kmem_init (vmem_set_cache_layer), so vmem links and runs without it
//    (early boot, tests). Errors go through mm::report_error (report.cpp).
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/failslab.h>
#include <mm/vmem.h>
#if !defined(MM_KERNEL)
#include <mm/host.h>
#endif
#include <new>
#include "alloc_tag_internal.h"
#include "kmemtrace_hooks.h"
#include "lock.h"

// Section 10: the cache layer, published once with a release store; read
// with acquire where it gates creating caches, and relaxed on the quantum-
// cache path, which only runs once qcache_max (stored with release after
// the layer) has been read non-zero with acquire.
namespace mm {
namespace {
const VmemCacheLayer* g_layer;
}  // namespace
}  // namespace mm


namespace mm::vmem_detail {

// Two-way links: free lists and the span list are circular through a
// sentinel Link; hash chains and stocks of spare tags use `next` only.
struct Link {
  Link* next;
  Link* prev;
};

}  // namespace mm::vmem_detail

// A boundary tag: a span, a segment (allocated or free), or a spare tag.
// (start/end and knext/kprev are interleaved so that GCC does not pair
// their stores into vector moves, which costs instructions on the fast path.)
struct vmem_seg {
  mm::vmem_detail::Link link;  // first: a Link* to it converts back (seg_of)
  uintptr_t start;
  vmem_seg* knext;             // the segment list: address order within a span
  uintptr_t end;               // exclusive; a span never ends at the top of the integers
  vmem_seg* kprev;
  uint8_t type;                // kSeg*
  uint8_t imported;            // span: came from the source
  uint8_t early;               // allocated: directly, for a cacheable size, before the caches
  uint8_t list;                // free: the free list it is on (section 3)
  uint32_t tag;                // allocated: allocation profiling's reference (alloc_tag.cpp), or 0
};

namespace mm::vmem_detail {

constexpr unsigned kBits = sizeof(uintptr_t) * 8;
static_assert(sizeof(unsigned long) == sizeof(uintptr_t), "highbit uses __builtin_clzl");
constexpr unsigned kFreeLists = kBits;
constexpr unsigned kMaxArenas = plat::kMaxArenas;  // arena slots, constant-initialised
constexpr unsigned kMaxQcaches = 16;        // quantum caches per arena
constexpr unsigned kHashInitial = 16;       // buckets inside the arena
constexpr unsigned kHashLoad = 2;           // grow past this many segments per bucket
constexpr uintptr_t kHashMul = sizeof(uintptr_t) == 8 ? uintptr_t(0x9e3779b97f4a7c15ull) : uintptr_t(0x9e3779b9u);
constexpr uintptr_t kSegMinFree = 4;        // tags one operation may consume
constexpr uintptr_t kSegStockHigh = 128;    // when the pool runs dry, arenas' spare tags beyond this...
constexpr uintptr_t kSegStockLow = 32;      // ...go back to it, down to this
constexpr uintptr_t kPoolBatch = 16;        // tags moved to an arena at a time
constexpr uintptr_t kPoolReserve = 64;      // kept for VM_PUSHPAGE
constexpr unsigned kMaxImportsPerCall = 3;  // a NOSLEEP import that still does not fit gives up
constexpr uintptr_t kFastMax = uintptr_t{1} << (kBits - 2);  // sizes the fast path takes

enum : uint8_t {
  kSegAlloc = VMEM_ALLOC,
  kSegFree = VMEM_FREE,
  kSegSpan = VMEM_SPAN,  // also seg0, the sentinel
  kSegSpare = 0x40,      // in a stock of spare tags
};

enum : uint8_t { kQcacheNone, kQcachePending, kQcacheCreating, kQcacheReady };

// Bad input, reported through mm::report_error.
constexpr const char* kErrDoubleFree = "double free";
constexpr const char* kErrNotAllocated = "free of unallocated segment";
constexpr const char* kErrOutside = "free of address outside arena";
constexpr const char* kErrWrongSize = "free with wrong size";
constexpr const char* kErrDestroyBusy = "destroy of arena with allocations";
constexpr const char* kErrDestroyImported = "destroy of arena other arenas import from";
constexpr const char* kErrBadArgs = "invalid arguments";
constexpr const char* kErrOverlap = "span overlaps arena";
constexpr const char* kErrNeverFits = "request the arena can never satisfy (refused, not waited for)";
constexpr const char* kErrNoPages = "arena created before the page allocator (page_init), where its boundary tags come from";

inline vmem_seg* seg_of(Link* l) { return reinterpret_cast<vmem_seg*>(l); }
inline const vmem_seg* seg_of(const Link* l) { return reinterpret_cast<const vmem_seg*>(l); }

}  // namespace mm::vmem_detail

using namespace mm::vmem_detail;

// Everything is guarded by lock (section 8) except: what vmem_create sets
// before it hands the arena out and never changes (qmask, qcache_want,
// fast_span, quantum, qshift, policy, source, afunc, ffunc, name), read
// freely; early_segs and qcache_max, read lock-free as their comments say;
// in_use and next (g_arenas_lock).
struct vmem {
  // The fast paths.
  mm::plat::Lock lock;
  uintptr_t qmask = 0;            // quantum - 1
  uintptr_t qtrunc = 0;           // ~qmask (to_quanta, saving the ~ on x86)
  size_t qcache_want = 0;         // quantum caching asked for (bytes); sizes up to it go the slow way
  uintptr_t fast_span = 0;        // vmem_alloc's fast path takes qcache_want < size <= kFastMax
                                  // (0: never, the arena's policy is not instant fit)
  unsigned hash_rshift = 0;       // kBits - log2(buckets)
  uintptr_t freemap = 0;          // bit i: freelist[i] non-empty
  vmem_seg* lazy = nullptr;       // the free segment that may sit above its list (section 3)
  Link* stock = nullptr;          // spare tags
  Link** hash = nullptr;
  intptr_t hash_room = 0;         // allocations left before the hash grows
  uintptr_t hash_limit = 0;       // (allocated segments = hash_limit - hash_room)
  size_t alloc_bytes = 0;
  vmem_seg* rotor = nullptr;      // next fit resumes in or after this tag...
  uintptr_t rotor_addr = 0;       // ...at this address
  // Allocated segments marked early. Written under the lock (relaxed
  // stores), read without it by free_small as a hint.
  uintptr_t early_segs = 0;
  // 0 until the quantum caches exist: qcache_create stores it with release
  // after qcache[] (under the lock); readers without the lock load it with
  // acquire before they read qcache[].
  size_t qcache_max = 0;
  uint64_t allocs = 0;            // (frees = allocs - allocated segments)
  int policy = VM_INSTANTFIT;     // for requests that name none
  Link freelist[kFreeLists] = {};
  // The rest.
  uintptr_t quantum = 0;
  unsigned qshift = 0;
  kmem_cache_t* qcache[kMaxQcaches] = {};
  vmem_seg seg0 = {};             // sentinel of the segment list
  Link spans = {};                // sentinel of the span list
  Link* hash0[kHashInitial] = {};
  vmem* source = nullptr;
  vmem_alloc_t* afunc = nullptr;
  vmem_free_t* ffunc = nullptr;
  size_t span_bytes = 0;
  size_t imported_bytes = 0;
  uint64_t nspans = 0, failures = 0, imports = 0, span_returns = 0, hash_rescales = 0, searches = 0;
  uint8_t qcache_state = kQcacheNone;
  bool hash_growing = false;
  bool in_use = false;
  vmem* next = nullptr;           // the arena list, in creation order
  char name[VMEM_NAMELEN] = {};
};

namespace mm {
namespace {

// ---------------------------------------------------------------------------
// Globals: arena slots, the arena list and the tag pool. All constant-
// initialised (no static constructors).

vmem g_slots[kMaxArenas];
vmem* g_arenas;  // creation order
plat::Lock g_arenas_lock;

plat::Lock g_pool_lock;  // nests inside an arena lock
Link* g_pool;
uintptr_t g_pool_free, g_pool_total, g_pool_pages;
uintptr_t g_hash_pages;  // pages of grown hash tables, all arenas (relaxed: statistics only)

// ---------------------------------------------------------------------------
// Small helpers.

__attribute__((always_inline)) inline uintptr_t caller_of_api() {
  return reinterpret_cast<uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0)));
}
// The caller, for error reports, as the fast paths take it: read only where
// a report may follow, rather than kept in a register all the way through.
// ApiCaller is the public entry point's caller (caller_of_api, read where it
// is called: it and everything calling it up to the entry point are
// inlined); KnownCaller one read already.
struct ApiCaller {
  __attribute__((always_inline)) uintptr_t operator()() const { return caller_of_api(); }
};
struct KnownCaller {
  uintptr_t addr;
  uintptr_t operator()() const { return addr; }
};
// Bit scans (x > 0), from the platform: inline on every arch.
inline unsigned highbit(uintptr_t x) { return plat::highest_bit(x); }
inline unsigned lowbit(uintptr_t x) { return plat::lowest_bit(x); }
inline bool is_pow2(uintptr_t x) { return x && !(x & (x - 1)); }
// x and y (both > 0) are on the same free list.
inline bool same_highbit(uintptr_t x, uintptr_t y) { return (x ^ y) < (x & y); }
inline uintptr_t seg_size(const vmem_seg* v) { return v->end - v->start; }
inline uintptr_t round_up(uintptr_t x, uintptr_t mask) { return (x + mask) & ~mask; }
// x rounded up to vmp's quantum (round_up(x, vmp->qmask)).
inline uintptr_t to_quanta(const vmem* vmp, uintptr_t x) { return (x + vmp->qmask) & vmp->qtrunc; }
inline uintptr_t nalloc_of(const vmem* vmp) { return vmp->hash_limit - static_cast<uintptr_t>(vmp->hash_room); }

void copy_name(char* dst, const char* src) {
  unsigned i = 0;
  for (; src && src[i] && i + 1 < VMEM_NAMELEN; i++) dst[i] = src[i];
  dst[i] = 0;
}

void report(const char* kind, const vmem* vmp, uintptr_t addr, uintptr_t caller, uint64_t detail) {
  report_error(MemError{kind, vmp ? vmp->name : "?", addr, caller, detail});
}

// The cache layer, if one was registered (section 10).
const VmemCacheLayer* layer() { return __atomic_load_n(&g_layer, __ATOMIC_ACQUIRE); }

// Locks (section 8) are held through mm::Guard (lock.h): an arena's with
// ArenaLock, which may be dropped and retaken (release / acquire), a global
// one (arena list, tag pool) with Guard<> directly. The fast paths lock by
// hand: they hand the held lock, with the saved interrupt state, to the
// callee they leave by, which drops it (span_release, bad_free, ...).
class ArenaLock : public Guard<> {
 public:
  explicit ArenaLock(vmem* vmp) : Guard<>(vmp->lock) {}
  void acquire() { lock(); }
  void release() { unlock(); }
};
using GlobalLock = Guard<>;


// ---------------------------------------------------------------------------
// The tag pool (section 7). Arena lock held unless noted.

// The number of vmp's spare tags, counting no further than `cap`.
uintptr_t stock_count(const vmem* vmp, uintptr_t cap = ~uintptr_t{0}) {
  uintptr_t n = 0;
  for (const Link* l = vmp->stock; l && n < cap; l = l->next) n++;
  return n;
}

// Gives n of vmp's spare tags (it has them) back to the pool.
void pool_put(vmem* vmp, uintptr_t n) {
  if (!n) return;
  Link* first = vmp->stock;
  Link* last = first;
  for (uintptr_t i = 1; i < n; i++) last = last->next;
  vmp->stock = last->next;
  g_pool_lock.lock();
  last->next = g_pool;
  g_pool = first;
  g_pool_free += n;
  g_pool_lock.unlock();
}

// Moves up to `want` tags from the pool to vmp's stock; only VM_PUSHPAGE
// callers may take the reserve. Returns how many moved.
uintptr_t pool_take(vmem* vmp, uintptr_t want, int vmflag) {
  g_pool_lock.lock();
  uintptr_t avail = g_pool_free;
  if (!(vmflag & VM_PUSHPAGE)) avail = avail > kPoolReserve ? avail - kPoolReserve : 0;
  uintptr_t n = want < avail ? want : avail;
  for (uintptr_t i = 0; i < n; i++) {
    Link* l = g_pool;
    MM_ASSERT(l && seg_of(l)->type == kSegSpare);
    g_pool = l->next;
    l->next = vmp->stock;
    vmp->stock = l;
  }
  g_pool_free -= n;
  g_pool_lock.unlock();
  return n;
}

// The pool ran dry: takes back what arenas hold beyond kSegStockHigh (frees
// leave their tags with the arena). No vmem lock held. True if it got any.
bool pool_reclaim() {
  bool got = false;
  GlobalLock g(g_arenas_lock);
  for (vmem* vmp = g_arenas; vmp; vmp = vmp->next) {
    ArenaLock h(vmp);
    uintptr_t n = stock_count(vmp);
    if (n > kSegStockHigh) {
      pool_put(vmp, n - kSegStockLow);
      got = true;
    }
  }
  return got;
}

// Adds a page of tags to the pool. No vmem lock held: the page allocator
// may run kmem's reaper, which frees into arenas.
bool pool_refill(int vmflag) {
  void* page = page_alloc_va(0, vmflag & VM_KMFLAGS);
  if (!page) return false;
  auto* tags = static_cast<vmem_seg*>(page);
  constexpr uintptr_t n = kPageBytes / sizeof(vmem_seg);
  for (uintptr_t i = 0; i < n; i++) {
    tags[i] = vmem_seg{};
    tags[i].type = kSegSpare;
    tags[i].link.next = i + 1 < n ? &tags[i + 1].link : nullptr;
  }
  GlobalLock g(g_pool_lock);
  tags[n - 1].link.next = g_pool;
  g_pool = &tags[0].link;
  g_pool_free += n;
  g_pool_total += n;
  g_pool_pages++;
  return true;
}

// Makes sure vmp holds at least n spare tags; may drop and retake the arena
// lock (callers re-examine the arena afterwards). False if the pool is dry
// and no page can be had under vmflag.
bool ensure_tags(vmem* vmp, uintptr_t n, int vmflag, ArenaLock& h) {
  for (;;) {
    uintptr_t have = stock_count(vmp, n);
    if (have >= n || pool_take(vmp, n - have + kPoolBatch, vmflag) >= n - have) return true;
    h.release();
    bool ok = pool_reclaim() || pool_refill(vmflag);
    h.acquire();
    if (!ok) return stock_count(vmp, n) >= n;
  }
}

// Spare tags keep type kSegSpare and early == 0.
inline vmem_seg* getseg(vmem* vmp) {
  Link* l = vmp->stock;
  MM_DEBUG_ASSERT(l && seg_of(l)->type == kSegSpare && !seg_of(l)->early);
  vmp->stock = l->next;
  return seg_of(l);
}

// (Frees only ever add tags; pool_reclaim and reaping take the excess.)
inline void putseg(vmem* vmp, vmem_seg* v) {
  v->type = kSegSpare;
  v->link.next = vmp->stock;
  vmp->stock = &v->link;
}

// ---------------------------------------------------------------------------
// Lists (sections 2, 3). Arena lock held.

inline void seg_link_after(vmem_seg* prev, vmem_seg* v) {
  v->kprev = prev;
  v->knext = prev->knext;
  prev->knext->kprev = v;
  prev->knext = v;
}

// Takes v off the segment list; `heir` is the tag that now covers v's
// range (or the one before it), which inherits the rotor.
inline void seg_unlink(vmem* vmp, vmem_seg* v, vmem_seg* heir) {
  v->kprev->knext = v->knext;
  v->knext->kprev = v->kprev;
  if (vmp->rotor == v) vmp->rotor = heir;
}

inline void link_insert(Link* head, Link* l) {
  Link* n = head->next;
  l->next = n;
  l->prev = head;
  n->prev = l;
  head->next = l;
}

inline void link_remove(Link* l) {
  l->prev->next = l->next;
  l->next->prev = l->prev;
}

void settle(vmem* vmp);

// Puts v on free list i (highbit of its size). A lazy segment is settled
// first: the lists are then exactly what they would be had it moved when
// it shrank (section 3).
// (freelist_link: the same where there is no lazy segment.)
__attribute__((always_inline)) inline void freelist_link(vmem* vmp, vmem_seg* v, unsigned i) {
  MM_DEBUG_ASSERT(highbit(seg_size(v)) == i && !vmp->lazy);
  link_insert(&vmp->freelist[i], &v->link);
  v->list = static_cast<uint8_t>(i);
  vmp->freemap |= uintptr_t{1} << i;
}

inline void freelist_insert_at(vmem* vmp, vmem_seg* v, unsigned i) {
  MM_DEBUG_ASSERT(v != vmp->lazy);
  if (vmp->lazy) settle(vmp);
  freelist_link(vmp, v, i);
}

inline void freelist_insert(vmem* vmp, vmem_seg* v) { freelist_insert_at(vmp, v, highbit(seg_size(v))); }

// Removes v, which is not the lazy segment, from the free list it is on.
__attribute__((always_inline)) inline void freelist_unlink(vmem* vmp, vmem_seg* v) {
  Link* n = v->link.next;
  Link* p = v->link.prev;
  MM_DEBUG_ASSERT(v->type == kSegFree && v != vmp->lazy);
  p->next = n;
  n->prev = p;
  if (n == p) vmp->freemap &= ~(uintptr_t{1} << v->list);  // only the sentinel left
}

// Removes v from the free list it is on.
__attribute__((always_inline)) inline void freelist_remove(vmem* vmp, vmem_seg* v) {
  if (v == vmp->lazy) vmp->lazy = nullptr;
  freelist_unlink(vmp, v);
}

// Moves v to free list j (the list for its size now).
inline void freelist_move(vmem* vmp, vmem_seg* v, unsigned j) {
  freelist_remove(vmp, v);
  freelist_insert_at(vmp, v, j);
}

// Puts the lazy segment, if any, on the list of its size (section 3).
__attribute__((noinline)) void settle(vmem* vmp) {
  vmem_seg* v = vmp->lazy;
  if (!v) return;
  vmp->lazy = nullptr;
  unsigned c = highbit(seg_size(v));
  if (c != v->list) freelist_move(vmp, v, c);
}

inline Link** hash_bucket(const vmem* vmp, uintptr_t addr) { return &vmp->hash[(addr * kHashMul) >> vmp->hash_rshift]; }

// The allocated segment starting at addr, and the link that points to it.
inline vmem_seg* hash_find(const vmem* vmp, uintptr_t addr, Link*** linkp) {
  Link** pp = hash_bucket(vmp, addr);
  Link* l;
  while ((l = *pp) && seg_of(l)->start != addr) pp = &l->next;
  *linkp = pp;
  return seg_of(l);
}

// Enters the new allocated segment a in the hash and the totals, but for
// hash_room (hash_insert does all).
__attribute__((always_inline)) inline void hash_link(vmem* vmp, vmem_seg* a, uintptr_t addr, uintptr_t size) {
  Link** b = hash_bucket(vmp, addr);
  a->link.next = *b;
  *b = &a->link;
  vmp->alloc_bytes += size;
  vmp->allocs++;
}

__attribute__((always_inline)) inline void hash_insert(vmem* vmp, vmem_seg* a, uintptr_t addr, uintptr_t size) {
  hash_link(vmp, a, addr, size);
  vmp->hash_room--;
}

// ---------------------------------------------------------------------------
// Spans and segments. Arena lock held.

// Adds [base, base + size) as a span with one free segment: two tags.
void span_create(vmem* vmp, uintptr_t base, uintptr_t size, bool imported) {
  vmem_seg* span = getseg(vmp);
  span->start = base;
  span->end = base + size;
  span->type = kSegSpan;
  span->imported = imported;
  seg_link_after(vmp->seg0.kprev, span);
  link_insert(vmp->spans.prev, &span->link);  // at the end of the span list

  vmem_seg* v = getseg(vmp);
  v->start = base;
  v->end = base + size;
  v->type = kSegFree;
  seg_link_after(span, v);
  freelist_insert(vmp, v);

  vmp->span_bytes += size;
  if (imported) vmp->imported_bytes += size;
  vmp->nspans++;
}

// Removes a span whose only segment v is free and off the free lists.
void span_destroy(vmem* vmp, vmem_seg* span, vmem_seg* v) {
  MM_ASSERT(span->type == kSegSpan && v->kprev == span && v->start == span->start && v->end == span->end);
  seg_unlink(vmp, v, span->kprev);
  seg_unlink(vmp, span, span->kprev);
  link_remove(&span->link);
  vmp->span_bytes -= seg_size(span);
  if (span->imported) vmp->imported_bytes -= seg_size(span);
  vmp->nspans--;
  span->imported = 0;
  putseg(vmp, v);
  putseg(vmp, span);
}

// Carves [addr, addr + size) from the front of the free segment v;
// returns the allocated tag. The new tag goes in front of the rest, which
// moves to the list of its size if that changed; an exact fit turns v
// itself into the allocation. Takes at most one spare tag. (The fast path,
// alloc_locked, has its own copy.)
vmem_seg* seg_alloc_front(vmem* vmp, vmem_seg* v, uintptr_t addr, uintptr_t size) {
  uintptr_t end = v->end, aend = addr + size;
  MM_ASSERT(v->type == kSegFree && addr == v->start && size <= end - addr && !vmp->lazy);
  vmem_seg* a;
  if (aend != end) {
    a = getseg(vmp);
    a->start = addr;
    a->end = aend;
    seg_link_after(v->kprev, a);
    v->start = aend;
    unsigned j = highbit(end - aend);
    if (j != v->list) freelist_move(vmp, v, j);
  } else {
    freelist_remove(vmp, v);
    a = v;
  }
  a->type = kSegAlloc;
  hash_insert(vmp, a, addr, size);
  return a;
}

// Carves [addr, addr + size) out of the free segment v anywhere (a search's
// answer); returns the allocated tag. Takes at most two spare tags.
vmem_seg* seg_alloc(vmem* vmp, vmem_seg* v, uintptr_t addr, uintptr_t size) {
  uintptr_t start = v->start, end = v->end, aend = addr + size;
  MM_ASSERT(v->type == kSegFree && addr >= start && size <= end - addr && size && !vmp->lazy);
  if (addr == start) return seg_alloc_front(vmp, v, addr, size);
  // Inside v: v keeps the front, a new tag takes the allocation and another
  // the rest (if any).
  freelist_remove(vmp, v);
  vmem_seg* a = getseg(vmp);
  a->start = addr;
  a->end = aend;
  seg_link_after(v, a);
  if (aend < end) {
    vmem_seg* r = getseg(vmp);
    r->start = aend;
    r->end = end;
    r->type = kSegFree;
    seg_link_after(a, r);
    freelist_insert(vmp, r);
  }
  v->end = addr;
  freelist_insert(vmp, v);
  a->type = kSegAlloc;
  hash_insert(vmp, a, addr, size);
  return a;
}

// ---------------------------------------------------------------------------
// Finding a segment (section 3). Arena lock held.

struct Request {
  uintptr_t size;     // rounded to the quantum
  uintptr_t align;    // power of two >= quantum
  uintptr_t phase;    // < align
  uintptr_t nocross;  // 0 or a power of two
  uintptr_t minaddr;  // 0: none
  uintptr_t maxaddr;  // exclusive; 0: none
  bool unconstrained() const { return !phase && !nocross && !minaddr && !maxaddr; }
};

// Where in v a request fits, if it does.
bool fit(const vmem_seg* v, const Request& r, uintptr_t* addr) {
  uintptr_t lo = v->start > r.minaddr ? v->start : r.minaddr;
  uintptr_t last = v->end - 1 < r.maxaddr - 1 ? v->end - 1 : r.maxaddr - 1;  // maxaddr 0 -> no limit
  if (lo > last) return false;
  uintptr_t a = lo + ((r.phase - lo) & (r.align - 1));
  if (a < lo) return false;
  if (r.nocross && ((a ^ (a + r.size - 1)) & ~(r.nocross - 1))) {
    uintptr_t b = (a | (r.nocross - 1)) + 1;  // the boundary a's segment would straddle
    if (b == 0) return false;
    a = b + ((r.phase - b) & (r.align - 1));
    if (a < b || ((a ^ (a + r.size - 1)) & ~(r.nocross - 1))) return false;
  }
  if (a > last || last - a < r.size - 1) return false;
  *addr = a;
  return true;
}

// Searches the free lists from `first` up (only list `first` if `one`):
// the first fit, or with `best` the smallest fit of the first list that has
// one.
vmem_seg* search_lists(vmem* vmp, const Request& r, unsigned first, bool best, bool one, uintptr_t* addr) {
  if (first >= kFreeLists) return nullptr;
  uintptr_t map = vmp->freemap & (~uintptr_t{0} << first);
  if (one) map &= uintptr_t{1} << first;
  while (map) {
    Link* head = &vmp->freelist[lowbit(map)];
    vmem_seg* found = nullptr;
    uintptr_t found_size = 0;
    for (Link* l = head->next; l != head; l = l->next) {
      vmem_seg* v = seg_of(l);
      uintptr_t a;
      vmp->searches++;
      if (!fit(v, r, &a)) continue;
      if (!best) {
        *addr = a;
        return v;
      }
      if (!found || seg_size(v) < found_size) {
        found = v;
        found_size = seg_size(v);
        *addr = a;
        if (found_size == r.size) break;
      }
    }
    if (found) return found;
    map &= map - 1;
  }
  return nullptr;
}

// Next fit: the first fit after the rotor, wrapping round the arena. The
// rotor is the tag of the last next-fit allocation and rotor_addr its end;
// once that segment is freed and merged, the rotor is the free segment that
// contains rotor_addr, and the search starts inside it.
vmem_seg* search_rotor(vmem* vmp, const Request& r, uintptr_t* addr) {
  vmem_seg* rotor = vmp->rotor;
  if (rotor->type == kSegFree && vmp->rotor_addr > rotor->start) {
    Request after = r;
    if (after.minaddr < vmp->rotor_addr) after.minaddr = vmp->rotor_addr;
    vmp->searches++;
    if (fit(rotor, after, addr)) return rotor;
  }
  for (vmem_seg* v = rotor->knext;; v = v->knext) {
    if (v->type == kSegFree) {
      vmp->searches++;
      if (fit(v, r, addr)) return v;
    }
    if (v == rotor) return nullptr;
  }
}

vmem_seg* find(vmem* vmp, const Request& r, int policy, uintptr_t* addr) {
  if (policy == VM_NEXTFIT) return search_rotor(vmp, r, addr);
  unsigned floor = highbit(r.size);
  if (policy == VM_BESTFIT) return search_lists(vmp, r, floor, true, false, addr);
  // Instant fit: from the first list whose members all fit (for an
  // unconstrained request its first segment is taken), then the list that
  // might hold a fit.
  unsigned sure = floor + !is_pow2(r.size);
  if (vmem_seg* v = search_lists(vmp, r, sure, false, false, addr)) return v;
  if (sure != floor) return search_lists(vmp, r, floor, false, true, addr);
  return nullptr;
}

int policy_of(int vmflag, const vmem* vmp) {
  if (vmflag & VM_NEXTFIT) return VM_NEXTFIT;
  if (vmflag & VM_BESTFIT) return VM_BESTFIT;
  if (vmflag & VM_INSTANTFIT) return VM_INSTANTFIT;
  return vmp->policy;
}

// ---------------------------------------------------------------------------
// The hash table grows (section 4). No lock held on entry.

unsigned order_for(size_t bytes) {
  unsigned order = 0;
  while ((kPageBytes << order) < bytes) order++;
  return order;
}

void hash_set(vmem* vmp, Link** table, uintptr_t buckets) {
  uintptr_t nalloc = nalloc_of(vmp);
  vmp->hash = table;
  vmp->hash_rshift = kBits - highbit(buckets);
  vmp->hash_limit = kHashLoad * buckets;
  vmp->hash_room = static_cast<intptr_t>(vmp->hash_limit - nalloc);
}

__attribute__((noinline)) void hash_grow(vmem* vmp) {
  uintptr_t want;
  {
    ArenaLock h(vmp);
    if (vmp->hash_growing || vmp->hash_room >= 0) return;
    vmp->hash_growing = true;
    want = kPageBytes / sizeof(Link*);
    while (want < 2 * nalloc_of(vmp) && want * sizeof(Link*) < (kPageBytes << kMaxOrder)) want <<= 1;
  }
  unsigned order = order_for(want * sizeof(Link*));
  auto** table = static_cast<Link**>(page_alloc_va(order, KM_NOSLEEP));
  if (table) {
    __builtin_memset(table, 0, kPageBytes << order);
    __atomic_fetch_add(&g_hash_pages, uintptr_t{1} << order, __ATOMIC_RELAXED);
  }

  Link** old;
  uintptr_t old_n;
  {
    ArenaLock h(vmp);
    vmp->hash_growing = false;
    old_n = uintptr_t{1} << (kBits - vmp->hash_rshift);
    if (!table || want <= old_n) {
      // No pages (or already the largest table): try again when the arena
      // has doubled.
      if (vmp->hash_limit < ~uintptr_t{0} / 4) {
        vmp->hash_room += static_cast<intptr_t>(vmp->hash_limit);
        vmp->hash_limit *= 2;
      }
      old = table;
      old_n = want;
    } else {
      old = vmp->hash;
      hash_set(vmp, table, want);
      vmp->hash_rescales++;
      for (uintptr_t i = 0; i < old_n; i++) {
        Link* l = old[i];
        while (l) {
          Link* next = l->next;
          Link** b = hash_bucket(vmp, seg_of(l)->start);
          l->next = *b;
          *b = l;
          l = next;
        }
      }
    }
  }
  if (old && old != vmp->hash0) {
    unsigned old_order = order_for(old_n * sizeof(Link*));
    page_free_va(old, old_order);
    __atomic_fetch_sub(&g_hash_pages, uintptr_t{1} << old_order, __ATOMIC_RELAXED);
  }
}

// ---------------------------------------------------------------------------
// Allocation.

// Grows the hash after an allocation (no lock held) and returns its address.
__attribute__((noinline)) uintptr_t grow_then(vmem* vmp, uintptr_t addr) {
  hash_grow(vmp);
  return addr;
}

// Imports a span big enough for r from the source (lock dropped meanwhile).
bool import_span(vmem* vmp, const Request& r, int vmflag, ArenaLock& h) {
  uintptr_t aq = vmp->quantum;
  if (vmp->source && vmp->source->quantum > aq) aq = vmp->source->quantum;
  uintptr_t need = r.size + r.phase + (r.align > aq ? r.align - aq : 0);
  uintptr_t asize = round_up(need, aq - 1);
  if (need < r.size || asize < need) return false;
  h.release();
  void* va = vmp->afunc(vmp->source, asize, vmflag & VM_KMFLAGS);
  h.acquire();
  if (!va) return false;
  auto base = reinterpret_cast<uintptr_t>(va);
  MM_ASSERT(!(base & vmp->qmask) && base + asize > base);
  if (!ensure_tags(vmp, 2, vmflag, h)) {
    h.release();
    if (vmp->ffunc) vmp->ffunc(vmp->source, va, asize);
    h.acquire();
    return false;
  }
  span_create(vmp, base, asize, true);
  vmp->imports++;
  return true;
}

// Everything but the instant-fit fast path: searching, importing, waiting.
void* xalloc(vmem* vmp, const Request& r, int policy, int vmflag, bool early, uintptr_t caller) {
  ArenaLock h(vmp);
  unsigned imports = 0;
  bool may_fit = (vmflag & VM_NOSLEEP) != 0;  // VM_SLEEP: checked once, before importing or waiting
  for (;;) {
    if (ensure_tags(vmp, kSegMinFree, vmflag, h)) {
      uintptr_t addr;
      settle(vmp);  // searches see exact lists
      if (vmem_seg* v = find(vmp, r, policy, &addr)) {
        vmem_seg* a = seg_alloc(vmp, v, addr, r.size);
        if (policy == VM_NEXTFIT) {
          vmp->rotor = a;
          vmp->rotor_addr = addr + r.size;
        }
        if (early) {
          a->early = 1;
          __atomic_store_n(&vmp->early_segs, vmp->early_segs + 1, __ATOMIC_RELAXED);
        }
        bool grow = vmp->hash_room < 0;
        h.release();
        if (grow) hash_grow(vmp);
        return reinterpret_cast<void*>(addr);
      }
      if (!may_fit) {
        // No arena in the chain could ever hold it: waiting would be a hang.
        h.release();
        uint64_t capacity = vmem_capacity(vmp);
        h.acquire();
        if (r.size > capacity) {
          h.release();
          report(kErrNeverFits, vmp, 0, caller, r.size);
          h.acquire();
          break;
        }
        may_fit = true;
      }
      if (vmp->afunc && !r.nocross && !r.minaddr && !r.maxaddr &&
          (!(vmflag & VM_NOSLEEP) || imports < kMaxImportsPerCall)) {
        imports++;
        if (import_span(vmp, r, vmflag, h)) continue;
      }
    }
    if (vmflag & VM_NOSLEEP) break;
    // VM_SLEEP: let kmem give back what its caches hold, wait, retry.
    h.release();
    if (const VmemCacheLayer* l = layer()) l->reap();
    plat::wait_for_memory();
    h.acquire();
  }
  vmp->failures++;
  return nullptr;
}

// vmem_alloc's way for everything the fast path does not take: quantum
// caches, other policies, sizes that do not fit, a missed fast path.
__attribute__((noinline)) void* alloc_slow(vmem* vmp, size_t size, int vmflag, uintptr_t caller) {
  bool early = false;
  if (size - 1 < vmp->qcache_want) {
    if (__atomic_load_n(&vmp->qcache_max, __ATOMIC_ACQUIRE))  // qcache[] is set
      return __atomic_load_n(&g_layer, __ATOMIC_RELAXED)->alloc(vmp->qcache[(size - 1) >> vmp->qshift],
                                                                vmflag & VM_KMFLAGS);
    early = true;  // before the caches exist: from the arena, marked
  }
  uintptr_t asize = round_up(size, vmp->qmask);
  if (asize < size || !size) {
    report(kErrBadArgs, vmp, 0, caller, size);
    return nullptr;
  }
  Request r{asize, vmp->quantum, 0, 0, 0, 0};
  return xalloc(vmp, r, policy_of(vmflag, vmp), vmflag, early, caller);
}

// The fast path (section 3): the first segment of the lowest free list
// whose members all fit: lists >= highbit(size), or above it when size is
// not a power of two, i.e. >= highbit(2 * size - 1) ("sure"). asize is
// size rounded to the quantum, nonzero and at most kFastMax. Everything
// rare leaves it by a tail call, with the lock held or dropped (`slow`:
// none fits, or no spare tag), so that nothing has to be kept across a
// call: the fast paths need no stack frame.

// The allocation made the hash due to grow (lock held; dropped here).
__attribute__((noinline)) void* alloc_grow(vmem* vmp, plat::IrqState irq, uintptr_t addr) {
  vmp->lock.unlock();
  plat::irq_restore(irq);
  return reinterpret_cast<void*>(grow_then(vmp, addr));
}

// The end of an allocation, its segment hashed (lock held; dropped here).
__attribute__((always_inline)) inline void* alloc_done(vmem* vmp, plat::IrqState irq, uintptr_t addr) {
  if (__builtin_expect(--vmp->hash_room < 0, 0)) return alloc_grow(vmp, irq, addr);
  vmp->lock.unlock();
  plat::irq_restore(irq);
  return reinterpret_cast<void*>(addr);
}

// The rest v of the segment carved (for asize bytes at addr) fell to list
// j, below the list it is on (lock held; dropped here). It stays there as
// the lazy segment if nothing else is lazy and lists j..i-1 are empty:
// those from sure up are (i is the lowest non-empty list from sure up), so
// only those below sure need looking at. Else it moves.
__attribute__((noinline)) void* alloc_shrunk(vmem* vmp, plat::IrqState irq, vmem_seg* v, unsigned j, uintptr_t asize,
                                             uintptr_t addr) {
  unsigned sure = highbit(2 * asize - 1);
  if ((j >= sure || !(vmp->freemap & ((uintptr_t{1} << sure) - (uintptr_t{1} << j)))) &&
      (!vmp->lazy || vmp->lazy == v))
    vmp->lazy = v;
  else
    freelist_move(vmp, v, j);
  return alloc_done(vmp, irq, addr);
}

// (Lock held; dropped here.) The head of the list picked is carved (as
// seg_alloc_front, unrolled so that each branch leaves on its own); the
// rest may stay on its list (alloc_shrunk). Only the lazy segment
// can be below 2^sure: then `settled` (lock held) settles it and runs the
// fast path again (exact lists now: no search, as there would be none with
// them).
template <typename Slow, typename Settled>
__attribute__((always_inline)) inline void* alloc_locked(vmem* vmp, plat::IrqState irq, uintptr_t asize, Slow slow,
                                                         Settled settled) {
  unsigned sure = highbit(2 * asize - 1);
  uintptr_t lists = ~uintptr_t{0} << sure;  // (also: the sizes at least 2^sure)
  uintptr_t map = vmp->freemap & lists;
  if (__builtin_expect(!map, 0)) {
    vmp->lock.unlock();
    plat::irq_restore(irq);
    return slow();
  }
  vmem_seg* v = seg_of(vmp->freelist[lowbit(map)].next);
  uintptr_t addr = v->start, room = v->end - addr;
  if (__builtin_expect(room == asize, 0)) {
    // An exact fit, sure to be one unless v is the lazy segment (whose
    // size may be below 2^sure); it takes no spare tag.
    if (__builtin_expect(v == vmp->lazy, 0)) return settled();
    freelist_unlink(vmp, v);
    v->type = kSegAlloc;
    hash_link(vmp, v, addr, asize);
  } else {
    if (__builtin_expect(!(room & lists), 0)) return settled();  // below 2^sure
    if (__builtin_expect(!vmp->stock, 0)) {  // it takes one
      vmp->lock.unlock();
      plat::irq_restore(irq);
      return slow();
    }
    vmem_seg* a = getseg(vmp);
    a->type = kSegAlloc;
    hash_link(vmp, a, addr, asize);
    vmem_seg* p = v->kprev;
    uintptr_t aend = addr + asize;
    a->start = addr;
    a->end = aend;
    a->kprev = p;
    a->knext = v;
    p->knext = a;
    v->kprev = a;
    v->start = aend;
    // (The steady state of a 2^n arena: the rest is the lazy segment
    // already, and may stay as it is if it is at least 2^sure, as it is if
    // it is at least 2 * asize, i.e. if rest / 2 >= asize.)
    uintptr_t rest = room - asize;
    unsigned j = highbit(rest);
    if (__builtin_expect(j != v->list, 0) && (vmp->lazy != v || (rest >> 1) < asize))
      return alloc_shrunk(vmp, irq, v, j, asize, addr);
  }
  return alloc_done(vmp, irq, addr);
}

// For vmem_xalloc (kmem's slabs), which has calls around it anyway.
template <typename Slow>
__attribute__((always_inline)) inline void* fast_alloc(vmem* vmp, uintptr_t asize, Slow slow) {
  plat::IrqState irq = plat::irq_save();
  vmp->lock.lock();
  auto unlocked_slow = [&] {  // (cannot happen once settled)
    vmp->lock.unlock();
    plat::irq_restore(irq);
    return slow();
  };
  auto settled = [&] {
    settle(vmp);
    return alloc_locked(vmp, irq, asize, slow, unlocked_slow);
  };
  return alloc_locked(vmp, irq, asize, slow, settled);
}

// ---------------------------------------------------------------------------
// Free.

// A free that matches no allocated segment (lock held; released here):
// finds what the address is (inside a free segment: freed already; inside
// an allocated one but not its start; or in no span at all) and reports it.
__attribute__((noinline)) void bad_free(vmem* vmp, plat::IrqState irq, uintptr_t addr, size_t size,
                                        uintptr_t caller, const vmem_seg* found) {
  const char* kind = found ? kErrWrongSize : kErrOutside;
  for (const vmem_seg* s = vmp->seg0.knext; !found && s != &vmp->seg0; s = s->knext) {
    if (s->type == kSegSpan || addr < s->start || addr >= s->end) continue;
    kind = s->type == kSegFree ? kErrDoubleFree : kErrNotAllocated;
    break;
  }
  vmp->lock.unlock();
  plat::irq_restore(irq);
  report(kind, vmp, addr, caller, size);
}

// The free segment v is a whole imported span (lock held; released here):
// remove it and give it back to the source.
__attribute__((noinline)) void span_release(vmem* vmp, plat::IrqState irq, vmem_seg* span, vmem_seg* v) {
  void* base = reinterpret_cast<void*>(v->start);
  uintptr_t bytes = seg_size(v);
  freelist_remove(vmp, v);
  span_destroy(vmp, span, v);
  vmp->span_returns++;
  vmp->lock.unlock();
  plat::irq_restore(irq);
  vmp->ffunc(vmp->source, base, bytes);
}

// The end of a free (lock held; dropped here): n, the free segment the
// freed one ended up in, goes back to the source if it is a whole imported
// span. (Only span tags are ever marked imported.)
__attribute__((always_inline)) inline void free_done(vmem* vmp, plat::IrqState irq, vmem_seg* n) {
  vmem_seg* span = n->kprev;
  MM_DEBUG_ASSERT(!span->imported || span->type == kSegSpan);
  if (__builtin_expect(span->imported, 0) && n->knext->type == kSegSpan && vmp->ffunc)
    return span_release(vmp, irq, span, n);
  vmp->lock.unlock();
  plat::irq_restore(irq);
}

// v, just freed, has free segments on both sides: prev takes all three
// (lock held; dropped here). A lazy prev stays where it is until it
// outgrows its list (section 3).
__attribute__((noinline)) void free_both(vmem* vmp, plat::IrqState irq, vmem_seg* prev, vmem_seg* v, vmem_seg* next) {
  MM_DEBUG_ASSERT(prev->end == v->start && next->start == v->end);
  freelist_remove(vmp, next);
  prev->end = next->end;
  seg_unlink(vmp, v, prev);
  seg_unlink(vmp, next, prev);
  putseg(vmp, v);
  putseg(vmp, next);
  unsigned j = highbit(seg_size(prev));
  if (j > prev->list) freelist_move(vmp, prev, j);
  free_done(vmp, irq, prev);
}

// n grew out of its free list, into list j (lock held; dropped here).
__attribute__((noinline)) void free_moved(vmem* vmp, plat::IrqState irq, vmem_seg* n, unsigned j) {
  freelist_move(vmp, n, j);
  free_done(vmp, irq, n);
}

// v, freed with no free neighbour, goes on list i while there is a lazy
// segment, which settles first (lock held; dropped here).
__attribute__((noinline)) void free_settled(vmem* vmp, plat::IrqState irq, vmem_seg* v, unsigned i) {
  freelist_insert_at(vmp, v, i);
  free_done(vmp, irq, v);
}

// Frees the allocated segment at addr: a free neighbour grows over it (the
// mirror of seg_alloc_front), and a wholly free imported span goes back. As
// alloc_locked, it leaves by tail calls for everything rare. (Lock held;
// dropped here.) kMaybeEarly false: size is more than qcache_want, so the
// segment, if it is the one, cannot be marked early (those are at most
// qcache_want, a multiple of the quantum).
template <bool kMaybeEarly, typename Caller>
__attribute__((always_inline)) inline void xfree_locked(vmem* vmp, plat::IrqState irq, uintptr_t addr, size_t size,
                                                        Caller caller) {
  uintptr_t asize = to_quanta(vmp, size);
  Link** link = hash_bucket(vmp, addr);
  Link* l;
  while ((l = *link) && seg_of(l)->start != addr) link = &l->next;
  vmem_seg* v = seg_of(l);
  if (__builtin_expect(!l || v->end - addr != asize, 0))
    return bad_free(vmp, irq, addr, size, caller(), l ? v : nullptr);
  MM_DEBUG_ASSERT(v->type == kSegAlloc);
  *link = l->next;
  vmp->hash_room++;
  vmp->alloc_bytes -= asize;
  MM_DEBUG_ASSERT(kMaybeEarly || !v->early);
  if (kMaybeEarly && __builtin_expect(v->early, 0)) {
    v->early = 0;
    __atomic_store_n(&vmp->early_segs, vmp->early_segs - 1, __ATOMIC_RELAXED);
  }

  vmem_seg* next = v->knext;
  vmem_seg* prev = v->kprev;
  vmem_seg* n;  // the free segment v ends up in
  if (next->type == kSegFree) {
    if (__builtin_expect(prev->type == kSegFree, 0)) return free_both(vmp, irq, prev, v, next);
    MM_DEBUG_ASSERT(next->start == v->end);
    n = next;
    next->start = addr;
  } else if (prev->type == kSegFree) {
    MM_DEBUG_ASSERT(prev->end == addr);
    n = prev;
    prev->end = v->end;
  } else {
    v->type = kSegFree;
    if (__builtin_expect(vmp->lazy != nullptr, 0)) return free_settled(vmp, irq, v, highbit(asize));
    freelist_link(vmp, v, highbit(asize));
    return free_done(vmp, irq, v);
  }
  // n grew over v: v's tag goes, and n changes free list if it outgrew
  // the one it is on (a lazy n stays until then: section 3).
  prev->knext = next;
  next->kprev = prev;
  if (vmp->rotor == v) vmp->rotor = n;
  putseg(vmp, v);
  unsigned j = highbit(seg_size(n));
  if (__builtin_expect(j > n->list, 0)) return free_moved(vmp, irq, n, j);
  free_done(vmp, irq, n);
}

template <bool kMaybeEarly = true, typename Caller = KnownCaller>
__attribute__((always_inline)) inline void xfree(vmem* vmp, uintptr_t addr, size_t size, Caller caller) {
  plat::IrqState irq = plat::irq_save();
  vmp->lock.lock();
  xfree_locked<kMaybeEarly>(vmp, irq, addr, size, caller);
}

// A free of a size the quantum caches serve. Segments allocated directly
// before the caches existed (marked early) go back to the arena.
// early_segs is relaxed: the segment being freed was marked, and counted,
// under the lock before the arena handed it out, so whoever frees it is
// ordered after its count (through whatever gave it the segment); other
// segments' counts may be stale, which costs at most a needless look.
__attribute__((noinline)) void free_small(vmem* vmp, void* vaddr, size_t size, uintptr_t caller) {
  auto addr = reinterpret_cast<uintptr_t>(vaddr);
  if (!__atomic_load_n(&vmp->qcache_max, __ATOMIC_ACQUIRE))  // qcache[] set
    return xfree(vmp, addr, size, KnownCaller{caller});
  if (__atomic_load_n(&vmp->early_segs, __ATOMIC_RELAXED)) {
    bool early;
    {
      ArenaLock h(vmp);
      Link** link;
      vmem_seg* v = hash_find(vmp, addr, &link);
      early = v && v->early;
    }
    if (early) return xfree(vmp, addr, size, KnownCaller{caller});
  }
  __atomic_load_n(&g_layer, __ATOMIC_RELAXED)->free(vmp->qcache[(size - 1) >> vmp->qshift], vaddr);
}

// Checks xalloc's constraints and fills r; false (reported) if invalid.
bool make_request(vmem* vmp, size_t size, size_t align, size_t phase, size_t nocross, void* minaddr,
                  void* maxaddr, uintptr_t caller, Request& r) {
  uintptr_t q = vmp->quantum;
  r.size = round_up(size, vmp->qmask);
  r.align = align < q ? q : align;
  r.phase = phase;
  r.nocross = nocross;
  r.minaddr = reinterpret_cast<uintptr_t>(minaddr);
  r.maxaddr = reinterpret_cast<uintptr_t>(maxaddr);
  bool ok = size && r.size >= size && is_pow2(r.align) && !((r.align | phase | nocross) & vmp->qmask) &&
            phase < r.align && (!nocross || is_pow2(nocross)) && (!r.maxaddr || r.minaddr < r.maxaddr);
  // With nocross, the segment and its phase must fit between two boundaries.
  if (ok && nocross && (r.align > nocross || phase + r.size > nocross)) ok = false;
  if (!ok) {
    report(kErrBadArgs, vmp, r.minaddr, caller, size);
    return false;
  }
  // Constraints that no address satisfies: refused, not waited for.
  if (r.maxaddr && (r.size > r.maxaddr - r.minaddr || r.minaddr > r.maxaddr - r.size)) {
    report(kErrNeverFits, vmp, r.minaddr, caller, size);
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Quantum caches (section 5). No lock held.

void format_qcache_name(char* out, const char* arena, unsigned n) {
  unsigned i = 0;
  for (; arena[i] && i < VMEM_NAMELEN - 4; i++) out[i] = arena[i];
  out[i++] = '_';
  char digits[4];
  unsigned d = 0;
  do {
    digits[d++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n);
  while (d) out[i++] = digits[--d];
  out[i] = 0;
}

void qcache_create(vmem* vmp) {
  unsigned n = static_cast<unsigned>(vmp->qcache_want >> vmp->qshift);
  kmem_cache_t* caches[kMaxQcaches] = {};
  for (unsigned i = 0; i < n; i++) {
    char name[VMEM_NAMELEN];
    format_qcache_name(name, vmp->name, i + 1);
    caches[i] = layer()->create(name, (i + 1) * vmp->quantum, vmp->quantum, vmp);
    if (!caches[i]) {
      plat::log("vmem: '%s': cannot create quantum cache '%s'; the arena runs uncached", vmp->name, name);
      while (i--) (void)layer()->destroy(caches[i]);
      ArenaLock h(vmp);
      vmp->qcache_state = kQcacheNone;
      return;
    }
  }
  ArenaLock h(vmp);
  for (unsigned i = 0; i < n; i++) vmp->qcache[i] = caches[i];
  vmp->qcache_state = kQcacheReady;
  __atomic_store_n(&vmp->qcache_max, vmp->qcache_want, __ATOMIC_RELEASE);  // publishes qcache[] (and the caches)
}

// Marks vmp's caches as being created if they are pending; true if the
// caller should create them.
bool qcache_claim(vmem* vmp) {
  ArenaLock h(vmp);
  if (vmp->qcache_state != kQcachePending) return false;
  vmp->qcache_state = kQcacheCreating;
  return true;
}

// ---------------------------------------------------------------------------
// Verification (section 9). Arena lock held.

bool verify_failed(const vmem* vmp, const char* what, uintptr_t addr) {
  plat::log("vmem_verify('%s'): %s at 0x%llx", vmp->name, what, static_cast<unsigned long long>(addr));
  return false;
}

bool verify_locked(const vmem* vmp) {
  const vmem_seg* seg0 = &vmp->seg0;
  uintptr_t q = vmp->quantum;
  uintptr_t nalloc = 0, nfree = 0, nspans = 0, nearly = 0;
  size_t alloc_bytes = 0, span_bytes = 0, imported = 0;
  bool rotor_seen = vmp->rotor == seg0;
  const vmem_seg* span = nullptr;
  const Link* span_list = vmp->spans.next;
  uintptr_t cursor = 0;  // where the next segment of the current span starts
  bool lazy_seen = false;
  for (const vmem_seg* v = seg0->knext;; v = v->knext) {
    if (v->kprev->knext != v || v->knext->kprev != v) return verify_failed(vmp, "broken segment list", v->start);
    if (v == vmp->rotor) rotor_seen = true;
    if (v == seg0 || v->type == kSegSpan) {
      if (span && cursor != span->end) return verify_failed(vmp, "segments do not tile their span", span->start);
      if (v == seg0) break;
      if (&v->link != span_list || span_list->next->prev != span_list)
        return verify_failed(vmp, "span list out of step", v->start);
      span_list = span_list->next;
      if (v->start >= v->end || ((v->start | v->end) & (q - 1))) return verify_failed(vmp, "bad span", v->start);
      span = v;
      cursor = v->start;
      nspans++;
      span_bytes += seg_size(v);
      if (v->imported) imported += seg_size(v);
      continue;
    }
    if (!span) return verify_failed(vmp, "segment before any span", v->start);
    if (v->start != cursor || v->end <= v->start || ((v->start | v->end) & (q - 1)))
      return verify_failed(vmp, "bad segment bounds", v->start);
    cursor = v->end;
    if (v->type == kSegFree) {
      if (v->kprev->type == kSegFree) return verify_failed(vmp, "adjacent free segments", v->start);
      if (v->early) return verify_failed(vmp, "free segment marked early", v->start);
      nfree++;
      if (v == vmp->lazy) lazy_seen = true;
      else if (v->list != highbit(seg_size(v))) return verify_failed(vmp, "free segment on the wrong list", v->start);
      if (v->list >= kFreeLists) return verify_failed(vmp, "bad free list index", v->start);
      const Link* head = &vmp->freelist[v->list];
      const Link* f = head->next;
      while (f != head && f != &v->link) f = f->next;
      if (f == head) return verify_failed(vmp, "free segment not on its free list", v->start);
    } else if (v->type == kSegAlloc) {
      nalloc++;
      nearly += v->early;
      alloc_bytes += seg_size(v);
      const Link* f = *hash_bucket(vmp, v->start);
      while (f && f != &v->link) f = f->next;
      if (!f) return verify_failed(vmp, "allocated segment not in the hash", v->start);
    } else {
      return verify_failed(vmp, "bad tag type", v->start);
    }
  }
  if (span_list != &vmp->spans) return verify_failed(vmp, "span list longer than the segment list", 0);
  if (!rotor_seen) return verify_failed(vmp, "rotor not on the segment list", 0);
  if (const vmem_seg* z = vmp->lazy) {
    // Section 3: free, at the head of its list, no lower than its class,
    // and the lists from its class up to that one empty.
    if (!lazy_seen) return verify_failed(vmp, "lazy segment not a free segment of the arena", 0);
    unsigned c = highbit(seg_size(z));
    if (c > z->list || vmp->freelist[z->list].next != &z->link ||
        (vmp->freemap & ((uintptr_t{1} << z->list) - (uintptr_t{1} << c))))
      return verify_failed(vmp, "lazy segment out of place", z->start);
  }
  uintptr_t listed = 0;
  for (unsigned i = 0; i < kFreeLists; i++) {
    const Link* head = &vmp->freelist[i];
    bool empty = head->next == head;
    if (empty != !(vmp->freemap & (uintptr_t{1} << i))) return verify_failed(vmp, "freemap out of step", i);
    for (const Link* f = head->next; f != head; f = f->next) {
      const vmem_seg* s = seg_of(f);
      if (s->type != kSegFree || s->list != i || (s != vmp->lazy && highbit(seg_size(s)) != i) || f->next->prev != f)
        return verify_failed(vmp, "bad free list entry", s->start);
      listed++;
    }
  }
  if (listed != nfree) return verify_failed(vmp, "free lists hold other segments", listed);
  uintptr_t hashed = 0, buckets = uintptr_t{1} << (kBits - vmp->hash_rshift);
  for (uintptr_t b = 0; b < buckets; b++)
    for (const Link* f = vmp->hash[b]; f; f = f->next) {
      if (seg_of(f)->type != kSegAlloc || hash_bucket(vmp, seg_of(f)->start) != &vmp->hash[b])
        return verify_failed(vmp, "bad hash entry", seg_of(f)->start);
      hashed++;
    }
  if (hashed != nalloc || nalloc != nalloc_of(vmp)) return verify_failed(vmp, "allocated segment count", hashed);
  if (nearly != vmp->early_segs) return verify_failed(vmp, "early segment count", nearly);
  if (alloc_bytes != vmp->alloc_bytes) return verify_failed(vmp, "allocated bytes", alloc_bytes);
  if (span_bytes != vmp->span_bytes || imported != vmp->imported_bytes || nspans != vmp->nspans)
    return verify_failed(vmp, "span totals", span_bytes);
  uintptr_t stock = 0;
  for (const Link* f = vmp->stock; f; f = f->next, stock++)
    if (seg_of(f)->type != kSegSpare || seg_of(f)->early) return verify_failed(vmp, "spare tag in use", stock);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// Statistics, walking, kmem hooks.

void vmem_stats(const vmem_t* cvmp, VmemStats& o) {
  auto* vmp = const_cast<vmem*>(cvmp);
  o = VmemStats{};
  ArenaLock h(vmp);
  copy_name(o.name, vmp->name);
  o.quantum = vmp->quantum;
  o.span_bytes = vmp->span_bytes;
  o.imported_bytes = vmp->imported_bytes;
  o.alloc_bytes = vmp->alloc_bytes;
  o.free_bytes = vmp->span_bytes - vmp->alloc_bytes;
  o.spans = vmp->nspans;
  o.segs_alloc = nalloc_of(vmp);
  for (unsigned i = 0; i < kFreeLists; i++)
    for (const Link* f = vmp->freelist[i].next; f != &vmp->freelist[i]; f = f->next) o.segs_free++;
  o.allocs = vmp->allocs;
  o.frees = vmp->allocs - nalloc_of(vmp);
  o.failures = vmp->failures;
  o.imports = vmp->imports;
  o.span_returns = vmp->span_returns;
  o.searches = vmp->searches;
  o.hash_buckets = uintptr_t{1} << (kBits - vmp->hash_rshift);
  o.hash_rescales = vmp->hash_rescales;
  o.qcache_max = vmp->qcache_max;
  o.source = vmp->source ? vmp->source->name : nullptr;
}

uint64_t vmem_capacity(const vmem_t* cvmp) {
  auto* vmp = const_cast<vmem*>(cvmp);
  uint64_t own;
  bool imports;
  const vmem* src;
  {
    ArenaLock h(vmp);
    own = vmp->span_bytes - vmp->imported_bytes;
    imports = vmp->afunc != nullptr;
    src = vmp->source;
  }
  if (!imports) return own;
  if (!src) return ~uint64_t{0};  // an import function of unknown reach
  uint64_t from_source = vmem_capacity(src);
  return from_source > ~uint64_t{0} - own ? ~uint64_t{0} : own + from_source;
}

bool vmem_imports_from(const vmem_t* vmp, const vmem_t* ancestor) {
  for (const vmem* v = vmp; v; v = v->afunc ? v->source : nullptr)
    if (v == ancestor) return true;
  return false;
}

void vmem_walk(void (*fn)(const vmem_t* vmp, void* arg), void* arg) {
  GlobalLock g(g_arenas_lock);
  for (vmem* vmp = g_arenas; vmp; vmp = vmp->next) fn(vmp, arg);
}

uint64_t vmem_metadata_pages() {
  uint64_t tags, tags_free, pages;
  vmem_seg_pool_stats(tags, tags_free, pages);
  return pages + __atomic_load_n(&g_hash_pages, __ATOMIC_RELAXED);
}

void vmem_seg_pool_stats(uint64_t& tags_total, uint64_t& tags_free, uint64_t& pages) {
  uint64_t stocked = 0;
  {
    GlobalLock g(g_arenas_lock);
    for (vmem* vmp = g_arenas; vmp; vmp = vmp->next) {
      ArenaLock h(vmp);
      stocked += stock_count(vmp);
    }
  }
  GlobalLock g(g_pool_lock);
  tags_total = g_pool_total;
  tags_free = g_pool_free + stocked;
  pages = g_pool_pages;
}

bool vmem_verify(const vmem_t* cvmp) {
  auto* vmp = const_cast<vmem*>(cvmp);
  ArenaLock h(vmp);
  return verify_locked(vmp);
}

void vmem_set_cache_layer(const VmemCacheLayer* l) {
  __atomic_store_n(&g_layer, l, __ATOMIC_RELEASE);
  for (;;) {
    vmem* claimed = nullptr;
    {
      GlobalLock g(g_arenas_lock);
      for (vmem* vmp = g_arenas; vmp && !claimed; vmp = vmp->next)
        if (qcache_claim(vmp)) claimed = vmp;
    }
    if (!claimed) return;
    qcache_create(claimed);
  }
}

// kmem_reap reaps every cache, quantum caches included (they are ordinary
// caches on its list), and then calls this. What vmem holds on its own
// account is spare tags: each arena's stock goes back to the pool down to
// the minimum an operation needs.
void vmem_qcache_reap() {
  GlobalLock g(g_arenas_lock);
  for (vmem* vmp = g_arenas; vmp; vmp = vmp->next) {
    ArenaLock h(vmp);
    uintptr_t n = stock_count(vmp);
    if (n > kSegMinFree) pool_put(vmp, n - kSegMinFree);
  }
}

}  // namespace mm

// ---------------------------------------------------------------------------
// The public API.

using namespace mm;

vmem_t* vmem_create(const char* name, void* base, size_t size, size_t quantum, vmem_alloc_t* afunc,
                    vmem_free_t* ffunc, vmem_t* source, size_t qcache_max, int vmflag) {
  uintptr_t caller = caller_of_api();
  int policy = vmflag & VM_POLICY;
  if (!is_pow2(quantum) || (policy & (policy - 1)) || (afunc && !source)) {
    report(kErrBadArgs, nullptr, reinterpret_cast<uintptr_t>(base), caller, quantum);
    return nullptr;
  }
  // The arena's boundary tags are pages (section 7). On the host an arena
  // may be the program's first call into the library: the page allocator
  // comes up then, as kmem's first use brings kmem up. (The kernel sets it
  // up at boot, before any arena.)
#if !defined(MM_KERNEL)
  if (!page_ready()) host::init_page_allocator();
#endif
  if (!page_ready()) {
    report(kErrNoPages, nullptr, reinterpret_cast<uintptr_t>(base), caller, size);
    return nullptr;
  }
  vmem* vmp = nullptr;
  {
    GlobalLock g(g_arenas_lock);
    for (vmem& slot : g_slots)
      if (!slot.in_use) {
        vmp = &slot;
        break;
      }
    if (vmp) {
      new (vmp) vmem{};
      vmp->in_use = true;
    }
  }
  if (!vmp) {
    plat::log("vmem_create('%s'): all %u arenas in use", name ? name : "?", kMaxArenas);
    return nullptr;
  }
  copy_name(vmp->name, name ? name : "anonymous");
  vmp->quantum = quantum;
  vmp->qmask = quantum - 1;
  vmp->qtrunc = ~vmp->qmask;
  vmp->qshift = highbit(quantum);
  vmp->policy = policy ? policy : VM_INSTANTFIT;
  for (Link& head : vmp->freelist) head.next = head.prev = &head;
  vmp->seg0.knext = vmp->seg0.kprev = &vmp->seg0;
  vmp->seg0.type = kSegSpan;
  vmp->spans.next = vmp->spans.prev = &vmp->spans;
  vmp->rotor = &vmp->seg0;
  hash_set(vmp, vmp->hash0, kHashInitial);
  vmp->source = source;
  vmp->afunc = afunc;
  vmp->ffunc = ffunc;
  size_t nq = qcache_max >> vmp->qshift;
  vmp->qcache_want = (nq < kMaxQcaches ? nq : kMaxQcaches) << vmp->qshift;
  if (vmp->qcache_want) vmp->qcache_state = kQcachePending;
  vmp->fast_span = vmp->policy == VM_INSTANTFIT ? kFastMax - vmp->qcache_want : 0;
  {
    GlobalLock g(g_arenas_lock);
    vmem** pp = &g_arenas;
    while (*pp) pp = &(*pp)->next;
    *pp = vmp;
  }
  if ((base || size) && !vmem_add(vmp, base, size, vmflag)) {
    (void)vmem_destroy(vmp);
    return nullptr;
  }
  if (vmp->qcache_want && layer() && qcache_claim(vmp)) qcache_create(vmp);
  return vmp;
}

bool vmem_destroy(vmem_t* vmp) {
  uintptr_t caller = caller_of_api();
  if (!vmp || !vmp->in_use) {
    report(kErrBadArgs, nullptr, reinterpret_cast<uintptr_t>(vmp), caller, 0);
    return false;
  }
  // 1. Arenas that import from this one.
  {
    unsigned importers = 0;
    GlobalLock g(g_arenas_lock);
    for (vmem* a = g_arenas; a; a = a->next)
      if (a->source == vmp) {
        plat::log("vmem_destroy('%s') refused: arena '%s' imports from it", vmp->name, a->name);
        importers++;
      }
    if (importers) {
      report(kErrDestroyImported, vmp, reinterpret_cast<uintptr_t>(vmp), caller, importers);
      return false;
    }
  }
  // 2. Outstanding allocations: objects in the quantum caches, segments
  //    allocated directly (the caches' own slabs do not count).
  unsigned nq = 0;
  uint64_t cached_bytes = 0, slab_bytes = 0, slabs = 0;
  // Acquire: qcache[] may have been set by another CPU (the layer's
  // registration creating the caches).
  bool cached = __atomic_load_n(&vmp->qcache_max, __ATOMIC_ACQUIRE) != 0;
  for (; cached && nq < kMaxQcaches && vmp->qcache[nq]; nq++) {
    uint64_t out, n, bytes;
    layer()->usage(vmp->qcache[nq], out, n, bytes);
    cached_bytes += out * (nq + 1) * vmp->quantum;
    slab_bytes += bytes;
    slabs += n;
  }
  {
    ArenaLock h(vmp);
    uint64_t direct_bytes = vmp->alloc_bytes - slab_bytes;
    uint64_t direct_segs = nalloc_of(vmp) - slabs;
    if (cached_bytes || direct_bytes) {
      uintptr_t first = 0;
      for (vmem_seg* v = vmp->seg0.knext; v != &vmp->seg0 && !first; v = v->knext)
        if (v->type == kSegAlloc) first = v->start;
      h.release();
      plat::log("vmem_destroy('%s') refused: %llu bytes in %llu segments allocated, %llu bytes in quantum caches",
                vmp->name, static_cast<unsigned long long>(direct_bytes),
                static_cast<unsigned long long>(direct_segs), static_cast<unsigned long long>(cached_bytes));
      report(kErrDestroyBusy, vmp, first, caller, direct_bytes + cached_bytes);
      return false;
    }
  }
  // 3. The quantum caches give their slabs back. (Nobody may use the arena
  // any more: the store publishes nothing; release costs nothing here.)
  __atomic_store_n(&vmp->qcache_max, size_t{0}, __ATOMIC_RELEASE);
  for (unsigned i = 0; i < nq; i++) {
    if (!layer()->destroy(vmp->qcache[i])) {
      plat::log("vmem_destroy('%s'): quantum cache %u still busy", vmp->name, i + 1);
      return false;
    }
    vmp->qcache[i] = nullptr;
  }
  {
    GlobalLock g(g_arenas_lock);
    vmem** pp = &g_arenas;
    while (*pp != vmp) pp = &(*pp)->next;
    *pp = vmp->next;
  }
  // 4. Imported spans (all free now) go back to the source; every tag goes
  //    back to the pool.
  ArenaLock h(vmp);
  MM_ASSERT(vmp->alloc_bytes == 0 && nalloc_of(vmp) == 0);
  while (vmp->spans.next != &vmp->spans) {
    vmem_seg* span = seg_of(vmp->spans.next);
    vmem_seg* v = span->knext;
    MM_ASSERT(v->type == kSegFree && v->end == span->end);
    freelist_remove(vmp, v);
    void* base = reinterpret_cast<void*>(span->start);
    uintptr_t bytes = seg_size(span);
    bool give_back = span->imported && vmp->ffunc;
    span_destroy(vmp, span, v);
    if (give_back) {
      h.release();
      vmp->ffunc(vmp->source, base, bytes);
      h.acquire();
    }
  }
  MM_ASSERT(vmp->freemap == 0);
  pool_put(vmp, stock_count(vmp));
  Link** table = vmp->hash;
  uintptr_t buckets = uintptr_t{1} << (kBits - vmp->hash_rshift);
  hash_set(vmp, vmp->hash0, kHashInitial);
  h.release();
  if (table != vmp->hash0) {
    unsigned order = order_for(buckets * sizeof(Link*));
    page_free_va(table, order);
    __atomic_fetch_sub(&g_hash_pages, uintptr_t{1} << order, __ATOMIC_RELAXED);
  }
  GlobalLock g(g_arenas_lock);
  vmp->in_use = false;
  return true;
}

void* vmem_add(vmem_t* vmp, void* vaddr, size_t size, int vmflag) {
  uintptr_t caller = caller_of_api();
  auto base = reinterpret_cast<uintptr_t>(vaddr);
  if (!base || !size || ((base | size) & vmp->qmask) || base + size < base || base + size == 0) {
    report(kErrBadArgs, vmp, base, caller, size);
    return nullptr;
  }
  ArenaLock h(vmp);
  if (!ensure_tags(vmp, 2, vmflag, h)) return nullptr;
  for (const Link* l = vmp->spans.next; l != &vmp->spans; l = l->next) {
    const vmem_seg* span = seg_of(l);
    if (base < span->end && span->start < base + size) {
      h.release();
      report(kErrOverlap, vmp, base, caller, size);
      return nullptr;
    }
  }
  span_create(vmp, base, size, false);
  return vaddr;
}

// Each traced as one vmem event (type 3): the span's base and size, the
// size rounded to the quantum as allocated. Traced, each entry point leaves
// its untraced body at once for an out of line copy that records.
namespace {
void* alloc_resettled(vmem_t* vmp, plat::IrqState irq, size_t asize, int vmflag, uintptr_t caller);
// vmem_alloc's fast path, the arena lock held (dropped there). Its ways
// out take the size rounded (the same for them: it takes no cached size,
// and nothing that rounding changes, so the raw size need not be kept).
template <typename Caller>
__attribute__((always_inline)) inline void* alloc_fast_locked(vmem_t* vmp, plat::IrqState irq, size_t asize,
                                                              int vmflag, Caller caller) {
  return alloc_locked(
      vmp, irq, asize,
      [=]() __attribute__((always_inline)) { return alloc_slow(vmp, asize, vmflag, caller()); },
      [=]() __attribute__((always_inline)) { return alloc_resettled(vmp, irq, asize, vmflag, caller()); });
}
// The lazy segment was too small to be sure of (lock held; dropped there).
__attribute__((noinline)) void* alloc_resettled(vmem_t* vmp, plat::IrqState irq, size_t asize, int vmflag,
                                                uintptr_t caller) {
  settle(vmp);
  return alloc_fast_locked(vmp, irq, asize, vmflag, KnownCaller{caller});
}
template <typename Caller>
__attribute__((always_inline)) inline void* alloc_body(vmem_t* vmp, size_t size, int vmflag, Caller caller) {
  // The fast path: a size no quantum cache serves, no other policy asked
  // for, in an instant-fit arena (fast_span is 0 in others).
  if (__builtin_expect(size - 1 - vmp->qcache_want < vmp->fast_span && !(vmflag & (VM_BESTFIT | VM_NEXTFIT)), 1)) {
    size_t asize = to_quanta(vmp, size);
    plat::IrqState irq = plat::irq_save();
    vmp->lock.lock();
    return alloc_fast_locked(vmp, irq, asize, vmflag, caller);
  }
  return alloc_slow(vmp, size, vmflag, caller());
}
// Allocation profiling: a segment of its own keeps its tag reference (sizes
// the quantum caches serve are not counted: their buffers have no segment).
// Looked up again under the lock: this is the hooked path.
bool own_segment(const vmem_t* vmp, size_t size) { return size - 1 >= vmp->qcache_want; }
// The reference of the allocated segment at addr of asize bytes (the arena
// lock held), or null if there is none such.
uint32_t* segment_tag(vmem_t* vmp, uintptr_t addr, uintptr_t asize) {
  Link** link;
  vmem_seg* v = hash_find(vmp, addr, &link);
  return *link && v->end - addr == asize ? &v->tag : nullptr;
}
void prof_segment(vmem_t* vmp, void* p, size_t size, const mm::AllocTag* tag) {
  if (!p || !mm::prof_counting()) return;
  uintptr_t asize = round_up(size, vmp->qmask);
  ArenaLock h(vmp);
  if (uint32_t* t = segment_tag(vmp, reinterpret_cast<uintptr_t>(p), asize)) *t = mm::prof_charge(tag, asize);
}
// Before a free: only of an allocated segment of that size (anything else
// the free refuses and reports).
void prof_unsegment(vmem_t* vmp, void* p, size_t size, uintptr_t caller) {
  if (!mm::prof_freeing()) return;
  uintptr_t asize = round_up(size, vmp->qmask);
  uint32_t ref;
  {
    ArenaLock h(vmp);
    uint32_t* t = segment_tag(vmp, reinterpret_cast<uintptr_t>(p), asize);
    if (!t) return;
    ref = *t;
    *t = 0;
  }
  mm::prof_uncharge(ref, asize, vmp->name, p, caller);
}
}  // namespace

// Gives the allocated segment at p to tag instead of the tag it was counted
// at (a large kmem_alloc: vmem counted it at segkmem's call site).
void mm::vmem_prof_retag(vmem_t* vmp, void* p, size_t size, const mm::AllocTag* tag) {
  uintptr_t asize = round_up(size, vmp->qmask);
  uint32_t old;
  {
    ArenaLock h(vmp);
    uint32_t* t = segment_tag(vmp, reinterpret_cast<uintptr_t>(p), asize);
    if (!t) return;
    old = *t;
    *t = mm::prof_charge(tag, asize);
  }
  if (old) mm::prof_uncharge(old, asize, vmp->name, p, 0);
}

namespace {
__attribute__((noinline, cold)) void* alloc_traced(vmem_t* vmp, size_t size, int vmflag, uintptr_t caller,
                                                   const mm::AllocTag* tag) {
  if (mm::failslab_armed() && (vmflag & VM_NOSLEEP) && mm::failslab_should_fail(vmp->name, size)) return nullptr;
  void* p = alloc_body(vmp, size, vmflag, KnownCaller{caller});
  kmemtrace::note_alloc(kmemtrace::kTypeVmem, caller, p, size, round_up(size, vmp->qmask), vmflag);
  if (own_segment(vmp, size)) prof_segment(vmp, p, size, tag);
  return p;
}
template <typename Caller>
__attribute__((always_inline)) inline void free_body(vmem_t* vmp, void* vaddr, size_t size, Caller caller) {
  if (__builtin_expect(size - 1 < vmp->qcache_want, 0)) return free_small(vmp, vaddr, size, caller());
  xfree<false>(vmp, reinterpret_cast<uintptr_t>(vaddr), size, caller);
}
__attribute__((noinline, cold)) void free_traced(vmem_t* vmp, void* vaddr, size_t size, uintptr_t caller) {
  if (own_segment(vmp, size)) prof_unsegment(vmp, vaddr, size, caller);
  kmemtrace::note_free(kmemtrace::kTypeVmem, caller, vaddr);
  free_body(vmp, vaddr, size, KnownCaller{caller});
}
}  // namespace

// The functions themselves (mm/vmem.h): calls that do not go through the
// macros are counted at these functions' own tags.
void* (vmem_alloc)(vmem_t* vmp, size_t size, int vmflag) {
  if (kmemtrace::on()) return alloc_traced(vmp, size, vmflag, caller_of_api(), MM_ALLOC_TAG_INDIRECT(kVmem));
  return alloc_body(vmp, size, vmflag, ApiCaller{});
}

void* vmem_alloc_tagged(vmem_t* vmp, size_t size, int vmflag, const mm::AllocTag* tag) {
  return alloc_traced(vmp, size, vmflag, caller_of_api(), tag);
}

void vmem_free(vmem_t* vmp, void* vaddr, size_t size) {
  if (kmemtrace::on_free()) return free_traced(vmp, vaddr, size, caller_of_api());
  free_body(vmp, vaddr, size, ApiCaller{});
}

namespace {
__attribute__((always_inline)) inline void* xalloc_body(vmem_t* vmp, size_t size, size_t align, size_t phase,
                                                       size_t nocross, void* minaddr, void* maxaddr, int vmflag,
                                                       uintptr_t caller, const mm::AllocTag* tag) {
  Request r;
  if (!make_request(vmp, size, align, phase, nocross, minaddr, maxaddr, caller, r)) return nullptr;
  // Fault injection rides on the hooks' switch (a nop while it is off).
  if (kmemtrace::on() && mm::failslab_armed() && (vmflag & VM_NOSLEEP) && mm::failslab_should_fail(vmp->name, size))
    return nullptr;
  int policy = policy_of(vmflag, vmp);
  auto slow = [&] { return xalloc(vmp, r, policy, vmflag, false, caller); };
  void* p;
  // kmem's slabs take the same constant-time path as vmem_alloc (never the caches).
  if (policy == VM_INSTANTFIT && r.unconstrained() && r.align == vmp->quantum && r.size - 1 < kFastMax)
    p = fast_alloc(vmp, r.size, slow);
  else
    p = slow();
  if (kmemtrace::on()) {
    kmemtrace::note_alloc(kmemtrace::kTypeVmem, caller, p, size, r.size, vmflag);
    prof_segment(vmp, p, size, tag);
  }
  return p;
}
}  // namespace

void* (vmem_xalloc)(vmem_t* vmp, size_t size, size_t align, size_t phase, size_t nocross, void* minaddr,
                    void* maxaddr, int vmflag) {
  return xalloc_body(vmp, size, align, phase, nocross, minaddr, maxaddr, vmflag, caller_of_api(),
                     MM_ALLOC_TAG_INDIRECT(kVmem));
}

void* vmem_xalloc_tagged(vmem_t* vmp, size_t size, size_t align, size_t phase, size_t nocross, void* minaddr,
                         void* maxaddr, int vmflag, const mm::AllocTag* tag) {
  return xalloc_body(vmp, size, align, phase, nocross, minaddr, maxaddr, vmflag, caller_of_api(), tag);
}

void vmem_xfree(vmem_t* vmp, void* vaddr, size_t size) {
  if (kmemtrace::on_free()) prof_unsegment(vmp, vaddr, size, caller_of_api());
  kmemtrace::note_free(kmemtrace::kTypeVmem, caller_of_api(), vaddr);
  xfree(vmp, reinterpret_cast<uintptr_t>(vaddr), size, ApiCaller{});
}

size_t vmem_size(vmem_t* vmp, int typemask) {
  ArenaLock h(vmp);
  size_t size = 0;
  if (typemask & VMEM_ALLOC) size += vmp->alloc_bytes;
  if (typemask & VMEM_FREE) size += vmp->span_bytes - vmp->alloc_bytes;
  return size;
}
