// SPDX-License-Identifier: Apache-2.0
// Allocation profiling on the console (mm/alloc_tag.h): `allocinfo`, Linux's
// /proc/allocinfo, and `sysctl vm.mem_profiling`, its switch.
//
// Bootarg: sysctl.vm.mem_profiling=0|1|never (default 0). never: slabs get
// no tag references and the switch cannot be turned on. Default off: while
// on, every allocation and free takes the allocators' hooked path
// (README, "Allocation profiling", has the measured cost).
#include <kernel/allocinfo.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/shell.h>
#include <kernel/static_branch.h>
#include <kernel/string.h>
#include <mm/alloc_tag.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/vmem.h>
#include "accounting.h"

namespace {

const char* mode_name(mm::ProfMode m) {
  switch (m) {
    case mm::ProfMode::kNever: return "never";
    case mm::ProfMode::kOff: return "0";
    case mm::ProfMode::kOn: return "1";
  }
  return "?";
}

// `allocinfo test`: known allocations at known lines of this file, kept
// until `allocinfo test done`, for checking allocinfo (and kmtrace
// allocinfo, which rebuilds the table from a kmemtrace dump) by hand and in
// the end-to-end test. One set at a time.
struct TestSet {
  bool live = false;
  kmem_cache_t* cache = nullptr;
  vmem_t* arena = nullptr;
  void* small[12] = {};
  void* zeroed[5] = {};
  void* cached[9] = {};
  void* large = nullptr;
  uint64_t pages[3] = {};
  void* va = nullptr;
  void* seg[4] = {};
  void* xseg = nullptr;
};
constinit TestSet g_test;

int test_start(const char* cmd) {
  TestSet& t = g_test;
  if (t.live) return shell::usage_error(cmd, "a test set is live: allocinfo test done frees it");
  if (!t.cache) t.cache = kmem_cache_create("allocinfo_test", 72, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!t.arena)
    t.arena = vmem_create("allocinfo_test", reinterpret_cast<void*>(0x1000000), 0x1000000, 64, nullptr, nullptr,
                          nullptr, 0, VM_SLEEP);
  if (!t.cache || !t.arena) {
    kprintf("allocinfo test: no memory for its cache or arena\n");
    return 1;
  }
  for (auto& p : t.small) p = kmem_alloc(100, KM_SLEEP);
  for (auto& p : t.zeroed) p = kmem_zalloc(700, KM_SLEEP);
  for (auto& p : t.cached) p = kmem_cache_alloc(t.cache, KM_SLEEP);
  t.large = kmem_alloc(30000, KM_SLEEP);
  for (auto& p : t.pages) p = mm::page_alloc(1, KM_SLEEP);
  t.va = mm::page_alloc_va(0, KM_SLEEP);
  for (auto& p : t.seg) p = vmem_alloc(t.arena, 1000, VM_SLEEP);
  t.xseg = vmem_xalloc(t.arena, 4096, 4096, 0, 0, nullptr, nullptr, VM_SLEEP);
  t.live = true;
  kprintf(
      "allocinfo test: 12 kmem_alloc, 5 kmem_zalloc, 9 kmem_cache_alloc, 1 large kmem_alloc, 3 page_alloc, "
      "1 page_alloc_va, 4 vmem_alloc, 1 vmem_xalloc at kernel/mm/allocinfo.cpp, live until 'allocinfo test done'\n");
  return 0;
}

int test_done(const char* cmd) {
  TestSet& t = g_test;
  if (!t.live) return shell::usage_error(cmd, "no test set is live (allocinfo test makes one)");
  for (auto p : t.small) kmem_free(p, 100);
  for (auto p : t.zeroed) kmem_free(p, 700);
  for (auto p : t.cached) kmem_cache_free(t.cache, p);
  kmem_free(t.large, 30000);
  for (auto p : t.pages) mm::page_free(p, 1);
  mm::page_free_va(t.va, 0);
  for (auto p : t.seg) vmem_free(t.arena, p, 1000);
  vmem_xfree(t.arena, t.xseg, 4096);
  // Not live, and no pointer to what it freed left in .bss: the leak
  // scanner reads it, and a later object at one of those addresses would be
  // taken as referenced from here. (The cache and the arena stay, for the
  // next set.)
  kmem_cache_t* cache = t.cache;
  vmem_t* arena = t.arena;
  t = TestSet{};
  t.cache = cache;
  t.arena = arena;
  kprintf("allocinfo test: freed\n");
  return 0;
}

void print_total(int64_t v, const char* what) { kprintf("# %12lli %s\n", static_cast<long long>(v), what); }

int print_totals() {
  AllocTotals t;
  if (!allocinfo_totals(t)) {
    kprintf("allocinfo: the allocators are not up yet\n");
    return 1;
  }
  kprintf("# totals, bytes: RAM = tagged + untagged + held for reuse + allocator metadata + free + reserved\n");
  print_total(t.tagged, "tagged: live objects and pages of call sites outside mm/ (kmem, page allocator)");
  print_total(t.untagged, "untagged: live ones no tag counts (allocated while profiling was off)");
  print_total(static_cast<int64_t>(t.held),
              "held for reuse: free buffers in magazines, depot and slabs, slab overhead, per-CPU page caches, "
              "mapped free heap");
  print_total(static_cast<int64_t>(t.metadata),
              "allocator metadata: kmem's and vmem's pages, mm's own caches and tables, page tables");
  print_total(static_cast<int64_t>(t.free), "free");
  print_total(static_cast<int64_t>(t.reserved), "reserved: kernel image, DTB, reserved ranges, page descriptors");
  print_total(static_cast<int64_t>(t.ram), t.sum() == static_cast<int64_t>(t.ram)
                                               ? "RAM: the sum of the above, as meminfo"
                                               : "RAM: NOT the sum of the above (the books do not balance)");
  return t.sum() == static_cast<int64_t>(t.ram) ? 0 : 1;
}

int cmd_allocinfo(int argc, char** argv) {
  const char* usage = "usage: allocinfo [--top N] [--sort bytes|calls] [--nonzero] [--totals] | allocinfo test [done]";
  if (argc >= 2 && strcmp(argv[1], "test") == 0) {
    if (argc == 2) return test_start(argv[0]);
    if (argc == 3 && strcmp(argv[2], "done") == 0) return test_done(argv[0]);
    return shell::usage_error(argv[0], "%s", usage);
  }
  mm::AllocInfoOptions opt;
  bool totals = false;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--totals") == 0) {
      totals = true;
    } else if (strcmp(a, "--nonzero") == 0) {
      opt.nonzero = true;
    } else if (strcmp(a, "--top") == 0) {
      uint64_t n;
      if (i + 1 >= argc) return shell::usage_error(argv[0], "--top needs a number of lines (%s)", usage);
      if (!shell::parse_u64(argv[++i], n) || n == 0 || n > 100000)
        return shell::usage_error(argv[0], "--top %s: expected a number of lines from 1 to 100000", argv[i]);
      opt.top = static_cast<size_t>(n);
    } else if (strcmp(a, "--sort") == 0) {
      if (i + 1 >= argc) return shell::usage_error(argv[0], "--sort needs bytes or calls (%s)", usage);
      const char* by = argv[++i];
      if (strcmp(by, "bytes") == 0) opt.sort = mm::AllocSort::kBytes;
      else if (strcmp(by, "calls") == 0) opt.sort = mm::AllocSort::kCalls;
      else return shell::usage_error(argv[0], "--sort %s: expected bytes or calls", by);
    } else {
      return shell::usage_error(argv[0], "unknown argument '%s' (%s)", a, usage);
    }
  }
  if (mm::prof_mode() == mm::ProfMode::kNever)
    kprintf("allocinfo: profiling is never (booted with sysctl.vm.mem_profiling=never): nothing is counted\n");
  else if (mm::prof_mode() == mm::ProfMode::kOff)
    kprintf("allocinfo: profiling is off (sysctl vm.mem_profiling 1 counts from then on)\n");
  bool ok = mm::allocinfo_print(
      opt, [](const char* line, void*) { kprintf("%s", line); }, nullptr);
  if (!ok) {
    kprintf("allocinfo: no memory for the counters of %zu tags, or another allocinfo is printing\n",
            mm::alloc_tag_count());
    return 1;
  }
  uint64_t untagged = mm::prof_untagged_frees(), refless = mm::prof_refless_slabs();
  if (untagged) kprintf("# %llu frees of objects allocated while profiling was off\n", (unsigned long long)untagged);
  if (refless)
    kprintf("# %llu slabs made without tag references (memory ran out): their buffers are not counted\n",
            (unsigned long long)refless);
  return totals ? print_totals() : 0;
}

