// SPDX-License-Identifier: Apache-2.0
// Bringing up secondary cores and running calls on them.
//
// Each secondary runs smp::idle_loop(): with interrupts masked it looks at
// its mailbox (PerCpu::call_fn); if empty it waits for an interrupt (an IPI
// or its timer tick), takes it, and looks again. Masking around the check
// means an IPI that lands between the check and wfi still wakes it.
// Calls are serialised by g_call_lock: one caller posts at a time.
//
// The caller does not spin on the result: it waits for interrupts, and the
// callee sends it an IPI when done. On hardware this saves the caller's
// power; under QEMU's round-robin TCG (every -icount run) it is what lets
// the callee run at all: a RISC-V core spinning on `pause` keeps its
// time slice (ARM's `yield` gives it up, `wfi` does on both).
//
// Ordering (what each lock-free store publishes, and which load takes it):
// - Starting a core: everything the boot core wrote before (the PerCpu
//   fields, g_boot, g_cpu_count, the page tables) is complete before the
//   firmware is asked to start it: a full fence here, and the arch's
//   start_cpu adds what its call needs (a DSB before PSCI's HVC/SMC, which
//   is not a memory access; for a spin table, the release written back to
//   memory the waiting core reads with its caches off, then `sev`:
//   arch/arm64/cpu_start.cpp). The new core reads them after its MMU is on.
// - PerCpu::online: stored with release by the core itself once it is set
//   up (its GIC interface bit, its timer, its mailbox ready); every reader
//   loads it with acquire before it posts a call or sends an IPI there.
// - The mailbox: post() writes call_arg, call_from and call_done = 0, then
//   releases them with the store of call_fn; run_mailbox's acquire load of
//   call_fn sees them. The callee releases fn's effects with call_done = 1
//   (acquired by wait_done) and frees the mailbox with call_fn = null
//   (acquired by wait_idle before the next post writes it). An IPI is not a
//   memory access: arch::send_ipi puts a barrier before raising it (GICv2:
//   a DMB before the SGI register write; the BCM2836's mailboxes: the same
//   before the mailbox write; SBI: a fence before the ecall), so
//   the stores it announces are visible to the woken core.
// - stop_others: the park's count and release flag, commented below.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/context.h>
#include <kernel/irq.h>
#include <kernel/panic.h>
#include <kernel/smp.h>
#include <kernel/spinlock.h>
#include <kernel/stack.h>
#include <kernel/timer.h>
#include <mm/kmemleak.h>

PerCpu g_percpu[kMaxCpus];
unsigned g_cpu_count = 1;

