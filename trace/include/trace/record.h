// Recording from code that already runs with interrupts masked on this CPU
// (the allocators' traced paths, inside their own masked region): the ring
// write of kmemtrace::record_*_slow, inline, without masking again. Only
// while tracing is enabled (the caller tested kmemtrace::enabled()).
#pragma once
#include <atomic>
#include <mm_platform.h>
#include <trace/kmemtrace.h>

namespace kmemtrace::detail {

// Defined in trace/kmemtrace.cpp.
extern Ring g_rings[mm::plat::kMaxCpus];
extern std::atomic<uint32_t> g_seq;

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
