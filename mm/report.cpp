// Reporting what mm/ refuses: bad frees, impossible requests, destroy with
// live allocations (mm::report_error, kmem.h), and failed assertions
// (assert.h). Both the allocators and vmem on its own report here.
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/platform.h>
#include <mm/stackdepot.h>
#include "assert.h"

namespace mm {
void print_audit(const char* what, const BufAudit& a);
namespace {
// Swapped at any time (tests): exchanged with acq_rel (releases what the
// new hook uses, set up before; acquires the old one's), loaded with
// acquire by report_error.
MemErrorHook g_error_hook;
uint64_t g_errors;  // relaxed: a count that publishes nothing

void print_detail(const MemDetail& d) {
  if (d.buffer) plat::log("kmem:   buffer %p, size %llu", reinterpret_cast<void*>(d.buffer),
                          static_cast<unsigned long long>(d.size));
  if (d.offset >= 0 && d.nfound) {
    char hex[16 * 3 + 1];
    unsigned n = 0;
    for (unsigned i = 0; i < d.nfound; i++) {
      const char* digits = "0123456789abcdef";
      hex[n++] = digits[d.found[i] >> 4];
      hex[n++] = digits[d.found[i] & 15];
      hex[n++] = ' ';
    }
    hex[n ? n - 1 : 0] = 0;
    plat::log("kmem:   first bad byte at offset %lld (0x%llx): %s", static_cast<long long>(d.offset),
              static_cast<unsigned long long>(d.offset), hex);
    if (d.expected) plat::log("kmem:   expected %s", d.expected);
  }
  if (d.alloc.valid) print_audit("allocated", d.alloc);
  if (d.free.valid) print_audit("freed", d.free);
}

void default_error_hook(const MemError& e) {
  plat::log("kmem: %s in '%s': address %p, caller %p, detail %llu", e.kind, e.where,
            reinterpret_cast<void*>(e.address), reinterpret_cast<void*>(e.caller),
            static_cast<unsigned long long>(e.detail));
  if (e.more) print_detail(*e.more);
}
}  // namespace

// The frames in the format kmemleak prints ("[<0x...>]"), which
// tools/symbolize turns into function and line.
void print_audit(const char* what, const BufAudit& a) {
  unsigned tps = plat::ticks_per_second();
  unsigned long long ms = tps ? static_cast<unsigned long long>(a.ticks) * 1000 / tps : 0;
  plat::log("kmem:   last %s on cpu %u at %llu.%03llu s (tick %u)%s", what, static_cast<unsigned>(a.cpu), ms / 1000,
            ms % 1000, static_cast<unsigned>(a.ticks), a.stack ? ":" : ", no backtrace");
  const uintptr_t* pcs;
  unsigned n = stackdepot_fetch(a.stack, &pcs);
  for (unsigned i = 0; i < n; i++) plat::log("kmem:     [<0x%llx>]", static_cast<unsigned long long>(pcs[i]));
}

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
