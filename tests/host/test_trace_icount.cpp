// SPDX-License-Identifier: Apache-2.0
// Instructions per kmemtrace event on the host, for
// tests/host/data/trace/icount.sh (callgrind counts them; see there).
//
//   trace_icount on|off N
//
// Calls traced_alloc / traced_free (a stand-in allocator with the recording
// hooks, as kmem will have them) and plain_alloc / plain_free (the same
// without hooks) N times each, with tracing enabled or not.
#include <trace/kmemtrace.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

alignas(64) char g_pool[1 << 16];
unsigned g_next;

// Like a real allocator, the stand-ins are not leaf functions (they call
// into a lower layer), so the hook does not add the frame they already have.
__attribute__((noinline)) void* lower_alloc(size_t n) {
  asm volatile("" ::"r"(n) : "memory");
  return &g_pool[(g_next++ * 64) & (sizeof g_pool - 1)];
}
__attribute__((noinline)) void lower_free(void* p) { asm volatile("" ::"r"(p) : "memory"); }

__attribute__((noinline)) void* plain_alloc(size_t n) {
  void* p = lower_alloc(n);
  asm volatile("" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void plain_free(void* p) {
  lower_free(p);
  asm volatile("" ::"r"(p) : "memory");
}

__attribute__((noinline)) void* traced_alloc(size_t n) {
  void* p = lower_alloc(n);
  asm volatile("" ::"r"(p) : "memory");
  kmemtrace::record_alloc(kmemtrace::kTypeKmalloc, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), p, n, 64,
                          0);
  return p;
}
__attribute__((noinline)) void traced_free(void* p) {
  kmemtrace::record_free(kmemtrace::kTypeKmalloc, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), p);
  lower_free(p);
  asm volatile("" ::"r"(p) : "memory");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: trace_icount on|off N\n");
    return 2;
  }
  bool on = strcmp(argv[1], "on") == 0;
  long n = atol(argv[2]);
  static std::vector<uint8_t> mem(kmemtrace::Ring::bytes_for(size_t{1} << 24));
  for (unsigned c = 0; c < 4; c++) kmemtrace::init_cpu(c, c == 0 ? mem.data() : nullptr, c == 0 ? mem.size() : 0);
  if (on) kmemtrace::enable();
  for (long i = 0; i < n; i++) {
    void* p = plain_alloc(static_cast<size_t>(i & 255));
    plain_free(p);
  }
  for (long i = 0; i < n; i++) {
    void* p = traced_alloc(static_cast<size_t>(i & 255));
    traced_free(p);
  }
  kmemtrace::CpuStats s;
  uint64_t events = 0, dropped = 0;
  for (unsigned c = 0; c < kmemtrace::max_cpus(); c++)
    if (kmemtrace::stats(c, s)) {
      events += s.ring.events;
      dropped += s.ring.dropped_events;
    }
  printf("events %llu dropped %llu\n", static_cast<unsigned long long>(events),
         static_cast<unsigned long long>(dropped));
  return 0;
}
