// SPDX-License-Identifier: Apache-2.0
// The BCM2835 power manager's watchdog ("brcm,bcm2835-pm-wdt"), as the
// Raspberry Pi's power-off: there is no power switch, so Linux does what
// the firmware understands as "halt": it marks the reset with partition 63
// in PM_RSTS and lets the watchdog reset the chip at once; the firmware
// then sees the mark and stays halted instead of booting again (the
// board draws little until it is unplugged). QEMU resets (and with
// -no-reboot exits with status 0). Every register write carries the PM
// password in its top byte, or the chip ignores it.
#include <kernel/arch.h>
#include <kernel/fdt.h>
#include <kernel/poweroff.h>
#include <kernel/timer.h>
#include <cstdint>

namespace {
constexpr uintptr_t kRstc = 0x1c, kRsts = 0x20, kWdog = 0x24;
constexpr uint32_t kPassword = 0x5a000000;
constexpr uint32_t kRstsHaltPartition = 0x555;  // partition 63, spread over the even bits 0-10
constexpr uint32_t kRstcWrcfgMask = 0x30, kRstcWrcfgFullReset = 0x20;
constexpr uint32_t kWdogTicks = 10;  // about 150 us

uintptr_t g_pm;

inline volatile uint32_t& reg(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_pm + off); }

bool wdt_probe(const fdt::Tree& t, int node) {
  uint64_t base, size;
  if (!t.reg(node, 0, base, size)) return false;
  g_pm = arch::map_device(base, size);
  return g_pm != 0;
}

void wdt_off() {
  reg(kRsts) = kPassword | (reg(kRsts) & 0xffffff) | kRstsHaltPartition;
  reg(kWdog) = kPassword | kWdogTicks;
  reg(kRstc) = kPassword | (reg(kRstc) & 0xffffff & ~kRstcWrcfgMask) | kRstcWrcfgFullReset;
  timer::delay_us(1000);  // the reset lands well within this
}
}  // namespace

POWEROFF_DRIVER(poweroff_bcm2835_wdt, "brcm,bcm2835-pm-wdt", wdt_probe, wdt_off);
