// The allocators' hook switches (mm/include/mm/hooks.h): a mask of the
// features that want them, and the platform's two switches
// (plat::set_alloc_hooks, plat::set_free_hooks): the allocation switch is
// on while any allocation feature is, the free switch while a feature that needs the
// frees is (kFeaturesOnFree). The mask is updated under g_lock; the
// switches are flipped without it (the kernel's cross-calls wait for other
// cores, which may want the lock with interrupts masked), so a caller loops
// until both match the mask it left.
#include <mm/hooks.h>
#include <mm/platform.h>
#include "lock.h"

namespace mm {
namespace {
plat::Lock g_lock;
unsigned g_features;  // under g_lock; read relaxed for statistics
bool g_alloc_switch;  // the switches as last set, under g_lock
bool g_free_switch;
}  // namespace

bool alloc_hooks_set(unsigned feature, bool on) {
  {
    Guard<> g(g_lock);
    if (on) g_features |= feature;
    else g_features &= ~feature;
  }
  for (;;) {
    bool alloc_want, free_want, alloc_flip, ok;
    {
      Guard<> g(g_lock);
      alloc_want = (g_features & kFeaturesOnAlloc) != 0;
      free_want = (g_features & kFeaturesOnFree) != 0;
      if (alloc_want == g_alloc_switch && free_want == g_free_switch) return true;
      alloc_flip = alloc_want != g_alloc_switch;
      if (alloc_flip) g_alloc_switch = alloc_want;
      else g_free_switch = free_want;
    }
    ok = alloc_flip ? plat::set_alloc_hooks(alloc_want) : plat::set_free_hooks(free_want);
    if (!ok) {
      Guard<> g(g_lock);
      if (alloc_flip) g_alloc_switch = !alloc_want;
      else g_free_switch = !free_want;
      return false;
    }
  }
}

unsigned alloc_hooks_features() { return __atomic_load_n(&g_features, __ATOMIC_RELAXED); }

}  // namespace mm
