// SPDX-License-Identifier: Apache-2.0
// Host tests of kmem's debug modes (mm/kmem_debug.cpp) and of the slab
// free list's hardening (mm/kmem_slab.cpp, Free-list hardening): every misuse
// class of the debug issue is made on purpose, its report checked field by
// field, and the allocator shown to work on afterwards.
#include <gtest/gtest.h>
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/platform.h>
#include <mm/stackdepot.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// A report, copied out of the hook (MemError::more lives only during it).
struct Seen {
  std::string kind, where;
  uintptr_t address;
  uint64_t detail;
  bool has_more;
  mm::MemDetail more;
};

struct Errors {
  static inline std::vector<Seen> seen;
  static void hook(const mm::MemError& e) {
    Seen s{e.kind, e.where, e.address, e.detail, e.more != nullptr, {}};
    if (e.more) s.more = *e.more;
    seen.push_back(s);
  }
  mm::MemErrorHook old;
  Errors() : old(mm::set_error_hook(hook)) { seen.clear(); }
  ~Errors() { mm::set_error_hook(old); }
  bool has(const std::string& prefix) const {
    for (auto& s : seen)
      if (s.kind.rfind(prefix, 0) == 0) return true;
    return false;
  }
};

// kmem_alloc's 64-byte class and one named cache are debugged from the
// configuration, as the bootarg would do; set before kmem comes up.
class DebugEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    mm::KmemDebugConfig c;
    const char* why = "";
    ASSERT_TRUE(mm::kmem_debug_parse("all,cache=kmem_alloc_64,cache=t_named,log=256", c, &why)) << why;
    mm::kmem_debug_configure(c);
    ASSERT_FALSE(mm::kmem_ready()) << "kmem came up before the configuration";
  }
};
const auto* g_env = ::testing::AddGlobalTestEnvironment(new DebugEnvironment);

constexpr int kAll = KMC_REDZONE | KMC_DEADBEEF | KMC_AUDIT | KMC_CONTENTS;

kmem_cache_t* make(const char* name, size_t size, int flags, int (*ctor)(void*, void*, int) = nullptr,
                   void (*dtor)(void*, void*) = nullptr, void* priv = nullptr) {
  return kmem_cache_create(name, size, 0, ctor, dtor, nullptr, priv, nullptr, flags);
}

uint64_t live_in(kmem_cache_t* cp) {
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  return st.buf_inuse;
}

// The cache still hands out distinct, clean buffers and takes them back.
void still_works(kmem_cache_t* cp, size_t size) {
  std::vector<char*> v;
  for (int i = 0; i < 64; i++) {
    auto* p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, size);
    v.push_back(p);
  }
  for (char* p : v) kmem_cache_free(cp, p);
  EXPECT_EQ(live_in(cp), 0u);
}

TEST(kmem_debug, ParseAcceptsTheBootargSyntaxAndSaysWhatIsWrong) {
  mm::KmemDebugConfig c;
  const char* why = "";
  ASSERT_TRUE(mm::kmem_debug_parse("redzone+poison", c, &why));
  EXPECT_EQ(c.flags, uint32_t{KMF_REDZONE | KMF_DEADBEEF});
  EXPECT_EQ(c.nnames, 0u);
  ASSERT_TRUE(mm::kmem_debug_parse("contents,cache=a,cache=bb,log=64", c, &why));
  EXPECT_EQ(c.flags, uint32_t{KMF_CONTENTS | KMF_AUDIT});
  ASSERT_EQ(c.nnames, 2u);
  EXPECT_STREQ(c.names[1], "bb");
  EXPECT_EQ(c.log_entries, 64u);
  ASSERT_TRUE(mm::kmem_debug_parse("0xf", c, &why));
  EXPECT_EQ(c.flags, uint32_t{KMF_ALL});
  ASSERT_TRUE(mm::kmem_debug_parse("5", c, &why));
  EXPECT_EQ(c.flags, uint32_t{KMF_AUDIT | KMF_REDZONE});
  for (const char* bad : {"", "redzone,,poison", "bogus", "cache=x", "redzone,cache=", "redzone,log=0", "redzone,log=x",
                          "0x100", "redzone,", "redzone,cache=abcdefghijabcdefghijabcdefghijabc"}) {
    why = "";
    EXPECT_FALSE(mm::kmem_debug_parse(bad, c, &why)) << bad;
    EXPECT_STRNE(why, "") << bad;
  }
  char name[64];
  mm::kmem_debug_flags_name(KMF_REDZONE | KMF_AUDIT, name, sizeof name);
  EXPECT_STREQ(name, "redzone+audit");
  mm::kmem_debug_flags_name(0, name, sizeof name);
  EXPECT_STREQ(name, "none");
}

