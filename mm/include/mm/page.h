// SPDX-License-Identifier: Apache-2.0
// Page frames: a binary buddy allocator over the RAM the device tree
// describes, with one small descriptor per frame.
//
// Design statement (details in mm/page.cpp):
//  1. RAM banks minus reserved ranges (kernel image, DTB, /reserved-memory)
//     are split into naturally aligned power-of-two blocks of frames, orders
//     0..kMaxOrder, each on a free list per order.
//  2. Every frame has a Page descriptor, in one array per bank carved out of
//     that bank at init; any physical address (and, through mm::page_of, any
//     kernel address: direct map or heap) finds its Page in O(1). kmem keeps
//     its slab pointer in the descriptor, so address -> page -> slab -> cache.
//  3. Single pages go through a per-CPU cache (a small stack per CPU, filled
//     and drained in batches) so the common case takes no lock.
//  4. A reserve of free pages is kept back for KM_PUSHPAGE callers, so
//     code that frees memory can make progress when memory is exhausted.
//  5. Locking: one lock for the buddy lists (IRQs masked); the per-CPU
//     caches are touched only by their CPU with IRQs masked.
//  6. Bad frees (double free, reserved or unmanaged frame, wrong order,
//     misaligned address) are logged with the caller and ignored.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/alloc_tag.h>
#include <mm/flags.h>
#include <mm/platform_inline.h>

