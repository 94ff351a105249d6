// SPDX-License-Identifier: Apache-2.0
// The ARMv7-M trap frame. The core pushes {r0-r3, r12, lr, pc, xPSR} on
// exception entry; exception_entry (start.S) pushes {r3, r4-r11,
// EXC_RETURN} right below it on the same stack (MSP), so the two halves are
// one struct.
#pragma once
#include <cstddef>
#include <cstdint>

struct TrapFrame {
  uint32_t pad;         // a copy of r3: keeps the frame 8-byte aligned
  uint32_t r4_r11[8];   // r4..r11 (r7 is Thumb code's frame pointer)
  uint32_t exc_return;  // EXC_RETURN
  // Stacked by the core:
  uint32_t r0, r1, r2, r3, r12, lr, pc, xpsr;
};
static_assert(sizeof(TrapFrame) == 18 * 4);
static_assert(offsetof(TrapFrame, r0) == 40);

// xPSR bit 9 in the stacked frame: the core added a word to align the stack.
constexpr uint32_t kXpsrStackRealigned = 1u << 9;
