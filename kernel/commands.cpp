// SPDX-License-Identifier: Apache-2.0
// Basic shell commands: version, cpus, uptime, meminfo, poweroff.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/shell.h>
#include <kernel/timer.h>
#include <kernel/panic.h>
#include <kernel/stack.h>
#include <kernel/string.h>
#include "mm/accounting.h"

namespace {

int no_args(int argc, char** argv) {
  if (argc == 1) return 0;
  return shell::usage_error(argv[0], "takes no arguments");
}

int cmd_version(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  kprintf("Magpie %s, board %s, arch %s, built with GCC %s\n", MAGPIE_VERSION, MAGPIE_BOARD, MAGPIE_ARCH, __VERSION__);
  return 0;
}

int cmd_cpus(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  for_each_cpu([](PerCpu& c) {
    kprintf("cpu %u: hwid 0x%llx %s, %llu timer ticks\n", c.index, static_cast<unsigned long long>(c.hwid),
            c.online.load() ? "online" : "offline", static_cast<unsigned long long>(c.ticks.load()));
  });
  return 0;
}

int cmd_uptime(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  uint64_t ns = timer::now_ns();
  uint64_t s = ns / 1000000000ull;
  kprintf("up %llu.%03llu s (counter %llu Hz)\n", static_cast<unsigned long long>(s),
          static_cast<unsigned long long>(ns / 1000000ull % 1000),
          static_cast<unsigned long long>(timer::frequency_hz()));
  return 0;
}

void print_range(const char* label, uint64_t base, uint64_t size, const char* what) {
  kprintf("  %-9s 0x%010llx-0x%010llx %8llu KiB  %s\n", label, static_cast<unsigned long long>(base),
          static_cast<unsigned long long>(base + size - 1), static_cast<unsigned long long>(size >> 10), what);
}

int cmd_meminfo(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  uint64_t total = 0;
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    print_range("ram", g_boot.mem[i].base, g_boot.mem[i].size, g_boot.mem[i].what);
    total += g_boot.mem[i].size;
  }
  for (unsigned i = 0; i < g_boot.reserved_count; i++)
    print_range("reserved", g_boot.reserved[i].base, g_boot.reserved[i].size, g_boot.reserved[i].what);
  auto at = [](char* p) { return static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)); };
  kprintf("  kernel    text 0x%llx-0x%llx rodata 0x%llx-0x%llx data+bss 0x%llx-0x%llx end 0x%llx\n", at(__text_start),
          at(__text_end), at(__rodata_start), at(__rodata_end), at(__data_start), at(__bss_end), at(__kernel_end));
  kprintf("  total RAM %llu KiB in %u bank(s); MMU: %s\n", static_cast<unsigned long long>(total >> 10),
          g_boot.mem_count, arch::mmu_description());
  if (mm_boot::ready()) {
    mm_boot::MemAccounting a;
    mm_boot::accounting(a);
    auto kib = [](uint64_t b) { return static_cast<unsigned long long>(b >> 10); };
    kprintf(
        "  free %llu KiB + heap %llu KiB (slabs %llu) + kmem metadata %llu KiB + vmem tags %llu KiB\n"
        "    + page tables %llu KiB + other %llu KiB + reserved %llu KiB = %llu KiB %s RAM %llu KiB\n",
        kib(a.free), kib(a.heap), kib(a.heap_slabs), kib(a.kmem_meta), kib(a.vmem_tags), kib(a.page_tables),
        kib(a.other), kib(a.reserved),
        kib(a.free + a.heap + a.kmem_meta + a.vmem_tags + a.page_tables + a.other + a.reserved),
        a.free + a.heap + a.kmem_meta + a.vmem_tags + a.page_tables + a.other + a.reserved == a.ram ? "=" : "!=",
        kib(a.ram));
  }
  return 0;
}

int cmd_poweroff(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  kprintf("powering off\n");
  arch::poweroff();
}

// Deliberate failures, to see (and test) what a user gets on the console.
NOINLINE void crash_null() {
  volatile uintptr_t zero = 0;  // hide the null from the optimiser
  *reinterpret_cast<volatile int*>(zero) = 1;
}
NOINLINE void crash_text() { *reinterpret_cast<volatile uint32_t*>(&cmd_version) = 0; }
NOINLINE void crash_assert(int v) { ASSERT(v == 42); }
NOINLINE void crash_undef() { __builtin_trap(); }
NOINLINE void crash_stack() {
  kstack::run_off_the_end();
  panic("crash stack: the stack ran on past its guard page without a fault");
}

int cmd_crash(int argc, char** argv) {
  if (argc != 2) return shell::usage_error(argv[0], "usage: crash panic|assert|null|text|undef|stack");
  const char* how = argv[1];
  // Without an MMU (armv7m) address 0 and the text are writable memory and
  // no guard page stops a stack: those three would corrupt, not fault.
  if (!arch::kHasMmu && (strcmp(how, "null") == 0 || strcmp(how, "text") == 0 || strcmp(how, "stack") == 0))
    return shell::usage_error(argv[0], "no MMU here: '%s' would corrupt memory, not fault (try undef)", how);
  if (strcmp(how, "panic") == 0) panic("crash command: deliberate panic");
  if (strcmp(how, "assert") == 0) crash_assert(argc);
  if (strcmp(how, "null") == 0) crash_null();
  if (strcmp(how, "text") == 0) crash_text();
  if (strcmp(how, "undef") == 0) crash_undef();
  if (strcmp(how, "stack") == 0) crash_stack();
  return shell::usage_error(argv[0], "unknown way to crash '%s' (panic, assert, null, text, undef, stack)", how);
}

}  // namespace

SHELL_COMMAND(version, "kernel version, board and compiler", cmd_version);
SHELL_COMMAND(cpus, "one line per core: id, hardware id, state", cmd_cpus);
SHELL_COMMAND(uptime, "time since boot", cmd_uptime);
SHELL_COMMAND(meminfo, "RAM banks, reserved ranges and the kernel image", cmd_meminfo);
SHELL_COMMAND(crash, "deliberately fail: crash panic|assert|null|text|undef|stack (halts)", cmd_crash);
SHELL_COMMAND(poweroff, "turn the machine off (QEMU exits with status 0)", cmd_poweroff);
