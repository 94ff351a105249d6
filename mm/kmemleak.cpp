// SPDX-License-Identifier: Apache-2.0
// kmemleak: a leak scanner inside the allocator (interface: mm/kmemleak.h).
//
// 1. Objects. The allocators' own state is the index: every allocated
//    buffer of a tracked cache (slab pages name their slab in segkmem's
//    heap page index, the slab's free bitmap and the magazines say which
//    buffers are free), every large kmem_alloc (its pages are tagged), and
//    ranges registered with kmemleak_alloc (a sorted table). A word is
//    looked up in O(1) for the heap (heap_index.h, then the buffer index by
//    one division) and by binary search among registered objects. Nothing is
//    kept per object outside the allocators: there is no pool to run out.
// 2. Records. Each object's record (kmemleak_meta.h: allocation tick, CPU,
//    stack depot handle, checksum, flags) lives in its slab's LeakSlab, or in
//    a large allocation's page descriptors, or in its registered entry. The
//    allocators' hooked copies stamp it on every allocation while kmemleak
//    is on (mm/hooks.h: with it off the fast path is unchanged).
// 3. Scanning is done with the world stopped (plat::stop_others: in the
//    kernel every other core waits in its IPI handler, its registers saved on
//    its stack; on the host other threads wait in a signal handler). What is
//    scanned is exact: no reference is missed because it moved during the
//    scan, so objects in motion between roots, queues and stacks are never
//    reported. A concurrent scan (Linux) misses such references and relies
//    on the checksum rule and on kmemleak_transient_leak; a stopped world
//    costs a pause per scan instead, measured and printed with every scan
//    (see the README for the figures). Where stopped CPUs may hold mm's locks
//    (the host), the scanner takes those locks before it stops them.
// 4. Marking, from the roots (writable kernel sections, registered roots,
//    every CPU's live stack and registers, objects that are not leaks, the
//    contents of constructed free buffers in magazines, as illumos
//    ::findleaks does) through an explicit stack of objects to scan, of fixed
//    size: when it is full the object is left reached but unscanned and a
//    later pass over all objects scans those (no allocation with the world
//    stopped). A pointer anywhere inside an object references it; a
//    reference from an object to itself does not count; only aligned words
//    are read.
// 5. Reporting (Linux's rules). After marking, every live unreached object
//    is checksummed (crc32_le(0, obj, size)); one whose checksum changed
//    since the last scan is treated as referenced for this scan (its
//    contents scanned too): a list being changed is not a leak. What is left
//    unreached, unchanged since the previous scan and older than the minimum
//    age is reported, once. So a leak is reported at its second scan at the
//    earliest; a cycle of leaked objects is reported whole.
// 6. Switching. On: new slabs get records, every existing slab gets them
//    (kmem_slab.cpp, leak_records_fill: as many batches as there are
//    slabs), their stamps and scan state zeroed (objects allocated before:
//    no backtrace, no age) and their annotations kept, then the hooks go
//    on. A slab whose records memory cannot give is scanned as a root and
//    its buffers counted as untracked in the scan's line (never reported,
//    never a reason to report another), and each scan tries again. Off:
//    the hooks go off first; the records stay, but stamps and scan state
//    are not trusted until the next switch-on (a buffer may change hands
//    unstamped), so reports, since and summary are empty while off and a
//    lookup shows only the annotations. g_leak_on is read relaxed by the
//    hooks: a stamp that races the switch is at worst missing.
//    Annotations land in the object's record whether kmemleak is on or off
//    and leave with the object (kmemleak_meta.h, Annotations).
// 7. The stacks. The scanning CPU copies its own live stack first, before
//    anything here loads an object's address (kmemleak_scan zeroes the
//    dead stack below it first, so the scan's own frames hold nothing older
//    than the scan); a stopped CPU's stack is read from its saved registers
//    up (kernel: the interrupt's trap frame; host: the signal handler's
//    frame). Conservative, as every stack scan is: a dead slot in a live
//    frame can keep an object referenced (a false negative, never a false
//    report). A core that may sit in a call for long (the kernel: every
//    cross-call) first zeroes the dead stack its frames will occupy
//    (kmemleak_scrub_stack): their unwritten slots then hold nothing an
//    earlier, deeper call left there; the shell does the same after each
//    command, for the next command's frames. The heap's first page is never
//    handed out, since its address is a value the allocators hold all the
//    time.
// 8. Locking. g_world serialises the operations that stop the world (scan,
//    reports, lookup, clear, grouping, the switch): taken with interrupts
//    enabled, from threads only, so a core that waits for it is stopped
//    where it spins. g_tables (interrupts masked, a leaf) guards the tables,
//    the marks, the settings and the last scan's figures: never held across
//    a stop of the world (in the kernel a core spinning on it with
//    interrupts masked could not be stopped), so everything that takes only
//    it (annotations, registration, the statistics that meminfo and the
//    torture read) may be called from any core, and the annotations and
//    registration from interrupt context, as Linux's. A stopped core holds
//    no masked lock, so with the world stopped the tables are still; where
//    stopped threads may hold locks (the host), the scanner takes g_tables,
//    the cache list and every cache's locks first. An annotated buffer's
//    record is written under its cache's slab_lock, never nested with
//    g_tables.
// 9. What it costs (the kernel's figures: docs/performance.md, from `bench`
//    under qemu-run --icount; the host's: bench/kmemleak_bench):
//    - The stopped world: one pause of the other CPUs per scan, as long as
//      the walk of the roots and objects; each scan's line prints it.
//    - A scanned word: a handful of instructions, whole scan included, at
//      1% pointer density. Four words a round against one span compare
//      (scan_range).
//    - An allocation while on: the record's lookup, a counter read and two
//      stores (the hooked allocation path, with fault injection's flag);
//      frees pay nothing (their own switch, off). With backtraces: a frame
//      walk and a depot save as well.
//    - Memory: a 16-byte record per buffer of a tracked slab and 3 bits
//      (reached, scanned, in a magazine), allocated with the slab; 128 KiB of
//      tables (the mark stack, the stack copy); the 1 MiB stack depot.
#include <mm/kmemleak.h>
#include <cstddef>
#include <mm/hooks.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/stackdepot.h>
#include <trace/crc32.h>
#include "heap_index.h"
#include "kmem_cache.h"
#include "kmemleak_meta.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>  // host builds under ASan only
#endif

