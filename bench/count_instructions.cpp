// SPDX-License-Identifier: Apache-2.0
// Instructions per operation, counted by callgrind: deterministic figures
// for kmem, vmem and the page allocator beside glibc, jemalloc, tcmalloc
// and mimalloc. tools/bench-host runs it as
//
//   GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 valgrind --tool=callgrind
//       --collect-atstart=no --callgrind-out-file=DIR/cg.out count_instructions
//
// 1. Every measurement warms up first (uncollected: magazines loaded,
//    depots stocked, lazy binding done), then zeroes callgrind's counters,
//    turns collection on around exactly one pattern call
//    (CALLGRIND_TOGGLE_COLLECT), and dumps the counters with a label
//    (CALLGRIND_DUMP_STATS_AT). One dump file per measurement.
// 2. Labels are "<pattern> <allocator> <size> <objects>". The same pattern
//    run with NullAllocator is dumped as allocator "baseline": the loop
//    alone, which bench/write_results.py subtracts before dividing by the
//    object count. Figures are instructions per object (alloc + free).
// 3. Cross-thread: callgrind's collection switch is per thread, so the
//    producer turns it on around each alloc_batch and the consumer around
//    each free_batch; the BatchRing has depth 1, so the threads alternate
//    and never run allocator code at the same time: the count does not
//    depend on how valgrind schedules them.
// 4. Natively the client requests do nothing: with --quick it is the smoke
//    test that keeps this program from rotting (CTest bench.smoke.*).
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <mm/alloc_tag.h>

#include "allocators.h"
#include "cross_ring.h"
#include "patterns.h"

