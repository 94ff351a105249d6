// SPDX-License-Identifier: Apache-2.0
// kmtrace's analyses of a decoded trace (trace/reader.h): the summary, call
// sites, allocations never freed, and live bytes over time.
//
// Matching: an allocation is live from its event until a free of the same
// type and pointer; allocations with a null pointer (failed) are never
// live; a free of a pointer that is not live is an unmatched free (its
// allocation came before the trace, or the event was lost); a second
// allocation of a live (type, pointer) replaces the first (a lost free).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <trace/reader.h>

namespace kmtrace {

using kmemtrace::kTypeCount;

struct TypeCounts {
  uint64_t allocs = 0, frees = 0;
};

struct Summary {
  uint64_t events = 0, allocs = 0, frees = 0;  // events: allocs, frees and clock anchors
  uint64_t clock_events = 0;                   // kEventClock anchors (ABI version 3): in events and per_cpu
  std::array<TypeCounts, kTypeCount> by_type{};
  uint64_t bytes_requested = 0, bytes_allocated = 0;
  uint64_t live_objects = 0, live_bytes = 0;
  uint64_t unmatched_frees = 0;
  uint64_t failed_allocs = 0;    // null pointer
  uint64_t replaced_allocs = 0;  // allocation of a pointer already live
  uint64_t unknown_events = 0;   // unknown event ids and types, skipped
  std::map<uint16_t, uint64_t> per_cpu;
};
Summary summarize(const kmemtrace::Trace& t);

// Per allocation call site (the caller address of the allocation events).
struct Site {
  uint64_t caller = 0;
  uint8_t type = 0;                // of its first allocation
  uint64_t allocs = 0, frees = 0;  // frees: of objects it allocated
  uint64_t bytes_requested = 0, bytes_allocated = 0;
  uint64_t live_objects = 0, live_bytes = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t fragmentation() const { return bytes_allocated - bytes_requested; }
};
// Sorted by bytes allocated, largest first.
std::vector<Site> sites(const kmemtrace::Trace& t);

// Live bytes over time (x = position in the merged event order), per type
// and for the `top` sites with the highest peaks, reduced to at most
// max_points samples; each sample keeps the bucket's maximum so peaks
// survive the reduction.
struct Timeline {
  std::vector<uint64_t> x;                                // event index
  std::array<std::vector<uint64_t>, kTypeCount> by_type;  // live bytes
  std::vector<uint64_t> site_callers;
  std::vector<std::vector<uint64_t>> by_site;  // [site][sample]
  uint64_t events = 0;
};
Timeline timeline(const kmemtrace::Trace& t, size_t top = 5, size_t max_points = 2000);

// Problems the input had, one line each (empty: none).
std::vector<std::string> damage_report(const kmemtrace::Trace& t);
bool damaged(const kmemtrace::Trace& t);

}  // namespace kmtrace