namespace mm {

uint32_t g_leak_on;  // word-sized: a plain load on every arch

namespace {

// --- Tables (registered objects, roots, scan areas, early annotations) ------
// Arrays of pages from the page allocator (never kmem: they would be objects
// and references), grown by doubling under g_tables. The pages come through
// one non-template function: allocation profiling's tag of a call inside a
// template would not be in its section (mm/alloc_tag.h).
void* table_pages(unsigned order) { return page_alloc_va(order, KM_NOSLEEP); }

template <typename T>
struct Table {
  T* v = nullptr;
  size_t n = 0, cap = 0;
  unsigned order = 0;
  bool reserve(size_t want) {
    if (want <= cap) return true;
    unsigned o = v ? order + 1 : 0;
    while ((kPageBytes << o) / sizeof(T) < want && o < kMaxOrder) o++;
    auto* nv = static_cast<T*>(table_pages(o));
    if (!nv) return false;
    for (size_t i = 0; i < n; i++) nv[i] = v[i];
    if (v) page_free_va(v, order);
    v = nv;
    order = o;
    cap = (kPageBytes << o) / sizeof(T);
    return true;
  }
  bool insert(size_t at, const T& x) {
    if (!reserve(n + 1)) return false;
    for (size_t i = n; i > at; i--) v[i] = v[i - 1];
    v[at] = x;
    n++;
    return true;
  }
  void erase(size_t at) {
    for (size_t i = at; i + 1 < n; i++) v[i] = v[i + 1];
    n--;
  }
  size_t bytes() const { return v ? kPageBytes << order : 0; }
};

struct RegObj {
  uintptr_t start;
  size_t size;
  int min_count;
  int count;      // references found by this scan
  LeakMeta meta;
  bool reached, scanned;
};
struct Root {
  uintptr_t start;
  size_t size;
};
struct Area {
  uintptr_t object;  // start of the object it belongs to
  uintptr_t start;
  size_t size;
};
plat::Lock g_world;   // one world operation at a time (8): interrupts enabled, threads only
plat::Lock g_tables;  // the tables, the marks, the settings, g_last (8): interrupts masked, a leaf
Table<RegObj> g_reg;    // sorted by start, never overlapping
Table<Root> g_roots;
Table<Area> g_areas;    // sorted by object
Table<uint32_t> g_marks;  // ticks at each mark: mark N is entry N - 1
bool g_backtraces = true;
bool g_stack_scan = true;
unsigned g_min_age_ms = 5000;
LeakScanStats g_last;

// A world operation's lock: with interrupts enabled (the world stops with
// it held), from a thread.
struct ScanGuard {
  ScanGuard() {
    MM_ASSERT(!plat::irqs_masked());
    g_world.lock();
  }
  ~ScanGuard() { g_world.unlock(); }
  ScanGuard(const ScanGuard&) = delete;
  ScanGuard& operator=(const ScanGuard&) = delete;
};

// --- Finding the object a word points into -------------------------------------
enum class Kind : uint8_t { kNone, kSlab, kLarge, kReg };
struct Obj {
  Kind kind = Kind::kNone;
  uintptr_t start = 0;
  size_t size = 0;
  kmem_cache_t* cp = nullptr;
  Slab* sp = nullptr;
  LeakSlab* ls = nullptr;
  uint32_t idx = 0;
  LargeLeakWords lw{};
  RegObj* reg = nullptr;

