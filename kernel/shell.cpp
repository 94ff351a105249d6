// SPDX-License-Identifier: Apache-2.0
// The console shell: read a line with minimal editing, split it into words,
// run the registered command.
//
// Input is untrusted: control characters other than the ones handled are
// dropped, lines longer than the buffer are refused as a whole (not cut and
// run), and at most kMaxArgs words are accepted.
#include <kernel/console.h>
#include <kernel/context.h>
#include <kernel/shell.h>
#include <kernel/string.h>
#include <mm/kmemleak.h>
#include <cstdarg>

extern "C" const ShellCommand __shell_commands_start[], __shell_commands_end[];

namespace {
constexpr unsigned kLineMax = 128;
constexpr int kMaxArgs = 16;

const ShellCommand* find(const char* name) {
  for (const ShellCommand* c = __shell_commands_start; c < __shell_commands_end; c++) {
    if (strcmp(c->name, name) == 0) return c;
  }
  return nullptr;
}

// Reads one line into buf; returns false if it was too long (and discarded).
bool read_line(char* buf, unsigned size) {
  unsigned n = 0;
  bool overflow = false;
  int esc = 0;  // inside an escape sequence (arrow keys and the like): 1 after ESC, 2 after ESC [
  for (;;) {
    int c = console::getc();
    if (esc == 1) {
      esc = c == '[' ? 2 : 0;
      continue;
    }
    if (esc == 2) {
      if (c >= 0x40 && c <= 0x7e) esc = 0;
      continue;
    }
    if (c == 0x1b) {
      esc = 1;
      continue;
    }
    if (c == '\r' || c == '\n') {
      console::write("\n", 1);
      buf[overflow ? 0 : n] = 0;
      return !overflow;
    }
    if (c == 0x7f || c == 0x08) {  // backspace / delete
      if (n > 0 && !overflow) {
        n--;
        console::write("\b \b", 3);
      }
      continue;
    }
    if (c == 0x15) {  // ^U: kill the line
      while (n > 0) {
        n--;
        console::write("\b \b", 3);
      }
      overflow = false;
      continue;
    }
    if (c == 0x03) {  // ^C: abandon the line
      console::write("^C\n", 3);
      buf[0] = 0;
      return true;
    }
    if (c < 0x20 || c > 0x7e) continue;  // other control bytes and non-ASCII
    if (n + 1 >= size) {
      overflow = true;
      continue;
    }
    if (overflow) continue;
    buf[n++] = static_cast<char>(c);
    char ch = static_cast<char>(c);
    console::write(&ch, 1);
  }
}
}  // namespace

namespace shell {

int usage_error(const char* cmd, const char* f, ...) {
  kprintf("%s: ", cmd);
  va_list ap;
  va_start(ap, f);
  kvprintf(f, ap);
  va_end(ap);
  kprintf("\n");
  return 2;
}

bool parse_u64(const char* s, uint64_t& out) {
  if (!s || !*s) return false;
  uint64_t v = 0;
  unsigned base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
    if (!*s) return false;
  }
  for (; *s; s++) {
    unsigned d;
    if (*s >= '0' && *s <= '9') d = static_cast<unsigned>(*s - '0');
    else if (base == 16 && *s >= 'a' && *s <= 'f') d = static_cast<unsigned>(*s - 'a' + 10);
    else if (base == 16 && *s >= 'A' && *s <= 'F') d = static_cast<unsigned>(*s - 'A' + 10);
    else break;
    if (v > (~0ull - d) / base) return false;  // overflow
    v = v * base + d;
  }
  uint64_t mult = 1;
  if (*s == 'K' || *s == 'k') mult = 1ull << 10;
  else if (*s == 'M' || *s == 'm') mult = 1ull << 20;
  else if (*s == 'G' || *s == 'g') mult = 1ull << 30;
  if (mult != 1) s++;
  if (*s) return false;
  if (v && mult > ~0ull / v) return false;
  out = v * mult;
  return true;
}

int execute(char* line) {
  char* argv[kMaxArgs + 1];
  int argc = 0;
  char* p = line;
  for (;;) {
    while (*p == ' ' || *p == '\t') *p++ = 0;
    if (!*p) break;
    if (argc == kMaxArgs) {
      kprintf("too many words (at most %d)\n", kMaxArgs);
      return -1;
    }
    argv[argc++] = p;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  argv[argc] = nullptr;
  if (argc == 0) return 0;
  const ShellCommand* c = find(argv[0]);
  if (!c) {
    kprintf("%s: unknown command (type 'help' for the list)\n", argv[0]);
    return -1;
  }
  context::Scope in(context::make(context::kCommand, static_cast<uint32_t>(c - __shell_commands_start)));
  return c->run(argc, argv);
}

void run() {
  char line[kLineMax];
  context::Scope in(context::make(context::kShell));
  kprintf("Type 'help' for commands.\n");
  for (;;) {
    kprintf("magpie> ");
    if (!read_line(line, sizeof line)) {
      kprintf("line too long (at most %u characters); ignored\n", kLineMax - 1);
      continue;
    }
    execute(line);
    // While kmemleak scans stacks, the next command's frames must not find
    // this one's values in the slots they leave unwritten: a stale copy of
    // a leaked pointer there would hide it (mm/kmemleak.cpp, The stacks).
    mm::kmemleak_scrub_stack();
  }
}

}  // namespace shell

namespace {
int cmd_help(int argc, char** argv) {
  if (argc > 2) return shell::usage_error(argv[0], "usage: help [command]");
  for (const ShellCommand* c = __shell_commands_start; c < __shell_commands_end; c++) {
    if (argc == 2 && strcmp(argv[1], c->name) != 0) continue;
    kprintf("  %-12s %s\n", c->name, c->help);
  }
  if (argc == 2 && !find(argv[1])) return shell::usage_error(argv[0], "no command '%s'", argv[1]);
  return 0;
}
}  // namespace
SHELL_COMMAND(help, "list commands, or describe one: help [command]", cmd_help);