int cmd_sysctl(int argc, char** argv) {
  const char* usage = "usage: sysctl vm.mem_profiling [0|1]";
  if (argc < 2 || argc > 3) return shell::usage_error(argv[0], "%s", usage);
  if (strcmp(argv[1], "vm.mem_profiling") != 0)
    return shell::usage_error(argv[0], "unknown key '%s': the one key is vm.mem_profiling", argv[1]);
  if (argc == 2) {
    kprintf("vm.mem_profiling = %s\n", mode_name(mm::prof_mode()));
    return 0;
  }
  const char* v = argv[2];
  if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
    return shell::usage_error(argv[0], "vm.mem_profiling %s: expected 0 or 1", v);
  if (mm::prof_mode() == mm::ProfMode::kNever)
    return shell::usage_error(argv[0], "vm.mem_profiling is read-only: booted with sysctl.vm.mem_profiling=never");
  if (!mm::prof_set(v[0] == '1')) {
    kprintf("sysctl: vm.mem_profiling could not be switched (no memory for the counters, or the hooks)\n");
    return 1;
  }
  kprintf("vm.mem_profiling = %s\n", mode_name(mm::prof_mode()));
  return 0;
}

}  // namespace

// The totals. From the tags: tagged, the tags of call sites outside mm/
// of kmem and the page allocator (vmem's bytes are units of an arena, RAM
// or not; mm/'s own calls are slabs, spans and metadata, counted below
// from the allocators). From the allocators (mm_boot::accounting, meminfo's
// figures, and kmem_books):
//   live outside mm/ = the buffers of profiled caches + large kmem_allocs
//                      that are not the allocators' own + the pages no
//                      subsystem claims (meminfo's "other": direct
//                      page_alloc users);
//   untagged         = live outside mm/ - tagged;
//   held             = per-CPU page caches + profiled slabs' bytes not
//                      live + the heap's mapped bytes in neither a slab nor
//                      a large allocation;
//   metadata         = kmem's and vmem's pages + page tables + the
//                      allocators' own slabs and large allocations;
//   free, reserved   = the page allocator's.
// The sum is RAM when every page is claimed once (meminfo's equation, with
// nothing unclaimed); untagged is 0 when counting has been on since boot.
bool allocinfo_totals(AllocTotals& t) {
  if (!mm_boot::ready()) return false;
  t = AllocTotals{};
  int64_t tagged = 0;
  for (size_t i = 0; i < mm::alloc_tag_count(); i++) {
    mm::AllocTagCounts c;
    mm::alloc_tag_read(i, c);
    if (!c.tag->internal && c.tag->kind != mm::AllocKind::kVmem) tagged += c.bytes;
  }
  mm_boot::MemAccounting a;
  mm_boot::accounting(a);
  mm::PageStats ps;
  mm::page_stats(ps);
  mm::KmemBooks k;
  mm::kmem_books(k);
  uint64_t pcp = ps.pcp_pages * mm::kPageBytes;
  uint64_t live = k.live_bytes_profiled + (k.large_bytes - k.large_internal_bytes) + a.other;
  t.tagged = tagged;
  t.untagged = static_cast<int64_t>(live) - tagged;
  t.held = pcp + (k.slab_bytes_profiled - k.live_bytes_profiled) +
           (a.heap - k.slab_bytes_profiled - k.slab_bytes_internal - k.large_bytes);
  t.metadata = a.kmem_meta + a.vmem_tags + a.page_tables + k.slab_bytes_internal + k.large_internal_bytes;
  t.free = a.free - pcp;
  t.reserved = a.reserved;
  t.ram = a.ram;
  return true;
}

