// SPDX-License-Identifier: Apache-2.0
// Page frames: a binary buddy allocator (see page.h).
//
// 1. What it manages. page_init takes RAM banks and reserved ranges
//    (physical, any order, possibly overlapping). Banks are trimmed inward
//    to whole frames and merged where they overlap or touch; reserved ranges
//    are widened outward. Every frame is then in one state (Page::flags):
//    kPageReserved (reserved, or holding the bank's descriptors), kPageFree
//    (head of a free block on its order's list), 0 (a free tail), kPageHead
//    (first frame of an allocated block, order valid), kPageTail (a later
//    one, owner = the head), kPagePcp (a free page in a per-CPU cache).
//    Owners may add kPageSlab/kPageVmem/kPageLarge to a head; a free clears them.
// 2. Descriptors. Each bank's Page array is carved out of that bank (the
//    first run of non-reserved frames long enough): no other allocator is
//    needed. page_of_phys scans the few banks; the largest is also copied
//    into Allocator::hot, so for it (usually all of RAM) address -> page is a
//    subtraction, a compare and an index. Page::alloc_bits holds the bank
//    index and kOnFreeList, the bit the buddy merge trusts: written only
//    under the lock, while flags are also written lock-free by the per-CPU
//    caches and by owners.
// 3. Buddies. Blocks are naturally aligned in frame numbers: a block's buddy
//    is pfn ^ (1 << order). A free merges while the buddy is in the same
//    bank, on a free list and of the same order; an allocation splits the
//    smallest block that fits. Allocation marks the head (kPageHead, order)
//    and every tail (kPageTail, owner = head), O(2^order) like the block;
//    free checks the head and clears them.
// 4. Per-CPU caches. Single pages come from a stack of kPageCacheSize pages
//    per CPU, refilled kPageCacheBatch at a time when empty and half-drained
//    (the coldest half) when full, touched only by its CPU: in restartable
//    sections on the fast paths where the platform has them, else with IRQs
//    masked. Cached pages count as free. A slot holds the page and its
//    frame in a word (CachedPage: the physical address where a word is 64
//    bits, the frame number where it is 32), so the fast paths (page_alloc,
//    page_free: inline leaf code for order 0) look nothing up and touch only
//    the cache, and an entry is two words; anything
//    else goes to noinline slow paths (alloc_slow, free_pa). The stack is
//    top and limit pointers over a sentinel slot whose page is never
//    kPagePcp (PageCache), as kmem's magazines.
// 5. The reserve: max(16, RAM/256) pages, at most 4 MiB and a quarter of
//    RAM. KM_SLEEP/KM_NOSLEEP allocations and cache refills never take the
//    buddy lists below it; KM_PUSHPAGE ones may (bypassing the caches), and
//    while the lists are below it freed single pages refill them instead of
//    a cache. KM_SLEEP retries after draining the caches (plat::on_each_cpu),
//    then after the reclaim hook (one at a time), then after
//    plat::wait_for_memory(), until it succeeds.
// 6. Locking and ordering. g_lock (IRQs masked) guards the free lists,
//    free_blocks, buddy_pages and the reserve counters. Banks, the hot bank,
//    totals and the reserve size are written once by page_init before any
//    other CPU calls in. g_reserve_low and g.fast_limit are written under
//    the lock and read lock-free, relaxed: hints, whose stale value only
//    sends a free to the cache instead of the lists or the reverse. Counters
//    are word-sized, relaxed, statistics only: per-CPU ones written by their
//    CPU, the rest with atomic adds. A descriptor is written plainly by the
//    frame's owner; a frame changes hands through g_lock or a per-CPU cache.
// 7. Debugging. MM_ASSERT checks cheap invariants on every list operation
//    (fatal). page_free validates its argument before touching anything:
//    misaligned, unmanaged, reserved, already free (free head, free tail or
//    cached), not a head, or not the head's order is logged with the caller
//    and ignored. The order-0 fast path takes only an aligned hot-bank
//    address whose descriptor is an allocated order-0 head (one masked
//    compare of the descriptor's first word); everything else, every double
//    free included, goes through check_free. A cached page stays kPagePcp
//    until handed out again, so it cannot be freed twice into a cache, and a
//    pop checks kPagePcp (fatal otherwise). page_verify() walks everything.
#include <mm/page.h>
#include <mm/platform.h>
#include "alloc_tag_internal.h"
#include "kmemtrace_hooks.h"
#include "lock.h"
#include <new>
#include <utility>

namespace mm {
namespace {


constexpr unsigned kMaxBanks = 16;
constexpr uint8_t kBankMask = 0x0f;      // alloc_bits: bank index
constexpr uint8_t kOnFreeList = 0x80;    // alloc_bits: head of a block on a free list
static_assert(kMaxBanks <= kBankMask + 1u);
constexpr uint64_t kReserveMin = 16;                           // pages
constexpr uint64_t kReserveMax = (uint64_t{4} << 20) >> kPageShift;
static_assert(kPageCacheBatch <= kPageCacheSize);
static_assert(sizeof(Page) == (sizeof(void*) == 8 ? 24 : 16));

struct Bank {
  uint64_t first;  // first frame number
  uint64_t end;    // frame number past the last
  Page* pages;     // descriptor of frame `first`
  uint32_t* tags;  // allocation profiling's reference of each frame (after the descriptors), or null
};

// The largest bank again, for the lock-free lookups (written once by
// page_init, before any other CPU calls in: kernel, before they start;
// host, inside kmem_init, before g_ready's release).
struct HotBank {
  uint64_t base;    // physical address of the first frame
  uint64_t frames;  // 0 before page_init
  Page* pages;
  uint32_t* tags;   // its allocation profiling references, or null (Bank::tags)
  // The frames the order-0 fast frees take (fast_index): all of them where
  // a word is 64 bits; where it is 32, those below 4 GiB.
  uintptr_t fast_frames;
  uintptr_t base_frame;  // frame_of(base), for prof_alloc_fast's index
};

struct Allocator {
  HotBank hot;
  // hot.fast_frames while the reserve is full, else 0: the frames free_fast
  // takes (one compare covers the bank, the alignment and the reserve).
  // Written under g_lock (note_reserve_level), read relaxed: a hint (6).
  // Beside hot, so that the fast free reaches both from one address.
  uintptr_t fast_limit;
  Bank banks[kMaxBanks];
  unsigned nbanks;
  bool ready;
  Page* free_head[kMaxOrder + 1];
  uint64_t free_blocks[kMaxOrder + 1];
  uint64_t buddy_pages;        // pages on the free lists
  uint64_t total_pages;        // allocatable frames, fixed at init
  uint64_t reserve_pages;
  uint64_t descriptor_pages;
  uint64_t ram_bytes;
  uint64_t pushpage_allocs;
};

template <typename T>
T load_relaxed(const T& v) { return __atomic_load_n(&v, __ATOMIC_RELAXED); }
template <typename T>
void store_relaxed(T& v, T x) { __atomic_store_n(&v, x, __ATOMIC_RELAXED); }

// A cached page: its descriptor and its frame, two words. The frame is the
// physical address where a word is 64 bits, the frame number where it is
// 32 (normalize_banks leaves no frame a word cannot number): 32-bit ARM's
// pop then loads one word where it loaded two, and fits page_alloc's
// registers with no frame (arch/arm/include/arch/rseq.h, rseq_pop_pair).
struct CachedPage {
  Page* page;
  uintptr_t frame;  // frame_of(its physical address)
};
// (Word: a template for the compile-time checks below, on every build.)
template <typename Word>
constexpr unsigned kFrameShiftIn = sizeof(Word) == 8 ? 0 : kPageShift;
template <typename Word>
constexpr Word frame_in(uint64_t pa) { return static_cast<Word>(pa >> kFrameShiftIn<Word>); }
template <typename Word>
constexpr uint64_t pa_of_frame_in(Word frame) { return uint64_t{frame} << kFrameShiftIn<Word>; }
constexpr unsigned kFrameShift = kFrameShiftIn<uintptr_t>;
constexpr uint64_t kWordFrames = sizeof(uintptr_t) == 8 ? ~uint64_t{0} : uint64_t{1} << 32;  // frames a word numbers
inline uintptr_t frame_of(uint64_t pa) { return frame_in<uintptr_t>(pa); }
inline uint64_t pa_of_frame(uintptr_t frame) { return pa_of_frame_in<uintptr_t>(frame); }
static_assert(pa_of_frame_in<uint32_t>(frame_in<uint32_t>(0x40000000)) == 0x40000000);
static_assert(pa_of_frame_in<uint32_t>(frame_in<uint32_t>(uint64_t{0xff} << 32 | 0xfffff000)) ==
              (uint64_t{0xff} << 32 | 0xfffff000));  // LPAE's last frame
static_assert(frame_in<uint32_t>((uint64_t{1} << 44) - 4096) == 0xffffffff);  // kWordFrames' last
static_assert(frame_in<uint64_t>(uint64_t{5} << 40) == uint64_t{5} << 40);

// The descriptor the per-CPU stacks' bottom sentinel names: flags 0, never
// kPagePcp, so that the pop's check of the mark is also its emptiness test.
// Nothing writes it.
constinit const Page g_no_page{};

// A CPU's stack of cached pages, as kmem's magazines (mm/kmem_cache.h,
// CpuCache): top and limit pointers over a bottom sentinel, slot[0] =
// {&g_no_page, 0}, so that a pop loads top and the entry it names and
// tests only the mark, and a push compares top with limit. Touched only by
// its CPU (IRQs masked, or in a restartable section); page_stats reads top
// and pushes from other CPUs (relaxed stores and loads: statistics only).
// Not copyable: top and limit point into the object itself.
struct alignas(64) PageCache {
  CachedPage* top;    // the hottest entry, &slot[0] when empty
  CachedPage* limit;  // &slot[kPageCacheSize]; &slot[0] in the [kMaxCpus] slot: always empty and full
  // Frees onto the stack, written only by this cache's CPU. Pops are not
  // counted: they are fills + pushes - drains - count, so the allocation
  // fast path writes no counter (the slow paths' counters are PageCounts).
  uintptr_t pushes;
  // Allocation profiling's counters of this CPU, biased (kmem_cache.h,
  // CpuCache::prof), for the profiled fast paths; 0 until they exist.
  // Written by page_prof_bases_set before counting can start, with the
  // image's references (as kmem's CpuCache::prof_refs).
  uintptr_t prof;
  uint64_t prof_refs;
  CachedPage slot[kPageCacheSize + 1];  // slot[0]: the sentinel; slot[count()] the hottest

