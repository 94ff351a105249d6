// SPDX-License-Identifier: Apache-2.0
// One CPU's ring of kmemtrace events: a byte stream in the ABI format
// (trace/abi.h) written by its CPU and read by a dumper on any CPU.
//
// 1. Memory comes from the caller (the kernel sizes it by a bootarg and
//    allocates it at boot). capacity is a power of two; the ring also needs
//    kSlack bytes past it (bytes_for(capacity) in all).
// 2. Layout. head_ (bytes committed) and tail_ (bytes consumed) are 32-bit
//    counters that run freely and wrap; head_ - tail_ <= capacity. An event
//    that starts at counter value p lies whole at buf + (p & mask): one
//    that would cross the end runs on into the slack instead of wrapping,
//    and the next event starts where the wrapped counter says (the start
//    of the buffer's bytes that the crossing event "owns" stay unused this
//    lap). So the producer writes with plain contiguous stores and no wrap
//    test, and readers see every event contiguous; they walk the stream
//    event by event (sizes from the event headers). Events are at most
//    kSlack bytes. The stream offset of an event (what frames carry) is the
//    64-bit consumed_ plus its distance from tail_; only the consumer keeps
//    consumed_.
// 3. Producer (put_*): exactly one writer at a time, the owning CPU with its
//    interrupts masked (kmemtrace::record_* mask them; a ring used by a
//    host thread needs nothing). Not re-entrant: an interrupt must not
//    record into the ring it interrupted while put_* runs. (The kernel's
//    restartable ring write, trace/record.h, Restartable, is the other
//    producer: an interrupt may record into the ring it interrupted, because
//    the write it interrupted is rewound and redone after it.) It writes the
//    event into free space, then publishes it by storing head_ with release,
//    so a reader that loads head_ with acquire sees whole events only (never
//    a torn one). Free space is checked against limit_, the producer's own
//    copy of tail_ + capacity, refreshed (an acquire load of tail_) only when
//    the event does not fit under it. A full ring drops the new event and
//    adds its size to overrun_bytes_ (the ABI's total_overruns) and one to
//    dropped_. Counters are word-sized and updated by load+store (one
//    writer): no read-modify-write atomics, nothing 64-bit, so nothing needs
//    libatomic on 32-bit ARM or sub-word atomics on RISC-V. On 32-bit
//    targets the counters wrap at 2^32.
// 4. Consumer (peek/consume/read/stats): one at a time (kmemtrace.cpp holds
//    its reader lock), from any CPU, concurrently with the producer. peek()
//    loads head_ with acquire and returns [tail_, head_): committed events,
//    never overwritten until consume() moves tail_ past them (release, so
//    the producer's acquire load of tail_ orders its new writes after our
//    reads). consume() only ever moves by whole events.
// 5. The orderings. All of them (QEMU on x86 never reorders, so each is
//    argued here and checked by tests/host/stress_trace_tsan.cpp, where
//    weakening any one makes ThreadSanitizer report a race):
//      head_  producer's release store (put*) -> consumer's acquire load
//             (peek): the event bytes written before it;
//      tail_  consumer's release store (consume) -> producer's acquire load
//             (make_room): the consumer's reads of the bytes it gave back
//             come before the producer's writes over them;
//      the rest (buf_, mask_, cap_, limit_, consumed_): written by init()
//             with nobody producing or consuming. Consumers see it through
//             the reader lock that init's callers hold; producers through
//             whatever made them start recording after it (kmemtrace.h,
//             "Set-up"), not through head_;
//      overrun_bytes_, dropped_: relaxed counters with one writer; a reader
//             gets some recent value (exact once the producer is quiescent,
//             which the kernel makes sure of with a cross-call).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <trace/abi.h>

namespace kmemtrace {

class Ring {
 public:
  static constexpr size_t kSlack = 256;  // also the largest event
  static constexpr size_t kMinCapacity = 256;
  static constexpr size_t kMaxCapacity = size_t{1} << 30;
  static_assert(kSlack >= kAllocSize && kSlack % 8 == 0);

