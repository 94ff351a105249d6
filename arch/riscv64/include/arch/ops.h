// SPDX-License-Identifier: Apache-2.0
// RISC-V 64 inline operations for portable code (see kernel/arch.h).
//
// The kernel runs in S-mode: interrupts are masked with sstatus.SIE, the
// per-CPU pointer lives in tp (no user space and no TLS, so tp is free), and
// the counter is the time CSR, whose rate the DTB gives.
#pragma once
#include <cstdint>

struct PerCpu;

namespace arch {

// An MMU (page tables, guard pages, W^X), and frame records a frame-pointer
// walk follows (kernel/backtrace.cpp).
constexpr bool kHasMmu = true;
constexpr bool kHasFrameRecords = true;

constexpr uint64_t kSstatusSie = 1u << 1;

// The /cpus "timebase-frequency" (arch::init_from_dtb fills it in).
extern uint64_t g_timebase_hz;

using IrqState = uint64_t;

// RAM the identity map can reach: Sv39's lower half (the heap window sits in
// the upper half).
constexpr uint64_t kDirectMapLimit = uint64_t{1} << 38;

inline IrqState irq_save() {
  uint64_t s;
  asm volatile("csrrci %0, sstatus, %1" : "=r"(s) : "i"(kSstatusSie) : "memory");
  return s & kSstatusSie;
}
inline void irq_restore(IrqState s) {
  if (s & kSstatusSie) asm volatile("csrsi sstatus, %0" ::"i"(kSstatusSie) : "memory");
  else asm volatile("csrci sstatus, %0" ::"i"(kSstatusSie) : "memory");
}
inline void irq_enable() { asm volatile("csrsi sstatus, %0" ::"i"(kSstatusSie) : "memory"); }
inline void irq_disable() { asm volatile("csrci sstatus, %0" ::"i"(kSstatusSie) : "memory"); }
inline bool irqs_enabled() {
  uint64_t s;
  asm volatile("csrr %0, sstatus" : "=r"(s));
  return s & kSstatusSie;
}

// Spin-wait hint: Zihintpause `pause` (encoded by hand: the kernel's -march
// does not name the extension). It is a HINT, a no-op fence where absent.
inline void cpu_relax() { asm volatile(".insn i 0x0f, 0, x0, x0, 0x010" ::: "memory"); }

// Bit scans of a non-zero word, inline (without Zbb GCC would call libgcc's
// __clzdi2/__ctzdi2: arch/riscv64/libgcc_bitops.cpp has them, but the calls
// would add much to vmem's fast path). A de Bruijn multiply finds the index
// of a lone bit.
namespace bitscan_detail {
constexpr unsigned long kDeBruijn = 0x022fdd63cc95386dul;  // every 6-bit window distinct
struct Index {
  unsigned char of[64];
  constexpr Index() : of() {
    for (unsigned i = 0; i < 64; i++) of[(kDeBruijn << i) >> 58] = static_cast<unsigned char>(i);
  }
};
inline constexpr Index kIndex;
inline unsigned lone_bit_index(unsigned long bit) { return kIndex.of[(bit * kDeBruijn) >> 58]; }
}  // namespace bitscan_detail
inline unsigned lowest_bit(unsigned long x) { return bitscan_detail::lone_bit_index(x & -x); }
inline unsigned highest_bit(unsigned long x) {
  x |= x >> 1;
  x |= x >> 2;
  x |= x >> 4;
  x |= x >> 8;
  x |= x >> 16;
  x |= x >> 32;
  return bitscan_detail::lone_bit_index(x ^ (x >> 1));
}
inline void wait_for_interrupt() { asm volatile("wfi" ::: "memory"); }

// tp holds this hart's PerCpu (the kernel has no thread-local storage),
// as a global register variable: GCC then addresses through tp itself
// (lw a0, 0(tp)) where an asm read costs a move first, on every fast path
// that finds its per-CPU slot. GCC never allocates tp (the psABI's thread
// pointer), so nothing else writes it.
register PerCpu* riscv_this_cpu asm("tp");
inline PerCpu* this_cpu() { return riscv_this_cpu; }
inline void set_this_cpu(PerCpu* p) { riscv_this_cpu = p; }

// The time CSR and its frequency. A hart need not implement the CSR: the
// FU540's U54s (sifive_u) do not, and a read traps to OpenSBI, which
// emulates it from the CLINT's mtime (a trap into M-mode and back). Keep it
// off fast paths: coarse_counter().
inline uint64_t counter() {
  uint64_t v;
  asm volatile("rdtime %0" : "=r"(v)::"memory");
  return v;
}
inline uint64_t counter_frequency() { return g_timebase_hz; }

// Where the board's time CSR is the hardware's, one instruction, and every
// hart reads the one time source (boards/<b>/board.conf TIME_CSR=hardware:
// QEMU virt, whose ACLINT provides rdtime from QEMU's one virtual clock),
// kmemtrace's sequence numbers come from it, as ARM's from its virtual
// counter (trace/include/trace/abi.h, Sequence numbers); where a read traps
// (sifive_u), from one shared counter. Not for a board whose harts' clocks
// only agree to within a tick (all Zicntr promises): a causally later event
// on another hart could then read one less, which no reader breaks as a tie.
// A CSR read is device input to FENCE (the unprivileged ISA, Zicsr: CSR
// access ordering): fence r,i keeps the read after every earlier load (the
// acquire that handed a buffer over), fence i,w before every later store (the
// release that hands it on).
#if defined(BOARD_TIME_CSR_HARDWARE)
#define ARCH_HAS_TRACE_CLOCK 1
inline uint64_t trace_counter() {
  uint64_t v;
  asm volatile("fence r, i\n rdtime %0\n fence i, w" : "=r"(v)::"memory");
  return v;
}
#endif

// The counter for time stamps on fast paths (plat::ticks: kmemleak stamps
// every allocation): the latest reading any hart's timer tick took
// (timer_arm, arch.cpp), one load and never a trap. It lags counter() by
// less than a tick period while some hart takes its ticks, and never goes
// back. 0 before the first tick.
extern uint64_t g_counter_at_tick;
inline uint64_t coarse_counter() {
  // A time stamp: it orders nothing, so relaxed.
  return __atomic_load_n(&g_counter_at_tick, __ATOMIC_RELAXED);
}

// The cycle CSR (the firmware lets S-mode read it: mcounteren.CY). Under
// QEMU with -icount shift=0 it counts instructions exactly.
inline uint64_t cycles() {
  uint64_t v;
  asm volatile("rdcycle %0" : "=r"(v)::"memory");
  return v;
}

inline uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// Frame records (kernel/backtrace.h): s0 points just above the saved
// registers, ra at s0 - 8 and the caller's s0 at s0 - 16; a function that
// calls nothing saves only the caller's s0, at s0 - 8.
constexpr int kFrameSavedFp = -16;
constexpr int kFrameSavedRa = -8;
constexpr bool kLeafFramesSaveOnlyFp = true;

// A static branch (kernel/static_branch.cpp): false, as one nop, until the
// nop is patched into a branch to the `true` side; every site is listed in
// the section of its key as {site, target, alt}. Two keys: the allocators'
// hooks on allocation (.static_branches) and on free
// (.static_branches.free). A three-way site (static_branch_*_mode) has a
// second target, alt, which kmemtrace alone gets (mm/hook_mode.h); a two-way site lists its one target twice.
#define ARCH_HAS_STATIC_BRANCH 1
constexpr unsigned kStaticBranchSiteAlign = 2;  // see below
// The site is a 4-byte nop (never a compressed one, so that a jal fits), on
// whatever 2-byte boundary it falls: a 4-byte alignment would cost a c.nop
// of padding, executed, at half the sites. Patching writes a misaligned
// site as two halves, which is safe because the other harts are parked
// while text changes (arch::text_patch_stops_others).
#define ARCH_STATIC_BRANCH_SITE(section, targets) \
  ".option push\n"                                \
  ".option norvc\n"                               \
  "1: nop\n"                                      \
  ".option pop\n"                                 \
  ".pushsection " section ", \"a\"\n"             \
  ".balign 8\n"                                   \
  ".dword 1b, " targets "\n"                      \
  ".popsection\n"
#define ARCH_STATIC_BRANCH(section) \
  asm goto(ARCH_STATIC_BRANCH_SITE(section, "%l[on], %l[on]")::::on); \
  return false;                                                      \
on:                                                                  \
  return true;
#define ARCH_STATIC_BRANCH_MODE(section) \
  asm goto(ARCH_STATIC_BRANCH_SITE(section, "%l[hooked], %l[alt]")::::hooked, alt); \
  return 0;                                                                       \
hooked:                                                                           \
  return 1;                                                                       \
alt:                                                                              \
  return 2;
__attribute__((always_inline)) inline bool static_branch_alloc_hooks() { ARCH_STATIC_BRANCH(".static_branches") }
__attribute__((always_inline)) inline bool static_branch_free_hooks() { ARCH_STATIC_BRANCH(".static_branches.free") }
// 0: the nop; 1: branched to the site's target; 2: to its alt.
__attribute__((always_inline)) inline unsigned static_branch_alloc_mode() { ARCH_STATIC_BRANCH_MODE(".static_branches") }
__attribute__((always_inline)) inline unsigned static_branch_free_mode() { ARCH_STATIC_BRANCH_MODE(".static_branches.free") }
#undef ARCH_STATIC_BRANCH_MODE
#undef ARCH_STATIC_BRANCH_SITE
#undef ARCH_STATIC_BRANCH

}  // namespace arch
