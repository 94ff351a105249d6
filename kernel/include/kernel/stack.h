// SPDX-License-Identifier: Apache-2.0
// Kernel stacks: one slot per CPU with a guard page below each stack
// (layout in kernel/stack_layout.h), and what happens when a stack runs
// into its guard.
//
// 1. Where they are. g_kernel_stacks lives in the image's .noinit area, past
//    the page tables (linker/kernel.ld.in), so no stack is adjacent to the
//    tables and nothing needs clearing. The arch's early MMU code leaves
//    every guard page unmapped (kstack::guard_page lists them).
// 2. How an overflow is caught. PerCpu::stack_bottom is the lowest address
//    of the stack the core runs on. Every trap entry compares sp with it
//    before it saves anything: if the trap frame would not fit above
//    stack_bottom, the entry saves the frame on the core's overflow stack
//    instead (PerCpu::overflow_top) and calls kstack::overflow. So the
//    store that hit the guard is reported, and so is a trap taken with the
//    stack nearly full, which would otherwise fault again while saving
//    its frame and never get anywhere. Each arch needs a scratch register
//    for the comparison: arm64 TPIDR_EL0, riscv64 sscratch (no user space
//    uses them); on arm the exception modes' own banked sp point at small
//    per-CPU save areas.
// 3. What happens then. kstack::overflow panics with "stack overflow on
//    cpu N", the registers and a backtrace (the walk goes from the overflow
//    stack back onto the kernel stack), unless the core armed an expected
//    overflow (kernel/expected_fault.h): then it records the fault and
//    resumes the caller that armed it. An overflow of the overflow stack
//    itself halts with a one-line message.
// 4. A frame larger than a guard page could step over it: the kernel is
//    built with -Wframe-larger-than (kernel/CMakeLists.txt).
#pragma once
#include <cstddef>
#include <cstdint>
#include <kernel/config.h>

struct PerCpu;
struct TrapFrame;

struct alignas(KSTACK_GUARD_SIZE ? KSTACK_GUARD_SIZE : 8) KernelStacks {
  char guard_low[KSTACK_GUARD_SIZE];  // below the overflow stack: unmapped
  char overflow[KSTACK_OVERFLOW_SIZE];
  char guard[KSTACK_GUARD_SIZE];  // below the kernel stack: unmapped
  char stack[KSTACK_SIZE];
};
static_assert(sizeof(KernelStacks) == KSTACK_SLOT_SIZE);

extern "C" KernelStacks g_kernel_stacks[kMaxCpus];

namespace kstack {

constexpr unsigned kGuardPages = 2 * kMaxCpus;

// The i-th guard page (0 .. kGuardPages-1). Pure arithmetic on the array's
// address: usable with the MMU off, before .bss is cleared.
inline uintptr_t guard_page(unsigned i) {
  const KernelStacks& s = g_kernel_stacks[i / 2];
  return reinterpret_cast<uintptr_t>(i % 2 ? s.guard : s.guard_low);
}

// Gives cpu (by its index) its kernel stack and overflow stack. Before the
// core starts (secondaries) or installs its trap vectors (the boot core).
void assign(PerCpu& cpu);

// The stack of this core holding addr (its kernel stack or its overflow
// stack): [lo, hi). False if addr is on neither. For backtraces.
bool find(uintptr_t addr, uintptr_t& lo, uintptr_t& hi);

// Called by the arch's trap entry, on the overflow stack, when the stack
// had no room for the trap frame (How an overflow is caught). fault_addr is the data address
// that faulted, 0 if the trap was not a data abort.
[[noreturn]] void overflow(const TrapFrame* frame, uintptr_t fault_addr);

// Recurses until the stack runs into its guard page: a stack overflow on
// purpose (the `crash stack` command, tests). Returns only if nothing
// stopped it, which is a bug the caller should report.
void run_off_the_end();

}  // namespace kstack
