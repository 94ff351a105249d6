// SPDX-License-Identifier: Apache-2.0
// ARMv7-A inline operations for portable code (see kernel/arch.h).
#pragma once
#include <cstdint>
#include <kernel/bitscan_builtin.h>  // highest_bit, lowest_bit

struct PerCpu;

namespace arch {

// An MMU (page tables, guard pages, W^X). Frame records a frame-pointer
// walk follows (kernel/backtrace.cpp) in ARM state; Thumb-2 code keeps
// none, and backtraces come from the unwind tables (arch/arm/unwind.cpp).
constexpr bool kHasMmu = true;
#if defined(__thumb__)
constexpr bool kHasFrameRecords = false;
#else
constexpr bool kHasFrameRecords = true;
#endif

using IrqState = uint32_t;  // the CPSR

// RAM the identity map can reach: everything below the heap window
// (arch::heap_window, 0xc0000000 up). On QEMU virt RAM starts at 0x40000000,
// so up to 2 GiB of it is mapped; RAM above is left unmapped and unused.
constexpr uint64_t kDirectMapLimit = 0xc0000000;

inline IrqState irq_save() {
  uint32_t cpsr;
  asm volatile("mrs %0, cpsr\n cpsid i" : "=r"(cpsr)::"memory");
  return cpsr;
}
inline void irq_restore(IrqState s) { asm volatile("msr cpsr_c, %0" ::"r"(s) : "memory"); }
inline void irq_enable() { asm volatile("cpsie i" ::: "memory"); }
inline void irq_disable() { asm volatile("cpsid i" ::: "memory"); }
inline bool irqs_enabled() {
  uint32_t cpsr;
  asm volatile("mrs %0, cpsr" : "=r"(cpsr));
  return !(cpsr & (1u << 7));
}

// Spin-wait hint; under QEMU's icount it also lets another vCPU run.
inline void cpu_relax() { asm volatile("yield" ::: "memory"); }

inline void wait_for_interrupt() { asm volatile("dsb\n wfi" ::: "memory"); }

// TPIDRPRW: the privileged-only thread ID register holds this core's PerCpu.
inline PerCpu* this_cpu() {
  PerCpu* p;
  asm("mrc p15, 0, %0, c13, c0, 4" : "=r"(p));  // not volatile: constant for a thread of control
  return p;
}
inline void set_this_cpu(PerCpu* p) { asm volatile("mcr p15, 0, %0, c13, c0, 4" ::"r"(p) : "memory"); }
// TPIDRURO (PL0 read-only, PL1 read-write) holds this core's index
// (PerCpu::index), set with TPIDRPRW (start.S for the secondaries, before
// any C++ runs on them; zero for the boot core as it enters): cpu_index()
// is one register read where this_cpu()->index is a read and a dependent
// load, on every fast path that finds its per-CPU slot. No user space
// runs here to read it.
#define ARCH_HAS_CPU_INDEX 1
inline uintptr_t cpu_index() {
  uintptr_t i;
  asm("mrc p15, 0, %0, c13, c0, 3" : "=r"(i));  // not volatile: constant for a thread of control
  return i;
}

// The generic timer's virtual counter (CNTVCT) and its frequency (CNTFRQ).
inline uint64_t counter() {
  uint32_t lo, hi;
  asm volatile("isb\n mrrc p15, 1, %0, %1, c14" : "=r"(lo), "=r"(hi)::"memory");
  return (uint64_t{hi} << 32) | lo;
}
inline uint64_t counter_frequency() {
  uint32_t v;
  asm volatile("mrc p15, 0, %0, c14, c0, 0" : "=r"(v));
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

// The PMU cycle counter PMCCNTR (enabled on every core at boot). It is 32
// bits wide and wraps within seconds: callers take differences of nearby
// readings. Under QEMU with -icount shift=0 it counts instructions exactly.
inline uint64_t cycles() {
  uint32_t v;
  asm volatile("mrc p15, 0, %0, c9, c13, 0" : "=r"(v)::"memory");
  return v;
}

inline uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// Frame records (kernel/backtrace.h), ARM state: a function that calls
// others pushes {fp, lr} and points fp at the saved lr; one that calls
// nothing pushes only fp and points fp at it. (Thumb-2: none; the offsets
// are never used.)
constexpr int kFrameSavedFp = -4;
constexpr int kFrameSavedRa = 0;
constexpr bool kLeafFramesSaveOnlyFp = true;

// A static branch (kernel/static_branch.cpp): false, as one nop, until the
// nop is patched into a branch to the `true` side; every site is listed in
// the section of its key as {site, target, alt}. Two keys: the allocators'
// hooks on allocation (.static_branches) and on free
// (.static_branches.free). A three-way site (static_branch_*_mode) has a
// second target, alt, which kmemtrace alone gets (mm/hook_mode.h); a two-way site lists its one target twice.
// Thumb-2: a 32-bit nop.w <-> b.w, on any halfword (arch/arm/mmu.cpp).
#define ARCH_HAS_STATIC_BRANCH 1
#if defined(__thumb__)
constexpr unsigned kStaticBranchSiteAlign = 2;  // every Thumb instruction's
#define ARCH_STATIC_BRANCH_NOP "nop.w"
#else
constexpr unsigned kStaticBranchSiteAlign = 4;  // every ARM instruction's
#define ARCH_STATIC_BRANCH_NOP "nop"
#endif
#define ARCH_STATIC_BRANCH(section) \
  asm goto(                                \
      "1: " ARCH_STATIC_BRANCH_NOP "\n"    \
      ".pushsection " section ", \"a\"\n"  \
      ".balign 4\n"                        \
      ".word 1b, %l[on], %l[on]\n"         \
      ".popsection\n" ::::on);             \
  return false;                            \
on:                                        \
  return true;
#define ARCH_STATIC_BRANCH_MODE(section) \
  asm goto(                                   \
      "1: " ARCH_STATIC_BRANCH_NOP "\n"       \
      ".pushsection " section ", \"a\"\n"     \
      ".balign 4\n"                           \
      ".word 1b, %l[hooked], %l[alt]\n"       \
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
#undef ARCH_STATIC_BRANCH_NOP

}  // namespace arch
