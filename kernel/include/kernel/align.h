// SPDX-License-Identifier: Apache-2.0
// Rounding addresses and sizes to a power of two (pages, blocks).
#pragma once
#include <cstdint>

constexpr uint64_t align_down(uint64_t v, uint64_t a) { return v & ~(a - 1); }
constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
