// SPDX-License-Identifier: Apache-2.0
// RISC-V 64 restartable per-CPU sections (kernel/include/kernel/rseq.h):
// the per-CPU stack pop and push of kmem's magazines and of the page
// cache, a counter increment, and kmemtrace's ring write, with the
// contract of arch/arm64/include/arch/rseq.h. Each is one asm statement:
// label 1 its start (and restart), label 2 right after its commit store,
// listed in .rseq_table. Outputs are early-clobber, inputs are never
// written, so a rewind to 1 runs it again on the same inputs. Only loads,
// stores, arithmetic and branches (compressed or not), and in the ring
// write a fence and either rdtime (where the time CSR is the hardware's:
// it does not trap) or the shared counter's amoadd.w: nothing that traps
// (kernel/rseq.h, Synchronous exceptions). The offsets must fit a load's
// 12-bit signed immediate (the assembler refuses them otherwise).
#pragma once
#include <arch/ops.h>  // ARCH_HAS_TRACE_CLOCK: the ring write's sequence number
#include <cstddef>
#include <cstdint>
#include <kernel/rseq_asm.h>

// The sections' assembly is laid out by hand, an instruction and its
// comment per line: clang-format leaves this file as it is.
// clang-format off

#define ARCH_HAS_RSEQ 1

