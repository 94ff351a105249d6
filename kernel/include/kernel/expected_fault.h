// SPDX-License-Identifier: Apache-2.0
// Faults the kernel provokes on purpose (tests, probes) and recovers from.
//
// A caller arms one expected fault on its core and calls a function. If the
// fault happens while the function runs, the trap handler records it
// (PerCpu::last_fault, and a one-line report ending in "(expected)") and
// resumes the caller as if the function had returned, with the caller's
// callee-saved registers, stack and interrupt state (arch::
// call_with_recovery). These are the faults with no next instruction to go
// on at, unlike arch::probe_write's exception table: a stack overflow (the
// whole stack below the caller is given up) and an instruction fetch that
// faults (there is no instruction at all).
//
// Anything else that faults meanwhile is as fatal as ever. The function
// should run with interrupts masked: an interrupt handler cut short by the
// recovery would never complete its interrupt.
#pragma once
#include <cstdint>
#include <kernel/arch.h>

struct ExpectedFault {
  enum Kind : unsigned { kStackOverflow, kInstructionFetch };
  Kind kind = kStackOverflow;
  uintptr_t address = 0;  // kInstructionFetch: where the function branches to
  arch::RecoveryPoint resume{};
  bool happened = false;
  char report[112] = {};  // the line the handler printed (without "\n")
};

namespace expected_fault {

// Runs fn(arg) on this core with e armed. True if fn returned; false if
// the expected fault happened (e.happened, e.report and this core's
// last_fault say what it was). One at a time per core.
bool run(ExpectedFault& e, void (*fn)(void*), void* arg);

// The armed fault of this core if it is of kind k, else null. For the
// trap handlers.
ExpectedFault* armed(ExpectedFault::Kind k);

// Records the fault in e and this core's last_fault, prints the report and
// resumes the caller of run(). cause is the arch's description.
[[noreturn]] void recover(ExpectedFault& e, uintptr_t pc, uintptr_t address, const char* cause);

// From the arch's trap handlers on an instruction fetch fault (instruction
// abort, prefetch abort, instruction page or access fault) at pc: resumes
// the caller of run() if this core expects exactly this one (at the address
// it branched to); returns otherwise.
void instruction_fetch(uintptr_t pc, uintptr_t address, const char* cause);

// Whether the instruction at addr cannot be executed: branches there with
// a return address to come back to, expecting an instruction fetch fault,
// interrupts masked. True: it faulted. False: it ran, so addr must hold an
// instruction that returns (arch::return_instruction) or the caller gets
// whatever it held.
bool probe_execute(uintptr_t addr);

}  // namespace expected_fault
