// SPDX-License-Identifier: Apache-2.0
// CRC-32 (IEEE), a byte at a time from a 1 KiB table that the compiler
// builds (constant data: no static constructor, no first-use set-up).
#include <trace/crc32.h>

namespace kmemtrace {
namespace {

struct Crc32Table {
  uint32_t v[256];
};

constexpr Crc32Table make_table() {
  Crc32Table t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t.v[i] = c;
  }
  return t;
}

constexpr Crc32Table kTable = make_table();
static_assert(kTable.v[1] == 0x77073096u && kTable.v[255] == 0x2d02ef8du);

}  // namespace

uint32_t crc32_update(uint32_t state, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; i++) state = kTable.v[(state ^ p[i]) & 0xff] ^ (state >> 8);
  return state;
}

}  // namespace kmemtrace
