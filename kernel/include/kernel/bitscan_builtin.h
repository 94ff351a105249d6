// SPDX-License-Identifier: Apache-2.0
// Bit scans of a non-zero word, for an arch whose ISA scans in one or two
// instructions (ARMv7-A, ARMv7-M and ARMv8: clz for the highest bit, rbit +
// clz for the lowest). Its arch/ops.h includes this. riscv64 without Zbb
// has its own (a de Bruijn multiply: a call to libgcc's __clzdi2 would be
// slower, arch/riscv64/include/arch/ops.h).
#pragma once

namespace arch {
inline unsigned highest_bit(unsigned long x) {
  return static_cast<unsigned>(8 * sizeof x - 1) ^ static_cast<unsigned>(__builtin_clzl(x));
}
inline unsigned lowest_bit(unsigned long x) { return static_cast<unsigned>(__builtin_ctzl(x)); }
}  // namespace arch
