// SPDX-License-Identifier: Apache-2.0
// Shell commands that show the memory subsystem: slabinfo, vmem, buddyinfo,
// kmem (reap, move, stats) and the memory accounting behind meminfo.
#include <kernel/console.h>
#include <kernel/kmem_debug_shell.h>
#include <kernel/percpu.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/timer.h>
#include <kernel/torture.h>
#include <kernel/string.h>
#include <mm/failslab.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include <mm/whatis.h>
#include "accounting.h"


namespace {

using ull = unsigned long long;

int no_args(int argc, char** argv) { return argc == 1 ? 0 : shell::usage_error(argv[0], "takes no arguments"); }

// slabinfo: one row per cache, like illumos ::kmastat.
int cmd_slabinfo(int argc, char** argv) {
  if (argc > 2) return shell::usage_error(argv[0], "usage: slabinfo [name-substring]");
  const char* filter = argc == 2 ? argv[1] : nullptr;
  kprintf("%-22s %6s %8s %8s %6s %5s %9s %9s %5s %4s %6s %5s %5s\n", "cache", "buf", "inuse", "total", "slabs", "mag",
          "allocs", "frees", "fail", "cont", "depot", "reaps", "moves");
  struct Ctx {
    const char* filter;
    unsigned shown;
  } ctx{filter, 0};
  mm::kmem_cache_walk(
      [](const kmem_cache_t* cp, void* arg) {
        auto* c = static_cast<Ctx*>(arg);
        mm::KmemCacheStats s;
        mm::kmem_cache_stats(cp, s);
        if (c->filter && !strstr(s.name, c->filter)) return;
        c->shown++;
        kprintf("%-22s %6llu %8llu %8llu %6llu %5llu %9llu %9llu %5llu %4llu %3llu/%-2llu %5llu %5llu\n", s.name,
                (ull)s.bufsize, (ull)s.buf_inuse, (ull)s.buf_total, (ull)s.slabs, (ull)s.magazine_size, (ull)s.allocs,
                (ull)s.frees, (ull)(s.alloc_fail + s.ctor_fail), (ull)s.depot_contention, (ull)s.depot_full,
                (ull)s.depot_empty, (ull)s.reaps, (ull)s.moves_yes);
      },
      &ctx);
  if (filter && !ctx.shown) return shell::usage_error(argv[0], "no cache name contains '%s'", filter);
  kprintf("(inuse: held by clients; depot: full/empty magazines; cont: depot lock contention)\n");
  return 0;
}

int cmd_vmem(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  kprintf("%-16s %8s %12s %12s %12s %6s %6s %6s %8s %8s %s\n", "arena", "quantum", "size", "inuse", "imported", "spans",
          "alloc", "free", "allocs", "fails", "source");
  mm::vmem_walk(
      [](const vmem_t* vmp, void*) {
        mm::VmemStats s;
        mm::vmem_stats(vmp, s);
        kprintf("%-16s %8llu %12llu %12llu %12llu %6llu %6llu %6llu %8llu %8llu %s\n", s.name, (ull)s.quantum,
                (ull)s.span_bytes, (ull)s.alloc_bytes, (ull)s.imported_bytes, (ull)s.spans, (ull)s.segs_alloc,
                (ull)s.segs_free, (ull)s.allocs, (ull)s.failures, s.source ? s.source : "-");
      },
      nullptr);
  uint64_t tags, tags_free, pages;
  mm::vmem_seg_pool_stats(tags, tags_free, pages);
  kprintf("boundary tags: %llu (%llu free) in %llu pages\n", (ull)tags, (ull)tags_free, (ull)pages);
  return 0;
}

int cmd_buddyinfo(int argc, char** argv) {
  if (int r = no_args(argc, argv)) return r;
  mm::PageStats s;
  mm::page_stats(s);
  kprintf("order:");
  for (unsigned o = 0; o <= mm::kMaxOrder; o++) kprintf(" %6u", o);
  kprintf("\nfree: ");
  for (unsigned o = 0; o <= mm::kMaxOrder; o++) kprintf(" %6llu", (ull)s.free_blocks[o]);
  kprintf("\n%llu of %llu pages free (%llu in per-CPU caches), reserve %llu for KM_PUSHPAGE\n", (ull)s.free_pages,
          (ull)s.total_pages, (ull)s.pcp_pages, (ull)s.reserve_pages);
  kprintf("allocs %llu, frees %llu, failures %llu, from the reserve %llu, bad frees %llu\n", (ull)s.allocs,
          (ull)s.frees, (ull)s.failures, (ull)s.pushpage_allocs, (ull)s.bad_frees);
  return 0;
}

// `kmem exercise [rounds]`: a known workload on every online core, for
// kmemtrace (its end-to-end test counts these calls in a trace) and for
// watching slabinfo/vmem/buddyinfo move. Each round makes one call at each
// site below and frees what it got; every 16th round also a large
// kmem_alloc (straight from the heap arena).
struct Exercise {
  unsigned rounds = 0;
  kmem_cache_t* cache = nullptr;
  vmem_t* arena = nullptr;
  std::atomic<uint64_t> done[6] = {};  // per site: successful allocations
  std::atomic<uint64_t> failed{0};
  uint64_t injected_before = 0;  // kmem fail's count when it started
};

// Failures kmem fail injected since it was (re)set (0 when it is off).
uint64_t injected_now() {
  mm::FailState st;
  return mm::failslab_state(st) ? st.injected : 0;
}
enum { kSiteKmem, kSiteZalloc, kSiteLarge, kSiteCache, kSitePage, kSiteVmem };

void exercise_cpu(void* arg) {
  auto* x = static_cast<Exercise*>(arg);
  uint64_t n[6] = {}, failed = 0;
  for (unsigned r = 0; r < x->rounds; r++) {
    size_t small = 24 + (r * 37) % 1000;
    size_t vsize = mm::kPageBytes * (1 + r % 4);
    void* a = kmem_alloc(small, KM_NOSLEEP);
    void* z = kmem_zalloc(3000, KM_NOSLEEP);
    void* l = (r % 16 == 0) ? kmem_alloc(20000, KM_NOSLEEP) : nullptr;
    void* c = kmem_cache_alloc(x->cache, KM_NOSLEEP);
    uint64_t pg = mm::page_alloc(0, KM_NOSLEEP);
    void* v = vmem_alloc(x->arena, vsize, VM_NOSLEEP);
    void* got[6] = {a, z, l, c, reinterpret_cast<void*>(static_cast<uintptr_t>(pg)), v};
    for (unsigned i = 0; i < 6; i++) n[i] += got[i] != nullptr;
    failed += !a + !z + (r % 16 == 0 && !l) + !c + !pg + !v;
    if (a) kmem_free(a, small);
    if (z) kmem_free(z, 3000);
    if (l) kmem_free(l, 20000);
    if (c) kmem_cache_free(x->cache, c);
    if (pg) mm::page_free(pg, 0);
    if (v) vmem_free(x->arena, v, vsize);
  }
  for (unsigned i = 0; i < 6; i++) x->done[i].fetch_add(n[i], std::memory_order_relaxed);
  x->failed.fetch_add(failed, std::memory_order_relaxed);
}

// One exercise at a time: the shell runs one command, and a background
// exercise holds x until `kmem exercise status` has seen it finish.
constinit Exercise g_exercise;
// Each background core adds its counts to g_exercise (relaxed), then
// releases them with its decrement of g_exercise_running; `status` loads it
// with acquire and reads the counts only once it is 0. The store of the
// starting count is ordered before the call_async posts by their mailbox
// release, so no core can finish before it is set.
constinit std::atomic<unsigned> g_exercise_running{0};  // cores still at it (background)
constinit bool g_exercise_background = false;           // started, not yet reported
constinit unsigned g_exercise_cpus = 0;                 // cores it was started on

void exercise_background_cpu(void* arg) {
  exercise_cpu(arg);
  g_exercise_running.fetch_sub(1, std::memory_order_release);
}

// Destroys the cache and arena and prints what was done.
int exercise_report(unsigned cpus) {
  Exercise& x = g_exercise;
  kmem_cache_destroy(x.cache);
  vmem_destroy(x.arena);
  auto d = [&](unsigned i) { return static_cast<ull>(x.done[i].load()); };
  kprintf(
      "kmem exercise: %u cpus x %u rounds: kmem_alloc %llu, kmem_zalloc %llu, large kmem_alloc %llu, "
      "kmem_cache_alloc %llu, page_alloc %llu, vmem_alloc %llu, each freed; %llu failed\n",
      cpus, x.rounds, d(kSiteKmem), d(kSiteZalloc), d(kSiteLarge), d(kSiteCache), d(kSitePage), d(kSiteVmem),
      static_cast<ull>(x.failed.load()));
  // Failures are the command's failure unless fault injection made at
  // least as many meanwhile (anywhere: the exercise cannot tell its own).
  uint64_t injected = injected_now() - x.injected_before;
  if (x.failed.load() && injected >= x.failed.load()) {
    kprintf("kmem exercise: kmem fail injected %llu failures meanwhile: each one handled\n", (ull)injected);
    return 0;
  }
  return x.failed.load() ? 1 : 0;
}

int cmd_exercise(const char* cmd, int argc, char** argv) {
  const char* usage =
      "usage: kmem exercise [rounds] [background] | kmem exercise status|wait; rounds from 1 to 1000000";
  Exercise& x = g_exercise;
  if (argc == 3 && (strcmp(argv[2], "status") == 0 || strcmp(argv[2], "wait") == 0)) {
    if (!g_exercise_background) return shell::usage_error(cmd, "no background exercise was started");
    // wait: until every core is done (a script's next command then sees
    // their objects freed); a millisecond between looks.
    if (argv[2][0] == 'w')
      while (g_exercise_running.load(std::memory_order_acquire)) timer::delay_us(1000);
    unsigned left = g_exercise_running.load(std::memory_order_acquire);
    if (left) {
      kprintf("kmem exercise: running on %u cpus\n", left);
      return 0;
    }
    g_exercise_background = false;
    return exercise_report(g_exercise_cpus);
  }
  uint64_t rounds = 1000;
  bool background = false;
  int i = 2;
  if (i < argc && strcmp(argv[i], "background") != 0) {
    if (!shell::parse_u64(argv[i], rounds) || rounds == 0 || rounds > 1000000)
      return shell::usage_error(cmd, "%s", usage);
    i++;
  }
  if (i < argc && strcmp(argv[i], "background") == 0) {
    background = true;
    i++;
  }
  if (i != argc) return shell::usage_error(cmd, "%s", usage);
  if (g_exercise_background)
    return shell::usage_error(cmd, "a background exercise is still to be collected (kmem exercise status)");
  if (background && cpus_online() < 2) return shell::usage_error(cmd, "background needs a second core");
  x.rounds = static_cast<unsigned>(rounds);
  for (auto& d : x.done) d.store(0);
  x.failed.store(0);
  x.injected_before = injected_now();
  x.cache = kmem_cache_create("exercise", 96, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  x.arena = vmem_create("exercise", reinterpret_cast<void*>(0x10000000), size_t{1} << 28, mm::kPageBytes, nullptr,
                        nullptr, nullptr, 0, VM_SLEEP);
  if (!x.cache || !x.arena) {
    if (x.cache) kmem_cache_destroy(x.cache);
    if (x.arena) vmem_destroy(x.arena);
    kprintf("kmem exercise: could not create its cache and arena\n");
    return 1;
  }
  if (!background) {
    smp::call_on_all(exercise_cpu, &x);
    return exercise_report(cpus_online());
  }
  // Every other online core, while this one goes back to the shell (and,
  // with `kmemtrace stream on`, streams their events as they come).
  unsigned self = cpu_id(), n = 0, others = cpus_online() - 1;
  g_exercise_background = true;
  g_exercise_running.store(others, std::memory_order_release);  // before any core can finish
  for_each_cpu([&](PerCpu& c) {
    if (c.index != self && c.online.load(std::memory_order_acquire) &&
        smp::call_async(c.index, exercise_background_cpu, &x))
      n++;
  });
  if (n < others) g_exercise_running.fetch_sub(others - n, std::memory_order_release);
  g_exercise_cpus = n;
  kprintf("kmem exercise: %u rounds started on %u other cpus; kmem exercise status tells when they are done\n",
          x.rounds, n);
  return 0;
}

// kmem fail [off | PROBABILITY,INTERVAL,TIMES[,cache=NAME][,space=BYTES]]
int cmd_fail(const char* cmd, int argc, char** argv) {
  const char* usage = "usage: kmem fail [off | PROBABILITY,INTERVAL,TIMES[,cache=NAME][,space=BYTES]]";
  if (argc > 3) return shell::usage_error(cmd, "%s", usage);
  if (argc == 3 && strcmp(argv[2], "off") == 0) {
    mm::failslab_off();
  } else if (argc == 3) {
    mm::FailConfig c;
    const char* why = "";
    if (!mm::failslab_parse(argv[2], c, &why)) return shell::usage_error(cmd, "'%s': %s", argv[2], why);
    if (!mm::failslab_set(c)) {
      kprintf("kmem fail: the allocators' hooks could not be switched on; off\n");
      return 1;
    }
  }
  mm::FailState st;
  if (!mm::failslab_state(st)) {
    kprintf("kmem fail: off\n");
    return 0;
  }
  const mm::FailConfig& c = st.config;
  kprintf("kmem fail: %u%% of KM_NOSLEEP/VM_NOSLEEP allocations, every %llu eligible, ", c.probability,
          (ull)c.interval);
  if (c.times < 0) kprintf("no limit");
  else kprintf("%lld of %lld left", static_cast<long long>(st.times_left), static_cast<long long>(c.times));
  kprintf(", %s%s", c.filter[0] ? "cache " : "every cache and arena", c.filter);
  if (c.space) kprintf(", space %llu of %llu bytes left", (ull)st.space_left, (ull)c.space);
  kprintf("; %llu failed so far\n", (ull)st.injected);
  return 0;
}

int cmd_kmem(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "exercise") == 0) return cmd_exercise(argv[0], argc, argv);
  if (argc >= 2 && strcmp(argv[1], "fail") == 0) return cmd_fail(argv[0], argc, argv);
  if (argc >= 2 && strcmp(argv[1], "torture") == 0) return torture::run(argv[0], argc, argv);
  if (argc >= 2) {
    int r = kmem_debug_shell::command(argv[0], argc, argv);
    if (r >= 0) return r;
  }
  if (argc != 2)
    return shell::usage_error(argv[0],
                              "usage: kmem reap|move|errors|debug|verify [CACHE]|log [ADDR]|test KIND|all|"
                              "fail [SPEC|off]|exercise [rounds] [background]|exercise status|wait|torture OPS [SEED]");
  if (strcmp(argv[1], "reap") == 0) {
    mm::kmem_reap(true);
    mm::page_drain_cpu_caches();
    kprintf("reaped every cache and per-CPU page cache\n");
    return 0;
  }
  if (strcmp(argv[1], "move") == 0) {
    mm::kmem_move_pass();
    kprintf("consolidator pass done (see the moves column of slabinfo)\n");
    return 0;
  }
  if (strcmp(argv[1], "errors") == 0) {
    // The page allocator counts the frees it refused itself (page_stats).
    mm::PageStats ps;
    mm::page_stats(ps);
    kprintf("%llu allocator errors reported since boot\n", (ull)(mm::error_count() + ps.bad_frees));
    if (ps.bad_frees) kprintf("(%llu of them page frees the page allocator refused)\n", (ull)ps.bad_frees);
    return 0;
  }
  return shell::usage_error(argv[0],
                            "unknown subcommand '%s' (reap, move, errors, debug, verify, log, test, fail, exercise, "
                            "torture)",
                            argv[1]);
}

