// SPDX-License-Identifier: Apache-2.0
// kmem's debug modes on the real kernel (mm/kmem_debug.h): each misuse
// class of the debug issue made on purpose on a cache with every mode on,
// its report checked, and the cache shown to work on afterwards; and
// debugged buffers handed between cores.
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/ktest.h>
#include <kernel/smp.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/platform.h>
#include <mm/stackdepot.h>
#include <mm/vmem.h>

namespace {

constexpr int kAll = KMC_REDZONE | KMC_DEADBEEF | KMC_AUDIT | KMC_CONTENTS;

struct Seen {
  const char* kind;
  uintptr_t address;
  uint64_t detail;
  bool has_more;
  mm::MemDetail more;
};

struct Capture {
  static inline unsigned count;
  static inline Seen last;
  static void hook(const mm::MemError& e) {
    count++;
    last = Seen{e.kind, e.address, e.detail, e.more != nullptr, {}};
    if (e.more) last.more = *e.more;
  }
  mm::MemErrorHook old;
  Capture() : old(mm::set_error_hook(hook)) { count = 0; }
  ~Capture() { mm::set_error_hook(old); }
};

bool starts(const char* s, const char* prefix) { return s && strncmp(s, prefix, strlen(prefix)) == 0; }

kmem_cache_t* make(const char* name, size_t size, int flags) {
  return kmem_cache_create(name, size, 0, nullptr, nullptr, nullptr, nullptr, nullptr, flags);
}

uint64_t live_in(kmem_cache_t* cp) {
  mm::KmemCacheStats st;
  mm::kmem_cache_stats(cp, st);
  return st.buf_inuse;
}

// n buffers of a new cache, one after another in its first slab:
// neighbours at one chunk's distance (false if not).
bool neighbours(kmem_cache_t* cp, uint8_t** v, unsigned n) {
  for (unsigned i = 0; i < n; i++) v[i] = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  for (unsigned i = 2; i < n; i++)
    if (v[i] - v[i - 1] != v[1] - v[0]) return false;
  return v[0] != nullptr;
}

bool same_finding(const Seen& a, const Seen& b) {
  return strcmp(a.kind, b.kind) == 0 && a.address == b.address && a.more.offset == b.more.offset &&
         a.more.nfound == b.more.nfound && memcmp(a.more.found, b.more.found, a.more.nfound) == 0 &&
         a.more.reached == b.more.reached;
}

bool context_is(uint32_t id, const char* want) {
  char name[96];
  mm::plat::context_name(id, name, sizeof name);
  if (strcmp(name, want) == 0) return true;
  kprintf("    context '%s', expected '%s'\n", name, want);
  return false;
}

// 32 buffers out and back, each written whole, no report.
bool works(kmem_cache_t* cp, size_t size) {
  void* v[32];
  for (auto& p : v) {
    p = kmem_cache_alloc(cp, KM_SLEEP);
    if (!p) return false;
    memset(p, 0x5a, size);
  }
  for (void* p : v) kmem_cache_free(cp, p);
  return live_in(cp) == 0 && mm::kmem_verify(cp) == 0;
}

}  // namespace

KTEST(kmem_debug_overrun_is_reported_on_free_and_by_verify) {
  kmem_cache_t* cp = make("kt_overrun", 37, kAll);
  KASSERT(cp != nullptr);
  KEXPECT_EQ(mm::kmem_cache_debug_flags(cp), uint32_t{KMF_ALL});
  auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  KASSERT(p != nullptr);
  {
    Capture c;
    p[37] = 0x41;
    KEXPECT_EQ(mm::kmem_verify(cp), 1u);
    KEXPECT_EQ(c.count, 1u);
    kmem_cache_free(cp, p);
    KEXPECT_EQ(c.count, 2u);
    KEXPECT(starts(c.last.kind, "buffer overrun"));
    KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(p));
    KEXPECT(c.last.has_more);
    KEXPECT_EQ(c.last.more.offset, 37);
    KEXPECT_EQ(c.last.more.found[0], 0x41u);
    KEXPECT_EQ(c.last.more.found[1], 0xbbu);
    KEXPECT(c.last.more.alloc.valid);
    KEXPECT(c.last.more.alloc.stack != 0);
  }
  Capture c;
  KEXPECT(works(cp, 37));
  KEXPECT_EQ(c.count, 0u);
  KEXPECT(kmem_cache_destroy(cp));
}

