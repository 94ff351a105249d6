// SPDX-License-Identifier: Apache-2.0
// kmemtrace in the kernel: ring memory sized by bootarg, the switch at boot
// and the `kmemtrace` console command (kernel/mm/kmemtrace_control.cpp). The recording
// itself is trace/ (trace/include/trace/kmemtrace.h), called from mm/.
//
// Bootargs:
//   kmemtrace=on|off      record from boot (default off)
//   kmemtrace.ring=SIZE   ring bytes per CPU, a power of two from 4K to 64M
//                         (K/M suffixes; default 256K)
#pragma once
#include <cstddef>

namespace kmemtrace {
// Once kmem is up, before the page allocator's boot count is taken: the
// rings are heap memory for the life of the system.
void setup_rings();
// Switch recording on or off: kmemtrace's switch and the allocators' static
// branches together. Not from interrupt context.
void start();
void stop();
// Switches recording off and empties every ring, counters zeroed. Not from
// interrupt context or a cross-call.
void clear();
// Ring capacity per CPU in bytes (0 before setup or without memory).
size_t ring_capacity();
// From every core's timer tick, interrupts masked: the core's clock anchor
// when one is due (trace/include/trace/abi.h, Sequence numbers). A load and a
// branch while tracing is off; nothing where sequence numbers are a counter.
void tick();
}  // namespace kmemtrace
