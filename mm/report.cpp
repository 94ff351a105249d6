// SPDX-License-Identifier: Apache-2.0
// Reporting what mm/ refuses: bad frees, impossible requests, destroy with
// live allocations (mm::report_error, kmem.h), and failed assertions
// (assert.h). Both the allocators and vmem on its own report here.
#include <mm/kmem.h>
#include <mm/platform.h>
#include "assert.h"

namespace mm {
// What a debug mode found (MemError::more), printed under the report's
// line: kmem_debug.cpp's, when kmem is linked (vmem alone reports no
// debug findings).
__attribute__((weak)) void print_mem_detail(const MemDetail&) {}
namespace {
// Swapped at any time (tests): exchanged with acq_rel (releases what the
// new hook uses, set up before; acquires the old one's), loaded with
// acquire by report_error.
MemErrorHook g_error_hook;
uint64_t g_errors;  // relaxed: a count that publishes nothing

void default_error_hook(const MemError& e) {
  plat::log("kmem: %s in '%s': address %p, caller %p, detail %llu", e.kind, e.where,
            reinterpret_cast<void*>(e.address), reinterpret_cast<void*>(e.caller),
            static_cast<unsigned long long>(e.detail));
  if (e.more) print_mem_detail(*e.more);
}
}  // namespace

MemErrorHook set_error_hook(MemErrorHook hook) { return __atomic_exchange_n(&g_error_hook, hook, __ATOMIC_ACQ_REL); }

void report_error(const MemError& e) {
  __atomic_fetch_add(&g_errors, 1, __ATOMIC_RELAXED);
  MemErrorHook hook = __atomic_load_n(&g_error_hook, __ATOMIC_ACQUIRE);
  (hook ? hook : default_error_hook)(e);
}

uint64_t error_count() { return __atomic_load_n(&g_errors, __ATOMIC_RELAXED); }

void assert_failed(const char* file, int line, const char* what) {
  plat::fatal("mm: %s:%d: assertion failed: %s", file, line, what);
}

}  // namespace mm
