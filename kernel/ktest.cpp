// SPDX-License-Identifier: Apache-2.0
// The in-kernel test runner. Tests run one after another on the boot core
// (a test may fan work out to other cores through smp::call_on_all).
#include <kernel/console.h>
#include <kernel/context.h>
#include <kernel/ktest.h>
#include <kernel/shell.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include <cstdarg>

extern "C" const KTestCase __ktests_start[], __ktests_end[];

namespace {
bool g_failed;
const char* g_skip_reason;  // set by KSKIP: the running test skipped
}  // namespace

namespace ktest {

void fail(const char* file, int line, const char* f, ...) {
  g_failed = true;
  kprintf("    FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, f);
  kvprintf(f, ap);
  va_end(ap);
  kprintf("\n");
}

bool current_failed() { return g_failed; }

void skip(const char* reason) { g_skip_reason = reason && *reason ? reason : "no reason given"; }

unsigned run_all(const char* filter, unsigned* passed_out) {
  unsigned passed = 0, failed = 0, skipped = 0;
  for (const KTestCase* t = __ktests_start; t < __ktests_end; t++) {
    if (filter && !strstr(t->name, filter)) continue;
    kprintf("[ RUN  ] %s\n", t->name);
    g_failed = false;
    g_skip_reason = nullptr;
    uint64_t start = timer::now_ns();
    {
      context::Scope in(context::make(context::kTest, static_cast<uint32_t>(t - __ktests_start)));
      t->fn();
    }
    uint64_t ms = (timer::now_ns() - start) / 1000000;
    if (g_failed) {  // a failure before a skip still counts
      failed++;
      kprintf("[ FAIL ] %s (%llu ms)\n", t->name, static_cast<unsigned long long>(ms));
    } else if (g_skip_reason) {
      skipped++;
      kprintf("[ SKIP ] %s (%s)\n", t->name, g_skip_reason);
    } else {
      passed++;
      kprintf("[  OK  ] %s (%llu ms)\n", t->name, static_cast<unsigned long long>(ms));
    }
  }
  kprintf("%u passed, %u failed, %u skipped\n", passed, failed, skipped);
  if (passed_out) *passed_out = passed;
  return failed;
}

}  // namespace ktest

namespace {
int cmd_test(int argc, char** argv) {
  if (argc > 2) return shell::usage_error(argv[0], "usage: test [name-substring]");
  if (argc == 2) {
    bool any = false;
    for (const KTestCase* t = __ktests_start; t < __ktests_end; t++) any |= strstr(t->name, argv[1]) != nullptr;
    if (!any) return shell::usage_error(argv[0], "no test name contains '%s'", argv[1]);
  }
  return ktest::run_all(argc == 2 ? argv[1] : nullptr, nullptr) ? 1 : 0;
}

int cmd_tests(int argc, char** argv) {
  if (argc != 1) return shell::usage_error(argv[0], "takes no arguments");
  for (const KTestCase* t = __ktests_start; t < __ktests_end; t++) kprintf("  %s\n", t->name);
  return 0;
}
}  // namespace
SHELL_COMMAND(test, "run in-kernel tests: test [name-substring]", cmd_test);
SHELL_COMMAND(tests, "list in-kernel tests", cmd_tests);
