// SPDX-License-Identifier: Apache-2.0
// The exception table: instructions that may fault on purpose, each with
// the instruction to resume at if it does (arch::probe_write, riscv64's
// stimecmp probe). Each arch's assembly lists its pairs in the __extable
// section as two pointer-sized words, {insn, fixup}; its trap handler asks
// extable::recover about a fault it would otherwise report as fatal.
#pragma once
#include <cstdint>

namespace extable {

// The fixup for a listed instruction at pc, 0 if pc is not listed.
uintptr_t fixup(uintptr_t pc);

// For a fault at pc: if pc is listed, records the fault in this core's
// last_fault (address, pc, cause), prints "fault (expected) on cpu N: what
// at pc X, address Y" (the address only when has_address) and returns the
// fixup to resume at. Returns 0, recording nothing, if pc is not listed.
uintptr_t recover(uintptr_t pc, uintptr_t address, bool has_address, const char* cause, const char* what);

}  // namespace extable
