// SPDX-License-Identifier: Apache-2.0
// Multi-threaded stress of kmem under ThreadSanitizer: threads allocate from
// shared caches and kmem_alloc, hand objects to each other through
// lock-protected mailboxes, and free what other threads allocated. Exits 0
// when every object came back intact and kmem reported no error.
#include <mm/kmem.h>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {
constexpr int kThreads = 4;
constexpr int kOps = 40000;

struct Obj {
  uint32_t owner_tag;
  uint32_t size;
  uint8_t fill;
};

struct Mailbox {
  std::mutex m;
  std::vector<Obj*> items;
};
Mailbox g_boxes[kThreads];
std::atomic<int> g_bad{0};
std::atomic<uint64_t> g_errors{0};
kmem_cache_t* g_cache;

void check_and_free(Obj* o) {
  auto* bytes = reinterpret_cast<uint8_t*>(o);
  for (uint32_t i = sizeof(Obj); i < o->size; i += 13)
    if (bytes[i] != o->fill) g_bad.fetch_add(1);
  if (o->owner_tag == 0xCAC4E) kmem_cache_free(g_cache, o);
  else kmem_free(o, o->size);
}

void worker(int id) {
  std::mt19937 rng(1000 + id);
  for (int op = 0; op < kOps; op++) {
    int r = rng() % 10;
    if (r < 5) {
      bool from_cache = rng() % 2;
      uint32_t size = from_cache ? 200 : 16 + rng() % 3000;
      auto* o = static_cast<Obj*>(from_cache ? kmem_cache_alloc(g_cache, KM_SLEEP) : kmem_alloc(size, KM_SLEEP));
      o->owner_tag = from_cache ? 0xCAC4E : 0xA110C;
      o->size = size;
      o->fill = static_cast<uint8_t>(rng());
      std::memset(reinterpret_cast<uint8_t*>(o) + sizeof(Obj), o->fill, size - sizeof(Obj));
      Mailbox& box = g_boxes[(id + 1 + rng() % (kThreads - 1)) % kThreads];
      std::lock_guard<std::mutex> g(box.m);
      box.items.push_back(o);
    } else {
      std::vector<Obj*> mine;
      {
        std::lock_guard<std::mutex> g(g_boxes[id].m);
        mine.swap(g_boxes[id].items);
      }
      for (Obj* o : mine) check_and_free(o);
    }
  }
}
}  // namespace

int main() {
  mm::set_error_hook([](const mm::MemError& e) {
    std::fprintf(stderr, "kmem error: %s in %s at %p\n", e.kind, e.where, reinterpret_cast<void*>(e.address));
    g_errors.fetch_add(1);
  });
  g_cache = kmem_cache_create("stress_200", 200, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; i++) ts.emplace_back(worker, i);
  for (auto& t : ts) t.join();
  for (auto& b : g_boxes)
    for (Obj* o : b.items) check_and_free(o);
  bool destroyed = kmem_cache_destroy(g_cache);
  std::printf("%d threads x %d ops: %d corrupted objects, %llu kmem errors, destroy %s\n", kThreads, kOps, g_bad.load(),
              static_cast<unsigned long long>(g_errors.load()), destroyed ? "ok" : "refused");
  return g_bad.load() == 0 && g_errors.load() == 0 && destroyed ? 0 : 1;
}
