// SPDX-License-Identifier: Apache-2.0
// Console shell commands register themselves in the file that owns them:
//
//   static int cmd_uptime(int argc, char** argv) { ...; return 0; }
//   SHELL_COMMAND(uptime, "time since boot", cmd_uptime);
//
// A command returns 0 on success; on bad arguments it prints what was wrong
// (shell::usage_error helps) and returns non-zero. The shell goes on either way.
#pragma once
#include <cstdint>
#include <kernel/compiler.h>

struct alignas(8) ShellCommand {  // sizeof a multiple of the aligned(8) below (32-bit)
  const char* name;
  const char* help;
  int (*run)(int argc, char** argv);
};

#define SHELL_COMMAND(cmd, help_text, fn)   \
  extern const ShellCommand shell_cmd_##cmd \
      __attribute__((section(".shell_commands"), used, aligned(8))) = {#cmd, help_text, fn}

namespace shell {
// Runs the read-eval loop on the console; returns only for "exit" in tests.
[[noreturn]] void run();
// Executes one line as if typed; returns the command's status (or -1).
int execute(char* line);
// Prints "<cmd>: <message>" and returns 2.
int usage_error(const char* cmd, const char* fmt, ...) PRINTF_LIKE(2, 3);
// Parses an unsigned number (decimal or 0x hex) with an optional K/M/G suffix.
bool parse_u64(const char* s, uint64_t& out);
}  // namespace shell
