// SPDX-License-Identifier: Apache-2.0
// kmem_whatis: any address to its owner (see mm/whatis.h).
//
// 1. Heap addresses: segkmem's page index gives the page descriptor in O(1)
//    (heap_index.h). kPageSlab: owner is the Slab, which names the cache;
//    the buffer index is (addr - base) / chunk. kPageLarge: large_start and
//    the first page's count give the allocation. Otherwise a heap page of
//    no cache (a span of kmem_default allocated directly through vmem).
// 2. A buffer's state: the slab's free bitmap says "free in the slab
//    layer"; a buffer the slab layer counts out may still be free in a
//    magazine. kmem.cpp ("Allocated or free?") explains why no per-buffer
//    bit tracks that: here the other CPUs are stopped (plat::stop_others)
//    and every CPU's loaded and previous magazine and the depot's full
//    magazines of that one cache are searched: O(CPUs x magazine size +
//    depot rounds), a pause of the other CPUs for the search only.
// 3. Other addresses: regions the platform names (kernel image sections,
//    CPU stacks, boot page tables), then the page descriptor of any RAM
//    address: an allocated page_alloc block (head, or a tail naming its
//    head), a free block (found by looking at the aligned heads of each
//    order below the frame), a page in a per-CPU page cache, a reserved
//    frame.
// 4. No lock is held while descriptors and slab headers are read: the
//    releases that published them (heap_index.h, mark_slab_pages,
//    segkmem_alloc_large) order what is read; an address whose memory is
//    being freed meanwhile gets the state before or after.
#include <mm/whatis.h>
#include <mm/segkmem.h>
#include "heap_index.h"
#include "kmem_cache.h"

