// SPDX-License-Identifier: Apache-2.0
// Host tests of the page-frame allocator (mm/page.cpp) over the host's
// "physical memory" (mm/host/platform.cpp). Each test re-initialises the
// allocator (page_reset_for_tests) over the same layout: two banks given as
// overlapping and adjacent pieces, with reserved ranges inside, across and
// outside them.
#include <gtest/gtest.h>
#include <mm/host.h>
#include <mm/alloc_tag.h>
#include <mm/page.h>
#include <mm/platform.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace {

using namespace mm;

constexpr uint64_t KiB = 1024, MiB = KiB * 1024;
constexpr uint64_t kLayoutBytes = 64 * MiB;  // the layout below fits in this

class PageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host::init_memory();
    if (host::memory().phys_size < kLayoutBytes) GTEST_SKIP() << "needs 64 MiB of host memory (MM_HOST_MEMORY)";
    B = host::memory().phys_base;
    // Bank 0: unaligned ends, trimmed to [B+20K, B+24M-4K).
    // Bank 1: [B+32M, B+50M) given as two overlapping pieces and an adjacent one.
    banks = {{B + 36 * MiB, 12 * MiB},     {B + 16 * KiB + 0x123, 24 * MiB - 0x800 - 16 * KiB - 0x123},
             {B + 56 * MiB + 0x10, 0x7f0},                     // less than a frame: ignored
             {B + 32 * MiB, 8 * MiB},      {B + 60 * MiB, 0},  // empty
             {B + 48 * MiB, 2 * MiB}};
    reserved = {{B + 1 * MiB, 0x2345},       // 3 frames
                {B + 9 * MiB, 2 * MiB + 1},  // overlaps the next
                {B + 8 * MiB, 2 * MiB},
                {B + 26 * MiB, 1 * MiB},             // between the banks
                {B + 31 * MiB, 1 * MiB + 8 * KiB},   // across bank 1's start
                {B + 40 * MiB - 100, 200},           // 2 frames
                {B + 33 * MiB, 0},                   // empty
                {B + 50 * MiB - 4 * KiB, 4 * MiB}};  // bank 1's last frame and beyond
    page_reset_for_tests();
    ASSERT_TRUE(page_init(banks.data(), static_cast<unsigned>(banks.size()), reserved.data(),
                          static_cast<unsigned>(reserved.size())));
    page_stats(initial);
    ASSERT_TRUE(page_verify());
  }
  void TearDown() override { page_reset_for_tests(); }

  static PageStats stats() {
    PageStats s;
    page_stats(s);
    return s;
  }
  static uint64_t free_pages() { return stats().free_pages; }
  // A single page of the hot bank (bank 0, the largest), whose free takes
  // the fast path (free_fast); 0 if none came.
  uint64_t hot_page() const {
    std::vector<uint64_t> others;
    uint64_t pa;
    while ((pa = page_alloc(0, KM_NOSLEEP)) && !(pa >= B && pa < B + 24 * MiB)) others.push_back(pa);
    for (uint64_t o : others) page_free(o, 0);
    return pa;
  }
  // The buddy lists after every cache is drained are exactly those after init.
  void expect_fully_coalesced() {
    page_drain_this_cpu();
    PageStats s = stats();
    EXPECT_EQ(s.pcp_pages, 0u);
    EXPECT_EQ(s.free_pages, initial.free_pages);
    for (unsigned o = 0; o <= kMaxOrder; o++) EXPECT_EQ(s.free_blocks[o], initial.free_blocks[o]) << "order " << o;
    EXPECT_TRUE(page_verify());
  }
  static void* va(uint64_t pa) { return plat::phys_to_virt(pa); }
  static void tag(uint64_t pa, unsigned order, uint64_t value) {
    auto* p = static_cast<uint64_t*>(va(pa));
    p[0] = value;
    p[((kPageBytes << order) / sizeof(uint64_t)) - 1] = ~value;
  }
  static bool tagged(uint64_t pa, unsigned order, uint64_t value) {
    auto* p = static_cast<uint64_t*>(va(pa));
    return p[0] == value && p[((kPageBytes << order) / sizeof(uint64_t)) - 1] == ~value;
  }

  uint64_t B = 0;
  std::vector<PhysRange> banks, reserved;
  PageStats initial{};
};

// CTest names are "page.<Test>" (ctest -R page).
using page = PageTest;

