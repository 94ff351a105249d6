// SPDX-License-Identifier: Apache-2.0
// Per-CPU data: one PerCpu per core, reached in O(1) through a register the
// arch reserves for it (TPIDR_EL1 on arm64, TPIDRPRW on arm, tp on riscv64).
// Fields that other cores read while this one runs are atomics; the rest
// belong to their core, or are written before the core starts
// (smp::start_secondaries publishes them with a fence) and never change,
// or are read by another core only after a cross-call returned (the
// mailbox's release/acquire publishes them).
#pragma once
#include <atomic>
#include <cstdint>
#include <kernel/config.h>

struct TrapFrame;
struct ExpectedFault;

// Registers a fault-expecting probe (see arch_probe_write) fills in.
struct FaultRecord {
  uintptr_t address = 0;  // faulting data address
  uintptr_t pc = 0;       // faulting instruction
  const char* cause = nullptr;
};

struct PerCpu {
  unsigned index = 0;  // dense 0..cpu_count-1, 0 is the boot core
  // index * 64: this core's entry in an array of one-line (64-byte) per-CPU
  // entries (mm's plat::cpu_line_offset), kept scaled for arches without a
  // scaled-index add (riscv64: no shift on each magazine operation). Set
  // with index (set_index).
  unsigned line_offset = 0;
  uint64_t hwid = 0;  // MPIDR affinity or RISC-V hart id
  uintptr_t stack_top = 0;
  std::atomic<uint64_t> ticks{0};  // timer interrupts taken on this core
  std::atomic<bool> online{false};
  // Cross-call mailbox: another core posts fn/arg, this core runs it.
  std::atomic<void (*)(void*)> call_fn{nullptr};
  void* call_arg = nullptr;
  unsigned call_from = 0;  // the caller's index: completion is signalled to it by IPI
  std::atomic<unsigned> call_done{0};
  // Set by the exception path when a probing access faulted.
  FaultRecord last_fault;
  unsigned irq_depth = 0;
  uintptr_t arch_scratch[4] = {};  // for the arch's trap entry
  unsigned in_call = 0;            // running a cross-call's fn (smp.cpp): it may not make one
  // The stack this core runs on starts at stack_bottom (a guard page lies
  // below); a trap that finds sp too close to it saves its frame on the
  // overflow stack, below overflow_top (kernel/stack.h). Read by the trap
  // entry code of this core only.
  uintptr_t stack_bottom = 0;
  uintptr_t overflow_top = 0;
  unsigned overflow_depth = 0;              // kstack::overflow running on this core
  ExpectedFault* expected_fault = nullptr;  // armed by expected_fault::run on this core
  // While frozen by smp::freeze_others: where its live stack starts, the
  // interrupt's trap frame (the interrupted registers, then the interrupted
  // code's stack above it; the handler's own frames below are not part of
  // it). Written before
  // the core counts itself frozen (release), read by the freezer after it
  // saw the count (acquire).
  uintptr_t frozen_sp = 0;
  // The trap frame of the interrupt this core is handling (null outside
  // one): its interrupted registers. Written and read by this core only.
  const TrapFrame* irq_frame = nullptr;
  // A word of per-CPU data for tests (kmemleak test keeps an object
  // reachable only from here).
  uintptr_t test_slot = 0;
  // Set while another core waits for a call_async fn running here to
  // finish (advisory, relaxed: smp::another_call_waits). After the fields
  // the trap entry code reaches by offset.
  std::atomic<bool> call_waiting{false};
  // This core's kmemtrace ring (its header in kmemtrace's recorder), for
  // the restartable ring write (trace/record.h): one load from the core's
  // own register where the ring's address was a computation from its index.
  // Set by kmemtrace's setup for every slot, before the other cores start
  // (which orders it for them) and before recording can start; then
  // constant.
  void* trace_ring = nullptr;
  // What this core is running (kernel/context.h): written by this core only
  // (kernel_main, secondary_main, context::Scope), read by the debug modes'
  // audit with interrupts masked.
  uint32_t context = 0;
  // The caller's context of the cross-call in the mailbox: written by the
  // poster with call_arg, before its release of call_fn (smp.cpp).
  uint32_t call_context = 0;
};
// riscv64's load takes a 12-bit signed offset; arm's ldr, 12 bits.
static_assert(offsetof(PerCpu, trace_ring) < 2048, "PerCpu::trace_ring out of a load's reach");

extern PerCpu g_percpu[kMaxCpus];
extern unsigned g_cpu_count;  // cores described by the DTB and started

#include <arch/ops.h>  // arch::this_cpu()

inline PerCpu& this_cpu() { return *arch::this_cpu(); }
inline void set_index(PerCpu& c, unsigned i) {
  c.index = i;
  c.line_offset = i * 64;
}
#if defined(ARCH_HAS_CPU_INDEX)
inline unsigned cpu_id() { return static_cast<unsigned>(arch::cpu_index()); }  // a register that holds it
#else
inline unsigned cpu_id() { return arch::this_cpu()->index; }
#endif
unsigned cpus_online();

template <typename F>
void for_each_cpu(F&& f) {
  for (unsigned i = 0; i < g_cpu_count; i++) f(g_percpu[i]);
}