  // What a cache holds: kPageCacheSize, none in the [kMaxCpus] slot.
  static constexpr uintptr_t capacity(bool claimed) { return claimed ? kPageCacheSize : 0; }
  constexpr explicit PageCache(bool claimed)
      : top(slot), limit(slot + capacity(claimed)), pushes(0), prof(0), prof_refs(0),
        slot{{const_cast<Page*>(&g_no_page), 0}} {}
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  // The CPU's own reads (or under a stop: page_verify), and page_stats' racy one.
  uintptr_t count() const { return static_cast<uintptr_t>(top - slot); }
  uintptr_t racy_count() const { return static_cast<uintptr_t>(load_relaxed(top) - slot); }
  CachedPage* stack() { return slot + 1; }  // stack()[0] the coldest
  const CachedPage* stack() const { return slot + 1; }
  void set_count(uintptr_t n) { store_relaxed(top, slot + n); }
  void reset(bool claimed) { ::new (static_cast<void*>(this)) PageCache(claimed); }
};
static_assert(sizeof(PageCache) == 64 * sizeof(void*), "a CPU's cache by a shift (page.h, kPageCacheSize)");
static_assert(offsetof(PageCache, limit) == offsetof(PageCache, top) + sizeof(void*), "rseq_push_pair: limit follows top");

// The slow paths' counters of a CPU's cache (written by its CPU with IRQs
// masked, read relaxed by page_stats), apart from the stack's line.
struct alignas(64) PageCounts {
  uintptr_t fills;          // pages cache_fill put on the stack
  uintptr_t drains;         // pages cache_drain took off it
  uintptr_t direct_allocs;  // allocations from the buddy lists
  uintptr_t direct_frees;   // frees to the buddy lists
};

template <size_t... I>
struct PageCaches {
  PageCache cpu[sizeof...(I)]{PageCache(I < plat::kMaxCpus)...};
};
template <size_t... I>
PageCaches<I...> page_caches_of(std::index_sequence<I...>);

constinit Allocator g{};
constinit plat::Lock g_lock;
// [kMaxCpus]: always empty and full (see cpu_slot). Each cache's top and
// limit point into itself: constant-initialised, so they are right before
// any code runs.
constinit decltype(page_caches_of(std::make_index_sequence<plat::kCpuSlots>())) g_page_caches{};
constexpr auto& g_pcp = g_page_caches.cpu;
constinit PageCounts g_pcp_counts[plat::kCpuSlots]{};
// This CPU's cache (or the [kMaxCpus] one: cpu_slot) on the fast paths,
// from its line offset scaled by the cache's size in lines: the same one
// load where the slot index is a load (kernel), and on x86-64, whose
// addressing scales by the word size, one shift and one add fewer than from
// the index, on each of the page pair's sides.
__attribute__((always_inline)) inline PageCache& pcp_of_this_slot() {
  static_assert(sizeof(PageCache) / 64 * 64 == sizeof(PageCache));
  return *reinterpret_cast<PageCache*>(reinterpret_cast<char*>(g_pcp) +
                                       plat::cpu_line_offset() * (sizeof(PageCache) / 64));
}
// Pages a refill takes: kPageCacheBatch, or a 16th of RAM where that is less
// (a board with 64 pages: 3), so the caches do not hold what a run of
// contiguous frames needs. Written by page_init.
constinit uintptr_t g_fill_batch = kPageCacheBatch;
// The reserve's level for the lock-free free paths, written under g_lock
// (note_reserve_level), read relaxed: a hint that publishes nothing (6).
constinit uintptr_t g_reserve_low = 0;  // buddy_pages < reserve_pages
constinit uintptr_t g_failures = 0;   // relaxed: statistics only
constinit uintptr_t g_bad_frees = 0;  // relaxed: statistics only
using ReclaimHook = void (*)();
// Stored with release (what the hook uses, set up before), loaded with acquire.
constinit ReclaimHook g_reclaim = nullptr;
// The hook is running: a try-lock (exchange with acquire, cleared with release).
constinit uintptr_t g_reclaiming = 0;



// Before releasing g_lock after buddy_pages changed.
inline void note_reserve_level() {
  // Stored only when they change: the fast frees read them, and g.hot
  // beside fast_limit, on every call.
  bool low = g.buddy_pages < g.reserve_pages;
  uintptr_t limit = low ? 0 : g.hot.fast_frames;
  if (load_relaxed(g_reserve_low) != uintptr_t{low}) store_relaxed(g_reserve_low, uintptr_t{low});
  if (load_relaxed(g.fast_limit) != limit) store_relaxed(g.fast_limit, limit);
}

inline uint64_t pages_in(unsigned order) { return uint64_t{1} << order; }
inline Page* page_at(const Bank& b, uint64_t pfn) { return b.pages + static_cast<size_t>(pfn - b.first); }
inline const Bank& bank_of(const Page* p) { return g.banks[p->alloc_bits & kBankMask]; }
inline uint64_t pfn_of(const Page* p) {
  const Bank& b = bank_of(p);
  return b.first + static_cast<uint64_t>(p - b.pages);
}

inline const Bank* bank_of_pfn(uint64_t pfn) {
  for (unsigned i = 0; i < g.nbanks; i++)
    if (pfn - g.banks[i].first < g.banks[i].end - g.banks[i].first) return &g.banks[i];
  return nullptr;
}

// The descriptor's first word (flags, order, alloc_bits) as one load, for
// the fast free path's check: an allocated order-0 head, not on a free
// list; the owner bits (kPageSlab, kPageVmem) and the bank index may be set.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
static_assert(offsetof(Page, flags) == 0 && offsetof(Page, order) == 2 && offsetof(Page, alloc_bits) == 3);
constexpr uint32_t kHeadWordMask =
    (0xffffu & ~uint32_t{kPageSlab | kPageVmem}) | (0xffu << 16) | (uint32_t{kOnFreeList} << 24);
constexpr uint32_t kHeadWordOrder0 = kPageHead;
// One aligned 32-bit load through a may_alias type. (A 4-byte
// __builtin_memcpy here becomes a call to memcpy on 32-bit ARM, built with
// -mno-unaligned-access, in page_free's fast path.)
static_assert(alignof(Page) >= alignof(uint32_t));
typedef uint32_t __attribute__((may_alias)) PageWord;
// p->flags = f on the order-0 fast paths, where flags' high byte is 0
// before (their checks: kPagePcp exactly, is_order0_head) and f's is too:
// a byte store. For a halfword, GCC builds the immediate in a register
// first on x86-64 (a 16-bit immediate's length-changing prefix stalls the
// decoders): a move more on each side of the host's page pair.
// The same one store elsewhere.
__attribute__((always_inline)) inline void set_flags_low(Page* p, PageFlags f) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "flags' low byte comes first");
  static_assert(kPageHead < 256 && kPagePcp < 256);
  *reinterpret_cast<uint8_t*>(&p->flags) = static_cast<uint8_t>(f);
}

inline bool is_order0_head(const Page* p) {
  return (*reinterpret_cast<const PageWord*>(p) & kHeadWordMask) == kHeadWordOrder0;
}


