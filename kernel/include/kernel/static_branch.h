// Static branches: code that tests a rarely changed switch through a nop
// that is patched into a branch when the switch is on (the arch's
// static_branch_* in <arch/ops.h>, sites listed in .static_branches).
// Today one switch: kmemtrace's, tested on every allocation.
#pragma once
#include <cstdint>

namespace static_branch {
// Reserves the page of virtual addresses patching writes through. Once, at
// boot, with the heap arena up.
bool init();
// Patches every site to branch (on) or fall through (off), on every online
// core. Not from interrupt context; one caller at a time (the shell).
// False if a site could not be patched (then none is left half done: all
// sites are set back to off).
bool set_kmemtrace(bool on);
// Patches the one site to branch to target (on) or to its nop (off), as
// set_kmemtrace does every site. False, with a report and nothing written,
// if site or target is outside the kernel text or target is beyond the
// arch's branch reach. For tests.
bool patch_site(uintptr_t site, uintptr_t target, bool on);
}  // namespace static_branch
