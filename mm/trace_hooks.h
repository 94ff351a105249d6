// The allocators' kmemtrace hooks (trace/include/trace/kmemtrace.h): one
// event per successful allocation and per free, in the public entry points
// only, with the return address into their caller. Internal paths call the
// untraced implementations, so one client call records one event.
//
// Off (the default), a hook is a test of the global switch and a branch
// not taken; the caller address is then never computed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <trace/kmemtrace.h>

namespace mm::tracing {

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
