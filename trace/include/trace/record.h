// Recording from code that already runs with interrupts masked on this CPU
// (the allocators' traced paths, inside their own masked region): the ring
// write of kmemtrace::record_*_slow, inline, without masking again. Only
// while tracing is enabled (the caller tested kmemtrace::enabled()).
#pragma once
#include <atomic>
#include <mm/platform_inline.h>
#include <trace/kmemtrace.h>

namespace kmemtrace::detail {

// Defined in trace/kmemtrace.cpp.
extern Ring g_rings[mm::plat::kMaxCpus];
// The ABI's sequence number, shared by every CPU. Relaxed is enough: all
// read-modify-writes of one atomic fall into a single order, so numbers
// are unique; and when one event causes another on another CPU (a free on
// CPU A, then CPU B allocating the same buffer), the allocator's own
// synchronisation between them (a lock, a release/acquire handover) makes
// A's fetch_add happen before B's, which coherence then orders first: B's
// number is larger. No other memory is published by it. The ring write
// that follows is ordered by the ring (ring.h, 5).
extern std::atomic<uint32_t> g_seq;

// Interrupts are masked (kernel) or the thread is its CPU (host), so
// cpu_id() is stable and this ring has one producer: us.
__attribute__((always_inline)) inline void alloc_masked(uint32_t tag, uintptr_t caller, uintptr_t ptr,
                                                        size_t requested, size_t allocated, uint32_t flags) {
  uint32_t seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  g_rings[mm::plat::cpu_id()].put_alloc(tag, seq, caller, ptr, requested, allocated, flags, kSameCpu);
}

__attribute__((always_inline)) inline void free_masked(uint32_t tag, uintptr_t caller, uintptr_t ptr) {
  uint32_t seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  g_rings[mm::plat::cpu_id()].put_free(tag, seq, caller, ptr);
}

}  // namespace kmemtrace::detail
