// SPDX-License-Identifier: Apache-2.0
// The `bench` shell command: counter ticks per operation of the memory
// subsystem's fast paths, measured in the kernel on the running arch.
//
// 1. Patterns: those of the host benchmarks (bench/patterns.h), so the
//    figures compare line for line with bench/RESULTS.md. Every figure is
//    per object, that is per alloc + free:
//      pairs    alloc, free, alloc, free, ...
//      lifo     1000 allocations, then 1000 frees, last allocated first
//      random   the same, freed in a fixed pseudo-random order
//      cross    cpu 0 allocates a batch of 64, cpu 1 frees it (smp::call_on);
//               the two halves are timed on their own cores and added
//    for kmem_cache_alloc/free (one cache per size) at 16..4096 bytes, and
//    pairs for kmem_alloc/free; vmem instant fit of one quantum on fresh
//    integer arenas and on one holding 10 000 free segments; single pages
//    through the per-CPU page cache.
// 2. Measuring: arch::cycles() is read around each timed call with
//    interrupts masked, so no tick of this core lands in it. The same
//    pattern run with NullOps (no allocator: the loop alone) is timed the
//    same way and subtracted. Untimed warm-up runs first (magazines loaded,
//    depots stocked, slabs and boundary tags there). Each measurement is
//    repeated and the smallest kept: the counter is global under icount
//    (below), so another core's tick can add to it.
// 3. What a tick is: under QEMU with -icount shift=0,sleep=off (qemu-run
//    --icount) the counter advances once per guest instruction, executed by
//    any vCPU (QEMU's virtual clock: PMCCNTR on ARM; the cycle CSR on
//    RISC-V, which QEMU 7.2 derives from the same count as instret). The
//    figures are then instruction counts, identical from run to run; the
//    first line of the output checks one tick per instruction on 1000 nops.
//    Without icount they are time-based ticks and vary.
// 4. Memory: slots and the free order are static arrays; nothing is
//    allocated around a timed call but what it measures. Allocation failure
//    (KM_NOSLEEP / VM_NOSLEEP: the timed code runs with interrupts masked
//    and must not wait) is counted and fails the row. The caches and arenas
//    the command creates are destroyed before it returns.
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/kmemtrace_control.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/string.h>
#include <mm/alloc_tag.h>
#include <mm/hooks.h>
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <mm/page.h>
#include <mm/vmem.h>
#include <trace/kmemtrace.h>
#include "bench/patterns.h"

namespace {

using ull = unsigned long long;

using bench::alloc_batch;
using bench::free_batch;
using bench::kBatchObjects;  // lifo and random
using bench::kCrossBatch;    // objects cpu 0 hands to cpu 1 per call
using bench::run_lifo;
using bench::run_pairs;
using bench::run_random;
constexpr unsigned kFreeSegments = 10000;
constexpr size_t kSizes[] = {16, 64, 256, 1024, 4096};
constexpr unsigned kNumSizes = sizeof kSizes / sizeof kSizes[0];
// vmem arenas over integers (nothing mapped), no import, no quantum caches.
constexpr uintptr_t kArenaBase = 0x1000;
constexpr size_t kQuantum = 4096;
constexpr size_t kArenaBytes = size_t{1} << 30;
constexpr size_t kOddArenaBytes = (size_t{3} << 30) / 2;  // not a power of two

struct Counts {
  const char* name;
  unsigned reps;                       // measurements per figure (the smallest is kept)
  unsigned pairs_warm, pairs;          // alloc+free pairs
  unsigned batch_warm;                 // untimed rounds of kBatchObjects
  unsigned cross_warm, cross_batches;  // batches of kCrossBatch per sweep
};
constexpr Counts kFull{"full", 5, 2000, 20000, 3, 64, 100};
constexpr Counts kQuick{"quick", 3, 100, 2000, 1, 4, 10};

// Heap memory while `bench` runs (8 KiB that a small board has no room to
// keep in .bss).
void** g_slots;      // [kBatchObjects]
uint32_t* g_order;   // [kBatchObjects]: the random pattern's free order
unsigned g_failures;              // allocations that returned nothing

// --- adapters: one allocator behind alloc()/release() -----------------------

struct NullOps {  // the baseline: no allocator, an opaque non-null pointer
  void* alloc() const {
    void* p = &g_failures;
    asm volatile("" : "+r"(p));
    return p;
  }
  void release(void* p) const { asm volatile("" ::"r"(p) : "memory"); }
};
struct CacheOps {
  kmem_cache_t* cp;
  void* alloc() const { return kmem_cache_alloc(cp, KM_NOSLEEP); }
  void release(void* p) const { kmem_cache_free(cp, p); }
};
struct KmemAllocOps {
  size_t size;
  void* alloc() const { return kmem_alloc(size, KM_NOSLEEP); }
  void release(void* p) const { kmem_free(p, size); }
};
struct VmemOps {
  vmem_t* arena;
  void* alloc() const { return vmem_alloc(arena, kQuantum, VM_NOSLEEP | VM_INSTANTFIT); }
  void release(void* p) const { vmem_free(arena, p, kQuantum); }
};
struct PageOps {
  void* alloc() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(mm::page_alloc(0, KM_NOSLEEP))); }
  void release(void* p) const { mm::page_free(reinterpret_cast<uintptr_t>(p), 0); }
};

