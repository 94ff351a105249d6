// SPDX-License-Identifier: Apache-2.0
// Ring: set-up, the generic producer path and the consumer. Design and ordering rules: trace/include/trace/ring.h.
#include <trace/ring.h>

namespace kmemtrace {

bool Ring::init(void* mem, size_t bytes) {
  static_assert(offsetof(Ring, head_) == kOffHead && offsetof(Ring, limit_) == kOffLimit &&
                offsetof(Ring, buf_) == kOffBuf && offsetof(Ring, mask_) == kOffMask);
  static_assert(sizeof(head_) == 4 && sizeof(limit_) == 4 && sizeof(mask_) == sizeof(void*));
  uintptr_t p = reinterpret_cast<uintptr_t>(mem);
  uintptr_t aligned = (p + 7) & ~uintptr_t{7};
  size_t usable = mem && bytes >= aligned - p ? bytes - (aligned - p) : 0;
  size_t cap = 0;
  if (usable >= bytes_for(kMinCapacity)) {
    cap = kMinCapacity;
    while (cap < kMaxCapacity && bytes_for(cap * 2) <= usable) cap *= 2;
  }
  buf_ = cap ? reinterpret_cast<uint8_t*>(aligned) : nullptr;
  cap_ = static_cast<uint32_t>(cap);
  mask_ = cap ? cap - 1 : 0;
  tail_.store(0, std::memory_order_relaxed);
  limit_ = static_cast<uint32_t>(cap);
  overrun_bytes_.store(0, std::memory_order_relaxed);
  dropped_.store(0, std::memory_order_relaxed);
  consumed_ = 0;
  consumed_events_ = 0;
  // Relaxed like the rest: this store publishes nothing. Nobody produces or
  // consumes during init(); consumers see its stores through the reader lock
  // that init's callers hold, producers through what made them start
  // recording afterwards (kmemtrace.h, "Set-up"). (A producer's head_ load
  // is relaxed, so a release here would pair with nothing on that side.)
  head_.store(0, std::memory_order_relaxed);
  return cap != 0;
}

bool Ring::put(const void* event, size_t n) {
  uint32_t h = head_.load(std::memory_order_relaxed);
  if (n < kHeaderSize || n > kSlack) return drop(n);  // not an event this ring holds
  uint32_t end = h + static_cast<uint32_t>(n);
  if (((limit_ - end) >> 31) && !make_room(end, n)) return false;
  __builtin_memcpy(buf_ + (h & mask_), event, n);
  head_.store(end, std::memory_order_release);  // publishes the copy; peek()'s acquire pairs
  return true;
}

size_t Ring::Committed::event_size(size_t pos) const {
  if (pos + kHeaderSize > bytes) return 0;
  uint16_t s;
  __builtin_memcpy(&s, event(pos) + kOffSize, 2);
  if (s < kHeaderSize || s > kSlack || s > bytes - pos) return 0;
  return s;
}

Ring::Committed Ring::peek() const {
  Committed c;
  c.buf = buf_;
  c.mask = static_cast<uint32_t>(mask_);
  c.tail = tail_.load(std::memory_order_relaxed);  // ours: one consumer
  // Acquire: pairs with the producer's release store in put*(), so every
  // byte below the head we read is the event the producer wrote, whole.
  c.bytes = cap_ ? head_.load(std::memory_order_acquire) - c.tail : 0;
  c.offset = consumed_;
  return c;
}

size_t Ring::whole_events(const Committed& c, size_t from, size_t max, size_t* events) {
  size_t pos = from, count = 0;
  while (pos < c.size()) {
    size_t size = c.event_size(pos);
    if (size == 0 || pos - from + size > max) break;
    pos += size;
    count++;
  }
  if (events) *events = count;
  return pos - from;
}

void Ring::consume(size_t n) {
  Committed c = peek();
  if (n > c.size()) n = c.size();
  if (n == 0) return;
  size_t events = 0;
  whole_events(c, 0, n, &events);
  consumed_ += n;
  consumed_events_ += events;
  // Release: our reads of those n bytes (read(), a dump) are done before the
  // producer, whose acquire load in make_room() pairs, writes over them.
  tail_.store(c.tail + static_cast<uint32_t>(n), std::memory_order_release);
}

size_t Ring::read(void* out, size_t max, uint64_t* offset) {
  Committed c = peek();
  if (offset) *offset = c.offset;
  auto* o = static_cast<uint8_t*>(out);
  size_t pos = 0;
  while (pos < c.size()) {
    size_t size = c.event_size(pos);
    if (size == 0) {  // damaged (memory corruption): drop the rest
      if (pos == 0) consume(c.size());
      break;
    }
    if (pos + size > max) break;
    __builtin_memcpy(o + pos, c.event(pos), size);
    pos += size;
  }
  if (pos) consume(pos);
  return pos;
}

Ring::Stats Ring::stats() const {
  Committed c = peek();
  size_t events = 0;
  whole_events(c, 0, c.size(), &events);
  Stats s{};
  s.capacity = cap_;
  s.consumed = consumed_;
  s.committed = consumed_ + c.size();
  s.events = consumed_events_ + events;
  // Relaxed: some recent count (exact once the producer is quiescent).
  s.overrun_bytes = overrun_bytes_.load(std::memory_order_relaxed);
  s.dropped_events = dropped_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kmemtrace
