// SPDX-License-Identifier: Apache-2.0
// Memory allocation profiling (interface: mm/include/mm/alloc_tag.h).
//
// 1. Tags. Each call site of a tagged allocator names a static AllocTag
//    (file, function, line) that the compiler places in the section
//    alloc_tags; the linker gathers them between __start_alloc_tags and
//    __stop_alloc_tags (the kernel's linker script does it explicitly,
//    under .rodata). Nothing registers at run time: a tag's counter is its
//    index in the section (a tag's size is its alignment, so the section
//    is an array), found from its reference (3) as reference - the first
//    tag's. The tags are read-only; their counters are not in them.
// 2. Counters: per CPU slot an array of one 64-bit word per tag, live
//    bytes + live calls * 2^36 (alloc_tag_internal.h, kCallsShift), so that
//    counting an object is one add; allocated the first time counting is
//    switched on (never from the allocation path), and made visible to
//    every CPU before counting can start (counters_ready). A CPU adds to
//    its own slot: on kmem's fast paths in a restartable section (the
//    add's store is its commit: kernel/rseq.h), elsewhere with interrupts
//    masked; atomic adds on the host, where threads beyond kMaxCpus share
//    a slot. Reading sums the slots modulo 2^64 and splits the sum, bytes
//    taken as the signed remainder: exact while a tag's live bytes are
//    within +-2^35 (32 GiB) and its live calls within +-2^27; a CPU's own
//    word may be anything (it freed what another allocated). (On 32-bit
//    ARM a reader may see a word torn by an add in flight: a figure off
//    for one print, never a count lost.)
// 3. References. Each object remembers its tag as a 32-bit reference (the
//    tag's address over its size, truncated: alloc_tag_internal.h, prof_ref;
//    0: none): slab buffers of heap caches in an array beside their slab
//    (kmem_slab.cpp, allocated with the slab unless the mode is never), page
//    blocks in an array after the page descriptors (page.cpp), vmem
//    allocations in their segment (vmem.cpp; a large kmem_alloc's segment is
//    moved to its caller's tag). The allocating CPU writes it after the
//    allocation, before the object is returned; the freeing CPU reads and
//    clears it before the free, while the object is still its caller's.
//    Whatever ordered the object's hand-over between the two orders the
//    reference too.
// 4. Switching. Counting on: the allocators' hooks go on (mm/hooks.h,
//    kFeatureProfile) and the call sites' macros pass their tags to the
//    tagged entry points, which stamp objects and count. Off: the
//    allocations stop counting, but frees stay hooked (kFeatureProfileFree)
//    so that every object stamped before is still subtracted and its
//    reference cleared: a reference left behind would make a later free of
//    the same buffer subtract from the wrong tag. A free that finds no
//    reference while counting is on (the object was allocated while it was
//    off) is counted and reported once (Linux's CONFIG_MEM_ALLOC_
//    PROFILING_DEBUG).
// 5. Not counted: vmem_alloc sizes an arena's quantum caches serve (their
//    buffers have no segment), and slabs refused their references because
//    memory ran out (counted in prof_refless_slabs).
#include <mm/alloc_tag.h>
#include <mm/hooks.h>
#include <mm/page.h>
#include <mm/platform.h>
#include "alloc_tag_internal.h"
#if !defined(MM_KERNEL)
#include <cstdlib>  // getenv: the host library's MM_MEM_PROFILING
#endif

extern "C" {
// The linker's bounds of the section (weak: a host program may have no
// tagged call at all).
extern const mm::AllocTag __start_alloc_tags[] __attribute__((weak));
extern const mm::AllocTag __stop_alloc_tags[] __attribute__((weak));
}