TEST(kmem_debug, TheConfigurationDebugsTheNamedCachesOnly) {
  kmem_cache_t* named = make("t_named", 40, 0);
  kmem_cache_t* plain = make("t_plain", 40, 0);
  EXPECT_EQ(mm::kmem_cache_debug_flags(named), uint32_t{KMF_ALL});
  EXPECT_EQ(mm::kmem_cache_debug_flags(plain), 0u);
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(named, st);
  EXPECT_EQ(st.magazine_size, 0u) << "a debugged cache has no magazines";
  mm::kmem_cache_stats(plain, st);
  EXPECT_GT(st.magazine_size, 0u);
  still_works(named, 40);
  EXPECT_TRUE(kmem_cache_destroy(named));
  EXPECT_TRUE(kmem_cache_destroy(plain));
}

TEST(kmem_debug, OverrunIsReportedOnTheFreeWithOffsetBytesAndTrail) {
  kmem_cache_t* cp = make("t_overrun", 37, kAll);
  auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  ASSERT_NE(p, nullptr);
  {
    Errors e;
    EXPECT_EQ(mm::kmem_verify(cp), 0u);
    p[37] = 0x41;  // one byte past the end
    p[38] = 0x42;
    uint64_t checked = 0;
    EXPECT_EQ(mm::kmem_verify(cp, &checked), 1u) << "kmem_verify finds it before the free";
    EXPECT_GT(checked, 0u);
    ASSERT_EQ(e.seen.size(), 1u);
    e.seen.clear();
    kmem_cache_free(cp, p);
    ASSERT_EQ(e.seen.size(), 1u);
    const Seen& s = e.seen[0];
    EXPECT_EQ(s.kind.rfind("buffer overrun", 0), 0u) << s.kind;
    EXPECT_EQ(s.where, "t_overrun");
    EXPECT_EQ(s.address, reinterpret_cast<uintptr_t>(p));
    ASSERT_TRUE(s.has_more);
    EXPECT_EQ(s.more.offset, 37);
    EXPECT_EQ(s.more.found[0], 0x41);
    EXPECT_EQ(s.more.found[1], 0x42);
    EXPECT_EQ(s.more.found[2], 0xbb) << "the redzone bytes go on to the tag at 40";
    EXPECT_EQ(s.more.found[3], 0xce) << "then the redzone word 0xfeedfacefeedface, little-endian";
    EXPECT_EQ(s.more.size, 37u);
    EXPECT_TRUE(s.more.alloc.valid);
    EXPECT_NE(s.more.alloc.stack, 0u) << "audit keeps the allocation's backtrace";
  }
  // The free went through and the redzone was repaired.
  EXPECT_EQ(live_in(cp), 0u);
  {
    Errors e;
    EXPECT_EQ(mm::kmem_verify(cp), 0u);
    still_works(cp, 37);
    EXPECT_TRUE(e.seen.empty());
  }
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem_debug, OverrunOfTheRedzoneWordAndOfKmemAllocsExactSize) {
  // Past the 0xbb bytes: the redzone word itself.
  kmem_cache_t* cp = make("t_word", 64, KMC_REDZONE);
  auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  {
    Errors e;
    p[64 + 3] = 0;
    kmem_cache_free(cp, p);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].more.offset, 67);
    EXPECT_NE(std::string(e.seen[0].more.expected).find("redzone word"), std::string::npos);
  }
  EXPECT_TRUE(kmem_cache_destroy(cp));
  // kmem_alloc(50) in the debugged 64-byte class: the redzone starts at 50.
  auto* q = static_cast<uint8_t*>(kmem_alloc(50, KM_SLEEP));
  mm::KmemTrail t;
  ASSERT_TRUE(mm::kmem_debug_trail(q, t)) << "kmem_alloc_64 is debugged by the configuration";
  EXPECT_EQ(t.size, 50u);
  EXPECT_TRUE(t.allocated);
  {
    Errors e;
    q[50] = 7;
    kmem_free(q, 50);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].more.offset, 50);
    EXPECT_EQ(e.seen[0].more.found[0], 7);
  }
  ASSERT_TRUE(mm::kmem_debug_trail(q, t));
  EXPECT_FALSE(t.allocated);
}

