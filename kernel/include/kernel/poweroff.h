// SPDX-License-Identifier: Apache-2.0
// Board power-off devices, chosen by DTB compatible like the UARTs: what
// arch::poweroff() falls back on when the firmware has no call for it (the
// Raspberry Pi's watchdog, which Linux uses the same way). A node marked
// "system-power-controller" is preferred.
#pragma once

namespace fdt {
class Tree;
}

struct PoweroffDriver {
  const char* compatible;
  // Maps the device; false if unusable. Boot core, once.
  bool (*probe)(const fdt::Tree& tree, int node);
  // Turns the board off (or stops it for good); may return if it failed.
  void (*off)();
};
#define POWEROFF_DRIVER(name, ...) \
  extern const PoweroffDriver name __attribute__((section(".drivers.poweroff"), used)) = {__VA_ARGS__}

namespace platform {
// Finds the DTB's power-off device among the drivers linked in.
void probe_poweroff();
}  // namespace platform
