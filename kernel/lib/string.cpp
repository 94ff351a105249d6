// SPDX-License-Identifier: Apache-2.0
// The C memory and string functions GCC may call even in freestanding code.
#include <kernel/string.h>
// Aligned word loops where both pointers allow it, bytes otherwise: they run
// before the MMU is on (when unaligned accesses fault on AArch64).
#include <cstddef>
#include <cstdint>

extern "C" {

void* memcpy(void* __restrict dst, const void* __restrict src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) & (sizeof(uintptr_t) - 1)) == 0) {
    while (n >= sizeof(uintptr_t)) {
      *reinterpret_cast<uintptr_t*>(d) = *reinterpret_cast<const uintptr_t*>(s);
      d += sizeof(uintptr_t);
      s += sizeof(uintptr_t);
      n -= sizeof(uintptr_t);
    }
  }
  while (n--) *d++ = *s++;
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d == s || n == 0) return dst;
  if (d < s || d >= s + n) return memcpy(dst, src, n);
  while (n--) d[n] = s[n];
  return dst;
}

void* memset(void* dst, int c, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  uintptr_t word = static_cast<unsigned char>(c);
  word *= static_cast<uintptr_t>(0x0101010101010101ull);
  while (n && (reinterpret_cast<uintptr_t>(d) & (sizeof(uintptr_t) - 1))) {
    *d++ = static_cast<unsigned char>(c);
    n--;
  }
  while (n >= sizeof(uintptr_t)) {
    *reinterpret_cast<uintptr_t*>(d) = word;
    d += sizeof(uintptr_t);
    n -= sizeof(uintptr_t);
  }
  while (n--) *d++ = static_cast<unsigned char>(c);
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; i++) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}

size_t strlen(const char* s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

int strcmp(const char* a, const char* b) {
  while (*a && *a == *b) a++, b++;
  return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
}

int strncmp(const char* a, const char* b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i] || !a[i]) return static_cast<unsigned char>(a[i]) - static_cast<unsigned char>(b[i]);
  }
  return 0;
}

char* strstr(const char* h, const char* n) {
  size_t ln = strlen(n);
  for (; *h; h++) {
    if (strncmp(h, n, ln) == 0) return const_cast<char*>(h);
  }
  return ln == 0 ? const_cast<char*>(h) : nullptr;
}

}  // extern "C"
