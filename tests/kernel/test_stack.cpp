// SPDX-License-Identifier: Apache-2.0
// Stack guards: every stack has an unmapped guard page below it, and a
// stack that runs into it is reported as "stack overflow on cpu N" (here
// an expected one, which the kernel recovers from) on every core.
#include <kernel/arch.h>
#include <kernel/expected_fault.h>
#include <kernel/ktest.h>
#include <kernel/percpu.h>
#include <kernel/smp.h>
#include <kernel/stack.h>
#include <kernel/string.h>
#include <kernel/format.h>

KTEST(every_stack_has_an_unmapped_guard_page_below_it) {
  if (!arch::kHasMmu) KSKIP("no MMU: no guard pages");
  for (unsigned i = 0; i < kstack::kGuardPages; i++) {
    uintptr_t g = kstack::guard_page(i);
    KEXPECT_EQ(arch::translate(g), 0u);
    KEXPECT_EQ(arch::translate(g + KSTACK_GUARD_SIZE - 8), 0u);
    KEXPECT(arch::probe_write(g + KSTACK_GUARD_SIZE - 8, 0));
    KEXPECT_EQ(this_cpu().last_fault.address, g + KSTACK_GUARD_SIZE - 8);
    // The stack right above it is there (identity-mapped RAM).
    uintptr_t above = g + KSTACK_GUARD_SIZE;
    KEXPECT_EQ(arch::translate(above), uint64_t{above});
  }
  // Every core runs on the stack of its slot, with its overflow stack.
  for_each_cpu([](PerCpu& c) {
    const KernelStacks& s = g_kernel_stacks[c.index];
    KEXPECT_EQ(c.stack_bottom, reinterpret_cast<uintptr_t>(s.stack));
    KEXPECT_EQ(c.stack_top, reinterpret_cast<uintptr_t>(s.stack) + KSTACK_SIZE);
    KEXPECT_EQ(c.overflow_top, reinterpret_cast<uintptr_t>(s.overflow) + KSTACK_OVERFLOW_SIZE);
  });
}

namespace {
struct OverflowRun {
  ExpectedFault e;
  bool returned;
  FaultRecord fault;
  unsigned cpu;
  uintptr_t stack_bottom;
};

// On the core under test: run off the end of its own stack, interrupts
// masked (an interrupt handler must not be cut short by the recovery).
void overflow_here(void* arg) {
  auto* r = static_cast<OverflowRun*>(arg);
  PerCpu& me = this_cpu();
  r->cpu = me.index;
  r->stack_bottom = me.stack_bottom;
  me.last_fault = {};
  r->e.kind = ExpectedFault::kStackOverflow;
  arch::IrqState s = arch::irq_save();
  r->returned = expected_fault::run(r->e, [](void*) { kstack::run_off_the_end(); }, nullptr);
  arch::irq_restore(s);
  r->fault = me.last_fault;
}
}  // namespace

KTEST(stack_overflow_is_caught_on_every_cpu) {
  if (!arch::kHasMmu) KSKIP("no MMU: no guard page to catch an overflow");
  for (unsigned i = 0; i < g_cpu_count; i++) {
    if (!g_percpu[i].online.load()) continue;
    // Without its guard page the recursion would run on into whatever lies
    // below the stack: check first.
    KASSERT(arch::translate(g_percpu[i].stack_bottom - 8) == 0);
    static OverflowRun r;
    r = {};
    smp::call_on(i, overflow_here, &r);
    KEXPECT(!r.returned);
    KEXPECT(r.e.happened);
    KEXPECT_EQ(r.cpu, i);
    char want[40];
    ksnprintf(want, sizeof want, "stack overflow on cpu %u (expected)", i);
    KEXPECT(strncmp(r.e.report, want, strlen(want)) == 0);
    KEXPECT(r.fault.cause && strcmp(r.fault.cause, "stack overflow") == 0);
    // The store that ran into the guard page (a trap taken with the stack
    // nearly full has no fault address: that is caught too, but here the
    // recursion is what hits the guard).
    KEXPECT(r.fault.address < r.stack_bottom && r.fault.address >= r.stack_bottom - KSTACK_GUARD_SIZE);
    // The core goes on working, on the same stack.
    static unsigned ran;
    ran = ~0u;
    smp::call_on(i, [](void*) { ran = cpu_id(); }, nullptr);
    KEXPECT_EQ(ran, i);
  }
}
