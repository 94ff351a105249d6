// SPDX-License-Identifier: Apache-2.0
// The stale-free tests' arena (tests/host/test_kmem.cpp and
// test_allocinfo.cpp): it imports heap pages from kmem_default and never
// gives them back until the test does, so that a destroyed slab's page
// stays mapped (back in kmem_default, a flush of segkmem's release batch
// could unmap it, and a free into an unmapped page faults before any
// check, as any wild pointer's).
#pragma once
#include <mm/kmem.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include <cstring>
#include <utility>
#include <vector>

// Internal to each test file that includes it: vmem_alloc is a tagged
// macro, and a tag inside an inline function of external linkage would
// land in a COMDAT group, which the tags' section cannot mix with the
// file's other tags.
namespace {
struct StaleArena {
  static constexpr unsigned kMax = 64;
  static inline std::pair<void*, size_t> spans[kMax];
  static inline unsigned n;
  static void* import(vmem_t* src, size_t size, int flags) {
    if (n == kMax) return nullptr;
    void* p = vmem_alloc(src, size, flags);
    if (p) spans[n++] = {p, size};
    return p;
  }
  vmem_t* arena;
  std::vector<kmem_cache_t*> aside;
  StaleArena() {
    mm::kmem_init();
    n = 0;
    arena = vmem_create("t_stale", nullptr, 0, 4096, import, nullptr, mm::segkmem_default_arena(), 0, VM_SLEEP);
  }
  // A cache of size in the structure `at` was in. The host's structures
  // are page blocks of their own, which the page allocator may hand to a
  // later creation rather than the next one: caches are created until one
  // lands there (those that do not are set aside), null after 256 tries.
  kmem_cache_t* create_at(kmem_cache_t* at, const char* name, size_t size) {
    for (int i = 0; i < 256; i++) {
      kmem_cache_t* cp = kmem_cache_create(name, size, 0, nullptr, nullptr, nullptr, nullptr, arena, 0);
      if (cp == at || !cp) return cp;
      aside.push_back(cp);
    }
    return nullptr;
  }
  // The spans go back, and their addresses with them: a stale copy in
  // static memory would be a reference to whatever is there next.
  ~StaleArena() {
    for (kmem_cache_t* cp : aside) kmem_cache_destroy(cp);
    if (arena && vmem_destroy(arena))
      for (unsigned i = 0; i < n; i++) vmem_free(mm::segkmem_default_arena(), spans[i].first, spans[i].second);
    std::memset(static_cast<void*>(spans), 0, sizeof spans);
    n = 0;
  }
};
}  // namespace
