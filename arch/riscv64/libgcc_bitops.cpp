// SPDX-License-Identifier: Apache-2.0
// The bit-scan helpers GCC calls for __builtin_clz/ctz on RV64 without Zbb
// (libgcc's __clzdi2 and __ctzdi2). Debian's libgcc is lp64d-only and the
// kernel is lp64 (see CMakeLists.txt), so it provides its own: portable
// code (mm/vmem.cpp's free-list bitmap) uses the builtins on every arch.
//
// A de Bruijn multiply finds the index of a lone bit: (bit * k) >> 58 is a
// different 6-bit window of k for each of the 64 bits.
#include <cstdint>

namespace {
constexpr uint64_t kDeBruijn = 0x022fdd63cc95386dull;
struct BitIndex {
  uint8_t of[64];
  constexpr BitIndex() : of() {
    for (unsigned i = 0; i < 64; i++) of[(kDeBruijn << i) >> 58] = static_cast<uint8_t>(i);
  }
};
constexpr BitIndex kBitIndex;
inline int bit_index(uint64_t lone_bit) { return kBitIndex.of[(lone_bit * kDeBruijn) >> 58]; }
}  // namespace

// Undefined for x == 0, as the builtins are.
extern "C" int __ctzdi2(uint64_t x) { return bit_index(x & -x); }
extern "C" int __clzdi2(uint64_t x) {
  x |= x >> 1;
  x |= x >> 2;
  x |= x >> 4;
  x |= x >> 8;
  x |= x >> 16;
  x |= x >> 32;
  return 63 - bit_index(x ^ (x >> 1));
}