  uint8_t flags() const {
    if (kind == Kind::kSlab) return ls->meta[idx].flags;
    if (kind == Kind::kLarge) return static_cast<uint8_t>(*lw.w[LargeLeakWords::kFlagsWord] >> 8);
    return reg->meta.flags;
  }
  void set_flags(uint8_t f) {
    if (kind == Kind::kSlab) ls->meta[idx].flags = f;
    else if (kind == Kind::kLarge)
      *lw.w[LargeLeakWords::kFlagsWord] = (*lw.w[LargeLeakWords::kFlagsWord] & ~0xff00u) | (uint32_t{f} << 8);
    else reg->meta.flags = f;
  }
  LeakMeta meta() const {
    if (kind == Kind::kSlab) return ls->meta[idx];
    if (kind == Kind::kLarge) {
      LeakMeta m{};
      m.ticks = *lw.w[LargeLeakWords::kTicksWord];
      m.cpu = static_cast<uint8_t>(*lw.w[LargeLeakWords::kFlagsWord]);
      m.flags = static_cast<uint8_t>(*lw.w[LargeLeakWords::kFlagsWord] >> 8);
      m.stack = *lw.w[LargeLeakWords::kStackWord];
      m.crc = *lw.w[LargeLeakWords::kCrcWord];
      return m;
    }
    return reg->meta;
  }
  void set_crc(uint32_t c) {
    if (kind == Kind::kSlab) ls->meta[idx].crc = c;
    else if (kind == Kind::kLarge) *lw.w[LargeLeakWords::kCrcWord] = c;
    else reg->meta.crc = c;
  }
  // Per-scan bits.
  bool reached() const {
    if (kind == Kind::kSlab) return leak_bit(ls->reached, idx);
    if (kind == Kind::kLarge) return *lw.w[LargeLeakWords::kFlagsWord] & (1u << 16);
    return reg->reached;
  }
  void set_reached() {
    if (kind == Kind::kSlab) leak_set(ls->reached, idx);
    else if (kind == Kind::kLarge) *lw.w[LargeLeakWords::kFlagsWord] |= 1u << 16;
    else reg->reached = true;
  }
  bool scanned() const {
    if (kind == Kind::kSlab) return leak_bit(ls->scanned, idx);
    if (kind == Kind::kLarge) return *lw.w[LargeLeakWords::kFlagsWord] & (1u << 17);
    return reg->scanned;
  }
  void set_scanned() {
    if (kind == Kind::kSlab) leak_set(ls->scanned, idx);
    else if (kind == Kind::kLarge) *lw.w[LargeLeakWords::kFlagsWord] |= 1u << 17;
    else reg->scanned = true;
  }
  int min_count() const {
    uint8_t f = flags();
    if (f & kLeakIgnore) return -1;
    if (f & kLeakNotLeak) return 0;
    return kind == Kind::kReg ? reg->min_count : 1;
  }
};

const char* kind_name(const Obj& o) {
  return o.kind == Kind::kSlab ? o.cp->name : o.kind == Kind::kLarge ? "kmem_alloc" : "registered";
}

bool slab_object(uintptr_t w, Slab* sp, Obj& o) {
  kmem_cache_t* cp = sp->cache;
  LeakSlab* ls = sp->leak;
  if (!cp->tracked || !ls || w < sp->base) return false;
  uint32_t idx = static_cast<uint32_t>(div_chunk(cp, w - sp->base));
  if (idx >= sp->chunks) return false;
  uintptr_t start = sp->base + uintptr_t{idx} * cp->chunk;
  if (w - start >= cp->bufsize) return false;  // padding after the buffer
  if (slab_buffer_free(sp, idx) || leak_bit(ls->magfree, idx)) return false;
  o.kind = Kind::kSlab;
  o.start = start;
  o.size = cp->bufsize;
  o.cp = cp;
  o.sp = sp;
  o.ls = ls;
  o.idx = idx;
  return true;
}

bool large_object(uintptr_t start, Obj& o) {
  LargeLeakWords lw;
  if (!segkmem_large_leak_words(start, lw)) return false;
  if (*lw.w[LargeLeakWords::kFlagsWord] & kLargeUntracked) return false;
  Page* head = segkmem_page_of(start);
  o.kind = Kind::kLarge;
  o.start = start;
  o.size = size_t{head->count} * kPageBytes;
  o.lw = lw;
  return true;
}

RegObj* find_reg(uintptr_t w) {
  size_t lo = 0, hi = g_reg.n;  // first entry with start > w
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_reg.v[mid].start <= w) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return nullptr;
  RegObj* r = &g_reg.v[lo - 1];
  return w - r->start < r->size ? r : nullptr;
}

// The object containing w, if any (the world stopped, or g_tables held and
// the object is the caller's).
bool lookup(uintptr_t w, Obj& o) {
  if (Page* p = segkmem_page_of(w)) {
    uint16_t flags = p->flags;
    if (flags & kPageSlab) return slab_object(w, static_cast<Slab*>(p->owner), o);
    if (flags & kPageLarge) return large_object(p->large_start, o);
    return false;
  }
  if (RegObj* r = find_reg(w)) {
    o.kind = Kind::kReg;
    o.start = r->start;
    o.size = r->size;
    o.reg = r;
    return true;
  }
  return false;
}

// --- The world: everything stopped, and the locks a stopped CPU may hold --------
kmem_cache_t* first_cache() { return cache_list_first(); }

// Visits every tracked cache (the raw list: the world is stopped).
template <typename F>
void each_cache(F&& f) {
  for (kmem_cache_t* cp = first_cache(); cp; cp = cp->list_next)
    if (cp->tracked && !cp->dead) f(cp);
}

template <typename F>
void each_slab(kmem_cache_t* cp, F&& f) {
  SlabList* lists[] = {&cp->partial, &cp->full};  // empty slabs hold no objects
  for (SlabList* l : lists)
    for (Slab* sp = l->head; sp; sp = sp->next)
      if (sp->leak) f(sp);
}

// Every live object: slab buffers, large allocations, registered objects.
template <typename F>
void each_object(F&& f) {
  each_cache([&](kmem_cache_t* cp) {
    each_slab(cp, [&](Slab* sp) {
      for (uint32_t i = 0; i < sp->chunks; i++) {
        Obj o;
        if (slab_object(sp->base + uintptr_t{i} * cp->chunk, sp, o)) f(o);
      }
    });
  });
  segkmem_for_each_large(
      [](uintptr_t start, size_t, void* arg) {
        Obj o;
        if (large_object(start, o)) (*static_cast<F*>(arg))(o);
      },
      &f);
  for (size_t i = 0; i < g_reg.n; i++) {
    Obj o;
    o.kind = Kind::kReg;
    o.start = g_reg.v[i].start;
    o.size = g_reg.v[i].size;
    o.reg = &g_reg.v[i];
    f(o);
  }
}

// Locks every lock a stopped CPU could be holding in what the scanner reads
// (where the platform says it may), in list order: they are all leaves.
void lock_all(bool on) {
  kmem_cache_t* cp = first_cache();
  for (; cp; cp = cp->list_next) {
    if (on) {
      cp->slab_lock.lock();
      cp->depot_lock.lock();
    } else {
      cp->depot_lock.unlock();
      cp->slab_lock.unlock();
    }
  }
}

struct WorldCall {
  void (*fn)(void*);
  void* arg;
  uint64_t pause_ns;
};

void world_entry(void* a) {
  auto* c = static_cast<WorldCall*>(a);
  uint64_t t0 = plat::monotonic_ns();
  c->fn(c->arg);
  c->pause_ns = plat::monotonic_ns() - t0;
}

// Runs fn with every other CPU stopped, the cache list and the tables still
// (g_world held by the caller; 8). Returns how long the others were stopped.
uint64_t with_world(void (*fn)(void*), void* arg) {
  bool locks = plat::stopped_cpus_may_hold_locks();
  WorldCall c{fn, arg, 0};
  // Held across the stop where stopped CPUs may hold them.
  if (locks) {
    g_tables.lock();
    cache_list_lock().lock();
    lock_all(true);
  }
  plat::stop_others(world_entry, &c);
  if (locks) {
    lock_all(false);
    cache_list_lock().unlock();
    g_tables.unlock();
  }
  return c.pause_ns;
}

// --- Marking ---------------------------------------------------------------------
struct Gray {
  uintptr_t start;
  size_t size;
  uintptr_t object;  // whose areas apply (0: none)
};
constexpr unsigned kGrayOrder = 4;  // 64 KiB of stack (4096 entries on 64-bit), at most
// The mark stack's and the stack copy's orders: kGrayOrder and
// kStackCopyOrder, or what a 32nd of RAM holds where that is less (a board
// with 256 KiB of RAM: 8 KiB each; the stack copy keeps the frames nearest
// the scan, the mark stack overflows into the rescan pass). Set by turn_on.
unsigned g_gray_order = kGrayOrder;
unsigned g_stack_copy_order = 4;
unsigned order_for_ram(unsigned max) {
  unsigned order = 0;
  while (order < max && (kPageBytes << (order + 1)) <= page_ram_bytes() / 32) order++;
  return order;
}
Gray* g_gray;
size_t g_gray_cap;

struct Scan {
  size_t n = 0;
  bool overflow = false;
  uint64_t overflows = 0;
  uint64_t bytes = 0;
  uint64_t objects = 0, unreferenced = 0, new_reports = 0;
  uint64_t untracked_objects = 0, untracked_slabs = 0;
  uint32_t now = 0;
  uint32_t min_age_ticks = 0;
  // Every address an object can have lies in [span_lo, span_lo +
  // span_size): the heap's and the registered objects' (set with the world
  // stopped, when neither can change).
  uintptr_t span_lo = 0, span_size = 0;
};
Scan* g_scan;

void set_span(Scan& s) {
  uintptr_t lo = g_heap_index.base, hi = g_heap_index.base + g_heap_index.size;
  if (g_reg.n) {  // sorted by start, disjoint: the last ends last
    lo = g_reg.v[0].start < lo ? g_reg.v[0].start : lo;
    uintptr_t end = g_reg.v[g_reg.n - 1].start + g_reg.v[g_reg.n - 1].size;
    hi = end > hi ? end : hi;
  }
  s.span_lo = lo;
  s.span_size = hi - lo;
}

void push(const Obj& o) {
  Scan& s = *g_scan;
  uint8_t f = o.flags();
  if (f & (kLeakIgnore | kLeakNoScan)) return;
  if (s.n == g_gray_cap) {  // left reached but unscanned: the rescan pass gets it
    s.overflow = true;
    return;
  }
  Obj& mut = const_cast<Obj&>(o);
  mut.set_scanned();
  g_gray[s.n++] = Gray{o.start, o.size, (f & kLeakAreas) ? o.start : 0};
}

// A reference to o was found (from outside o).
void reference(Obj& o) {
  if (o.kind == Kind::kReg) {
    int mc = o.min_count();
    if (mc < 0 || o.reached()) return;
    if (++o.reg->count < mc) return;
  } else if (o.reached()) {
    return;
  }
  o.set_reached();
  push(o);
}

// A word inside the span: an object's address, or between objects.
__attribute__((noinline)) void candidate(uintptr_t w, uintptr_t self, size_t self_size) {
  if (w - self < self_size) return;
  Obj o;
  if (lookup(w, o)) reference(o);
}

// Reads every aligned word of [lo, hi) as a possible pointer. self: the
// object being scanned (its references to itself do not count). Most words
// are not addresses inside the span: four at a time, each costs a load, a
// subtract, a compare and a branch not taken.
__attribute__((no_sanitize("address", "thread"))) void scan_range(uintptr_t lo, uintptr_t hi, uintptr_t self,
                                                                   size_t self_size) {
  lo = (lo + sizeof(uintptr_t) - 1) & ~(sizeof(uintptr_t) - 1);
  if (hi < lo + sizeof(uintptr_t)) return;
  g_scan->bytes += hi - lo;
  const uintptr_t span_lo = g_scan->span_lo, span_size = g_scan->span_size;
  const auto* p = reinterpret_cast<const uintptr_t*>(lo);
  const uintptr_t* end = p + (hi - lo) / sizeof(uintptr_t);
  for (; end - p >= 4; p += 4) {
    uintptr_t a = p[0], b = p[1], c = p[2], d = p[3];
    if (__builtin_expect(a - span_lo < span_size, 0)) candidate(a, self, self_size);
    if (__builtin_expect(b - span_lo < span_size, 0)) candidate(b, self, self_size);
    if (__builtin_expect(c - span_lo < span_size, 0)) candidate(c, self, self_size);
    if (__builtin_expect(d - span_lo < span_size, 0)) candidate(d, self, self_size);
  }
  for (; p < end; p++)
    if (*p - span_lo < span_size) candidate(*p, self, self_size);
}

void scan_object(const Gray& g) {
  if (!g.object) return scan_range(g.start, g.start + g.size, g.start, g.size);
  // Only its areas.
  size_t lo = 0, hi = g_areas.n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_areas.v[mid].object < g.object) lo = mid + 1;
    else hi = mid;
  }
  // Flagged before its first area is registered (kmemleak_scan_area), or
  // its areas found no memory: the whole object.
  if (lo == g_areas.n || g_areas.v[lo].object != g.object)
    return scan_range(g.start, g.start + g.size, g.start, g.size);
  for (size_t i = lo; i < g_areas.n && g_areas.v[i].object == g.object; i++) {
    const Area& a = g_areas.v[i];
    uintptr_t end = a.size > g.start + g.size - a.start ? g.start + g.size : a.start + a.size;
    scan_range(a.start, end, g.start, g.size);
  }
}

void drain() {
  for (;;) {
    while (g_scan->n) {
      Gray g = g_gray[--g_scan->n];
      scan_object(g);
    }
    if (!g_scan->overflow) return;
    // Reached objects the full stack could not take: scan them now.
    g_scan->overflow = false;
    g_scan->overflows++;
    each_object([](Obj& o) {
      if (o.reached() && !o.scanned() && o.min_count() >= 0) {
        push(o);
        while (g_scan->n) {
          Gray g = g_gray[--g_scan->n];
          scan_object(g);
        }
      }
    });
  }
}

