// SPDX-License-Identifier: Apache-2.0
// mm's two tiers of assertion, used for the invariants the theory comments
// state:
//   MM_ASSERT(c)        always checked: cheap invariants, off the fast paths
//                       or on them when a wrong answer would corrupt memory;
//   MM_DEBUG_ASSERT(c)  checked only in debug builds (MM_DEBUG: the host
//                       tests build mm/ that way): invariants that cost a
//                       walk, or any check on an allocation fast path.
// A failure is fatal (plat::fatal: a panic in the kernel, abort on the host)
// and names the file, the line and the condition.
#pragma once
#include <mm/platform.h>

namespace mm {
[[noreturn, gnu::cold, gnu::noinline]] void assert_failed(const char* file, int line, const char* what);
}  // namespace mm

#if defined(__FILE_NAME__)
#define MM_FILE_ __FILE_NAME__
#else
#define MM_FILE_ __FILE__
#endif

#define MM_ASSERT(c)                                                            \
  do {                                                                          \
    if (__builtin_expect(!(c), 0)) ::mm::assert_failed(MM_FILE_, __LINE__, #c); \
  } while (0)

#if defined(MM_DEBUG)
#define MM_DEBUG_ASSERT(c) MM_ASSERT(c)
#else
#define MM_DEBUG_ASSERT(c) \
  do {                     \
  } while (0 && (c))
#endif
