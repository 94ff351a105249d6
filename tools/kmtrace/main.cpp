// SPDX-License-Identifier: Apache-2.0
// kmtrace: reads kmemtrace dumps (a console capture, a live serial port or
// raw per-CPU ABI files) and reports on them. `kmtrace --help` for usage.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "allocinfo.h"
#include "analysis.h"
#include "render.h"
#include "symbolize.h"

namespace {

using namespace kmtrace;

constexpr int kExitOk = 0, kExitDamaged = 1, kExitBad = 2;

const char kUsage[] =
    "usage: kmtrace COMMAND [OPTIONS] INPUT...\n"
    "\n"
    "Reads kmemtrace dumps: the frames `kmemtrace dump` writes on the kernel's\n"
    "serial console, found anywhere in a capture of it (QEMU stdout, picocom\n"
    "--logfile, screen -L, ...), or raw per-CPU ABI streams.\n"
    "\n"
    "commands:\n"
    "  summary [--json]            counts, bytes, live objects, per-CPU events\n"
    "  sites --elf KERNEL.ELF      per allocation call site: function, file:line,\n"
    "        [--json] [--top N]    counts, bytes, internal fragmentation, live\n"
    "  live [--elf KERNEL.ELF]     allocations never freed, grouped by site\n"
    "        [--json] [--top N]\n"
    "  allocinfo --elf KERNEL.ELF  the kernel's `allocinfo` table (Linux's\n"
    "        [--sort bytes|calls]  /proc/allocinfo format) of the objects live\n"
    "        [--top N] [--nonzero] at the end, by call site: file, line, then\n"
    "        [--source-root DIR]   function order, or --sort's field, largest\n"
    "                              first; every line unless --top; --nonzero\n"
    "                              changes nothing here (no line has 0 calls);\n"
    "                              file names without DIR/ (default: the source\n"
    "                              tree the ELF's DWARF shows; see README)\n"
    "  timeline --perfetto OUT.json | --html OUT.html | --svg OUT.svg\n"
    "        [--elf KERNEL.ELF]    live bytes over time, per type and for the\n"
    "                              top sites (Perfetto/Chrome trace-event JSON,\n"
    "                              or a self-contained picture)\n"
    "\n"
    "input:\n"
    "  FILE | -                    a console capture (- reads stdin)\n"
    "  --device TTY [--baud N]     read a serial port (raw mode, default 115200)\n"
    "        [--save FILE]         until a dump's end frame or Ctrl-C; --save\n"
    "                              keeps a copy of everything received\n"
    "  --raw CPU_FILE...           raw ABI streams, one per CPU (cpu0 cpu1 ...:\n"
    "        [--big-endian]        the CPU is the number ending the file name,\n"
    "                              else the position)\n"
    "\n"
    "options:\n"
    "  --progress                  show progress on stderr (default: when it is a\n"
    "                              terminal); --quiet: never, and no warnings\n"
    "  -h, --help                  this text\n"
    "\n"
    "exit status:\n"
    "  0  the input was read whole and the report written\n"
    "  1  the report was written, but the input was damaged: frames with bad\n"
    "     CRCs or characters, missing frames (stream gaps), frames of another\n"
    "     abi_version, truncated events (warnings on stderr say which)\n"
    "  2  bad usage, unreadable input, or no kmemtrace data in it (nothing\n"
    "     written)\n";

struct Options {
  std::string command;
  bool json = false;
  std::string elf;
  size_t top = 0;    // 0: not given (sites, live: 30; allocinfo: every line)
  std::string sort;  // allocinfo: "", "bytes" or "calls"
  bool nonzero = false;
  std::string source_root;
  bool source_root_given = false;
  std::string perfetto, html, svg;
  std::vector<std::string> inputs;
  std::string device;
  int baud = 115200;
  std::string save;
  bool raw = false;
  bool big_endian = false;
  int progress = -1;  // -1: when stderr is a terminal
  bool quiet = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  fprintf(stderr, "kmtrace: %s\n(kmtrace --help for usage)\n", msg.c_str());
  exit(kExitBad);
}

volatile sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

class Progress {
 public:
  Progress(bool on, uint64_t total) : on_(on), total_(total) {}
  void update(uint64_t done, const kmemtrace::CaptureStats& st) {
    if (!on_) return;
    double t = now();
    if (t - last_ < 0.2) return;
    last_ = t;
    if (total_)
      fprintf(stderr, "\rkmtrace: %.1f / %.1f MiB, %llu frames", static_cast<double>(done) / 1048576.0,
              static_cast<double>(total_) / 1048576.0, static_cast<unsigned long long>(st.frames));
    else
      fprintf(stderr, "\rkmtrace: %.1f MiB, %llu frames", static_cast<double>(done) / 1048576.0,
              static_cast<unsigned long long>(st.frames));
    shown_ = true;
  }
  void done() {
    if (shown_) fprintf(stderr, "\n");
    shown_ = false;
  }

