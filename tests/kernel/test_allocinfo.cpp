// SPDX-License-Identifier: Apache-2.0
// Allocation profiling (mm/alloc_tag.h) on the real kernel: known counts at
// known lines, found exactly and back to zero once freed; calls that do not
// go through the macros counted at the functions' own tags.
//
// Linked last (tests/kernel/CMakeLists.txt): once profiling has been on,
// the frees stay hooked (mm/alloc_tag.cpp, Switching), which tests that need
// the allocators' hooks off would see.
#include <arch/ops.h>
#include <kernel/allocinfo.h>
#include <kernel/arch.h>
#include <kernel/kmemtrace_control.h>
#include <kernel/ktest.h>
#include <kernel/string.h>
#include <mm/alloc_tag.h>
#include <mm/failslab.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/vmem.h>
#include <mm/whatis.h>
#include <trace/kmemtrace.h>
#include "../../kernel/mm/accounting.h"
#include "reserved_count.h"

namespace {

struct ProfilingOn {
  bool was_on = mm::prof_mode() == mm::ProfMode::kOn;
  bool ok = was_on || mm::prof_set(true);
  ~ProfilingOn() {
    if (!was_on) mm::prof_set(false);
  }
};

uint64_t chunk_of(const void* p) {
  mm::WhatIs w;
  if (!mm::kmem_whatis(p, w) || !w.cache) return 0;
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(w.cache, st);
  return st.chunksize;
}

mm::AllocTagCounts at(uint32_t line) {
  mm::AllocTagCounts c{};
  KEXPECT(mm::alloc_tag_find(__FILE__, line, c));
  return c;
}

// The tag of mm/'s own function name (the indirect calls' tag).
mm::AllocTagCounts function_tag(const char* file, const char* func) {
  mm::AllocTagCounts c{};
  for (size_t i = 0; i < mm::alloc_tag_count(); i++) {
    mm::AllocTagCounts t;
    mm::alloc_tag_read(i, t);
    if (strcmp(t.tag->file, file) == 0 && strcmp(t.tag->func, func) == 0) return t;
  }
  return c;
}

}  // namespace