TEST(kmem_debug, WriteAfterFreeIsReportedAtTheNextAllocationWithTheFreeTrail) {
  kmem_cache_t* cp = make("t_uaf", 48, kAll);
  auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  kmem_cache_free(cp, p);
  for (int i = 0; i < 48; i += 4) {
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    ASSERT_EQ(w, 0xdeadbeefu) << "a free buffer is poisoned, offset " << i;
  }
  p[12] = 0x99;  // write after free
  {
    Errors e;
    EXPECT_EQ(mm::kmem_verify(cp), 1u);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind.rfind("write after free", 0), 0u);
    e.seen.clear();
    // The buffer is the slab's first free one: the next allocation takes it.
    auto* q = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
    ASSERT_EQ(q, p);
    ASSERT_EQ(e.seen.size(), 1u);
    const Seen& s = e.seen[0];
    EXPECT_EQ(s.kind.rfind("write after free", 0), 0u) << s.kind;
    EXPECT_EQ(s.more.offset, 12);
    EXPECT_EQ(s.more.found[0], 0x99);
    EXPECT_EQ(s.more.found[1], 0xbe) << "then the poison again (0xdeadbeef, little-endian: ef be ad de)";
    EXPECT_TRUE(s.more.free.valid);
    EXPECT_NE(s.more.free.stack, 0u) << "the last free's backtrace";
    // A new buffer of a cache without a constructor holds 0xbaddcafe.
    uint32_t w;
    std::memcpy(&w, q + 20, 4);
    EXPECT_EQ(w, 0xbaddcafeu);
    kmem_cache_free(cp, q);
  }
  Errors e;
  EXPECT_EQ(mm::kmem_verify(cp), 0u);
  still_works(cp, 48);
  EXPECT_TRUE(e.seen.empty());
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem_debug, DoubleFreeAtAnyDepthIsRefusedWithBothFrees) {
  kmem_cache_t* cp = make("t_double", 32, KMC_AUDIT);
  std::vector<void*> v;
  for (int i = 0; i < 20; i++) v.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  for (void* p : v) kmem_cache_free(cp, p);
  {
    Errors e;
    kmem_cache_free(cp, v[3]);  // 16 frees after its own
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind, "double free");
    EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(v[3]));
    EXPECT_TRUE(e.seen[0].more.free.valid) << "the first free's trail";
    EXPECT_NE(e.seen[0].more.free.stack, 0u);
  }
  // Refused: the buffer is handed out once only.
  std::vector<void*> w;
  for (int i = 0; i < 40; i++) w.push_back(kmem_cache_alloc(cp, KM_SLEEP));
  std::sort(w.begin(), w.end());
  EXPECT_EQ(std::adjacent_find(w.begin(), w.end()), w.end());
  for (void* p : w) kmem_cache_free(cp, p);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem_debug, InteriorForeignAndWrongCacheFreesAreRefused) {
  kmem_cache_t* a = make("t_a", 64, KMC_REDZONE);
  kmem_cache_t* b = make("t_b", 64, KMC_REDZONE);
  auto* p = static_cast<char*>(kmem_cache_alloc(a, KM_SLEEP));
  auto* q = static_cast<char*>(kmem_cache_alloc(b, KM_SLEEP));
  {
    Errors e;
    kmem_cache_free(a, p + 8);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind.rfind("free of an address inside a buffer", 0), 0u) << e.seen[0].kind;
    EXPECT_EQ(e.seen[0].more.buffer, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(e.seen[0].more.offset, 8);
    e.seen.clear();
    kmem_cache_free(a, q);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind.rfind("free to the wrong cache", 0), 0u) << e.seen[0].kind;
    e.seen.clear();
    void* not_kmem = std::aligned_alloc(4096, 4096);  // a whole page: the owner check reads its end
    std::memset(not_kmem, 0, 4096);
    kmem_cache_free(a, not_kmem);
    std::free(not_kmem);
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind.rfind("free of a pointer kmem never allocated", 0), 0u) << e.seen[0].kind;
  }
  EXPECT_EQ(live_in(a), 1u);
  EXPECT_EQ(live_in(b), 1u);
  kmem_cache_free(a, p);
  kmem_cache_free(b, q);
  EXPECT_TRUE(kmem_cache_destroy(a));
  EXPECT_TRUE(kmem_cache_destroy(b));
}

