// Faults the kernel provokes on purpose (tests, probes) and recovers from.
//
// A caller arms one expected fault on its core and calls a function. If the
// fault happens while the function runs, the trap handler records it
// (PerCpu::last_fault, and a one-line report ending in "(expected)") and
// resumes the caller as if the function had returned, with the caller's
// callee-saved registers, stack and interrupt state (arch::
// call_with_recovery). These are the faults with no next instruction to go
// on at, unlike arch::probe_write's exception table: a stack overflow (the
// whole stack below the caller is given up).
//
// Anything else that faults meanwhile is as fatal as ever. The function
// should run with interrupts masked: an interrupt handler cut short by the
// recovery would never complete its interrupt.
#pragma once
#include <cstdint>
#include <kernel/arch.h>

struct ExpectedFault {
  enum Kind : unsigned { kStackOverflow };
  Kind kind = kStackOverflow;
  uintptr_t address = 0;
  arch::RecoveryPoint resume{};
  bool happened = false;
  char report[112] = {};        // the line the handler printed (without "\n")
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

}  // namespace expected_fault