void scan_root(uintptr_t lo, uintptr_t hi, const char*, void*) { scan_range(lo, hi, 0, 0); }

// The stacks are taken first, before the scan loads any address into a
// register or a frame of its own: this CPU's live stack is copied (the
// scan's later frames reuse the memory below it), the stopped CPUs' ranges
// are noted (nothing runs on them). Then they are scanned.
constexpr unsigned kStackCopyOrder = 4;  // 64 KiB: this CPU's live stack, at most
uintptr_t* g_stack_copy;
size_t g_stack_copied;  // bytes
struct StackRange {
  uintptr_t lo, hi;
};
StackRange g_stacks[plat::kMaxCpus];
unsigned g_nstacks;

__attribute__((no_sanitize("address", "thread"))) void take_stack(uintptr_t lo, uintptr_t hi, unsigned cpu, void*) {
  if (cpu == plat::cpu_slot()) {
    lo &= ~(sizeof(uintptr_t) - 1);
    size_t bytes = hi > lo ? hi - lo : 0;
    size_t cap = kPageBytes << g_stack_copy_order;
    if (bytes > cap) bytes = cap;  // deeper than that: the frames nearest the scan are kept
    const auto* from = reinterpret_cast<const uintptr_t*>(lo);
    for (size_t i = 0; i < bytes / sizeof(uintptr_t); i++) g_stack_copy[i] = from[i];
    g_stack_copied = bytes;
  } else if (g_nstacks < plat::kMaxCpus) {
    g_stacks[g_nstacks++] = StackRange{lo, hi};
  }
}

// Slabs of a tracked cache without records (memory was short when they
// were wanted: kmem_slab.cpp, leak_records_fill): their buffers are no
// objects (nothing to keep a reference count or a report in), so each
// allocated one is scanned as a root, which keeps what it references from
// being reported, and counted as untracked (the scan's line names them).
// Buffers free in a magazine are scanned too (a slab without records has
// no bit to tell them by): at worst a free buffer's stale words keep an
// object referenced one scan longer, a false negative.
void scan_untracked(kmem_cache_t* cp) {
  Scan& s = *g_scan;
  SlabList* lists[] = {&cp->partial, &cp->full};  // empty slabs hold nothing
  for (SlabList* l : lists)
    for (Slab* sp = l->head; sp; sp = sp->next) {
      if (sp->leak) continue;
      s.untracked_slabs++;
      for (uint32_t i = 0; i < sp->chunks; i++) {
        if (slab_buffer_free(sp, i)) continue;
        uintptr_t b = sp->base + uintptr_t{i} * cp->chunk;
        scan_range(b, b + cp->bufsize, 0, 0);
        s.untracked_objects++;
      }
    }
}

// Buffers held free by magazines: not objects; the contents of a cache
// with a constructor's are roots (what its constructor allocated).
void mark_magazines(kmem_cache_t* cp, bool roots) {
  auto mark = [cp, roots](void* buf) {
    auto b = reinterpret_cast<uintptr_t>(buf);
    Slab* sp = cp->offslab ? slab_of_heap_address(b) : onslab_header(b);
    if (!sp || !sp->leak) return;
    uint32_t idx = static_cast<uint32_t>(div_chunk(cp, b - sp->base));
    if (idx < sp->chunks) leak_set(sp->leak->magfree, idx);
    if (roots && cp->ctor) scan_range(b, b + cp->bufsize, b, cp->bufsize);
  };
  for (unsigned c = 0; c < plat::kMaxCpus; c++) {
    const CpuCache& cc = cp->cpu[c];
    const Magazine* loaded = cc.racy_loaded();
    for (int32_t r = 1, n = cc.racy_rounds(); loaded && r <= n; r++) mark(loaded->slot[r]);
    for (int32_t r = 1; cc.prev && r <= cc.prounds; r++) mark(cc.prev->slot[r]);
  }
  for (const Magazine* m = cp->full_mags.head; m; m = m->next)
    for (uintptr_t r = 1; r <= m->cap; r++) mark(m->slot[r]);
  // Magazines being destroyed: the rounds they have left (kmem_magazine.cpp,
  // Draining).
  for (const Magazine* m = cp->draining; m; m = m->next)
    for (uintptr_t r = 1, n = reinterpret_cast<uintptr_t>(__atomic_load_n(&m->slot[0], __ATOMIC_RELAXED)); r <= n; r++)
      mark(m->slot[r]);
}

bool old_enough(const LeakMeta& m) {
  if (!m.ticks) return true;  // allocated before kmemleak was on
  return g_scan->now - (m.ticks - 1) >= g_scan->min_age_ticks;
}

__attribute__((no_sanitize("address", "thread"))) uint32_t checksum(const Obj& o) {
  return kmemtrace::crc32_update(0, reinterpret_cast<const void*>(o.start), o.size);
}

// Zeroes the dead stack below the caller. The scan's own frames are built
// there, and the slots they never write (padding, unused spill slots) would
// otherwise hold whatever earlier calls left, object addresses included,
// which this CPU's stack scan would read as references.
// 4 frames of 128 words (4 KiB on 64-bit): deeper than the scan's call
// chain, and no frame larger than the kernel allows (2 KiB). Not
// instrumented: ASan would move pad to a fake stack (its
// detect_stack_use_after_return) and leave the real one unscrubbed.
__attribute__((noinline, no_sanitize("address"))) void scrub_stack(unsigned depth = 4) {
  volatile uintptr_t pad[128];
  for (auto& w : pad) w = 0;
  if (depth > 1) scrub_stack(depth - 1);
  asm volatile("" ::"r"(&pad[0]) : "memory");  // not a tail call: the frames must exist together
}