// Every adapter is measured through Checked: an allocation that returned
// nothing is counted (and fails the row) instead of freed. The null
// adapter pays the same check, so it cancels out of every figure.
template <class A>
struct Checked {
  A a;
  void* alloc() const { return a.alloc(); }
  void release(void* p) const {
    if (__builtin_expect(p != nullptr, 1)) a.release(p);
    else g_failures++;
  }
};

// --- timing -----------------------------------------------------------------

// Ticks from t0 to t1. ARM's PMCCNTR is 32 bits wide and wraps within
// seconds; a timed call is far shorter, so t1 < t0 below 2^32 is one wrap.
uint64_t elapsed(uint64_t t0, uint64_t t1) {
  if (t1 >= t0) return t1 - t0;
  if (t0 <= 0xffffffffu) return t1 + (uint64_t{1} << 32) - t0;
  return 0;
}

// Runs f with interrupts masked; returns the ticks it took.
template <class F>
uint64_t timed(F&& f) {
  arch::IrqState s = arch::irq_save();
  uint64_t t0 = arch::cycles();
  f();
  uint64_t t1 = arch::cycles();
  arch::irq_restore(s);
  return elapsed(t0, t1);
}

template <class F>
uint64_t best_of(unsigned reps, F&& measure) {
  uint64_t best = ~uint64_t{0};
  for (unsigned r = 0; r < reps; r++) {
    uint64_t t = measure();
    if (t < best) best = t;
  }
  return best;
}

enum class Pattern { kPairs, kLifo, kRandom };

// Ticks of one measurement of `p` with adapter a, best of c.reps, after
// the warm-up.
template <class A>
uint64_t measure(A inner, Pattern p, const Counts& c) {
  const Checked<A> a{inner};
  switch (p) {
    case Pattern::kPairs:
      run_pairs(a, c.pairs_warm);
      return best_of(c.reps, [&] { return timed([&] { run_pairs(a, c.pairs); }); });
    case Pattern::kLifo:
      for (unsigned r = 0; r < c.batch_warm; r++) run_lifo(a, g_slots, kBatchObjects);
      return best_of(c.reps, [&] { return timed([&] { run_lifo(a, g_slots, kBatchObjects); }); });
    case Pattern::kRandom:
      for (unsigned r = 0; r < c.batch_warm; r++) run_random(a, g_slots, g_order, kBatchObjects);
      return best_of(c.reps, [&] { return timed([&] { run_random(a, g_slots, g_order, kBatchObjects); }); });
  }
  return 0;
}

// Cross-CPU: cpu 0 allocates a batch into a slot, cpu 1 frees it. Slots
// are g_slots (kCrossBatch <= kBatchObjects).
template <class A>
struct CrossCall {
  A a;
  uint64_t ticks;
};
template <class A>
void cross_free_on_this_cpu(void* arg) {
  auto* x = static_cast<CrossCall<A>*>(arg);
  x->ticks = timed([&] { free_batch(x->a, g_slots, kCrossBatch); });
}

// One batch: allocation ticks (here) plus freeing ticks (on cpu 1). This
// core keeps interrupts on while it waits: a cross-call made with them
// masked hangs riscv64 under icount.
template <class A>
uint64_t cross_batch(A a) {
  uint64_t t = timed([&] { alloc_batch(a, g_slots, kCrossBatch); });
  CrossCall<A> x{a, 0};
  smp::call_on(1, cross_free_on_this_cpu<A>, &x);
  return t + x.ticks;
}

