// SPDX-License-Identifier: Apache-2.0
// Host tests of the slab allocator (mm/kmem.cpp) under ASan and UBSan.
#include <gtest/gtest.h>
#include "stale_arena.h"
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/segkmem.h>
#include <mm/whatis.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
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
uint64_t kept_pages() { return mm::vmem_metadata_pages() + mm::kmem_metadata_pages(); }

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

// Before kmem_init, kmem_alloc's size tables name a cache with no
// magazines (mm/kmem_alloc.cpp, Before kmem_init), so that the fast paths
// need no null test of the entry. On the host kmem starts on first use: a
// free through the tables is refused with a report and changes nothing; the
// first allocation misses on that cache and brings kmem up. Needs a process
// of its own, as ctest runs each test.
TEST(kmem, FirstUseThroughTheSizeTablesBringsKmemUp) {
  if (mm::kmem_ready()) GTEST_SKIP() << "kmem is up already: run this test in a process of its own (ctest does)";
  Errors e;
  alignas(64) char local[64];
  kmem_free(local, 64);
  ASSERT_EQ(Errors::seen.size(), 1u);
  EXPECT_STREQ(Errors::seen[0].kind, "kmem_free before kmem_init");
  EXPECT_EQ(Errors::seen[0].address, reinterpret_cast<uintptr_t>(local));
  EXPECT_FALSE(mm::kmem_ready());
  kmem_free(local, 100000);  // a large size: refused by the large path
  ASSERT_EQ(Errors::seen.size(), 2u);
  EXPECT_STREQ(Errors::seen[1].kind, "kmem_free before any allocation");
  EXPECT_FALSE(mm::kmem_ready());

  void* p = kmem_alloc(64, KM_SLEEP);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(mm::kmem_ready());
  std::memset(p, 0x5A, 64);
  kmem_free(p, 64);
  void* q = kmem_alloc(64, KM_SLEEP);  // now from the magazine the free loaded
  EXPECT_EQ(q, p);
  kmem_free(q, 64);
  void* big = kmem_alloc(5000, KM_SLEEP);  // a class above 1 KiB is up too
  ASSERT_NE(big, nullptr);
  kmem_free(big, 5000);
  EXPECT_EQ(Errors::seen.size(), 2u);
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

// The size table (mm/kmem_alloc.cpp, Size classes): every size up to 16 KiB
// takes the smallest class that holds it, including the sizes either side of
// each class (one entry per 8 bytes: a size 1 past a class is the next
// one's), and a size above the last class is a large allocation.
TEST(kmem, EverySizeTakesTheSmallestClassThatFits) {
  const size_t ladder[] = {8,    16,   32,   48,   64,   80,   96,   112,  128,  160,   192,   224,
                           256,  320,  384,  448,  512,  640,  768,  896,  1024, 1280,  1536,  1792,
                           2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384};
  mm::WhatIs w;
  size_t c = 0;
  for (size_t size = 1; size <= 16384; size++) {
    while (ladder[c] < size) c++;
    void* p = kmem_alloc(size, KM_NOSLEEP);
    ASSERT_NE(p, nullptr) << size;
    ASSERT_TRUE(mm::kmem_whatis(p, w)) << size;
    char want[32];
    std::snprintf(want, sizeof want, "kmem_alloc_%zu", ladder[c]);
    ASSERT_STREQ(w.name, want) << "size " << size;
    kmem_free(p, size);
  }
  void* big = kmem_alloc(16385, KM_SLEEP);
  ASSERT_TRUE(mm::kmem_whatis(big, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kLargeAlloc);
  kmem_free(big, 16385);
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
  kmem_free(y, 200);                   // 224-byte size cache
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

  // Wrong size, large-object caches: refused on the free too (the heap
  // page index names the buffer's slab).
  void* y2 = kmem_alloc(5000, KM_SLEEP);
  kmem_free(y2, 3000);
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

// A victim the consolidator emptied waits on the empty list until its pass
// ends: an allocation meanwhile (here from inside the callback, which runs
// with no lock held) must come from another slab, or the pass would be
// moving objects into the slab it is emptying.
struct VictimClient {
  kmem_cache_t* cp = nullptr;
  uintptr_t victim_page = 0;
  std::vector<void*> made;
  int calls = 0;
};
VictimClient* g_victim;
kmem_cbrc_t victim_cb(void* old, void*, size_t, void*) {
  VictimClient& c = *g_victim;
  if (c.calls++) return KMEM_CBRC_LATER;
  c.victim_page = reinterpret_cast<uintptr_t>(old) & ~uintptr_t{4095};
  kmem_cache_free(c.cp, old);  // the victim's last object: the victim is empty now
  for (int i = 0; i < 24; i++) c.made.push_back(kmem_cache_alloc(c.cp, KM_SLEEP));
  return KMEM_CBRC_DONT_KNOW;  // gone: the client no longer knows it
}

TEST(kmem, ConsolidatorNeverAllocatesFromItsVictim) {
  VictimClient client;
  g_victim = &client;
  // No magazines: frees reach the slab layer at once, so slabs empty and
  // fill exactly as the test says.
  client.cp = kmem_cache_create("t_victim", 512, 0, nullptr, nullptr, nullptr, nullptr, nullptr, KMC_NOMAGAZINE);
  kmem_cache_t* cp = client.cp;
  std::vector<void*> objs;
  for (int i = 0; i < 64; i++) objs.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  std::map<uintptr_t, std::vector<void*>> by_page;
  for (void* p : objs) by_page[reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095}].push_back(p);
  size_t per = 0;
  for (auto& [page, v] : by_page) per = std::max(per, v.size());
  std::vector<uintptr_t> full;
  for (auto& [page, v] : by_page)
    if (v.size() == per) full.push_back(page);
  ASSERT_GE(full.size(), 3u);
  ASSERT_GE(per, 4u);
  // Slabs A and B keep one object each (partial), C stays full; every
  // other slab empties (one is kept on the empty list).
  std::vector<void*> live;
  for (auto& [page, v] : by_page) {
    bool keep_all = page == full[2], keep_one = page == full[0] || page == full[1];
    for (size_t i = 0; i < v.size(); i++) {
      if (keep_all || (keep_one && i == 0)) live.push_back(v[i]);
      else kmem_cache_free(cp, v[i]);
    }
  }
  kmem_cache_set_move(cp, victim_cb);
  mm::kmem_move_pass();
  ASSERT_EQ(client.calls, 1);
  ASSERT_TRUE(client.victim_page == full[0] || client.victim_page == full[1]);
  for (void* p : client.made) {
    EXPECT_NE(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095}, client.victim_page)
        << "allocated from the slab the consolidator was emptying";
  }
  for (void* p : client.made) kmem_cache_free(cp, p);
  for (void* p : live)
    if ((reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095}) != client.victim_page) kmem_cache_free(cp, p);
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

namespace {
struct MaskProbe {
  std::atomic<int> dtors{0}, masked{0};
};
int probe_ctor(void*, void*, int) { return 0; }
void probe_dtor(void*, void* priv) {
  auto* p = static_cast<MaskProbe*>(priv);
  p->dtors++;
  if (mm::plat::irqs_masked()) p->masked++;
}
}  // namespace

// Destructors, slab frees and heap unmaps run with interrupts as the caller
// had them, never inside the masked per-CPU region: on a full reap, on a
// magazine resize flush and on destroy. (The host counts masking per
// thread in debug builds, as the kernel masks it.)
TEST(kmem, DestructorsRunWithInterruptsOn) {
  ASSERT_FALSE(mm::plat::irqs_masked());
  MaskProbe probe;
  kmem_cache_t* cp = kmem_cache_create("t_mask", 300, 0, probe_ctor, probe_dtor, nullptr, &probe, nullptr, 0);
  std::vector<void*> v;
  for (int i = 0; i < 500; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* p : v) kmem_cache_free(cp, p);
  mm::kmem_reap(true);  // this thread's magazines and the depot
  EXPECT_GT(probe.dtors.load(), 400);
  v.clear();
  for (int i = 0; i < 500; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* p : v) kmem_cache_free(cp, p);
  int before = probe.dtors.load();
  EXPECT_TRUE(kmem_cache_destroy(cp));  // what this thread held
  EXPECT_GT(probe.dtors.load(), before);
  EXPECT_EQ(probe.masked.load(), 0) << "destructors ran with interrupts masked";
}

namespace {
struct SelfDestruct {
  kmem_cache_t* cp = nullptr;
  std::atomic<int> calls{0};
  std::atomic<bool> destroyed{false};
};
void destroy_myself(void* priv) {
  auto* s = static_cast<SelfDestruct*>(priv);
  s->calls++;
  if (!s->destroyed.exchange(true)) {
    EXPECT_TRUE(kmem_cache_destroy(s->cp));
  }
}
}  // namespace

// A reclaim callback runs with no lock held: it may destroy a cache, its own
// included (the cache goes once the reaper lets go of it).
TEST(kmem, ReclaimCallbackMayDestroyItsOwnCache) {
  SelfDestruct s;
  s.cp = kmem_cache_create("t_selfdestruct", 64, 0, nullptr, nullptr, destroy_myself, &s, nullptr, 0);
  ASSERT_NE(s.cp, nullptr);
  void* p = kmem_cache_alloc(s.cp, KM_SLEEP);
  kmem_cache_free(s.cp, p);
  std::atomic<bool> done{false};
  std::thread t([&] {
    mm::kmem_reap(true);
    done = true;
  });
  for (int i = 0; i < 1000 && !done; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!done) {
    ADD_FAILURE() << "kmem_reap deadlocked in a reclaim callback that destroys a cache";
    std::abort();  // the reaper cannot be unstuck
  }
  t.join();
  EXPECT_TRUE(s.destroyed.load());
  EXPECT_EQ(s.calls.load(), 1);
  // Gone from the list: walking no longer finds it.
  bool seen = false;
  mm::kmem_cache_walk(
      [](const kmem_cache_t* cp, void* arg) {
        mm::KmemCacheStats st;
        mm::kmem_cache_stats(cp, st);
        if (std::strcmp(st.name, "t_selfdestruct") == 0) *static_cast<bool*>(arg) = true;
      },
      &seen);
  EXPECT_FALSE(seen);
}

// Off-slab caches (kmem_alloc classes from 640 bytes, large buffers) check
// ownership on the free itself through the heap page index: wrong cache,
// wrong size and foreign pointers are refused before they reach a magazine.
TEST(kmem, OffSlabBadFreesAreCaughtOnTheFree) {
  Errors errors;
  kmem_cache_t* a = kmem_cache_create("t_off_a", 3000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* b = kmem_cache_create("t_off_b", 3000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_FALSE(stats_of(a).buf_total);
  void* x = kmem_cache_alloc(a, KM_SLEEP);
  ASSERT_TRUE(stats_of(a).offslab);
  const uint64_t frees_b = stats_of(b).frees;

  kmem_cache_free(b, x);  // wrong cache
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_STREQ(errors.seen[0].where, "t_off_b");
  EXPECT_NE(std::strstr(errors.seen[0].kind, "wrong cache"), nullptr);
  EXPECT_EQ(errors.seen[0].address, reinterpret_cast<uintptr_t>(x));
  EXPECT_NE(errors.seen[0].caller, 0u);
  EXPECT_EQ(errors.seen[0].detail, 3000u);  // the owner's buffer size

  void* y = kmem_alloc(5000, KM_SLEEP);  // kmem_alloc_5120
  kmem_free(y, 700);                     // kmem_alloc_768
  ASSERT_EQ(errors.seen.size(), 2u);
  EXPECT_STREQ(errors.seen[1].where, "kmem_alloc_768");
  EXPECT_NE(std::strstr(errors.seen[1].kind, "wrong size"), nullptr);
  EXPECT_EQ(errors.seen[1].detail, 5120u);

  void* big = kmem_alloc(40000, KM_SLEEP);  // a large allocation, not a slab
  kmem_free(big, 2000);
  ASSERT_EQ(errors.seen.size(), 3u);
  EXPECT_NE(std::strstr(errors.seen[2].kind, "large allocation"), nullptr);

  int on_stack;
  kmem_cache_free(a, &on_stack);  // not heap memory at all
  ASSERT_EQ(errors.seen.size(), 4u);
  EXPECT_NE(std::strstr(errors.seen[3].kind, "never allocated"), nullptr);

  // Nothing refused went into b's magazines, and everything still works.
  EXPECT_EQ(stats_of(b).frees, frees_b);
  void* z = kmem_cache_alloc(b, KM_SLEEP);
  EXPECT_NE(z, x);
  kmem_cache_free(b, z);
  kmem_cache_free(a, x);
  kmem_free(y, 5000);
  kmem_free(big, 40000);
  EXPECT_EQ(errors.seen.size(), 4u);
  EXPECT_TRUE(kmem_cache_destroy(a));
  EXPECT_TRUE(kmem_cache_destroy(b));
}

// A stale pointer into a destroyed on-slab cache, freed to the cache
// created next in the same structure (the cache structures' free slots are
// reused last-in first-out; a cache created right after the first keeps a
// page of several structures from going back meanwhile, in the kernel's
// layout): the page it points into went back to the arena with its slab
// header, and the header's cache word named the old cache, which is the
// new one's address. The free must be reported and refused (pushed, it
// would let the next allocation hand out a pointer into a page of no slab),
// at every on-slab size (chunk <= page / 8).
namespace {}  // namespace

TEST(kmem, StaleFreeIntoADestroyedOnSlabCacheIsRefused) {
  Errors errors;
  StaleArena t;
  ASSERT_NE(t.arena, nullptr);
  const size_t sizes[] = {8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512};
  for (size_t size : sizes) {
    SCOPED_TRACE(size);
    kmem_cache_t* a = kmem_cache_create("t_stale_a", size, 0, nullptr, nullptr, nullptr, nullptr, t.arena, 0);
    ASSERT_NE(a, nullptr);
    void* p = kmem_cache_alloc(a, KM_SLEEP);
    ASSERT_FALSE(stats_of(a).offslab);
    kmem_cache_free(a, p);
    ASSERT_TRUE(kmem_cache_destroy(a));
    kmem_cache_t* b = t.create_at(a, "t_stale_b", size);
    ASSERT_EQ(b, a) << "no new cache took the structure just freed: the case under test did not arise";
    const uint64_t frees = stats_of(b).frees;
    errors.seen.clear();
    kmem_cache_free(b, p);  // stale: p is in no slab of b
    ASSERT_EQ(errors.seen.size(), 1u);
    EXPECT_STREQ(errors.seen[0].where, "t_stale_b");
    EXPECT_NE(std::strstr(errors.seen[0].kind, "never allocated"), nullptr) << errors.seen[0].kind;
    EXPECT_EQ(errors.seen[0].address, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(stats_of(b).frees, frees);  // not pushed
    // What b hands out next is a buffer of one of its own slabs.
    void* q = kmem_cache_alloc(b, KM_SLEEP);
    mm::WhatIs w;
    ASSERT_TRUE(mm::kmem_whatis(q, w));
    EXPECT_EQ(w.kind, mm::WhatKind::kBuffer);
    EXPECT_EQ(w.state, mm::BufferState::kAllocated);
    EXPECT_STREQ(w.name, "t_stale_b");
    kmem_cache_free(b, q);
    EXPECT_TRUE(kmem_cache_destroy(b));
    EXPECT_EQ(errors.seen.size(), 1u);
  }
}

// kmem_free of null is a no-op at every size, with no report: the on-slab
// classes (up to 512 bytes) test it before their header's load, the larger
// classes let their owner check refuse it and then return quietly, and
// sizes past the table test it on their own branch. Nothing reaches a
// magazine: a pushed null would read as the magazine's bottom.
TEST(kmem, FreeOfNullIsANoOpAtEverySize) {
  Errors errors;
  const size_t sizes[] = {1, 8, 512, 513, 1024, 4096, 16384, 16385, 100000, 0};
  auto frees_of = [](const char* name) {
    struct Find {
      const char* name;
      uint64_t frees = ~uint64_t{0};
    } f{name};
    mm::kmem_cache_walk(
        [](const kmem_cache_t* cp, void* arg) {
          auto* f = static_cast<Find*>(arg);
          mm::KmemCacheStats st;
          mm::kmem_cache_stats(cp, st);
          if (std::strcmp(st.name, f->name) == 0) f->frees = st.frees;
        },
        &f);
    return f.frees;
  };
  // Warm the classes first, so that their magazines are loaded.
  for (size_t size : sizes)
    if (size) kmem_free(kmem_alloc(size, KM_SLEEP), size);
  const uint64_t small = frees_of("kmem_alloc_8"), large = frees_of("kmem_alloc_1024");
  ASSERT_NE(small, ~uint64_t{0});
  ASSERT_NE(large, ~uint64_t{0});
  for (size_t size : sizes) kmem_free(nullptr, size);
  EXPECT_EQ(errors.seen.size(), 0u);
  EXPECT_EQ(frees_of("kmem_alloc_8"), small);
  EXPECT_EQ(frees_of("kmem_alloc_1024"), large);
  for (size_t size : sizes) {
    if (!size) continue;
    void* p = kmem_alloc(size, KM_SLEEP);
    EXPECT_NE(p, nullptr);
    kmem_free(p, size);
  }
  EXPECT_EQ(errors.seen.size(), 0u);
}

// The off-slab owner check's ids (kmem_cache.h, OwnerCheck): each off-slab
// heap cache gets its own; once every id is taken, a new cache has none and
// its frees are decided by the page index alone (free_bad_owner, out of
// line): its own buffers go back to its magazines, with the push's test of
// the buffer on top (an immediate double free is refused), another cache's
// are refused, both ways. An id given back by a destroyed cache is taken
// by the next cache, whose frees then pass the one-compare check.
TEST(kmem, OffSlabCachesBeyondTheOwnerIdsStillCheckEveryFree) {
  Errors errors;
  std::vector<kmem_cache_t*> made;
  kmem_cache_t* last = nullptr;
  std::vector<uint32_t> ids;
  for (int i = 0; i < 5000; i++) {
    kmem_cache_t* cp = kmem_cache_create("t_ids", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, KMC_NOMAGAZINE);
    ASSERT_NE(cp, nullptr);
    made.push_back(cp);
    uint32_t id = stats_of(cp).owner_id;
    if (!id) {
      last = cp;
      break;
    }
    ids.push_back(id);
  }
  ASSERT_NE(last, nullptr) << "5000 off-slab caches and every one had an owner id";
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "two live caches share an owner id";
  // With magazines: the fallback pushes onto them.
  kmem_cache_t* noid = kmem_cache_create("t_noid", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* withid = made.front();
  kmem_cache_t* other = kmem_cache_create("t_noid_b", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  ASSERT_EQ(stats_of(noid).owner_id, 0u);
  ASSERT_TRUE(stats_of(noid).offslab);

  void* x[8];
  for (auto& p : x) p = kmem_cache_alloc(noid, KM_SLEEP);
  const uint64_t frees = stats_of(noid).frees;
  for (auto* p : x) kmem_cache_free(noid, p);
  EXPECT_EQ(errors.seen.size(), 0u);
  EXPECT_EQ(stats_of(noid).frees, frees + 8);
  void* y = kmem_cache_alloc(noid, KM_SLEEP);
  void* w = kmem_cache_alloc(withid, KM_SLEEP);
  kmem_cache_free(other, y);  // a buffer of the cache with no id, to another
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_NE(std::strstr(errors.seen[0].kind, "wrong cache"), nullptr);
  kmem_cache_free(noid, w);  // a buffer of a cache with an id, to the one without
  ASSERT_EQ(errors.seen.size(), 2u);
  EXPECT_STREQ(errors.seen[1].where, "t_noid");
  EXPECT_NE(std::strstr(errors.seen[1].kind, "wrong cache"), nullptr);
  int on_stack;
  kmem_cache_free(noid, &on_stack);
  ASSERT_EQ(errors.seen.size(), 3u);
  EXPECT_NE(std::strstr(errors.seen[2].kind, "never allocated"), nullptr);
  kmem_cache_free(noid, y);
  kmem_cache_free(noid, y);  // freed twice in a row: on top of the magazine
  ASSERT_EQ(errors.seen.size(), 4u);
  EXPECT_NE(std::strstr(errors.seen[3].kind, "double free"), nullptr);
  void* y1 = kmem_cache_alloc(noid, KM_SLEEP);
  void* y2 = kmem_cache_alloc(noid, KM_SLEEP);
  EXPECT_NE(y1, y2);  // y was not handed out twice
  kmem_cache_free(noid, y1);
  kmem_cache_free(noid, y2);
  kmem_cache_free(withid, w);
  EXPECT_EQ(errors.seen.size(), 4u);

  // withid's id goes back with it, and the next cache takes it.
  const uint32_t freed = stats_of(withid).owner_id;
  void* old = kmem_cache_alloc(withid, KM_SLEEP);
  kmem_cache_free(withid, old);
  EXPECT_TRUE(kmem_cache_destroy(withid));
  made.erase(made.begin());
  kmem_cache_t* again = kmem_cache_create("t_again", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(stats_of(again).owner_id, freed);
  void* z = kmem_cache_alloc(again, KM_SLEEP);
  const uint64_t again_frees = stats_of(again).frees;
  kmem_cache_free(again, z);
  EXPECT_EQ(stats_of(again).frees, again_frees + 1);
  EXPECT_EQ(errors.seen.size(), 4u);

  for (auto* cp : made) EXPECT_TRUE(kmem_cache_destroy(cp));
  EXPECT_TRUE(kmem_cache_destroy(noid));
  EXPECT_TRUE(kmem_cache_destroy(other));
  EXPECT_TRUE(kmem_cache_destroy(again));
  // Every id is back: a new off-slab cache has one.
  kmem_cache_t* after = kmem_cache_create("t_after", 2000, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  EXPECT_NE(stats_of(after).owner_id, 0u);
  EXPECT_TRUE(kmem_cache_destroy(after));
  EXPECT_EQ(errors.seen.size(), 4u);
}

// Large kmem_alloc (above 16 KiB): the free checks the pointer and the size
// against the allocation's pages and refuses, before anything is freed.
TEST(kmem, LargeKmemFreeChecksPointerAndSize) {
  Errors errors;
  auto* p = static_cast<uint8_t*>(kmem_alloc(100000, KM_SLEEP));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 100000);
  kmem_free(p, 50000);  // wrong size
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_NE(std::strstr(errors.seen[0].kind, "wrong size"), nullptr);
  EXPECT_EQ(errors.seen[0].detail, 102400u);  // its real size, in pages
  kmem_free(p + 8192, 100000 - 8192);         // interior pointer
  ASSERT_EQ(errors.seen.size(), 2u);
  EXPECT_NE(std::strstr(errors.seen[1].kind, "middle"), nullptr);
  EXPECT_EQ(p[99999], 0x5a);  // still ours, still mapped
  kmem_free(p, 100000);
  EXPECT_EQ(errors.seen.size(), 2u);
  kmem_free(p, 100000);  // twice
  ASSERT_EQ(errors.seen.size(), 3u);
  EXPECT_NE(std::strstr(errors.seen[2].kind, "freed twice"), nullptr);
}

// Requests that can never be met are refused with a report, even KM_SLEEP
// (which waits for memory, not for the impossible).
TEST(kmem, ImpossibleSizesAreRefusedNotWaitedFor) {
  Errors errors;
  EXPECT_EQ(kmem_alloc(SIZE_MAX, KM_SLEEP), nullptr);  // rounded up, it must not wrap to 0
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_EQ(errors.seen[0].detail, SIZE_MAX);
  EXPECT_NE(errors.seen[0].caller, 0u);
  EXPECT_EQ(kmem_alloc(mm::segkmem_heap_bytes() + 1, KM_SLEEP), nullptr);  // beyond the heap
  EXPECT_EQ(errors.seen.size(), 2u);
  EXPECT_EQ(kmem_zalloc(SIZE_MAX - 4095, KM_SLEEP), nullptr);
  EXPECT_EQ(errors.seen.size(), 3u);
  // A cache whose buffer the arena can never provide.
  EXPECT_EQ(kmem_cache_create("t_huge", SIZE_MAX, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0), nullptr);
  ASSERT_EQ(errors.seen.size(), 4u);
  EXPECT_STREQ(errors.seen[3].where, "t_huge");
  EXPECT_EQ(errors.seen[3].detail, SIZE_MAX);
  EXPECT_EQ(
      kmem_cache_create("t_huge2", mm::segkmem_heap_bytes() + 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
      nullptr);
  EXPECT_EQ(errors.seen.size(), 5u);
  EXPECT_EQ(kmem_cache_create("t_huge3", 1000, size_t{1} << 62, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
            nullptr);
  EXPECT_EQ(errors.seen.size(), 6u);
  // An arena whose reach saturates (two imports over spans of 2^63 bytes:
  // vmem_capacity ~0): a size whose rounding to the alignment wraps is
  // refused too (it made a chunk of 0, and cache setup divided by it).
  constexpr uintptr_t kHalf = uintptr_t{1} << 63;
  vmem_t* a =
      vmem_create("t_a", reinterpret_cast<void*>(kHalf), kHalf - 4096, 4096, nullptr, nullptr, nullptr, 0, VM_SLEEP);
  vmem_t* b =
      vmem_create("t_b", reinterpret_cast<void*>(4096), kHalf - 8192, 4096, vmem_alloc, vmem_free, a, 0, VM_SLEEP);
  vmem_t* c =
      vmem_create("t_c", reinterpret_cast<void*>(4096), kHalf - 8192, 4096, vmem_alloc, vmem_free, b, 0, VM_SLEEP);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(mm::vmem_capacity(c), ~uint64_t{0});
  EXPECT_EQ(kmem_cache_create("t_wrap", SIZE_MAX - 2, 0, nullptr, nullptr, nullptr, nullptr, c, 0), nullptr);
  ASSERT_EQ(errors.seen.size(), 7u);
  EXPECT_STREQ(errors.seen[6].where, "t_wrap");
  EXPECT_TRUE(vmem_destroy(c));
  EXPECT_TRUE(vmem_destroy(b));
  EXPECT_TRUE(vmem_destroy(a));
  // Sizes that fit still work.
  void* p = kmem_alloc(1 << 20, KM_SLEEP);
  EXPECT_NE(p, nullptr);
  kmem_free(p, 1 << 20);
  EXPECT_EQ(errors.seen.size(), 7u);
}

namespace {
std::string whatis_line(const void* p) {
  mm::WhatIs w;
  mm::kmem_whatis(p, w);
  char line[192];
  mm::kmem_whatis_format(w, line, sizeof line);
  return line;
}
}  // namespace

// kmem_whatis: every kind of heap and RAM address, with the buffer states.
TEST(kmem, WhatisNamesTheOwnerOfEveryKindOfAddress) {
  mm::WhatIs w;
  // A live kmem_alloc buffer, through an interior pointer.
  auto* p = static_cast<char*>(kmem_alloc(100, KM_SLEEP));
  ASSERT_TRUE(mm::kmem_whatis(p + 72, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kBuffer);
  EXPECT_EQ(w.start, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(w.state, mm::BufferState::kAllocated);
  EXPECT_STREQ(w.name, "kmem_alloc_112");
  EXPECT_GT(w.count, w.index);
  char want[64];
  std::snprintf(want, sizeof want, "%p is %p+72, allocated from kmem_alloc_112 (slab ", static_cast<void*>(p + 72),
                static_cast<void*>(p));
  EXPECT_EQ(whatis_line(p + 72).rfind(want, 0), 0u) << whatis_line(p + 72);
  // Freed: it sits in this thread's magazine.
  kmem_free(p, 100);
  ASSERT_TRUE(mm::kmem_whatis(p, w));
  EXPECT_EQ(w.state, mm::BufferState::kFreeInMagazine);
  EXPECT_NE(whatis_line(p).find("free in cpu "), std::string::npos) << whatis_line(p);

  // The depot and the slab layer, in a cache of our own.
  kmem_cache_t* cp = kmem_cache_create("t_whatis", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  std::vector<void*> v;
  for (uint64_t i = 0; i < 6 * stats_of(cp).magazine_size + 3; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* o : v) kmem_cache_free(cp, o);
  ASSERT_GT(stats_of(cp).depot_full, 0u);
  ASSERT_TRUE(mm::kmem_whatis(v[0], w));  // freed first: in a full magazine the CPU traded away
  EXPECT_EQ(w.state, mm::BufferState::kFreeInDepot) << whatis_line(v[0]);
  EXPECT_STREQ(w.name, "t_whatis");
  mm::kmem_reap(true);  // everything back to the slabs (one empty slab kept)
  void* one = kmem_cache_alloc(cp, KM_SLEEP);
  ASSERT_TRUE(mm::kmem_whatis(static_cast<char*>(one) + 200, w));  // the next buffer, never handed out
  EXPECT_EQ(w.kind, mm::WhatKind::kBuffer);
  EXPECT_EQ(w.state, mm::BufferState::kFreeInSlab);
  EXPECT_NE(whatis_line(static_cast<char*>(one) + 200).find("free in the slab layer of t_whatis"), std::string::npos);
  // The on-slab header at the end of the page is in no buffer.
  auto page = reinterpret_cast<uintptr_t>(one) & ~uintptr_t{4095};
  ASSERT_TRUE(mm::kmem_whatis(reinterpret_cast<void*>(page + 4095), w));
  EXPECT_EQ(w.kind, mm::WhatKind::kSlabOther);
  kmem_cache_free(cp, one);
  EXPECT_TRUE(kmem_cache_destroy(cp));

  // An off-slab buffer, a large allocation, a bare heap page.
  void* off = kmem_alloc(3000, KM_SLEEP);
  ASSERT_TRUE(mm::kmem_whatis(static_cast<char*>(off) + 2999, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kBuffer);
  EXPECT_EQ(w.start, reinterpret_cast<uintptr_t>(off));
  EXPECT_STREQ(w.name, "kmem_alloc_3072");
  auto* big = static_cast<char*>(kmem_alloc(100000, KM_SLEEP));
  ASSERT_TRUE(mm::kmem_whatis(big + 50000, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kLargeAlloc);
  EXPECT_EQ(w.start, reinterpret_cast<uintptr_t>(big));
  EXPECT_EQ(w.size, 102400u);
  void* span = vmem_alloc(mm::segkmem_default_arena(), 8192, VM_SLEEP);
  ASSERT_TRUE(mm::kmem_whatis(static_cast<char*>(span) + 4100, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kHeapPage);
  vmem_free(mm::segkmem_default_arena(), span, 8192);
  kmem_free(big, 100000);
  ASSERT_TRUE(mm::kmem_whatis(big + 50000, w));  // gone: no longer a large allocation
  EXPECT_NE(w.kind, mm::WhatKind::kLargeAlloc);
  kmem_free(off, 3000);

  // Page frames through the direct map.
  auto* blk = static_cast<char*>(mm::page_alloc_va(2, KM_SLEEP));
  ASSERT_TRUE(mm::kmem_whatis(blk + 3 * 4096 + 5, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kPageBlock);
  EXPECT_EQ(w.start, reinterpret_cast<uintptr_t>(blk));
  EXPECT_EQ(w.order, 2u);
  mm::page_free_va(blk, 2);
  ASSERT_TRUE(mm::kmem_whatis(blk + 3 * 4096 + 5, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kFreePage);
  EXPECT_LE(w.start, reinterpret_cast<uintptr_t>(blk));
  EXPECT_GE(w.start + w.size, reinterpret_cast<uintptr_t>(blk) + 4 * 4096);
  mm::Page* desc = mm::page_of(blk);  // descriptors live in reserved frames
  ASSERT_TRUE(mm::kmem_whatis(desc, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kReservedPage);

  int local;
  EXPECT_FALSE(mm::kmem_whatis(&local, w));
  EXPECT_EQ(whatis_line(&local).find("is not memory the kernel knows") != std::string::npos, true);
}

// A lock-free reader may find a slab page's kPageSlab still set and its
// owner already reset to g_no_owner: it loaded the flag before slab_destroy
// cleared it and the owner after (no order of the two stores prevents
// that). kmem_whatis and the bad-free report must read that as "no slab",
// not follow g_no_owner as if it were a Slab.
TEST(kmem, WhatisOfASlabPageClearedUnderIt) {
  mm::kmem_init();
  void* span = vmem_alloc(mm::segkmem_default_arena(), 4096, VM_SLEEP);
  mm::Page* p = mm::page_of(span);
  ASSERT_NE(p, nullptr);
  ASSERT_FALSE(p->flags & mm::kPageSlab);
  ASSERT_NE(p->owner, nullptr);  // a heap page of no slab: g_no_owner
  p->flags = static_cast<uint16_t>(p->flags | mm::kPageSlab);
  mm::WhatIs w;
  ASSERT_TRUE(mm::kmem_whatis(static_cast<char*>(span) + 8, w));
  EXPECT_EQ(w.kind, mm::WhatKind::kHeapPage) << whatis_line(static_cast<char*>(span) + 8);
  {
    Errors errors;
    kmem_free(span, 3000);  // an off-slab size class: the index names no slab of its cache
    ASSERT_EQ(Errors::seen.size(), 1u);
    EXPECT_NE(std::string(Errors::seen[0].kind).find("never allocated"), std::string::npos) << Errors::seen[0].kind;
  }
  p->flags = static_cast<uint16_t>(p->flags & ~mm::kPageSlab);
  vmem_free(mm::segkmem_default_arena(), span, 4096);
}

// A stray free racing the release of the page it points into: segkmem's
// forget_page (and the page cache, and the buddy lists, whose link shares
// the word) leave the descriptor with no owner while a reader that loaded
// the index entry just before still reads it. The off-slab owner check's
// look-up through the index (free_bad_owner) must report the free, not
// follow the null owner. The page is put in that state by hand, as
// forget_page leaves it (flags cleared, owner null, entry not yet read
// again), and given back as it was.
TEST(kmem, FreeIntoAPageBeingReleasedIsReportedNotFollowed) {
  mm::kmem_init();
  void* span = vmem_alloc(mm::segkmem_default_arena(), 4096, VM_SLEEP);
  mm::Page* p = mm::page_of(span);
  ASSERT_NE(p, nullptr);
  ASSERT_FALSE(p->flags & mm::kPageSlab);
  const uint16_t flags = p->flags;
  void* const owner = p->owner;
  for (uint16_t now : {uint16_t{0}, uint16_t{mm::kPagePcp}}) {  // released; then in a page cache
    SCOPED_TRACE(now);
    p->flags = now;
    p->owner = nullptr;
    Errors errors;
    kmem_free(static_cast<char*>(span) + 1024, 1024);  // an off-slab size class, no id for this page
    kmem_free(span, 3000);
    ASSERT_EQ(Errors::seen.size(), 2u);
    for (const mm::MemError& e : Errors::seen)
      EXPECT_NE(std::string(e.kind).find("never allocated"), std::string::npos) << e.kind;
  }
  p->flags = flags;
  p->owner = owner;
  vmem_free(mm::segkmem_default_arena(), span, 4096);
}

// The per-CPU statistics: frees are counted, allocations derived from
// them and from what enters and leaves a CPU's magazines without an
// operation (kmem_cache.h, CpuCache::extra). Every path that moves rounds
// is taken: magazine hits, swaps and depot trades both ways (bursts larger
// than two magazines), allocations from and frees to the slab layer, a
// thread's flush of its magazines at exit, a reap, frees on another
// thread, and a cache without magazines. The counts must be exact after
// each phase.
TEST(kmem, StatisticsCountEveryOperationOnEveryPath) {
  for (int cflags : {0, KMC_NOMAGAZINE}) {
    kmem_cache_t* cp = kmem_cache_create("t_counts", 72, 0, nullptr, nullptr, nullptr, nullptr, nullptr, cflags);
    ASSERT_NE(cp, nullptr);
    uint64_t allocs = 0, frees = 0;
    auto check = [&](const char* phase) {
      mm::KmemCacheStats s = stats_of(cp);
      EXPECT_EQ(s.allocs, allocs) << phase << (cflags ? " (no magazines)" : "");
      EXPECT_EQ(s.frees, frees) << phase << (cflags ? " (no magazines)" : "");
    };
    std::mt19937 rng(7);
    std::vector<void*> held;
    const size_t burst = 4 * stats_of(cp).magazine_size + 50;
    for (int round = 0; round < 40; round++) {
      size_t n = 1 + rng() % burst;
      for (size_t i = 0; i < n; i++, allocs++) held.push_back(kmem_cache_alloc(cp, KM_SLEEP));
      size_t m = rng() % (held.size() + 1);
      std::shuffle(held.begin(), held.end(), rng);
      for (size_t i = 0; i < m; i++, frees++) {
        kmem_cache_free(cp, held.back());
        held.pop_back();
      }
    }
    check("bursts");
    mm::kmem_reap(true);
    check("after a reap");
    // Another thread allocates and exits (its magazines are flushed), and
    // frees what this one holds.
    std::thread([&] {
      std::vector<void*> mine;
      for (int i = 0; i < 500; i++) mine.push_back(kmem_cache_alloc(cp, KM_SLEEP));
      for (size_t i = 0; i < mine.size() / 2; i++) kmem_cache_free(cp, mine[i]);
      for (size_t i = mine.size() / 2; i < mine.size(); i++) held.push_back(mine[i]);
      for (size_t i = 0; i < 100 && !held.empty(); i++) {
        kmem_cache_free(cp, held.front());
        held.erase(held.begin());
      }
    }).join();
    allocs += 500;
    frees += 250 + 100;
    check("after another thread's operations and its exit");
    for (void* p : held) kmem_cache_free(cp, p);
    frees += held.size();
    held.clear();
    check("all freed");
    EXPECT_EQ(stats_of(cp).buf_inuse, 0u);
    EXPECT_TRUE(kmem_cache_destroy(cp));
  }
}

// A cache of an integer arena has no owner check on its frees, and its
// magazines are stacks over a null bottom slot: a free of null is refused
// with a report, and the rounds in the magazine stay where they are (pushed,
// the null would read as the bottom and hide them).
TEST(kmem, NullFreeToAnIntegerArenaCacheIsRefusedAndLosesNothing) {
  mm::kmem_init();  // the host starts kmem on first use; vmem's tags need it
  Errors errors;
  vmem_t* ids = vmem_create("t_ids", reinterpret_cast<void*>(uintptr_t{1} << 20), size_t{1} << 20, 16, nullptr, nullptr,
                            nullptr, 0, VM_SLEEP);
  ASSERT_NE(ids, nullptr);
  kmem_cache_t* cp = kmem_cache_create("t_ids_cache", 16, 0, nullptr, nullptr, nullptr, nullptr, ids, 0);
  ASSERT_NE(cp, nullptr);
  ASSERT_GT(stats_of(cp).magazine_size, 2u);
  // Two rounds in this thread's loaded magazine.
  void* a = kmem_cache_alloc(cp, KM_SLEEP);
  void* b = kmem_cache_alloc(cp, KM_SLEEP);
  void* c = kmem_cache_alloc(cp, KM_SLEEP);
  ASSERT_TRUE(a && b && c);
  kmem_cache_free(cp, a);
  kmem_cache_free(cp, b);
  kmem_cache_free(cp, nullptr);
  ASSERT_EQ(errors.seen.size(), 1u);
  EXPECT_NE(std::strstr(errors.seen[0].kind, "null"), nullptr) << errors.seen[0].kind;
  EXPECT_STREQ(errors.seen[0].where, "t_ids_cache");
  // The two rounds come back, last first, and the counts hold.
  EXPECT_EQ(kmem_cache_alloc(cp, KM_SLEEP), b);
  EXPECT_EQ(kmem_cache_alloc(cp, KM_SLEEP), a);
  mm::KmemCacheStats s = stats_of(cp);
  EXPECT_EQ(s.allocs, 5u);
  EXPECT_EQ(s.frees, 2u);
  for (void* p : {a, b, c}) kmem_cache_free(cp, p);
  EXPECT_EQ(stats_of(cp).buf_inuse, 0u);
  EXPECT_EQ(errors.seen.size(), 1u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
  EXPECT_EQ(vmem_destroy(ids), true);
}
