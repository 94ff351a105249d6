// Monotonic clock from the arch counter, and a periodic tick on every core.
#include <kernel/arch.h>
#include <kernel/percpu.h>
#include <kernel/timer.h>
#include <arch/ops.h>

namespace {
uint64_t period_ticks() { return arch::counter_frequency() / kTimerHz; }
}  // namespace

void timer_interrupt() {
  // A statistic (cpus, tests): it publishes nothing, so relaxed.
  this_cpu().ticks.fetch_add(1, std::memory_order_relaxed);
  arch::timer_arm(period_ticks());
}

namespace timer {

void init_cpu() {
  arch::timer_init_cpu();
  arch::timer_arm(period_ticks());
}

uint64_t frequency_hz() { return arch::counter_frequency(); }

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
