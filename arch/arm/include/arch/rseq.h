// SPDX-License-Identifier: Apache-2.0
// 32-bit ARM restartable per-CPU sections (kernel/include/kernel/rseq.h):
// the per-CPU stack pop and push of kmem's magazines and of the page
// cache, a counter increment, and kmemtrace's ring write, with the
// contract of arch/arm64/include/arch/rseq.h (here the slots are 4 bytes).
// Each is one asm statement: label 1 its start (and restart), label 2
// right after its commit, one 32-bit str, listed in .rseq_table. Outputs
// are early-clobber, inputs are never written, so a rewind to 1 runs it
// again on the same inputs. Only loads, stores, arithmetic, branches and,
// in the ring write, isb, the virtual counter's mrrc (CNTVCT: always
// readable at PL1; CNTHCTL gates only the physical counter) and dmb:
// nothing that traps (kernel/rseq.h, Synchronous exceptions). The offsets
// must fit a load's 12-bit immediate (a pair's, kPairOffsetLimit).
// Little-endian: a 64-bit field is its low word, then its high one.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
#pragma once
#include <cstddef>
#include <cstdint>
#include <kernel/rseq_asm.h>

// The sections' assembly is laid out by hand, an instruction and its
// comment per line: clang-format leaves this file as it is.
// clang-format off

#define ARCH_HAS_RSEQ 1

// Two adjacent words (off2 = off1 + 4) to or from two registers. Thumb-2's
// ldrd and strd take any two registers (not sp or pc; ldrd's two
// different), so they are one instruction; ARM state's want an even/odd
// pair, which an asm operand cannot ask for, so they are two ldr or str
// (C++ is Thumb-2 unless MAGPIE_ARM_ISA=arm: arch/arm/CMakeLists.txt).
// off1: a multiple of 4 below kPairOffsetLimit (Thumb-2: ldrd's 8-bit
// word offset, below 1024; ARM state: off2 within ldr's 12 bits).
#if defined(__thumb__)
#define ARM_LDR_PAIR(r1, r2, base, off1, off2) "   ldrd  " r1 ", " r2 ", [" base ", #" off1 "]\n"
#define ARM_STR_PAIR(r1, r2, base, off1, off2) "   strd  " r1 ", " r2 ", [" base ", #" off1 "]\n"
constexpr size_t kPairOffsetLimit = 1024;
#else
#define ARM_LDR_PAIR(r1, r2, base, off1, off2) \
  "   ldr   " r1 ", [" base ", #" off1 "]\n   ldr   " r2 ", [" base ", #" off2 "]\n"
#define ARM_STR_PAIR(r1, r2, base, off1, off2) \
  "   str   " r1 ", [" base ", #" off1 "]\n   str   " r2 ", [" base ", #" off2 "]\n"
constexpr size_t kPairOffsetLimit = 4096 - 4;
#endif