// An independent count of the allocatable frames: frames of the banks minus
// reserved frames minus each bank's descriptor frames.
TEST_F(page, InitCountsAreExact) {
  const uint64_t nframes = kLayoutBytes / kPageBytes;
  std::vector<bool> ram(nframes), res(nframes);
  for (const PhysRange& b : banks) {
    uint64_t first = (b.base - B + kPageBytes - 1) / kPageBytes, end = (b.base + b.size - B) / kPageBytes;
    for (uint64_t f = first; f < end; f++) ram[f] = true;
  }
  for (const PhysRange& r : reserved) {
    if (!r.size) continue;
    uint64_t first = (r.base - B) / kPageBytes, end = (r.base + r.size - B + kPageBytes - 1) / kPageBytes;
    for (uint64_t f = first; f < end && f < nframes; f++) res[f] = true;
  }
  // Banks as maximal runs of RAM frames. Each frame has a descriptor, and
  // allocation profiling's reference after them unless its mode is never.
  const uint64_t per_frame = sizeof(Page) + (prof_mode() != ProfMode::kNever ? sizeof(uint32_t) : 0);
  std::set<uint64_t> descriptor_frames;
  uint64_t usable = 0, descriptors = 0, ram_frames = 0;
  unsigned nbanks = 0;
  for (uint64_t f = 0; f < nframes;) {
    if (!ram[f]) {
      f++;
      continue;
    }
    uint64_t e = f;
    while (e < nframes && ram[e]) e++;
    nbanks++;
    ram_frames += e - f;
    uint64_t need = ((e - f) * per_frame + kPageBytes - 1) / kPageBytes;
    descriptors += need;
    uint64_t at = plat::virt_to_phys(page_of_phys(B + f * kPageBytes)) / kPageBytes - B / kPageBytes;
    for (uint64_t i = at; i < at + need; i++) descriptor_frames.insert(i);
    for (uint64_t i = f; i < e; i++) usable += !res[i];
    f = e;
  }
  ASSERT_EQ(nbanks, 2u);
  EXPECT_EQ(ram_frames, (24 * MiB - 24 * KiB) / kPageBytes + 18 * MiB / kPageBytes);
  EXPECT_EQ(initial.descriptor_pages, descriptors);
  EXPECT_EQ(initial.total_pages, usable - descriptors);
  EXPECT_EQ(initial.free_pages, initial.total_pages);
  EXPECT_EQ(initial.pcp_pages, 0u);
  EXPECT_EQ(page_ram_bytes(), ram_frames * kPageBytes);
  uint64_t r = std::min<uint64_t>(std::max<uint64_t>(16, initial.total_pages / 256), 1024);
  EXPECT_EQ(initial.reserve_pages, r);
  uint64_t in_blocks = 0;
  for (unsigned o = 0; o <= kMaxOrder; o++) in_blocks += initial.free_blocks[o] << o;
  EXPECT_EQ(in_blocks, initial.free_pages);
  EXPECT_GT(initial.free_blocks[kMaxOrder], 0u);

  // Every frame's flags: reserved exactly where the model says, or where a
  // bank's descriptor array (and references) lives; every descriptor in it.
  for (uint64_t f = 0; f < nframes; f++) {
    if (!ram[f]) continue;
    uint64_t at = plat::virt_to_phys(page_of_phys(B + f * kPageBytes));
    EXPECT_TRUE(descriptor_frames.count(at / kPageBytes - B / kPageBytes)) << "frame " << f;
    EXPECT_TRUE(descriptor_frames.count((at + sizeof(Page) - 1) / kPageBytes - B / kPageBytes)) << "frame " << f;
  }
  EXPECT_EQ(descriptor_frames.size(), descriptors);
  for (uint64_t f = 0; f < nframes; f++) {
    Page* p = page_of_phys(B + f * kPageBytes);
    if (!ram[f]) {
      EXPECT_EQ(p, nullptr) << "frame " << f;
      continue;
    }
    ASSERT_NE(p, nullptr) << "frame " << f;
    bool want_reserved = res[f] || descriptor_frames.count(f);
    EXPECT_EQ((p->flags & kPageReserved) != 0, want_reserved) << "frame " << f;
  }
}

TEST_F(page, InitTwiceAndNoMemoryAreRefused) {
  EXPECT_FALSE(page_init(banks.data(), static_cast<unsigned>(banks.size()), nullptr, 0));
  PageStats s = stats();
  EXPECT_EQ(s.free_pages, initial.free_pages);
  EXPECT_TRUE(page_verify());

  page_reset_for_tests();
  EXPECT_FALSE(page_init(nullptr, 0, nullptr, 0));
  PhysRange bank{B, 1 * MiB}, all{B, 2 * MiB};
  EXPECT_FALSE(page_init(&bank, 1, &all, 1));
  PhysRange tiny{B, 2 * kPageBytes};  // its one descriptor frame leaves one page
  EXPECT_TRUE(page_init(&tiny, 1, nullptr, 0));
  EXPECT_EQ(stats().total_pages, 1u);
  EXPECT_EQ(stats().descriptor_pages, 1u);
  EXPECT_TRUE(page_verify());
}

