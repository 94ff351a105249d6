// SPDX-License-Identifier: Apache-2.0
// segkmem: kernel heap pages (see segkmem.h).
//
// 1. The "heap" arena manages virtual addresses only; nothing in it is
//    backed until kmem_default imports a span. Its size is the platform's
//    heap window, capped at four times RAM (kMaxHeapPerRam, but at least
//    kMinHeap): the heap can never map more pages than RAM has, and the cap
//    keeps the page index's directory small on 64-bit windows.
// 2. kmem_default's import function takes virtual space from "heap" and
//    backs it page by page with frames from the page allocator, mapped with
//    the platform's page tables; its release function unmaps and frees the
//    frames. Each frame's descriptor is marked kPageVmem.
// 3. Failure is a value: a NOSLEEP import that cannot get every page gives
//    back what it took and returns null.
// 4. Releases are batched: a span kmem_default gives back is queued, still
//    mapped and unused; when kBatch spans are queued (or on reap, or when an
//    import runs short) they are all unmapped, other CPUs' TLBs are synced
//    once, and only then are the pages freed and the addresses returned to
//    "heap". Where shootdowns are expensive (SBI remote fences on RISC-V)
//    this makes one out of many. The queued pages still count as heap.
// 5. The page index (heap_index.h). Heap address -> page descriptor in O(1)
//    without walking page tables, for kmem's free checks, kmem_whatis and
//    the leak scanner. A directory of one pointer per 2 MiB of heap (one or
//    a few pages, taken at init) points to leaves of 512 Page pointers, one
//    per heap page, allocated the first time a page in their 2 MiB is mapped
//    and kept (at most 1/512 of the heap ever mapped). An import writes the
//    entries of its pages before vmem hands the span out; a release clears
//    them before the frames go back to the page allocator. Leaves are
//    created under g_index_lock and published with a release store; an
//    entry is set with release too (the descriptor's fields before it), so
//    lock-free readers (heap_index.h) read through them in order. Beside
//    it, taken at init too, the owner ids: a byte per heap page
//    naming the off-slab cache whose slab holds it (heap_index.h).
// 6. Large kmem_alloc allocations (segkmem_alloc_large) mark their pages
//    kPageLarge with the allocation's start, and the first page's count with
//    its page count: segkmem_free_large refuses a pointer that is not the
//    start of a live large allocation, and a size that is not its size,
//    before anything is freed. Sizes the heap can never hold are refused
//    with a report, KM_SLEEP or not (KM_SLEEP waits for memory, not for the
//    impossible).
// 7. The physical heap (plat::kPhysicalHeap: a platform without an MMU).
//    Nothing can stitch scattered frames into one span, so an import takes
//    one run of contiguous frames: the smallest buddy block that holds it,
//    split into single frames (page_split) with the tail given back at
//    once. Its addresses are the frames' own: the "heap" arena covers the
//    RAM from its lowest to its highest address (page_ram_range), and the
//    import claims exactly the run's range in it (vmem_xalloc), which is
//    free there since the frames were. Everything else is the same: the
//    page index over that range, kPageVmem frames, the release batch
//    (whose unmapping and TLB sync the platform makes no-ops). A span can
//    fail for fragmentation where the mapped heap would not: a NOSLEEP
//    caller gets null, as for any shortage.
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/segkmem.h>
#include "heap_index.h"
#include "lock.h"

#if !defined(MM_KERNEL)
#include <mm/host.h>
#endif

