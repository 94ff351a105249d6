// SPDX-License-Identifier: Apache-2.0
// mm/'s inline platform operations on the host (see mm/platform.h).
//
// Each host thread is a "CPU": it takes a free slot on first use and keeps it
// until it exits, so per-CPU data is only ever touched by one thread and
// needs no masking, as in the kernel with interrupts off. "Physical memory"
// is one shared-memory object the platform creates (mm/host/platform.cpp);
// the direct map is a mapping of all of it, the heap maps pages of it again
// at other addresses, as page tables would.
//
// The two operations that need the CPU's own instructions, cpu_relax() and
// cycles(), choose them here and only here (x86-64, AArch64, RISC-V 64, and
// a portable fallback), so the library builds on any Linux host; the
// presets host-aarch64 and host-riscv64 check that it does.
#pragma once
#include <mm/hook_mode.h>
#include <atomic>
#include <cstdint>
#include <mm/platform_norseq.h>

#define MM_FRAMELESS  // the host keeps its frame pointers (sanitizers, perf)
// The host's entry points pass their own return address: under the
// sanitizers GCC may not make their calls tail calls, so the callee's own
// return address would be the entry point. The empty asm keeps GCC from
// hoisting the load of the return address out of the hooked branch that
// wants it onto the fast path (kmem_free: a load on every call).
#define MM_ENTRY_CALLER()                                                           \
  ({                                                                                \
    asm volatile("" ::: "memory");                                                  \
    reinterpret_cast<uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0))); \
  })