 private:
  bool on_;
  uint64_t total_;
  double last_ = 0;
  bool shown_ = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto value = [&](size_t& i) -> std::string {
    if (i + 1 >= args.size()) usage_error(args[i] + " needs a value");
    return args[++i];
  };
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      exit(kExitOk);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--elf") {
      o.elf = value(i);
    } else if (a == "--top") {
      std::string v = value(i);
      errno = 0;
      unsigned long n = strtoul(v.c_str(), nullptr, 10);
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || n == 0 || errno == ERANGE)
        usage_error("--top needs a positive number, not '" + v + "'");
      o.top = n;
    } else if (a == "--sort") {
      o.sort = value(i);
      if (o.sort != "bytes" && o.sort != "calls") usage_error("--sort takes bytes or calls, not '" + o.sort + "'");
    } else if (a == "--nonzero") {
      o.nonzero = true;
    } else if (a == "--source-root") {
      o.source_root = value(i);
      o.source_root_given = true;
    } else if (a == "--perfetto") {
      o.perfetto = value(i);
    } else if (a == "--html") {
      o.html = value(i);
    } else if (a == "--svg") {
      o.svg = value(i);
    } else if (a == "--device") {
      o.device = value(i);
    } else if (a == "--baud") {
      std::string v = value(i);
      o.baud = atoi(v.c_str());
      if (o.baud <= 0) usage_error("--baud needs a number, not '" + v + "'");
    } else if (a == "--save") {
      o.save = value(i);
    } else if (a == "--raw") {
      o.raw = true;
    } else if (a == "--big-endian") {
      o.big_endian = true;
    } else if (a == "--progress") {
      o.progress = 1;
    } else if (a == "--quiet") {
      o.quiet = true;
      o.progress = 0;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown option '" + a + "'");
    } else if (o.command.empty()) {
      o.command = a;
    } else {
      o.inputs.push_back(a);
    }
  }
  static const std::set<std::string> commands = {"summary", "sites", "live", "allocinfo", "timeline"};
  if (o.command.empty()) usage_error("no command given");
  if (!commands.count(o.command)) usage_error("unknown command '" + o.command + "'");
  if (o.command == "sites" && o.elf.empty()) usage_error("sites needs --elf KERNEL.ELF");
  if (o.command == "allocinfo" && o.elf.empty()) usage_error("allocinfo needs --elf KERNEL.ELF");
  if (o.command == "allocinfo" && o.json) usage_error("allocinfo has no --json: it prints the kernel's table");
  if (o.command != "allocinfo" && (!o.sort.empty() || o.nonzero || o.source_root_given))
    usage_error("--sort, --nonzero and --source-root are for allocinfo");
  if (o.command == "timeline" && o.perfetto.empty() && o.html.empty() && o.svg.empty())
    usage_error("timeline needs --perfetto, --html or --svg");
  int sources = (!o.device.empty()) + (o.raw ? 1 : 0) + (!o.raw && !o.inputs.empty());
  if (!o.device.empty() && !o.inputs.empty()) usage_error("--device takes no input files");
  if (o.raw && o.inputs.empty()) usage_error("--raw needs per-CPU files");
  if (sources == 0) usage_error("no input (a capture file, -, --device or --raw)");
  if (!o.raw && !o.device.empty() && o.big_endian) usage_error("--big-endian is for --raw input");
  if (o.progress < 0) o.progress = isatty(2) ? 1 : 0;
  return o;
}