KTEST(kmem_debug_write_after_free_is_reported_at_the_next_allocation) {
  kmem_cache_t* cp = make("kt_uaf", 64, kAll);
  KASSERT(cp != nullptr);
  auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
  kmem_cache_free(cp, p);
  uint32_t w;
  memcpy(&w, p + 4, 4);
  KEXPECT_EQ(w, 0xdeadbeefu);
  {
    Capture c;
    p[21] = 0x77;
    void* q = kmem_cache_alloc(cp, KM_SLEEP);
    KEXPECT(q == p);
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "write after free"));
    KEXPECT_EQ(c.last.more.offset, 21);
    KEXPECT_EQ(c.last.more.found[0], 0x77u);
    KEXPECT(c.last.more.free.valid);
    KEXPECT(c.last.more.free.stack != 0);
    memcpy(&w, p + 8, 4);
    KEXPECT_EQ(w, 0xbaddcafeu);
    kmem_cache_free(cp, q);
  }
  Capture c;
  KEXPECT(works(cp, 64));
  KEXPECT_EQ(c.count, 0u);
  KEXPECT(kmem_cache_destroy(cp));
}

KTEST(kmem_debug_double_free_at_any_depth_is_refused) {
  kmem_cache_t* cp = make("kt_double", 48, KMC_AUDIT);
  KASSERT(cp != nullptr);
  void* v[24];
  for (auto& p : v) p = kmem_cache_alloc(cp, KM_SLEEP);
  for (void* p : v) kmem_cache_free(cp, p);
  {
    Capture c;
    kmem_cache_free(cp, v[2]);
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "double free"));
    KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(v[2]));
    KEXPECT(c.last.more.free.valid);
  }
  // Refused: 48 allocations are 48 distinct buffers.
  void* w[48];
  for (auto& p : w) p = kmem_cache_alloc(cp, KM_SLEEP);
  unsigned dup = 0;
  for (unsigned i = 0; i < 48; i++)
    for (unsigned j = i + 1; j < 48; j++) dup += w[i] == w[j];
  KEXPECT_EQ(dup, 0u);
  for (void* p : w) kmem_cache_free(cp, p);
  KEXPECT(kmem_cache_destroy(cp));
}

KTEST(kmem_debug_interior_foreign_and_wrong_cache_frees_are_refused) {
  kmem_cache_t* a = make("kt_a", 64, KMC_REDZONE);
  kmem_cache_t* b = make("kt_b", 64, 0);
  KASSERT(a && b);
  auto* p = static_cast<char*>(kmem_cache_alloc(a, KM_SLEEP));
  void* q = kmem_cache_alloc(b, KM_SLEEP);
  {
    Capture c;
    kmem_cache_free(a, p + 8);
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "free of an address inside a buffer"));
    KEXPECT_EQ(c.last.more.offset, 8);
    kmem_cache_free(a, q);
    KEXPECT_EQ(c.count, 2u);
    KEXPECT(starts(c.last.kind, "free to the wrong cache"));
    static uint64_t stranger[4];
    kmem_cache_free(a, &stranger[1]);
    KEXPECT_EQ(c.count, 3u);
    KEXPECT(starts(c.last.kind, "free of a pointer kmem never allocated"));
  }
  KEXPECT_EQ(live_in(a), 1u);
  kmem_cache_free(a, p);
  kmem_cache_free(b, q);
  KEXPECT(kmem_cache_destroy(a));
  KEXPECT(kmem_cache_destroy(b));
}

KTEST(kmem_debug_destroy_with_live_objects_names_who_allocated_them) {
  kmem_cache_t* cp = make("kt_live", 32, KMC_AUDIT);
  KASSERT(cp != nullptr);
  void* p = kmem_cache_alloc(cp, KM_SLEEP);
  {
    Capture c;
    KEXPECT(!kmem_cache_destroy(cp));
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "kmem_cache_destroy of a cache with live objects"));
    KEXPECT_EQ(c.last.detail, 1u);
    KEXPECT_EQ(c.last.more.buffer, reinterpret_cast<uintptr_t>(p));
    KEXPECT(c.last.more.alloc.valid && c.last.more.alloc.stack != 0);
  }
  kmem_cache_free(cp, p);
  KEXPECT(kmem_cache_destroy(cp));
}

