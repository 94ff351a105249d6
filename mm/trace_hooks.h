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

// The caller's address for an event, taken in the public entry point (or a
// function always inlined into it). Plain __builtin_return_address: the
// kernel does not sign return addresses, and __builtin_extract_return_addr
// costs the traced branch a frame on arm64 (xpaclri rewrites x30).
__attribute__((always_inline)) inline uintptr_t caller() {
  return reinterpret_cast<uintptr_t>(__builtin_return_address(0));
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
