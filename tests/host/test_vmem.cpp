// SPDX-License-Identifier: Apache-2.0
// vmem (mm/vmem.cpp) on the host, under ASan/UBSan: policies, constraints,
// coalescing, importing, the hash, quantum caches, bad input, and a
// randomized run against a model.
//
// vmem takes its boundary-tag pages from the page allocator, set up once
// per process over the host's "physical memory". Integer arenas here use
// made-up address ranges: vmem never touches the integers it manages.
//
// Built twice: with kmem (vmem_tests: MAGPIE_HAVE_KMEM, kmem registers the
// cache layer at kmem_init) and without it (vmem_standalone_tests: only
// page.cpp, vmem.cpp and report.cpp), where this file registers a stand-in
// cache layer: a "quantum cache" is a counter in front of vmem_xalloc,
// which is enough to check vmem's side of caching.
#include <gtest/gtest.h>
#include <mm/host.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/vmem.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Captured {
  std::string kind, where;
  uintptr_t address;
  uint64_t detail;
  uintptr_t caller;
};
std::vector<Captured> g_errors;
void capture(const mm::MemError& e) { g_errors.push_back({e.kind, e.where, e.address, e.detail, e.caller}); }

}  // namespace

#if !defined(MAGPIE_HAVE_KMEM)
// --- A stand-in cache layer (vmem_set_cache_layer) ---------------------------
struct kmem_cache {
  std::string name;
  size_t size;
  vmem_t* arena;
  uint64_t live = 0, allocs = 0, frees = 0;
};
namespace {
std::vector<kmem_cache*> g_fake_caches;
unsigned g_fake_reaps;

kmem_cache_t* fake_create(const char* name, size_t size, size_t align, vmem_t* arena) {
  EXPECT_EQ(align, size / (size / align));  // the arena's quantum
  auto* cp = new kmem_cache{name, size, arena};
  g_fake_caches.push_back(cp);
  return cp;
}
bool fake_destroy(kmem_cache_t* cp) {
  if (cp->live) return false;
  std::erase(g_fake_caches, cp);
  delete cp;
  return true;
}
void* fake_alloc(kmem_cache_t* cp, int kmflag) {
  // A quantum cache's slab layer: vmem_xalloc, which never recurses into the caches.
  void* p = vmem_xalloc(cp->arena, cp->size, 0, 0, 0, nullptr, nullptr, kmflag);
  if (p) cp->live++, cp->allocs++;
  return p;
}
void fake_free(kmem_cache_t* cp, void* buf) {
  vmem_xfree(cp->arena, buf, cp->size);
  cp->live--, cp->frees++;
}
void fake_usage(const kmem_cache_t* cp, uint64_t& out, uint64_t& slabs, uint64_t& slab_bytes) {
  out = cp->live;
  slabs = cp->live;  // one "slab" (an arena segment) per object
  slab_bytes = cp->live * cp->size;
}
void fake_reap() { g_fake_reaps++; }
constexpr mm::VmemCacheLayer kFakeLayer = {fake_create, fake_destroy, fake_alloc, fake_free, fake_usage, fake_reap};
}  // namespace
#endif

namespace {

class VmemEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
#if defined(MAGPIE_HAVE_KMEM)
    mm::kmem_init();  // the page allocator over host memory, the heap arenas, kmem
    mm::set_error_hook(capture);
#else
    mm::host::init_memory();
    const mm::host::HostMemory& m = mm::host::memory();
    mm::PhysRange bank{m.phys_base, m.phys_size};
    ASSERT_TRUE(mm::page_init(&bank, 1, nullptr, 0));
    mm::set_error_hook(capture);
#endif
  }
};
const auto* g_env = ::testing::AddGlobalTestEnvironment(new VmemEnvironment);

// An arena destroyed at the end of the test, after freeing what the test
// handed it to keep (keep()), and checked on the way.
struct Arena {
  vmem_t* vmp;
  std::vector<std::pair<void*, size_t>> kept;
  explicit Arena(vmem_t* v) : vmp(v) {}
  ~Arena() {
    if (!vmp) return;
    for (auto& [p, size] : kept) vmem_free(vmp, p, size);
    EXPECT_TRUE(mm::vmem_verify(vmp));
    EXPECT_TRUE(vmem_destroy(vmp));
  }
  void* keep(void* p, size_t size) {
    if (p) kept.emplace_back(p, size);
    return p;
  }
  operator vmem_t*() const { return vmp; }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
};

mm::VmemStats stats(vmem_t* vmp) {
  mm::VmemStats s;
  mm::vmem_stats(vmp, s);
  return s;
}

void* P(uintptr_t x) { return reinterpret_cast<void*>(x); }
uintptr_t U(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class VmemTest : public ::testing::Test {
 protected:
  void SetUp() override { g_errors.clear(); }
};
// Tests are named vmem.* (ctest -R vmem). Inside this namespace `vmem` is
// the fixture; the arena type is vmem_t.
using vmem = VmemTest;

// Allocates blocks of the given sizes one after the other from the front of
// a fresh arena, each followed by a 1-unit separator (kept until the end, so
// nothing coalesces), and frees the blocks. Returns their addresses.
std::vector<uintptr_t> make_free_holes(Arena& a, std::initializer_list<size_t> sizes) {
  std::vector<uintptr_t> addrs;
  for (size_t s : sizes) {
    addrs.push_back(U(vmem_alloc(a, s, VM_NOSLEEP | VM_INSTANTFIT)));
    EXPECT_NE(a.keep(vmem_alloc(a, 1, VM_NOSLEEP | VM_INSTANTFIT), 1), nullptr);
  }
  size_t i = 0;
  for (size_t s : sizes) vmem_free(a, P(addrs[i++]), s);
  return addrs;
}

// The fast path needs a spare boundary tag at hand; a slow-path allocation
// (best fit here) restocks the arena, so that the counts that follow see
// only the fast path.
void restock_tags(vmem_t* vmp, size_t quantum) {
  vmem_xfree(vmp, vmem_xalloc(vmp, quantum, 0, 0, 0, nullptr, nullptr, VM_NOSLEEP | VM_BESTFIT), quantum);
}

// ---------------------------------------------------------------------------

TEST_F(vmem, AllocFreeAndSize) {
  Arena a(vmem_create("t_basic", P(0x100000), 0x100000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  ASSERT_NE(a.vmp, nullptr);
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC | VMEM_FREE), 0x100000u);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0x100000u);
  void* p = vmem_alloc(a, 100, VM_SLEEP);  // rounds up to 112
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(U(p) % 16, 0u);
  EXPECT_GE(U(p), 0x100000u);
  EXPECT_LE(U(p) + 112, 0x200000u);
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 112u);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0x100000u - 112);
  void* q = vmem_alloc(a, 16, VM_SLEEP);
  EXPECT_TRUE(U(q) >= U(p) + 112 || U(q) + 16 <= U(p));
  EXPECT_TRUE(mm::vmem_verify(a));
  mm::VmemStats s = stats(a);
  EXPECT_STREQ(s.name, "t_basic");
  EXPECT_EQ(s.quantum, 16u);
  EXPECT_EQ(s.spans, 1u);
  EXPECT_EQ(s.span_bytes, 0x100000u);
  EXPECT_EQ(s.segs_alloc, 2u);
  EXPECT_EQ(s.allocs, 2u);
  EXPECT_EQ(s.source, nullptr);
  vmem_free(a, p, 100);
  vmem_free(a, q, 16);
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 0u);
  s = stats(a);
  EXPECT_EQ(s.frees, 2u);
  EXPECT_EQ(s.segs_free, 1u);  // everything coalesced back into one segment
  EXPECT_TRUE(g_errors.empty());
}

