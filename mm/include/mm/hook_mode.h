// SPDX-License-Identifier: Apache-2.0
// The allocators' hook switches' three settings (mm/platform.h,
// set_alloc_hooks), apart so that every platform_inline.h can use them.
#pragma once
#include <cstdint>

namespace mm::plat {
// What a hook switch is set to: off; on, for the hooked copies; or on
// while kmemtrace is the only feature that wants that side's hooks
// (mm/hooks.cpp), where the kernel's three-way sites (alloc_hooks_mode,
// free_hooks_mode) branch straight to kmemtrace's fast paths. Elsewhere
// kTraceOnly is kHooked, and the hooked copies pick those paths by the
// features' word (alloc_tag_internal.h, alloc_trace_only).
enum class HookMode : uint8_t { kOff, kHooked, kTraceOnly };
}  // namespace mm::plat
