// SPDX-License-Identifier: Apache-2.0
// Portable checks of the arch layer: page-table changes seen through
// arch::translate (large leaves split by a partial unmap on every arch),
// static-branch reach, parking the other cores, the backtrace walker.
#include <arch/ops.h>
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/ktest.h>
#include <kernel/smp.h>
#include <kernel/static_branch.h>
#include <kernel/timer.h>
#include <mm/hooks.h>
#include <mm/page.h>
#include <initializer_list>

namespace {

constexpr uintptr_t kLarge = uintptr_t{2} << 20;  // a level-2 block (arm64, riscv64), two sections (arm)

// The top 4 MiB of the heap window: far from where the heap arena starts
// allocating (its bottom), and checked to be unmapped before use.
uintptr_t test_window() {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  return base + size - 2 * kLarge;
}

bool unmapped(uintptr_t va, size_t size) {
  for (uintptr_t a = va; a - va < size; a += kPageSize)
    if (arch::translate(a)) return false;
  return true;
}

}  // namespace

KTEST(map_large_leaf_then_split_it_by_a_partial_unmap) {
  if (!arch::kHasMmu) KSKIP("no MMU: nothing is mapped");
  const uintptr_t va = test_window();
  // 2 MiB of RAM (a buddy block, so aligned to its size, and all of it in
  // the identity map: not the kernel image's 2 MiB, whose stack guard pages
  // are holes wherever the layout puts them), mapped a second time
  // read-only.
  unsigned order = 0;
  while ((mm::kPageBytes << order) < kLarge) order++;
  const uint64_t pa = mm::page_alloc(order, KM_SLEEP);
  KASSERT(pa && !(pa & (kLarge - 1)));
  for (uintptr_t o = 0; o < kLarge; o += sizeof(uint32_t))  // contents to compare
    *reinterpret_cast<volatile uint32_t*>(static_cast<uintptr_t>(pa) + o) = static_cast<uint32_t>(o * 2654435761u);
  KASSERT(unmapped(va, kLarge));
  KASSERT(arch::map(va, pa, kLarge, arch::kMapRead));
  bool right = true;
  for (uintptr_t o = 0; o < kLarge; o += 64 * 1024) right &= arch::translate(va + o + 8) == pa + o + 8;
  KEXPECT(right);
  KEXPECT_EQ(*reinterpret_cast<volatile const uint32_t*>(va + 0x1234 * 4),
             *reinterpret_cast<volatile const uint32_t*>(static_cast<uintptr_t>(pa) + 0x1234 * 4));

  // One page out of the middle: the leaf is split, the other pages stay.
  const uintptr_t hole = va + kLarge / 2 + 3 * kPageSize;
  arch::unmap(hole, kPageSize);
  KEXPECT_EQ(arch::translate(hole), 0u);
  unsigned still = 0;
  right = true;
  for (uintptr_t o = 0; o < kLarge; o += kPageSize) {
    if (va + o == hole) continue;
    uint64_t t = arch::translate(va + o + 4);
    still += t != 0;
    right &= t == pa + o + 4;
  }
  KEXPECT_EQ(still, kLarge / kPageSize - 1);
  KEXPECT(right);
  KEXPECT_EQ(*reinterpret_cast<volatile const uint32_t*>(hole + kPageSize),
             *reinterpret_cast<volatile const uint32_t*>(static_cast<uintptr_t>(pa) + (hole + kPageSize - va)));

  arch::unmap(va, kLarge);
  KEXPECT(unmapped(va, kLarge));
  mm::page_free(pa, order);
}

// Static branches: a branch is only written where the arch's encoding
// reaches its target; anything else is refused and leaves the site as it
// was (before, the offset was masked into a branch to somewhere else).
namespace {
struct StaticSite {
  uintptr_t site, target, alt;
};
extern "C" const StaticSite __static_branches_start[], __static_branches_free_start[], __static_branches_end[];

// The instruction at a site, which may lie on a 2-byte boundary (riscv64,
// arm's Thumb-2).
uint32_t site_insn(uintptr_t site) {
  const auto* half = reinterpret_cast<const volatile uint16_t*>(site);
  return uint32_t{half[0]} | uint32_t{half[1]} << 16;
}
}  // namespace

