// SPDX-License-Identifier: Apache-2.0
// vmem as the first call into the host library (README: mm/ is offered to
// programs as a library, like libumem). Its own executable, with this one
// test: nothing else may touch mm/ first (another test, or a global
// environment, would bring the page allocator up before it). Built twice:
// over the whole of mm/ (MAGPIE_HAVE_KMEM), where kmem comes up afterwards
// over the same page allocator, and over vmem alone.
//
// An arena's boundary tags come from the page allocator (mm/vmem.cpp, The tag
// pool): the arena's first span needs them, and vmem_create brings the page
// allocator up on first use, as kmem_alloc's first use brings kmem up.
#include <gtest/gtest.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/vmem.h>
#include <algorithm>
#include <utility>
#include <vector>

namespace {

std::vector<mm::MemError> g_errors;
void capture(const mm::MemError& e) { g_errors.push_back(e); }

void* P(uintptr_t x) { return reinterpret_cast<void*>(x); }
uintptr_t U(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Allocations {start, size asked for}, each inside [lo, hi) and
// quantum-aligned, none overlapping another (each taking its size rounded
// up to the quantum).
void expect_disjoint(std::vector<std::pair<void*, size_t>> v, uintptr_t lo, uintptr_t hi, size_t quantum) {
  std::sort(v.begin(), v.end());
  auto end = [&](size_t i) { return U(v[i].first) + (v[i].second + quantum - 1) / quantum * quantum; };
  for (size_t i = 0; i < v.size(); i++) {
    EXPECT_GE(U(v[i].first), lo);
    EXPECT_LE(end(i), hi);
    EXPECT_EQ(U(v[i].first) % quantum, 0u);
    if (i) {
      EXPECT_LE(end(i - 1), U(v[i].first)) << "two allocations overlap";
    }
  }
}

}  // namespace

// Named vmem_first_use.* with kmem, vmem_first_use_standalone.* without.
#if defined(MAGPIE_HAVE_KMEM)
#define FIRST_USE_SUITE vmem_first_use
#else
#define FIRST_USE_SUITE vmem_first_use_standalone
#endif

TEST(FIRST_USE_SUITE, AnArenaIsTheFirstThingTheProgramMakes) {
  mm::PageStats ps;
  mm::page_stats(ps);
  ASSERT_EQ(ps.total_pages, 0u) << "something brought the page allocator up before this test";
#if defined(MAGPIE_HAVE_KMEM)
  ASSERT_FALSE(mm::kmem_ready());
#endif
  mm::set_error_hook(capture);
  constexpr uintptr_t kBase = 0x100000;
  constexpr size_t kSize = size_t{1} << 20, kQuantum = 16;
  // With quantum caches asked for: until a cache layer exists (kmem's), their
  // sizes are served by the arena itself (mm/vmem.cpp, Quantum caches).
  vmem_t* a = vmem_create("first", P(kBase), kSize, kQuantum, nullptr, nullptr, nullptr, 4 * kQuantum, VM_SLEEP);
  ASSERT_NE(a, nullptr) << (g_errors.empty() ? "no report" : g_errors[0].kind);
  mm::page_stats(ps);
  EXPECT_GT(ps.total_pages, 0u);

  std::vector<std::pair<void*, size_t>> got;
  for (size_t size : {16, 32, 48, 64, 100, 1000, 4096})
    for (int i = 0; i < 20; i++) {
      void* p = vmem_alloc(a, size, VM_SLEEP);
      ASSERT_NE(p, nullptr) << size;
      got.emplace_back(p, size);
    }
  void* x = vmem_xalloc(a, 8192, 4096, 0, 0, nullptr, nullptr, VM_SLEEP);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(U(x) % 4096, 0u);
  got.emplace_back(x, 8192);
  expect_disjoint(got, kBase, kBase + kSize, kQuantum);
  EXPECT_TRUE(mm::vmem_verify(a));

  // An arena importing from it.
  vmem_t* b = vmem_create("first_child", nullptr, 0, kQuantum, vmem_alloc, vmem_free, a, 0, VM_SLEEP);
  ASSERT_NE(b, nullptr);
  void* y = vmem_alloc(b, 256, VM_SLEEP);
  ASSERT_NE(y, nullptr);
  got.emplace_back(y, 256);
  expect_disjoint(got, kBase, kBase + kSize, kQuantum);
  vmem_free(b, y, 256);
  got.pop_back();
  EXPECT_TRUE(vmem_destroy(b));

#if defined(MAGPIE_HAVE_KMEM)
  // kmem's first use afterwards: over the same page allocator (its set-up
  // must not be refused as a second one), and its cache layer creates the
  // quantum caches the arena asked for.
  void* k = kmem_alloc(100, KM_SLEEP);
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(mm::kmem_ready());
  kmem_free(k, 100);
  mm::VmemStats st;
  mm::vmem_stats(a, st);
  EXPECT_EQ(st.qcache_max, 4 * kQuantum);
  for (int i = 0; i < 20; i++) {
    void* q = vmem_alloc(a, 32, VM_SLEEP);
    ASSERT_NE(q, nullptr);
    got.emplace_back(q, 32);
  }
  expect_disjoint(got, kBase, kBase + kSize, kQuantum);
#endif

  for (auto& [p, size] : got) vmem_free(a, p, size);
  EXPECT_TRUE(mm::vmem_verify(a));
  EXPECT_TRUE(vmem_destroy(a));
  EXPECT_TRUE(g_errors.empty()) << g_errors.size() << " reports, the first: " << g_errors[0].kind;
}