// The whole scan, with the world stopped.
void scan_world(void*) {
  Scan& s = *g_scan;
  // The per-scan bits are clear between scans (see the end). First which
  // buffers magazines hold, then this CPU's stack and registers and the
  // stopped CPUs': before anything here has loaded an object's address into
  // a register, or a frame this CPU's stack scan would read (marking the
  // magazines handles free buffers only).
  g_nstacks = 0;
  g_stack_copied = 0;
  bool stacks = __atomic_load_n(&g_stack_scan, __ATOMIC_RELAXED);
  if (stacks) plat::for_each_stack(take_stack, nullptr);
  set_span(s);  // after: s lives in a frame the stack copy holds, and the heap's base is an address
  for (size_t i = 0; i < g_reg.n; i++) g_reg.v[i].count = 0;
  each_cache([](kmem_cache_t* cp) { mark_magazines(cp, false); });
  if (stacks) {
    auto copy = reinterpret_cast<uintptr_t>(g_stack_copy);
    scan_range(copy, copy + g_stack_copied, 0, 0);
    for (unsigned i = 0; i < g_nstacks; i++) scan_range(g_stacks[i].lo, g_stacks[i].hi, 0, 0);
  }
  // The other roots.
  each_cache([](kmem_cache_t* cp) {
    if (cp->ctor) mark_magazines(cp, true);
    scan_untracked(cp);
  });
  plat::for_each_root(scan_root, nullptr);
  for (size_t i = 0; i < g_roots.n; i++) scan_range(g_roots.v[i].start, g_roots.v[i].start + g_roots.v[i].size, 0, 0);
  each_object([](Obj& o) {
    if (o.min_count() == 0 && !o.reached()) {
      o.set_reached();
      push(o);
    }
  });
  drain();
  // Unreferenced from the roots: checksum; changed ones count as
  // referenced for this scan (Linux's rule: a list being changed).
  each_object([](Obj& o) {
    uint8_t f = o.flags();
    if (o.min_count() <= 0 || o.reached()) {
      o.set_flags(f & ~(kLeakUnref | kLeakCandidate));
      return;
    }
    uint32_t c = checksum(o);
    bool unchanged = (f & kLeakCandidate) && o.meta().crc == c;
    o.set_crc(c);
    o.set_flags(f | kLeakUnref | kLeakCandidate);
    if (!unchanged) {
      o.set_reached();
      push(o);
    }
  });
  drain();
  // What is left: unchanged since the last scan; report the old enough.
  // An object the second drain reached (a changed one, or one referenced
  // from a changed one) is referenced for this scan (Linux greys it): it
  // is no longer unreferenced, and its checksum stays for the next scan.
  each_object([&s](Obj& o) {
    if (o.min_count() < 0) return;
    s.objects++;
    uint8_t f = o.flags();
    if (!(f & kLeakUnref)) return;
    if (o.reached()) {
      o.set_flags(f & ~kLeakUnref);
      return;
    }
    s.unreferenced++;
    if ((f & kLeakReported) || !old_enough(o.meta())) return;
    o.set_flags(f | kLeakReported);
    s.new_reports++;
  });
  // Scan areas of objects that went away (their flag is gone: freed, or a
  // large allocation whose pages went back).
  for (size_t i = 0; i < g_areas.n;) {
    Obj o;
    if (lookup(g_areas.v[i].object, o) && o.start == g_areas.v[i].object && (o.flags() & kLeakAreas)) i++;
    else g_areas.erase(i);
  }
  // Magazines change as soon as the world runs again: outside a scan no
  // buffer is taken for free because it was in one. And the per-scan bits
  // start clear at the next scan.
  each_cache([](kmem_cache_t* cp) {
    each_slab(cp, [](Slab* sp) {
      LeakSlab* ls = sp->leak;
      for (uint32_t w = 0; w < ls->words; w++) ls->reached[w] = ls->scanned[w] = ls->magfree[w] = 0;
    });
  });
  segkmem_for_each_large(
      [](uintptr_t start, size_t, void*) {
        LargeLeakWords lw;
        if (segkmem_large_leak_words(start, lw)) *lw.w[LargeLeakWords::kFlagsWord] &= ~(3u << 16);
      },
      nullptr);
  for (size_t i = 0; i < g_reg.n; i++) g_reg.v[i].reached = g_reg.v[i].scanned = false;
}

// --- Reports, lookups, groups (also with the world stopped) ---------------------
// Which buffers magazines hold, for an operation other than a scan (the
// bits are kept clear between world stops).
void magazines_begin() {
  each_cache([](kmem_cache_t* cp) { mark_magazines(cp, false); });
}
void magazines_end() {
  each_cache([](kmem_cache_t* cp) {
    each_slab(cp, [](Slab* sp) {
      for (uint32_t w = 0; w < sp->leak->words; w++) sp->leak->magfree[w] = 0;
    });
  });
}

bool current_report(const Obj& o) {
  uint8_t f = o.flags();
  return o.min_count() > 0 && (f & kLeakReported) && (f & kLeakUnref);
}

// The size the object was asked for where its record knows it (a
// kmem_alloc's; Linux reports that), else its buffer's.
size_t requested_size(const Obj& o) {
  if (o.kind == Kind::kSlab) {
    size_t s = o.ls->meta[o.idx].size;
    return s && s <= o.size ? s : o.size;
  }
  if (o.kind == Kind::kLarge) {
    uint32_t slack = *o.lw.w[LargeLeakWords::kFlagsWord] >> kLargeSlackShift;  // slack + 1, 0: not known
    return slack && slack - 1 < o.size ? o.size - (slack - 1) : o.size;
  }
  return o.size;
}

// A slab buffer's stamp is the allocation's only while kmemleak is on (a
// buffer may change hands unstamped while it is off: kmemleak_meta.h,
// Stamps); large and registered objects' are always.
bool stamped(const Obj& o) { return o.kind != Kind::kSlab || kmemleak_enabled(); }

__attribute__((no_sanitize("address", "thread"))) void describe(const Obj& o, LeakObject& out) {
  LeakMeta m = o.meta();
  if (!stamped(o)) {
    uint8_t kept = m.flags & kLeakKept;
    m = LeakMeta{};
    m.flags = kept;
  }
  out.start = o.start;
  out.size = stamped(o) ? requested_size(o) : o.size;
  out.ticks = m.ticks ? m.ticks - 1 : 0;
  out.cpu = m.cpu;
  out.stack = m.stack;
  out.crc = m.crc;
  out.flags = m.flags;
  out.min_count = o.min_count();
  out.count = o.kind == Kind::kReg ? o.reg->count : (m.flags & kLeakUnref) ? 0 : 1;
  out.kind = kind_name(o);
  size_t n = o.size < sizeof out.head ? o.size : sizeof out.head;
  for (size_t i = 0; i < sizeof out.head; i++) out.head[i] = i < n ? reinterpret_cast<const uint8_t*>(o.start)[i] : 0;
}

void report_misuse(const char* what, uintptr_t a, bool interior, uintptr_t caller, uintptr_t start) {
  report_error(MemError{interior ? "kmemleak annotation of an address in no object"
                                 : "kmemleak annotation of an address that is not an object's start",
                        what, a, caller, start});
}

}  // namespace

// --- The hooks ---------------------------------------------------------------------
namespace {
__attribute__((noinline)) uint32_t capture(uintptr_t caller) {  // its frame off the stamp's path
  if (!__atomic_load_n(&g_backtraces, __ATOMIC_RELAXED)) return 0;
  return stackdepot_capture_from(caller);
}

// The stamp, on every allocation while kmemleak is on: the record found as
// leak_meta_of finds it, written whole as two words (LeakMeta's layout,
// little-endian: ticks, cpu, no flags, the size asked for; the stack
// handle, no checksum). A leaf for on-slab caches without backtraces;
// whatever calls out (an off-slab cache's page lookup, a backtrace) is a
// tail call to a function of its own.
__attribute__((noinline)) void* stamp_with_backtrace(uint64_t* m, uint64_t first, uintptr_t caller, void* obj) {
  m[1] = capture(caller);
  m[0] = first;
  return obj;
}

__attribute__((always_inline)) inline void* stamp_slab(kmem_cache_t* cp, Slab* sp, void* obj, uintptr_t caller,
                                                       size_t requested) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && offsetof(LeakMeta, cpu) == 4 &&
                offsetof(LeakMeta, flags) == 5 && offsetof(LeakMeta, size) == 6 && offsetof(LeakMeta, stack) == 8 &&
                offsetof(LeakMeta, crc) == 12);
  LeakSlab* ls = __atomic_load_n(&sp->leak, __ATOMIC_RELAXED);
  if (!ls) return obj;
  auto addr = reinterpret_cast<uintptr_t>(obj);
  auto* m = reinterpret_cast<uint64_t*>(&ls->meta[div_chunk(cp, addr - sp->base)]);
  // requested: a kmem_alloc class's size (16 KiB at most: 16 bits), or 0.
  uint64_t first = static_cast<uint32_t>(plat::ticks() + 1) | uint64_t{static_cast<uint8_t>(plat::cpu_id())} << 32 |
                   uint64_t{requested} << 48;
  if (__builtin_expect(__atomic_load_n(&g_backtraces, __ATOMIC_RELAXED), 1))
    return stamp_with_backtrace(m, first, caller, obj);
  m[1] = 0;
  m[0] = first;
  return obj;
}

__attribute__((noinline)) void* stamp_offslab(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t requested) {
  Slab* sp = slab_of_heap_address(reinterpret_cast<uintptr_t>(obj));
  return sp ? stamp_slab(cp, sp, obj, caller, requested) : obj;
}

}  // namespace

namespace {
__attribute__((always_inline)) inline void* stamp(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t requested) {
  if (!cp->tracked) return obj;
  if (__builtin_expect(cp->offslab, 0)) return stamp_offslab(cp, obj, caller, requested);
  return stamp_slab(cp, onslab_header(reinterpret_cast<uintptr_t>(obj)), obj, caller, requested);
}
}  // namespace