KTEST(allocinfo_counts_known_sites_exactly) {
  if (mm::prof_mode() == mm::ProfMode::kNever) KSKIP("booted with sysctl.vm.mem_profiling=never");
  // Injected failures may refuse a slab its references (its buffers are
  // then counted at no tag, and allocinfo says how many slabs).
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): some slabs may have no tag references");
  ProfilingOn on;
  KASSERT(on.ok);
  kmem_cache_t* cp = kmem_cache_create("test_allocinfo", 100, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  void* a[5];
  void* b[3];
  void* c[7];
  const uint32_t la = __LINE__ + 1;
  for (auto& p : a) p = kmem_alloc(200, KM_SLEEP);
  const uint32_t lb = __LINE__ + 1;
  for (auto& p : b) p = kmem_zalloc(40, KM_SLEEP);
  const uint32_t lc = __LINE__ + 1;
  for (auto& p : c) p = kmem_cache_alloc(cp, KM_SLEEP);
  uint64_t pg[4];
  const uint32_t lp = __LINE__ + 1;
  for (auto& p : pg) p = mm::page_alloc(1, KM_SLEEP);
  const uint32_t lv = __LINE__ + 1;
  void* pv = mm::page_alloc_va(2, KM_SLEEP);
  mm::AllocTagCounts tp = at(lp), tv = at(lv);
  KEXPECT_EQ(tp.calls, 4u);
  KEXPECT_EQ(tp.bytes, static_cast<int64_t>(4 * 2 * mm::kPageBytes));
  KEXPECT_EQ(tv.calls, 1u);
  KEXPECT_EQ(tv.bytes, static_cast<int64_t>(4 * mm::kPageBytes));
  for (auto p : pg) mm::page_free(p, 1);
  mm::page_free_va(pv, 2);
  tp = at(lp);
  tv = at(lv);
  KEXPECT(tp.calls == 0 && tp.bytes == 0 && tv.calls == 0 && tv.bytes == 0);
  // A large kmem_alloc (whole heap pages): at the caller's tag, not segkmem's.
  // (Five pages where RAM is small: runs of free frames are short there.)
  const size_t lsize = mm::page_ram_bytes() < (uint64_t{1} << 20) ? 20000 : 40000;
  const uint32_t ll = __LINE__ + 1;
  void* large = kmem_alloc(lsize, KM_SLEEP);
  mm::AllocTagCounts tl = at(ll);
  KEXPECT_EQ(tl.calls, 1u);
  KEXPECT_EQ(tl.bytes, static_cast<int64_t>((lsize + mm::kPageBytes - 1) / mm::kPageBytes * mm::kPageBytes));
  kmem_free(large, lsize);
  tl = at(ll);
  KEXPECT(tl.calls == 0 && tl.bytes == 0);
  // vmem: an integer arena without quantum caches (every size a segment).
  vmem_t* arena = vmem_create("test_allocinfo", reinterpret_cast<void*>(0x100000), 0x100000, 16, nullptr, nullptr,
                              nullptr, 0, VM_SLEEP);
  KASSERT(arena);
  const uint32_t lx = __LINE__ + 1;
  void* x1 = vmem_alloc(arena, 100, VM_SLEEP);
  const uint32_t ly = __LINE__ + 1;
  void* y1 = vmem_xalloc(arena, 64, 64, 0, 0, nullptr, nullptr, VM_SLEEP);
  mm::AllocTagCounts tx = at(lx), ty = at(ly);
  KEXPECT_EQ(tx.calls, 1u);
  KEXPECT_EQ(tx.bytes, 112);  // rounded to the quantum
  KEXPECT_EQ(ty.calls, 1u);
  KEXPECT_EQ(ty.bytes, 64);
  vmem_free(arena, x1, 100);
  vmem_xfree(arena, y1, 64);
  tx = at(lx);
  ty = at(ly);
  KEXPECT(tx.calls == 0 && tx.bytes == 0 && ty.calls == 0 && ty.bytes == 0);
  KEXPECT(vmem_destroy(arena));
  mm::AllocTagCounts ta = at(la), tb = at(lb), tc = at(lc);
  KEXPECT_EQ(ta.calls, 5u);
  KEXPECT_EQ(static_cast<uint64_t>(ta.bytes), 5 * chunk_of(a[0]));
  KEXPECT_EQ(tb.calls, 3u);
  KEXPECT_EQ(static_cast<uint64_t>(tb.bytes), 3 * chunk_of(b[0]));
  KEXPECT_EQ(tc.calls, 7u);
  KEXPECT_EQ(static_cast<uint64_t>(tc.bytes), 7 * chunk_of(c[0]));
  KEXPECT(strcmp(ta.tag->file, "tests/kernel/test_allocinfo.cpp") == 0);
  KEXPECT(strcmp(ta.tag->func, "ktest_body_allocinfo_counts_known_sites_exactly") == 0 ||
          strstr(ta.tag->func, "allocinfo_counts_known_sites_exactly") != nullptr);
  // Freed on another path than allocated (kmem_free has no tag): back to zero.
  for (auto p : a) kmem_free(p, 200);
  for (auto p : b) kmem_free(p, 40);
  for (auto p : c) kmem_cache_free(cp, p);
  ta = at(la);
  tb = at(lb);
  tc = at(lc);
  KEXPECT_EQ(ta.calls, 0u);
  KEXPECT_EQ(ta.bytes, 0);
  KEXPECT_EQ(tb.calls, 0u);
  KEXPECT_EQ(tb.bytes, 0);
  KEXPECT_EQ(tc.calls, 0u);
  KEXPECT_EQ(tc.bytes, 0);
  KEXPECT(kmem_cache_destroy(cp));
}

KTEST(allocinfo_counts_indirect_calls_at_the_functions_tags) {
  if (mm::prof_mode() == mm::ProfMode::kNever) KSKIP("booted with sysctl.vm.mem_profiling=never");
  // The size class's current slab may have been refused its references by
  // an injected failure, any time since boot: its buffers count at no tag.
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): some slabs may have no tag references");
  ProfilingOn on;
  KASSERT(on.ok);
  uint64_t before = function_tag("mm/kmem_alloc.cpp", "kmem_alloc").calls;
  uint64_t untagged = mm::prof_untagged_frees();  // frees of what boot allocated before profiling was on
  void* (*volatile fn)(size_t, int) = &kmem_alloc;
  void* p = fn(64, KM_SLEEP);
  void* q = (kmem_alloc)(64, KM_SLEEP);
  KEXPECT_EQ(function_tag("mm/kmem_alloc.cpp", "kmem_alloc").calls, before + 2);
  kmem_free(p, 64);
  kmem_free(q, 64);
  KEXPECT_EQ(function_tag("mm/kmem_alloc.cpp", "kmem_alloc").calls, before);
  KEXPECT_EQ(mm::prof_untagged_frees(), untagged);  // our frees found their references
}

