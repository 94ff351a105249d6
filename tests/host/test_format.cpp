// SPDX-License-Identifier: Apache-2.0
// Tests of the kernel's printf-style formatter (kernel/lib/format.cpp).
//
// The reference is the C library: for every conversion the formatter claims
// to support (%d %i %u %x %X %o %c %s %p %%, flags - 0 + space, width,
// precision, '*', length modifiers hh h l ll z t j) the output must match what
// glibc's snprintf prints, and the return value and truncation must follow
// vsnprintf. The few places where the kernel deliberately differs (a null %p,
// unknown conversions) are tested on their own.
#include <kernel/format.h>

#include <gtest/gtest.h>

#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace std::literals;

namespace {

// The C library's formatter behind a non-builtin wrapper, so the compiler
// checks the format (PRINTF_LIKE) but does not warn about truncation.
int libc_snprintf(char* buf, size_t size, const char* f, ...) PRINTF_LIKE(3, 4);
int libc_snprintf(char* buf, size_t size, const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, size, f, ap);
  va_end(ap);
  return n;
}

size_t call_kvsnprintf(char* buf, size_t size, const char* f, ...) PRINTF_LIKE(3, 4);
size_t call_kvsnprintf(char* buf, size_t size, const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  size_t n = kvsnprintf(buf, size, f, ap);
  va_end(ap);
  return n;
}

constexpr size_t kBuf = 2048;

// The text in buf of a formatter that returned n (may contain NULs, as %c
// can print one).
std::string text_of(const char* buf, size_t n) { return std::string(buf, n < kBuf ? n : kBuf - 1); }

}  // namespace

