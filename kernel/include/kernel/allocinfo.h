// Allocation profiling's bootarg (kernel/allocinfo.cpp; the commands are
// `allocinfo` and `sysctl vm.mem_profiling`).
#pragma once

namespace allocinfo_boot {
// sysctl.vm.mem_profiling=0|1|never: before kmem_init (never: no slab gets
// tag references).
void setup();
// Switches counting on if the bootarg asked for it: once the allocators'
// hooks can be switched (after kmem_init).
void start();
}  // namespace allocinfo_boot
