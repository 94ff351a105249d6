// SPDX-License-Identifier: Apache-2.0
// The kmemtrace binary ABI: the byte layout of one allocation event, as
// shared/reference/kmemtrace-abi.txt defines it, plus Magpie's additions.
//
// 1. An event is a header (24 bytes) followed, for allocations, by 24 more
//    bytes, then optional feature records, all in the machine's own byte
//    order. Address fields are 8 bytes on every arch (a 32-bit kernel
//    zero-extends).
//
//      off size  field
//        0   1   event id     kEventAlloc / kEventFree / unknown (skip)
//        1   1   type id      kTypeKmalloc .. kTypeVmem / unknown (skip)
//        2   2   event size   whole event, features included; a reader
//                             skips bytes it does not know by this size
//        4   4   sequence     orders events across CPUs; wraps (Sequence numbers)
//        8   8   caller       return address into the caller of the API
//       16   8   pointer      the memory (or vmem span base); may be 0
//     alloc only:
//       24   8   requested bytes   (never 0)
//       32   8   allocated bytes   (>= requested)
//       40   4   flags             KM_* / VM_* / page allocator flags
//       44   4   target CPU        -1: same as the recording CPU
//     features (optional, after the mandatory fields, up to event size):
//        +0  2   feature size      whole record, header included (>= 3)
//        +2  1   feature id
//        +3  ..  feature data
//
// 2. Versions. Every new id bumps kAbiVersion (the ABI text's rule).
//      1  the reference text: events 0-1, types 0-2.
//      2  Magpie: type 3, kTypeVmem, vmem_alloc/vmem_xalloc spans
//         (requested = the size asked for, allocated = the span's size,
//         flags = VM_*).
//      3  Magpie: event 2, kEventClock (3), header only: type 0, caller =
//         the clock's frequency in Hz, pointer = the whole 64-bit clock
//         value whose low 32 bits are its sequence number.
//    No feature ids are defined yet; readers skip every feature record.
//    A version-3 reader reads version-2 streams (they lack only event 2).
//
// 3. Sequence numbers. Either one counter for all CPUs, taken by an atomic
//    add per event (no two events share a number; riscv64 where the time
//    CSR traps, sifive_u; the host), or the low 32 bits of a clock every
//    CPU reads alike (the ARM generic timer's virtual counter, read after
//    an isb: arm64, arm; the RISC-V time CSR, read after a fence r,i, where
//    the board's is the hardware's: QEMU virt), which needs no shared
//    write. Both rise along every chain of events one CPU hands
//    to another (a free, then the allocation of that buffer elsewhere), the
//    clock perhaps by 0: two CPUs' events may share a number (a tick:
//    16 ns at QEMU virt's 62.5 MHz, 52 ns on the Pi 3, 100 ns at riscv64
//    virt's 10 MHz), and a reader breaks
//    such ties by what the events do (a buffer is freed before it is
//    allocated again). The clock's low 32 bits wrap in a minute or so
//    (68 s at 62.5 MHz), so each CPU records a kEventClock with the whole
//    value when tracing starts and at least every 2^30 clock ticks while
//    it is on: a reader unwraps each CPU's numbers from its anchors, and
//    places every CPU on one time line. Without kEventClock events in a
//    stream, its numbers are the counter's.
// 4. Reader rules (what trace/host/reader.cpp does): unknown event ids and
//    types are skipped by their size; a size below the fields its event id
//    needs is damage (the stream cannot be trusted past it); bytes past the
//    known fields and features are ignored; a feature size below 3 ends the
//    feature list (writers may pad an event with zeros to a multiple of 8).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kmemtrace {

inline constexpr uint32_t kAbiVersion = 3;
inline constexpr uint32_t kOldestAbiVersion = 2;  // the oldest a reader reads

enum EventId : uint8_t {
  kEventAlloc = 0,
  kEventFree = 1,
  kEventClock = 2,  // ABI version 3: a CPU's clock anchor (3)
};
inline constexpr size_t kClockSize = 24;  // header only

enum TypeId : uint8_t {
  kTypeKmalloc = 0,  // kmem_alloc / kmem_free
  kTypeCache = 1,    // kmem_cache_alloc / kmem_cache_free
  kTypePages = 2,    // the page-frame allocator
  kTypeVmem = 3,     // vmem spans (ABI version 2)
};
inline constexpr unsigned kTypeCount = 4;

