// RISC-V S-mode trap entry (stvec, direct mode). Every trap saves a full
// TrapFrame on the current stack and calls riscv_trap(frame); the handler
// may change the frame (sepc) before it is restored. The kernel has no user
// space, so a trap always arrives on a kernel stack with tp = this PerCpu.
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

.section .text, "ax"
.balign 4
.global riscv_trap_entry
riscv_trap_entry:
    addi    sp, sp, -FRAME
    sd      x1, REC + 1 * 8(sp)
    sd      x3, REC + 3 * 8(sp)
    sd      x4, REC + 4 * 8(sp)
    sd      x5, REC + 5 * 8(sp)
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
    addi    t0, sp, FRAME
    sd      t0, REC + 2 * 8(sp)     // sp at the trap
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
    addi    sp, sp, FRAME
    sret

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

.section __extable, "a"
.balign 8
    .dword  probe_write_insn, probe_write_fixup
    .dword  stimecmp_probe_insn, stimecmp_probe_fixup
