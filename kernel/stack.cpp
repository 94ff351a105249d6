// SPDX-License-Identifier: Apache-2.0
// Kernel stacks and stack overflows: see kernel/include/kernel/stack.h.
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/expected_fault.h>
#include <kernel/format.h>
#include <kernel/panic.h>
#include <kernel/percpu.h>
#include <kernel/stack.h>

// In .noinit, after the page tables (linker/kernel.ld.in): the boot core
// runs on slot 0 before .bss is cleared.
__attribute__((section(".kstacks"))) KernelStacks g_kernel_stacks[kMaxCpus];

namespace kstack {

void assign(PerCpu& cpu) {
  KernelStacks& s = g_kernel_stacks[cpu.index];
  cpu.stack_bottom = reinterpret_cast<uintptr_t>(s.stack);
  cpu.stack_top = cpu.stack_bottom + sizeof s.stack;
  cpu.overflow_top = reinterpret_cast<uintptr_t>(s.overflow) + sizeof s.overflow;
}

bool find(uintptr_t addr, uintptr_t& lo, uintptr_t& hi) {
  const PerCpu& cpu = this_cpu();
  if (addr >= cpu.stack_bottom && addr < cpu.stack_top) {
    lo = cpu.stack_bottom;
    hi = cpu.stack_top;
    return true;
  }
  if (cpu.overflow_top && addr >= cpu.overflow_top - KSTACK_OVERFLOW_SIZE && addr < cpu.overflow_top) {
    lo = cpu.overflow_top - KSTACK_OVERFLOW_SIZE;
    hi = cpu.overflow_top;
    return true;
  }
  return false;
}

void overflow(const TrapFrame* frame, uintptr_t fault_addr) {
  PerCpu& cpu = this_cpu();
  if (cpu.overflow_depth++) {
    // The overflow stack overflowed, or reporting faulted: the trap entry
    // has just reused the overflow stack, so say the least and stop.
    kprintf("\nstack overflow on cpu %u while handling a stack overflow; halted\n", cpu.index);
    arch::exit(3);
  }
  uintptr_t sp = arch::trap_frame_sp(frame);
  uintptr_t pc = arch::trap_frame_pc(frame);
  if (ExpectedFault* e = expected_fault::armed(ExpectedFault::kStackOverflow)) {
    cpu.overflow_depth = 0;
    expected_fault::recover(*e, pc, fault_addr, "stack overflow");
  }
  char where[48] = "";
  if (fault_addr) ksnprintf(where, sizeof where, ", fault at 0x%lx", static_cast<unsigned long>(fault_addr));
  panic_trap(frame, "stack overflow on cpu %u: sp 0x%lx, stack 0x%lx-0x%lx%s, pc 0x%lx", cpu.index,
             static_cast<unsigned long>(sp), static_cast<unsigned long>(cpu.stack_bottom),
             static_cast<unsigned long>(cpu.stack_top), where, static_cast<unsigned long>(pc));
}

namespace {
volatile unsigned g_depth_limit = ~0u;  // never reached: keeps the recursion from looking infinite

// Each level keeps a 256-byte frame live across the call (no tail call).
NOINLINE unsigned descend(unsigned depth) {
  volatile char frame[256];
  frame[0] = static_cast<char>(depth);
  frame[255] = static_cast<char>(depth >> 8);
  if (depth >= g_depth_limit) return 0;
  return descend(depth + 1) + frame[0] + frame[255];
}
}  // namespace

void run_off_the_end() { (void)descend(0); }

}  // namespace kstack
