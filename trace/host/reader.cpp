// SPDX-License-Identifier: Apache-2.0
// Capture reader: frames out of console text, streams out of frames, events
// out of streams. Design: trace/include/trace/reader.h.
#include <trace/crc32.h>
#include <trace/reader.h>
#include <queue>
#include <unordered_set>

#include <algorithm>
#include <cstring>

namespace kmemtrace {
namespace {

constexpr size_t kMaxLine = 256 * 1024;  // > the longest frame line (~68 KB)

uint16_t rd16(const uint8_t* p, Endian e) {
  return e == Endian::kLittle ? static_cast<uint16_t>(p[0] | p[1] << 8) : static_cast<uint16_t>(p[1] | p[0] << 8);
}
uint32_t rd32(const uint8_t* p, Endian e) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= uint32_t{p[e == Endian::kLittle ? i : 3 - i]} << (8 * i);
  return v;
}
uint64_t rd64(const uint8_t* p, Endian e) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t{p[e == Endian::kLittle ? i : 7 - i]} << (8 * i);
  return v;
}

// Half-open intervals: merge, subtract.
using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;
Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto [a, b] : v) {
    if (a >= b) continue;
    if (!out.empty() && a <= out.back().second) out.back().second = std::max(out.back().second, b);
    else out.push_back({a, b});
  }
  return out;
}
Intervals minus(const Intervals& want, const Intervals& have) {  // both merged
  Intervals out;
  size_t j = 0;
  for (auto [a, b] : want) {
    uint64_t cur = a;
    while (j < have.size() && have[j].second <= cur) j++;
    for (size_t k = j; k < have.size() && have[k].first < b; k++) {
      if (have[k].first > cur) out.push_back({cur, have[k].first});
      cur = std::max(cur, have[k].second);
      if (cur >= b) break;
    }
    if (cur < b) out.push_back({cur, b});
  }
  return out;
}

}  // namespace

// --- Events ----------------------------------------------------------------

void parse_stream(const uint8_t* p, size_t n, Endian endian, uint16_t cpu, uint64_t offset, std::vector<Event>& out,
                  ParseStats& st) {
  size_t pos = 0;
  while (pos < n) {
    size_t left = n - pos;
    const uint8_t* e = p + pos;
    if (left < kOffSize + 2) {  // not even the size field
      st.truncated_events++;
      st.truncated_bytes += left;
      return;
    }
    uint8_t id = e[kOffEventId];
    size_t size = rd16(e + kOffSize, endian);
    // Every event has at least the core header; anything smaller (0 would
    // never advance) means the stream is damaged from here on.
    if (size < kHeaderSize || (id == kEventAlloc && size < kAllocSize)) {
      st.damaged++;
      st.damaged_bytes += left;
      return;
    }
    if (size > left) {
      st.truncated_events++;
      st.truncated_bytes += left;
      return;
    }
    pos += size;
    if (id == kEventClock) {  // an anchor: its 64-bit clock in the pointer field
      Event ev;
      ev.event_id = id;
      ev.size = static_cast<uint16_t>(size);
      ev.seq = rd32(e + kOffSeq, endian);
      ev.caller = rd64(e + kOffCaller, endian);  // the clock's frequency
      ev.ptr = rd64(e + kOffPtr, endian);
      ev.cpu = cpu;
      ev.offset = offset + (e - p);
      st.clock_events++;
      out.push_back(ev);
      continue;
    }
    if (id != kEventAlloc && id != kEventFree) {
      st.unknown_events++;
      continue;
    }
    uint8_t type = e[kOffTypeId];
    if (type >= kTypeCount) {
      st.unknown_types++;
      continue;
    }
    Event ev;
    ev.event_id = id;
    ev.type_id = type;
    ev.size = static_cast<uint16_t>(size);
    ev.seq = rd32(e + kOffSeq, endian);
    ev.caller = rd64(e + kOffCaller, endian);
    ev.ptr = rd64(e + kOffPtr, endian);
    size_t fixed = kHeaderSize;
    if (id == kEventAlloc) {
      ev.requested = rd64(e + kOffRequested, endian);
      ev.allocated = rd64(e + kOffAllocated, endian);
      ev.flags = rd32(e + kOffFlags, endian);
      ev.target_cpu = static_cast<int32_t>(rd32(e + kOffTargetCpu, endian));
      fixed = kAllocSize;
    }
    ev.cpu = cpu;
    ev.offset = offset + (e - p);
    // Feature records up to the event's end; a size below 3 (padding) or
    // past the end stops them, and the rest is extra bytes.
    size_t f = fixed;
    while (size - f >= kFeatureHeaderSize) {
      size_t fsize = rd16(e + f, endian);
      if (fsize < kFeatureHeaderSize || fsize > size - f) break;
      ev.features++;
      st.features++;
      f += fsize;
    }
    st.extra_bytes += size - f;
    st.events++;
    out.push_back(ev);
  }
}

