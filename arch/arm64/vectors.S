// AArch64 exception vectors. Every exception saves a full TrapFrame on the
// current stack and calls arm64_trap(frame, kind); the handler may change
// the frame (ELR, x0) before it is restored.
//
// TrapFrame layout (struct TrapFrame in trap.h): x0..x30, sp, elr, spsr,
// esr, far: 36 doublewords = 288 bytes.

#include "sysregs.h"

#define FRAME_SIZE 288

.macro VECTOR kind
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #16 * 0]
    mov     x1, #\kind
    b       trap_common
.endm

.section .text.vectors, "ax"
.balign 0x800
.global arm64_vectors
arm64_vectors:
    // Current EL with SP_EL0: never used.
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    // Current EL with SP_ELx: the kernel.
    VECTOR TRAP_SYNC
    VECTOR TRAP_IRQ
    VECTOR TRAP_FIQ
    VECTOR TRAP_SERROR
    // Lower EL, AArch64 and AArch32: no user space yet.
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD
    VECTOR TRAP_BAD

// x0, x1 saved, x1 = kind.
trap_common:
    stp     x2, x3, [sp, #16 * 1]
    stp     x4, x5, [sp, #16 * 2]
    stp     x6, x7, [sp, #16 * 3]
    stp     x8, x9, [sp, #16 * 4]
    stp     x10, x11, [sp, #16 * 5]
    stp     x12, x13, [sp, #16 * 6]
    stp     x14, x15, [sp, #16 * 7]
    stp     x16, x17, [sp, #16 * 8]
    stp     x18, x19, [sp, #16 * 9]
    stp     x20, x21, [sp, #16 * 10]
    stp     x22, x23, [sp, #16 * 11]
    stp     x24, x25, [sp, #16 * 12]
    stp     x26, x27, [sp, #16 * 13]
    stp     x28, x29, [sp, #16 * 14]
    add     x2, sp, #FRAME_SIZE
    stp     x30, x2, [sp, #16 * 15]     // lr, sp at the exception
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x2, x3, [sp, #16 * 16]
    mrs     x4, esr_el1
    mrs     x5, far_el1
    stp     x4, x5, [sp, #16 * 17]
    stp     x29, x2, [sp, #-16]!        // frame record: backtraces cross the trap
    mov     x29, sp
    add     x0, sp, #16
    bl      arm64_trap
    add     sp, sp, #16

trap_return:
    ldp     x0, x1, [sp, #16 * 16]
    msr     elr_el1, x0
    msr     spsr_el1, x1
    ldp     x0, x1, [sp, #16 * 0]
    ldp     x2, x3, [sp, #16 * 1]
    ldp     x4, x5, [sp, #16 * 2]
    ldp     x6, x7, [sp, #16 * 3]
    ldp     x8, x9, [sp, #16 * 4]
    ldp     x10, x11, [sp, #16 * 5]
    ldp     x12, x13, [sp, #16 * 6]
    ldp     x14, x15, [sp, #16 * 7]
    ldp     x16, x17, [sp, #16 * 8]
    ldp     x18, x19, [sp, #16 * 9]
    ldp     x20, x21, [sp, #16 * 10]
    ldp     x22, x23, [sp, #16 * 11]
    ldp     x24, x25, [sp, #16 * 12]
    ldp     x26, x27, [sp, #16 * 13]
    ldp     x28, x29, [sp, #16 * 14]
    ldr     x30, [sp, #16 * 15]
    add     sp, sp, #FRAME_SIZE
    eret

// bool arch::probe_write(uintptr_t addr, uint32_t value)
// Returns false when the store succeeds; when it faults, the trap handler
// finds probe_write_insn in __extable and resumes at probe_write_fixup.
.section .text, "ax"
.global _ZN4arch11probe_writeEmj
_ZN4arch11probe_writeEmj:
probe_write_insn:
    str     w1, [x0]
    mov     x0, #0
    ret
probe_write_fixup:
    mov     x0, #1
    ret

.section __extable, "a"
    .quad   probe_write_insn, probe_write_fixup