namespace arch {

// kmem's magazines as top and limit over a null sentinel: arm64's
// rseq_pop and rseq_push.
template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_pop(char* base, void*& out) {
  uint64_t t, m;
  asm volatile goto(
      "1: ld    %[t], %[to](%[base])\n"
      "   ld    %[m], 0(%[t])\n"
      "   beqz  %[m], %l[empty]\n"
      "   addi  %[t], %[t], -8\n"
      "   sd    %[t], %[to](%[base])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [m] "=&r"(m)
      : [base] "r"(base), [to] "i"(kTop)
      : "memory"
      : empty);
  out = reinterpret_cast<void*>(m);
  return true;
empty:
  return false;
}

template <size_t kTop>
__attribute__((always_inline)) inline RseqPush rseq_push(char* base, void* obj) {
  uint64_t t, l;
  asm volatile goto(
      "1: ld    %[t], %[to](%[base])\n"
      "   ld    %[l], %[lo](%[base])\n"
      "   bgeu  %[t], %[l], %l[full]\n"
      "   ld    %[l], 0(%[t])\n"
      "   beq   %[l], %[obj], %l[on_top]\n"
      "   sd    %[obj], 8(%[t])\n"
      "   addi  %[t], %[t], 8\n"
      "   sd    %[t], %[to](%[base])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [obj] "r"(obj), [to] "i"(kTop), [lo] "i"(kTop + 8)
      : "memory"
      : full, on_top);
  return kRseqPushed;
full:
  return kRseqFull;
on_top:
  return kRseqOnTop;
}

// The page allocator's per-CPU stack of {pointer, 64-bit value} entries:
// as arm64's rseq_pop_pair and rseq_push_pair (top and limit over a
// sentinel entry). The pop tests the mark in b, then loads the value there.
template <size_t kTop, uint16_t kMark>
__attribute__((always_inline)) inline bool rseq_pop_pair(char* base, void*& first, uintptr_t& second) {
  static_assert(kMark < 2048 && kTop < 2048);
  uint64_t t;
  void* a;
  uintptr_t b;
  asm volatile goto(
      "1: ld    %[t], %[to](%[base])\n"
      "   ld    %[a], 0(%[t])\n"
      "   lhu   %[b], 0(%[a])\n"
      "   addi  %[b], %[b], -%[mk]\n"
      "   bnez  %[b], %l[empty]\n"
      "   ld    %[b], 8(%[t])\n"
      "   addi  %[t], %[t], -16\n"
      "   sd    %[t], %[to](%[base])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [a] "=&r"(a), [b] "=&r"(b)
      : [base] "r"(base), [to] "i"(kTop), [mk] "i"(kMark)
      : "memory"
      : empty);
  first = a;
  second = b;
  return true;
empty:
  return false;
}

template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_push_pair(char* base, void* first, uintptr_t second) {
  static_assert(kTop + 8 < 2048);
  uint64_t t, l;
  asm volatile goto(
      "1: ld    %[t], %[to](%[base])\n"
      "   ld    %[l], %[lo](%[base])\n"
      "   bgeu  %[t], %[l], %l[full]\n"
      "   sd    %[a], 16(%[t])\n"
      "   sd    %[b], 24(%[t])\n"
      "   addi  %[t], %[t], 16\n"
      "   sd    %[t], %[to](%[base])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [a] "r"(first), [b] "r"(second), [to] "i"(kTop), [lo] "i"(kTop + 8)
      : "memory"
      : full);
  return true;
full:
  return false;
}

// The word at base + kOff, plus one; the store is the commit.
template <size_t kOff>
__attribute__((always_inline)) inline void rseq_inc(char* base) {
  uint64_t t;
  asm volatile(
      "1: ld    %[t], %[o](%[base])\n"
      "   addi  %[t], %[t], 1\n"
      "   sd    %[t], %[o](%[base])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t)
      : [base] "r"(base), [o] "i"(kOff)
      : "memory");
}

// The 64-bit word at base + 8 * index, plus d (minus d: kSub); the store
// is the commit (allocation profiling's per-CPU counters:
// mm/alloc_tag.cpp, Counters).
template <bool kSub = false>
__attribute__((always_inline)) inline void cpu_add_indexed(uintptr_t base, uintptr_t index, int64_t d) {
  uint64_t a, t;
  asm volatile(
      "1: slli  %[a], %[i], 3\n"
      "   add   %[a], %[a], %[base]\n"
      "   ld    %[t], 0(%[a])\n"
      "   .if %c[sub]\n"
      "   sub   %[t], %[t], %[d]\n"
      "   .else\n"
      "   add   %[t], %[t], %[d]\n"
      "   .endif\n"
      "   sd    %[t], 0(%[a])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [a] "=&r"(a), [t] "=&r"(t)
      : [base] "r"(base), [i] "r"(index), [d] "r"(d), [sub] "i"(kSub ? 1 : 0)
      : "memory");
}

// kmemtrace's restartable ring write (trace/record.h, Restartable), with the
// contract of arch/arm64/include/arch/rseq.h's rseq_record_free. The
// sequence number is the time CSR's low 32 bits where the board's time
// CSR is the hardware's (ARCH_HAS_TRACE_CLOCK: arch/ops.h), read after a
// fence r,i (a CSR read is device input to FENCE: it comes after every
// earlier load, the acquire that handed a buffer over included); else one
// amoadd.w on the shared counter inside the section (a rewind after it
// loses that number). It is stored beside the tag as two words (no shift
// and or). The commit is the head's store after a fence irw,w (a release
// store: the event's stores, and the time read, are seen before it and
// before every later store, by the reader's acquire of head and by
// whoever a later store hands the buffer to). The caller field is ra as
// it is, as arm64's x30.
#if defined(ARCH_HAS_TRACE_CLOCK)
#define ARCH_RSEQ_RECORD_SEQ           \
  "   fence r, i\n"                    \
  "   rdtime %[s]\n"
// The recorder's address only where the counter is in it (below): an "r"
// operand the asm does not use still costs its auipc and addi.
#define ARCH_RSEQ_RECORD_REC(rec) [rec] "i"(0)
#else
#define ARCH_RSEQ_RECORD_REC(rec) [rec] "r"(rec)
#define ARCH_RSEQ_RECORD_SEQ           \
  "   addi  %[u], %[rec], %[so]\n"     \
  "   li    %[h], 1\n"                 \
  "   amoadd.w %[s], %[h], (%[u])\n"
#endif
#define ARCH_RSEQ_RECORD_HEAD(n)                                 \
  "1: lwu   %[h], 0(%[ring])\n"  /* head */                      \
  "   lw    %[u], 4(%[ring])\n"  /* limit */                     \
  "   addiw %[t], %[h], " #n "\n"                                \
  "   subw  %[u], %[u], %[t]\n"                                  \
  "   bltz  %[u], %l[full]\n" /* limit - end < 0: no room */     \
  "   ld    %[p], %[bo](%[ring])\n"                              \
  "   ld    %[u], %[mo](%[ring])\n"                              \
  "   and   %[h], %[h], %[u]\n"                                  \
  "   add   %[p], %[p], %[h]\n"                                  \
  ARCH_RSEQ_RECORD_SEQ                                           \
  "   sw    %[tag], 0(%[p])\n"                                   \
  "   sw    %[s], 4(%[p])\n"                                     \
  "   sd    ra, 8(%[p])\n" /* the caller (above) */              \
  "   sd    %[ptr], 16(%[p])\n"

#define ARCH_HAS_RSEQ_RECORD 1
enum RseqRecord { kRecorded, kRecordFull };

template <size_t kSeq, size_t kBuf, size_t kMask, uint32_t kTag>
__attribute__((always_inline)) inline RseqRecord rseq_record_free(char* rec, char* ring, uintptr_t ptr, uintptr_t) {
  (void)rec;  // (ARCH_RSEQ_RECORD_REC)
  uint64_t tag = kTag;
  uint64_t h, u, t, p, s;
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(24)
      "   fence irw, w\n"
      "   sw    %[t], 0(%[ring])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p), [s] "=&r"(s)
      : ARCH_RSEQ_RECORD_REC(rec), [ring] "r"(ring), [tag] "r"(tag), [ptr] "r"(ptr),
        [so] "i"(kSeq), [bo] "i"(kBuf), [mo] "i"(kMask)
      : "memory"
      : full);
  return kRecorded;
full:
  return kRecordFull;
}

