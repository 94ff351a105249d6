// SPDX-License-Identifier: Apache-2.0
// The stack depot in the kernel: captures through the arch's frame-pointer
// walk on every core, from the caller's own stack and from cross-call
// handlers on the others.
#include <arch/ops.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/ktest.h>
#include <kernel/percpu.h>
#include <kernel/smp.h>
#include <kernel/timer.h>
#include <mm/stackdepot.h>
#include <initializer_list>

namespace {

using mm::StackHandle;

// Two call sites. The empty asm after each call keeps it from becoming a
// tail call, so the site's own frame is in the trace.
__attribute__((noinline)) StackHandle site_a() {
  StackHandle h = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");
  return h;
}
__attribute__((noinline)) StackHandle site_b() {
  StackHandle h = mm::stackdepot_capture(0);
  asm volatile("" ::: "memory");
  return h;
}

struct Captures {
  StackHandle a[kMaxCpus][2];  // site_a twice from one call site
  StackHandle b[kMaxCpus];
  bool ran[kMaxCpus];
};

void capture_here(void* arg) {
  auto* c = static_cast<Captures*>(arg);
  unsigned me = cpu_id();
  unsigned times = 2;
  asm("" : "+r"(times));  // a count the compiler cannot see: the loop stays one call site
  for (unsigned i = 0; i < times; i++) c->a[me][i] = site_a();
  c->b[me] = site_b();
  c->ran[me] = true;
}

bool in_text(uintptr_t pc) {
  return pc >= reinterpret_cast<uintptr_t>(__text_start) && pc < reinterpret_cast<uintptr_t>(__text_end);
}

// The frames of h, all in the kernel text, the first inside `site` (a
// return address a few instructions past its entry). 0 if any check fails.
unsigned check_frames(StackHandle h, StackHandle (*site)(), const uintptr_t** pcs) {
  unsigned n = mm::stackdepot_fetch(h, pcs);
  KEXPECT(n >= 2);
  if (n < 2) return 0;
  for (unsigned i = 0; i < n; i++) KEXPECT(in_text((*pcs)[i]));
  auto entry = reinterpret_cast<uintptr_t>(site);
  KEXPECT((*pcs)[0] > entry && (*pcs)[0] < entry + 64);
  return n;
}

}  // namespace

KTEST(stackdepot_capture_on_every_core) {
  KASSERT(mm::stackdepot_init(mm::stackdepot_default_pool()));
  static Captures c;
  __builtin_memset(&c, 0, sizeof c);
  smp::call_on_all(capture_here, &c);
  const uintptr_t* first_a = nullptr;
  const uintptr_t* first_b = nullptr;
  for (unsigned cpu = 0; cpu < g_cpu_count; cpu++) {
    KEXPECT(c.ran[cpu]);
    StackHandle a = c.a[cpu][0], b = c.b[cpu];
    KEXPECT(a != 0 && b != 0);
    KEXPECT_EQ(c.a[cpu][1], a);  // the same call site, the same stack: one record
    KEXPECT(b != a);
    const uintptr_t *fa, *fb;
    unsigned na = check_frames(a, site_a, &fa);
    unsigned nb = check_frames(b, site_b, &fb);
    if (!na || !nb) continue;
    // The second frame is the return address into capture_here, at two
    // call sites; from there on the stacks are the same.
    KEXPECT(fa[1] != fb[1]);
    KEXPECT_EQ(na, nb);
    for (unsigned i = 2; i < na && i < nb; i++) KEXPECT_EQ(fa[i], fb[i]);
    // Every core returns to the same places in the sites and capture_here.
    if (!first_a) {
      first_a = fa;
      first_b = fb;
    }
    KEXPECT_EQ(fa[0], first_a[0]);
    KEXPECT_EQ(fa[1], first_a[1]);
    KEXPECT_EQ(fb[0], first_b[0]);
  }
  mm::StackDepotStats s;
  mm::stackdepot_stats(s);
  KEXPECT(s.traces >= 2);
  KEXPECT_EQ(s.dropped, 0u);
  KEXPECT(s.bytes_used <= s.bytes_total);
  KEXPECT(s.bytes_total > 0);
}