TEST_F(page, AllocAndFreeEveryOrder) {
  for (unsigned o = 0; o <= kMaxOrder; o++) {
    uint64_t pa = page_alloc(o, KM_NOSLEEP);
    ASSERT_NE(pa, 0u) << "order " << o;
    EXPECT_EQ(pa % (kPageBytes << o), 0u) << "order " << o;
    Page* head = page_of_phys(pa);
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->flags, kPageHead);
    EXPECT_EQ(head->order, o);
    for (uint64_t i = 1; i < (uint64_t{1} << o); i++) {
      Page* t = page_of_phys(pa + i * kPageBytes);
      ASSERT_EQ(t, head + i);
      EXPECT_EQ(t->flags, kPageTail);
      EXPECT_EQ(t->owner, head);
    }
    std::memset(va(pa), 0xa5, kPageBytes << o);
    EXPECT_EQ(free_pages(), initial.free_pages - (uint64_t{1} << o));
    EXPECT_TRUE(page_verify());
    page_free(pa, o);
    EXPECT_EQ(free_pages(), initial.free_pages);
  }
  // One block of every order at once: aligned, disjoint.
  std::vector<std::pair<uint64_t, unsigned>> held;
  for (unsigned o = 0; o <= kMaxOrder; o++) {
    uint64_t pa = page_alloc(o, KM_NOSLEEP);
    ASSERT_NE(pa, 0u);
    for (auto& [q, qo] : held) EXPECT_TRUE(pa + (kPageBytes << o) <= q || q + (kPageBytes << qo) <= pa);
    held.push_back({pa, o});
  }
  EXPECT_TRUE(page_verify());
  for (auto it = held.rbegin(); it != held.rend(); ++it) page_free(it->first, it->second);
  expect_fully_coalesced();
  // Through the direct map.
  void* p = page_alloc_va(3, KM_NOSLEEP);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(page_of(p), page_of_phys(plat::virt_to_phys(p)));
  page_free_va(p, 3);
  EXPECT_EQ(page_alloc(kMaxOrder + 1, KM_NOSLEEP), 0u);
  EXPECT_EQ(page_alloc(kMaxOrder + 1, KM_SLEEP), 0u);  // cannot ever succeed: fails, does not hang
  EXPECT_EQ(stats().failures, 2u);
  expect_fully_coalesced();
}

// The physical heap's two ways to a run of contiguous frames (mm/segkmem.cpp,
// The physical heap): a buddy block split into single frames, and any run of
// free frames found by page_alloc_run; either way each frame is then freed on
// its own and everything coalesces back.
TEST_F(page, SplitBlockFramesAreFreedOneByOne) {
  uint64_t pa = page_alloc(3, KM_NOSLEEP);
  ASSERT_NE(pa, 0u);
  page_split(pa, 3);
  for (unsigned i = 0; i < 8; i++) {
    Page* p = page_of_phys(pa + i * kPageBytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->flags, kPageHead) << i;
    EXPECT_EQ(p->order, 0u) << i;
  }
  EXPECT_TRUE(page_verify());
  EXPECT_EQ(free_pages(), initial.free_pages - 8);
  for (unsigned i = 0; i < 8; i++) page_free(pa + i * kPageBytes, 0);
  EXPECT_EQ(stats().bad_frees, 0u);
  expect_fully_coalesced();
}