// Every site lies on a boundary the arch allows (arm64, arm in ARM state:
// 4 bytes; riscv64, arm in Thumb-2: 2, unpadded), and a site on the
// least aligned of them (2 bytes where allowed, else 4) is patched whole:
// the branch, then the nop again, read back. (The suites that boot with the
// hooks on run through such sites patched.)
KTEST(static_branch_patches_sites_on_every_boundary_the_arch_allows) {
#if !defined(ARCH_HAS_STATIC_BRANCH)
  // The hooks' switch is a flag there: no site may have been emitted.
  KEXPECT(&__static_branches_end[0] == &__static_branches_start[0]);
  KSKIP("no static branches on this arch: the hooks' switch is a flag (no site was emitted)");
#else
  const StaticSite* pick = nullptr;
  size_t n = 0, misaligned = 0;
  for (const StaticSite* s = __static_branches_start; s < __static_branches_end; s++, n++) {
    KEXPECT_EQ(s->site % arch::kStaticBranchSiteAlign, 0u);
    if (s->site & 3) misaligned++;
    // An allocation-side site on the least aligned boundary allowed.
    if (!pick && s < __static_branches_free_start && (arch::kStaticBranchSiteAlign == 4 || (s->site & 3))) pick = s;
  }
  kprintf("    %zu sites, %zu on a 2-byte boundary\n", n, misaligned);
  if (arch::kStaticBranchSiteAlign == 4) KEXPECT_EQ(misaligned, 0u);
  KASSERT(pick);  // where 2 bytes are allowed, about half of them, unpadded
  const uint32_t before = site_insn(pick->site);
  const bool was_on = before != arch::static_branch_insn(pick->site, pick->target, false);
  // On, a three-way site may hold its branch to alt (kmemtrace alone).
  const uintptr_t to =
      was_on && before == arch::static_branch_insn(pick->site, pick->alt, true) ? pick->alt : pick->target;
  KEXPECT_EQ(before, arch::static_branch_insn(pick->site, to, was_on));
  KASSERT(static_branch::patch_site(pick->site, to, !was_on));
  KEXPECT_EQ(site_insn(pick->site), arch::static_branch_insn(pick->site, to, !was_on));
  KASSERT(static_branch::patch_site(pick->site, to, was_on));
  KEXPECT_EQ(site_insn(pick->site), before);
#endif
}

// A site on a 2-byte boundary is written in two halves (riscv64, arm's
// Thumb-2: kernel/static_branch.cpp). Whichever mapping of the text's
// writable alias fails on the way, the site ends holding its old
// instruction or the new one whole, and patch_site's answer says which:
// never a mix (on Thumb-2 a mix is another branch). The failures are
// injected (static_branch::fail_alias_maps_after: the first n mappings
// succeed, the rest fail), on two sites of the test's own in the kernel
// text, never executed: one inside a page, one straddling two (its halves
// in two frames). Each starts as the nop, is patched on and off.
#if defined(ARCH_HAS_STATIC_BRANCH) && (defined(__thumb__) || defined(__riscv))
#define TEST_TWO_HALF_SITES 1
asm(".pushsection .text.test_two_half_sites, \"ax\"\n"
    ".balign 4096\n"
    ".globl test_two_half_sites\n"
    "test_two_half_sites:\n"
    ".space 4096 + 8\n"
    ".popsection\n");
extern "C" const char test_two_half_sites[];
#endif

KTEST(static_branch_two_half_patch_leaves_no_mix_when_a_mapping_fails) {
#if !defined(TEST_TWO_HALF_SITES)
  KSKIP("every site here is one aligned store (arm64, ARM state) or there are none (armv7m)");
#else
  const auto base = reinterpret_cast<uintptr_t>(test_two_half_sites);
  KASSERT((base & 4095) == 0);
  const uintptr_t target = base + 8;                  // in the text, in reach; never run
  const uintptr_t sites[] = {base + 2, base + 4094};  // inside a page; across two
  for (uintptr_t site : sites) {
    KASSERT(static_branch::patch_site(site, target, false));
    KEXPECT_EQ(site_insn(site), arch::static_branch_insn(site, target, false));
    for (bool on : {true, false}) {
      const uint32_t before = site_insn(site), after = arch::static_branch_insn(site, target, on);
      for (int succeed = 0; succeed <= 2; succeed++) {
        static_branch::fail_alias_maps_after(succeed);
        bool ok = static_branch::patch_site(site, target, on);
        static_branch::fail_alias_maps_after(-1);
        const uint32_t now = site_insn(site);
        if (now != (ok ? after : before))
          ktest::fail(__FILE__, __LINE__,
                      "site 0x%lx, %d mappings allowed: patch_site said %s, the site holds 0x%08x "
                      "(before 0x%08x, wanted 0x%08x)",
                      static_cast<unsigned long>(site), succeed, ok ? "done" : "not done", static_cast<unsigned>(now),
                      static_cast<unsigned>(before), static_cast<unsigned>(after));
        if (succeed == 0) KEXPECT(!ok);
        if (ok || now != before) KASSERT(static_branch::patch_site(site, target, !on));  // back, whole
        KEXPECT_EQ(site_insn(site), before);
      }
      KASSERT(static_branch::patch_site(site, target, on));  // with no failure injected
      KEXPECT_EQ(site_insn(site), after);
    }
  }
#endif
}

