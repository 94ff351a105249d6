// SPDX-License-Identifier: Apache-2.0
// printf-style formatting into a buffer or a character sink. Portable: the
// kernel's console and the host tests share it.
//
// Supported: %d %i %u %x %X %o %c %s %p %%, flags '-' '0' '+' ' ', a width
// and precision (numbers or '*'), and the length modifiers hh h l ll z t j.
// No floating point (the kernel does not use the FPU).
#pragma once
#include <cstdarg>
#include <cstddef>
#include <kernel/compiler.h>

namespace fmt {

// A sink receives the formatted text in pieces.
using Sink = void (*)(void* ctx, const char* s, size_t n);

// Formats into sink; returns the number of characters produced.
size_t vformat(Sink sink, void* ctx, const char* f, va_list ap);

}  // namespace fmt

// Like vsnprintf: always NUL-terminates when size > 0; returns the length the
// whole output would have had.
size_t kvsnprintf(char* buf, size_t size, const char* f, va_list ap);
size_t ksnprintf(char* buf, size_t size, const char* f, ...) PRINTF_LIKE(3, 4);
