// SPDX-License-Identifier: Apache-2.0
// The layout of the kernel's stacks, as numbers the assembly entry code can
// use too (kernel/include/kernel/stack.h has the rest).
//
// Each CPU has one slot in g_kernel_stacks, from low to high addresses:
//
//   guard page | overflow stack | guard page | kernel stack
//
// Both guard pages are left unmapped, so running off the bottom of either
// stack faults instead of writing over what lies below. The kernel stack is
// what the CPU runs on (the boot CPU's is slot 0's); the overflow stack is
// where its trap entry goes when the kernel stack has no room left for a
// trap frame, to report the overflow.
#pragma once

// An arch may set the sizes (armv7m: no MMU, so no guard pages and no
// overflow stack, guard and overflow size 0; the stack from its board.conf).
#ifndef KSTACK_GUARD_SIZE
#define KSTACK_GUARD_SIZE 4096
#endif
#ifndef KSTACK_OVERFLOW_SIZE
#define KSTACK_OVERFLOW_SIZE 8192
#endif
#ifndef KSTACK_SIZE
#define KSTACK_SIZE 16384
#endif
#define KSTACK_SLOT_SIZE (2 * KSTACK_GUARD_SIZE + KSTACK_OVERFLOW_SIZE + KSTACK_SIZE)