// Patching waits for every other core, so only a core's own thread may
// patch (kernel/static_branch.cpp): from a cross-call, on this core or
// another, set and patch_site are refused with a report before they touch
// anything, and the sites keep what they held. (Let through, a cross-call
// would patch and then wait for cores that wait for it.)
#if defined(ARCH_HAS_STATIC_BRANCH)
namespace {
struct PatchFromCall {
  uintptr_t site, target;
  bool on;
  static_branch::Way way;
  bool ran, patched, set;
};
void patch_from_call(void* arg) {
  auto* p = static_cast<PatchFromCall*>(arg);
  p->patched = static_branch::patch_site(p->site, p->target, p->on);
  p->set = static_branch::set(static_branch::Key::kAllocHooks, p->way);
  p->ran = true;
}
}  // namespace
#endif

KTEST(static_branch_refuses_patching_from_a_cross_call) {
#if !defined(ARCH_HAS_STATIC_BRANCH)
  KSKIP("no static branches on this arch: the hooks' switch is a flag");
#else
  KASSERT(&__static_branches_free_start[0] > &__static_branches_start[0]);
  // What the allocation sites hold (mm/hooks.cpp: kmemtrace alone takes the alt).
  const unsigned f = mm::alloc_hooks_features() & mm::kFeaturesOnAlloc;
  const static_branch::Way way = f == 0                       ? static_branch::Way::kOff
                                 : f == mm::kFeatureKmemtrace ? static_branch::Way::kAlt
                                                              : static_branch::Way::kTarget;
  const StaticSite s = __static_branches_start[0];
  const uint32_t before = site_insn(s.site);
  const bool on = way != static_branch::Way::kOff;
  const uintptr_t to = way == static_branch::Way::kAlt ? s.alt : s.target;
  KASSERT(before == arch::static_branch_insn(s.site, to, on));
  for (unsigned cpu : {cpu_id(), (cpu_id() + 1) % g_cpu_count}) {  // this core's call, another's (or the same again)
    PatchFromCall p{s.site, to, on, way, false, true, true};
    smp::call_on(cpu, patch_from_call, &p);
    KEXPECT(p.ran);
    KEXPECT(!p.patched);
    KEXPECT(!p.set);
    KEXPECT_EQ(site_insn(s.site), before);
  }
  // From this thread the same calls go through (and change nothing).
  KEXPECT(static_branch::patch_site(s.site, to, on));
  KEXPECT(static_branch::set(static_branch::Key::kAllocHooks, way));
  KEXPECT_EQ(site_insn(s.site), before);
#endif
}

KTEST(static_branch_refuses_a_target_out_of_reach) {
#if !defined(ARCH_HAS_STATIC_BRANCH)
  KSKIP("no static branches on this arch: the hooks' switch is a flag");
#endif
  KASSERT(&__static_branches_end[0] > &__static_branches_start[0]);
  const StaticSite s = __static_branches_start[0];
  struct {
    uintptr_t site;
    uint32_t operator*() const { return site_insn(site); }
  } insn{s.site};
  const uint32_t before = *insn;
  // Its own target is in reach, and the nearest words too.
  KEXPECT(arch::static_branch_reachable(s.site, s.target));
  KEXPECT(arch::static_branch_reachable(s.site, s.site + 8));
  KEXPECT(arch::static_branch_reachable(s.site, s.site - 8));
  // 256 MiB is beyond every arch's branch (arm64 128 MiB, arm 32 or in
  // Thumb-2 16, riscv64 1).
  constexpr uintptr_t kFar = uintptr_t{256} << 20;
  KEXPECT(!arch::static_branch_reachable(s.site, s.site + kFar));
  KEXPECT(!arch::static_branch_reachable(s.site, s.site - kFar));
  KEXPECT(!static_branch::patch_site(s.site, s.site + kFar, true));
  KEXPECT_EQ(*insn, before);
  KEXPECT(!static_branch::patch_site(s.site, s.site - kFar, true));
  KEXPECT_EQ(*insn, before);
  // A target outside the text is refused too, reachable or not.
  KEXPECT(!static_branch::patch_site(s.site, reinterpret_cast<uintptr_t>(__text_end) + 64, true));
  KEXPECT_EQ(*insn, before);
  // What the site held is written back whatever happened above.
  if (*insn != before)
    static_branch::patch_site(s.site, s.target, before != arch::static_branch_insn(s.site, s.target, false));
}

