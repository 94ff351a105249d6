// SPDX-License-Identifier: Apache-2.0
// kmemtrace (trace/): the ABI encoder and parser against byte sequences
// written by hand from shared/reference/kmemtrace-abi.txt, the sequence
// merge, frames (round trips, text around them, damage, gaps, versions),
// the per-CPU ring (overruns, wrap, concurrent producers and a dumper) and
// the frame overhead on a realistic event mix.
#include <gtest/gtest.h>
#include <trace/abi.h>
#include <trace/crc32.h>
#include <trace/frame.h>
#include <mm/hooks.h>
#include <trace/kmemtrace.h>
#include <trace/reader.h>
#include <trace/ring.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/vmem.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace kmemtrace;
using Bytes = std::vector<uint8_t>;

// Little-endian helpers for writing expected bytes by hand.
void le(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// An alloc event, field by field as the ABI text lists them.
Bytes hand_alloc(uint8_t type, uint32_t seq, uint64_t caller, uint64_t ptr, uint64_t req, uint64_t alloc,
                 uint32_t flags, int32_t cpu, uint16_t size = 48) {
  Bytes b;
  le(b, kEventAlloc, 1);
  le(b, type, 1);
  le(b, size, 2);
  le(b, seq, 4);
  le(b, caller, 8);
  le(b, ptr, 8);
  le(b, req, 8);
  le(b, alloc, 8);
  le(b, flags, 4);
  le(b, static_cast<uint32_t>(cpu), 4);
  return b;
}
Bytes hand_free(uint8_t type, uint32_t seq, uint64_t caller, uint64_t ptr, uint16_t size = 24) {
  Bytes b;
  le(b, kEventFree, 1);
  le(b, type, 1);
  le(b, size, 2);
  le(b, seq, 4);
  le(b, caller, 8);
  le(b, ptr, 8);
  return b;
}
void append(Bytes& a, const Bytes& b) { a.insert(a.end(), b.begin(), b.end()); }

std::vector<Event> parse(const Bytes& b, ParseStats& st, uint16_t cpu = 0) {
  std::vector<Event> out;
  parse_stream(b.data(), b.size(), Endian::kLittle, cpu, 0, out, st);
  return out;
}

// --- ABI ---------------------------------------------------------------------

TEST(TraceAbi, EncodersWriteTheReferenceLayout) {
  uint8_t buf[64];
  ASSERT_EQ(encode_alloc(buf, kTypeCache, 0x01020304, 0xffff000012345678, 0xffff0000abcdef00, 100, 128, 0x5, kSameCpu),
            48u);
  Bytes want = {
      0x00, 0x01, 0x30, 0x00, 0x04, 0x03, 0x02, 0x01,  // id 0, type 1, size 48, seq
      0x78, 0x56, 0x34, 0x12, 0x00, 0x00, 0xff, 0xff,  // caller
      0x00, 0xef, 0xcd, 0xab, 0x00, 0x00, 0xff, 0xff,  // pointer
      0x64, 0,    0,    0,    0,    0,    0,    0,     // requested 100
      0x80, 0,    0,    0,    0,    0,    0,    0,     // allocated 128
      0x05, 0,    0,    0,                             // flags
      0xff, 0xff, 0xff, 0xff,                          // target CPU -1
  };
  EXPECT_EQ(Bytes(buf, buf + 48), want);
  EXPECT_EQ(encode_free(buf, kTypePages, 7, 0x1000, 0x2000), 24u);
  Bytes want_free = {0x01, 0x02, 0x18, 0x00, 7, 0, 0, 0, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x00, 0x20, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(Bytes(buf, buf + 24), want_free);
  EXPECT_EQ(kAbiVersion, 3u);  // version 1 + the vmem type id (2) + the clock anchor (3)
  EXPECT_EQ(kOldestAbiVersion, 2u);
  EXPECT_STREQ(type_name(kTypeVmem), "vmem");
}

TEST(TraceAbi, RingWritesTheSameBytesAsTheEncoders) {
  alignas(8) static uint8_t mem[Ring::bytes_for(256)];
  Ring r;
  ASSERT_TRUE(r.init(mem, sizeof mem));
  ASSERT_TRUE(r.put_alloc(Ring::alloc_tag(kTypeVmem), 9, 0x4000, 0x8000, 3000, 4096, 0x100, 2));
  ASSERT_TRUE(r.put_free(Ring::free_tag(kTypeVmem), 10, 0x4004, 0x8000));
  Bytes want = hand_alloc(kTypeVmem, 9, 0x4000, 0x8000, 3000, 4096, 0x100, 2);
  append(want, hand_free(kTypeVmem, 10, 0x4004, 0x8000));
  Bytes got(72);
  ASSERT_EQ(r.read(got.data(), got.size()), 72u);
  EXPECT_EQ(got, want);
}

TEST(TraceAbi, AppendFeature) {
  uint8_t buf[64] = {};
  encode_free(buf, kTypeKmalloc, 1, 2, 3);
  uint8_t data[2] = {0xaa, 0xbb};
  EXPECT_EQ(append_feature(buf, sizeof buf, 1, data, 2), 29u);
  EXPECT_EQ(buf[2], 29);  // size updated
  EXPECT_EQ(buf[24], 5);  // feature size 5
  EXPECT_EQ(buf[25], 0);
  EXPECT_EQ(buf[26], 1);  // feature id
  EXPECT_EQ(buf[27], 0xaa);
  EXPECT_EQ(append_feature(buf, 30, 1, data, 2), 0u);  // does not fit
}

// --- Parsing -----------------------------------------------------------------

TEST(TraceParse, HandWrittenStream) {
  Bytes s;
  append(s, hand_alloc(kTypeKmalloc, 1, 0xc0de, 0x1000, 24, 32, 0, -1));
  append(s, hand_free(kTypeKmalloc, 2, 0xc0df, 0x1000));
  // Unknown event id 9, 32 bytes: skipped by its size.
  Bytes unk = {9, 0, 32, 0};
  unk.resize(32, 0x5a);
  append(s, unk);
  // A known event id with an unknown type: skipped.
  append(s, hand_free(200, 3, 0, 0x1));
  // An alloc that is 16 bytes longer than we know: the rest skipped.
  Bytes big = hand_alloc(kTypePages, 4, 0xbeef, 0x200000, 4096, 8192, 0x4, 3, 64);
  big.resize(64, 0xee);
  append(s, big);
  // A free with two feature records (5 and 4 bytes) and 3 bytes of zero
  // padding to a multiple of 8.
  Bytes feat = hand_free(kTypeCache, 5, 0xf00d, 0x3000, 36);
  append(feat, {5, 0, 1, 0xaa, 0xbb});
  append(feat, {4, 0, 7, 0xcc});
  append(feat, {0, 0, 0});
  ASSERT_EQ(feat.size(), 36u);
  append(s, feat);
  // A last event cut short (the capture ended inside it).
  Bytes cut = hand_alloc(kTypeCache, 6, 1, 2, 3, 4, 5, -1);
  cut.resize(30);
  append(s, cut);

  ParseStats st;
  auto ev = parse(s, st);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].event_id, kEventAlloc);
  EXPECT_EQ(ev[0].caller, 0xc0deu);
  EXPECT_EQ(ev[0].requested, 24u);
  EXPECT_EQ(ev[0].allocated, 32u);
  EXPECT_EQ(ev[0].target_cpu, -1);
  EXPECT_EQ(ev[1].event_id, kEventFree);
  EXPECT_EQ(ev[1].seq, 2u);
  EXPECT_EQ(ev[2].type_id, kTypePages);
  EXPECT_EQ(ev[2].allocated, 8192u);
  EXPECT_EQ(ev[2].flags, 4u);
  EXPECT_EQ(ev[2].target_cpu, 3);
  EXPECT_EQ(ev[2].size, 64);
  EXPECT_EQ(ev[3].features, 2);
  EXPECT_EQ(ev[3].ptr, 0x3000u);
  EXPECT_EQ(st.events, 4u);
  EXPECT_EQ(st.unknown_events, 1u);
  EXPECT_EQ(st.unknown_types, 1u);
  EXPECT_EQ(st.features, 2u);
  EXPECT_EQ(st.extra_bytes, 16u + 3u);
  EXPECT_EQ(st.truncated_events, 1u);
  EXPECT_EQ(st.truncated_bytes, 30u);
  EXPECT_EQ(st.damaged, 0u);
  // Offsets: where each event starts in the stream.
  EXPECT_EQ(ev[1].offset, 48u);
  EXPECT_EQ(ev[2].offset, 48u + 24 + 32 + 24);
}

