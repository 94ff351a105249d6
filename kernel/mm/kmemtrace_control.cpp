// SPDX-License-Identifier: Apache-2.0
// kmemtrace in the kernel: rings at boot, the bootargs and the console
// command. Design of the recording: trace/include/trace/kmemtrace.h.
//
// 1. Rings. One per CPU the DTB names, kmem_alloc'ed at boot (heap memory,
//    counted as such by meminfo), kmemtrace.ring bytes each. They exist
//    whether or not tracing is on, so `kmemtrace on` works at run time.
// 2. The console. Frames are written through a line buffer: a whole frame
//    line goes out in one console::write_raw, under the console lock, so
//    kprintf output from other cores lands between frames, never inside
//    one. At the default 4 KiB payload a frame line is about 4.3 KB, which
//    a real 115200-baud UART takes about 0.4 s to send, with interrupts
//    masked on the dumping core (as Linux's serial console does for a long
//    message).
// 3. Streaming. `kmemtrace stream on` drains the rings from the console's
//    idle hook on the shell's core: while the shell waits for input, every
//    wake-up (tick or interrupt) sends what was recorded since, and
//    consumes it, and goes on sending while more comes and no input waits.
//    Commands run on the shell's core hold the stream back until they
//    return; allocations on other cores stream meanwhile. The streamer is
//    a consumer like a dump (the reader lock; the rings' release/acquire
//    pairs in trace/include/trace/ring.h, The orderings); g_streaming is set
//    by the shell and read by its idle hook, both on the shell's core, in
//    thread context: no ordering to give.
// 4. Turning recording on and off, and clearing (kmemtrace::start, stop and clear below):
//    each says which cross-call orders what.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/kmemtrace_control.h>
#include <mm/hooks.h>
#include <mm/page.h>
#include <mm/kmemleak.h>
#include <kernel/percpu.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/static_branch.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include <mm/kmem.h>
#include <trace/kmemtrace.h>