template <class A>
uint64_t measure_cross(A inner, const Counts& c) {
  const Checked<A> a{inner};
  for (unsigned k = 0; k < c.cross_warm; k++) cross_batch(a);
  return best_of(c.reps, [&] {
    uint64_t sum = 0;
    for (unsigned k = 0; k < c.cross_batches; k++) sum += cross_batch(a);
    return sum;
  });
}

// --- the table ----------------------------------------------------------------

struct Table {
  unsigned rows = 0, failed = 0;
};

// One row: (ticks - base) / objects with one decimal, or FAILED.
void row(Table& t, const char* pattern, const char* allocator, size_t size, uint64_t objects, uint64_t ticks,
         uint64_t base, bool ok) {
  t.rows++;
  char fig[24];
  if (!ok) {
    t.failed++;
    ksnprintf(fig, sizeof fig, "FAILED");
  } else {
    int64_t net = static_cast<int64_t>(ticks) - static_cast<int64_t>(base);
    uint64_t mag = static_cast<uint64_t>(net < 0 ? -net : net);
    uint64_t tenths = (mag * 10 + objects / 2) / objects;
    ksnprintf(fig, sizeof fig, "%s%llu.%llu", net < 0 ? "-" : "", (ull)(tenths / 10), (ull)(tenths % 10));
  }
  kprintf("%-16s %-10s %5llu %8llu %10s\n", pattern, allocator, (ull)size, (ull)objects, fig);
}

// The random pattern's free order: xorshift32 from a fixed seed through
// Fisher-Yates, the same on every run and arch.
void make_order() {
  uint32_t x = 20240601;
  for (unsigned i = 0; i < kBatchObjects; i++) g_order[i] = i;
  for (unsigned i = kBatchObjects; i > 1; i--) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    unsigned j = x % i;
    uint32_t v = g_order[i - 1];
    g_order[i - 1] = g_order[j];
    g_order[j] = v;
  }
}

// 1000 nops, to show what a tick is (out of line: 4 KiB of code would put
// an ARM literal pool out of reach).
[[gnu::noinline]] void no_nops() { asm volatile("" ::: "memory"); }
[[gnu::noinline]] void thousand_nops() { asm volatile(".rept 1000\n nop\n .endr" ::: "memory"); }

void counter_check(const Counts& c) {
  uint64_t empty = best_of(c.reps, [] { return timed(no_nops); });
  uint64_t nops = best_of(c.reps, [] { return timed(thousand_nops); });
  int64_t net = static_cast<int64_t>(nops) - static_cast<int64_t>(empty);
  kprintf("counter check: 1000 nops = %lld ticks (%s)\n", static_cast<long long>(net),
          net == 1000 ? "one per instruction" : "not one per instruction: run under qemu-run --icount for counts");
}

const char* const kPatternNames[] = {"pairs", "lifo", "random"};

