// SPDX-License-Identifier: Apache-2.0
// panic(): stop everything and say why, with registers and a backtrace of
// raw return addresses ("bt: 0x..." lines, which tools/symbolize resolves
// against build/<board>/kernel.elf).
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/console.h>
#include <kernel/panic.h>
#include <kernel/string.h>
#include <arch/ops.h>
#include <atomic>
#include <cstdarg>

namespace {
// The first core to increment it reports; the read-modify-write decides who
// that is. in_panic() reads it relaxed: it only makes the console skip its
// lock, and a core that sees it late takes the lock as it always does.
std::atomic<int> g_panicking{0};

[[noreturn]] void finish(uintptr_t fp, const TrapFrame* frame) {
  arch::dump_registers(frame);
  uintptr_t pcs[24];
  unsigned repeats[24];
  size_t n = backtrace::walk(fp, frame, pcs, 24, repeats);
  size_t frames = 0;
  for (size_t i = 0; i < n; i++) frames += repeats[i];
  kprintf("backtrace (%zu frames; symbolize with tools/symbolize):\n", frames);
  if (frame) kprintf("pc: 0x%lx\n", static_cast<unsigned long>(arch::trap_frame_pc(frame)));
  for (size_t i = 0; i < n; i++) {
    if (repeats[i] > 1) kprintf("bt: 0x%lx (%u times)\n", static_cast<unsigned long>(pcs[i]), repeats[i]);
    else kprintf("bt: 0x%lx\n", static_cast<unsigned long>(pcs[i]));
  }
  kprintf("System halted.\n");
  arch::exit(3);
}

// Only the first core to panic reports; others stop quietly.
void enter() {
  arch::irq_disable();
  if (g_panicking.fetch_add(1) != 0) {
    for (;;) arch::wait_for_interrupt();
  }
}
}  // namespace

bool in_panic() { return g_panicking.load(std::memory_order_relaxed) != 0; }

void panic(const char* f, ...) {
  enter();
  va_list ap;
  va_start(ap, f);
  kprintf("\nPANIC on cpu %u: ", cpu_id());
  kvprintf(f, ap);
  va_end(ap);
  kprintf("\n");
  finish(0, nullptr);
}

void panic_trap(const TrapFrame* frame, const char* f, ...) {
  enter();
  va_list ap;
  va_start(ap, f);
  kprintf("\nPANIC on cpu %u: ", cpu_id());
  kvprintf(f, ap);
  va_end(ap);
  kprintf("\n");
  finish(arch::trap_frame_fp(frame), frame);
}

void panic_assert(const char* expr, const char* file, int line) {
  enter();
  kprintf("\nPANIC on cpu %u: ASSERT failed: %s at %s:%d\n", cpu_id(), expr, file, line);
  finish(0, nullptr);
}

void fatal_exception(const char* cause, uintptr_t addr, const TrapFrame* frame) {
  enter();
  kprintf("\nPANIC on cpu %u: unexpected exception: %s", cpu_id(), cause);
  if (addr || strstr(cause, "fault") || strstr(cause, "abort"))
    kprintf(" at address 0x%lx", static_cast<unsigned long>(addr));
  kprintf(", pc 0x%lx\n", static_cast<unsigned long>(arch::trap_frame_pc(frame)));
  finish(arch::trap_frame_fp(frame), frame);
}
