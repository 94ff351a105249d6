// SPDX-License-Identifier: Apache-2.0
// In-kernel tests. Each test registers itself through a linker section:
//
//   KTEST(spinlock_counts) {
//     if (g_cpu_count < 2) KSKIP("one cpu: nothing to contend with");
//     KEXPECT_EQ(a, b);          // records a failure and goes on
//     KASSERT(ptr != nullptr);   // records a failure and ends the test
//   }
//
// Booting with the bootarg "test" runs all of them, prints one line per
// test ("[  OK  ] name (N ms)", "[ FAIL ] name (N ms)" or "[ SKIP ] name
// (reason)") and a last line "N passed, N failed, N skipped", then exits
// QEMU with status 0 only if no test failed and at least one passed. A skip
// is neither: whether it was expected on this machine shape is the test
// suite's call (tests/kernel/ktest-suite). The shell command "test [name]"
// runs them too.
//
// KSKIP(reason) is for a test whose precondition does not hold here (one
// CPU, no trace rings, ...): it records the reason and returns. Skip
// before checking anything; a test that already failed stays failed.
#pragma once
#include <cstdint>
#include <kernel/compiler.h>

struct alignas(8) KTestCase {  // sizeof a multiple of the aligned(8) below (32-bit)
  const char* name;
  const char* file;
  void (*fn)();
};

namespace ktest {
void fail(const char* file, int line, const char* fmt, ...) PRINTF_LIKE(3, 4);
bool current_failed();
// Marks the running test skipped; `reason` must outlive the test (a literal).
void skip(const char* reason);
// Runs tests whose name contains filter (all when null); returns failures.
unsigned run_all(const char* filter, unsigned* passed_out);
}  // namespace ktest

#define KTEST(tname)                                                                                \
  static void ktest_fn_##tname();                                                                   \
  extern const KTestCase ktest_case_##tname                                                         \
      __attribute__((section(".ktests"), used, aligned(8))) = {#tname, __FILE__, ktest_fn_##tname}; \
  static void ktest_fn_##tname()

#define KSKIP(reason)    \
  do {                   \
    ktest::skip(reason); \
    return;              \
  } while (0)
#define KEXPECT(c)                                                 \
  do {                                                             \
    if (!(c)) ktest::fail(__FILE__, __LINE__, "expected: %s", #c); \
  } while (0)
#define KASSERT(c)                                          \
  do {                                                      \
    if (!(c)) {                                             \
      ktest::fail(__FILE__, __LINE__, "assertion: %s", #c); \
      return;                                               \
    }                                                       \
  } while (0)
#define KEXPECT_EQ(a, b)                                                                                       \
  do {                                                                                                         \
    auto ka_ = (a);                                                                                            \
    auto kb_ = (b);                                                                                            \
    if (!(ka_ == kb_))                                                                                         \
      ktest::fail(__FILE__, __LINE__, "expected %s == %s (0x%llx vs 0x%llx)", #a, #b, (unsigned long long)ka_, \
                  (unsigned long long)kb_);                                                                    \
  } while (0)
