// Host tests of the slab allocator (mm/kmem.cpp) under ASan and UBSan.
#include <gtest/gtest.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace {

struct Errors {
  static inline std::vector<mm::MemError> seen;
  static void hook(const mm::MemError& e) { seen.push_back(e); }
  mm::MemErrorHook old;
  Errors() : old(mm::set_error_hook(hook)) { seen.clear(); }
  ~Errors() { mm::set_error_hook(old); }
};

uint64_t free_pages() {
  mm::page_drain_this_cpu();
  mm::PageStats s;
  mm::page_stats(s);
  return s.free_pages;
}

// Pages kept once used (vmem boundary tags, kmem bookkeeping).
uint64_t kept_pages() {
  return mm::vmem_metadata_pages() + mm::kmem_metadata_pages();
}

struct CtorCounts {
  int ctors = 0, dtors = 0;
  bool fail = false;
};
int ctor(void* buf, void* priv, int) {
  auto* c = static_cast<CtorCounts*>(priv);
  if (c->fail) return -1;
  c->ctors++;
  std::memset(buf, 0xC5, 8);
  return 0;
}
void dtor(void* buf, void* priv) {
  static_cast<CtorCounts*>(priv)->dtors++;
  std::memset(buf, 0, 8);
}

TEST(kmem, AllocFreeGivesDistinctAlignedBuffers) {
  for (size_t align : {size_t{0}, size_t{8}, size_t{64}, size_t{256}}) {
    kmem_cache_t* cp = kmem_cache_create("t_basic", 40, align, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    ASSERT_NE(cp, nullptr);
    std::vector<char*> v;
    for (int i = 0; i < 5000; i++) {
      auto* p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
      ASSERT_NE(p, nullptr);
      if (align) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
      }
      std::memset(p, i & 0xff, 40);
      v.push_back(p);
    }
    std::vector<char*> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); i++) EXPECT_GE(sorted[i] - sorted[i - 1], 40);
    for (size_t i = 0; i < v.size(); i++) EXPECT_EQ(static_cast<unsigned char>(v[i][39]), i & 0xff);
    for (char* p : v) kmem_cache_free(cp, p);
    EXPECT_TRUE(kmem_cache_destroy(cp));
  }
}

TEST(kmem, ObjectsStayConstructedUntilReaped) {
  CtorCounts c;
  kmem_cache_t* cp = kmem_cache_create("t_ctor", 128, 0, ctor, dtor, nullptr, &c, nullptr, 0);
  void* a = kmem_cache_alloc(cp, KM_SLEEP);
  EXPECT_EQ(c.ctors, 1);
  EXPECT_EQ(*static_cast<uint8_t*>(a), 0xC5);
  kmem_cache_free(cp, a);
  void* b = kmem_cache_alloc(cp, KM_SLEEP);
  EXPECT_EQ(a, b);  // the magazine hands back the same constructed object
  EXPECT_EQ(c.ctors, 1);
  EXPECT_EQ(c.dtors, 0);
  kmem_cache_free(cp, b);
  mm::kmem_reap(true);
  EXPECT_EQ(c.dtors, 1);
  EXPECT_TRUE(kmem_cache_destroy(cp));
  EXPECT_EQ(c.ctors, c.dtors);
}

