// SPDX-License-Identifier: Apache-2.0
// Memory subsystem tests on the real kernel: every core, real page tables,
// real exhaustion of the board's RAM.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/kmemtrace_control.h>
#include <kernel/ktest.h>
#include <kernel/smp.h>
#include <kernel/string.h>
#include <mm/failslab.h>
#include <mm/hooks.h>
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/kmemleak.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include <mm/whatis.h>
#include <trace/kmemtrace.h>
#include <initializer_list>
#include "../../kernel/mm/accounting.h"
#include "reserved_count.h"

namespace {

// Pages the kernel keeps once it has used them: page tables for the heap
// window and vmem boundary tags. A "back to the boot value" check counts them.
uint64_t kept_pages() {
  return mm_boot::page_table_pages() + mm::vmem_metadata_pages() + mm::kmem_metadata_pages();
}

void drain_pcp(void*) { mm::page_drain_this_cpu(); }

// Frees every cached object and page everywhere.
void reap_everything() {
  mm::kmem_reap(true);
  smp::call_on_all(drain_pcp, nullptr);
}

uint64_t free_pages() {
  mm::PageStats s;
  mm::page_stats(s);
  return s.free_pages;
}

// A test's object count: n, or as many of each bytes as a quarter of the
// free memory holds where that is fewer (a board with 256 KiB of RAM), at
// least min.
unsigned fit(unsigned n, size_t each, unsigned min = 16) {
  uint64_t room = free_pages() * mm::kPageBytes / 4 / each;
  unsigned got = room < n ? static_cast<unsigned>(room) : n;
  return got < min ? min : got;
}

// kmem.debug= without cache names: every cache is debugged, so none has
// magazines (mm/kmem_debug.h).
bool debug_everywhere() {
  mm::KmemDebugConfig c;
  mm::kmem_debug_config(c);
  return c.flags && !c.nnames;
}

// Captures allocator error reports during a test.
struct ErrorCapture {
  static inline unsigned count;
  static inline mm::MemError last{nullptr, nullptr, 0, 0, 0, nullptr};  // constant: no static constructor
  static void hook(const mm::MemError& e) {
    count++;
    last = e;
  }
  mm::MemErrorHook old;
  ErrorCapture() : old(mm::set_error_hook(hook)) { count = 0; }
  ~ErrorCapture() { mm::set_error_hook(old); }
};

}  // namespace

// meminfo's books. "other" and "reserved" are differences (what no
// subsystem claims, and RAM less the page allocator's frames), so the sum
// is RAM by construction: each part is checked on its own instead.
KTEST(mm_accounting_adds_up) {
  KASSERT(mm_boot::ready());
  reap_everything();
  mm_boot::MemAccounting a;
  mm_boot::accounting(a);
  // Every allocated page is claimed by the subsystem that holds it: other
  // is 0, and the claims do not exceed the frames (which other, floored at
  // 0, would hide).
  KEXPECT_EQ(a.other, 0u);
  KEXPECT_EQ(a.free + a.heap + a.kmem_meta + a.vmem_tags + a.page_tables + a.reserved, a.ram);
  // reserved, counted from what boot found; free, as a walk of the page
  // descriptors finds it (page_verify: free lists and per-CPU caches agree
  // with the counts free comes from).
  KEXPECT_EQ(a.reserved, books::counted_reserved_bytes());
  KEXPECT(mm::page_verify());
  mm::PageStats ps;
  mm::page_stats(ps);
  KEXPECT(ps.descriptor_pages * mm::kPageBytes * 50 < a.ram);  // the descriptors: under 2% of RAM
  // The heap's figures, each within the heap.
  KEXPECT(a.heap_slabs <= a.heap);
  mm::KmemBooks k;
  mm::kmem_books(k);
  KEXPECT(k.slab_bytes_profiled + k.slab_bytes_internal <= a.heap_slabs);  // not the caches of other arenas
  KEXPECT(k.slab_bytes_profiled + k.slab_bytes_internal + k.large_bytes <= a.heap);
  KEXPECT(k.live_bytes_profiled <= k.slab_bytes_profiled);
  KEXPECT(k.large_internal_bytes <= k.large_bytes);
  // More than half of RAM was free after boot (on a 256 KiB board too); now
  // a quarter at least (kmemleak's and the stack depot's tables stay once
  // an earlier test turned kmemleak on).
  KEXPECT(mm_boot::boot_free_pages() * mm::kPageBytes > a.ram / 2);
  KEXPECT(a.free > a.ram / 4);
}

namespace {
struct CrossCore {
  static constexpr unsigned kPerCpu = 2000;
  void* objs[kMaxCpus][kPerCpu];
  unsigned alloc_cpu[kMaxCpus];
  uint64_t failures;
};

void cross_alloc(void* arg) {
  auto* c = static_cast<CrossCore*>(arg);
  unsigned me = cpu_id();
  for (unsigned i = 0; i < CrossCore::kPerCpu; i++) {
    size_t size = 16u << (i % 8);  // 16 .. 2048
    auto* p = static_cast<uint32_t*>(kmem_alloc(size, KM_SLEEP));
    p[0] = me;
    p[1] = i;
    c->objs[me][i] = p;
  }
  c->alloc_cpu[me] = me;
}

void cross_free(void* arg) {
  auto* c = static_cast<CrossCore*>(arg);
  unsigned me = cpu_id();
  unsigned victim = (me + 1) % g_cpu_count;  // free what the next core allocated
  for (unsigned i = 0; i < CrossCore::kPerCpu; i++) {
    auto* p = static_cast<uint32_t*>(c->objs[victim][i]);
    if (p[0] != victim || p[1] != i) __atomic_fetch_add(&c->failures, 1, __ATOMIC_RELAXED);
    kmem_free(p, 16u << (i % 8));
  }
}
}  // namespace

KTEST(kmem_alloc_on_every_core_free_on_another) {
  if (g_cpu_count < 2) KSKIP("one cpu: no other core to free on");
  reap_everything();
  uint64_t before = free_pages() + kept_pages();
  auto* cc = static_cast<CrossCore*>(kmem_zalloc(sizeof(CrossCore), KM_SLEEP));  // heap: no room in .bss on small boards
  KASSERT(cc);
  CrossCore& c = *cc;
  uint64_t errors = mm::error_count();
  for (int round = 0; round < 3; round++) {
    smp::call_on_all(cross_alloc, &c);
    // All pointers distinct per size class: spot-check a few neighbours.
    for (unsigned cpu = 0; cpu < g_cpu_count; cpu++)
      for (unsigned i = 8; i < CrossCore::kPerCpu; i++) KEXPECT(c.objs[cpu][i] != c.objs[cpu][i - 8]);
    smp::call_on_all(cross_free, &c);
  }
  KEXPECT_EQ(c.failures, 0u);
  KEXPECT_EQ(mm::error_count(), errors);
  kmem_free(cc, sizeof(CrossCore));
  reap_everything();
  KEXPECT_EQ(free_pages() + kept_pages(), before);
}

namespace {
kmem_cache_t* g_exhaust_cache;
}