TEST_F(page, AllocRunFindsUnalignedRunsAcrossBlocks) {
  // Every frame taken, then a hole of 5 frames that no aligned block of 8
  // holds: page_alloc of order 3 fails, the run is found.
  page_drain_this_cpu();
  std::vector<uint64_t> all;
  for (uint64_t pa; (pa = page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE)) != 0;) all.push_back(pa);
  std::sort(all.begin(), all.end());
  size_t at = 0;  // five consecutive frames starting at an odd frame number
  for (size_t i = 0; i + 4 < all.size(); i++) {
    if (((all[i] >> kPageShift) & 1) && all[i + 4] == all[i] + 4 * kPageBytes) {
      at = i;
      break;
    }
  }
  ASSERT_NE(all[at + 4], 0u);
  for (size_t i = at; i < at + 5; i++) page_free(all[i], 0);
  page_drain_this_cpu();
  EXPECT_EQ(page_alloc(3, KM_NOSLEEP | KM_PUSHPAGE), 0u);
  uint64_t run = page_alloc_run(5, KM_NOSLEEP | KM_PUSHPAGE);
  EXPECT_EQ(run, all[at]);
  EXPECT_EQ(page_alloc_run(1, KM_NOSLEEP | KM_PUSHPAGE), 0u);  // nothing else is free
  for (unsigned i = 0; i < 5; i++) EXPECT_EQ(page_of_phys(run + i * kPageBytes)->flags, kPageHead);
  EXPECT_TRUE(page_verify());
  for (unsigned i = 0; i < 5; i++) all[at + i] = run + i * kPageBytes;
  for (uint64_t pa : all) page_free(pa, 0);
  EXPECT_EQ(stats().bad_frees, 0u);
  expect_fully_coalesced();
  // A run longer than a block, from free memory: what lies past it goes back.
  uint64_t big = page_alloc_run(1500, KM_NOSLEEP);
  ASSERT_NE(big, 0u);
  EXPECT_EQ(free_pages(), initial.free_pages - 1500);
  EXPECT_TRUE(page_verify());
  for (unsigned i = 0; i < 1500; i++) page_free(big + i * kPageBytes, 0);
  expect_fully_coalesced();
}

TEST_F(page, ExhaustionThenFullRecovery) {
  std::vector<uint64_t> got;
  for (uint64_t pa; (pa = page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE));) got.push_back(pa);
  EXPECT_EQ(got.size(), initial.free_pages);
  EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()).size(), got.size());
  EXPECT_EQ(free_pages(), 0u);
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE), 0u);
  EXPECT_TRUE(page_verify());
  std::mt19937 rng(7);
  std::shuffle(got.begin(), got.end(), rng);
  for (uint64_t pa : got) page_free(pa, 0);
  EXPECT_EQ(free_pages(), initial.free_pages);
  expect_fully_coalesced();

  // Mixed orders: large blocks until none is left, then smaller ones.
  std::vector<std::pair<uint64_t, unsigned>> held;
  uint64_t pages = 0;
  for (int o = kMaxOrder; o >= 0; o--)
    for (uint64_t pa; (pa = page_alloc(static_cast<unsigned>(o), KM_NOSLEEP | KM_PUSHPAGE));) {
      held.push_back({pa, static_cast<unsigned>(o)});
      pages += uint64_t{1} << o;
    }
  EXPECT_EQ(pages, initial.free_pages);
  EXPECT_EQ(free_pages(), 0u);
  std::shuffle(held.begin(), held.end(), rng);
  for (auto& [pa, o] : held) page_free(pa, o);
  expect_fully_coalesced();
}

// The stack is top and limit over a sentinel slot: a free into an empty
// cache is cached (top steps off the sentinel), the pop takes it back, and
// the next pop finds the sentinel and refills.
TEST_F(page, FreeIntoAnEmptyCacheIsCachedAndThePopAfterItRefills) {
  uint64_t a = hot_page();
  ASSERT_NE(a, 0u);
  page_drain_this_cpu();
  ASSERT_EQ(stats().pcp_pages, 0u);
  page_free(a, 0);
  EXPECT_EQ(stats().pcp_pages, 1u);
  EXPECT_EQ(page_of_phys(a)->flags, kPagePcp);
  EXPECT_TRUE(page_verify());
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP), a);  // off the one slot above the sentinel
  EXPECT_EQ(stats().pcp_pages, 0u);
  uint64_t b = page_alloc(0, KM_NOSLEEP);  // the sentinel: alloc_slow refills
  ASSERT_NE(b, 0u);
  EXPECT_EQ(stats().pcp_pages, kPageCacheBatch - 1);
  EXPECT_TRUE(page_verify());
  page_free(a, 0);
  page_free(b, 0);
  EXPECT_EQ(free_pages(), initial.free_pages);
  EXPECT_TRUE(page_verify());
}

// A thread with no CPU yet reads the [kMaxCpus] cache, always empty and
// full: its first free is not pushed there (shared by every such thread)
// but goes to free_pa, which gives it a CPU and caches the page in that
// CPU's stack; page_verify checks the [kMaxCpus] one stayed empty.
TEST_F(page, FirstFreeOfAThreadWithNoCpuLandsInItsOwnCache) {
  uint64_t a = hot_page();
  ASSERT_NE(a, 0u);
  uint64_t before = stats().pcp_pages;
  std::thread other([&] {
    page_free(a, 0);
    EXPECT_EQ(page_of_phys(a)->flags, kPagePcp);
    plat::cpu_id();                           // claimed already (free_pa): the same CPU
    EXPECT_EQ(page_alloc(0, KM_NOSLEEP), a);  // from its own cache, not the [kMaxCpus] one
    page_free(a, 0);
    EXPECT_EQ(stats().pcp_pages, before + 1);
    EXPECT_TRUE(page_verify());
    page_drain_this_cpu();  // host: only a thread drains its own cache
  });
  other.join();
  expect_fully_coalesced();
}

