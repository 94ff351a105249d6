// SPDX-License-Identifier: Apache-2.0
// Names of the contexts a core runs in (kernel/context.h), for the debug
// modes' audit trails and `kmem log`.
#include <kernel/context.h>
#include <kernel/format.h>
#include <kernel/irq.h>
#include <kernel/ktest.h>
#include <kernel/shell.h>

extern "C" const ShellCommand __shell_commands_start[], __shell_commands_end[];
extern "C" const KTestCase __ktests_start[], __ktests_end[];

namespace context {

void name(uint32_t id, char* out, size_t len) {
  uint32_t v = value_of(id);
  switch (kind_of(id)) {
    case kBoot: ksnprintf(out, len, "boot"); return;
    case kIdle: ksnprintf(out, len, "idle"); return;
    case kShell: ksnprintf(out, len, "shell"); return;
    case kCommand:
      if (v < static_cast<uint32_t>(__shell_commands_end - __shell_commands_start)) {
        ksnprintf(out, len, "command %s", __shell_commands_start[v].name);
        return;
      }
      break;
    case kTest:
      if (v < static_cast<uint32_t>(__ktests_end - __ktests_start)) {
        ksnprintf(out, len, "test %s", __ktests_start[v].name);
        return;
      }
      break;
    case kCall: {
      // The caller's id, rebuilt from the kind and value kept: 16 bits of
      // value hold every command, test and interrupt number.
      uint32_t from = make(static_cast<Kind>(v >> 16 & 15), v & 0xffff);
      if (kind_of(from) == kCall) break;
      size_t n = ksnprintf(out, len, "cross-call from ");
      if (n < len) name(from, out + n, len - n);
      return;
    }
    case kIrq: {
      const char* handler = irq::name(v);
      if (handler) ksnprintf(out, len, "irq %u (%s)", static_cast<unsigned>(v), handler);
      else ksnprintf(out, len, "irq %u", static_cast<unsigned>(v));
      return;
    }
    case kTimer: ksnprintf(out, len, "timer"); return;
    case kIpi: ksnprintf(out, len, "ipi"); return;
    case kNone: ksnprintf(out, len, "?"); return;
  }
  ksnprintf(out, len, "context 0x%x", static_cast<unsigned>(id));
}

}  // namespace context