// noipa: not split in two.
__attribute__((noipa)) void* leak_stamp(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  return stamp(cp, obj, caller, 0);
}
__attribute__((noipa)) void* leak_stamp_sized(kmem_cache_t* cp, void* obj, uintptr_t caller, size_t requested) {
  return stamp(cp, obj, caller, requested);
}

void leak_note_large(void* obj, uintptr_t caller, size_t requested) {
  auto a = reinterpret_cast<uintptr_t>(obj);
  LargeLeakWords lw;
  if (!segkmem_large_leak_words(a, lw)) return;
  uintptr_t start;
  size_t size;
  uint32_t slack = 0;  // the pages' bytes past the request, + 1 (0: not known)
  if (segkmem_large_span(a, start, size) && requested && requested <= size && size - requested < kPageBytes)
    slack = static_cast<uint32_t>(size - requested) + 1;
  *lw.w[LargeLeakWords::kTicksWord] = static_cast<uint32_t>(plat::ticks()) + 1;
  *lw.w[LargeLeakWords::kFlagsWord] = static_cast<uint8_t>(plat::cpu_id()) | slack << kLargeSlackShift;
  *lw.w[LargeLeakWords::kStackWord] = capture(caller);
  *lw.w[LargeLeakWords::kCrcWord] = 0;
}

void leak_forget_areas(uintptr_t object) {
  Guard<> g(g_tables);
  for (size_t i = 0; i < g_areas.n;) {
    if (g_areas.v[i].object == object) g_areas.erase(i);
    else i++;
  }
}

// --- Control -------------------------------------------------------------------------
bool kmemleak_enabled() { return __atomic_load_n(&g_leak_on, __ATOMIC_RELAXED) != 0; }
void kmemleak_set_backtraces(bool on) { __atomic_store_n(&g_backtraces, on, __ATOMIC_RELAXED); }
void kmemleak_set_stack_scan(bool on) { __atomic_store_n(&g_stack_scan, on, __ATOMIC_RELAXED); }
void kmemleak_scrub_stack() {
  if (__atomic_load_n(&g_leak_on, __ATOMIC_RELAXED) && __atomic_load_n(&g_stack_scan, __ATOMIC_RELAXED))
    scrub_stack();
}
unsigned kmemleak_min_age_ms() { return __atomic_load_n(&g_min_age_ms, __ATOMIC_RELAXED); }

void kmemleak_last_scan(LeakScanStats& out) {
  Guard<> g(g_tables);
  out = g_last;
}

namespace {
struct ReportCopy {
  LeakObject* out;
  size_t max, skip, filled, seen;
};
}  // namespace

size_t kmemleak_reports(LeakObject* out, size_t max, size_t skip) {
  if (!kmem_ready()) return 0;
  ScanGuard g;
  if (!kmemleak_enabled()) return 0;  // no scan state to trust (6)
  ReportCopy rc{out, max, skip, 0, 0};
  with_world(
      [](void* a) {
        auto* rc = static_cast<ReportCopy*>(a);
        magazines_begin();
        each_object([rc](Obj& o) {
          if (!current_report(o)) return;
          if (rc->seen++ < rc->skip || rc->filled == rc->max) return;
          describe(o, rc->out[rc->filled++]);
        });
        magazines_end();
      },
      &rc);
  return rc.filled;
}

bool kmemleak_lookup(const void* addr, LeakObject& out) {
  if (!kmem_ready()) return false;
  ScanGuard g;
  struct L {
    uintptr_t a;
    LeakObject* out;
    bool found;
  } l{reinterpret_cast<uintptr_t>(addr), &out, false};
  with_world(
      [](void* a) {
        auto* l = static_cast<L*>(a);
        magazines_begin();
        Obj o;
        if (lookup(l->a, o)) {
          describe(o, *l->out);
          l->found = true;
        }
        magazines_end();
      },
      &l);
  return l.found;
}

size_t kmemleak_clear() {
  if (!kmem_ready()) return 0;
  ScanGuard g;
  if (!kmemleak_enabled()) return 0;  // no reports while off (6)
  size_t n = 0;
  with_world(
      [](void* a) {
        magazines_begin();
        each_object([a](Obj& o) {
          if (!current_report(o)) return;
          uint8_t f = static_cast<uint8_t>((o.flags() | kLeakNotLeak) & ~(kLeakReported | kLeakUnref));
          if (o.kind == Kind::kSlab) {
            // An annotation like kmemleak_not_leak's (kmemleak_meta.h,
            // Annotations): under the cache's lock where stopped CPUs may
            // hold it, the scanner holds it already (with_world).
            leak_record_flags(o.cp, o.sp, o.idx, f);
          } else {
            o.set_flags(f);
          }
          (*static_cast<size_t*>(a))++;
        });
        magazines_end();
      },
      &n);
  return n;
}

unsigned kmemleak_mark() {
  // A mark is a tick: wait for the next one, so that everything allocated
  // before the mark has an earlier tick than anything allocated after it.
  uint64_t t = plat::ticks();
  while (plat::ticks() == t) plat::cpu_relax();
  auto now = static_cast<uint32_t>(plat::ticks());
  if (!kmem_ready()) kmem_init();  // the marks' pages (the host's first use: bring_up)
  Guard<> g(g_tables);
  if (!g_marks.insert(g_marks.n, now)) return 0;
  return static_cast<unsigned>(g_marks.n);
}

namespace {
// The groups of a grouping, while the world is stopped: a hash table keyed
// by (stack, kind), of pages taken before the stop. When it fills past
// three quarters the pass stops adding and the caller tries again with a
// table twice the size (no allocation with the world stopped), so every
// distinct backtrace is counted and the largest are kept.
struct GroupEnt {
  const char* kind;  // null: a free slot
  uint32_t stack;
  uint64_t count, bytes;
  uintptr_t example;
};
struct Grouping {
  GroupEnt* t;
  size_t cap, n;  // cap: a power of two
  bool full;
  uint32_t since;  // ticks; objects at or after it (0: every object)
  bool reports_only, unref_only;
};
unsigned g_group_order;  // the last table's order that sufficed (g_world)

void group_add(Grouping& gr, const Obj& o) {
  if (gr.full) return;
  uint32_t stack = o.meta().stack;
  const char* kind = kind_name(o);
  size_t size = requested_size(o);
  size_t h = (stack * 0x9e3779b1u) ^ (reinterpret_cast<uintptr_t>(kind) >> 3);
  for (h &= gr.cap - 1;; h = (h + 1) & (gr.cap - 1)) {
    GroupEnt& e = gr.t[h];
    if (!e.kind) {
      if ((gr.n + 1) * 4 > gr.cap * 3) {
        gr.full = true;
        return;
      }
      e = GroupEnt{kind, stack, 1, size, o.start};
      gr.n++;
      return;
    }
    if (e.stack == stack && e.kind == kind) {
      e.count++;
      e.bytes += size;
      return;
    }
  }
}

// Fills out with the max groups of most bytes (most first); returns how
// many distinct backtraces there are.
size_t group(Grouping& gr, LeakGroup* out, size_t max) {
  if (!kmem_ready()) return 0;
  ScanGuard g;
  if (!kmemleak_enabled()) return 0;  // no stamps or scan state to trust (6)
  unsigned order = g_group_order;
  for (;;) {
    gr.t = static_cast<GroupEnt*>(table_pages(order));
    if (!gr.t) {
      plat::log("kmemleak: no memory for a table of %lu backtraces: the grouping is incomplete",
                static_cast<unsigned long>((kPageBytes << order) / sizeof(GroupEnt)));
      return 0;
    }
    __builtin_memset(gr.t, 0, kPageBytes << order);
    gr.cap = size_t{1} << plat::highest_bit((kPageBytes << order) / sizeof(GroupEnt));
    gr.n = 0;
    gr.full = false;
    with_world(
        [](void* a) {
          auto& gr = *static_cast<Grouping*>(a);
          magazines_begin();
          each_object([&gr](Obj& o) {
            if (o.min_count() < 0) return;
            LeakMeta m = o.meta();
            if (gr.reports_only && !current_report(o)) return;
            if (gr.unref_only && !(m.flags & kLeakUnref)) return;
            if (gr.since && (!m.ticks || m.ticks - 1 < gr.since)) return;
            group_add(gr, o);
          });
          magazines_end();
        },
        &gr);
    if (!gr.full || order == kMaxOrder) break;
    page_free_va(gr.t, order);
    order++;
  }
  if (gr.full) plat::log("kmemleak: more distinct backtraces than a table of %lu holds: the count is a lower bound",
                         static_cast<unsigned long>(gr.cap));
  g_group_order = order;
  // The max largest, most bytes first (insertion into out).
  size_t kept = 0;
  for (size_t i = 0; i < gr.cap; i++) {
    const GroupEnt& e = gr.t[i];
    if (!e.kind) continue;
    if (kept == max && (!max || out[max - 1].bytes >= e.bytes)) continue;
    size_t j = kept < max ? kept++ : max - 1;
    for (; j > 0 && out[j - 1].bytes < e.bytes; j--) out[j] = out[j - 1];
    out[j] = LeakGroup{e.stack, e.count, e.bytes, e.example, e.kind};
  }
  page_free_va(gr.t, order);
  return gr.n;
}
}  // namespace

