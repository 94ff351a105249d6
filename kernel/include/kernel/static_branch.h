// Static branches: code that tests a rarely changed switch through a nop
// that is patched into a branch when the switch is on (the arch's
// static_branch_* in <arch/ops.h>, sites listed in .static_branches).
// Two switches: the allocators' hooks on allocation and on free (mm/hooks.h).
#pragma once
#include <cstdint>

namespace static_branch {
enum class Key { kAllocHooks, kFreeHooks };

// Reserves the page of virtual addresses patching writes through. Once, at
// boot, with the heap arena up.
bool init();
// Patches every site of key to branch (on) or fall through (off), on every
// online core. Not from interrupt context; one caller at a time (mm's
// hooks switch). False if a site could not be patched (then none is left
// half done: all the key's sites are set back to off).
bool set(Key key, bool on);
// Patches the one site to branch to target (on) or to its nop (off), as
// set does every site of a key. False, with a report and nothing written,
// if site or target is outside the kernel text or target is beyond the
// arch's branch reach. For tests.
bool patch_site(uintptr_t site, uintptr_t target, bool on);
}  // namespace static_branch