TEST_F(page, PerCpuCache) {
  uint64_t a = page_alloc(0, KM_NOSLEEP);
  ASSERT_NE(a, 0u);
  PageStats s = stats();
  EXPECT_EQ(s.pcp_pages, kPageCacheBatch - 1);      // one batch came in, one page left
  EXPECT_EQ(s.free_pages, initial.free_pages - 1);  // cached pages count as free
  uint64_t b = page_alloc(0, KM_NOSLEEP);
  ASSERT_NE(b, 0u);
  EXPECT_NE(b, a);
  EXPECT_EQ(stats().pcp_pages, kPageCacheBatch - 2);
  page_free(b, 0);
  EXPECT_EQ(page_of_phys(b)->flags, kPagePcp);
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP), b);  // LIFO: the hot page comes back
  page_free(b, 0);
  page_free(a, 0);
  EXPECT_EQ(stats().pcp_pages, kPageCacheBatch);
  EXPECT_EQ(free_pages(), initial.free_pages);

  // Freeing many pages never overfills the cache.
  std::vector<uint64_t> held;
  for (unsigned i = 0; i < 3 * kPageCacheSize; i++) held.push_back(page_alloc(0, KM_NOSLEEP));
  for (uint64_t pa : held) {
    ASSERT_NE(pa, 0u);
    page_free(pa, 0);
    EXPECT_LE(stats().pcp_pages, kPageCacheSize);
  }
  EXPECT_GE(stats().pcp_pages, kPageCacheSize - kPageCacheBatch);
  EXPECT_EQ(free_pages(), initial.free_pages);
  EXPECT_TRUE(page_verify());
  page_drain_cpu_caches();  // host: the calling thread's cache
  EXPECT_EQ(stats().pcp_pages, 0u);
  expect_fully_coalesced();

  // Another CPU's cache counts as free, and only that CPU drains it.
  std::atomic<int> step{0};
  std::thread other([&] {
    uint64_t pa = page_alloc(0, KM_NOSLEEP);
    page_free(pa, 0);
    step = 1;
    while (step != 2) std::this_thread::yield();
    page_drain_this_cpu();
  });
  while (step != 1) std::this_thread::yield();
  page_drain_cpu_caches();
  EXPECT_EQ(stats().pcp_pages, kPageCacheBatch);
  EXPECT_EQ(free_pages(), initial.free_pages);
  step = 2;
  other.join();
  expect_fully_coalesced();
}

TEST_F(page, ReserveIsForPushpage) {
  const uint64_t R = initial.reserve_pages;
  ASSERT_GE(R, 16u);
  std::vector<uint64_t> held;
  for (uint64_t pa; (pa = page_alloc(0, KM_NOSLEEP));) held.push_back(pa);
  PageStats s = stats();
  EXPECT_EQ(held.size(), initial.free_pages - R);
  EXPECT_EQ(s.free_pages, R);
  EXPECT_EQ(s.pcp_pages, 0u);
  EXPECT_EQ(page_alloc(1, KM_NOSLEEP), 0u);
  EXPECT_EQ(stats().failures, 2u);
  // KM_PUSHPAGE may take the reserve, and what it takes is not cached.
  uint64_t big = page_alloc(1, KM_NOSLEEP | KM_PUSHPAGE);
  EXPECT_NE(big, 0u);
  std::vector<uint64_t> push;
  for (uint64_t pa; (pa = page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE));) push.push_back(pa);
  EXPECT_EQ(push.size() + 2, R);
  s = stats();
  EXPECT_EQ(s.free_pages, 0u);
  EXPECT_EQ(s.pushpage_allocs, R - 1);
  // Pages freed while below the reserve refill it, not a cache: NOSLEEP
  // still fails, PUSHPAGE gets them.
  page_free(push.back(), 0);
  push.pop_back();
  EXPECT_EQ(stats().pcp_pages, 0u);
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP), 0u);
  uint64_t again = page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE);
  EXPECT_NE(again, 0u);
  push.push_back(again);
  EXPECT_TRUE(page_verify());
  for (uint64_t pa : push) page_free(pa, 0);
  page_free(big, 1);
  EXPECT_EQ(free_pages(), R);
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP), 0u);
  for (uint64_t pa : held) page_free(pa, 0);
  EXPECT_NE(page_alloc(0, KM_NOSLEEP), 0u);  // above the reserve again (leaks one page until reset)
}