namespace arch {

// kmem's magazines as top and limit over a null sentinel: arm64's
// rseq_pop and rseq_push, with 4-byte words. The pop's post-indexed load
// takes the round and steps top at once; the push's pre-indexed store
// steps top. (The push loads top and limit with ARM_LDR_PAIR: in ARM state
// two ldr, since an ldrd there wants an even/odd register pair, which
// would cost the hooked frees a frame of 8 registers.)
template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_pop(char* base, void*& out) {
  uint32_t t, m;
  asm volatile goto(
      "1: ldr   %[t], [%[base], #%c[to]]\n"
      "   ldr   %[m], [%[t]], #-4\n"
      "   cmp   %[m], #0\n"
      "   beq   %l[empty]\n"
      "   str   %[t], [%[base], #%c[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [m] "=&r"(m)
      : [base] "r"(base), [to] "i"(kTop)
      : "memory", "cc"
      : empty);
  out = reinterpret_cast<void*>(m);
  return true;
empty:
  return false;
}

template <size_t kTop>
__attribute__((always_inline)) inline RseqPush rseq_push(char* base, void* obj) {
  static_assert(kTop % 4 == 0 && kTop < kPairOffsetLimit);
  uint32_t t, l;
  asm volatile goto(
      "1:\n" ARM_LDR_PAIR("%[t]", "%[l]", "%[base]", "%c[to]", "%c[lo]")
      "   cmp   %[t], %[l]\n"
      "   bhs   %l[full]\n"
      "   ldr   %[l], [%[t]]\n"
      "   cmp   %[l], %[obj]\n"
      "   beq   %l[on_top]\n"
      "   str   %[obj], [%[t], #4]!\n"
      "   str   %[t], [%[base], #%c[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [obj] "r"(obj), [to] "i"(kTop), [lo] "i"(kTop + 4)
      : "memory", "cc"
      : full, on_top);
  return kRseqPushed;
full:
  return kRseqFull;
on_top:
  return kRseqOnTop;
}

// The page allocator's per-CPU stack of {pointer, word} entries, 8 bytes
// each (the word is a frame number: mm/page.cpp, CachedPage): as arm64's
// rseq_pop_pair and rseq_push_pair (top and limit, two words at base +
// kTop, over a sentinel entry). The pop's post-indexed load takes the
// pointer and steps top at once; it tests the mark in the register the
// word then goes to. Four registers in all, so that page_alloc, whose
// kmflag must outlive the section for the empty path, fits in r0-r3 and
// r12 with no frame (a 64-bit value took a fifth, and so r4-r5 saved
// and restored).
template <size_t kTop, uint16_t kMark>
__attribute__((always_inline)) inline bool rseq_pop_pair(char* base, void*& first, uintptr_t& second) {
  static_assert(kMark < 256 && kTop < 4096);
  uint32_t t, w;
  void* a;
  asm volatile goto(
      "1: ldr   %[t], [%[base], #%c[to]]\n"
      "   ldr   %[a], [%[t]], #-8\n"
      "   ldrh  %[w], [%[a]]\n"
      "   cmp   %[w], #%c[mk]\n"
      "   bne   %l[empty]\n"
      "   ldr   %[w], [%[t], #12]\n"
      "   str   %[t], [%[base], #%c[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [a] "=&r"(a), [w] "=&r"(w)
      : [base] "r"(base), [to] "i"(kTop), [mk] "i"(kMark)
      : "memory", "cc"
      : empty);
  first = a;
  second = w;
  return true;
empty:
  return false;
}

// The entry goes in with one pre-indexed strd in Thumb-2 (two str in ARM
// state, whose strd wants an even/odd pair), which also steps top.
template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_push_pair(char* base, void* first, uintptr_t second) {
  static_assert(kTop % 4 == 0 && kTop < kPairOffsetLimit);
  uint32_t t, l;
  asm volatile goto(
      "1:\n" ARM_LDR_PAIR("%[t]", "%[l]", "%[base]", "%c[to]", "%c[lo]")
      "   cmp   %[t], %[l]\n"
      "   bhs   %l[full]\n"
#if defined(__thumb__)
      "   strd  %[a], %[b], [%[t], #8]!\n"
#else
      "   str   %[a], [%[t], #8]!\n"
      "   str   %[b], [%[t], #4]\n"
#endif
      "   str   %[t], [%[base], #%c[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [a] "r"(first), [b] "r"(second), [to] "i"(kTop), [lo] "i"(kTop + 4)
      : "memory", "cc"
      : full);
  return true;
full:
  return false;
}

// The word at base + kOff, plus one; the store is the commit.
template <size_t kOff>
__attribute__((always_inline)) inline void rseq_inc(char* base) {
  uint32_t t;
  asm volatile(
      "1: ldr   %[t], [%[base], #%c[o]]\n"
      "   add   %[t], %[t], #1\n"
      "   str   %[t], [%[base], #%c[o]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t)
      : [base] "r"(base), [o] "i"(kOff)
      : "memory");
}

// The 64-bit word at base + 8 * index, plus d (minus d: kSub) (allocation profiling's
// per-CPU counters: mm/alloc_tag.cpp, Counters), with IRQs masked for the
// five instructions: not a restartable section, whose commit is one store.
// strd would be one, but an interrupt may abandon an strd half written
// where SCTLR.FI (low interrupt latency) is set, which the kernel cannot
// rule out everywhere (the bit is read-only to it under a hypervisor), and
// the rerun would then add d to a half-updated word. %Q/%R: the low and
// high registers of a 64-bit operand, an even/odd pair in ARM state, as
// ldrd/strd want.
template <bool kSub = false>
__attribute__((always_inline)) inline void cpu_add_indexed(uintptr_t base, uintptr_t index, int64_t d) {
  uint32_t a, s;
  uint64_t t;
  asm volatile(
      "   mrs   %[s], cpsr\n"
      "   cpsid i\n"
      "   add   %[a], %[base], %[i], lsl #3\n"
      "   ldrd  %Q[t], %R[t], [%[a]]\n"
      "   .if %c[sub]\n"
      "   subs  %Q[t], %Q[t], %Q[d]\n"
      "   sbc   %R[t], %R[t], %R[d]\n"
      "   .else\n"
      "   adds  %Q[t], %Q[t], %Q[d]\n"
      "   adc   %R[t], %R[t], %R[d]\n"
      "   .endif\n"
      "   strd  %Q[t], %R[t], [%[a]]\n"
      "   msr   cpsr_c, %[s]\n"
      : [a] "=&r"(a), [s] "=&r"(s), [t] "=&r"(t)
      : [base] "r"(base), [i] "r"(index), [d] "r"(d), [sub] "i"(kSub ? 1 : 0)
      : "memory", "cc");
}

// kmemtrace's restartable ring write (trace/record.h, Restartable), with the
// contract of arch/arm64/include/arch/rseq.h's rseq_record_free: the ring's
// head and limit at ring, its buffer and mask at ring + kBuf and ring +
// kMask; the sequence number is the virtual counter's low 32 bits (isb,
// then mrrc: a rerun reads it again); the commit is the head's store after
// a dmb ish (a release store: the event's stores are seen before it by the
// reader's acquire of head). The 64-bit fields take their high words as 0
// (addresses and sizes are 32 bits here). The caller field is the caller
// argument (GCC's own read of the return address: lr is an ordinary
// register to GCC here, which arm64's x30 in these functions is not).
// Four scratch registers: the sequence number lands in h's (dead by
// then), the tag and the constant words in u's (the tag an immediate, so
// that it takes no register of its own).
#define ARCH_RSEQ_RECORD_HEAD(n)                                       \
  "1:\n" ARM_LDR_PAIR("%[h]", "%[u]", "%[ring]", "0", "4") /* head, limit */ \
  "   add   %[t], %[h], #" #n "\n"                                    \
  "   subs  %[u], %[u], %[t]\n"                                       \
  "   bmi   %l[full]\n" /* limit - end < 0: no room */                \
  ARM_LDR_PAIR("%[p]", "%[u]", "%[ring]", "%c[bo]", "%c[mo]") /* buffer, mask */ \
  "   and   %[h], %[h], %[u]\n"                                       \
  "   add   %[p], %[p], %[h]\n"                                       \
  "   isb\n"                                                          \
  "   mrrc  p15, 1, %[h], %[u], c14\n" /* CNTVCT: low, high */        \
  "   movw  %[u], #%c[tlo]\n"             /* the tag */                 \
  "   movt  %[u], #%c[thi]\n"                                         \
  ARM_STR_PAIR("%[u]", "%[h]", "%[p]", "0", "4")                      \
  "   mov   %[u], #0\n"                                               \
  ARM_STR_PAIR("%[ca]", "%[u]", "%[p]", "8", "12")                    \
  ARM_STR_PAIR("%[ptr]", "%[u]", "%[p]", "16", "20")

#define ARCH_HAS_RSEQ_RECORD 1
enum RseqRecord { kRecorded, kRecordFull };

template <size_t kSeq, size_t kBuf, size_t kMask, uint32_t kTag>
__attribute__((always_inline)) inline RseqRecord rseq_record_free(char*, char* ring, uintptr_t ptr, uintptr_t caller) {
  static_assert(kMask == kBuf + 4 && kBuf % 4 == 0 && kBuf < kPairOffsetLimit);
  uint32_t h, u, t, p;
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(24)
      "   dmb   ish\n"
      "   str   %[t], [%[ring]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p)
      : [ring] "r"(ring), [ptr] "r"(ptr), [ca] "r"(caller), [bo] "i"(kBuf), [mo] "i"(kMask),
        [tlo] "i"(kTag & 0xffff), [thi] "i"(kTag >> 16)
      : "memory", "cc"
      : full);
  return kRecorded;
full:
  return kRecordFull;
}