namespace {
SpinLock g_call_lock;

// Runs a cross-call's fn, marked as such: a call made from inside one would
// wait on g_call_lock, held by the caller that waits for this one.
void run_as_call(PerCpu& cpu, void (*fn)(void*), void* arg) {
  cpu.in_call++;
  fn(arg);
  cpu.in_call--;
}

// Calls wait for completion IPIs: not from an interrupt handler (the IPI
// cannot be taken before it returns) nor from inside a cross-call.
void check_caller() {
  PerCpu& self = this_cpu();
  ASSERT(self.irq_depth == 0 && self.in_call == 0);
}

bool run_mailbox(PerCpu& cpu) {
  void (*fn)(void*) = cpu.call_fn.load(std::memory_order_acquire);
  if (!fn) return false;
  // The call's frames are built where earlier calls and interrupts left
  // theirs; a slot they never write (padding) would keep a stale object
  // address on a live stack for as long as the call runs, and the leak
  // scanner would read it as a reference (a call that holds the core, as
  // `kmemleak test`'s, kept a leaked object unreported that way).
  mm::kmemleak_scrub_stack();
  // The argument is taken out of the mailbox (.bss, a root of the leak
  // scanner): left there, an object passed by address stayed referenced
  // from it until the core's next call, however long the call or the
  // caller had let go of it. (The poster's write came before its release
  // of call_fn, our acquire; this one comes before our release of
  // call_fn, which the next poster acquires before it writes.)
  void* arg = cpu.call_arg;
  cpu.call_arg = nullptr;
  {
    // What the call allocates is its caller's doing (the caller's context
    // was published with call_arg).
    context::Scope in(context::call_from(cpu.call_context));
    run_as_call(cpu, fn, arg);
  }
  // In this order: once call_fn is clear a new call may be posted (its
  // call_from, call_done = 0), which neither store below may overwrite.
  unsigned from = cpu.call_from;
  cpu.call_done.store(1, std::memory_order_release);
  cpu.call_fn.store(nullptr, std::memory_order_release);
  arch::send_ipi(g_percpu[from]);  // wakes a waiter for either; a stale one is harmless
  return true;
}

void wait_idle(PerCpu& cpu);

// wait_idle, telling a call_async fn still running there that a call
// waits for it (smp::another_call_waits).
void wait_free(PerCpu& cpu) {
  if (!cpu.call_fn.load(std::memory_order_acquire)) return;
  cpu.call_waiting.store(true, std::memory_order_relaxed);
  wait_idle(cpu);
  cpu.call_waiting.store(false, std::memory_order_relaxed);
}

// Under g_call_lock. A call posted by call_async may still be running:
// its mailbox is free once it has returned.
void post(PerCpu& cpu, void (*fn)(void*), void* arg) {
  wait_free(cpu);
  cpu.call_arg = arg;
  cpu.call_context = context::current();
  cpu.call_from = cpu_id();
  cpu.call_done.store(0, std::memory_order_relaxed);
  cpu.call_fn.store(fn, std::memory_order_release);
  arch::send_ipi(cpu);
}

// Masking around the check, as in idle_loop: a completion IPI landing
// between the check and wfi still wakes it. With interrupts already masked
// by the caller, the IPI stays pending and wfi returns at once: a spin.
template <class Done>
void wait_until(Done done) {
  while (!done()) {
    arch::IrqState s = arch::irq_save();
    if (!done()) arch::wait_for_interrupt();
    arch::irq_restore(s);
  }
}

void wait_done(PerCpu& cpu) {
  wait_until([&] { return cpu.call_done.load(std::memory_order_acquire) != 0; });
}

// The callee clears call_fn when fn has returned, then signals call_from.
void wait_idle(PerCpu& cpu) {
  wait_until([&] { return cpu.call_fn.load(std::memory_order_acquire) == nullptr; });
}
}  // namespace

unsigned cpus_online() {
  unsigned n = 0;
  for_each_cpu([&](PerCpu& c) { n += c.online.load(std::memory_order_acquire) ? 1 : 0; });
  return n;
}

namespace {
// freeze_others: the freezer sets g_stop_request (release) and sends IPIs;
// each core's IPI handler sees it (acquire), counts itself in g_stopped
// (acq_rel: its own stores before, e.g. its magazines, are visible to the
// freezer's acquire load of the count) and spins until the request is
// cleared (the freezer's release store orders what fn wrote before it),
// then counts itself out, which the freezer waits for before returning so
// that a next freeze cannot be confused with this one. Neither side spins:
// a frozen core waits in the arch's park loop (riscv64: wfi with only IPIs
// enabled, answering TLB fence requests) and is woken by the freezer's
// release IPI; the freezer waits in wfi for the IPI each core sends when it
// has counted itself in or out (g_freezer, stored before the request's
// release). Under QEMU 7.2's -icount a vCPU spinning on riscv's pause keeps
// its time slice, so spinning on both sides hung the freeze.
std::atomic<unsigned> g_stop_request{0};
std::atomic<unsigned> g_stopped{0};
unsigned g_freezer;  // the freezing core, published by g_stop_request's release

__attribute__((noinline)) void stopped_here() {
  // For the leak scanner: where this core's live stack starts (percpu.h),
  // published by the count below.
  PerCpu& self = this_cpu();
  self.frozen_sp = self.irq_frame ? reinterpret_cast<uintptr_t>(self.irq_frame)
                                  : reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t ps = arch::park_begin();
  g_stopped.fetch_add(1, std::memory_order_acq_rel);
  arch::send_ipi(g_percpu[g_freezer]);
  for (;;) {
    arch::park_poll();  // first: a wake-up consumed after the check would be lost
    if (!g_stop_request.load(std::memory_order_acquire)) break;
    arch::park_sleep();
  }
  arch::park_end(ps);
  g_stopped.fetch_sub(1, std::memory_order_release);
  arch::send_ipi(g_percpu[g_freezer]);
}
}  // namespace

