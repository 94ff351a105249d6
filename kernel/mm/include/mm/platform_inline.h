// SPDX-License-Identifier: Apache-2.0
// mm/'s inline platform operations in the kernel (the contract is in
// mm/include/mm/platform.h).
#pragma once
#include <mm/hook_mode.h>
#include <cstddef>
#include <kernel/config.h>
#include <kernel/percpu.h>
#include <kernel/spinlock.h>
#include <arch/ops.h>
#if __has_include(<arch/rseq.h>)
#include <arch/rseq.h>
#else
#include <mm/platform_norseq.h>
#endif

namespace mm::plat {
extern bool g_alloc_hooks, g_free_hooks;  // kernel/mm/platform.cpp: where the arch has no static branches
}

namespace mm::plat {

constexpr unsigned kMaxCpus = ::kMaxCpus;
constexpr unsigned kCpuSlots = kMaxCpus + 1;  // see mm/host/mm_platform.h
constexpr unsigned kMaxArenas = ::kMaxVmemArenas;  // vmem arenas at once
inline unsigned cpu_id() { return ::cpu_id(); }
// Word-sized where the arch keeps the index in a register (arch/ops.h,
// cpu_index), so that a fast path indexes with it directly.
#if defined(ARCH_HAS_CPU_INDEX)
inline uintptr_t cpu_slot() { return arch::cpu_index(); }
inline uintptr_t cpu_line_offset() { return arch::cpu_index() * 64; }  // folded into the add that uses it
#else
inline unsigned cpu_slot() { return cpu_id(); }
inline uintptr_t cpu_line_offset() { return arch::this_cpu()->line_offset; }  // kept scaled (kernel/percpu.h)
#endif
inline unsigned cpu_count() { return g_cpu_count; }
// A word another CPU may store (relaxed) while this one loads it on a fast
// path: a plain load. An aligned word is single-copy atomic on every arch
// we run on, and an __atomic load would keep GCC from folding an offset or
// an index into the load's addressing (its atomic patterns take a base
// register only on arm64), an address computation more on every free.
template <typename T>
inline T load_shared(const T& v) {
  return v;
}
// c + 1, stored relaxed, where this CPU is c's only writer and others read
// it relaxed (statistics); with interrupts masked (the masked fast paths).
inline void count_own(uintptr_t& c) {
  __atomic_store_n(&c, __atomic_load_n(&c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}
// This CPU's kmemtrace ring header (PerCpu::trace_ring), for the
// restartable ring write (trace/record.h): a load through the register
// that holds this CPU's PerCpu.
inline char* trace_ring() { return static_cast<char*>(arch::this_cpu()->trace_ring); }
// What this CPU runs (kernel/context.h), for the debug modes' audit.
inline uint32_t context() { return arch::this_cpu()->context; }

inline void cpu_relax() { arch::cpu_relax(); }
inline unsigned highest_bit(uintptr_t x) { return arch::highest_bit(x); }
inline unsigned lowest_bit(uintptr_t x) { return arch::lowest_bit(x); }

using IrqState = arch::IrqState;
inline IrqState irq_save() { return arch::irq_save(); }
inline void irq_restore(IrqState s) { arch::irq_restore(s); }
inline bool irqs_masked() { return !arch::irqs_enabled(); }

// Restartable per-CPU sections (kernel/include/kernel/rseq.h), where the
// arch has them: the magazine pop and push and the per-CPU counters run
// with interrupts enabled, and an interrupt inside one rewinds it. The
// functions that inline them go into .text.rseq (MM_RESTARTABLE_TEXT).
// An entry point whose every call is a tail call (the fast paths'
// kmem_cache_alloc/free, kmem_alloc/free): without a frame pointer it needs
// no frame at all, where -fno-omit-frame-pointer would give it one on every
// call (riscv64, arm: GCC does not shrink-wrap it onto the branches that
// call). Nothing is lost to backtraces: a tail call leaves no frame of its
// caller anyway. tests/kernel/image-check.sh checks that these functions
// make no other call, which would break the frame-pointer chain.
#define MM_FRAMELESS __attribute__((optimize("omit-frame-pointer")))
// What such an entry point passes its out-of-line copies and slow paths as
// its caller: 0, "take your own return address", which is the entry
// point's caller because the call is a tail call (BOARD/frameless checks).
#define MM_ENTRY_CALLER() uintptr_t{0}
#if defined(ARCH_HAS_RSEQ)
constexpr bool kRestartable = true;
#define MM_RESTARTABLE_TEXT ARCH_RSEQ_TEXT
using arch::RseqPush;
using arch::kRseqPushed;
using arch::kRseqFull;
using arch::kRseqOnTop;
using arch::rseq_pop;
using arch::rseq_push;
using arch::rseq_inc;
using arch::rseq_pop_pair;
using arch::rseq_push_pair;
#endif  // otherwise mm/platform_norseq.h

// Adds d (subtracts it: kSub) to this CPU's 64-bit word at base + 8 *
// index (allocation profiling's counters): a restartable section where the
// arch has one for it, else with interrupts masked.
template <bool kSub = false>
__attribute__((always_inline)) inline void cpu_add_indexed(uintptr_t base, uintptr_t index, int64_t d) {
#if defined(ARCH_HAS_RSEQ)
  arch::cpu_add_indexed<kSub>(base, index, d);
#else
  auto s = arch::irq_save();
  reinterpret_cast<int64_t*>(base)[index] += kSub ? -d : d;
  arch::irq_restore(s);
#endif
}

// kmemtrace's sequence numbers from a clock every CPU reads alike, where
// the arch (riscv64: the board) has one cheap enough
// (trace/include/trace/abi.h, Sequence numbers); elsewhere one counter for
// all CPUs.
#if defined(ARCH_HAS_TRACE_CLOCK)
constexpr bool kTraceClock = true;
inline uint64_t trace_clock() { return arch::trace_counter(); }
inline uint64_t trace_clock_hz() { return arch::counter_frequency(); }
#else
constexpr bool kTraceClock = false;
inline uint64_t trace_clock() { return 0; }
inline uint64_t trace_clock_hz() { return 0; }
#endif

using Lock = SpinLock;

inline uint64_t cycles() { return arch::cycles(); }

// The allocators' hook switch (mm/hooks.h): a static branch (one nop,
// patched into a branch by kernel/static_branch.cpp while a feature has the
// hooks on) where the arch has them.
__attribute__((always_inline)) inline bool alloc_hooks_on() {
#if defined(ARCH_HAS_STATIC_BRANCH)
  return arch::static_branch_alloc_hooks();
#else
  return __builtin_expect(g_alloc_hooks, 0);
#endif
}
__attribute__((always_inline)) inline bool free_hooks_on() {
#if defined(ARCH_HAS_STATIC_BRANCH)
  return arch::static_branch_free_hooks();
#else
  return __builtin_expect(g_free_hooks, 0);
#endif
}
// The same switches as three ways (HookMode), for the entry points that
// have a fast path of kmemtrace's own: one site, the nop while off, and
// while kmemtrace alone has the switch on a branch straight to that path
// (the site's alt) instead of to the hooked copy that would pick it.
static_assert(static_cast<unsigned>(HookMode::kHooked) == 1 && static_cast<unsigned>(HookMode::kTraceOnly) == 2,
              "arch::static_branch_*_mode's values");
__attribute__((always_inline)) inline HookMode alloc_hooks_mode() {
#if defined(ARCH_HAS_STATIC_BRANCH)
  return static_cast<HookMode>(arch::static_branch_alloc_mode());
#else
  return alloc_hooks_on() ? HookMode::kHooked : HookMode::kOff;
#endif
}
__attribute__((always_inline)) inline HookMode free_hooks_mode() {
#if defined(ARCH_HAS_STATIC_BRANCH)
  return static_cast<HookMode>(arch::static_branch_free_mode());
#else
  return free_hooks_on() ? HookMode::kHooked : HookMode::kOff;
#endif
}

// Ticks since boot at kTimerHz from the counter (the cores' tick counts
// stop while they idle): counter / (frequency / kTimerHz), as the high half
// of the counter's product with the divisor's reciprocal (platform.cpp):
// every allocation stamps one while kmemleak is on, and a 64-bit division
// is a library call on 32-bit ARM. The counter is the arch's
// coarse_counter(): the counter itself on ARM (at most one tick short,
// ever), the reading of the latest timer tick on RISC-V, where reading the
// counter may trap to the firmware (at most two ticks short while the
// harts take their ticks). The
// reciprocal is set at boot (init_ticks, from mm's init, once the DTB has
// given the counter's rate), before any allocation can ask.
extern uint64_t g_tick_reciprocal;
void init_ticks();
inline uint64_t high_product(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#else
  uint64_t al = static_cast<uint32_t>(a), ah = a >> 32, bl = static_cast<uint32_t>(b), bh = b >> 32;
  uint64_t ll = al * bl, hl = ah * bl, lh = al * bh, hh = ah * bh;
  uint64_t mid = (ll >> 32) + static_cast<uint32_t>(hl) + static_cast<uint32_t>(lh);
  return hh + (hl >> 32) + (lh >> 32) + (mid >> 32);
#endif
}
inline uint64_t ticks() { return high_product(arch::coarse_counter(), g_tick_reciprocal); }

// Whether the heap is physical: no MMU to map pages into a virtual window,
// so segkmem hands out runs of contiguous frames at their own addresses
// (mm/segkmem.cpp, The physical heap). The arch says (armv7m).
constexpr bool kPhysicalHeap = !arch::kHasMmu;

// RAM is identity-mapped in the kernel.
inline void* phys_to_virt(uint64_t pa) { return reinterpret_cast<void*>(static_cast<uintptr_t>(pa)); }
inline uint64_t virt_to_phys(const void* va) { return reinterpret_cast<uintptr_t>(va); }

}  // namespace mm::plat
