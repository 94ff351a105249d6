// SPDX-License-Identifier: Apache-2.0
// Restartable per-CPU sections: short instruction sequences that update a
// CPU's own data with interrupts enabled, and that an interrupt rewinds
// instead of splitting (the idea of Linux's rseq for user space, and of the
// restartable atomic sequences older ARM kernels used without exclusives).
//
// 1. A section loads what it needs, may branch out without having written
//    anything visible, and ends with ONE store, its commit: before it,
//    nothing it did counts; after it, everything does. A store before the
//    commit is allowed only where it is invisible until the commit (a
//    magazine slot above the top, an event above a kmemtrace ring's
//    head). An atomic read-modify-write of a shared word may come before
//    the commit where doing it again on each rerun is harmless
//    (kmemtrace's sequence counter on sifive_u: a rewound record takes a
//    new number and leaves a gap; on ARM and QEMU virt's riscv64 the
//    section reads a clock). Registers: a section reads its inputs and writes only
//    its own outputs (early-clobber), so it can run again from its first
//    instruction with the same inputs.
// 2. The table. Each section lists itself as {start, end, restart} in the
//    .rseq_table section (end: the address after the commit store; restart:
//    where to go back to, its start for every section so far). The functions
//    that contain sections live in one text section, .text.rseq, between
//    __rseq_text_start and __rseq_text_end.
// 3. Interrupts. The arch's interrupt entry (every asynchronous entry:
//    IRQs, IPIs, RISC-V's interrupt traps) passes the interrupted PC through
//    restart_pc() before it runs any handler: one bounding-range compare
//    for any PC outside .text.rseq; inside it, the table is searched and a
//    PC in [start, end) becomes restart. The handler (which may allocate,
//    flush this CPU's magazines, or freeze the CPU for kmem_whatis) then
//    sees the section either not started or complete, and the interrupted
//    code runs it again from the start when the interrupt returns.
// 4. Synchronous exceptions. They are rewound too. The sections touch only
//    the CPU's own per-CPU data and its magazines, mapped kernel memory that
//    is never unmapped while reachable from the CPU (no demand paging, no
//    watchpoints, no breakpoints in the kernel), and contain no trapping
//    instruction, so most faults there are a corrupted pointer, fatal and
//    reported where they happened. But some exceptions return: on RISC-V a
//    page fault on a mapping another hart just made (a new mapping is fenced
//    only locally: arch/riscv64/mmu.cpp) is spurious, fenced and retried, and
//    a magazine may lie in such a mapping; and an exception table fixup
//    (kernel/extable.h) resumes wherever it says. Every exception handler
//    that returns passes the pc it returns to through restart_pc, as
//    interrupt entry does: a section it lands in starts again from its
//    beginning, whatever the handler did meanwhile. (The Cortex-M3 has no
//    sections: its fast paths mask interrupts.)
// 5. There is no migration: a CPU's code and its interrupts run on that
//    CPU, so a section's per-CPU pointer, computed before it starts, stays
//    right across a rewind.
// 6. The arch provides the sections themselves (arch/<a>/include/arch/
//    rseq.h, ARCH_HAS_RSEQ); mm/ reaches them through its platform layer.
#pragma once
#include <cstdint>

namespace rseq {

struct Section {
  uintptr_t start, end, restart;
};

extern "C" const char __rseq_text_start[], __rseq_text_end[];

// The table search, for a PC inside .text.rseq.
uintptr_t restart_in_text(uintptr_t pc);

// The PC an interrupt or a returning exception should go back to: pc
// itself, or the restart address of the section pc is inside. From the
// trap handlers, interrupts masked.
inline uintptr_t restart_pc(uintptr_t pc) {
  uintptr_t base = reinterpret_cast<uintptr_t>(__rseq_text_start);
  if (__builtin_expect(pc - base >= static_cast<uintptr_t>(__rseq_text_end - __rseq_text_start), 1)) return pc;
  return restart_in_text(pc);
}

// At boot: checks that every listed section lies inside .text.rseq (a
// function with a section that missed the attribute would never be
// rewound) and sorts nothing (the table is small). Fatal if one does not.
void check_table();
// Sections in the table.
unsigned table_size();
// Rewinds done on a CPU since boot (statistics, for tests), and the
// interrupted pc of its last one (0: none yet), for a test that finds a
// rewind it did not expect to say where.
uint64_t restarts(unsigned cpu);
uintptr_t last_restart_pc(unsigned cpu);

}  // namespace rseq