// whatis ADDR: who owns an address, in one line (mdb's ::whatis).
int cmd_whatis(int argc, char** argv) {
  if (argc != 2) return shell::usage_error(argv[0], "usage: whatis ADDR (hex with 0x, or decimal)");
  uint64_t v;
  if (!shell::parse_u64(argv[1], v) || v > UINTPTR_MAX)
    return shell::usage_error(argv[0], "'%s' is not an address", argv[1]);
  mm::WhatIs w;
  mm::kmem_whatis(reinterpret_cast<const void*>(static_cast<uintptr_t>(v)), w);
  char line[192];
  mm::kmem_whatis_format(w, line, sizeof line);
  kprintf("%s\n", line);
  kmem_debug_shell::print_trail(reinterpret_cast<const void*>(static_cast<uintptr_t>(v)));  // debugged buffers
  return 0;
}

}  // namespace

SHELL_COMMAND(whatis, "who owns an address: whatis ADDR", cmd_whatis);
SHELL_COMMAND(slabinfo, "kmem caches, one row each: slabinfo [name-substring]", cmd_slabinfo);
SHELL_COMMAND(vmem, "vmem arenas: size, in use, imported, segments", cmd_vmem);
SHELL_COMMAND(buddyinfo, "free page blocks per order", cmd_buddyinfo);
SHELL_COMMAND(kmem,
              "kmem reap | move | errors | debug | verify [CACHE] | log [ADDR] | test KIND|all | fail [SPEC|off] | "
              "exercise [rounds] [background] | exercise status | exercise wait | torture OPS [SEED]",
              cmd_kmem);
