// SPDX-License-Identifier: Apache-2.0
// kmemleak (mm/kmemleak.cpp) on the host under ASan/UBSan: every rule of
// the scanner on a heap graph built for it. Leaked objects are made in
// noinline helpers and remembered only as encoded integers (~address), so
// no live frame or register of the test keeps them referenced.
#include <gtest/gtest.h>
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <mm/page.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <sched.h>
#include <thread>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Errors {
  static inline std::vector<std::string> seen;
  static void hook(const mm::MemError& e) { seen.push_back(e.kind); }
  mm::MemErrorHook old;
  Errors() : old(mm::set_error_hook(hook)) { seen.clear(); }
  ~Errors() { mm::set_error_hook(old); }
};

uintptr_t enc(const void* p) { return ~reinterpret_cast<uintptr_t>(p); }
void* dec(uintptr_t v) { return reinterpret_cast<void*>(~v); }

__attribute__((noinline)) std::set<uintptr_t> leaks() {  // its array: not in the test's frame
  const void* out[256];
  size_t n = kmemleak_leaks(out, 256);
  std::set<uintptr_t> s;
  for (size_t i = 0; i < n && i < 256; i++) s.insert(enc(out[i]));
  return s;
}

// Roots the test registers (the program's "globals").
void* g_roots[16];

struct Graph {
  uintptr_t lone, cycle_a, cycle_b, via_leaked, kept_interior_target, kept, big_leak, big_kept;
  uintptr_t past_end_target, ignored_holder_target, noscan_target, area_out, area_in, notleak;
};

__attribute__((noinline)) void build(Graph& g) {
  // Kept: a root points to kept, which points into the middle of another.
  auto** kept = static_cast<void**>(kmem_zalloc(64, KM_SLEEP));
  auto* target = static_cast<char*>(kmem_zalloc(100, KM_SLEEP));
  kept[0] = target + 57;  // interior pointer
  g_roots[0] = kept;
  g.kept = enc(kept);
  g.kept_interior_target = enc(target);
  // Leaked: a lone object; a cycle; one only referenced from a leaked one.
  auto** lone = static_cast<void**>(kmem_zalloc(72, KM_SLEEP));
  g.lone = enc(lone);
  auto** a = static_cast<void**>(kmem_zalloc(40, KM_SLEEP));
  auto** b = static_cast<void**>(kmem_zalloc(40, KM_SLEEP));
  a[0] = b;
  b[0] = a;
  g.cycle_a = enc(a);
  g.cycle_b = enc(b);
  lone[1] = kmem_zalloc(16, KM_SLEEP);
  g.via_leaked = enc(lone[1]);
  // Large: one kept from a root, one leaked.
  g_roots[1] = kmem_zalloc(40000, KM_SLEEP);
  g.big_kept = enc(g_roots[1]);
  g.big_leak = enc(kmem_zalloc(50000, KM_SLEEP));
  // One past the end is no reference.
  auto* p = static_cast<char*>(kmem_zalloc(48, KM_SLEEP));
  g.past_end_target = enc(p);
  g_roots[2] = p + 48;
  // An ignored object is not scanned: what only it points to leaks.
  auto** ig = static_cast<void**>(kmem_zalloc(32, KM_SLEEP));
  ig[0] = kmem_zalloc(24, KM_SLEEP);
  g.ignored_holder_target = enc(ig[0]);
  kmemleak_ignore(ig);
  // no_scan: reported if unreferenced, contents not scanned.
  auto** ns = static_cast<void**>(kmem_zalloc(32, KM_SLEEP));
  ns[0] = kmem_zalloc(24, KM_SLEEP);
  g.noscan_target = enc(ns[0]);
  kmemleak_no_scan(ns);
  g_roots[3] = ns;
  // Scan areas: only the first word of this one is scanned.
  auto** ar = static_cast<void**>(kmem_zalloc(64, KM_SLEEP));
  ar[0] = kmem_zalloc(24, KM_SLEEP);
  ar[4] = kmem_zalloc(24, KM_SLEEP);
  g.area_in = enc(ar[0]);
  g.area_out = enc(ar[4]);
  kmemleak_scan_area(ar, sizeof(void*), KM_SLEEP);
  g_roots[4] = ar;
  // not_leak: never reported (and a root itself).
  auto** nl = static_cast<void**>(kmem_zalloc(32, KM_SLEEP));
  g.notleak = enc(nl);
  kmemleak_not_leak(nl);
}