namespace mm {

HeapIndex g_heap_index;  // written once by segkmem_init (inside kmem_init, before g_ready's release)
constinit void* const g_no_owner[1] = {nullptr};
namespace {
constexpr Page make_no_page() {
  Page p{};
  p.owner = const_cast<void**>(g_no_owner);
  return p;
}
}  // namespace
constinit Page g_no_page = make_no_page();
namespace {
constexpr EmptyLeaf make_empty_leaf() {
  EmptyLeaf l{};
  for (auto& e : l.e) e = &g_no_page;
  return l;
}
}  // namespace
constinit const EmptyLeaf g_empty_leaf = make_empty_leaf();

namespace {
vmem_t* g_heap;     // g_heap and g_default: written once, as g_heap_index
vmem_t* g_default;
uint64_t g_mapped_pages;  // relaxed: statistics only
uint64_t g_index_pages;   // directory, leaves and owner ids (relaxed: statistics only)

constexpr uint64_t kMinHeap = uint64_t{256} << 20;
constexpr uint64_t kMaxHeapPerRam = 4;

plat::Lock g_index_lock;  // creating leaves

constexpr unsigned kBatch = 64;
struct Span {
  uintptr_t va;
  size_t size;
};
plat::Lock g_batch_lock;  // g_batch and g_batched
Span g_batch[kBatch];
unsigned g_batched;

void* index_page_alloc(unsigned order) {
  void* p = page_alloc_va(order, KM_NOSLEEP | KM_PUSHPAGE);
  if (p) __atomic_fetch_add(&g_index_pages, uint64_t{1} << order, __ATOMIC_RELAXED);
  return p;
}

Page** empty_leaf() { return const_cast<Page**>(g_empty_leaf.e); }  // only ever read

// Makes sure the leaf covering va exists. False if no page was left for it.
bool index_prepare(uintptr_t va) {
  Page*** slot = &g_heap_index.dir[(va - g_heap_index.base) >> kIndexLeafShift];
  if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) != empty_leaf()) return true;  // pairs with the release below
  static_assert(kIndexLeafEntries * sizeof(Page*) <= kPageBytes);
  Guard<> g(g_index_lock);
  if (*slot != empty_leaf()) return true;  // plain: its only stores are made under this lock
  auto** leaf = static_cast<Page**>(index_page_alloc(0));
  if (!leaf) return false;
  for (unsigned i = 0; i < kIndexLeafEntries; i++) leaf[i] = &g_no_page;
  // Release: the filled leaf before the pointer to it (segkmem_page_of).
  __atomic_store_n(slot, leaf, __ATOMIC_RELEASE);
  return true;
}

// Sets (or clears, p null) the index entry of heap page va; its leaf exists
// (acquire: another CPU may have made it). Setting releases what
// segkmem_import wrote into *p (flags, owner = g_no_owner) to lock-free
// readers, which read *p through the entry; clearing publishes nothing
// (g_no_page is constant), so it is relaxed.
void index_set(uintptr_t va, Page* p) {
  uintptr_t off = va - g_heap_index.base;
  Page** leaf = __atomic_load_n(&g_heap_index.dir[off >> kIndexLeafShift], __ATOMIC_ACQUIRE);
  MM_ASSERT(leaf != empty_leaf());
  Page** e = &leaf[(off >> kPageShift) & (kIndexLeafEntries - 1)];
  if (p) __atomic_store_n(e, p, __ATOMIC_RELEASE);
  else __atomic_store_n(e, &g_no_page, __ATOMIC_RELAXED);
}

// Takes the queued spans out of the batch (g_batch_lock held) into out;
// returns how many. The caller flushes them once it has let go of the lock:
// a TLB shootdown waits for the other CPUs, and one spinning on
// g_batch_lock with interrupts masked could not answer it.
unsigned take_batch(Span* out) {
  unsigned n = g_batched;
  for (unsigned i = 0; i < n; i++) {
    out[i] = g_batch[i];
    g_batch[i] = Span{};  // no stale heap address in .bss for the leak scanner
  }
  g_batched = 0;
  return n;
}

// The entry goes first. A reader that loaded it before may still read *p
// while it changes here and in the page allocator (plain stores): only an
// address racing the release of its own memory can, and no answer is right
// for it.
void forget_page(uintptr_t va, Page* p) {
  index_set(va, nullptr);
  p->flags &= static_cast<uint16_t>(~(kPageVmem | kPageSlab | kPageLarge));
  p->owner = nullptr;
}

