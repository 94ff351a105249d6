// SPDX-License-Identifier: Apache-2.0
// The stack depot under ThreadSanitizer: threads save and fetch overlapping
// sets of traces at once, and hand each other handles through a table of
// relaxed atomics (so fetch is checked to need nothing from the channel:
// its acquire of the depot's top is what orders the record).
//
//   stress_stackdepot_tsan fit|full [SECONDS]
//
// fit: the pool holds every trace; no save may return 0. full: the pool is
// a fraction of what the traces need, so threads run into the full depot
// while others insert and look up; a 0 is then allowed, but only once the
// depot says it dropped something. Either way every non-zero handle of a
// trace is the same, and every fetch returns exactly the trace saved.
// The threads start before stackdepot_init, so their first saves race with
// its publication; two of them only look up what others stored, with no
// other ordering. Exits 0 when TSan saw no race and every check held.
#include <mm/stackdepot.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {
constexpr unsigned kThreads = 4;
constexpr unsigned kTraces = 3000;
std::atomic<bool> g_stop{false};
std::atomic<bool> g_init_done{false};  // stackdepot_init has returned (release/acquire)
std::atomic<uint64_t> g_bad{0}, g_saves{0}, g_fetches{0}, g_zero{0}, g_before_init{0}, g_lookups{0};
std::atomic<mm::StackHandle> g_handle[kTraces];  // the first handle seen per trace: relaxed

// Trace i: 1..16 frames, text-like, distinct from every other; traces
// i and i + 1 share all but their first frame (long shared chains).
unsigned trace(unsigned i, uintptr_t* pcs) {
  unsigned n = 1 + (i * 7) % mm::kStackDepotMaxFrames;
  pcs[0] = 0x400000 + i * 0x10;
  for (unsigned k = 1; k < n; k++) pcs[k] = 0x500000 + (i / 2) * 0x100 + k * 4;
  return n;
}

bool matches(mm::StackHandle h, unsigned i) {
  uintptr_t want[mm::kStackDepotMaxFrames];
  unsigned n = trace(i, want);
  const uintptr_t* pcs;
  if (mm::stackdepot_fetch(h, &pcs) != n) return false;
  return std::memcmp(pcs, want, n * sizeof(uintptr_t)) == 0;
}

void worker(unsigned id, bool may_fill) {
  std::mt19937 rng(17 + id);
  // Overlapping windows: each thread works on 2/3 of the traces.
  unsigned base = id * kTraces / (2 * kThreads);
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned i = (base + rng() % (2 * kTraces / 3)) % kTraces;
    uintptr_t pcs[mm::kStackDepotMaxFrames];
    unsigned n = trace(i, pcs);
    bool ready = g_init_done.load(std::memory_order_acquire);
    mm::StackHandle h = mm::stackdepot_save(pcs, n);
    g_saves.fetch_add(1, std::memory_order_relaxed);
    if (h == 0 && !ready) {
      g_before_init.fetch_add(1, std::memory_order_relaxed);  // the depot may not be there yet
    } else if (h == 0) {
      mm::StackDepotStats s;
      mm::stackdepot_stats(s);
      if (!may_fill || s.dropped == 0) g_bad.fetch_add(1);
      g_zero.fetch_add(1, std::memory_order_relaxed);
    } else {
      mm::StackHandle seen = 0;
      if (!g_handle[i].compare_exchange_strong(seen, h, std::memory_order_relaxed) && seen != h) g_bad.fetch_add(1);
      if (!matches(h, i)) g_bad.fetch_add(1);
    }
    // Fetch a handle another thread may have published, with no ordering.
    unsigned j = rng() % kTraces;
    mm::StackHandle other = g_handle[j].load(std::memory_order_relaxed);
    if (other) {
      if (!matches(other, j)) g_bad.fetch_add(1);
      g_fetches.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// Looks up traces others stored, knowing of them only through g_handle
// (relaxed) and taking no lock: nothing but save's own acquire of the
// depot's table orders stackdepot_init's writes before its first lookup.
void looker(unsigned id) {
  std::mt19937 rng(99 + id);
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned i = rng() % kTraces;
    mm::StackHandle want = g_handle[i].load(std::memory_order_relaxed);
    if (!want) continue;
    uintptr_t pcs[mm::kStackDepotMaxFrames];
    unsigned n = trace(i, pcs);
    if (mm::stackdepot_save(pcs, n) != want) g_bad.fetch_add(1);
    g_lookups.fetch_add(1, std::memory_order_relaxed);
  }
}

// Reads the statistics while the others work.
void reader() {
  while (!g_stop.load(std::memory_order_relaxed)) {
    mm::StackDepotStats s;
    mm::stackdepot_stats(s);
    if (s.bytes_used > s.bytes_total || s.traces > kTraces) g_bad.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  bool full = argc >= 2 && std::strcmp(argv[1], "full") == 0;
  if (argc < 2 || argc > 3 || (!full && std::strcmp(argv[1], "fit") != 0) ||
      (argc == 3 && (seconds = std::strtod(argv[2], nullptr)) <= 0)) {
    std::fprintf(stderr, "usage: stress_stackdepot_tsan fit|full [SECONDS > 0]\n");
    return 2;
  }
  // The threads start before the depot is set up: their first saves race
  // with stackdepot_init's publication (and return 0 until they see it).
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < kThreads; t++) ts.emplace_back(worker, t, full);
  ts.emplace_back(looker, 0);
  ts.emplace_back(looker, 1);
  ts.emplace_back(reader);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // fit: ~290 KiB of records for 3000 traces; full: a quarter of that.
  if (!mm::stackdepot_init(full ? 64 << 10 : 1 << 20)) {
    std::fprintf(stderr, "stackdepot_init failed\n");
    return 1;
  }
  g_init_done.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  g_stop = true;
  for (auto& t : ts) t.join();
  mm::StackDepotStats s;
  mm::stackdepot_stats(s);
  // Afterwards, every trace stored is found and fetched by this thread.
  unsigned stored = 0;
  for (unsigned i = 0; i < kTraces; i++) {
    mm::StackHandle h = g_handle[i].load(std::memory_order_relaxed);
    if (!h) continue;
    stored++;
    uintptr_t pcs[mm::kStackDepotMaxFrames];
    unsigned n = trace(i, pcs);
    if (mm::stackdepot_save(pcs, n) != h || !matches(h, i)) g_bad.fetch_add(1);
  }
  std::printf(
      "%s, %.0f s: %llu saves (%llu before init, %llu returned 0 after), %llu cross-thread fetches, "
      "%llu lookups; %u traces handed out, depot: %llu traces, %llu of %llu bytes, %llu dropped; %llu bad\n",
      full ? "full" : "fit", seconds, static_cast<unsigned long long>(g_saves.load()),
      static_cast<unsigned long long>(g_before_init.load()), static_cast<unsigned long long>(g_zero.load()),
      static_cast<unsigned long long>(g_fetches.load()), static_cast<unsigned long long>(g_lookups.load()), stored,
      static_cast<unsigned long long>(s.traces), static_cast<unsigned long long>(s.bytes_used),
      static_cast<unsigned long long>(s.bytes_total), static_cast<unsigned long long>(s.dropped),
      static_cast<unsigned long long>(g_bad.load()));
  bool ok = g_bad.load() == 0 && g_fetches.load() > 0 && g_lookups.load() > 0 && stored == s.traces &&
            g_before_init.load() > 0 &&
            (full ? s.dropped > 0 && g_zero.load() > 0 : s.dropped == 0 && stored == kTraces);
  return ok ? 0 : 1;
}
