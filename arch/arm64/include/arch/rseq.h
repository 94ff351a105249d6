// SPDX-License-Identifier: Apache-2.0
// AArch64 restartable per-CPU sections (kernel/include/kernel/rseq.h): the
// per-CPU stack pop and push of kmem's magazines and of the page cache, a
// counter increment, and kmemtrace's ring write (whose isb and mrs of the
// virtual counter do not trap either).
// Each is one asm statement: label 1 its start (and restart), label 2 right
// after its commit store, listed in .rseq_table. Outputs are early-clobber,
// inputs (the memory operands' base registers included) are never written,
// so a rewind to 1 runs it again on the same inputs. Only loads, stores,
// arithmetic and branches: nothing that traps (kernel/rseq.h, Synchronous
// exceptions).
#pragma once
#include <cstddef>
#include <cstdint>
#include <kernel/rseq_asm.h>

// The sections' assembly is laid out by hand, an instruction and its
// comment per line: clang-format leaves this file as it is.
// clang-format off

#define ARCH_HAS_RSEQ 1

namespace arch {

// The sections address one CPU's data as base + a constant offset (the
// offsets are the caller's: the field's place in its structure), so that
// the base is the one register the caller computes and every access folds
// its offset into the instruction.

// A per-CPU stack of pointers held as top (the pointer at base + kTop: the
// top entry's address) and limit (the next word: the last slot's), over a
// null sentinel at the bottom (kmem's magazines: mm/kmem_cache.h,
// CpuCache). Pop: if *top is not null: out = *top, top - 8 committed;
// true. Else false, nothing written. (A post-indexed load takes the round
// and steps top at once.)
template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_pop(char* base, void*& out) {
  uint64_t t, m;
  // m is the popped pointer (GCC then returns it without a move on
  // kmem_cache_alloc's fast path).
  asm volatile goto(
      "1: ldr   %[t], [%[base], %[to]]\n"
      "   ldr   %[m], [%[t]], #-8\n"
      "   cbz   %[m], %l[empty]\n"
      "   str   %[t], [%[base], %[to]]\n"  // the commit
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

// Push onto the same stack: if top < limit and *top is not obj, obj goes
// into the word above top (invisible until the commit) and top + 8 is
// committed: kRseqPushed. Else kRseqFull or kRseqOnTop, nothing committed.
template <size_t kTop>
__attribute__((always_inline)) inline RseqPush rseq_push(char* base, void* obj) {
  uint64_t t, l;
  asm volatile goto(
      "1: ldp   %[t], %[l], [%[base], %[to]]\n"
      "   cmp   %[t], %[l]\n"
      "   b.hs  %l[full]\n"
      "   ldr   %[l], [%[t]]\n"
      "   cmp   %[l], %[obj]\n"
      "   b.eq  %l[on_top]\n"
      "   str   %[obj], [%[t], #8]!\n"
      "   str   %[t], [%[base], %[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [obj] "r"(obj), [to] "i"(kTop)
      : "memory", "cc"
      : full, on_top);
  return kRseqPushed;
full:
  return kRseqFull;
on_top:
  return kRseqOnTop;
}

// The page allocator's per-CPU stack of {pointer, 64-bit value} entries,
// 16 bytes each, held as top (at base + kTop: the top entry's address) and
// limit (the next word: the last entry's) over a sentinel entry at the
// bottom whose pointer's mark is not kMark (mm/page.cpp, PageCache). Pop:
// if the 16-bit word that the top entry's pointer points at is kMark (the
// page's flags: a cached page), first/second = the top entry and top - 16
// committed; true. Else (the sentinel: empty; or a corrupt cache) false,
// nothing written. (The pointer is the cache's own; a wild one means a
// corrupt cache, which the masked path would dereference just the same.)
template <size_t kTop, uint16_t kMark>
__attribute__((always_inline)) inline bool rseq_pop_pair(char* base, void*& first, uintptr_t& second) {
  static_assert(kMark < 4096 && kTop % 8 == 0 && kTop < 32768);
  uint64_t t, e;
  void* a;
  uintptr_t b;
  asm volatile goto(
      "1: ldr   %[t], [%[base], %[to]]\n"
      "   ldp   %[a], %[b], [%[t]], #-16\n"
      "   ldrh  %w[e], [%[a]]\n"
      "   cmp   %w[e], %[mk]\n"
      "   b.ne  %l[empty]\n"
      "   str   %[t], [%[base], %[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [e] "=&r"(e), [a] "=&r"(a), [b] "=&r"(b)
      : [base] "r"(base), [to] "i"(kTop), [mk] "i"(kMark)
      : "memory", "cc"
      : empty);
  first = a;
  second = b;
  return true;
empty:
  return false;
}

// Push: if top < limit, {first, second} goes into the entry above top
// (invisible until the commit) and top + 16 is committed; true. Else false,
// nothing committed.
template <size_t kTop>
__attribute__((always_inline)) inline bool rseq_push_pair(char* base, void* first, uintptr_t second) {
  static_assert(kTop % 8 == 0 && kTop <= 504, "ldp's offset");
  uint64_t t, l;
  asm volatile goto(
      "1: ldp   %[t], %[l], [%[base], %[to]]\n"
      "   cmp   %[t], %[l]\n"
      "   b.hs  %l[full]\n"
      "   stp   %[a], %[b], [%[t], #16]!\n"
      "   str   %[t], [%[base], %[to]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t), [l] "=&r"(l)
      : [base] "r"(base), [a] "r"(first), [b] "r"(second), [to] "i"(kTop)
      : "memory", "cc"
      : full);
  return true;
full:
  return false;
}

// The word at base + kOff, plus one; the store is the commit: an
// interrupt between the load and the store rewinds to the load, so the
// interrupt's own increment is not lost.
template <size_t kOff>
__attribute__((always_inline)) inline void rseq_inc(char* base) {
  uint64_t t;
  asm volatile(
      "1: ldr   %[t], [%[base], %[o]]\n"
      "   add   %[t], %[t], #1\n"
      "   str   %[t], [%[base], %[o]]\n"  // the commit
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
  uint64_t t;
  asm volatile(
      "1: ldr   %[t], [%[base], %[i], lsl #3]\n"
      "   .if %c[sub]\n"
      "   sub   %[t], %[t], %[d]\n"
      "   .else\n"
      "   add   %[t], %[t], %[d]\n"
      "   .endif\n"
      "   str   %[t], [%[base], %[i], lsl #3]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [t] "=&r"(t)
      : [base] "r"(base), [i] "r"(index), [d] "r"(d), [sub] "i"(kSub ? 1 : 0)
      : "memory");
}

// kmemtrace's restartable ring write (trace/record.h, Restartable). rec: the
// recorder (its sequence number at rec + kSeq); ring: this CPU's ring (its
// head and limit, two words, at ring, its buffer and mask at ring + kBuf
// and ring + kMask). If the event (kBytes) fits under the limit, it goes
// at buffer + (head & mask) and head + kBytes is committed with a release
// store (stlr: the event's stores are seen before it by the reader's
// acquire of head): kRecorded. Else kRecordFull, nothing committed. The
// sequence number is the virtual counter's low 32 bits (trace/record.h,
// next_seq: isb, then mrs; a rerun reads it again), rec and kSeq unused
// (riscv64's add to a shared counter uses them). The event's first eight
// bytes are the tag's low four, then the sequence number, stored as a pair
// of 32-bit registers (no orr to join them). The caller field is x30 as it is: only for
// frameless functions whose every call is a tail call, entered from the
// allocator's entry point by a tail call (kmem_fastpath.h, kmemtrace's fast
// paths), where x30 is the entry point's caller throughout (BOARD/frameless
// checks that nothing in them writes it); saves the move of it into another
// register.
#define ARCH_RSEQ_RECORD_HEAD(n)                                                      \
  "1: ldp   %w[h], %w[u], [%[ring]]\n"  /* head, limit */                            \
  "   add   %w[t], %w[h], #" #n "\n"                                                 \
  "   cmp   %w[u], %w[t]\n"               /* limit - end < 0: no room */              \
  "   b.mi  %l[full]\n"                                                               \
  "   ldp   %[p], %[u], [%[ring], %[bo]]\n" /* buffer, mask */                        \
  "   and   %[h], %[h], %[u]\n"                                                       \
  "   add   %[p], %[p], %[h]\n"                                                       \
  "   isb\n"                                                                          \
  "   mrs   %[s], cntvct_el0\n"                                                       \
  "   stp   %w[tag], %w[s], [%[p]]\n" /* the tag, then the sequence number */        \
  "   stp   x30, %[ptr], [%[p], #8]\n" /* the caller: the link register (above) */

#define ARCH_HAS_RSEQ_RECORD 1
enum RseqRecord { kRecorded, kRecordFull };

template <size_t kSeq, size_t kBuf, size_t kMask, uint32_t kTag>
__attribute__((always_inline)) inline RseqRecord rseq_record_free(char*, char* ring, uintptr_t ptr, uintptr_t) {
  uint64_t tag = kTag;
  static_assert(kMask == kBuf + 8);
  uint64_t h, u, t, p, s;
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(24)
      "   stlr  %w[t], [%[ring]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p), [s] "=&r"(s)
      : [ring] "r"(ring), [tag] "r"(tag), [ptr] "r"(ptr),
        [bo] "i"(kBuf)
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
                                                                   uint32_t flags, uintptr_t) {
  static_assert(kMask == kBuf + 8);
  uint64_t tag = kTag;
  uint64_t last = uint64_t{flags} | 0xffffffff00000000ull;  // one orr
  uint64_t h, u, t, p, s;
  asm volatile goto(
      ARCH_RSEQ_RECORD_HEAD(48)
      "   stp   %[rq], %[al], [%[p], #24]\n"
      "   str   %[la], [%[p], #40]\n"
      "   stlr  %w[t], [%[ring]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      : [h] "=&r"(h), [u] "=&r"(u), [t] "=&r"(t), [p] "=&r"(p), [s] "=&r"(s)
      : [ring] "r"(ring), [tag] "r"(tag), [ptr] "r"(ptr),
        [rq] "r"(requested), [al] "r"(allocated), [la] "r"(last),
        [bo] "i"(kBuf)
      : "memory", "cc"
      : full);
  return kRecorded;
full:
  return kRecordFull;
}
#undef ARCH_RSEQ_RECORD_HEAD

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
      "1: ldr   %w[n], [%[passes]]\n"
      "   add   %w[m], %w[n], #1\n"
      "   str   %w[m], [%[passes]]\n"
      "   cbnz  %w[n], 3f\n"
      "4: str   wzr, [%[bad]]\n"       // faults: resumes at 3
      "3: str   %[value], [%[out]]\n"  // the commit
      "2:\n" ARCH_RSEQ_ENTRY
      ".pushsection __extable, \"a\"\n.balign 8\n.quad 4b, 3b\n.popsection\n"
      : [n] "=&r"(n), [m] "=&r"(m)
      : [passes] "r"(passes), [bad] "r"(bad), [out] "r"(out), [value] "r"(value)
      : "memory");
}

}  // namespace arch
// clang-format on
