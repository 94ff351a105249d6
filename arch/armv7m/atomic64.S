/* SPDX-License-Identifier: Apache-2.0 */
// 64-bit atomics for ARMv7-M, which has no LDREXD/STREXD: GCC calls these
// library functions (libatomic's names and ABI) for every 64-bit
// __atomic_* and std::atomic<uint64_t> operation. One core, so masking
// interrupts (PRIMASK) around the access makes it atomic; the memory-order
// argument is ignored (every call is a full barrier: dmb on each side).
//
// AAPCS: the pointer in r0, a 64-bit value in r2:r3 (an even pair), a
// 64-bit result in r0:r1; later arguments on the stack.

.syntax unified
.thumb
.section .text.atomic64, "ax"

.macro BEGIN name
.global \name
.type \name, %function
.thumb_func
\name:
.endm

// uint64_t __atomic_load_8(const volatile void* p, int order)
BEGIN __atomic_load_8
    mrs     r12, primask
    cpsid   i
    dmb
    ldrd    r2, r3, [r0]
    dmb
    msr     primask, r12
    mov     r0, r2
    mov     r1, r3
    bx      lr
.size __atomic_load_8, . - __atomic_load_8

// void __atomic_store_8(volatile void* p, uint64_t v, int order)
BEGIN __atomic_store_8
    mrs     r12, primask
    cpsid   i
    dmb
    strd    r2, r3, [r0]
    dmb
    msr     primask, r12
    bx      lr
.size __atomic_store_8, . - __atomic_store_8

// uint64_t __atomic_exchange_8(volatile void* p, uint64_t v, int order)
BEGIN __atomic_exchange_8
    push    {r4, r5}
    mrs     r12, primask
    cpsid   i
    dmb
    ldrd    r4, r5, [r0]
    strd    r2, r3, [r0]
    dmb
    msr     primask, r12
    mov     r0, r4
    mov     r1, r5
    pop     {r4, r5}
    bx      lr
.size __atomic_exchange_8, . - __atomic_exchange_8

// bool __atomic_compare_exchange_8(volatile void* p, void* expected,
//                                  uint64_t desired, bool weak, int, int)
BEGIN __atomic_compare_exchange_8
    push    {r4-r7}
    mrs     r12, primask
    cpsid   i
    dmb
    ldrd    r4, r5, [r0]
    ldrd    r6, r7, [r1]
    cmp     r4, r6
    it      eq
    cmpeq   r5, r7
    bne     1f
    strd    r2, r3, [r0]
    dmb
    msr     primask, r12
    movs    r0, #1
    pop     {r4-r7}
    bx      lr
1:  strd    r4, r5, [r1]                    // expected = what was there
    dmb
    msr     primask, r12
    movs    r0, #0
    pop     {r4-r7}
    bx      lr
.size __atomic_compare_exchange_8, . - __atomic_compare_exchange_8

// uint64_t __atomic_fetch_OP_8(volatile void* p, uint64_t v, int order):
// the old value. __atomic_OP_fetch_8: the new one.
.macro FETCH_OP op, lo, hi, new
BEGIN __atomic_\op\()_8
    push    {r4-r7}
    mrs     r12, primask
    cpsid   i
    dmb
    ldrd    r4, r5, [r0]
    \lo     r6, r4, r2
    \hi     r7, r5, r3
    strd    r6, r7, [r0]
    dmb
    msr     primask, r12
    .if \new
    mov     r0, r6
    mov     r1, r7
    .else
    mov     r0, r4
    mov     r1, r5
    .endif
    pop     {r4-r7}
    bx      lr
.size __atomic_\op\()_8, . - __atomic_\op\()_8
.endm

FETCH_OP fetch_add, adds, adc, 0
FETCH_OP fetch_sub, subs, sbc, 0
FETCH_OP fetch_and, and, and, 0
FETCH_OP fetch_or, orr, orr, 0
FETCH_OP fetch_xor, eor, eor, 0
FETCH_OP add_fetch, adds, adc, 1
FETCH_OP sub_fetch, subs, sbc, 1
FETCH_OP and_fetch, and, and, 1
FETCH_OP or_fetch, orr, orr, 1
FETCH_OP xor_fetch, eor, eor, 1
