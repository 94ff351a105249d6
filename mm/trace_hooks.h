// The allocators' kmemtrace hooks (trace/include/trace/kmemtrace.h): one
// event per successful allocation and per free, in the public entry points,
// with the return address into their caller. The allocators also call each
// other's public entry points (kmem's slabs take vmem spans and pages,
// magazines are cache objects, large kmem_alloc goes through the heap
// arenas, vmem's quantum caches are kmem caches): those calls record events
// of their own, with a caller inside mm/, so a client call can stand behind
// several events of different types. kmtrace's per-site view separates
// them; per-type byte totals count such memory once per layer.
//
// A free is recorded before the memory goes back, and before the checks
// that may refuse it as bad (those report it on the console); a free
// refused on the magazine path records nothing.
//
// Off (the default), an entry point pays for on() below and nothing else;
// the caller address is then never computed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm_platform.h>
#include <trace/kmemtrace.h>

namespace mm::tracing {

// Is tracing on? The allocators' entry points test this first. In the
// kernel, where the arch has static branches, it is one nop that
// kernel/static_branch.cpp patches into a branch while tracing is on;
// elsewhere a load of the switch and a branch.
__attribute__((always_inline)) inline bool on() {
#if defined(MM_KERNEL) && defined(ARCH_HAS_STATIC_BRANCH)
  return arch::static_branch_kmemtrace();
#else
  return __builtin_expect(kmemtrace::g_enabled, 0);
#endif
}

using kmemtrace::kTypeCache;
using kmemtrace::kTypeKmalloc;
using kmemtrace::kTypePages;
using kmemtrace::kTypeVmem;

__attribute__((always_inline)) inline void alloc(uint8_t type, uintptr_t caller, const void* p, size_t requested,
                                                 size_t allocated, int flags) {
  if (kmemtrace::enabled() && p)
    kmemtrace::record_alloc_slow(kmemtrace::Ring::alloc_tag(type), caller, reinterpret_cast<uintptr_t>(p), requested,
                                 allocated, static_cast<uint32_t>(flags));
}

__attribute__((always_inline)) inline void free(uint8_t type, uintptr_t caller, const void* p) {
  if (kmemtrace::enabled() && p)
    kmemtrace::record_free_slow(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(p));
}

}  // namespace mm::tracing