// smp::stop_others: while fn runs, every other core is parked with
// interrupts masked (its timer ticks stop while the caller's go on), and
// each resumes afterwards.
namespace {
struct StopProbe {
  uint64_t ticks[kMaxCpus];
  bool ran;
  bool others_quiet;
  bool self_ticked;
};

void while_stopped(void* arg) {
  auto* p = static_cast<StopProbe*>(arg);
  p->ran = true;
  for (unsigned i = 0; i < g_cpu_count; i++) p->ticks[i] = g_percpu[i].ticks.load();
  // Five of this core's ticks (interrupts are on here): long enough for
  // every other core to have ticked too, were it not parked.
  uint64_t deadline = timer::now_ns() + 2000000000ull;
  while (this_cpu().ticks.load() < p->ticks[cpu_id()] + 5 && timer::now_ns() < deadline) arch::wait_for_interrupt();
  p->others_quiet = true;
  for (unsigned i = 0; i < g_cpu_count; i++) {
    if (i == cpu_id()) p->self_ticked = g_percpu[i].ticks.load() >= p->ticks[i] + 5;
    else if (g_percpu[i].online.load()) p->others_quiet &= g_percpu[i].ticks.load() == p->ticks[i];
  }
}
}  // namespace

KTEST(stop_others_parks_every_other_core_with_interrupts_masked) {
  static StopProbe p;
  p = {};
  KASSERT(arch::irqs_enabled());
  smp::stop_others(while_stopped, &p);
  KEXPECT(p.ran);
  KEXPECT(p.self_ticked);
  KEXPECT(p.others_quiet);
  // Every core takes its ticks again. Waiting in wfi, not spinning: under
  // QEMU 7.2's -icount a vCPU spinning on riscv's pause keeps its time
  // slice and starves the next one in round-robin order.
  uint64_t deadline = timer::now_ns() + 2000000000ull;
  bool all = false;
  while (!all && timer::now_ns() < deadline) {
    all = true;
    for (unsigned i = 0; i < g_cpu_count; i++) all &= g_percpu[i].ticks.load() >= p.ticks[i] + 6;
    if (!all) arch::wait_for_interrupt();  // the next tick at the latest
  }
  KEXPECT(all);
}

// The backtrace walker (kernel/backtrace.cpp, or the arch's unwinder) follows the frames
// from a callee back through its callers, in order, and folds a recursion
// into one slot with its count. Each function notes its own return address
// (__builtin_return_address), which the walk must find in that order.
namespace {
struct Walk {
  uintptr_t pcs[16];
  unsigned repeats[16];
  size_t n;
  uintptr_t into_innermost, into_recursion, into_outer;
};
NOINLINE void walk_here(Walk* w) {
  w->into_innermost = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  w->n = backtrace::walk(0, nullptr, w->pcs, 16, w->repeats);
  asm volatile("" ::: "memory");  // not a tail call: walk_here keeps its frame
}
NOINLINE void recurse_then_walk(Walk* w, unsigned depth) {
  auto ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (depth == 0) w->into_recursion = ra;  // called by the depth-1 call
  if (depth == 5) w->into_outer = ra;      // called by caller_of_recursion
  if (depth) recurse_then_walk(w, depth - 1);
  else walk_here(w);
  asm volatile("" ::: "memory");
}
NOINLINE void caller_of_recursion(Walk* w) {
  recurse_then_walk(w, 5);
  asm volatile("" ::: "memory");
}
}  // namespace

// Where backtraces come from the unwind tables (Thumb code), the first walk
// reads them and the second undoes the same frames by the recipes the first
// cached (arch/arm/ehabi.cpp, Recipes): both must find the same frames.
KTEST(backtrace_walks_the_callers_and_folds_a_recursion) {
  static Walk walks[2];
  Walk& w = walks[0];
  Walk& again = walks[1];
  if constexpr (!arch::kHasFrameRecords) arch::unwind_forget();
  // One call site for both walks (the same return address into this
  // function): a loop whose end GCC cannot see, so it does not unroll it.
  static Walk* volatile last = &walks[1];
  for (Walk* each = walks;; each++) {
    *each = {};
    caller_of_recursion(each);
    if (each == last) break;
  }
  KEXPECT_EQ(again.n, w.n);
  for (size_t k = 0; k < w.n && k < again.n; k++) {
    KEXPECT_EQ(again.pcs[k], w.pcs[k]);
    KEXPECT_EQ(again.repeats[k], w.repeats[k]);
  }
  size_t i = 0;
  while (i < w.n && w.pcs[i] != w.into_innermost) i++;
  KASSERT(i + 2 < w.n);
  KEXPECT_EQ(w.repeats[i], 1u);
  KEXPECT_EQ(w.pcs[i + 1], w.into_recursion);
  KEXPECT_EQ(w.repeats[i + 1], 5u);  // depths 1..5 called the next one from the same place
  KEXPECT_EQ(w.pcs[i + 2], w.into_outer);
  KEXPECT_EQ(w.repeats[i + 2], 1u);
}
