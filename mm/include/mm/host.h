// SPDX-License-Identifier: Apache-2.0
// Host-only set-up of mm/'s platform (mm/host/platform.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mm::host {

struct HostMemory {
  uint64_t phys_base;  // "physical" address of the memfd's first byte
  uint64_t phys_size;
  uintptr_t heap_base;  // reserved heap window (kernel heap stand-in)
  size_t heap_size;
};

// Creates the host's "physical memory" (MM_HOST_MEMORY overrides phys_bytes,
// e.g. MM_HOST_MEMORY=64M) and heap window. Idempotent: the first call wins.
void init_memory(size_t phys_bytes = size_t{256} << 20, size_t heap_bytes = size_t{4} << 30);
const HostMemory& memory();

// The page allocator over that memory (init_memory, then page_init), once,
// whichever call into the library comes first: kmem_init's (segkmem), or
// vmem_create's (an arena's boundary tags are pages: mm/vmem.cpp, The tag
// pool).
// Idempotent and thread-safe: a second caller returns once it is up.
void init_page_allocator();

// The signal plat::stop_others sends to stop the other threads (see
// mm/host/platform.cpp): SIGUSR2 by default, or MM_HOST_STOP_SIGNAL (a
// number, or a name such as USR1, SIGUSR2, RTMIN+3, SIGRTMAX-2) when set at
// the first stop. A program that uses SIGUSR2 itself picks another here or
// there. The handler is installed at the next stop, and the previous one's
// restored. False (nothing changed) for a signal that cannot be used:
// SIGKILL, SIGSTOP, the synchronous ones, SIGCHLD, SIGCONT, glibc's own.
bool set_stop_signal(int sig);
int stop_signal();  // the signal the next stop sends

}  // namespace mm::host
