// SPDX-License-Identifier: Apache-2.0
// kmemtrace: the per-CPU rings, the switch, the recording slow paths and
// the readers. Design: trace/include/trace/kmemtrace.h.
//
// Platform (mm/'s inline seam, <mm/platform_inline.h>): cpu_id() and irq_save()
// on the recording path, kMaxCpus for the ring table, Lock for readers.
#include <mm/platform_inline.h>
#include <trace/kmemtrace.h>
#include <trace/record.h>

namespace kmemtrace {

namespace plat = mm::plat;

constinit bool g_enabled = false;

namespace detail {
constinit Recorder g_rec;
}  // namespace detail

namespace {
Ring (&g_rings)[plat::kMaxCpus] = detail::g_rec.rings;
}  // namespace

namespace {
// One consumer at a time. Its acquire/release also carries init_cpu()'s
// and reset()'s ring stores (made under it) to every later reader, and
// each reader's consumed_ bookkeeping to the next.
constinit plat::Lock g_reader_lock;
constinit uint32_t g_boot_id = 0;
constinit uint32_t g_dump_seq = 0;         // under g_reader_lock
constinit bool g_has_ring[plat::kMaxCpus] = {};
constinit void* g_ring_mem[plat::kMaxCpus] = {};  // for reset()
constinit size_t g_ring_bytes[plat::kMaxCpus] = {};

struct ReaderGuard {
  ReaderGuard() { g_reader_lock.lock(); }
  ~ReaderGuard() { g_reader_lock.unlock(); }
};

}  // namespace

// --- Recording -------------------------------------------------------------
// Masked interrupts keep us on this CPU and make us its ring's only writer.
// The sequence number and the ring's publication: trace/record.h, ring.h.

// The switch is read again under the mask: a caller that found no room in
// a restartable write (trace/record.h, Restartable) comes here, and an
// interrupt between its section and our mask may have been reset()'s
// cross-call.
void record_alloc_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr, size_t requested, size_t allocated,
                       uint32_t flags) {
  auto s = plat::irq_save();
  if (enabled()) detail::alloc_masked(tag, caller, ptr, requested, allocated, flags);
  plat::irq_restore(s);
}

void record_alloc_target_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr, size_t requested,
                              size_t allocated, uint32_t flags, int32_t target_cpu) {
  auto s = plat::irq_save();
  uint32_t seq = detail::next_seq();
  g_rings[plat::cpu_id()].put_alloc(tag, seq, caller, ptr, requested, allocated, flags, target_cpu);
  plat::irq_restore(s);
}

void record_free_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr) {
  auto s = plat::irq_save();
  if (enabled()) detail::free_masked(tag, caller, ptr);
  plat::irq_restore(s);
}

// --- Clock anchors (abi.h, Sequence numbers) ----------------------------------

namespace {
// Each CPU's last anchor (0: none, or the last one was dropped), written by
// its CPU with interrupts masked, and by reset() while nobody records.
constinit uint64_t g_anchor[plat::kMaxCpus] = {};
constexpr uint64_t kAnchorTicks = uint64_t{1} << 30;  // well inside the 2^31 a reader unwraps by

// The clock is read here, masked, so that nothing this CPU records can
// come between the read and the anchor's place in the ring.
void anchor_masked() {
  unsigned cpu = plat::cpu_id();
  uint64_t now = plat::trace_clock();
  EventHeader h{kEventClock, 0, static_cast<uint16_t>(kClockSize), static_cast<uint32_t>(now),
                plat::trace_clock_hz(), now};
  g_anchor[cpu] = g_rings[cpu].put(&h, sizeof h) ? now : 0;  // dropped: the next tick tries again
}
}  // namespace

void clock_anchor() {
  if constexpr (!plat::kTraceClock) return;
  auto s = plat::irq_save();
  anchor_masked();
  plat::irq_restore(s);
}

void clock_tick() {
  if constexpr (!plat::kTraceClock) return;
  if (!enabled()) return;
  auto s = plat::irq_save();
  uint64_t last = g_anchor[plat::cpu_id()];
  if (enabled() && (last == 0 || plat::trace_clock() - last >= kAnchorTicks)) anchor_masked();
  plat::irq_restore(s);
}

// --- Set-up ------------------------------------------------------------------

unsigned max_cpus() { return plat::kMaxCpus; }
void* ring_header(unsigned cpu) { return cpu < plat::kMaxCpus ? &detail::g_rec.rings[cpu] : nullptr; }