TEST(TraceParse, ImpossibleSizeStopsTheSegment) {
  Bytes s = hand_free(kTypeKmalloc, 1, 2, 3);
  Bytes bad = hand_free(kTypeKmalloc, 2, 2, 3, 0);  // size 0 would never advance
  append(s, bad);
  append(s, hand_free(kTypeKmalloc, 3, 2, 3));
  ParseStats st;
  auto ev = parse(s, st);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_EQ(st.damaged, 1u);
  EXPECT_EQ(st.damaged_bytes, 48u);
  // An alloc whose size is only the header is damage too.
  ParseStats st2;
  parse(hand_alloc(0, 1, 2, 3, 4, 5, 6, 7, 24), st2);
  EXPECT_EQ(st2.damaged, 1u);
}

TEST(TraceParse, BigEndianStreams) {
  Bytes s = hand_free(kTypeCache, 0x01020304, 0x1122334455667788, 0x99);
  // Swap every multi-byte field by hand.
  Bytes be = {1, 1, 0, 24, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0, 0, 0, 0, 0, 0x99};
  std::vector<Event> out;
  ParseStats st;
  parse_stream(be.data(), be.size(), Endian::kBig, 0, 0, out, st);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seq, 0x01020304u);
  EXPECT_EQ(out[0].caller, 0x1122334455667788u);
  EXPECT_EQ(out[0].ptr, 0x99u);
}

TEST(TraceMerge, SequenceWrapsAround) {
  // CPU 0 and CPU 1 interleave across 2^32; each CPU's events are in
  // sequence order in its stream.
  Bytes c0, c1;
  append(c0, hand_free(0, 0xfffffffd, 0, 1));
  append(c0, hand_free(0, 0xffffffff, 0, 2));
  append(c0, hand_free(0, 0x00000002, 0, 3));
  append(c1, hand_free(0, 0xfffffffe, 0, 4));
  append(c1, hand_free(0, 0x00000000, 0, 5));
  append(c1, hand_free(0, 0x00000001, 0, 6));
  append(c1, hand_free(0, 0x00000003, 0, 7));
  Trace t = read_raw({{1, c1}, {0, c0}}, Endian::kLittle);  // either CPU first
  ASSERT_EQ(t.events.size(), 7u);
  std::vector<uint64_t> ptrs;
  for (auto& e : t.events) ptrs.push_back(e.ptr);
  EXPECT_EQ(ptrs, (std::vector<uint64_t>{1, 4, 2, 5, 6, 3, 7}));
  for (size_t i = 1; i < t.events.size(); i++) EXPECT_EQ(t.events[i].order, t.events[i - 1].order + 1);
}

// A clock anchor (ABI version 3): the whole clock in the pointer field.
Bytes hand_clock(uint64_t now, uint64_t hz = 62500000) {
  EventHeader h{kEventClock, 0, static_cast<uint16_t>(kClockSize), static_cast<uint32_t>(now), hz, now};
  Bytes b(sizeof h);
  std::memcpy(b.data(), &h, sizeof h);
  return b;
}

TEST(TraceMerge, ClockAnchorsPlaceEveryCpuOnOneTimeLine) {
  // The low 32 bits of a 62.5 MHz clock wrap every 68 s: CPU 1 is idle for
  // more than that between its events, CPU 0 records all along. Only the
  // anchors can say how many times the low bits wrapped.
  const uint64_t t0 = 0x1fffffff00ull;  // a while after boot, just below a wrap
  Bytes c0, c1;
  append(c0, hand_clock(t0));
  append(c0, hand_free(0, static_cast<uint32_t>(t0 + 0x10), 0, 1));
  append(c0, hand_free(0, static_cast<uint32_t>(t0 + 0x40000000), 0, 3));  // past the wrap
  append(c0, hand_clock(t0 + 0x40000100));
  append(c0, hand_clock(t0 + 0x80000200));
  append(c0, hand_clock(t0 + 0xc0000300));
  append(c0, hand_clock(t0 + 0x100000400));  // more than 2^32 later
  append(c0, hand_free(0, static_cast<uint32_t>(t0 + 0x100000500), 0, 5));
  append(c1, hand_free(0, static_cast<uint32_t>(t0 + 0x08), 0, 0));  // before CPU 1's first anchor
  append(c1, hand_clock(t0 + 0x20));
  append(c1, hand_free(0, static_cast<uint32_t>(t0 + 0x30), 0, 2));
  append(c1, hand_clock(t0 + 0x100000000));  // 68 s later
  append(c1, hand_free(0, static_cast<uint32_t>(t0 + 0x100000450), 0, 4));
  Trace t = read_raw({{1, c1}, {0, c0}}, Endian::kLittle);
  ASSERT_EQ(t.events.size(), 6u);                                             // the anchors taken out...
  EXPECT_EQ(t.clock_events, (std::map<uint16_t, uint64_t>{{0, 5}, {1, 2}}));  // ...and counted
  EXPECT_EQ(t.parse.unknown_events, 0u);
  std::vector<uint64_t> ptrs;
  for (auto& e : t.events) ptrs.push_back(e.ptr);
  EXPECT_EQ(ptrs, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t.events[0].order, static_cast<int64_t>(t0 + 0x08));
  EXPECT_EQ(t.events[4].order, static_cast<int64_t>(t0 + 0x100000450));
  EXPECT_EQ(t.events[5].order, static_cast<int64_t>(t0 + 0x100000500));
}

