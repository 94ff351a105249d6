// segkmem: kernel heap pages (see segkmem.h).
//
// 1. The "heap" arena manages virtual addresses only; nothing in it is
//    backed until kmem_default imports a span.
// 2. kmem_default's import function takes virtual space from "heap" and
//    backs it page by page with frames from the page allocator, mapped with
//    the platform's page tables; its release function unmaps and frees the
//    frames. Each frame's descriptor is marked kPageVmem with the heap
//    address, so page_of() works on heap addresses.
// 3. Failure is a value: a NOSLEEP import that cannot get every page gives
//    back what it took and returns null.
// 4. Releases are batched: a span kmem_default gives back is queued, still
//    mapped and unused; when kBatch spans are queued (or on reap, or when an
//    import runs short) they are all unmapped, other CPUs' TLBs are synced
//    once, and only then are the pages freed and the addresses returned to
//    "heap". Where shootdowns are expensive (SBI remote fences on RISC-V)
//    this makes one out of many. The queued pages still count as heap.
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/segkmem.h>

#if !defined(MM_KERNEL)
#include <mm/host.h>
#endif

namespace mm {
namespace {
vmem_t* g_heap;
vmem_t* g_default;
uint64_t g_mapped_pages;

constexpr unsigned kBatch = 64;
struct Span {
  uintptr_t va;
  size_t size;
};
plat::Lock g_batch_lock;
Span g_batch[kBatch];
unsigned g_batched;

// Takes the queued spans out of the batch (g_batch_lock held) into out;
// returns how many. The caller flushes them once it has let go of the lock:
// a TLB shootdown waits for the other CPUs, and one spinning on
// g_batch_lock with interrupts masked could not answer it.
unsigned take_batch(Span* out) {
  unsigned n = g_batched;
  for (unsigned i = 0; i < n; i++) out[i] = g_batch[i];
  g_batched = 0;
  return n;
}

// Unmaps the spans, syncs TLBs once, frees the pages and returns the
// addresses to the heap arena.
void flush_spans(const Span* spans, unsigned n) {
  if (!n) return;
  Page* chain = nullptr;  // pages to free, linked through Page::next (ours while allocated)
  for (unsigned i = 0; i < n; i++) {
    for (size_t off = 0; off < spans[i].size; off += kPageBytes) {
      uint64_t pa = plat::heap_to_phys(spans[i].va + off);
      Page* p = pa ? page_of_phys(pa) : nullptr;
      if (!p) continue;
      p->next = chain;
      chain = p;
    }
    plat::unmap_heap_deferred(spans[i].va, spans[i].size);
  }
  plat::heap_tlb_sync();
  while (chain) {
    Page* p = chain;
    chain = p->next;
    p->flags &= static_cast<uint16_t>(~kPageVmem);
    p->owner = nullptr;
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
    plat::unmap_heap(va + off, kPageBytes);
    if (Page* p = page_of_phys(pa)) {
      p->flags &= static_cast<uint16_t>(~kPageVmem);
      p->owner = nullptr;
    }
    page_free(pa, 0);
    __atomic_fetch_sub(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
}

void* segkmem_import(vmem_t* src, size_t size, int vmflag) {
  void* va = vmem_alloc(src, size, vmflag);
  if (!va) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(va);
  for (size_t off = 0; off < size; off += kPageBytes) {
    uint64_t pa = page_alloc(0, vmflag & VM_KMFLAGS);
    if (!pa || !plat::map_heap(base + off, pa, kPageBytes)) {
      if (pa) page_free(pa, 0);
      release_pages(base, off);
      vmem_free(src, va, size);
      // Pages may be waiting in the release batch: free them and retry once.
      if (!segkmem_flush()) return nullptr;
      return segkmem_import(src, size, vmflag);
    }
    if (Page* p = page_of_phys(pa)) {
      p->flags |= kPageVmem;
      p->owner = va;
    }
    __atomic_fetch_add(&g_mapped_pages, 1, __ATOMIC_RELAXED);
  }
  return va;
}

void segkmem_release(vmem_t*, void* va, size_t size) {
  Span full[kBatch];
  unsigned n = 0;
  auto s = plat::irq_save();
  g_batch_lock.lock();
  if (g_batched == kBatch) n = take_batch(full);
  g_batch[g_batched++] = {reinterpret_cast<uintptr_t>(va), size};
  g_batch_lock.unlock();
  plat::irq_restore(s);
  flush_spans(full, n);
}
}  // namespace

void segkmem_init() {
  if (g_default) return;
#if !defined(MM_KERNEL)
  // Host: the page allocator runs over the host's "physical memory".
  host::init_memory();
  const host::HostMemory& m = host::memory();
  PhysRange bank{m.phys_base, m.phys_size};
  page_init(&bank, 1, nullptr, 0);
#endif
  uintptr_t base;
  size_t size;
  plat::heap_window(base, size);
  g_heap = vmem_create("heap", reinterpret_cast<void*>(base), size, kPageBytes, nullptr, nullptr, nullptr, 0,
                       VM_SLEEP);
  g_default = vmem_create("kmem_default", nullptr, 0, kPageBytes, segkmem_import, segkmem_release, g_heap, 0,
                          VM_SLEEP);
  if (!g_heap || !g_default) plat::fatal("segkmem: cannot create the heap arenas");
}

vmem_t* segkmem_heap_arena() { return g_heap; }
vmem_t* segkmem_default_arena() { return g_default; }

void* segkmem_alloc_large(size_t size, int kmflag) {
  size = (size + kPageBytes - 1) & ~(kPageBytes - 1);
  for (;;) {
    void* p = vmem_alloc(g_default, size, (kmflag & KM_VMFLAGS) | VM_NOSLEEP);
    if (p || (kmflag & KM_NOSLEEP)) return p;
    kmem_reap(false);
    plat::wait_for_memory();
  }
}

void segkmem_free_large(void* buf, size_t size, uintptr_t) {
  size = (size + kPageBytes - 1) & ~(kPageBytes - 1);
  vmem_free(g_default, buf, size);
}

bool segkmem_flush() {
  Span spans[kBatch];
  auto s = plat::irq_save();
  g_batch_lock.lock();
  unsigned n = take_batch(spans);
  g_batch_lock.unlock();
  plat::irq_restore(s);
  flush_spans(spans, n);
  return n != 0;
}

uint64_t segkmem_mapped_pages() { return __atomic_load_n(&g_mapped_pages, __ATOMIC_RELAXED); }

}  // namespace mm
