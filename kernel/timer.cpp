// SPDX-License-Identifier: Apache-2.0
// Monotonic clock from the arch counter, and a periodic tick on every core.
#include <kernel/arch.h>
#include <kernel/context.h>
#include <kernel/kmemtrace_control.h>
#include <kernel/percpu.h>
#include <kernel/timer.h>
#include <arch/ops.h>
#include <atomic>

namespace {
uint64_t period_ticks() { return arch::counter_frequency() / kTimerHz; }
}  // namespace

namespace {
// A test's work for every tick on every core, and the shorter period it
// asks for (timer::set_test_hook). The period is stored before the hook
// (release), and read after it (acquire).
std::atomic<void (*)()> g_test_hook{nullptr};
std::atomic<uint64_t> g_test_period{0};
}  // namespace

void timer_interrupt() {
  context::Scope in(context::make(context::kTimer));  // what a test hook allocates is the timer's
  // A statistic (cpus, tests): it publishes nothing, so relaxed.
  this_cpu().ticks.fetch_add(1, std::memory_order_relaxed);
  kmemtrace::tick();
  if (void (*hook)() = g_test_hook.load(std::memory_order_acquire)) {
    // Armed after the hook, and at least four times what the hook took:
    // however slow the core runs (QEMU on a busy host), the interrupted
    // code keeps most of the time, the controller's claim loop ends, and a
    // restartable section that keeps being sent back still completes.
    uint64_t t0 = arch::counter();
    hook();
    uint64_t spent = arch::counter() - t0, period = g_test_period.load(std::memory_order_relaxed);
    arch::timer_arm(period > 4 * spent ? period : 4 * spent);
    return;
  }
  arch::timer_arm(period_ticks());
}

namespace timer {

void init_cpu() {
  arch::timer_init_cpu();
  arch::timer_arm(period_ticks());
}

uint64_t frequency_hz() { return arch::counter_frequency(); }

void set_test_hook(void (*fn)(), uint64_t period_us) {
  uint64_t ticks = arch::counter_frequency() * period_us / 1000000;
  g_test_period.store(ticks ? ticks : 1, std::memory_order_relaxed);
  g_test_hook.store(fn, std::memory_order_release);
  if (fn) arch::timer_arm(g_test_period.load(std::memory_order_relaxed));  // this core: now, not at its next tick
}

void arm_test_tick() {
  if (g_test_hook.load(std::memory_order_acquire)) arch::timer_arm(g_test_period.load(std::memory_order_relaxed));
}

uint64_t now_ns() {
  uint64_t f = arch::counter_frequency();
  uint64_t c = arch::counter();
  return (c / f) * 1000000000ull + (c % f) * 1000000000ull / f;
}

void delay_us(uint64_t us) {
  uint64_t end = now_ns() + us * 1000;
  while (now_ns() < end) arch::cpu_relax();
}

}  // namespace timer