TEST(TraceMerge, EventsOfOneClockTickGoInTheOrderTheirPointersAllow) {
  // Within one tick CPU 1 allocated 0x1000 and handed it to CPU 0, which
  // freed it, and CPU 0 freed 0x2000, which CPU 1 then allocated: the
  // lowest CPU first would put each free before its allocation.
  const uint64_t t0 = 5000;
  Bytes c0, c1;
  append(c0, hand_clock(t0));
  append(c0,
         hand_alloc(kTypeCache, static_cast<uint32_t>(t0), 0, 0x2000, 64, 64, 0, kSameCpu));  // live before the tick
  append(c0, hand_free(kTypeCache, static_cast<uint32_t>(t0 + 7), 0, 0x1000));
  append(c0, hand_free(kTypeCache, static_cast<uint32_t>(t0 + 7), 0, 0x2000));
  append(c1, hand_clock(t0));
  append(c1, hand_alloc(kTypeCache, static_cast<uint32_t>(t0 + 7), 0, 0x1000, 64, 64, 0, kSameCpu));
  append(c1, hand_alloc(kTypeCache, static_cast<uint32_t>(t0 + 7), 0, 0x2000, 64, 64, 0, kSameCpu));
  Trace t = read_raw({{0, c0}, {1, c1}}, Endian::kLittle);
  ASSERT_EQ(t.events.size(), 5u);
  std::vector<std::pair<uint8_t, uint64_t>> got;
  for (auto& e : t.events) got.push_back({e.event_id, e.ptr});
  EXPECT_EQ(got, (std::vector<std::pair<uint8_t, uint64_t>>{{kEventAlloc, 0x2000},
                                                            {kEventAlloc, 0x1000},
                                                            {kEventFree, 0x1000},
                                                            {kEventFree, 0x2000},
                                                            {kEventAlloc, 0x2000}}));
}

TEST(TraceMerge, TiesWithoutAnchorsAreBrokenTheSameWay) {
  // A window of a clock-stamped trace that holds no anchor (a short stream
  // read): the same numbers, the same rule.
  Bytes c0, c1;
  append(c0, hand_free(kTypeCache, 77, 0, 0x1000));
  append(c1, hand_alloc(kTypeCache, 77, 0, 0x1000, 64, 64, 0, kSameCpu));
  Trace t = read_raw({{0, c0}, {1, c1}}, Endian::kLittle);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].event_id, kEventAlloc);
  EXPECT_EQ(t.events[1].event_id, kEventFree);
}

// --- Frames ------------------------------------------------------------------

struct StringSink {
  std::string out;
  static void write(void* ctx, const void* data, size_t n) {
    static_cast<StringSink*>(ctx)->out.append(static_cast<const char*>(data), n);
  }
};

std::string encode_frame(const frame::Header& h, const Bytes& payload, std::mt19937* split = nullptr) {
  StringSink sink;
  frame::Encoder e(&StringSink::write, &sink);
  e.begin(h);
  size_t pos = 0;
  while (pos < payload.size()) {  // in random pieces
    size_t n = split ? std::min<size_t>(payload.size() - pos, 1 + (*split)() % 700) : payload.size();
    e.put(payload.data() + pos, n);
    pos += n;
  }
  e.end();
  return sink.out;
}

TEST(TraceFrame, AlphabetAvoidsControlBytes) {
  std::set<uint8_t> seen(frame::kAlphabet, frame::kAlphabet + frame::kRadix);
  EXPECT_EQ(seen.size(), frame::kRadix);
  for (int c = 0; c < 256; c++) {
    bool bad = c < 0x20 || c == 0x7f || c == 0xff || c == 0x90 || c == 0x98 || c == 0x9b || c == 0x9d || c == 0x9e ||
               c == 0x9f;
    EXPECT_EQ(seen.count(static_cast<uint8_t>(c)) == 0, bad) << c;
    EXPECT_EQ(frame::kDigit[c] < 0, bad) << c;
  }
}

TEST(TraceFrame, RoundTripsRandomPayloads) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 300; iter++) {
    size_t len = iter < 40 ? static_cast<size_t>(iter) : rng() % 5000;
    Bytes payload(len);
    for (auto& b : payload) b = static_cast<uint8_t>(rng());
    frame::Header h;
    h.cpu = static_cast<uint16_t>(rng() % 8);
    h.offset = (static_cast<uint64_t>(rng()) << 20) + rng();
    h.boot_id = static_cast<uint32_t>(rng());
    h.payload_len = static_cast<uint16_t>(len);
    std::string line = encode_frame(h, payload, &rng);
    ASSERT_EQ(line.size(), frame::line_chars(len));
    ASSERT_EQ(line.substr(0, 4), "@KMT");
    ASSERT_EQ(line.substr(line.size() - 2), "\r\n");
    for (size_t i = 4; i + 2 < line.size(); i++)
      ASSERT_GE(frame::kDigit[static_cast<uint8_t>(line[i])], 0) << "byte " << i;
    frame::Header got;
    Bytes back;
    size_t used = decode_frame(reinterpret_cast<const uint8_t*>(line.data()) + 4, line.size() - 4, got, back);
    ASSERT_EQ(used, line.size() - 6);
    EXPECT_EQ(back, payload);
    EXPECT_EQ(got.cpu, h.cpu);
    EXPECT_EQ(got.offset, h.offset);
    EXPECT_EQ(got.boot_id, h.boot_id);
    EXPECT_EQ(got.abi_version, kAbiVersion);
  }
}

