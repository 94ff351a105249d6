// SPDX-License-Identifier: Apache-2.0
// CRC-32 (IEEE 802.3: reflected polynomial 0xedb88320, initial value and
// final xor 0xffffffff), the CRC of zlib, PNG and Ethernet.
//
//   uint32_t c = crc32(data, n);            // one piece
//   uint32_t s = kCrc32Init;                // or streaming:
//   s = crc32_update(s, a, na); s = crc32_update(s, b, nb);
//   uint32_t c = crc32_final(s);
#pragma once
#include <cstddef>
#include <cstdint>

namespace kmemtrace {

inline constexpr uint32_t kCrc32Init = 0xffffffffu;
uint32_t crc32_update(uint32_t state, const void* data, size_t n);
inline uint32_t crc32_final(uint32_t state) { return state ^ 0xffffffffu; }
inline uint32_t crc32(const void* data, size_t n) { return crc32_final(crc32_update(kCrc32Init, data, n)); }

}  // namespace kmemtrace