// hot_index for the fast frees, checked against g.fast_limit. Where a
// word is 32 bits (ARM with LPAE), in words: pa's high word must be 0 and
// the low word's offset, rotated, below fast_frames, the frames below
// 4 GiB. Exact: a low word below base wraps to an offset of at least
// 4 GiB - base, whose frame number is at least fast_frames. Spares 32-bit
// ARM the 64-bit subtraction and rotation, and the registers they hold.
// (Word: a template for the compile-time checks below, on every build.)
template <typename Word>
constexpr Word fast_index_in(uint64_t pa, uint64_t base) {
  if constexpr (sizeof(Word) == 8) {
    uint64_t off = pa - base;
    return off >> kPageShift | off << (64 - kPageShift);
  } else {
    uint32_t off = static_cast<uint32_t>(pa) - static_cast<uint32_t>(base);
    uint32_t i = off >> kPageShift | off << (32 - kPageShift);
    return pa >> 32 ? ~uint32_t{0} : i;
  }
}
template <typename Word>
constexpr Word fast_frames_in(uint64_t base, uint64_t frames) {
  if constexpr (sizeof(Word) == 8) {
    return frames;
  } else {
    uint64_t below = base >> 32 ? 0 : ((uint64_t{1} << 32) - base) >> kPageShift;
    return static_cast<Word>(frames < below ? frames : below);
  }
}
// pa's frame index in the hot bank, or a number >= g.hot.frames if pa is
// not a frame-aligned address in it: the offset rotated right by
// kPageShift puts any misalignment in the top bits, so one compare checks both.
inline uint64_t hot_index(uint64_t pa) { return fast_index_in<uint64_t>(pa, g.hot.base); }
inline uintptr_t fast_index(uint64_t pa) { return fast_index_in<uintptr_t>(pa, g.hot.base); }
inline uintptr_t fast_frames_of(uint64_t base, uint64_t frames) { return fast_frames_in<uintptr_t>(base, frames); }

// Both word sizes against one bank: 4 GiB at 1 GiB, crossing 4 GiB (a
// 32-bit word takes its first 3 GiB).
constexpr uint64_t kTestBase = uint64_t{1} << 30, kTestFrames = (uint64_t{4} << 30) >> kPageShift;
constexpr uint64_t k4G = uint64_t{1} << 32;
template <typename Word>
constexpr bool fast_index_takes(uint64_t pa) {
  return fast_index_in<Word>(pa, kTestBase) < fast_frames_in<Word>(kTestBase, kTestFrames);
}
static_assert(fast_frames_in<uint32_t>(kTestBase, kTestFrames) == (uint64_t{3} << 30) >> kPageShift);  // clamped
static_assert(fast_frames_in<uint64_t>(kTestBase, kTestFrames) == kTestFrames);
static_assert(fast_frames_in<uint32_t>(k4G, kTestFrames) == 0);                                  // above 4 GiB
static_assert(fast_frames_in<uint32_t>(kTestBase, 16) == 16);                                    // below: all
static_assert(fast_index_in<uint32_t>(kTestBase + 5 * kPageBytes, kTestBase) == 5);
static_assert(fast_index_in<uint64_t>(kTestBase + 5 * kPageBytes, kTestBase) == 5);
static_assert(fast_index_takes<uint32_t>(kTestBase) && fast_index_takes<uint64_t>(kTestBase));
static_assert(fast_index_takes<uint32_t>(k4G - kPageBytes) && fast_index_takes<uint64_t>(k4G - kPageBytes));
static_assert(!fast_index_takes<uint32_t>(k4G) && fast_index_takes<uint64_t>(k4G));  // the clamp
static_assert(!fast_index_takes<uint32_t>(k4G + kTestBase - kPageBytes) && fast_index_takes<uint64_t>(k4G + kTestBase - kPageBytes));
static_assert(!fast_index_takes<uint32_t>(k4G + kTestBase) && !fast_index_takes<uint64_t>(k4G + kTestBase));  // the end
static_assert(!fast_index_takes<uint32_t>(kTestBase - kPageBytes) && !fast_index_takes<uint64_t>(kTestBase - kPageBytes));
static_assert(!fast_index_takes<uint32_t>(0) && !fast_index_takes<uint64_t>(0));
static_assert(!fast_index_takes<uint32_t>(kTestBase + 8) && !fast_index_takes<uint64_t>(kTestBase + 8));  // misaligned
static_assert(!fast_index_takes<uint64_t>(kTestBase + (kTestFrames << kPageShift)));

// pa's descriptor if pa is a frame of the hot bank, else nullptr.
inline Page* hot_page_of_phys(uint64_t pa) {
  uint64_t i = hot_index(pa);
  return i < g.hot.frames ? g.hot.pages + static_cast<size_t>(i) : nullptr;
}

inline void* caller_address() { return __builtin_extract_return_addr(__builtin_return_address(0)); }

// --- Free lists (g_lock held) ----------------------------------------------

void list_add(Page* p, unsigned order) {
  assert_held(g_lock);
  MM_ASSERT(!(p->alloc_bits & kOnFreeList) && order <= kMaxOrder);
  p->flags = kPageFree;
  p->order = static_cast<uint8_t>(order);
  p->alloc_bits = static_cast<uint8_t>(p->alloc_bits | kOnFreeList);
  p->count = 0;
  p->prev = nullptr;
  p->next = g.free_head[order];
  if (p->next) p->next->prev = p;
  g.free_head[order] = p;
  g.free_blocks[order]++;
  g.buddy_pages += pages_in(order);
}

void list_del(Page* p, unsigned order) {
  assert_held(g_lock);
  MM_ASSERT((p->alloc_bits & kOnFreeList) && p->order == order && p->flags == kPageFree);
  MM_ASSERT(g.free_blocks[order] > 0 && g.buddy_pages >= pages_in(order));
  if (p->prev) p->prev->next = p->next;
  else g.free_head[order] = p->next;
  if (p->next) p->next->prev = p->prev;
  p->alloc_bits = static_cast<uint8_t>(p->alloc_bits & ~kOnFreeList);
  p->flags = 0;
  p->next = nullptr;
  p->prev = nullptr;
  g.free_blocks[order]--;
  g.buddy_pages -= pages_in(order);
}

// The smallest free block of at least `order`, split down to `order`; its
// descriptors are those of free frames (flags 0) until the caller marks them.
Page* take_block(unsigned order) {
  unsigned o = order;
  while (o <= kMaxOrder && !g.free_head[o]) o++;
  if (o > kMaxOrder) return nullptr;
  Page* p = g.free_head[o];
  list_del(p, o);
  while (o > order) {
    o--;
    list_add(p + pages_in(o), o);  // the upper half: same bank, contiguous descriptors
  }
  return p;
}

// Puts a free block (descriptors cleared, head's alloc_bits without
// kOnFreeList) on the free lists, merging it with its buddies.
void give_block(Page* p, unsigned order) {
  const Bank& b = bank_of(p);
  uint64_t pfn = pfn_of(p);
  MM_ASSERT((pfn & (pages_in(order) - 1)) == 0 && pfn + pages_in(order) <= b.end);
  while (order < kMaxOrder) {
    uint64_t buddy = pfn ^ pages_in(order);
    if (buddy < b.first || buddy >= b.end) break;
    Page* q = page_at(b, buddy);
    if (!(q->alloc_bits & kOnFreeList) || q->order != order) break;
    list_del(q, order);
    pfn &= ~pages_in(order);
    order++;
  }
  list_add(page_at(b, pfn), order);
}

// --- Allocated blocks (the caller owns the block; no lock needed) ----------

void mark_allocated(Page* p, unsigned order) {
  p->flags = kPageHead;
  p->order = static_cast<uint8_t>(order);
  p->count = 0;
  p->next = nullptr;
  p->owner = nullptr;
  for (uint64_t i = 1; i < pages_in(order); i++) {
    Page* t = p + i;
    t->flags = kPageTail;
    t->count = 0;
    t->next = nullptr;
    t->owner = p;
  }
}

// Head and tails back to "free frame"; the head keeps its order.
void clear_block(Page* p, unsigned order) {
  for (uint64_t i = 0; i < pages_in(order); i++) {
    Page* t = p + i;
    t->flags = 0;
    t->count = 0;
    t->next = nullptr;
    t->owner = nullptr;
  }
}

// Checks a page_free argument; the head's Page, or nullptr after reporting.
Page* check_free(uint64_t pa, unsigned order, const void* va, void* caller) {
  const char* why;
  Page* p = nullptr;
  if (pa & (kPageBytes - 1)) why = "misaligned address";
  else if (order > kMaxOrder) why = "order out of range";
  else if (!(p = page_of_phys(pa))) why = "not RAM the page allocator manages";
  else if (p->flags & kPageReserved) why = "reserved frame";
  else if (p->flags & kPageHead) {
    if (__builtin_expect(p->order == order, 1)) return p;
    why = "wrong order";
  } else if (p->flags & kPageTail) why = "inside an allocated block, not its head";
  else if (p->flags & kPagePcp) why = "already free (in a CPU's page cache)";
  else if (p->flags & kPageFree) why = "already free";
  else why = "already free (inside a free block)";
  __atomic_fetch_add(&g_bad_frees, uintptr_t{1}, __ATOMIC_RELAXED);
  auto ull = static_cast<unsigned long long>(pa);
  if (p && (p->flags & kPageHead)) {
    if (va)
      plat::log("page_free_va: %s: va %p (pa 0x%llx) order %u, allocated as order %u; caller %p; ignored", why, va,
                ull, order, p->order, caller);
    else
      plat::log("page_free: %s: pa 0x%llx order %u, allocated as order %u; caller %p; ignored", why, ull, order,
                p->order, caller);
  } else if (va) {
    plat::log("page_free_va: %s: va %p (pa 0x%llx) order %u; caller %p; ignored", why, va, ull, order, caller);
  } else {
    plat::log("page_free: %s: pa 0x%llx order %u; caller %p; ignored", why, ull, order, caller);
  }
  return nullptr;
}

