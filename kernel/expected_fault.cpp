// SPDX-License-Identifier: Apache-2.0
// Faults provoked on purpose and recovered from: see
// kernel/include/kernel/expected_fault.h.
//
// The armed fault hangs off this core's PerCpu (expected_fault). Only this
// core's trap handlers read it, and a fault is precise: the compiler
// barriers below are all the ordering it needs (no other core looks).
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/expected_fault.h>
#include <kernel/format.h>
#include <kernel/panic.h>
#include <kernel/percpu.h>
#include <atomic>

namespace expected_fault {

bool run(ExpectedFault& e, void (*fn)(void*), void* arg) {
  PerCpu& cpu = this_cpu();
  ASSERT(!cpu.expected_fault);
  e.happened = false;
  e.report[0] = 0;
  cpu.expected_fault = &e;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // armed before fn can fault
  bool returned = arch::call_with_recovery(fn, arg, e.resume);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  cpu.expected_fault = nullptr;
  return returned;
}

ExpectedFault* armed(ExpectedFault::Kind k) {
  ExpectedFault* e = this_cpu().expected_fault;
  return e && e->kind == k ? e : nullptr;
}

void recover(ExpectedFault& e, uintptr_t pc, uintptr_t address, const char* cause) {
  PerCpu& cpu = this_cpu();
  cpu.last_fault.address = address;
  cpu.last_fault.pc = pc;
  cpu.last_fault.cause = cause;
  if (e.kind == ExpectedFault::kStackOverflow)
    ksnprintf(e.report, sizeof e.report, "stack overflow on cpu %u (expected): pc 0x%lx, fault at 0x%lx",
              cpu.index, static_cast<unsigned long>(pc), static_cast<unsigned long>(address));
  else
    ksnprintf(e.report, sizeof e.report, "fault (expected) on cpu %u: %s at pc 0x%lx", cpu.index, cause,
              static_cast<unsigned long>(pc));
  kprintf("%s\n", e.report);
  e.happened = true;
  arch::resume_recovery(e.resume);
}

void instruction_fetch(uintptr_t pc, uintptr_t address, const char* cause) {
  ExpectedFault* e = armed(ExpectedFault::kInstructionFetch);
  if (e && pc == e->address && address == e->address) recover(*e, pc, address, cause);
}

bool probe_execute(uintptr_t addr) {
  ExpectedFault e;
  e.kind = ExpectedFault::kInstructionFetch;
  e.address = addr;
  arch::IrqState s = arch::irq_save();
  bool returned = run(e, [](void* a) { reinterpret_cast<void (*)()>(a)(); }, reinterpret_cast<void*>(addr));
  arch::irq_restore(s);
  return !returned;
}

}  // namespace expected_fault
