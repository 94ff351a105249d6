// SPDX-License-Identifier: Apache-2.0
// Links the host libraries the way a user's program would (README: "A host
// program can use it like libumem"), for the cross-compiled library presets
// (host-aarch64, host-riscv64). Built, never run there: it catches a symbol
// the libraries need from elsewhere (libatomic for a sub-word atomic on
// RISC-V, for one), which building the static libraries alone would not.
#include <mm/kmem.h>
#include <trace/reader.h>

#include <vector>

int main() {
  kmem_cache_t* cp = kmem_cache_create("link_check", 48, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp) return 1;
  void* p = kmem_cache_alloc(cp, KM_SLEEP);
  kmem_cache_free(cp, p);
  void* q = kmem_alloc(100, KM_SLEEP);
  kmem_free(q, 100);
  std::vector<kmemtrace::Event> events;  // the reader, from trace
  kmemtrace::merge_by_sequence(events);
  return kmem_cache_destroy(cp) ? 0 : 1;
}