TEST(kmem_debug, KmemFreeWithTheWrongSizeInTheRightClassIsRefused) {
  void* p = kmem_alloc(50, KM_SLEEP);
  {
    Errors e;
    kmem_free(p, 60);  // the same 64-byte class
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind.rfind("kmem_free with the wrong size", 0), 0u) << e.seen[0].kind;
    EXPECT_EQ(e.seen[0].detail, 60u);
    EXPECT_EQ(e.seen[0].more.size, 50u);
  }
  mm::KmemTrail t;
  ASSERT_TRUE(mm::kmem_debug_trail(p, t));
  EXPECT_TRUE(t.allocated) << "refused: still allocated";
  Errors e;
  kmem_free(p, 50);
  EXPECT_TRUE(e.seen.empty());
}

TEST(kmem_debug, DestroyWithLiveObjectsNamesThemAndWhoAllocatedThem) {
  kmem_cache_t* cp = make("t_live", 24, KMC_AUDIT);
  void* p = kmem_cache_alloc(cp, KM_SLEEP);
  void* q = kmem_cache_alloc(cp, KM_SLEEP);
  {
    Errors e;
    EXPECT_FALSE(kmem_cache_destroy(cp));
    ASSERT_EQ(e.seen.size(), 1u);
    EXPECT_EQ(e.seen[0].kind, "kmem_cache_destroy of a cache with live objects");
    EXPECT_EQ(e.seen[0].detail, 2u);
    ASSERT_TRUE(e.seen[0].has_more);
    uintptr_t first = e.seen[0].more.buffer;
    EXPECT_TRUE(first == reinterpret_cast<uintptr_t>(p) || first == reinterpret_cast<uintptr_t>(q));
    EXPECT_TRUE(e.seen[0].more.alloc.valid);
    EXPECT_NE(e.seen[0].more.alloc.stack, 0u);
  }
  kmem_cache_free(cp, p);
  kmem_cache_free(cp, q);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// Links inside free buffers are encoded and checked (both the first word
// of a plain cache's buffer and the tag of a debugged one).
TEST(kmem_debug, FreeListCorruptionIsReportedAndNeverFollowed) {
  for (int flags : {KMC_NOMAGAZINE, KMC_REDZONE}) {
    kmem_cache_t* cp = make("t_freelist", 64, flags);
    std::vector<char*> v;
    for (int i = 0; i < 8; i++) v.push_back(static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP)));
    for (char* p : v) kmem_cache_free(cp, p);
    // The last freed is the slab's free-list head; its link is next taken.
    char* head = v.back();
    size_t link_at = mm::kmem_cache_debug_flags(cp) ? 64 + 16 : 0;  // the tag's link, or the first word
    uint32_t plausible = 2;                                         // an index that exists, written raw
    std::memcpy(head + link_at, &plausible, 4);
    {
      Errors e;
      std::vector<char*> w;
      for (int i = 0; i < 16; i++) w.push_back(static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP)));
      ASSERT_EQ(e.seen.size(), 1u) << flags;
      EXPECT_EQ(e.seen[0].kind.rfind("free list corruption", 0), 0u) << e.seen[0].kind;
      EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(head));
      EXPECT_NE(e.seen[0].more.buffer, 0u) << "the slab";
      std::vector<char*> sorted = w;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "no buffer handed out twice";
      for (char* p : w) kmem_cache_free(cp, p);
    }
    EXPECT_EQ(live_in(cp), 0u);
    EXPECT_TRUE(kmem_cache_destroy(cp));
  }
}

struct LogSeen {
  std::vector<mm::KmemLogEntry> v;
};

// n buffers of cp taken one after another from a new cache: neighbours
// in one slab, at one chunk's distance (checked).
std::vector<uint8_t*> neighbours(kmem_cache_t* cp, unsigned n) {
  std::vector<uint8_t*> v;
  for (unsigned i = 0; i < n; i++) v.push_back(static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP)));
  for (unsigned i = 2; i < n; i++) EXPECT_EQ(v[i] - v[i - 1], v[1] - v[0]) << "buffer " << i << " is no neighbour";
  return v;
}

bool same_finding(const Seen& a, const Seen& b) {
  return a.kind == b.kind && a.address == b.address && a.more.offset == b.more.offset &&
         a.more.nfound == b.more.nfound && std::memcmp(a.more.found, b.more.found, a.more.nfound) == 0;
}