namespace bench {
namespace {

struct Counts {
  unsigned pairs_warm, pairs;          // alloc+free pairs
  unsigned batch_warm, batch_rounds;   // rounds of kBatchObjects
  unsigned cross_warm, cross_batches;  // batches of kCrossBatch
};
constexpr Counts kFull{2000, 10000, 3, 5, 64, 100};
constexpr Counts kQuick{10, 100, 1, 1, 2, 4};

Counts g_counts = kFull;
unsigned g_dumps;

void begin_measurement() { CALLGRIND_ZERO_STATS; }

void end_measurement(const char* pattern, const char* allocator, size_t size, unsigned long objects) {
  char label[128];
  snprintf(label, sizeof label, "%s %s %zu %lu", pattern, allocator, size, objects);
  CALLGRIND_DUMP_STATS_AT(label);
  printf("%s\n", label);
  fflush(stdout);
  g_dumps++;
}

template <class A>
void measure_pairs(A a, const char* pattern, const char* name, size_t size) {
  run_pairs(a, g_counts.pairs_warm);
  begin_measurement();
  CALLGRIND_TOGGLE_COLLECT;
  run_pairs(a, g_counts.pairs);
  CALLGRIND_TOGGLE_COLLECT;
  end_measurement(pattern, name, size, g_counts.pairs);
}

template <class A>
void measure_batches(A a, bool random, const char* name, size_t size) {
  std::vector<void*> slots(kBatchObjects);
  const std::vector<uint32_t> order = random_order(kBatchObjects);
  for (unsigned r = 0; r < g_counts.batch_warm; r++) {
    if (random) run_random(a, slots.data(), order.data(), kBatchObjects);
    else run_lifo(a, slots.data(), kBatchObjects);
  }
  begin_measurement();
  CALLGRIND_TOGGLE_COLLECT;
  for (unsigned r = 0; r < g_counts.batch_rounds; r++) {
    if (random) run_random(a, slots.data(), order.data(), kBatchObjects);
    else run_lifo(a, slots.data(), kBatchObjects);
  }
  CALLGRIND_TOGGLE_COLLECT;
  end_measurement(random ? "random" : "lifo", name, size,
                  static_cast<unsigned long>(g_counts.batch_rounds) * kBatchObjects);
}

template <class A>
void measure_cross(A a, const char* name, size_t size) {
  const unsigned warm = g_counts.cross_warm, total = warm + g_counts.cross_batches;
  BatchRing ring(1, kCrossBatch);
  std::thread consumer([&] {
    for (unsigned k = 0;; k++) {
      unsigned n;
      void** objs = ring.full_slot(n);
      if (n == 0) {
        ring.release_slot();
        return;
      }
      if (k >= warm) CALLGRIND_TOGGLE_COLLECT;
      free_batch(a, objs, n);
      if (k >= warm) CALLGRIND_TOGGLE_COLLECT;
      ring.release_slot();
    }
  });
  for (unsigned k = 0; k < total; k++) {
    void** objs = ring.free_slot();  // depth 1: the consumer is done with batch k-1
    if (k == warm) begin_measurement();
    if (k >= warm) CALLGRIND_TOGGLE_COLLECT;
    alloc_batch(a, objs, kCrossBatch);
    if (k >= warm) CALLGRIND_TOGGLE_COLLECT;
    ring.publish(kCrossBatch);
  }
  ring.close();
  consumer.join();
  end_measurement("cross", name, size, static_cast<unsigned long>(g_counts.cross_batches) * kCrossBatch);
}

template <class A>
void measure_all_patterns(A a, const char* name, size_t size) {
  measure_pairs(a, "pairs", name, size);
  measure_batches(a, false, name, size);
  measure_batches(a, true, name, size);
  measure_cross(a, name, size);
}

int usage(FILE* out, int rc) {
  fprintf(out,
          "usage: count_instructions [--quick]\n"
          "Counts instructions per alloc+free for kmem, glibc, jemalloc, tcmalloc and\n"
          "mimalloc, and for vmem and the page allocator, under\n"
          "  valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=DIR/cg.out\n"
          "(one dump per measurement; tools/bench-host runs it and reads the dumps).\n"
          "Natively it runs the same code, counting nothing: --quick makes that a smoke test.\n");
  return rc;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  ensure_static_tls(argv);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) g_counts = kQuick;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout, 0);
    else {
      fprintf(stderr, "count_instructions: unknown argument '%s'\n", argv[i]);
      return usage(stderr, 2);
    }
  }
  bool ok = true;
  for (AllocatorId id : kAllocators) {
    const char* why = nullptr;
    if (!allocator_available(id, &why)) {
      fprintf(stderr, "count_instructions: %s unavailable: %s\n", allocator_name(id), why);
      ok = false;
    }
  }
  if (!ok) return 1;
  mm::kmem_init();

  measure_all_patterns(NullAllocator{}, "baseline", 0);
  for (size_t size : kSizes)
    for (AllocatorId id : kAllocators)
      with_allocator(id, size, [&](auto a) { measure_all_patterns(a, allocator_name(id), size); });

  vmem_t* fresh = make_fresh_arena("bench_fresh");
  measure_pairs(VmemAllocator{fresh, kVmemQuantum}, "vmem_fresh", "vmem", kVmemQuantum);
  vmem_t* fresh_odd = make_fresh_arena("bench_fresh_odd", kVmemOddArenaBytes);
  measure_pairs(VmemAllocator{fresh_odd, kVmemQuantum}, "vmem_fresh_odd", "vmem", kVmemQuantum);
  vmem_t* fragmented = make_fragmented_arena("bench_fragmented", 10000);
  measure_pairs(VmemAllocator{fragmented, kVmemQuantum}, "vmem_10000_free", "vmem", kVmemQuantum);
  measure_pairs(PageAllocator{}, "page", "page", mm::kPageBytes);

  // The slab layer (a cache without magazines: its free list's links
  // encoded and checked) and each debug mode (mm/kmem_debug.h; debugged
  // caches have no magazines either), pairs of 64-byte buffers.
  const struct {
    const char* name;
    int cflags;
  } modes[] = {{"slab_pair", KMC_NOMAGAZINE},
               {"debug_redzone", KMC_REDZONE},
               {"debug_poison", KMC_DEADBEEF},
               {"debug_audit", KMC_AUDIT},
               {"debug_all", KMC_REDZONE | KMC_DEADBEEF | KMC_AUDIT | KMC_CONTENTS}};
  for (const auto& m : modes) {
    kmem_cache_t* cp = kmem_cache_create(m.name, 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, m.cflags);
    if (!cp) {
      fprintf(stderr, "count_instructions: kmem_cache_create(%s) failed\n", m.name);
      return 1;
    }
    measure_pairs(KmemCacheAllocator{cp}, "pairs", m.name, 64);
    kmem_cache_destroy(cp);
  }

  // Allocation profiling counting (mm/alloc_tag.h): the same pairs as the
  // first rows with it on. Last: once it has been on, frees stay hooked.
  {
    kmem_cache_t* cp = kmem_cache_create("prof_pair", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    if (!cp || !mm::prof_set(true)) {
      fprintf(stderr, "count_instructions: allocation profiling could not be switched on\n");
      return 1;
    }
    measure_pairs(KmemCacheAllocator{cp}, "pairs", "prof_kmem_cache", 64);
    measure_pairs(KmemAllocAllocator{64}, "pairs", "prof_kmem_alloc", 64);
    measure_pairs(PageAllocator{}, "pairs", "prof_page", mm::kPageBytes);
    mm::prof_set(false);
    kmem_cache_destroy(cp);
  }

  fprintf(stderr, "count_instructions: %u measurements%s\n", g_dumps,
          RUNNING_ON_VALGRIND ? "" : " (not under valgrind: nothing counted)");
  return 0;
}