// A small trace: `n` events per CPU over `cpus` rings, dumped with text
// around and between the frames.
struct Fixture {
  std::vector<Bytes> mem;
  std::vector<std::unique_ptr<Ring>> rings;
  uint32_t seq = 0;
  explicit Fixture(unsigned cpus, size_t cap = 1 << 16) {
    for (unsigned i = 0; i < cpus; i++) {
      mem.emplace_back(Ring::bytes_for(cap) + 8);
      rings.push_back(std::make_unique<Ring>());
      EXPECT_TRUE(rings.back()->init(mem.back().data(), mem.back().size()));
    }
  }
  void fill(unsigned per_cpu) {
    for (unsigned i = 0; i < per_cpu; i++)
      for (unsigned c = 0; c < rings.size(); c++) {
        uint64_t ptr = 0x10000 + (uint64_t{c} << 24) + i * 64;
        rings[c]->put_alloc(Ring::alloc_tag(kTypeKmalloc), seq++, 0xc000 + i % 7, ptr, 40, 64, 0, -1);
        if (i % 2) rings[c]->put_free(Ring::free_tag(kTypeKmalloc), seq++, 0xd000, ptr);
      }
  }
  std::string dump(frame::DumpOptions opt = {}) {
    StringSink sink;
    std::vector<Ring*> rs;
    for (auto& r : rings) rs.push_back(r.get());
    frame::dump_rings(rs.data(), static_cast<unsigned>(rs.size()), &StringSink::write, &sink, opt);
    return sink.out;
  }
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find("\r\n", pos);
    out.push_back(s.substr(pos, e - pos + 2));
    pos = e + 2;
  }
  return out;
}

Trace read_capture(const std::string& cap, size_t chunk = 0, std::mt19937* rng = nullptr) {
  CaptureReader r;
  size_t pos = 0;
  while (pos < cap.size()) {
    size_t n = chunk ? chunk : rng ? 1 + (*rng)() % 4000 : cap.size();
    n = std::min(n, cap.size() - pos);
    r.feed(cap.data() + pos, n);
    pos += n;
  }
  r.finish();
  return r.assemble();
}

TEST(TraceFrame, CaptureWithTextAround) {
  Fixture f(3, 4096);
  f.fill(60);  // enough to need several frames per CPU with small payloads
  frame::DumpOptions opt;
  opt.max_payload = 512;
  auto lines = lines_of(f.dump(opt));
  ASSERT_GT(lines.size(), 10u);
  std::string cap = "U-Boot 2024.01\nmagpie> kmemtrace dump\r\n";
  for (size_t i = 0; i < lines.size(); i++) {
    if (i % 3 == 1) cap += "[  12.345] some console line between frames\n";
    if (i % 4 == 2) cap += "prompt text on the same line ";  // text before the marker
    cap += lines[i];
  }
  cap += "magpie> \n";
  std::mt19937 rng(7);
  for (int pass = 0; pass < 3; pass++) {
    Trace t = pass == 0 ? read_capture(cap) : pass == 1 ? read_capture(cap, 1) : read_capture(cap, 0, &rng);
    EXPECT_TRUE(t.have_frames);
    EXPECT_EQ(t.capture.bad_frames, 0u);
    EXPECT_EQ(t.capture.frames, lines.size());
    EXPECT_EQ(t.missing_bytes, 0u);
    EXPECT_EQ(t.events.size(), 3u * (60 + 30));
    EXPECT_EQ(t.capture.dumps, 1u);
    EXPECT_EQ(t.capture.dump_ends, 1u);
    ASSERT_EQ(t.cpu_stats.size(), 3u);
    EXPECT_EQ(t.cpu_stats[1].events, 90u);
    for (size_t i = 1; i < t.events.size(); i++) ASSERT_EQ(t.events[i].seq, t.events[i - 1].seq + 1);
  }
}

TEST(TraceFrame, DamagedFrameIsCountedAndTheNextOneRead) {
  Fixture f(1, 4096);
  f.fill(40);
  frame::DumpOptions opt;
  opt.max_payload = 256;
  auto lines = lines_of(f.dump(opt));
  ASSERT_GE(lines.size(), 6u);  // begin, >= 4 data, end
  // Flip one byte inside the body of data frame 2 (another valid alphabet
  // character, so only the CRC can tell).
  std::string& victim = lines[2];
  size_t at = victim.size() / 2;
  uint8_t c = static_cast<uint8_t>(victim[at]);
  victim[at] = static_cast<char>(frame::kAlphabet[(frame::kDigit[c] + 1) % frame::kRadix]);
  std::string cap;
  for (auto& l : lines) cap += l;
  Trace t = read_capture(cap);
  EXPECT_EQ(t.capture.bad_frames, 1u);
  EXPECT_EQ(t.capture.crc_errors, 1u);
  EXPECT_EQ(t.capture.frames, lines.size() - 1);
  ASSERT_EQ(t.gaps.size(), 1u);  // the damaged frame's bytes are missing
  // Frame 1 (after the begin frame) holds the whole events that fit in 256
  // bytes: 240 of them; the damaged frame 2 the next 240.
  EXPECT_EQ(t.gaps[0].from, 240u);
  EXPECT_EQ(t.gaps[0].to, 480u);
  EXPECT_EQ(t.missing_bytes, 240u);
  // Events after the gap are still read (parsing resumes on the next frame).
  uint64_t total = 40 * 48 + 20 * 24;
  uint64_t parsed = 0;
  for (auto& e : t.events) parsed += e.size;
  EXPECT_EQ(parsed, total - 240);

  // A byte a terminal would eat (a control character) in the body is also
  // damage, not a crash.
  std::string cap2 = cap;
  cap2[cap2.find("@KMT", 10) + 20] = '\x1b';
  Trace t2 = read_capture(cap2);
  EXPECT_GE(t2.capture.bad_frames, 1u);
}

TEST(TraceFrame, MissingFramesAreGaps) {
  Fixture f(2, 4096);
  f.fill(50);
  frame::DumpOptions opt;
  opt.max_payload = 300;  // 6 allocs (288) per frame
  auto lines = lines_of(f.dump(opt));
  // Drop the second data frame of CPU 0 (line 2) and the last data frame
  // of CPU 1 (the line before the end frame).
  std::string cap;
  for (size_t i = 0; i < lines.size(); i++)
    if (i != 2 && i != lines.size() - 2) cap += lines[i];
  Trace t = read_capture(cap);
  EXPECT_EQ(t.capture.bad_frames, 0u);
  ASSERT_EQ(t.gaps.size(), 2u);
  EXPECT_EQ(t.gaps[0].cpu, 0);
  EXPECT_GT(t.gaps[0].to, t.gaps[0].from);
  EXPECT_EQ(t.gaps[1].cpu, 1);
  // The missing tail of CPU 1 is known from the begin frame's range.
  uint64_t cpu1_bytes = 50 * 48 + 25 * 24;
  EXPECT_EQ(t.gaps[1].to, cpu1_bytes);
}

