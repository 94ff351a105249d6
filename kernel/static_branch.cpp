// SPDX-License-Identifier: Apache-2.0
// Patching static branches. Kernel text is mapped read-only and executable
// (W^X), so each instruction is written through a temporary writable
// alias of its frame in the heap window: map the frame there, store the
// 4-byte instruction (one aligned store: cores executing the site see the
// old or the new instruction, never a mix; riscv64's and Thumb-2's sites
// may sit on a 2-byte boundary and take two stores, with the other cores
// parked, as below), make it visible to
// instruction fetch (arch::text_written), unmap. Then every online core
// runs arch::sync_instructions through a cross-call, so none goes on
// executing an instruction it fetched before.
//
// Who may patch: a core's own thread, never an interrupt handler or a
// cross-call, since patching waits for every other core (smp::stop_others,
// smp::call_on_all: check_caller). set and patch_site refuse any other
// caller, with a report, before they touch anything. Today only the boot
// core has a thread (the shell: mm/hooks.cpp's callers, the kmemleak,
// kmemtrace, fault injection and profiling switches, and tests); the other
// cores run cross-calls from their idle loops. Should another core's thread
// patch, one patcher at a time: g_patch_lock, taken by set and patch_site
// and held across the patching and its cross-calls (the alias pages are
// one set, and a key's sites must end as its last setter said). A spinlock
// spun on with interrupts as the caller has them, so that a core waiting
// for it still answers the holder's cross-calls.
//
// Where the ISA does not let one core rewrite an instruction another may be
// executing (arch::text_patch_stops_others: RISC-V without Ziccif, 32-bit
// ARM's Thumb-2), every
// other core is parked while the sites change (smp::stop_others), and runs
// sync_instructions before it leaves the park.
//
// Ordering: the instruction is stored through the alias and made visible
// to instruction fetch by text_written (cleaned to the point of
// unification and the site's instruction cache line invalidated, each
// completed by a DSB, on ARM; fence + fence.i locally on riscv64). The
// cross-call that then runs sync_instructions on each core is the release
// and acquire (its mailbox's call_fn), so each core's isb or fence.i
// comes after the new instruction is visible to it. g_alias is set at
// boot, before the other cores start.
//
// A branch must reach its target: the arch's encoding has a limited range
// (arm64 +-128 MiB, arm +-32 MiB, Thumb-2 +-16 MiB, riscv64 +-1 MiB). The link fails if the
// text is larger than that (linker/kernel.ld.in), and each branch is
// checked before it is written: one out of reach is refused, never encoded
// with its offset cut short.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/percpu.h>
#include <kernel/smp.h>
#include <kernel/spinlock.h>
#include <arch/ops.h>
#include <kernel/static_branch.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>

