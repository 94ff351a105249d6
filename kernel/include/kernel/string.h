// SPDX-License-Identifier: Apache-2.0
// The C string functions the kernel provides (kernel/lib/string.cpp).
#pragma once
#include <cstddef>

extern "C" {
void* memcpy(void* __restrict dst, const void* __restrict src, size_t n);
void* memmove(void* dst, const void* src, size_t n);
void* memset(void* dst, int c, size_t n);
int memcmp(const void* a, const void* b, size_t n);
size_t strlen(const char* s);
int strcmp(const char* a, const char* b);
int strncmp(const char* a, const char* b, size_t n);
char* strstr(const char* h, const char* n);
}
