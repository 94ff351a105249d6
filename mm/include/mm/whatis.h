// SPDX-License-Identifier: Apache-2.0
// kmem_whatis: any kernel address to its owner, in constant time (apart
// from a buffer's magazine state, see below), like mdb's ::whatis.
//
//   mm::WhatIs w;
//   mm::kmem_whatis(p, w);
//   char line[160];
//   mm::kmem_whatis_format(w, line, sizeof line);
//   // "0x40a0c5c8 is 0x40a0c580+72, allocated from kmem_alloc_128
//   //  (slab 0x40a0c000, buffer 5 of 31)"
//
// Heap addresses are found through segkmem's page index (a slab buffer and
// its state, a large kmem_alloc, another heap page), kernel image sections
// and CPU stacks through the platform (plat::describe_region), other RAM
// through the page descriptors (page_alloc blocks, free and reserved
// frames). A buffer sitting in a per-CPU magazine or in the depot is free:
// to tell, kmem_whatis stops the other CPUs (plat::stop_others) and looks
// through every magazine of that cache; so it may not be called with
// interrupts masked, from an interrupt handler, or holding a lock.
#pragma once
#include <cstddef>
#include <cstdint>

struct kmem_cache;

namespace mm {

enum class WhatKind : uint8_t {
  kUnknown,       // nothing the kernel knows
  kBuffer,        // a buffer of a kmem cache
  kSlabOther,     // inside a slab, in no buffer (on-slab header, colour, tail)
  kLargeAlloc,    // a large kmem_alloc (above the size classes)
  kHeapPage,      // a mapped heap page owned by no cache or large allocation
  kPageBlock,     // an allocated page_alloc block (direct map)
  kFreePage,      // a free page frame (buddy lists or a per-CPU page cache)
  kReservedPage,  // a reserved page frame (firmware, DTB, page descriptors)
  kRegion,        // a kernel region: image section, CPU stack, boot page tables
};

enum class BufferState : uint8_t {
  kAllocated,
  kFreeInSlab,      // in the slab layer
  kFreeInMagazine,  // in a CPU's loaded or previous magazine (cpu)
  kFreeInDepot,     // in a full magazine in the cache's depot
};

struct WhatIs {
  uintptr_t addr = 0;
  WhatKind kind = WhatKind::kUnknown;
  uintptr_t start = 0;  // the buffer, allocation, block or region
  size_t size = 0;
  const char* name = "";  // cache or region name
  const kmem_cache* cache = nullptr;
  // kBuffer, kSlabOther
  BufferState state = BufferState::kAllocated;
  unsigned cpu = 0;               // kFreeInMagazine; kRegion when a CPU's stack
  uintptr_t slab = 0;             // the Slab (its header)
  uint32_t index = 0, count = 0;  // buffer index, buffers in the slab
  // kPageBlock, kFreePage
  unsigned order = 0;
};

// Fills w for addr; false when nothing owns it (w.kind == kUnknown).
bool kmem_whatis(const void* addr, WhatIs& w);
// One line describing w, without a newline; returns its length.
size_t kmem_whatis_format(const WhatIs& w, char* buf, size_t size);

}  // namespace mm
