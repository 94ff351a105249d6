// SPDX-License-Identifier: Apache-2.0
// Host side of kmemtrace: finds frames in a console capture, checks them,
// reassembles each CPU's event stream, parses the events and merges the
// CPUs by sequence number. Used by kmtrace, the tests and the fuzzer.
//
// 1. CaptureReader takes arbitrary bytes (a log of a serial console, in
//    pieces of any size). It splits them into lines at CR or LF, looks for
//    the frame marker anywhere in a line and decodes the frame after it
//    (frame.h); text around frames is ignored. A frame that does not decode
//    (bad character, too short, CRC mismatch) counts as a bad frame and the
//    reader goes on with the rest of the line and the next lines. A good
//    frame of an abi_version outside kOldestAbiVersion..kAbiVersion, or of
//    another frame format, is rejected (counted, its version kept for the
//    message). Frames are grouped by boot id; a
//    capture with several boots is read for the last one.
// 2. assemble() joins each CPU's data frames by offset. Frames of repeated
//    (snapshot) dumps overlap and are merged; what no frame covers between
//    the first and last byte seen, or inside a range a kBegin frame
//    announced, is a gap (missing frames). Frames hold whole events, so
//    parsing resumes after a gap on an event boundary.
// 3. parse_stream() reads events per the ABI (abi.h): unknown event ids and
//    types are counted and skipped by their size, bytes past the known
//    fields and features are skipped, a last event cut short is counted
//    (truncated) and dropped, a size too small to be an event stops the
//    segment (damage: nothing after it can be trusted).
// 4. Merging. merge_by_sequence() orders all CPUs' events by the 32-bit
//    sequence number (abi.h, Sequence numbers), unwrapped per CPU (events
//    of one CPU are in sequence order):
//    - with clock anchors (kEventClock, ABI version 3) each CPU's numbers
//      are placed on the whole 64-bit clock: forward from each anchor,
//      backward before a CPU's first one (a CPU without any lands nearest
//      the first anchor seen). Exact while no two consecutive events of a
//      CPU are 2^32 clock ticks apart, which the anchors (every 2^30 while
//      tracing is on) ensure unless a full ring drops them meanwhile;
//    - without, aligned across CPUs by serial-number arithmetic (RFC 1982)
//      from the first event, so a trace that crosses 2^32 merges correctly.
//    Events of several CPUs with the same number (a clock tick) are put in
//    an order their pointers allow: a free of a live buffer, or an
//    allocation of one that is not live, before one that could not have
//    happened yet (the lowest CPU first when several could, or none).
//    The anchors are then taken out of the events (Trace::clock_events
//    counts them per CPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <trace/abi.h>
#include <trace/frame.h>