inline constexpr int32_t kSameCpu = -1;

// Field offsets and sizes.
inline constexpr size_t kOffEventId = 0;
inline constexpr size_t kOffTypeId = 1;
inline constexpr size_t kOffSize = 2;
inline constexpr size_t kOffSeq = 4;
inline constexpr size_t kOffCaller = 8;
inline constexpr size_t kOffPtr = 16;
inline constexpr size_t kOffRequested = 24;
inline constexpr size_t kOffAllocated = 32;
inline constexpr size_t kOffFlags = 40;
inline constexpr size_t kOffTargetCpu = 44;
inline constexpr size_t kHeaderSize = 24;
inline constexpr size_t kFreeSize = kHeaderSize;
inline constexpr size_t kAllocSize = 48;
inline constexpr size_t kFeatureHeaderSize = 3;
inline constexpr size_t kMaxEventSize = 0xffff;

// In-memory images of the fixed parts (native byte order). Every field sits
// at its natural alignment, so the structs have no padding on any arch.
struct EventHeader {
  uint8_t event_id;
  uint8_t type_id;
  uint16_t size;
  uint32_t seq;
  uint64_t caller;
  uint64_t ptr;
};
struct AllocEvent {
  EventHeader h;
  uint64_t requested;
  uint64_t allocated;
  uint32_t flags;
  int32_t target_cpu;
};
static_assert(sizeof(EventHeader) == kHeaderSize && alignof(EventHeader) == 8);
static_assert(sizeof(AllocEvent) == kAllocSize);
static_assert(__builtin_offsetof(EventHeader, seq) == kOffSeq && __builtin_offsetof(EventHeader, ptr) == kOffPtr);
static_assert(__builtin_offsetof(AllocEvent, flags) == kOffFlags &&
              __builtin_offsetof(AllocEvent, target_cpu) == kOffTargetCpu);

// Encoders: write one event at `out` (native byte order) and return its
// size. `out` needs kAllocSize / kFreeSize bytes; no alignment required.
inline size_t encode_alloc(void* out, uint8_t type, uint32_t seq, uint64_t caller, uint64_t ptr, uint64_t requested,
                           uint64_t allocated, uint32_t flags, int32_t target_cpu = kSameCpu) {
  AllocEvent e{{kEventAlloc, type, static_cast<uint16_t>(kAllocSize), seq, caller, ptr},
               requested,
               allocated,
               flags,
               target_cpu};
  __builtin_memcpy(out, &e, sizeof e);
  return sizeof e;
}

inline size_t encode_free(void* out, uint8_t type, uint32_t seq, uint64_t caller, uint64_t ptr) {
  EventHeader h{kEventFree, type, static_cast<uint16_t>(kFreeSize), seq, caller, ptr};
  __builtin_memcpy(out, &h, sizeof h);
  return sizeof h;
}

// Appends a feature record to the event at `event` (already encoded, its
// size field current) that has room for `capacity` bytes in all. Returns the
// event's new size, or 0 if it does not fit (the event is unchanged).
inline size_t append_feature(void* event, size_t capacity, uint8_t id, const void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(event);
  uint16_t size;
  __builtin_memcpy(&size, p + kOffSize, 2);
  size_t rec = kFeatureHeaderSize + n;
  if (rec > 0xffff || size + rec > capacity || size + rec > kMaxEventSize) return 0;
  uint16_t rec16 = static_cast<uint16_t>(rec);
  __builtin_memcpy(p + size, &rec16, 2);
  p[size + 2] = id;
  if (n) __builtin_memcpy(p + size + kFeatureHeaderSize, data, n);
  uint16_t new_size = static_cast<uint16_t>(size + rec);
  __builtin_memcpy(p + kOffSize, &new_size, 2);
  return new_size;
}

// Names for tools and logs.
inline const char* type_name(unsigned type) {
  switch (type) {
    case kTypeKmalloc: return "kmalloc";
    case kTypeCache: return "cache";
    case kTypePages: return "pages";
    case kTypeVmem: return "vmem";
    default: return "unknown";
  }
}

}  // namespace kmemtrace
