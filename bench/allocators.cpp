// SPDX-License-Identifier: Apache-2.0
// Loading the peer allocators and setting up ours (see allocators.h).
#include "allocators.h"

#include <dlfcn.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace bench {
namespace {

struct PeerLibrary {
  AllocatorId id;
  const char* soname;  // Debian 12's runtime library
  const char* package;
  void* (*malloc_fn)(size_t);
  void (*free_fn)(void*);
  std::string error;
};

// jemalloc first: it needs the most static TLS.
PeerLibrary g_peers[] = {
    {AllocatorId::kJemalloc, "libjemalloc.so.2", "libjemalloc-dev", nullptr, nullptr, {}},
    {AllocatorId::kTcmalloc, "libtcmalloc_minimal.so.4", "libgoogle-perftools-dev", nullptr, nullptr, {}},
    {AllocatorId::kMimalloc, "libmimalloc.so.2", "libmimalloc-dev", nullptr, nullptr, {}},
};
std::once_flag g_peers_once;

void load_peers() {
  for (PeerLibrary& lib : g_peers) {
    void* h = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      const char* err = dlerror();
      lib.error =
          std::string(err ? err : "dlopen failed") + " (Debian package " + lib.package + "; see tools/install-deps)";
      if (err && strstr(err, "static TLS")) lib.error += "; set GLIBC_TUNABLES=" + std::string(kStaticTlsTunable);
      continue;
    }
    lib.malloc_fn = reinterpret_cast<void* (*)(size_t)>(dlsym(h, "malloc"));
    lib.free_fn = reinterpret_cast<void (*)(void*)>(dlsym(h, "free"));
    if (!lib.malloc_fn || !lib.free_fn) {
      lib.error = std::string(lib.soname) + " has no malloc/free";
      lib.malloc_fn = nullptr;
      lib.free_fn = nullptr;
    }
  }
}

PeerLibrary* peer(AllocatorId id) {
  std::call_once(g_peers_once, load_peers);
  for (PeerLibrary& lib : g_peers)
    if (lib.id == id) return &lib;
  return nullptr;
}

}  // namespace

const char* allocator_name(AllocatorId id) {
  switch (id) {
    case AllocatorId::kKmemCache: return "kmem_cache";
    case AllocatorId::kKmemAlloc: return "kmem_alloc";
    case AllocatorId::kGlibc: return "glibc";
    case AllocatorId::kJemalloc: return "jemalloc";
    case AllocatorId::kTcmalloc: return "tcmalloc";
    case AllocatorId::kMimalloc: return "mimalloc";
  }
  return "?";
}

bool allocator_available(AllocatorId id, const char** why) {
  PeerLibrary* lib = peer(id);
  if (!lib || lib->malloc_fn) return true;
  if (why) *why = lib->error.c_str();
  return false;
}

void peer_functions(AllocatorId id, void* (**malloc_fn)(size_t), void (**free_fn)(void*)) {
  PeerLibrary* lib = peer(id);
  *malloc_fn = lib ? lib->malloc_fn : nullptr;
  *free_fn = lib ? lib->free_fn : nullptr;
}

kmem_cache_t* bench_cache(size_t size) {
  static kmem_cache_t* caches[sizeof(kSizes) / sizeof(kSizes[0])];
  static std::mutex lock;
  std::lock_guard guard(lock);
  for (unsigned i = 0; i < sizeof(kSizes) / sizeof(kSizes[0]); i++) {
    if (kSizes[i] != size) continue;
    if (!caches[i]) {
      char name[32];
      snprintf(name, sizeof name, "bench_%zu", size);
      caches[i] = kmem_cache_create(name, size, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    }
    if (!caches[i]) {
      fprintf(stderr, "bench: kmem_cache_create(bench_%zu) failed\n", size);
      abort();
    }
    return caches[i];
  }
  fprintf(stderr, "bench: no benchmark cache for size %zu\n", size);
  abort();
}

void ensure_static_tls(char** argv) {
  if (RUNNING_ON_VALGRIND) return;
  const char* current = getenv("GLIBC_TUNABLES");
  if (current && strstr(current, "optional_static_tls")) return;
  std::string value = current && *current ? std::string(current) + ":" + kStaticTlsTunable : kStaticTlsTunable;
  setenv("GLIBC_TUNABLES", value.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Not fatal: jemalloc will then say why it cannot load.
  fprintf(stderr, "bench: cannot re-execute with GLIBC_TUNABLES=%s: %s\n", value.c_str(), strerror(errno));
}

namespace {
// Arenas over integers well away from 0 (vmem returns 0 for failure).
constexpr uintptr_t kArenaBase = uintptr_t{1} << 32;

vmem_t* create_arena(const char* name, size_t bytes) {
  mm::kmem_init();  // vmem takes its boundary tags from the page allocator
  vmem_t* a = vmem_create(name, reinterpret_cast<void*>(kArenaBase), bytes, kVmemQuantum, nullptr, nullptr, nullptr, 0,
                          VM_SLEEP);
  if (!a) {
    fprintf(stderr, "bench: vmem_create(%s) failed\n", name);
    abort();
  }
  return a;
}
}  // namespace

vmem_t* make_fresh_arena(const char* name, size_t bytes) { return create_arena(name, bytes); }

vmem_t* make_fragmented_arena(const char* name, unsigned free_segments) {
  vmem_t* a = create_arena(name, kVmemArenaBytes);
  std::vector<void*> quanta(2 * size_t{free_segments} + 1);
  for (void*& q : quanta) {
    q = vmem_alloc(a, kVmemQuantum, VM_NOSLEEP);
    if (!q) {
      fprintf(stderr, "bench: vmem_alloc in %s failed while fragmenting\n", name);
      abort();
    }
  }
  for (size_t i = 1; i < quanta.size(); i += 2) vmem_free(a, quanta[i], kVmemQuantum);
  mm::VmemStats st;
  mm::vmem_stats(a, st);
  // The freed quanta plus the untouched rest of the arena.
  if (st.segs_free != free_segments + 1u) {
    fprintf(stderr, "bench: %s has %llu free segments, expected %u\n", name,
            static_cast<unsigned long long>(st.segs_free), free_segments + 1);
    abort();
  }
  return a;
}

}  // namespace bench