KTEST(exhaustion_nosleep_fails_pushpage_succeeds_and_all_comes_back) {
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): this test counts NOSLEEP failures itself");
  reap_everything();
  uint64_t boot = mm_boot::boot_free_pages();
  g_exhaust_cache = kmem_cache_create("test_exhaust", 2048, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(g_exhaust_cache);
  // 1. Take every page the page allocator will give a NOSLEEP caller,
  //    chained through their first word (no other storage needed). On a
  //    32-bit board the heap window is smaller than RAM, so exhausting RAM
  //    through kmem alone would exhaust the window first.
  void* pages = nullptr;
  uint64_t npages = 0;
  for (;;) {
    void* p = mm::page_alloc_va(0, KM_NOSLEEP);
    if (!p) break;
    *static_cast<void**>(p) = pages;
    pages = p;
    npages++;
  }
  mm::PageStats s;
  mm::page_stats(s);
  KEXPECT(npages > 0);
  KEXPECT(s.free_pages <= s.reserve_pages + s.pcp_pages);
  // 2. Give 512 back (half of them where RAM is small), and let kmem run
  // out of them.
  const uint64_t given = npages / 2 < 512 ? npages / 2 : 512;
  for (uint64_t i = 0; i < given && pages; i++) {
    void* next = *static_cast<void**>(pages);
    mm::page_free_va(pages, 0);
    pages = next;
    npages--;
  }
  void* head = nullptr;
  uint64_t n = 0;
  for (;;) {
    void* p = kmem_cache_alloc(g_exhaust_cache, KM_NOSLEEP);
    if (!p) break;
    *static_cast<void**>(p) = head;
    head = p;
    n++;
  }
  KEXPECT(n >= given / 2);  // most of the pages given back became objects (two to a page)
  // 3. NOSLEEP keeps failing cleanly, from kmem_alloc too. A failed
  //    NOSLEEP allocation reaps, which can bring back pages other CPUs
  //    cached (with 8 of them, a few): what a retry gets is kept, and the
  //    retries must run dry at once.
  unsigned extra = 0;
  for (; extra < 64; extra++) {
    void* p = kmem_cache_alloc(g_exhaust_cache, KM_NOSLEEP);
    if (!p) break;
    *static_cast<void**>(p) = head;
    head = p;
  }
  KEXPECT(extra < 64);
  void* big = kmem_alloc(100000, KM_NOSLEEP);
  KEXPECT(big == nullptr);
  if (big) kmem_free(big, 100000);
  // 4. The reserve still serves KM_PUSHPAGE.
  void* pushed = kmem_cache_alloc(g_exhaust_cache, KM_NOSLEEP | KM_PUSHPAGE);
  KEXPECT(pushed != nullptr);
  uint64_t pushed_page = mm::page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE);
  KEXPECT(pushed_page != 0);
  // The system keeps working: the console and the other cores still run.
  kprintf("    exhausted: %llu pages held, then %llu objects of 2048 bytes; reserve %llu pages\n",
          (unsigned long long)npages, (unsigned long long)n, (unsigned long long)s.reserve_pages);
  KEXPECT(cpus_online() == g_cpu_count);
  if (pushed_page) mm::page_free(pushed_page, 0);
  if (pushed) kmem_cache_free(g_exhaust_cache, pushed);
  while (head) {
    void* next = *static_cast<void**>(head);
    kmem_cache_free(g_exhaust_cache, head);
    head = next;
  }
  while (pages) {
    void* next = *static_cast<void**>(pages);
    mm::page_free_va(pages, 0);
    pages = next;
  }
  KEXPECT(kmem_cache_destroy(g_exhaust_cache));
  g_exhaust_cache = nullptr;  // no stale pointer in .bss for kmemleak's later scans
  reap_everything();
  // Back to the boot value, once the pages the kernel keeps after use
  // (page tables, boundary tags, kmem bookkeeping) since boot are counted.
  KEXPECT_EQ(free_pages() + kept_pages() - mm_boot::kept_pages_at_boot(), boot);
}

namespace {
struct CtorState {
  bool fail;
  unsigned ctors, dtors;
};
int counting_ctor(void* buf, void* priv, int) {
  auto* st = static_cast<CtorState*>(priv);
  if (st->fail) return -1;
  st->ctors++;
  *static_cast<uint64_t*>(buf) = 0xC0FFEE;
  return 0;
}
void counting_dtor(void* buf, void* priv) {
  auto* st = static_cast<CtorState*>(priv);
  st->dtors++;
  *static_cast<uint64_t*>(buf) = 0;
}
}  // namespace

KTEST(constructor_failure_returns_null_and_leaks_nothing) {
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): this test counts constructor calls itself");
  static CtorState st;
  st = {};
  kmem_cache_t* cp = kmem_cache_create("test_ctor", 96, 0, counting_ctor, counting_dtor, nullptr, &st, nullptr, 0);
  KASSERT(cp);
  if (mm::kmem_cache_debug_flags(cp)) {
    kmem_cache_destroy(cp);
    KSKIP("debugged (kmem.debug=): constructed on every allocation, no magazine keeps it constructed");
  }
  void* ok = kmem_cache_alloc(cp, KM_NOSLEEP);
  KASSERT(ok);
  KEXPECT_EQ(*static_cast<uint64_t*>(ok), 0xC0FFEEu);
  kmem_cache_free(cp, ok);
  // Objects stay constructed between free and alloc: no new ctor call.
  unsigned ctors = st.ctors;
  void* again = kmem_cache_alloc(cp, KM_NOSLEEP);
  KEXPECT(again == ok);
  KEXPECT_EQ(st.ctors, ctors);
  KEXPECT_EQ(st.dtors, 0u);
  kmem_cache_free(cp, again);
  // Force the slab layer: reap, then fail the constructor.
  mm::kmem_reap(true);
  KEXPECT(st.dtors >= 1u);
  st.fail = true;
  KEXPECT(kmem_cache_alloc(cp, KM_NOSLEEP) == nullptr);
  mm::KmemCacheStats s;
  mm::kmem_cache_stats(cp, s);
  KEXPECT(s.ctor_fail >= 1u);
  KEXPECT_EQ(s.buf_inuse, 0u);
  st.fail = false;
  KEXPECT(kmem_cache_destroy(cp));
}

namespace {
// Every core creates and destroys caches as fast as it can: where several
// cache structures share a page (32-bit boards), one core taking a free
// slot of a page while another frees that page's last other slot must not
// free the page under the first (kmem.cpp, cache_alloc_struct).
constexpr unsigned kStructRounds = 1000;
struct StructChurn {
  uint32_t failures;  // atomic
};
void churn_caches(void* arg) {
  auto* c = static_cast<StructChurn*>(arg);
  for (unsigned i = 0; i < kStructRounds; i++) {
    kmem_cache_t* cp = kmem_cache_create("test_churn", 24 + 8 * (i % 8), 0, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, 0);
    if (!cp) {  // only an injected failure may refuse it
      if (!mm::failslab_armed()) __atomic_fetch_add(&c->failures, 1, __ATOMIC_RELAXED);
      continue;
    }
    void* p = kmem_cache_alloc(cp, KM_SLEEP);
    if (p) kmem_cache_free(cp, p);
    if (!kmem_cache_destroy(cp)) __atomic_fetch_add(&c->failures, 1, __ATOMIC_RELAXED);
  }
}
}  // namespace