// Formats with ksnprintf and with the C library and checks both against the
// expected text (a string_view, so it may hold a NUL), and both return values.
#define EXPECT_FMT(expected, ...)                                           \
  do {                                                                      \
    SCOPED_TRACE(#__VA_ARGS__);                                             \
    const std::string want_{std::string_view{expected}};                    \
    char kbuf_[kBuf], lbuf_[kBuf];                                          \
    size_t kn_ = ksnprintf(kbuf_, sizeof kbuf_, __VA_ARGS__);               \
    int ln_ = libc_snprintf(lbuf_, sizeof lbuf_, __VA_ARGS__);              \
    ASSERT_GE(ln_, 0);                                                      \
    EXPECT_EQ(text_of(lbuf_, static_cast<size_t>(ln_)), want_) << "(libc)"; \
    EXPECT_EQ(text_of(kbuf_, kn_), want_) << "(kernel)";                    \
    EXPECT_EQ(kn_, want_.size());                                           \
    EXPECT_EQ(kbuf_[kn_ < kBuf ? kn_ : kBuf - 1], '\0');                    \
  } while (0)

// Kernel only: where C leaves the result undefined or the kernel differs.
#define EXPECT_KFMT(expected, ...)                            \
  do {                                                        \
    SCOPED_TRACE(#__VA_ARGS__);                               \
    const std::string want_{std::string_view{expected}};      \
    char kbuf_[kBuf];                                         \
    size_t kn_ = ksnprintf(kbuf_, sizeof kbuf_, __VA_ARGS__); \
    EXPECT_EQ(text_of(kbuf_, kn_), want_);                    \
    EXPECT_EQ(kn_, want_.size());                             \
  } while (0)

TEST(Format, PlainText) {
  EXPECT_FMT("", "%s", "");
  EXPECT_FMT("hello, world", "hello, %s", "world");
  EXPECT_FMT("%", "%%");
  EXPECT_FMT("100% sure", "100%% %s", "sure");
  EXPECT_FMT("%%d", "%%%%d");
  EXPECT_FMT("a%b", "a%%%c", 'b');
  char buf[8];
  EXPECT_EQ(ksnprintf(buf, sizeof buf, "%s", ""), 0u);
  EXPECT_STREQ(buf, "");
}

TEST(Format, SignedDecimal) {
  EXPECT_FMT("0", "%d", 0);
  EXPECT_FMT("1", "%d", 1);
  EXPECT_FMT("-1", "%d", -1);
  EXPECT_FMT("42", "%i", 42);
  EXPECT_FMT("-42", "%i", -42);
  EXPECT_FMT("2147483647", "%d", INT_MAX);
  EXPECT_FMT("-2147483648", "%d", INT_MIN);
  EXPECT_FMT("-2147483648", "%i", INT_MIN);
  EXPECT_FMT("1 -2 3", "%d %i %d", 1, -2, 3);
}

TEST(Format, DecimalFlagsWidthPrecision) {
  EXPECT_FMT("   42", "%5d", 42);
  EXPECT_FMT("42   |", "%-5d|", 42);
  EXPECT_FMT("00042", "%05d", 42);
  EXPECT_FMT("-0042", "%05d", -42);
  EXPECT_FMT("+42", "%+d", 42);
  EXPECT_FMT("-42", "%+d", -42);
  EXPECT_FMT("+0", "%+d", 0);
  EXPECT_FMT(" 42", "% d", 42);
  EXPECT_FMT("-42", "% d", -42);
  EXPECT_FMT("+0042", "%+05d", 42);
  EXPECT_FMT(" 0042", "% 05d", 42);
  EXPECT_FMT("+42  |", "%-+5d|", 42);
  EXPECT_FMT("42", "%1d", 42);  // width smaller than the number
  EXPECT_FMT("-2147483648", "%5d", INT_MIN);
  EXPECT_FMT("  -2147483648", "%13d", INT_MIN);
  EXPECT_FMT("-002147483648", "%013d", INT_MIN);
  // Precision: minimum digits.
  EXPECT_FMT("042", "%.3d", 42);
  EXPECT_FMT("-042", "%.3d", -42);
  EXPECT_FMT("  042", "%5.3d", 42);
  EXPECT_FMT("+042 |", "%-+5.3d|", 42);
  EXPECT_FMT("42", "%.1d", 42);
  EXPECT_FMT("42", "%.d", 42);  // "." alone is precision 0
  // Precision 0 and value 0: no digits at all.
  EXPECT_FMT("|", "%.0d|", 0);
  EXPECT_FMT("|", "%.d|", 0);
  EXPECT_FMT("     |", "%5.0d|", 0);
  EXPECT_FMT("+|", "%+.0d|", 0);
  EXPECT_FMT(" |", "% .0d|", 0);
  EXPECT_FMT("1", "%.0d", 1);
  EXPECT_FMT("0000000000000000000042", "%.22d", 42);
  EXPECT_FMT(std::string(48, ' ') + "42", "%50d", 42);
}

TEST(Format, Unsigned) {
  EXPECT_FMT("0", "%u", 0u);
  EXPECT_FMT("4294967295", "%u", UINT_MAX);
  EXPECT_FMT("4294967295", "%u", static_cast<unsigned>(-1));
  EXPECT_FMT("  123", "%5u", 123u);
  EXPECT_FMT("00123", "%05u", 123u);
  EXPECT_FMT("123  |", "%-5u|", 123u);
  EXPECT_FMT("00123", "%.5u", 123u);
  EXPECT_FMT("|", "%.0u|", 0u);
}

TEST(Format, Hex) {
  EXPECT_FMT("0", "%x", 0u);
  EXPECT_FMT("ff", "%x", 255u);
  EXPECT_FMT("FF", "%X", 255u);
  EXPECT_FMT("deadbeef", "%x", 0xdeadbeefu);
  EXPECT_FMT("DEADBEEF", "%X", 0xdeadbeefu);
  EXPECT_FMT("ffffffff", "%x", static_cast<unsigned>(-1));
  EXPECT_FMT("0123456789abcdef", "%08x%x", 0x01234567u, 0x89abcdefu);
  EXPECT_FMT("0123456789ABCDEF", "%08X%X", 0x01234567u, 0x89abcdefu);
  EXPECT_FMT("    beef", "%8x", 0xbeefu);
  EXPECT_FMT("0000beef", "%08x", 0xbeefu);
  EXPECT_FMT("beef    |", "%-8x|", 0xbeefu);
  EXPECT_FMT("0000beef", "%.8x", 0xbeefu);
  EXPECT_FMT("  00beef", "%8.6x", 0xbeefu);
  EXPECT_FMT("|", "%.0x|", 0u);
  EXPECT_FMT("|", "%.0X|", 0u);
}

TEST(Format, Octal) {
  EXPECT_FMT("0", "%o", 0u);
  EXPECT_FMT("10", "%o", 8u);
  EXPECT_FMT("777", "%o", 0777u);
  EXPECT_FMT("37777777777", "%o", UINT_MAX);
  EXPECT_FMT("  644", "%5o", 0644u);
  EXPECT_FMT("00644", "%05o", 0644u);
  EXPECT_FMT("644  |", "%-5o|", 0644u);
  EXPECT_FMT("00644", "%.5o", 0644u);
  EXPECT_FMT("|", "%.0o|", 0u);
  EXPECT_FMT("1777777777777777777777", "%llo", ULLONG_MAX);
}

TEST(Format, Char) {
  EXPECT_FMT("a", "%c", 'a');
  EXPECT_FMT("abc", "%c%c%c", 'a', 'b', 'c');
  EXPECT_FMT("    x", "%5c", 'x');
  EXPECT_FMT("x    |", "%-5c|", 'x');
  EXPECT_FMT("x", "%1c", 'x');
  EXPECT_FMT("\xff", "%c", 0xff);  // converted to unsigned char
  EXPECT_FMT("A", "%c", 0x141);
  // A NUL character is printed as itself, and still padded.
  EXPECT_FMT("\0"sv, "%c", 0);
  EXPECT_FMT("a\0b"sv, "a%cb", 0);
  EXPECT_FMT("  \0|"sv, "%3c|", 0);
  EXPECT_FMT("\0  |"sv, "%-3c|", 0);
}

TEST(Format, String) {
  EXPECT_FMT("hello", "%s", "hello");
  EXPECT_FMT("   hi", "%5s", "hi");
  EXPECT_FMT("hi   |", "%-5s|", "hi");
  EXPECT_FMT("hello", "%3s", "hello");
  EXPECT_FMT("hel", "%.3s", "hello");
  EXPECT_FMT("hello", "%.10s", "hello");
  EXPECT_FMT("|", "%.0s|", "hello");
  EXPECT_FMT("|", "%.s|", "hello");
  EXPECT_FMT("  hel", "%5.3s", "hello");
  EXPECT_FMT("hel  |", "%-5.3s|", "hello");
  EXPECT_FMT("     |", "%5s|", "");
  EXPECT_FMT("a b c", "%s %s %s", "a", "b", "c");
  // Precision bounds the read: the array need not be NUL-terminated.
  const char unterminated[3] = {'a', 'b', 'c'};
  EXPECT_FMT("abc", "%.3s", unterminated);
  EXPECT_FMT("ab", "%.2s", unterminated);
}

TEST(Format, Pointer) {
  auto* p = reinterpret_cast<void*>(uintptr_t{0x1234});
  EXPECT_FMT("0x1234", "%p", p);
  EXPECT_FMT("0xdeadbeef", "%p", reinterpret_cast<void*>(uintptr_t{0xdeadbeef}));
  EXPECT_FMT("0xffffffffffffffff", "%p", reinterpret_cast<void*>(UINTPTR_MAX));
  EXPECT_FMT("    0x1234", "%10p", p);
  EXPECT_FMT("0x1234    |", "%-10p|", p);
  int local = 0;
  char expect[64];
  std::snprintf(expect, sizeof expect, "%p", static_cast<void*>(&local));
  EXPECT_FMT(expect, "%p", static_cast<void*>(&local));
}

TEST(Format, NullPointerIsHex) {
  // glibc prints "(nil)"; the kernel prints the value like any other.
  EXPECT_KFMT("0x0", "%p", static_cast<void*>(nullptr));
  EXPECT_KFMT("       0x0", "%10p", static_cast<void*>(nullptr));
}

TEST(Format, StarWidthAndPrecision) {
  EXPECT_FMT("   42", "%*d", 5, 42);
  EXPECT_FMT("42   |", "%*d|", -5, 42);  // negative width: left-justify
  EXPECT_FMT("42   |", "%-*d|", -5, 42);
  EXPECT_FMT("00042", "%0*d", 5, 42);
  EXPECT_FMT("00042", "%.*d", 5, 42);
  EXPECT_FMT("42", "%.*d", -1, 42);  // negative precision: as if omitted
  EXPECT_FMT("|", "%.*d|", 0, 0);
  EXPECT_FMT("  042", "%*.*d", 5, 3, 42);
  EXPECT_FMT("042  |", "%*.*d|", -5, 3, 42);
  EXPECT_FMT("hel", "%.*s", 3, "hello");
  EXPECT_FMT("hello", "%.*s", -3, "hello");
  EXPECT_FMT("  hel|", "%*.*s|", 5, 3, "hello");
  EXPECT_FMT("hel  |", "%*.*s|", -5, 3, "hello");
  EXPECT_FMT("   ff 7", "%*x %d", 5, 0xffu, 7);
  EXPECT_FMT("x", "%*c", 0, 'x');
  EXPECT_FMT("  x", "%*c", 3, 'x');
}

TEST(Format, LengthChar) {
  EXPECT_FMT("-56", "%hhd", 200);
  EXPECT_FMT("-128", "%hhd", 128);
  EXPECT_FMT("127", "%hhi", 127);
  EXPECT_FMT("-1", "%hhd", -1);
  EXPECT_FMT("5", "%hhu", 256 + 5);
  EXPECT_FMT("255", "%hhu", -1);
  EXPECT_FMT("ff", "%hhx", -1);
  EXPECT_FMT("AB", "%hhX", 0x12ab);
  EXPECT_FMT("377", "%hho", 0xfff);
  EXPECT_FMT("-56 7", "%hhd %d", 200, 7);
}

TEST(Format, LengthShort) {
  EXPECT_FMT("4464", "%hd", 70000);
  EXPECT_FMT("-32768", "%hd", 32768);
  EXPECT_FMT("-1", "%hi", 65535);
  EXPECT_FMT("65535", "%hu", -1);
  EXPECT_FMT("ffff", "%hx", -1);
  EXPECT_FMT("1234", "%hX", 0xabcd1234);
  EXPECT_FMT("177777", "%ho", -1);
  EXPECT_FMT("  -00001", "%8.5hd", 0x1ffff);
}

TEST(Format, LengthLong) {
  EXPECT_FMT("9223372036854775807", "%ld", LONG_MAX);
  EXPECT_FMT("-9223372036854775808", "%ld", LONG_MIN);
  EXPECT_FMT("-9223372036854775808", "%li", LONG_MIN);
  EXPECT_FMT("18446744073709551615", "%lu", ULONG_MAX);
  EXPECT_FMT("ffffffffffffffff", "%lx", ULONG_MAX);
  EXPECT_FMT("123456789ABCDEF0", "%lX", 0x123456789abcdef0ul);
  EXPECT_FMT("1777777777777777777777", "%lo", ULONG_MAX);
  EXPECT_FMT("9223372036854775807", "%lld", LLONG_MAX);
  EXPECT_FMT("-9223372036854775808", "%lld", LLONG_MIN);
  EXPECT_FMT("-9223372036854775808", "%lli", LLONG_MIN);
  EXPECT_FMT("18446744073709551615", "%llu", ULLONG_MAX);
  EXPECT_FMT("fedcba9876543210", "%llx", 0xfedcba9876543210ull);
  EXPECT_FMT("FEDCBA9876543210", "%llX", 0xfedcba9876543210ull);
  EXPECT_FMT("0000000100000000", "%016llx", 0x100000000ull);
  EXPECT_FMT("+00000000004294967296", "%+021lld", 0x100000000ll);
  EXPECT_FMT("-1 2 -3", "%ld %lld %d", -1l, 2ll, -3);
}

TEST(Format, LengthSizePtrdiffIntmax) {
  EXPECT_FMT("18446744073709551615", "%zu", SIZE_MAX);
  EXPECT_FMT("ffffffffffffffff", "%zx", SIZE_MAX);
  EXPECT_FMT("1234", "%zu", size_t{1234});
  EXPECT_FMT("-1", "%zd", static_cast<ssize_t>(-1));
  EXPECT_FMT("-9223372036854775808", "%td", PTRDIFF_MIN);
  EXPECT_FMT("9223372036854775807", "%ti", PTRDIFF_MAX);
  EXPECT_FMT("-16", "%td", ptrdiff_t{-16});
  EXPECT_FMT("ffffffffffffffff", "%tx", static_cast<ptrdiff_t>(-1));
  EXPECT_FMT("-9223372036854775808", "%jd", INTMAX_MIN);
  EXPECT_FMT("9223372036854775807", "%ji", INTMAX_MAX);
  EXPECT_FMT("18446744073709551615", "%ju", UINTMAX_MAX);
  EXPECT_FMT("FFFFFFFFFFFFFFFF", "%jX", UINTMAX_MAX);
  EXPECT_FMT("1777777777777777777777", "%jo", UINTMAX_MAX);
  // Each modifier consumes exactly its argument.
  EXPECT_FMT("1 2 3 4 5 6", "%zu %d %td %d %jd %d", size_t{1}, 2, ptrdiff_t{3}, 4, intmax_t{5}, 6);
  EXPECT_FMT("-1 2 -3 4", "%jd %u %zd %x", intmax_t{-1}, 2u, static_cast<ssize_t>(-3), 4u);
}

TEST(Format, Mixed) {
  EXPECT_FMT("cpu 3: [00002000, 0x40000000) ok   |", "cpu %u: [%08x, %p) %-5s|", 3u, 0x2000u,
             reinterpret_cast<void*>(uintptr_t{0x40000000}), "ok");
  EXPECT_FMT("x=-7 y=+7 z=   7 s=hi c=! %", "x=%d y=%+d z=%4d s=%s c=%c %%", -7, 7, 7, "hi", '!');
}

// Combinations of flags, width, precision and conversion, each checked
// against the C library with a format built at run time.
TEST(Format, CombinationsMatchLibc) {
  const char* flag_sets[] = {"", "-", "0", "+", " ", "-0", "-+", "- ", "0+", "0 ", "+ ", "-0+ "};
  const char* widths[] = {"", "1", "3", "8", "25", "*"};
  const char* precisions[] = {"", ".", ".0", ".1", ".3", ".12", ".*"};
  const int star_widths[] = {-9, 0, 6};
  const int star_precisions[] = {-1, 0, 4};
  const long long values[] = {0, 1, -1, 7, -42, 255, 4096, INT_MAX, INT_MIN, LLONG_MAX, LLONG_MIN};
  struct Conv {
    const char* length;
    char conv;
  };
  const Conv convs[] = {{"", 'd'},   {"", 'i'},   {"", 'u'},  {"", 'x'},  {"", 'X'},  {"", 'o'},   {"hh", 'd'},
                        {"h", 'i'},  {"hh", 'x'}, {"h", 'u'}, {"l", 'd'}, {"l", 'x'}, {"ll", 'd'}, {"ll", 'o'},
                        {"ll", 'X'}, {"z", 'u'},  {"z", 'x'}, {"t", 'd'}, {"j", 'd'}, {"j", 'u'}};
  size_t checked = 0;
  for (const Conv& c : convs) {
    const bool wide = c.length[0] == 'l' || c.length[0] == 'z' || c.length[0] == 't' || c.length[0] == 'j';
    for (const char* fl : flag_sets) {
      for (const char* w : widths) {
        for (const char* pr : precisions) {
          std::string f = "<%"s + fl + w + pr + c.length + c.conv + ">";
          const bool sw = w[0] == '*', sp = std::string_view(pr) == ".*";
          for (long long v : values) {
            for (int wi = 0; wi < (sw ? 3 : 1); wi++) {
              for (int pi = 0; pi < (sp ? 3 : 1); pi++) {
                char kb[256], lb[256];
                size_t kn;
                int ln;
                // Wide conversions take a 64-bit argument, the others an int.
                auto run = [&](auto arg) {
                  int a = star_widths[wi], b = star_precisions[pi];
                  if (sw && sp) {
                    kn = ksnprintf(kb, sizeof kb, f.c_str(), a, b, arg);
                    ln = libc_snprintf(lb, sizeof lb, f.c_str(), a, b, arg);
                  } else if (sw) {
                    kn = ksnprintf(kb, sizeof kb, f.c_str(), a, arg);
                    ln = libc_snprintf(lb, sizeof lb, f.c_str(), a, arg);
                  } else if (sp) {
                    kn = ksnprintf(kb, sizeof kb, f.c_str(), b, arg);
                    ln = libc_snprintf(lb, sizeof lb, f.c_str(), b, arg);
                  } else {
                    kn = ksnprintf(kb, sizeof kb, f.c_str(), arg);
                    ln = libc_snprintf(lb, sizeof lb, f.c_str(), arg);
                  }
                };
                if (wide) run(v);
                else run(static_cast<int>(v));
                ASSERT_EQ(std::string_view(kb), std::string_view(lb))
                    << "format " << f << " value " << v << " star width " << star_widths[wi] << " star precision "
                    << star_precisions[pi];
                ASSERT_EQ(kn, static_cast<size_t>(ln)) << "format " << f << " value " << v;
                checked++;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000u);
}

TEST(Format, StringAndCharCombinationsMatchLibc) {
  const char* flag_sets[] = {"", "-"};
  const char* widths[] = {"", "1", "4", "9"};
  const char* precisions[] = {"", ".", ".0", ".2", ".5", ".20"};
  const char* strings[] = {"", "a", "abcd", "hello world"};
  for (const char* fl : flag_sets) {
    for (const char* w : widths) {
      for (const char* pr : precisions) {
        std::string f = "<%"s + fl + w + pr + "s>";
        for (const char* s : strings) {
          char kb[128], lb[128];
          size_t kn = ksnprintf(kb, sizeof kb, f.c_str(), s);
          int ln = libc_snprintf(lb, sizeof lb, f.c_str(), s);
          ASSERT_STREQ(kb, lb) << "format " << f << " string \"" << s << "\"";
          ASSERT_EQ(kn, static_cast<size_t>(ln));
        }
      }
      std::string f = "<%"s + fl + w + "c>";
      for (int ch : {'a', 'Z', ' ', '~'}) {
        char kb[128], lb[128];
        size_t kn = ksnprintf(kb, sizeof kb, f.c_str(), ch);
        int ln = libc_snprintf(lb, sizeof lb, f.c_str(), ch);
        ASSERT_STREQ(kb, lb) << "format " << f;
        ASSERT_EQ(kn, static_cast<size_t>(ln));
      }
    }
  }
}

// Formats the compiler flags as redundant or dubious, but whose meaning C
// (or glibc, for %p) defines: the kernel must agree.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat"
#pragma GCC diagnostic ignored "-Wformat-overflow"
TEST(Format, FlagInteractions) {
  EXPECT_FMT("+42", "%+ d", 42);  // '+' wins over ' '
  EXPECT_FMT("+42", "% +d", 42);
  EXPECT_FMT("42   |", "%-05d|", 42);  // '-' beats '0'
  EXPECT_FMT("0x1234    |", "%-010p|", reinterpret_cast<void*>(uintptr_t{0x1234}));
  // '0' is ignored when a precision is given ...
  EXPECT_FMT("  042", "%05.3d", 42);
  EXPECT_FMT(" -042", "%05.3d", -42);
  EXPECT_FMT("   ff", "%05.1x", 0xffu);
  // ... unless the precision is a negative '*', which counts as none.
  EXPECT_FMT("00042", "%05.*d", -1, 42);
}

TEST(Format, PointerFlags) {
  auto* p = reinterpret_cast<void*>(uintptr_t{0x1234});
  EXPECT_FMT("0x00001234", "%.8p", p);
  EXPECT_FMT("  0x001234", "%10.6p", p);
  EXPECT_FMT("0x00001234", "%010p", p);
  EXPECT_FMT("+0x1234", "%+p", p);
  EXPECT_FMT(" 0x1234", "% p", p);
}

TEST(Format, NullString) {
  const char* null_str = nullptr;
  EXPECT_FMT("(null)", "%s", null_str);
  EXPECT_FMT("    (null)|", "%10s|", null_str);
  EXPECT_FMT("(null)    |", "%-10s|", null_str);
}

// Undefined or diagnosed in C, but the kernel's behaviour is defined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat"
#pragma GCC diagnostic ignored "-Wformat-extra-args"
TEST(Format, FlagsIgnoredWhereMeaningless) {
  // '+' and ' ' do not apply to unsigned conversions, '0' not to %s and %c.
  EXPECT_FMT("42", "%+u", 42u);
  EXPECT_FMT("42", "% u", 42u);
  EXPECT_FMT("ff", "%+x", 255u);
  EXPECT_FMT("17", "% o", 15u);
  EXPECT_FMT("   ab", "%05s", "ab");
  EXPECT_FMT("    a", "%05c", 'a');
}

TEST(Format, PercentIgnoresWidth) {
  // glibc agrees, but ASan's printf interceptor complains about the format.
  EXPECT_KFMT("%", "%5%");
  EXPECT_KFMT("%|", "%-5%|");
}

TEST(Format, UnknownConversionsShownAsWritten) {
  EXPECT_KFMT("%y", "%y");
  EXPECT_KFMT("a%qb", "a%qb");
  EXPECT_KFMT("%y 5", "%y %d", 5);
  EXPECT_KFMT("abc", "abc%");  // a lone trailing '%' prints nothing
}
#pragma GCC diagnostic pop

TEST(Format, ReturnValueAndTruncation) {
  const char* f = "%s-%05d-%x";
  char full[64];
  int want = libc_snprintf(full, sizeof full, f, "magpie", 42, 0xbeefu);
  ASSERT_EQ(want, 17);  // "magpie-00042-beef"
  for (size_t size = 0; size <= sizeof full; size++) {
    SCOPED_TRACE(size);
    char kb[80], lb[80];
    std::memset(kb, '#', sizeof kb);
    std::memset(lb, '#', sizeof lb);
    size_t kn = ksnprintf(size ? kb : nullptr, size, f, "magpie", 42, 0xbeefu);
    if (size) libc_snprintf(lb, size, f, "magpie", 42, 0xbeefu);
    EXPECT_EQ(kn, static_cast<size_t>(want));  // always the full length
    if (size == 0) continue;
    size_t kept = std::min(size - 1, static_cast<size_t>(want));
    EXPECT_EQ(std::string_view(kb, kept), std::string_view(full, kept));
    EXPECT_EQ(kb[kept], '\0');
    // Nothing written past size (or past the terminator).
    for (size_t i = kept + 1; i < sizeof kb; i++) ASSERT_EQ(kb[i], '#') << "byte " << i;
    EXPECT_EQ(std::memcmp(kb, lb, sizeof kb), 0) << "differs from vsnprintf";
  }
}

TEST(Format, SizeZero) {
  // size 0: nothing is written, not even a terminator; the length is returned.
  char buf[4] = {'x', 'y', 'z', 'w'};
  EXPECT_EQ(ksnprintf(buf, 0, "%d", 12345), 5u);
  EXPECT_EQ(std::string_view(buf, 4), "xyzw");
  EXPECT_EQ(ksnprintf(nullptr, 0, "%s=%u", "answer", 42u), 9u);
  EXPECT_EQ(ksnprintf(nullptr, 0, "%s", ""), 0u);
  EXPECT_EQ(call_kvsnprintf(nullptr, 0, "%50d", 1), 50u);
}

TEST(Format, SizeOne) {
  char buf[2] = {'x', 'y'};
  EXPECT_EQ(ksnprintf(buf, 1, "hello"), 5u);
  EXPECT_EQ(buf[0], '\0');
  EXPECT_EQ(buf[1], 'y');
}

TEST(Format, Kvsnprintf) {
  char buf[32];
  EXPECT_EQ(call_kvsnprintf(buf, sizeof buf, "%s %d %c", "va", -3, '!'), 7u);
  EXPECT_STREQ(buf, "va -3 !");
  EXPECT_EQ(call_kvsnprintf(buf, 4, "%08x", 0x1234u), 8u);
  EXPECT_STREQ(buf, "000");
}

TEST(Format, LongOutput) {
  // Padding longer than the formatter's internal chunk, and long strings.
  for (int width : {15, 16, 17, 31, 32, 33, 100, 1000}) {
    SCOPED_TRACE(width);
    char kb[kBuf], lb[kBuf];
    size_t kn = ksnprintf(kb, sizeof kb, "[%*d|%-*s|%0*x|%.*d]", width, 7, width, "ab", width, 0xau, width, 3);
    int ln = libc_snprintf(lb, sizeof lb, "[%*d|%-*s|%0*x|%.*d]", width, 7, width, "ab", width, 0xau, width, 3);
    EXPECT_EQ(kn, static_cast<size_t>(ln));
    EXPECT_STREQ(kb, lb);
  }
  std::string big(1500, 'q');
  char kb[kBuf];
  EXPECT_EQ(ksnprintf(kb, sizeof kb, "<%s>", big.c_str()), 1502u);
  EXPECT_EQ(std::string(kb), "<" + big + ">");
  // Truncated in the middle of padding.
  char small[10];
  EXPECT_EQ(ksnprintf(small, sizeof small, "%100d", 1), 100u);
  EXPECT_STREQ(small, "         ");
}

namespace {
struct Collect {
  std::string text;
  size_t calls = 0;
};
void collect(void* ctx, const char* s, size_t n) {
  auto* c = static_cast<Collect*>(ctx);
  c->text.append(s, n);
  c->calls++;
}
size_t format_to(Collect& c, const char* f, ...) PRINTF_LIKE(2, 3);
size_t format_to(Collect& c, const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  size_t n = fmt::vformat(collect, &c, f, ap);
  va_end(ap);
  return n;
}
}  // namespace

TEST(Format, VformatSink) {
  Collect c;
  size_t n =
      format_to(c, "boot: %s v%d.%d at %p%c", "magpie", 0, 1, reinterpret_cast<void*>(uintptr_t{0x80200000}), '\n');
  EXPECT_EQ(c.text, "boot: magpie v0.1 at 0x80200000\n");
  EXPECT_EQ(n, c.text.size());
  EXPECT_GT(c.calls, 1u);  // delivered in pieces

  Collect empty;
  EXPECT_EQ(format_to(empty, "%s", ""), 0u);
  EXPECT_EQ(empty.text, "");

  Collect big;
  size_t m = format_to(big, "%-300d|%300s|%c", -1, "x", 0);
  EXPECT_EQ(m, big.text.size());
  EXPECT_EQ(m, 300u + 1 + 300 + 1 + 1);
  EXPECT_EQ(big.text.substr(0, 3), "-1 ");
  EXPECT_EQ(big.text.back(), '\0');
}