size_t kmemleak_since(unsigned mark, bool unreferenced_only, LeakGroup* out, size_t max, bool* bad_mark) {
  uint32_t since;
  {
    Guard<> g(g_tables);
    *bad_mark = mark == 0 || mark > g_marks.n;
    if (*bad_mark) return 0;
    since = g_marks.v[mark - 1];
  }
  Grouping gr{};
  gr.since = since;
  gr.unref_only = unreferenced_only;
  return group(gr, out, max);
}

size_t kmemleak_summary(LeakGroup* out, size_t max) {
  Grouping gr{};
  gr.reports_only = true;
  return group(gr, out, max);
}

void kmemleak_memory(LeakMemory& out) {
  StackDepotStats sd;
  stackdepot_stats(sd);
  Guard<> g(g_tables);
  out.slab_records_bytes = leak_records_bytes();
  out.tables_bytes = g_reg.bytes() + g_roots.bytes() + g_areas.bytes() + g_marks.bytes() +
                     (g_gray ? (kPageBytes << g_gray_order) + (kPageBytes << g_stack_copy_order) : 0);
  out.stackdepot_bytes = sd.bytes_total;
}

// Pages kmemleak took from the page allocator (its tables, mark stack and
// stack copy), for the memory accounting; the stack depot counts its own.
uint64_t kmemleak_metadata_pages() {
  LeakMemory m;
  kmemleak_memory(m);
  return m.tables_bytes / kPageBytes;
}

namespace {
// The tables' pages come from the page allocator, which the host library
// brings up with kmem on first use (kmem_alloc does the same).
void bring_up() {
  if (!kmem_ready()) kmem_init();
}

// Records for every slab of every tracked cache (kmem_slab.cpp); false if
// some could not have them.
bool fill_records() {
  bool all = true;
  for_each_cache([&all](kmem_cache_t* cp) { all &= leak_records_fill(cp); });
  return all;
}

// Sets everything up for stamps and scans (g_world held).
void turn_on() {
  if (!g_gray) {
    g_gray_order = order_for_ram(kGrayOrder);
    g_stack_copy_order = order_for_ram(kStackCopyOrder);
    g_gray = static_cast<Gray*>(page_alloc_va(g_gray_order, KM_SLEEP));
    g_gray_cap = (kPageBytes << g_gray_order) / sizeof(Gray);
    g_stack_copy = static_cast<uintptr_t*>(page_alloc_va(g_stack_copy_order, KM_SLEEP));
  }
  stackdepot_init(stackdepot_default_pool());
  __atomic_store_n(&g_leak_records, true, __ATOMIC_RELAXED);
  if (!fill_records()) {
    __atomic_store_n(&g_leak_records_short, 1u, __ATOMIC_RELAXED);
    plat::log("kmemleak: no memory for the records of some slabs: their buffers are scanned as roots and "
              "counted as untracked until a scan finds memory for them");
  }
  // Stamps and scan state from before (a buffer may have changed hands
  // while kmemleak was off) go; annotations stay.
  with_world([](void*) { each_cache(leak_records_forget_stamps); }, nullptr);
#if defined(__SANITIZE_ADDRESS__)
  // Host under ASan with detect_stack_use_after_return: locals live in
  // fake frames on ASan's heap, which no stack scan reads.
  if (__asan_get_current_fake_stack())
    plat::log("kmemleak: ASan's detect_stack_use_after_return keeps locals off the stacks: the stack scan "
              "misses them (ASAN_OPTIONS=detect_stack_use_after_return=0)");
#endif
  __atomic_store_n(&g_leak_on, 1u, __ATOMIC_RELAXED);
}
}  // namespace

}  // namespace mm

// --- Linux's annotations and the program interface --------------------------------------
using namespace mm;

void kmemleak_enable(bool on) {
  bring_up();
  // The hooks are flipped with g_world released: in the kernel that patches
  // code and stops every other core, which may be waiting for it.
  if (on) {
    {
      ScanGuard g;
      if (kmemleak_enabled()) return;
      turn_on();
    }
    if (!alloc_hooks_set(kFeatureKmemleak, true)) plat::log("kmemleak: could not turn the allocators' hooks on");
  } else {
    if (!kmemleak_enabled()) return;
    alloc_hooks_set(kFeatureKmemleak, false);
    ScanGuard g;
    __atomic_store_n(&g_leak_on, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&g_leak_records, false, __ATOMIC_RELAXED);
  }
}

void kmemleak_add_root(const void* start, size_t size) {
  bring_up();
  mm::Guard<> g(g_tables);
  if (!g_roots.insert(g_roots.n, Root{reinterpret_cast<uintptr_t>(start), size}))
    plat::log("kmemleak: no memory to register a root");
}

void kmemleak_del_root(const void* start) {
  {
    mm::Guard<> g(g_tables);
    for (size_t i = 0; i < g_roots.n; i++)
      if (g_roots.v[i].start == reinterpret_cast<uintptr_t>(start)) return g_roots.erase(i);
  }
  report_error(MemError{"kmemleak_del_root of a range never added", "kmemleak", reinterpret_cast<uintptr_t>(start),
                        caller_of_api(), 0});
}

void kmemleak_set_min_age_ms(unsigned ms) { __atomic_store_n(&g_min_age_ms, ms, __ATOMIC_RELAXED); }

namespace {
__attribute__((noinline)) size_t scan_now() {  // its frame is built below the scrub, not in kmemleak_scan's
  ScanGuard g;
  if (!kmemleak_enabled()) return 0;
  // Slabs that went without records while memory was short: try again.
  if (__atomic_exchange_n(&g_leak_records_short, 0u, __ATOMIC_RELAXED) && !fill_records())
    __atomic_store_n(&g_leak_records_short, 1u, __ATOMIC_RELAXED);
  Scan s;
  s.now = static_cast<uint32_t>(plat::ticks());
  uint64_t age_ticks = uint64_t{kmemleak_min_age_ms()} * plat::ticks_per_second() / 1000;
  s.min_age_ticks = static_cast<uint32_t>(age_ticks);
  g_scan = &s;
  uint64_t t0 = plat::monotonic_ns();
  uint64_t pause = with_world(scan_world, nullptr);
  {
    mm::Guard<> t(g_tables);
    g_last.scans++;
    g_last.duration_ns = plat::monotonic_ns() - t0;
    g_last.pause_ns = pause;
    g_last.bytes_scanned = s.bytes;
    g_last.objects = s.objects;
    g_last.unreferenced = s.unreferenced;
    g_last.new_reports = s.new_reports;
    g_last.gray_overflows = s.overflows;
    g_last.untracked_objects = s.untracked_objects;
    g_last.untracked_slabs = s.untracked_slabs;
  }
  g_scan = nullptr;
  return s.new_reports;
}
}  // namespace