KTEST(cache_structures_survive_creates_and_destroys_on_every_core) {
  if (g_cpu_count < 2) KSKIP("one cpu: nothing runs concurrently");
  reap_everything();
  uint64_t before = free_pages() + kept_pages();
  uint64_t errors = mm::error_count();
  mm::PageStats ps;
  mm::page_stats(ps);
  uint64_t bad_frees = ps.bad_frees;
  StructChurn c{};
  smp::call_on_all(churn_caches, &c);
  KEXPECT_EQ(c.failures, 0u);
  mm::page_stats(ps);
  KEXPECT_EQ(ps.bad_frees, bad_frees);  // no structure page freed twice
  KEXPECT_EQ(mm::error_count(), errors);
  reap_everything();
  KEXPECT_EQ(free_pages() + kept_pages(), before);
}

KTEST(cache_destroy_returns_every_page) {
  reap_everything();
  uint64_t before = free_pages() + kept_pages();
  kmem_cache_t* cp = kmem_cache_create("test_destroy", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  const unsigned n = fit(3000, 200 + sizeof(void*));
  auto** objs = static_cast<void**>(kmem_zalloc(n * sizeof(void*), KM_SLEEP));
  KASSERT(objs);
  for (unsigned i = 0; i < n; i++) objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
  mm::KmemCacheStats s;
  mm::kmem_cache_stats(cp, s);
  KEXPECT(s.slabs >= n / s.objs_per_slab);
  for (unsigned i = 0; i < n; i++) kmem_cache_free(cp, objs[i]);
  kmem_free(objs, n * sizeof(void*));
  KEXPECT(kmem_cache_destroy(cp));
  // Magazines and internal bookkeeping went back to kmem's own caches,
  // which give their pages up on reap.
  reap_everything();
  KEXPECT_EQ(free_pages() + kept_pages(), before);
}

// kmem_free of null is a no-op at every size, with no report: on-slab
// classes test it before the header's load, larger classes let the owner
// check refuse it quietly, sizes past the table test it on their branch.
// NOSLEEP: on a 256 KiB board the large sizes may find no run of frames.
KTEST(kmem_free_of_null_is_a_no_op_at_every_size) {
  ErrorCapture cap;
  const size_t sizes[] = {1, 8, 512, 513, 1024, 4096, 16384, 16385, 0};
  for (size_t size : sizes)
    if (void* p = size ? kmem_alloc(size, KM_NOSLEEP) : nullptr) kmem_free(p, size);  // loaded magazines
  for (size_t size : sizes) kmem_free(nullptr, size);
  KEXPECT_EQ(ErrorCapture::count, 0u);
  for (size_t size : sizes)
    if (void* p = size ? kmem_alloc(size, KM_NOSLEEP) : nullptr) kmem_free(p, size);
  KEXPECT_EQ(ErrorCapture::count, 0u);
}

KTEST(bad_frees_are_reported_and_refused) {
  // The double free is caught where the first free put the buffer: with a
  // magazine refused by an injected failure it is not where the test looks.
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): a magazine may have been refused");
  ErrorCapture cap;
  kmem_cache_t* a = kmem_cache_create("test_bad_a", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* b = kmem_cache_create("test_bad_b", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(a && b);
  void* x = kmem_cache_alloc(a, KM_SLEEP);
  // Free to the wrong cache.
  kmem_cache_free(b, x);
  KEXPECT_EQ(ErrorCapture::count, 1u);
  KEXPECT(strcmp(ErrorCapture::last.where, "test_bad_b") == 0);
  KEXPECT_EQ(ErrorCapture::last.address, reinterpret_cast<uintptr_t>(x));
  KEXPECT(ErrorCapture::last.caller != 0);
  // A pointer kmem never handed out: one into the kernel's code. Not a
  // stack address: the on-slab check reads the word where a slab header
  // would name its cache, and a stack page may hold the cache's pointer
  // in that very word (on mps2-an385 this test's did once .data grew by
  // 8 KiB, and the free went into a's magazine). For a pointer outside
  // the heap the check is that word's compare, no more; code holds no
  // heap address.
  kmem_cache_free(a, reinterpret_cast<void*>(&kmem_cache_create));
  KEXPECT_EQ(ErrorCapture::count, 2u);
  KEXPECT(strstr(ErrorCapture::last.kind, "never allocated") != nullptr);
  // Wrong size to kmem_free.
  void* y = kmem_alloc(100, KM_SLEEP);  // 112-byte cache
  kmem_free(y, 300);                    // 320-byte cache
  KEXPECT_EQ(ErrorCapture::count, 3u);
  KEXPECT(strstr(ErrorCapture::last.kind, "size") != nullptr);
  kmem_free(y, 100);
  // Double free: caught on the second free.
  kmem_cache_free(a, x);
  kmem_cache_free(a, x);
  KEXPECT_EQ(ErrorCapture::count, 4u);
  KEXPECT(strstr(ErrorCapture::last.kind, "double free") != nullptr);
  // Destroy with live objects: refused and reported with the count.
  void* live = kmem_cache_alloc(b, KM_SLEEP);
  KEXPECT(!kmem_cache_destroy(b));
  KEXPECT_EQ(ErrorCapture::count, 5u);
  KEXPECT_EQ(ErrorCapture::last.detail, 1u);
  kmem_cache_free(b, live);
  KEXPECT(kmem_cache_destroy(a));
  KEXPECT(kmem_cache_destroy(b));
  KEXPECT_EQ(ErrorCapture::count, 5u);
}

// Off-slab caches (kmem_alloc from 640 bytes, large buffers) check their
// frees through their pages' owner ids (each cache has its own), then the
// heap page index: refused on the free itself, so nothing bad reaches a
// magazine to be handed out again.
KTEST(off_slab_bad_frees_are_refused_on_the_free) {
  ErrorCapture cap;
  kmem_cache_t* a = kmem_cache_create("test_off_a", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* b = kmem_cache_create("test_off_b", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(a && b);
  mm::KmemCacheStats sa, sb;
  mm::kmem_cache_stats(a, sa);
  mm::kmem_cache_stats(b, sb);
  KEXPECT(sa.offslab && sb.offslab);
  KEXPECT(sa.owner_id != 0 && sb.owner_id != 0 && sa.owner_id != sb.owner_id);
  void* x = kmem_cache_alloc(a, KM_SLEEP);
  kmem_cache_free(b, x);  // wrong cache
  KEXPECT_EQ(ErrorCapture::count, 1u);
  KEXPECT(strstr(ErrorCapture::last.kind, "wrong cache") != nullptr);
  KEXPECT(strcmp(ErrorCapture::last.where, "test_off_b") == 0);
  KEXPECT(ErrorCapture::last.caller != 0);
  // Below 1 MiB of RAM only the powers of two have caches (kmem_alloc.cpp),
  // and the physical heap there has few long runs of free frames.
  const bool small_ram = mm::page_ram_bytes() < (uint64_t{1} << 20);
  void* y = kmem_alloc(6000, KM_SLEEP);  // kmem_alloc_6144 (8192)
  kmem_free(y, 3000);                    // kmem_alloc_3072 (4096)
  KEXPECT_EQ(ErrorCapture::count, 2u);
  KEXPECT(strstr(ErrorCapture::last.kind, "wrong size") != nullptr);
  KEXPECT_EQ(ErrorCapture::last.detail, small_ram ? 8192u : 6144u);
  uint64_t local[4];
  kmem_cache_free(a, &local[1]);  // not heap memory
  KEXPECT_EQ(ErrorCapture::count, 3u);
  const size_t big_size = small_ram ? 24 * 1024 : 64 * 1024, wrong = small_ram ? 20 * 1024 : 32 * 1024;
  void* big = kmem_alloc(big_size, KM_SLEEP);
  kmem_free(big, wrong);  // a large allocation with the wrong size
  KEXPECT_EQ(ErrorCapture::count, 4u);
  kmem_free(big, big_size);
  kmem_free(big, big_size);  // and freed twice
  KEXPECT_EQ(ErrorCapture::count, 5u);
  // b never took x: the next allocation from b is not x.
  void* z = kmem_cache_alloc(b, KM_SLEEP);
  KEXPECT(z != x);
  kmem_cache_free(b, z);
  kmem_cache_free(a, x);
  kmem_free(y, 6000);
  KEXPECT(kmem_cache_destroy(a));
  KEXPECT(kmem_cache_destroy(b));
  KEXPECT_EQ(ErrorCapture::count, 5u);
}

// A stale pointer into a destroyed on-slab cache, freed to the cache
// created next in the same structure (free structure slots are reused
// last-in first-out; a cache created right after the first keeps its
// structure's page from going back meanwhile): the slab's page went back
// to the arena with its header, whose cache word named the old cache, the
// new one's address. Reported and refused at every on-slab size (chunk <=
// page / 8), through the free of whichever copy the hooks pick, and what
// the new cache hands out next is a buffer of its own slab. The caches'
// arena imports heap pages and never gives them back until the test does
// (StaleArena): a page back in kmem_default could be unmapped by a flush
// of segkmem's release batch, and a free into an unmapped page faults
// before any check, as any wild pointer's.
namespace {
struct StaleArena {
  static constexpr unsigned kMax = 64;
  struct Span {
    void* base;
    size_t size;
  };
  static inline Span spans[kMax];
  static inline unsigned n;
  static void* import(vmem_t* src, size_t size, int flags) {
    if (n == kMax) return nullptr;
    void* p = vmem_alloc(src, size, flags);
    if (p) spans[n++] = {p, size};
    return p;
  }
  vmem_t* arena;
  StaleArena() {
    n = 0;
    arena = vmem_create("test_stale", nullptr, 0, mm::kPageBytes, import, nullptr, mm::segkmem_default_arena(), 0,
                        VM_SLEEP);
  }
  // The spans go back, and their addresses with them: a stale copy in
  // .bss would be a reference to whatever is there next, and kmemleak's
  // exact tests later in the suite would miss a leak that lands there.
  ~StaleArena() {
    if (arena && vmem_destroy(arena))
      for (unsigned i = 0; i < n; i++) vmem_free(mm::segkmem_default_arena(), spans[i].base, spans[i].size);
    memset(static_cast<void*>(spans), 0, sizeof spans);
    n = 0;
  }
};
}  // namespace

KTEST(stale_free_into_a_destroyed_on_slab_cache_is_refused) {
  ErrorCapture cap;
  StaleArena t;
  KASSERT(t.arena);
  const size_t sizes[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512};
  unsigned tested = 0;
  for (size_t size : sizes) {
    kmem_cache_t* a = kmem_cache_create("test_stale_a", size, 0, nullptr, nullptr, nullptr, nullptr, t.arena, 0);
    kmem_cache_t* keep = kmem_cache_create("test_stale_keep", size, 0, nullptr, nullptr, nullptr, nullptr, t.arena, 0);
    KASSERT(a && keep);
    void* p = kmem_cache_alloc(a, KM_SLEEP);
    KASSERT(p);
    mm::KmemCacheStats st;
    mm::kmem_cache_stats(a, st);
    kmem_cache_free(a, p);
    KASSERT(kmem_cache_destroy(a));
    if (st.offslab) {  // debugged (kmem.debug=all): the buffer's tag takes the chunk past page / 8
      KEXPECT(kmem_cache_destroy(keep));
      continue;
    }
    tested++;
    kmem_cache_t* b = kmem_cache_create("test_stale_b", size, 0, nullptr, nullptr, nullptr, nullptr, t.arena, 0);
    KASSERT(b == a);  // the structure just freed: the case under test
    mm::kmem_cache_stats(b, st);
    const uint64_t frees = st.frees;
    const unsigned before = ErrorCapture::count;
    kmem_cache_free(b, p);
    KEXPECT_EQ(ErrorCapture::count, before + 1);
    KEXPECT(ErrorCapture::last.kind && strstr(ErrorCapture::last.kind, "never allocated") != nullptr);
    KEXPECT_EQ(ErrorCapture::last.address, reinterpret_cast<uintptr_t>(p));
    mm::kmem_cache_stats(b, st);
    KEXPECT_EQ(st.frees, frees);
    void* q = kmem_cache_alloc(b, KM_SLEEP);
    mm::WhatIs w;
    KEXPECT(mm::kmem_whatis(q, w));
    KEXPECT(w.kind == mm::WhatKind::kBuffer && w.state == mm::BufferState::kAllocated);
    KEXPECT(w.name && strcmp(w.name, "test_stale_b") == 0);
    kmem_cache_free(b, q);
    KEXPECT(kmem_cache_destroy(b));
    KEXPECT(kmem_cache_destroy(keep));
    KEXPECT_EQ(ErrorCapture::count, before + 1);
  }
  KEXPECT(tested >= 8);  // debugged, the smaller sizes stay on-slab
}

// A stray free racing the release of the page it points into: forget_page
// (segkmem.cpp), the page cache and the buddy lists leave the descriptor
// with no owner while a reader that loaded the page's index entry just
// before reads it. The off-slab owner check's look-up through the index
// must report the free, not follow the null owner. The page is put in
// that state by hand and given back as it was.
KTEST(free_into_a_page_being_released_is_reported_not_followed) {
  void* span = vmem_alloc(mm::segkmem_default_arena(), mm::kPageBytes, VM_SLEEP);
  mm::Page* p = mm::page_of(span);
  KASSERT(p && !(p->flags & mm::kPageSlab));
  const uint16_t flags = p->flags;
  void* const owner = p->owner;
  // Below 1 MiB of RAM only the powers of two have caches: 2048 is off-slab everywhere.
  for (uint16_t now : {uint16_t{0}, uint16_t{mm::kPagePcp}}) {  // released; then in a page cache
    ErrorCapture cap;
    arch::IrqState s = arch::irq_save();  // nothing else on this core sees the page so
    p->flags = now;
    p->owner = nullptr;
    kmem_free(span, 2048);
    p->flags = flags;
    p->owner = owner;
    arch::irq_restore(s);
    KEXPECT_EQ(ErrorCapture::count, 1u);
    KEXPECT(ErrorCapture::last.kind && strstr(ErrorCapture::last.kind, "never allocated") != nullptr);
  }
  vmem_free(mm::segkmem_default_arena(), span, mm::kPageBytes);
}

namespace {
struct DtorProbe {
  std::atomic<unsigned> dtors{0}, masked{0};
};
DtorProbe g_dtor_probe;
void probe_dtor(void*, void*) {
  g_dtor_probe.dtors.fetch_add(1);
  if (!arch::irqs_enabled()) g_dtor_probe.masked.fetch_add(1);
}
kmem_cache_t* g_probe_cache;
void fill_probe_magazines(void*) {
  void* v[40];
  for (auto& p : v) p = kmem_cache_alloc(g_probe_cache, KM_SLEEP);
  for (auto* p : v) kmem_cache_free(g_probe_cache, p);
}
}  // namespace

// Destructors (and the slab, vmem and heap work behind them) run with
// interrupts as their caller had them, never inside the per-CPU masked
// region: on a full reap, where every core flushes its own magazines, and
// on destroy.
KTEST(destructors_run_with_interrupts_enabled) {
  g_dtor_probe.dtors = 0;
  g_dtor_probe.masked = 0;
  g_probe_cache = kmem_cache_create("test_dtor_irq", 256, 0, nullptr, probe_dtor, nullptr, nullptr, nullptr, 0);
  KASSERT(g_probe_cache);
  smp::call_on_all(fill_probe_magazines, nullptr);
  mm::kmem_reap(true);
  KEXPECT(g_dtor_probe.dtors.load() >= 40u);
  unsigned filled = g_dtor_probe.dtors.load();
  smp::call_on_all(fill_probe_magazines, nullptr);
  unsigned before = g_dtor_probe.dtors.load();
  // A debugged cache has no magazines: each free destructs at once, and
  // destroy finds nothing left to destruct. Else the frees filled the
  // magazines, which destroy empties.
  bool debugged = mm::kmem_cache_debug_flags(g_probe_cache) != 0;
  if (debugged) KEXPECT_EQ(before - filled, 40u * cpus_online());
  KEXPECT(kmem_cache_destroy(g_probe_cache));
  if (debugged) KEXPECT_EQ(g_dtor_probe.dtors.load(), before);
  else KEXPECT(g_dtor_probe.dtors.load() > before);
  KEXPECT_EQ(g_dtor_probe.masked.load(), 0u);
}

namespace {
mm::WhatIs whatis(const void* p) {
  mm::WhatIs w;
  mm::kmem_whatis(p, w);
  return w;
}
uintptr_t g_remote_local;
void remote_stack(void*) { g_remote_local = reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }
void* g_remote_freed;
void remote_alloc_free(void*) {
  g_remote_freed = kmem_alloc(200, KM_SLEEP);
  kmem_free(g_remote_freed, 200);
}
int g_data_var = 1;
int g_bss_var;
}  // namespace

// whatis answers for every kind of address: buffers in each state (another
// core's magazine included, which takes stopping the other cores), slab
// headers, large allocations, heap pages, page blocks, free and reserved
// frames, the kernel's sections and every core's stack.
KTEST(whatis_names_every_kind_of_address) {
  if (debug_everywhere()) KSKIP("every cache debugged (kmem.debug=): no magazine or depot to find buffers in");
  // A free goes to the slab layer when the magazine it needs was refused by
  // an injected failure: whether a buffer is in a magazine depends then on
  // how many NOSLEEP allocations came before (it failed with no change to
  // the allocators once the suite made a few more).
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): a magazine may have been refused");
  auto* p = static_cast<char*>(kmem_alloc(100, KM_SLEEP));
  mm::WhatIs w = whatis(p + 72);
  KEXPECT(w.kind == mm::WhatKind::kBuffer && w.state == mm::BufferState::kAllocated);
  KEXPECT_EQ(w.start, reinterpret_cast<uintptr_t>(p));
  // kmem_alloc_112, or kmem_alloc_128 where only the powers of two have
  // caches (less than 1 MiB of RAM: mm/kmem_alloc.cpp).
  const char* cls = mm::page_ram_bytes() < (uint64_t{1} << 20) ? "kmem_alloc_128" : "kmem_alloc_112";
  KEXPECT(strcmp(w.name, cls) == 0);
  char line[192], want[64];
  mm::kmem_whatis_format(w, line, sizeof line);
  kprintf("    %s\n", line);
  ksnprintf(want, sizeof want, "+72, allocated from %s (slab ", cls);
  KEXPECT(strstr(line, want) != nullptr);
  kmem_free(p, 100);
  w = whatis(p);
  KEXPECT(w.state == mm::BufferState::kFreeInMagazine && w.cpu == cpu_id());
  if (g_cpu_count > 1) {
    smp::call_on(1, remote_alloc_free, nullptr);
    w = whatis(g_remote_freed);
    KEXPECT(w.kind == mm::WhatKind::kBuffer && w.state == mm::BufferState::kFreeInMagazine);
    KEXPECT_EQ(w.cpu, 1u);
    g_remote_freed = nullptr;  // no stale pointers in .bss for the leak scanner
    smp::call_on(1, remote_stack, nullptr);
    w = whatis(reinterpret_cast<const void*>(g_remote_local - 8));
    KEXPECT(w.kind == mm::WhatKind::kRegion);
    KEXPECT_EQ(w.cpu, 1u);
  }
  // The depot, the slab layer and a slab header, in a cache of our own.
  kmem_cache_t* cp = kmem_cache_create("test_whatis", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  static void* v[700];
  unsigned n = static_cast<unsigned>(6 * st.magazine_size + 3);
  KASSERT(n <= 700);
  for (unsigned i = 0; i < n; i++) v[i] = kmem_cache_alloc(cp, KM_SLEEP);
  for (unsigned i = 0; i < n; i++) kmem_cache_free(cp, v[i]);
  w = whatis(v[0]);
  KEXPECT(w.state == mm::BufferState::kFreeInDepot);
  for (auto& p : v) p = nullptr;  // no stale pointers in .bss for the leak scanner
  mm::kmem_reap(true);
  auto* one = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
  w = whatis(one + 200);
  KEXPECT(w.kind == mm::WhatKind::kBuffer && w.state == mm::BufferState::kFreeInSlab);
  w = whatis(reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(one) | 4095)));
  KEXPECT(w.kind == mm::WhatKind::kSlabOther);
  kmem_cache_free(cp, one);
  KEXPECT(kmem_cache_destroy(cp));
  // A large kmem_alloc, a heap page of no cache.
  // (20000 bytes, 5 pages, where RAM is small: the heap is physical there
  // and 25 contiguous pages may not be free.)
  const size_t big_size = free_pages() >= 256 ? 100000 : 20000;
  auto* big = static_cast<char*>(kmem_alloc(big_size, KM_SLEEP));
  w = whatis(big + big_size - 1);
  KEXPECT(w.kind == mm::WhatKind::kLargeAlloc && w.start == reinterpret_cast<uintptr_t>(big));
  KEXPECT_EQ(w.size, (big_size + 4095) / 4096 * 4096);
  kmem_free(big, big_size);
  void* span = vmem_alloc(mm::segkmem_default_arena(), 8192, VM_SLEEP);
  w = whatis(static_cast<char*>(span) + 5000);
  KEXPECT(w.kind == mm::WhatKind::kHeapPage);
  vmem_free(mm::segkmem_default_arena(), span, 8192);
  // Page frames.
  auto* blk = static_cast<char*>(mm::page_alloc_va(2, KM_SLEEP));
  KASSERT(blk);
  w = whatis(blk + 3 * 4096);
  KEXPECT(w.kind == mm::WhatKind::kPageBlock && w.order == 2u && w.start == reinterpret_cast<uintptr_t>(blk));
  mm::page_free_va(blk, 2);
  w = whatis(blk + 3 * 4096);
  KEXPECT(w.kind == mm::WhatKind::kFreePage);
  w = whatis(mm::page_of(blk));  // the page descriptors live in reserved frames
  KEXPECT(w.kind == mm::WhatKind::kReservedPage);
  // The kernel's own regions.
  w = whatis(reinterpret_cast<const void*>(&whatis));
  KEXPECT(w.kind == mm::WhatKind::kRegion && strcmp(w.name, "kernel text") == 0);
  w = whatis(&g_data_var);
  KEXPECT(w.kind == mm::WhatKind::kRegion && strcmp(w.name, "kernel data") == 0);
  w = whatis(&g_bss_var);
  KEXPECT(w.kind == mm::WhatKind::kRegion && strcmp(w.name, "kernel bss") == 0);
  int local = 0;
  w = whatis(&local);
  KEXPECT(w.kind == mm::WhatKind::kRegion && w.cpu == cpu_id());
  // An address in no RAM bank: 0x10 where RAM does not start at 0, else
  // just past the last bank (on raspi3b page 0 is RAM: the firmware's
  // reserved spin table).
  bool low_is_ram = false;
  uint64_t top = 0;
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t end = g_boot.mem[i].base + g_boot.mem[i].size;
    if (g_boot.mem[i].base <= 0x10 && end > 0x10) low_is_ram = true;
    if (end > top) top = end;
  }
  // (Nor in the image: on armv7m the text is at 0, in code memory.)
  bool low_is_image = reinterpret_cast<uintptr_t>(__kernel_start) <= 0x10 && reinterpret_cast<uintptr_t>(__rodata_end) > 0x10;
  auto nowhere = static_cast<uintptr_t>(low_is_ram || low_is_image ? top + 0x10 : 0x10);
  KEXPECT(!mm::kmem_whatis(reinterpret_cast<const void*>(nowhere), w));
  mm::kmem_whatis_format(w, line, sizeof line);
  KEXPECT(strstr(line, "is not memory the kernel knows") != nullptr);
}

namespace {
// A client whose objects are tracked in a table; the move callback updates
// the table, as a real client would update its references.
struct MovClient {
  unsigned n;      // fit(4000, ...): fewer on a small board
  void** table;    // n entries, heap memory
  unsigned moved, refused;
  bool refuse_odd;
};
MovClient g_mov;

struct MovObj {
  uint32_t index;
  uint32_t check;
  uint8_t payload[48];
};

kmem_cbrc_t mov_cb(void* old, void* new_, size_t size, void*) {
  auto* o = static_cast<MovObj*>(old);
  if (o->index >= g_mov.n || g_mov.table[o->index] != old) return KMEM_CBRC_DONT_KNOW;
  if (g_mov.refuse_odd && (o->index & 1)) {
    g_mov.refused++;
    return KMEM_CBRC_LATER;
  }
  memcpy(new_, old, size);
  g_mov.table[o->index] = new_;
  g_mov.moved++;
  return KMEM_CBRC_YES;
}
}  // namespace

KTEST(move_callback_relocates_objects_and_frees_slabs) {
  kmem_cache_t* cp = kmem_cache_create("test_move", sizeof(MovObj), 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  kmem_cache_set_move(cp, mov_cb);
  memset(&g_mov, 0, sizeof g_mov);
  g_mov.n = fit(4000, sizeof(MovObj) + sizeof(void*), 100);
  g_mov.table = static_cast<void**>(kmem_zalloc(g_mov.n * sizeof(void*), KM_SLEEP));
  KASSERT(g_mov.table);
  for (unsigned i = 0; i < g_mov.n; i++) {
    auto* o = static_cast<MovObj*>(kmem_cache_alloc(cp, KM_SLEEP));
    o->index = i;
    o->check = i * 2654435761u;
    for (unsigned k = 0; k < sizeof o->payload; k++) o->payload[k] = static_cast<uint8_t>(i + k);
    g_mov.table[i] = o;
  }
  // Keep one object in ten: the cache becomes sparse.
  for (unsigned i = 0; i < g_mov.n; i++) {
    if (i % 10 == 0) continue;
    kmem_cache_free(cp, g_mov.table[i]);
    g_mov.table[i] = nullptr;
  }
  mm::kmem_reap(true);  // magazines back to the slabs, empty slabs freed
  mm::KmemCacheStats before;
  mm::kmem_cache_stats(cp, before);
  mm::kmem_move_pass();
  mm::kmem_reap(true);
  mm::KmemCacheStats after;
  mm::kmem_cache_stats(cp, after);
  KEXPECT(g_mov.moved > 0);
  KEXPECT(after.moves_yes == g_mov.moved);
  KEXPECT(after.slabs < before.slabs);
  // Every kept object is intact wherever it lives now.
  unsigned intact = 0;
  for (unsigned i = 0; i < g_mov.n; i += 10) {
    auto* o = static_cast<MovObj*>(g_mov.table[i]);
    bool ok = o->index == i && o->check == i * 2654435761u;
    for (unsigned k = 0; k < sizeof o->payload; k++) ok &= o->payload[k] == static_cast<uint8_t>(i + k);
    intact += ok;
  }
  KEXPECT_EQ(intact, (g_mov.n + 9) / 10);
  kprintf("    moved %u objects, slabs %llu -> %llu\n", g_mov.moved, (unsigned long long)before.slabs,
          (unsigned long long)after.slabs);
  for (unsigned i = 0; i < g_mov.n; i += 10) {
    kmem_cache_free(cp, g_mov.table[i]);
    g_mov.table[i] = nullptr;
  }
  kmem_free(g_mov.table, g_mov.n * sizeof(void*));
  g_mov.table = nullptr;  // no stale pointer in .bss for the leak scanner to find
  KEXPECT(kmem_cache_destroy(cp));
}

// kmemtrace's switch: with it off the allocators record nothing and every
// static-branch site holds its nop; on, one kmem_cache_alloc + free records
// exactly one alloc and one free event on this CPU; off again, nothing more.
namespace {
struct StaticSite {
  uintptr_t site, target, alt;
};
// The allocation hooks' sites, then the free hooks' (linker/kernel.ld.in).
extern "C" const StaticSite __static_branches_start[], __static_branches_free_start[], __static_branches_end[];

// Where the arch has no static branches (armv7m) the switch is the flag
// each key's sites would test (mm/platform_inline.h).
constexpr bool kStaticBranches =
#if defined(ARCH_HAS_STATIC_BRANCH)
    true;
#else
    false;
#endif
using mm::plat::HookMode;
// Every site holds its nop (kOff), its branch to target (kHooked) or to
// alt (kTraceOnly: a three-way site's kmemtrace path; a two-way site's alt
// is its target).
bool sites_hold(const StaticSite* first, const StaticSite* last, HookMode mode) {
  for (const StaticSite* s = first; s < last; s++) {
    uintptr_t to = mode == HookMode::kTraceOnly ? s->alt : s->target;
    if (*reinterpret_cast<const volatile uint32_t*>(s->site) != arch::static_branch_insn(s->site, to, mode != HookMode::kOff))
      return false;
  }
  return true;
}
bool alloc_sites_hold(HookMode mode) {
  if (!kStaticBranches) return mm::plat::alloc_hooks_on() == (mode != HookMode::kOff);
  return sites_hold(__static_branches_start, __static_branches_free_start, mode);
}
bool free_sites_hold(HookMode mode) {
  if (!kStaticBranches) return mm::plat::free_hooks_on() == (mode != HookMode::kOff);
  return sites_hold(__static_branches_free_start, __static_branches_end, mode);
}
bool sites_hold(HookMode mode) { return alloc_sites_hold(mode) && free_sites_hold(mode); }
// Sites with two targets: the three-way ones (kmem_cache_alloc, kmem_alloc
// and their macros' call sites, kmem_cache_free, kmem_free).
size_t three_way_sites(const StaticSite* first, const StaticSite* last) {
  size_t n = 0;
  for (const StaticSite* s = first; s < last; s++) n += s->alt != s->target;
  return n;
}

void cache_events(uint64_t& allocs, uint64_t& frees) {
  kmemtrace::TypeCounts tc;
  allocs = frees = 0;
  for (unsigned cpu = 0; cpu < kmemtrace::max_cpus(); cpu++)
    if (kmemtrace::count_types(cpu, tc)) {
      allocs += tc.allocs[kmemtrace::kTypeCache];
      frees += tc.frees[kmemtrace::kTypeCache];
    }
}
}  // namespace

// Before kmem_init, kmem_alloc's size tables name a cache that refuses
// every call (mm/kmem_alloc.cpp, Before kmem_init), so that its fast path
// needs no null test: an allocation from it fails with a report, a free is
// refused with one and changes nothing.
KTEST(kmem_alloc_before_kmem_init_is_refused_with_a_report) {
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): it may fail the allocation before the slow path");
  kmem_cache_t* cp = mm::kmem_no_class();
  uint64_t errors = mm::error_count();
  KEXPECT((kmem_cache_alloc)(cp, KM_NOSLEEP) == nullptr);
  KEXPECT_EQ(mm::error_count(), errors + 1);
  void* buf = kmem_alloc(64, KM_SLEEP);
  KASSERT(buf);
  (kmem_cache_free)(cp, buf);
  KEXPECT_EQ(mm::error_count(), errors + 2);
  KEXPECT((kmem_cache_alloc)(cp, KM_NOSLEEP) == nullptr);  // still nothing to hand out
  KEXPECT_EQ(mm::error_count(), errors + 3);
  kmem_free(buf, 64);
}

// The hooks' static-branch sites: every entry point has one, both keys
// (allocations, frees) have sites, and each has at least the entry
// points' own three-way sites (their macros' call sites add more on the
// allocation side). Where the arch has none, the switch is a flag: the
// switch tests below check the flags there.
KTEST(static_branch_sites_cover_the_allocators_entry_points) {
  if (!kStaticBranches) KSKIP("no static branches on this arch: the hooks' switch is a flag");
  KEXPECT(&__static_branches_end[0] - &__static_branches_start[0] >= 10);
  KEXPECT(&__static_branches_free_start[0] > &__static_branches_start[0]);
  KEXPECT(&__static_branches_end[0] > &__static_branches_free_start[0]);
  KEXPECT(three_way_sites(__static_branches_start, __static_branches_free_start) >= 2);
  KEXPECT(three_way_sites(__static_branches_free_start, __static_branches_end) >= 2);
}

KTEST(kmemtrace_switch_patches_the_allocators_and_records_only_while_on) {
  if (kmemtrace::ring_capacity() == 0) KSKIP("no kmemtrace rings (see the boot log)");
  if (mm::alloc_hooks_features() & ~unsigned{mm::kFeatureKmemtrace})
    KSKIP("another feature holds the allocators' hooks on (kmemleak or kmem.fail)");
  if (kmemtrace::enabled()) KSKIP("tracing is on (kmemtrace bootarg): the test needs it off");
  kmemtrace::clear();
  KEXPECT(sites_hold(HookMode::kOff));
  kmem_cache_t* cp = kmem_cache_create("test_trace", 40, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));  // warm: a slab, a magazine
  uint64_t a = 0, f = 0;
  cache_events(a, f);
  KEXPECT_EQ(a + f, 0u);

  kmemtrace::start();
  // kmemtrace alone: the three-way sites branch to its own paths. (No
  // static branches: the flags are on, HookMode::kHooked.)
  KEXPECT(sites_hold(kStaticBranches ? HookMode::kTraceOnly : HookMode::kHooked));
  arch::IrqState s = arch::irq_save();  // both on this CPU, nothing else in between
  void* p = kmem_cache_alloc(cp, KM_NOSLEEP);
  kmem_cache_free(cp, p);
  arch::irq_restore(s);
  kmemtrace::stop();
  KEXPECT(sites_hold(HookMode::kOff));
  cache_events(a, f);
  KEXPECT_EQ(a, 1u);
  KEXPECT_EQ(f, 1u);
  // Where sequence numbers are a clock, every online core recorded its
  // anchor when tracing started (trace/include/trace/abi.h, Sequence numbers;
  // count_types counts them among the other events); where they are a
  // counter, none.
  for (unsigned cpu = 0; cpu < kmemtrace::max_cpus(); cpu++) {
    kmemtrace::TypeCounts tc;
    if (!kmemtrace::count_types(cpu, tc)) continue;
    bool online = cpu < g_cpu_count && g_percpu[cpu].online.load(std::memory_order_relaxed);
    if (!mm::plat::kTraceClock || !online) KEXPECT_EQ(tc.other, 0u);
    else KEXPECT(tc.other >= 1);
  }

  kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));
  cache_events(a, f);
  KEXPECT_EQ(a + f, 2u);
  KEXPECT(kmem_cache_destroy(cp));
  kmemtrace::clear();
}