namespace {

// A pointer's state while events are put in order (the key of analysis'
// live set: type and address).
struct LiveKey {
  uint8_t type;
  uint64_t ptr;
  bool operator==(const LiveKey& o) const = default;
};
struct LiveHash {
  size_t operator()(const LiveKey& k) const { return std::hash<uint64_t>()(k.ptr * 31 + k.type); }
};
using LiveSet = std::unordered_set<LiveKey, LiveHash>;

// Could e happen now, given which buffers are live? (An event that does not
// name a buffer always could.)
bool in_turn(const Event& e, const LiveSet& live) {
  if (e.ptr == 0 || (e.event_id != kEventAlloc && e.event_id != kEventFree)) return true;
  bool is_live = live.count(LiveKey{e.type_id, e.ptr}) != 0;
  return e.event_id == kEventAlloc ? !is_live : is_live;
}
void take_turn(const Event& e, LiveSet& live) {
  if (e.ptr == 0) return;
  if (e.event_id == kEventAlloc) live.insert(LiveKey{e.type_id, e.ptr});
  else if (e.event_id == kEventFree) live.erase(LiveKey{e.type_id, e.ptr});
}

}  // namespace

void merge_by_sequence(std::vector<Event>& events, std::map<uint16_t, uint64_t>* clocks) {
  if (events.empty()) return;
  // Each CPU's events, in stream order (assemble() gives them grouped by
  // CPU, each group in order).
  std::map<uint16_t, std::vector<size_t>> by_cpu;
  for (size_t i = 0; i < events.size(); i++) by_cpu[events[i].cpu].push_back(i);
  bool anchored = false;
  uint64_t first_anchor = 0;
  for (const Event& e : events)
    if (e.event_id == kEventClock) {
      if (!anchored || e.ptr < first_anchor) first_anchor = e.ptr;
      anchored = true;
    }
  // Each event's place, nearest to its predecessor on the same CPU (the
  // distance as a signed 32-bit number: a CPU's anchors come at least every
  // 2^30 clock ticks, and a small step back, an event stamped just before
  // an anchor and written after it, lands right).
  auto near = [](uint64_t t, uint32_t seq) {
    return t + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(seq - static_cast<uint32_t>(t))));
  };
  if (anchored) {
    // The 64-bit clock: from each anchor forward, and back from a CPU's
    // first one.
    for (auto& [cpu, idx] : by_cpu) {
      size_t a0 = idx.size();
      for (size_t k = 0; k < idx.size(); k++)
        if (events[idx[k]].event_id == kEventClock) {
          a0 = k;
          break;
        }
      uint64_t t;
      size_t from = 0;
      if (a0 < idx.size()) {
        t = events[idx[a0]].ptr;
        for (size_t k = a0; k-- > 0;) {
          Event& e = events[idx[k]];
          t = near(t, e.seq);
          e.order = static_cast<int64_t>(t);
        }
        t = events[idx[a0]].ptr;
        from = a0;
      } else {  // no anchor of its own: nearest the first one seen
        t = first_anchor;
      }
      for (size_t k = from; k < idx.size(); k++) {
        Event& e = events[idx[k]];
        t = e.event_id == kEventClock ? e.ptr : near(t, e.seq);
        e.order = static_cast<int64_t>(t);
      }
    }
  } else {
    // Each CPU's first event nearest to a common reference (the first
    // event's), each later one nearest to its predecessor.
    const uint64_t ref = events.front().seq;
    for (auto& [cpu, idx] : by_cpu) {
      uint64_t t = ref;
      for (size_t i : idx) {
        t = near(t, events[i].seq);
        events[i].order = static_cast<int64_t>(t);
      }
    }
  }
  // Merge: the smallest place first (a heap of the CPUs' next events);
  // among CPUs whose next events share it (a clock tick: a counter gives
  // every event its own number), the lowest CPU whose event its pointer
  // allows, or the lowest CPU. Each CPU's own order is kept.
  struct Head {
    int64_t order;
    uint16_t cpu;
    size_t slot;  // index into cpus
    bool operator>(const Head& o) const { return order != o.order ? order > o.order : cpu > o.cpu; }
  };
  std::vector<std::vector<size_t>*> cpus;
  std::vector<size_t> at;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heap;
  for (auto& [cpu, idx] : by_cpu) {
    heap.push(Head{events[idx[0]].order, cpu, cpus.size()});
    cpus.push_back(&idx);
    at.push_back(0);
  }
  std::vector<Event> out;
  out.reserve(events.size());
  LiveSet live;
  std::vector<Head> tied;
  while (!heap.empty()) {
    tied.clear();
    tied.push_back(heap.top());
    heap.pop();
    while (!heap.empty() && heap.top().order == tied[0].order) {
      tied.push_back(heap.top());
      heap.pop();
    }
    size_t pick = 0;  // tied is in CPU order
    for (size_t k = 0; k < tied.size() && tied.size() > 1; k++)
      if (in_turn(events[(*cpus[tied[k].slot])[at[tied[k].slot]]], live)) {
        pick = k;
        break;
      }
    for (size_t k = 0; k < tied.size(); k++)
      if (k != pick) heap.push(tied[k]);
    size_t slot = tied[pick].slot;
    Event& e = events[(*cpus[slot])[at[slot]++]];
    if (at[slot] < cpus[slot]->size()) heap.push(Head{events[(*cpus[slot])[at[slot]]].order, tied[pick].cpu, slot});
    if (e.event_id == kEventClock) {
      if (clocks) (*clocks)[e.cpu]++;
      continue;
    }
    take_turn(e, live);
    out.push_back(e);
  }
  events.swap(out);
}

