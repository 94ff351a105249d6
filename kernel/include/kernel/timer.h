// SPDX-License-Identifier: Apache-2.0
// Monotonic time and the per-core periodic tick.
#pragma once
#include <cstdint>

namespace timer {
// Called on each core once its interrupt controller is ready.
void init_cpu();
uint64_t now_ns();
uint64_t frequency_hz();
void delay_us(uint64_t us);
// Tests: fn runs in every core's timer interrupt, which then fires every
// period_us instead of kTimerHz times a second (from each core's next
// tick), until fn is null again. fn runs in interrupt context.
// The calling core starts at once (the others at their next tick, or at
// once when they call arm_test_tick()).
void set_test_hook(void (*fn)(), uint64_t period_us);
void arm_test_tick();
}  // namespace timer
