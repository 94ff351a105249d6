// SPDX-License-Identifier: Apache-2.0
// Brings the memory subsystem up from what the DTB said.
#include <kernel/allocinfo.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/kmemleak_control.h>
#include <kernel/kmem_debug_shell.h>
#include <kernel/kmemtrace_control.h>
#include <kernel/panic.h>
#include <kernel/timer.h>
#include <mm/failslab.h>
#include <mm/kmem_debug.h>
#include <mm/kmem.h>
#include <mm/platform.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include "accounting.h"

namespace mm_boot {

namespace {
// Written once at boot, before the other cores start (published by
// smp::start_secondaries' fence), except g_table_pages: a relaxed counter,
// a statistic that publishes nothing.
uint64_t g_boot_free_pages;
uint64_t g_table_pages;  // page-table pages the arch took from the page allocator
uint64_t g_kept_at_boot;
bool g_ready;

uint64_t kept_now() { return page_table_pages() + mm::vmem_metadata_pages() + mm::kmem_metadata_pages(); }
}  // namespace

bool ready() { return g_ready; }

namespace {
// The depot's unused working set goes back every kReapPeriod while the
// console is idle (and under memory pressure, from the allocators).
constexpr uint64_t kReapPeriodNs = 15ull * 1000000000ull;
uint64_t g_last_reap;

void periodic_reap() {
  uint64_t now = timer::now_ns();
  if (now - g_last_reap < kReapPeriodNs) return;
  g_last_reap = now;
  mm::kmem_reap(false);
}
}  // namespace
uint64_t boot_free_pages() { return g_boot_free_pages; }
uint64_t page_table_pages() { return __atomic_load_n(&g_table_pages, __ATOMIC_RELAXED); }
uint64_t kept_pages_at_boot() { return g_kept_at_boot; }

// Gives the page allocator every RAM bank minus the reserved ranges, then
// brings vmem and kmem up.
// kmem.fail=PROBABILITY,INTERVAL,TIMES[,cache=NAME][,space=BYTES]: fault
// injection from boot (mm/failslab.h; `kmem fail` at run time).
void failslab_setup() {
  char buf[96];
  if (!boot::arg_value("kmem.fail", buf, sizeof buf)) return;
  mm::FailConfig c;
  const char* why = "";
  if (!mm::failslab_parse(buf, c, &why)) {
    kprintf("mm: kmem.fail=%s: %s; fault injection stays off\n", buf, why);
    return;
  }
  if (!mm::failslab_set(c)) {
    kprintf("mm: kmem.fail: the allocators' hooks could not be switched on; fault injection stays off\n");
    return;
  }
  kprintf("mm: fault injection on: %u%% of NOSLEEP allocations, every %llu, %lld times%s%s\n", c.probability,
          static_cast<unsigned long long>(c.interval), static_cast<long long>(c.times), c.filter[0] ? ", cache " : "",
          c.filter);
}

void init() {
  mm::plat::init_ticks();  // kmemleak's stamps (the counter's rate is known: arch::init_from_dtb)
  mm::PhysRange banks[kMaxMemBanks];
  mm::PhysRange reserved[kMaxReserved];
  unsigned nb = 0;
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t base = g_boot.mem[i].base, end = base + g_boot.mem[i].size;
    uint64_t limit = arch::kDirectMapLimit;
    if (base >= limit) {
      kprintf("mm: RAM at 0x%llx is beyond what this arch maps; left unused\n", static_cast<unsigned long long>(base));
      continue;
    }
    if (end > limit) {
      kprintf("mm: RAM above 0x%llx is beyond what this arch maps; left unused\n",
              static_cast<unsigned long long>(limit));
      end = limit;
    }
    banks[nb++] = {base, end - base};
  }
  for (unsigned i = 0; i < g_boot.reserved_count; i++) reserved[i] = {g_boot.reserved[i].base, g_boot.reserved[i].size};
  allocinfo_boot::setup();  // sysctl.vm.mem_profiling=: before the page allocator's banks
  if (!mm::page_init(banks, nb, reserved, g_boot.reserved_count)) panic("mm: no usable RAM for the page allocator");
  arch::set_table_allocator([]() -> uintptr_t {
    // At a tag of mm's own (internal): allocinfo --totals counts page
    // tables as allocator metadata (page_table_pages), not as a caller's.
    void* p = mm::page_alloc_va_site(0, KM_NOSLEEP | KM_PUSHPAGE, MM_ALLOC_TAG_AS(kPage, true));
    if (!p) return 0;
    __atomic_fetch_add(&g_table_pages, 1, __ATOMIC_RELAXED);
    __builtin_memset(p, 0, mm::kPageBytes);
    return reinterpret_cast<uintptr_t>(p);
  });
  kmem_debug_shell::setup();  // kmem.debug=: before the first cache
  mm::kmem_init();
  allocinfo_boot::start();   // sysctl.vm.mem_profiling=1: before anything outside mm/ allocates
  kmemtrace::setup_rings();  // its rings are heap memory from now on: before the boot count
  kmemleak_boot::setup();
  failslab_setup();
  mm::kmem_debug_start();  // debugged kmem_alloc caches: the hooks pass the sizes asked for
  mm::PageStats st;
  mm::page_stats(st);
  g_boot_free_pages = st.free_pages;
  g_kept_at_boot = kept_now();
  g_ready = true;
  console::add_idle_hook(periodic_reap);
  kprintf("mm: %llu of %llu pages free; heap arena and %s ready\n", static_cast<unsigned long long>(st.free_pages),
          static_cast<unsigned long long>(st.total_pages), "kmem");
}

void accounting(MemAccounting& a) {
  a = MemAccounting{};
  for (unsigned i = 0; i < g_boot.mem_count; i++) a.ram += g_boot.mem[i].size;
  mm::PageStats ps;
  mm::page_stats(ps);
  a.reserved = a.ram - ps.total_pages * mm::kPageBytes;
  a.free = ps.free_pages * mm::kPageBytes;
  a.heap = mm::segkmem_mapped_pages() * mm::kPageBytes;
  a.heap_slabs = mm::kmem_slab_bytes();
  a.kmem_meta = mm::kmem_metadata_pages() * mm::kPageBytes;
  a.vmem_tags = mm::vmem_metadata_pages() * mm::kPageBytes;
  a.page_tables = page_table_pages() * mm::kPageBytes;
  uint64_t claimed = a.free + a.heap + a.kmem_meta + a.vmem_tags + a.page_tables;
  uint64_t usable = ps.total_pages * mm::kPageBytes;
  a.other = usable > claimed ? usable - claimed : 0;
}

}  // namespace mm_boot