namespace {

using ull = unsigned long long;

constexpr size_t kDefaultRing = 256 * 1024;
constexpr size_t kMinRing = 4 * 1024;
constexpr size_t kMaxRing = 64 * 1024 * 1024;

// Set once by setup() at boot, before the shell runs; read by commands on the
// shell's core (the boot core) afterwards.
size_t g_ring_capacity;
unsigned g_ring_cpus;  // CPUs 0 .. g_ring_cpus-1 have rings
bool g_streaming;      // the shell's core only (Streaming)

// Output goes out a line at a time, or a buffer's worth of a longer one
// (a frame line is about 1.04 x kDefaultPayload plus its header: several
// buffers; nothing else prints while a dump holds the console's shell).
// 1 KiB: a small board has no 8 KiB of .bss to spare for whole lines. Used
// only inside kmemtrace::dump, which serialises its callers.
struct LineBuffer {
  char buf[1024] = {};
  size_t n = 0;
  void flush() {
    if (n) console::write_raw(buf, n);
    n = 0;
  }
};
constinit LineBuffer g_line;

void line_sink(void* ctx, const void* data, size_t n) {
  auto* lb = static_cast<LineBuffer*>(ctx);
  const char* p = static_cast<const char*>(data);
  for (size_t i = 0; i < n; i++) {
    lb->buf[lb->n++] = p[i];
    if (p[i] == '\n' || lb->n == sizeof lb->buf) lb->flush();
  }
}

kmemtrace::frame::DumpResult dump_to_console(bool consume) {
  kmemtrace::frame::DumpResult r = kmemtrace::dump(line_sink, &g_line, consume);
  g_line.flush();
  return r;
}

bool anything_pending() {
  for (unsigned cpu = 0; cpu < g_ring_cpus; cpu++)
    if (kmemtrace::pending_bytes(cpu)) return true;
  return false;
}

// Drains while there is something to send and no input to read, at most
// kStreamRounds dumps per wake-up (a polled UART's input has no flag).
void stream_hook() {
  constexpr unsigned kStreamRounds = 64;
  for (unsigned i = 0; i < kStreamRounds && g_streaming && anything_pending() && !console::input_waiting(); i++)
    dump_to_console(true);
}

bool parse_ring_size(const char* s, size_t& out) {
  uint64_t v;
  if (!shell::parse_u64(s, v) || v < kMinRing || v > kMaxRing || (v & (v - 1))) return false;
  out = static_cast<size_t>(v);
  return true;
}

void print_state() {
  kprintf("kmemtrace: %s, abi_version %u, %u rings of %llu KiB%s\n", kmemtrace::enabled() ? "on" : "off",
          static_cast<unsigned>(kmemtrace::kAbiVersion), g_ring_cpus, (ull)(g_ring_capacity >> 10),
          g_streaming ? ", streaming" : "");
}


int cmd_stats() {
  print_state();
  kprintf("%-4s %10s %10s %10s %10s %8s  %-13s %-13s %-13s %s\n", "cpu", "recorded", "pending", "bytes", "overruns",
          "dropped", "kmalloc a/f", "cache a/f", "pages a/f", "vmem a/f");
  for (unsigned cpu = 0; cpu < g_ring_cpus; cpu++) {
    kmemtrace::CpuStats st;
    kmemtrace::TypeCounts tc;
    if (!kmemtrace::stats(cpu, st) || !kmemtrace::count_types(cpu, tc)) continue;
    uint64_t pending = tc.other;
    char col[kmemtrace::kTypeCount][24];
    for (unsigned t = 0; t < kmemtrace::kTypeCount; t++) {
      pending += tc.allocs[t] + tc.frees[t];
      ksnprintf(col[t], sizeof col[t], "%llu/%llu", (ull)tc.allocs[t], (ull)tc.frees[t]);
    }
    kprintf("%-4u %10llu %10llu %10llu %10llu %8llu  %-13s %-13s %-13s %s\n", cpu, (ull)st.ring.events, (ull)pending,
            (ull)(st.ring.committed - st.ring.consumed), (ull)st.ring.overrun_bytes, (ull)st.ring.dropped_events,
            col[0], col[1], col[2], col[3]);
  }
  kprintf("total_overruns %llu\n", (ull)kmemtrace::total_overruns());
  return 0;
}

int cmd_kmemtrace(int argc, char** argv) {
  const char* usage = "usage: kmemtrace on|off|clear|stats|dump [drain]|stream on|off";
  if (g_ring_cpus == 0) return shell::usage_error(argv[0], "no rings (see the boot log)");
  if (argc == 1 || (argc == 2 && strcmp(argv[1], "stats") == 0)) return cmd_stats();
  const char* sub = argv[1];
  if (argc == 2 && strcmp(sub, "on") == 0) {
    kmemtrace::start();
    print_state();
    return 0;
  }
  if (argc == 2 && strcmp(sub, "off") == 0) {
    kmemtrace::stop();
    print_state();
    return 0;
  }
  if (argc == 2 && strcmp(sub, "clear") == 0) {
    bool was_on = kmemtrace::enabled();
    kmemtrace::clear();
    if (was_on) kmemtrace::start();
    kprintf("kmemtrace: rings cleared (counters and overruns zeroed)\n");
    return 0;
  }
  if (strcmp(sub, "dump") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "drain") == 0))) {
    bool drain = argc == 3;
    kmemtrace::frame::DumpResult r = dump_to_console(drain);
    uint64_t milli = r.payload_bytes ? (r.chars * 1000 + r.payload_bytes / 2) / r.payload_bytes : 0;
    kprintf("kmemtrace: dump%s: %llu frames, %llu event bytes in %llu characters (x%llu.%03llu)\n",
            drain ? " (drained)" : "", (ull)r.frames, (ull)r.payload_bytes, (ull)r.chars, (ull)(milli / 1000),
            (ull)(milli % 1000));
    return 0;
  }
  if (argc == 3 && strcmp(sub, "stream") == 0) {
    if (strcmp(argv[2], "on") == 0) {
      if (!console::add_idle_hook(stream_hook)) return shell::usage_error(argv[0], "no idle hook slot left");
      g_streaming = true;
    } else if (strcmp(argv[2], "off") == 0) {
      g_streaming = false;
    } else {
      return shell::usage_error(argv[0], "stream takes on or off, not '%s'", argv[2]);
    }
    print_state();
    return 0;
  }
  return shell::usage_error(argv[0], "bad arguments (%s)", usage);
}

}  // namespace