// The link a free buffer keeps is encoded (first word of a plain cache's
// buffer, the tag of a debugged one): a plausible index written raw is
// caught when the list is followed, and the list is rebuilt.
KTEST(kmem_debug_free_list_corruption_is_reported_and_never_followed) {
  const int kFlags[] = {KMC_NOMAGAZINE, KMC_REDZONE};
  for (int flags : kFlags) {
    kmem_cache_t* cp = make("kt_freelist", 64, flags);
    KASSERT(cp != nullptr);
    char* v[8];
    for (auto& p : v) p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
    for (char* p : v) kmem_cache_free(cp, p);
    uint32_t plausible = 3;
    // The link: the tag's in a debugged cache (kmem.debug= may debug the
    // plain one too), else the first word.
    memcpy(v[7] + (mm::kmem_cache_debug_flags(cp) ? 64 + 16 : 0), &plausible, 4);
    Capture c;
    char* w[16];
    for (auto& p : w) p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "free list corruption"));
    KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(v[7]));
    unsigned dup = 0;
    for (unsigned i = 0; i < 16; i++)
      for (unsigned j = i + 1; j < 16; j++) dup += w[i] == w[j];
    KEXPECT_EQ(dup, 0u);
    for (char* p : w) kmem_cache_free(cp, p);
    KEXPECT_EQ(live_in(cp), 0u);
    KEXPECT(kmem_cache_destroy(cp));
  }
}

namespace {
struct Handoff {
  kmem_cache_t* cp;
  static constexpr unsigned kPer = 32;
  void* objs[kMaxCpus][kPer];
  unsigned failures;
};
void handoff_alloc(void* arg) {
  auto* h = static_cast<Handoff*>(arg);
  for (auto& p : h->objs[cpu_id()]) {
    p = kmem_cache_alloc(h->cp, KM_SLEEP);
    if (!p) __atomic_fetch_add(&h->failures, 1u, __ATOMIC_RELAXED);
    else memset(p, static_cast<int>(cpu_id()), 100);
  }
}
void handoff_free(void* arg) {
  auto* h = static_cast<Handoff*>(arg);
  unsigned from = (cpu_id() + 1) % g_cpu_count;
  for (void* p : h->objs[from]) kmem_cache_free(h->cp, p);
}
}  // namespace

// Debugged buffers allocated on every core and freed on another, while the
// log and the audit trails fill: no report, every count back to zero.
KTEST(kmem_debug_buffers_cross_cores_without_reports) {
  if (g_cpu_count < 2) KSKIP("one cpu: no other core to free on");
  static Handoff h;
  h.cp = make("kt_handoff", 100, kAll);
  h.failures = 0;
  KASSERT(h.cp != nullptr);
  Capture c;
  smp::call_on_all(handoff_alloc, &h);
  KEXPECT_EQ(mm::kmem_verify(h.cp), 0u);
  mm::KmemTrail t;
  KEXPECT(mm::kmem_debug_trail(h.objs[0][5], t));
  KEXPECT(t.allocated && t.alloc.valid && !t.free.valid);
  KEXPECT_EQ(t.alloc.cpu, 0u);
  smp::call_on_all(handoff_free, &h);
  KEXPECT_EQ(h.failures, 0u);
  KEXPECT_EQ(c.count, 0u);
  KEXPECT_EQ(live_in(h.cp), 0u);
  // The log kept both: allocated on cpu 0, freed on cpu n-1 (which frees
  // what cpu 0 allocated). At most 8 x 32 x 2 entries: all in the log.
  struct Ops {
    unsigned allocs, frees, alloc_cpu, free_cpu;
  } ops{0, 0, ~0u, ~0u};
  KEXPECT(mm::kmem_log_capacity() >= 1024);
  mm::kmem_log_walk(
      reinterpret_cast<uintptr_t>(h.objs[0][5]),
      [](const mm::KmemLogEntry& e, void* arg) {
        auto* o = static_cast<Ops*>(arg);
        if (e.alloc) {
          o->allocs++;
          o->alloc_cpu = e.cpu;
        } else {
          o->frees++;
          o->free_cpu = e.cpu;
        }
      },
      &ops);
  KEXPECT(ops.allocs >= 1 && ops.frees >= 1);
  KEXPECT_EQ(ops.alloc_cpu, 0u);
  KEXPECT_EQ(ops.free_cpu, g_cpu_count - 1);
  KEXPECT(kmem_cache_destroy(h.cp));
}

