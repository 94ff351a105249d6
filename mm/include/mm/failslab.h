// SPDX-License-Identifier: Apache-2.0
// Fault injection for the allocators (Linux's failslab, illumos's
// kmem_mtbf): KM_NOSLEEP allocations from kmem (kmem_cache_alloc,
// kmem_alloc, kmem_zalloc) and VM_NOSLEEP ones from vmem (vmem_alloc,
// vmem_xalloc) fail on purpose, so that every caller's failure path runs.
// KM_SLEEP and VM_SLEEP allocations never fail. Page allocations are not
// failed (Linux keeps those apart too: fail_page_alloc).
//
// The knobs are Linux's fault_attr:
//   probability  percent of eligible calls that fail (0 to 100)
//   interval     only every interval-th eligible call may fail (1: any)
//   times        failures in all, then none (-1: no limit)
//   space        bytes that must be allocated (eligible calls' sizes)
//                before the first failure (0: none)
//   cache=NAME   only allocations from the kmem cache or vmem arena NAME
//                (kmem_alloc's sizes are caches kmem_alloc_N; a large
//                kmem_alloc is "kmem_alloc"; kmemleak's per-slab records
//                are "kmemleak_records")
// Written as "PROBABILITY,INTERVAL,TIMES[,cache=NAME][,space=BYTES]", the
// kmem.fail= bootarg's and `kmem fail`'s syntax.
//
// While it is on, the allocators' hooked copies run (mm/hooks.h, the
// allocation side only): with it off the fast paths are unchanged. The
// decision takes no lock: atomic counters, and a random number from one
// atomic sequence mixed (splitmix64), so a given workload on one CPU fails
// the same calls every run.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mm {

struct FailConfig {
  unsigned probability = 100;
  uint64_t interval = 1;
  int64_t times = -1;
  uint64_t space = 0;
  char filter[32] = {};  // empty: every cache and arena
};

// Parses the syntax above into out; false with *why saying what is wrong.
bool failslab_parse(const char* spec, FailConfig& out, const char** why);
// Turns injection on with c (its counters start afresh), or off. False if
// the allocators' hooks could not be switched (it is then off).
bool failslab_set(const FailConfig& c);
void failslab_off();
// The configuration in force (false: off), what is left of times and
// space, and the failures injected since it was set.
struct FailState {
  FailConfig config;
  int64_t times_left;
  uint64_t space_left;
  uint64_t injected;
};
bool failslab_state(FailState& out);

// For the allocators' hooked copies: is injection on (one relaxed load),
// and should this allocation of `size` bytes from `name` fail?
extern uint32_t g_failslab_on;
inline bool failslab_armed() { return __atomic_load_n(&g_failslab_on, __ATOMIC_RELAXED) != 0; }
bool failslab_should_fail(const char* name, size_t size);

}  // namespace mm