namespace mm {

uint32_t g_prof_counting;  // word-sized: a plain load on every arch
uint32_t g_prof_freeing;
int64_t* g_prof_counters[plat::kCpuSlots];  // set once, before counting starts; never freed
uint32_t g_prof_ref0;
uint32_t g_prof_ntags;

namespace {

#if defined(MM_KERNEL)
constexpr bool kKernel = true;  // prof_index does not truncate
#else
constexpr bool kKernel = false;
#endif

// Switching, and the counters' allocation, one caller at a time: a flag
// spun on with interrupts as they are, not a spinlock, because switching
// the hooks cross-calls every core and the counters' allocation may wait
// for memory (neither may happen with interrupts masked).
uint32_t g_switching;
struct Switching {
  Switching() {
    while (__atomic_exchange_n(&g_switching, 1u, __ATOMIC_ACQUIRE)) plat::cpu_relax();
  }
  ~Switching() { __atomic_store_n(&g_switching, 0u, __ATOMIC_RELEASE); }
  Switching(const Switching&) = delete;
  Switching& operator=(const Switching&) = delete;
};
ProfMode g_mode = ProfMode::kOff;
unsigned g_counter_order;
// allocinfo_print's snapshot and order, allocated with the counters (a
// print allocates nothing, so it never counts itself); one print at a time.
struct Row {
  AllocTagCounts c;
  uint32_t next;
};
Row* g_rows;
unsigned g_rows_order;
uint32_t g_printing;
uint64_t g_untagged;
uint32_t g_untagged_said;

// The section is an array of tags (alloc_tag.h); a size that is not a
// multiple of one says otherwise, and then there are none.
size_t tag_count() {
  if (!__start_alloc_tags || !__stop_alloc_tags) return 0;
  auto bytes = reinterpret_cast<uintptr_t>(__stop_alloc_tags) - reinterpret_cast<uintptr_t>(__start_alloc_tags);
  return bytes % sizeof(AllocTag) ? 0 : bytes / sizeof(AllocTag);
}

// The counters of every slot, zeroed, from the page allocator (never kmem:
// their own allocation would be counted). Under Switching.
bool counters_ready() {
  if (g_prof_counters[0]) return true;
  size_t n = tag_count();
  // The references must be a range that neither wraps nor holds 0 (an
  // image whose alloc_tags section straddles a multiple of 2^32 tags'
  // addresses: only conceivable on a 64-bit host).
  uint32_t ref0 = n ? prof_ref(__start_alloc_tags) : 1;
  if (ref0 == 0 || uint64_t{ref0} + n > (uint64_t{1} << 32) ||
      (kKernel && reinterpret_cast<uintptr_t>(__stop_alloc_tags) >> kTagShift > (uint64_t{1} << 32))) {
    plat::log("allocinfo: the alloc_tags section at %p cannot be named by 32-bit references", __start_alloc_tags);
    return false;
  }
  size_t bytes = (n ? n : 1) * sizeof(int64_t);
  unsigned order = 0;
  while ((kPageBytes << order) < bytes && order < kMaxOrder) order++;
  if ((kPageBytes << order) < bytes) return false;
  int64_t* got[plat::kCpuSlots];
  for (unsigned c = 0; c < plat::kCpuSlots; c++) {
    got[c] = static_cast<int64_t*>(page_alloc_va(order, KM_SLEEP));
    if (!got[c]) {
      while (c) page_free_va(got[--c], order);
      return false;
    }
    __builtin_memset(got[c], 0, kPageBytes << order);
  }
  unsigned rows_order = 0;
  while ((kPageBytes << rows_order) < (n ? n : 1) * sizeof(Row) && rows_order < kMaxOrder) rows_order++;
  auto* rows = static_cast<Row*>(page_alloc_va(rows_order, KM_SLEEP));
  if (!rows || (kPageBytes << rows_order) < n * sizeof(Row)) {
    if (rows) page_free_va(rows, rows_order);
    for (unsigned c = 0; c < plat::kCpuSlots; c++) page_free_va(got[c], order);
    return false;
  }
  g_rows = rows;
  g_rows_order = rows_order;
  g_counter_order = order;
  g_prof_ref0 = ref0;
  g_prof_ntags = static_cast<uint32_t>(n);
  // The counting paths load g_prof_counting relaxed, then these (plain
  // loads: no acquire on the allocation path), and a control dependency
  // does not order two loads on ARM or RISC-V. So every CPU is made to see
  // them before counting can start: a call on each CPU, whose mailbox
  // acquire orders that CPU's later loads after these stores (the
  // platform's on_each_cpu). Once, at the first switch-on; they never
  // change after.
  for (unsigned c = 0; c < plat::kCpuSlots; c++) __atomic_store_n(&g_prof_counters[c], got[c], __ATOMIC_RELEASE);
  page_prof_bases_set();
  if (kmem_prof_bases_set) kmem_prof_bases_set();  // every cache's per-CPU copies of the bases (kmem.cpp), before the cross-call below
  plat::on_each_cpu([](void*) {}, nullptr);
  return true;
}

}  // namespace

// --- The allocators' side (alloc_tag_internal.h) ----------------------------------

uintptr_t prof_counter_base(unsigned cpu) {
  int64_t* c = __atomic_load_n(&g_prof_counters[cpu], __ATOMIC_ACQUIRE);
  return c ? reinterpret_cast<uintptr_t>(c) - uintptr_t{g_prof_ref0} * sizeof(int64_t) : 0;
}

bool prof_records() { return __atomic_load_n(&g_mode, __ATOMIC_RELAXED) != ProfMode::kNever; }

uint32_t prof_charge(const AllocTag* tag, uint64_t bytes) {
  auto irq = plat::irq_save();
  uint32_t ref = prof_charge_masked(tag, bytes);
  plat::irq_restore(irq);
  return ref;
}

void prof_uncharge(uint32_t ref, uint64_t bytes, const char* what, const void* obj, uintptr_t caller) {
  auto irq = plat::irq_save();
  prof_uncharge_masked(ref, bytes, what, obj, caller);
  plat::irq_restore(irq);
}

void prof_untagged(uint32_t ref, const char* what, const void* obj, uintptr_t caller) {
  if (ref || !__atomic_load_n(&g_prof_counting, __ATOMIC_RELAXED)) return;
  __atomic_fetch_add(&g_untagged, uint64_t{1}, __ATOMIC_RELAXED);
  if (__atomic_exchange_n(&g_untagged_said, 1u, __ATOMIC_RELAXED) == 0)
    plat::log("allocinfo: %s: free of %p, allocated while profiling was off (or freed twice), by %p: not "
              "subtracted (allocinfo counts such frees; this is said once)",
              what, obj, reinterpret_cast<void*>(caller));
}

// --- Control ----------------------------------------------------------------------

void prof_boot_mode(ProfMode mode) { __atomic_store_n(&g_mode, mode, __ATOMIC_RELAXED); }
ProfMode prof_mode() { return __atomic_load_n(&g_mode, __ATOMIC_RELAXED); }

bool prof_set(bool on) {
  Switching g;
  if (g_mode == ProfMode::kNever) return false;
  if (on) {
    if (!counters_ready()) return false;
    // Frees first: no object is stamped before its free is hooked.
    if (!alloc_hooks_set(kFeatureProfileFree, true)) return false;
    __atomic_store_n(&g_prof_freeing, 1u, __ATOMIC_RELEASE);
    __atomic_store_n(&g_prof_counting, 1u, __ATOMIC_RELEASE);
    if (!alloc_hooks_set(kFeatureProfile, true)) {
      __atomic_store_n(&g_prof_counting, 0u, __ATOMIC_RELAXED);
      return false;
    }
  } else {
    __atomic_store_n(&g_prof_counting, 0u, __ATOMIC_RELAXED);
    alloc_hooks_set(kFeatureProfile, false);  // the frees stay hooked (4)
  }
  __atomic_store_n(&g_mode, on ? ProfMode::kOn : ProfMode::kOff, __ATOMIC_RELAXED);
  return true;
}

void prof_host_init() {
#if !defined(MM_KERNEL)
  const char* env = getenv("MM_MEM_PROFILING");
  if (!env) return;
  if (__builtin_strcmp(env, "never") == 0) prof_boot_mode(ProfMode::kNever);
  else if (__builtin_strcmp(env, "1") == 0) prof_boot_mode(ProfMode::kOn);
  else if (__builtin_strcmp(env, "0") == 0) prof_boot_mode(ProfMode::kOff);
  else plat::log("MM_MEM_PROFILING=%s: expected 0, 1 or never; 0", env);
#endif
}

void prof_host_start() {
#if !defined(MM_KERNEL)
  if (prof_mode() != ProfMode::kOn) return;
  prof_boot_mode(ProfMode::kOff);  // prof_set says on once it is
  if (!prof_set(true)) plat::log("MM_MEM_PROFILING=1: profiling could not be switched on");
#endif
}

uint64_t prof_untagged_frees() { return __atomic_load_n(&g_untagged, __ATOMIC_RELAXED); }

uint64_t prof_metadata_bytes() {
  uint64_t counters = __atomic_load_n(&g_prof_counters[0], __ATOMIC_ACQUIRE)
                          ? uint64_t{plat::kCpuSlots} * (kPageBytes << g_counter_order) +
                                (kPageBytes << g_rows_order)
                          : 0;
  return counters;
}

// --- Reading ----------------------------------------------------------------------

size_t alloc_tag_count() { return tag_count(); }

bool alloc_tag_read(size_t i, AllocTagCounts& out) {
  if (i >= tag_count()) return false;
  out.tag = &__start_alloc_tags[i];
  uint64_t sum = 0;  // modulo 2^64 (2)
  for (unsigned c = 0; c < plat::kCpuSlots; c++) {
    const int64_t* a = __atomic_load_n(&g_prof_counters[c], __ATOMIC_ACQUIRE);
    if (!a) break;
    sum += static_cast<uint64_t>(__atomic_load_n(&a[i], __ATOMIC_RELAXED));
  }
  // calls: the sum over 2^36, rounded to nearest; bytes: what is left.
  auto calls = static_cast<int64_t>(sum + (uint64_t{1} << (kCallsShift - 1))) >> kCallsShift;
  out.calls = static_cast<uint64_t>(calls);
  out.bytes = static_cast<int64_t>(sum - (static_cast<uint64_t>(calls) << kCallsShift));
  return true;
}

namespace {
bool same_path(const char* a, const char* b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}
int compare_source(const AllocTag* a, const AllocTag* b) {
  const char *x = a->file, *y = b->file;
  while (*x && *x == *y) x++, y++;
  if (*x != *y) return static_cast<unsigned char>(*x) < static_cast<unsigned char>(*y) ? -1 : 1;
  if (a->line != b->line) return a->line < b->line ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}
}  // namespace

bool alloc_tag_find(const char* file, uint32_t line, AllocTagCounts& out) {
  AllocTagCounts sum{nullptr, 0, 0};
  for (size_t i = 0; i < tag_count(); i++) {
    const AllocTag& t = __start_alloc_tags[i];
    if (t.line != line || !same_path(t.file, file)) continue;
    AllocTagCounts c;
    alloc_tag_read(i, c);
    if (!sum.tag) sum.tag = c.tag;
    sum.bytes += c.bytes;
    sum.calls += c.calls;
  }
  out = sum;
  return sum.tag != nullptr;
}

namespace {
// "%12lli %8llu file:line func:name \n", as Linux prints a tag (mm/ has no
// printf of its own).
void format_allocinfo_line(char* buf, size_t size, const AllocTagCounts& c) {
  size_t len = 0;
  auto ch = [&](char x) {
    if (len + 1 < size) buf[len++] = x;
  };
  auto str = [&](const char* t) {
    while (*t) ch(*t++);
  };
  auto num = [&](uint64_t v, bool negative, unsigned width) {
    char d[21];
    unsigned n = 0;
    do {
      d[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    if (negative) d[n++] = '-';
    for (unsigned w = n; w < width; w++) ch(' ');
    while (n) ch(d[--n]);
  };
  bool neg = c.bytes < 0;
  num(neg ? 0 - static_cast<uint64_t>(c.bytes) : static_cast<uint64_t>(c.bytes), neg, 12);
  ch(' ');
  num(c.calls, false, 8);
  ch(' ');
  str(c.tag->file);
  ch(':');
  num(c.tag->line, false, 0);
  str(" func:");
  str(c.tag->func);
  str(" \n");
  buf[len] = 0;
}
}  // namespace

bool allocinfo_print(const AllocInfoOptions& opt, void (*out)(const char*, void*), void* arg) {
  {
    Switching g;
    if (!counters_ready()) return false;
  }
  if (__atomic_exchange_n(&g_printing, 1u, __ATOMIC_ACQUIRE)) return false;
  // A snapshot of every tag's sums, then a list in print order (insertion
  // into a linked list through the rows: a few hundred tags, by hand).
  size_t n = tag_count();
  Row* rows = g_rows;
  constexpr uint32_t kEnd = ~uint32_t{0};
  uint32_t head = kEnd;
  auto before = [&](uint32_t a, uint32_t b) {
    const AllocTagCounts &x = rows[a].c, &y = rows[b].c;
    if (opt.sort == AllocSort::kBytes && x.bytes != y.bytes) return x.bytes > y.bytes;
    if (opt.sort == AllocSort::kCalls && x.calls != y.calls) return x.calls > y.calls;
    return compare_source(x.tag, y.tag) < 0;
  };
  for (size_t i = 0; i < n; i++) {
    auto k = static_cast<uint32_t>(i);
    alloc_tag_read(i, rows[k].c);
    if (opt.nonzero && rows[k].c.calls == 0) continue;
    uint32_t* at = &head;
    while (*at != kEnd && !before(k, *at)) at = &rows[*at].next;
    rows[k].next = *at;
    *at = k;
  }
  out("allocinfo - version: 1.0\n", arg);
  out("#     <size>  <calls> <tag info>\n", arg);
  char line[256];
  size_t printed = 0;
  for (uint32_t k = head; k != kEnd && (!opt.top || printed < opt.top); k = rows[k].next, printed++) {
    format_allocinfo_line(line, sizeof line, rows[k].c);
    out(line, arg);
  }
  __atomic_store_n(&g_printing, 0u, __ATOMIC_RELEASE);
  return true;
}

}  // namespace mm
