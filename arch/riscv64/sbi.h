// SPDX-License-Identifier: Apache-2.0
// Calls into the SBI firmware (OpenSBI): the Supervisor Binary Interface.
//
// `ecall` with a7 = extension id, a6 = function id, arguments in a0-a5;
// the firmware returns an error in a0 and a value in a1 and preserves every
// other register. sbi::init() asks which extensions are there; the helpers
// fall back to the legacy v0.1 calls where a v0.2 extension is missing.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sbi {

struct Result {
  long error;  // 0 on success, negative SBI error code otherwise
  long value;
};

constexpr long kSuccess = 0;
constexpr long kErrNotSupported = -2;

// Probes the firmware (spec version, implementation, extensions). Boot hart,
// once, before any of the calls below.
void init();
// "SBI v1.0, OpenSBI 1.1" for the boot log.
void describe(char* buf, unsigned size);

// HSM: start hart `hartid` in S-mode at `start` (paging off) with a0 = hartid,
// a1 = opaque.
Result hart_start(uint64_t hartid, uintptr_t start, uintptr_t opaque);
// TIME: the next supervisor timer interrupt at absolute time `when`.
void set_timer(uint64_t when);
// IPI: raise a supervisor software interrupt on one hart.
Result send_ipi(uint64_t hartid);
// RFENCE: sfence.vma (whole address space) on one other hart.
Result remote_sfence_vma(uint64_t hartid);
// One call for every hart in mask (bit i = hart base + i), over [start,
// start + size): OpenSBI signals them all before waiting, instead of one
// round trip per hart.
Result remote_sfence_vma_mask(unsigned long mask, unsigned long base, uintptr_t start, size_t size);
// SRST: shut the system down; `failure` reports a system failure. Returns
// where the firmware has no SRST, or no shutdown for this machine
// (OpenSBI on sifive_u answers NOT_SUPPORTED: it has no power-off device).
void system_off(bool failure);
bool has_srst();
// The legacy (v0.1) shutdown, for firmware without SRST. Never returns on
// OpenSBI: without a shutdown device it stops every hart in M-mode.
void legacy_shutdown();

}  // namespace sbi
