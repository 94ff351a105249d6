// SPDX-License-Identifier: Apache-2.0
// kmemtrace's lock-free paths under ThreadSanitizer: host threads record
// into their own CPU's ring (the out-of-line recorders and, through
// kmem_cache_alloc/free with tracing on, the inline ones) while a reader
// thread drains every ring (kmemtrace::read), takes snapshot dumps and reads
// the statistics, as the kernel's streamer does on another core. The rings
// are small, so they fill, drop events and have their space handed back
// while the producers write: every ordering in trace/include/trace/ring.h is
// exercised (events published by head_, space returned by tail_).
//
// Twice: with tracing on throughout, then while this thread flips the
// switch. Exits 0 when TSan saw no data race (but the one on the switch,
// see below) and the bytes add up: every event the reader decoded is whole
// and the one its producer wrote (fields derived from one counter), each
// ring's stream offsets chain without a gap, sequence numbers are unique and
// rise within a ring, the reader decoded every event the rings committed,
// and (tracing on throughout) every synthetic event was decoded or dropped.
// Each ordering of the rings, relaxed on purpose, makes TSan report a race
// here (checked by hand when this test was written).
#include <mm/hooks.h>
#include <mm/kmem.h>
#include <trace/kmemtrace.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace kmemtrace;

constexpr int kProducers = 3;
constexpr uint64_t kEventsPerProducer = 60000;  // synthetic alloc/free pairs x2
constexpr uint64_t kCachePairs = 5000;          // kmem_cache pairs per producer
constexpr size_t kRingBytes = Ring::bytes_for(16 * 1024);

std::atomic<int> g_done{0};
std::atomic<uint64_t> g_errors{0};

void error(const char* what, uint64_t a = 0, uint64_t b = 0) {
  if (g_errors.fetch_add(1) < 10)
    fprintf(stderr, "stress_trace_tsan: %s (0x%llx, 0x%llx)\n", what, static_cast<unsigned long long>(a),
            static_cast<unsigned long long>(b));
}

// A synthetic event's fields all follow from (producer, i), so a torn or
// stale event shows.
constexpr uint64_t kPtrBase = 0x7700000000000000ull;
uint64_t ptr_of(int p, uint64_t i) { return kPtrBase | uint64_t(p) << 40 | i; }
uint64_t caller_of(int p) { return 0xca11e4000ull + uint64_t(p); }

void producer(int p, kmem_cache_t* cp) {
  for (uint64_t i = 0; i < kEventsPerProducer / 2; i++) {
    record_alloc(kTypeKmalloc, caller_of(p), ptr_of(p, i), i & 0xffff, (i & 0xffff) ^ 0x5555, uint32_t(p));
    record_free(kTypeKmalloc, caller_of(p), ptr_of(p, i));
    if (i % (kEventsPerProducer / 2 / kCachePairs) == 0) kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));
    if (i % 32 == 0) std::this_thread::yield();  // let the reader keep up, mostly (some rings still fill)
  }
  g_done.fetch_add(1, std::memory_order_release);
}

uint64_t get64(const uint8_t* e, size_t off) {
  uint64_t v;
  memcpy(&v, e + off, 8);
  return v;
}
uint32_t get32(const uint8_t* e, size_t off) {
  uint32_t v;
  memcpy(&v, e + off, 4);
  return v;
}

struct Reader {
  uint64_t next_offset[64] = {};
  std::vector<uint32_t> seqs;
  uint32_t last_seq[64] = {};
  bool any[64] = {};
  uint64_t synthetic = 0, cache = 0;
  std::vector<uint8_t> buf = std::vector<uint8_t>(64 * 1024);

  // Decodes what read() handed over from one CPU's ring.
  void take(unsigned cpu, size_t n, uint64_t offset) {
    if (offset != next_offset[cpu]) error("stream offsets do not chain", offset, next_offset[cpu]);
    next_offset[cpu] = offset + n;
    for (size_t pos = 0; pos < n;) {
      const uint8_t* e = buf.data() + pos;
      uint16_t size;
      memcpy(&size, e + kOffSize, 2);
      uint8_t id = e[kOffEventId], type = e[kOffTypeId];
      if ((id == kEventAlloc && size != kAllocSize) || (id == kEventFree && size != kFreeSize) || id > kEventFree) {
        error("an event with a bad header", id, size);
        return;
      }
      uint32_t seq = get32(e, kOffSeq);
      if (any[cpu] && int32_t(seq - last_seq[cpu]) <= 0)
        error("sequence numbers do not rise within a ring", seq, last_seq[cpu]);
      any[cpu] = true;
      last_seq[cpu] = seq;
      seqs.push_back(seq);
      uint64_t ptr = get64(e, kOffPtr);
      if (type == kTypeKmalloc && (ptr >> 56) == (kPtrBase >> 56)) {
        int p = int(ptr >> 40 & 0xff);
        uint64_t i = ptr & 0xffffffffff;
        if (get64(e, kOffCaller) != caller_of(p)) error("a torn event: caller", ptr, get64(e, kOffCaller));
        if (id == kEventAlloc &&
            (get64(e, kOffRequested) != (i & 0xffff) || get64(e, kOffAllocated) != ((i & 0xffff) ^ 0x5555) ||
             get32(e, kOffFlags) != uint32_t(p)))
          error("a torn event: sizes or flags", ptr, get64(e, kOffRequested));
        synthetic++;
      } else if (type == kTypeCache) {
        cache++;
      }
      pos += size;
    }
  }

