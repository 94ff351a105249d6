// SPDX-License-Identifier: Apache-2.0
// Compiler helpers shared by the kernel, mm/ and host builds.
#pragma once

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define SECTION(s) __attribute__((section(s)))
#define USED __attribute__((used))
#define NOINLINE __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#define CACHE_LINE 64
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
#define CONCAT_(a, b) a##b
#define CONCAT(a, b) CONCAT_(a, b)

// The return address of the current function: the caller of a public API.
#define CALLER_ADDRESS() reinterpret_cast<uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0)))
