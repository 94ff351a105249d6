// SPDX-License-Identifier: Apache-2.0
// Semihosting: requests a debugger (or QEMU's -semihosting) serves for the
// kernel, in Arm's "Semihosting for AArch32 and AArch64" ABI, which the
// RISC-V semihosting spec reuses. Magpie asks for two things: the exit
// status at the end of a QEMU run (or a run under a debugger), and, on the
// Cortex-M3, the command line in place of a DTB's bootargs.
//
// On a board without a debugger the trap instruction faults; the arch's
// handler resumes the call with -1 (see arch_semihost), so every caller
// has a fallback. exit() tries once: after a failed call it returns at
// once, so poweroff's own attempt does not trap a second time.
#pragma once
#include <cstddef>
#include <cstdint>

// The arch's semihosting trap (arm64: hlt #0xf000; 32-bit ARM: svc
// 0x123456 in ARM state, svc 0xab in Thumb; ARMv7-M: bkpt 0xab; riscv64:
// slli/ebreak/srai), op and arg in the first two argument registers. The
// call's result, or -1 (all ones) where nothing served it.
extern "C" uintptr_t arch_semihost(uintptr_t op, uintptr_t arg);

namespace semihosting {
// SYS_EXIT_EXTENDED with ADP_Stopped_ApplicationExit and the status (and,
// on 32-bit ARM, SYS_EXIT after it for debuggers that predate the extended
// call). Returns only where nothing serves semihosting.
void exit(int code);
// SYS_GET_CMDLINE into buf, without the program name QEMU and debuggers
// put first. false if nothing serves it or the line is empty.
bool command_line(char* buf, size_t size);
}  // namespace semihosting
