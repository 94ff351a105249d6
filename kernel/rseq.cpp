// SPDX-License-Identifier: Apache-2.0
// Restartable per-CPU sections: the table and the interrupt entry's search
// (kernel/include/kernel/rseq.h).
#include <kernel/config.h>
#include <kernel/panic.h>
#include <kernel/percpu.h>
#include <kernel/rseq.h>

namespace {
extern "C" const rseq::Section __rseq_table_start[], __rseq_table_end[];
// Written by each CPU in its own interrupt entry (interrupts masked), read
// relaxed by tests: statistics.
uint64_t g_restarts[kMaxCpus];
uintptr_t g_last_restart_pc[kMaxCpus];  // the pc each CPU's last rewind found, the same way
}  // namespace

namespace rseq {

// A handful of sections (each inlined copy of the magazine pop and push
// and of the counters): a linear search, only for a PC inside .text.rseq.
uintptr_t restart_in_text(uintptr_t pc) {
  for (const Section* s = __rseq_table_start; s < __rseq_table_end; s++) {
    if (pc - s->start < s->end - s->start) {
      __atomic_store_n(&g_restarts[cpu_id()], g_restarts[cpu_id()] + 1, __ATOMIC_RELAXED);
      __atomic_store_n(&g_last_restart_pc[cpu_id()], pc, __ATOMIC_RELAXED);
      return s->restart;
    }
  }
  return pc;
}

void check_table() {
  uintptr_t lo = reinterpret_cast<uintptr_t>(__rseq_text_start), hi = reinterpret_cast<uintptr_t>(__rseq_text_end);
  for (const Section* s = __rseq_table_start; s < __rseq_table_end; s++)
    if (s->start < lo || s->end > hi || s->start >= s->end || s->restart < lo || s->restart >= hi)
      panic(
          "restartable section 0x%lx..0x%lx (restart 0x%lx) lies outside .text.rseq 0x%lx..0x%lx: its function lacks "
          "the section attribute",
          static_cast<unsigned long>(s->start), static_cast<unsigned long>(s->end),
          static_cast<unsigned long>(s->restart), static_cast<unsigned long>(lo), static_cast<unsigned long>(hi));
}

unsigned table_size() { return static_cast<unsigned>(__rseq_table_end - __rseq_table_start); }

uint64_t restarts(unsigned cpu) { return cpu < kMaxCpus ? __atomic_load_n(&g_restarts[cpu], __ATOMIC_RELAXED) : 0; }
uintptr_t last_restart_pc(unsigned cpu) {
  return cpu < kMaxCpus ? __atomic_load_n(&g_last_restart_pc[cpu], __ATOMIC_RELAXED) : 0;
}

}  // namespace rseq