// The user: a 40-byte cache with redzones and audit, neighbours on
// both sides, the middle buffer overrun by N bytes (into the next buffers
// for the long ones) and freed. Every N is reported once, against the
// overrun buffer, with the offset where its redzone starts and its
// allocation's trail (kept before the buffer, out of its own overrun's
// reach); kmem_verify finds the same before the free; the neighbours the
// write ran into are repaired with the report and free without another.
TEST(kmem_debug, EveryOverrunLengthIsReportedOnTheFreeAndByVerify) {
  auto one = [](unsigned n) {
    kmem_cache_t* cp = make("t_long", 40, KMC_REDZONE | KMC_AUDIT);
    std::vector<uint8_t*> v = neighbours(cp, 8);
    uint8_t* p = v[2];
    ASSERT_LT(p + 40 + n, v[7]) << "the write stays inside the neighbours";
    for (unsigned k = 0; k < n; k++) p[40 + k] = static_cast<uint8_t>(0x41 + k % 5);
    Errors e;
    uint64_t checked = 0;
    EXPECT_EQ(mm::kmem_verify(cp, &checked), 1u);
    mm::KmemCacheStats st;
    mm::kmem_cache_stats(cp, st);
    EXPECT_EQ(checked, st.buf_total) << "every buffer of the slab";
    ASSERT_EQ(e.seen.size(), 1u);
    Seen by_verify = e.seen[0];
    e.seen.clear();
    kmem_cache_free(cp, p);
    ASSERT_EQ(e.seen.size(), 1u);
    const Seen& s = e.seen[0];
    EXPECT_EQ(s.kind.rfind("buffer overrun", 0), 0u) << s.kind;
    EXPECT_EQ(s.address, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(s.more.buffer, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(s.more.offset, 40);
    EXPECT_EQ(s.more.size, 40u);
    EXPECT_EQ(s.more.found[0], 0x41);
    EXPECT_TRUE(s.more.alloc.valid) << "the overrun buffer's own trail survives its overrun";
    EXPECT_NE(s.more.alloc.stack, 0u);
    EXPECT_TRUE(same_finding(by_verify, s)) << "verify: " << by_verify.kind << " at " << by_verify.more.offset;
    // The neighbours whose left redzone word the write reached.
    unsigned reached = 0;
    for (unsigned j = 3; j < v.size(); j++) reached += v[j] - 8 < p + 40 + n;
    EXPECT_EQ(s.more.reached, reached);
    EXPECT_EQ(by_verify.more.reached, reached);
    EXPECT_EQ(s.more.buffer + s.more.reached_off, reached ? reinterpret_cast<uintptr_t>(v[3]) : s.more.buffer);
    e.seen.clear();
    for (uint8_t* q : v)
      if (q != p) kmem_cache_free(cp, q);
    EXPECT_TRUE(e.seen.empty()) << e.seen[0].kind << " at " << e.seen[0].address;
    EXPECT_EQ(mm::kmem_verify(cp), 0u);
    still_works(cp, 40);
    EXPECT_TRUE(e.seen.empty());
    EXPECT_TRUE(kmem_cache_destroy(cp));
  };
  for (unsigned n : {1u, 7u, 8u, 12u, 16u, 24u, 31u, 48u, 64u, 100u, 200u}) {
    SCOPED_TRACE("overrun of " + std::to_string(n) + " bytes");
    one(n);
  }
}

// The neighbour freed first: its check finds the write came from below
// (its left redzone and the previous buffer's tag are both damaged) and
// names the buffer that was overrun, not itself.
TEST(kmem_debug, AnOverrunFoundAtTheNeighboursFreeNamesTheOverrunBuffer) {
  kmem_cache_t* cp = make("t_victim", 40, KMC_REDZONE | KMC_AUDIT);
  std::vector<uint8_t*> v = neighbours(cp, 6);
  uint8_t* p = v[1];
  std::memset(p + 40, 0x5c, 100);
  Errors e;
  kmem_cache_free(cp, v[2]);
  ASSERT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(e.seen[0].kind.rfind("buffer overrun", 0), 0u) << e.seen[0].kind;
  EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(e.seen[0].more.offset, 40);
  EXPECT_EQ(e.seen[0].more.reached, 1u) << "it ran into one neighbour";
  EXPECT_EQ(e.seen[0].more.buffer + e.seen[0].more.reached_off, reinterpret_cast<uintptr_t>(v[2]));
  EXPECT_TRUE(e.seen[0].more.alloc.valid);
  e.seen.clear();
  for (uint8_t* q : v)
    if (q != v[2]) kmem_cache_free(cp, q);
  EXPECT_TRUE(e.seen.empty()) << e.seen[0].kind;
  EXPECT_EQ(mm::kmem_verify(cp), 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// A long overrun into a free neighbour (its poison, its tag and the slab's
// free-list link inside it): one report on the free, and the neighbour is
// handed out again without a "write after free" or a free-list report.
TEST(kmem_debug, AnOverrunIntoAFreeNeighbourIsReportedOnce) {
  kmem_cache_t* cp = make("t_freenb", 40, kAll);
  std::vector<uint8_t*> v = neighbours(cp, 6);
  kmem_cache_free(cp, v[3]);
  uint8_t* p = v[2];
  std::memset(p + 40, 0x6d, 130);
  Errors e;
  EXPECT_EQ(mm::kmem_verify(cp), 1u);
  ASSERT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(p));
  e.seen.clear();
  kmem_cache_free(cp, p);
  ASSERT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(e.seen[0].kind.rfind("buffer overrun", 0), 0u) << e.seen[0].kind;
  EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(p));
  e.seen.clear();
  for (uint8_t* q : v)
    if (q != p && q != v[3]) kmem_cache_free(cp, q);
  still_works(cp, 40);
  EXPECT_TRUE(e.seen.empty()) << e.seen[0].kind;
  EXPECT_EQ(mm::kmem_verify(cp), 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// kmem_alloc(50) in the debugged 64-byte class, overrun far enough to
// overwrite the size kept in its tag: the size kept before the buffer
// still says where the redzone starts.
TEST(kmem_debug, KmemAllocsSizeSurvivesAnOverrunOfItsTag) {
  std::vector<uint8_t*> v;
  for (int i = 0; i < 16; i++) v.push_back(static_cast<uint8_t*>(kmem_alloc(50, KM_SLEEP)));
  std::vector<uint8_t*> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  uint8_t* p = nullptr;
  ptrdiff_t chunk = 0;
  for (size_t i = 0; i + 2 < sorted.size() && !p; i++)
    if (sorted[i + 1] - sorted[i] == sorted[i + 2] - sorted[i + 1] && sorted[i + 1] - sorted[i] < 256) {
      p = sorted[i];
      chunk = sorted[i + 1] - sorted[i];
    }
  ASSERT_NE(p, nullptr) << "three neighbours in kmem_alloc_64";
  ASSERT_GT(50 + 90, chunk - 8) << "the write reaches the next buffer";
  std::memset(p + 50, 0x77, 90);
  Errors e;
  kmem_free(p, 50);
  ASSERT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(e.seen[0].kind.rfind("buffer overrun", 0), 0u) << e.seen[0].kind;
  EXPECT_EQ(e.seen[0].address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(e.seen[0].more.offset, 50);
  EXPECT_EQ(e.seen[0].more.size, 50u);
  e.seen.clear();
  for (uint8_t* q : v)
    if (q != p) kmem_free(q, 50);
  EXPECT_TRUE(e.seen.empty()) << e.seen[0].kind;
}

// A stray write into the tag's size word alone (the redzone and the state
// word intact) is caught, not believed.
TEST(kmem_debug, AStrayWriteToTheTagsSizeIsCaught) {
  kmem_cache_t* cp = make("t_sizeword", 40, KMC_REDZONE);
  std::vector<uint8_t*> v = neighbours(cp, 3);
  uint8_t* p = v[1];
  uint32_t huge = 0x41414141;
  std::memcpy(p + 40 + 12, &huge, 4);  // the BufTag's size: after the redzone word and the state word
  Errors e;
  EXPECT_EQ(mm::kmem_verify(cp), 1u);
  e.seen.clear();
  kmem_cache_free(cp, p);
  ASSERT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(e.seen[0].kind.rfind("buffer overrun", 0), 0u) << e.seen[0].kind;
  EXPECT_EQ(e.seen[0].more.offset, 52);
  EXPECT_EQ(e.seen[0].more.size, 40u);
  kmem_cache_free(cp, v[0]);
  kmem_cache_free(cp, v[2]);
  EXPECT_EQ(e.seen.size(), 1u);
  EXPECT_EQ(mm::kmem_verify(cp), 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

// A write to the bytes just before a buffer is reported against that
// buffer (its left redzone), on the free and by kmem_verify, also for the
// first buffer of a slab, which has no previous buffer.
TEST(kmem_debug, UnderrunIsReportedAgainstItsOwnBuffer) {
  auto one = [](unsigned bytes, unsigned victim) {
    kmem_cache_t* cp = make("t_under", 40, KMC_REDZONE | KMC_AUDIT);
    std::vector<uint8_t*> v = neighbours(cp, 4);
    uint8_t* p = v[victim];
    std::memset(p - bytes, 0x42, bytes);
    Errors e;
    EXPECT_EQ(mm::kmem_verify(cp), 1u);
    ASSERT_EQ(e.seen.size(), 1u);
    Seen by_verify = e.seen[0];
    e.seen.clear();
    kmem_cache_free(cp, p);
    ASSERT_EQ(e.seen.size(), 1u);
    const Seen& s = e.seen[0];
    EXPECT_EQ(s.kind.rfind("buffer underrun", 0), 0u) << s.kind;
    EXPECT_EQ(s.address, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(s.more.offset, -static_cast<int64_t>(bytes));
    EXPECT_EQ(s.more.found[0], 0x42);
    EXPECT_EQ(s.more.nfound, bytes);
    EXPECT_TRUE(s.more.alloc.valid);
    EXPECT_TRUE(same_finding(by_verify, s));
    e.seen.clear();
    for (uint8_t* q : v)
      if (q != p) kmem_cache_free(cp, q);
    EXPECT_EQ(mm::kmem_verify(cp), 0u);
    still_works(cp, 40);
    EXPECT_TRUE(e.seen.empty()) << e.seen[0].kind;
    EXPECT_TRUE(kmem_cache_destroy(cp));
  };
  for (unsigned bytes : {1u, 8u})
    for (unsigned victim : {0u, 2u}) {
      SCOPED_TRACE("underrun of " + std::to_string(bytes) + " bytes of buffer " + std::to_string(victim));
      one(bytes, victim);
    }
}

// The audit trail and the log name the thread (the host's thread-
// equivalent of the kernel's command or interrupt) that allocated and
// freed, besides the CPU.
TEST(kmem_debug, AuditTrailsNameTheThreadThatAllocatedAndFreed) {
  kmem_cache_t* cp = make("t_who", 40, KMC_AUDIT);
  void* p = nullptr;
  pid_t other = 0;
  std::thread t([&] {
    p = kmem_cache_alloc(cp, KM_SLEEP);
    other = static_cast<pid_t>(syscall(SYS_gettid));
  });
  t.join();
  kmem_cache_free(cp, p);
  mm::KmemTrail tr;
  ASSERT_TRUE(mm::kmem_debug_trail(p, tr));
  ASSERT_TRUE(tr.alloc.valid && tr.free.valid);
  EXPECT_NE(tr.alloc.context, tr.free.context);
  char name[32];
  mm::plat::context_name(tr.alloc.context, name, sizeof name);
  EXPECT_EQ(std::string(name), "tid " + std::to_string(other));
  mm::plat::context_name(tr.free.context, name, sizeof name);
  EXPECT_EQ(std::string(name), "tid " + std::to_string(syscall(SYS_gettid)));
  LogSeen seen;
  mm::kmem_log_walk(
      reinterpret_cast<uintptr_t>(p),
      [](const mm::KmemLogEntry& e, void* arg) { static_cast<LogSeen*>(arg)->v.push_back(e); }, &seen);
  ASSERT_GE(seen.v.size(), 2u);
  EXPECT_EQ(seen.v[seen.v.size() - 2].context, tr.alloc.context);
  EXPECT_EQ(seen.v.back().context, tr.free.context);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

struct Counts {
  std::atomic<int> ctors{0}, dtors{0};
};
int count_ctor(void* buf, void* priv, int) {
  static_cast<Counts*>(priv)->ctors++;
  std::memset(buf, 0x11, 16);
  return 0;
}
void count_dtor(void* buf, void* priv) {
  EXPECT_EQ(static_cast<uint8_t*>(buf)[0], 0x11) << "destructed while still constructed";
  static_cast<Counts*>(priv)->dtors++;
}

TEST(kmem_debug, PoisonedCachesWithConstructorsConstructEveryAllocation) {
  Counts c;
  kmem_cache_t* cp = make("t_ctor", 16, KMC_DEADBEEF | KMC_REDZONE, count_ctor, count_dtor, &c);
  for (int i = 0; i < 10; i++) {
    auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
    EXPECT_EQ(p[15], 0x11) << "constructed";
    kmem_cache_free(cp, p);
    uint32_t w;
    std::memcpy(&w, p, 4);
    EXPECT_EQ(w, 0xdeadbeefu) << "destructed and poisoned";
  }
  EXPECT_EQ(c.ctors.load(), 10);
  EXPECT_EQ(c.dtors.load(), 10);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(kmem_debug, TheTransactionLogKeepsEveryOperationAndTheContents) {
  kmem_cache_t* cp = make("t_log", 40, KMC_CONTENTS);
  ASSERT_GE(mm::kmem_log_capacity(), 256u);
  auto* p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
  std::memcpy(p, "magpie-log-bytes!", 17);
  kmem_cache_free(cp, p);
  void* q = kmem_cache_alloc(cp, KM_SLEEP);
  ASSERT_EQ(q, p);
  LogSeen seen;
  uint64_t n = mm::kmem_log_walk(
      reinterpret_cast<uintptr_t>(p) + 5,
      [](const mm::KmemLogEntry& e, void* arg) { static_cast<LogSeen*>(arg)->v.push_back(e); }, &seen);
  ASSERT_EQ(n, 3u);
  ASSERT_EQ(seen.v.size(), 3u);
  EXPECT_TRUE(seen.v[0].alloc);
  EXPECT_FALSE(seen.v[1].alloc);
  EXPECT_TRUE(seen.v[2].alloc);
  EXPECT_LT(seen.v[0].seq, seen.v[1].seq);
  EXPECT_STREQ(seen.v[1].cache, "t_log");
  EXPECT_EQ(seen.v[1].ncontents, 16u);
  EXPECT_EQ(std::memcmp(seen.v[1].contents, "magpie-log-bytes", 16), 0);
  EXPECT_NE(seen.v[0].stack, 0u);
  mm::KmemTrail t;
  ASSERT_TRUE(mm::kmem_debug_trail(p, t));
  EXPECT_TRUE(t.allocated);
  EXPECT_TRUE(t.alloc.valid);
  EXPECT_TRUE(t.free.valid);
  const uintptr_t* pcs;
  EXPECT_GT(mm::stackdepot_fetch(t.alloc.stack, &pcs), 0u);
  kmem_cache_free(cp, q);
  EXPECT_TRUE(kmem_cache_destroy(cp));
  // The log outlives the cache, and says so.
  seen.v.clear();
  mm::kmem_log_walk(
      0, [](const mm::KmemLogEntry& e, void* arg) { static_cast<LogSeen*>(arg)->v.push_back(e); }, &seen);
  ASSERT_FALSE(seen.v.empty());
  bool destroyed = false;
  for (auto& e : seen.v) destroyed |= std::string(e.cache) == "(destroyed cache)";
  EXPECT_TRUE(destroyed);
}

// Threads allocate, write their buffers to the last byte and free, while
// the main thread verifies and reads the log over and over: no report
// (in-flight buffers are skipped, the rest are stable under the slab lock)
// and no torn log entry (also built under ThreadSanitizer).
TEST(kmem_debug, VerifyWhileOthersAllocateReportsNothing) {
  kmem_cache_t* cp = make("t_busy", 100, kAll);
  Errors e;
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; t++)
    ts.emplace_back([&] {
      std::vector<char*> held;
      while (!stop.load(std::memory_order_relaxed)) {
        auto* p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
        std::memset(p, 0x3c, 100);
        held.push_back(p);
        if (held.size() > 50) {
          for (char* q : held) kmem_cache_free(cp, q);
          held.clear();
        }
      }
      for (char* q : held) kmem_cache_free(cp, q);
    });
  uint64_t bad = 0, checked = 0, passes = 0, logged = 0, torn = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until || checked < 10000) {
    uint64_t c = 0;
    bad += mm::kmem_verify(cp, &c);
    checked += c;
    passes++;
    // The log's lock-free reader against its writers (every operation of
    // an audited cache): each entry read whole or skipped.
    logged += mm::kmem_log_walk(
        0,
        [](const mm::KmemLogEntry& e, void* arg) {
          if (e.seq == 0 || !e.buffer) ++*static_cast<uint64_t*>(arg);  // never a torn entry
        },
        &torn);
  }
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_TRUE(e.seen.empty());
  EXPECT_GT(checked, 0u);
  EXPECT_GT(logged, 0u);
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(live_in(cp), 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

}  // namespace
