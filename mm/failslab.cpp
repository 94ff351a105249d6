// SPDX-License-Identifier: Apache-2.0
// Fault injection for the allocators: see mm/include/mm/failslab.h.
//
// The configuration is written by failslab_set with injection off (the
// flag cleared first, the hooks' switch flipped after), so a hooked copy
// that sees the flag set (relaxed) may read a configuration being replaced:
// at worst one decision made with the old knobs. The counters are atomics:
// interval counts eligible calls, times and space count down with
// compare-and-swap so that neither goes below zero under contention.
#include <mm/failslab.h>
#include <mm/hooks.h>
#include <mm/platform.h>

namespace mm {

uint32_t g_failslab_on;

namespace {
FailConfig g_config;
uint64_t g_calls;       // eligible calls since set (atomic)
int64_t g_times_left;   // atomic; -1: no limit
uint64_t g_space_left;  // atomic
uint64_t g_injected;    // atomic
uint64_t g_random;      // the sequence splitmix64 mixes (atomic)

uint64_t next_random() {
  uint64_t z = __atomic_add_fetch(&g_random, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool same_name(const char* a, const char* b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

// A decimal number up to the next ',' or the end; -1 allowed where
// negative is true.
bool parse_number(const char*& p, bool negative, int64_t& out) {
  bool minus = negative && *p == '-';
  if (minus) p++;
  if (*p < '0' || *p > '9') return false;
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (uint64_t{1} << 62) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
  }
  out = minus ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return *p == ',' || *p == 0;
}

bool starts(const char* p, const char* word) {
  while (*word)
    if (*p++ != *word++) return false;
  return true;
}
}  // namespace

bool failslab_parse(const char* spec, FailConfig& out, const char** why) {
  FailConfig c;
  const char* p = spec;
  int64_t v;
  if (!parse_number(p, false, v) || v > 100) {
    *why = "PROBABILITY is a percentage, 0 to 100";
    return false;
  }
  c.probability = static_cast<unsigned>(v);
  if (*p++ != ',' || !parse_number(p, false, v) || v < 1) {
    *why = "INTERVAL is a number of calls, 1 or more";
    return false;
  }
  c.interval = static_cast<uint64_t>(v);
  if (*p++ != ',' || !parse_number(p, true, v) || v < -1) {
    *why = "TIMES is a number of failures, or -1 for no limit";
    return false;
  }
  c.times = v;
  while (*p == ',') {
    p++;
    if (starts(p, "cache=")) {
      p += 6;
      unsigned n = 0;
      while (*p && *p != ',') {
        if (n + 1 >= sizeof c.filter) {
          *why = "cache= names a cache or arena of at most 31 characters";
          return false;
        }
        c.filter[n++] = *p++;
      }
      c.filter[n] = 0;
      if (!n) {
        *why = "cache= needs a name";
        return false;
      }
    } else if (starts(p, "space=")) {
      p += 6;
      if (!parse_number(p, false, v)) {
        *why = "space= is a number of bytes";
        return false;
      }
      c.space = static_cast<uint64_t>(v);
    } else {
      *why = "after TIMES only cache=NAME and space=BYTES may follow";
      return false;
    }
  }
  if (*p) {
    *why = "expected PROBABILITY,INTERVAL,TIMES[,cache=NAME][,space=BYTES]";
    return false;
  }
  out = c;
  return true;
}

bool failslab_set(const FailConfig& c) {
  __atomic_store_n(&g_failslab_on, 0u, __ATOMIC_RELAXED);
  g_config = c;
  __atomic_store_n(&g_calls, uint64_t{0}, __ATOMIC_RELAXED);
  __atomic_store_n(&g_times_left, c.times, __ATOMIC_RELAXED);
  __atomic_store_n(&g_space_left, c.space, __ATOMIC_RELAXED);
  __atomic_store_n(&g_injected, uint64_t{0}, __ATOMIC_RELAXED);
  // When the hooks were off, or on for kmemtrace alone (the kernel's
  // three-way sites at kmemtrace's own paths, which decide nothing), the
  // patching's cross-calls order all of the above before any core runs a
  // hooked copy. When they were on for another feature, a core may see the
  // flag with part of the old configuration: one decision made with mixed
  // knobs, no worse.
  __atomic_store_n(&g_failslab_on, 1u, __ATOMIC_RELAXED);
  if (alloc_hooks_set(kFeatureFailslab, true)) return true;
  failslab_off();
  return false;
}

void failslab_off() {
  __atomic_store_n(&g_failslab_on, 0u, __ATOMIC_RELAXED);
  alloc_hooks_set(kFeatureFailslab, false);
}

bool failslab_state(FailState& out) {
  if (!failslab_armed()) return false;
  out.config = g_config;
  out.times_left = __atomic_load_n(&g_times_left, __ATOMIC_RELAXED);
  out.space_left = __atomic_load_n(&g_space_left, __ATOMIC_RELAXED);
  out.injected = __atomic_load_n(&g_injected, __ATOMIC_RELAXED);
  return true;
}

bool failslab_should_fail(const char* name, size_t size) {
  const FailConfig& c = g_config;
  if (c.filter[0] && !same_name(c.filter, name)) return false;
  // space: the budget comes down by each eligible call's size first.
  uint64_t space = __atomic_load_n(&g_space_left, __ATOMIC_RELAXED);
  while (space) {
    uint64_t left = space > size ? space - size : 0;
    if (__atomic_compare_exchange_n(&g_space_left, &space, left, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      if (left) return false;
      break;
    }
  }
  uint64_t n = __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
  if (c.interval > 1 && n % c.interval) return false;
  if (c.probability < 100 && next_random() % 100 >= c.probability) return false;
  int64_t t = __atomic_load_n(&g_times_left, __ATOMIC_RELAXED);
  for (;;) {
    if (t == 0) return false;
    if (t < 0) break;  // no limit
    if (__atomic_compare_exchange_n(&g_times_left, &t, t - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
  }
  __atomic_add_fetch(&g_injected, 1, __ATOMIC_RELAXED);
  return true;
}

}  // namespace mm
