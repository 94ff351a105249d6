// SPDX-License-Identifier: Apache-2.0
// The allocation patterns every benchmark runs: the host's (bench_alloc for
// wall-clock time, count_instructions for instructions under callgrind) and
// the kernel's `bench` command (kernel/bench.cpp). Freestanding: nothing here
// needs a hosted library (the host's threads and random order are in
// cross_ring.h).
//
// 1. Each pattern is a template over an adapter (allocators.h; the kernel's
//    are in kernel/bench.cpp) and is never inlined, so a measurement
//    brackets exactly one call, and the same loop instantiated with the null
//    adapter (no allocator) is the baseline to subtract.
// 2. Adapters are passed by value: the cache pointer or size stays in a
//    register across the calls instead of being reloaded from memory.
// 3. Patterns (every figure is per object, that is per alloc+free pair):
//      pairs      alloc, free, alloc, free, ...
//      lifo       n allocations, then n frees, last allocated first
//      random     n allocations, then n frees in a pre-made random order
//      cross      a producer allocates batches, a consumer frees them (on
//                 the host two threads and a BatchRing, in the kernel cpu 0
//                 and cpu 1); alloc_batch and free_batch are the two halves.
#pragma once
#include <cstdint>

namespace bench {

// Keeps the compiler from dropping or merging an allocation it can see
// (GCC removes a malloc whose result only reaches free). No instructions.
inline void* escape(void* p) {
  asm volatile("" : "+r"(p));
  return p;
}

constexpr unsigned kBatchObjects = 1000;  // lifo and random
constexpr unsigned kCrossBatch = 64;      // objects per producer->consumer batch (kernel: cpu 0 -> cpu 1)

template <class A>
[[gnu::noinline]] void run_pairs(A a, unsigned n) {
  for (unsigned i = 0; i < n; i++) a.release(escape(a.alloc()));
}

template <class A>
[[gnu::noinline]] void run_lifo(A a, void** slots, unsigned n) {
  for (unsigned i = 0; i < n; i++) slots[i] = escape(a.alloc());
  for (unsigned i = n; i-- > 0;) a.release(slots[i]);
}

template <class A>
[[gnu::noinline]] void run_random(A a, void** slots, const uint32_t* order, unsigned n) {
  for (unsigned i = 0; i < n; i++) slots[i] = escape(a.alloc());
  for (unsigned i = 0; i < n; i++) a.release(slots[order[i]]);
}

template <class A>
[[gnu::noinline]] void alloc_batch(A a, void** slots, unsigned n) {
  for (unsigned i = 0; i < n; i++) slots[i] = escape(a.alloc());
}

template <class A>
[[gnu::noinline]] void free_batch(A a, void* const* slots, unsigned n) {
  for (unsigned i = 0; i < n; i++) a.release(slots[i]);
}

}  // namespace bench