bool init_cpu(unsigned cpu, void* mem, size_t bytes) {
  if (cpu >= plat::kMaxCpus) return false;
  ReaderGuard g;
  g_has_ring[cpu] = g_rings[cpu].init(mem, bytes);
  g_ring_mem[cpu] = g_has_ring[cpu] ? mem : nullptr;
  g_ring_bytes[cpu] = g_has_ring[cpu] ? bytes : 0;
  return g_has_ring[cpu];
}

// Relaxed: a value on its own, read by the dumper (nothing else hangs on it).
void set_boot_id(uint32_t id) { __atomic_store_n(&g_boot_id, id, __ATOMIC_RELAXED); }

// The switch orders nothing (its readers use a plain load: kmemtrace.h),
// hence relaxed. What orders the rings' set-up before recording is in
// kmemtrace.h, Set-up.
void enable() { __atomic_store_n(&g_enabled, true, __ATOMIC_RELAXED); }
void disable() { __atomic_store_n(&g_enabled, false, __ATOMIC_RELAXED); }

// The caller has made sure no CPU is still recording (kmemtrace.h): the
// last head_ store of each producer is ordered before our stores by
// whatever told us so (the kernel's cross-call: each core's release when it
// is done, our acquire when we see that).
void reset() {
  ReaderGuard g;
  for (unsigned cpu = 0; cpu < plat::kMaxCpus; cpu++) {  // init() zeroes the counters too
    g_has_ring[cpu] = g_rings[cpu].init(g_ring_mem[cpu], g_ring_bytes[cpu]);
    g_anchor[cpu] = 0;
  }
}

// --- Readers -----------------------------------------------------------------

bool count_types(unsigned cpu, TypeCounts& out) {
  if (cpu >= plat::kMaxCpus) return false;
  out = TypeCounts{};
  ReaderGuard g;
  Ring::Committed c = g_rings[cpu].peek();
  for (size_t pos = 0; pos < c.size();) {
    size_t n = c.event_size(pos);
    if (!n) break;  // damaged: the dump stops there too
    const uint8_t* e = c.event(pos);
    uint8_t id = e[kOffEventId], type = e[kOffTypeId];
    if (type >= kTypeCount || (id != kEventAlloc && id != kEventFree)) {
      out.other++;
    } else if (id == kEventAlloc) {
      out.allocs[type]++;
      uint64_t bytes;
      __builtin_memcpy(&bytes, e + kOffAllocated, sizeof bytes);
      out.alloc_bytes[type] += bytes;
    } else {
      out.frees[type]++;
    }
    pos += n;
  }
  return true;
}

bool stats(unsigned cpu, CpuStats& out) {
  if (cpu >= plat::kMaxCpus) return false;
  ReaderGuard g;
  out.has_ring = g_has_ring[cpu];
  out.ring = g_rings[cpu].stats();
  return true;
}

size_t pending_bytes(unsigned cpu) {
  if (cpu >= plat::kMaxCpus) return 0;
  ReaderGuard g;
  return g_rings[cpu].peek().size();
}

uint64_t total_overruns() {
  ReaderGuard g;
  uint64_t sum = 0;
  for (unsigned cpu = 0; cpu < plat::kMaxCpus; cpu++) sum += g_rings[cpu].stats().overrun_bytes;
  return sum;
}

frame::DumpResult dump(frame::ByteSink sink, void* ctx, bool consume, size_t max_payload) {
  ReaderGuard g;
  // Every CPU up to the last one with a ring (or that dropped events).
  Ring* rings[plat::kMaxCpus];
  unsigned n = 0;
  for (unsigned cpu = 0; cpu < plat::kMaxCpus; cpu++) {
    rings[cpu] = &g_rings[cpu];
    if (g_has_ring[cpu] || g_rings[cpu].stats().dropped_events) n = cpu + 1;
  }
  frame::DumpOptions opt;
  opt.consume = consume;
  opt.max_payload = max_payload;
  opt.boot_id = __atomic_load_n(&g_boot_id, __ATOMIC_RELAXED);
  opt.dump_seq = g_dump_seq++;
  return frame::dump_rings(rings, n, sink, ctx, opt);
}

size_t read(unsigned cpu, void* out, size_t max, uint64_t* offset) {
  if (cpu >= plat::kMaxCpus) return 0;
  ReaderGuard g;
  return g_rings[cpu].read(out, max, offset);
}

}  // namespace kmemtrace
