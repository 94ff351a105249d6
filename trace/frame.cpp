// SPDX-License-Identifier: Apache-2.0
// Frame encoder and ring dumper. Format: trace/include/trace/frame.h.
// Freestanding: no allocation, 32-bit arithmetic only (the base-216
// conversion divides a 31-bit value by a constant).
#include <trace/crc32.h>
#include <trace/frame.h>

namespace kmemtrace::frame {
namespace {

constexpr bool in_alphabet(unsigned c) {
  if (c >= 0x20 && c <= 0x7e) return true;
  if (c < 0x80 || c == 0xff) return false;
  return c != 0x90 && c != 0x98 && c != 0x9b && c != 0x9d && c != 0x9e && c != 0x9f;
}

struct Alphabet {
  uint8_t chars[kRadix];
  int16_t digit[256];
};

constexpr Alphabet make_alphabet() {
  Alphabet a{};
  unsigned n = 0;
  for (unsigned c = 0; c < 256; c++) {
    a.digit[c] = -1;
    if (in_alphabet(c)) {
      a.digit[c] = static_cast<int16_t>(n);
      if (n < kRadix) a.chars[n] = static_cast<uint8_t>(c);
      n++;
    }
  }
  return n == kRadix ? a : Alphabet{};  // (a size mismatch fails the assert below)
}

constexpr Alphabet kTables = make_alphabet();
static_assert(kTables.chars[0] == 0x20 && kTables.chars[kRadix - 1] == 0xfe, "alphabet must have 216 characters");
// 216^4 > 2^31: a 4-character group holds 31 bits; 216^k >= 2^(8k-1) for
// the short last group.
static_assert(216ull * 216 * 216 * 216 >= (1ull << 31) && 216ull * 216 * 216 >= (1ull << 23) &&
              216ull * 216 >= (1ull << 15));

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v));
  put32(p + 4, static_cast<uint32_t>(v >> 32));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t get32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t get64(const uint8_t* p) { return uint64_t{get32(p)} | uint64_t{get32(p + 4)} << 32; }

constexpr uint8_t kNativeFlags =
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? static_cast<uint8_t>(kFlagBigEndian) : uint8_t{0};

}  // namespace

const uint8_t kAlphabet[kRadix] = {
#define A(i) kTables.chars[i]
#define A8(i) A(i), A(i + 1), A(i + 2), A(i + 3), A(i + 4), A(i + 5), A(i + 6), A(i + 7)
    A8(0),   A8(8),   A8(16),  A8(24),  A8(32),  A8(40),  A8(48),  A8(56),  A8(64),
    A8(72),  A8(80),  A8(88),  A8(96),  A8(104), A8(112), A8(120), A8(128), A8(136),
    A8(144), A8(152), A8(160), A8(168), A8(176), A8(184), A8(192), A8(200), A8(208),
#undef A8
#undef A
};
static_assert(sizeof kAlphabet == 27 * 8);

const int16_t kDigit[256] = {
#define D(i) kTables.digit[i]
#define D8(i) D(i), D(i + 1), D(i + 2), D(i + 3), D(i + 4), D(i + 5), D(i + 6), D(i + 7)
#define D64(i) D8(i), D8(i + 8), D8(i + 16), D8(i + 24), D8(i + 32), D8(i + 40), D8(i + 48), D8(i + 56)
    D64(0),
    D64(64),
    D64(128),
    D64(192),
#undef D64
#undef D8
#undef D
};

void put_header(uint8_t out[kHeaderSize], const Header& h) {
  out[0] = h.format;
  out[1] = h.kind;
  out[2] = h.flags;
  out[3] = h.abi_version;
  put16(out + 4, h.cpu);
  put16(out + 6, h.payload_len);
  put32(out + 8, h.boot_id);
  put64(out + 12, h.offset);
}

Header get_header(const uint8_t in[kHeaderSize]) {
  Header h;
  h.format = in[0];
  h.kind = in[1];
  h.flags = in[2];
  h.abi_version = in[3];
  h.cpu = get16(in + 4);
  h.payload_len = get16(in + 6);
  h.boot_id = get32(in + 8);
  h.offset = get64(in + 12);
  return h;
}

// --- Encoder -------------------------------------------------------------

void Encoder::flush() {
  if (len_) sink_(ctx_, buf_, len_);
  chars_ += len_;
  len_ = 0;
}

void Encoder::emit_group(uint32_t v, unsigned chars) {
  if (len_ + chars > sizeof buf_) flush();
  for (unsigned i = 0; i < chars; i++) {
    buf_[len_++] = kAlphabet[v % kRadix];
    v /= kRadix;
  }
}

void Encoder::put_bits(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t b = p[i];
    unsigned room = kGroupBits - bits_;  // 1..31
    if (room > 8) {
      acc_ |= b << bits_;
      bits_ += 8;
      continue;
    }
    emit_group(acc_ | (b & ((1u << room) - 1)) << bits_, kGroupChars);
    acc_ = b >> room;
    bits_ = 8 - room;
  }
}

void Encoder::begin(const Header& h) {
  uint8_t raw[kHeaderSize];
  put_header(raw, h);
  if (len_ + sizeof kMarker > sizeof buf_) flush();
  for (uint8_t c : kMarker) buf_[len_++] = c;
  acc_ = 0;
  bits_ = 0;
  crc_ = crc32_update(kCrc32Init, raw, sizeof raw);
  put_bits(raw, sizeof raw);
  remaining_ = h.payload_len;
}

