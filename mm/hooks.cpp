// The allocators' hook switch (mm/include/mm/hooks.h): a mask of the
// features that want it, and the platform's switch (plat::set_alloc_hooks),
// flipped when the mask goes from empty to not or back. The mask is updated
// under g_lock; the switch is flipped without it (the kernel's cross-calls
// wait for other cores, which may want the lock with interrupts masked), so
// a caller loops until the switch matches the mask it left.
#include <mm/hooks.h>
#include <mm/platform.h>
#include "lock.h"

namespace mm {
namespace {
plat::Lock g_lock;
unsigned g_features;  // under g_lock; read relaxed for statistics
bool g_switch;        // the switch as last set, under g_lock
}  // namespace

bool alloc_hooks_set(unsigned feature, bool on) {
  {
    Guard<> g(g_lock);
    if (on) g_features |= feature;
    else g_features &= ~feature;
  }
  for (;;) {
    bool want;
    {
      Guard<> g(g_lock);
      want = g_features != 0;
      if (want == g_switch) return true;
      g_switch = want;
    }
    if (!plat::set_alloc_hooks(want)) {
      Guard<> g(g_lock);
      g_switch = !want;
      return false;
    }
  }
}

unsigned alloc_hooks_features() { return __atomic_load_n(&g_features, __ATOMIC_RELAXED); }

}  // namespace mm