// Unmaps the spans, syncs TLBs once, frees the pages and returns the
// addresses to the heap arena.
void flush_spans(const Span* spans, unsigned n) {
  if (!n) return;
  Page* chain = nullptr;  // pages to free, linked through Page::next (ours while allocated)
  for (unsigned i = 0; i < n; i++) {
    for (size_t off = 0; off < spans[i].size; off += kPageBytes) {
      Page* p = segkmem_page_of(spans[i].va + off);
      if (!p) continue;
      forget_page(spans[i].va + off, p);
      p->next = chain;
      chain = p;
    }
    plat::unmap_heap_deferred(spans[i].va, spans[i].size);
  }
  plat::heap_tlb_sync();
  while (chain) {
    Page* p = chain;
    chain = p->next;
    p->next = nullptr;
    page_free(page_to_phys(p), 0);
    __atomic_fetch_sub(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
  for (unsigned i = 0; i < n; i++) vmem_free(g_heap, reinterpret_cast<void*>(spans[i].va), spans[i].size);
}

void release_pages(uintptr_t va, size_t size) {
  for (size_t off = 0; off < size; off += kPageBytes) {
    uint64_t pa = plat::heap_to_phys(va + off);
    if (!pa) continue;
    if (Page* p = page_of_phys(pa)) forget_page(va + off, p);
    plat::unmap_heap(va + off, kPageBytes);
    page_free(pa, 0);
    __atomic_fetch_sub(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
}

// Point 7: one run of contiguous frames, at its own addresses.
void* import_physical(vmem_t* src, size_t size, int vmflag) {
  size_t pages = size >> kPageShift;
  unsigned order = 0;
  while ((size_t{1} << order) < pages) order++;
  uint64_t pa = order <= kMaxOrder ? page_alloc(order, vmflag & VM_KMFLAGS) : 0;
  if (!pa && order > 0 && order <= kMaxOrder) {
    // Single free pages in the per-CPU caches may be what completes a run.
    page_drain_cpu_caches();
    pa = page_alloc(order, vmflag & VM_KMFLAGS);
  }
  if (!pa) {
    // No aligned block: any run of free frames that long.
    pa = page_alloc_run(pages, vmflag & VM_KMFLAGS);
    if (pa) order = 0xff;  // split already, nothing to give back
  }
  if (!pa) {
    // Pages may be waiting in the release batch: free them and retry once.
    if (!segkmem_flush()) return nullptr;
    return import_physical(src, size, vmflag);
  }
  if (order != 0xff) {
    page_split(pa, order);
    for (size_t i = pages; i < (size_t{1} << order); i++) page_free(pa + i * kPageBytes, 0);
  }
  auto base = static_cast<uintptr_t>(pa);
  void* va = vmem_xalloc(src, size, kPageBytes, 0, 0, reinterpret_cast<void*>(base),
                         reinterpret_cast<void*>(base + size), VM_NOSLEEP);
  bool indexed = va != nullptr;
  for (size_t off = 0; indexed && off < size; off += kPageBytes) indexed = index_prepare(base + off);
  if (!indexed) {
    if (va) vmem_xfree(src, va, size);
    for (size_t i = 0; i < pages; i++) page_free(pa + i * kPageBytes, 0);
    return nullptr;
  }
  MM_ASSERT(reinterpret_cast<uintptr_t>(va) == base);
  for (size_t off = 0; off < size; off += kPageBytes) {
    Page* p = page_of_phys(pa + off);
    MM_ASSERT(p);
    p->flags |= kPageVmem;
    p->owner = const_cast<void**>(g_no_owner);
    index_set(base + off, p);
    __atomic_fetch_add(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
  return va;
}

void* segkmem_import(vmem_t* src, size_t size, int vmflag) {
  if constexpr (plat::kPhysicalHeap) return import_physical(src, size, vmflag);
  void* va = vmem_alloc(src, size, vmflag);
  if (!va) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(va);
  for (size_t off = 0; off < size; off += kPageBytes) {
    uint64_t pa = page_alloc(0, vmflag & VM_KMFLAGS);
    if (!pa || !index_prepare(base + off) || !plat::map_heap(base + off, pa, kPageBytes)) {
      if (pa) page_free(pa, 0);
      release_pages(base, off);
      vmem_free(src, va, size);
      // Pages may be waiting in the release batch: free them and retry once.
      if (!segkmem_flush()) return nullptr;
      return segkmem_import(src, size, vmflag);
    }
    Page* p = page_of_phys(pa);
    MM_ASSERT(p);
    p->flags |= kPageVmem;
    p->owner = const_cast<void**>(g_no_owner);
    index_set(base + off, p);  // releases the two stores above
    __atomic_fetch_add(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
  return va;
}

void segkmem_release(vmem_t*, void* va, size_t size) {
  // kmem_default gives a span back once all of it is free: no page of it
  // may still be a slab's or a large allocation's.
  for (size_t off = 0; off < size; off += kPageBytes)
    if (Page* p = segkmem_page_of(reinterpret_cast<uintptr_t>(va) + off);
        p && (__builtin_expect(p->flags & (kPageSlab | kPageLarge), 0)))
      plat::fatal("segkmem: span %p (%zu bytes) given back with page %p still in use (flags 0x%x, owner %p)", va,
                  size, static_cast<char*>(va) + off, unsigned{p->flags}, p->owner);
  Span full[kBatch];
  unsigned n = 0;
  {
    Guard<> g(g_batch_lock);
    if (g_batched == kBatch) n = take_batch(full);
    g_batch[g_batched++] = {reinterpret_cast<uintptr_t>(va), size};
  }
  flush_spans(full, n);
}

uint64_t heap_size_for_ram(uint64_t ram, uint64_t window) {
  uint64_t want = kMinHeap;
  while (want < ram * kMaxHeapPerRam && want < window) want <<= 1;
  return want < window ? want : window;
}

// Relaxed: a legitimate free got buf from segkmem_alloc_large through
// synchronisation that orders that function's stores before this; only a
// pointer racing the allocation or free of its own pages can read a
// changing descriptor, and no order would make such a call right.
const char* large_free_problem(uintptr_t buf, size_t pages, uint64_t& detail) {
  Page* p = segkmem_page_of(buf);
  uint16_t flags = p ? __atomic_load_n(&p->flags, __ATOMIC_RELAXED) : 0;
  if (flags & kPageSlab) return "kmem_free with the wrong size (the buffer is a kmem_alloc size-class buffer)";
  if (!(flags & kPageLarge) || (buf & (kPageBytes - 1))) return "free of a pointer kmem never allocated, or freed twice";
  if (p->large_start != buf) return "free of a pointer into the middle of a large allocation";
  if (p->count != pages) {
    detail = uint64_t{p->count} * kPageBytes;
    return "kmem_free with the wrong size (the large allocation's size is in detail)";
  }
  return nullptr;
}

}  // namespace

void segkmem_init() {
  if (g_default) return;
#if !defined(MM_KERNEL)
  // Host: the page allocator runs over the host's "physical memory" (up
  // already if an arena was the program's first call).
  host::init_page_allocator();
#endif
  uintptr_t base;
  size_t window;
  uint64_t size;
  if constexpr (plat::kPhysicalHeap) {
    // Point 7: the heap's addresses are RAM's, whole index leaves of it.
    uint64_t lo, hi;
    page_ram_range(lo, hi);
    constexpr uint64_t kLeaf = uint64_t{1} << kIndexLeafShift;
    lo &= ~(kLeaf - 1);
    hi = (hi + kLeaf - 1) & ~(kLeaf - 1);
    base = static_cast<uintptr_t>(lo);
    size = hi - lo;
  } else {
    plat::heap_window(base, window);
    size = heap_size_for_ram(page_ram_bytes(), window);
  }
  size_t dir_bytes = static_cast<size_t>(size >> kIndexLeafShift) * sizeof(Page**);
  // The owner ids (heap_index.h): a byte per page. In the directory's
  // page when both fit in one (a small heap: a board with little RAM must
  // not give a page of it for a kilobyte), else in a buddy block of their
  // own of at most kMaxOrder, a smaller one if that much is not free,
  // covering less of the heap (the pages past it take the index's check).
  size_t id_bytes = static_cast<size_t>(size >> kPageShift);
  bool shared = dir_bytes + id_bytes <= kPageBytes;
  unsigned order = 0;
  while ((kPageBytes << order) < dir_bytes) order++;
  auto* dir = static_cast<Page***>(index_page_alloc(order));
  if (!dir) plat::fatal("segkmem: no %zu bytes for the heap page index", dir_bytes);
  for (size_t i = 0; i < dir_bytes / sizeof(Page**); i++) dir[i] = empty_leaf();
  uint8_t* ids = nullptr;
  if (shared) {
    ids = reinterpret_cast<uint8_t*>(dir) + dir_bytes;
  } else {
    unsigned id_order = 0;
    while ((kPageBytes << id_order) < id_bytes && id_order < kMaxOrder) id_order++;
    for (;; id_order--) {
      ids = static_cast<uint8_t*>(index_page_alloc(id_order));
      if (ids || id_order == 0) break;
    }
    if (id_bytes > (kPageBytes << id_order)) id_bytes = kPageBytes << id_order;
    if (!ids) id_bytes = 0;
  }
  if (ids) __builtin_memset(ids, 0, id_bytes);
  g_heap_index = HeapIndex{base, static_cast<uintptr_t>(id_bytes) << kPageShift, ids,
                           static_cast<uintptr_t>(size), dir};
  // The window's first page is never handed out: its address is the
  // heap's base, a value the allocators keep in registers and frames all
  // the time, and an object there would look referenced to kmemleak's
  // stack scan for as long as one stale copy of it lies about. (Address
  // space only: no memory is mapped for it.)
  // (The physical heap's first page is RAM's: an import may claim it.)
  uintptr_t skip = plat::kPhysicalHeap ? 0 : kPageBytes;
  g_heap = vmem_create("heap", reinterpret_cast<void*>(base + skip), static_cast<size_t>(size) - skip,
                       kPageBytes, nullptr, nullptr, nullptr, 0, VM_SLEEP);
  g_default = vmem_create("kmem_default", nullptr, 0, kPageBytes, segkmem_import, segkmem_release, g_heap, 0,
                          VM_SLEEP);
  if (!g_heap || !g_default) plat::fatal("segkmem: cannot create the heap arenas");
}

vmem_t* segkmem_heap_arena() { return g_heap; }
vmem_t* segkmem_default_arena() { return g_default; }
uint64_t segkmem_heap_bytes() { return g_heap_index.size; }

void* segkmem_alloc_large(size_t size, int kmflag, uintptr_t caller) {
  if (size == 0 || size > g_heap_index.size) {
    report_error(MemError{"kmem_alloc of a size the heap can never hold", "kmem_alloc", 0, caller, size});
    return nullptr;
  }
  size = (size + kPageBytes - 1) & ~(kPageBytes - 1);
  for (;;) {
    void* p = vmem_alloc(g_default, size, (kmflag & KM_VMFLAGS) | VM_NOSLEEP);
    if (p) {
      auto start = reinterpret_cast<uintptr_t>(p);
      for (uintptr_t va = start; va < start + size; va += kPageBytes) {
        Page* pg = segkmem_page_of(va);
        MM_ASSERT(pg && (pg->flags & kPageVmem) && !(pg->flags & (kPageSlab | kPageLarge)));
        pg->large_start = start;
        pg->count = va == start ? static_cast<uint32_t>(size / kPageBytes) : 0;
        // Release: large_start and count before the flag, for lock-free
        // readers that acquire it (segkmem_large_span, kmem_whatis).
        __atomic_store_n(&pg->flags, static_cast<uint16_t>(pg->flags | kPageLarge), __ATOMIC_RELEASE);
      }
      return p;
    }
    if (kmflag & KM_NOSLEEP) return nullptr;
    kmem_reap(false);
    plat::wait_for_memory();
  }
}

void segkmem_free_large(void* buf, size_t size, uintptr_t caller) {
  auto start = reinterpret_cast<uintptr_t>(buf);
  if (size > g_heap_index.size) {
    report_error(MemError{"kmem_free with the wrong size (larger than the heap)", "kmem_alloc", start, caller, size});
    return;
  }
  size = (size + kPageBytes - 1) & ~(kPageBytes - 1);
  uint64_t detail = size;
  if (const char* problem = large_free_problem(start, size / kPageBytes, detail)) {
    report_error(MemError{problem, "kmem_alloc", start, caller, detail});
    return;
  }
  // Clearing publishes nothing: relaxed. A lock-free reader that acquired
  // the flag before may read the zeroes (segkmem_large_span then finds no
  // head): the state after the free, which is as right as the one before.
  for (uintptr_t va = start; va < start + size; va += kPageBytes) {
    Page* pg = segkmem_page_of(va);
    __atomic_store_n(&pg->flags, static_cast<uint16_t>(pg->flags & ~kPageLarge), __ATOMIC_RELAXED);
    __atomic_store_n(&pg->large_start, uintptr_t{0}, __ATOMIC_RELAXED);
    __atomic_store_n(&pg->count, uint32_t{0}, __ATOMIC_RELAXED);
  }
  vmem_free(g_default, buf, size);
}

// Lock-free: the flag's acquire pairs with segkmem_alloc_large's release.
bool segkmem_large_span(uintptr_t addr, uintptr_t& start, size_t& size) {
  Page* p = segkmem_page_of(addr);
  if (!p || !(__atomic_load_n(&p->flags, __ATOMIC_ACQUIRE) & kPageLarge)) return false;
  start = __atomic_load_n(&p->large_start, __ATOMIC_RELAXED);
  Page* head = segkmem_page_of(start);
  size = head ? size_t{__atomic_load_n(&head->count, __ATOMIC_RELAXED)} * kPageBytes : 0;
  return head != nullptr;
}

bool segkmem_large_leak_words(uintptr_t start, LargeLeakWords& out) {
  Page* head = segkmem_page_of(start);
  if (!head || !(__atomic_load_n(&head->flags, __ATOMIC_ACQUIRE) & kPageLarge) || head->large_start != start ||
      head->count < 1 + LargeLeakWords::kWords)
    return false;
  for (unsigned i = 0; i < LargeLeakWords::kWords; i++) {
    Page* p = segkmem_page_of(start + (i + 1) * kPageBytes);
    if (!p) return false;
    out.w[i] = &p->count;
  }
  return true;
}

void segkmem_large_set_untracked(void* start) {
  LargeLeakWords w;
  if (segkmem_large_leak_words(reinterpret_cast<uintptr_t>(start), w)) *w.w[LargeLeakWords::kFlagsWord] |= kLargeUntracked;
}

void segkmem_for_each_large(void (*fn)(uintptr_t start, size_t size, void* arg), void* arg) {
  size_t leaves = static_cast<size_t>(g_heap_index.size >> kIndexLeafShift);
  for (size_t l = 0; l < leaves; l++) {
    Page** leaf = __atomic_load_n(&g_heap_index.dir[l], __ATOMIC_ACQUIRE);
    if (leaf == empty_leaf()) continue;
    for (unsigned i = 0; i < kIndexLeafEntries; i++) {
      Page* p = __atomic_load_n(&leaf[i], __ATOMIC_RELAXED);
      if (p == &g_no_page || !(__atomic_load_n(&p->flags, __ATOMIC_ACQUIRE) & kPageLarge)) continue;
      uintptr_t va = g_heap_index.base + ((l << kIndexLeafShift) | (uintptr_t{i} << kPageShift));
      if (p->large_start == va) fn(va, size_t{p->count} * kPageBytes, arg);
    }
  }
}

bool segkmem_flush() {
  Span spans[kBatch];
  unsigned n;
  {
    Guard<> g(g_batch_lock);
    n = take_batch(spans);
  }
  flush_spans(spans, n);
  return n != 0;
}

uint64_t segkmem_mapped_pages() { return __atomic_load_n(&g_mapped_pages, __ATOMIC_RELAXED); }
uint64_t segkmem_index_pages() { return __atomic_load_n(&g_index_pages, __ATOMIC_RELAXED); }

}  // namespace mm