std::vector<uint64_t>* g_hook_pages;
int g_hook_calls;
void reclaim_hook() {
  g_hook_calls++;
  // Frees pages the "slab layer" held, and tries to recurse (refused).
  EXPECT_EQ(page_alloc(0, KM_NOSLEEP), 0u);
  while (!g_hook_pages->empty()) {
    page_free(g_hook_pages->back(), 0);
    g_hook_pages->pop_back();
  }
}

TEST_F(page, SleepRunsTheReclaimHookThenWaits) {
  std::vector<uint64_t> held;
  for (uint64_t pa; (pa = page_alloc(0, KM_NOSLEEP | KM_PUSHPAGE));) held.push_back(pa);
  ASSERT_EQ(free_pages(), 0u);
  // The hook frees the reserve plus a few: KM_SLEEP gets one without waiting.
  std::vector<uint64_t> slab(held.end() - static_cast<long>(initial.reserve_pages + 4), held.end());
  held.resize(held.size() - slab.size());
  g_hook_pages = &slab;
  g_hook_calls = 0;
  page_set_reclaim_hook(reclaim_hook);
  uint64_t pa = page_alloc(0, KM_SLEEP);
  EXPECT_NE(pa, 0u);
  EXPECT_EQ(g_hook_calls, 1);
  held.push_back(pa);
  page_set_reclaim_hook(nullptr);
  // Now nothing above the reserve is free: KM_SLEEP waits until another CPU
  // frees (and drains its cache, as a host thread must before it exits).
  while ((pa = page_alloc(0, KM_NOSLEEP))) held.push_back(pa);
  std::vector<uint64_t> give(held.end() - 40, held.end());
  held.resize(held.size() - give.size());
  std::atomic<bool> freeing{false};
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    freeing = true;
    for (uint64_t q : give) page_free(q, 0);
    page_drain_this_cpu();
  });
  pa = page_alloc(0, KM_SLEEP);
  EXPECT_TRUE(freeing);
  EXPECT_NE(pa, 0u);
  held.push_back(pa);
  other.join();
  for (uint64_t q : held) page_free(q, 0);
  expect_fully_coalesced();
}

TEST_F(page, PageOfFirstLastMiddleAndNonRam) {
  struct Bank {
    uint64_t first, last;
  } bank[] = {{B + 20 * KiB, B + 24 * MiB - 8 * KiB}, {B + 32 * MiB, B + 50 * MiB - 4 * KiB}};
  for (auto& b : bank) {
    for (uint64_t pa : {b.first, b.last, (b.first + b.last) / 2 & ~uint64_t{kPageBytes - 1}}) {
      Page* p = page_of_phys(pa);
      ASSERT_NE(p, nullptr) << std::hex << pa;
      EXPECT_EQ(page_to_phys(p), pa);
      EXPECT_EQ(page_of_phys(pa + kPageBytes - 1), p);  // any byte of the frame
      EXPECT_EQ(page_of(va(pa)), p);
      EXPECT_EQ(page_of(static_cast<char*>(va(pa)) + 123), p);
    }
    EXPECT_EQ(page_of_phys(b.first - 1), nullptr);
    EXPECT_EQ(page_of_phys(b.last + kPageBytes), nullptr);
  }
  EXPECT_EQ(page_of_phys(B + 16 * KiB + 0x200), nullptr);  // trimmed partial frame
  EXPECT_EQ(page_of_phys(B + 28 * MiB), nullptr);          // between the banks
  EXPECT_EQ(page_of_phys(0), nullptr);
  EXPECT_EQ(page_of_phys(~uint64_t{0}), nullptr);
  int on_stack = 0;
  EXPECT_EQ(page_of(&on_stack), nullptr);
  EXPECT_EQ(page_of(nullptr), nullptr);
  Page not_ours{};
  EXPECT_EQ(page_to_phys(&not_ours), 0u);
  EXPECT_EQ(page_to_phys(reinterpret_cast<Page*>(reinterpret_cast<char*>(page_of_phys(B + 32 * MiB)) + 8)), 0u);

  // A heap address finds the frame mapped behind it.
  uint64_t pa = page_alloc(0, KM_NOSLEEP);
  ASSERT_NE(pa, 0u);
  uintptr_t heap = host::memory().heap_base + 5 * kPageBytes;
  ASSERT_TRUE(plat::map_heap(heap, pa, kPageBytes));
  EXPECT_EQ(page_of(reinterpret_cast<void*>(heap + 100)), page_of_phys(pa));
  plat::unmap_heap(heap, kPageBytes);
  EXPECT_EQ(page_of(reinterpret_cast<void*>(heap + 100)), nullptr);
  page_free(pa, 0);
}

