// SPDX-License-Identifier: Apache-2.0
// kmemleak in the kernel: the `kmemleak` shell command (Linux's debugfs
// commands, plus mark/since/summary and a test), its bootargs and periodic
// scans. The scanner is mm/kmemleak.cpp.
//
// Bootargs: kmemleak=on|off (default off), kmemleak.scan=SECS (periodic
// scans, default off), kmemleak.min_age=MS (default 5000).
//
// Reports follow Linux's print_unreferenced; frames are raw addresses
// (pipe the console through tools/symbolize BOARD for function and line).
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/kmemleak_control.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <mm/page.h>
#include <mm/stackdepot.h>
#include <atomic>

namespace {

using ull = unsigned long long;

constexpr unsigned kScreenful = 20;  // more reports than this: the summary is shown
unsigned g_scan_secs;                // periodic scans (0: off)
uint64_t g_last_scan_ns;

bool parse_on_off(const char* s, bool& on) {
  if (strcmp(s, "on") == 0) on = true;
  else if (strcmp(s, "off") == 0) on = false;
  else return false;
  return true;
}

void print_scan(size_t new_reports) {
  mm::LeakScanStats st;
  mm::kmemleak_last_scan(st);
  kprintf(
      "kmemleak: scan %llu: %llu.%03llu ms, longest pause %llu.%03llu ms, %llu bytes scanned, %llu objects, "
      "%llu unreferenced\n",
      (ull)st.scans, (ull)(st.duration_ns / 1000000), (ull)(st.duration_ns / 1000 % 1000), (ull)(st.pause_ns / 1000000),
      (ull)(st.pause_ns / 1000 % 1000), (ull)st.bytes_scanned, (ull)st.objects, (ull)st.unreferenced);
  if (st.untracked_objects || st.untracked_slabs)
    kprintf(
        "kmemleak: %llu objects in %llu slabs untracked (no memory for their records): scanned as roots, not "
        "reported\n",
        (ull)st.untracked_objects, (ull)st.untracked_slabs);
  if (new_reports) kprintf("kmemleak: %zu new suspected memory leaks (see: kmemleak)\n", new_reports);
}

// Linux's hex_dump_to_buffer(rowsize 16, groupsize 1, ascii): the ASCII
// column starts at 16 * 2 + 16 + 1 = 49.
void hex_dump(const uint8_t* p, size_t n) {
  for (size_t row = 0; row < n; row += 16) {
    char line[80];
    size_t len = 0;
    size_t m = n - row < 16 ? n - row : 16;
    for (size_t i = 0; i < m; i++) {
      const char* hex = "0123456789abcdef";
      if (i) line[len++] = ' ';
      line[len++] = hex[p[row + i] >> 4];
      line[len++] = hex[p[row + i] & 15];
    }
    while (len < 49) line[len++] = ' ';
    for (size_t i = 0; i < m; i++) {
      uint8_t c = p[row + i];
      line[len++] = c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '.';
    }
    line[len] = 0;
    kprintf("    %s\n", line);
  }
}

void print_frames(uint32_t stack, const char* indent) {
  const uintptr_t* pcs;
  unsigned n = mm::stackdepot_fetch(stack, &pcs);
  for (unsigned i = 0; i < n; i++) kprintf("%s[<0x%llx>]\n", indent, (ull)pcs[i]);
}

void print_object(const mm::LeakObject& o, const char* header) {
  kprintf("%s 0x%llx (size %zu):\n", header, (ull)o.start, o.size);
  kprintf("  comm \"cpu%u\", pid 0, jiffies %llu\n", o.cpu, (ull)o.ticks);
  size_t n = o.size < sizeof o.head ? o.size : sizeof o.head;
  kprintf("  hex dump (first %zu bytes):\n", n);
  hex_dump(o.head, n);
  if (o.stack) {
    kprintf("  backtrace (crc %x):\n", static_cast<unsigned>(o.crc));
    print_frames(o.stack, "    ");
  } else {
    kprintf("  backtrace: not recorded (crc %x)\n", static_cast<unsigned>(o.crc));
  }
}

void print_groups(const mm::LeakGroup* g, size_t n, size_t total, const char* what) {
  kprintf("%-10s %12s  %-20s %-18s %s\n", "count", "bytes", "kind", "example", "backtrace");
  for (size_t i = 0; i < n; i++) {
    kprintf("%-10llu %12llu  %-20s 0x%-16llx", (ull)g[i].count, (ull)g[i].bytes, g[i].kind, (ull)g[i].example);
    if (!g[i].stack) {
      kprintf(" not recorded\n");
      continue;
    }
    kprintf("\n");
    print_frames(g[i].stack, "             ");
  }
  if (total > n) kprintf("(%zu more %s)\n", total - n, what);
  kprintf("%zu %s\n", total, what);
}

// The shell's core only (one command at a time). They hold objects'
// addresses (LeakObject::start, LeakGroup::example) and lie in .bss, which
// the scanner reads as a root: cmd_kmemleak clears them after each command,
// or every object a listing showed would be referenced from here at the next
// scan and leave the reports (the listed leaks vanished after one
// `kmemleak all` until this).
mm::LeakGroup g_groups[32];
mm::LeakObject g_objs[16];

int show_reports(bool all) {
  size_t shown = 0;
  for (size_t skip = 0;; skip += 16) {
    size_t n = mm::kmemleak_reports(g_objs, 16, skip);
    if (!all && skip == 0 && n == 16) {
      // More than a screenful: count them; show the summary if so.
      size_t total = 16;
      for (size_t s = 16;; s += 16) {
        size_t m = mm::kmemleak_reports(g_objs, 16, s);
        total += m;
        if (m < 16) break;
      }
      if (total > kScreenful) {
        size_t groups = mm::kmemleak_summary(g_groups, 32);
        print_groups(g_groups, groups < 32 ? groups : 32, groups, "distinct backtraces");
        kprintf("kmemleak: %zu reports (kmemleak all lists each)\n", total);
        return 0;
      }
      n = mm::kmemleak_reports(g_objs, 16, 0);
    }
    for (size_t i = 0; i < n; i++) print_object(g_objs[i], "unreferenced object");
    shown += n;
    if (n < 16) break;
  }
  if (!shown) kprintf("kmemleak: no suspected leaks%s\n", mm::kmemleak_enabled() ? "" : " (kmemleak is off)");
  return 0;
}

void periodic_scan() {
  if (!g_scan_secs || !mm::kmemleak_enabled()) return;
  uint64_t now = timer::now_ns();
  if (now - g_last_scan_ns < uint64_t{g_scan_secs} * 1000000000ull) return;
  g_last_scan_ns = now;
  print_scan(kmemleak_scan());
}

// --- kmemleak test (Linux's kmemleak-test, in a command) -----------------------
struct TestNode {
  TestNode* next;
  uint64_t payload[7];
};
// Reachable from .bss (one directly, one through an interior pointer).
void* g_test_root;
char* g_test_interior;
std::atomic<bool> g_test_hold{false};
kmem_cache_t* g_test_cache;

// Holds an object in a register and on its stack while it spins: only
// another core's stack references it. Until 'kmemleak test done', or until
// another cross-call needs this core (it lets go then: the object is
// leaked from then on, and says so).
void hold_on_stack(void* arg) {
  void* volatile held = arg;
  while (g_test_hold.load(std::memory_order_acquire)) {
    if (smp::another_call_waits()) {
      g_test_hold.store(false, std::memory_order_relaxed);  // a next 'kmemleak test' holds again
      kprintf("kmemleak test: cpu %u let go of 0x%llx for another cross-call: it leaks from now on\n", cpu_id(),
              (ull) reinterpret_cast<uintptr_t>(arg));
      break;
    }
    asm volatile("" ::"r"(arg) : "memory");
  }
  (void)held;
}

// Each leaked object comes from its own function, which is what its report's
// backtrace names (no tail calls: the allocation's return address is in it).
template <typename T>
__attribute__((always_inline)) inline T kept(T p) {
  asm volatile("" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* leak_lone() { return kept(kmem_alloc(72, KM_SLEEP)); }
__attribute__((noinline)) void* leak_cached() { return kept(kmem_cache_alloc(g_test_cache, KM_SLEEP)); }
__attribute__((noinline)) void* leak_large() { return kept(kmem_alloc(40000, KM_SLEEP)); }
__attribute__((noinline)) void* leak_cycle_member() { return kept(kmem_zalloc(sizeof(TestNode), KM_SLEEP)); }
__attribute__((noinline)) void* leak_outer() { return kept(kmem_zalloc(200, KM_SLEEP)); }
__attribute__((noinline)) void* leak_inner() { return kept(kmem_zalloc(32, KM_SLEEP)); }

void say_leaked(const char* what, const void* p) {
  kprintf("kmemleak test: leaked 0x%llx (%s)\n", (ull) reinterpret_cast<uintptr_t>(p), what);
}

__attribute__((noinline)) int test_start() {
  if (!mm::kmemleak_enabled()) {
    kprintf("kmemleak test: kmemleak is off (kmemleak on, or boot with kmemleak=on)\n");
    return 1;
  }
  if (!g_test_cache)
    g_test_cache = kmem_cache_create("kmemleak_test", 96, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  // Reachable: from .bss, through an interior pointer, from a per-CPU word,
  // from another core's stack.
  g_test_root = kmem_alloc(64, KM_SLEEP);
  g_test_interior = static_cast<char*>(kmem_alloc(256, KM_SLEEP)) + 100;
  this_cpu().test_slot = reinterpret_cast<uintptr_t>(kmem_alloc(48, KM_SLEEP));
  unsigned holder = 0;
  if (g_cpu_count > 1 && !g_test_hold.load()) {
    g_test_hold.store(true, std::memory_order_release);
    void* held = kmem_alloc(128, KM_SLEEP);
    for (unsigned c = 1; c < g_cpu_count && !holder; c++)
      if (smp::call_async(c, hold_on_stack, held)) holder = c;
    if (!holder) g_test_hold.store(false);
  }
  kprintf("kmemleak test: kept 0x%llx (.bss), 0x%llx (interior pointer), 0x%llx (cpu %u's per-CPU word)%s\n",
          (ull) reinterpret_cast<uintptr_t>(g_test_root), (ull) reinterpret_cast<uintptr_t>(g_test_interior),
          (ull)this_cpu().test_slot, cpu_id(), holder ? ", and one on another core's stack" : "");
  if (holder) kprintf("kmemleak test: cpu %u holds an object on its stack until 'kmemleak test done'\n", holder);
  // Leaked: lone objects, a cycle, one referenced only from a leaked one.
  say_leaked("kmem_alloc 72, by leak_lone", leak_lone());
  say_leaked("kmemleak_test cache, by leak_cached", leak_cached());
  say_leaked("kmem_alloc 40000, by leak_large", leak_large());
  auto* a = static_cast<TestNode*>(leak_cycle_member());
  auto* b = static_cast<TestNode*>(leak_cycle_member());
  a->next = b;
  b->next = a;
  say_leaked("cycle member, by leak_cycle_member", a);
  say_leaked("cycle member, by leak_cycle_member", b);
  auto* outer = static_cast<void**>(leak_outer());
  *outer = leak_inner();
  say_leaked("kmem_zalloc 200, by leak_outer", outer);
  say_leaked("kmem_zalloc 32 referenced only from a leaked object, by leak_inner", *outer);
  kprintf("kmemleak test: 7 objects leaked; reported at the second scan that is %u ms or more later\n",
          mm::kmemleak_min_age_ms());
  return 0;
}

int test_done() {
  g_test_hold.store(false, std::memory_order_release);
  kprintf("kmemleak test: released (the leaked objects stay leaked: kmemleak clear)\n");
  return 0;
}

int run_kmemleak(int argc, char** argv) {
  const char* usage =
      "usage: kmemleak [all|scan|clear|on|off|stack=on|off|backtrace=on|off|scan=on|off|SECS|min_age=MS|"
      "dump=ADDR|mark|since N [unreferenced]|summary|memory|test [done]]";
  if (argc == 1) return show_reports(false);
  const char* a = argv[1];
  if (argc == 2 && strcmp(a, "all") == 0) return show_reports(true);
  if (argc == 2 && strcmp(a, "scan") == 0) {
    if (!mm::kmemleak_enabled()) return shell::usage_error(argv[0], "kmemleak is off (kmemleak on)");
    print_scan(kmemleak_scan());
    return 0;
  }
  if (argc == 2 && strcmp(a, "clear") == 0) {
    if (!mm::kmemleak_enabled()) return shell::usage_error(argv[0], "kmemleak is off: there are no reports to clear");
    kprintf("kmemleak: %zu reports cleared: they are not reported again\n", mm::kmemleak_clear());
    return 0;
  }
  if (argc == 2 && (strcmp(a, "on") == 0 || strcmp(a, "off") == 0)) {
    kmemleak_enable(a[1] == 'n');
    kprintf("kmemleak: %s\n", mm::kmemleak_enabled() ? "on" : "off");
    return 0;
  }
  if (argc == 2 && strncmp(a, "stack=", 6) == 0) {
    bool on;
    if (!parse_on_off(a + 6, on)) return shell::usage_error(argv[0], "stack= takes on or off");
    mm::kmemleak_set_stack_scan(on);
    return 0;
  }
  if (argc == 2 && strncmp(a, "backtrace=", 10) == 0) {
    bool on;
    if (!parse_on_off(a + 10, on)) return shell::usage_error(argv[0], "backtrace= takes on or off");
    mm::kmemleak_set_backtraces(on);
    return 0;
  }
  if (argc == 2 && strncmp(a, "scan=", 5) == 0) {
    bool on;
    uint64_t secs;
    if (parse_on_off(a + 5, on)) g_scan_secs = on ? 600 : 0;
    else if (shell::parse_u64(a + 5, secs) && secs <= 86400) g_scan_secs = static_cast<unsigned>(secs);
    else return shell::usage_error(argv[0], "scan= takes on, off or a number of seconds up to 86400");
    kprintf("kmemleak: periodic scans %s", g_scan_secs ? "every " : "off");
    if (g_scan_secs) kprintf("%u s", g_scan_secs);
    kprintf("\n");
    return 0;
  }
  if (argc == 2 && strncmp(a, "min_age=", 8) == 0) {
    uint64_t ms;
    if (!shell::parse_u64(a + 8, ms) || ms > 3600000)
      return shell::usage_error(argv[0], "min_age= takes milliseconds (up to 3600000)");
    kmemleak_set_min_age_ms(static_cast<unsigned>(ms));
    return 0;
  }
  if (argc == 2 && strncmp(a, "dump=", 5) == 0) {
    uint64_t addr;
    if (!shell::parse_u64(a + 5, addr) || addr > UINTPTR_MAX)
      return shell::usage_error(argv[0], "dump= takes an address");
    mm::LeakObject o;
    if (!mm::kmemleak_lookup(reinterpret_cast<const void*>(static_cast<uintptr_t>(addr)), o)) {
      kprintf("kmemleak: unknown object at 0x%llx\n", (ull)addr);
      return 1;
    }
    print_object(o, "Object");
    kprintf("  %s, min_count = %d, count = %d, flags = 0x%x, checksum = %x\n", o.kind, o.min_count, o.count,
            static_cast<unsigned>(o.flags), static_cast<unsigned>(o.crc));
    return 0;
  }
  if (argc == 2 && strcmp(a, "mark") == 0) {
    unsigned mark = mm::kmemleak_mark();
    if (!mark) {
      kprintf("kmemleak: no memory for another mark\n");
      return 1;
    }
    kprintf("kmemleak: mark %u\n", mark);
    return 0;
  }
  if ((argc == 3 || argc == 4) && strcmp(a, "since") == 0) {
    uint64_t mark;
    bool unref = argc == 4;
    if (!shell::parse_u64(argv[2], mark) || mark > ~0u) return shell::usage_error(argv[0], "since takes a mark number");
    if (unref && strcmp(argv[3], "unreferenced") != 0) return shell::usage_error(argv[0], "%s", usage);
    bool bad;
    size_t n = mm::kmemleak_since(static_cast<unsigned>(mark), unref, g_groups, 32, &bad);
    if (bad) return shell::usage_error(argv[0], "no mark %llu (kmemleak mark makes one)", (ull)mark);
    if (!mm::kmemleak_enabled()) return shell::usage_error(argv[0], "kmemleak is off (kmemleak on)");
    print_groups(g_groups, n < 32 ? n : 32, n, unref ? "backtraces of unreferenced objects" : "backtraces");
    return 0;
  }
  if (argc == 2 && strcmp(a, "summary") == 0) {
    if (!mm::kmemleak_enabled()) return shell::usage_error(argv[0], "kmemleak is off (kmemleak on)");
    size_t n = mm::kmemleak_summary(g_groups, 32);
    print_groups(g_groups, n < 32 ? n : 32, n, "distinct backtraces");
    return 0;
  }
  if (argc == 2 && strcmp(a, "memory") == 0) {
    mm::LeakMemory m;
    mm::kmemleak_memory(m);
    kprintf("kmemleak: per-slab records %llu bytes, tables %llu bytes, stack depot %llu bytes\n",
            (ull)m.slab_records_bytes, (ull)m.tables_bytes, (ull)m.stackdepot_bytes);
    return 0;
  }
  if (argc == 2 && strcmp(a, "test") == 0) {
    // Not a tail call: test_start's frame must lie below this one, where the
    // scan's stack scrub reaches, not in place of it (its dead slots would
    // hold the leaked addresses, and the next command's frame here would
    // keep them, read by every scan as references).
    int r = test_start();
    asm volatile("" ::: "memory");
    return r;
  }
  if (argc == 3 && strcmp(a, "test") == 0 && strcmp(argv[2], "done") == 0) return test_done();
  return shell::usage_error(argv[0], "%s", usage);
}

int cmd_kmemleak(int argc, char** argv) {
  int rc = run_kmemleak(argc, argv);
  memset(g_objs, 0, sizeof g_objs);
  memset(g_groups, 0, sizeof g_groups);
  return rc;
}

}  // namespace

namespace kmemleak_boot {
void setup() {
  char buf[24];
  if (boot::arg_value("kmemleak.min_age", buf, sizeof buf)) {
    uint64_t ms;
    if (shell::parse_u64(buf, ms) && ms <= 3600000) kmemleak_set_min_age_ms(static_cast<unsigned>(ms));
    else kprintf("kmemleak: kmemleak.min_age=%s is not milliseconds up to 3600000; ignored\n", buf);
  }
  if (boot::arg_value("kmemleak.scan", buf, sizeof buf)) {
    uint64_t secs;
    if (shell::parse_u64(buf, secs) && secs <= 86400) g_scan_secs = static_cast<unsigned>(secs);
    else kprintf("kmemleak: kmemleak.scan=%s is not seconds up to 86400; ignored\n", buf);
  }
  if (boot::arg_value("kmemleak", buf, sizeof buf)) {
    bool on = false;
    if (buf[0] == 0 || parse_on_off(buf, on)) kmemleak_enable(buf[0] == 0 || on);
    else kprintf("kmemleak: kmemleak=%s: expected on or off; off\n", buf);
  }
  console::add_idle_hook(periodic_scan);
  if (mm::kmemleak_enabled())
    kprintf("kmemleak: on, min_age %u ms, periodic scans %s\n", mm::kmemleak_min_age_ms(), g_scan_secs ? "on" : "off");
}
}  // namespace kmemleak_boot

SHELL_COMMAND(kmemleak,
              "leak scanner: kmemleak [all|scan|clear|on|off|stack=|backtrace=|scan=|min_age=|dump=ADDR|mark|since N "
              "[unreferenced]|summary|memory|test [done]]",
              cmd_kmemleak);