TEST(TraceFrame, OtherAbiVersionIsRejected) {
  frame::Header h;
  h.kind = frame::kData;
  h.cpu = 0;
  h.abi_version = kAbiVersion + 1;  // newer than this reader; older than kOldestAbiVersion likewise
  Bytes payload = hand_free(0, 1, 2, 3);
  h.payload_len = static_cast<uint16_t>(payload.size());
  std::string cap = "boot\n" + encode_frame(h, payload);
  h.abi_version = kAbiVersion;
  h.format = 9;
  cap += encode_frame(h, payload);
  CaptureReader r;
  r.feed(cap.data(), cap.size());
  r.finish();
  Trace t = r.assemble();
  EXPECT_FALSE(t.have_frames);
  EXPECT_EQ(t.capture.rejected_frames, 2u);
  EXPECT_EQ(t.capture.rejected_versions, std::set<unsigned>{kAbiVersion + 1});
  EXPECT_EQ(t.capture.rejected_formats, std::set<unsigned>{9});
  EXPECT_EQ(t.capture.bad_frames, 0u);
}

TEST(TraceFrame, RepeatedSnapshotDumpsMerge) {
  Fixture f(1, 1 << 14);
  f.fill(20);
  std::string a = f.dump();
  f.fill(20);
  std::string b = f.dump();  // a snapshot again: covers a's bytes and more
  Trace t = read_capture("x\n" + a + "y\n" + b);
  EXPECT_EQ(t.capture.dumps, 2u);
  EXPECT_EQ(t.missing_bytes, 0u);
  EXPECT_EQ(t.events.size(), 60u);
  // Draining dumps continue where the last one stopped.
  frame::DumpOptions drain;
  drain.consume = true;
  Fixture g(1, 1 << 14);
  g.fill(10);
  std::string c = g.dump(drain);
  g.fill(10);
  std::string d = g.dump(drain);
  Trace t2 = read_capture(c + d);
  EXPECT_EQ(t2.events.size(), 30u);
  EXPECT_EQ(t2.missing_bytes, 0u);
  EXPECT_EQ(g.rings[0]->peek().size(), 0u);
}

TEST(TraceFrame, CapturesOfTwoBootsAreNotMixed) {
  Fixture f(1);
  f.fill(4);
  frame::DumpOptions o1;
  o1.boot_id = 111;
  std::string a = f.dump(o1);
  Fixture g(1);
  g.fill(2);
  frame::DumpOptions o2;
  o2.boot_id = 222;
  Trace t = read_capture(a + g.dump(o2));
  EXPECT_EQ(t.capture.boots, 2u);
  EXPECT_EQ(t.boot_id, 222u);
  EXPECT_EQ(t.events.size(), 3u);
}

TEST(TraceFrame, NotATrace) {
  std::string text = "hello\nworld\n@KMT but not a frame\n\x01\x02\x03";
  Trace t = read_capture(text);
  EXPECT_FALSE(t.have_frames);
  EXPECT_EQ(t.capture.bad_frames, 1u);
  Trace t2 = read_capture(std::string(100000, 'x'));  // one long line
  EXPECT_FALSE(t2.have_frames);
}

TEST(TraceCrc, KnownValues) {
  EXPECT_EQ(crc32("123456789", 9), 0xcbf43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  uint32_t s = crc32_update(kCrc32Init, "1234", 4);
  EXPECT_EQ(crc32_final(crc32_update(s, "56789", 5)), 0xcbf43926u);
}

// --- Ring ----------------------------------------------------------------------

TEST(TraceRing, OverrunAccountingExact) {
  alignas(8) static uint8_t mem[Ring::bytes_for(256)];
  Ring r;
  ASSERT_TRUE(r.init(mem, sizeof mem));
  for (uint32_t i = 0; i < 5; i++) ASSERT_TRUE(r.put_alloc(Ring::alloc_tag(0), i, 1, 2, 3, 4, 5, -1));  // 240
  EXPECT_FALSE(r.put_free(Ring::free_tag(0), 5, 1, 2));  // 264 > 256: dropped
  EXPECT_FALSE(r.put_alloc(Ring::alloc_tag(0), 6, 1, 2, 3, 4, 5, -1));
  Ring::Stats s = r.stats();
  EXPECT_EQ(s.dropped_events, 2u);
  EXPECT_EQ(s.overrun_bytes, 24u + 48u);
  EXPECT_EQ(s.events, 5u);
  EXPECT_EQ(s.committed, 240u);
  // Consuming makes room again.
  uint8_t out[96];
  EXPECT_EQ(r.read(out, sizeof out), 96u);
  EXPECT_TRUE(r.put_alloc(Ring::alloc_tag(0), 7, 1, 2, 3, 4, 5, -1));
  s = r.stats();
  EXPECT_EQ(s.consumed, 96u);
  EXPECT_EQ(s.committed, 288u);
  EXPECT_EQ(s.events, 6u);
}

TEST(TraceRing, NoMemoryDropsEverything) {
  Ring r;
  uint8_t small[64];
  EXPECT_FALSE(r.init(small, sizeof small));
  EXPECT_FALSE(r.put_alloc(Ring::alloc_tag(0), 0, 1, 2, 3, 4, 5, -1));
  EXPECT_FALSE(r.put_free(Ring::free_tag(0), 1, 1, 2));
  EXPECT_EQ(r.stats().overrun_bytes, 72u);
  EXPECT_EQ(r.peek().size(), 0u);
}

TEST(TraceRing, EventsStayWholeAcrossTheEnd) {
  alignas(8) static uint8_t mem[Ring::bytes_for(256)];
  Ring r;
  ASSERT_TRUE(r.init(mem, sizeof mem));
  std::mt19937 rng(3);
  uint32_t seq = 0, expect = 0;
  for (int round = 0; round < 500; round++) {
    // Mixed sizes so events cross the end at every possible offset.
    int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; i++) {
      if (rng() % 2) r.put_alloc(Ring::alloc_tag(1), seq, seq, seq * 2, seq * 3, seq * 4, seq, -1);
      else r.put_free(Ring::free_tag(1), seq, seq, seq * 2);
      seq++;
    }
    uint8_t out[512];
    size_t got = r.read(out, 1 + rng() % sizeof out);
    ParseStats st;
    std::vector<Event> ev;
    parse_stream(out, got, Endian::kLittle, 0, 0, ev, st);
    EXPECT_EQ(st.truncated_events + st.damaged, 0u);
    for (auto& e : ev) {
      // Dropped events leave holes in the sequence, never reorder it.
      EXPECT_GE(e.seq, expect);
      expect = e.seq + 1;
      EXPECT_EQ(e.caller, e.seq);
      EXPECT_EQ(e.ptr, uint64_t{e.seq} * 2);
      if (e.event_id == kEventAlloc) {
        EXPECT_EQ(e.allocated, uint64_t{e.seq} * 4);
      }
    }
  }
}