namespace kmemtrace {

// The switch first, then the branches that lead to the recording code, and
// the reverse: recording code never runs with the switch off.
//
// Ordering on the way in: a core must see its ring as setup() or the last
// clear() left it before it records. The empty cross-call does that: each
// core takes the call with an acquire of what this core posted with a
// release (kernel/smp.cpp), after our ring stores, and records only after
// the call, since no site branches to the recording code before the
// patching below. The cross-call inside static_branch::set comes too late for
// this: ARM does not stop another core from executing a freshly patched
// site before its resynchronising call arrives, and its loads of the ring
// would then not be ordered after our stores.
void start() {
  // The call also writes each core's first clock anchor (trace/abi.h,
  // Sequence numbers), before the switch, so that it comes before every event
  // of the session in the core's ring (nothing records while the switch is
  // off).
  smp::call_on_all([](void*) { clock_anchor(); }, nullptr);
  enable();
  mm::alloc_hooks_set(mm::kFeatureKmemtrace, true);
}

void tick() { clock_tick(); }
void stop() {
  mm::alloc_hooks_set(mm::kFeatureKmemtrace, false);
  disable();
}

// Before the reset every CPU has left any recording call that saw tracing
// on: each runs an empty cross-call, which a secondary takes only from its
// idle loop, between allocations (an interrupt handler's allocation has
// returned by then), and the calling core is here. The call also orders
// each core's last ring stores (its release when done, our acquire when we
// wait for it) before reset() rewrites the rings; enable() orders the reset
// before the next event each core records.
void clear() {
  stop();
  smp::call_on_all([](void*) {}, nullptr);
  reset();
}

size_t ring_capacity() { return g_ring_capacity; }

void setup_rings() {
  // Each CPU's ring: kDefaultRing, or a 64th of RAM where that is less (a
  // board with 256 KiB of RAM: 4 KiB), unless kmemtrace.ring= says.
  size_t cap = kDefaultRing;
  while (cap > kMinRing && (uint64_t{cap} << 6) > mm::page_ram_bytes()) cap >>= 1;
  const size_t ram_default = cap;
  char buf[32];
  if (boot::arg_value("kmemtrace.ring", buf, sizeof buf) && !parse_ring_size(buf, cap)) {
    kprintf("kmemtrace: kmemtrace.ring=%s is not a power of two from 4K to 64M; using %llu KiB\n", buf,
            (ull)(ram_default >> 10));
    cap = ram_default;
  }
  // Every slot's ring header, whether or not its ring gets memory (one
  // without drops its events: its header says it is full).
  for (unsigned cpu = 0; cpu < kMaxCpus; cpu++) g_percpu[cpu].trace_ring = kmemtrace::ring_header(cpu);
  unsigned cpus = g_boot.cpu_count < kmemtrace::max_cpus() ? g_boot.cpu_count : kmemtrace::max_cpus();
  size_t bytes = kmemtrace::Ring::bytes_for(cap);
  for (unsigned cpu = 0; cpu < cpus; cpu++) {
    void* mem = kmem_alloc(bytes, KM_NOSLEEP);
    // The rings hold a copy of every recent pointer: never a leak-scanner
    // object nor a source of references.
    if (mem) kmemleak_ignore(mem);
    if (!mem || !kmemtrace::init_cpu(cpu, mem, bytes)) {
      if (mem) kmem_free(mem, bytes);
      kprintf("kmemtrace: no memory for the ring of cpu %u (%llu KiB); cpus from %u drop their events\n", cpu,
              (ull)(bytes >> 10), cpu);
      break;
    }
    g_ring_cpus = cpu + 1;
  }
  g_ring_capacity = g_ring_cpus ? cap : 0;
  kmemtrace::set_boot_id(static_cast<uint32_t>(arch::cycles() ^ (timer::now_ns() << 7)));
  bool on = false;
  if (boot::arg_value("kmemtrace", buf, sizeof buf)) {  // a bare "kmemtrace" has the value ""
    if (buf[0] == 0 || strcmp(buf, "on") == 0) on = true;
    else if (strcmp(buf, "off") != 0) kprintf("kmemtrace: kmemtrace=%s: expected on or off; off\n", buf);
  }
  if (!static_branch::init()) kprintf("kmemtrace: no address space to patch the allocators' branches with\n");
  if (on && g_ring_cpus) start();
  print_state();
}

}  // namespace kmemtrace

SHELL_COMMAND(kmemtrace, "allocation event trace: kmemtrace on|off|clear|stats|dump [drain]|stream on|off",
              cmd_kmemtrace);
