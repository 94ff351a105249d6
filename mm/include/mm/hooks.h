// SPDX-License-Identifier: Apache-2.0
// The allocators' hooks: features that need allocations (and frees) to do
// a little more (kmemtrace records both, kmemleak stamps the allocated
// object's metadata) share two switches, one tested by every allocating
// entry point and one by every freeing one. While no feature needs a side,
// its entry points pay only for testing the switch (in the kernel a static
// branch: one nop); while one does, they take their hooked copies, which
// look at each feature's own flag, or, while kmemtrace alone does, its own
// fast paths (the kernel's three-way sites: mm/hook_mode.h). kmemleak
// needs nothing on a free, so with only kmemleak on, frees run exactly as
// with every feature off.
#pragma once

namespace mm {

enum AllocFeature : unsigned {
  kFeatureKmemtrace = 1u << 0,
  kFeatureKmemleak = 1u << 1,
  kFeatureFailslab = 1u << 2,     // fault injection (mm/failslab.h): allocations only
  kFeatureDebug = 1u << 3,        // debugged kmem_alloc caches (mm/kmem_debug.h): the sizes asked for and freed
  kFeatureProfile = 1u << 4,      // allocation profiling counts (mm/alloc_tag.h)
  kFeatureProfileFree = 1u << 5,  // allocation profiling: frees subtract (stays on once profiling was on)
};
// The features that need the frees hooked too, and those that need the
// allocations hooked (all but the free-only one).
constexpr unsigned kFeaturesOnFree = kFeatureKmemtrace | kFeatureDebug | kFeatureProfileFree;
constexpr unsigned kFeaturesOnAlloc = ~unsigned{kFeatureProfileFree};

// Turns a feature's use of the hooks on or off; the allocation switch is on
// while any of kFeaturesOnAlloc is, the free switch while one of kFeaturesOnFree is. Not from interrupt context (the
// kernel patches code and cross-calls every core). False if the platform could not flip the switch.
bool alloc_hooks_set(unsigned feature, bool on);
// The features that have the hooks on.
unsigned alloc_hooks_features();

}  // namespace mm
