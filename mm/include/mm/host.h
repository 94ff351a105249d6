// Host-only set-up of mm/'s platform (mm/host/platform.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mm::host {

struct HostMemory {
  uint64_t phys_base;   // "physical" address of the memfd's first byte
  uint64_t phys_size;
  uintptr_t heap_base;  // reserved heap window (kernel heap stand-in)
  size_t heap_size;
};

// Creates the host's "physical memory" (MM_HOST_MEMORY overrides phys_bytes,
// e.g. MM_HOST_MEMORY=64M) and heap window. Idempotent: the first call wins.
void init_memory(size_t phys_bytes = size_t{256} << 20, size_t heap_bytes = size_t{4} << 30);
const HostMemory& memory();

}  // namespace mm::host