// A frame with nothing in it but what it writes: it sits where the
// caller's previous callee's frame was, whose stale slots a frame with
// locals would keep and the stack scan would read. Everything else the scan
// runs on is built below it, on the stack scrub_stack just zeroed.
__attribute__((noinline)) size_t kmemleak_scan(void) {
  if (!kmem_ready() || !kmemleak_enabled()) return 0;
  scrub_stack();
  return scan_now();
}

size_t kmemleak_leaks(const void** out, size_t max) {
  LeakObject buf[16];
  size_t total = 0;
  for (size_t skip = 0;; skip += 16) {
    size_t n = kmemleak_reports(buf, 16, skip);
    for (size_t i = 0; i < n; i++, total++)
      if (total < max) out[total] = reinterpret_cast<const void*>(buf[i].start);
    if (n < 16) return total;
  }
}

void kmemleak_alloc(const void* ptr, size_t size, int min_count, int) {
  uintptr_t caller = caller_of_api();
  auto a = reinterpret_cast<uintptr_t>(ptr);
  if (!ptr || !size || a + size < a || min_count < -1) {
    report_error(MemError{"kmemleak_alloc with a null pointer, size 0 or a bad min_count", "kmemleak", a, caller, size});
    return;
  }
  RegObj r{};
  r.start = a;
  r.size = size;
  r.min_count = min_count;
  r.meta.ticks = static_cast<uint32_t>(plat::ticks()) + 1;
  r.meta.cpu = static_cast<uint8_t>(plat::cpu_id());
  r.meta.stack = capture(caller);  // before the lock: the stack depot has its own
  if (min_count == -1) r.meta.flags = kLeakIgnore;
  if (min_count == 0) r.meta.flags = kLeakNotLeak;
  const char* error = nullptr;
  bring_up();
  {
    mm::Guard<> g(g_tables);
    size_t at = 0;
    while (at < g_reg.n && g_reg.v[at].start < a) at++;
    if ((at < g_reg.n && g_reg.v[at].start < a + size) || (at && g_reg.v[at - 1].start + g_reg.v[at - 1].size > a))
      error = "kmemleak_alloc of a range that overlaps a registered object";
    else if (!g_reg.insert(at, r))
      error = "kmemleak_alloc: no memory to register the object (not tracked)";
  }
  if (error) report_error(MemError{error, "kmemleak", a, caller, size});
}

void kmemleak_free(const void* ptr) {
  auto a = reinterpret_cast<uintptr_t>(ptr);
  {
    mm::Guard<> g(g_tables);
    for (size_t i = 0; i < g_reg.n; i++)
      if (g_reg.v[i].start == a) {
        g_reg.erase(i);
        return;
      }
  }
  report_error(MemError{"kmemleak_free of an address no kmemleak_alloc registered", "kmemleak", a, caller_of_api(), 0});
}

namespace {
// The slab buffer containing a, if a is in a slab of a tracked cache:
// its cache, slab and start.
bool slab_buffer_at(uintptr_t a, kmem_cache_t*& cp, Slab*& sp, uintptr_t& start) {
  sp = slab_of_heap_address(a);
  if (!sp) return false;
  cp = sp->cache;
  if (!cp || !cp->tracked || a < sp->base) return false;
  uintptr_t i = div_chunk(cp, a - sp->base);
  start = sp->base + i * cp->chunk;
  return i < sp->chunks && a - start < cp->bufsize;
}

// Sets and clears flags of the object starting at ptr (Linux's annotations;
// any context). A slab buffer's go into its record under its cache's lock
// (kmem_slab.cpp, leak_annotate: made on demand, kmemleak on or off); a
// large allocation's or a registered object's under g_tables.
void annotate(const char* what, const void* ptr, uint8_t set, uint8_t clear, uintptr_t caller) {
  auto a = reinterpret_cast<uintptr_t>(ptr);
  kmem_cache_t* cp;
  Slab* sp;
  uintptr_t start;
  if (slab_of_heap_address(a)) {
    if (slab_buffer_at(a, cp, sp, start) && start == a) {
      // Nothing to keep while off (a transient leak's state is a scan's).
      if (!(set & kLeakKept) && !kmemleak_enabled()) return;
      LeakAnnotation r = leak_annotate(cp, sp, a, set, clear);
      if (r == LeakAnnotation::kDone) return;
      if (r == LeakAnnotation::kNoMemory) {
        report_error(MemError{"kmemleak annotation lost: no memory for the records of the object's slab", what, a,
                              caller, 0});
        return;
      }
    }
    return report_misuse(what, a, false, caller, 0);
  }
  uintptr_t found = 0;
  {
    mm::Guard<> g(g_tables);
    Obj o;
    if (lookup(a, o)) {
      found = o.start;
      if (o.start == a) {
        o.set_flags(static_cast<uint8_t>((o.flags() | set) & ~clear));
        if (clear & kLeakCandidate) o.set_crc(0);
        return;
      }
    }
  }
  report_misuse(what, a, false, caller, found);
}
}  // namespace

void kmemleak_not_leak(const void* ptr) { annotate("kmemleak_not_leak", ptr, kLeakNotLeak, 0, caller_of_api()); }
void kmemleak_ignore(const void* ptr) { annotate("kmemleak_ignore", ptr, kLeakIgnore, 0, caller_of_api()); }
void kmemleak_no_scan(const void* ptr) { annotate("kmemleak_no_scan", ptr, kLeakNoScan, 0, caller_of_api()); }
void kmemleak_transient_leak(const void* ptr) {
  annotate("kmemleak_transient_leak", ptr, 0, kLeakCandidate, caller_of_api());
}

void kmemleak_scan_area(const void* ptr, size_t size, int) {
  uintptr_t caller = caller_of_api();
  auto a = reinterpret_cast<uintptr_t>(ptr);
  kmem_cache_t* cp;
  Slab* sp;
  uintptr_t start;
  if (slab_of_heap_address(a)) {
    if (!slab_buffer_at(a, cp, sp, start)) return report_misuse("kmemleak_scan_area", a, true, caller, 0);
    // The flag first: a scan that sees it before the area scans the whole
    // object (scan_object), never too little.
    LeakAnnotation r = leak_annotate(cp, sp, start, kLeakAreas, 0);
    if (r == LeakAnnotation::kNoObject) return report_misuse("kmemleak_scan_area", a, true, caller, 0);
    if (r == LeakAnnotation::kNoMemory) {
      report_error(MemError{"kmemleak annotation lost: no memory for the records of the object's slab",
                            "kmemleak_scan_area", a, caller, 0});
      return;
    }
    size_t room = start + cp->bufsize - a;
    bool added;
    {
      mm::Guard<> g(g_tables);
      size_t at = 0;
      while (at < g_areas.n && g_areas.v[at].object <= start) at++;
      added = g_areas.insert(at, Area{start, a, size > room ? room : size});
    }
    if (!added) plat::log("kmemleak: no memory for a scan area: the whole object is scanned");
    return;
  }
  bool ok = false, added = false;
  {
    mm::Guard<> g(g_tables);
    Obj o;
    if (lookup(a, o)) {
      ok = true;
      size_t room = o.start + o.size - a;
      size_t at = 0;
      while (at < g_areas.n && g_areas.v[at].object <= o.start) at++;
      added = g_areas.insert(at, Area{o.start, a, size > room ? room : size});
      if (added) o.set_flags(static_cast<uint8_t>(o.flags() | kLeakAreas));
    }
  }
  if (!ok) return report_misuse("kmemleak_scan_area", a, true, caller, 0);
  if (!added) plat::log("kmemleak: no memory for a scan area: the whole object is scanned");
}
