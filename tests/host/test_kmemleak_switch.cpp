// SPDX-License-Identifier: Apache-2.0
// kmemleak switched on over a heap that has been running, as a user does
// with `kmemleak on` (mm/kmemleak.cpp, Switching; mm/kmemleak_meta.h), on the
// host under ASan/UBSan. Its own program: kmemleak starts off here, and every
// test below builds its heap while it is off. Objects are remembered only
// as encoded integers (~address), and the stacks are not scanned (the
// lists hang from registered roots), so nothing but the heap graph
// decides what is reported.
#include <gtest/gtest.h>
#include <mm/failslab.h>
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

uintptr_t enc(const void* p) { return ~reinterpret_cast<uintptr_t>(p); }
void* dec(uintptr_t v) { return reinterpret_cast<void*>(~v); }

struct Errors {
  static inline std::vector<std::string> seen;
  static void hook(const mm::MemError& e) { seen.push_back(e.kind); }
  mm::MemErrorHook old;
  Errors() : old(mm::set_error_hook(hook)) { seen.clear(); }
  ~Errors() { mm::set_error_hook(old); }
};

std::set<uintptr_t> leaks() {
  std::vector<const void*> out(200000);
  size_t n = kmemleak_leaks(out.data(), out.size());
  std::set<uintptr_t> s;
  for (size_t i = 0; i < n && i < out.size(); i++) s.insert(enc(out[i]));
  EXPECT_EQ(s.size(), n);
  return s;
}

// A list of nodes, each the next one's only reference; the head is a root.
struct Node {
  Node* next;
  uint64_t body[7];  // 64 bytes
};
Node* g_head;

class Switch : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(mm::kmemleak_enabled()) << "each test starts with kmemleak off";
    mm::kmemleak_set_stack_scan(false);
    kmemleak_set_min_age_ms(0);
    kmemleak_add_root(&g_head, sizeof g_head);
    cache_ = kmem_cache_create("t_switch_64", sizeof(Node), 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    ASSERT_NE(cache_, nullptr);
  }
  void TearDown() override {
    kmemleak_enable(false);
    free_list();
    for (uintptr_t x : leaked_) kmem_cache_free(cache_, dec(x));
    kmem_cache_destroy(cache_);
    kmemleak_del_root(&g_head);
    mm::kmemleak_set_stack_scan(true);
    mm::failslab_off();
  }
  __attribute__((noinline)) void push_nodes(size_t n) {
    for (size_t i = 0; i < n; i++) {
      auto* x = static_cast<Node*>(kmem_cache_alloc(cache_, KM_SLEEP));
      std::memset(x, 0, sizeof *x);
      x->next = g_head;
      g_head = x;
      listed_++;
    }
  }
  __attribute__((noinline)) void leak_nodes(size_t n) {
    for (size_t i = 0; i < n; i++) {
      auto* x = static_cast<Node*>(kmem_cache_alloc(cache_, KM_SLEEP));
      std::memset(x, 0, sizeof *x);
      leaked_.insert(enc(x));
    }
  }
  // Frees every other node of the list (the list stays whole).
  __attribute__((noinline)) void free_every_other() {
    for (Node* x = g_head; x && x->next; x = x->next) {
      Node* gone = x->next;
      x->next = gone->next;
      kmem_cache_free(cache_, gone);
      listed_--;
    }
  }
  __attribute__((noinline)) void free_list() {
    while (g_head) {
      Node* n = g_head->next;
      kmem_cache_free(cache_, g_head);
      g_head = n;
    }
    listed_ = 0;
  }
  // Three scans (a leak is reported at its second), then the reports.
  std::set<uintptr_t> scan3() {
    for (int i = 0; i < 3; i++) kmemleak_scan();
    return leaks();
  }
  kmem_cache_t* cache_ = nullptr;
  size_t listed_ = 0;
  std::set<uintptr_t> leaked_;
};

// 60 000 objects of one 64-byte cache (about a thousand slabs, far more
// than one batch of records), all reachable through the list but 12,
// allocated while kmemleak was off. Switching on gives every slab its
// records, however many: exactly the 12 are reported, and no slab is left
// untracked.
TEST_F(Switch, OnOverAFullHeapReportsExactlyTheUnreachable) {
  push_nodes(30000);
  leak_nodes(6);
  push_nodes(30000);
  leak_nodes(6);
  kmemleak_enable(true);
  EXPECT_EQ(scan3(), leaked_);
  mm::LeakScanStats st;
  mm::kmemleak_last_scan(st);
  EXPECT_GE(st.objects, 60012u);
  EXPECT_EQ(st.untracked_objects, 0u);
  EXPECT_EQ(st.untracked_slabs, 0u);
  // Off, frees and reuse while off, more leaks, on again: the records of
  // reused buffers are fresh (a record left from a buffer's previous owner
  // would make it a false report).
  kmemleak_enable(false);
  mm::kmemleak_clear();
  free_every_other();
  push_nodes(20000);
  leak_nodes(5);
  kmemleak_enable(true);
  EXPECT_EQ(scan3(), leaked_);
}

