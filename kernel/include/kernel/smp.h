// SPDX-License-Identifier: Apache-2.0
// Running work on other cores.
#pragma once
#include <kernel/percpu.h>

namespace smp {
// Starts every core the DTB lists (boot core excluded) and waits for them.
void start_secondaries();
// True in an interrupt handler or inside a cross-call's fn, where none of
// the calls below may be made (they ASSERT it): their completion IPI could
// not be taken, or the call lock is held by the core waiting for this one.
bool in_cross_call();
// Runs fn(arg) on cpu and waits for it to finish. On the calling core it is
// a plain call.
void call_on(unsigned cpu, void (*fn)(void*), void* arg);
// Runs fn(arg) on every online core at once (the caller's included) and
// waits for all of them.
void call_on_all(void (*fn)(void*), void* arg);
// Runs fn(arg) on the calling core while every other online core waits in
// a known loop with interrupts masked (the arch's park_* hooks), then has
// each of them run arch::sync_instructions() before it resumes. Like
// Linux's stop_machine: for changes no other core may run through while
// they are half done, such as rewriting kernel instructions where the ISA
// does not allow concurrent modification and execution (RISC-V without
// Ziccif). fn must not make cross-calls (the parked cores cannot answer);
// it may map and unmap (parked cores still answer TLB shootdowns). Same
// restrictions as call_on_all for the caller.
void stop_others(void (*fn)(void*), void* arg);
// Posts fn(arg) to another online core and returns at once; fn runs there
// from its idle loop. A later call to that core (any of the three) first
// waits for fn to finish. False (and nothing posted) if cpu is the calling
// core, offline or out of range.
bool call_async(unsigned cpu, void (*fn)(void*), void* arg);
// Inside a call_async fn: does another call to this core wait for it to
// finish? A fn that runs until told to stop (a test holding the core)
// returns early then, so that no other cross-call (static-branch patching,
// a reap, a bench) waits on it without end. Advisory: polled.
bool another_call_waits();
// Freezes every other online core wherever it is running, runs fn(arg) on
// this one with interrupts masked, then lets them go: unlike stop_others,
// a core busy with a long call (a background workload) is stopped in the
// middle of it. For readers of other cores' state: whatis, the leak
// scanner. A core freezes in its IPI handler, so never inside a region
// with interrupts masked (never holding a lock taken that way, never in a
// per-CPU fast path), with its interrupted registers saved in the trap
// frame on its own stack; a core with interrupts masked freezes when it
// unmasks. fn must not wait for other cores (no calls, no TLB shootdowns).
// Same restrictions as call_on_all for the caller.
void freeze_others(void (*fn)(void*), void* arg);
// The idle loop of a secondary core: waits for calls.
[[noreturn]] void idle_loop();
}  // namespace smp
