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

// Ticks for 100 calls with interrupts masked, the best of 5 (the counter
// is global under icount: another core's instructions could land in one).
template <class F>
uint64_t ticks_per_100(F&& body) {
  uint64_t best = ~uint64_t{0};
  for (int rep = 0; rep < 5; rep++) {
    arch::IrqState s = arch::irq_save();
    uint64_t t0 = arch::cycles();
    for (unsigned i = 0; i < 100; i++) body(i);
    uint64_t t = arch::cycles() - t0;
    arch::irq_restore(s);
    if (t < best) best = t;
  }
  return best;
}

void print_cost(const char* what, unsigned frames, uint64_t ticks, uint64_t base) {
  uint64_t net = ticks > base ? ticks - base : 0;
  kprintf("    stackdepot: %s, %u frames: %llu.%llu ticks per call\n", what, frames,
          static_cast<unsigned long long>(net / 100), static_cast<unsigned long long>(net / 10 % 10));
}

}  // namespace

// What a save of a stored trace and a capture cost in the kernel. Under
// qemu-run --icount a tick is an instruction; otherwise the figures are
// time-based and only printed.
KTEST(stackdepot_cost_per_call) {
  KASSERT(mm::stackdepot_init(mm::stackdepot_default_pool()));
  for (unsigned t = 0; t < 8; t++)
    for (unsigned k = 0; k < mm::kStackDepotMaxFrames; k++)
      g_cost_traces[t][k] = reinterpret_cast<uintptr_t>(__text_start) + 0x100 * t + 4 * k;
  for (unsigned frames : {4u, 8u, 16u}) {
    for (unsigned t = 0; t < 8; t++) KASSERT(mm::stackdepot_save(g_cost_traces[t], frames) != 0);
    uint64_t save = ticks_per_100([frames](unsigned i) { mm::stackdepot_save(g_cost_traces[i % 8], frames); });
    uint64_t base = ticks_per_100([frames](unsigned i) { null_save(g_cost_traces[i % 8], frames); });
    print_cost("save of a stored trace", frames, save, base);
  }
  // From here, and from 10 frames deeper (the walk then stops at 16).
  for (unsigned depth : {1u, 11u}) {
    const uintptr_t* pcs;
    unsigned frames = mm::stackdepot_fetch(capture_at(depth, true), &pcs);
    KEXPECT(frames > 0);
    uint64_t capture = ticks_per_100([depth](unsigned) { capture_at(depth, true); });
    uint64_t base = ticks_per_100([depth](unsigned) { capture_at(depth, false); });
    print_cost("capture (stored)", frames, capture, base);
  }
}