TEST(kmem, ConstructorFailureReturnsNullWithNoSleep) {
  CtorCounts c;
  c.fail = true;
  kmem_cache_t* cp = kmem_cache_create("t_ctorfail", 64, 0, ctor, dtor, nullptr, &c, nullptr, 0);
  EXPECT_EQ(kmem_cache_alloc(cp, KM_NOSLEEP), nullptr);
  mm::KmemCacheStats s;
  mm::kmem_cache_stats(cp, s);
  EXPECT_EQ(s.ctor_fail, 1u);
  EXPECT_EQ(s.buf_inuse, 0u);
  c.fail = false;
  void* p = kmem_cache_alloc(cp, KM_NOSLEEP);
  EXPECT_NE(p, nullptr);
  kmem_cache_free(cp, p);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem, DestroyReturnsEveryPage) {
  kmem_cache_t* warm = kmem_cache_create("t_warm", 300, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_destroy(warm);
  mm::kmem_reap(true);
  uint64_t before = free_pages() + kept_pages();
  for (size_t size : {24, 300, 700, 5000, 20000}) {
    kmem_cache_t* cp = kmem_cache_create("t_destroy", size, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    std::vector<void*> v;
    for (int i = 0; i < 2000; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
    for (void* p : v) kmem_cache_free(cp, p);
    EXPECT_TRUE(kmem_cache_destroy(cp));
    // The cache's own slabs are gone; magazines and off-slab headers went
    // back to kmem's internal caches, which give their pages up on reap.
    mm::kmem_reap(true);
    EXPECT_EQ(free_pages() + kept_pages(), before) << "size " << size;
  }
}

TEST(kmem, KmemAllocEverySizeAndZalloc) {
  std::vector<std::pair<void*, size_t>> v;
  for (size_t size = 1; size <= 70000; size += (size < 2048 ? 1 : 997)) {
    auto* p = static_cast<uint8_t*>(kmem_zalloc(size, KM_SLEEP));
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < size; i += 61) ASSERT_EQ(p[i], 0);
    std::memset(p, 0xAB, size);
    v.emplace_back(p, size);
  }
  EXPECT_EQ(kmem_alloc(0, KM_SLEEP), nullptr);
  for (auto& [p, size] : v) kmem_free(p, size);
}

TEST(kmem, RandomOperationsMatchAModel) {
  Errors errors;
  std::mt19937_64 rng(20261121);
  kmem_cache_t* caches[3] = {
      kmem_cache_create("t_rand_a", 24, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
      kmem_cache_create("t_rand_b", 1000, 64, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
      kmem_cache_create("t_rand_c", 9000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
  };
  const size_t cache_size[3] = {24, 1000, 9000};
  struct Live {
    size_t size;
    int cache;  // -1: kmem_alloc
    uint8_t tag;
  };
  std::map<uint8_t*, Live> live;
  for (int step = 0; step < 60000; step++) {
    bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      int kind = static_cast<int>(rng() % 4) - 1;
      size_t size = kind < 0 ? 1 + rng() % (rng() % 8 == 0 ? 40000 : 600) : cache_size[kind];
      auto* p = static_cast<uint8_t*>(kind < 0 ? kmem_alloc(size, KM_SLEEP) : kmem_cache_alloc(caches[kind], KM_SLEEP));
      ASSERT_NE(p, nullptr);
      // No overlap with any live buffer.
      auto it = live.upper_bound(p);
      if (it != live.end()) {
        ASSERT_LE(p + size, it->first);
      }
      if (it != live.begin()) {
        --it;
        ASSERT_LE(it->first + it->second.size, p);
      }
      uint8_t tag = static_cast<uint8_t>(rng());
      std::memset(p, tag, size);
      live[p] = {size, kind, tag};
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      uint8_t* p = it->first;
      const Live& l = it->second;
      for (size_t i = 0; i < l.size; i += 7) ASSERT_EQ(p[i], l.tag) << "buffer changed while allocated";
      if (l.cache < 0) kmem_free(p, l.size);
      else kmem_cache_free(caches[l.cache], p);
      live.erase(it);
    }
    if (step % 20000 == 19999) mm::kmem_reap(step % 40000 == 39999);
  }
  for (auto& [p, l] : live) {
    if (l.cache < 0) kmem_free(p, l.size);
    else kmem_cache_free(caches[l.cache], p);
  }
  for (auto* cp : caches) EXPECT_TRUE(kmem_cache_destroy(cp));
  EXPECT_TRUE(errors.seen.empty());
}

TEST(kmem, BadFreesAreReportedWithCacheAddressAndCaller) {
  Errors errors;
  kmem_cache_t* a = kmem_cache_create("t_bad_a", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* b = kmem_cache_create("t_bad_b", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* big = kmem_cache_create("t_bad_big", 3000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  void* x = kmem_cache_alloc(a, KM_SLEEP);

  // Wrong cache: caught on the free itself (small-object slab header).
  kmem_cache_free(b, x);
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_STREQ(errors.seen[0].where, "t_bad_b");
  EXPECT_EQ(errors.seen[0].address, reinterpret_cast<uintptr_t>(x));
  EXPECT_NE(errors.seen[0].caller, 0u);
  EXPECT_NE(std::strstr(errors.seen[0].kind, "wrong cache"), nullptr);

  // Wrong size to kmem_free, small caches: caught on the free.
  void* y = kmem_alloc(40, KM_SLEEP);  // 48-byte size cache
  kmem_free(y, 200);                    // 224-byte size cache
  ASSERT_EQ(errors.seen.size(), 2u);
  EXPECT_NE(std::strstr(errors.seen[1].kind, "size"), nullptr);
  EXPECT_STREQ(errors.seen[1].where, "kmem_alloc_224");
  kmem_free(y, 40);

  // Never allocated: an address in a large-object slab that is no buffer
  // boundary. Large-object caches check at the slab layer (on reap).
  void* z = kmem_cache_alloc(big, KM_SLEEP);
  kmem_cache_free(big, static_cast<char*>(z) + 8);
  EXPECT_EQ(errors.seen.size(), 2u);
  mm::kmem_reap(true);
  ASSERT_EQ(errors.seen.size(), 3u);
  EXPECT_STREQ(errors.seen[2].where, "t_bad_big");
  EXPECT_EQ(errors.seen[2].address, reinterpret_cast<uintptr_t>(z) + 8);
  kmem_cache_free(big, z);

  // Double free, small and large caches: caught on the second free.
  kmem_cache_free(a, x);
  kmem_cache_free(a, x);
  ASSERT_EQ(errors.seen.size(), 4u);
  EXPECT_NE(std::strstr(errors.seen[3].kind, "double free"), nullptr);
  void* w = kmem_cache_alloc(big, KM_SLEEP);
  kmem_cache_free(big, w);
  kmem_cache_free(big, w);
  ASSERT_EQ(errors.seen.size(), 5u);
  EXPECT_NE(std::strstr(errors.seen[4].kind, "double free"), nullptr);
  // A double free separated by other frees is caught at the slab layer.
  void* u = kmem_cache_alloc(a, KM_SLEEP);
  void* v = kmem_cache_alloc(a, KM_SLEEP);
  kmem_cache_free(a, u);
  kmem_cache_free(a, v);
  kmem_cache_free(a, u);
  mm::kmem_reap(true);
  ASSERT_EQ(errors.seen.size(), 6u);
  EXPECT_NE(std::strstr(errors.seen[5].kind, "double free"), nullptr);
  EXPECT_EQ(errors.seen[5].address, reinterpret_cast<uintptr_t>(u));

  // Wrong size, large caches: the buffer is refused when it reaches the
  // slab layer of the cache it was wrongly given to.
  void* y2 = kmem_alloc(5000, KM_SLEEP);
  kmem_free(y2, 3000);
  mm::kmem_reap(true);
  ASSERT_EQ(errors.seen.size(), 7u);
  EXPECT_STREQ(errors.seen[6].where, "kmem_alloc_3072");
  kmem_free(y2, 5000);

  // Destroy with live objects: refused, with the count.
  void* live = kmem_cache_alloc(b, KM_SLEEP);
  EXPECT_FALSE(kmem_cache_destroy(b));
  ASSERT_EQ(errors.seen.size(), 8u);
  EXPECT_EQ(errors.seen[7].detail, 1u);
  EXPECT_STREQ(errors.seen[7].where, "t_bad_b");
  kmem_cache_free(b, live);
  EXPECT_TRUE(kmem_cache_destroy(a));
  EXPECT_TRUE(kmem_cache_destroy(b));
  EXPECT_TRUE(kmem_cache_destroy(big));
  EXPECT_EQ(errors.seen.size(), 8u);
}

TEST(kmem, NoSleepFailsWhenMemoryIsGoneAndPushPageStillWorks) {
  kmem_cache_t* cp = kmem_cache_create("t_exhaust", 4000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  std::vector<void*> v;
  for (;;) {
    void* p = kmem_cache_alloc(cp, KM_NOSLEEP);
    if (!p) break;
    v.push_back(p);
  }
  EXPECT_GT(v.size(), 1000u);
  EXPECT_EQ(kmem_alloc(100000, KM_NOSLEEP), nullptr);
  void* pushed = kmem_cache_alloc(cp, KM_NOSLEEP | KM_PUSHPAGE);
  EXPECT_NE(pushed, nullptr);
  if (pushed) v.push_back(pushed);
  for (void* p : v) kmem_cache_free(cp, p);
  EXPECT_TRUE(kmem_cache_destroy(cp));
  // Memory is usable again.
  void* q = kmem_alloc(100000, KM_NOSLEEP);
  EXPECT_NE(q, nullptr);
  kmem_free(q, 100000);
}

struct MoveClient {
  std::vector<void*> table;
  int yes = 0;
};
MoveClient* g_client;
struct MObj {
  uint32_t index, check;
  char payload[40];
};
kmem_cbrc_t move_cb(void* old, void* new_, size_t size, void*) {
  auto* o = static_cast<MObj*>(old);
  if (o->index >= g_client->table.size() || g_client->table[o->index] != old) return KMEM_CBRC_DONT_KNOW;
  std::memcpy(new_, old, size);
  g_client->table[o->index] = new_;
  g_client->yes++;
  return KMEM_CBRC_YES;
}

TEST(kmem, MoveCallbackConsolidatesSparseCaches) {
  MoveClient client;
  g_client = &client;
  kmem_cache_t* cp = kmem_cache_create("t_move", sizeof(MObj), 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_set_move(cp, move_cb);
  const unsigned n = 6000;
  client.table.resize(n);
  for (unsigned i = 0; i < n; i++) {
    auto* o = static_cast<MObj*>(kmem_cache_alloc(cp, KM_SLEEP));
    o->index = i;
    o->check = i ^ 0x5a5a5a5a;
    std::snprintf(o->payload, sizeof o->payload, "object %u", i);
    client.table[i] = o;
  }
  for (unsigned i = 0; i < n; i++)
    if (i % 8) {
      kmem_cache_free(cp, client.table[i]);
      client.table[i] = nullptr;
    }
  mm::kmem_reap(true);
  mm::KmemCacheStats before, after;
  mm::kmem_cache_stats(cp, before);
  mm::kmem_move_pass();
  mm::kmem_reap(true);
  mm::kmem_cache_stats(cp, after);
  EXPECT_GT(client.yes, 0);
  EXPECT_EQ(after.moves_yes, static_cast<uint64_t>(client.yes));
  EXPECT_LT(after.slabs, before.slabs);
  for (unsigned i = 0; i < n; i += 8) {
    auto* o = static_cast<MObj*>(client.table[i]);
    char want[40];
    std::snprintf(want, sizeof want, "object %u", i);
    EXPECT_EQ(o->index, i);
    EXPECT_EQ(o->check, i ^ 0x5a5a5a5a);
    EXPECT_STREQ(o->payload, want);
    kmem_cache_free(cp, o);
  }
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem, CrossThreadFreesAndThreadExitFlushes) {
  kmem_cache_t* cp = kmem_cache_create("t_threads", 96, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  constexpr int kThreads = 4, kPer = 20000;
  std::vector<std::vector<void*>> made(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; i++) made[t].push_back(kmem_cache_alloc(cp, KM_SLEEP));
    });
  for (auto& t : ts) t.join();
  ts.clear();
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      for (void* p : made[(t + 1) % kThreads]) kmem_cache_free(cp, p);
    });
  for (auto& t : ts) t.join();
  // Exited threads flushed their magazines: destroy sees no live objects.
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

}  // namespace

namespace {
mm::KmemCacheStats stats_of(kmem_cache_t* cp) {
  mm::KmemCacheStats s;
  mm::kmem_cache_stats(cp, s);
  return s;
}
}  // namespace

// Bonwick & Adams: the depot reaps the fewest magazines it held over the
// interval (the working set it did not need), not all of them.
TEST(kmem, WorkingSetReapFreesOnlyTheUnusedMagazines) {
  kmem_cache_t* cp = kmem_cache_create("t_wset", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  const uint64_t m = stats_of(cp).magazine_size;
  ASSERT_GT(m, 0u);
  // Fill the depot with full magazines: allocate many, free them all.
  std::vector<void*> v;
  for (uint64_t i = 0; i < 20 * m; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* p : v) kmem_cache_free(cp, p);
  v.clear();
  // A reap closes the interval in which the depot was being filled (its
  // minimum then was 0: nothing goes) and starts a new one.
  mm::kmem_reap(false);
  const uint64_t full = stats_of(cp).depot_full;
  ASSERT_GE(full, 10u);
  // The working set: take exactly k full magazines out of the depot (after
  // what this CPU holds), then give every object back.
  const uint64_t k = 3;
  const uint64_t take = stats_of(cp).cpu_rounds + k * m;
  for (uint64_t i = 0; i < take; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  EXPECT_EQ(stats_of(cp).depot_full, full - k);
  for (void* p : v) kmem_cache_free(cp, p);
  v.clear();
  const uint64_t before = stats_of(cp).depot_full;
  // The depot never held fewer than full - k: exactly those go.
  mm::kmem_reap(false);
  EXPECT_EQ(stats_of(cp).depot_full, before - (full - k));
  EXPECT_GT(stats_of(cp).depot_full, 0u);
  // No activity since: the whole depot is unused working set.
  mm::kmem_reap(false);
  EXPECT_EQ(stats_of(cp).depot_full, 0u);
  // The same for empty magazines: a reap with no activity frees them all
  // once the interval in which they were last needed has passed.
  mm::kmem_reap(false);
  EXPECT_EQ(stats_of(cp).depot_empty, 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// A contended depot lock grows the cache's magazines at the next reap; the
// CPUs' old-size magazines are flushed on their next trip to the depot.
TEST(kmem, ContendedDepotGrowsTheMagazineSize) {
  kmem_cache_t* cp = kmem_cache_create("t_resize", 20000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  const uint64_t m0 = stats_of(cp).magazine_size;
  ASSERT_GT(m0, 0u);
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; t++)
    ts.emplace_back([&] {
      std::vector<void*> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 8; i++) mine.push_back(kmem_cache_alloc(cp, KM_SLEEP));
        for (void* p : mine) kmem_cache_free(cp, p);
        mine.clear();
      }
    });
  // Wait (up to 20 s) until the depot lock has been found taken a few times.
  for (int i = 0; i < 2000 && stats_of(cp).depot_contention < 8; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  for (auto& t : ts) t.join();
  ASSERT_GE(stats_of(cp).depot_contention, 8u) << "no depot contention seen in 20 s";
  mm::kmem_reap(false);
  const uint64_t m1 = stats_of(cp).magazine_size;
  EXPECT_GT(m1, m0);
  // Old-size magazines have left the depot; objects still come and go.
  std::vector<void*> v;
  for (uint64_t i = 0; i < 4 * m1 + 4; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* p : v) kmem_cache_free(cp, p);
  mm::kmem_reap(false);  // no contention since: the size stays
  EXPECT_EQ(stats_of(cp).magazine_size, m1);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}
