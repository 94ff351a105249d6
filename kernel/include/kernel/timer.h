// Monotonic time and the per-core periodic tick.
#pragma once
#include <cstdint>

namespace timer {
// Called on each core once its interrupt controller is ready.
void init_cpu();
uint64_t now_ns();
uint64_t frequency_hz();
void delay_us(uint64_t us);
}  // namespace timer