TEST_F(page, BadFreesAreReportedAndIgnored) {
  uint64_t one = page_alloc(0, KM_NOSLEEP), four = page_alloc(2, KM_NOSLEEP), eight = page_alloc(3, KM_NOSLEEP);
  ASSERT_TRUE(one && four && eight);
  // A page in the cache that was never handed out: the rest of one's batch.
  uint64_t in_cache = 0;
  for (uint64_t pa = B + 32 * MiB; pa < B + 50 * MiB && !in_cache; pa += kPageBytes)
    if (page_of_phys(pa)->flags == kPagePcp) in_cache = pa;
  for (uint64_t pa = B + 20 * KiB; pa < B + 24 * MiB - 4 * KiB && !in_cache; pa += kPageBytes)
    if (page_of_phys(pa)->flags == kPagePcp) in_cache = pa;
  ASSERT_NE(in_cache, 0u);
  page_free(one, 0);    // into the cache
  page_free(eight, 3);  // into the buddy lists
  const uint64_t free_before = free_pages();
  struct Bad {
    uint64_t pa;
    unsigned order;
    const char* why;
  };
  Bad bad[] = {
      {one, 0, "already free"},                 // double free, page in the cache
      {eight, 3, "already free"},               // double free of a block
      {eight + kPageBytes, 0, "already free"},  // a frame inside a free block
      {in_cache, 0, "already free"},            // a page in the per-CPU cache
      {four, 1, "wrong order"},
      {four, 3, "wrong order"},
      {four + 2 * kPageBytes, 1, "not its head"},  // a tail
      {four + 8, 2, "misaligned"},
      {four, kMaxOrder + 1, "order out of range"},
      {B + 28 * MiB, 0, "not RAM"},                                        // between the banks
      {B + 100 * MiB, 0, "not RAM"},                                       // past them
      {B + 8 * MiB, 0, "reserved"},                                        // "kernel image"
      {page_to_phys(page_of(page_of_phys(B + 32 * MiB))), 0, "reserved"},  // descriptor frame
  };
  testing::internal::CaptureStderr();
  for (const Bad& b : bad) page_free(b.pa, b.order);
  page_free_va(nullptr, 0);
  page_free_va(va(four), 0);
  std::string log = testing::internal::GetCapturedStderr();
  for (const Bad& b : bad) EXPECT_NE(log.find(b.why), std::string::npos) << b.why << "\n" << log;
  EXPECT_NE(log.find("caller"), std::string::npos);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), static_cast<long>(std::size(bad)) + 2) << log;
  PageStats s = stats();
  EXPECT_EQ(s.bad_frees, std::size(bad) + 2);
  EXPECT_EQ(s.free_pages, free_before);
  EXPECT_EQ(page_of_phys(four)->flags, kPageHead);  // untouched
  EXPECT_TRUE(page_verify());
  page_free(four, 2);
  EXPECT_EQ(stats().bad_frees, std::size(bad) + 2);
  expect_fully_coalesced();
}

// The order-0 fast path: a second free of a page sitting in the per-CPU
// cache, and of a slab-owned head, is caught (kPagePcp), never cached twice.
TEST_F(page, DoubleFreeThroughTheCacheNeverHandsAPageOutTwice) {
  uint64_t pa = page_alloc(0, KM_NOSLEEP), other = page_alloc(0, KM_NOSLEEP);
  ASSERT_TRUE(pa && other);
  page_of_phys(other)->flags |= kPageSlab;  // an owner's bit: still a valid free
  page_free(other, 0);
  EXPECT_EQ(page_of_phys(other)->flags, kPagePcp);
  page_free(pa, 0);
  testing::internal::CaptureStderr();
  page_free(pa, 0);
  page_free(other, 0);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("already free (in a CPU's page cache)"), std::string::npos) << log;
  EXPECT_EQ(stats().bad_frees, 2u);
  uint64_t got[kPageCacheSize];
  for (uint64_t& g : got) {
    g = page_alloc(0, KM_NOSLEEP);
    ASSERT_NE(g, 0u);
  }
  for (unsigned i = 0; i < kPageCacheSize; i++)
    for (unsigned j = i + 1; j < kPageCacheSize; j++) EXPECT_NE(got[i], got[j]);
  EXPECT_TRUE(page_verify());
  for (uint64_t g : got) page_free(g, 0);
  PageStats s = stats();
  EXPECT_EQ(s.allocs, s.frees);
  EXPECT_EQ(s.bad_frees, 2u);
  expect_fully_coalesced();
}

