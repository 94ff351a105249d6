// kmemleak's per-object metadata, kept by the allocators (internal to mm/).
//
// 1. Slab buffers: while kmemleak is on, every slab of a tracked cache has a
//    LeakSlab (Slab::leak), allocated with the slab from the internal ladder:
//    one LeakMeta per buffer and three bitmaps the scanner owns. Switching
//    kmemleak off frees them all; switching it on gives every existing slab
//    a zeroed one (buffers allocated before: no age, no backtrace).
// 2. Large kmem_alloc allocations (5 pages or more): the same four words in
//    the `count` fields of their 2nd to 5th page descriptors (segkmem.h:
//    segkmem_large_leak_words), which nothing else uses, so they exist
//    whether kmemleak is on or not.
// 3. An allocation with kmemleak on writes its LeakMeta whole (two 8-byte
//    stores for slab buffers): ticks, CPU, no flags, the stack handle and a
//    zero checksum. Only the allocating CPU writes it while the buffer is
//    allocated, and the scanner reads it with every other CPU stopped.
//    Annotations (kmemleak_not_leak ...) set flags; the scanner sets the
//    per-scan flags and the checksum.
#pragma once
#include <cstdint>

namespace mm {

enum LeakFlags : uint8_t {
  kLeakNotLeak = 1 << 0,    // min_count 0: never reported, scanned as a root
  kLeakIgnore = 1 << 1,     // min_count -1: never reported, never scanned
  kLeakNoScan = 1 << 2,     // reportable, contents not scanned
  kLeakAreas = 1 << 3,      // only its registered scan areas are scanned
  kLeakCandidate = 1 << 4,  // unreferenced at the last scan, crc taken then
  kLeakReported = 1 << 5,   // reported as a leak (stays until freed or cleared)
  kLeakUnref = 1 << 6,      // unreferenced at the last scan
  kLeakInternal = 1 << 7,   // the allocators' own (large internal allocations): never an object
};

struct LeakMeta {
  uint32_t ticks;   // plat::ticks() + 1 at allocation; 0: allocated before kmemleak was on
  uint8_t cpu;
  uint8_t flags;    // LeakFlags
  uint16_t spare;
  uint32_t stack;   // stack depot handle, 0: none
  uint32_t crc;     // crc32_le(0, obj, size) when it was last found unreferenced
};
static_assert(sizeof(LeakMeta) == 16);

// A tracked slab's metadata: bitmaps of `words` 64-bit words each (one bit
// per buffer), then one LeakMeta per buffer.
struct LeakSlab {
  uint32_t words;
  uint32_t chunks;
  uint64_t* reached;   // the scan found a reference (or it is a root)
  uint64_t* scanned;   // the scan read its contents
  uint64_t* magfree;   // free in a magazine or the depot at this scan
  LeakMeta* meta;
};

inline bool leak_bit(const uint64_t* map, uint32_t i) { return map[i / 64] >> (i % 64) & 1; }
inline void leak_set(uint64_t* map, uint32_t i) { map[i / 64] |= uint64_t{1} << (i % 64); }

}  // namespace mm
