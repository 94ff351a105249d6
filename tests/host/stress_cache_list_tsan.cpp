// SPDX-License-Identifier: Apache-2.0
// The cache list under ThreadSanitizer: for a given time (default 10 s),
// threads create and destroy caches (with constructors, destructors and
// reclaim callbacks), walk the list reading every cache's statistics, reap
// (working set, full, the consolidator) and allocate and free, all at once.
// Exits 0 when TSan saw no race, every object came back intact, every
// walked cache was whole and kmem reported no error.
//
//   stress_cache_list_tsan [SECONDS]
#include <mm/kmem.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {
std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_errors{0}, g_bad{0}, g_creates{0}, g_walked{0}, g_reaps{0}, g_reclaims{0}, g_allocs{0};
kmem_cache_t* g_stable;

constexpr uint32_t kMagic = 0x5eedf00d;
int ctor(void* buf, void*, int) {
  static_cast<uint32_t*>(buf)[0] = kMagic;
  return 0;
}
void dtor(void* buf, void*) {
  if (static_cast<uint32_t*>(buf)[0] != kMagic) g_bad.fetch_add(1);
}
void reclaim(void*) { g_reclaims.fetch_add(1, std::memory_order_relaxed); }

// Creates, uses and destroys short-lived caches.
void creator(int id) {
  std::mt19937 rng(77 + id);
  while (!g_stop.load(std::memory_order_relaxed)) {
    char name[32];
    std::snprintf(name, sizeof name, "tmp_%d_%llu", id, static_cast<unsigned long long>(g_creates.load()));
    size_t size = 16 + rng() % 6000;
    kmem_cache_t* cp = kmem_cache_create(name, size, 0, ctor, dtor, reclaim, nullptr, nullptr, 0);
    if (!cp) {
      g_bad.fetch_add(1);
      return;
    }
    g_creates.fetch_add(1, std::memory_order_relaxed);
    std::vector<void*> v;
    for (unsigned i = 0, n = rng() % 200; i < n; i++) {
      auto* p = static_cast<uint32_t*>(kmem_cache_alloc(cp, KM_SLEEP));
      if (p[0] != kMagic) g_bad.fetch_add(1);
      v.push_back(p);
    }
    for (void* p : v) kmem_cache_free(cp, p);
    if (!kmem_cache_destroy(cp)) g_bad.fetch_add(1);
  }
}

// Caches whose reclaim callback destroys them (a reaper runs it, holding a
// reference: the cache goes when the reaper lets go).
struct SelfDestruct {
  kmem_cache_t* cp;
  std::atomic<bool> unused{false};  // its creator is done with it: it may go
  std::atomic<bool> destroyed{false};
};
std::atomic<uint64_t> g_self_destroyed{0};
void destroy_self(void* priv) {
  auto* s = static_cast<SelfDestruct*>(priv);
  if (s->unused.load(std::memory_order_acquire) && !s->destroyed.load(std::memory_order_acquire)) {
    if (!kmem_cache_destroy(s->cp)) g_bad.fetch_add(1);
    s->destroyed.store(true, std::memory_order_release);
    g_self_destroyed.fetch_add(1, std::memory_order_relaxed);
  }
}
void self_destroyer() {
  while (!g_stop.load(std::memory_order_relaxed)) {
    auto* s = new SelfDestruct;
    s->cp = kmem_cache_create("selfdestruct", 96, 0, nullptr, nullptr, destroy_self, s, nullptr, 0);
    void* p = kmem_cache_alloc(s->cp, KM_SLEEP);
    kmem_cache_free(s->cp, p);
    s->unused.store(true, std::memory_order_release);
    while (!s->destroyed.load(std::memory_order_acquire) && !g_stop.load(std::memory_order_relaxed))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!s->destroyed.load(std::memory_order_acquire)) return;  // leaks s at the end: the reaper may still call it
    delete s;
  }
}

