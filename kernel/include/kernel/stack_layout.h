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

#define KSTACK_GUARD_SIZE 4096
#define KSTACK_OVERFLOW_SIZE 8192
#define KSTACK_SIZE 16384
#define KSTACK_SLOT_SIZE (2 * KSTACK_GUARD_SIZE + KSTACK_OVERFLOW_SIZE + KSTACK_SIZE)