TEST_F(vmem, CreateAndAddRejectBadArguments) {
  EXPECT_EQ(vmem_create("t_badq", P(0x1000), 0x1000, 24, nullptr, nullptr, nullptr, 0, VM_SLEEP), nullptr);
  EXPECT_EQ(vmem_create("t_misaligned", P(0x1008), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP), nullptr);
  EXPECT_EQ(g_errors.size(), 2u);
  Arena a(vmem_create("t_add", nullptr, 0, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  ASSERT_NE(a.vmp, nullptr);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0u);
  EXPECT_EQ(vmem_alloc(a, 16, VM_NOSLEEP), nullptr);  // empty, nothing to import from
  EXPECT_EQ(vmem_add(a, P(0x10000), 0x1000, VM_SLEEP), P(0x10000));
  EXPECT_EQ(vmem_add(a, P(0x10800), 0x1000, VM_SLEEP), nullptr);  // overlaps
  EXPECT_EQ(g_errors.back().kind, "span overlaps arena");
  EXPECT_EQ(g_errors.back().where, "t_add");
  EXPECT_EQ(vmem_add(a, P(0x11000), 0x1000, VM_SLEEP), P(0x11000));  // adjacent: its own span
  EXPECT_EQ(vmem_add(a, P(0x20000), 0x1008, VM_SLEEP), nullptr);     // not in quanta
  EXPECT_EQ(stats(a).spans, 2u);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0x2000u);
  // Segments never straddle spans, even adjacent ones.
  EXPECT_EQ(vmem_xalloc(a, 0x1800, 0, 0, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);
  EXPECT_NE(a.keep(vmem_alloc(a, 0x1000, VM_NOSLEEP), 0x1000), nullptr);
  EXPECT_NE(a.keep(vmem_alloc(a, 0x1000, VM_NOSLEEP), 0x1000), nullptr);
}

TEST_F(vmem, InstantFitTakesTheFirstListGuaranteedToFit) {
  Arena a(vmem_create("t_instant", P(1000), 4096, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  // Holes of 5 and 7 (list 2), 9 (list 3), 16 (list 4); then one big free segment.
  auto h = make_free_holes(a, {5, 7, 9, 16});
  restock_tags(a, 1);  // (takes a unit of the 5 and gives it back: the holes stay as they were)
  uint64_t searches = stats(a).searches;
  // 6 is not a power of two: list 2 might not fit, list 3 surely does: the 9.
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 6, VM_NOSLEEP), 6)), h[2]);
  // 4 is a power of two: all of list 2 fits; its newest member (the 7) comes first.
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 4, VM_NOSLEEP), 4)), h[1]);
  // 16: list 4, the hole of exactly 16.
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 16, VM_NOSLEEP), 16)), h[3]);
  EXPECT_EQ(stats(a).searches, searches);  // none of this searched
}

TEST_F(vmem, InstantFitFallsBackToTheListThatMightFit) {
  Arena a(vmem_create("t_instant2", P(1000), 14, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* x = vmem_alloc(a, 7, VM_NOSLEEP);
  void* y = a.keep(vmem_alloc(a, 7, VM_NOSLEEP), 7);
  ASSERT_NE(y, nullptr);
  vmem_free(a, x, 7);
  // Only a 7 is free (list 2); 6 would need list 3 to be sure, which is empty.
  EXPECT_EQ(a.keep(vmem_alloc(a, 6, VM_NOSLEEP), 6), x);
  EXPECT_EQ(vmem_alloc(a, 2, VM_NOSLEEP), nullptr);  // one unit left
  EXPECT_EQ(a.keep(vmem_alloc(a, 1, VM_NOSLEEP), 1), P(U(x) + 6));
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0u);
}

// A segment carved from the head of its list whose rest falls to a lower
// class stays where it is (mm/vmem.cpp, Free lists), and is taken from
// there only when it is big enough to be sure of: every choice is the one
// that exact lists (each segment on the list of its size) would give,
// without a search.
TEST_F(vmem, ShrunkSegmentStaysOnItsListUntilTooSmallToBeSure) {
  Arena a(vmem_create("t_lazy", P(1000), 100, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  ASSERT_NE(vmem_add(a, P(2000), 64, VM_SLEEP), nullptr);  // list 6: the 64, then the 100
  // Spare tags for what follows (the fast path needs one; frees keep theirs),
  // leaving the lists as they were.
  std::vector<void*> ones;
  for (int i = 0; i < 16; i++) ones.push_back(vmem_alloc(a, 1, VM_NOSLEEP));
  for (void* p : ones) vmem_free(a, p, 1);
  EXPECT_TRUE(mm::vmem_verify(a));
  uint64_t searches = stats(a).searches;
  auto take = [&](size_t size) {
    void* p = a.keep(vmem_alloc(a, size, VM_NOSLEEP), size);
    EXPECT_TRUE(mm::vmem_verify(a)) << size;
    return U(p);
  };
  EXPECT_EQ(take(1), 2000u);   // the 63 left (list 5) stays at the head of list 6
  EXPECT_EQ(take(16), 2001u);  // 63 >= 16: taken from there (exact lists: the lowest list from 4 up is its own)
  // 33 needs list 6; the head, 47, is below it: it goes to list 5, the 100 is taken.
  EXPECT_EQ(take(33), 1000u);
  EXPECT_EQ(take(33), 1033u);                  // the 34 left moves to list 5 at once: the 47 is there
  EXPECT_EQ(take(8), 1066u);                   // list 5's head; the 26 left (list 4) stays at the head of list 5
  EXPECT_EQ(take(20), 2017u);                  // needs list 5: the 26 goes to list 4, the 47 is taken
  EXPECT_EQ(take(16), 2037u);                  // list 4, newest first: the 27 left by the 20
  EXPECT_EQ(take(26), 1074u);                  // needs list 5 (empty): the list that might fit, list 4: the 26
  EXPECT_EQ(stats(a).searches, searches + 1);  // only that last one searched
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 11u);
}

// A free that puts a segment on a list first settles the lazy one, so the
// lists' order is the exact lists' order.
TEST_F(vmem, LazySegmentSettlesBeforeAnyInsertion) {
  Arena a(vmem_create("t_lazy2", P(4096), 64, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* x = vmem_alloc(a, 1, VM_NOSLEEP);  // 63 left, lazy at the head of list 6
  void* y = a.keep(vmem_alloc(a, 1, VM_NOSLEEP), 1);
  void* z = vmem_alloc(a, 30, VM_NOSLEEP);  // 32 left: list 5, still lazy on list 6
  EXPECT_EQ(U(x), 4096u);
  EXPECT_EQ(U(y), 4097u);
  EXPECT_EQ(U(z), 4098u);
  EXPECT_TRUE(mm::vmem_verify(a));
  vmem_free(a, x, 1);  // onto list 0: the 32 settles onto list 5
  EXPECT_TRUE(mm::vmem_verify(a));
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 1, VM_NOSLEEP), 1)), 4096u);
  vmem_free(a, z, 30);  // merges with the 32: 62, list 5
  EXPECT_TRUE(mm::vmem_verify(a));
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 32, VM_NOSLEEP), 32)), 4098u);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 30u);
  EXPECT_EQ(stats(a).segs_free, 1u);
}

