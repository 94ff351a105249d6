// SPDX-License-Identifier: Apache-2.0
// kmemtrace frames: per-CPU event streams as lines of a serial console.
//
// 1. Where frames go. `kmemtrace dump` writes frames on the console among
//    ordinary text; the user captures the console (QEMU stdout, picocom
//    --logfile, screen -L, kmtrace --device) and kmtrace finds the frames in
//    the capture. So a frame is one line and uses no byte a terminal, a
//    line discipline or a logger acts on:
//
//      "@KMT" body "\r\n"
//
//    body uses an alphabet of 216 byte values: printable ASCII 0x20-0x7e
//    and 0x80-0xfe except 0x90 0x98 0x9b 0x9d 0x9e 0x9f (the C1 controls
//    that open escape sequences or strings on an 8-bit terminal). Excluded:
//    every C0 control (NUL, CR, LF, XON/XOFF, ESC, ^C, ^D, ...), DEL, 0xff
//    (telnet IAC). Bytes >= 0x80 must survive, so capture to a file (a log
//    option, not copy-and-paste from a terminal window).
// 2. Body encoding (base 216, 31 bits per 4 characters). The raw bytes are
//    taken as a bit stream, least significant bit of the first byte first,
//    cut into 31-bit groups; each group v (< 2^31 < 216^4) becomes 4
//    characters, least significant digit first: kAlphabet[v % 216],
//    kAlphabet[v / 216 % 216], ... The last group, of r < 31 bits, takes the
//    fewest characters that hold r bits: 1 (r <= 7), 2 (<= 15), 3 (<= 23)
//    or 4; its unused high bits are zero. Cost: 32/31 = 1.032 characters
//    per byte (hex: 2, base64: 1.33).
// 3. Raw frame: header (20 bytes, little-endian) | payload | CRC-32 (IEEE,
//    4 bytes little-endian, over header and payload).
//
//      off size
//        0   1   format          kFormat (1); readers reject others
//        1   1   kind            kData, kBegin, kEnd
//        2   1   flags           kFlagBigEndian: events are big-endian;
//                                kFlagConsume: the dump consumed the rings
//        3   1   abi_version     kAbiVersion of the events (and of the frame
//                                layout); readers reject versions outside
//                                kOldestAbiVersion..kAbiVersion (abi.h)
//        4   2   cpu             data: the CPU whose stream this is
//        6   2   payload length  bytes
//        8   4   boot id         chosen by the kernel at boot: frames of
//                                different boots are never mixed
//       12   8   offset          data: stream offset of payload[0]
//
//    A data frame's payload is whole events of one CPU's stream (an event
//    larger than the payload limit gets a frame of its own), so a reader
//    that lost a frame resumes at the next one on an event boundary, and
//    knows exactly which bytes it lost (the gap between offsets).
// 4. A dump is: one kBegin frame, each CPU's data frames (in offset order),
//    one kEnd frame. Their payloads (little-endian):
//      kBegin: u32 ncpus, u32 dump_seq, then per CPU
//              { u64 start offset, u64 end offset }   the bytes dumped
//      kEnd:   u32 ncpus, u32 dump_seq, then per CPU
//              { u64 committed end, u64 events, u64 overrun bytes,
//                u64 dropped events }                 ring stats after it
// 5. Cost: a full frame (4096-byte payload) is line_chars(4096) = 4259
//    characters, 1.040x its payload; test_trace.cpp measures the ratio of
//    whole dumps of realistic event mixes (begin/end frames and short last
//    frames included).
#pragma once
#include <cstddef>
#include <cstdint>
#include <trace/abi.h>
#include <trace/ring.h>

