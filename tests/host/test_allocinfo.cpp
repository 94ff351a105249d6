// SPDX-License-Identifier: Apache-2.0
// Host tests of allocation profiling (mm/alloc_tag.cpp) under ASan and
// UBSan: exact counts at known lines for every tagged allocator, frees from
// other threads, calls that bypass the macros, frees of objects allocated
// while it was off, kmem's books behind the kernel's totals, and
// allocinfo_print's format and options.
#include <gtest/gtest.h>
#include "stale_arena.h"
#include <mm/alloc_tag.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

mm::AllocTagCounts at(uint32_t line) {
  mm::AllocTagCounts c{};
  EXPECT_TRUE(mm::alloc_tag_find(__FILE__, line, c)) << "no tag at line " << line;
  return c;
}

std::vector<std::string> print(const mm::AllocInfoOptions& opt) {
  std::vector<std::string> lines;
  EXPECT_TRUE(mm::allocinfo_print(
      opt, [](const char* l, void* arg) { static_cast<std::vector<std::string>*>(arg)->push_back(l); }, &lines));
  return lines;
}

std::string expected_line(int64_t bytes, uint64_t calls, uint32_t line, const char* func) {
  char buf[256];
  snprintf(buf, sizeof buf, "%12lli %8llu %s:%u func:%s \n", static_cast<long long>(bytes),
           static_cast<unsigned long long>(calls), __FILE__, line, func);
  return buf;
}

struct allocinfo : ::testing::Test {
  void SetUp() override {
    kmem_free(kmem_alloc(8, KM_SLEEP), 8);  // kmem (and the page allocator) up
    ASSERT_NE(mm::prof_mode(), mm::ProfMode::kNever);
    ASSERT_TRUE(mm::prof_set(true));
  }
};

TEST_F(allocinfo, PathsAreRelativeToTheSourceTree) { EXPECT_STREQ(__FILE__, "tests/host/test_allocinfo.cpp"); }