namespace {
// Each part of allocinfo --totals in its range and against a count of its
// own. Their sum is RAM by construction (untagged is what is live less
// what is tagged, held is the heap less what is live or the allocators',
// and meminfo's other and reserved are differences), so the sum alone
// proves nothing: a part counted twice or not at all moves another part
// and leaves it. `direct`: the bytes the test holds straight from the page
// allocator, meminfo's "other" (no subsystem claims them).
void expect_parts_hold(const AllocTotals& t, uint64_t direct) {
  mm_boot::MemAccounting a;
  mm_boot::accounting(a);
  mm::PageStats ps;
  mm::page_stats(ps);
  const uint64_t pcp = ps.pcp_pages * mm::kPageBytes;
  KEXPECT_EQ(t.sum(), static_cast<int64_t>(t.ram));
  KEXPECT_EQ(t.ram, a.ram);
  // Tagged and untagged: never below 0; untagged 0 when every live byte
  // was allocated while counting (since boot); the pages no subsystem
  // claims are exactly the test's own.
  KEXPECT(t.tagged >= 0);
  KEXPECT(t.untagged >= 0);
  if (allocinfo_boot::counting_since_boot()) KEXPECT_EQ(t.untagged, 0);
  KEXPECT_EQ(a.other, direct);
  // Held: the per-CPU page caches, and the rest within the heap.
  KEXPECT(t.held >= pcp);
  KEXPECT(t.held - pcp <= a.heap);
  // Metadata: the allocators' own pages, and the rest within the heap.
  const uint64_t own = a.kmem_meta + a.vmem_tags + a.page_tables;
  KEXPECT(t.metadata >= own);
  KEXPECT(t.metadata - own <= a.heap);
  // Free: what a walk of the page descriptors finds (page_verify checks
  // the counts against it), less the per-CPU caches (held).
  KEXPECT(mm::page_verify());
  KEXPECT_EQ(t.free + pcp, a.free);
  // Reserved: counted from what boot found.
  KEXPECT_EQ(t.reserved, books::counted_reserved_bytes());
}
}  // namespace

// The books balance (allocinfo --totals): each part holds (above) before,
// during and after a workload; the workload's bytes, counted from the
// allocators' own sizes, move tagged by exactly that much and untagged not
// at all; with profiling on since boot nothing live is untagged.
KTEST(allocinfo_books_balance) {
  if (mm::prof_mode() == mm::ProfMode::kNever) KSKIP("booted with sysctl.vm.mem_profiling=never");
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): some slabs may have no tag references");
  AllocTotals t0, t1, t2;
  KASSERT(allocinfo_totals(t0));
  expect_parts_hold(t0, 0);
  ProfilingOn on;
  KASSERT(on.ok);
  KASSERT(allocinfo_totals(t0));
  expect_parts_hold(t0, 0);
  kmem_cache_t* cp = kmem_cache_create("test_books", 100, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  void* a[10];
  void* c[7];
  uint64_t pg[3];
  for (auto& p : a) p = kmem_alloc(200, KM_SLEEP);
  for (auto& p : c) p = kmem_cache_alloc(cp, KM_SLEEP);
  // No large allocation where RAM is small: by the end of the suite the
  // tables kmemleak, the stack depot and profiling keep leave no run of
  // five free frames above the reserve on a 256 KiB board.
  const size_t lsize = mm::page_ram_bytes() < (uint64_t{1} << 20) ? 0 : 50000;  // 13 pages
  void* large = lsize ? kmem_alloc(lsize, KM_SLEEP) : nullptr;
  for (auto& p : pg) p = mm::page_alloc(1, KM_SLEEP);
  uint64_t bytes = 10 * chunk_of(a[0]) + 7 * chunk_of(c[0]) +
                   (lsize + mm::kPageBytes - 1) / mm::kPageBytes * mm::kPageBytes + 3 * 2 * mm::kPageBytes;
  KASSERT(allocinfo_totals(t1));
  expect_parts_hold(t1, 3 * 2 * mm::kPageBytes);
  KEXPECT_EQ(t1.tagged - t0.tagged, static_cast<int64_t>(bytes));
  KEXPECT_EQ(t1.untagged, t0.untagged);
  for (auto p : a) kmem_free(p, 200);
  for (auto p : c) kmem_cache_free(cp, p);
  if (large) kmem_free(large, lsize);
  for (auto p : pg) mm::page_free(p, 1);
  KEXPECT(kmem_cache_destroy(cp));
  KASSERT(allocinfo_totals(t2));
  expect_parts_hold(t2, 0);
  KEXPECT_EQ(t2.tagged, t0.tagged);
  KEXPECT_EQ(t2.untagged, t0.untagged);
}

