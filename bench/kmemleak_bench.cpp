// SPDX-License-Identifier: Apache-2.0
// kmemleak on the host: how fast a scan reads memory, and what kmemleak
// adds to a kmem_cache alloc+free pair.
//
//   kmemleak_bench [--objects N] [--reps N]
//
// scan: N objects of 800 bytes (100 words) chained through their first
// word from a registered root, the other 99 words small numbers: a pointer
// density of 1%. Every scan reads them all; the figure is the whole scan
// (stop, stacks, marking, the per-object passes) over the bytes it read,
// best of --reps.
// pairs: ns per kmem_cache_alloc + kmem_cache_free of 64 bytes with
// kmemleak off, on without backtraces, and on with them. For instructions,
// run it under callgrind (bench/README in tools/bench-host's output).
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
void* g_root;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

__attribute__((noinline)) void pairs(kmem_cache_t* cp, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    void* p = kmem_cache_alloc(cp, KM_SLEEP);
    asm volatile("" ::"r"(p) : "memory");
    kmem_cache_free(cp, p);
  }
}

double ns_per_pair(kmem_cache_t* cp, int reps) {
  constexpr unsigned kPairs = 1000000;
  pairs(cp, 10000);
  double best = 1e9;
  for (int r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    pairs(cp, kPairs);
    double s = seconds_since(t0);
    if (s < best) best = s;
  }
  return best * 1e9 / kPairs;
}

bool parse(const char* s, long& out) {
  char* end;
  out = std::strtol(s, &end, 10);
  return *s && !*end && out > 0;
}
}  // namespace

int main(int argc, char** argv) {
  long objects = 20000, reps = 5;
  for (int i = 1; i < argc; i++) {
    long* into = !std::strcmp(argv[i], "--objects") ? &objects : !std::strcmp(argv[i], "--reps") ? &reps : nullptr;
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::printf("usage: kmemleak_bench [--objects N] [--reps N]\n");
      return 0;
    }
    if (!into) {
      std::fprintf(stderr, "kmemleak_bench: unknown argument '%s' (usage: kmemleak_bench [--objects N] [--reps N])\n",
                   argv[i]);
      return 2;
    }
    if (i + 1 >= argc || !parse(argv[i + 1], *into)) {
      std::fprintf(stderr, "kmemleak_bench: %s takes a positive number, not '%s'\n", argv[i],
                   i + 1 < argc ? argv[i + 1] : "");
      return 2;
    }
    i++;
  }
  kmem_cache_t* small = kmem_cache_create("bench_pairs", 64, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  double off = ns_per_pair(small, static_cast<int>(reps));
  kmemleak_enable(true);
  mm::kmemleak_set_backtraces(false);
  double on = ns_per_pair(small, static_cast<int>(reps));
  mm::kmemleak_set_backtraces(true);
  double bt = ns_per_pair(small, static_cast<int>(reps));
  std::printf("pairs: %.1f ns off, %.1f ns on without backtraces, %.1f ns with them\n", off, on, bt);

  kmem_cache_t* cp = kmem_cache_create("bench_scan", 800, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  kmemleak_set_min_age_ms(0);
  void** prev = nullptr;
  for (long i = 0; i < objects; i++) {
    auto** o = static_cast<void**>(kmem_cache_alloc(cp, KM_SLEEP));
    for (uintptr_t w = 1; w < 100; w++) o[w] = reinterpret_cast<void*>(w * 3);  // data: small numbers
    o[0] = nullptr;
    if (prev) prev[0] = o;
    else g_root = o;
    prev = o;
  }
  kmemleak_add_root(&g_root, sizeof g_root);
  kmemleak_scan();  // settles
  double best = 1e9;
  uint64_t bytes = 0;
  for (long r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = kmemleak_scan();
    double s = seconds_since(t0);
    mm::LeakScanStats st;
    mm::kmemleak_last_scan(st);
    if (n) std::fprintf(stderr, "kmemleak_bench: %zu reports: the chain should all be referenced\n", n);
    if (s < best) {
      best = s;
      bytes = st.bytes_scanned;
    }
  }
  std::printf("scan: %ld objects of 800 bytes at 1%% pointer density, %llu bytes scanned in %.3f ms: %.2f GB/s\n",
              objects, static_cast<unsigned long long>(bytes), best * 1e3, bytes / best / 1e9);
  return 0;
}