// --- Per-CPU caches (IRQs masked, the calling CPU's cache) -----------------

PageCache& this_cache() { return g_pcp[plat::cpu_id()]; }
PageCounts& this_counts() { return g_pcp_counts[plat::cpu_id()]; }

// A slot the stack no longer holds. Where the heap is physical
// (plat::kPhysicalHeap) and the frame is an address (a word of 64 bits),
// it is also the address of whatever the page becomes (a slab's first
// buffer): kmemleak scans .data, where g_pcp is, and would take the stale
// copy for a reference. Elsewhere heap addresses are not frames' (or the
// frame is a frame number: the MPS2's, read as an address, falls in its
// code memory, below its heap) and the slot is left as it is (no store on
// the fast path).
inline void forget_popped(CachedPage& e) {
  if constexpr (plat::kPhysicalHeap && kFrameShift == 0) e.frame = 0;
  else (void)e;
}

// Refills an empty cache with up to kPageCacheBatch pages above the reserve.
void cache_fill(PageCache& c, PageCounts& k) {
  MM_ASSERT(c.count() == 0);
  Guard<NoIrqSave> guard(g_lock);  // IRQs masked by the caller
  uint64_t avail = g.buddy_pages > g.reserve_pages ? g.buddy_pages - g.reserve_pages : 0;
  uintptr_t batch = load_relaxed(g_fill_batch);
  uintptr_t n = avail < batch ? static_cast<uintptr_t>(avail) : batch;
  for (uintptr_t i = 0; i < n; i++) {
    Page* p = take_block(0);
    MM_ASSERT(p);  // buddy_pages > 0, and any free block splits down to a page
    p->flags = kPagePcp;  // order, count, next, owner clear: the cache's invariant
    p->order = 0;
    p->count = 0;
    p->next = nullptr;
    p->owner = nullptr;
    c.stack()[n - 1 - i] = {p, frame_of(pfn_of(p) << kPageShift)};  // pops come out in address order
  }
  c.set_count(n);
  store_relaxed(k.fills, k.fills + n);
  note_reserve_level();
}

// Returns the n coldest (bottom) pages of the cache to the buddy lists.
void cache_drain(PageCache& c, PageCounts& k, uintptr_t n) {
  uintptr_t count = c.count();
  MM_ASSERT(n <= count);
  Guard<NoIrqSave> guard(g_lock);  // IRQs masked by the caller
  CachedPage* stack = c.stack();
  for (uintptr_t i = 0; i < n; i++) {
    Page* p = stack[i].page;
    MM_ASSERT(p->flags == kPagePcp && p->order == 0 && pfn_of(p) << kPageShift == pa_of_frame(stack[i].frame));
    p->flags = 0;
    give_block(p, 0);
  }
  for (uintptr_t i = n; i < count; i++) stack[i - n] = stack[i];
  for (uintptr_t i = count - n; i < count; i++) forget_popped(stack[i]);
  c.set_count(count - n);
  store_relaxed(k.drains, k.drains + n);
  note_reserve_level();
}

// --- Allocation -------------------------------------------------------------

// One attempt, without waiting; 0 if nothing suitable is free.
uint64_t try_alloc(unsigned order, bool pushpage) {
  plat::IrqState s = plat::irq_save();
  PageCache& c = this_cache();
  PageCounts& k = this_counts();
  Page* p = nullptr;
  uint64_t pa = 0;
  bool cached = false;
  if (order == 0) {
    if (c.count() == 0) cache_fill(c, k);
    if (uintptr_t n = c.count()) {
      p = c.top->page;
      pa = pa_of_frame(c.top->frame);
      cached = true;
      c.set_count(n - 1);
      forget_popped(c.stack()[n - 1]);
      MM_ASSERT(p->flags == kPagePcp && p->order == 0 && !(p->alloc_bits & kOnFreeList));
    }
  }
  if (!p && (order > 0 || pushpage)) {
    Guard<NoIrqSave> guard(g_lock);
    uint64_t need = pages_in(order);
    bool dip = g.buddy_pages < g.reserve_pages + need;
    if (!dip || (pushpage && g.buddy_pages >= need)) {
      p = take_block(order);
      if (p && dip) g.pushpage_allocs++;
    }
    note_reserve_level();
  }
  if (p && !cached) store_relaxed(k.direct_allocs, k.direct_allocs + 1);
  plat::irq_restore(s);
  if (!p) return 0;
  mark_allocated(p, order);
  return cached ? pa : pfn_of(p) << kPageShift;
}

void run_reclaim_hook() {
  ReclaimHook fn = __atomic_load_n(&g_reclaim, __ATOMIC_ACQUIRE);
  if (!fn || __atomic_exchange_n(&g_reclaiming, uintptr_t{1}, __ATOMIC_ACQUIRE)) return;
  fn();
  __atomic_store_n(&g_reclaiming, uintptr_t{0}, __ATOMIC_RELEASE);
}

// The slow path of page_free / page_free_va: everything the fast path
// (free_fast) turned down, validated in full.
[[gnu::noinline]] void free_pa(uint64_t pa, unsigned order, const void* va, void* caller) {
  Page* p = check_free(pa, order, va, caller);
  if (!p) return;
  // Single pages go to the CPU's cache, unless the buddy lists are below the
  // reserve (KM_PUSHPAGE took from it): then they refill the reserve.
  if (order == 0 && !load_relaxed(g_reserve_low)) {  // a hint (6)
    p->count = 0;
    p->next = nullptr;
    p->owner = nullptr;
    plat::IrqState s = plat::irq_save();
    PageCache& c = this_cache();
    p->flags = kPagePcp;
    if (c.count() == kPageCacheSize) cache_drain(c, this_counts(), kPageCacheBatch);
    uintptr_t n = c.count();
    c.stack()[n] = {p, frame_of(pa)};
    c.set_count(n + 1);
    store_relaxed(c.pushes, c.pushes + 1);
    plat::irq_restore(s);
    return;
  }
  clear_block(p, order);
  plat::IrqState s = plat::irq_save();
  PageCounts& k = this_counts();
  {
    Guard<NoIrqSave> guard(g_lock);
    give_block(p, order);
    note_reserve_level();
  }
  store_relaxed(k.direct_frees, k.direct_frees + 1);
  plat::irq_restore(s);
}

// A page_alloc that alloc_fast could not serve: other orders, an empty
// cache, a CPU not claimed yet (host), failures and waiting.
// caller null: page_alloc tail-called this, so our own return address is
// page_alloc's caller (page_alloc stays frameless: see there).
[[gnu::noinline]] uint64_t alloc_slow(unsigned order, int kmflag, void* caller) {
  if (!caller) caller = caller_address();
  if (__builtin_expect(order > kMaxOrder, 0)) {
    plat::log("page_alloc: order %u > %u; caller %p", order, kMaxOrder, caller);
    __atomic_fetch_add(&g_failures, uintptr_t{1}, __ATOMIC_RELAXED);
    return 0;
  }
  bool pushpage = kmflag & KM_PUSHPAGE;
  for (;;) {
    if (uint64_t pa = try_alloc(order, pushpage)) return pa;
    if ((kmflag & KM_NOSLEEP) || !g.ready) break;
    // KM_SLEEP: cached single pages may complete a block or be all that is
    // left; then ask the slab layer to give pages back; then wait.
    page_drain_cpu_caches();
    if (uint64_t pa = try_alloc(order, pushpage)) return pa;
    run_reclaim_hook();
    if (uint64_t pa = try_alloc(order, pushpage)) return pa;
    plat::wait_for_memory();
  }
  __atomic_fetch_add(&g_failures, uintptr_t{1}, __ATOMIC_RELAXED);
  return 0;
}

// Where the platform has restartable sections (plat::kRestartable) the
// order-0 fast paths are two of them and run with interrupts enabled, as
// kmem's magazines (kmem_fastpath.h, Restartable fast paths): the pop loads
// top and the entry it names and commits top - 1; the push compares top with
// limit, writes the entry above top and commits top + 1, then counts itself
// in a section of its own. The descriptor is written outside them, while the
// page is the caller's alone: marked kPagePcp before the push (and back to an
// allocated head if the push found the cache full), marked allocated after
// the pop. The pop takes only a page marked kPagePcp, as the masked path:
// the bottom sentinel's g_no_page is not, so an empty cache goes to
// alloc_slow, and so does a corrupt one, whose try_alloc stops with the
// details. The functions that inline them carry MM_RESTARTABLE_TEXT.
static_assert(!(plat::kRestartable && plat::kPhysicalHeap), "forget_popped: the sections leave popped entries");
static_assert(sizeof(CachedPage) == 2 * sizeof(void*) && offsetof(CachedPage, frame) == sizeof(void*),
              "rseq_pop_pair's entry layout");