#if defined(ARCH_HAS_STATIC_BRANCH)
namespace {

struct Site {
  uintptr_t site, target, alt;  // the arch's record (arch/ops.h)
};
// Both keys' sites: the allocation hooks' first, then the free hooks'
// (linker/kernel.ld.in).
extern "C" const Site __static_branches_start[], __static_branches_free_start[], __static_branches_end[];

// Two pages of heap-window addresses, never mapped but while patching: a
// site on a 2-byte boundary may straddle two frames.
uintptr_t g_alias;
constexpr unsigned kAliasPages = 2;
int g_alias_maps_left = -1;  // fail_alias_maps_after (tests); under g_patch_lock
SpinLock g_patch_lock;

bool in_text(uintptr_t a) {
  return a >= reinterpret_cast<uintptr_t>(__text_start) && a < reinterpret_cast<uintptr_t>(__text_end);
}

// Whether site can be patched to branch to target; says why not.
bool patchable(uintptr_t site, uintptr_t target) {
  if (!arch::static_branch_reachable(site, target)) {
    long long off = static_cast<long long>(target) - static_cast<long long>(site);
    kprintf("static_branch: site 0x%lx cannot branch to 0x%lx (%lld bytes away, beyond this arch's branch): not patched\n",
            static_cast<unsigned long>(site), static_cast<unsigned long>(target), off);
    return false;
  }
  if ((site & (arch::kStaticBranchSiteAlign - 1)) || !in_text(site) || !in_text(target)) {
    kprintf("static_branch: site 0x%lx or target 0x%lx is not in the kernel text (0x%lx-0x%lx): not patched\n",
            static_cast<unsigned long>(site), static_cast<unsigned long>(target),
            reinterpret_cast<unsigned long>(__text_start), reinterpret_cast<unsigned long>(__text_end));
    return false;
  }
  return true;
}

// The writable alias of text address at: its frame mapped at alias page
// `page`; 0 (nothing mapped) if it could not be.
uintptr_t map_alias(uintptr_t at, unsigned page) {
  uint64_t pa = arch::translate(at);
  if (!pa) return 0;
  if (g_alias_maps_left == 0) return 0;
  if (g_alias_maps_left > 0) g_alias_maps_left--;
  uint64_t frame = pa & ~uint64_t{mm::kPageBytes - 1};
  uintptr_t va = g_alias + page * mm::kPageBytes;
  if (!arch::map(va, frame, mm::kPageBytes, arch::kMapRead | arch::kMapWrite)) return 0;
  return va + static_cast<uintptr_t>(pa - frame);
}
void unmap_aliases() { arch::unmap(g_alias, kAliasPages * mm::kPageBytes); }  // those not mapped are skipped

// Stores value (T: 4 or 2 bytes, aligned to its size) through alias, the
// writable alias of text address at, and makes it visible to instruction
// fetch. Cannot fail.
template <typename T>
void store_text(uintptr_t alias, uintptr_t at, T value) {
  *reinterpret_cast<volatile T*>(alias) = value;
  arch::text_written(alias, at);
}

bool patch(uintptr_t site, uintptr_t target, bool on) {
  if (!patchable(site, target)) return false;
  uint32_t insn = arch::static_branch_insn(site, target, on);
  if (!(site & 3)) {
    uintptr_t alias = map_alias(site, 0);
    if (!alias) return false;
    store_text<uint32_t>(alias, site, insn);
    unmap_aliases();
    return true;
  }
  // A site on a 2-byte boundary (riscv64, 32-bit ARM's Thumb-2), perhaps
  // across a page: two halves, never seen half-written since the other
  // cores are parked and this one runs with interrupts masked. On riscv64
  // the nop's low half (opcode OP-IMM, rd x0) also stays while the high
  // half changes: in between, the site is an addi to x0 (a hint), never a
  // jal with part of its offset (on: high half first; off: low half first).
  // From a branch to one target straight to one to the other, the site in
  // between is a branch elsewhere: only the parking keeps that unseen.
  // Both halves' aliases (two pages for a site that straddles two frames)
  // are mapped before either half is stored, so that once the first store
  // is made the second cannot fail: a mix is no instruction to leave
  // behind (on Thumb-2 it is another branch). A mapping that fails leaves
  // the site as it was.
  if (!arch::text_patch_stops_others()) return false;
  bool straddles = ((site + 2) & (mm::kPageBytes - 1)) == 0;
  uintptr_t lo_alias = map_alias(site, 0);
  uintptr_t hi_alias = !lo_alias ? 0 : straddles ? map_alias(site + 2, 1) : lo_alias + 2;
  if (!hi_alias) {
    unmap_aliases();
    return false;
  }
  auto lo = static_cast<uint16_t>(insn), hi = static_cast<uint16_t>(insn >> 16);
  if (on) {
    store_text<uint16_t>(hi_alias, site + 2, hi);
    store_text<uint16_t>(lo_alias, site, lo);
  } else {
    store_text<uint16_t>(lo_alias, site, lo);
    store_text<uint16_t>(hi_alias, site + 2, hi);
  }
  unmap_aliases();
  return true;
}

struct Batch {
  const Site* first;
  const Site* last;
  static_branch::Way way;
  bool ok;
};

// A site may go from a branch to one target straight to a branch to the
// other: on arm64 and in ARM state one aligned store of one B for another,
// which the architecture lets a core execute while it changes (it runs the
// old branch or the new); where a site is written in halves (riscv64,
// Thumb-2) the other cores are parked and this one is masked, as for the
// nop.
void patch_batch(void* arg) {
  auto* b = static_cast<Batch*>(arg);
  for (const Site* s = b->first; s < b->last; s++) {
    uintptr_t target = b->way == static_branch::Way::kAlt ? s->alt : s->target;
    b->ok = patch(s->site, target, b->way != static_branch::Way::kOff) && b->ok;
  }
}

// The same with interrupts masked here: a handler that allocates must not
// run a site this core has half written (Thumb-2's halves in between are
// other instructions, branches among them).
void patch_batch_masked(void* arg) {
  arch::IrqState s = arch::irq_save();
  patch_batch(arg);
  arch::irq_restore(s);
}

// Patches [first, last) with the other cores parked if the arch needs it,
// then resynchronises every core's instruction fetch.
bool patch_all(const Site* first, const Site* last, static_branch::Way way) {
  Batch b{first, last, way, true};
  if (arch::text_patch_stops_others()) smp::stop_others(patch_batch_masked, &b);
  else patch_batch(&b);
  smp::call_on_all([](void*) { arch::sync_instructions(); }, nullptr);
  return b.ok;
}

void key_sites(static_branch::Key key, const Site*& first, const Site*& last) {
  first = key == static_branch::Key::kAllocHooks ? __static_branches_start : __static_branches_free_start;
  last = key == static_branch::Key::kAllocHooks ? __static_branches_free_start : __static_branches_end;
}

}  // namespace
#endif