class Kmemleak : public ::testing::Test {
 protected:
  void SetUp() override {
    kmemleak_enable(true);
    mm::kmemleak_set_stack_scan(true);
    kmemleak_set_min_age_ms(0);
    kmemleak_add_root(g_roots, sizeof g_roots);
    // Settle what earlier tests left: a chain of k unreferenced objects
    // takes k + 1 scans to be reported whole (each scan treats the changed
    // ones as referenced).
    for (int i = 0; i < 12; i++) kmemleak_scan();
    mm::kmemleak_clear();
  }
  void TearDown() override {
    std::memset(g_roots, 0, sizeof g_roots);
    kmemleak_del_root(g_roots);
    mm::kmemleak_set_stack_scan(true);
  }
};

TEST_F(Kmemleak, ReportsExactlyTheLeakedSetAtTheSecondScan) {
  Graph g;
  build(g);
  std::set<uintptr_t> want = {
      g.lone,          g.cycle_a, g.cycle_b, g.via_leaked, g.big_leak, g.past_end_target, g.ignored_holder_target,
      g.noscan_target, g.area_out};
  // First scan: every candidate is new (no checksum yet), nothing reported.
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_TRUE(leaks().empty());
  size_t n = kmemleak_scan();
  std::set<uintptr_t> got = leaks();
  EXPECT_EQ(n, want.size());
  EXPECT_EQ(got, want);
  for (uintptr_t kept : {g.kept, g.kept_interior_target, g.big_kept, g.area_in, g.notleak})
    EXPECT_EQ(got.count(kept), 0u);
  // Reported once: a third scan adds nothing, the reports stay.
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(leaks(), want);
  // The report carries the record.
  mm::LeakObject o;
  ASSERT_TRUE(mm::kmemleak_lookup(static_cast<char*>(dec(g.lone)) + 10, o));
  EXPECT_EQ(o.start, reinterpret_cast<uintptr_t>(dec(g.lone)));
  EXPECT_EQ(o.size, 72u);  // what kmem_zalloc was asked for (Linux reports that), not the class's 80
  EXPECT_NE(o.stack, 0u);
  EXPECT_STREQ(o.kind, "kmem_alloc_80");
  // clear: the reports become roots and are not reported again.
  EXPECT_EQ(mm::kmemleak_clear(), want.size());
  EXPECT_TRUE(leaks().empty());
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 0u);
}

__attribute__((noinline)) uintptr_t leak_one(size_t size) { return enc(kmem_zalloc(size, KM_SLEEP)); }
// Writes into an encoded object without its address reaching the test's
// own registers (a callee-saved one would be spilled into the scan's view
// of this thread's stack, and rightly keep the object referenced).
__attribute__((noinline)) void transient(uintptr_t x) { kmemleak_transient_leak(dec(x)); }
__attribute__((noinline)) void poke(uintptr_t x, size_t at, uint8_t v) { static_cast<uint8_t*>(dec(x))[at] = v; }

// The rules here are about objects, not stacks: a stale slot in this
// test's own frame (a conservative scan's classic false retention) must
// not keep x. The stacks have their own tests.
TEST_F(Kmemleak, ChangedContentsAndYoungObjectsAreNotReported) {
  mm::kmemleak_set_stack_scan(false);
  uintptr_t x = leak_one(64);
  EXPECT_EQ(kmemleak_scan(), 0u);
  poke(x, 5, 0x55);  // changed since the last scan
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 1u);  // unchanged now
  EXPECT_EQ(leaks(), std::set<uintptr_t>{x});
  mm::kmemleak_clear();
  // Younger than the minimum age: not reported.
  kmemleak_set_min_age_ms(60000);
  uintptr_t y = leak_one(64);
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 0u);
  kmemleak_set_min_age_ms(0);
  EXPECT_EQ(kmemleak_scan(), 1u);
  EXPECT_EQ(leaks(), std::set<uintptr_t>{y});
  mm::kmemleak_clear();
  // transient_leak: skipped at the next scan.
  uintptr_t z = leak_one(64);
  kmemleak_scan();
  transient(z);
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 1u);
  mm::kmemleak_clear();
}