// Order 0 from a non-empty cache: its frame (frame_of its address); false
// sends the caller to alloc_slow.
__attribute__((always_inline)) inline bool alloc_fast_frame(uintptr_t& frame) {
  if constexpr (plat::kRestartable) {
    void* page;
    if (!plat::rseq_pop_pair<offsetof(PageCache, top), kPagePcp>(reinterpret_cast<char*>(&pcp_of_this_slot()),
                                                                   page, frame))
      return false;
    set_flags_low(static_cast<Page*>(page), kPageHead);  // mark_allocated(p, 0): order, count, next, owner are already 0
    return true;
  }
  plat::IrqState s = plat::irq_save();
  PageCache& c = pcp_of_this_slot();  // the empty [kMaxCpus] sends an unclaimed thread to alloc_slow
  CachedPage* t = c.top;
  Page* p = t->page;
  frame = t->frame;
  // The sentinel (empty: try_alloc refills), or a corrupted cache
  // (try_alloc pops the same page and stops with the details).
  bool ok = p->flags == kPagePcp;
  if (__builtin_expect(ok, 1)) {
    store_relaxed(c.top, t - 1);
    forget_popped(*t);
    set_flags_low(p, kPageHead);  // mark_allocated(p, 0): order, count, next, owner are already 0
  }
  plat::irq_restore(s);
  return ok;
}
// The same, into pa.
__attribute__((always_inline)) inline bool alloc_fast(uint64_t& pa) {
  uintptr_t frame;
  if (!alloc_fast_frame(frame)) return false;
  pa = pa_of_frame(frame);
  return true;
}

// The push of p (an allocated order-0 head of the hot bank) at pa, an
// address fast_index took, onto a cache that is not full; false (nothing
// done) if it is, which free_pa then handles. (The [kMaxCpus] slot an
// unclaimed thread reads is always full.)
__attribute__((always_inline)) inline bool cache_push(Page* p, uint64_t pa) {
  // frame_of(pa), from the low word alone where a word is 32 bits:
  // fast_index takes only addresses below 4 GiB there (one shift; the
  // high word's costs another).
  uintptr_t frame = sizeof(uintptr_t) == 8 ? frame_of(pa) : static_cast<uint32_t>(pa) >> kPageShift;
  if constexpr (plat::kRestartable) {
    set_flags_low(p, kPagePcp);
    p->count = 0;
    p->next = nullptr;
    p->owner = nullptr;
    char* base = reinterpret_cast<char*>(&pcp_of_this_slot());
    if (__builtin_expect((plat::rseq_push_pair<offsetof(PageCache, top)>(base, p, frame)), 1)) {
      plat::rseq_inc<offsetof(PageCache, pushes)>(base);
      return true;
    }
    set_flags_low(p, kPageHead);  // not cached: an allocated head again, for free_pa
    return false;
  }
  plat::IrqState s = plat::irq_save();
  PageCache& c = pcp_of_this_slot();
  CachedPage* t = c.top;
  bool ok = t < c.limit;
  if (__builtin_expect(ok, 1)) {
    set_flags_low(p, kPagePcp);
    p->count = 0;
    p->next = nullptr;
    p->owner = nullptr;
    t[1] = {p, frame};
    store_relaxed(c.top, t + 1);
    plat::count_own(c.pushes);
  }
  plat::irq_restore(s);
  return ok;
}
// An order-0 free of an allocated page of the hot bank into a cache that
// is not full, while the reserve is full; false (nothing done) for
// anything else, which free_pa then validates and handles.
__attribute__((always_inline)) inline bool free_fast(uint64_t pa) {
  uintptr_t i = fast_index(pa);
  if (__builtin_expect(i >= load_relaxed(g.fast_limit), 0)) return false;  // a hint (6)
  Page* p = g.hot.pages + static_cast<size_t>(i);
  if (__builtin_expect(!is_order0_head(p), 0)) return false;
  return cache_push(p, pa);
}

// --- Initialisation ---------------------------------------------------------

struct FrameRange {
  uint64_t first, end;  // frame numbers, [first, end)
};

uint64_t end_of(const PhysRange& r) { return r.size > ~uint64_t{0} - r.base ? ~uint64_t{0} : r.base + r.size; }

// A reserved range widened to whole frames.
FrameRange frames_around(const PhysRange& r) {
  uint64_t end = end_of(r);
  return {r.base >> kPageShift, (end >> kPageShift) + ((end & (kPageBytes - 1)) != 0)};
}

// Banks trimmed to whole frames, overlapping or adjacent ones merged, sorted.
unsigned normalize_banks(const PhysRange* banks, unsigned nbanks, FrameRange* out) {
  unsigned n = 0;
  for (unsigned i = 0; i < nbanks; i++) {
    FrameRange r{(banks[i].base >> kPageShift) + ((banks[i].base & (kPageBytes - 1)) != 0),
                 end_of(banks[i]) >> kPageShift};
    if (r.end > kWordFrames) {  // a cached page's frame is a word (CachedPage)
      uint64_t from = r.first > kWordFrames ? r.first : kWordFrames;
      plat::log("page_init: RAM 0x%llx-0x%llx is beyond what a word numbers in frames; left unused",
                static_cast<unsigned long long>(from << kPageShift), static_cast<unsigned long long>(end_of(banks[i])));
      r.end = kWordFrames;
    }
    if (r.first >= r.end) continue;
    for (unsigned j = 0; j < n;) {
      if (r.first <= out[j].end && out[j].first <= r.end) {
        if (out[j].first < r.first) r.first = out[j].first;
        if (out[j].end > r.end) r.end = out[j].end;
        out[j] = out[--n];
        j = 0;
      } else {
        j++;
      }
    }
    if (n == kMaxBanks) {
      plat::log("page_init: more than %u RAM banks; 0x%llx-0x%llx left unused", kMaxBanks,
                static_cast<unsigned long long>(r.first << kPageShift),
                static_cast<unsigned long long>(r.end << kPageShift));
      continue;
    }
    out[n++] = r;
  }
  for (unsigned i = 1; i < n; i++)
    for (unsigned j = i; j > 0 && out[j].first < out[j - 1].first; j--) {
      FrameRange t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
  return n;
}

// The first frame of `need` frames in [first, end) clear of every reserved
// range, or `end` if there is none.
uint64_t place_descriptors(uint64_t first, uint64_t end, uint64_t need, const PhysRange* reserved,
                           unsigned nreserved) {
  uint64_t s = first;
  for (bool moved = true; moved;) {
    if (end - s < need) return end;
    moved = false;
    for (unsigned i = 0; i < nreserved; i++) {
      FrameRange r = frames_around(reserved[i]);
      if (reserved[i].size && r.first < s + need && s < r.end) {
        s = r.end;
        moved = true;
        if (s >= end) return end;
      }
    }
  }
  return s;
}

// Sets up one bank: descriptors, reserved frames, free blocks. False if the
// bank cannot hold its own descriptors.
bool add_bank(FrameRange r, const PhysRange* reserved, unsigned nreserved) {
  uint64_t npages = r.end - r.first;
  // Allocation profiling's references follow the descriptors (4 bytes a
  // frame, 0.1% of RAM) unless its mode is never.
  bool tags = prof_records();
  uint64_t need = (npages * (sizeof(Page) + (tags ? sizeof(uint32_t) : 0)) + kPageBytes - 1) >> kPageShift;
  uint64_t at = place_descriptors(r.first, r.end, need, reserved, nreserved);
  if (at == r.end) {
    plat::log("page_init: RAM 0x%llx-0x%llx has no %llu free frames for its descriptors; left unused",
              static_cast<unsigned long long>(r.first << kPageShift),
              static_cast<unsigned long long>(r.end << kPageShift), static_cast<unsigned long long>(need));
    return false;
  }
  unsigned bi = g.nbanks++;
  Bank& b = g.banks[bi];
  b = {r.first, r.end, static_cast<Page*>(plat::phys_to_virt(at << kPageShift)), nullptr};
  __builtin_memset(b.pages, 0, static_cast<size_t>(npages) * sizeof(Page));
  if (tags) {
    b.tags = reinterpret_cast<uint32_t*>(b.pages + npages);
    __builtin_memset(b.tags, 0, static_cast<size_t>(npages) * sizeof(uint32_t));
  }
  for (uint64_t i = 0; i < npages; i++) b.pages[i].alloc_bits = static_cast<uint8_t>(bi);
  auto mark_reserved = [&](uint64_t f, uint64_t e) {
    if (f < b.first) f = b.first;
    if (e > b.end) e = b.end;
    for (; f < e; f++) page_at(b, f)->flags = kPageReserved;
  };
  for (unsigned i = 0; i < nreserved; i++) {
    if (!reserved[i].size) continue;
    FrameRange rr = frames_around(reserved[i]);
    mark_reserved(rr.first, rr.end);
  }
  mark_reserved(at, at + need);
  g.descriptor_pages += need;
  g.ram_bytes += npages << kPageShift;
  // Each run of unreserved frames, as the largest aligned blocks that fit.
  for (uint64_t f = b.first; f < b.end;) {
    if (page_at(b, f)->flags & kPageReserved) {
      f++;
      continue;
    }
    uint64_t e = f;
    while (e < b.end && !(page_at(b, e)->flags & kPageReserved)) e++;
    while (f < e) {
      unsigned o = kMaxOrder;
      while (o > 0 && ((f & (pages_in(o) - 1)) || f + pages_in(o) > e)) o--;
      give_block(page_at(b, f), o);
      f += pages_in(o);
    }
  }
  return true;
}

void drain_this_cpu_cb(void*) { page_drain_this_cpu(); }

bool verify_failed(const char* what, uint64_t pfn) {
  plat::log("page_verify: %s (frame 0x%llx)", what, static_cast<unsigned long long>(pfn << kPageShift));
  return false;
}

}  // namespace