// vmem_destroy of an arena with live segments is refused and says what is
// outstanding (the last row of the misuse table); it works once they go.
KTEST(kmem_debug_vmem_destroy_with_live_segments_is_refused) {
  vmem_t* vmp = vmem_create("kt_vmem_live", reinterpret_cast<void*>(0x10000000), 1 << 20, 4096, nullptr, nullptr,
                            nullptr, 0, VM_SLEEP);
  KASSERT(vmp != nullptr);
  void* a = vmem_alloc(vmp, 8192, VM_SLEEP);
  KASSERT(a != nullptr);
  {
    Capture c;
    KEXPECT(!vmem_destroy(vmp));
    KEXPECT_EQ(c.count, 1u);
    KEXPECT(starts(c.last.kind, "destroy of arena with allocations"));
    KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(a));
    KEXPECT_EQ(c.last.detail, 8192u);
  }
  vmem_free(vmp, a, 8192);
  KEXPECT(vmem_destroy(vmp));
}

// An overrun of 100 bytes past a 40-byte buffer runs over its tag (the size
// kept there included) and into the next buffer: reported once on the
// free, against the overrun buffer, with the offset where its redzone
// starts and its allocation's trail; kmem_verify finds the same before.
// The neighbour it ran into frees without a report.
KTEST(kmem_debug_long_overrun_is_reported_on_free_and_by_verify) {
  kmem_cache_t* cp = make("kt_long", 40, KMC_REDZONE | KMC_AUDIT);
  KASSERT(cp != nullptr);
  uint8_t* v[6];
  KASSERT(neighbours(cp, v, 6));
  uint8_t* p = v[2];
  for (unsigned k = 0; k < 100; k++) p[40 + k] = static_cast<uint8_t>(0x41 + k % 5);
  unsigned reached = 0;
  for (unsigned j = 3; j < 6; j++) reached += v[j] - 8 < p + 140;
  KEXPECT(reached >= 1);
  {
    Capture c;
    uint64_t checked = 0;
    KEXPECT_EQ(mm::kmem_verify(cp, &checked), 1u);
    KEXPECT(checked >= 6);
    KEXPECT_EQ(c.count, 1u);
    Seen by_verify = c.last;
    kmem_cache_free(cp, p);
    KEXPECT_EQ(c.count, 2u);
    KEXPECT(starts(c.last.kind, "buffer overrun"));
    KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(p));
    KEXPECT_EQ(c.last.more.offset, 40);
    KEXPECT_EQ(c.last.more.size, 40u);
    KEXPECT_EQ(c.last.more.found[0], 0x41u);
    KEXPECT_EQ(c.last.more.reached, reached);
    KEXPECT_EQ(c.last.more.buffer + c.last.more.reached_off, reinterpret_cast<uintptr_t>(v[3]));
    KEXPECT(c.last.more.alloc.valid && c.last.more.alloc.stack != 0);
    KEXPECT(same_finding(by_verify, c.last));
    for (uint8_t* q : v)
      if (q != p) kmem_cache_free(cp, q);
    KEXPECT_EQ(c.count, 2u);
  }
  Capture c;
  KEXPECT(works(cp, 40));
  KEXPECT_EQ(c.count, 0u);
  KEXPECT(kmem_cache_destroy(cp));
}

// A write to the byte before a buffer is reported against that buffer,
// also for the first buffer of a slab, which has no buffer before it.
KTEST(kmem_debug_underrun_is_reported_against_its_buffer) {
  const unsigned kVictims[] = {0, 2};
  for (unsigned victim : kVictims) {
    kmem_cache_t* cp = make("kt_under", 40, KMC_REDZONE | KMC_AUDIT);
    KASSERT(cp != nullptr);
    uint8_t* v[4];
    KASSERT(neighbours(cp, v, 4));
    uint8_t* p = v[victim];
    p[-1] = 0x42;
    {
      Capture c;
      KEXPECT_EQ(mm::kmem_verify(cp), 1u);
      KEXPECT_EQ(c.count, 1u);
      Seen by_verify = c.last;
      kmem_cache_free(cp, p);
      KEXPECT_EQ(c.count, 2u);
      KEXPECT(starts(c.last.kind, "buffer underrun"));
      KEXPECT_EQ(c.last.address, reinterpret_cast<uintptr_t>(p));
      KEXPECT_EQ(c.last.more.offset, -1);
      KEXPECT_EQ(c.last.more.found[0], 0x42u);
      KEXPECT(c.last.more.alloc.valid);
      KEXPECT(same_finding(by_verify, c.last));
      for (uint8_t* q : v)
        if (q != p) kmem_cache_free(cp, q);
      KEXPECT_EQ(c.count, 2u);
    }
    Capture c;
    KEXPECT(works(cp, 40));
    KEXPECT_EQ(c.count, 0u);
    KEXPECT(kmem_cache_destroy(cp));
  }
}

