// SPDX-License-Identifier: Apache-2.0
// Instructions per stack depot operation on the host, for
// tests/host/data/stackdepot/icount.sh (callgrind counts them; see there).
//
//   stackdepot_icount N
//
// Built like the `mm` library (optimised, uninstrumented). Each measurement
// warms up first, then callgrind's counters are zeroed, collection is on
// around exactly N calls, and the counts are dumped with a label
// ("<what> <frames> <calls>"). "save-loop F" and "capture-loop F" are the
// same loops calling an empty function instead: the script subtracts them.
//   save F     stackdepot_save of an F-frame trace already stored (the hit:
//              hash, one bucket, compare), cycling over 64 such traces
//   capture F  stackdepot_capture(0) at a depth where the walk gives F
//              frames (and the trace is already stored)
#include <mm/stackdepot.h>
#include <valgrind/callgrind.h>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace {

constexpr unsigned kSet = 64;
uintptr_t g_traces[kSet][mm::kStackDepotMaxFrames];

__attribute__((noinline)) mm::StackHandle null_save(const uintptr_t* pcs, unsigned n) {
  asm volatile("" ::"r"(pcs), "r"(n) : "memory");
  return 1;
}

template <class F>
void measure(const char* what, unsigned frames, long n, F&& body) {
  for (long i = 0; i < 1000; i++) body(i);  // warm: stored, caches, lazy binding
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  for (long i = 0; i < n; i++) body(i);
  CALLGRIND_TOGGLE_COLLECT;
  char label[64];
  std::snprintf(label, sizeof label, "%s %u %ld", what, frames, n);
  CALLGRIND_DUMP_STATS_AT(label);
  std::printf("%s\n", label);
}

// Recurses to `depth` frames, then captures there.
__attribute__((noinline)) mm::StackHandle capture_at(unsigned depth) {
  mm::StackHandle h;
  if (depth > 1) h = capture_at(depth - 1);
  else h = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");  // not a tail call: each level keeps its frame
  return h;
}
__attribute__((noinline)) mm::StackHandle null_at(unsigned depth) {
  mm::StackHandle h;
  if (depth > 1) h = null_at(depth - 1);
  else h = null_save(nullptr, 0);
  asm volatile("" ::: "memory");
  return h;
}

// The frames a capture from capture_at(depth) stores.
unsigned frames_at(unsigned depth) {
  const uintptr_t* pcs;
  return mm::stackdepot_fetch(capture_at(depth), &pcs);
}

}  // namespace

int main(int argc, char** argv) {
  long n = argc == 2 ? std::atol(argv[1]) : 0;
  if (n <= 0) {
    std::fprintf(stderr, "usage: stackdepot_icount N\n");
    return 2;
  }
  if (!mm::stackdepot_init(1 << 20)) return 1;
  for (unsigned t = 0; t < kSet; t++)
    for (unsigned k = 0; k < mm::kStackDepotMaxFrames; k++) g_traces[t][k] = 0x401000 + t * 0x1000 + k * 0x34;
  for (unsigned f : {4u, 8u, 16u}) {
    measure("save", f, n, [f](long i) {
      if (!mm::stackdepot_save(g_traces[i % kSet], f)) std::abort();
    });
    measure("save-loop", f, n, [f](long i) {
      if (!null_save(g_traces[i % kSet], f)) std::abort();
    });
  }
  // Captures from a shallow and a deep stack: main's own context gives a
  // few frames (libc's start), capture_at adds one per level.
  for (unsigned depth : {1u, 13u}) {
    unsigned f = frames_at(depth);
    measure("capture", f, n, [depth](long) {
      if (!capture_at(depth)) std::abort();
    });
    measure("capture-loop", f, n, [depth](long) {
      if (!null_at(depth)) std::abort();
    });
  }
  return 0;
}