// Waking the core is all a call takes (idle_loop checks the mailbox); a
// freeze request holds it here.
void ipi_interrupt() {
  context::Scope in(context::make(context::kIpi));
  // The freezer itself takes IPIs while it waits (the frozen cores' replies).
  if (g_stop_request.load(std::memory_order_acquire) && cpu_id() != g_freezer) stopped_here();
}

extern "C" void secondary_main(PerCpu* cpu) {
  cpu->context = context::make(context::kIdle);
  arch::init_secondary_cpu(*cpu);
  irq::init_cpu();
  timer::init_cpu();
  cpu->online.store(true, std::memory_order_release);
  smp::idle_loop();
}

namespace smp {

void start_secondaries() {
  g_cpu_count = g_boot.cpu_count;
  for (unsigned i = 1; i < g_cpu_count; i++) {
    PerCpu& c = g_percpu[i];
    set_index(c, i);
    c.hwid = g_boot.cpu_hwid[i];
    kstack::assign(c);
    // Everything this core wrote so far is visible to c before it runs
    // (point "Starting a core" above).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!arch::start_cpu(c)) continue;
    uint64_t deadline = timer::now_ns() + 1000000000ull;
    while (!c.online.load(std::memory_order_acquire)) {
      if (timer::now_ns() > deadline) {
        kprintf("smp: cpu %u (hwid 0x%llx) did not come online\n", i, static_cast<unsigned long long>(c.hwid));
        break;
      }
      arch::cpu_relax();
    }
  }
}

void call_on(unsigned cpu, void (*fn)(void*), void* arg) {
  ASSERT(cpu < g_cpu_count);
  check_caller();
  if (cpu == cpu_id()) {
    run_as_call(this_cpu(), fn, arg);
    return;
  }
  ASSERT(g_percpu[cpu].online.load());
  Guard<SpinLock, NoIrqSave> g(g_call_lock);
  post(g_percpu[cpu], fn, arg);
  wait_done(g_percpu[cpu]);
}

bool another_call_waits() { return this_cpu().call_waiting.load(std::memory_order_relaxed); }

bool in_cross_call() {
  PerCpu& self = this_cpu();
  return self.irq_depth != 0 || self.in_call != 0;
}

namespace {
// One smp::stop_others at a time: it runs under g_call_lock.
struct StopState {
  std::atomic<unsigned> parked{0};    // cores in the park loop
  std::atomic<bool> released{false};  // set once fn is done
  unsigned caller = 0;
};
StopState g_stop;

// On a parked core, from its mailbox (idle loop), so it is between calls.
void park(void* arg) {
  auto* st = static_cast<StopState*>(arg);
  arch::IrqState s = arch::irq_save();
  uintptr_t ps = arch::park_begin();
  // Release: the caller's acquire of the count sees this core parked
  // (interrupts masked, nothing else running here) before fn starts.
  st->parked.fetch_add(1, std::memory_order_release);
  arch::send_ipi(g_percpu[st->caller]);
  for (;;) {
    arch::park_poll();  // first: a wake-up consumed after the check below would be lost
    // Acquire: pairs with the caller's release after fn, so everything fn
    // stored (the patched instructions) is visible here before
    // sync_instructions discards what this core fetched earlier.
    if (st->released.load(std::memory_order_acquire)) break;
    arch::park_sleep();
  }
  arch::sync_instructions();
  arch::park_end(ps);
  arch::irq_restore(s);
}
}  // namespace

void stop_others(void (*fn)(void*), void* arg) {
  check_caller();
  Guard<SpinLock, NoIrqSave> g(g_call_lock);
  unsigned self = cpu_id();
  auto other = [&](const PerCpu& c) { return c.index != self && c.online.load(std::memory_order_acquire); };
  // Every mailbox free first (a call_async may still run), so no core
  // waits parked while another finishes a long call.
  for_each_cpu([&](PerCpu& c) {
    if (other(c)) wait_free(c);
  });
  g_stop.parked.store(0, std::memory_order_relaxed);
  g_stop.released.store(false, std::memory_order_relaxed);
  g_stop.caller = self;
  unsigned n = 0;
  for_each_cpu([&](PerCpu& c) {
    if (!other(c)) return;
    post(c, park, &g_stop);  // its release store of call_fn publishes the resets above
    n++;
  });
  wait_until([&] { return g_stop.parked.load(std::memory_order_acquire) == n; });
  fn(arg);
  g_stop.released.store(true, std::memory_order_release);
  for_each_cpu([&](PerCpu& c) {
    if (other(c)) arch::send_ipi(c);
  });
  for_each_cpu([&](PerCpu& c) {
    if (other(c)) wait_done(c);
  });
}

bool call_async(unsigned cpu, void (*fn)(void*), void* arg) {
  check_caller();
  if (cpu >= g_cpu_count || cpu == cpu_id() || !g_percpu[cpu].online.load(std::memory_order_acquire)) return false;
  Guard<SpinLock, NoIrqSave> g(g_call_lock);
  post(g_percpu[cpu], fn, arg);
  return true;
}

void call_on_all(void (*fn)(void*), void* arg) {
  check_caller();
  Guard<SpinLock, NoIrqSave> g(g_call_lock);
  unsigned self = cpu_id();
  for_each_cpu([&](PerCpu& c) {
    if (c.index != self && c.online.load(std::memory_order_acquire)) post(c, fn, arg);
  });
  run_as_call(this_cpu(), fn, arg);
  for_each_cpu([&](PerCpu& c) {
    if (c.index != self && c.online.load(std::memory_order_acquire)) wait_done(c);
  });
}

void freeze_others(void (*fn)(void*), void* arg) {
  check_caller();
  // The call lock keeps calls, stop_others and other freezes out (their
  // cores could not answer while frozen). Taken with interrupts enabled: a
  // core spinning on it is frozen where it spins.
  Guard<SpinLock, NoIrqSave> g(g_call_lock);
  unsigned self = cpu_id(), others = 0;
  g_freezer = self;
  g_stop_request.store(1, std::memory_order_release);
  auto other = [&](const PerCpu& c) { return c.index != self && c.online.load(std::memory_order_acquire); };
  for_each_cpu([&](PerCpu& c) {
    if (other(c)) {
      others++;
      arch::send_ipi(c);
    }
  });
  wait_until([&] { return g_stopped.load(std::memory_order_acquire) == others; });
  arch::IrqState s = arch::irq_save();
  fn(arg);
  arch::irq_restore(s);
  g_stop_request.store(0, std::memory_order_release);
  for_each_cpu([&](PerCpu& c) {
    if (other(c)) arch::send_ipi(c);
  });
  wait_until([&] { return g_stopped.load(std::memory_order_acquire) == 0; });
}

void idle_loop() {
  PerCpu& cpu = this_cpu();
  arch::irq_enable();
  for (;;) {
    arch::IrqState s = arch::irq_save();
    if (!cpu.call_fn.load(std::memory_order_acquire)) arch::wait_for_interrupt();
    arch::irq_restore(s);
    run_mailbox(cpu);  // with interrupts on: calls may wait for ticks
  }
}

}  // namespace smp