void walker() {
  while (!g_stop.load(std::memory_order_relaxed)) {
    mm::kmem_cache_walk(
        [](const kmem_cache_t* cp, void*) {
          mm::KmemCacheStats s;
          mm::kmem_cache_stats(cp, s);
          if (!s.name[0] || s.bufsize == 0 || s.chunksize < s.bufsize) g_bad.fetch_add(1);
          g_walked.fetch_add(1, std::memory_order_relaxed);
        },
        nullptr);
  }
}

void reaper() {
  for (unsigned i = 0; !g_stop.load(std::memory_order_relaxed); i++) {
    mm::kmem_reap(i % 3 == 0);
    if (i % 5 == 0) mm::kmem_move_pass();
    g_reaps.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void allocator(int id) {
  std::mt19937 rng(5 + id);
  std::vector<std::pair<uint8_t*, size_t>> live;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (live.size() < 300 && rng() % 2) {
      size_t size = rng() % 2 ? 0 : 1 + rng() % 5000;
      auto* p = static_cast<uint8_t*>(size ? kmem_alloc(size, KM_SLEEP) : kmem_cache_alloc(g_stable, KM_SLEEP));
      size_t n = size ? size : 128;
      std::memset(p, static_cast<int>(n & 0xff), n);
      live.emplace_back(p, size);
      g_allocs.fetch_add(1, std::memory_order_relaxed);
    } else if (!live.empty()) {
      auto [p, size] = live.back();
      live.pop_back();
      size_t n = size ? size : 128;
      for (size_t i = 0; i < n; i += 31)
        if (p[i] != static_cast<uint8_t>(n & 0xff)) g_bad.fetch_add(1);
      if (size) kmem_free(p, size);
      else kmem_cache_free(g_stable, p);
    }
  }
  for (auto [p, size] : live) {
    if (size) kmem_free(p, size);
    else kmem_cache_free(g_stable, p);
  }
}
}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  if (argc > 2 || (argc == 2 && (seconds = std::strtod(argv[1], nullptr)) <= 0)) {
    std::fprintf(stderr, "usage: stress_cache_list_tsan [SECONDS > 0]\n");
    return 2;
  }
  mm::set_error_hook([](const mm::MemError& e) {
    std::fprintf(stderr, "kmem error: %s in %s at %p\n", e.kind, e.where, reinterpret_cast<void*>(e.address));
    g_errors.fetch_add(1);
  });
  g_stable = kmem_cache_create("stable_128", 128, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  std::vector<std::thread> ts;
  ts.emplace_back(creator, 0);
  ts.emplace_back(creator, 1);
  ts.emplace_back(walker);
  ts.emplace_back(reaper);
  ts.emplace_back(allocator, 0);
  ts.emplace_back(allocator, 1);
  ts.emplace_back(self_destroyer);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  g_stop = true;
  for (auto& t : ts) t.join();
  bool destroyed = kmem_cache_destroy(g_stable);
  std::printf(
      "%.0f s: %llu caches created and destroyed, %llu caches walked, %llu reaps, %llu reclaim callbacks, "
      "%llu allocations, %llu caches destroyed by their own reclaim callback; %llu bad, %llu kmem errors, "
      "destroy %s\n",
      seconds, static_cast<unsigned long long>(g_creates.load()), static_cast<unsigned long long>(g_walked.load()),
      static_cast<unsigned long long>(g_reaps.load()), static_cast<unsigned long long>(g_reclaims.load()),
      static_cast<unsigned long long>(g_allocs.load()), static_cast<unsigned long long>(g_self_destroyed.load()),
      static_cast<unsigned long long>(g_bad.load()), static_cast<unsigned long long>(g_errors.load()),
      destroyed ? "ok" : "refused");
  bool ok = g_bad.load() == 0 && g_errors.load() == 0 && destroyed && g_creates.load() > 0 && g_walked.load() > 0 &&
            g_reaps.load() > 0 && g_self_destroyed.load() > 0;
  return ok ? 0 : 1;
}
