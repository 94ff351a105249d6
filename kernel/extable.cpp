// SPDX-License-Identifier: Apache-2.0
// The exception table: see kernel/include/kernel/extable.h.
#include <kernel/console.h>
#include <kernel/extable.h>
#include <kernel/percpu.h>

namespace {
struct Entry {
  uintptr_t insn, fixup;  // .quad (64-bit) or .long (32-bit) pairs in __extable
};
extern "C" const Entry __extable_start[], __extable_end[];
}  // namespace

namespace extable {

uintptr_t fixup(uintptr_t pc) {
  for (const Entry* e = __extable_start; e < __extable_end; e++)
    if (e->insn == pc) return e->fixup;
  return 0;
}

uintptr_t recover(uintptr_t pc, uintptr_t address, bool has_address, const char* cause, const char* what) {
  uintptr_t to = fixup(pc);
  if (!to) return 0;
  PerCpu& cpu = this_cpu();
  cpu.last_fault.address = has_address ? address : 0;
  cpu.last_fault.pc = pc;
  cpu.last_fault.cause = cause;
  kprintf("fault (expected) on cpu %u: %s at pc 0x%lx", cpu.index, what, static_cast<unsigned long>(pc));
  if (has_address) kprintf(", address 0x%lx", static_cast<unsigned long>(address));
  kprintf("\n");
  return to;
}

}  // namespace extable