namespace allocinfo_boot {
void setup() {
  char buf[16];
  if (!boot::arg_value("sysctl.vm.mem_profiling", buf, sizeof buf)) return;
  if (strcmp(buf, "never") == 0) mm::prof_boot_mode(mm::ProfMode::kNever);
  else if (strcmp(buf, "1") == 0) mm::prof_boot_mode(mm::ProfMode::kOn);
  else if (strcmp(buf, "0") == 0) mm::prof_boot_mode(mm::ProfMode::kOff);
  else kprintf("mm: sysctl.vm.mem_profiling=%s: expected 0, 1 or never; 0\n", buf);
}

bool g_since_boot;

void start() {
  if (mm::prof_mode() != mm::ProfMode::kOn) return;
  mm::prof_boot_mode(mm::ProfMode::kOff);  // prof_set says on once it is
  // The hooks' static branches need their patching page (once; kmemtrace
  // asks for it too).
  if (static_branch::init() && mm::prof_set(true)) {
    g_since_boot = true;
    kprintf("mm: allocation profiling on (%zu call sites)\n", mm::alloc_tag_count());
  } else {
    kprintf("mm: allocation profiling could not be switched on\n");
  }
}

bool counting_since_boot() { return g_since_boot && mm::prof_mode() == mm::ProfMode::kOn; }
}  // namespace allocinfo_boot

SHELL_COMMAND(allocinfo,
              "live bytes and objects per allocation call site: allocinfo [--top N] [--sort bytes|calls] "
              "[--nonzero] [--totals] | allocinfo test [done]",
              cmd_allocinfo);
SHELL_COMMAND(sysctl, "read or set allocation profiling: sysctl vm.mem_profiling [0|1]", cmd_sysctl);