namespace {

uintptr_t g_cost_traces[8][mm::kStackDepotMaxFrames];

__attribute__((noinline)) StackHandle null_save(const uintptr_t* pcs, unsigned n) {
  asm volatile("" ::"r"(pcs), "r"(n) : "memory");
  return 1;
}
__attribute__((noinline)) StackHandle null_capture(unsigned skip) {
  asm volatile("" ::"r"(skip) : "memory");
  return 1;
}
// Captures (or not) `depth` frames deeper than the caller.
__attribute__((noinline)) StackHandle capture_at(unsigned depth, bool real) {
  StackHandle h = depth > 1 ? capture_at(depth - 1, real) : real ? mm::stackdepot_capture(0) : null_capture(0);
  asm volatile("" ::: "memory");  // not a tail call: each level keeps its frame
  return h;
}

// 100 calls with interrupts masked, in counter ticks and in nanoseconds,
// each the best of 5 (the counter is global under icount: another core's
// instructions could land in one).
struct Cost {
  uint64_t ticks, ns;
};
template <class F>
Cost cost_of_100(F&& body) {
  Cost best{~uint64_t{0}, ~uint64_t{0}};
  for (int rep = 0; rep < 5; rep++) {
    arch::IrqState s = arch::irq_save();
    uint64_t n0 = timer::now_ns();
    uint64_t t0 = arch::cycles();
    for (unsigned i = 0; i < 100; i++) body(i);
    uint64_t t = arch::cycles() - t0;
    uint64_t n = timer::now_ns() - n0;
    arch::irq_restore(s);
    if (t < best.ticks) best.ticks = t;
    if (n < best.ns) best.ns = n;
  }
  return best;
}

// Does the counter count instructions (qemu-run --icount)? 100 calls of
// 1000 and of 2000 nops then cost 100000 and 200000 ticks more than 100
// calls of none (the best of 5 each; within 2: where the counter's reads
// fall), where a counter of time matching both would be a coincidence
// twice over. (Out of line: 4 KiB of code would put an ARM literal pool out of
// reach.)
[[gnu::noinline]] void no_nops() { asm volatile("" ::: "memory"); }
[[gnu::noinline]] void thousand_nops() { asm volatile(".rept 1000\n nop\n .endr" ::: "memory"); }
bool counting_instructions() {
  Cost none = cost_of_100([](unsigned) { no_nops(); });
  Cost one = cost_of_100([](unsigned) { thousand_nops(); });
  Cost two = cost_of_100([](unsigned) {
    thousand_nops();
    thousand_nops();
  });
  Cost none2 = cost_of_100([](unsigned) {
    no_nops();
    no_nops();
  });
  auto near = [](uint64_t got, uint64_t want) { return got + 2 >= want && got <= want + 2; };
  return near(one.ticks - none.ticks, 100 * 1000) && near(two.ticks - none2.ticks, 100 * 2000);
}

// The bounds, per call, net of the same loop calling an empty function.
// In instructions (under icount, exact; CTest BOARD/bench runs the test
// so), base + per frame, about 1.5 times the most any board takes
// (measured with this test under qemu-run --icount on every board that
// counts them; it prints each figure beside its bound, and
// docs/performance.md, "The stack depot", shows qemu-virt-arm64's): for a
// save of a stored trace (hash, one bucket, compare), and for a capture
// through frame records (arm64, arm in ARM state, riscv64) or through the
// unwind tables (Thumb code: arm's default). So a change that makes a save
// or a walk half as dear again fails. In time otherwise, a bound against
// the catastrophic only (a depot that searched every trace): 10 to 200
// times what the boards take (best of 5 on a host loaded 5 times over its
// cores), so that QEMU slowed by its host stays under it.
struct Bound {
  uint64_t insns_base, insns_per_frame, ns;
};
constexpr Bound kSaveBound{100, 18, 20000};
constexpr Bound kCaptureBound = arch::kHasFrameRecords ? Bound{450, 150, 50000} : Bound{1500, 220, 50000};

bool within(const char* what, unsigned frames, Cost c, Cost base, bool insns, const Bound& b) {
  uint64_t net = c.ticks > base.ticks ? c.ticks - base.ticks : 0;
  uint64_t net_ns = c.ns > base.ns ? c.ns - base.ns : 0;
  uint64_t insn_bound = b.insns_base + b.insns_per_frame * frames;
  const auto ull = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (insns) {
    kprintf("    stackdepot: %s, %u frames: %llu.%llu instructions per call (bound %llu)\n", what, frames,
            ull(net / 100), ull(net / 10 % 10), ull(insn_bound));
    return net <= 100 * insn_bound;
  }
  kprintf("    stackdepot: %s, %u frames: %llu ns per call (bound %llu; %llu.%llu ticks)\n", what, frames,
          ull(net_ns / 100), ull(b.ns), ull(net / 100), ull(net / 10 % 10));
  return net_ns <= 100 * b.ns;
}

}  // namespace

