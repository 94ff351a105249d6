// SPDX-License-Identifier: Apache-2.0
// AArch64 inline operations for portable code (see kernel/arch.h).
#pragma once
#include <cstdint>
#include <kernel/bitscan_builtin.h>  // highest_bit, lowest_bit

struct PerCpu;

namespace arch {

// An MMU (page tables, guard pages, W^X), and frame records a frame-pointer
// walk follows (kernel/backtrace.cpp).
constexpr bool kHasMmu = true;
constexpr bool kHasFrameRecords = true;

using IrqState = uint64_t;

// RAM the identity map can reach (39-bit virtual addresses, lower half used
// for RAM and devices; the heap window sits above it).
constexpr uint64_t kDirectMapLimit = uint64_t{1} << 38;

inline IrqState irq_save() {
  uint64_t daif;
  asm volatile("mrs %0, daif\n msr daifset, #2" : "=r"(daif)::"memory");
  return daif;
}
inline void irq_restore(IrqState s) { asm volatile("msr daif, %0" ::"r"(s) : "memory"); }
inline void irq_enable() { asm volatile("msr daifclr, #2" ::: "memory"); }
inline void irq_disable() { asm volatile("msr daifset, #2" ::: "memory"); }
inline bool irqs_enabled() {
  uint64_t daif;
  asm volatile("mrs %0, daif" : "=r"(daif));
  return !(daif & (1u << 7));
}

// Spin-wait hint; under QEMU's icount it also lets another vCPU run.
inline void cpu_relax() { asm volatile("yield" ::: "memory"); }

inline void wait_for_interrupt() { asm volatile("dsb sy\n wfi" ::: "memory"); }

inline PerCpu* this_cpu() {
  PerCpu* p;
  asm("mrs %0, tpidr_el1" : "=r"(p));  // not volatile: constant for a thread of control
  return p;
}
inline void set_this_cpu(PerCpu* p) { asm volatile("msr tpidr_el1, %0" ::"r"(p) : "memory"); }
// TPIDRRO_EL0 holds this core's index (PerCpu::index), set with TPIDR_EL1
// (start.S for the secondaries, before any C++ runs on them; zero for the
// boot core as it enters): cpu_index() is one register read where
// this_cpu()->index is a read and a dependent load, on every fast path
// that finds its per-CPU slot. No user space runs here to read it.
#define ARCH_HAS_CPU_INDEX 1
// (Word-sized, so that indexing with it needs no zero-extension.)
inline uintptr_t cpu_index() {
  uintptr_t i;
  asm("mrs %0, tpidrro_el0" : "=r"(i));  // not volatile: constant for a thread of control
  return i;
}

// The generic timer's virtual counter and its frequency.
inline uint64_t counter() {
  uint64_t v;
  asm volatile("isb\n mrs %0, cntvct_el0" : "=r"(v)::"memory");
  return v;
}
inline uint64_t counter_frequency() {
  uint64_t v;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(v));
  return v;
}
// The counter for time stamps on fast paths (plat::ticks): CNTVCT is a
// register read, cheap enough to read every time.
// kmemtrace's sequence numbers come from it too (trace/include/trace/abi.h,
// Sequence numbers): every core reads the one system count, and counter()'s
// isb keeps the read after what came before it (the acquire that handed a
// buffer over).
#define ARCH_HAS_TRACE_CLOCK 1
inline uint64_t trace_counter() { return counter(); }
inline uint64_t coarse_counter() { return counter(); }

// The PMU cycle counter (enabled on every core at boot). Under QEMU with
// -icount shift=0 it counts instructions exactly.
inline uint64_t cycles() {
  uint64_t v;
  asm volatile("mrs %0, pmccntr_el0" : "=r"(v)::"memory");
  return v;
}

inline uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// Frame records (kernel/backtrace.h): x29 points at {caller's x29, x30}.
constexpr int kFrameSavedFp = 0;
constexpr int kFrameSavedRa = 8;
constexpr bool kLeafFramesSaveOnlyFp = false;

// A static branch (kernel/static_branch.cpp): false, as one nop, until the
// nop is patched into a branch to the `true` side; every site is listed in
// the section of its key as {site, target, alt}. Two keys: the allocators'
// hooks on allocation (.static_branches) and on free
// (.static_branches.free). A three-way site (static_branch_*_mode) has a
// second target, alt, which kmemtrace alone gets (mm/hook_mode.h); a two-way site lists its one target twice.
#define ARCH_HAS_STATIC_BRANCH 1
constexpr unsigned kStaticBranchSiteAlign = 4;  // every instruction's
#define ARCH_STATIC_BRANCH(section) \
  asm goto(                                \
      "1: nop\n"                           \
      ".pushsection " section ", \"a\"\n"  \
      ".balign 8\n"                        \
      ".quad 1b, %l[on], %l[on]\n"         \
      ".popsection\n" ::::on);             \
  return false;                            \
on:                                        \
  return true;
#define ARCH_STATIC_BRANCH_MODE(section) \
  asm goto(                                   \
      "1: nop\n"                              \
      ".pushsection " section ", \"a\"\n"     \
      ".balign 8\n"                           \
      ".quad 1b, %l[hooked], %l[alt]\n"       \
      ".popsection\n" ::::hooked, alt);       \
  return 0;                                   \
hooked:                                       \
  return 1;                                   \
alt:                                          \
  return 2;
__attribute__((always_inline)) inline bool static_branch_alloc_hooks() { ARCH_STATIC_BRANCH(".static_branches") }
__attribute__((always_inline)) inline bool static_branch_free_hooks() { ARCH_STATIC_BRANCH(".static_branches.free") }
// 0: the nop; 1: branched to the site's target; 2: to its alt.
__attribute__((always_inline)) inline unsigned static_branch_alloc_mode() { ARCH_STATIC_BRANCH_MODE(".static_branches") }
__attribute__((always_inline)) inline unsigned static_branch_free_mode() { ARCH_STATIC_BRANCH_MODE(".static_branches.free") }
#undef ARCH_STATIC_BRANCH_MODE
#undef ARCH_STATIC_BRANCH

}  // namespace arch
