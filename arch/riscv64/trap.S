/* SPDX-License-Identifier: Apache-2.0 */
// RISC-V S-mode trap entry (stvec, direct mode). Every trap saves a full
// TrapFrame on the current stack and calls riscv_trap(frame, overflow); the
// handler may change the frame (sepc, sp) before it is restored. The kernel
// has no user space, so a trap always arrives on a kernel stack with tp =
// this PerCpu.
//
// Before it saves anything the entry checks that the frame fits above
// PerCpu::stack_bottom (kernel/stack.h), with sscratch holding t0 meanwhile
// (no user space uses it). If it does not, the frame goes on the hart's
// overflow stack and riscv_trap gets overflow = 1.
//
// Stack at the call, from sp upwards:
//   sp + 0   TRAP_MARKER          | trap record (TRAP_RECORD_SIZE): a frame
//   sp + 8   0                    | record whose fp is the TrapFrame, so
//   sp + 16  s0 at the trap       | backtraces cross traps; the marker tells
//   sp + 24  sepc                 | the walker a TrapFrame sits above it
//   sp + 32  struct TrapFrame (TF_SIZE bytes)

#include "csr.h"

#define REC TRAP_RECORD_SIZE
#define FRAME (TF_SIZE + TRAP_RECORD_SIZE)

// Every register but x0, sp (x2) and t0 (x5), into the frame at sp.
.macro SAVE_REGS
    sd      x1, REC + 1 * 8(sp)
    sd      x3, REC + 3 * 8(sp)
    sd      x4, REC + 4 * 8(sp)
    sd      x6, REC + 6 * 8(sp)
    sd      x7, REC + 7 * 8(sp)
    sd      x8, REC + 8 * 8(sp)
    sd      x9, REC + 9 * 8(sp)
    sd      x10, REC + 10 * 8(sp)
    sd      x11, REC + 11 * 8(sp)
    sd      x12, REC + 12 * 8(sp)
    sd      x13, REC + 13 * 8(sp)
    sd      x14, REC + 14 * 8(sp)
    sd      x15, REC + 15 * 8(sp)
    sd      x16, REC + 16 * 8(sp)
    sd      x17, REC + 17 * 8(sp)
    sd      x18, REC + 18 * 8(sp)
    sd      x19, REC + 19 * 8(sp)
    sd      x20, REC + 20 * 8(sp)
    sd      x21, REC + 21 * 8(sp)
    sd      x22, REC + 22 * 8(sp)
    sd      x23, REC + 23 * 8(sp)
    sd      x24, REC + 24 * 8(sp)
    sd      x25, REC + 25 * 8(sp)
    sd      x26, REC + 26 * 8(sp)
    sd      x27, REC + 27 * 8(sp)
    sd      x28, REC + 28 * 8(sp)
    sd      x29, REC + 29 * 8(sp)
    sd      x30, REC + 30 * 8(sp)
    sd      x31, REC + 31 * 8(sp)
    sd      zero, REC + 0 * 8(sp)    // x0: keeps dumps tidy
.endm

.section .text, "ax"
.balign 4
.global riscv_trap_entry
riscv_trap_entry:
    csrw    sscratch, t0
    ld      t0, PERCPU_STACK_BOTTOM(tp)
    addi    t0, t0, FRAME
    bltu    sp, t0, trap_overflow
    addi    sp, sp, -FRAME
    SAVE_REGS
    addi    t0, sp, FRAME
    sd      t0, REC + 2 * 8(sp)     // sp at the trap
    li      a1, 0
    j       trap_saved

// No room for the frame: it goes on this hart's overflow stack.
trap_overflow:
    mv      t0, sp
    ld      sp, PERCPU_OVERFLOW_TOP(tp)
    addi    sp, sp, -FRAME
    sd      t0, REC + 2 * 8(sp)     // sp at the trap
    SAVE_REGS
    li      a1, 1

// a1 = overflow; everything but t0 saved.
trap_saved:
    csrr    t0, sscratch
    sd      t0, REC + 5 * 8(sp)     // t0
    csrr    t0, sepc
    csrr    t1, sstatus
    csrr    t2, scause
    csrr    t3, stval
    sd      t0, REC + TF_SEPC(sp)
    sd      t1, REC + TF_SSTATUS(sp)
    sd      t2, REC + TF_SCAUSE(sp)
    sd      t3, REC + TF_STVAL(sp)
    li      t1, TRAP_MARKER
    sd      t1, 0(sp)
    sd      zero, 8(sp)
    sd      s0, 16(sp)
    sd      t0, 24(sp)
    addi    s0, sp, REC
    mv      a0, s0
    call    riscv_trap

    ld      t0, REC + TF_SEPC(sp)
    ld      t1, REC + TF_SSTATUS(sp)
    csrw    sepc, t0
    csrw    sstatus, t1
    ld      x1, REC + 1 * 8(sp)
    ld      x3, REC + 3 * 8(sp)
    ld      x4, REC + 4 * 8(sp)
    ld      x5, REC + 5 * 8(sp)
    ld      x6, REC + 6 * 8(sp)
    ld      x7, REC + 7 * 8(sp)
    ld      x8, REC + 8 * 8(sp)
    ld      x9, REC + 9 * 8(sp)
    ld      x10, REC + 10 * 8(sp)
    ld      x11, REC + 11 * 8(sp)
    ld      x12, REC + 12 * 8(sp)
    ld      x13, REC + 13 * 8(sp)
    ld      x14, REC + 14 * 8(sp)
    ld      x15, REC + 15 * 8(sp)
    ld      x16, REC + 16 * 8(sp)
    ld      x17, REC + 17 * 8(sp)
    ld      x18, REC + 18 * 8(sp)
    ld      x19, REC + 19 * 8(sp)
    ld      x20, REC + 20 * 8(sp)
    ld      x21, REC + 21 * 8(sp)
    ld      x22, REC + 22 * 8(sp)
    ld      x23, REC + 23 * 8(sp)
    ld      x24, REC + 24 * 8(sp)
    ld      x25, REC + 25 * 8(sp)
    ld      x26, REC + 26 * 8(sp)
    ld      x27, REC + 27 * 8(sp)
    ld      x28, REC + 28 * 8(sp)
    ld      x29, REC + 29 * 8(sp)
    ld      x30, REC + 30 * 8(sp)
    ld      x31, REC + 31 * 8(sp)
    ld      sp, REC + 2 * 8(sp)     // last: the frame's own sp
    sret