void bench_kmem_cache(Table& t, const Counts& c, bool cross) {
  uint64_t base[3];
  for (int p = 0; p < 3; p++) base[p] = measure(NullOps{}, static_cast<Pattern>(p), c);
  kmem_cache_t* caches[kNumSizes];
  for (unsigned k = 0; k < kNumSizes; k++) {
    char name[32];
    ksnprintf(name, sizeof name, "bench_%llu", (ull)kSizes[k]);
    caches[k] = kmem_cache_create(name, kSizes[k], 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  }
  for (int p = 0; p < 3; p++) {
    for (unsigned k = 0; k < kNumSizes; k++) {
      unsigned before = g_failures;
      uint64_t ticks = caches[k] ? measure(CacheOps{caches[k]}, static_cast<Pattern>(p), c) : 0;
      row(t, kPatternNames[p], "kmem_cache", kSizes[k], p == 0 ? c.pairs : kBatchObjects, ticks, base[p],
          caches[k] && g_failures == before);
    }
  }
  if (!cross) {
    kprintf("%-16s %-10s %5s %8s %10s  (one core: boot with --smp 2 or more)\n", "cross", "kmem_cache", "-", "-",
            "skipped");
  } else {
    uint64_t cbase = measure_cross(NullOps{}, c);
    uint64_t objects = uint64_t{c.cross_batches} * kCrossBatch;
    for (unsigned k = 0; k < kNumSizes; k++) {
      unsigned before = g_failures;
      uint64_t ticks = caches[k] ? measure_cross(CacheOps{caches[k]}, c) : 0;
      row(t, "cross", "kmem_cache", kSizes[k], objects, ticks, cbase, caches[k] && g_failures == before);
    }
  }
  for (kmem_cache_t* cp : caches)
    if (cp && !kmem_cache_destroy(cp)) kprintf("bench: a cache could not be destroyed (see above)\n");
}

void bench_kmem_alloc(Table& t, const Counts& c) {
  uint64_t base = measure(NullOps{}, Pattern::kPairs, c);
  for (size_t size : kSizes) {
    unsigned before = g_failures;
    uint64_t ticks = measure(KmemAllocOps{size}, Pattern::kPairs, c);
    row(t, "pairs", "kmem_alloc", size, c.pairs, ticks, base, g_failures == before);
  }
}

vmem_t* make_arena(const char* name, size_t bytes) {
  return vmem_create(name, reinterpret_cast<void*>(kArenaBase), bytes, kQuantum, nullptr, nullptr, nullptr, 0,
                     VM_SLEEP);
}

// Allocates 2n+1 quanta and frees every other one: n free one-quantum
// segments between allocated ones, plus the arena's untouched rest. The
// quanta still allocated are left in held[0..nheld) (kmem_alloc'ed) for
// the cleanup.
bool fragment(vmem_t* vmp, void*** held, unsigned& nheld) {
  const unsigned total = 2 * kFreeSegments + 1;
  auto** q = static_cast<void**>(kmem_alloc(total * sizeof(void*), KM_SLEEP));
  *held = q;
  nheld = 0;
  if (!q) return false;
  bool ok = true;
  for (unsigned i = 0; i < total; i++) {
    q[i] = vmem_alloc(vmp, kQuantum, VM_SLEEP | VM_INSTANTFIT);
    if (!q[i]) ok = false;
  }
  for (unsigned i = 0; i < total; i++) {
    if (i % 2 && q[i]) vmem_free(vmp, q[i], kQuantum);
    else if (q[i]) q[nheld++] = q[i];
  }
  mm::VmemStats st;
  mm::vmem_stats(vmp, st);
  return ok && st.segs_free == kFreeSegments + 1;
}

void bench_vmem(Table& t, const Counts& c) {
  uint64_t base = measure(NullOps{}, Pattern::kPairs, c);
  struct {
    const char* pattern;
    size_t bytes;
    bool fragmented;
  } const arenas[] = {{"vmem_fresh", kArenaBytes, false},
                      {"vmem_fresh_odd", kOddArenaBytes, false},
                      {"vmem_10000_free", kArenaBytes, true}};
  for (const auto& a : arenas) {
    vmem_t* vmp = make_arena(a.pattern, a.bytes);
    void** held = nullptr;
    unsigned nheld = 0;
    bool ok = vmp && (!a.fragmented || fragment(vmp, &held, nheld));
    unsigned before = g_failures;
    uint64_t ticks = ok ? measure(VmemOps{vmp}, Pattern::kPairs, c) : 0;
    row(t, a.pattern, "vmem", kQuantum, c.pairs, ticks, base, ok && g_failures == before);
    for (unsigned i = 0; i < nheld; i++) vmem_free(vmp, held[i], kQuantum);
    if (held) kmem_free(held, (2 * kFreeSegments + 1) * sizeof(void*));
    if (vmp && !vmem_destroy(vmp)) kprintf("bench: arena %s could not be destroyed (see above)\n", a.pattern);
  }
}

// Allocation profiling: what counting adds to a pair (the tagged entry
// points, the reference kept and the per-CPU counters), for a 64-byte
// kmem_cache pair, a kmem_alloc pair and a page pair. Only when no
// allocator hook is on and profiling has never been on (once on, frees stay
// hooked: mm/alloc_tag.cpp, Switching), so run last; it switches profiling on
// for the measurement and off again.
void bench_prof(Table& t, const Counts& c) {
  if (mm::alloc_hooks_features() != 0 || mm::prof_mode() != mm::ProfMode::kOff) {
    kprintf("%-16s %-10s %5s %8s %10s  (profiling or another allocator hook was on: boot without them)\n",
            "prof_*", "-", "-", "-", "skipped");
    return;
  }
  constexpr unsigned kPairs = 1000;
  kmem_cache_t* cp = kmem_cache_create("bench_prof", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp) {
    row(t, "prof_on", "kmem_cache", 64, kPairs, 0, 0, false);
    return;
  }
  const Checked<CacheOps> a{{cp}};
  const Checked<KmemAllocOps> k{{64}};
  const Checked<PageOps> pg{};
  unsigned before = g_failures;
  auto pairs = [&](auto ops) {
    run_pairs(ops, c.pairs_warm);
    return best_of(c.reps, [&] { return timed([&] { run_pairs(ops, kPairs); }); });
  };
  uint64_t off_cache = pairs(a), off_alloc = pairs(k), off_page = pairs(pg);
  bool on = mm::prof_set(true);
  uint64_t on_cache = pairs(a), on_alloc = pairs(k), on_page = pairs(pg);
  mm::prof_set(false);
  kmem_cache_destroy(cp);
  bool ok = on && g_failures == before;
  row(t, "prof_on", "kmem_cache", 64, kPairs, on_cache, off_cache, ok);
  row(t, "prof_on", "kmem_alloc", 64, kPairs, on_alloc, off_alloc, ok);
  row(t, "prof_on", "page", mm::kPageBytes, kPairs, on_page, off_page, ok);
}

void bench_page(Table& t, const Counts& c) {
  uint64_t base = measure(NullOps{}, Pattern::kPairs, c);
  unsigned before = g_failures;
  uint64_t ticks = measure(PageOps{}, Pattern::kPairs, c);
  row(t, "page", "page", mm::kPageBytes, c.pairs, ticks, base, g_failures == before);
}

// kmemtrace's cost per recorded event: kmem_cache pairs (two events
// each) with tracing on, less the same pairs with it off, halved. The
// rings must be empty (the measurement clears them); 1000 pairs fit a
// ring of 256 KiB, so no event is dropped.
bool rings_empty() {
  for (unsigned cpu = 0; cpu < kmemtrace::max_cpus(); cpu++) {
    kmemtrace::CpuStats st;
    if (kmemtrace::stats(cpu, st) && (st.ring.committed != st.ring.consumed || st.ring.dropped_events)) return false;
  }
  return true;
}

void bench_trace(Table& t, const Counts& c) {
  constexpr unsigned kPairs = 1000;
  if (kmemtrace::ring_capacity() < 128 * 1024) {  // 1000 pairs are 72 KB of events
    kprintf("%-16s %-10s %5s %8s %10s  (rings under 128 KiB: boot with kmemtrace.ring=128K or more)\n",
            "kmemtrace_on", "kmem_cache", "-", "-", "skipped");
    return;
  }
  if (kmemtrace::enabled() || !rings_empty()) {
    kprintf("%-16s %-10s %5s %8s %10s  (tracing on or rings not empty: kmemtrace off; kmemtrace clear)\n",
            "kmemtrace_on", "kmem_cache", "-", "-", "skipped");
    return;
  }
  kmem_cache_t* cp = kmem_cache_create("bench_trace", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp) {
    row(t, "kmemtrace_on", "kmem_cache", 64, kPairs, 0, 0, false);
    return;
  }
  const Checked<CacheOps> a{{cp}};
  unsigned before = g_failures;
  run_pairs(a, c.pairs_warm);
  uint64_t off = best_of(c.reps, [&] { return timed([&] { run_pairs(a, kPairs); }); });
  uint64_t on = best_of(c.reps, [&] {
    kmemtrace::clear();
    kmemtrace::start();
    uint64_t ticks = timed([&] { run_pairs(a, kPairs); });
    kmemtrace::stop();
    return ticks;
  });
  bool dropped = kmemtrace::total_overruns() != 0;
  kmemtrace::clear();
  kmem_cache_destroy(cp);
  bool ok = g_failures == before && !dropped;
  row(t, "kmemtrace_on", "kmem_cache", 64, kPairs, on, off, ok);  // what tracing adds to a pair
  if (ok) {
    uint64_t tenths = on > off ? ((on - off) * 10 / 2 + kPairs / 2) / kPairs : 0;
    kprintf("kmemtrace: %llu.%llu per recorded event (traced pairs less untraced ones, two events a pair)\n",
            (ull)(tenths / 10), (ull)(tenths % 10));
  }
}

// kmemleak: what stamping adds to a kmem_cache pair (time and CPU; then
// with the backtrace too), and the scan's cost per word over a heap of
// 800-byte objects chained through their first word (a pointer density of
// 1%), whole-system scan included (its fixed costs are amortised over the
// chain). Only when kmemleak and kmemtrace are off: it turns kmemleak on
// for the measurement and off again.
void bench_leak(Table& t, const Counts& c) {
  if (mm::kmemleak_enabled() || kmemtrace::enabled()) {
    kprintf("%-16s %-10s %5s %8s %10s  (kmemleak or kmemtrace on: turn them off first)\n", "kmemleak_*",
            "-", "-", "-", "skipped");
    return;
  }
  constexpr unsigned kPairs = 1000;
  kmem_cache_t* cp = kmem_cache_create("bench_leak", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  constexpr size_t kObjSize = 800;
  constexpr unsigned kObjs = 2048;
  kmem_cache_t* big = kmem_cache_create("bench_leak_scan", kObjSize, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp || !big) {
    row(t, "kmemleak_on", "kmem_cache", 64, kPairs, 0, 0, false);
    if (cp) kmem_cache_destroy(cp);
    if (big) kmem_cache_destroy(big);
    return;
  }
  const Checked<CacheOps> a{{cp}};
  unsigned before = g_failures;
  run_pairs(a, c.pairs_warm);
  uint64_t off = best_of(c.reps, [&] { return timed([&] { run_pairs(a, kPairs); }); });
  kmemleak_enable(true);
  mm::kmemleak_set_backtraces(false);
  run_pairs(a, c.pairs_warm);
  uint64_t on = best_of(c.reps, [&] { return timed([&] { run_pairs(a, kPairs); }); });
  mm::kmemleak_set_backtraces(true);
  run_pairs(a, c.pairs_warm);
  uint64_t bt = best_of(c.reps, [&] { return timed([&] { run_pairs(a, kPairs); }); });
  bool ok = g_failures == before;
  row(t, "kmemleak_on", "kmem_cache", 64, kPairs, on, off, ok);    // stamps: time, CPU
  row(t, "kmemleak_bt", "kmem_cache", 64, kPairs, bt, off, ok);    // and the backtrace
  // The scan: a chain from a root (kmemleak_not_leak), every object reached.
  void** first = nullptr;
  void** prev = nullptr;
  unsigned made = 0;
  for (; made < kObjs; made++) {
    auto** o = static_cast<void**>(kmem_cache_alloc(big, KM_NOSLEEP));
    if (!o) break;
    for (size_t w = 1; w < kObjSize / sizeof(void*); w++) o[w] = reinterpret_cast<void*>(uintptr_t{w} * 3);  // data: small numbers
    o[0] = nullptr;
    if (prev) prev[0] = o;
    else first = o;
    prev = o;
  }
  bool scan_ok = made == kObjs;
  if (first) kmemleak_not_leak(first);
  uint64_t scan = ~uint64_t{0}, words = 1;
  if (scan_ok) {
    kmemleak_scan();  // settles: the chain is new
    for (unsigned r = 0; r < c.reps && r < 3; r++) {
      uint64_t t0 = arch::cycles();  // interrupts on: the scan stops the other cores with IPIs
      kmemleak_scan();  // (what it reports is the system's, not the chain's)
      uint64_t t1 = arch::cycles();
      mm::LeakScanStats st;
      mm::kmemleak_last_scan(st);
      if (elapsed(t0, t1) < scan) {
        scan = elapsed(t0, t1);
        words = st.bytes_scanned / sizeof(void*);
      }
    }
  }
  row(t, "kmemleak_scan", "kmemleak", kObjSize, words, scan, 0, scan_ok && ok);  // per word scanned
  while (first) {
    auto** next = static_cast<void**>(first[0]);
    kmem_cache_free(big, first);
    first = next;
  }
  kmemleak_enable(false);
  kmem_cache_destroy(big);
  kmem_cache_destroy(cp);
}

// The slab layer and the debug modes, per alloc+free pair of 64-byte
// buffers (absolute, net of the empty loop): slab_pair is a KMC_NOMAGAZINE
// cache, every pair through the slab layer (its free list's links encoded
// and checked: kmem_slab.cpp, Free-list hardening); debug_* are caches with
// one mode each (debugged caches have no magazines: compare them with
// slab_pair, and with the pairs row of a 64-byte kmem_cache for the magazine
// layer).
void bench_debug(Table& t, const Counts& c) {
  struct Mode {
    const char* name;
    int cflags;
  };
  const Mode modes[] = {{"slab_pair", KMC_NOMAGAZINE},
                        {"debug_redzone", KMC_REDZONE},
                        {"debug_poison", KMC_DEADBEEF},
                        {"debug_audit", KMC_AUDIT},
                        {"debug_all", KMC_REDZONE | KMC_DEADBEEF | KMC_AUDIT | KMC_CONTENTS}};
  uint64_t base = measure(NullOps{}, Pattern::kPairs, c);
  for (const Mode& m : modes) {
    kmem_cache_t* cp = kmem_cache_create(m.name, 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, m.cflags);
    unsigned before = g_failures;
    uint64_t ticks = cp ? measure(CacheOps{cp}, Pattern::kPairs, c) : 0;
    row(t, m.name, "kmem_cache", 64, c.pairs, ticks, base, cp && g_failures == before);
    if (cp) kmem_cache_destroy(cp);
  }
}

int cmd_bench(int argc, char** argv) {
  const Counts* counts = &kFull;
  if (argc > 2) return shell::usage_error(argv[0], "usage: bench [quick|full]");
  if (argc == 2) {
    if (strcmp(argv[1], "quick") == 0) counts = &kQuick;
    else if (strcmp(argv[1], "full") != 0)
      return shell::usage_error(argv[0], "unknown mode '%s' (usage: bench [quick|full])", argv[1]);
  }
  if (!mm::kmem_ready()) return shell::usage_error(argv[0], "the allocators are not up yet");
  g_slots = static_cast<void**>(kmem_zalloc(kBatchObjects * sizeof(void*), KM_SLEEP));
  g_order = static_cast<uint32_t*>(kmem_zalloc(kBatchObjects * sizeof(uint32_t), KM_SLEEP));
  const Counts& c = *counts;
  make_order();
  g_failures = 0;
  bool cross = kMaxCpus >= 2 && g_cpu_count >= 2 && g_percpu[1 % kMaxCpus].online.load();
  kprintf("bench: %s (%s), %u cpus, %s: counter ticks per object (alloc + free), net of the empty loop, best of %u\n",
          MAGPIE_BOARD, MAGPIE_ARCH, cpus_online(), c.name, c.reps);
  counter_check(c);
  kprintf("%-16s %-10s %5s %8s %10s\n", "pattern", "allocator", "size", "objects", "per-object");
  Table t;
  bench_kmem_cache(t, c, cross);
  bench_kmem_alloc(t, c);
  bench_vmem(t, c);
  bench_page(t, c);
  bench_trace(t, c);
  bench_leak(t, c);
  bench_debug(t, c);
  bench_prof(t, c);  // last: frees stay hooked once profiling was on
  kprintf("bench: %u rows, %u failed\n", t.rows, t.failed);
  kprintf("(pairs: alloc, free, ...; lifo/random: %u allocs then %u frees, last first / fixed random order;\n"
          " cross: cpu 0 allocates %u, cpu 1 frees them; vmem: instant fit of one quantum, fresh arena of 1 GiB,\n"
          " of 1.5 GiB, and 1 GiB with %u free segments; page: page_alloc(0)+page_free via the per-CPU cache;\n"
          " kmemtrace_on: what recording adds to a kmem_cache pair, two events; kmemleak_on, kmemleak_bt: what\n"
          " kmemleak's stamps add to a pair, without and with the backtrace; kmemleak_scan: per word scanned,\n"
          " whole system, over a chain of %u objects at 1%% pointer density; slab_pair: a pair through the slab\n"
          " layer (no magazines); debug_*: a pair of a cache with that debug mode, no magazines either;\n"
          " prof_on: what allocation profiling adds to a pair of that allocator)\n",
          kBatchObjects, kBatchObjects, kCrossBatch, kFreeSegments, 2048u);
  kmem_free(g_slots, kBatchObjects * sizeof(void*));
  kmem_free(g_order, kBatchObjects * sizeof(uint32_t));
  g_slots = nullptr;
  g_order = nullptr;
  return t.failed ? 1 : 0;
}

}  // namespace

SHELL_COMMAND(bench, "allocator fast paths, ticks per alloc+free: bench [quick|full]", cmd_bench);
