// SPDX-License-Identifier: Apache-2.0
// `kmem torture` in the in-kernel suite: its checker sees a changed byte,
// and a short run on every core passes. The full-size runs are the CTests
// BOARD/torture (tests/kernel/torture-test.sh).
#include <kernel/ktest.h>
#include <kernel/torture.h>
#include <mm/kmem.h>
#include <mm/page.h>

namespace {
// The torture's state (56 KiB on 32-bit) and working set (buffers up to
// 64 KiB) need more than a board with 256 KiB of RAM has (mem=256K).
constexpr uint64_t kTortureRam = uint64_t{1} << 20;
}  // namespace

KTEST(kmem_torture_checker_reports_a_changed_byte) {
  if (mm::page_ram_bytes() < kTortureRam) KSKIP("less than 1 MiB of RAM: no room for the torture's state");
  KEXPECT(torture::detects_corruption());
}

KTEST(kmem_torture_short_run_passes) {
  if (mm::page_ram_bytes() < kTortureRam)
    KSKIP("less than 1 MiB of RAM: no room for the torture's state and working set");
  char a0[] = "kmem", a1[] = "torture", a2[] = "5000", a3[] = "3";
  char* argv[] = {a0, a1, a2, a3};
  uint64_t errors = mm::error_count();
  KEXPECT_EQ(torture::run("kmem", 4, argv), 0);
  KEXPECT_EQ(mm::error_count(), errors);
  // Bad input: a usage message, nothing run.
  char b2[] = "lots";
  char* bad[] = {a0, a1, b2};
  KEXPECT(torture::run("kmem", 3, bad) != 0);
}
