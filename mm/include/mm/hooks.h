// The allocators' hooks: features that need every allocation to do a little
// more (kmemtrace records it, kmemleak stamps the object's metadata) share
// one switch. While every feature is off, each allocator entry point pays
// only for testing the switch (in the kernel a static branch: one nop);
// while one is on, the entry points take their hooked copies, which look at
// each feature's own flag.
#pragma once

namespace mm {

enum AllocFeature : unsigned {
  kFeatureKmemtrace = 1u << 0,
  kFeatureKmemleak = 1u << 1,
};

// Turns a feature's use of the hooks on or off; the switch is on while any
// feature is. Not from interrupt context (the kernel patches code and
// cross-calls every core). False if the platform could not flip the switch.
bool alloc_hooks_set(unsigned feature, bool on);
// The features that have the hooks on.
unsigned alloc_hooks_features();

}  // namespace mm
