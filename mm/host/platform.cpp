// mm/'s platform on the host (see mm/platform.h and mm/host/include/mm/platform_inline.h).
//
// "Physical memory" is a memfd of MM_HOST_MEMORY bytes (default 256 MiB):
// the direct map is one shared mapping of all of it, and map_heap() maps
// pages of it again inside a reserved heap window (MAP_FIXED over a
// PROT_NONE reservation), as the kernel's page tables would. A flat table
// remembers which physical page backs each heap page.
#include <mm/host.h>
#include <mm/platform.h>
#include <execinfo.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace mm::plat {

thread_local constinit unsigned t_cpu = kMaxCpus;
#if defined(MM_DEBUG)
thread_local constinit int t_irq_masked = 0;
#endif
uint8_t* g_direct_map;
uint64_t g_phys_base;

namespace {
// Word-sized, as Lock's: no libatomic call for a sub-word compare-exchange.
// A slot's per-CPU state passes from thread to thread: the exiting thread
// flushes it (the exit hook) and frees the slot with a release store; the
// next claimer's compare-exchange acquires it.
std::atomic<uint32_t> g_slot_used[kMaxCpus];
// Only grows: a bound for loops over the slots. It publishes nothing.
std::atomic<unsigned> g_slots_high{0};

// Frees the thread's CPU slot when it exits, so threads can come and go.
// The hook is stored with release (set_cpu_exit_hook, from kmem_init) and
// loaded with acquire.
std::atomic<void (*)()> g_exit_hook{nullptr};
struct SlotRelease {
  ~SlotRelease() {
    if (t_cpu >= kMaxCpus) return;
    if (auto hook = g_exit_hook.load(std::memory_order_acquire)) hook();
    g_slot_used[t_cpu].store(0, std::memory_order_release);
    t_cpu = kMaxCpus;
  }
};
thread_local SlotRelease t_release;

uint8_t* g_heap_base;
size_t g_heap_size;
// Physical address per heap page, 0 = unmapped. Plain: written by
// map_heap/unmap_heap and read by heap_to_phys only for pages the caller
// holds (segkmem's import and release, page_of of a heap address it owns),
// so the allocator's own synchronisation orders each entry.
uint64_t* g_heap_pt;
int g_memfd = -1;
uint64_t g_phys_size;
}  // namespace

unsigned claim_cpu_slot() {
  for (unsigned i = 0; i < kMaxCpus; i++) {
    uint32_t expect = 0;
    if (g_slot_used[i].compare_exchange_strong(expect, 1, std::memory_order_acq_rel)) {
      t_cpu = i;
      (void)&t_release;  // make sure the thread_local destructor is registered
      unsigned high = g_slots_high.load(std::memory_order_relaxed);
      while (high < i + 1 && !g_slots_high.compare_exchange_weak(high, i + 1)) {
      }
      return i;
    }
  }
  fatal("more than %u threads use the allocator at once", kMaxCpus);
}

unsigned cpu_count() {
  unsigned n = g_slots_high.load(std::memory_order_acquire);
  return n ? n : 1;
}

bool map_heap(uintptr_t va, uint64_t pa, size_t size) {
  auto* p = reinterpret_cast<uint8_t*>(va);
  if (p < g_heap_base || p + size > g_heap_base + g_heap_size || pa < g_phys_base ||
      pa + size > g_phys_base + g_phys_size)
    fatal("map_heap(%p, 0x%llx, %zu) outside the heap window or physical memory", p,
          static_cast<unsigned long long>(pa), size);
  void* r = mmap(p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g_memfd,
                 static_cast<off_t>(pa - g_phys_base));
  if (r == MAP_FAILED) return false;
  for (size_t off = 0; off < size; off += 4096) g_heap_pt[(va + off - reinterpret_cast<uintptr_t>(g_heap_base)) >> 12] = pa + off;
  return true;
}