TEST(TraceRing, GenericPutOfEventsWithFeatures) {
  alignas(8) static uint8_t mem[Ring::bytes_for(512)];
  Ring r;
  ASSERT_TRUE(r.init(mem, sizeof mem));
  for (uint32_t i = 0; i < 40; i++) {
    uint8_t ev[64] = {};
    encode_alloc(ev, kTypeVmem, i, 1, 2, 3, 4, 5);
    uint8_t data[5] = {1, 2, 3, 4, 5};
    size_t n = append_feature(ev, sizeof ev, 1, data, 5);  // 56
    ASSERT_EQ(n, 56u);
    r.put(ev, n);
    uint8_t out[256];
    if (i % 3 == 2) {
      size_t got = r.read(out, sizeof out);
      ParseStats st;
      std::vector<Event> evs;
      parse_stream(out, got, Endian::kLittle, 0, 0, evs, st);
      EXPECT_EQ(st.features, evs.size());
      EXPECT_EQ(evs.size(), 3u);
    }
  }
  uint8_t huge[300] = {};
  EXPECT_FALSE(r.put(huge, sizeof huge));  // larger than an event may be
}

// Threads, each with its own "CPU" ring, record as fast as they can while a
// dumper reads committed bytes: every event it sees must be whole and
// consistent, and recorded + dropped must equal produced.
TEST(TraceRing, ConcurrentProducersAndADumperNeverSeeTornEvents) {
  constexpr unsigned kCpus = 4;
  constexpr uint32_t kPerCpu = 200000;
  std::vector<Bytes> mem(kCpus, Bytes(Ring::bytes_for(1 << 14)));
  std::vector<Ring> rings(kCpus);
  for (unsigned c = 0; c < kCpus; c++) ASSERT_TRUE(rings[c].init(mem[c].data(), mem[c].size()));
  std::atomic<uint32_t> seq{0};
  std::atomic<unsigned> running{kCpus};
  std::vector<std::thread> producers;
  for (unsigned c = 0; c < kCpus; c++) {
    producers.emplace_back([&, c] {
      for (uint32_t i = 0; i < kPerCpu; i++) {
        uint32_t s = seq.fetch_add(1, std::memory_order_relaxed);
        // Fields derived from (cpu, i) so a reader can check each event.
        uint64_t tag = (uint64_t{c} << 56) | i;
        if (i % 3 == 2) rings[c].put_free(Ring::free_tag(kTypeCache), s, tag, ~tag);
        else rings[c].put_alloc(Ring::alloc_tag(kTypeKmalloc), s, tag, ~tag, i, tag ^ 0x5555, c, -1);
        if (i % 64 == 0) std::this_thread::yield();  // let the reader keep up, mostly
      }
      running.fetch_sub(1);
    });
  }
  uint64_t seen = 0;
  std::vector<uint32_t> next(kCpus, 0);
  std::vector<uint8_t> buf(8192);
  bool stop = false;
  while (!stop) {
    stop = running.load() == 0;  // one more pass after the producers end
    for (unsigned c = 0; c < kCpus; c++) {
      for (;;) {
        size_t got = rings[c].read(buf.data(), 48 + seen % (buf.size() - 48));
        if (!got) break;
        std::vector<Event> ev;
        ParseStats st;
        parse_stream(buf.data(), got, Endian::kLittle, static_cast<uint16_t>(c), 0, ev, st);
        ASSERT_EQ(st.truncated_events + st.damaged + st.unknown_events + st.unknown_types, 0u);
        for (auto& e : ev) {
          uint32_t i = static_cast<uint32_t>(e.caller);
          ASSERT_EQ(e.caller >> 56, c);
          ASSERT_GE(i, next[c]);  // in order; drops leave holes
          next[c] = i + 1;
          ASSERT_EQ(e.ptr, ~e.caller);
          if (e.event_id == kEventAlloc) {
            ASSERT_EQ(e.requested, i);
            ASSERT_EQ(e.allocated, e.caller ^ 0x5555);
            ASSERT_EQ(e.flags, c);
            ASSERT_EQ(e.target_cpu, -1);
          } else {
            ASSERT_EQ(i % 3, 2u);
          }
          seen++;
        }
      }
    }
  }
  for (auto& t : producers) t.join();
  uint64_t dropped = 0;
  for (unsigned c = 0; c < kCpus; c++) {
    Ring::Stats s = rings[c].stats();
    dropped += s.dropped_events;
    EXPECT_EQ(s.events + s.dropped_events, kPerCpu);
  }
  EXPECT_EQ(seen + dropped, uint64_t{kCpus} * kPerCpu);
  printf("[          ] %llu events read concurrently, %llu dropped by full rings\n",
         static_cast<unsigned long long>(seen), static_cast<unsigned long long>(dropped));
}

// A snapshot dump while producers keep recording: whatever the frames hold
// parses whole, and the reader sees no gaps.
TEST(TraceRing, SnapshotDumpWhileRecording) {
  constexpr unsigned kCpus = 3;
  std::vector<Bytes> mem(kCpus, Bytes(Ring::bytes_for(1 << 16)));
  std::vector<Ring> rings(kCpus);
  std::vector<Ring*> ptrs;
  for (unsigned c = 0; c < kCpus; c++) {
    ASSERT_TRUE(rings[c].init(mem[c].data(), mem[c].size()));
    ptrs.push_back(&rings[c]);
  }
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> seq{0};
  std::vector<std::thread> producers;
  for (unsigned c = 0; c < kCpus; c++)
    producers.emplace_back([&, c] {
      for (uint32_t i = 0; !stop.load(std::memory_order_relaxed); i++)
        rings[c].put_alloc(Ring::alloc_tag(kTypePages), seq.fetch_add(1), c, i, 4096, 4096, 0, -1);
    });
  std::string cap;
  for (int d = 0; d < 20; d++) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    StringSink sink;
    frame::DumpOptions opt;
    opt.consume = d % 2;
    opt.dump_seq = static_cast<uint32_t>(d);
    frame::dump_rings(ptrs.data(), kCpus, &StringSink::write, &sink, opt);
    cap += sink.out;
  }
  stop = true;
  for (auto& t : producers) t.join();
  Trace t = read_capture(cap);
  EXPECT_EQ(t.capture.bad_frames, 0u);
  EXPECT_EQ(t.missing_bytes, 0u);
  EXPECT_EQ(t.parse.truncated_events + t.parse.damaged, 0u);
  EXPECT_GT(t.events.size(), 1000u);
  for (unsigned c = 0; c < kCpus; c++) {
    uint64_t i = 0;
    for (auto& e : t.events)
      if (e.cpu == c) {
        EXPECT_EQ(e.caller, c);
        EXPECT_GE(e.ptr, i);
        i = e.ptr + 1;
      }
  }
}