void Encoder::put(const void* data, size_t n) {
  if (n > remaining_) n = remaining_;  // never more than the header promised
  remaining_ -= n;
  crc_ = crc32_update(crc_, data, n);
  put_bits(static_cast<const uint8_t*>(data), n);
}

void Encoder::end() {
  // A short payload is padded with zeros so the frame stays well formed
  // (the CRC covers the padding; the caller broke its promise, not the line).
  static constexpr uint8_t kZeros[16] = {};
  while (remaining_) put(kZeros, remaining_ < sizeof kZeros ? remaining_ : sizeof kZeros);
  uint8_t crc[kCrcSize];
  put32(crc, crc32_final(crc_));
  put_bits(crc, sizeof crc);
  if (bits_) emit_group(acc_, bits_ <= 7 ? 1 : bits_ <= 15 ? 2 : bits_ <= 23 ? 3 : 4);
  acc_ = 0;
  bits_ = 0;
  if (len_ + 2 > sizeof buf_) flush();
  buf_[len_++] = '\r';
  buf_[len_++] = '\n';
  flush();
}

// --- Dump ----------------------------------------------------------------

DumpResult dump_rings(Ring* const* rings, unsigned n, ByteSink sink, void* ctx, const DumpOptions& opt) {
  DumpResult res;
  Encoder enc(sink, ctx);
  size_t max_payload = opt.max_payload;
  if (max_payload < Ring::kSlack) max_payload = Ring::kSlack;  // the largest event
  if (max_payload > kMaxPayload) max_payload = kMaxPayload;
  if (n > kMaxDumpCpus) n = kMaxDumpCpus;
  uint8_t flags = kNativeFlags | (opt.consume ? uint8_t{kFlagConsume} : uint8_t{0});

  auto control = [&](uint8_t kind, size_t per_cpu, auto&& fill) {
    Header h;
    h.kind = kind;
    h.flags = flags;
    h.boot_id = opt.boot_id;
    h.payload_len = static_cast<uint16_t>(8 + per_cpu * n);
    enc.begin(h);
    uint8_t fixed[8];
    put32(fixed, n);
    put32(fixed + 4, opt.dump_seq);
    enc.put(fixed, sizeof fixed);
    for (unsigned cpu = 0; cpu < n; cpu++) {
      uint8_t rec[32] = {};
      fill(cpu, rec);
      enc.put(rec, per_cpu);
    }
    enc.end();
    res.frames++;
  };

  // The snapshot: what each ring has committed now, all CPUs at about the
  // same moment. Nothing in it is overwritten before we consume it; what
  // producers add meanwhile waits for the next dump. Ordering: peek()'s
  // acquire load of head_ makes the snapshot's bytes the producers' whole
  // events (ring.h, The orderings); the caller is each ring's only consumer.
  size_t snap[kMaxDumpCpus];
  control(kBegin, kBeginPerCpu, [&](unsigned cpu, uint8_t* rec) {
    snap[cpu] = 0;
    if (!rings[cpu]) return;
    Ring::Committed c = rings[cpu]->peek();
    snap[cpu] = c.size();
    put64(rec, c.offset);
    put64(rec + 8, c.offset + c.size());
  });

  for (unsigned cpu = 0; cpu < n; cpu++) {
    Ring* r = rings[cpu];
    if (!r) continue;
    Ring::Committed c = r->peek();  // the snapshot's start, maybe more (acquire again: more bytes)
    size_t pos = 0, total = snap[cpu] < c.size() ? snap[cpu] : c.size();
    while (pos < total) {
      size_t room = total - pos;
      size_t len = Ring::whole_events(c, pos, max_payload < room ? max_payload : room);
      if (len == 0) {
        // Damaged (the ring's memory was overwritten): nothing past here
        // can be framed. A draining dump drops it so the ring recovers.
        if (opt.consume) r->consume(c.size());
        break;
      }
      Header h;
      h.kind = kData;
      h.flags = flags;
      h.cpu = static_cast<uint16_t>(cpu);
      h.boot_id = opt.boot_id;
      h.offset = c.offset + pos;
      h.payload_len = static_cast<uint16_t>(len);
      enc.begin(h);
      for (size_t at = pos; at < pos + len;) {
        size_t size = c.event_size(at);
        enc.put(c.event(at), size);
        at += size;
      }
      enc.end();
      res.frames++;
      res.payload_bytes += len;
      if (opt.consume) {
        // Draining: give the space back as we go. The rest stays in place
        // (producers only write past the committed end). consume()'s
        // release store of tail_ comes after enc.put() read these bytes, so
        // a producer that refills the space writes after our reads.
        r->consume(len);
        c = r->peek();
        total -= len;
        pos = 0;
      } else {
        pos += len;
      }
    }
  }

  // Ring statistics after the dump: the counters are relaxed (ring.h, The
  // orderings), exact when the producers are quiescent (tracing off, and a
  // cross-call since), a recent value otherwise.
  control(kEnd, kEndPerCpu, [&](unsigned cpu, uint8_t* rec) {
    if (!rings[cpu]) return;
    Ring::Stats s = rings[cpu]->stats();
    put64(rec, s.committed);
    put64(rec + 8, s.events);
    put64(rec + 16, s.overrun_bytes);
    put64(rec + 24, s.dropped_events);
  });
  res.chars = enc.chars_written();
  return res;
}

}  // namespace kmemtrace::frame