  void drain_all() {
    for (unsigned cpu = 0; cpu < max_cpus() && cpu < 64; cpu++) {
      uint64_t offset;
      while (size_t n = read(cpu, buf.data(), buf.size(), &offset)) take(cpu, n, offset);
    }
  }
};

void count_sink(void* ctx, const void*, size_t n) { *static_cast<uint64_t*>(ctx) += n; }

// Producers and the reader at once; with `toggle`, this thread also turns
// tracing off and on meanwhile.
void run_phase(Reader& reader, kmem_cache_t* cp, bool toggle) {
  g_done.store(0);
  std::thread consumer([&] {
    uint64_t chars = 0;
    for (unsigned round = 0; g_done.load(std::memory_order_acquire) < kProducers; round++) {
      reader.drain_all();
      if (round % 16 == 0) dump(count_sink, &chars, false);  // a snapshot among the drains
      if (round % 4 == 0) {
        CpuStats s;
        TypeCounts tc;
        for (unsigned cpu = 0; cpu < 8; cpu++) {
          stats(cpu, s);
          count_types(cpu, tc);
          (void)pending_bytes(cpu);
        }
        (void)total_overruns();
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; p++) producers.emplace_back(producer, p, cp);
  while (toggle && g_done.load() < kProducers) {
    disable();
    std::this_thread::yield();
    enable();
    std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  consumer.join();
}

}  // namespace

// The switch is read with a plain load on purpose (trace/include/trace/
// kmemtrace.h: an atomic load costs an extra test on every allocation),
// and TSan reports that read against enable()/disable(). Only that report
// is suppressed: a race on anything else, the rings included, still fails.
extern "C" const char* __tsan_default_suppressions() { return "race:kmemtrace::g_enabled\n"; }
extern "C" const char* __tsan_default_options() { return "halt_on_error=1:second_deadlock_stack=1"; }

int main() {
  static std::vector<uint8_t> mem(kRingBytes * 64);
  for (unsigned cpu = 0; cpu < max_cpus() && cpu < 64; cpu++)
    if (!init_cpu(cpu, mem.data() + cpu * kRingBytes, kRingBytes)) {
      fprintf(stderr, "stress_trace_tsan: no ring for cpu %u\n", cpu);
      return 1;
    }
  kmem_cache_t* cp = kmem_cache_create("tsan_trace", 96, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp) return 1;
  Reader reader;
  uint64_t want_synthetic = uint64_t{kProducers} * kEventsPerProducer;

  // 1. Tracing on throughout: every synthetic event is decoded or dropped.
  // (The allocators' hooks stay on; the recorder's switch is what flips.)
  mm::alloc_hooks_set(mm::kFeatureKmemtrace, true);
  enable();
  run_phase(reader, cp, false);
  reader.drain_all();  // what was left
  uint64_t dropped = 0;
  for (unsigned cpu = 0; cpu < max_cpus(); cpu++) {
    CpuStats s;
    if (stats(cpu, s)) dropped += s.ring.dropped_events;
  }
  if (reader.synthetic > want_synthetic || reader.synthetic + dropped < want_synthetic)
    error("synthetic events went missing or multiplied", reader.synthetic, dropped);  // dropped counts every type
  uint64_t steady = reader.seqs.size();

  // 2. The same while the switch flips: fewer events, the same checks on them.
  run_phase(reader, cp, true);
  disable();
  reader.drain_all();

  uint64_t recorded = 0;
  dropped = 0;
  for (unsigned cpu = 0; cpu < max_cpus(); cpu++) {
    CpuStats s;
    if (stats(cpu, s)) {
      recorded += s.ring.events;
      dropped += s.ring.dropped_events;
    }
  }
  uint64_t decoded = reader.seqs.size();
  if (decoded != recorded) error("decoded events differ from the events the rings committed", decoded, recorded);
  std::sort(reader.seqs.begin(), reader.seqs.end());
  if (std::adjacent_find(reader.seqs.begin(), reader.seqs.end()) != reader.seqs.end())
    error("a sequence number repeats");
  if (!kmem_cache_destroy(cp)) error("the cache could not be destroyed");
  printf(
      "stress_trace_tsan: %llu events decoded (%llu with tracing on throughout, %llu while it flipped; %llu synthetic, "
      "%llu kmem_cache), %llu dropped by full rings; %llu errors\n",
      static_cast<unsigned long long>(decoded), static_cast<unsigned long long>(steady),
      static_cast<unsigned long long>(decoded - steady), static_cast<unsigned long long>(reader.synthetic),
      static_cast<unsigned long long>(reader.cache), static_cast<unsigned long long>(dropped),
      static_cast<unsigned long long>(g_errors.load()));
  return g_errors.load() == 0 ? 0 : 1;
}