// --- Frames ----------------------------------------------------------------

size_t decode_frame(const uint8_t* s, size_t n, frame::Header& h, std::vector<uint8_t>& payload, bool* crc_error) {
  using namespace frame;
  if (crc_error) *crc_error = false;
  // Decodes the first `bits` bits (whole 31-bit groups, then a short last
  // group) into bytes; false on a character outside the alphabet, too few
  // characters or a group value out of range.
  auto decode = [&](size_t bits, std::vector<uint8_t>& out) {
    out.clear();
    out.reserve(bits / 8);
    uint64_t acc = 0;
    unsigned have = 0;
    size_t i = 0;
    while (bits) {
      unsigned gbits = bits >= kGroupBits ? kGroupBits : static_cast<unsigned>(bits);
      unsigned k = gbits == kGroupBits ? kGroupChars : gbits <= 7 ? 1 : gbits <= 15 ? 2 : gbits <= 23 ? 3 : 4;
      if (n - i < k) return false;
      uint64_t v = 0, scale = 1;
      for (unsigned j = 0; j < k; j++, i++) {
        int d = kDigit[s[i]];
        if (d < 0) return false;
        v += static_cast<uint64_t>(d) * scale;
        scale *= kRadix;
      }
      if (v >> gbits) return false;
      acc |= v << have;
      have += gbits;
      bits -= gbits;
      while (have >= 8) {
        out.push_back(static_cast<uint8_t>(acc));
        acc >>= 8;
        have -= 8;
      }
    }
    return true;
  };
  // The header lies in the first 6 groups, which every frame has whole (a
  // frame is at least 24 raw bytes = 192 bits).
  std::vector<uint8_t> raw;
  if (!decode(6 * kGroupBits, raw)) return 0;
  h = get_header(raw.data());
  size_t total = frame::kHeaderSize + h.payload_len + kCrcSize;
  if (!decode(total * 8, raw)) return 0;
  uint32_t crc = static_cast<uint32_t>(raw[total - 4]) | static_cast<uint32_t>(raw[total - 3]) << 8 |
                 static_cast<uint32_t>(raw[total - 2]) << 16 | static_cast<uint32_t>(raw[total - 1]) << 24;
  if (crc32(raw.data(), total - kCrcSize) != crc) {
    if (crc_error) *crc_error = true;
    return 0;
  }
  payload.assign(raw.begin() + frame::kHeaderSize, raw.begin() + static_cast<std::ptrdiff_t>(total - kCrcSize));
  return body_chars(total);
}