// The same for an allocation: then requested and allocated at 24 and 32,
// flags at 40 and the target CPU, -1 (this one), at 44.
template <size_t kSeq, size_t kBuf, size_t kMask, uint32_t kTag>
__attribute__((always_inline)) inline RseqRecord rseq_record_alloc(char*, char* ring, uintptr_t ptr,
                                                                   uint64_t requested, uint64_t allocated,
                                                                   uint32_t flags, uintptr_t caller) {
  static_assert(kMask == kBuf + 4 && kBuf % 4 == 0 && kBuf < kPairOffsetLimit);
  uint32_t h, u, t, p;
  uint32_t rq = static_cast<uint32_t>(requested), al = static_cast<uint32_t>(allocated);
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(48)
      ARM_STR_PAIR("%[rq]", "%[u]", "%[p]", "24", "28")
      ARM_STR_PAIR("%[al]", "%[u]", "%[p]", "32", "36")
      "   mvn   %[u], #0\n"
      ARM_STR_PAIR("%[fl]", "%[u]", "%[p]", "40", "44")
      "   dmb   ish\n"
      "   str   %[t], [%[ring]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p)
      : [ring] "r"(ring), [ptr] "r"(ptr), [ca] "r"(caller), [rq] "r"(rq), [al] "r"(al),
        [fl] "r"(flags), [bo] "i"(kBuf), [mo] "i"(kMask),
        [tlo] "i"(kTag & 0xffff), [thi] "i"(kTag >> 16)
      : "memory", "cc"
      : full);
  return kRecorded;
full:
  return kRecordFull;
}
#undef ARCH_RSEQ_RECORD_HEAD
#undef ARM_LDR_PAIR
#undef ARM_STR_PAIR

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
  uint32_t n, m;
  asm volatile(
      "1: ldr   %[n], [%[passes]]\n"
      "   add   %[m], %[n], #1\n"
      "   str   %[m], [%[passes]]\n"
      "   cmp   %[n], #0\n"
      "   bne   3f\n"
      "4: str   %[n], [%[bad]]\n"      // faults: resumes at 3
      "3: str   %[value], [%[out]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      ".pushsection __extable, \"a\"\n.balign 4\n.long 4b, 3b\n.popsection\n"
      : [n] "=&r"(n), [m] "=&r"(m)
      : [passes] "r"(passes), [bad] "r"(bad), [out] "r"(out), [value] "r"(value)
      : "memory", "cc");
}

}  // namespace arch
// clang-format on