// kmemleak needs only the allocations: with it alone on, every allocating
// entry point branches to its hooked copy and every freeing one keeps its
// nop (frees cost what they cost with everything off); off again, all nops.
KTEST(kmemleak_alone_hooks_the_allocations_not_the_frees) {
  if (mm::alloc_hooks_features() != 0)
    KSKIP("a feature holds the allocators' hooks on (the kmemtrace, kmemleak or kmem.fail bootarg)");
  KEXPECT(sites_hold(HookMode::kOff));
  kmemleak_enable(true);
  KEXPECT(alloc_sites_hold(HookMode::kHooked));
  KEXPECT(free_sites_hold(HookMode::kOff));
  kmemleak_enable(false);
  KEXPECT(sites_hold(HookMode::kOff));
}

namespace {
// Events of type on every CPU's ring.
void type_events(uint8_t type, uint64_t& allocs, uint64_t& frees) {
  kmemtrace::TypeCounts tc;
  allocs = frees = 0;
  for (unsigned cpu = 0; cpu < kmemtrace::max_cpus(); cpu++)
    if (kmemtrace::count_types(cpu, tc)) {
      allocs += tc.allocs[type];
      frees += tc.frees[type];
    }
}
// Through each kind of three-way site: the macros' call sites and the
// entry points' own, for kmem_cache and kmem_alloc. Each call must record
// one event, whichever path its site took.
void calls_through_every_site(kmem_cache_t* cp) {
  arch::IrqState s = arch::irq_save();  // on this CPU, nothing else in between
  void* a = kmem_cache_alloc(cp, KM_NOSLEEP);
  void* b = (kmem_cache_alloc)(cp, KM_NOSLEEP);
  void* c = kmem_alloc(64, KM_NOSLEEP);
  void* d = (kmem_alloc)(64, KM_NOSLEEP);
  kmem_cache_free(cp, a);
  kmem_cache_free(cp, b);
  kmem_free(c, 64);
  kmem_free(d, 64);
  arch::irq_restore(s);
  KEXPECT(a && b && c && d);
}
}  // namespace

