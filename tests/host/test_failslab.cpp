// SPDX-License-Identifier: Apache-2.0
// Fault injection (mm/failslab.h) on the host under ASan/UBSan: the knobs'
// syntax, and which allocations fail: NOSLEEP ones only, of the named
// cache or arena only, at the interval, up to the count, after the space.
#include <gtest/gtest.h>
#include <mm/failslab.h>
#include <mm/kmem.h>
#include <mm/vmem.h>
#include <string>

namespace {

using mm::FailConfig;

TEST(Failslab, ParsesLinuxKnobs) {
  FailConfig c;
  const char* why = nullptr;
  ASSERT_TRUE(mm::failslab_parse("10,1,-1", c, &why));
  EXPECT_EQ(c.probability, 10u);
  EXPECT_EQ(c.interval, 1u);
  EXPECT_EQ(c.times, -1);
  EXPECT_EQ(c.space, 0u);
  EXPECT_STREQ(c.filter, "");
  ASSERT_TRUE(mm::failslab_parse("100,7,3,cache=kmem_alloc_96,space=4096", c, &why));
  EXPECT_EQ(c.probability, 100u);
  EXPECT_EQ(c.interval, 7u);
  EXPECT_EQ(c.times, 3);
  EXPECT_EQ(c.space, 4096u);
  EXPECT_STREQ(c.filter, "kmem_alloc_96");
}

TEST(Failslab, RefusesBadSpecsAndSaysWhy) {
  struct Bad {
    const char* spec;
    const char* says;
  } bad[] = {
      {"", "PROBABILITY"},
      {"101,1,1", "PROBABILITY"},
      {"x,1,1", "PROBABILITY"},
      {"10", "INTERVAL"},
      {"10,0,1", "INTERVAL"},
      {"10,1", "TIMES"},
      {"10,1,-2", "TIMES"},
      {"10,1,1,cache=", "cache="},
      {"10,1,1,space=lots", "space="},
      {"10,1,1,colour=red", "after TIMES"},
      {"10,1,1,cache=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "31 characters"},
  };
  for (const Bad& b : bad) {
    FailConfig c;
    c.probability = 42;
    const char* why = nullptr;
    EXPECT_FALSE(mm::failslab_parse(b.spec, c, &why)) << b.spec;
    ASSERT_NE(why, nullptr) << b.spec;
    EXPECT_NE(std::string(why).find(b.says), std::string::npos) << b.spec << ": " << why;
    EXPECT_EQ(c.probability, 42u) << "untouched on error: " << b.spec;
  }
}

struct Off {
  ~Off() { mm::failslab_off(); }
};

FailConfig spec(const char* s) {
  FailConfig c;
  const char* why = nullptr;
  EXPECT_TRUE(mm::failslab_parse(s, c, &why)) << s;
  return c;
}

TEST(Failslab, FailsOnlyNosleepAllocationsOfTheNamedCacheUpToTimes) {
  kmem_cache_t* cp = kmem_cache_create("t_fail", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmem_cache_t* other = kmem_cache_create("t_fail_other", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  Off off;
  ASSERT_TRUE(mm::failslab_set(spec("100,1,3,cache=t_fail")));
  void* held[8];
  unsigned n = 0;
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(kmem_cache_alloc(cp, KM_NOSLEEP), nullptr) << i;
    void* p = kmem_cache_alloc(cp, KM_SLEEP);  // never fails, takes none of the three
    EXPECT_NE(p, nullptr);
    held[n++] = p;
    void* q = kmem_cache_alloc(other, KM_NOSLEEP);  // another cache
    EXPECT_NE(q, nullptr);
    kmem_cache_free(other, q);
  }
  void* p = kmem_cache_alloc(cp, KM_NOSLEEP);  // the three are spent
  EXPECT_NE(p, nullptr);
  held[n++] = p;
  mm::FailState st;
  ASSERT_TRUE(mm::failslab_state(st));
  EXPECT_EQ(st.injected, 3u);
  EXPECT_EQ(st.times_left, 0);
  for (unsigned i = 0; i < n; i++) kmem_cache_free(cp, held[i]);
  mm::failslab_off();
  EXPECT_FALSE(mm::failslab_state(st));
  EXPECT_TRUE(kmem_cache_destroy(cp));
  EXPECT_TRUE(kmem_cache_destroy(other));
}

TEST(Failslab, IntervalProbabilityAndSpace) {
  kmem_cache_t* cp = kmem_cache_create("t_fail_knobs", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  Off off;
  auto failures = [cp](unsigned calls) {
    unsigned f = 0;
    for (unsigned i = 0; i < calls; i++) {
      void* p = kmem_cache_alloc(cp, KM_NOSLEEP);
      if (!p) f++;
      else kmem_cache_free(cp, p);
    }
    return f;
  };
  // Every third eligible call.
  ASSERT_TRUE(mm::failslab_set(spec("100,3,-1,cache=t_fail_knobs")));
  unsigned pattern = 0;
  for (unsigned i = 1; i <= 9; i++) {
    void* p = kmem_cache_alloc(cp, KM_NOSLEEP);
    if (!p) pattern |= 1u << i;
    else kmem_cache_free(cp, p);
  }
  EXPECT_EQ(pattern, (1u << 3) | (1u << 6) | (1u << 9));
  // Half of them, give or take.
  ASSERT_TRUE(mm::failslab_set(spec("50,1,-1,cache=t_fail_knobs")));
  unsigned f = failures(10000);
  EXPECT_GT(f, 4500u);
  EXPECT_LT(f, 5500u);
  // None until 1000 bytes have gone: 15 calls of 64 succeed, the 16th fails.
  ASSERT_TRUE(mm::failslab_set(spec("100,1,-1,cache=t_fail_knobs,space=1000")));
  EXPECT_EQ(failures(15), 0u);
  EXPECT_EQ(failures(1), 1u);
  EXPECT_EQ(failures(5), 5u);
  // Probability 0: never.
  ASSERT_TRUE(mm::failslab_set(spec("0,1,-1")));
  EXPECT_EQ(failures(100), 0u);
  mm::failslab_off();
  EXPECT_EQ(failures(100), 0u);
  EXPECT_TRUE(kmem_cache_destroy(cp));
}

TEST(Failslab, KmemAllocAndVmem) {
  Off off;
  ASSERT_TRUE(mm::failslab_set(spec("100,1,-1,cache=kmem_alloc")));  // large kmem_alloc only
  EXPECT_EQ(kmem_alloc(40000, KM_NOSLEEP), nullptr);
  void* big = kmem_alloc(40000, KM_SLEEP);
  EXPECT_NE(big, nullptr);
  kmem_free(big, 40000);
  void* small = kmem_alloc(100, KM_NOSLEEP);  // a size cache: kmem_alloc_112
  EXPECT_NE(small, nullptr);
  kmem_free(small, 100);
  ASSERT_TRUE(mm::failslab_set(spec("100,1,-1,cache=kmem_alloc_112")));
  EXPECT_EQ(kmem_zalloc(100, KM_NOSLEEP), nullptr);
  vmem_t* vmp = vmem_create("t_fail_arena", reinterpret_cast<void*>(0x10000), 1 << 20, 4096, nullptr, nullptr, nullptr,
                            0, VM_SLEEP);
  ASSERT_NE(vmp, nullptr);
  ASSERT_TRUE(mm::failslab_set(spec("100,1,2,cache=t_fail_arena")));
  EXPECT_EQ(vmem_alloc(vmp, 4096, VM_NOSLEEP), nullptr);
  EXPECT_EQ(vmem_xalloc(vmp, 4096, 8192, 0, 0, nullptr, nullptr, VM_NOSLEEP), nullptr);
  void* a = vmem_alloc(vmp, 4096, VM_NOSLEEP);  // the two are spent
  EXPECT_NE(a, nullptr);
  void* b = vmem_alloc(vmp, 4096, VM_SLEEP);
  EXPECT_NE(b, nullptr);
  vmem_free(vmp, a, 4096);
  vmem_free(vmp, b, 4096);
  mm::failslab_off();
  vmem_destroy(vmp);
}

}  // namespace