namespace mm::plat {

// A spin-wait hint, for the body of a loop that waits for another thread
// (it lets an SMT sibling run and saves power; it orders no memory).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#elif defined(__riscv)
  // Zihintpause's PAUSE, spelled as its encoding (FENCE with pred = W,
  // succ = 0) so that assemblers without the extension take it; cores
  // without Zihintpause execute it as a no-op hint.
  asm volatile(".insn i 0x0f, 0, x0, x0, 0x010" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

// A cheap counter that only moves forward on this thread: the TSC on x86,
// the virtual counter (CNTVCT_EL0) on AArch64, the time CSR on RISC-V (Linux
// lets user space read both), the monotonic clock in nanoseconds elsewhere.
// Its rate differs between hosts: compare its values, not across machines.
// A word another CPU may store (relaxed) while this one loads it on a fast
// path: a plain load, as the kernel's (an aligned word is single-copy
// atomic; GCC folds an atomic load into no other instruction, which would
// lengthen the host's kmem_alloc pair), and under ThreadSanitizer a
// relaxed atomic load, so that it sees two atomics.
template <typename T>
inline T load_shared(const T& v) {
#if defined(__SANITIZE_THREAD__)
  return __atomic_load_n(&v, __ATOMIC_RELAXED);
#else
  return v;
#endif
}
// The allocators' hook switch (mm/hooks.h): a load and a branch. Written by
// set_alloc_hooks (platform.cpp) while other threads allocate
// (load_shared); the features' own flags, read on the hooked paths, carry
// their ordering.
extern bool g_alloc_hooks, g_free_hooks;
__attribute__((always_inline)) inline bool alloc_hooks_on() { return __builtin_expect(load_shared(g_alloc_hooks), 0); }
__attribute__((always_inline)) inline bool free_hooks_on() { return __builtin_expect(load_shared(g_free_hooks), 0); }
// Three ways where the kernel has static branches (its platform_inline.h);
// here the hooked copies pick kmemtrace's paths themselves.
__attribute__((always_inline)) inline HookMode alloc_hooks_mode() {
  return alloc_hooks_on() ? HookMode::kHooked : HookMode::kOff;
}
__attribute__((always_inline)) inline HookMode free_hooks_mode() {
  return free_hooks_on() ? HookMode::kHooked : HookMode::kOff;
}

// kmemtrace's sequence numbers: one counter for every thread on the host
// (trace/include/trace/abi.h, Sequence numbers).
constexpr bool kTraceClock = false;
inline uint64_t trace_clock() { return 0; }
inline uint64_t trace_clock_hz() { return 0; }

uint64_t cycles_fallback();  // mm/host/platform.cpp
uint64_t ticks_from_clock();  // mm/host/platform.cpp: CLOCK_MONOTONIC, 100 a second
inline uint64_t ticks() { return ticks_from_clock(); }
inline uint64_t cycles() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#elif defined(__riscv) && __riscv_xlen == 64
  uint64_t v;
  asm volatile("rdtime %0" : "=r"(v));
  return v;
#else
  return cycles_fallback();
#endif
}

constexpr unsigned kMaxCpus = 64;
// Per-CPU arrays indexed by cpu_slot() have one more slot, kMaxCpus, which
// a thread without a CPU yet reads: kept empty, it sends the fast path to
// the slow path, which claims a CPU (cpu_id()).
constexpr unsigned kCpuSlots = kMaxCpus + 1;
constexpr unsigned kMaxArenas = 64;  // vmem arenas at once

// constinit: no dynamic initialisation, so no TLS wrapper call on the fast
// path. kMaxCpus until the thread claims a CPU. Local-exec: one %fs-relative
// load, where initial-exec takes two (the library is static and links into
// executables only). t_cpu_line: t_cpu * 64, kept beside it (set with it),
// so that the magazines' fast paths need no shift.
extern thread_local constinit unsigned t_cpu __attribute__((tls_model("local-exec")));
extern thread_local constinit uintptr_t t_cpu_line __attribute__((tls_model("local-exec")));
unsigned claim_cpu_slot();  // slow path: first call on a thread
inline unsigned cpu_id() {
  unsigned c = t_cpu;
  if (__builtin_expect(c < kMaxCpus, 1)) return c;
  return claim_cpu_slot();
}
inline unsigned cpu_slot() { return t_cpu; }
inline uintptr_t cpu_line_offset() { return t_cpu_line; }
// The thread's context (platform.h): its kernel tid, looked up once.
extern thread_local constinit uint32_t t_context __attribute__((tls_model("local-exec")));
uint32_t context_slow();
inline uint32_t context() {
  uint32_t c = t_context;
  return __builtin_expect(c != 0, 1) ? c : context_slow();
}
unsigned cpu_count();
// c + 1, stored relaxed, where the calling CPU (thread) is c's only writer
// and others read it relaxed (statistics). On x86-64 one add to memory,
// which shortens the page pair's free: GCC does not fuse a load, an add and
// an atomic store into one. The add is no atomic read-modify-write: a
// second writer could lose counts. ThreadSanitizer
// does not see the asm's store; an aligned 8-byte store is single-copy
// atomic on x86-64, so a relaxed reader sees the old count or the new.
inline void count_own(uintptr_t& c) {
#if defined(__x86_64__)
  asm volatile("addq $1, %0" : "+m"(c));
#else
  __atomic_store_n(&c, __atomic_load_n(&c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
#endif
}


// Bit scans of a non-zero word (bsr/bsf, clz, ...: the host compilers have
// the instructions or libgcc).
inline unsigned highest_bit(uintptr_t x) {
  return static_cast<unsigned>(8 * sizeof x - 1) ^ static_cast<unsigned>(__builtin_clzl(x));
}
inline unsigned lowest_bit(uintptr_t x) { return static_cast<unsigned>(__builtin_ctzl(x)); }

// Threads have no interrupts: masking is free. In debug builds (MM_DEBUG:
// the host tests) it is counted per thread, so that tests can check what
// runs with "interrupts masked" (irqs_masked), as the kernel would.
using IrqState = int;
#if defined(MM_DEBUG)
extern thread_local constinit int t_irq_masked;
inline IrqState irq_save() { return t_irq_masked++; }
inline void irq_restore(IrqState s) { t_irq_masked = s; }
inline bool irqs_masked() { return t_irq_masked != 0; }
#else
inline IrqState irq_save() { return 0; }
inline void irq_restore(IrqState) {}
inline bool irqs_masked() { return false; }
#endif

// Restartable per-CPU sections: none on the host (mm/platform_norseq.h).

// Adds d (subtracts it: kSub) to the 64-bit word at base + 8 * index (allocation profiling's
// counters): atomic, since threads beyond kMaxCpus share the last slot.
template <bool kSub = false>
__attribute__((always_inline)) inline void cpu_add_indexed(uintptr_t base, uintptr_t index, int64_t d) {
  __atomic_fetch_add(reinterpret_cast<int64_t*>(base) + index, kSub ? -d : d, __ATOMIC_RELAXED);
}

// Set while this thread runs a stop_others fn (mm/host/platform.cpp): the
// other CPUs' threads are stopped, possibly holding a lock, so a fn that
// waits for one would wait forever. In debug builds (MM_DEBUG) Lock::lock()
// reports that (fatal, after two seconds) instead of hanging; only its
// contended path looks.
extern thread_local constinit bool t_in_stop_fn;
void stop_fn_waits_for_lock(const void* lock);

// A test-and-test-and-set spinlock. The exchange that takes it acquires
// (what the previous holder wrote before its releasing store in unlock() is
// visible inside); the wait spins on plain loads. The lock word is 32 bits:
// RISC-V has no byte-wide atomic exchange, and GCC would call libatomic for
// a bool, which a program linking the library would then need too.
// What is only for checking is kept in debug builds (MM_DEBUG), as the
// interrupt masking above: the owner, for held(), and the stop_others
// check. Without them lock() calls nothing, so the allocators' fast paths
// that take a lock need no stack frame (vmem.cpp); held() then only says
// whether anyone holds it (MM_DEBUG_ASSERT, its one user, is off).
class Lock {
 public:
  void lock() {
    while (word_.exchange(1, std::memory_order_acquire)) {
      while (word_.load(std::memory_order_relaxed)) {
#if defined(MM_DEBUG)
        if (__builtin_expect(t_in_stop_fn, 0)) stop_fn_waits_for_lock(this);
#endif
        cpu_relax();
      }
    }
    set_owner(self());
  }
  bool try_lock() {
    if (word_.load(std::memory_order_relaxed) || word_.exchange(1, std::memory_order_acquire)) return false;
    set_owner(self());
    return true;
  }
  void unlock() {
    set_owner(nullptr);
    word_.store(0, std::memory_order_release);
  }
  bool is_locked() const { return word_.load(std::memory_order_relaxed) != 0; }
  // Held by the calling thread (for assertions; see above).
  bool held() const {
#if defined(MM_DEBUG)
    return is_locked() && owner_.load(std::memory_order_relaxed) == self();
#else
    return is_locked();
#endif
  }

 private:
  void set_owner([[maybe_unused]] const void* owner) {
#if defined(MM_DEBUG)
    owner_.store(owner, std::memory_order_relaxed);
#endif
  }
  static const void* self() {
    static thread_local char id;
    return &id;
  }
  std::atomic<uint32_t> word_{0};  // word-sized: no sub-word atomics on riscv64
  std::atomic<const void*> owner_{nullptr};
};

extern uint8_t* g_direct_map;     // virtual address of physical g_phys_base
extern uint64_t g_phys_base;
// The heap is mapped into its own window (mm/segkmem.cpp, The physical heap:
// the physical heap is the kernel's, on an arch without an MMU).
constexpr bool kPhysicalHeap = false;

inline void* phys_to_virt(uint64_t pa) { return g_direct_map + (pa - g_phys_base); }
inline uint64_t virt_to_phys(const void* va) { return g_phys_base + static_cast<uint64_t>(static_cast<const uint8_t*>(va) - g_direct_map); }

}  // namespace mm::plat