void unmap_heap(uintptr_t va, size_t size) {
  auto* p = reinterpret_cast<uint8_t*>(va);
  if (mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    fatal("unmap_heap: %s", strerror(errno));
  for (size_t off = 0; off < size; off += 4096) g_heap_pt[(va + off - reinterpret_cast<uintptr_t>(g_heap_base)) >> 12] = 0;
}

void unmap_heap_deferred(uintptr_t va, size_t size) { unmap_heap(va, size); }
void heap_tlb_sync() {}

uint64_t heap_to_phys(uintptr_t va) {
  uintptr_t base = reinterpret_cast<uintptr_t>(g_heap_base);
  if (va < base || va >= base + g_heap_size) return 0;
  uint64_t pa = g_heap_pt[(va - base) >> 12];
  return pa ? pa + (va & 4095) : 0;
}

void wait_for_memory() { sched_yield(); }

uint64_t cycles_fallback() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void heap_window(uintptr_t& base, size_t& size) {
  base = reinterpret_cast<uintptr_t>(g_heap_base);
  size = g_heap_size;
}

void on_each_cpu(void (*fn)(void*), void* arg) { fn(arg); }

void stop_others(void (*fn)(void*), void* arg) {
  IrqState s = irq_save();
  fn(arg);
  irq_restore(s);
}

bool describe_region(uintptr_t, const char*&, uintptr_t&, size_t&, unsigned&) { return false; }

void set_cpu_exit_hook(void (*fn)()) { g_exit_hook.store(fn, std::memory_order_release); }

// glibc's backtrace() unwinds with the tables in .eh_frame (the host
// library is not built with frame pointers). Its first call loads libgcc's
// unwinder, which calls malloc, once per process. The walk starts where
// our own return address is (the first frame is normally the return
// address into this function, but a sanitizer's interceptor of backtrace()
// adds its own frame before it).
__attribute__((noinline)) unsigned backtrace(uintptr_t* pcs, unsigned max, unsigned skip) {
  constexpr unsigned kWalk = 64;
  void* walk[kWalk];
  auto ours = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  unsigned want = skip + 3 + max;
  if (want > kWalk) want = kWalk;
  unsigned got = static_cast<unsigned>(::backtrace(walk, static_cast<int>(want)));
  unsigned first = 0;
  while (first < got && reinterpret_cast<uintptr_t>(walk[first]) != ours) first++;
  if (first == got) first = 1;  // not found: assume the plain layout
  unsigned n = 0;
  for (unsigned i = first + skip; i < got && n < max; i++) pcs[n++] = reinterpret_cast<uintptr_t>(walk[i]);
  return n;
}

void log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mm: fatal: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

}  // namespace mm::plat

namespace mm::host {

namespace {
std::once_flag g_once;
HostMemory g_mem;
}

const HostMemory& memory() { return g_mem; }

void init_memory(size_t phys_bytes, size_t heap_bytes) {
  std::call_once(g_once, [&] {
    using namespace mm::plat;
    if (const char* env = getenv("MM_HOST_MEMORY")) {
      char* end;
      unsigned long long v = strtoull(env, &end, 0);
      if (*end == 'M' || *end == 'm') v <<= 20;
      else if (*end == 'G' || *end == 'g') v <<= 30;
      if (v >= (4u << 20)) phys_bytes = v;
    }
    phys_bytes &= ~size_t{4095};
    g_memfd = memfd_create("mm-phys", 0);
    if (g_memfd < 0 || ftruncate(g_memfd, static_cast<off_t>(phys_bytes)) != 0)
      fatal("cannot create %zu bytes of host 'physical' memory: %s", phys_bytes, strerror(errno));
    void* dm = mmap(nullptr, phys_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g_memfd, 0);
    void* heap = mmap(nullptr, heap_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_heap_pt = static_cast<uint64_t*>(calloc(heap_bytes >> 12, sizeof(uint64_t)));
    if (dm == MAP_FAILED || heap == MAP_FAILED || !g_heap_pt) fatal("cannot map host memory: %s", strerror(errno));
    // A physical base that is not zero, so a 0 return can mean "none".
    g_phys_base = 0x40000000;
    g_direct_map = static_cast<uint8_t*>(dm);
    g_phys_size = phys_bytes;
    g_heap_base = static_cast<uint8_t*>(heap);
    g_heap_size = heap_bytes;
    g_mem = {g_phys_base, phys_bytes, reinterpret_cast<uintptr_t>(heap), heap_bytes};
  });
}

}  // namespace mm::host
