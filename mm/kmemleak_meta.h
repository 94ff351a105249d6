// SPDX-License-Identifier: Apache-2.0
// kmemleak's per-object metadata, kept by the allocators (internal to mm/).
//
// 1. Slab buffers: every slab of a tracked cache has a LeakSlab (Slab::leak)
//    while kmemleak is on, allocated with the slab from the internal ladder:
//    one LeakMeta per buffer and three bitmaps the scanner owns. Switching
//    on gives every existing slab one (leak_records_fill), however many
//    there are; a slab that cannot have one (memory short) is scanned as a
//    root and its buffers counted as untracked, never reported. Switching
//    off keeps them (they are reused at the next switch-on, and go with
//    their slab).
// 2. Large kmem_alloc allocations (5 pages or more): the same four words in
//    the `count` fields of their 2nd to 5th page descriptors (segkmem.h:
//    segkmem_large_leak_words), which nothing else uses, so they exist
//    whether kmemleak is on or not, and are zeroed when the pages are freed.
// 3. Stamps. An allocation with kmemleak on writes its LeakMeta whole (two
//    8-byte stores for slab buffers): ticks, CPU, no flags, the size asked
//    for, the stack handle and a zero checksum. Only the allocating CPU
//    writes it while the buffer is allocated, and the scanner reads it with
//    every other CPU stopped. So a record is exact while kmemleak is on; a
//    buffer freed and allocated again while it is off keeps the record of its
//    previous owner, and switching on zeroes every record's stamp and scan
//    state (objects allocated before: no age, no backtrace).
// 4. Annotations. not_leak, ignore, no_scan and scan areas (kLeakKept) are
//    decisions about one object, kept across switches: written into its
//    record under its slab's lock (a slab without records gets them on
//    demand, kmemleak on or off), and they must leave with the object. A
//    slab with any annotated buffer (LeakSlab::kept) is diverted: the free
//    fast path's owner check fails for every buffer of it (the header's
//    check word, and the owner id bytes of an off-slab cache's pages), so
//    its frees go out of line (kmem.cpp, free_bad_owner), where the freed
//    buffer's record is cleared before the buffer can be handed out again;
//    the slab is restored when its last annotated buffer goes. No other
//    free pays anything.
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
// The annotations: what an object keeps across switches (4.).
constexpr uint8_t kLeakKept = kLeakNotLeak | kLeakIgnore | kLeakNoScan | kLeakAreas;
// What a scan decides (cleared at switch-on).
constexpr uint8_t kLeakScanState = kLeakCandidate | kLeakReported | kLeakUnref;

struct LeakMeta {
  uint32_t ticks;  // plat::ticks() + 1 at allocation; 0: allocated before kmemleak was on
  uint8_t cpu;
  uint8_t flags;   // LeakFlags
  uint16_t size;   // bytes asked for (kmem_alloc); 0: the buffer's size
  uint32_t stack;  // stack depot handle, 0: none
  uint32_t crc;    // crc32_le(0, obj, size) when it was last found unreferenced
};
static_assert(sizeof(LeakMeta) == 16);

// A tracked slab's metadata: bitmaps of `words` 64-bit words each (one bit
// per buffer), then one LeakMeta per buffer.
struct LeakSlab {
  uint32_t words;
  uint32_t chunks;
  uint32_t kept;      // buffers with kLeakKept flags (under the cache's slab_lock): the slab is diverted while > 0
  LeakSlab* next;     // while not yet attached to a slab (kmem_slab.cpp, leak_records_attach)
  uint64_t* reached;  // the scan found a reference (or it is a root)
  uint64_t* scanned;  // the scan read its contents
  uint64_t* magfree;  // free in a magazine or the depot at this scan
  LeakMeta* meta;
};

inline bool leak_bit(const uint64_t* map, uint32_t i) { return map[i / 64] >> (i % 64) & 1; }
inline void leak_set(uint64_t* map, uint32_t i) { map[i / 64] |= uint64_t{1} << (i % 64); }

}  // namespace mm