// What a save of a stored trace and a capture cost in the kernel, within
// a bound: in instructions under qemu-run --icount (CTest BOARD/bench runs
// this test so: "counting instructions" in its output), in time otherwise
// (see Bound).
KTEST(stackdepot_cost_per_call) {
  KASSERT(mm::stackdepot_init(mm::stackdepot_default_pool()));
  const bool insns = counting_instructions();
  kprintf("    stackdepot: the counter is %s\n",
          insns ? "counting instructions (qemu-run --icount): bounds in instructions" : "not counting instructions: bounds in time");
  for (unsigned t = 0; t < 8; t++)
    for (unsigned k = 0; k < mm::kStackDepotMaxFrames; k++)
      g_cost_traces[t][k] = reinterpret_cast<uintptr_t>(__text_start) + 0x100 * t + 4 * k;
  for (unsigned frames : {4u, 8u, 16u})
    for (unsigned t = 0; t < 8; t++) KASSERT(mm::stackdepot_save(g_cost_traces[t], frames) != 0);
  // 32 more traces stored after them (1.5 KB of the pool): the saves below
  // then find theirs among others, as a depot in use does, and a depot
  // that chained traces together (a hash that no longer spreads them)
  // makes them walk past these.
  for (unsigned i = 0; i < 32; i++) {
    uintptr_t other[4];
    for (unsigned k = 0; k < 4; k++) other[k] = reinterpret_cast<uintptr_t>(__text_start) + 0x1000 + 0x40 * i + 4 * k;
    KASSERT(mm::stackdepot_save(other, 4) != 0);
  }
  for (unsigned frames : {4u, 8u, 16u}) {
    Cost save = cost_of_100([frames](unsigned i) { mm::stackdepot_save(g_cost_traces[i % 8], frames); });
    Cost base = cost_of_100([frames](unsigned i) { null_save(g_cost_traces[i % 8], frames); });
    KEXPECT(within("save of a stored trace", frames, save, base, insns, kSaveBound));
  }
  // From here, and from 10 frames deeper (the walk then stops at 16).
  for (unsigned depth : {1u, 11u}) {
    const uintptr_t* pcs;
    unsigned frames = mm::stackdepot_fetch(capture_at(depth, true), &pcs);
    KEXPECT(frames > 0);
    Cost capture = cost_of_100([depth](unsigned) { capture_at(depth, true); });
    Cost base = cost_of_100([depth](unsigned) { capture_at(depth, false); });
    KEXPECT(within("capture (stored)", frames, capture, base, insns, kCaptureBound));
  }
}
