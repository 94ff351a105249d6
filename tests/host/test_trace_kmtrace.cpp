// SPDX-License-Identifier: Apache-2.0
// kmtrace end to end: synthetic captures made here (the real ring and
// dumper, console text around the frames), fed to the kmtrace binary;
// the summary JSON checked number by number, damage and bad input mapped to
// the documented exit codes, raw per-CPU files, symbols from a real ELF,
// allocinfo's table and the timeline outputs.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <link.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <trace/abi.h>
#include <trace/frame.h>
#include <trace/ring.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "allocinfo.h"

#ifndef KMTRACE_PATH
#error "KMTRACE_PATH: the kmtrace binary (set by tests/host/CMakeLists.txt)"
#endif
#ifndef KMTRACE_SOURCE_ROOT
#error "KMTRACE_SOURCE_ROOT: the source tree kmtrace was built from (set by tests/host/CMakeLists.txt)"
#endif

namespace {

using namespace kmemtrace;

struct Result {
  int status;
  std::string out;
};

// Temporary files, private to this process (ctest runs tests in parallel).
std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "kmt" + std::to_string(getpid()) + "_" + name;
}

// kmtrace with `env` ("NAME=value ", or "") in front of it.
Result run_env(const std::string& env, const std::string& args, const std::string& stdin_file = "") {
  std::string cmd = env + std::string(KMTRACE_PATH) + " " + args + " 2>" + tmp("stderr");
  if (!stdin_file.empty()) cmd += " < " + stdin_file;
  FILE* p = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Result run(const std::string& args, const std::string& stdin_file = "") { return run_env("", args, stdin_file); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
std::string last_stderr() { return read_file(tmp("stderr")); }

std::string write_temp(const std::string& name, const std::string& data) {
  std::string path = tmp(name);
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

// The value of "key": N in a JSON text (first occurrence after `after`).
long long json_num(const std::string& json, const std::string& key, const std::string& after = "") {
  size_t from = after.empty() ? 0 : json.find("\"" + after + "\"");
  if (from == std::string::npos) return -1;
  size_t at = json.find("\"" + key + "\": ", from);
  if (at == std::string::npos) return -1;
  return std::stoll(json.substr(at + key.size() + 4));
}

// The whitespace-separated words of the first line of `text` that
// starts with `first`.
std::vector<std::string> row(const std::string& text, const std::string& first) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string x;
    while (words >> x) w.push_back(x);
    if (!w.empty() && w[0] == first) return w;
  }
  return {};
}

struct Sink {
  std::string out;
  static void write(void* ctx, const void* d, size_t n) {
    static_cast<Sink*>(ctx)->out.append(static_cast<const char*>(d), n);
  }
};

// One CPU's ring, dumped as a capture file.
std::string dump_to_file(Ring& r, const std::string& name) {
  Sink sink;
  Ring* rings[1] = {&r};
  frame::dump_rings(rings, 1, &Sink::write, &sink, {});
  return write_temp(name, sink.out);
}

// The address of a function in the kmtrace binary (a real ELF with DWARF)
// from `nm -C`: `name` is its qualified name without parameters; not a
// compiler's [clone] copy. 0 if nm does not list it.
uint64_t function_address(const std::string& name) {
  FILE* p = popen(("nm -C " + std::string(KMTRACE_PATH)).c_str(), "r");
  if (!p) return 0;
  char line[8192];
  uint64_t found = 0;
  while (!found && fgets(line, sizeof line, p)) {
    std::string l = line;
    if (l.size() < 20 || (l[17] != 'T' && l[17] != 't') || l.find("[clone") != std::string::npos) continue;
    std::string sym = l.substr(19, l.find_last_not_of("\n") - 18);
    if (sym == name || sym.rfind(name + "(", 0) == 0 || sym.rfind(name + "[", 0) == 0)
      found = std::stoull(l.substr(0, 16), nullptr, 16);
  }
  pclose(p);
  return found;
}

// The synthetic trace (see the expected numbers in SummaryJsonIsExact).
struct Synthetic {
  std::vector<uint8_t> m0 = std::vector<uint8_t>(Ring::bytes_for(4096)), m1 = m0;
  Ring r0, r1;
  Synthetic() {
    r0.init(m0.data(), m0.size());
    r1.init(m1.data(), m1.size());
    uint32_t s = 0xfffffffc;  // the sequence wraps inside the trace
    const uint64_t p1 = 0xffff000000001000, p2 = 0xffff000000002000, c1 = 0xffff000000003000, c2 = 0xffff000000004000,
                   pg = 0x40001000, v1 = 0x10000000;
    r0.put_alloc(Ring::alloc_tag(kTypeKmalloc), s++, 0x80001000, p1, 10, 16, 0, -1);
    r1.put_alloc(Ring::alloc_tag(kTypeCache), s++, 0x80002000, c2, 24, 32, 1, -1);
    r0.put_alloc(Ring::alloc_tag(kTypeKmalloc), s++, 0x80001000, p2, 100, 128, 0, -1);
    r0.put_free(Ring::free_tag(kTypeKmalloc), s++, 0x80001100, p1);
    r0.put_alloc(Ring::alloc_tag(kTypeCache), s++, 0x80003000, c1, 64, 64, 0, -1);
    r1.put_free(Ring::free_tag(kTypeCache), s++, 0x80003100, c1);          // freed on another CPU
    r0.put_free(Ring::free_tag(kTypePages), s++, 0x80004100, 0x40009000);  // never allocated here
    r1.put_alloc(Ring::alloc_tag(kTypeVmem), s++, 0x80005000, v1, 5000, 8192, 0x100, -1);
    r0.put_alloc(Ring::alloc_tag(kTypePages), s++, 0x80004000, pg, 4096, 4096, 4, -1);
    uint8_t unknown[24] = {9, 0, 24, 0};  // event id 9: skipped
    r1.put(unknown, sizeof unknown);
    r1.put_free(Ring::free_tag(kTypeVmem), s++, 0x80005100, v1);
  }
  std::string dump(uint32_t boot = 5) {
    Sink sink;
    Ring* rings[2] = {&r0, &r1};
    frame::DumpOptions o;
    o.boot_id = boot;
    o.max_payload = 256;  // several frames per CPU
    frame::dump_rings(rings, 2, &Sink::write, &sink, o);
    return sink.out;
  }
  // A console capture: boot messages, the shell command, frames with a
  // stray line between two of them, the prompt.
  std::string capture() {
    std::string frames = dump();
    std::string cap = "OpenSBI v1.1\r\nMagpie 0.1.0 booting\r\nmagpie> kmemtrace dump\r\n";
    size_t second = frames.find("@KMT", 1);
    cap += frames.substr(0, second) + "[ 3.14] timer: tick\r\n" + frames.substr(second);
    return cap + "kmemtrace: dump done\r\nmagpie> ";
  }
};

TEST(Kmtrace, SummaryJsonIsExact) {
  Synthetic syn;
  std::string path = write_temp("kmt_capture.log", syn.capture());
  Result r = run("summary --json " + path);
  ASSERT_EQ(r.status, 0) << last_stderr();
  const std::string& j = r.out;
  EXPECT_EQ(json_num(j, "abi_version"), 3);
  EXPECT_EQ(json_num(j, "events"), 10);
  EXPECT_EQ(json_num(j, "allocs"), 6);
  EXPECT_EQ(json_num(j, "frees"), 4);
  EXPECT_EQ(json_num(j, "allocs", "kmalloc"), 2);
  EXPECT_EQ(json_num(j, "frees", "kmalloc"), 1);
  EXPECT_EQ(json_num(j, "allocs", "cache"), 2);
  EXPECT_EQ(json_num(j, "frees", "cache"), 1);
  EXPECT_EQ(json_num(j, "allocs", "pages"), 1);
  EXPECT_EQ(json_num(j, "frees", "pages"), 1);
  EXPECT_EQ(json_num(j, "allocs", "vmem"), 1);
  EXPECT_EQ(json_num(j, "frees", "vmem"), 1);
  EXPECT_EQ(json_num(j, "bytes_requested"), 10 + 100 + 64 + 4096 + 24 + 5000);
  EXPECT_EQ(json_num(j, "bytes_allocated"), 16 + 128 + 64 + 4096 + 32 + 8192);
  EXPECT_EQ(json_num(j, "live_objects"), 3);  // p2, c2, the pages
  EXPECT_EQ(json_num(j, "live_bytes"), 128 + 32 + 4096);
  EXPECT_EQ(json_num(j, "unmatched_frees"), 1);
  EXPECT_EQ(json_num(j, "unknown_events"), 1);
  EXPECT_EQ(json_num(j, "0", "per_cpu"), 6);
  EXPECT_EQ(json_num(j, "1", "per_cpu"), 4);
  EXPECT_EQ(json_num(j, "bad_frames"), 0);
  EXPECT_EQ(json_num(j, "missing_bytes"), 0);
  EXPECT_EQ(json_num(j, "boot_id"), 5);
  // The same from stdin, and as text.
  Result s = run("summary -", path);
  EXPECT_EQ(s.status, 0);
  EXPECT_NE(s.out.find("events 10: 6 allocs, 4 frees"), std::string::npos) << s.out;
}

TEST(Kmtrace, RawPerCpuFiles) {
  Synthetic syn;
  std::vector<uint8_t> buf(4096);
  size_t n0 = syn.r0.read(buf.data(), buf.size());
  std::string cpu0 = write_temp("cpu0", std::string(buf.begin(), buf.begin() + static_cast<long>(n0)));
  size_t n1 = syn.r1.read(buf.data(), buf.size());
  std::string cpu1 = write_temp("cpu1", std::string(buf.begin(), buf.begin() + static_cast<long>(n1)));
  Result r = run("summary --json --raw " + cpu1 + " " + cpu0);
  ASSERT_EQ(r.status, 0) << last_stderr();
  EXPECT_EQ(json_num(r.out, "events"), 10);
  EXPECT_EQ(json_num(r.out, "live_bytes"), 128 + 32 + 4096);
  EXPECT_EQ(json_num(r.out, "0", "per_cpu"), 6);
  // A truncated raw file: the cut event is reported, exit status 1.
  write_temp("cpu0", std::string(buf.begin(), buf.begin() + static_cast<long>(n0 - 10)));
  write_temp("cpu1", std::string(buf.begin(), buf.begin() + static_cast<long>(n1)));
  Result t = run("summary --json --raw " + cpu0 + " " + cpu1);
  EXPECT_EQ(t.status, 1);
  EXPECT_EQ(json_num(t.out, "truncated_events"), 1);
}

TEST(Kmtrace, DamageGivesResultsAndExitStatus1) {
  Synthetic syn;
  std::string cap = syn.capture();
  // Flip a byte in the middle of the third frame's body.
  size_t f3 = cap.find("@KMT");
  for (int i = 0; i < 2; i++) f3 = cap.find("@KMT", f3 + 1);
  size_t at = f3 + 40;
  int d = frame::kDigit[static_cast<uint8_t>(cap[at])];
  cap[at] = static_cast<char>(frame::kAlphabet[(d + 7) % frame::kRadix]);
  std::string path = write_temp("kmt_damaged.log", cap);
  Result r = run("summary --json " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(json_num(r.out, "bad_frames"), 1);
  EXPECT_GT(json_num(r.out, "missing_bytes"), 0);
  EXPECT_NE(last_stderr().find("damaged frame"), std::string::npos) << last_stderr();
  // A capture cut in the middle of a frame.
  std::string whole = syn.capture();
  std::string cut = whole.substr(0, whole.rfind("@KMT") + 30);
  Result c = run("summary --json " + write_temp("kmt_cut.log", cut));
  EXPECT_EQ(c.status, 1);
  EXPECT_EQ(json_num(c.out, "bad_frames"), 1);
}

TEST(Kmtrace, BadInputExitStatus2) {
  Result r = run("summary " + write_temp("kmt_text.log", "just a boot log\nno frames here\n"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(last_stderr().find("no kmemtrace frames found"), std::string::npos) << last_stderr();
  EXPECT_TRUE(r.out.empty());
  // Frames of another ABI version: rejected with a clear message.
  frame::Header h;
  h.abi_version = 4;
  h.cpu = 0;
  h.payload_len = 24;
  Sink sink;
  frame::Encoder e(&Sink::write, &sink);
  e.begin(h);
  uint8_t ev[24] = {1, 0, 24, 0};
  e.put(ev, 24);
  e.end();
  Result v = run("summary " + write_temp("kmt_v4.log", "x\n" + sink.out));
  EXPECT_EQ(v.status, 2);
  EXPECT_NE(last_stderr().find("abi_version 4 (this kmtrace reads 2 to 3)"), std::string::npos) << last_stderr();
  // Usage errors and unreadable files.
  EXPECT_EQ(run("").status, 2);
  EXPECT_EQ(run("frobnicate x").status, 2);
  EXPECT_EQ(run("sites " + write_temp("kmt_x.log", "x")).status, 2);  // needs --elf
  EXPECT_EQ(run("summary /nonexistent/capture.log").status, 2);
  EXPECT_EQ(run("--help").status, 0);
  // Random bytes: no crash, status 2.
  std::string junk;
  for (int i = 0; i < 100000; i++) junk += static_cast<char>((i * 7919) ^ (i >> 3));
  EXPECT_EQ(run("summary " + write_temp("kmt_junk.bin", junk)).status, 2);
}

TEST(Kmtrace, HelpDocumentsExitCodes) {
  Result r = run("--help");
  EXPECT_NE(r.out.find("exit status"), std::string::npos);
  EXPECT_NE(r.out.find("  1  "), std::string::npos);
  EXPECT_NE(r.out.find("  2  "), std::string::npos);
}

TEST(Kmtrace, SitesWithSymbolsFromARealElf) {
  // Callers inside functions of the kmtrace binary itself (a real ELF with
  // DWARF): `nm` gives main's address; a return address a few bytes in.
  uint64_t main_addr = function_address("main");
  if (!main_addr) GTEST_SKIP() << "nm found no main in kmtrace";
  std::vector<uint8_t> m(Ring::bytes_for(4096));
  Ring r;
  r.init(m.data(), m.size());
  for (uint32_t i = 0; i < 5; i++)
    r.put_alloc(Ring::alloc_tag(kTypeKmalloc), i, main_addr + 16, 0x1000 + i * 64, 40, 64, 0, -1);
  r.put_free(Ring::free_tag(kTypeKmalloc), 5, main_addr + 32, 0x1000);
  std::string path = dump_to_file(r, "kmt_sites.log");
  Result s = run("sites --elf " + std::string(KMTRACE_PATH) + " " + path);
  ASSERT_EQ(s.status, 0) << last_stderr();
  // main itself, or a function inlined into it (the DWARF inline scope).
  EXPECT_TRUE(s.out.find(" main ") != std::string::npos || s.out.find("(inlined in main)") != std::string::npos)
      << s.out;
  EXPECT_NE(s.out.find("main.cpp:"), std::string::npos) << s.out;
  // allocs 5, frees 1, requested 200, allocated 320, fragmentation 120.
  auto w = row(s.out, "kmalloc");
  ASSERT_GE(w.size(), 8u) << s.out;
  EXPECT_EQ(std::vector<std::string>(w.begin(), w.begin() + 8),
            (std::vector<std::string>{"kmalloc", "5", "1", "200", "320", "120", "4", "256"}));
  Result j = run("sites --json --elf " + std::string(KMTRACE_PATH) + " " + path);
  EXPECT_EQ(json_num(j.out, "fragmentation"), 120);
  EXPECT_TRUE(j.out.find("\"function\": \"main\"") != std::string::npos ||
              j.out.find("\"inlined_in\": \"main\"") != std::string::npos)
      << j.out;
  Result l = run("live --elf " + std::string(KMTRACE_PATH) + " " + path);
  EXPECT_NE(l.out.find("4 allocations never freed (256 bytes) from 1 sites"), std::string::npos) << l.out;
  // Not an ELF: a clear error.
  EXPECT_EQ(run("sites --elf " + path + " " + path).status, 2);
  EXPECT_NE(last_stderr().find("not an ELF file"), std::string::npos);
}

// allocinfo: callers at the first instructions of known functions of the
// kmtrace binary (a return address 1 or 2 bytes in: the lookup is at
// address - 1, inside the function's first instruction, so at its opening
// line and never in an inlined callee). main + 1 and main + 2 are two
// addresses on one line: one allocinfo line. Objects freed in the trace
// count nowhere.
class KmtraceAllocinfo : public ::testing::Test {
 protected:
  struct Expected {
    std::string file;
    unsigned line;
    std::string func;
    long long bytes;
    unsigned long long calls;
  };

  void SetUp() override {
    main_ = function_address("main");
    xml_escape_ = function_address("kmtrace::(anonymous namespace)::xml_escape");
    sites_text_ = function_address("kmtrace::sites_text");
    parse_args_ = function_address("(anonymous namespace)::parse_args");
    if (!main_ || !xml_escape_ || !sites_text_ || !parse_args_)
      GTEST_SKIP() << "nm does not list main, xml_escape, sites_text and parse_args in kmtrace";
    m_.resize(Ring::bytes_for(4096));
    Ring r;
    r.init(m_.data(), m_.size());
    uint32_t seq = 0;
    uint64_t ptr = 0x10000;
    auto alloc = [&](uint8_t type, uint64_t caller, uint64_t bytes) {
      r.put_alloc(Ring::alloc_tag(type), seq++, caller, ptr, bytes - 1, bytes, 0, -1);
      return ptr += 0x10000;
    };
    uint64_t freed = alloc(kTypeKmalloc, main_ + 1, 64) - 0x10000;
    alloc(kTypeKmalloc, main_ + 1, 64);
    alloc(kTypeKmalloc, main_ + 1, 64);
    r.put_free(Ring::free_tag(kTypeKmalloc), seq++, parse_args_ + 1, freed);
    alloc(kTypeCache, main_ + 2, 32);
    alloc(kTypeCache, main_ + 2, 32);
    alloc(kTypePages, xml_escape_ + 1, 4096);
    for (int i = 0; i < 5; i++) alloc(kTypeVmem, sites_text_ + 1, 16);
    for (int i = 0; i < 2; i++)
      r.put_free(Ring::free_tag(kTypeKmalloc), seq++, main_ + 1, alloc(kTypeKmalloc, parse_args_ + 1, 128) - 0x10000);
    path_ = dump_to_file(r, "kmt_allocinfo.log");
    // Where each caller is, from `sites --json` (tested above).
    Result s = run("sites --json --top 100 --elf " + elf() + " " + path_);
    ASSERT_EQ(s.status, 0) << last_stderr();
    auto line_of = [&](uint64_t caller) {
      char hex[24];
      snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(caller));
      return static_cast<unsigned>(json_num(s.out, "line", hex));
    };
    ASSERT_EQ(line_of(main_ + 1), line_of(main_ + 2)) << s.out;
    main_line_ = line_of(main_ + 1);
    xml_line_ = line_of(xml_escape_ + 1);
    sites_text_line_ = line_of(sites_text_ + 1);
    ASSERT_GT(main_line_, 0u);
    ASSERT_GT(xml_line_, 0u);
    ASSERT_GT(sites_text_line_, 0u);
  }

  static std::string elf() { return KMTRACE_PATH; }

  // The lines allocinfo should print, in the default order (file, line).
  std::vector<Expected> expected(const std::string& prefix = "") const {
    std::vector<Expected> e = {
        {prefix + "tools/kmtrace/main.cpp", main_line_, "main", 3 * 64 - 64 + 2 * 32, 4},
        {prefix + "tools/kmtrace/render.cpp", xml_line_, "xml_escape", 4096, 1},
        {prefix + "tools/kmtrace/render.cpp", sites_text_line_, "sites_text", 5 * 16, 5},
    };
    std::sort(e.begin(), e.end(),
              [](const Expected& a, const Expected& b) { return std::tie(a.file, a.line) < std::tie(b.file, b.line); });
    return e;
  }

  static std::string text(const std::vector<Expected>& lines) {
    std::string o = "allocinfo - version: 1.0\n#     <size>  <calls> <tag info>\n";
    char b[512];
    for (auto& l : lines) {
      snprintf(b, sizeof b, "%12lli %8llu %s:%u func:%s \n", l.bytes, l.calls, l.file.c_str(), l.line, l.func.c_str());
      o += b;
    }
    return o;
  }

  std::vector<uint8_t> m_;
  uint64_t main_ = 0, xml_escape_ = 0, sites_text_ = 0, parse_args_ = 0;
  unsigned main_line_ = 0, xml_line_ = 0, sites_text_line_ = 0;
  std::string path_;
};

TEST_F(KmtraceAllocinfo, TheKernelsTableOfLiveObjectsBySite) {
  Result r = run("allocinfo --elf " + elf() + " " + path_);
  ASSERT_EQ(r.status, 0) << last_stderr();
  EXPECT_EQ(r.out, text(expected())) << r.out;
  // The format, written out by hand: the header, widths 12 and 8, the
  // path relative to the source tree, the unqualified function, a space
  // before the newline.
  EXPECT_EQ(r.out.rfind("allocinfo - version: 1.0\n#     <size>  <calls> <tag info>\n", 0), 0u);
  EXPECT_NE(r.out.find("\n        4096        1 tools/kmtrace/render.cpp:" + std::to_string(xml_line_) +
                       " func:xml_escape \n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(
      r.out.find("\n         192        4 tools/kmtrace/main.cpp:" + std::to_string(main_line_) + " func:main \n"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("parse_args"), std::string::npos) << "its objects were all freed\n" << r.out;
  // --nonzero: the same (offline every line has live objects).
  EXPECT_EQ(run("allocinfo --nonzero --elf " + elf() + " " + path_).out, r.out);
}

TEST_F(KmtraceAllocinfo, SortAndTop) {
  auto e = expected();
  auto by = [&](auto field) {
    auto v = e;
    std::stable_sort(v.begin(), v.end(), [&](const Expected& a, const Expected& b) { return field(a) > field(b); });
    return v;
  };
  auto bytes = by([](const Expected& x) { return static_cast<unsigned long long>(x.bytes); });
  auto calls = by([](const Expected& x) { return x.calls; });
  EXPECT_EQ(bytes[0].func, "xml_escape");
  EXPECT_EQ(calls[0].func, "sites_text");
  EXPECT_EQ(run("allocinfo --sort bytes --elf " + elf() + " " + path_).out, text(bytes));
  EXPECT_EQ(run("allocinfo --sort calls --elf " + elf() + " " + path_).out, text(calls));
  Result top = run("allocinfo --sort calls --top 2 --nonzero --elf " + elf() + " " + path_);
  EXPECT_EQ(top.status, 0);
  EXPECT_EQ(top.out, text({calls[0], calls[1]}));
  EXPECT_EQ(run("allocinfo --top 1 --elf " + elf() + " " + path_).out, text({e[0]}));
}

TEST_F(KmtraceAllocinfo, SourceRoot) {
  // Given with a trailing slash: the same as the default, worked out from the ELF.
  Result r = run("allocinfo --source-root " KMTRACE_SOURCE_ROOT "/ --elf " + elf() + " " + path_);
  ASSERT_EQ(r.status, 0) << last_stderr();
  EXPECT_EQ(r.out, text(expected()));
  // A root the files are not under: the DWARF's absolute names.
  Result a = run("allocinfo --source-root /nonexistent --elf " + elf() + " " + path_);
  EXPECT_EQ(a.out, text(expected(KMTRACE_SOURCE_ROOT "/"))) << a.out;
}

TEST_F(KmtraceAllocinfo, BadUsageExitStatus2) {
  auto bad = [&](const std::string& args, const std::string& message) {
    Result r = run(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
    EXPECT_NE(last_stderr().find(message), std::string::npos) << args << "\n" << last_stderr();
  };
  std::string elf_and_input = " --elf " + elf() + " " + path_;
  bad("allocinfo --sort size" + elf_and_input, "--sort takes bytes or calls, not 'size'");
  bad("allocinfo " + path_, "allocinfo needs --elf KERNEL.ELF");
  bad("allocinfo --top 0" + elf_and_input, "--top needs a positive number, not '0'");
  bad("allocinfo --top x" + elf_and_input, "--top needs a positive number, not 'x'");
  bad("allocinfo --top -3" + elf_and_input, "--top needs a positive number, not '-3'");
  bad("allocinfo --top", "--top needs a value");
  bad("allocinfo --json" + elf_and_input, "allocinfo has no --json");
  bad("sites --sort bytes" + elf_and_input, "--sort, --nonzero and --source-root are for allocinfo");
  EXPECT_NE(run("--help").out.find("allocinfo --elf KERNEL.ELF"), std::string::npos);
}

TEST(KmtraceAllocinfoRules, FunctionAsFuncGivesIt) {
  using kmtrace::unqualified_function;
  EXPECT_EQ(unqualified_function("mm::(anonymous namespace)::slab_create(kmem_cache*, int)"), "slab_create");
  EXPECT_EQ(unqualified_function("kmem_cache_create"), "kmem_cache_create");
  EXPECT_EQ(unqualified_function("foo()::{lambda(void*)#1}::operator()(void*) const"), "operator()");
  EXPECT_EQ(unqualified_function("(anonymous namespace)::exercise_cpu(void*)"), "exercise_cpu");
  EXPECT_EQ(unqualified_function("void mm::fill<int, 4>(int*, unsigned long)"), "fill");
  EXPECT_EQ(unqualified_function("std::vector<int, std::allocator<int> > ns::make<int>(int)"), "make");
  EXPECT_EQ(unqualified_function("ns::Box<char>::put<int>(int) const &"), "put");
  EXPECT_EQ(unqualified_function("ns::Box<char>::Box(int)"), "Box");
  EXPECT_EQ(unqualified_function("ns::Box<char>::~Box()"), "~Box");
  EXPECT_EQ(unqualified_function("kmtrace::site_label[abi:cxx11](unsigned long)"), "site_label");
  EXPECT_EQ(unqualified_function("parse_args(int, char**) [clone .cold]"), "parse_args");
  EXPECT_EQ(unqualified_function("f(int) [clone .constprop.0] [clone .isra.0]"), "f");
  EXPECT_EQ(unqualified_function("kmem_zalloc.part.0"), "kmem_zalloc");
  EXPECT_EQ(unqualified_function("operator new(unsigned long)"), "operator new");
  EXPECT_EQ(unqualified_function("ns::operator<<(Out&, Box const&)"), "operator<<");
  EXPECT_EQ(unqualified_function("bool ns::operator< <int>(Box<int> const&, Box<int> const&)"), "operator<");
  EXPECT_EQ(unqualified_function("ns::Box<int>::operator bool() const"), "operator bool");
  EXPECT_EQ(unqualified_function("ns::Box<int>::operator[](unsigned long)"), "operator[]");
  EXPECT_EQ(unqualified_function("ns::Ptr::operator->() const"), "operator->");
  EXPECT_EQ(unqualified_function("a::b(int)::Local::run()"), "run");
  EXPECT_EQ(unqualified_function("?"), "?");
  EXPECT_EQ(unqualified_function(""), "?");
}

TEST(KmtraceAllocinfoRules, PathsRelativeToTheSourceRoot) {
  using kmtrace::relative_path;
  EXPECT_EQ(relative_path("/src/magpie/kernel/mm/kmemleak_control.cpp", "/src/magpie"),
            "kernel/mm/kmemleak_control.cpp");
  EXPECT_EQ(relative_path("/src/magpie/kernel/mm/kmemleak_control.cpp", "/src/magpie/"),
            "kernel/mm/kmemleak_control.cpp");
  EXPECT_EQ(relative_path("/src/magpie2/kernel/x.cpp", "/src/magpie"), "/src/magpie2/kernel/x.cpp");
  EXPECT_EQ(relative_path("/usr/include/c++/12/new", "/src/magpie"), "/usr/include/c++/12/new");
  EXPECT_EQ(relative_path("kernel/x.cpp", ""), "kernel/x.cpp");
  using kmtrace::source_root;
  // The kernel's units, compiled from the build directory; one stray unit
  // compiled elsewhere does not count.
  EXPECT_EQ(source_root({{"/src/magpie/build/qemu-virt-arm64", "/src/magpie/kernel/main.cpp"},
                         {"/src/magpie/build/qemu-virt-arm64", "/src/magpie/mm/kmem.cpp"},
                         {"/src/magpie/build/qemu-virt-arm64", "/src/magpie/arch/arm64/start.S"},
                         {"/build/gcc/libgcc", "../../src/libgcc/lib2funcs.c"}}),
            "/src/magpie");
  // Relative names are relative to their compilation directory.
  EXPECT_EQ(source_root({{"/src/magpie", "kernel/main.cpp"}, {"/src/magpie", "mm/kmem.cpp"}}), "/src/magpie");
  EXPECT_EQ(source_root({{"/a", "/a/x.cpp"}, {"/a", "/b/y.cpp"}}), "");  // only "/" in common
  EXPECT_EQ(source_root({{"", "x.cpp"}}), "");                           // nothing absolute
  EXPECT_EQ(source_root({}), "");
}

// Call sites behind artificial wrappers, as mm::page_alloc's (it expands to
// mm::page_alloc_site, always-inline and artificial, in mm/include/mm/page.h,
// which calls page_alloc_tagged): a caller calls fixture_outer_site on a
// known line, which calls fixture_inner_site, which calls the out-of-line
// fixture_alloc_tagged, which records its return address. The wrappers are
// at the end of this file, under a #line naming them a header in
// mm/include/mm/ (the addr2line backend's rule); kmtrace should give the
// caller's line and function, as the kernel's tag does.
struct WrapperCall {
  uint64_t caller = 0;  // a return address, as the ELF's addresses (less the load bias)
  int line = 0;         // the caller's line, as __LINE__ gives it
};
WrapperCall g_wrapper_call;

uint64_t load_bias() {
  uint64_t bias = 0;
  dl_iterate_phdr(  // the main program comes first
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<uint64_t*>(out) = info->dlpi_addr;
        return 1;
      },
      &bias);
  return bias;
}

[[gnu::noipa]] uint64_t fixture_alloc_tagged(int line) {
  g_wrapper_call.caller = reinterpret_cast<uint64_t>(__builtin_return_address(0)) - load_bias();
  g_wrapper_call.line = line;
  return static_cast<uint64_t>(line);
}

[[gnu::always_inline, gnu::artificial]] inline uint64_t fixture_outer_site(int line);  // at the end

// The plain case, and the wrapper called from a function inlined in
// another (the call site is in fixture_helper; not an artificial one).
[[gnu::noipa]] uint64_t fixture_caller() { return fixture_outer_site(__LINE__) + 1; }
[[gnu::always_inline]] inline uint64_t fixture_helper() { return fixture_outer_site(__LINE__) + 2; }
[[gnu::noipa]] uint64_t fixture_helper_caller() { return fixture_helper() + 3; }

TEST(Kmtrace, CallSitesBehindArtificialWrappers) {
  std::vector<uint8_t> m(Ring::bytes_for(4096));
  Ring r;
  r.init(m.data(), m.size());
  ASSERT_GT(fixture_caller(), 0u);
  WrapperCall direct = g_wrapper_call;
  ASSERT_GT(fixture_helper_caller(), 0u);
  WrapperCall helper = g_wrapper_call;
  ASSERT_NE(direct.caller, helper.caller);
  r.put_alloc(Ring::alloc_tag(kTypePages), 0, direct.caller, 0x10000, 4096, 4096, 0, -1);
  r.put_alloc(Ring::alloc_tag(kTypePages), 1, helper.caller, 0x20000, 4096, 8192, 1, -1);
  std::string path = dump_to_file(r, "kmt_wrappers.log");
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = 0;
  const std::string file = "tests/host/test_trace_kmtrace.cpp:";
  const std::string expected =
      "allocinfo - version: 1.0\n#     <size>  <calls> <tag info>\n"
      "        4096        1 " +
      file + std::to_string(direct.line) +
      " func:fixture_caller \n"
      "        8192        1 " +
      file + std::to_string(helper.line) + " func:fixture_helper \n";
  for (const char* backend : {"libdw", "addr2line"}) {
    SCOPED_TRACE(backend);
    std::string env = std::string("KMTRACE_SYMBOLIZER=") + backend + " ";
    Result a = run_env(env, "allocinfo --source-root " KMTRACE_SOURCE_ROOT " --elf " + std::string(self) + " " + path);
    ASSERT_EQ(a.status, 0) << last_stderr();
    EXPECT_EQ(a.out, expected);
    // sites: the same lines, the function fixture_helper is inlined in,
    // no wrapper.
    Result j = run_env(env, "sites --json --elf " + std::string(self) + " " + path);
    for (int line : {direct.line, helper.line})
      EXPECT_NE(j.out.find("\"file\": \"" KMTRACE_SOURCE_ROOT "/" + file.substr(0, file.size() - 1) +
                           "\", \"line\": " + std::to_string(line)),
                std::string::npos)
          << j.out;
    size_t inlined_in = j.out.find("\"line\": " + std::to_string(helper.line) + ", \"inlined_in\": \"");
    EXPECT_NE(inlined_in, std::string::npos) << j.out;
    EXPECT_NE(j.out.find("fixture_helper_caller", inlined_in), std::string::npos) << j.out;
    EXPECT_EQ(j.out.find("_site"), std::string::npos) << j.out;
  }
}

// --device on a pseudo-terminal: the capture is waiting in the terminal's
// input; kmtrace sets raw mode, reads, and stops by itself at the dump's
// end frame (text after it is not waited for).
TEST(Kmtrace, LiveDeviceStopsAtTheEndFrame) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  std::string slave = ptsname(master);
  int keep = open(slave.c_str(), O_RDWR | O_NOCTTY);  // raw before any byte arrives
  ASSERT_GE(keep, 0);
  termios tio;
  ASSERT_EQ(tcgetattr(keep, &tio), 0);
  cfmakeraw(&tio);
  ASSERT_EQ(tcsetattr(keep, TCSANOW, &tio), 0);
  Synthetic syn;
  std::string cap = syn.capture();
  ASSERT_EQ(write(master, cap.data(), cap.size()), static_cast<ssize_t>(cap.size()));
  Result r = run("summary --json --quiet --device " + slave + " --baud 115200 --save " + tmp("saved.log"));
  close(keep);
  close(master);
  ASSERT_EQ(r.status, 0) << last_stderr();
  EXPECT_EQ(json_num(r.out, "events"), 10);
  EXPECT_EQ(json_num(r.out, "live_bytes"), 128 + 32 + 4096);
  // --save kept what was read (at least everything up to the end frame).
  std::string saved = read_file(tmp("saved.log"));
  EXPECT_EQ(saved.substr(0, 40), cap.substr(0, 40));
}

TEST(Kmtrace, TimelineOutputs) {
  Synthetic syn;
  std::string path = write_temp("kmt_tl.log", syn.capture());
  std::string dir = tmp("");
  Result r = run("timeline --perfetto " + dir + "tl.json --svg " + dir + "tl.svg --html " + dir + "tl.html " + path);
  ASSERT_EQ(r.status, 0) << last_stderr();
  std::string json = read_file(dir + "tl.json");
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\"", 0), 0u);
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"ph\": \"C\""), std::string::npos);
  // The last sample: live bytes per type at the end of the trace.
  EXPECT_NE(json.find("\"kmalloc\": 128, \"cache\": 32, \"pages\": 4096, \"vmem\": 0"), std::string::npos);
  std::string svg = read_file(dir + "tl.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(read_file(dir + "tl.html").find("<html>"), std::string::npos);
}

}  // namespace

// fixture_outer_site and fixture_inner_site, as if in a header in
// mm/include/mm/ (see CallSitesBehindArtificialWrappers); last in the file,
// since a #line cannot name this file again.
#line 1 "/magpie-fixture/mm/include/mm/kmtrace_fixture.h"
namespace {
[[gnu::always_inline, gnu::artificial]] inline uint64_t fixture_inner_site(int line) {
  return fixture_alloc_tagged(line);
}
[[gnu::always_inline, gnu::artificial]] inline uint64_t fixture_outer_site(int line) {
  return fixture_inner_site(line);
}
}  // namespace