  // Bytes of memory a ring of `capacity` (a power of two) needs.
  static constexpr size_t bytes_for(size_t capacity) { return capacity + kSlack; }

  constexpr Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Gives the ring mem[0, bytes) (aligned up to 8): capacity becomes the
  // largest power of two with bytes_for(capacity) fitting, at most
  // kMaxCapacity. Resets the stream to offset 0 and the counters. False if
  // fewer than bytes_for(kMinCapacity) bytes: the ring then has no memory
  // and drops (counts) every event. Only while nobody produces or consumes.
  bool init(void* mem, size_t bytes);

  size_t capacity() const { return cap_; }

  // --- Producer -----------------------------------------------------------
  // The first 4 bytes of an event (event id, type id, size) as a native
  // 32-bit word: callers pass it precomputed (a constant at most call
  // sites), which saves the recording path the shifting.
  static constexpr uint32_t tag(uint8_t id, uint8_t type, size_t size) {
    if constexpr (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
      return uint32_t{id} | uint32_t{type} << 8 | static_cast<uint32_t>(size) << 16;
    else return uint32_t{id} << 24 | uint32_t{type} << 16 | static_cast<uint32_t>(size);
  }
  static constexpr uint32_t alloc_tag(uint8_t type) { return tag(kEventAlloc, type, kAllocSize); }
  static constexpr uint32_t free_tag(uint8_t type) { return tag(kEventFree, type, kFreeSize); }

  // Each returns false if the event was dropped (ring full). tag:
  // alloc_tag(type) / free_tag(type).
  __attribute__((always_inline)) inline bool put_alloc(uint32_t tag, uint32_t seq, uintptr_t caller, uintptr_t ptr,
                                                       size_t requested, size_t allocated, uint32_t flags,
                                                       int32_t target_cpu) {
    uint32_t h = head_.load(std::memory_order_relaxed);  // our own store: no ordering needed
    uint8_t* p = buf_ + (h & mask_);
    uint32_t end = h + static_cast<uint32_t>(kAllocSize);
    if (__builtin_expect((limit_ - end) >> 31, 0) && !make_room(end, kAllocSize)) return false;
    // Into space the consumer gave back (make_room's acquire) or never used.
    store32(p, tag);
    store32(p + kOffSeq, seq);
    store64(p + kOffCaller, caller);
    store64(p + kOffPtr, ptr);
    store64(p + kOffRequested, requested);
    store64(p + kOffAllocated, allocated);
    store32(p + kOffFlags, flags);
    store32(p + kOffTargetCpu, static_cast<uint32_t>(target_cpu));
    // Release: publishes the stores above; peek()'s acquire load pairs.
    head_.store(end, std::memory_order_release);
    return true;
  }

  __attribute__((always_inline)) inline bool put_free(uint32_t tag, uint32_t seq, uintptr_t caller, uintptr_t ptr) {
    uint32_t h = head_.load(std::memory_order_relaxed);  // our own store: no ordering needed
    uint8_t* p = buf_ + (h & mask_);
    uint32_t end = h + static_cast<uint32_t>(kFreeSize);
    if (__builtin_expect((limit_ - end) >> 31, 0) && !make_room(end, kFreeSize)) return false;
    store32(p, tag);
    store32(p + kOffSeq, seq);
    store64(p + kOffCaller, caller);
    store64(p + kOffPtr, ptr);
    // Release: publishes the stores above; peek()'s acquire load pairs.
    head_.store(end, std::memory_order_release);
    return true;
  }

  // Where the producer's fields are, for the restartable ring write
  // (trace/record.h): head_ and limit_ side by side at 0 and 4 (one pair
  // load), then buf_ and mask_ (another).
  static constexpr size_t kOffHead = 0;
  static constexpr size_t kOffLimit = 4;
  static constexpr size_t kOffBuf = 8;
  static constexpr size_t kOffMask = 8 + sizeof(void*);

  // Any pre-encoded event (features included): n bytes (at most kSlack),
  // its size field equal to n. Keep n a multiple of 8 (pad with zeros, see
  // abi.h) so that later events stay aligned.
  bool put(const void* event, size_t n);

  // --- Consumer -----------------------------------------------------------
  // The committed, unconsumed events: positions 0 .. size() from tail_.
  struct Committed {
    const uint8_t* buf;
    uint32_t mask;
    uint32_t tail;    // counter value of position 0
    uint32_t bytes;   // committed bytes past tail
    uint64_t offset;  // stream offset of position 0
    size_t size() const { return bytes; }
    // The event that starts at position pos (contiguous, whole).
    const uint8_t* event(size_t pos) const { return buf + ((tail + pos) & mask); }
    // Its size from its header; 0 if damaged (below the header, past the
    // committed end or over kSlack).
    size_t event_size(size_t pos) const;
  };
  Committed peek() const;

  // Length of the whole events from position `from` that fit in max bytes;
  // *events (if given) gets their number. Stops at a damaged event.
  static size_t whole_events(const Committed& c, size_t from, size_t max, size_t* events = nullptr);

  // Drops the first n bytes of peek() (whole events; n = size() drops all,
  // damaged ones included).
  void consume(size_t n);

  // Copies whole events, at most max bytes, into out and consumes them.
  // Returns the bytes copied (0: nothing committed, or the next event is
  // larger than max). *offset (if given) gets their stream offset.
  size_t read(void* out, size_t max, uint64_t* offset = nullptr);

  struct Stats {
    uint64_t capacity;
    uint64_t committed;      // stream offset of the committed end
    uint64_t consumed;       // stream offset of the consumer
    uint64_t events;         // events committed (consumed ones included)
    uint64_t overrun_bytes;  // bytes of dropped events
    uint64_t dropped_events;
  };
  // From the consumer (it walks the unconsumed events to count them).
  Stats stats() const;

 private:
  // Events are 8-aligned (every put keeps head_ a multiple of 8 for the
  // fixed-size events), so fields are stored at their natural alignment.
  typedef uint64_t __attribute__((may_alias, aligned(8))) Word64;
  typedef uint32_t __attribute__((may_alias, aligned(4))) Word32;
  static void store64(uint8_t* p, uint64_t v) { *reinterpret_cast<Word64*>(p) = v; }
  static void store32(uint8_t* p, uint32_t v) { *reinterpret_cast<Word32*>(p) = v; }
  // Slow half of the space check: refreshes limit_ from tail_; counts an
  // overrun and returns false if the event (n bytes, ending at counter
  // value end) still does not fit.
  __attribute__((always_inline)) inline bool make_room(uint32_t end, size_t n) {
    // Acquire: pairs with consume()'s release store, so the consumer's
    // reads of the space it gave back are done before we write over it.
    limit_ = tail_.load(std::memory_order_acquire) + cap_;
    if (((limit_ - end) >> 31) == 0) return true;
    return drop(n);
  }
  __attribute__((always_inline)) inline bool drop(size_t n) {
    // One writer: load + store, relaxed (counters publish nothing else).
    overrun_bytes_.store(overrun_bytes_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }

  // Producer's line: set at init, written by the owning CPU. head_ first:
  // the ring's address is the address of the release store.
  std::atomic<uint32_t> head_{0};
  uint32_t limit_ = 0;  // producer's tail_ + cap_ (stale is safe: tail_ only grows)
  uint8_t* buf_ = nullptr;
  uintptr_t mask_ = 0;
  uint32_t cap_ = 0;  // 0: no memory (every event is an overrun)
  std::atomic<uintptr_t> overrun_bytes_{0};
  std::atomic<uintptr_t> dropped_{0};
  // Consumer's line.
  alignas(64) std::atomic<uint32_t> tail_{0};
  uint64_t consumed_ = 0;
  uint64_t consumed_events_ = 0;
};

}  // namespace kmemtrace