// This test holds raw addresses in its own frame: only the registered
// roots are scanned here (the stacks have their own test).
TEST_F(Kmemleak, RegisteredObjectsNeedTheirMinCount) {
  mm::kmemleak_set_stack_scan(false);
  // What earlier tests left that only a stale stack slot kept: settled.
  for (int i = 0; i < 3; i++) kmemleak_scan();
  mm::kmemleak_clear();
  auto* page = static_cast<void**>(mm::page_alloc_va(0, KM_SLEEP));
  std::memset(page, 0, 4096);
  kmemleak_alloc(page, 4096, 2, KM_SLEEP);  // needs two references
  g_roots[5] = page;
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 1u);  // one reference is not enough
  EXPECT_EQ(leaks(), std::set<uintptr_t>{enc(page)});
  g_roots[6] = reinterpret_cast<char*>(page) + 100;
  mm::kmemleak_clear();
  kmemleak_free(page);
  // min_count 0: a root; what it points to is kept.
  kmemleak_alloc(page, 4096, 0, KM_SLEEP);
  g_roots[5] = g_roots[6] = nullptr;
  page[3] = kmem_zalloc(56, KM_SLEEP);
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 0u);
  kmem_free(page[3], 56);
  kmemleak_free(page);
  mm::page_free_va(page, 0);
  // Misuse is reported, and refused.
  Errors errors;
  kmemleak_free(page);
  char buf[64];
  kmemleak_alloc(buf, sizeof buf, 1, KM_SLEEP);
  kmemleak_alloc(buf + 8, 8, 1, KM_SLEEP);  // overlaps
  auto* obj = static_cast<char*>(kmem_alloc(100, KM_SLEEP));
  kmemleak_not_leak(obj + 8);  // not its start
  ASSERT_EQ(errors.seen.size(), 3u);
  EXPECT_NE(errors.seen[0].find("no kmemleak_alloc"), std::string::npos);
  EXPECT_NE(errors.seen[1].find("overlaps"), std::string::npos);
  EXPECT_NE(errors.seen[2].find("not an object's start"), std::string::npos);
  kmemleak_free(buf);
  kmem_free(obj, 100);
}

int g_ctor_allocs;
int make_with_child(void* buf, void*, int kmflag) {
  *static_cast<void**>(buf) = kmem_zalloc(40, kmflag);  // what the constructor allocated
  g_ctor_allocs++;
  return 0;
}
void free_child(void* buf, void*) { kmem_free(*static_cast<void**>(buf), 40); }

__attribute__((noinline)) void cycle_constructed(kmem_cache_t* cp) {
  void* b[4];
  for (auto& p : b) p = kmem_cache_alloc(cp, KM_SLEEP);
  for (auto* p : b) kmem_cache_free(cp, p);  // into a magazine, constructed
}