namespace {
struct Who {
  kmem_cache_t* cp;
  void* obj;
  unsigned taken;
};
Who g_who;
// Under fault injection (suite-failslab) an allocation may fail: each
// tries again until one succeeds, the tick at its next interrupt.
void alloc_for_who(void*) {
  for (int i = 0; i < 1000 && !g_who.obj; i++) g_who.obj = kmem_cache_alloc(g_who.cp, KM_SLEEP);
}
void alloc_in_tick() {
  if (__atomic_load_n(&g_who.taken, __ATOMIC_RELAXED)) return;
  void* p = kmem_cache_alloc(g_who.cp, KM_NOSLEEP);
  if (!p) return;
  // The first core to publish wins; the release store pairs with the
  // test's acquire load of g_who.obj, so the buffer's trail is visible.
  if (__atomic_exchange_n(&g_who.taken, 1u, __ATOMIC_ACQ_REL) == 0) __atomic_store_n(&g_who.obj, p, __ATOMIC_RELEASE);
  else kmem_cache_free(g_who.cp, p);
}
}  // namespace

// The audit trail and the log keep what ran besides the CPU: this test,
// a cross-call made from it, the timer's interrupt.
KTEST(kmem_debug_trails_name_what_ran) {
  g_who.cp = make("kt_who", 40, KMC_AUDIT);
  KASSERT(g_who.cp != nullptr);
  const char* self = "test kmem_debug_trails_name_what_ran";
  void* p = kmem_cache_alloc(g_who.cp, KM_SLEEP);
  mm::KmemTrail t;
  KASSERT(mm::kmem_debug_trail(p, t));
  KEXPECT(context_is(t.alloc.context, self));
  kmem_cache_free(g_who.cp, p);
  KASSERT(mm::kmem_debug_trail(p, t));
  KEXPECT(context_is(t.free.context, self));
  struct Last {
    uint32_t context;
    unsigned n;
  } last{0, 0};
  mm::kmem_log_walk(
      reinterpret_cast<uintptr_t>(p),
      [](const mm::KmemLogEntry& e, void* arg) {
        static_cast<Last*>(arg)->context = e.context;
        static_cast<Last*>(arg)->n++;
      },
      &last);
  // The log, where it could be had (64 KiB: a board with 256 KiB of RAM
  // runs audit without it).
  if (mm::kmem_log_capacity()) {
    KEXPECT(last.n >= 2);
    KEXPECT(context_is(last.context, self));
  }
  // A cross-call on another core, on the test's behalf.
  if (g_cpu_count >= 2) {
    unsigned other = cpu_id() == 0 ? 1 : 0;
    g_who.obj = nullptr;
    smp::call_on(other, alloc_for_who, nullptr);
    KASSERT(g_who.obj != nullptr);
    KASSERT(mm::kmem_debug_trail(g_who.obj, t));
    KEXPECT_EQ(t.alloc.cpu, other);
    KEXPECT(context_is(t.alloc.context, "cross-call from test kmem_debug_trails_name_what_ran"));
    kmem_cache_free(g_who.cp, g_who.obj);
  }
  // The timer's interrupt, on whichever core takes it first.
  g_who.obj = nullptr;
  g_who.taken = 0;
  timer::set_test_hook(alloc_in_tick, 1000);
  uint64_t until = timer::now_ns() + 2000000000ull;
  while (!__atomic_load_n(&g_who.obj, __ATOMIC_ACQUIRE) && timer::now_ns() < until) arch::wait_for_interrupt();
  timer::set_test_hook(nullptr, 0);
  // A core whose tick read the hook before it was cleared may still be in
  // alloc_in_tick, about to free the buffer it lost the race with. A
  // cross-call on every core runs in each core's interrupt handler, after
  // any tick handler in progress there (handlers do not nest): once it
  // returns, none is left.
  smp::call_on_all([](void*) {}, nullptr);
  void* q = __atomic_load_n(&g_who.obj, __ATOMIC_ACQUIRE);
  KASSERT(q != nullptr);
  KASSERT(mm::kmem_debug_trail(q, t));
  KEXPECT(context_is(t.alloc.context, "timer"));
  kmem_cache_free(g_who.cp, q);
  KEXPECT(kmem_cache_destroy(g_who.cp));
}