void CaptureReader::feed(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  stats_.bytes += n;
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] != '\n' && p[i] != '\r') continue;
    if (line_.empty()) {
      line(p + start, i - start);
    } else {
      line_.insert(line_.end(), p + start, p + i);
      line(line_.data(), line_.size());
      line_.clear();
    }
    start = i + 1;
  }
  line_.insert(line_.end(), p + start, p + n);
  if (line_.size() > kMaxLine) {  // no frame is this long: not a frame line
    line(line_.data(), line_.size());
    line_.clear();
  }
}

void CaptureReader::finish() {
  if (!line_.empty()) line(line_.data(), line_.size());
  line_.clear();
}

void CaptureReader::line(const uint8_t* p, size_t n) {
  if (n == 0) return;
  stats_.lines++;
  const auto* marker = frame::kMarker;
  size_t pos = 0;
  while (pos + sizeof frame::kMarker <= n) {
    const void* hit = memmem(p + pos, n - pos, marker, sizeof frame::kMarker);
    if (!hit) break;
    size_t at = static_cast<size_t>(static_cast<const uint8_t*>(hit) - p) + sizeof frame::kMarker;
    frame::Header h;
    std::vector<uint8_t> payload;
    bool crc_error = false;
    size_t used = decode_frame(p + at, n - at, h, payload, &crc_error);
    if (used == 0) {
      stats_.bad_frames++;
      if (crc_error) stats_.crc_errors++;
      pos = at;
      continue;
    }
    frame(h, std::move(payload));
    pos = at + used;
  }
}

void CaptureReader::frame(const frame::Header& h, std::vector<uint8_t>&& payload) {
  using namespace frame;
  if (h.format != kFormat || h.abi_version < kOldestAbiVersion || h.abi_version > kAbiVersion) {
    stats_.rejected_frames++;
    if (h.format != kFormat) stats_.rejected_formats.insert(h.format);
    else stats_.rejected_versions.insert(h.abi_version);
    return;
  }
  stats_.frames++;
  auto [it, fresh] = sessions_.try_emplace(h.boot_id);
  Session& s = it->second;
  if (fresh) {
    s.boot_id = h.boot_id;
    session_order_.push_back(h.boot_id);
    stats_.boots++;
  }
  s.big_endian = (h.flags & kFlagBigEndian) != 0;
  if (h.abi_version > s.abi_version) s.abi_version = h.abi_version;
  auto le32 = [](const uint8_t* q) { return rd32(q, Endian::kLittle); };
  auto le64 = [](const uint8_t* q) { return rd64(q, Endian::kLittle); };
  switch (h.kind) {
    case kData: {
      stats_.data_frames++;
      auto& chunks = s.chunks[h.cpu];
      auto [c, inserted] = chunks.try_emplace(h.offset, std::move(payload));
      if (!inserted) {
        stats_.duplicate_frames++;
        if (payload.size() > c->second.size()) c->second = std::move(payload);  // a later, longer dump
      }
      break;
    }
    case kBegin: {
      stats_.dumps++;
      if (payload.size() < kBeginFixed) break;
      uint32_t ncpus = le32(payload.data());
      for (uint32_t cpu = 0; cpu < ncpus && kBeginFixed + (cpu + 1) * kBeginPerCpu <= payload.size(); cpu++) {
        const uint8_t* r = payload.data() + kBeginFixed + cpu * kBeginPerCpu;
        uint64_t from = le64(r), to = le64(r + 8);
        if (to > from) s.announced[static_cast<uint16_t>(cpu)].push_back({from, to});
      }
      break;
    }
    case kEnd: {
      stats_.dump_ends++;
      saw_end_ = true;
      if (payload.size() < kEndFixed) break;
      uint32_t ncpus = le32(payload.data());
      for (uint32_t cpu = 0; cpu < ncpus && kEndFixed + (cpu + 1) * kEndPerCpu <= payload.size(); cpu++) {
        const uint8_t* r = payload.data() + kEndFixed + cpu * kEndPerCpu;
        CpuEndStats& es = s.end_stats[static_cast<uint16_t>(cpu)];
        es.committed = le64(r);
        es.events = le64(r + 8);
        es.overrun_bytes = le64(r + 16);
        es.dropped_events = le64(r + 24);
      }
      break;
    }
    default: break;  // a kind we do not know: ignore
  }
}

