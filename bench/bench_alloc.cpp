// SPDX-License-Identifier: Apache-2.0
// Wall-clock time per alloc+free, with Google Benchmark: the patterns of
// patterns.h for every allocator and size in one run, plus vmem and the page
// allocator. Names are "<pattern>/<allocator>/<size>"; items are objects,
// so ns per object = 1e9 / items_per_second. All use real time (the
// cross-thread pattern's consumer works on another thread).
//
// 1. pairs: kPairsPerIteration alloc+free pairs per iteration.
//    lifo, random: one round of kBatchObjects allocations and frees.
//    cross: one batch of kCrossBatch objects allocated and published to a
//    consumer thread (BatchRing, kCrossDepth batches in flight) that frees
//    it; the producer's rate is the pair's rate.
// 2. Each benchmark warms up before its timed loop; the cross-thread
//    consumer is started and joined outside it.
// 3. Timing is noisy (two cores, shared machine): count_instructions gives
//    the deterministic figures.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "allocators.h"
#include "cross_ring.h"
#include "patterns.h"

namespace bench {
namespace {

constexpr unsigned kPairsPerIteration = 1000;
constexpr unsigned kCrossDepth = 16;

template <class A>
void bm_pairs(benchmark::State& state, A a) {
  run_pairs(a, kPairsPerIteration);
  for (auto _ : state) run_pairs(a, kPairsPerIteration);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kPairsPerIteration);
}

template <class A>
void bm_batches(benchmark::State& state, A a, bool random) {
  std::vector<void*> slots(kBatchObjects);
  const std::vector<uint32_t> order = random_order(kBatchObjects);
  for (int warm = 0; warm < 2; warm++) run_lifo(a, slots.data(), kBatchObjects);
  if (random) {
    for (auto _ : state) run_random(a, slots.data(), order.data(), kBatchObjects);
  } else {
    for (auto _ : state) run_lifo(a, slots.data(), kBatchObjects);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBatchObjects);
}

template <class A>
void bm_cross(benchmark::State& state, A a) {
  BatchRing ring(kCrossDepth, kCrossBatch);
  std::thread consumer([&] {
    for (;;) {
      unsigned n;
      void** objs = ring.full_slot(n);
      if (n) free_batch(a, objs, n);
      ring.release_slot();
      if (!n) return;
    }
  });
  for (unsigned k = 0; k < 4 * kCrossDepth; k++) {
    alloc_batch(a, ring.free_slot(), kCrossBatch);
    ring.publish(kCrossBatch);
  }
  ring.drain();
  for (auto _ : state) {
    alloc_batch(a, ring.free_slot(), kCrossBatch);
    ring.publish(kCrossBatch);
  }
  ring.drain();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kCrossBatch);
  ring.close();
  consumer.join();
}

void register_all() {
  for (size_t size : kSizes) {
    for (AllocatorId id : kAllocators) {
      std::string suffix = std::string("/") + allocator_name(id) + "/" + std::to_string(size);
      with_allocator(id, size, [&](auto a) {
        benchmark::RegisterBenchmark(("pairs" + suffix).c_str(), [a](benchmark::State& s) {
          bm_pairs(s, a);
        })->UseRealTime();
        benchmark::RegisterBenchmark(("lifo" + suffix).c_str(), [a](benchmark::State& s) {
          bm_batches(s, a, false);
        })->UseRealTime();
        benchmark::RegisterBenchmark(("random" + suffix).c_str(), [a](benchmark::State& s) {
          bm_batches(s, a, true);
        })->UseRealTime();
        benchmark::RegisterBenchmark(("cross" + suffix).c_str(), [a](benchmark::State& s) {
          bm_cross(s, a);
        })->UseRealTime();
      });
    }
  }
  const std::string q = std::to_string(kVmemQuantum);
  benchmark::RegisterBenchmark(("vmem_fresh/vmem/" + q).c_str(), [](benchmark::State& s) {
    static vmem_t* arena = make_fresh_arena("bench_fresh");
    bm_pairs(s, VmemAllocator{arena, kVmemQuantum});
  })->UseRealTime();
  benchmark::RegisterBenchmark(("vmem_fresh_odd/vmem/" + q).c_str(), [](benchmark::State& s) {
    static vmem_t* arena = make_fresh_arena("bench_fresh_odd", kVmemOddArenaBytes);
    bm_pairs(s, VmemAllocator{arena, kVmemQuantum});
  })->UseRealTime();
  benchmark::RegisterBenchmark(("vmem_10000_free/vmem/" + q).c_str(), [](benchmark::State& s) {
    static vmem_t* arena = make_fragmented_arena("bench_fragmented", 10000);
    bm_pairs(s, VmemAllocator{arena, kVmemQuantum});
  })->UseRealTime();
  benchmark::RegisterBenchmark(("page/page/" + std::to_string(mm::kPageBytes)).c_str(), [](benchmark::State& s) {
    bm_pairs(s, PageAllocator{});
  })->UseRealTime();
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  ensure_static_tls(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  for (AllocatorId id : kAllocators) {
    const char* why = nullptr;
    if (!allocator_available(id, &why)) {
      fprintf(stderr, "bench_alloc: %s unavailable: %s\n", allocator_name(id), why);
      return 1;
    }
  }
  mm::kmem_init();
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