// bool arch::call_with_recovery(void (*fn)(void*), void* arg, RecoveryPoint& rp)
// RecoveryPoint: ra, sp, s0..s11 (reg[0..13]), sstatus (reg[14]).
.global arch_call_with_recovery
arch_call_with_recovery:
    sd      ra, 0 * 8(a2)
    sd      sp, 1 * 8(a2)
    sd      s0, 2 * 8(a2)
    sd      s1, 3 * 8(a2)
    sd      s2, 4 * 8(a2)
    sd      s3, 5 * 8(a2)
    sd      s4, 6 * 8(a2)
    sd      s5, 7 * 8(a2)
    sd      s6, 8 * 8(a2)
    sd      s7, 9 * 8(a2)
    sd      s8, 10 * 8(a2)
    sd      s9, 11 * 8(a2)
    sd      s10, 12 * 8(a2)
    sd      s11, 13 * 8(a2)
    csrr    t0, sstatus
    sd      t0, 14 * 8(a2)
    addi    sp, sp, -16             // frame record: backtraces from fn reach the caller
    sd      ra, 8(sp)
    sd      s0, 0(sp)
    addi    s0, sp, 16
    mv      t0, a0
    mv      a0, a1
    jalr    t0
    ld      ra, 8(sp)
    ld      s0, 0(sp)
    addi    sp, sp, 16
    li      a0, 1
    ret

// [[noreturn]] void arch::resume_recovery(RecoveryPoint& rp): returns false
// from the arch_call_with_recovery that filled rp. From a trap handler, on
// any stack: sepc is left alone (no sret), sstatus.SIE comes from rp.
.global arch_resume_recovery
arch_resume_recovery:
    ld      ra, 0 * 8(a0)
    ld      sp, 1 * 8(a0)
    ld      s0, 2 * 8(a0)
    ld      s1, 3 * 8(a0)
    ld      s2, 4 * 8(a0)
    ld      s3, 5 * 8(a0)
    ld      s4, 6 * 8(a0)
    ld      s5, 7 * 8(a0)
    ld      s6, 8 * 8(a0)
    ld      s7, 9 * 8(a0)
    ld      s8, 10 * 8(a0)
    ld      s9, 11 * 8(a0)
    ld      s10, 12 * 8(a0)
    ld      s11, 13 * 8(a0)
    ld      t0, 14 * 8(a0)
    andi    t0, t0, SSTATUS_SIE
    csrs    sstatus, t0             // interrupts back on only if they were
    li      a0, 0
    ret

// bool arch::probe_write(uintptr_t addr, uint32_t value)
// Returns false when the store succeeds; when it faults, riscv_trap finds
// probe_write_insn in __extable and resumes at probe_write_fixup.
.global _ZN4arch11probe_writeEmj
_ZN4arch11probe_writeEmj:
probe_write_insn:
    sw      a1, 0(a0)
    li      a0, 0
    ret
probe_write_fixup:
    li      a0, 1
    ret

// bool riscv_stimecmp_usable(): whether S-mode may access stimecmp. A
// firmware that leaves menvcfg.STCE off makes the read an illegal
// instruction even where the ISA string lists Sstc.
.global riscv_stimecmp_usable
riscv_stimecmp_usable:
stimecmp_probe_insn:
    csrr    a0, 0x14d               // stimecmp
    li      a0, 1
    ret
stimecmp_probe_fixup:
    li      a0, 0
    ret

// uintptr_t arch_semihost(uintptr_t op, uintptr_t arg)
// A semihosting call: the three-instruction sequence the RISC-V semihosting
// spec fixes (uncompressed, within one page: QEMU reads the neighbours of
// the ebreak). Where nothing serves it (no debugger, QEMU without
// -semihosting: the real board) the ebreak is a breakpoint exception, which
// OpenSBI delegates to S-mode; riscv_trap finds semihost_insn in __extable
// and resumes at semihost_fixup, which returns -1.
.balign 16
.global arch_semihost
arch_semihost:
.option push
.option norvc
    slli    zero, zero, 0x1f
semihost_insn:
    ebreak
    srai    zero, zero, 7
.option pop
    ret
semihost_fixup:
    li      a0, -1
    ret

.section __extable, "a"
.balign 8
    .dword  probe_write_insn, probe_write_fixup
    .dword  stimecmp_probe_insn, stimecmp_probe_fixup
    .dword  semihost_insn, semihost_fixup