TEST_F(allocinfo, EveryAllocatorCountsExactlyAtItsCallSite) {
  kmem_cache_t* cp = kmem_cache_create("allocinfo_test", 48, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_NE(cp, nullptr);
  vmem_t* arena = vmem_create("allocinfo_test", reinterpret_cast<void*>(0x100000), 0x100000, 16, nullptr, nullptr,
                              nullptr, 0, VM_SLEEP);
  ASSERT_NE(arena, nullptr);
  std::vector<void*> a, b, c;
  const uint32_t la = __LINE__ + 1;
  for (int i = 0; i < 10; i++) a.push_back(kmem_alloc(100, KM_SLEEP));
  const uint32_t lb = __LINE__ + 1;
  for (int i = 0; i < 4; i++) b.push_back(kmem_zalloc(3000, KM_SLEEP));
  const uint32_t lc = __LINE__ + 1;
  for (int i = 0; i < 6; i++) c.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  const uint32_t ll = __LINE__ + 1;
  void* large = kmem_alloc(50000, KM_SLEEP);
  const uint32_t lp = __LINE__ + 1;
  uint64_t pg = mm::page_alloc(2, KM_SLEEP);
  const uint32_t lv = __LINE__ + 1;
  void* v = vmem_alloc(arena, 100, VM_SLEEP);
  const uint32_t lx = __LINE__ + 1;
  void* x = vmem_xalloc(arena, 256, 256, 0, 0, nullptr, nullptr, VM_SLEEP);

  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  EXPECT_EQ(at(la).calls, 10u);
  EXPECT_EQ(at(lb).calls, 4u);
  EXPECT_EQ(at(lc).calls, 6u);
  EXPECT_EQ(at(lc).bytes, static_cast<int64_t>(6 * st.chunksize));
  EXPECT_EQ(at(ll).calls, 1u);
  EXPECT_EQ(at(ll).bytes, static_cast<int64_t>(13 * mm::kPageBytes));  // 50000 in whole pages
  EXPECT_EQ(at(lp).calls, 1u);
  EXPECT_EQ(at(lp).bytes, static_cast<int64_t>(4 * mm::kPageBytes));
  EXPECT_EQ(at(lv).calls, 1u);
  EXPECT_EQ(at(lv).bytes, 112);  // the quantum
  EXPECT_EQ(at(lx).calls, 1u);
  EXPECT_EQ(at(lx).bytes, 256);
  EXPECT_STREQ(at(la).tag->func, "TestBody");

  for (void* p : a) kmem_free(p, 100);
  for (void* p : b) kmem_free(p, 3000);
  for (void* p : c) kmem_cache_free(cp, p);
  kmem_free(large, 50000);
  mm::page_free(pg, 2);
  vmem_free(arena, v, 100);
  vmem_xfree(arena, x, 256);
  for (uint32_t line : {la, lb, lc, ll, lp, lv, lx}) {
    mm::AllocTagCounts t = at(line);
    EXPECT_EQ(t.calls, 0u) << "line " << line;
    EXPECT_EQ(t.bytes, 0) << "line " << line;
  }
  EXPECT_TRUE(vmem_destroy(arena));
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// Each thread allocates at one site and another frees: the per-CPU counters
// sum to the truth.
TEST_F(allocinfo, ThreadsAllocatingAndFreeingElsewhereBalance) {
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::vector<void*>> got(kThreads);
  const uint32_t line = __LINE__ + 4;
  std::vector<std::thread> t;
  for (int i = 0; i < kThreads; i++)
    t.emplace_back([&got, i] {
      for (int k = 0; k < kEach; k++) got[i].push_back(kmem_alloc(64, KM_SLEEP));
    });
  for (auto& th : t) th.join();
  t.clear();
  EXPECT_EQ(at(line).calls, uint64_t{kThreads} * kEach);
  for (int i = 0; i < kThreads; i++)
    t.emplace_back([&got, i] {
      for (void* p : got[(i + 1) % kThreads]) kmem_free(p, 64);
    });
  for (auto& th : t) th.join();
  EXPECT_EQ(at(line).calls, 0u);
  EXPECT_EQ(at(line).bytes, 0);
}

// The functions themselves (a pointer, a parenthesised call) are counted at
// their own tags in mm/.
TEST_F(allocinfo, IndirectCallsCountAtTheFunctionsTags) {
  auto count = [](const char* file, const char* func) {
    for (size_t i = 0; i < mm::alloc_tag_count(); i++) {
      mm::AllocTagCounts t;
      mm::alloc_tag_read(i, t);
      if (strcmp(t.tag->file, file) == 0 && strcmp(t.tag->func, func) == 0) return t.calls;
    }
    return uint64_t{~0ull};
  };
  uint64_t before = count("mm/kmem_alloc.cpp", "kmem_alloc");
  ASSERT_NE(before, ~0ull);
  void* (*volatile fn)(size_t, int) = &kmem_alloc;
  void* p = fn(32, KM_SLEEP);
  void* q = (kmem_alloc)(32, KM_SLEEP);
  EXPECT_EQ(count("mm/kmem_alloc.cpp", "kmem_alloc"), before + 2);
  kmem_free(p, 32);
  kmem_free(q, 32);
  EXPECT_EQ(count("mm/kmem_alloc.cpp", "kmem_alloc"), before);
}

// Allocated while off, freed while on: counted as such, not subtracted from
// anything. Allocated while on, freed while off: still subtracted.
TEST_F(allocinfo, SwitchingKeepsTheBooksRight) {
  ASSERT_TRUE(mm::prof_set(false));
  void* off = kmem_alloc(200, KM_SLEEP);
  ASSERT_TRUE(mm::prof_set(true));
  const uint32_t line = __LINE__ + 1;
  void* on = kmem_alloc(200, KM_SLEEP);
  uint64_t untagged = mm::prof_untagged_frees();
  kmem_free(off, 200);
  EXPECT_EQ(mm::prof_untagged_frees(), untagged + 1);
  EXPECT_EQ(at(line).calls, 1u);
  ASSERT_TRUE(mm::prof_set(false));
  EXPECT_EQ(mm::prof_mode(), mm::ProfMode::kOff);
  kmem_free(on, 200);
  EXPECT_EQ(at(line).calls, 0u);
  EXPECT_EQ(at(line).bytes, 0);
  // Off (the frees still hooked): objects allocated now have no reference,
  // and their frees are neither counted nor reported; a page likewise.
  void* later = kmem_alloc(200, KM_SLEEP);
  uint64_t later_pa = mm::page_alloc(0, KM_SLEEP);
  ASSERT_TRUE(later && later_pa);
  kmem_free(later, 200);
  mm::page_free(later_pa, 0);
  EXPECT_EQ(mm::prof_untagged_frees(), untagged + 1);
  ASSERT_TRUE(mm::prof_set(true));
}

// The profiled free (mm/kmem_fastpath.h, Profiled fast paths) of a stale
// pointer into a destroyed on-slab cache, to the cache created next in the
// same structure: it reads the slab header's cache word, then its references
// (the freed array of the slab that is gone). Refused and reported, with
// nothing written and nothing pushed, at every on-slab size. (As kmem's test
// of the magazine free: tests/host/test_kmem.cpp.)
namespace {
std::vector<mm::MemError> g_errors;
}  // namespace
TEST_F(allocinfo, StaleProfiledFreeIntoADestroyedOnSlabCacheIsRefused) {
  mm::MemErrorHook old = mm::set_error_hook([](const mm::MemError& e) { g_errors.push_back(e); });
  StaleArena t;
  ASSERT_NE(t.arena, nullptr);
  const size_t sizes[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512};
  for (size_t size : sizes) {
    SCOPED_TRACE(size);
    kmem_cache_t* a = kmem_cache_create("t_stale_prof_a", size, 0, nullptr, nullptr, nullptr, nullptr, t.arena, 0);
    ASSERT_NE(a, nullptr);
    void* p = kmem_cache_alloc(a, KM_SLEEP);
    mm::KmemCacheStats st;
    mm::kmem_cache_stats(a, st);
    ASSERT_FALSE(st.offslab);
    kmem_cache_free(a, p);
    ASSERT_TRUE(kmem_cache_destroy(a));
    kmem_cache_t* b = t.create_at(a, "t_stale_prof_b", size);
    ASSERT_EQ(b, a) << "no new cache took the structure just freed: the case under test did not arise";
    mm::kmem_cache_stats(b, st);
    const uint64_t frees = st.frees;
    g_errors.clear();
    kmem_cache_free(b, p);
    ASSERT_EQ(g_errors.size(), 1u);
    EXPECT_STREQ(g_errors[0].where, "t_stale_prof_b");
    EXPECT_NE(std::strstr(g_errors[0].kind, "never allocated"), nullptr) << g_errors[0].kind;
    mm::kmem_cache_stats(b, st);
    EXPECT_EQ(st.frees, frees);
    const uint32_t line = __LINE__ + 1;
    void* q = kmem_cache_alloc(b, KM_SLEEP);
    EXPECT_EQ(at(line).calls, 1u);
    kmem_cache_free(b, q);
    EXPECT_EQ(at(line).calls, 0u);
    EXPECT_TRUE(kmem_cache_destroy(b));
    EXPECT_EQ(g_errors.size(), 1u);
  }
  mm::set_error_hook(old);
}

// kmem_books, behind the kernel's allocinfo --totals (live bytes, held
// bytes): each part moves by exactly what a workload adds, counted by the
// test, not by kmem_books' own arithmetic: live by the 50 buffers' chunks,
// the slabs by the pages the cache says it holds, large allocations by
// whole pages (none of them the allocators' own); back once freed and the
// cache destroyed.
TEST_F(allocinfo, KmemBooksCountEachPartExactly) {
  kmem_cache_t* cp = kmem_cache_create("allocinfo_books", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_NE(cp, nullptr);
  mm::KmemBooks b0, b1, b2;
  mm::kmem_books(b0);
  std::vector<void*> objs;
  for (int i = 0; i < 50; i++) objs.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  void* large = kmem_alloc(50000, KM_SLEEP);
  ASSERT_NE(large, nullptr);
  mm::kmem_books(b1);
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  EXPECT_EQ(st.buf_inuse, 50u);
  EXPECT_GE(st.slabs * st.objs_per_slab, 50u);
  EXPECT_EQ(b1.live_bytes_profiled - b0.live_bytes_profiled, 50 * st.chunksize);
  EXPECT_EQ(b1.slab_bytes_profiled - b0.slab_bytes_profiled, st.pages * mm::kPageBytes);
  EXPECT_EQ(b1.large_bytes - b0.large_bytes, 13 * mm::kPageBytes);  // 50000 in whole pages
  EXPECT_EQ(b1.large_internal_bytes, b0.large_internal_bytes);
  EXPECT_LE(b1.live_bytes_profiled, b1.slab_bytes_profiled);
  EXPECT_LE(b1.large_internal_bytes, b1.large_bytes);
  for (void* p : objs) kmem_cache_free(cp, p);
  kmem_free(large, 50000);
  EXPECT_TRUE(kmem_cache_destroy(cp));
  mm::kmem_books(b2);
  EXPECT_EQ(b2.live_bytes_profiled, b0.live_bytes_profiled);
  EXPECT_EQ(b2.slab_bytes_profiled, b0.slab_bytes_profiled);
  EXPECT_EQ(b2.large_bytes, b0.large_bytes);
}

TEST_F(allocinfo, PrintsLinuxFormatSortedAndFiltered) {
  kmem_cache_t* cp = kmem_cache_create("allocinfo_print", 500, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_NE(cp, nullptr);
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  std::vector<void*> few, many;
  const uint32_t lfew = __LINE__ + 1;
  for (int i = 0; i < 3; i++) few.push_back(kmem_cache_alloc(cp, KM_SLEEP));  // 3 x 500+: most bytes
  const uint32_t lmany = __LINE__ + 1;
  for (int i = 0; i < 5; i++) many.push_back(kmem_alloc(8, KM_SLEEP));  // 5 x 8: most calls

  std::vector<std::string> all = print({});
  ASSERT_GE(all.size(), 2u + mm::alloc_tag_count());
  EXPECT_EQ(all[0], "allocinfo - version: 1.0\n");
  EXPECT_EQ(all[1], "#     <size>  <calls> <tag info>\n");
  std::string few_line = expected_line(3 * static_cast<int64_t>(st.chunksize), 3, lfew, "TestBody");
  std::string many_line = expected_line(5 * 8, 5, lmany, "TestBody");
  size_t ifew = 0, imany = 0;
  for (size_t i = 2; i < all.size(); i++) {
    if (all[i] == few_line) ifew = i;
    if (all[i] == many_line) imany = i;
  }
  ASSERT_NE(ifew, 0u) << few_line;
  ASSERT_NE(imany, 0u) << many_line;
  EXPECT_LT(ifew, imany);  // same file: by line

  mm::AllocInfoOptions o;
  o.nonzero = true;
  for (const std::string& l : print(o)) EXPECT_EQ(l.find("        0 "), std::string::npos) << l;
  o.sort = mm::AllocSort::kCalls;
  o.top = 1;
  std::vector<std::string> top = print(o);
  ASSERT_EQ(top.size(), 3u);  // the header and one line
  uint64_t calls = std::stoull(top[2].substr(13, 8));
  for (const std::string& l : print({})) {
    if (l[0] == 'a' || l[0] == '#') continue;
    EXPECT_LE(std::stoull(l.substr(13, 8)), calls) << l;
  }
  o.sort = mm::AllocSort::kBytes;
  o.top = 0;
  std::vector<std::string> by_bytes = print(o);
  for (size_t i = 3; i < by_bytes.size(); i++)
    EXPECT_GE(std::stoll(by_bytes[i - 1].substr(0, 12)), std::stoll(by_bytes[i].substr(0, 12)));

  for (void* p : few) kmem_cache_free(cp, p);
  for (void* p : many) kmem_free(p, 8);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

}  // namespace

namespace {
// A tag outside the alloc_tags section, as a call site inside a template
// gets (mm/alloc_tag.h): the tagged entry points must not count it (nor
// write a counter outside the counters), and its free is one of an
// untagged object.
const mm::AllocTag g_stray_tag = {"tests/host/test_allocinfo.cpp", "stray", 1, mm::AllocKind::kKmem, false};
// Live objects at every call site outside mm/ (mm's own, a slab or a span
// made on the way, are counted at their own lines).
uint64_t live_calls() {
  uint64_t n = 0;
  mm::AllocTagCounts c;
  for (size_t i = 0; mm::alloc_tag_read(i, c); i++)
    if (!c.tag->internal) n += c.calls;
  return n;
}
}  // namespace

TEST_F(allocinfo, ATagOutsideTheSectionIsNotCounted) {
  kmem_cache_t* cp = kmem_cache_create("allocinfo_stray", 48, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_NE(cp, nullptr);
  // A slab, a loaded magazine and a cached page: the fast paths next.
  kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));
  kmem_free(kmem_alloc(64, KM_SLEEP), 64);
  mm::page_free(mm::page_alloc(0, KM_SLEEP), 0);
  uint64_t before = live_calls(), untagged = mm::prof_untagged_frees();
  void* a = kmem_cache_alloc_tagged(cp, KM_SLEEP, &g_stray_tag);
  void* b = kmem_alloc_tagged(64, KM_SLEEP, &g_stray_tag);
  uint64_t pa = mm::page_alloc_tagged(0, KM_SLEEP, &g_stray_tag);
  ASSERT_TRUE(a && b && pa);
  EXPECT_EQ(live_calls(), before);
  kmem_cache_free(cp, a);
  kmem_free(b, 64);
  mm::page_free(pa, 0);
  EXPECT_EQ(live_calls(), before);
  EXPECT_EQ(mm::prof_untagged_frees(), untagged + 3);  // each free found no reference
  EXPECT_TRUE(kmem_cache_destroy(cp));
}