// --- Public interface ---------------------------------------------------------

bool page_init(const PhysRange* banks, unsigned nbanks, const PhysRange* reserved, unsigned nreserved) {
  if (g.ready || g.nbanks) {
    plat::log("page_init: called twice; ignored");
    return false;
  }
  FrameRange ranges[kMaxBanks];
  unsigned n = normalize_banks(banks, banks ? nbanks : 0, ranges);
  if (!reserved) nreserved = 0;
  {
    Guard<> guard(g_lock);
    for (unsigned i = 0; i < n; i++) add_bank(ranges[i], reserved, nreserved);
  }
  if (!g.buddy_pages) {
    plat::log("page_init: no usable RAM (%u banks, %u reserved ranges)", nbanks, nreserved);
    g = Allocator{};
    return false;
  }
  g.total_pages = g.buddy_pages;
  uint64_t r = g.total_pages >> 8;
  if (r < kReserveMin) r = kReserveMin;
  if (r > kReserveMax) r = kReserveMax;
  // At most an eighth of RAM: with 64 pages (256 KiB) a quarter held back
  // left ordinary callers too few to find a run of eight free frames in.
  if (r > g.total_pages / 8) r = g.total_pages / 8;
  g.reserve_pages = r;
  uint64_t batch = g.total_pages / 16;
  store_relaxed(g_fill_batch, static_cast<uintptr_t>(batch < 1 ? 1 : batch > kPageCacheBatch ? kPageCacheBatch : batch));
  const Bank* hot = &g.banks[0];
  for (unsigned i = 1; i < g.nbanks; i++)
    if (g.banks[i].end - g.banks[i].first > hot->end - hot->first) hot = &g.banks[i];
  g.hot = {hot->first << kPageShift, hot->end - hot->first, hot->pages, hot->tags,
           fast_frames_of(hot->first << kPageShift, hot->end - hot->first), frame_of(hot->first << kPageShift)};
  note_reserve_level();
  // Before any other CPU calls in; a release for page_ready's acquire (a
  // host thread's first use, mm/host.h).
  __atomic_store_n(&g.ready, true, __ATOMIC_RELEASE);
  plat::log("page: %llu KiB RAM in %u banks, %llu pages free, %llu descriptor pages, reserve %llu pages",
            static_cast<unsigned long long>(g.ram_bytes >> 10), g.nbanks,
            static_cast<unsigned long long>(g.total_pages), static_cast<unsigned long long>(g.descriptor_pages),
            static_cast<unsigned long long>(g.reserve_pages));
  return true;
}

namespace {
// Page events carry the physical address (the allocator's own name for a
// frame), requested = allocated = the block's bytes.
__attribute__((always_inline)) inline void trace_alloc(uint64_t pa, unsigned order, int kmflag, void* caller) {
  kmemtrace::note_alloc(kmemtrace::kTypePages, reinterpret_cast<uintptr_t>(caller),
                     reinterpret_cast<const void*>(static_cast<uintptr_t>(pa)), kPageBytes << order,
                     kPageBytes << order, kmflag);
}
__attribute__((always_inline)) inline void trace_free(uint64_t pa, void* caller) {
  kmemtrace::note_free(kmemtrace::kTypePages, reinterpret_cast<uintptr_t>(caller),
                    reinterpret_cast<const void*>(static_cast<uintptr_t>(pa)));
}

// Traced, each entry point leaves its untraced body at once for an out of
// line copy that records (off: kmemtrace::on(); the fast paths stay
// frameless leaves). page_alloc and page_free tail-call their copies and
// slow paths, which take their own return address (it is the entry point's
// caller): a read in the entry point would cost it a stack frame on every
// call on riscv64 and arm. The others pass their own return address.
__attribute__((always_inline)) inline uint64_t alloc_body(unsigned order, int kmflag, void* caller) {
  uint64_t pa;
  if (__builtin_expect(order == 0, 1) && alloc_fast(pa)) return pa;
  return alloc_slow(order, kmflag, caller);
}
// Allocation profiling: the block's first frame keeps its tag reference.
__attribute__((always_inline)) inline void prof_alloc(uint64_t pa, unsigned order, const AllocTag* tag) {
  if (pa && prof_counting())
    if (uint32_t* slot = page_tag_slot(pa)) *slot = prof_charge(tag, kPageBytes << order);
}
// Before a free: only of an allocated block's head of that order (anything
// else is refused by the free, which reports it).
__attribute__((always_inline)) inline void prof_free(uint64_t pa, unsigned order, void* caller) {
  if (!prof_freeing()) return;
  Page* p = page_of_phys(pa);
  uint32_t* slot = page_tag_slot(pa);
  if (!p || !slot || !(__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & kPageHead) || p->order != order) return;
  uint32_t ref = *slot;
  *slot = 0;
  prof_uncharge(ref, kPageBytes << order, "page_free", plat::phys_to_virt(pa), reinterpret_cast<uintptr_t>(caller));
}
// The profiled fast paths (mm/kmem_fastpath.h, Profiled fast paths): while
// allocation profiling alone has the hooks on, single pages of the hot bank
// keep their references and counts inline, around the page cache's pop and
// push. A page of another bank takes prof_alloc's lookup; a free that is
// not the fast free's (another bank, a full cache, no reference) goes to
// the hooked copies, unless its reference is already off (then to the
// untraced validated free, since nothing else is hooked).
constexpr int64_t kPageDelta = prof_delta(kPageBytes);
// False: the page at frame (alloc_fast_frame's) is not the hot bank's, or
// the counters are not there yet (prof_alloc's turn, out of line: the
// tagged entry points stay frameless).
__attribute__((always_inline)) inline bool prof_alloc_fast(uintptr_t frame, const AllocTag* tag) {
  const PageCache& c = pcp_of_this_slot();
  uintptr_t counters = c.prof;
  // The frame's index in the hot bank: in words, so that 32-bit ARM, whose
  // frame is a frame number, subtracts one word. (The bank's frame count
  // fits a word: its descriptors are in the address space.)
  uintptr_t i = (frame - g.hot.base_frame) >> (kPageShift - kFrameShift);
  if (__builtin_expect(!counters || i >= static_cast<uintptr_t>(g.hot.frames), 0)) return false;  // counters: the tags exist (page_prof_bases_set)
  uintptr_t ref = prof_index(tag);
  // Not one of this image's tags (a call site in a template): prof_alloc
  // does not count it.
  if (__builtin_expect(!prof_ref_in(static_cast<uint32_t>(ref), c.prof_refs), 0)) return false;
  g.hot.tags[i] = static_cast<uint32_t>(ref);
  plat::cpu_add_indexed(counters, ref, kPageDelta);
  return true;
}
__attribute__((noinline)) uint64_t prof_alloc_pa(uint64_t pa, const AllocTag* tag) {
  prof_alloc(pa, 0, tag);
  return pa;
}
__attribute__((noinline)) void* prof_alloc_va(uint64_t pa, const AllocTag* tag) {
  prof_alloc(pa, 0, tag);
  return plat::phys_to_virt(pa);
}
// 1: freed; 0: nothing done (the hooked free's turn); -1: the reference is
// off and counted, the page still the caller's (the cache was full).
__attribute__((always_inline)) inline int free_prof_fast(uint64_t pa) {
  uintptr_t counters = pcp_of_this_slot().prof;
  uintptr_t i = fast_index(pa);
  if (__builtin_expect(!counters || i >= load_relaxed(g.fast_limit), 0)) return 0;
  Page* p = g.hot.pages + static_cast<size_t>(i);
  if (__builtin_expect(!is_order0_head(p), 0)) return 0;
  uint32_t* slot = &g.hot.tags[i];
  uint32_t ref = *slot;
  if (__builtin_expect(ref == 0, 0)) {
    if (prof_counting()) return 0;  // allocated while profiling was off (or freed twice): the hooked free reports it
    return cache_push(p, pa) ? 1 : 0;  // profiling is off: nothing to subtract
  }
  *slot = 0;
  plat::cpu_add_indexed<true>(counters, ref, kPageDelta);
  return cache_push(p, pa) ? 1 : -1;
}
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) uint64_t alloc_traced(unsigned order, int kmflag, void* caller, const AllocTag* tag) {
  if (!caller) caller = caller_address();
  uint64_t pa = alloc_body(order, kmflag, caller);
  trace_alloc(pa, order, kmflag, caller);
  prof_alloc(pa, order, tag);
  return pa;
}
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void* alloc_va_traced(unsigned order, int kmflag, void* caller, const AllocTag* tag) {
  if (!caller) caller = caller_address();
  uint64_t pa = alloc_body(order, kmflag, caller);
  trace_alloc(pa, order, kmflag, caller);
  prof_alloc(pa, order, tag);
  return pa ? plat::phys_to_virt(pa) : nullptr;
}
MM_RESTARTABLE_TEXT __attribute__((noinline, cold)) void free_traced(uint64_t pa, unsigned order, const void* va, void* caller) {
  prof_free(pa, order, caller);
  trace_free(pa, caller);
  if (!(order == 0 && free_fast(pa))) free_pa(pa, order, va, caller);
}
// page_free's hooked copy: the profiled fast free, or the traced one.
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void free_hooked_of_api(uint64_t pa, unsigned order,
                                                                                   uintptr_t caller);
