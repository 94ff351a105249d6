// SPDX-License-Identifier: Apache-2.0
// PSCI, Arm's Power State Coordination Interface (ARM DEN 0022): the
// firmware calls that start a core and turn the machine off, for arm and
// arm64 alike. What differs between the two is the trap into the firmware
// (registers and width), which each provides as psci::smccc; the function
// ids, the conduit the DTB names and the reporting are here once.
#pragma once
#include <cstdint>

namespace fdt {
class Tree;
}

namespace psci {

enum class Conduit { kNone, kHvc, kSmc };

// One SMC Calling Convention call through conduit (`hvc #0` or `smc #0`):
// function id fn, arguments a1..a3; returns what the firmware left in
// r0/x0. Implemented by the arch (arch/arm*/arch.cpp).
intptr_t smccc(Conduit conduit, uint32_t fn, uintptr_t a1, uintptr_t a2, uintptr_t a3);

// Reads the conduit from the DTB's /psci node ("method" = "hvc" or
// "smc"). Boot core, once, before any other call.
void init(const fdt::Tree& tree);

// CPU_ON: starts the core with affinity hwid at entry, with context in its
// r0/x0 (the SMC64 function id on a 64-bit kernel, SMC32 on a 32-bit one).
// False, with a report naming core `index`, if there is no PSCI or the
// firmware refused. The caller completes what the core will read first.
bool cpu_on(unsigned index, uint64_t hwid, uintptr_t entry, uintptr_t context);

// SYSTEM_OFF; returns only if there is no PSCI or the firmware refused.
void system_off();

}  // namespace psci