const CaptureReader::Session* CaptureReader::last_session() const {
  if (session_order_.empty()) return nullptr;
  return &sessions_.at(session_order_.back());
}

std::map<uint16_t, std::vector<Segment>> CaptureReader::segments(std::vector<Gap>* gaps) const {
  std::map<uint16_t, std::vector<Segment>> out;
  const Session* s = last_session();
  if (!s) return out;
  std::set<uint16_t> cpus;
  for (auto& [cpu, _] : s->chunks) cpus.insert(cpu);
  for (auto& [cpu, _] : s->announced) cpus.insert(cpu);
  for (uint16_t cpu : cpus) {
    Intervals have, want;
    auto& segs = out[cpu];
    auto ch = s->chunks.find(cpu);
    if (ch != s->chunks.end()) {
      for (auto& [off, bytes] : ch->second) {
        uint64_t end = off + bytes.size();
        have.push_back({off, end});
        if (!segs.empty() && off <= segs.back().offset + segs.back().bytes.size()) {
          Segment& last = segs.back();
          uint64_t last_end = last.offset + last.bytes.size();
          if (end > last_end)
            last.bytes.insert(last.bytes.end(), bytes.begin() + static_cast<std::ptrdiff_t>(last_end - off),
                              bytes.end());
        } else {
          segs.push_back({off, bytes});
        }
      }
    }
    if (segs.empty()) out.erase(cpu);
    if (!gaps) continue;
    have = merged(have);
    if (!have.empty()) want.push_back({have.front().first, have.back().second});
    auto an = s->announced.find(cpu);
    if (an != s->announced.end()) want.insert(want.end(), an->second.begin(), an->second.end());
    for (auto [a, b] : minus(merged(want), have)) gaps->push_back({cpu, a, b});
  }
  return out;
}

Trace CaptureReader::assemble() const {
  Trace t;
  t.capture = stats_;
  const Session* s = last_session();
  if (!s) return t;
  t.have_frames = true;
  t.boot_id = s->boot_id;
  t.abi_version = s->abi_version;
  t.endian = s->big_endian ? Endian::kBig : Endian::kLittle;
  t.cpu_stats = s->end_stats;
  auto segs = segments(&t.gaps);
  for (auto& g : t.gaps) t.missing_bytes += g.to - g.from;
  for (auto& [cpu, list] : segs) {
    for (auto& seg : list) {
      t.stream_bytes[cpu] += seg.bytes.size();
      parse_stream(seg.bytes.data(), seg.bytes.size(), t.endian, cpu, seg.offset, t.events, t.parse);
    }
  }
  merge_by_sequence(t.events, &t.clock_events);
  return t;
}

Trace read_raw(const std::vector<std::pair<uint16_t, std::vector<uint8_t>>>& cpus, Endian endian) {
  Trace t;
  t.endian = endian;
  for (auto& [cpu, bytes] : cpus) {
    t.stream_bytes[cpu] += bytes.size();
    parse_stream(bytes.data(), bytes.size(), endian, cpu, 0, t.events, t.parse);
  }
  merge_by_sequence(t.events, &t.clock_events);
  return t;
}

}  // namespace kmemtrace