bool read_capture_fd(int fd, kmemtrace::CaptureReader& r, Progress& pr, FILE* save, std::string* err) {
  std::vector<uint8_t> buf(1 << 20);
  uint64_t done = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = strerror(errno);
      return false;
    }
    if (n == 0) break;
    r.feed(buf.data(), static_cast<size_t>(n));
    if (save) fwrite(buf.data(), 1, static_cast<size_t>(n), save);
    done += static_cast<uint64_t>(n);
    pr.update(done, r.stats());
  }
  return true;
}

speed_t baud_constant(int baud) {
  switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 115200: return B115200;
    case 230400: return B230400;
    case 460800: return B460800;
    case 500000: return B500000;
    case 576000: return B576000;
    case 921600: return B921600;
    case 1000000: return B1000000;
    case 1500000: return B1500000;
    case 2000000: return B2000000;
    case 3000000: return B3000000;
    case 4000000: return B4000000;
    default: return 0;
  }
}

// Reads a serial port in raw mode until a dump's end frame or Ctrl-C.
int read_device(const Options& o, kmemtrace::CaptureReader& r) {
  speed_t speed = baud_constant(o.baud);
  if (!speed) usage_error("unsupported --baud " + std::to_string(o.baud));
  int fd = open(o.device.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    fprintf(stderr, "kmtrace: %s: %s\n", o.device.c_str(), strerror(errno));
    return kExitBad;
  }
  termios tio;
  bool is_tty = tcgetattr(fd, &tio) == 0;
  if (is_tty) {
    cfmakeraw(&tio);  // no echo, no line discipline, 8 bits, no CR/LF mapping
    tio.c_cflag |= CLOCAL | CREAD;
    tio.c_cflag &= ~static_cast<tcflag_t>(CRTSCTS);
    tio.c_iflag &= ~static_cast<tcflag_t>(IXON | IXOFF | IXANY);
    tio.c_cc[VMIN] = 1;
    tio.c_cc[VTIME] = 0;
    cfsetispeed(&tio, speed);
    cfsetospeed(&tio, speed);
    if (tcsetattr(fd, TCSANOW, &tio) != 0) {
      fprintf(stderr, "kmtrace: %s: cannot set raw mode: %s\n", o.device.c_str(), strerror(errno));
      close(fd);
      return kExitBad;
    }
  }
  FILE* save = nullptr;
  if (!o.save.empty() && !(save = fopen(o.save.c_str(), "wb"))) {
    fprintf(stderr, "kmtrace: %s: %s\n", o.save.c_str(), strerror(errno));
    close(fd);
    return kExitBad;
  }
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: poll returns EINTR
  if (!o.quiet)
    fprintf(stderr, "kmtrace: reading %s at %d baud; run `kmemtrace dump` on the console (Ctrl-C stops)\n",
            o.device.c_str(), o.baud);
  Progress pr(o.progress, 0);
  std::vector<uint8_t> buf(65536);
  uint64_t done = 0;
  int status = kExitOk;
  while (!g_interrupted && !r.saw_end()) {
    pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, 500);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "kmtrace: %s: %s\n", o.device.c_str(), strerror(errno));
      status = kExitBad;
      break;
    }
    if (n <= 0) continue;
    ssize_t got = read(fd, buf.data(), buf.size());
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) {
      if (got < 0) fprintf(stderr, "kmtrace: %s: %s\n", o.device.c_str(), strerror(errno));
      break;  // EOF (a pipe or file) or error
    }
    r.feed(buf.data(), static_cast<size_t>(got));
    if (save) fwrite(buf.data(), 1, static_cast<size_t>(got), save);
    done += static_cast<uint64_t>(got);
    pr.update(done, r.stats());
  }
  pr.done();
  if (g_interrupted && !o.quiet) fprintf(stderr, "kmtrace: interrupted; reading what arrived\n");
  if (save) fclose(save);
  close(fd);
  return status;
}

