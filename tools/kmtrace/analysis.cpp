// SPDX-License-Identifier: Apache-2.0
// kmtrace analyses: see analysis.h.
#include "analysis.h"

#include <algorithm>
#include <unordered_map>

namespace kmtrace {
namespace {

using kmemtrace::Event;
using kmemtrace::kEventAlloc;
using kmemtrace::kEventFree;

struct Key {
  uint8_t type;
  uint64_t ptr;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.ptr * 31 + k.type); }
};

// Walks the events in order, matching frees to allocations, and calls
// on_alloc(e), on_free(alloc_event_or_null, e) as it goes.
template <typename OnAlloc, typename OnFree>
void walk(const kmemtrace::Trace& t, OnAlloc&& on_alloc, OnFree&& on_free, uint64_t* replaced = nullptr) {
  std::unordered_map<Key, const Event*, KeyHash> live;
  for (const Event& e : t.events) {
    if (e.event_id == kEventAlloc) {
      on_alloc(e);
      if (e.ptr == 0) continue;
      auto [it, fresh] = live.try_emplace(Key{e.type_id, e.ptr}, &e);
      if (!fresh) {
        if (replaced) ++*replaced;
        on_free(it->second, nullptr);  // the lost free
        it->second = &e;
      }
    } else if (e.event_id == kEventFree) {
      if (e.ptr == 0) {
        on_free(nullptr, &e);
        continue;
      }
      auto it = live.find(Key{e.type_id, e.ptr});
      if (it == live.end()) {
        on_free(nullptr, &e);
      } else {
        on_free(it->second, &e);
        live.erase(it);
      }
    }
  }
}

}  // namespace

Summary summarize(const kmemtrace::Trace& t) {
  Summary s;
  s.unknown_events = t.parse.unknown_events + t.parse.unknown_types;
  walk(
      t,
      [&](const Event& e) {
        s.events++;
        s.allocs++;
        s.by_type[e.type_id].allocs++;
        s.bytes_requested += e.requested;
        s.bytes_allocated += e.allocated;
        s.per_cpu[e.cpu]++;
        if (e.ptr == 0) {
          s.failed_allocs++;
        } else {
          s.live_objects++;
          s.live_bytes += e.allocated;
        }
      },
      [&](const Event* a, const Event* f) {
        if (f) {
          s.events++;
          s.frees++;
          s.by_type[f->type_id].frees++;
          s.per_cpu[f->cpu]++;
        }
        if (a) {
          s.live_objects--;
          s.live_bytes -= a->allocated;
        } else if (f && f->ptr != 0) {
          s.unmatched_frees++;
        }
      },
      &s.replaced_allocs);
  for (auto& [cpu, n] : t.clock_events) {  // what each CPU's ring holds, as the kernel counts it
    s.per_cpu[cpu] += n;
    s.events += n;
    s.clock_events += n;
  }
  return s;
}

std::vector<Site> sites(const kmemtrace::Trace& t) {
  std::unordered_map<uint64_t, Site> by_caller;
  walk(
      t,
      [&](const Event& e) {
        Site& s = by_caller[e.caller];
        if (s.allocs == 0) {
          s.caller = e.caller;
          s.type = e.type_id;
        }
        s.allocs++;
        s.bytes_requested += e.requested;
        s.bytes_allocated += e.allocated;
        if (e.ptr) {
          s.live_objects++;
          s.live_bytes += e.allocated;
          s.peak_live_bytes = std::max(s.peak_live_bytes, s.live_bytes);
        }
      },
      [&](const Event* a, const Event* f) {
        if (!a) return;
        Site& s = by_caller[a->caller];
        if (f) s.frees++;
        s.live_objects--;
        s.live_bytes -= a->allocated;
      });
  std::vector<Site> out;
  out.reserve(by_caller.size());
  for (auto& [_, s] : by_caller) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const Site& a, const Site& b) {
    if (a.bytes_allocated != b.bytes_allocated) return a.bytes_allocated > b.bytes_allocated;
    return a.caller < b.caller;
  });
  return out;
}

