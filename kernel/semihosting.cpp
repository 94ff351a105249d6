// SPDX-License-Identifier: Apache-2.0
// Semihosting's requests, once for every arch (kernel/include/kernel/
// semihosting.h); the trap itself is the arch's arch_semihost.
#include <kernel/semihosting.h>
#include <kernel/string.h>

namespace semihosting {
namespace {

constexpr uintptr_t kSysGetCmdline = 0x15, kSysExit = 0x18, kSysExitExtended = 0x20;
constexpr uintptr_t kAdpStoppedApplicationExit = 0x20026, kAdpStoppedRunTimeErrorUnknown = 0x20023;

bool g_unavailable;  // an exit was tried and nothing served it

}  // namespace

void exit(int code) {
  // The parameter block is two fields of the register's width. Static: the
  // debugger reads it from memory, and a stack may be what failed.
  static uintptr_t block[2];
  if (g_unavailable) return;
  block[0] = kAdpStoppedApplicationExit;
  block[1] = static_cast<uintptr_t>(code);
  arch_semihost(kSysExitExtended, reinterpret_cast<uintptr_t>(block));
  // Returned: nothing served it, or a 32-bit debugger that predates the
  // extended call, whose SYS_EXIT takes the reason alone (success or not).
  // A 64-bit SYS_EXIT takes the same block: no second call there.
  if (sizeof(uintptr_t) == 4)
    arch_semihost(kSysExit, code == 0 ? kAdpStoppedApplicationExit : kAdpStoppedRunTimeErrorUnknown);
  g_unavailable = true;
}

bool command_line(char* buf, size_t size) {
  if (size < 2) return false;
  uintptr_t block[2] = {reinterpret_cast<uintptr_t>(buf), size};
  if (arch_semihost(kSysGetCmdline, reinterpret_cast<uintptr_t>(block)) != 0) return false;
  buf[size - 1] = 0;
  const char* s = buf;
  while (*s && *s != ' ') s++;
  while (*s == ' ') s++;
  memmove(buf, s, strlen(s) + 1);
  return buf[0] != 0;
}

}  // namespace semihosting