// page_free's tail calls (an argument fewer than the functions they call,
// so that 32-bit ARM passes them in registers and can jump); caller 0: our
// own return address (MM_ENTRY_CALLER).
__attribute__((noinline)) void free_pa_of_api(uint64_t pa, unsigned order, uintptr_t caller) {
  free_pa(pa, order, nullptr, caller ? reinterpret_cast<void*>(caller) : caller_address());
}
__attribute__((noinline, cold)) void free_traced_of_api(uint64_t pa, unsigned order, uintptr_t caller) {
  free_traced(pa, order, nullptr, caller ? reinterpret_cast<void*>(caller) : caller_address());
}
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void free_hooked_of_api(uint64_t pa, unsigned order,
                                                                                   uintptr_t caller) {
  if (__builtin_expect(order == 0 && !free_hooks_beside_prof(), 1)) {
    int r = free_prof_fast(pa);
    if (__builtin_expect(r > 0, 1)) return;
    if (r < 0) return free_pa_of_api(pa, order, caller);
  }
  return free_traced_of_api(pa, order, caller);
}
}  // namespace

uint32_t* page_tag_slot(uint64_t pa) {
  uint64_t pfn = pa >> kPageShift;
  const Bank* b = bank_of_pfn(pfn);
  return b && b->tags ? &b->tags[pfn - b->first] : nullptr;
}

MM_RESTARTABLE_TEXT MM_FRAMELESS uint64_t page_alloc_tagged(unsigned order, int kmflag, const AllocTag* tag) {
  uintptr_t frame;
  if (__builtin_expect(order == 0 && !alloc_hooks_beside_prof(), 1) && alloc_fast_frame(frame)) {
    if (__builtin_expect(prof_alloc_fast(frame, tag), 1)) return pa_of_frame(frame);
    return prof_alloc_pa(pa_of_frame(frame), tag);
  }
  return alloc_traced(order, kmflag, reinterpret_cast<void*>(MM_ENTRY_CALLER()), tag);
}
MM_RESTARTABLE_TEXT MM_FRAMELESS void* page_alloc_va_tagged(unsigned order, int kmflag, const AllocTag* tag) {
  uintptr_t frame;
  if (__builtin_expect(order == 0 && !alloc_hooks_beside_prof(), 1) && alloc_fast_frame(frame)) {
    if (__builtin_expect(prof_alloc_fast(frame, tag), 1)) return plat::phys_to_virt(pa_of_frame(frame));
    return prof_alloc_va(pa_of_frame(frame), tag);
  }
  return alloc_va_traced(order, kmflag, reinterpret_cast<void*>(MM_ENTRY_CALLER()), tag);
}

void page_prof_bases_set() {
  if (!g.hot.tags) return;  // never: no references, so no fast path
  for (unsigned c = 0; c < plat::kCpuSlots; c++) {
    g_pcp[c].prof_refs = prof_refs_pack();
    store_relaxed(g_pcp[c].prof, prof_counter_base(c));  // last (ordered for the fast paths by counters_ready's cross-call)
  }
}

// The functions themselves (mm/page.h): calls that do not go through the
// macros are counted at these functions' own tags.
MM_RESTARTABLE_TEXT MM_FRAMELESS uint64_t (page_alloc)(unsigned order, int kmflag) {
  if (kmemtrace::on())
    return alloc_traced(order, kmflag, reinterpret_cast<void*>(MM_ENTRY_CALLER()), MM_ALLOC_TAG_INDIRECT(kPage));
  uint64_t pa;
  if (__builtin_expect(order == 0, 1)) {
    if (alloc_fast(pa)) return pa;
    // 0, not order: its register is then free for the pop, and 32-bit
    // ARM's page_alloc needs no frame (arch/arm's rseq_pop_pair).
    return alloc_slow(0, kmflag, reinterpret_cast<void*>(MM_ENTRY_CALLER()));
  }
  return alloc_slow(order, kmflag, reinterpret_cast<void*>(MM_ENTRY_CALLER()));
}

MM_RESTARTABLE_TEXT MM_FRAMELESS void page_free(uint64_t pa, unsigned order) {
  if (kmemtrace::on_free()) return free_hooked_of_api(pa, order, MM_ENTRY_CALLER());
  if (__builtin_expect(order == 0, 1)) {
    if (free_fast(pa)) return;
    return free_pa_of_api(pa, 0, MM_ENTRY_CALLER());  // (0: as page_alloc's)
  }
  return free_pa_of_api(pa, order, MM_ENTRY_CALLER());
}

MM_RESTARTABLE_TEXT void* (page_alloc_va)(unsigned order, int kmflag) {
  if (kmemtrace::on()) return alloc_va_traced(order, kmflag, caller_address(), MM_ALLOC_TAG_INDIRECT(kPage));
  uint64_t pa;
  if (!(__builtin_expect(order == 0, 1) && alloc_fast(pa))) pa = alloc_slow(order, kmflag, caller_address());
  return pa ? plat::phys_to_virt(pa) : nullptr;
}

MM_RESTARTABLE_TEXT void page_free_va(void* va, unsigned order) {
  if (!va) {
    __atomic_fetch_add(&g_bad_frees, uintptr_t{1}, __ATOMIC_RELAXED);
    plat::log("page_free_va: null pointer, order %u; caller %p; ignored", order, caller_address());
    return;
  }
  uint64_t pa = plat::virt_to_phys(va);
  if (kmemtrace::on_free()) {
    if (order == 0 && !free_hooks_beside_prof()) {
      int r = free_prof_fast(pa);
      if (r > 0) return;
      if (r < 0) return free_pa(pa, order, va, caller_address());
    }
    return free_traced(pa, order, va, caller_address());
  }
  if (order == 0 && free_fast(pa)) return;
  free_pa(pa, order, va, caller_address());
}

Page* page_of_phys(uint64_t pa) {
  if (Page* p = hot_page_of_phys(pa)) return p;
  uint64_t pfn = pa >> kPageShift;
  const Bank* b = bank_of_pfn(pfn);
  return b ? page_at(*b, pfn) : nullptr;
}

Page* page_of(const void* va) {
  if (Page* p = page_of_phys(plat::virt_to_phys(va))) return p;
  uint64_t pa = plat::heap_to_phys(reinterpret_cast<uintptr_t>(va));
  return pa ? page_of_phys(pa) : nullptr;
}

uint64_t page_to_phys(const Page* p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  for (unsigned i = 0; i < g.nbanks; i++) {
    const Bank& b = g.banks[i];
    uintptr_t off = addr - reinterpret_cast<uintptr_t>(b.pages);
    if (off % sizeof(Page) == 0 && off / sizeof(Page) < b.end - b.first)
      return (b.first + off / sizeof(Page)) << kPageShift;
  }
  return 0;
}

void page_drain_this_cpu() {
  plat::IrqState s = plat::irq_save();
  PageCache& c = this_cache();
  if (uintptr_t n = c.count()) cache_drain(c, this_counts(), n);
  plat::irq_restore(s);
}

void page_drain_cpu_caches() { plat::on_each_cpu(drain_this_cpu_cb, nullptr); }

void page_set_reclaim_hook(void (*fn)()) { __atomic_store_n(&g_reclaim, fn, __ATOMIC_RELEASE); }

void page_stats(PageStats& out) {
  out = PageStats{};
  Guard<> guard(g_lock);
  out.total_pages = g.total_pages;
  out.reserve_pages = g.reserve_pages;
  out.descriptor_pages = g.descriptor_pages;
  for (unsigned o = 0; o <= kMaxOrder; o++) out.free_blocks[o] = g.free_blocks[o];
  for (unsigned i = 0; i < plat::kCpuSlots; i++) {
    const PageCache& c = g_pcp[i];
    const PageCounts& k = g_pcp_counts[i];
    uintptr_t count = c.racy_count(), pushes = load_relaxed(c.pushes);
    uintptr_t pops = load_relaxed(k.fills) + pushes - load_relaxed(k.drains) - count;
    out.pcp_pages += count;
    out.allocs += pops + load_relaxed(k.direct_allocs);
    out.frees += pushes + load_relaxed(k.direct_frees);
  }
  out.free_pages = g.buddy_pages + out.pcp_pages;
  out.failures = load_relaxed(g_failures);
  out.pushpage_allocs = g.pushpage_allocs;
  out.bad_frees = load_relaxed(g_bad_frees);
}