namespace kmemtrace {

enum class Endian { kLittle, kBig };

struct Event {
  uint8_t event_id = 0;
  uint8_t type_id = 0;
  uint16_t size = 0;
  uint32_t seq = 0;
  uint64_t caller = 0;
  uint64_t ptr = 0;
  uint64_t requested = 0;  // alloc only
  uint64_t allocated = 0;
  uint32_t flags = 0;
  int32_t target_cpu = kSameCpu;
  uint16_t cpu = 0;
  uint16_t features = 0;  // feature records it carried
  uint64_t offset = 0;    // stream offset in its CPU's stream
  int64_t order = 0;      // unwrapped sequence number (merge key)
};

struct ParseStats {
  uint64_t events = 0;          // known events parsed
  uint64_t unknown_events = 0;  // unknown event id: skipped
  uint64_t unknown_types = 0;   // known event id, unknown type: skipped
  uint64_t features = 0;        // feature records read (all skipped)
  uint64_t extra_bytes = 0;     // bytes past what we know, skipped by size
  uint64_t truncated_events = 0;
  uint64_t truncated_bytes = 0;
  uint64_t damaged = 0;  // sizes too small to be an event: segment abandoned
  uint64_t damaged_bytes = 0;
  uint64_t clock_events = 0;  // kEventClock anchors read (kept until the merge)
};

// Parses n bytes of one CPU's stream that start on an event boundary at
// stream offset `offset`; appends the known events to out.
void parse_stream(const uint8_t* p, size_t n, Endian endian, uint16_t cpu, uint64_t offset, std::vector<Event>& out,
                  ParseStats& st);

// Orders events of all CPUs (each CPU's in stream order) by sequence number
// and sets Event::order (the unwrapped number, or the 64-bit clock); takes
// the kEventClock anchors out, counting them per CPU in *clocks (if given).
void merge_by_sequence(std::vector<Event>& events, std::map<uint16_t, uint64_t>* clocks = nullptr);

struct CaptureStats {
  uint64_t bytes = 0;
  uint64_t lines = 0;
  uint64_t frames = 0;  // good frames of our versions
  uint64_t data_frames = 0;
  uint64_t bad_frames = 0;       // marker found, frame undecodable
  uint64_t crc_errors = 0;       //   of which: CRC mismatch
  uint64_t rejected_frames = 0;  // good frame, other abi_version / format
  std::set<unsigned> rejected_versions;
  std::set<unsigned> rejected_formats;
  uint64_t duplicate_frames = 0;  // same bytes seen again (repeated dumps)
  uint64_t dumps = 0;             // kBegin frames
  uint64_t dump_ends = 0;         // kEnd frames
  uint64_t boots = 0;             // boot ids seen
};

// Per-CPU facts from the last kEnd frame of the boot read.
struct CpuEndStats {
  uint64_t committed = 0;
  uint64_t events = 0;
  uint64_t overrun_bytes = 0;
  uint64_t dropped_events = 0;
};

struct Gap {
  uint16_t cpu;
  uint64_t from, to;  // missing stream bytes [from, to)
};

// A CPU's stream: runs of contiguous bytes, each starting on an event.
struct Segment {
  uint64_t offset;
  std::vector<uint8_t> bytes;
};

struct Trace {
  std::vector<Event> events;  // merged by sequence number
  ParseStats parse;
  CaptureStats capture;
  std::vector<Gap> gaps;
  uint64_t missing_bytes = 0;
  std::map<uint16_t, CpuEndStats> cpu_stats;  // empty without a kEnd frame
  std::map<uint16_t, uint64_t> stream_bytes;  // per CPU: bytes received
  std::map<uint16_t, uint64_t> clock_events;  // per CPU: kEventClock anchors (not in events)
  uint32_t boot_id = 0;
  uint32_t abi_version = kAbiVersion;  // the frames' (the newest, if they differ); raw files: this reader's
  Endian endian = Endian::kLittle;
  bool have_frames = false;  // some frame of ours was found
};

class CaptureReader {
 public:
  // Any bytes, in any pieces.
  void feed(const void* data, size_t n);
  // End of input (a last line without a newline).
  void finish();
  // A kEnd frame has been read (a live reader can stop).
  bool saw_end() const { return saw_end_; }
  const CaptureStats& stats() const { return stats_; }

  // After finish(): the last boot's streams, parsed and merged.
  Trace assemble() const;
  // The same, without parsing: each CPU's segments and the gaps.
  std::map<uint16_t, std::vector<Segment>> segments(std::vector<Gap>* gaps = nullptr) const;

 private:
  struct Session {
    uint32_t boot_id = 0;
    uint32_t abi_version = 0;  // the newest of its frames'
    bool big_endian = false;
    std::map<uint16_t, std::map<uint64_t, std::vector<uint8_t>>> chunks;       // cpu -> offset -> bytes
    std::map<uint16_t, std::vector<std::pair<uint64_t, uint64_t>>> announced;  // from kBegin
    std::map<uint16_t, CpuEndStats> end_stats;
  };
  void line(const uint8_t* p, size_t n);
  void frame(const frame::Header& h, std::vector<uint8_t>&& payload);
  const Session* last_session() const;

  std::vector<uint8_t> line_;
  bool saw_end_ = false;
  CaptureStats stats_;
  std::map<uint32_t, Session> sessions_;
  std::vector<uint32_t> session_order_;
};

// Decodes one frame from s[0, n) (the characters after the marker). On
// success returns the characters used and fills h and payload; on failure
// returns 0 and sets *crc_error when everything but the CRC was right.
size_t decode_frame(const uint8_t* s, size_t n, frame::Header& h, std::vector<uint8_t>& payload,
                    bool* crc_error = nullptr);

// Raw per-CPU ABI files (like the relay files cpu0, cpu1, ...): each is one
// CPU's whole stream from offset 0.
Trace read_raw(const std::vector<std::pair<uint16_t, std::vector<uint8_t>>>& cpus, Endian endian);

}  // namespace kmemtrace
