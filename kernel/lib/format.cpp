// SPDX-License-Identifier: Apache-2.0
// printf-style formatting, one pass, no allocation. See format.h.
#include <kernel/format.h>
#include <cstdint>

namespace fmt {
namespace {

struct Spec {
  bool left = false, zero = false, plus = false, space = false;
  int width = 0;
  int precision = -1;
};

void pad(Sink sink, void* ctx, char c, int n, size_t& total) {
  char buf[16];
  for (auto& b : buf) b = c;
  while (n > 0) {
    int k = n > 16 ? 16 : n;
    sink(ctx, buf, static_cast<size_t>(k));
    total += static_cast<size_t>(k);
    n -= k;
  }
}

// len characters of s, padded to the width.
void emit_padded(Sink sink, void* ctx, const char* s, size_t len, const Spec& sp, size_t& total) {
  int padn = sp.width - static_cast<int>(len);
  if (!sp.left) pad(sink, ctx, ' ', padn, total);
  sink(ctx, s, len);
  total += len;
  if (sp.left) pad(sink, ctx, ' ', padn, total);
}

void emit_string(Sink sink, void* ctx, const char* s, const Spec& sp, size_t& total) {
  if (!s) s = "(null)";
  // Check the precision before reading: with one, the array need not be
  // NUL-terminated (C11 7.21.6.1p8).
  size_t len = 0;
  while ((sp.precision < 0 || len < static_cast<size_t>(sp.precision)) && s[len]) len++;
  emit_padded(sink, ctx, s, len, sp, total);
}

void emit_number(Sink sink, void* ctx, uint64_t v, bool negative, unsigned base, bool upper, const char* prefix,
                 const Spec& sp, size_t& total) {
  char digits[24];
  int n = 0;
  const char* set = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  do {
    digits[n++] = set[v % base];
    v /= base;
  } while (v);
  if (sp.precision == 0 && n == 1 && digits[0] == '0') n = 0;
  char sign = negative ? '-' : sp.plus ? '+' : sp.space ? ' ' : 0;
  size_t plen = 0;
  while (prefix[plen]) plen++;
  int zeros = sp.precision > n ? sp.precision - n : 0;
  int body = n + zeros + (sign ? 1 : 0) + static_cast<int>(plen);
  if (sp.zero && !sp.left && sp.precision < 0 && sp.width > body) {
    zeros += sp.width - body;
    body = sp.width;
  }
  if (!sp.left) pad(sink, ctx, ' ', sp.width - body, total);
  if (sign) {
    sink(ctx, &sign, 1);
    total++;
  }
  sink(ctx, prefix, plen);
  total += plen;
  pad(sink, ctx, '0', zeros, total);
  char out[24];
  for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
  sink(ctx, out, static_cast<size_t>(n));
  total += static_cast<size_t>(n);
  if (sp.left) pad(sink, ctx, ' ', sp.width - body, total);
}

}  // namespace

size_t vformat(Sink sink, void* ctx, const char* f, va_list ap) {
  size_t total = 0;
  while (*f) {
    const char* run = f;
    while (*f && *f != '%') f++;
    if (f != run) {
      sink(ctx, run, static_cast<size_t>(f - run));
      total += static_cast<size_t>(f - run);
    }
    if (!*f) break;
    f++;  // '%'
    Spec sp;
    for (;; f++) {
      if (*f == '-') sp.left = true;
      else if (*f == '0') sp.zero = true;
      else if (*f == '+') sp.plus = true;
      else if (*f == ' ') sp.space = true;
      else break;
    }
    if (*f == '*') {
      sp.width = va_arg(ap, int);
      if (sp.width < 0) {
        sp.left = true;
        sp.width = -sp.width;
      }
      f++;
    } else {
      while (*f >= '0' && *f <= '9') sp.width = sp.width * 10 + (*f++ - '0');
    }
    if (*f == '.') {
      f++;
      sp.precision = 0;
      if (*f == '*') {
        sp.precision = va_arg(ap, int);
        f++;
      } else {
        while (*f >= '0' && *f <= '9') sp.precision = sp.precision * 10 + (*f++ - '0');
      }
    }
    int lng = 0;  // 0 int, 1 long, 2 long long, -1 short, -2 char, 3 size_t/ptrdiff_t, 4 intmax_t
    for (;; f++) {
      if (*f == 'l') lng = lng == 1 ? 2 : 1;
      else if (*f == 'h') lng = lng == -1 ? -2 : -1;
      else if (*f == 'z' || *f == 't') lng = 3;
      else if (*f == 'j') lng = 4;  // 64-bit even where size_t is 32 (arm)
      else break;
    }
    char c = *f;
    if (!c) break;
    f++;
    switch (c) {
      case 'd':
      case 'i': {
        int64_t v;
        if (lng == 2) v = va_arg(ap, long long);
        else if (lng == 1) v = va_arg(ap, long);
        else if (lng == 3) v = static_cast<int64_t>(va_arg(ap, intptr_t));
        else if (lng == 4) v = va_arg(ap, intmax_t);
        else v = va_arg(ap, int);
        if (lng == -1) v = static_cast<short>(v);
        if (lng == -2) v = static_cast<signed char>(v);
        uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        emit_number(sink, ctx, mag, v < 0, 10, false, "", sp, total);
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        uint64_t v;
        if (lng == 2) v = va_arg(ap, unsigned long long);
        else if (lng == 1) v = va_arg(ap, unsigned long);
        else if (lng == 3) v = va_arg(ap, size_t);
        else if (lng == 4) v = va_arg(ap, uintmax_t);
        else v = va_arg(ap, unsigned);
        if (lng == -1) v = static_cast<unsigned short>(v);
        if (lng == -2) v = static_cast<unsigned char>(v);
        unsigned base = c == 'u' ? 10 : c == 'o' ? 8 : 16;
        sp.plus = sp.space = false;
        emit_number(sink, ctx, v, false, base, c == 'X', "", sp, total);
        break;
      }
      case 'p': {
        uintptr_t v = reinterpret_cast<uintptr_t>(va_arg(ap, void*));
        emit_number(sink, ctx, v, false, 16, false, "0x", sp, total);
        break;
      }
      case 'c': {
        char ch = static_cast<char>(va_arg(ap, int));
        emit_padded(sink, ctx, &ch, 1, sp, total);  // a NUL prints as itself
        break;
      }
      case 's': emit_string(sink, ctx, va_arg(ap, const char*), sp, total); break;
      case '%':
        sink(ctx, "%", 1);
        total++;
        break;
      default: {  // unknown conversion: show it as written
        char s[2] = {'%', c};
        sink(ctx, s, 2);
        total += 2;
        break;
      }
    }
  }
  return total;
}

}  // namespace fmt

namespace {
struct BufferSink {
  char* buf;
  size_t size;
  size_t used;
};
void buffer_sink(void* ctx, const char* s, size_t n) {
  auto* b = static_cast<BufferSink*>(ctx);
  for (size_t i = 0; i < n; i++) {
    if (b->used + 1 < b->size) b->buf[b->used] = s[i];
    b->used++;
  }
}
}  // namespace

size_t kvsnprintf(char* buf, size_t size, const char* f, va_list ap) {
  BufferSink b{buf, size, 0};
  size_t n = fmt::vformat(buffer_sink, &b, f, ap);
  if (size) buf[b.used < size ? b.used : size - 1] = 0;
  return n;
}

size_t ksnprintf(char* buf, size_t size, const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  size_t n = kvsnprintf(buf, size, f, ap);
  va_end(ap);
  return n;
}
