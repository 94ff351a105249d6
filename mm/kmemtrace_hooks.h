// SPDX-License-Identifier: Apache-2.0
// The allocators' kmemtrace hooks (the recorder is trace/include/trace/
// kmemtrace.h): one event per successful allocation and per free, in the
// public entry points, with the return address into their caller. The
// allocators also call each other's public entry points (kmem's slabs take
// vmem spans and pages, magazines are cache objects, large kmem_alloc goes
// through the heap arenas, vmem's quantum caches are kmem caches): those
// calls record events of their own, with a caller inside mm/, so a client
// call can stand behind several events of different types. kmtrace's
// per-site view separates them; per-type byte totals count such memory once
// per layer.
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
#include <mm/platform_inline.h>
#include <trace/kmemtrace.h>

namespace kmemtrace {

// Are the allocators' hooks on (kmemtrace's, kmemleak's: mm/hooks.h)? Every
// allocator entry point tests this first: the platform's switch (in the
// kernel a static branch, one patched nop). The hooked copies then look at
// each feature's flag (kmemtrace::enabled(), kmemleak's). Neither it nor
// enabled() below orders anything: a stale answer moves where recording
// starts or stops by an event or so, and what orders the rings' set-up
// before a recording is trace/'s (kmemtrace::enabled, kmemtrace::start).
__attribute__((always_inline)) inline bool on() { return mm::plat::alloc_hooks_on(); }
// The same for the freeing entry points (their own switch: mm/hooks.h).
__attribute__((always_inline)) inline bool on_free() { return mm::plat::free_hooks_on(); }

// An event for a successful allocation (a failed one, p null, records
// nothing) and for a free, if the recorder is on.
__attribute__((always_inline)) inline void note_alloc(uint8_t type, uintptr_t caller, const void* p, size_t requested,
                                                      size_t allocated, int flags) {
  if (enabled() && p)
    record_alloc_slow(Ring::alloc_tag(type), caller, reinterpret_cast<uintptr_t>(p), requested, allocated,
                      static_cast<uint32_t>(flags));
}

__attribute__((always_inline)) inline void note_free(uint8_t type, uintptr_t caller, const void* p) {
  if (enabled() && p) record_free_slow(Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(p));
}

}  // namespace kmemtrace