namespace mm {

constexpr size_t kPageShift = 12;
constexpr size_t kPageBytes = size_t{1} << kPageShift;
constexpr unsigned kMaxOrder = 10;  // blocks of up to 4 MiB
// (28: the cache structure is then 512 bytes, 256 where a word is 32 bits,
// so a CPU's is found with a shift, not a multiply, on the fast paths.)
constexpr unsigned kPageCacheSize = 28;   // per-CPU cache of single pages: capacity
constexpr unsigned kPageCacheBatch = 14;  // pages moved per fill or drain

enum PageFlags : uint16_t {
  kPageFree = 1 << 0,      // head of a free buddy block (order valid)
  kPageReserved = 1 << 1,  // never allocatable (reserved range, descriptor array, hole)
  kPageSlab = 1 << 2,      // owned by a kmem slab (owner = slab)
  kPageHead = 1 << 3,      // first page of an allocated block (order valid)
  kPageTail = 1 << 4,      // a later page of an allocated block
  kPagePcp = 1 << 5,       // sitting in a per-CPU page cache
  kPageVmem = 1 << 6,      // a heap page: mapped by segkmem into the kernel heap
  kPageLarge = 1 << 7,     // part of a large kmem_alloc (large_start, and count on the first page)
};

// One per physical frame; 24 bytes on 64-bit, 16 on 32-bit.
// An allocated block's head belongs to its owner (flags kPageSlab/kPageVmem/
// kPageLarge, count, next, owner) except `order`; a tail's `owner` is its
// head's Page (kPageTail), set by the allocator: do not overwrite it.
// Heap pages (kPageVmem, always single pages) are segkmem's: kPageSlab with
// owner = the kmem Slab; kPageLarge with large_start = the allocation's first
// byte and, on its first page, count = its pages; owner is g_no_owner
// otherwise (mm/heap_index.h). Descriptors are written plainly by whoever
// owns the frame; lock-free readers of other frames' descriptors (whatis,
// the heap index) say what orders them.
struct Page {
  uint16_t flags;
  uint8_t order;       // block order, valid for heads and free heads
  uint8_t alloc_bits;  // the page allocator's own: bank index, on-free-list bit
  uint32_t count;      // owner's use
  union {
    Page* next;             // free-list links (or the owner's)
    uintptr_t large_start;  // kPageLarge
  };
  union {
    Page* prev;
    void* owner;  // kmem slab; a tail's head
  };
};

struct PhysRange {
  uint64_t base;
  uint64_t size;
};

struct PageStats {
  uint64_t total_pages;       // allocatable frames (RAM minus reserved ranges
                              // minus descriptor_pages)
  uint64_t free_pages;        // in buddy lists + per-CPU caches
  uint64_t reserve_pages;     // target size of the KM_PUSHPAGE reserve
  uint64_t pcp_pages;         // of free_pages: held in per-CPU caches
  uint64_t descriptor_pages;  // frames used by the Page arrays themselves
  uint64_t free_blocks[kMaxOrder + 1];
  uint64_t allocs, frees, failures, pushpage_allocs;  // pushpage_allocs: took reserve pages
  uint64_t bad_frees;                                 // reported and ignored
};

// Sets the allocator up over banks minus reserved ranges (both in physical
// addresses, any order, may overlap). Returns false (and logs why) if no
// usable memory remains. Called once, before any other function.
bool page_init(const PhysRange* banks, unsigned nbanks, const PhysRange* reserved, unsigned nreserved);
// page_init has set the allocator up (an acquire: what it set up is seen).
// The host's first use brings it up where it is not (mm/host.h,
// init_page_allocator).
bool page_ready();

// 2^order contiguous frames, naturally aligned; returns the physical address
// or 0. KM_NOSLEEP fails at once when only the reserve is left; KM_PUSHPAGE
// may take from the reserve; KM_SLEEP waits (plat::wait_for_memory) until it
// succeeds.
[[nodiscard]] uint64_t page_alloc(unsigned order, int kmflag);
void page_free(uint64_t pa, unsigned order);

// The same through the direct map, for callers that want pointers.
[[nodiscard]] void* page_alloc_va(unsigned order, int kmflag);
void page_free_va(void* va, unsigned order);

// Allocation profiling (mm/alloc_tag.h): the tagged entry points, and the
// call site's switch between them and the functions, which the names below
// expand to (mm::page_alloc(...) and page_alloc(...) inside namespace mm
// both work; (page_alloc)(...) and &page_alloc are the functions, counted
// at their own tags).
[[nodiscard]] uint64_t page_alloc_tagged(unsigned order, int kmflag, const AllocTag* tag);
[[nodiscard]] void* page_alloc_va_tagged(unsigned order, int kmflag, const AllocTag* tag);
[[nodiscard]] __attribute__((always_inline, artificial)) inline uint64_t page_alloc_site(unsigned order, int kmflag,
                                                                                         const AllocTag* tag) {
  return plat::alloc_hooks_on() ? page_alloc_tagged(order, kmflag, tag) : (page_alloc)(order, kmflag);
}
[[nodiscard]] __attribute__((always_inline, artificial)) inline void* page_alloc_va_site(unsigned order, int kmflag,
                                                                                         const AllocTag* tag) {
  return plat::alloc_hooks_on() ? page_alloc_va_tagged(order, kmflag, tag) : (page_alloc_va)(order, kmflag);
}
#define page_alloc(order, kmflag) page_alloc_site((order), (kmflag), MM_ALLOC_TAG(kPage))
#define page_alloc_va(order, kmflag) page_alloc_va_site((order), (kmflag), MM_ALLOC_TAG(kPage))

Page* page_of_phys(uint64_t pa);  // nullptr if pa is not RAM we manage
Page* page_of(const void* va);    // direct-map or heap address; nullptr if neither
uint64_t page_to_phys(const Page* p);

// Returns every per-CPU cached page to the buddy lists (reaping, tests):
// runs page_drain_this_cpu on each CPU through plat::on_each_cpu, so only
// on the calling CPU when the kernel calls it with IRQs masked, and on the
// host (each thread drains its own).
void page_drain_cpu_caches();
// Returns the calling CPU's cached pages to the buddy lists. The kernel can
// call it on each CPU (a cross-call, or a CPU going idle); a host thread
// calls it before it exits, else its cache stays with its CPU slot.
void page_drain_this_cpu();
// KM_SLEEP allocations that find no memory call fn (kmem sets its reaper)
// before they wait; fn may free pages. Not called recursively.
void page_set_reclaim_hook(void (*fn)());
// Counters and free_pages include pages in every CPU's cache (a snapshot:
// exact when nothing allocates or frees at the same time).
void page_stats(PageStats& out);
// Walks every descriptor, free list and per-CPU cache checking the
// allocator's invariants; logs the first violation and returns false.
// O(frames); call it when nothing allocates or frees at the same time.
bool page_verify();
// Test-only: forgets everything page_init did (descriptors, caches,
// counters, hook), so a host test process can call page_init again.
void page_reset_for_tests();
// Bytes of RAM in the banks page_init manages (whole frames, overlaps
// merged): usable, reserved and descriptor frames.
uint64_t page_ram_bytes();
// The lowest and the highest-plus-one physical address of the banks.
void page_ram_range(uint64_t& lo, uint64_t& hi);
// Turns an allocated block of 2^order frames at pa into 2^order allocated
// single frames, each freed on its own with page_free(pa, 0) (a physical
// heap's runs of contiguous pages: mm/segkmem.cpp).
void page_split(uint64_t pa, unsigned order);
// pages contiguous free frames anywhere (not a buddy block: no alignment,
// any count), each then an allocated single frame, as after page_split;
// the physical heap's last resort when no block of the size is free. A
// first-fit scan of the descriptors, O(frames), under the allocator's
// lock. NOSLEEP semantics (the reserve as page_alloc's); 0 if no run.
[[nodiscard]] uint64_t page_alloc_run(size_t pages, int kmflag);

}  // namespace mm