// The records' allocation refused (fault injection under their own name):
// those slabs are scanned as roots, their buffers counted as untracked in
// the scan's figures, nothing reachable is reported; and once memory is
// there again a scan gives them records and every leak is found.
TEST_F(Switch, SlabsWithoutRecordsAreRootsAndCountedUntilRecordsAreFound) {
  push_nodes(20000);
  leak_nodes(8);
  mm::FailConfig fc;
  fc.probability = 100;
  fc.interval = 2;  // every other slab's records
  fc.times = -1;
  std::strcpy(fc.filter, "kmemleak_records");
  ASSERT_TRUE(mm::failslab_set(fc));
  kmemleak_enable(true);
  std::set<uintptr_t> got = scan3();
  for (uintptr_t x : got) EXPECT_EQ(leaked_.count(x), 1u) << "a reachable object was reported";
  mm::LeakScanStats st;
  mm::kmemleak_last_scan(st);
  EXPECT_GT(st.untracked_slabs, 0u);
  EXPECT_GT(st.untracked_objects, 1000u);
  // A slab made while kmemleak is on, whose records are refused: the same.
  push_nodes(5000);
  leak_nodes(4);
  got = scan3();
  for (uintptr_t x : got) EXPECT_EQ(leaked_.count(x), 1u) << "a reachable object was reported";
  // Memory again: the next scan gives every slab its records.
  mm::failslab_off();
  EXPECT_EQ(scan3(), leaked_);
  mm::kmemleak_last_scan(st);
  EXPECT_EQ(st.untracked_objects, 0u);
  EXPECT_EQ(st.untracked_slabs, 0u);
}

__attribute__((noinline)) uintptr_t alloc_enc(kmem_cache_t* cp) {
  void* p = kmem_cache_alloc(cp, KM_SLEEP);
  std::memset(p, 0, 64);
  return enc(p);
}
__attribute__((noinline)) void not_leak(uintptr_t x) { kmemleak_not_leak(dec(x)); }
__attribute__((noinline)) void free_enc(kmem_cache_t* cp, uintptr_t x) { kmem_cache_free(cp, dec(x)); }

// Annotations made while kmemleak is off land on the object they name and
// on no other, and stay across switches; a freed buffer's leaves with it.
TEST_F(Switch, AnnotationsStayWithTheirObjectAcrossSwitches) {
  push_nodes(3000);  // slabs around them
  // Off: kept is unreferenced but annotated; gone is annotated, freed and
  // its buffer taken by stranger (the magazine hands it back first).
  uintptr_t kept = alloc_enc(cache_);
  not_leak(kept);
  uintptr_t gone = alloc_enc(cache_);
  not_leak(gone);
  free_enc(cache_, gone);
  uintptr_t stranger = alloc_enc(cache_);
  ASSERT_EQ(stranger, gone) << "the magazine should hand the freed buffer back";
  leaked_.insert(stranger);
  kmemleak_enable(true);
  EXPECT_EQ(scan3(), leaked_) << "the stranger is a leak; the annotated object is not";
  // On: an annotation recorded in the record survives an off/on cycle.
  uintptr_t decided = alloc_enc(cache_);
  not_leak(decided);
  kmemleak_enable(false);
  kmemleak_enable(true);
  EXPECT_EQ(scan3(), leaked_);
  // And leaves with its object when freed while on, then off.
  free_enc(cache_, decided);
  kmemleak_enable(false);
  uintptr_t again = alloc_enc(cache_);
  EXPECT_EQ(again, decided);
  leaked_.insert(again);
  kmemleak_enable(true);
  EXPECT_EQ(scan3(), leaked_);
  free_enc(cache_, kept);
}

// While off, annotating and freeing keeps nothing: what kmemleak holds does
// not grow with the number of annotations made (there is no pending list:
// each lands in its object's record and leaves with it).
TEST_F(Switch, AnnotationsWhileOffDoNotAccumulate) {
  uintptr_t one = alloc_enc(cache_);
  not_leak(one);  // the slab's records exist from here on
  mm::LeakMemory before;
  mm::kmemleak_memory(before);
  for (int i = 0; i < 100000; i++) {
    uintptr_t x = alloc_enc(cache_);
    not_leak(x);
    free_enc(cache_, x);
  }
  mm::LeakMemory after;
  mm::kmemleak_memory(after);
  EXPECT_EQ(after.tables_bytes, before.tables_bytes);
  EXPECT_LE(after.slab_records_bytes, before.slab_records_bytes + 4096);
  free_enc(cache_, one);
}

__attribute__((noinline)) uintptr_t alloc_here(kmem_cache_t* cp) { return alloc_enc(cp); }
__attribute__((noinline)) uintptr_t alloc_there(kmem_cache_t* cp) { return alloc_enc(cp); }

// A buffer that left a magazine while kmemleak was off is described as
// what it is: no stamp from its previous owner (backtrace, time), and not
// reported for its previous owner's leak.
TEST_F(Switch, ReusedBuffersGetFreshRecords) {
  kmemleak_enable(true);
  uintptr_t x = alloc_here(cache_);
  mm::LeakObject o;
  ASSERT_TRUE(mm::kmemleak_lookup(dec(x), o));
  uint32_t first_stack = o.stack;
  EXPECT_NE(first_stack, 0u);
  // x leaks and is reported.
  for (int i = 0; i < 3; i++) kmemleak_scan();
  EXPECT_EQ(leaks().count(x), 1u);
  kmemleak_enable(false);
  EXPECT_TRUE(leaks().empty()) << "no reports while off";
  free_enc(cache_, x);
  uintptr_t y = alloc_there(cache_);
  ASSERT_EQ(y, x);
  g_head = static_cast<Node*>(dec(y));  // reachable
  static_cast<Node*>(dec(y))->next = nullptr;
  ASSERT_TRUE(mm::kmemleak_lookup(dec(y), o));
  EXPECT_EQ(o.stack, 0u) << "the previous owner's backtrace";
  EXPECT_EQ(o.ticks, 0u);
  kmemleak_enable(true);
  ASSERT_TRUE(mm::kmemleak_lookup(dec(y), o));
  EXPECT_EQ(o.stack, 0u) << "allocated while off: no backtrace";
  EXPECT_TRUE(scan3().empty()) << "the reachable stranger was reported for its predecessor";
}

}  // namespace
