// SPDX-License-Identifier: Apache-2.0
// PSCI: see drivers/psci.h.
#include <drivers/psci.h>
#include <kernel/console.h>
#include <kernel/fdt.h>

namespace psci {

namespace {
// Set once on the boot core before the other cores start (published by
// smp::start_secondaries' fence), read on any core afterwards.
Conduit g_conduit = Conduit::kNone;

// SMC32 ids work from both widths; CPU_ON takes an address, so a 64-bit
// kernel uses its SMC64 id (bit 30 set).
constexpr uint32_t kCpuOn = sizeof(uintptr_t) == 8 ? 0xC4000003 : 0x84000003;
constexpr uint32_t kSystemOff = 0x84000008;
}  // namespace

void init(const fdt::Tree& t) {
  fdt::Node node = t.find("/psci");
  fdt::Property p;
  if (node == fdt::kNoNode || !t.prop(node, "method", p) || !p.str()) return;
  const char* m = p.str();
  if (m[0] == 'h') g_conduit = Conduit::kHvc;
  else if (m[0] == 's') g_conduit = Conduit::kSmc;
}

bool cpu_on(unsigned index, uint64_t hwid, uintptr_t entry, uintptr_t context) {
  intptr_t r =
      g_conduit == Conduit::kNone ? -1 : smccc(g_conduit, kCpuOn, static_cast<uintptr_t>(hwid), entry, context);
  if (r != 0)
    kprintf("psci: CPU_ON for cpu %u (mpidr 0x%llx) failed: %ld\n", index, static_cast<unsigned long long>(hwid),
            static_cast<long>(r));
  return r == 0;
}

void system_off() {
  if (g_conduit != Conduit::kNone) smccc(g_conduit, kSystemOff, 0, 0, 0);
}

}  // namespace psci