bool page_ready() { return __atomic_load_n(&g.ready, __ATOMIC_ACQUIRE); }

uint64_t page_ram_bytes() { return g.ram_bytes; }

void page_ram_range(uint64_t& lo, uint64_t& hi) {
  lo = hi = 0;
  for (unsigned i = 0; i < g.nbanks; i++) {
    uint64_t b = g.banks[i].first << kPageShift, e = g.banks[i].end << kPageShift;
    if (i == 0 || b < lo) lo = b;
    if (i == 0 || e > hi) hi = e;
  }
}

uint64_t page_alloc_run(size_t pages, int kmflag) {
  if (!pages) return 0;
  uint64_t pa = 0;
  {
    plat::IrqState s = plat::irq_save();
    Guard<NoIrqSave> guard(g_lock);
    bool pushpage = kmflag & KM_PUSHPAGE;
    bool dip = g.buddy_pages < g.reserve_pages + pages;
    if (!dip || (pushpage && g.buddy_pages >= pages)) {
      // First fit over each bank: consecutive free blocks (heads on the
      // free lists; a block's frames follow its head) make a run.
      for (unsigned b = 0; b < g.nbanks && !pa; b++) {
        const Bank& bank = g.banks[b];
        uint64_t start = bank.first, len = 0;
        for (uint64_t pfn = bank.first; pfn < bank.end;) {
          Page* p = page_at(bank, pfn);
          if (!(p->alloc_bits & kOnFreeList)) {
            pfn++;
            start = pfn;
            len = 0;
            continue;
          }
          len += pages_in(p->order);
          pfn += pages_in(p->order);
          if (len >= pages) {
            pa = start << kPageShift;
            break;
          }
        }
        if (!pa) continue;
        // Take the blocks; give back what lies past the run, page by page
        // (the buddy merges them again).
        uint64_t end = start + pages;
        for (uint64_t pfn = start; pfn < end;) {
          Page* p = page_at(bank, pfn);
          unsigned order = p->order;
          list_del(p, order);
          clear_block(p, order);
          for (uint64_t i = 0; i < pages_in(order); i++) {
            Page* t = p + i;
            if (pfn + i < end) {
              mark_allocated(t, 0);
            } else {
              t->order = 0;
              give_block(t, 0);
            }
          }
          pfn += pages_in(order);
        }
        if (dip) g.pushpage_allocs++;
      }
      note_reserve_level();
    }
    plat::irq_restore(s);
  }
  if (!pa) {
    __atomic_fetch_add(&g_failures, uintptr_t{1}, __ATOMIC_RELAXED);
    return 0;
  }
  // Each frame is its own allocation, for the tracer and profiling as for
  // the frees that will give them back one by one.
  for (size_t i = 0; i < pages; i++) {
    trace_alloc(pa + i * kPageBytes, 0, kmflag, caller_address());
    if (prof_counting())
      if (uint32_t* slot = page_tag_slot(pa + i * kPageBytes)) *slot = prof_charge(MM_ALLOC_TAG(kPage), kPageBytes);
  }
  return pa;
}

void page_split(uint64_t pa, unsigned order) {
  Page* p = page_of_phys(pa);
  MM_ASSERT(p && (p->flags & kPageHead) && p->order == order && !(pa & ((kPageBytes << order) - 1)));
  uint32_t* slot = page_tag_slot(pa);
  uint32_t ref = slot ? *slot : 0;
  for (uint64_t i = 0; i < pages_in(order); i++) {
    Page* t = p + i;
    t->flags = kPageHead;
    t->order = 0;
    t->count = 0;
    t->next = nullptr;
    t->owner = nullptr;
    if (i && slot) slot[i] = ref;
  }
  // Profiling: the block was charged as one allocation of all its bytes;
  // each page is now freed on its own, one call and one page each.
  if (ref && order) {
    plat::IrqState s = plat::irq_save();
    prof_recount_masked(ref, static_cast<int64_t>(pages_in(order) - 1));
    plat::irq_restore(s);
  }
}

bool page_verify() {
  Guard<> guard(g_lock);
  // Free lists: links, heads, counts.
  uint64_t list_pages = 0;
  for (unsigned o = 0; o <= kMaxOrder; o++) {
    uint64_t blocks = 0;
    for (Page* p = g.free_head[o], *prev = nullptr; p; prev = p, p = p->next, blocks++) {
      if (p->prev != prev) return verify_failed("free list back link", pfn_of(p));
      if (!(p->alloc_bits & kOnFreeList) || p->flags != kPageFree || p->order != o)
        return verify_failed("free list holds a frame that is not a free head of its order", pfn_of(p));
      if (blocks > g.free_blocks[o]) return verify_failed("free list longer than its count", pfn_of(p));
    }
    if (blocks != g.free_blocks[o]) return verify_failed("free list shorter than its count", 0);
    list_pages += blocks * pages_in(o);
  }
  if (list_pages != g.buddy_pages) return verify_failed("free lists disagree with buddy_pages", 0);
  // Per-CPU caches.
  uint64_t cached = 0;
  for (const PageCache& c : g_pcp) {
    bool claimed = &c != &g_pcp[plat::kMaxCpus];
    if (c.limit != c.slot + PageCache::capacity(claimed) || c.top < c.slot || c.top > c.limit)
      return verify_failed("per-CPU cache's top or limit out of place", 0);
    if (c.slot[0].page != &g_no_page || g_no_page.flags == kPagePcp)
      return verify_failed("per-CPU cache's bottom sentinel overwritten", 0);
    for (uintptr_t i = 0; i < c.count(); i++) {
      const Page* p = c.stack()[i].page;
      if (p->flags != kPagePcp || (p->alloc_bits & kOnFreeList))
        return verify_failed("per-CPU cache holds a frame not marked kPagePcp", pfn_of(p));
      if (p->order != 0 || p->count != 0 || p->next || p->owner)
        return verify_failed("per-CPU cached frame's order, count, next or owner not clear", pfn_of(p));
      if (pfn_of(p) << kPageShift != pa_of_frame(c.stack()[i].frame))
        return verify_failed("per-CPU cache slot's address is not its page's", pfn_of(p));
    }
    cached += c.count();
  }
  // Every frame, in address order: each in exactly one state.
  uint64_t free_pages = 0, pcp_pages = 0, used_pages = 0;
  for (unsigned bi = 0; bi < g.nbanks; bi++) {
    const Bank& b = g.banks[bi];
    for (uint64_t f = b.first; f < b.end;) {
      Page* p = page_at(b, f);
      if ((p->alloc_bits & kBankMask) != bi) return verify_failed("descriptor names the wrong bank", f);
      if (p->flags & kPageReserved) {
        if (p->flags != kPageReserved || (p->alloc_bits & kOnFreeList)) return verify_failed("reserved frame in use", f);
        f++;
        continue;
      }
      if (p->flags & kPagePcp) {
        if (p->flags != kPagePcp) return verify_failed("cached frame with other flags", f);
        pcp_pages++;
        f++;
        continue;
      }
      bool free = p->alloc_bits & kOnFreeList;
      if (!free && !(p->flags & kPageHead)) return verify_failed("frame outside any block", f);
      if (free && p->flags != kPageFree) return verify_failed("free head not marked kPageFree", f);
      unsigned o = p->order;
      if (o > kMaxOrder || (f & (pages_in(o) - 1)) || f + pages_in(o) > b.end)
        return verify_failed("block misaligned or past its bank", f);
      for (uint64_t i = 1; i < pages_in(o); i++) {
        const Page* t = p + i;
        if (t->alloc_bits & kOnFreeList) return verify_failed("free head inside another block", f + i);
        if (free ? t->flags != 0 : (t->flags != kPageTail || t->owner != p))
          return verify_failed(free ? "free block's tail not clear" : "allocated block's tail not kPageTail", f + i);
      }
      (free ? free_pages : used_pages) += pages_in(o);
      f += pages_in(o);
    }
  }
  if (free_pages != g.buddy_pages) return verify_failed("free frames disagree with buddy_pages", 0);
  if (pcp_pages != cached) return verify_failed("kPagePcp frames disagree with the caches", 0);
  if (free_pages + pcp_pages + used_pages != g.total_pages) return verify_failed("frames lost or gained", 0);
  return true;
}

void page_reset_for_tests() {
  Guard<> guard(g_lock);
  g = Allocator{};
  for (unsigned i = 0; i < plat::kCpuSlots; i++) {
    g_pcp[i].reset(i < plat::kMaxCpus);
    g_pcp_counts[i] = PageCounts{};
  }
  store_relaxed(g_failures, uintptr_t{0});
  store_relaxed(g_reserve_low, uintptr_t{0});
  store_relaxed(g_bad_frees, uintptr_t{0});
  __atomic_store_n(&g_reclaim, ReclaimHook{nullptr}, __ATOMIC_RELAXED);
  store_relaxed(g_reclaiming, uintptr_t{0});
}

}  // namespace mm
