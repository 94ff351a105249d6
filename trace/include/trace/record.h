// SPDX-License-Identifier: Apache-2.0
// The recording paths inlined into the allocators' traced copies.
//
// 1. Masked. alloc_masked and free_masked, for code that already runs with
//    interrupts masked on this CPU (the allocators' traced paths where the
//    platform has no restartable sections, inside their own masked region,
//    and the slow paths): the ring write of kmemtrace::record_*_slow,
//    inline, without masking again. Only while tracing is enabled (the
//    caller tested kmemtrace::enabled()).
// 2. Restartable. alloc_rseq and free_rseq (the kernel on arm64, arm and
//    riscv64, ARCH_HAS_RSEQ_RECORD): the whole record is one section
//    run with interrupts enabled (arch/<a>/include/arch/rseq.h,
//    rseq_record_*): it loads the ring's head and limit (no room: the
//    masked record_*_slow, which refreshes the limit or counts the drop, if
//    tracing is still on), takes the sequence number (reads the clock,
//    arm64, arm and riscv64 virt; an atomic add, sifive_u), writes the
//    event above
//    the head, where no reader looks, and commits by its release store of
//    the new head (the ring's publication: ring.h, The orderings). An
//    interrupt inside it rewinds it: the handler's own events (an allocation
//    in interrupt context) go into the ring first, and the rerun writes after
//    them with a later sequence number. A number the atomic add gave a
//    rewound run is lost, so the numbers of a CPU's events rise but may skip;
//    readers order by them and need no run without gaps (trace/reader.h).
//    The section does not read the switch: only kmemtrace's fast paths
//    use it (mm/kmem_fastpath.h, kmemtrace's fast paths), reached while the
//    allocators' hooks word says kmemtrace alone, which it says only between
//    enable() and disable() (kmemtrace::start and stop set the hooks inside
//    them), give or take the event at the moment of the switch. reset() comes
//    after a cross-call that every secondary core takes from its idle loop,
//    so no core is inside a section then (kmemtrace.h, reset).
//    32-bit ARM fits an allocation's section in ten registers: six
//    inputs (the tag is an immediate), four scratch; its caller is an
//    input (GCC's read of the return address), not lr read in the asm.
#pragma once
#include <atomic>
#include <mm/platform_inline.h>
#include <trace/kmemtrace.h>

namespace kmemtrace::detail {

// The ABI's sequence number (abi.h, Sequence numbers), one of two kinds:
//  - the platform's trace clock (plat::kTraceClock: ARM's virtual counter,
//    or a RISC-V board's time CSR where it is the hardware's), its low 32
//    bits. No shared write. When one event causes another on
//    another CPU (a free on CPU A, then CPU B allocating the same buffer),
//    the allocator's own synchronisation between them (a lock, a
//    release/acquire handover) comes after A's read, which feeds a store
//    A makes before its release (the event's; RISC-V: its fence i,w, or
//    the section's fence irw,w, orders the read before every later store),
//    and before B's, which the clock read's isb (RISC-V: fence r,i) keeps
//    after B's acquire: B's number is A's or more
//    (the same within a tick; readers break such ties, abi.h, Sequence
//    numbers);
//  - else one counter for every CPU (g_rec.seq), taken by an atomic add.
//    Relaxed is enough: all read-modify-writes of one atomic fall into a
//    single order, so numbers are unique, and the same synchronisation
//    makes A's add happen before B's, which coherence then orders first.
// Neither publishes other memory. The ring write that follows is ordered
// by the ring (ring.h, The orderings).
__attribute__((always_inline)) inline uint32_t next_seq() {
  if constexpr (mm::plat::kTraceClock) return static_cast<uint32_t>(mm::plat::trace_clock());
  return g_rec.seq.fetch_add(1, std::memory_order_relaxed);
}

// Interrupts are masked (kernel) or the thread is its CPU (host), so
// cpu_id() is stable and this ring has one producer: us.
__attribute__((always_inline)) inline void alloc_masked(uint32_t tag, uintptr_t caller, uintptr_t ptr,
                                                        size_t requested, size_t allocated, uint32_t flags) {
  uint32_t seq = next_seq();
  g_rec.rings[mm::plat::cpu_id()].put_alloc(tag, seq, caller, ptr, requested, allocated, flags, kSameCpu);
}

__attribute__((always_inline)) inline void free_masked(uint32_t tag, uintptr_t caller, uintptr_t ptr) {
  uint32_t seq = next_seq();
  g_rec.rings[mm::plat::cpu_id()].put_free(tag, seq, caller, ptr);
}

#if defined(ARCH_HAS_RSEQ_RECORD)
constexpr size_t kRecSeq = offsetof(Recorder, seq);
// sifive_u's section adds it to the recorder's address as a 12-bit signed
// immediate (the others read a clock and leave it unused).
static_assert(kRecSeq < 2048, "too many CPUs for the sections' immediate: address the sequence number otherwise");

// Records an allocation of this CPU's: the section (Restartable), from the
// functions in .text.rseq only (MM_RESTARTABLE_TEXT), and only from
// frameless ones whose every call is a tail call, entered by a tail call
// from the allocator's entry point: the event's caller is the link
// register as it is (arm64, riscv64: the section reads it, caller unused)
// or caller (32-bit ARM: caller_of_leaf, GCC's own read of the return
// address) (arch/<a>/include/arch/rseq.h). arch::kRecordFull:
// the ring had no room, nothing is recorded yet: the caller goes on to
// record_alloc_slow (masked, the limit refreshed or the drop counted), out
// of line.
template <uint32_t kTag>
__attribute__((always_inline)) inline arch::RseqRecord alloc_rseq(uintptr_t ptr, size_t requested, size_t allocated,
                                                                  uint32_t flags, uintptr_t caller) {
  char* base = reinterpret_cast<char*>(&g_rec);
  char* ring = mm::plat::trace_ring();  // &g_rec.rings[cpu_slot()], from the CPU's own register
  // The target CPU: this one (kSameCpu), which the section writes.
  static_assert(kSameCpu == -1);
  return arch::rseq_record_alloc<kRecSeq, Ring::kOffBuf, Ring::kOffMask, kTag>(base, ring, ptr, requested, allocated,
                                                                               flags, caller);
}

// Records a free of this CPU's: as alloc_rseq.
template <uint32_t kTag>
__attribute__((always_inline)) inline arch::RseqRecord free_rseq(uintptr_t ptr, uintptr_t caller) {
  char* base = reinterpret_cast<char*>(&g_rec);
  char* ring = mm::plat::trace_ring();
  return arch::rseq_record_free<kRecSeq, Ring::kOffBuf, Ring::kOffMask, kTag>(base, ring, ptr, caller);
}

#endif

}  // namespace kmemtrace::detail