Timeline timeline(const kmemtrace::Trace& t, size_t top, size_t max_points) {
  Timeline tl;
  tl.events = t.events.size();
  if (t.events.empty() || max_points == 0) return tl;
  // The top sites by peak live bytes.
  std::vector<Site> all = sites(t);
  std::sort(all.begin(), all.end(), [](const Site& a, const Site& b) {
    if (a.peak_live_bytes != b.peak_live_bytes) return a.peak_live_bytes > b.peak_live_bytes;
    return a.caller < b.caller;
  });
  std::unordered_map<uint64_t, size_t> site_index;
  for (size_t i = 0; i < all.size() && i < top && all[i].peak_live_bytes; i++) {
    site_index[all[i].caller] = i;
    tl.site_callers.push_back(all[i].caller);
  }
  tl.by_site.resize(tl.site_callers.size());

  size_t n = t.events.size();
  size_t bucket = (n + max_points - 1) / max_points;
  std::array<uint64_t, kTypeCount> live{};
  std::vector<uint64_t> site_live(tl.site_callers.size());
  std::array<uint64_t, kTypeCount> peak{};
  std::vector<uint64_t> site_peak(tl.site_callers.size());
  size_t i = 0, in_bucket = 0;
  auto sample = [&]() {
    tl.x.push_back(i);
    for (unsigned k = 0; k < kTypeCount; k++) tl.by_type[k].push_back(peak[k]);
    for (size_t k = 0; k < site_peak.size(); k++) tl.by_site[k].push_back(site_peak[k]);
    peak = {};
    std::fill(site_peak.begin(), site_peak.end(), 0);
    in_bucket = 0;
  };
  auto observe = [&]() {
    for (unsigned k = 0; k < kTypeCount; k++) peak[k] = std::max(peak[k], live[k]);
    for (size_t k = 0; k < site_live.size(); k++) site_peak[k] = std::max(site_peak[k], site_live[k]);
    i++;
    if (++in_bucket == bucket) sample();
  };
  walk(
      t,
      [&](const Event& e) {
        if (e.ptr) {
          live[e.type_id] += e.allocated;
          auto it = site_index.find(e.caller);
          if (it != site_index.end()) site_live[it->second] += e.allocated;
        }
        observe();
      },
      [&](const Event* a, const Event* f) {
        if (a) {
          live[a->type_id] -= a->allocated;
          auto it = site_index.find(a->caller);
          if (it != site_index.end()) site_live[it->second] -= a->allocated;
        }
        if (f) observe();
      });
  if (in_bucket) sample();
  return tl;
}

std::vector<std::string> damage_report(const kmemtrace::Trace& t) {
  std::vector<std::string> out;
  auto& c = t.capture;
  if (c.bad_frames)
    out.push_back(std::to_string(c.bad_frames) + " damaged frame(s) skipped (" + std::to_string(c.crc_errors) +
                  " with a CRC mismatch)");
  if (c.rejected_frames) {
    std::string v;
    for (unsigned x : c.rejected_versions) v += (v.empty() ? "" : ", ") + std::to_string(x);
    std::string f;
    for (unsigned x : c.rejected_formats) f += (f.empty() ? "" : ", ") + std::to_string(x);
    std::string what = std::to_string(c.rejected_frames) + " frame(s) rejected:";
    if (!v.empty())
      what += " abi_version " + v + " (this kmtrace reads " + std::to_string(kmemtrace::kOldestAbiVersion) + " to " +
              std::to_string(kmemtrace::kAbiVersion) + ")";
    if (!f.empty())
      what += " frame format " + f + " (this kmtrace reads " + std::to_string(kmemtrace::frame::kFormat) + ")";
    out.push_back(what);
  }
  if (c.boots > 1)
    out.push_back("the capture holds " + std::to_string(c.boots) + " boots; reading the last (boot id " +
                  std::to_string(t.boot_id) + ")");
  for (auto& g : t.gaps)
    out.push_back("cpu " + std::to_string(g.cpu) + ": " + std::to_string(g.to - g.from) +
                  " bytes missing at stream offset " + std::to_string(g.from) + " (lost frames)");
  if (t.parse.truncated_events)
    out.push_back(std::to_string(t.parse.truncated_events) + " truncated event(s) (" +
                  std::to_string(t.parse.truncated_bytes) + " bytes) dropped");
  if (t.parse.damaged)
    out.push_back(std::to_string(t.parse.damaged) + " stream segment(s) with an impossible event size (" +
                  std::to_string(t.parse.damaged_bytes) + " bytes) abandoned");
  return out;
}

bool damaged(const kmemtrace::Trace& t) {
  auto& c = t.capture;
  return c.bad_frames || c.rejected_frames || t.missing_bytes || t.parse.truncated_events || t.parse.damaged;
}

}  // namespace kmtrace
