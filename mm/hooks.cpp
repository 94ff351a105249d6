// SPDX-License-Identifier: Apache-2.0
// The allocators' hook switches (mm/include/mm/hooks.h): a mask of the
// features that want them, and the platform's two switches
// (plat::set_alloc_hooks, plat::set_free_hooks): the allocation switch is
// on while any allocation feature is, the free switch while a feature that needs the
// frees is (kFeaturesOnFree). The mask is updated under g_lock; the
// switches are flipped without it (the kernel's cross-calls wait for other
// cores, which may want the lock with interrupts masked), so a caller loops
// until both match the mask it left.
#include <mm/hooks.h>
#include "alloc_tag_internal.h"
#include <mm/platform.h>
#include "lock.h"

namespace mm {
#if !defined(MM_KERNEL)
// kmem_alloc's and kmem_free's switch on the host, folded into their
// small-size bound (kmem_alloc.cpp, The hooks bound). Weak: vmem and the page
// allocator also build without kmem (a host test does).
__attribute__((weak)) void kmem_alloc_hooks_bound(bool free_side, bool hooks_on);
#endif
namespace {
plat::Lock g_lock;

// Sets a side's switch (and on the host kmem_alloc's bound for it: closed
// before the switch goes on, opened after it goes off).
bool set_switch(bool free_side, plat::HookMode mode) {
#if !defined(MM_KERNEL)
  if (kmem_alloc_hooks_bound && mode != plat::HookMode::kOff) kmem_alloc_hooks_bound(free_side, true);
#endif
  bool ok = free_side ? plat::set_free_hooks(mode) : plat::set_alloc_hooks(mode);
#if !defined(MM_KERNEL)
  // Off, by request or because the platform could not (it leaves it off).
  if (kmem_alloc_hooks_bound && (mode == plat::HookMode::kOff || !ok)) kmem_alloc_hooks_bound(free_side, false);
#endif
  return ok;
}
unsigned g_features;  // under g_lock; read relaxed for statistics
plat::HookMode g_alloc_switch = plat::HookMode::kOff;  // the switches as last set, under g_lock
plat::HookMode g_free_switch = plat::HookMode::kOff;

// What a switch wants for the features of its side: kTraceOnly while
// kmemtrace alone does, exactly when alloc_trace_only() / free_trace_only()
// read true (alloc_tag_internal.h: profiling neither counts nor subtracts).
plat::HookMode mode_for(unsigned side) {
  if (side == 0) return plat::HookMode::kOff;
  return side == kFeatureKmemtrace ? plat::HookMode::kTraceOnly : plat::HookMode::kHooked;
}
}  // namespace

uint32_t g_alloc_hooks_beside_prof = kNotCounting;  // profiling does not count yet (note_features)
uint32_t g_free_hooks_beside_prof;

namespace {
// The features beside profiling's, for the profiled fast paths
// (alloc_tag_internal.h), under g_lock: set before a switch is flipped on
// for them and cleared before it is flipped off, so a hooked path that
// reads 0 (relaxed) runs while only profiling wants it, give or take the
// event at the moment of the switch (as kmemtrace's own switch). The
// allocation word is also non-zero while profiling does not count
// (kNotCounting): a tagged call that comes while another feature's switch is being
// turned off must not take the counting fast path.
void note_features() {
  unsigned not_counting = (g_features & kFeatureProfile) ? 0u : kNotCounting;
  __atomic_store_n(&g_alloc_hooks_beside_prof,
                   (g_features & kFeaturesOnAlloc & ~unsigned{kFeatureProfile}) | not_counting, __ATOMIC_RELAXED);
  // Bit 30 of the free word: profiling subtracts, beside another feature
  // (so that the word is kFreeTraceOnly only while nothing else wants the
  // frees: alloc_tag_internal.h).
  unsigned beside = g_features & kFeaturesOnFree & ~unsigned{kFeatureProfileFree};
  unsigned subtracting = beside && (g_features & kFeatureProfileFree) ? 1u << 30 : 0u;
  __atomic_store_n(&g_free_hooks_beside_prof, beside | subtracting, __ATOMIC_RELAXED);
}
}  // namespace

bool alloc_hooks_set(unsigned feature, bool on) {
  {
    Guard<> g(g_lock);
    if (on) g_features |= feature;
    else g_features &= ~feature;
    note_features();
  }
  for (;;) {
    plat::HookMode alloc_want, free_want;
    bool alloc_flip, ok;
    plat::HookMode was;
    {
      Guard<> g(g_lock);
      alloc_want = mode_for(g_features & kFeaturesOnAlloc);
      free_want = mode_for(g_features & kFeaturesOnFree);
      if (alloc_want == g_alloc_switch && free_want == g_free_switch) return true;
      alloc_flip = alloc_want != g_alloc_switch;
      was = alloc_flip ? g_alloc_switch : g_free_switch;
      if (alloc_flip) g_alloc_switch = alloc_want;
      else g_free_switch = free_want;
    }
    ok = set_switch(!alloc_flip, alloc_flip ? alloc_want : free_want);
    if (!ok) {
      // The platform left the switch off. Between two settings that are
      // both on (kmemtrace alone, and with another feature) that would
      // stop the features already on: set back what it was, if it can be.
      bool back = was != plat::HookMode::kOff && set_switch(!alloc_flip, was);
      Guard<> g(g_lock);
      plat::HookMode now = back ? was : plat::HookMode::kOff;
      if (alloc_flip) g_alloc_switch = now;
      else g_free_switch = now;
      return false;
    }
  }
}

unsigned alloc_hooks_features() { return __atomic_load_n(&g_features, __ATOMIC_RELAXED); }

}  // namespace mm