// The lazy segment as an exact fit: taken if it is sure to fit (its size a
// power of two, the size asked for), else settled and the request served
// as exact lists would: here from the list that might fit.
TEST_F(vmem, LazySegmentAsAnExactFit) {
  Arena a(vmem_create("t_lazy3", P(4096), 64, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  uint64_t searches = stats(a).searches;
  void* x = vmem_alloc(a, 32, VM_NOSLEEP);  // 32 left (list 5), lazy at the head of list 6
  EXPECT_EQ(U(x), 4096u);
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 32, VM_NOSLEEP), 32)), 4128u);
  EXPECT_EQ(stats(a).searches, searches);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0u);
  vmem_free(a, x, 32);
  EXPECT_TRUE(mm::vmem_verify(a));

  Arena b(vmem_create("t_lazy4", P(8192), 64, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  searches = stats(b).searches;
  EXPECT_EQ(U(b.keep(vmem_alloc(b, 31, VM_NOSLEEP), 31)), 8192u);  // 33 left (list 5), lazy on list 6
  // 33 needs list 6 to be sure; the lazy 33 goes to list 5, which might fit: it does.
  EXPECT_EQ(U(b.keep(vmem_alloc(b, 33, VM_NOSLEEP), 33)), 8223u);
  EXPECT_EQ(stats(b).searches, searches + 1);
  EXPECT_TRUE(mm::vmem_verify(b));
}

TEST_F(vmem, BestFitTakesTheSmallestFit) {
  Arena a(vmem_create("t_best", P(1000), 4096, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  auto h = make_free_holes(a, {9, 5, 7, 16, 6});
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 6, VM_NOSLEEP | VM_BESTFIT), 6)), h[4]);  // exact
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 6, VM_NOSLEEP | VM_BESTFIT), 6)), h[2]);  // the 7, not the 9
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 3, VM_NOSLEEP | VM_BESTFIT), 3)), h[1]);  // the 5
  EXPECT_EQ(U(a.keep(vmem_alloc(a, 9, VM_NOSLEEP | VM_BESTFIT), 9)), h[0]);
  // An arena whose default policy is best fit.
  Arena b(vmem_create("t_best2", P(1000), 4096, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP | VM_BESTFIT));
  auto hb = make_free_holes(b, {9, 5, 7});
  EXPECT_EQ(U(b.keep(vmem_alloc(b, 6, VM_NOSLEEP), 6)), hb[2]);
}