std::vector<uint8_t> slurp(const std::string& path, std::string* err) {
  std::vector<uint8_t> out;
  int fd = path == "-" ? 0 : open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    *err = strerror(errno);
    return out;
  }
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *err = strerror(errno);
      break;
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  if (fd) close(fd);
  return out;
}

int cpu_from_name(const std::string& path, int fallback) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  size_t end = base.size(), start = end;
  while (start > 0 && isdigit(static_cast<unsigned char>(base[start - 1]))) start--;
  if (start == end || end - start > 4) return fallback;
  return atoi(base.c_str() + start);
}

bool write_file(const std::string& path, const std::string& data) {
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) {
    fprintf(stderr, "kmtrace: %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = fclose(f) == 0 && ok;
  if (!ok) fprintf(stderr, "kmtrace: %s: write failed\n", path.c_str());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  kmemtrace::Trace trace;

  if (o.raw) {
    std::vector<std::pair<uint16_t, std::vector<uint8_t>>> cpus;
    std::set<int> seen;
    for (size_t i = 0; i < o.inputs.size(); i++) {
      std::string err;
      auto bytes = slurp(o.inputs[i], &err);
      if (!err.empty()) {
        fprintf(stderr, "kmtrace: %s: %s\n", o.inputs[i].c_str(), err.c_str());
        return kExitBad;
      }
      int cpu = cpu_from_name(o.inputs[i], static_cast<int>(i));
      if (cpu > 0xfffe || !seen.insert(cpu).second) usage_error("two raw files for cpu " + std::to_string(cpu));
      cpus.push_back({static_cast<uint16_t>(cpu), std::move(bytes)});
    }
    trace = kmemtrace::read_raw(cpus, o.big_endian ? kmemtrace::Endian::kBig : kmemtrace::Endian::kLittle);
    uint64_t total = 0;
    for (auto& [cpu, n] : trace.stream_bytes) total += n;
    if (total && trace.events.empty() && trace.parse.unknown_events + trace.parse.unknown_types == 0) {
      fprintf(stderr, "kmtrace: no kmemtrace events in the raw files (not ABI streams, or the wrong byte order?)\n");
      return kExitBad;
    }
  } else {
    kmemtrace::CaptureReader reader;
    if (!o.device.empty()) {
      int rc = read_device(o, reader);
      if (rc != kExitOk) return rc;
    } else {
      for (const std::string& in : o.inputs) {
        int fd = in == "-" ? 0 : open(in.c_str(), O_RDONLY);
        if (fd < 0) {
          fprintf(stderr, "kmtrace: %s: %s\n", in.c_str(), strerror(errno));
          return kExitBad;
        }
        off_t size = lseek(fd, 0, SEEK_END);
        if (size > 0) lseek(fd, 0, SEEK_SET);
        Progress pr(o.progress, size > 0 ? static_cast<uint64_t>(size) : 0);
        std::string err;
        bool ok = read_capture_fd(fd, reader, pr, nullptr, &err);
        pr.done();
        if (fd) close(fd);
        if (!ok) {
          fprintf(stderr, "kmtrace: %s: %s\n", in.c_str(), err.c_str());
          return kExitBad;
        }
      }
    }
    reader.finish();
    trace = reader.assemble();
    const std::string what = o.device.empty() ? (o.inputs.size() == 1 ? o.inputs[0] : "the input") : o.device;
    if (!trace.have_frames) {
      auto& st = reader.stats();
      if (st.rejected_frames) {
        for (auto& line : damage_report(trace)) fprintf(stderr, "kmtrace: %s\n", line.c_str());
        fprintf(stderr, "kmtrace: %s: no frames this kmtrace can read\n", what.c_str());
      } else if (st.bad_frames) {
        fprintf(stderr, "kmtrace: %s: %llu kmemtrace frame(s), all damaged\n", what.c_str(),
                static_cast<unsigned long long>(st.bad_frames));
      } else {
        fprintf(stderr,
                "kmtrace: %s: no kmemtrace frames found (%llu bytes, %llu lines): not a capture of "
                "`kmemtrace dump`\n",
                what.c_str(), static_cast<unsigned long long>(st.bytes), static_cast<unsigned long long>(st.lines));
      }
      return kExitBad;
    }
  }

  if (!o.quiet)
    for (auto& line : damage_report(trace)) fprintf(stderr, "kmtrace: warning: %s\n", line.c_str());

  SymbolMap syms;
  std::string source_root = o.source_root;
  if (!o.elf.empty()) {
    std::string err;
    auto sym = Symbolizer::open(o.elf, &err);
    if (!sym) {
      fprintf(stderr, "kmtrace: %s\n", err.c_str());
      return kExitBad;
    }
    std::set<uint64_t> callers;
    for (auto& e : trace.events)
      if (e.event_id == kmemtrace::kEventAlloc) callers.insert(e.caller);
    syms = sym->lookup(std::vector<uint64_t>(callers.begin(), callers.end()));
    if (o.command == "allocinfo" && !o.source_root_given) {
      source_root = kmtrace::source_root(sym->compile_units());
      if (source_root.empty() && !o.quiet)
        fprintf(stderr,
                "kmtrace: warning: %s: cannot tell its source root from its DWARF (%s backend); "
                "file names as the DWARF has them (--source-root DIR)\n",
                o.elf.c_str(), sym->backend());
    }
  }

  Summary sum = summarize(trace);
  std::string out;
  const size_t top = o.top ? o.top : 30;  // sites, live
  if (o.command == "summary") {
    out = o.json ? summary_json(sum, trace) : summary_text(sum, trace);
  } else if (o.command == "sites") {
    auto s = sites(trace);
    out = o.json ? sites_json(s, syms, top) : sites_text(s, syms, top);
  } else if (o.command == "live") {
    auto s = sites(trace);
    out = o.json ? live_json(s, syms, top) : live_text(s, syms, top);
  } else if (o.command == "allocinfo") {
    AllocinfoOptions ao;
    ao.source_root = source_root;
    ao.sort = o.sort == "bytes"   ? AllocinfoSort::kBytes
              : o.sort == "calls" ? AllocinfoSort::kCalls
                                  : AllocinfoSort::kSite;
    ao.top = o.top;
    ao.nonzero = o.nonzero;
    out = allocinfo_text(allocinfo(sites(trace), syms, ao));
  } else if (o.command == "timeline") {
    Timeline tl = timeline(trace, 5, 2000);
    if (!o.perfetto.empty()) {
      Timeline fine = timeline(trace, 5, 20000);
      if (!write_file(o.perfetto, timeline_perfetto(fine, trace, syms))) return kExitBad;
    }
    if (!o.svg.empty() && !write_file(o.svg, timeline_svg(tl, syms))) return kExitBad;
    if (!o.html.empty() && !write_file(o.html, timeline_html(tl, sum, trace, syms))) return kExitBad;
  }
  fwrite(out.data(), 1, out.size(), stdout);
  if (fflush(stdout) != 0) return kExitBad;
  return damaged(trace) ? kExitDamaged : kExitOk;
}
