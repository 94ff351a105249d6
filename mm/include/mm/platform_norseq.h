// SPDX-License-Identifier: Apache-2.0
// mm/platform.h's restartable-section names for a platform that has none:
// the host (no interrupts: masking is free there and a thread is its CPU)
// and a kernel arch without arch/rseq.h (armv7m: one core, fast paths
// masked). kRestartable is false, so the fast paths mask interrupts; the
// section templates are declared for the fast paths' other branch, which
// such a platform never instantiates, and never defined.
#pragma once
#include <cstddef>
#include <cstdint>

#define MM_RESTARTABLE_TEXT

namespace mm::plat {

constexpr bool kRestartable = false;
enum RseqPush { kRseqPushed, kRseqFull, kRseqOnTop };
template <size_t kTop>
bool rseq_pop(char* base, void*& out);
template <size_t kTop>
RseqPush rseq_push(char* base, void* obj);
template <size_t kOff>
void rseq_inc(char* base);
template <size_t kTop, uint16_t kMark>
bool rseq_pop_pair(char* base, void*& first, uintptr_t& second);
template <size_t kTop>
bool rseq_push_pair(char* base, void* first, uintptr_t second);

}  // namespace mm::plat
