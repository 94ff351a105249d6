// SPDX-License-Identifier: Apache-2.0
// The stack depot: backtraces stored once and named by a 32-bit handle.
//
// Debugging features that remember where something happened (kmemleak's
// allocation sites now, the audit log and allocation profiling next) keep a
// StackHandle per object instead of the frames themselves: identical traces
// share one immutable record, lookup of a stored trace takes no lock, and
// the memory is a fixed pool taken from the page allocator at init. When
// the pool is full, new traces get handle 0 ("no backtrace"), the console
// says so once, and everything already stored stays readable. Design in
// mm/stackdepot.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mm {

using StackHandle = uint32_t;  // 0 means "no backtrace"
constexpr unsigned kStackDepotMaxFrames = 16;
// Every handle the depot returns is below 1 << kStackHandleBits: a user may
// keep a handle in that many bits and use the others for its own.
constexpr unsigned kStackHandleBits = 22;
// The pool kmemleak sets up: 1 MiB, about 7000 traces of 16 frames on
// 64-bit boards, 12 700 of 8 (see mm/stackdepot.cpp, Bound).
constexpr size_t kStackDepotDefaultPool = size_t{1} << 20;

// Sets the depot up with a fixed pool of pool_bytes (from the page allocator, page_alloc_va: never
// from kmem, so no recursion into the allocators it serves). Idempotent; false if no memory.
// The pool holds the bucket table too, so pool_bytes (rounded up to pages, at least 2 pages, at
// most about 16 MiB) is all the depot ever uses. Not from an interrupt handler.
bool stackdepot_init(size_t pool_bytes);
// The pool the allocators' debugging asks for: kStackDepotDefaultPool, or a
// sixteenth of RAM where that is less (a board with 256 KiB of RAM: 16 KiB),
// at least two pages.
size_t stackdepot_default_pool();
// Stores pcs[0..n) once (identical traces share one record) and returns its handle; n is clamped to
// kStackDepotMaxFrames. Lock-free when the trace is already there; inserting takes a lock (interrupts
// masked). When the pool is full, returns 0 and says so once on the console (plat::log), and keeps
// working (lookups of stored traces still succeed). Callable from any context, interrupts masked
// included, but it never allocates. 0 also for n == 0 and before stackdepot_init.
StackHandle stackdepot_save(const uintptr_t* pcs, unsigned n);
// Captures the calling context's backtrace (plat::backtrace, skipping `skip` frames of the caller's own)
// and saves it. 0 if there is none or the depot is full or not initialised. With skip 0 the first
// frame is the return address into the function that called stackdepot_capture.
StackHandle stackdepot_capture(unsigned skip);
// The backtrace of an operation made on behalf of `caller` (a return
// address into the code that called the allocator): the walk from caller
// outwards, the allocator's own frames left out; just [caller] when the
// walk does not reach it; the whole walk for caller 0.
StackHandle stackdepot_capture_from(uintptr_t caller);
// The frames of a handle (innermost first); 0 for handle 0 or an invalid handle. Lock-free.
// *pcs points into the depot (valid for ever: records are never freed); nullptr when it returns 0.
unsigned stackdepot_fetch(StackHandle h, const uintptr_t** pcs);

struct StackDepotStats {
  uint64_t traces;       // distinct traces stored
  uint64_t bytes_used;   // bucket table + record space consumed (records, chunk tails left unused)
  uint64_t bytes_total;  // every byte the depot holds: bucket table + record chunks (0 before init)
  uint64_t dropped;      // saves that found the pool full and returned 0
};
void stackdepot_stats(StackDepotStats& out);
// Pages the depot took from the page allocator (kmem_metadata_pages counts them).
uint64_t stackdepot_pages();

}  // namespace mm