// --- The kernel-facing API, on the host platform --------------------------------

TEST(Kmemtrace, RecordDumpRead) {
  static Bytes mem0(Ring::bytes_for(1 << 15)), mem1(Ring::bytes_for(1 << 15));
  ASSERT_TRUE(kmemtrace::init_cpu(0, mem0.data(), mem0.size()));
  ASSERT_TRUE(kmemtrace::init_cpu(1, mem1.data(), mem1.size()));
  kmemtrace::set_boot_id(77);
  // Disabled: nothing recorded.
  kmemtrace::record_alloc(kTypeKmalloc, 1, 0x1000, 8, 8, 0);
  kmemtrace::enable();
  // Two host threads take CPU slots (mm/host: the first threads get 0, 1...
  // other tests may hold slots; record from whatever slot we get).
  std::thread([] {
    for (int i = 0; i < 100; i++) {
      kmemtrace::record_alloc(kTypeCache, 0xaa, static_cast<uintptr_t>(0x2000 + i * 16), 16, 16, 1);
      if (i % 2) kmemtrace::record_free(kTypeCache, 0xbb, static_cast<uintptr_t>(0x2000 + i * 16));
    }
  }).join();
  kmemtrace::disable();
  kmemtrace::record_free(kTypeCache, 0xbb, 0x2000);  // disabled again
  uint64_t events = 0;
  for (unsigned c = 0; c < kmemtrace::max_cpus(); c++) {
    CpuStats s;
    ASSERT_TRUE(kmemtrace::stats(c, s));
    events += s.ring.events + s.ring.dropped_events;
  }
  EXPECT_EQ(events, 150u);
  StringSink sink;
  kmemtrace::dump(&StringSink::write, &sink);
  Trace t = read_capture(sink.out);
  EXPECT_EQ(t.boot_id, 77u);
  uint64_t dropped = 0;
  for (auto& [cpu, st] : t.cpu_stats) dropped += st.dropped_events;
  EXPECT_EQ(t.events.size() + dropped, 150u);
  EXPECT_EQ(kmemtrace::total_overruns(), [&] {
    uint64_t o = 0;
    for (auto& [cpu, st] : t.cpu_stats) o += st.overrun_bytes;
    return o;
  }());
  // Streaming read drains what the snapshot dump left in place.
  uint8_t buf[1 << 15];
  size_t drained = 0;
  for (unsigned c = 0; c < 2; c++) drained += kmemtrace::read(c, buf, sizeof buf);
  uint64_t bytes = 0;
  for (auto& e : t.events) bytes += e.size;
  EXPECT_EQ(drained, bytes);
}

// --- The allocators' hooks -------------------------------------------------

// Each makes one allocator call and frees it; never inlined, so the
// recorded caller must lie inside it.
[[gnu::noinline]] void hook_kmem(int n) {
  void* p = kmem_alloc(100, KM_SLEEP);
  kmem_free(p, 100);
  void* z = kmem_zalloc(40000, KM_SLEEP);  // large: straight from the heap arena
  kmem_free(z, 40000);
  asm volatile("" ::"r"(n));
}
[[gnu::noinline]] void hook_cache(kmem_cache_t* cp) {
  void* p = kmem_cache_alloc(cp, KM_SLEEP);
  kmem_cache_free(cp, p);
  asm volatile("");
}
[[gnu::noinline]] void hook_page() {
  uint64_t pa = mm::page_alloc(1, KM_SLEEP);
  mm::page_free(pa, 1);
  asm volatile("");
}
[[gnu::noinline]] void hook_vmem(vmem_t* vmp) {
  void* v = vmem_alloc(vmp, 3 * 4096 + 5, VM_SLEEP);
  vmem_free(vmp, v, 3 * 4096 + 5);
  void* x = vmem_xalloc(vmp, 8192, 8192, 0, 0, nullptr, nullptr, VM_SLEEP);
  vmem_xfree(vmp, x, 8192);
  asm volatile("");
}

bool inside(uint64_t caller, void (*fn)()) {
  auto base = reinterpret_cast<uint64_t>(fn);
  return caller > base && caller < base + 2048;
}