namespace mm {
namespace {

struct MagazineSearch {
  kmem_cache_t* cp;
  void* buf;
  BufferState state;
  unsigned cpu;
  bool depot_locked;  // by the caller, before the stop
};

MM_RACY_STATS_READER bool magazine_holds(const Magazine* m, int32_t rounds, const void* buf) {
  if (!m) return false;
  for (int32_t r = 1; r <= rounds; r++)
    if (m->slot[r] == buf) return true;
  return false;
}

// Runs with every other CPU stopped. Kernel: none is inside its masked
// fast path and none holds the depot lock (both are entered with interrupts
// masked, and a core stops only with them enabled), so the lock is taken
// here; it could not be taken before the stop, since a core spinning on it
// with interrupts masked would never stop. Host: a thread stops anywhere,
// holding the depot lock or halfway through a magazine push or pop, so the
// caller takes the lock before the stop (a thread spinning on it still
// takes the stop signal), and a buffer being moved at that instant may be
// seen in neither place (reported allocated) or, popped but not yet
// returned, still in its magazine. The slots are read plainly:
// plat::stop_others orders each stopped CPU's stores before fn.
MM_RACY_STATS_READER void search_magazines(void* arg) {
  auto* s = static_cast<MagazineSearch*>(arg);
  kmem_cache_t* cp = s->cp;
  for (unsigned i = 0; i < plat::kMaxCpus; i++) {
    const CpuCache& cc = cp->cpu[i];
    if (magazine_holds(cc.racy_loaded(), cc.racy_rounds(), s->buf) ||
        magazine_holds(MM_RACY_READ(cc.prev), MM_RACY_READ(cc.prounds), s->buf)) {
      s->state = BufferState::kFreeInMagazine;
      s->cpu = i;
      return;
    }
  }
  auto search_depot = [s, cp] {
    for (const Magazine* m = cp->full_mags.head; m; m = m->next)
      if (magazine_holds(m, static_cast<int32_t>(m->cap), s->buf)) {
        s->state = BufferState::kFreeInDepot;
        return;
      }
  };
  if (s->depot_locked) return search_depot();
  Guard<> g(cp->depot_lock);
  search_depot();
}

void search_magazines_of(MagazineSearch& s) {
  if (!s.depot_locked) return plat::stop_others(search_magazines, &s);
  Guard<> g(s.cp->depot_lock);
  plat::stop_others(search_magazines, &s);
}

// sp's header and its cache's fields are read without a lock: ordered by
// the acquire of the page's kPageSlab (mark_slab_pages), the cache's by
// its publication before its first slab.
bool whatis_slab(uintptr_t addr, Slab* sp, WhatIs& w) {
  kmem_cache_t* cp = sp->cache;
  w.cache = cp;
  w.name = cp->name;
  w.slab = reinterpret_cast<uintptr_t>(sp);
  w.count = sp->chunks;
  uintptr_t end = sp->base + uintptr_t{sp->chunks} * cp->chunk;
  if (addr < sp->base || addr >= end) {
    w.kind = WhatKind::kSlabOther;
    w.start = sp->mem;
    w.size = cp->slab_size;
    return true;
  }
  w.kind = WhatKind::kBuffer;
  w.index = static_cast<uint32_t>(div_chunk(cp, addr - sp->base));
  w.start = sp->base + uintptr_t{w.index} * cp->chunk;
  w.size = cp->bufsize;
  bool free_in_slab;
  {
    Guard<> g(cp->slab_lock);
    free_in_slab = slab_buffer_free(sp, w.index);
  }
  if (free_in_slab) {
    w.state = BufferState::kFreeInSlab;
    return true;
  }
  MagazineSearch s{cp, reinterpret_cast<void*>(w.start), BufferState::kAllocated, 0,
                   plat::stopped_cpus_may_hold_locks()};
  if (!(cp->flags & KMC_NOMAGAZINE)) search_magazines_of(s);
  w.state = s.state;
  w.cpu = s.cpu;
  return true;
}

// The flag's acquire pairs with the release that set it (mark_slab_pages,
// segkmem_alloc_large): the fields it guards were written before.
bool whatis_heap(uintptr_t addr, Page* p, WhatIs& w) {
  uint16_t flags = __atomic_load_n(&p->flags, __ATOMIC_ACQUIRE);
  if (flags & kPageSlab) {
    void* owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
    // g_no_owner (or null): the slab was destroyed after the flag was read.
    if (owner && owner != g_no_owner) return whatis_slab(addr, static_cast<Slab*>(owner), w);
  }
  uintptr_t start;
  size_t size;
  if ((flags & kPageLarge) && segkmem_large_span(addr, start, size)) {
    w.kind = WhatKind::kLargeAlloc;
    w.name = "kmem_alloc";
    w.start = start;
    w.size = size;
    return true;
  }
  w.kind = WhatKind::kHeapPage;
  w.name = "kmem_default";
  w.start = addr & ~(uintptr_t{kPageBytes} - 1);
  w.size = kPageBytes;
  return true;
}

// A snapshot of a descriptor other CPUs may be changing (their stores are
// plain, lock-free on the page allocator's fast paths): each word is read
// whole, and the answer is the frame's state at some moment near the call.
bool whatis_frame(uintptr_t addr, WhatIs& w) {
  uint64_t pa = plat::virt_to_phys(reinterpret_cast<const void*>(addr));
  Page* p = page_of_phys(pa);
  if (!p) return false;
  uint16_t flags = __atomic_load_n(&p->flags, __ATOMIC_RELAXED);
  uint64_t frame = pa & ~uint64_t{kPageBytes - 1};
  if (flags & kPageReserved) {
    w.kind = WhatKind::kReservedPage;
    w.name = "reserved";
    w.start = reinterpret_cast<uintptr_t>(plat::phys_to_virt(frame));
    w.size = kPageBytes;
    return true;
  }
  if (flags & (kPageHead | kPageTail)) {
    Page* head = (flags & kPageTail) ? static_cast<Page*>(p->owner) : p;
    w.kind = WhatKind::kPageBlock;
    w.name = "page_alloc";
    w.order = head->order;
    w.start = reinterpret_cast<uintptr_t>(plat::phys_to_virt(page_to_phys(head)));
    w.size = kPageBytes << head->order;
    return true;
  }
  w.kind = WhatKind::kFreePage;
  w.name = (flags & kPagePcp) ? "a per-CPU page cache" : "the buddy lists";
  w.start = reinterpret_cast<uintptr_t>(plat::phys_to_virt(frame));
  w.size = kPageBytes;
  if (flags & kPagePcp) return true;
  // A free tail: its block's head is the aligned frame below of some order.
  uint64_t pfn = pa >> kPageShift;
  for (unsigned o = 0; o <= kMaxOrder; o++) {
    uint64_t hpfn = pfn & ~((uint64_t{1} << o) - 1);
    Page* h = page_of_phys(hpfn << kPageShift);
    if (h && (__atomic_load_n(&h->flags, __ATOMIC_RELAXED) & kPageFree) && h->order >= o) {
      w.order = h->order;
      w.start = reinterpret_cast<uintptr_t>(plat::phys_to_virt(hpfn << kPageShift));
      w.size = kPageBytes << h->order;
      break;
    }
  }
  return true;
}

// A small formatter: mm/ has no printf of its own.
struct Line {
  char* buf;
  size_t size, len = 0;
  void ch(char c) {
    if (len + 1 < size) buf[len] = c;
    len++;
  }
  Line& s(const char* t) {
    while (*t) ch(*t++);
    return *this;
  }
  Line& hex(uintptr_t v) {
    s("0x");
    char d[2 * sizeof v];
    unsigned n = 0;
    do {
      d[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    while (n) ch(d[--n]);
    return *this;
  }
  Line& dec(uint64_t v) {
    char d[20];
    unsigned n = 0;
    do {
      d[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    while (n) ch(d[--n]);
    return *this;
  }
  size_t done() {
    if (size) buf[len < size ? len : size - 1] = 0;
    return len < size ? len : size ? size - 1 : 0;
  }
};

}  // namespace

bool kmem_whatis(const void* ptr, WhatIs& w) {
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  w = WhatIs{};
  w.addr = addr;
  if (Page* p = segkmem_page_of(addr)) return whatis_heap(addr, p, w);
  const char* name;
  uintptr_t start;
  size_t size;
  unsigned cpu;
  if (plat::describe_region(addr, name, start, size, cpu)) {
    w.kind = WhatKind::kRegion;
    w.name = name;
    w.start = start;
    w.size = size;
    w.cpu = cpu;
    return true;
  }
  return whatis_frame(addr, w);
}

size_t kmem_whatis_format(const WhatIs& w, char* buf, size_t size) {
  Line l{buf, size};
  l.hex(w.addr);
  auto at = [&] { l.s(" is ").hex(w.start).s("+").dec(w.addr - w.start); };
  switch (w.kind) {
    case WhatKind::kBuffer:
      at();
      switch (w.state) {
        case BufferState::kAllocated: l.s(", allocated from "); break;
        case BufferState::kFreeInSlab: l.s(", free in the slab layer of "); break;
        case BufferState::kFreeInMagazine: l.s(", free in cpu ").dec(w.cpu).s("'s magazine of "); break;
        case BufferState::kFreeInDepot: l.s(", free in the depot of "); break;
      }
      l.s(w.name).s(" (slab ").hex(w.slab).s(", buffer ").dec(w.index).s(" of ").dec(w.count).s(")");
      break;
    case WhatKind::kSlabOther:
      l.s(" is in a slab of ").s(w.name).s(" (slab ").hex(w.slab).s(", ").hex(w.start).s("+").dec(w.addr - w.start);
      l.s(", in no buffer: slab header or slack)");
      break;
    case WhatKind::kLargeAlloc:
      at();
      l.s(", allocated by kmem_alloc (large, ").dec(w.size).s(" bytes)");
      break;
    case WhatKind::kHeapPage:
      at();
      l.s(", a heap page of kmem_default in no cache");
      break;
    case WhatKind::kPageBlock:
      at();
      l.s(", an allocated page_alloc block of order ").dec(w.order).s(" (").dec(w.size / kPageBytes).s(" pages)");
      break;
    case WhatKind::kFreePage:
      at();
      l.s(", free, in ").s(w.name);
      if (w.size > kPageBytes) l.s(" (a block of order ").dec(w.order).s(")");
      break;
    case WhatKind::kReservedPage:
      at();
      l.s(", a reserved page frame");
      break;
    case WhatKind::kRegion:
      at();
      l.s(", in ").s(w.name);
      break;
    case WhatKind::kUnknown: l.s(" is not memory the kernel knows"); break;
  }
  return l.done();
}

}  // namespace mm
