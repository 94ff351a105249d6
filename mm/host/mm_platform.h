// mm/'s inline platform operations on the host (see mm/platform.h).
//
// Each host thread is a "CPU": it takes a free slot on first use and keeps it
// until it exits, so per-CPU data is only ever touched by one thread and
// needs no masking, as in the kernel with interrupts off. "Physical memory"
// is one shared-memory object the platform creates (mm/host/platform.cpp);
// the direct map is a mapping of all of it, the heap maps pages of it again
// at other addresses, as page tables would.
#pragma once
#include <atomic>
#include <cstdint>

namespace mm::plat {

constexpr unsigned kMaxCpus = 64;
// Per-CPU arrays indexed by cpu_slot() have one more slot, kMaxCpus, which
// a thread without a CPU yet reads: kept empty, it sends the fast path to
// the slow path, which claims a CPU (cpu_id()).
constexpr unsigned kCpuSlots = kMaxCpus + 1;

// constinit: no dynamic initialisation, so no TLS wrapper call on the fast
// path. kMaxCpus until the thread claims a CPU.
extern thread_local constinit unsigned t_cpu;
unsigned claim_cpu_slot();  // slow path: first call on a thread
inline unsigned cpu_id() {
  unsigned c = t_cpu;
  if (__builtin_expect(c < kMaxCpus, 1)) return c;
  return claim_cpu_slot();
}
inline unsigned cpu_slot() { return t_cpu; }
unsigned cpu_count();

using IrqState = int;
inline IrqState irq_save() { return 0; }
inline void irq_restore(IrqState) {}

class Lock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
  }
  bool try_lock() { return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }
  bool is_locked() const { return locked_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> locked_{false};
};

inline uint64_t cycles() { return __builtin_ia32_rdtsc(); }

extern uint8_t* g_direct_map;     // virtual address of physical g_phys_base
extern uint64_t g_phys_base;
inline void* phys_to_virt(uint64_t pa) { return g_direct_map + (pa - g_phys_base); }
inline uint64_t virt_to_phys(const void* va) { return g_phys_base + static_cast<uint64_t>(static_cast<const uint8_t*>(va) - g_direct_map); }

}  // namespace mm::plat
