// SPDX-License-Identifier: Apache-2.0
// Static branches: code that tests a rarely changed switch through a nop
// that is patched into a branch when the switch is on (the arch's
// static_branch_* in <arch/ops.h>, sites listed in .static_branches).
// Two switches: the allocators' hooks on allocation and on free (mm/hooks.h).
// Each site has two targets (the arch's records: {site, target, alt}):
// a three-way site branches to alt while kmemtrace alone wants the hooks,
// a two-way site lists its one target twice.
#pragma once
#include <cstdint>

namespace static_branch {
enum class Key { kAllocHooks, kFreeHooks };
// What every site of a key holds: its nop, a branch to its target, or one
// to its alt.
enum class Way { kOff, kTarget, kAlt };

// Reserves the page of virtual addresses patching writes through. Once, at
// boot, with the heap arena up.
bool init();
// Patches every site of key to fall through (kOff) or branch to its target
// or its alt, on every online core, straight from what it held (a branch
// to one target becomes a branch to the other without passing through the
// nop, so that no call goes unhooked in between). From a core's own
// thread, never an interrupt handler or a cross-call (it waits for the
// other cores): refused then, with a report, and nothing changed; callers
// on several cores take turns. False if a site could not be patched (then
// none is left half done: all the key's sites are set back to off), or if
// the call was refused.
bool set(Key key, Way way);
// Patches the one site to branch to target (on) or to its nop (off), as
// set does every site of a key, from the same callers. False, with a
// report and nothing written, if site or target is outside the kernel text
// or target is beyond the arch's branch reach. For tests.
bool patch_site(uintptr_t site, uintptr_t target, bool on);
// For tests: of the mappings of the text's writable alias that patching
// makes from now on, the first `succeed` succeed and every later one
// fails, as if no page table could be had; -1 fails none (the default).
void fail_alias_maps_after(int succeed);
}  // namespace static_branch