// Once profiling has been on, frees subtract for good (mm/alloc_tag.cpp,
// Switching), with kmemtrace on as well: kmemtrace then is not "alone" on the
// frees (the hooks' free word says so, mm/hooks.cpp), so its fast path,
// which takes no reference off a buffer, must not run them. Buffers
// allocated while profiling counts, freed while it is off and kmemtrace
// records, leave their tags at zero; and the frees are recorded.
KTEST(allocinfo_frees_while_kmemtrace_records_still_subtract) {
  if (mm::prof_mode() == mm::ProfMode::kNever) KSKIP("booted with sysctl.vm.mem_profiling=never");
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): some slabs may have no tag references");
  KASSERT(kmemtrace::ring_capacity() != 0 && !kmemtrace::enabled());  // no suite boots with kmemtrace on
  bool was_on = mm::prof_mode() == mm::ProfMode::kOn;
  KASSERT(was_on || mm::prof_set(true));
  kmem_cache_t* cp = kmem_cache_create("test_prof_trace", 100, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  KASSERT(cp);
  void* a[6];
  void* c[6];
  const uint32_t la = __LINE__ + 1;
  for (auto& p : a) p = kmem_alloc(64, KM_SLEEP);
  const uint32_t lc = __LINE__ + 1;
  for (auto& p : c) p = kmem_cache_alloc(cp, KM_SLEEP);
  KEXPECT_EQ(at(la).calls, 6u);
  KEXPECT_EQ(at(lc).calls, 6u);
  mm::prof_set(false);  // the frees stay hooked: they subtract
  kmemtrace::clear();
  kmemtrace::start();
  for (auto p : a) kmem_free(p, 64);
  for (auto p : c) kmem_cache_free(cp, p);
  kmemtrace::stop();
  mm::AllocTagCounts ta = at(la), tc = at(lc);
  KEXPECT_EQ(ta.calls, 0u);
  KEXPECT_EQ(ta.bytes, 0);
  KEXPECT_EQ(tc.calls, 0u);
  KEXPECT_EQ(tc.bytes, 0);
  uint64_t kmalloc_frees = 0, cache_frees = 0;
  for (unsigned cpu = 0; cpu < kmemtrace::max_cpus(); cpu++) {
    kmemtrace::TypeCounts tcounts;
    if (!kmemtrace::count_types(cpu, tcounts)) continue;
    kmalloc_frees += tcounts.frees[kmemtrace::kTypeKmalloc];
    cache_frees += tcounts.frees[kmemtrace::kTypeCache];
  }
  KEXPECT(kmalloc_frees >= 6);  // ours, and any the kernel made meanwhile
  KEXPECT(cache_frees >= 6);
  kmemtrace::clear();
  KEXPECT(kmem_cache_destroy(cp));
  if (was_on) mm::prof_set(true);
}

// Page tables are allocator metadata in allocinfo --totals (the arch's
// table allocator, kernel/mm/init.cpp, counts them), so their pages must
// not count as a caller's too: a page mapped where the heap window has no
// table yet makes the arch allocate one, and tagged and untagged stay as
// they were. (They were counted twice once: the torture left untagged at
// -8192 on qemu-virt-arm.)
KTEST(allocinfo_page_tables_are_metadata_not_tagged) {
  if (!arch::kHasMmu) KSKIP("no MMU: no page tables");
  if (mm::prof_mode() == mm::ProfMode::kNever) KSKIP("booted with sysctl.vm.mem_profiling=never");
  if (mm::failslab_armed()) KSKIP("fault injection is on (kmem.fail): some slabs may have no tag references");
  ProfilingOn on;
  KASSERT(on.ok);
  const uint64_t pa = mm::page_alloc(0, KM_SLEEP);
  KASSERT(pa);
  AllocTotals t0, t1;
  KASSERT(allocinfo_totals(t0));
  // Candidates from the top of the heap window down, 2 MiB apart (each
  // under a last-level table of its own on every arch), until one took a
  // page from the page allocator: the arch first uses up its static pool
  // of tables (48 on arm64 and riscv64; on arm 16 tables, then four to a
  // page), and tables are never freed, so a later run finds the next
  // region down. The window's top half is far from where the heap grows.
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  constexpr uintptr_t kStep = uintptr_t{2} << 20;
  const unsigned candidates = static_cast<unsigned>(size / 2 / kStep);
  // (All stay mapped until one grew: arm recycles an emptied table.)
  bool grew = false;
  unsigned tried = 0;
  const uint64_t tables = mm_boot::page_table_pages();
  for (unsigned i = 1; i <= candidates && !grew; i++, tried++) {
    uintptr_t va = base + size - i * kStep;
    if (arch::translate(va)) continue;
    KASSERT(arch::map(va, pa, kPageSize, arch::kMapRead));
    grew = mm_boot::page_table_pages() > tables;
  }
  for (unsigned i = 1; i <= tried; i++) {
    uintptr_t va = base + size - i * kStep;
    if (arch::translate(va) == pa) arch::unmap(va, kPageSize);
  }
  if (!grew) {
    mm::page_free(pa, 0);
    KSKIP("every candidate region of the heap window already had its tables");
  }
  KASSERT(allocinfo_totals(t1));
  expect_parts_hold(t1, mm::kPageBytes);  // pa
  KEXPECT_EQ(t1.tagged, t0.tagged);
  KEXPECT_EQ(t1.untagged, t0.untagged);
  KEXPECT(t1.metadata > t0.metadata);
  mm::page_free(pa, 0);
}