namespace static_branch {

// An arch without static branches (armv7m) has no sites: the hooks' switch
// is a flag (mm/platform_inline.h), and there is nothing to patch.
#if !defined(ARCH_HAS_STATIC_BRANCH)
bool init() { return true; }
bool patch_site(uintptr_t, uintptr_t, bool) { return false; }
bool set(Key, Way) { return true; }
void fail_alias_maps_after(int) {}
#else
bool init() {
  if (g_alias) return true;
  void* va = vmem_alloc(mm::segkmem_heap_arena(), kAliasPages * mm::kPageBytes, VM_NOSLEEP);
  g_alias = reinterpret_cast<uintptr_t>(va);
  return va != nullptr;
}

// The caller may patch (above); says why not.
static bool may_patch(const char* what) {
  if (!smp::in_cross_call()) return true;
  kprintf("static_branch: %s from %s on cpu %u refused: patching waits for every core\n", what,
          this_cpu().irq_depth ? "an interrupt handler" : "a cross-call", cpu_id());
  return false;
}

bool patch_site(uintptr_t site, uintptr_t target, bool on) {
  if (!g_alias || !may_patch("patch_site")) return false;
  Guard<SpinLock, NoIrqSave> g(g_patch_lock);
  Site s{site, target, target};
  return patch_all(&s, &s + 1, on ? Way::kTarget : Way::kOff);
}

void fail_alias_maps_after(int succeed) {
  Guard<SpinLock, NoIrqSave> g(g_patch_lock);
  g_alias_maps_left = succeed;
}

bool set(Key key, Way way) {
  if (!g_alias || !may_patch("set")) return false;
  Guard<SpinLock, NoIrqSave> g(g_patch_lock);
  const Site *first, *last;
  key_sites(key, first, last);
  if (patch_all(first, last, way)) return true;
  kprintf("static_branch: could not patch every %s site; all set back to off\n",
          key == Key::kAllocHooks ? "allocation hook" : "free hook");
  patch_all(first, last, Way::kOff);
  return false;
}
#endif

}  // namespace static_branch