TEST(Kmemtrace, AllocatorHooksRecordOneEventPerCallWithTheCallersAddress) {
  static std::vector<Bytes> mem(kmemtrace::max_cpus(), Bytes(Ring::bytes_for(1 << 16)));
  for (unsigned c = 0; c < kmemtrace::max_cpus(); c++)
    ASSERT_TRUE(kmemtrace::init_cpu(c, mem[c].data(), mem[c].size()));
  kmem_cache_t* cp = kmem_cache_create("hooked", 72, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  vmem_t* vmp =
      vmem_create("hooked", reinterpret_cast<void*>(0x100000), 1 << 24, 4096, nullptr, nullptr, nullptr, 0, VM_SLEEP);
  ASSERT_TRUE(cp && vmp);
  hook_kmem(0);  // warm (slabs, spans) untraced
  kmemtrace::reset();
  kmemtrace::enable();
  mm::alloc_hooks_set(mm::kFeatureKmemtrace, true);
  std::thread([&] {
    hook_kmem(1);
    hook_cache(cp);
    hook_page();
    hook_vmem(vmp);
  }).join();
  mm::alloc_hooks_set(mm::kFeatureKmemtrace, false);
  kmemtrace::disable();
  kmem_cache_destroy(cp);
  vmem_destroy(vmp);

  StringSink sink;
  kmemtrace::dump(&StringSink::write, &sink);
  Trace t = read_capture(sink.out);
  struct Want {
    void (*fn)();
    uint8_t type;
    uint64_t requested, allocated;
  };
  const Want want[] = {
      {reinterpret_cast<void (*)()>(&hook_kmem), kTypeKmalloc, 100, 112},  // the 112-byte size cache
      {reinterpret_cast<void (*)()>(&hook_kmem), kTypeKmalloc, 40000, 40960},
      {reinterpret_cast<void (*)()>(&hook_cache), kTypeCache, 72, 72},
      {reinterpret_cast<void (*)()>(&hook_page), kTypePages, 8192, 8192},
      {reinterpret_cast<void (*)()>(&hook_vmem), kTypeVmem, 3 * 4096 + 5, 4 * 4096},
      {reinterpret_cast<void (*)()>(&hook_vmem), kTypeVmem, 8192, 8192},
  };
  // From the hooks' own calls exactly the events above, each freed once;
  // whatever the allocators did inside (slabs, spans) has other callers.
  std::vector<const Event*> ours;
  for (const Event& e : t.events)
    for (const Want& w : want)
      if (inside(e.caller, w.fn) && e.type_id == w.type) {
        ours.push_back(&e);
        break;
      }
  if (ours.size() != 12u) {
    for (const Event& e : t.events)
      printf("id %u type %u caller %#llx ptr %#llx req %llu alloc %llu\n", e.event_id, e.type_id,
             (unsigned long long)e.caller, (unsigned long long)e.ptr, (unsigned long long)e.requested,
             (unsigned long long)e.allocated);
    printf("hook_kmem %p hook_cache %p hook_page %p hook_vmem %p\n", (void*)&hook_kmem, (void*)&hook_cache,
           (void*)&hook_page, (void*)&hook_vmem);
  }
  ASSERT_EQ(ours.size(), 12u);
  for (size_t i = 0; i < 6; i++) {
    const Event* a = ours[2 * i];
    const Event* f = ours[2 * i + 1];
    SCOPED_TRACE(i);
    EXPECT_EQ(a->event_id, kEventAlloc);
    EXPECT_TRUE(inside(a->caller, want[i].fn));
    EXPECT_EQ(a->type_id, want[i].type);
    EXPECT_EQ(a->requested, want[i].requested);
    EXPECT_EQ(a->allocated, want[i].allocated);
    EXPECT_EQ(f->event_id, kEventFree);
    EXPECT_EQ(f->type_id, want[i].type);
    EXPECT_EQ(f->ptr, a->ptr);
    EXPECT_LT(a->order, f->order);
  }
}

// --- Overhead --------------------------------------------------------------------

// A realistic dump: 4 CPUs, a kernel-like mix (kmem_alloc of assorted
// sizes, cache objects, pages, vmem spans; most freed again), kernel
// addresses for callers and pointers, through the real ring and dumper.
TEST(TraceFrame, OverheadOnARealisticEventMixIsAtMost5Percent) {
  constexpr unsigned kCpus = 4;
  std::vector<Bytes> mem(kCpus, Bytes(Ring::bytes_for(1 << 20)));
  std::vector<Ring> rings(kCpus);
  std::vector<Ring*> ptrs;
  for (unsigned c = 0; c < kCpus; c++) {
    ASSERT_TRUE(rings[c].init(mem[c].data(), mem[c].size()));
    ptrs.push_back(&rings[c]);
  }
  std::mt19937_64 rng(2024);
  std::vector<uint64_t> sites;
  for (int i = 0; i < 60; i++) sites.push_back(0xffffff8000080000ull + (rng() % 0x100000 & ~3ull));
  static const uint64_t kSizes[] = {8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096};
  std::vector<std::vector<std::pair<uint8_t, uint64_t>>> live(kCpus);
  uint32_t seq = 0;
  for (int i = 0; i < 60000; i++) {
    unsigned c = static_cast<unsigned>(rng() % kCpus);
    auto& l = live[c];
    if (!l.empty() && rng() % 100 < 45) {
      size_t k = rng() % l.size();
      rings[c].put_free(Ring::free_tag(l[k].first), seq++, sites[rng() % sites.size()], l[k].second);
      l[k] = l.back();
      l.pop_back();
      continue;
    }
    unsigned kind = static_cast<unsigned>(rng() % 100);
    uint8_t type = kind < 55 ? kTypeKmalloc : kind < 85 ? kTypeCache : kind < 95 ? kTypePages : kTypeVmem;
    uint64_t req = type == kTypePages  ? 4096ull << (rng() % 3)
                   : type == kTypeVmem ? 4096 * (1 + rng() % 64)
                                       : 1 + rng() % 1500;
    uint64_t alloc = req;
    for (uint64_t s : kSizes)
      if (s >= req) {
        alloc = s;
        break;
      }
    uint64_t ptr = (type == kTypePages ? 0x40000000ull : 0xffffff8040000000ull) + (rng() % (1 << 26)) * 16;
    rings[c].put_alloc(Ring::alloc_tag(type), seq++, sites[rng() % sites.size()], ptr, req, alloc,
                       static_cast<uint32_t>(rng() % 2), -1);
    l.push_back({type, ptr});
  }
  StringSink sink;
  frame::DumpResult res = frame::dump_rings(ptrs.data(), kCpus, &StringSink::write, &sink, {});
  double ratio = static_cast<double>(res.chars) / static_cast<double>(res.payload_bytes);
  printf("[          ] realistic dump: %llu event bytes -> %llu characters in %llu frames: %.4fx\n",
         static_cast<unsigned long long>(res.payload_bytes), static_cast<unsigned long long>(res.chars),
         static_cast<unsigned long long>(res.frames), ratio);
  EXPECT_EQ(res.chars, sink.out.size());
  EXPECT_LE(ratio, 1.05);
  // And it all reads back.
  Trace t = read_capture(sink.out);
  EXPECT_EQ(t.events.size(), 60000u);
  EXPECT_EQ(t.capture.bad_frames, 0u);
  // A small dump (a few hundred events) pays more for begin/end frames.
  Fixture f(2, 1 << 14);
  f.fill(200);
  frame::DumpResult small = frame::dump_rings(std::vector<Ring*>{f.rings[0].get(), f.rings[1].get()}.data(), 2,
                                              [](void*, const void*, size_t) {}, nullptr, {});
  printf("[          ] small dump: %llu event bytes -> %llu characters: %.4fx\n",
         static_cast<unsigned long long>(small.payload_bytes), static_cast<unsigned long long>(small.chars),
         static_cast<double>(small.chars) / static_cast<double>(small.payload_bytes));
  // Full frames alone: the format's own ratio.
  printf("[          ] one full frame: %zu characters for %zu bytes: %.4fx\n", frame::line_chars(4096), size_t{4096},
         static_cast<double>(frame::line_chars(4096)) / 4096.0);
}

}  // namespace