namespace kmemtrace::frame {

inline constexpr uint8_t kMarker[4] = {'@', 'K', 'M', 'T'};
inline constexpr uint8_t kFormat = 1;
enum Kind : uint8_t { kData = 0, kBegin = 1, kEnd = 2 };
enum Flags : uint8_t { kFlagBigEndian = 1, kFlagConsume = 2 };
inline constexpr size_t kHeaderSize = 20;
inline constexpr size_t kCrcSize = 4;
inline constexpr size_t kDefaultPayload = 4096;
inline constexpr size_t kMaxPayload = 0xffff;
inline constexpr uint16_t kNoCpu = 0xffff;
inline constexpr unsigned kMaxDumpCpus = 64;  // CPUs one dump covers
inline constexpr size_t kBeginFixed = 8, kBeginPerCpu = 16;
inline constexpr size_t kEndFixed = 8, kEndPerCpu = 32;

inline constexpr unsigned kRadix = 216;
inline constexpr unsigned kGroupBits = 31;
inline constexpr unsigned kGroupChars = 4;
extern const uint8_t kAlphabet[kRadix];
// kDigit[c]: the digit of character c, or -1 if c is not in the alphabet.
extern const int16_t kDigit[256];

// Characters of the body for `raw` raw bytes, and of a whole frame line.
constexpr size_t body_chars(size_t raw) {
  size_t bits = raw * 8, r = bits % kGroupBits;
  return bits / kGroupBits * kGroupChars + (r == 0 ? 0 : r <= 7 ? 1 : r <= 15 ? 2 : r <= 23 ? 3 : 4);
}
constexpr size_t line_chars(size_t payload) {
  return sizeof kMarker + body_chars(kHeaderSize + payload + kCrcSize) + 2;
}

struct Header {
  uint8_t format = kFormat;
  uint8_t kind = kData;
  uint8_t flags = 0;
  uint8_t abi_version = static_cast<uint8_t>(kAbiVersion);
  uint16_t cpu = kNoCpu;
  uint16_t payload_len = 0;
  uint32_t boot_id = 0;
  uint64_t offset = 0;
};
void put_header(uint8_t out[kHeaderSize], const Header& h);
Header get_header(const uint8_t in[kHeaderSize]);

// Receives encoded output (the kernel passes its raw UART writer).
using ByteSink = void (*)(void* ctx, const void* data, size_t n);

// Streams one frame at a time through a sink, with a 64-byte buffer:
//   Encoder e(sink, ctx);
//   e.begin(header);             // header.payload_len bytes must follow
//   e.put(a, na); e.put(b, nb);  // in any pieces
//   e.end();                     // CRC, end of line, flush
class Encoder {
 public:
  Encoder(ByteSink sink, void* ctx) : sink_(sink), ctx_(ctx) {}
  void begin(const Header& h);
  void put(const void* data, size_t n);
  void end();
  uint64_t chars_written() const { return chars_; }

 private:
  void put_bits(const uint8_t* p, size_t n);
  void emit_group(uint32_t v, unsigned chars);
  void flush();

  ByteSink sink_;
  void* ctx_;
  uint32_t crc_ = 0;
  uint32_t acc_ = 0;   // pending bits of the current group
  unsigned bits_ = 0;  // how many (< 31)
  size_t remaining_ = 0;
  uint64_t chars_ = 0;
  unsigned len_ = 0;
  uint8_t buf_[64];
};

struct DumpOptions {
  bool consume = false;  // drain: advance each ring past what was sent
  size_t max_payload = kDefaultPayload;
  uint32_t boot_id = 0;
  uint32_t dump_seq = 0;
};
struct DumpResult {
  uint64_t frames = 0;
  uint64_t payload_bytes = 0;  // event bytes sent
  uint64_t chars = 0;          // characters written (frames only)
};

// Writes a dump (kBegin, the data frames of rings[0..n), kEnd) of what each
// ring had committed when the dump began; producers keep recording
// meanwhile. Null rings are CPUs without a ring (empty streams). The caller
// is each ring's only consumer for the duration.
DumpResult dump_rings(Ring* const* rings, unsigned n, ByteSink sink, void* ctx, const DumpOptions& opt);

}  // namespace kmemtrace::frame