// Thousands of random allocs and frees against a model: the set of
// allocated blocks. Blocks never overlap, keep their contents, and the free
// count always matches.
TEST_F(page, RandomizedAgainstModel) {
  std::mt19937 rng(20240607);
  std::map<uint64_t, unsigned> model;  // pa -> order
  std::vector<uint64_t> keys;          // for picking a random block
  uint64_t used = 0;
  auto pick_order = [&]() -> unsigned {
    unsigned r = rng() % 100;
    if (r < 50) return 0;
    if (r < 85) return 1 + rng() % 3;
    return 4 + rng() % (kMaxOrder - 3);
  };
  for (int op = 0; op < 20000; op++) {
    bool alloc = model.empty() || rng() % 100 < (op % 4000 < 2500 ? 60u : 35u);
    if (alloc) {
      unsigned o = pick_order();
      int flag = rng() % 2 ? KM_NOSLEEP : KM_NOSLEEP | KM_PUSHPAGE;
      uint64_t pa = page_alloc(o, flag);
      if (!pa) continue;
      uint64_t len = kPageBytes << o;
      ASSERT_EQ(pa % len, 0u);
      auto it = model.lower_bound(pa);
      if (it != model.end()) {
        ASSERT_LE(pa + len, it->first) << "overlap";
      }
      if (it != model.begin()) {
        --it;
        ASSERT_LE(it->first + (kPageBytes << it->second), pa) << "overlap";
      }
      ASSERT_EQ(page_of_phys(pa)->flags, kPageHead);
      tag(pa, o, pa ^ 0x5a5a5a5a);
      model[pa] = o;
      keys.push_back(pa);
      used += uint64_t{1} << o;
    } else {
      size_t i = rng() % keys.size();
      uint64_t pa = keys[i];
      keys[i] = keys.back();
      keys.pop_back();
      unsigned o = model[pa];
      model.erase(pa);
      ASSERT_TRUE(tagged(pa, o, pa ^ 0x5a5a5a5a)) << "block changed while allocated";
      page_free(pa, o);
      used -= uint64_t{1} << o;
    }
    ASSERT_EQ(free_pages(), initial.total_pages - used) << "op " << op;
    if (op % 97 == 0) page_drain_cpu_caches();
    if (op % 1000 == 0) {
      ASSERT_TRUE(page_verify()) << "op " << op;
    }
  }
  EXPECT_EQ(stats().bad_frees, 0u);
  for (auto& [pa, o] : model) page_free(pa, o);
  expect_fully_coalesced();
}

// Several threads (CPUs) allocate order-0 and order-2 blocks into a shared
// pool and free blocks other threads allocated.
TEST_F(page, ThreadsAllocAndFreeEachOthersPages) {
  struct Block {
    uint64_t pa;
    unsigned order;
    uint64_t tag;
  };
  std::mutex mu;
  std::vector<Block> pool;
  std::atomic<uint64_t> corrupt{0}, allocated{0};
  constexpr int kThreads = 4, kIters = 20000;
  std::atomic<int> ready{0};
  auto worker = [&](int id) {
    std::mt19937 rng(static_cast<unsigned>(id) * 7919 + 1);
    ready++;
    while (ready < kThreads) std::this_thread::yield();  // start together
    for (int i = 0; i < kIters; i++) {
      if (rng() % 100 < 55) {
        unsigned o = rng() % 3 ? 0 : 2;
        uint64_t pa = page_alloc(o, KM_NOSLEEP);
        if (!pa) continue;
        uint64_t t = (uint64_t(id) << 32) | uint64_t(i);
        tag(pa, o, t);
        allocated++;
        std::lock_guard<std::mutex> g(mu);
        pool.push_back({pa, o, t});
      } else {
        Block b;
        {
          std::lock_guard<std::mutex> g(mu);
          if (pool.empty()) continue;
          size_t k = rng() % pool.size();
          b = pool[k];
          pool[k] = pool.back();
          pool.pop_back();
        }
        if (!tagged(b.pa, b.order, b.tag)) corrupt++;
        page_free(b.pa, b.order);
      }
    }
    page_drain_this_cpu();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  EXPECT_EQ(corrupt, 0u);
  EXPECT_GT(allocated, uint64_t{kThreads} * kIters / 3);
  EXPECT_EQ(stats().pcp_pages, 0u);
  uint64_t held = 0;
  for (const Block& b : pool) held += uint64_t{1} << b.order;
  EXPECT_EQ(free_pages(), initial.free_pages - held);
  EXPECT_TRUE(page_verify());
  for (const Block& b : pool) page_free(b.pa, b.order);
  EXPECT_EQ(stats().bad_frees, 0u);
  expect_fully_coalesced();
}

}  // namespace