// kmemtrace alone: the three-way sites branch to its own paths. Another
// feature that wants the allocations (fault injection: kmemleak would do,
// but its tables and backtraces stay, which a 256 KiB board's later tests
// cannot spare) moves the allocation sites straight to the hooked copies,
// and back when it leaves; the free sites stay on kmemtrace's (it needs no
// frees). Every call through each kind of site records its event in each
// setting, and injecting into the calls' caches shows that the hooked
// copies are what runs: they fail the calls.
KTEST(kmemtrace_sites_move_between_its_own_paths_and_the_hooked_copies) {
  if (kmemtrace::ring_capacity() == 0) KSKIP("no kmemtrace rings (see the boot log)");
  if (mm::alloc_hooks_features() != 0)
    KSKIP("a feature holds the allocators' hooks on (the kmemtrace, kmemleak or kmem.fail bootarg)");
  kmemtrace::clear();
  kmem_cache_t* cp = kmem_cache_create("test_trace3", 40, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));  // warm: a slab, a magazine
  kmem_free(kmem_alloc(64, KM_SLEEP), 64);
  const HookMode trace_only = kStaticBranches ? HookMode::kTraceOnly : HookMode::kHooked;
  // What one round of calls adds to every CPU's events of both types.
  auto round_records = [&](uint64_t n) {
    uint64_t ca0, cf0, ka0, kf0, ca, cf, ka, kf;
    type_events(kmemtrace::kTypeCache, ca0, cf0);
    type_events(kmemtrace::kTypeKmalloc, ka0, kf0);
    calls_through_every_site(cp);
    type_events(kmemtrace::kTypeCache, ca, cf);
    type_events(kmemtrace::kTypeKmalloc, ka, kf);
    KEXPECT_EQ(ca - ca0, n);
    KEXPECT_EQ(cf - cf0, n);
    KEXPECT_EQ(ka - ka0, n);
    KEXPECT_EQ(kf - kf0, n);
  };

  kmemtrace::start();
  KEXPECT(sites_hold(trace_only));
  round_records(2);

  // Fault injection for a cache nobody uses: the hooked copies run (and
  // record), and fail nothing.
  mm::FailConfig fc;
  const char* why = "";
  KASSERT(mm::failslab_parse("100,1,-1,cache=no_such_cache", fc, &why));
  KASSERT(mm::failslab_set(fc));
  KEXPECT(alloc_sites_hold(HookMode::kHooked));
  KEXPECT(free_sites_hold(trace_only));
  round_records(2);
  mm::failslab_off();
  KEXPECT(sites_hold(trace_only));
  round_records(2);

  // Fault injection for one cache at a time, every call: the hooked copies
  // fail each NOSLEEP call through every kind of site.
  struct Injection {
    const char* spec;
    bool cache;  // test_trace3: kmem_cache_alloc's sites; else kmem_alloc's
  };
  const Injection injections[] = {{"100,1,-1,cache=test_trace3", true}, {"100,1,-1,cache=kmem_alloc_64", false}};
  for (const Injection& inj : injections) {
    KASSERT(mm::failslab_parse(inj.spec, fc, &why));
    KASSERT(mm::failslab_set(fc));
    KEXPECT(alloc_sites_hold(HookMode::kHooked));
    KEXPECT(free_sites_hold(trace_only));
    bool cache = inj.cache;
    void* a = cache ? kmem_cache_alloc(cp, KM_NOSLEEP) : kmem_alloc(64, KM_NOSLEEP);
    void* b = cache ? (kmem_cache_alloc)(cp, KM_NOSLEEP) : (kmem_alloc)(64, KM_NOSLEEP);
    mm::failslab_off();
    KEXPECT(a == nullptr);
    KEXPECT(b == nullptr);
    if (a) cache ? kmem_cache_free(cp, a) : kmem_free(a, 64);
    if (b) cache ? kmem_cache_free(cp, b) : kmem_free(b, 64);
  }
  KEXPECT(sites_hold(trace_only));
  round_records(2);

  kmemtrace::stop();
  KEXPECT(sites_hold(HookMode::kOff));
  round_records(0);
  kmemtrace::clear();
  KEXPECT(kmem_cache_destroy(cp));
  mm::kmem_reap(true);  // what the calls left in magazines: a 256 KiB board's later tests need the frames
}