// A free buffer in a magazine is not an object, but its constructed
// contents are roots (illumos ::findleaks).
TEST_F(Kmemleak, ConstructedFreeBuffersAreRoots) {
  kmem_cache_t* cp = kmem_cache_create("t_leak_ctor", 64, 0, make_with_child, free_child, nullptr, nullptr, nullptr, 0);
  cycle_constructed(cp);
  EXPECT_GT(g_ctor_allocs, 0);
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_EQ(kmemleak_scan(), 0u);
  EXPECT_TRUE(leaks().empty());
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// One call site for all three (no tail call: the site is in here).
__attribute__((noinline)) void* alloc_120() {
  void* p = kmem_alloc(120, KM_SLEEP);
  asm volatile("" ::"r"(p) : "memory");
  return p;
}
volatile int g_three = 3;  // not a constant: the loop is not peeled into three call sites
__attribute__((noinline)) void allocate_three() {
  for (int i = 0; i < g_three; i++) g_roots[8 + i] = alloc_120();
}

TEST_F(Kmemleak, SinceAMarkGroupsByBacktrace) {
  unsigned mark = mm::kmemleak_mark();
  allocate_three();
  mm::LeakGroup groups[8];
  bool bad = false;
  size_t n = mm::kmemleak_since(mark, false, groups, 8, &bad);
  EXPECT_FALSE(bad);
  ASSERT_GE(n, 1u);
  bool found = false;
  for (size_t i = 0; i < n && i < 8; i++)
    if (groups[i].count == 3 && groups[i].bytes == 3 * 120 && groups[i].stack) found = true;  // the sizes asked for
  EXPECT_TRUE(found);
  // Unreferenced only: none (the roots hold them).
  kmemleak_scan();
  EXPECT_EQ(mm::kmemleak_since(mark, true, groups, 8, &bad), 0u);
  mm::kmemleak_since(9999, false, groups, 8, &bad);
  EXPECT_TRUE(bad);
  for (int i = 0; i < 3; i++) kmem_free(g_roots[8 + i], 120);
  // A clean workload after a mark: nothing live since.
  unsigned m2 = mm::kmemleak_mark();
  for (int i = 0; i < 100; i++) kmem_free(kmem_alloc(200, KM_SLEEP), 200);
  EXPECT_EQ(mm::kmemleak_since(m2, false, groups, 8, &bad), 0u);
}

// Another thread's stack is a root while it is stopped, registers
// included (its signal frame): an object only its frame holds is kept, and
// reported once the thread has let go of it.
struct Holder {
  std::atomic<int> phase{0};
  uintptr_t obj = 0;
};
void wait_for(std::atomic<int>& phase, int v) {
  while (phase.load(std::memory_order_acquire) != v) sched_yield();
}
// A cache of its own: its buffers' addresses were never another object's,
// so no stale word anywhere (the test's own frame included) can name one.
kmem_cache_t* g_holder_cache;
__attribute__((noinline)) void fill(void* volatile* slot) { *slot = kmem_cache_alloc(g_holder_cache, KM_SLEEP); }
// Leaves other values in the caller-saved registers (an allocation's own),
// and zeroes the dead stack below: the scan reads a stopped thread from its
// signal handler's frame up, and the kernel's signal frame has gaps that
// keep what deeper calls left there (the allocation's backtrace capture
// runs deep), which would rightly count as references.
__attribute__((noinline, no_sanitize("address"))) void zero_below(unsigned depth) {
  volatile uintptr_t pad[256];
  for (auto& w : pad) w = 0;
  if (depth > 1) zero_below(depth - 1);
  asm volatile("" ::"r"(&pad[0]) : "memory");
}
__attribute__((noinline)) void churn() {
  for (int i = 0; i < 8; i++) kmem_free(kmem_alloc(88, KM_SLEEP), 88);
  zero_below(8);  // 16 KiB
}
__attribute__((noinline)) void holder_thread(Holder* h) {
  void* volatile slot = nullptr;  // on this thread's stack only
  fill(&slot);
  h->obj = enc(slot);
  churn();
  h->phase.store(1, std::memory_order_release);
  wait_for(h->phase, 2);
  slot = nullptr;
  churn();
  h->phase.store(3, std::memory_order_release);
  wait_for(h->phase, 4);
}
__attribute__((noinline)) void free_enc(uintptr_t x) { kmem_cache_free(g_holder_cache, dec(x)); }

TEST_F(Kmemleak, OtherThreadsStacksAreRoots) {
  g_holder_cache = kmem_cache_create("t_leak_holder", 88, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  Holder h;
  std::thread t(holder_thread, &h);
  wait_for(h.phase, 1);
  kmemleak_scan();
  kmemleak_scan();
  EXPECT_EQ(leaks().count(h.obj), 0u);  // only on the thread's stack: kept
  h.phase.store(2, std::memory_order_release);
  wait_for(h.phase, 3);
  kmemleak_scan();
  kmemleak_scan();
  EXPECT_EQ(leaks().count(h.obj), 1u);  // let go of: reported
  h.phase.store(4, std::memory_order_release);
  t.join();
  mm::kmemleak_clear();
  free_enc(h.obj);
  EXPECT_TRUE(kmem_cache_destroy(g_holder_cache));
}


// Linux's rule for objects that changed since the last scan: they count as
// referenced for this scan (grey), and so does what only they reference.
// Neither is "unreferenced" afterwards: the listing, the summary, clear and
// since N unreferenced must not show them.
__attribute__((noinline)) uintptr_t pair(uintptr_t& target) {
  auto** a = static_cast<void**>(kmem_zalloc(64, KM_SLEEP));
  a[0] = kmem_zalloc(64, KM_SLEEP);
  target = enc(a[0]);
  return enc(a);
}
TEST_F(Kmemleak, ObjectsReachedThroughAChangedOneAreNotUnreferenced) {
  mm::kmemleak_set_stack_scan(false);
  unsigned mark = mm::kmemleak_mark();
  uintptr_t b;
  uintptr_t a = pair(b);
  kmemleak_scan();   // both new: candidates, their checksums taken
  poke(a, 9, 0x77);  // a changes; b does not
  EXPECT_EQ(kmemleak_scan(), 0u);
  mm::LeakObject o;
  for (uintptr_t x : {a, b}) {
    ASSERT_TRUE(mm::kmemleak_lookup(dec(x), o));
    EXPECT_EQ(o.count, 1) << (x == a ? "the changed object" : "the object reached through it") << " left unreferenced";
  }
  mm::LeakGroup groups[8];
  bool bad;
  size_t n = mm::kmemleak_since(mark, true, groups, 8, &bad);
  for (size_t i = 0; i < n && i < 8; i++)
    EXPECT_NE(groups[i].example, reinterpret_cast<uintptr_t>(dec(b))) << "since N unreferenced lists b";
  // Unchanged at the next scan: both leak, together.
  EXPECT_EQ(kmemleak_scan(), 2u);
  EXPECT_EQ(leaks(), (std::set<uintptr_t>{a, b}));
  mm::kmemleak_clear();
}

// The summary keeps the groups with the most bytes, however late a scan
// finds them, and counts distinct backtraces exactly. 40 sites of one
// small leak each (a function of its own per site), then one site of 50
// large leaks in a cache created last, so that the grouping walks it after
// all the others.
template <int N>
__attribute__((noinline)) void leak_at_site(std::vector<uintptr_t>& out) {
  void* p = kmem_zalloc(24 + N % 8, KM_SLEEP);
  asm volatile("" ::"r"(p) : "memory");
  out.push_back(enc(p));
}
template <int... N>
void leak_at_sites(std::vector<uintptr_t>& out, std::integer_sequence<int, N...>) {
  (leak_at_site<N>(out), ...);
}
__attribute__((noinline)) void leak_big(kmem_cache_t* cp, std::vector<uintptr_t>& out) {
  for (int i = 0; i < 50; i++) {
    void* p = kmem_cache_alloc(cp, KM_SLEEP);
    std::memset(p, 0, 512);
    out.push_back(enc(p));
  }
}
TEST_F(Kmemleak, SummaryKeepsTheLargestGroupsAndCountsDistinctBacktraces) {
  mm::kmemleak_set_stack_scan(false);
  std::vector<uintptr_t> small, big;
  leak_at_sites(small, std::make_integer_sequence<int, 40>{});
  kmem_cache_t* cp = kmem_cache_create("t_leak_last", 512, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  leak_big(cp, big);
  kmemleak_scan();
  kmemleak_scan();
  mm::LeakGroup groups[32];
  size_t distinct = mm::kmemleak_summary(groups, 32);
  EXPECT_EQ(distinct, 41u);
  EXPECT_STREQ(groups[0].kind, "t_leak_last");
  EXPECT_EQ(groups[0].count, 50u);
  EXPECT_EQ(groups[0].bytes, 50u * 512);
  for (size_t i = 1; i < 32; i++) {
    EXPECT_EQ(groups[i].count, 1u);
    EXPECT_LE(groups[i].bytes, groups[i - 1].bytes);
  }
  mm::kmemleak_clear();
  for (size_t i = 0; i < small.size(); i++) kmem_free(dec(small[i]), 24 + i % 8);
  for (uintptr_t x : big) kmem_cache_free(cp, dec(x));
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// Every mark is kept (past the 1024 a fixed array held), each at its own
// tick, in order.
TEST_F(Kmemleak, MarksAreAllKept) {
  unsigned first = mm::kmemleak_mark();
  ASSERT_NE(first, 0u);
  unsigned last = first;
  for (int i = 0; i < 1030; i++) {  // a tick each: about 10 s on the host
    unsigned m = mm::kmemleak_mark();
    ASSERT_EQ(m, last + 1);
    last = m;
  }
  mm::LeakGroup groups[4];
  bool bad = true;
  mm::kmemleak_since(last, false, groups, 4, &bad);
  EXPECT_FALSE(bad);
  mm::kmemleak_since(first, false, groups, 4, &bad);
  EXPECT_FALSE(bad);
  mm::kmemleak_since(last + 1, false, groups, 4, &bad);
  EXPECT_TRUE(bad);
}

// A report's size is what the caller asked for, as Linux's is.
TEST_F(Kmemleak, ReportsTheSizeAskedFor) {
  mm::kmemleak_set_stack_scan(false);
  uintptr_t small = leak_one(72), large = leak_one(40000), cached = leak_one(64);
  kmemleak_scan();
  kmemleak_scan();
  mm::LeakObject o;
  ASSERT_TRUE(mm::kmemleak_lookup(dec(small), o));
  EXPECT_EQ(o.size, 72u);
  ASSERT_TRUE(mm::kmemleak_lookup(dec(large), o));
  EXPECT_EQ(o.size, 40000u);
  ASSERT_TRUE(mm::kmemleak_lookup(dec(cached), o));
  EXPECT_EQ(o.size, 64u);
  mm::kmemleak_clear();
  kmem_free(dec(small), 72);
  kmem_free(dec(large), 40000);
  kmem_free(dec(cached), 64);
}

}  // namespace

namespace {
// A destructor that holds the first call it gets once armed, until the
// test lets it go: the reaper stops halfway through a magazine.
struct HeldDtor {
  std::atomic<bool> armed{false}, holding{false}, release{false};
};
HeldDtor g_held;
int held_ctor(void*, void*, int) { return 0; }
void held_dtor(void*, void*) {
  if (!g_held.armed.exchange(false)) return;
  g_held.holding = true;
  while (!g_held.release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
}  // namespace

// A reap takes a thread's magazines off it and frees their rounds one by
// one, with no lock held between (a destructor may run for each). A scan
// that lands halfway counts the rounds still in the draining magazine as
// free buffers (kmem_magazine.cpp, Draining): they are in no CPU's
// magazine nor the depot, and a magazine is not an object, so otherwise
// they look allocated and referenced by nothing.
TEST_F(Kmemleak, RoundsOfAMagazineBeingReapedAreNotReported) {
  kmem_cache_t* cp = kmem_cache_create("t_reaped", 64, 0, held_ctor, held_dtor, nullptr, nullptr, nullptr, 0);
  ASSERT_NE(cp, nullptr);
  constexpr int kObjects = 24;
  std::thread reaper([cp] {
    void* objs[kObjects];
    for (auto& o : objs) o = kmem_cache_alloc(cp, KM_SLEEP);
    for (auto& o : objs) kmem_cache_free(cp, o);  // into this thread's magazines
    std::memset(objs, 0, sizeof objs);
    g_held.armed = true;
    mm::kmem_reap(true);  // flushes this thread's magazines: held at the first destructor
  });
  while (!g_held.holding) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  size_t reported = 0;
  for (int i = 0; i < 3; i++) reported += kmemleak_scan();
  std::set<uintptr_t> found = leaks();
  g_held.release = true;
  reaper.join();
  g_held.holding = false;
  g_held.release = false;
  EXPECT_EQ(reported, 0u);
  EXPECT_TRUE(found.empty()) << found.size() << " rounds of the draining magazine reported";
  mm::kmemleak_clear();
  EXPECT_TRUE(kmem_cache_destroy(cp));
}