// (flags and the target CPU, -1, as two words: building the 64-bit word
// would cost more than the second store.)
template <size_t kSeq, size_t kBuf, size_t kMask, uint32_t kTag>
__attribute__((always_inline)) inline RseqRecord rseq_record_alloc(char* rec, char* ring, uintptr_t ptr,
                                                                   uint64_t requested, uint64_t allocated,
                                                                   uint32_t flags, uintptr_t) {
  (void)rec;  // (ARCH_RSEQ_RECORD_REC)
  uint64_t tag = kTag;
  uint64_t h, u, t, p, s;
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(48)
      "   sd    %[rq], 24(%[p])\n"
      "   sd    %[al], 32(%[p])\n"
      "   sw    %[la], 40(%[p])\n"
      "   li    %[h], -1\n"
      "   sw    %[h], 44(%[p])\n"
      "   fence irw, w\n"
      "   sw    %[t], 0(%[ring])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p), [s] "=&r"(s)
      : ARCH_RSEQ_RECORD_REC(rec), [ring] "r"(ring), [tag] "r"(tag), [ptr] "r"(ptr),
        [rq] "r"(requested), [al] "r"(allocated), [la] "r"(flags), [so] "i"(kSeq),
        [bo] "i"(kBuf), [mo] "i"(kMask)
      : "memory"
      : full);
  return kRecorded;
full:
  return kRecordFull;
}
#undef ARCH_RSEQ_RECORD_HEAD
#undef ARCH_RSEQ_RECORD_SEQ
#undef ARCH_RSEQ_RECORD_REC

// A section for tests only (tests/kernel/test_rseq.cpp): a synchronous
// exception that returns into a section must restart it (kernel/rseq.h,
// Synchronous exceptions). Each pass stores its count in *passes (a store
// before the commit that a rerun repeats: the count is what the test reads);
// the first pass (*passes was 0) then stores to bad, an address that faults,
// and the fault resumes at the commit through the section's own __extable
// entry: inside the section. Restarted, the section makes a second pass,
// which commits value to *out; resumed where the fixup says, it commits after
// one.
__attribute__((always_inline)) inline void rseq_fault_probe(uint32_t* passes, uintptr_t bad, uintptr_t* out,
                                                            uintptr_t value) {
  uint64_t n, m;
  asm volatile(
      "1: lw    %[n], 0(%[passes])\n"
      "   addiw %[m], %[n], 1\n"
      "   sw    %[m], 0(%[passes])\n"
      "   bnez  %[n], 3f\n"
      "4: sw    zero, 0(%[bad])\n"      // faults: resumes at 3
      "3: sd    %[value], 0(%[out])\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      ".pushsection __extable, \"a\"\n.balign 8\n.dword 4b, 3b\n.popsection\n"
      : [n] "=&r"(n), [m] "=&r"(m)
      : [passes] "r"(passes), [bad] "r"(bad), [out] "r"(out), [value] "r"(value)
      : "memory");
}

}  // namespace arch
// clang-format on
