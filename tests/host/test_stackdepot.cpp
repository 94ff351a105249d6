// SPDX-License-Identifier: Apache-2.0
// Host tests of the stack depot (mm/stackdepot.cpp) under ASan and UBSan.
// One depot per process, never full here (test_stackdepot_full.cpp fills
// one): every test uses frames of its own, so they run in any order.
#include <gtest/gtest.h>
#include <mm/stackdepot.h>
#include <mm/page.h>
#include <cstring>
#include <random>
#include <vector>

extern "C" char __executable_start[], etext[];

namespace {

using mm::StackHandle;
constexpr size_t kPool = 256 << 10;

void init() { ASSERT_TRUE(mm::stackdepot_init(kPool)); }

// A made-up trace: text-like addresses, distinct per (tag, n).
std::vector<uintptr_t> trace(uintptr_t tag, unsigned n) {
  std::vector<uintptr_t> v(n);
  for (unsigned i = 0; i < n; i++) v[i] = 0x400000 + (tag << 12) + i * 0x24;
  return v;
}

std::vector<uintptr_t> fetch(StackHandle h) {
  const uintptr_t* pcs = nullptr;
  unsigned n = mm::stackdepot_fetch(h, &pcs);
  if (n == 0) {
    EXPECT_EQ(pcs, nullptr);
    return {};
  }
  return std::vector<uintptr_t>(pcs, pcs + n);
}

mm::StackDepotStats stats() {
  mm::StackDepotStats s;
  mm::stackdepot_stats(s);
  return s;
}

size_t record_bytes(unsigned n) { return (16 + n * sizeof(uintptr_t) + 7) & ~size_t{7}; }

TEST(stackdepot, InitIsIdempotentAndBounded) {
  init();
  mm::StackDepotStats a = stats();
  EXPECT_TRUE(mm::stackdepot_init(4 * kPool));  // a second call changes nothing
  mm::StackDepotStats b = stats();
  EXPECT_EQ(a.bytes_total, kPool);  // the whole pool, bucket table included
  EXPECT_EQ(b.bytes_total, a.bytes_total);
  EXPECT_EQ(mm::stackdepot_pages() * mm::kPageBytes, a.bytes_total);
  EXPECT_LE(a.bytes_used, a.bytes_total);
}

TEST(stackdepot, IdenticalTracesShareAHandle) {
  init();
  std::vector<uintptr_t> t = trace(1, 9), copy = t;
  uint64_t before = stats().traces;
  StackHandle h = mm::stackdepot_save(t.data(), 9);
  ASSERT_NE(h, 0u);
  EXPECT_EQ(mm::stackdepot_save(copy.data(), 9), h);
  EXPECT_EQ(mm::stackdepot_save(t.data(), 9), h);
  EXPECT_EQ(stats().traces, before + 1);
  EXPECT_LT(h, 1u << mm::kStackHandleBits);
}

TEST(stackdepot, DifferentTracesDoNot) {
  init();
  std::vector<uintptr_t> t = trace(2, 10);
  StackHandle h = mm::stackdepot_save(t.data(), 10);
  ASSERT_NE(h, 0u);
  std::vector<uintptr_t> other = t;
  other[7] += 4;  // one frame differs
  StackHandle h2 = mm::stackdepot_save(other.data(), 10);
  StackHandle prefix = mm::stackdepot_save(t.data(), 9);  // a prefix is another trace
  other = t;
  std::swap(other[0], other[1]);  // same frames, another order
  StackHandle swapped = mm::stackdepot_save(other.data(), 10);
  EXPECT_NE(h2, 0u);
  EXPECT_NE(prefix, 0u);
  EXPECT_NE(swapped, 0u);
  EXPECT_NE(h2, h);
  EXPECT_NE(prefix, h);
  EXPECT_NE(swapped, h);
  EXPECT_NE(prefix, h2);
  EXPECT_EQ(fetch(prefix), std::vector<uintptr_t>(t.begin(), t.begin() + 9));
}

TEST(stackdepot, FetchReturnsExactlyWhatWasSaved) {
  init();
  std::mt19937_64 rng(3);
  std::vector<std::pair<StackHandle, std::vector<uintptr_t>>> saved;
  for (unsigned i = 0; i < 400; i++) {
    unsigned n = 1 + i % mm::kStackDepotMaxFrames;
    std::vector<uintptr_t> t(n);
    for (auto& pc : t) pc = 0x7f0000000000ull + (rng() & 0xffffffffffull);
    StackHandle h = mm::stackdepot_save(t.data(), n);
    ASSERT_NE(h, 0u);
    saved.emplace_back(h, t);
  }
  for (auto& [h, t] : saved) {
    EXPECT_EQ(fetch(h), t);
    EXPECT_EQ(mm::stackdepot_save(t.data(), static_cast<unsigned>(t.size())), h);  // still found
  }
}

TEST(stackdepot, LongTracesAreClamped) {
  init();
  std::vector<uintptr_t> t = trace(4, 40);
  StackHandle h = mm::stackdepot_save(t.data(), 40);
  ASSERT_NE(h, 0u);
  std::vector<uintptr_t> first(t.begin(), t.begin() + mm::kStackDepotMaxFrames);
  EXPECT_EQ(fetch(h), first);
  EXPECT_EQ(mm::stackdepot_save(first.data(), mm::kStackDepotMaxFrames), h);
  EXPECT_EQ(mm::stackdepot_save(t.data(), mm::kStackDepotMaxFrames + 1), h);
}

TEST(stackdepot, HandleZeroIsNoBacktrace) {
  init();
  std::vector<uintptr_t> t = trace(5, 3);
  EXPECT_EQ(mm::stackdepot_save(t.data(), 0), 0u);
  EXPECT_EQ(mm::stackdepot_save(nullptr, 0), 0u);
  const uintptr_t* pcs = t.data();
  EXPECT_EQ(mm::stackdepot_fetch(0, &pcs), 0u);
  EXPECT_EQ(pcs, nullptr);
}

TEST(stackdepot, InvalidHandlesFetchNothing) {
  init();
  std::vector<uintptr_t> t = trace(6, 12);
  StackHandle h = mm::stackdepot_save(t.data(), 12);
  ASSERT_NE(h, 0u);
  // Inside the record (its header, its frames), past the last record, in
  // no chunk, beyond the handle bits, and the smallest values.
  for (StackHandle bad :
       {h + 1, h + 2, h + 5, h + 1000, h + (1u << 13), (1u << mm::kStackHandleBits) + h, ~0u, 1u, 8191u, 1u << 21})
    EXPECT_TRUE(fetch(bad).empty()) << "handle " << bad;
  EXPECT_EQ(fetch(h), t);
}

TEST(stackdepot, StatsCountTracesAndBytes) {
  init();
  mm::StackDepotStats a = stats();
  std::vector<uintptr_t> t3 = trace(7, 3), t16 = trace(8, 16);
  ASSERT_NE(mm::stackdepot_save(t3.data(), 3), 0u);
  ASSERT_NE(mm::stackdepot_save(t16.data(), 16), 0u);
  ASSERT_NE(mm::stackdepot_save(t16.data(), 16), 0u);  // no new record
  mm::StackDepotStats b = stats();
  EXPECT_EQ(b.traces, a.traces + 2);
  EXPECT_EQ(b.bytes_used, a.bytes_used + record_bytes(3) + record_bytes(16));
  EXPECT_EQ(b.bytes_total, a.bytes_total);
  EXPECT_EQ(b.dropped, 0u);
}

// Call sites. The empty asm after each call keeps it from becoming a tail
// call, so the site's own frame is in the trace.
__attribute__((noinline)) StackHandle site_a() {
  StackHandle h = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");
  return h;
}
__attribute__((noinline)) StackHandle site_b() {
  StackHandle h = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");
  return h;
}
// capture(1) from here: the trace starts in our caller.
__attribute__((noinline)) StackHandle skip_one() {
  StackHandle h = mm::stackdepot_capture(1);
  asm volatile("" ::: "memory");
  return h;
}
__attribute__((noinline)) void site_c(StackHandle* own, StackHandle* via_helper) {
  *own = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");
  *via_helper = skip_one();
  asm volatile("" ::: "memory");
}

bool in_text(uintptr_t pc) {
  return pc > reinterpret_cast<uintptr_t>(__executable_start) && pc < reinterpret_cast<uintptr_t>(etext);
}

TEST(stackdepot, CaptureNamesTheCallSite) {
  init();
  StackHandle a[3], b;
  unsigned times = 3;
  asm("" : "+r"(times));  // a count the compiler cannot see: the loop stays one call site
  for (unsigned i = 0; i < times; i++) a[i] = site_a();
  b = site_b();
  ASSERT_NE(a[0], 0u);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(a[1], a[0]);
  EXPECT_EQ(a[2], a[0]);
  EXPECT_NE(b, a[0]);
  std::vector<uintptr_t> fa = fetch(a[0]), fb = fetch(b);
  ASSERT_GE(fa.size(), 2u);
  ASSERT_GE(fb.size(), 2u);
  // The first frame is the return address inside the site itself.
  EXPECT_GT(fa[0], reinterpret_cast<uintptr_t>(&site_a));
  EXPECT_LT(fa[0], reinterpret_cast<uintptr_t>(&site_a) + 256);
  EXPECT_GT(fb[0], reinterpret_cast<uintptr_t>(&site_b));
  EXPECT_LT(fb[0], reinterpret_cast<uintptr_t>(&site_b) + 256);
  // The second, the return address into this test, at two call sites.
  EXPECT_TRUE(in_text(fa[1]));
  EXPECT_TRUE(in_text(fb[1]));
  EXPECT_NE(fa[1], fb[1]);
}

TEST(stackdepot, CaptureSkipsTheCallersFrames) {
  init();
  StackHandle own = 0, via = 0;
  site_c(&own, &via);
  ASSERT_NE(own, 0u);
  ASSERT_NE(via, 0u);
  std::vector<uintptr_t> fo = fetch(own), fv = fetch(via);
  ASSERT_GE(fo.size(), 2u);
  ASSERT_EQ(fv.size(), fo.size());
  // Both start inside site_c (at its two calls), and the rest is the same.
  EXPECT_NE(fo[0], fv[0]);
  for (uintptr_t pc : {fo[0], fv[0]}) {
    EXPECT_GT(pc, reinterpret_cast<uintptr_t>(&site_c));
    EXPECT_LT(pc, reinterpret_cast<uintptr_t>(&site_c) + 256);
  }
  for (size_t i = 1; i < fo.size(); i++) EXPECT_EQ(fo[i], fv[i]) << "frame " << i;
}

}  // namespace