TEST_F(vmem, NextFitCyclesThroughTheArena) {
  Arena ids(vmem_create("t_ids", P(1), 8, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP | VM_NEXTFIT));
  // One id at a time, freed at once: each is the next one, wrapping round.
  for (int i = 0; i < 20; i++) {
    void* id = vmem_alloc(ids, 1, VM_NOSLEEP);
    EXPECT_EQ(U(id), 1u + i % 8) << i;
    vmem_free(ids, id, 1);
  }
  // Ids still held are skipped.
  void* a5 = vmem_alloc(ids, 1, VM_NOSLEEP);
  EXPECT_EQ(U(a5), 5u);
  ids.keep(vmem_alloc(ids, 1, VM_NOSLEEP), 1);  // 6
  vmem_free(ids, a5, 1);
  EXPECT_EQ(U(ids.keep(vmem_alloc(ids, 1, VM_NOSLEEP), 1)), 7u);
  EXPECT_EQ(U(ids.keep(vmem_alloc(ids, 1, VM_NOSLEEP), 1)), 8u);
  EXPECT_EQ(U(ids.keep(vmem_alloc(ids, 1, VM_NOSLEEP), 1)), 1u);
  EXPECT_EQ(U(ids.keep(vmem_alloc(ids, 2, VM_NOSLEEP), 2)), 2u);
  EXPECT_EQ(U(ids.keep(vmem_alloc(ids, 2, VM_NOSLEEP), 2)), 4u);  // 4 and 5
  EXPECT_EQ(vmem_alloc(ids, 1, VM_NOSLEEP), nullptr);
  // Next fit asked for per allocation, in an instant-fit arena.
  Arena b(vmem_create("t_next2", P(100), 4, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* x = vmem_alloc(b, 1, VM_NOSLEEP | VM_NEXTFIT);
  vmem_free(b, x, 1);
  EXPECT_EQ(U(b.keep(vmem_alloc(b, 1, VM_NOSLEEP | VM_NEXTFIT), 1)), 101u);
}

TEST_F(vmem, XallocConstraints) {
  constexpr uintptr_t kBase = 0x40000, kSize = 0x40000;
  Arena a(vmem_create("t_x", P(kBase), kSize, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  // Fragment the front of the arena so constrained requests have to search.
  for (int i = 0; i < 64; i++) {
    size_t size = 16 * (1 + i % 5);
    void* p = vmem_alloc(a, size, VM_NOSLEEP);
    if (i % 3) a.keep(p, size);
    else vmem_free(a, p, size);
  }
  struct Case {
    size_t size, align, phase, nocross;
    uintptr_t min, max;
  };
  const Case cases[] = {
      {16, 4096, 0, 0, 0, 0},
      {100, 4096, 32, 0, 0, 0},
      {48, 64, 16, 0, 0, 0},
      {200, 0, 0, 256, 0, 0},
      {240, 16, 0, 256, 0, 0},
      {96, 32, 16, 128, 0, 0},
      {64, 0, 0, 0, 0x60000, 0},
      {64, 0, 0, 0, 0, 0x41000},
      {64, 256, 0, 0, 0x50010, 0x50400},
      {0x1000, 0x1000, 0, 0x2000, 0x70000, 0x80000},
  };
  for (const Case& c : cases) {
    for (int policy : {VM_INSTANTFIT, VM_BESTFIT, VM_NEXTFIT}) {
      void* p = vmem_xalloc(a, c.size, c.align, c.phase, c.nocross, P(c.min), P(c.max), VM_NOSLEEP | policy);
      ASSERT_NE(p, nullptr) << c.size << " align " << c.align << " policy " << policy;
      uintptr_t x = U(p), size = (c.size + 15) & ~uintptr_t{15};
      uintptr_t align = c.align ? c.align : 16;
      EXPECT_EQ(x % align, c.phase);
      if (c.nocross) {
        EXPECT_EQ(x / c.nocross, (x + size - 1) / c.nocross);
      }
      if (c.min) {
        EXPECT_GE(x, c.min);
      }
      if (c.max) {
        EXPECT_LE(x + size, c.max);
      }
      EXPECT_GE(x, kBase);
      EXPECT_LE(x + size, kBase + kSize);
      vmem_xfree(a, p, c.size);
    }
  }
  EXPECT_TRUE(g_errors.empty());
  // Exact answers. 0x40030 is taken, so the next 64 KiB boundary plus 0x30:
  void* p = vmem_xalloc(a, 16, 0x10000, 0x30, 0, nullptr, nullptr, VM_NOSLEEP);
  EXPECT_EQ(U(p), 0x50030u);
  vmem_xfree(a, p, 16);
  p = vmem_xalloc(a, 32, 0, 0, 0, P(0x7ffe0), P(0x80000), VM_NOSLEEP);
  EXPECT_EQ(U(p), 0x7ffe0u);
  EXPECT_EQ(vmem_xalloc(a, 32, 0, 0, 0, P(0x7ffe0), P(0x80000), VM_NOSLEEP), nullptr);  // taken
  vmem_xfree(a, p, 32);
  EXPECT_EQ(vmem_xalloc(a, 64, 0, 0, 0, P(0x90000), P(0xa0000), VM_NOSLEEP), nullptr);  // outside
  EXPECT_TRUE(g_errors.empty());
  // Invalid requests are reported and refused.
  EXPECT_EQ(vmem_xalloc(a, 64, 48, 0, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);       // align not 2^n
  EXPECT_EQ(vmem_xalloc(a, 64, 64, 64, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);      // phase >= align
  EXPECT_EQ(vmem_xalloc(a, 64, 64, 8, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);       // phase not in quanta
  EXPECT_EQ(vmem_xalloc(a, 300, 0, 0, 256, nullptr, nullptr, VM_NOSLEEP), nullptr);     // size > nocross
  EXPECT_EQ(vmem_xalloc(a, 64, 0, 0, 0, P(0x50000), P(0x50000), VM_NOSLEEP), nullptr);  // empty window
  EXPECT_EQ(vmem_xalloc(a, 0, 0, 0, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);         // nothing
  ASSERT_EQ(g_errors.size(), 6u);
  for (auto& e : g_errors) EXPECT_EQ(e.kind, "invalid arguments");
  g_errors.clear();
}

TEST_F(vmem, FreeCoalescesWithBothNeighbours) {
  Arena a(vmem_create("t_coalesce", P(0x10000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* p[5];
  for (auto& x : p) x = vmem_alloc(a, 16, VM_NOSLEEP);
  for (int i = 0; i < 5; i++) EXPECT_EQ(U(p[i]), 0x10000u + 16 * i);
  EXPECT_EQ(stats(a).segs_free, 1u);
  vmem_free(a, p[1], 16);  // a hole
  EXPECT_EQ(stats(a).segs_free, 2u);
  vmem_free(a, p[3], 16);  // another
  EXPECT_EQ(stats(a).segs_free, 3u);
  vmem_free(a, p[2], 16);  // joins both holes into one
  EXPECT_EQ(stats(a).segs_free, 2u);
  EXPECT_TRUE(mm::vmem_verify(a));
  vmem_free(a, p[4], 16);  // joins the hole and the tail
  EXPECT_EQ(stats(a).segs_free, 1u);
  vmem_free(a, p[0], 16);  // the whole span again
  mm::VmemStats s = stats(a);
  EXPECT_EQ(s.segs_free, 1u);
  EXPECT_EQ(s.segs_alloc, 0u);
  // The coalesced segment is whole: one allocation of the entire span fits.
  EXPECT_EQ(vmem_alloc(a, 0x1000, VM_NOSLEEP), P(0x10000));
  vmem_free(a, P(0x10000), 0x1000);
}

// --- Importing --------------------------------------------------------------

std::atomic<int> g_imports{0}, g_releases{0};
std::atomic<bool> g_import_fails{false};
void* counting_import(vmem_t* src, size_t size, int vmflag) {
  if (g_import_fails) return nullptr;
  void* p = vmem_alloc(src, size, vmflag);
  if (p) g_imports++;
  return p;
}
void counting_release(vmem_t* src, void* p, size_t size) {
  g_releases++;
  vmem_free(src, p, size);
}

TEST_F(vmem, ImportsSpansAndGivesThemBack) {
  g_imports = g_releases = 0;
  Arena src(vmem_create("t_src", P(0x10000000), 16 << 20, 4096, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  Arena child(vmem_create("t_child", nullptr, 0, 64, counting_import, counting_release, src, 0, VM_SLEEP));
  ASSERT_NE(child.vmp, nullptr);
  EXPECT_EQ(stats(child).spans, 0u);
  EXPECT_STREQ(stats(child).source, "t_src");

  void* a = vmem_alloc(child, 100, VM_NOSLEEP);  // 128 of a 4 KiB import
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(g_imports, 1);
  void* b = vmem_alloc(child, 64, VM_NOSLEEP);  // same span
  EXPECT_EQ(g_imports, 1);
  void* big = vmem_alloc(child, 3 * 4096 + 64, VM_NOSLEEP);  // a 16 KiB import
  EXPECT_EQ(g_imports, 2);
  void* aligned = vmem_xalloc(child, 64, 0x10000, 0x40, 0, nullptr, nullptr, VM_NOSLEEP);
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(U(aligned) % 0x10000, 0x40u);
  EXPECT_EQ(g_imports, 3);
  mm::VmemStats s = stats(child);
  EXPECT_EQ(s.imports, 3u);
  EXPECT_EQ(s.spans, 3u);
  EXPECT_EQ(s.imported_bytes, s.span_bytes);
  EXPECT_EQ(vmem_size(src, VMEM_ALLOC), s.span_bytes);
  EXPECT_TRUE(mm::vmem_verify(child));
  // Constrained requests the source cannot honour do not import.
  EXPECT_EQ(vmem_xalloc(child, 64, 0, 0, 0, P(0x1), P(0x2000), VM_NOSLEEP), nullptr);
  EXPECT_EQ(g_imports, 3);
  // The source arena cannot go while the child imports from it.
  EXPECT_FALSE(vmem_destroy(src));
  ASSERT_EQ(g_errors.size(), 1u);
  EXPECT_EQ(g_errors[0].kind, "destroy of arena other arenas import from");
  EXPECT_EQ(g_errors[0].where, "t_src");
  EXPECT_EQ(g_errors[0].detail, 1u);

  // Spans go back when wholly free, and only then.
  vmem_free(child, big, 3 * 4096 + 64);
  EXPECT_EQ(g_releases, 1);
  vmem_free(child, a, 100);
  EXPECT_EQ(g_releases, 1);  // b still holds that span
  vmem_free(child, b, 64);
  EXPECT_EQ(g_releases, 2);
  vmem_xfree(child, aligned, 64);
  EXPECT_EQ(g_releases, 3);
  s = stats(child);
  EXPECT_EQ(s.spans, 0u);
  EXPECT_EQ(s.span_bytes, 0u);
  EXPECT_EQ(s.span_returns, 3u);
  EXPECT_EQ(vmem_size(src, VMEM_ALLOC), 0u);

  // A failing import fails a NOSLEEP allocation.
  uint64_t failures = stats(child).failures;
  g_import_fails = true;
  EXPECT_EQ(vmem_alloc(child, 64, VM_NOSLEEP), nullptr);
  EXPECT_EQ(stats(child).failures, failures + 1);
  g_import_fails = false;
}

// --- The hash and constant time --------------------------------------------

TEST_F(vmem, HashGrowsWithTheArena) {
  Arena a(vmem_create("t_hash", P(0x1000000), 64 << 20, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  EXPECT_EQ(stats(a).hash_buckets, 16u);
  std::vector<void*> v;
  for (int i = 0; i < 20000; i++) v.push_back(vmem_alloc(a, 16 * (1 + i % 3), VM_NOSLEEP));
  mm::VmemStats s = stats(a);
  EXPECT_EQ(s.segs_alloc, 20000u);
  EXPECT_GE(s.hash_buckets, 20000u / 2);  // load at most 2
  EXPECT_GE(s.hash_rescales, 2u);
  EXPECT_TRUE(mm::vmem_verify(a));
  std::mt19937 rng(7);
  std::vector<int> order(v.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t k = 0; k < order.size(); k++) {
    int i = order[k];
    vmem_free(a, v[i], 16 * (1 + i % 3));
    if (k == order.size() / 2) {
      EXPECT_TRUE(mm::vmem_verify(a));
    }
  }
  s = stats(a);
  EXPECT_EQ(s.segs_alloc, 0u);
  EXPECT_EQ(s.segs_free, 1u);
  EXPECT_TRUE(g_errors.empty());
}

TEST_F(vmem, InstantFitStaysConstantTimeWithTenThousandFreeSegments) {
  Arena a(vmem_create("t_frag", P(0x1000000), 16 << 20, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  std::vector<void*> v;
  for (int i = 0; i < 20000; i++) v.push_back(vmem_alloc(a, 16, VM_NOSLEEP));
  for (int i = 0; i < 20000; i += 2) vmem_free(a, v[i], 16);
  for (int i = 1; i < 20000; i += 2) a.keep(v[i], 16);
  EXPECT_EQ(stats(a).segs_free, 10001u);  // 10 000 holes and the tail
  restock_tags(a, 16);
  uint64_t searches = stats(a).searches;
  for (int i = 0; i < 10000; i++) {
    size_t size = 16 * (1 + i % 8);  // 16..128: holes fit only 16; the rest comes from the tail
    void* p = vmem_alloc(a, size, VM_NOSLEEP);
    ASSERT_NE(p, nullptr);
    vmem_free(a, p, size);
  }
  EXPECT_EQ(stats(a).searches, searches);  // not one segment examined
  EXPECT_EQ(stats(a).segs_free, 10001u);
}

// --- Bad input --------------------------------------------------------------

TEST_F(vmem, BadFreesAreReportedAndRefused) {
  Arena a(vmem_create("t_bad", P(0x10000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* p = vmem_alloc(a, 32, VM_NOSLEEP);
  ASSERT_EQ(U(p), 0x10000u);
  vmem_free(a, P(0x90000), 16);
  vmem_free(a, p, 48);
  vmem_free(a, P(U(p) + 16), 16);
  vmem_free(a, P(0x10800), 16);
  ASSERT_EQ(g_errors.size(), 4u);
  EXPECT_EQ(g_errors[0].kind, "free of address outside arena");
  EXPECT_EQ(g_errors[0].where, "t_bad");
  EXPECT_EQ(g_errors[0].address, 0x90000u);
  EXPECT_EQ(g_errors[1].kind, "free with wrong size");
  EXPECT_EQ(g_errors[1].detail, 48u);
  EXPECT_EQ(g_errors[2].kind, "free of unallocated segment");
  EXPECT_EQ(g_errors[3].kind, "double free");
  // Nothing was freed.
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 32u);
  EXPECT_TRUE(mm::vmem_verify(a));
  vmem_free(a, p, 32);
  EXPECT_EQ(g_errors.size(), 4u);
  vmem_free(a, p, 32);
  vmem_xfree(a, p, 32);
  ASSERT_EQ(g_errors.size(), 6u);
  EXPECT_EQ(g_errors[4].kind, "double free");
  EXPECT_EQ(g_errors[5].kind, "double free");
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 0u);
  g_errors.clear();
}

// Reports name the caller of the public function, also where the fast
// paths leave for a report (they read it only there). The calls below are
// each in a function of their own, which the reported caller must be in.
__attribute__((noinline)) void free_here(vmem_t* a, void* p, size_t size) {
  vmem_free(a, p, size);
  asm volatile("");  // (no tail call: the return address is in here)
}
__attribute__((noinline)) void xfree_here(vmem_t* a, void* p, size_t size) {
  vmem_xfree(a, p, size);
  asm volatile("");
}
__attribute__((noinline)) void* alloc_here(vmem_t* a, size_t size, int vmflag) {
  void* p = vmem_alloc(a, size, vmflag);
  asm volatile("" : "+r"(p));
  return p;
}
bool reported_from(const void* fn) {
  uintptr_t c = g_errors.back().caller, f = reinterpret_cast<uintptr_t>(fn);
  return c > f && c < f + 1024;
}

TEST_F(vmem, ReportsNameTheCaller) {
  Arena a(vmem_create("t_caller", P(0x10000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* p = a.keep(vmem_alloc(a, 32, VM_NOSLEEP), 32);
  free_here(a, p, 48);
  ASSERT_EQ(g_errors.size(), 1u);
  EXPECT_EQ(g_errors.back().kind, "free with wrong size");
  EXPECT_TRUE(reported_from(reinterpret_cast<const void*>(&free_here)));
  xfree_here(a, P(U(p) + 16), 16);
  ASSERT_EQ(g_errors.size(), 2u);
  EXPECT_EQ(g_errors.back().kind, "free of unallocated segment");
  EXPECT_TRUE(reported_from(reinterpret_cast<const void*>(&xfree_here)));
  // More than the arena holds, VM_SLEEP: refused from the slow path the
  // fast one leaves for.
  EXPECT_EQ(alloc_here(a, 0x2000, VM_SLEEP), nullptr);
  ASSERT_EQ(g_errors.size(), 3u);
  EXPECT_EQ(g_errors.back().kind, "request the arena can never satisfy (refused, not waited for)");
  EXPECT_TRUE(reported_from(reinterpret_cast<const void*>(&alloc_here)));
  g_errors.clear();
}

TEST_F(vmem, DestroyWithAllocationsIsRefused) {
  vmem_t* a = vmem_create("t_busy", P(0x10000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP);
  void* p = vmem_alloc(a, 48, VM_NOSLEEP);
  void* q = vmem_xalloc(a, 16, 256, 0, 0, nullptr, nullptr, VM_NOSLEEP);
  EXPECT_FALSE(vmem_destroy(a));
  ASSERT_EQ(g_errors.size(), 1u);
  EXPECT_EQ(g_errors[0].kind, "destroy of arena with allocations");
  EXPECT_EQ(g_errors[0].where, "t_busy");
  EXPECT_EQ(g_errors[0].address, U(p));
  EXPECT_EQ(g_errors[0].detail, 64u);
  vmem_free(a, p, 48);
  EXPECT_FALSE(vmem_destroy(a));
  vmem_xfree(a, q, 16);
  EXPECT_TRUE(vmem_destroy(a));
  EXPECT_EQ(g_errors.size(), 2u);
  g_errors.clear();
}

TEST_F(vmem, NoSleepFailsWhenFull) {
  Arena a(vmem_create("t_full", P(0x1000), 10 * 16, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  for (int i = 0; i < 10; i++) ASSERT_NE(a.keep(vmem_alloc(a, 16, VM_NOSLEEP), 16), nullptr);
  EXPECT_EQ(vmem_alloc(a, 16, VM_NOSLEEP), nullptr);
  EXPECT_EQ(vmem_alloc(a, 16, VM_NOSLEEP | VM_BESTFIT), nullptr);
  EXPECT_EQ(vmem_alloc(a, 16, VM_NOSLEEP | VM_NEXTFIT), nullptr);
  EXPECT_EQ(vmem_xalloc(a, 16, 64, 0, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);
  EXPECT_EQ(stats(a).failures, 4u);
  EXPECT_EQ(vmem_size(a, VMEM_FREE), 0u);
  EXPECT_TRUE(g_errors.empty());
}

TEST_F(vmem, SleepWaitsForAFree) {
  Arena a(vmem_create("t_sleep", P(0x1000), 16, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* p = vmem_alloc(a, 16, VM_SLEEP);
  std::atomic<bool> done{false};
  void* got = nullptr;
  std::thread t([&] {
    got = vmem_alloc(a, 16, VM_SLEEP);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done);
  vmem_free(a, p, 16);
  t.join();
  EXPECT_EQ(got, p);
  vmem_free(a, got, 16);
}

// VM_SLEEP waits for memory, not for the impossible: a request no arena in
// the chain could ever hold is reported and refused instead of looping.
TEST_F(vmem, SleepRefusesWhatCanNeverFit) {
  Arena a(vmem_create("t_never", P(0x100000), 0x10000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  EXPECT_EQ(mm::vmem_capacity(a), 0x10000u);
  EXPECT_EQ(vmem_alloc(a, 0x10010, VM_SLEEP), nullptr);  // larger than the arena
  ASSERT_EQ(g_errors.size(), 1u);
  EXPECT_EQ(g_errors[0].kind, "request the arena can never satisfy (refused, not waited for)");
  EXPECT_EQ(g_errors[0].where, "t_never");
  EXPECT_EQ(vmem_xalloc(a, 0x100, 0, 0, 0, P(0x100000), P(0x100080), VM_SLEEP), nullptr);  // window too small
  EXPECT_EQ(vmem_xalloc(a, 0x20000, 0x1000, 0, 0, nullptr, nullptr, VM_SLEEP), nullptr);   // too big, constrained
  EXPECT_EQ(g_errors.size(), 3u);
  // An importing arena reaches as far as its source.
  Arena child(vmem_create("t_never_child", nullptr, 0, 16, vmem_alloc, vmem_free, a, 0, VM_SLEEP));
  EXPECT_EQ(mm::vmem_capacity(child), 0x10000u);
  EXPECT_EQ(vmem_alloc(child, 0x20000, VM_SLEEP), nullptr);
  EXPECT_EQ(g_errors.size(), 4u);
  void* p = vmem_alloc(child, 0x8000, VM_SLEEP);  // what fits still works
  EXPECT_NE(p, nullptr);
  vmem_free(child, p, 0x8000);
  EXPECT_EQ(g_errors.size(), 4u);
  g_errors.clear();
}

// --- The tag pool -----------------------------------------------------------

TEST_F(vmem, TagsComeFromPagesAndFreesNeedNone) {
  Arena a(vmem_create("t_tags", P(0x1000000), 16 << 20, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  uint64_t total, free_tags, pages;
  mm::vmem_seg_pool_stats(total, free_tags, pages);
  EXPECT_GE(pages, 1u);
  EXPECT_GT(total, 0u);
  EXPECT_LE(free_tags, total);
  // Take every page, so the pool cannot grow.
  std::vector<void*> taken;
  while (void* pg = mm::page_alloc_va(0, KM_NOSLEEP | KM_PUSHPAGE)) taken.push_back(pg);
  // Every allocation from the front of the big free segment takes a tag.
  std::vector<void*> v;
  while (void* p = vmem_alloc(a, 16, VM_NOSLEEP)) {
    v.push_back(p);
    ASSERT_LT(v.size(), 1000000u);
  }
  // The pool's reserve still serves VM_PUSHPAGE.
  void* pushed = vmem_alloc(a, 16, VM_NOSLEEP | VM_PUSHPAGE);
  EXPECT_NE(pushed, nullptr);
  // Frees never need a tag, however many holes they leave.
  for (size_t i = 0; i < v.size(); i += 2) vmem_free(a, v[i], 16);
  for (size_t i = 1; i < v.size(); i += 2) vmem_free(a, v[i], 16);
  vmem_free(a, pushed, 16);
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 0u);
  EXPECT_EQ(stats(a).segs_free, 1u);
  for (void* pg : taken) mm::page_free_va(pg, 0);
  EXPECT_TRUE(g_errors.empty());
}

// --- Arenas, walking --------------------------------------------------------

void collect_names(const vmem_t* vmp, void* arg) {
  mm::VmemStats s;
  mm::vmem_stats(vmp, s);
  static_cast<std::vector<std::string>*>(arg)->push_back(s.name);
}

TEST_F(vmem, WalkVisitsArenasInCreationOrder) {
  Arena a(vmem_create("t_walk1", P(0x1000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  Arena b(vmem_create("t_walk2", P(0x1000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  std::vector<std::string> names;
  mm::vmem_walk(collect_names, &names);
  auto i1 = std::find(names.begin(), names.end(), "t_walk1");
  auto i2 = std::find(names.begin(), names.end(), "t_walk2");
  ASSERT_NE(i1, names.end());
  ASSERT_NE(i2, names.end());
  EXPECT_LT(i1, i2);
}

TEST_F(vmem, ArenaSlotsRunOutCleanly) {
  std::vector<vmem_t*> made;
  for (int i = 0; i < 100; i++) {
    vmem_t* v = vmem_create("t_slot", P(0x1000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP);
    if (!v) break;
    made.push_back(v);
  }
  EXPECT_GT(made.size(), 8u);
  EXPECT_LE(made.size(), 64u);
  for (vmem_t* v : made) EXPECT_TRUE(vmem_destroy(v));
  vmem_t* again = vmem_create("t_slot", P(0x1000), 0x1000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP);
  EXPECT_NE(again, nullptr);
  EXPECT_TRUE(vmem_destroy(again));
}

// --- Quantum caches ---------------------------------------------------------

#if !defined(MAGPIE_HAVE_KMEM)
// Registers the stand-in layer: the tests after this one in this binary
// run with it.
TEST_F(vmem, QuantumCachesAreCreatedWhenTheCacheLayerIsRegistered) {
  Arena a(vmem_create("t_qc", P(0x100000), 0x100000, 16, nullptr, nullptr, nullptr, 64, VM_SLEEP));
  EXPECT_EQ(stats(a).qcache_max, 0u);           // no cache layer yet: recorded, not created
  void* early = vmem_alloc(a, 32, VM_NOSLEEP);  // straight from the arena
  EXPECT_EQ(stats(a).segs_alloc, 1u);

  mm::vmem_set_cache_layer(&kFakeLayer);
  EXPECT_EQ(stats(a).qcache_max, 64u);
  std::vector<kmem_cache*> mine;
  for (kmem_cache* cp : g_fake_caches)
    if (cp->arena == a.vmp) mine.push_back(cp);
  ASSERT_EQ(mine.size(), 4u);
  for (size_t i = 0; i < 4; i++) {
    EXPECT_EQ(mine[i]->name, "t_qc_" + std::to_string(i + 1));
    EXPECT_EQ(mine[i]->size, 16 * (i + 1));
  }
  void* p = vmem_alloc(a, 40, VM_NOSLEEP);  // the 48-byte cache
  EXPECT_EQ(mine[2]->allocs, 1u);
  void* large = vmem_alloc(a, 128, VM_NOSLEEP);  // beyond qcache_max: the arena
  vmem_free(a, early, 32);                       // allocated before the caches: back to the arena
  EXPECT_EQ(mine[1]->frees, 0u);
  EXPECT_EQ(stats(a).segs_alloc, 2u);  // p's "slab" and large

  EXPECT_FALSE(vmem_destroy(a));  // p is out
  ASSERT_EQ(g_errors.size(), 1u);
  EXPECT_EQ(g_errors[0].kind, "destroy of arena with allocations");
  EXPECT_EQ(g_errors[0].detail, 48u + 128u);
  vmem_free(a, p, 40);
  EXPECT_EQ(mine[2]->frees, 1u);
  vmem_free(a, large, 128);
  g_errors.clear();

  // An arena created once the layer is there gets its caches at once.
  Arena b(vmem_create("t_qc2", P(0x100000), 0x100000, 16, nullptr, nullptr, nullptr, 32, VM_SLEEP));
  EXPECT_EQ(stats(b).qcache_max, 32u);
  vmem_free(b, vmem_alloc(b, 16, VM_NOSLEEP), 16);

  // VM_SLEEP asks the layer to reap before it waits.
  Arena c(vmem_create("t_qc3", P(0x300000), 64, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  void* all = vmem_alloc(c, 64, VM_SLEEP);
  std::atomic<bool> got{false};
  unsigned reaps = g_fake_reaps;
  std::thread t([&] {
    void* q = vmem_alloc(c, 16, VM_SLEEP);
    vmem_free(c, q, 16);
    got = true;
  });
  while (g_fake_reaps == reaps) std::this_thread::yield();
  vmem_free(c, all, 64);
  t.join();
  EXPECT_TRUE(got);
}
#else
struct FindCaches {
  std::string prefix;
  std::vector<std::string> found;
};
void find_caches(const kmem_cache_t* cp, void* arg) {
  auto* f = static_cast<FindCaches*>(arg);
  mm::KmemCacheStats s;
  mm::kmem_cache_stats(cp, s);
  if (std::string(s.name).rfind(f->prefix, 0) == 0) f->found.push_back(s.name);
}

TEST_F(vmem, QuantumCachesAreKmemCaches) {
  Arena a(vmem_create("t_qc", P(0x100000), 0x100000, 16, nullptr, nullptr, nullptr, 64, VM_SLEEP));
  EXPECT_EQ(stats(a).qcache_max, 64u);
  FindCaches f{"t_qc_", {}};
  mm::kmem_cache_walk(find_caches, &f);
  EXPECT_EQ(f.found, (std::vector<std::string>{"t_qc_1", "t_qc_2", "t_qc_3", "t_qc_4"}));
  std::vector<void*> v;
  for (int i = 0; i < 1000; i++) v.push_back(vmem_alloc(a, 16 * (1 + i % 4), VM_NOSLEEP));
  for (void* p : v) {
    EXPECT_EQ(U(p) % 16, 0u);
    EXPECT_GE(U(p), 0x100000u);
    EXPECT_LT(U(p), 0x200000u);
  }
  EXPECT_LT(stats(a).allocs, 1000u);  // slabs, not one segment per object
  for (int i = 0; i < 1000; i++) vmem_free(a, v[i], 16 * (1 + i % 4));
  EXPECT_TRUE(g_errors.empty());
}
#endif

// --- Threads ------------------------------------------------------------------

TEST_F(vmem, ThreadsShareAnArenaAndItsSource) {
  g_imports = g_releases = 0;
  Arena src(vmem_create("t_msrc", P(0x20000000), 64 << 20, 4096, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  Arena child(vmem_create("t_mchild", nullptr, 0, 32, counting_import, counting_release, src, 0, VM_SLEEP));
  Arena flat(vmem_create("t_mflat", P(0x40000000), 1 << 20, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  constexpr int kThreads = 4;
  std::atomic<int> overlaps{0};
  // Each thread writes its id into a shadow byte per quantum it holds: a
  // segment handed out twice shows up as a byte that is not ours.
  std::vector<uint8_t> shadow(1 << 16);  // flat arena: (1 MiB / 16) quanta
  auto worker = [&](int id) {
    std::mt19937 rng(1000 + id);
    std::vector<std::pair<void*, size_t>> mine, flat_mine;
    for (int step = 0; step < 20000; step++) {
      if (mine.empty() || rng() % 2) {
        size_t size = 1 + rng() % 2000;
        if (void* p = vmem_alloc(child, size, VM_NOSLEEP)) mine.emplace_back(p, size);
      } else {
        size_t k = rng() % mine.size();
        vmem_free(child, mine[k].first, mine[k].second);
        mine[k] = mine.back();
        mine.pop_back();
      }
      if (flat_mine.empty() || rng() % 2) {
        size_t size = 16 * (1 + rng() % 8);
        void* p = vmem_alloc(flat, size, VM_NOSLEEP | (rng() % 4 ? 0 : VM_BESTFIT));
        if (p) {
          size_t q0 = (U(p) - 0x40000000) / 16;
          for (size_t q = q0; q < q0 + size / 16; q++) {
            if (__atomic_exchange_n(&shadow[q], static_cast<uint8_t>(id + 1), __ATOMIC_RELAXED) != 0) overlaps++;
          }
          flat_mine.emplace_back(p, size);
        }
      } else {
        size_t k = rng() % flat_mine.size();
        size_t q0 = (U(flat_mine[k].first) - 0x40000000) / 16;
        for (size_t q = q0; q < q0 + flat_mine[k].second / 16; q++) {
          if (__atomic_exchange_n(&shadow[q], uint8_t{0}, __ATOMIC_RELAXED) != id + 1) overlaps++;
        }
        vmem_free(flat, flat_mine[k].first, flat_mine[k].second);
        flat_mine[k] = flat_mine.back();
        flat_mine.pop_back();
      }
    }
    for (auto& [p, size] : mine) vmem_free(child, p, size);
    for (auto& [p, size] : flat_mine) {
      size_t q0 = (U(p) - 0x40000000) / 16;
      for (size_t q = q0; q < q0 + size / 16; q++) __atomic_store_n(&shadow[q], uint8_t{0}, __ATOMIC_RELAXED);
      vmem_free(flat, p, size);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps, 0);
  EXPECT_TRUE(g_errors.empty());
  EXPECT_EQ(vmem_size(child, VMEM_ALLOC), 0u);
  EXPECT_EQ(vmem_size(flat, VMEM_ALLOC), 0u);
  EXPECT_EQ(stats(flat).segs_free, 1u);
  EXPECT_EQ(g_imports, g_releases);
  EXPECT_EQ(vmem_size(src, VMEM_ALLOC), 0u);
}

// --- A randomized run against a model ---------------------------------------
// Every allocation is checked against the model (inside a span, clear of
// everything live, every constraint met) and so is every refusal: a null
// return must leave the model with no place that fits.

struct Model {
  struct Live {
    size_t asked, rounded;
    bool x;
  };
  std::map<uintptr_t, Live> live;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  size_t bytes = 0;

  // [p, p + size) is inside one span and overlaps nothing live.
  void add(uintptr_t p, size_t asked, size_t rounded, bool x) {
    bool inside = false;
    for (auto& [b, e] : spans) inside |= p >= b && p + rounded <= e;
    EXPECT_TRUE(inside) << std::hex << p;
    auto it = live.lower_bound(p);
    if (it != live.end()) {
      EXPECT_LE(p + rounded, it->first) << std::hex << p;
    }
    if (it != live.begin()) {
      --it;
      EXPECT_LE(it->first + it->second.rounded, p) << std::hex << p;
    }
    live[p] = Live{asked, rounded, x};
    bytes += rounded;
  }

  // Is there room for `rounded` bytes inside a span, clear of every live
  // segment, at an address that is phase modulo align, not crossing a
  // multiple of nocross (0: no such limit), at or above lo and ending at or
  // below hi (0: no bound)? By brute force over the free gaps, candidate by
  // candidate: the model shares none of vmem's arithmetic.
  bool fits(size_t rounded, size_t align, size_t phase, size_t nocross, uintptr_t lo, uintptr_t hi) const {
    auto gap_fits = [&](uintptr_t from, uintptr_t to) {
      if (from < lo) from = lo;
      if (hi && to > hi) to = hi;
      uintptr_t x = from - from % align + phase;
      if (x < from) x += align;
      for (; x + rounded <= to; x += align)
        if (!nocross || x / nocross == (x + rounded - 1) / nocross) return true;
      return false;
    };
    for (auto& [b, e] : spans) {
      uintptr_t from = b;
      for (auto it = live.lower_bound(b); it != live.end() && it->first < e; ++it) {
        if (gap_fits(from, it->first)) return true;
        from = it->first + it->second.rounded;
      }
      if (gap_fits(from, e)) return true;
    }
    return false;
  }
  unsigned refusals_checked = 0, xrefusals_checked = 0;  // nulls the model agreed had no fit
};

size_t pow2_at_least(size_t x) {
  size_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

void randomized(vmem_t* a, Model& m, size_t q, unsigned seed, int steps, bool constrained) {
  std::mt19937_64 rng(seed);
  const int policies[] = {0, VM_INSTANTFIT, VM_BESTFIT, VM_NEXTFIT};
  for (int step = 0; step < steps; step++) {
    unsigned op = rng() % 100;
    if (op < 45 || m.live.empty()) {
      size_t size = 1 + rng() % (rng() % 8 == 0 ? 64 * q : 8 * q);
      int policy = policies[rng() % 4];
      void* p = vmem_alloc(a, size, VM_NOSLEEP | policy);
      if (p) {
        m.add(U(p), size, (size + q - 1) / q * q, false);
      } else {
        // Every policy searches until it finds a fit (mm/vmem.cpp, Free
        // lists).
        EXPECT_FALSE(m.fits((size + q - 1) / q * q, q, 0, 0, 0, 0))
            << "step " << step << ": vmem_alloc(" << size << ", policy " << policy << ") failed with room left";
        m.refusals_checked++;
      }
    } else if (op < 60 && constrained) {
      size_t size = 1 + rng() % (16 * q);
      size_t rounded = (size + q - 1) / q * q;
      size_t align = rng() % 3 == 0 ? 0 : q << (rng() % 8);
      size_t a_eff = align ? align : q;
      size_t phase = align ? (rng() % (align / q)) * q : 0;
      size_t nocross = 0;
      if (rng() % 4 == 0) nocross = pow2_at_least(std::max(a_eff, phase + rounded)) << (rng() % 2);
      uintptr_t lo = 0, hi = 0;
      if (rng() % 4 == 0) {
        auto& sp = m.spans[rng() % m.spans.size()];
        lo = sp.first + (rng() % ((sp.second - sp.first) / q)) * q;
        hi = lo + (1 + rng() % 256) * q * 16;
      }
      int policy = policies[rng() % 4];
      void* p = vmem_xalloc(a, size, align, phase, nocross, P(lo), P(hi), VM_NOSLEEP | policy);
      if (!p) {
        EXPECT_FALSE(m.fits(rounded, a_eff, phase, nocross, lo, hi))
            << "step " << step << ": vmem_xalloc(size " << size << ", align " << align << ", phase " << phase
            << ", nocross " << nocross << std::hex << ", min 0x" << lo << ", max 0x" << hi << std::dec << ", policy "
            << policy << ") failed with room left";
        m.xrefusals_checked++;
      }
      if (p) {
        uintptr_t x = U(p);
        EXPECT_EQ(x % a_eff, phase);
        if (nocross) {
          EXPECT_EQ(x / nocross, (x + rounded - 1) / nocross);
        }
        if (lo) {
          EXPECT_GE(x, lo);
        }
        if (hi) {
          EXPECT_LE(x + rounded, hi);
        }
        m.add(x, size, rounded, true);
      }
    } else {
      uintptr_t first = m.live.begin()->first, last = m.live.rbegin()->first;
      auto it = m.live.lower_bound(first + rng() % (last - first + 1));
      if (it->second.x) vmem_xfree(a, P(it->first), it->second.asked);
      else vmem_free(a, P(it->first), it->second.asked);
      m.bytes -= it->second.rounded;
      m.live.erase(it);
    }
    ASSERT_EQ(vmem_size(a, VMEM_ALLOC), m.bytes) << "step " << step;
    if (step % 1000 == 0) {
      ASSERT_TRUE(mm::vmem_verify(a)) << "step " << step;
    }
  }
  ASSERT_TRUE(g_errors.empty()) << g_errors[0].kind << " in " << g_errors[0].where;
  for (auto& [p, l] : m.live) {
    if (l.x) vmem_xfree(a, P(p), l.asked);
    else vmem_free(a, P(p), l.asked);
  }
  m.live.clear();
  m.bytes = 0;
  EXPECT_EQ(vmem_size(a, VMEM_ALLOC), 0u);
  EXPECT_TRUE(mm::vmem_verify(a));
}

TEST_F(vmem, RandomizedAgainstAModel) {
  Arena a(vmem_create("t_rand", P(0x100000), 0x40000, 16, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  ASSERT_NE(vmem_add(a, P(0x200000), 0x20000, VM_SLEEP), nullptr);
  ASSERT_NE(vmem_add(a, P(0x300000), 0x10000, VM_SLEEP), nullptr);
  Model m;
  m.spans = {{0x100000, 0x140000}, {0x200000, 0x220000}, {0x300000, 0x310000}};
  randomized(a, m, 16, 20240601, 30000, true);
  mm::VmemStats s = stats(a);
  EXPECT_EQ(s.segs_free, 3u);  // one whole free segment per span
  EXPECT_GT(s.failures, 0u);   // the run did fill the arena at times
  // and the model confirmed refusals of both kinds
  EXPECT_GT(m.refusals_checked, 0u);
  EXPECT_GT(m.xrefusals_checked, 0u);
  printf("[          ] refusals the model found no room for: %u vmem_alloc, %u vmem_xalloc\n", m.refusals_checked,
         m.xrefusals_checked);
}

TEST_F(vmem, RandomizedWithImports) {
  g_imports = g_releases = 0;
  Arena src(vmem_create("t_rsrc", P(0x10000000), 64 << 20, 4096, nullptr, nullptr, nullptr, 0, VM_SLEEP));
  Arena child(vmem_create("t_rchild", nullptr, 0, 64, counting_import, counting_release, src, 0, VM_SLEEP));
  Model m;
  m.spans = {{0x10000000, 0x14000000}};
  randomized(child, m, 64, 99, 20000, false);
  EXPECT_GT(g_imports, 10);
  EXPECT_EQ(g_imports, g_releases);
  EXPECT_EQ(stats(child).spans, 0u);
  EXPECT_EQ(vmem_size(src, VMEM_ALLOC), 0u);
}


// --- Against exact free lists -----------------------------------------------

// Free lists as mm/vmem.cpp (Free lists) defines them, with every segment
// always on the list of its size: list i holds the free segments of
// [2^i, 2^(i+1)) quanta, newest first, and a segment that changes class
// moves to the head of its new list. Instant fit and best fit as vmem's,
// for unconstrained requests in an arena of quantum 1 over spans that are
// not adjacent. vmem keeps one segment lazily above its list; every address
// it returns must still be this model's.
struct ExactLists {
  struct Seg {
    uintptr_t end;
    unsigned list;
  };
  std::map<uintptr_t, Seg> segs;                                                        // free segments by start
  std::vector<std::vector<uintptr_t>> lists = std::vector<std::vector<uintptr_t>>(64);  // starts, newest first

  static unsigned cls(uintptr_t n) { return 63 - static_cast<unsigned>(__builtin_clzll(n)); }
  void push(uintptr_t start) {
    unsigned i = cls(segs[start].end - start);
    segs[start].list = i;
    lists[i].insert(lists[i].begin(), start);
  }
  void drop(uintptr_t start) {
    auto& l = lists[segs[start].list];
    l.erase(std::find(l.begin(), l.end(), start));
  }
  void rekey(uintptr_t from, uintptr_t to) {  // same list, same place
    auto& l = lists[segs[from].list];
    *std::find(l.begin(), l.end(), from) = to;
    Seg s = segs[from];
    segs.erase(from);
    segs[to] = s;
  }
  void reclass(uintptr_t start) {
    if (cls(segs[start].end - start) != segs[start].list) {
      drop(start);
      push(start);
    }
  }
  void add_span(uintptr_t base, uintptr_t size) {
    segs[base] = Seg{base + size, 0};
    push(base);
  }
  uintptr_t take(uintptr_t start, uintptr_t n) {  // from the front
    if (segs[start].end - start == n) {
      drop(start);
      segs.erase(start);
    } else {
      rekey(start, start + n);
      reclass(start + n);
    }
    return start;
  }
  uintptr_t instant(uintptr_t n) {
    unsigned floor = cls(n), sure = floor + ((n & (n - 1)) != 0);
    for (unsigned i = sure; i < 64; i++)
      if (!lists[i].empty()) return take(lists[i].front(), n);
    for (uintptr_t s : lists[floor])
      if (segs[s].end - s >= n) return take(s, n);
    return 0;
  }
  uintptr_t best(uintptr_t n) {
    for (unsigned i = cls(n); i < 64; i++) {
      uintptr_t found = 0, found_size = 0;
      for (uintptr_t s : lists[i]) {
        uintptr_t size = segs[s].end - s;
        if (size >= n && (!found || size < found_size)) {
          found = s;
          found_size = size;
          if (size == n) break;
        }
      }
      if (found) return take(found, n);
    }
    return 0;
  }
  void release(uintptr_t start, uintptr_t n) {
    uintptr_t end = start + n;
    bool next = segs.count(end) != 0;
    uintptr_t prev = 0;
    auto it = segs.lower_bound(start);
    if (it != segs.begin() && std::prev(it)->second.end == start) prev = std::prev(it)->first;
    if (prev && next) {
      uintptr_t next_end = segs[end].end;
      drop(end);
      segs.erase(end);
      segs[prev].end = next_end;
      reclass(prev);
    } else if (next) {
      rekey(end, start);
      reclass(start);
    } else if (prev) {
      segs[prev].end = end;
      reclass(prev);
    } else {
      segs[start] = Seg{end, 0};
      push(start);
    }
  }
};

TEST_F(vmem, ChoicesAreThoseOfExactFreeLists) {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    // A power-of-two span (its one segment leaves its list at the first
    // allocation) and one that is not.
    Arena a(vmem_create("t_exact", P(1 << 20), 4096, 1, nullptr, nullptr, nullptr, 0, VM_SLEEP));
    ASSERT_NE(vmem_add(a, P(1 << 24), 3000, VM_SLEEP), nullptr);
    ExactLists m;
    m.add_span(1 << 20, 4096);
    m.add_span(1 << 24, 3000);
    std::mt19937_64 rng(seed);
    std::vector<std::pair<uintptr_t, size_t>> live;
    for (int step = 0; step < 20000; step++) {
      if (live.empty() || rng() % 100 < 52) {
        size_t size = 1 + rng() % (rng() % 4 == 0 ? 1024 : 64);
        bool best = rng() % 5 == 0;
        uintptr_t want = best ? m.best(size) : m.instant(size);
        void* p = vmem_alloc(a, size, VM_NOSLEEP | (best ? VM_BESTFIT : 0));
        ASSERT_EQ(U(p), want) << "seed " << seed << " step " << step << " size " << size << (best ? " best fit" : "");
        if (p) live.emplace_back(U(p), size);
      } else {
        size_t k = rng() % live.size();
        vmem_free(a, P(live[k].first), live[k].second);
        m.release(live[k].first, live[k].second);
        live[k] = live.back();
        live.pop_back();
      }
      if (step % 97 == 0) {
        ASSERT_TRUE(mm::vmem_verify(a)) << "seed " << seed << " step " << step;
      }
    }
    for (auto& [p, size] : live) vmem_free(a, P(p), size);
    EXPECT_EQ(stats(a).segs_free, 2u);
  }
  EXPECT_TRUE(g_errors.empty());
}

}  // namespace
