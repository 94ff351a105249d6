// SPDX-License-Identifier: Apache-2.0
// panic() and the two tiers of assertion.
//
// ASSERT is always on and checks cheap invariants; DEBUG_ASSERT checks
// expensive ones and compiles away unless MAGPIE_DEBUG is defined. A failed
// assertion panics: the message, a register dump and a frame-pointer
// backtrace of raw addresses (tools/symbolize turns them into file:line).
#pragma once
#include <kernel/compiler.h>

struct TrapFrame;

[[noreturn]] void panic(const char* fmt, ...) PRINTF_LIKE(1, 2);
// panic() for a trap: the registers and the backtrace are the trapped
// code's (frame), not the caller's.
[[noreturn]] void panic_trap(const TrapFrame* frame, const char* fmt, ...) PRINTF_LIKE(2, 3);
[[noreturn]] void panic_assert(const char* expr, const char* file, int line);
bool in_panic();

#define ASSERT(x)                                             \
  do {                                                        \
    if (unlikely(!(x))) panic_assert(#x, __FILE__, __LINE__); \
  } while (0)

#ifdef MAGPIE_DEBUG
#define DEBUG_ASSERT(x) ASSERT(x)
#else
#define DEBUG_ASSERT(x) \
  do {                  \
  } while (0)
#endif