// Allocator paths that fan out to every core (draining the per-CPU page
// caches, a full reap) also run inside a cross-call, on every core at once:
// there they do this core's share instead of waiting on the call lock that
// the caller holds.
KTEST(fan_out_paths_work_inside_cross_calls) {
  KEXPECT(!smp::in_cross_call());
  struct Count {
    std::atomic<unsigned> ran{0}, marked{0};
  } c;
  smp::call_on_all(
      [](void* arg) {
        auto* c = static_cast<Count*>(arg);
        if (smp::in_cross_call()) c->marked.fetch_add(1);
        mm::page_drain_cpu_caches();
        mm::kmem_reap(true);
        c->ran.fetch_add(1);
      },
      &c);
  KEXPECT_EQ(c.ran.load(), cpus_online());
  KEXPECT_EQ(c.marked.load(), cpus_online());
  KEXPECT(!smp::in_cross_call());
}

// The bit scans vmem's free lists use (the platform's inline ones) and the
// compiler's builtins (libgcc's __clzdi2/__ctzdi2 on RV64 without Zbb, which
// the kernel provides) agree with a plain loop.
KTEST(bit_scans_agree_with_a_loop) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (unsigned i = 0; i < 200; i++) {
    auto v = static_cast<uintptr_t>(i < 64 ? (uint64_t{1} << i) : (x = x * 6364136223846793005ull + 1442695040888963407ull));
    if (!v) continue;
    unsigned hi = 0, lo = 0;
    for (unsigned b = 0; b < 8 * sizeof v; b++)
      if (v >> b & 1) hi = b;
    while (!(v >> lo & 1)) lo++;
    KEXPECT_EQ(mm::plat::highest_bit(v), hi);
    KEXPECT_EQ(mm::plat::lowest_bit(v), lo);
    KEXPECT_EQ(static_cast<unsigned>(__builtin_clzl(v)), static_cast<unsigned>(8 * sizeof v - 1 - hi));
    KEXPECT_EQ(static_cast<unsigned>(__builtin_ctzl(v)), lo);
  }
}
