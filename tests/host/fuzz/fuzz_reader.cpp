// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the kmemtrace capture reader and kmtrace's analyses on
// arbitrary bytes (a console capture, a raw ABI stream, a frame body).
// Built by tests/host/fuzz/run-fuzz (clang, -fsanitize=fuzzer); the gtest
// trace_corpus_tests replays corpus/ under ASan/UBSan with the usual build.
#include <trace/reader.h>

#include <cstddef>
#include <cstdint>

#include "analysis.h"
#include "render.h"

namespace {

void analyse(const kmemtrace::Trace& t) {
  kmtrace::Summary s = kmtrace::summarize(t);
  auto sites = kmtrace::sites(t);
  kmtrace::Timeline tl = kmtrace::timeline(t, 3, 50);
  kmtrace::SymbolMap none;
  volatile size_t sink = kmtrace::summary_json(s, t).size() + kmtrace::sites_json(sites, none, 10).size() +
                         kmtrace::live_text(sites, none, 10).size() + kmtrace::timeline_svg(tl, none).size() +
                         kmtrace::timeline_perfetto(tl, t, none).size() + kmtrace::damage_report(t).size();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. As a capture, fed in two pieces split where the first byte says.
  {
    kmemtrace::CaptureReader r;
    size_t split = size ? data[0] % (size + 1) : 0;
    r.feed(data, split);
    r.feed(data + split, size - split);
    r.finish();
    analyse(r.assemble());
  }
  // 2. As raw per-CPU streams (two CPUs), both byte orders.
  {
    size_t half = size / 2;
    std::vector<std::pair<uint16_t, std::vector<uint8_t>>> cpus = {{0, std::vector<uint8_t>(data, data + half)},
                                                                   {1, std::vector<uint8_t>(data + half, data + size)}};
    analyse(kmemtrace::read_raw(cpus, kmemtrace::Endian::kLittle));
    analyse(kmemtrace::read_raw(cpus, kmemtrace::Endian::kBig));
  }
  // 3. As a frame body.
  {
    kmemtrace::frame::Header h;
    std::vector<uint8_t> payload;
    kmemtrace::decode_frame(data, size, h, payload);
  }
  return 0;
}
