// SPDX-License-Identifier: Apache-2.0
// `kmem torture OPS [SEED]`: a seeded random mix of every allocator
// operation on every online core at once, checking every byte it can.
//
// 1. Work. call_on_all runs one worker per core; OPS is split between them.
//    An operation picks one of kHeld slots of its core's table: an empty
//    slot gets a new allocation of a random kind (kmem_alloc / kmem_zalloc
//    of 1 B..64 KiB, an object of one of the shared caches, a page block of
//    any order, a vmem_alloc or a constrained vmem_xalloc); a full slot's
//    allocation is checked and freed, here or (half the time) on a random
//    other core through that core's inbox. Movable caches keep their objects
//    in a shared registry instead (Moves, below). Now and then a worker runs a
//    reap, a consolidator pass, or creates a cache, fills it and destroys it.
//    Every allocation is KM_NOSLEEP / VM_NOSLEEP: a failure is counted, not
//    an error. Only creating the shared caches and arenas may wait.
// 2. Patterns. Each buffer holds bytes derived from its address and a
//    generation (a per-core counter), written after allocation and checked
//    before the free; buffers up to 256 bytes entirely, larger ones their
//    first and last 64 bytes and 8 bytes every 512 (page blocks: the first
//    16 bytes of every page). kmem_zalloc buffers are checked to be zero
//    first. Caches with a constructor hold a constructed pattern (address
//    and generation 0) while free: checked on allocation and by the
//    destructor, written back before each free. vmem arenas are integers:
//    a bitmap with a bit per quantum, set on allocation and cleared before
//    the free, catches two live segments sharing a quantum; xalloc results
//    are checked against their align/phase/nocross/min/max. Any mismatch is
//    a corruption: counted, and the first ones reported with the cache,
//    address, offset, byte found and byte expected.
// 3. Moves. A movable cache's objects live in a registry (slot -> object,
//    generation) behind one lock; the object's first word names its slot.
//    The move callback takes the lock, answers DONT_KNOW for an object the
//    registry does not hold (allocated and not yet registered, or taken out
//    to be freed), checks the old object, writes the pattern at the new
//    address, and moves it; some objects answer LATER, and some DONT_NEED
//    (the registry drops them and kmem frees them, counted as frees).
// 4. Ordering. An inbox is a ring behind a SpinLock taken with IrqSave: the
//    producer's unlock (a release store) publishes the buffer's pattern and
//    the item; the consumer's lock (an acquire exchange) receives them. A
//    registry's lock orders a registered object's pattern the same way.
//    After its last operation a worker frees what it holds and adds 1 to
//    `finished` (release); it drains its inbox until a load of `finished`
//    (acquire) says every worker is past its last push, then drains it once
//    more, which empties it for good.
// 5. Per-CPU state. A worker's table, counters and generator are touched
//    only by that worker, in thread context (the move callback runs inside a
//    kmem_move_pass the worker itself calls), so they need no masking; the
//    inboxes and registries are shared and locked with interrupts masked.
// 6. The end. The calling core empties the registries, destroys every cache
//    and arena (each destroy must succeed: no live object), checks the
//    bitmaps are clear and constructors equal destructors, reaps everything
//    (kmem_reap(true) and the per-CPU page caches, as `kmem reap`), and
//    compares free pages with their value after the same reap at the start,
//    allowing for the pages kmem and vmem kept for their own metadata and
//    new page tables of the heap (neither is given back by a reap). The
//    last line says PASS or FAIL. Ops per second are of the monotonic clock
//    (virtual time under --icount); instructions per operation are the
//    arch cycle counter's ticks over the run, sampled by the calling core
//    (exact instructions of all vCPUs under qemu-run --icount).
// 7. kmemleak mode. `kmem torture OPS SEED kmemleak`: the calling core runs
//    no worker; it switches kmemleak on, settles what was there before
//    (scans, then clear), starts the workers on the other cores, and then
//    switches kmemleak off and on again and again while they run, scanning
//    while it is on. Everything the workers allocate stays reachable (their
//    tables and inboxes live in the run's state, which .bss points to; an
//    item in flight is in a core's registers or on its stack), so every
//    report is a false leak: counted, the first ones printed, and the run
//    fails. Switching patches code with every other core parked, which
//    waits for every core's mailbox: a worker gives its core back when a
//    cross-call waits (smp::another_call_waits) and the checker posts it
//    again; its state is in its Core. kmemleak is left as it was found.
#include <atomic>
#include <new>
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/percpu.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/spinlock.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include <kernel/torture.h>
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <mm/page.h>
#include <mm/vmem.h>
#include "mm/accounting.h"


namespace {

using ull = unsigned long long;

constexpr uint64_t kMaxOps = 10'000'000'000ull;
constexpr uint64_t kProgressMinOps = 100000;  // per core: shorter runs print no progress
constexpr unsigned kHeld = 64;          // slots per core
constexpr unsigned kInbox = 64;         // items per core's inbox
constexpr unsigned kRegSlots = 2048;    // per movable cache
constexpr unsigned kMaxReports = 16;    // corruptions printed in full
constexpr size_t kMaxKmemSize = 64 * 1024;
constexpr uint32_t kCtorGen = 0;        // the constructed pattern's generation

// --- what is allocated ------------------------------------------------------

enum Kind : uint8_t { kKmemAlloc, kKmemZalloc, kCache, kMovable, kPages, kVmemAlloc, kVmemXalloc, kEphemeral, kKinds };
const char* const kKindName[kKinds] = {"kmem_alloc", "kmem_zalloc", "cache",      "movable cache",
                                       "page_alloc", "vmem_alloc",  "vmem_xalloc", "create/destroy"};

struct CacheSpec {
  const char* name;
  size_t size, align;
  bool ctor, movable;
  int cflags;
};
constexpr CacheSpec kCaches[] = {
    {"torture_24_ctor", 24, 0, true, false, 0},
    {"torture_200", 200, 0, false, false, 0},
    {"torture_1000_ctor", 1000, 64, true, false, 0},
    {"torture_3000_nomag", 3000, 0, false, false, KMC_NOMAGAZINE},
    {"torture_64_ctor_move", 64, 0, true, true, 0},
    {"torture_320_move", 320, 0, false, true, 0},
};
constexpr unsigned kNumCaches = sizeof kCaches / sizeof kCaches[0];
constexpr unsigned kFirstMovable = 4;
constexpr unsigned kNumMovable = kNumCaches - kFirstMovable;

struct ArenaSpec {
  const char* name;
  uintptr_t base;
  size_t size, quantum, qcache_max;
};
constexpr ArenaSpec kArenas[] = {
    {"torture_qc", 0x10000000, size_t{16} << 20, 4096, 8 * 4096},  // with quantum caches
    {"torture_64", 0x20000000, size_t{1} << 20, 64, 0},
};
constexpr unsigned kNumArenas = sizeof kArenas / sizeof kArenas[0];
constexpr size_t kMaxQuanta = (size_t{1} << 20) / 64;  // the larger bitmap
constexpr size_t kBitmapWords = kMaxQuanta / 32;
static_assert(kArenas[0].size / kArenas[0].quantum <= kMaxQuanta && kArenas[1].size / kArenas[1].quantum <= kMaxQuanta);

struct Item {
  void* p = nullptr;
  size_t size = 0;   // bytes (pages: order)
  uint32_t gen = 0;
  uint8_t kind = 0;
  uint8_t sub = 0;   // cache or arena index
  uint8_t cpu = 0;   // the allocating core
};

struct Counts {
  uint64_t allocs[kKinds] = {}, frees[kKinds] = {}, fails[kKinds] = {}, cross[kKinds] = {};
  uint64_t ops = 0, reaps = 0, move_passes = 0, moves = 0, later = 0, dont_need = 0;
};

struct Rng {
  uint64_t s = 0;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

struct alignas(64) Core {
  Item held[kHeld] = {};
  SpinLock inbox_lock;
  Item inbox[kInbox] = {};   // guarded by inbox_lock
  unsigned inbox_head = 0, inbox_count = 0;
  Item drained[kInbox] = {};  // the worker's copy while it frees them
  Counts n = {};
  Rng rng = {};
  uint64_t ops = 0;           // this core's share
  uint64_t op = 0;            // the next one (a worker that yields resumes there)
  unsigned index = 0;         // in Torture::worker
  uint32_t gen = 0;
  bool released = false;      // its held items are freed and it counted itself finished
  bool complete = false;      // nothing left to do
  std::atomic<bool> running{false};  // in worker() (kmemleak mode: the checker posts it again when it yields)
};

struct RegSlot {
  void* p = nullptr;  // nullptr: empty; kReserved: an allocation is on its way
  uint32_t gen = 0;
  uint32_t cpu = 0;
};
struct Registry {
  SpinLock lock;
  RegSlot slot[kRegSlots] = {};  // guarded by lock
  unsigned cache = 0;
};

struct Torture {
  uint64_t ops = 0, seed = 0;
  unsigned cpus = 0, caller = 0;  // cpus: the workers
  unsigned worker[kMaxCpus] = {};  // their cores: all online ones, or all but the caller's (kmemleak mode)
  bool leakcheck = false;          // kmemleak mode (7.): workers yield to cross-calls and are posted again
  kmem_cache_t* cache[kNumCaches] = {};
  vmem_t* arena[kNumArenas] = {};
  Registry reg[kNumMovable];
  std::atomic<uint32_t> bitmap[kNumArenas][kBitmapWords] = {};
  std::atomic<unsigned> finished{0};
  std::atomic<uint64_t> corruptions{0}, ctors{0}, dtors{0}, eph_destroy_fail{0};
  std::atomic<unsigned> reports{0};
  std::atomic<size_t> last_offset{0};  // of the last corruption reported (for the KTEST)
  uint64_t ticks = 0, last_tick = 0;  // the calling core's sampling of arch::cycles
};

// The run's state: heap memory while a run (or the self-test) lasts, not
// .data (it is tens of KiB; a small board has no room to keep it).
struct State {
  Torture t;
  Core core[kMaxCpus];
};
State* g_state;
Core* g_core;
Torture* g_t;

// Sets g_state up (zeroed, constructed); false if there is no memory.
bool state_begin() {
  // KM_SLEEP (no injected failure) where RAM is plenty; on a small board
  // (below 1 MiB) waiting could be for ever: NOSLEEP, and a message.
  void* mem = kmem_zalloc(sizeof(State), mm::page_ram_bytes() >= (uint64_t{1} << 20) ? KM_SLEEP : KM_NOSLEEP);
  if (!mem) {
    kprintf("kmem torture: no %zu bytes for its state\n", sizeof(State));
    return false;
  }
  g_state = new (mem) State{};
  g_core = g_state->core;
  g_t = &g_state->t;
  return true;
}
void state_end() {
  g_state->~State();
  kmem_free(g_state, sizeof(State));
  g_state = nullptr;
  g_core = nullptr;
  g_t = nullptr;
}
char g_reserved_byte;
void* const kReserved = &g_reserved_byte;

// --- patterns ---------------------------------------------------------------

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return z ^ (z >> 33);
}
uint64_t chunk_value(const void* obj, uint32_t gen, size_t off) {
  return mix(reinterpret_cast<uintptr_t>(obj) * 0x9e3779b97f4a7c15ull + (uint64_t{gen} << 32) + off);
}

// Calls f(off, len) for the chunks of an object of `size` bytes that carry
// the pattern (design statement, 2). f returns false to stop.
template <class F>
bool for_each_chunk(size_t size, size_t from, F&& f) {
  auto range = [&](size_t a, size_t b) {
    for (size_t off = a; off < b; off += 8)
      if (!f(off, b - off < 8 ? b - off : 8)) return false;
    return true;
  };
  if (size <= 256) return range(from, size);
  if (!range(from, 64)) return false;
  for (size_t off = 512; off + 8 <= size - 64; off += 512)
    if (!f(off, 8)) return false;
  return range(size - 64, size);
}

void stamp(void* obj, size_t size, uint32_t gen, size_t from = 0) {
  auto* b = static_cast<uint8_t*>(obj);
  for_each_chunk(size, from, [&](size_t off, size_t len) {
    uint64_t v = chunk_value(obj, gen, off);
    memcpy(b + off, &v, len);  // little-endian bytes on every board
    return true;
  });
}

void report_corruption(const char* what, const void* obj, size_t off, uint8_t found, uint8_t want) {
  g_t->corruptions.fetch_add(1, std::memory_order_relaxed);
  g_t->last_offset.store(off, std::memory_order_relaxed);
  if (g_t->reports.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
  kprintf("kmem torture: CORRUPTION in %s: buffer %p offset %llu: found 0x%02x, expected 0x%02x (cpu %u)\n", what, obj,
          (ull)off, found, want, cpu_id());
}

// A corruption that is not a wrong byte (vmem overlaps and constraints, a
// movable object's header).
void report_problem(const char* what, const void* obj, size_t off, const char* detail) {
  g_t->corruptions.fetch_add(1, std::memory_order_relaxed);
  g_t->last_offset.store(off, std::memory_order_relaxed);
  if (g_t->reports.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
  kprintf("kmem torture: CORRUPTION in %s: %p offset %llu: %s (cpu %u)\n", what, obj, (ull)off, detail, cpu_id());
}

// Checks the pattern; reports the first bad byte. zero: expects zeroes.
bool check(const char* what, const void* obj, size_t size, uint32_t gen, bool zero = false, size_t from = 0) {
  auto* b = static_cast<const uint8_t*>(obj);
  bool ok = true;
  for_each_chunk(size, from, [&](size_t off, size_t len) {
    uint64_t v = zero ? 0 : chunk_value(obj, gen, off);
    uint8_t want[8];
    memcpy(want, &v, 8);
    for (size_t i = 0; i < len; i++) {
      if (b[off + i] != want[i]) {
        report_corruption(what, obj, off + i, b[off + i], want[i]);
        ok = false;
        return false;
      }
    }
    return true;
  });
  return ok;
}

constexpr size_t kPageStamp = 16;  // bytes stamped at the start of every page of a block
void stamp_pages(void* va, unsigned order, uint32_t gen) {
  for (size_t i = 0; i < (size_t{1} << order); i++) stamp(static_cast<char*>(va) + i * mm::kPageBytes, kPageStamp, gen);
}
void check_pages(void* va, unsigned order, uint32_t gen) {
  for (size_t i = 0; i < (size_t{1} << order); i++)
    if (!check("page block", static_cast<char*>(va) + i * mm::kPageBytes, kPageStamp, gen)) return;
}

// --- cache callbacks ----------------------------------------------------------

int ctor(void* buf, void* priv, int) {
  stamp(buf, static_cast<const CacheSpec*>(priv)->size, kCtorGen);
  g_t->ctors.fetch_add(1, std::memory_order_relaxed);
  return 0;
}
void dtor(void* buf, void* priv) {
  check(static_cast<const CacheSpec*>(priv)->name, buf, static_cast<const CacheSpec*>(priv)->size, kCtorGen);
  g_t->dtors.fetch_add(1, std::memory_order_relaxed);
}

// A movable object's first word is its registry slot; the pattern follows.
constexpr size_t kHeader = sizeof(uint32_t) * 2;
void stamp_movable(void* obj, const CacheSpec& cs, uint32_t slot, uint32_t gen) {
  uint32_t h[2] = {slot, gen};
  memcpy(obj, h, sizeof h);
  stamp(obj, cs.size, gen, kHeader);
}
bool check_movable(void* obj, const CacheSpec& cs, uint32_t slot, uint32_t gen) {
  uint32_t h[2];
  memcpy(h, obj, sizeof h);
  if (h[0] != slot || h[1] != gen) {
    report_problem(cs.name, obj, h[0] != slot ? 0 : 4, "the header names another registry slot or generation");
    return false;
  }
  return check(cs.name, obj, cs.size, gen, false, kHeader);
}

// Back to the constructed state before a free (ctor caches).
void unconstruct(void* obj, const CacheSpec& cs) {
  if (cs.ctor) stamp(obj, cs.size, kCtorGen);
}

kmem_cbrc_t move_cb(void* old, void* dst, size_t, void* priv) {
  auto* r = static_cast<Registry*>(priv);
  const CacheSpec& cs = kCaches[r->cache];
  uint32_t slot;
  memcpy(&slot, old, sizeof slot);  // any value: checked against the registry
  Guard<SpinLock, IrqSave> g(r->lock);
  if (slot >= kRegSlots || r->slot[slot].p != old) return KMEM_CBRC_DONT_KNOW;
  RegSlot& s = r->slot[slot];
  Core& c = g_core[cpu_id()];
  Counts& n = c.n;
  uint32_t h = c.rng.below(16);  // random, not per object: a LATER ends this victim's pass
  if (h == 0) {
    n.later++;
    return KMEM_CBRC_LATER;
  }
  check_movable(old, cs, slot, s.gen);
  if (cs.ctor) check(cs.name, dst, cs.size, kCtorGen);  // kmem hands a constructed buffer
  if (h == 1) {  // the client lets it go: kmem frees both
    unconstruct(old, cs);
    s.p = nullptr;
    n.dont_need++;
    n.frees[kMovable]++;
    return KMEM_CBRC_DONT_NEED;
  }
  stamp_movable(dst, cs, slot, s.gen);
  unconstruct(old, cs);  // kmem frees the old buffer constructed
  s.p = dst;
  n.moves++;
  return KMEM_CBRC_YES;
}

// --- one operation ----------------------------------------------------------

size_t random_size(Rng& r) {
  static_assert(kMaxKmemSize == size_t{1} << 16);
  size_t cap = size_t{1} << r.below(17);  // 1 B .. 64 KiB, each power of two as likely a bound
  return 1 + r.next() % cap;
}

uint32_t bits_of(const ArenaSpec& a, uintptr_t addr, size_t size, uint32_t& first) {
  first = static_cast<uint32_t>((addr - a.base) / a.quantum);
  return static_cast<uint32_t>((size + a.quantum - 1) / a.quantum);
}
// Marks the quanta of a live segment; any already marked is an overlap.
void mark(unsigned ai, uintptr_t addr, size_t size) {
  const ArenaSpec& a = kArenas[ai];
  if (addr < a.base || addr + size > a.base + a.size || addr + size < addr) {
    report_problem(a.name, reinterpret_cast<void*>(addr), 0, "segment outside the arena");
    return;
  }
  uint32_t first, n = bits_of(a, addr, size, first);
  for (uint32_t q = first; q < first + n; q++) {
    // Relaxed: the arena's lock orders a free's clear before the next
    // allocation of the same quanta.
    uint32_t old = g_t->bitmap[ai][q / 32].fetch_or(1u << (q % 32), std::memory_order_relaxed);
    if (old & (1u << (q % 32))) {
      report_problem(a.name, reinterpret_cast<void*>(addr), (q - first) * a.quantum,
                     "this quantum is already part of another live segment");
      return;
    }
  }
}
void unmark(unsigned ai, uintptr_t addr, size_t size) {
  const ArenaSpec& a = kArenas[ai];
  uint32_t first, n = bits_of(a, addr, size, first);
  for (uint32_t q = first; q < first + n; q++)
    g_t->bitmap[ai][q / 32].fetch_and(~(1u << (q % 32)), std::memory_order_relaxed);
}

// vmem_xalloc with random constraints; checks the result against them.
void* random_xalloc(Rng& r, unsigned ai, size_t& size) {
  const ArenaSpec& a = kArenas[ai];
  size_t q = a.quantum;
  size = q * (1 + r.below(32));
  size_t align = r.below(3) ? q << r.below(6) : 0;
  size_t ralign = align ? align : q;
  size_t phase = align ? q * r.below(static_cast<uint32_t>(align / q)) : 0;
  size_t nocross = 0;
  if (r.below(3) == 0) {
    size_t need = ralign > phase + size ? ralign : phase + size;
    nocross = q;
    while (nocross < need) nocross <<= 1;
    nocross <<= r.below(3);
  }
  uintptr_t minaddr = 0, maxaddr = 0;
  if (r.below(3) == 0) {
    size_t quanta = a.size / q;
    minaddr = a.base + q * r.below(static_cast<uint32_t>(quanta / 2));
    maxaddr = minaddr + size + ralign + (nocross ? nocross : 0) + q * r.below(static_cast<uint32_t>(quanta / 2));
    if (maxaddr > a.base + a.size) maxaddr = a.base + a.size;
    if (maxaddr - minaddr < size + ralign + nocross) minaddr = 0, maxaddr = 0;  // no window: unconstrained
  }
  static constexpr int kPolicy[] = {0, VM_BESTFIT, VM_NEXTFIT, VM_INSTANTFIT};
  void* p = vmem_xalloc(g_t->arena[ai], size, align, phase, nocross, reinterpret_cast<void*>(minaddr),
                        reinterpret_cast<void*>(maxaddr), VM_NOSLEEP | kPolicy[r.below(4)]);
  if (!p) return nullptr;
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  bool ok = v % ralign == phase && (!nocross || v / nocross == (v + size - 1) / nocross) &&
            (!maxaddr || (v >= minaddr && v + size <= maxaddr));
  if (!ok) {
    kprintf("kmem torture: vmem_xalloc(%s, size %llu, align %llu, phase %llu, nocross %llu, min %p, max %p) "
            "returned %p, outside its constraints\n",
            a.name, (ull)size, (ull)align, (ull)phase, (ull)nocross, reinterpret_cast<void*>(minaddr),
            reinterpret_cast<void*>(maxaddr), p);
    report_problem(a.name, p, 0, "vmem_xalloc broke its constraints");
  }
  return p;
}

// A new allocation for an empty slot; false if it failed (counted).
bool allocate(Core& c, Item& it) {
  Rng& r = c.rng;
  Counts& n = c.n;
  uint32_t gen = ++c.gen;
  if (gen == kCtorGen) gen = ++c.gen;
  it = Item{nullptr, 0, gen, 0, 0, static_cast<uint8_t>(cpu_id())};
  uint32_t pick = r.below(100);
  if (pick < 40) {
    bool zero = pick < 10;
    it.kind = zero ? kKmemZalloc : kKmemAlloc;
    it.size = random_size(r);
    it.p = zero ? kmem_zalloc(it.size, KM_NOSLEEP) : kmem_alloc(it.size, KM_NOSLEEP);
    if (it.p && zero) check("kmem_zalloc (not zeroed)", it.p, it.size, 0, true);
  } else if (pick < 72) {
    it.kind = kCache;
    it.sub = static_cast<uint8_t>(r.below(kFirstMovable));
    const CacheSpec& cs = kCaches[it.sub];
    it.size = cs.size;
    it.p = kmem_cache_alloc(g_t->cache[it.sub], KM_NOSLEEP);
    if (it.p && cs.ctor) check(cs.name, it.p, cs.size, kCtorGen);  // constructed
  } else if (pick < 84) {
    it.kind = kPages;
    unsigned order = 0;
    while (order < mm::kMaxOrder && r.below(2)) order++;  // order k with probability 2^-(k+1)
    it.size = order;
    it.p = mm::page_alloc_va(order, KM_NOSLEEP);
    if (it.p) stamp_pages(it.p, order, gen);
  } else {
    it.sub = static_cast<uint8_t>(r.below(kNumArenas));
    if (pick < 90) {
      it.kind = kVmemAlloc;
      it.size = kArenas[it.sub].quantum * (1 + r.below(12));  // quantum caches up to 8
      it.p = vmem_alloc(g_t->arena[it.sub], it.size, VM_NOSLEEP);
    } else {
      it.kind = kVmemXalloc;
      it.p = random_xalloc(r, it.sub, it.size);
    }
    if (it.p) mark(it.sub, reinterpret_cast<uintptr_t>(it.p), it.size);
  }
  if (!it.p) {
    n.fails[it.kind]++;
    return false;
  }
  n.allocs[it.kind]++;
  if (it.kind == kKmemAlloc || it.kind == kKmemZalloc || it.kind == kCache) stamp(it.p, it.size, gen);
  return true;
}

// Checks and frees an item (on whichever core holds it now).
void release(Core& c, const Item& it) {
  Counts& n = c.n;
  switch (it.kind) {
    case kKmemAlloc:
    case kKmemZalloc:
      check(kKindName[it.kind], it.p, it.size, it.gen);
      kmem_free(it.p, it.size);
      break;
    case kCache: {
      const CacheSpec& cs = kCaches[it.sub];
      check(cs.name, it.p, it.size, it.gen);
      unconstruct(it.p, cs);
      kmem_cache_free(g_t->cache[it.sub], it.p);
      break;
    }
    case kPages:
      check_pages(it.p, static_cast<unsigned>(it.size), it.gen);
      mm::page_free_va(it.p, static_cast<unsigned>(it.size));
      break;
    case kVmemAlloc:
    case kVmemXalloc:
      unmark(it.sub, reinterpret_cast<uintptr_t>(it.p), it.size);  // before the free (mark's comment)
      if (it.kind == kVmemAlloc) vmem_free(g_t->arena[it.sub], it.p, it.size);
      else vmem_xfree(g_t->arena[it.sub], it.p, it.size);
      break;
    default:
      ASSERT(false);
  }
  n.frees[it.kind]++;
  if (it.cpu != cpu_id()) n.cross[it.kind]++;
}

// Hands it to another core's inbox; false if that inbox is full.
bool hand_off(unsigned to, const Item& it) {
  Core& t = g_core[to];
  Guard<SpinLock, IrqSave> g(t.inbox_lock);  // its unlock releases the buffer's pattern with the item
  if (t.inbox_count == kInbox) return false;
  t.inbox[(t.inbox_head + t.inbox_count++) % kInbox] = it;
  return true;
}

void drain_inbox(Core& c) {
  unsigned k;
  {
    Guard<SpinLock, IrqSave> g(c.inbox_lock);  // acquires what the producers released
    k = c.inbox_count;
    for (unsigned i = 0; i < k; i++) c.drained[i] = c.inbox[(c.inbox_head + i) % kInbox];
    c.inbox_head = (c.inbox_head + k) % kInbox;
    c.inbox_count = 0;
  }
  for (unsigned i = 0; i < k; i++) release(c, c.drained[i]);
}

void slot_op(Core& c) {
  Item& it = c.held[c.rng.below(kHeld)];
  if (!it.p) {
    if (!allocate(c, it)) it.p = nullptr;
    return;
  }
  Item copy = it;
  it.p = nullptr;
  if (g_t->cpus > 1 && c.rng.below(2)) {
    unsigned k = c.rng.below(g_t->cpus - 1);  // another worker
    if (k >= c.index) k++;
    if (hand_off(g_t->worker[k], copy)) return;
  }
  release(c, copy);
}

// Movable caches fill and drain in phases of kPhaseOps operations of each
// core: a random mix alone keeps slabs nearly full, and only a cache with
// sparse slabs gives the consolidator work.
constexpr uint64_t kPhaseOps = 8192;

void movable_op(Core& c, uint64_t op) {
  bool draining = (op / kPhaseOps) % 2;
  unsigned m = c.rng.below(kNumMovable);
  Registry& r = g_t->reg[m];
  const CacheSpec& cs = kCaches[r.cache];
  unsigned i = c.rng.below(kRegSlots);
  RegSlot taken;
  {
    Guard<SpinLock, IrqSave> g(r.lock);
    taken = r.slot[i];
    if (taken.p == kReserved) return;  // another core's allocation on its way
    if (!taken.p && draining) return;
    if (taken.p && !draining && c.rng.below(4)) return;  // filling: frees are rarer
    r.slot[i].p = taken.p ? nullptr : kReserved;
  }
  if (taken.p) {  // ours now: the callback no longer finds it
    check_movable(taken.p, cs, i, taken.gen);
    unconstruct(taken.p, cs);
    kmem_cache_free(g_t->cache[r.cache], taken.p);
    c.n.frees[kMovable]++;
    if (taken.cpu != cpu_id()) c.n.cross[kMovable]++;
    return;
  }
  void* p = kmem_cache_alloc(g_t->cache[r.cache], KM_NOSLEEP);
  uint32_t gen = ++c.gen;
  if (gen == kCtorGen) gen = ++c.gen;
  if (p) {
    if (cs.ctor) check(cs.name, p, cs.size, kCtorGen);
    stamp_movable(p, cs, i, gen);
    c.n.allocs[kMovable]++;
  } else {
    c.n.fails[kMovable]++;
  }
  Guard<SpinLock, IrqSave> g(r.lock);  // its unlock publishes the pattern to the callback
  r.slot[i] = RegSlot{p, gen, cpu_id()};
}

// A cache of its own: created, filled, checked, emptied and destroyed.
constinit void* g_eph_objs[kMaxCpus][32];
constinit CacheSpec g_eph_spec[kMaxCpus];
void ephemeral_op(Core& c) {
  unsigned self = cpu_id();
  CacheSpec& cs = g_eph_spec[self];
  cs = CacheSpec{"torture_eph", 8 + c.rng.below(2040), 0, c.rng.below(2) == 0, false, 0};
  kmem_cache_t* cp = kmem_cache_create(cs.name, cs.size, 0, cs.ctor ? ctor : nullptr, cs.ctor ? dtor : nullptr,
                                       nullptr, &cs, nullptr, 0);
  if (!cp) {
    c.n.fails[kEphemeral]++;
    return;
  }
  c.n.allocs[kEphemeral]++;
  unsigned k = 1 + c.rng.below(32);
  uint32_t gen = ++c.gen;
  if (gen == kCtorGen) gen = ++c.gen;
  for (unsigned i = 0; i < k; i++) {
    void* p = g_eph_objs[self][i] = kmem_cache_alloc(cp, KM_NOSLEEP);
    if (!p) continue;
    if (cs.ctor) check(cs.name, p, cs.size, kCtorGen);
    stamp(p, cs.size, gen);
  }
  for (unsigned i = 0; i < k; i++) {
    void* p = g_eph_objs[self][i];
    if (!p) continue;
    check(cs.name, p, cs.size, gen);
    unconstruct(p, cs);
    kmem_cache_free(cp, p);
    g_eph_objs[self][i] = nullptr;
  }
  if (kmem_cache_destroy(cp)) c.n.frees[kEphemeral]++;
  else g_t->eph_destroy_fail.fetch_add(1, std::memory_order_relaxed);
}

// The calling core adds up arch::cycles (32 bits wide on arm: sampled often
// enough never to wrap twice between two looks).
void sample_ticks() {
  uint64_t now = arch::cycles();
  uint64_t d = now >= g_t->last_tick ? now - g_t->last_tick
                                    : (g_t->last_tick <= 0xffffffffu ? now + (uint64_t{1} << 32) - g_t->last_tick : 0);
  g_t->ticks += d;
  g_t->last_tick = now;
}

// A worker in kmemleak mode gives its core back when a cross-call waits
// for it (switching kmemleak patches code with every other core parked,
// which waits for every core's mailbox): its state is in its Core, and the
// checker posts it again (7.).
bool yield_now() { return g_t->leakcheck && smp::another_call_waits(); }

void worker(void*) {
  unsigned self = cpu_id();
  Core& c = g_core[self];
  c.running.store(true, std::memory_order_relaxed);
  bool sampler = self == g_t->caller;
  // Long runs say how far they are, every tenth of the calling core's share
  // (the cores' shares are equal, so it is the whole run's progress); in
  // kmemleak mode, of the first worker's.
  bool reporter = sampler || (g_t->leakcheck && self == g_t->worker[0]);
  uint64_t tenth = reporter && c.ops >= kProgressMinOps ? c.ops / 10 : 0;
  static uint64_t t0;  // the reporter's start (its first call)
  if (tenth && c.op == 0) t0 = timer::now_ns();
  for (; c.op < c.ops; c.op++) {
    uint64_t op = c.op;
    if (op % 64 == 0 && yield_now()) {
      c.running.store(false, std::memory_order_release);
      return;
    }
    if (sampler && op % 256 == 0) sample_ticks();
    if (tenth && op && op % tenth == 0 && op / tenth < 10) {
      uint64_t ms = (timer::now_ns() - t0) / 1000000;
      kprintf("kmem torture: %llu%% (%llu ms)\n", (ull)(op / tenth * 10), (ull)ms);
    }
    if (op % 16 == 0) drain_inbox(c);
    uint32_t pick = c.rng.below(10000);
    if (pick < 2) {
      mm::kmem_reap(pick == 1);  // all: this core's magazines (a cross-call cannot reach the others)
      c.n.reaps++;
    } else if (pick < 7) {
      mm::kmem_move_pass();
      c.n.move_passes++;
    } else if (pick < 10) {
      ephemeral_op(c);
    } else if (pick < 2500) {
      movable_op(c, op);
    } else {
      slot_op(c);
    }
    c.n.ops++;
  }
  if (!c.released) {
    for (Item& it : c.held) {
      if (it.p) release(c, it);
      it.p = nullptr;
    }
    c.released = true;
    g_t->finished.fetch_add(1, std::memory_order_release);  // our last push is before this
  }
  while (g_t->finished.load(std::memory_order_acquire) != g_t->cpus) {
    drain_inbox(c);
    if (sampler) sample_ticks();
    if (yield_now()) {
      c.running.store(false, std::memory_order_release);
      return;
    }
    arch::cpu_relax();
  }
  drain_inbox(c);  // nobody pushes any more
  if (sampler) sample_ticks();
  c.complete = true;
  c.running.store(false, std::memory_order_release);  // complete, and all it did, before this
}

// --- setup and the report -------------------------------------------------------

void full_reap() {
  mm::kmem_reap(true);
  mm::page_drain_cpu_caches();
}
uint64_t free_pages() {
  mm::PageStats s;
  mm::page_stats(s);
  return s.free_pages;
}
// What a reap does not give back: kmem's and vmem's own bookkeeping
// (boundary-tag pages, grown hash tables) and the page tables of heap
// addresses mapped for the first time (as meminfo counts them).
uint64_t page_bad_frees() {
  mm::PageStats s;
  mm::page_stats(s);
  return s.bad_frees;
}
uint64_t metadata_pages() {
  return mm::kmem_metadata_pages() + mm::vmem_metadata_pages() + mm_boot::page_table_pages();
}

// move_cb's priv must be the registry, also for the movable cache whose
// constructor wants its CacheSpec: that cache's constructor and destructor
// go through shims that know their spec.
int ctor_move0(void* buf, void*, int f) { return ctor(buf, const_cast<CacheSpec*>(&kCaches[kFirstMovable]), f); }
void dtor_move0(void* buf, void*) { dtor(buf, const_cast<CacheSpec*>(&kCaches[kFirstMovable])); }

bool create_all() {
  for (unsigned i = 0; i < kNumCaches; i++) {
    const CacheSpec& cs = kCaches[i];
    void* priv = const_cast<CacheSpec*>(&cs);
    int (*c)(void*, void*, int) = cs.ctor ? ctor : nullptr;
    void (*d)(void*, void*) = cs.ctor ? dtor : nullptr;
    if (cs.movable) {
      priv = &g_t->reg[i - kFirstMovable];
      g_t->reg[i - kFirstMovable].cache = i;
      if (cs.ctor) {
        static_assert(kCaches[kFirstMovable].ctor && kCaches[kFirstMovable].movable, "the shim's cache");
        ASSERT(i == kFirstMovable);
        c = ctor_move0;
        d = dtor_move0;
      }
    }
    g_t->cache[i] = kmem_cache_create(cs.name, cs.size, cs.align, c, d, nullptr, priv, nullptr, cs.cflags);
    if (!g_t->cache[i]) return false;
    if (cs.movable) kmem_cache_set_move(g_t->cache[i], move_cb);
  }
  for (unsigned i = 0; i < kNumArenas; i++) {
    const ArenaSpec& a = kArenas[i];
    g_t->arena[i] = vmem_create(a.name, reinterpret_cast<void*>(a.base), a.size, a.quantum, nullptr, nullptr, nullptr,
                               a.qcache_max, VM_SLEEP);
    if (!g_t->arena[i]) return false;
  }
  return true;
}

// Empties the registries and destroys everything; false if a destroy failed.
bool teardown(Counts& total) {
  for (Registry& r : g_t->reg) {
    const CacheSpec& cs = kCaches[r.cache];
    for (unsigned i = 0; i < kRegSlots; i++) {
      RegSlot s = r.slot[i];  // every worker is done: no lock needed, but the callback's rules hold
      r.slot[i] = RegSlot{};
      if (!s.p) continue;
      check_movable(s.p, cs, i, s.gen);
      unconstruct(s.p, cs);
      kmem_cache_free(g_t->cache[r.cache], s.p);
      total.frees[kMovable]++;
    }
  }
  bool ok = true;
  for (auto& cp : g_t->cache) {
    if (cp && !kmem_cache_destroy(cp)) ok = false;
    cp = nullptr;
  }
  for (auto& a : g_t->arena) {
    if (a && !vmem_destroy(a)) ok = false;
    a = nullptr;
  }
  return ok;
}

// --- kmemleak mode (7.) ------------------------------------------------------------

struct LeakCheck {
  bool was_on = false, stacks = true;
  unsigned min_age = 0;
  uint64_t switches = 0, scans = 0, false_leaks = 0;
};
mm::LeakObject g_leak_seen[8];  // .bss, cleared after use: the scans read it

// Scans; what it reports is a false leak (printed, the first few).
void leak_check_scan(LeakCheck& lc) {
  size_t n = kmemleak_scan();
  lc.scans++;
  if (!n) return;
  size_t got = mm::kmemleak_reports(g_leak_seen, 8, 0);
  for (size_t i = 0; i < got && lc.false_leaks + i < 8; i++)
    kprintf("kmem torture: FALSE LEAK: %s object 0x%llx (size %zu), allocated on cpu %u\n", g_leak_seen[i].kind,
            (ull)g_leak_seen[i].start, g_leak_seen[i].size, g_leak_seen[i].cpu);
  memset(g_leak_seen, 0, sizeof g_leak_seen);
  lc.false_leaks += n;
  mm::kmemleak_clear();  // counted once
}

void leak_check_begin(LeakCheck& lc) {
  lc.was_on = mm::kmemleak_enabled();
  lc.min_age = mm::kmemleak_min_age_ms();
  kmemleak_set_min_age_ms(0);
  kmemleak_enable(true);
  // What was unreferenced before the run is not the run's: settled (a
  // chain of k unreferenced objects takes k + 1 scans) and cleared.
  for (int i = 0; i < 4; i++) kmemleak_scan();
  mm::kmemleak_clear();
}

// Posts every worker that is neither running nor complete.
bool leak_check_post() {
  bool left = false;
  for (unsigned k = 0; k < g_t->cpus; k++) {
    Core& c = g_core[g_t->worker[k]];
    // Acquire: a worker's last stores (complete, its state) before it let go.
    if (c.running.load(std::memory_order_acquire)) {
      left = true;
      continue;
    }
    if (c.complete) continue;
    left = true;
    c.running.store(true, std::memory_order_relaxed);  // until it starts and says so itself
    if (!smp::call_async(g_t->worker[k], worker, nullptr)) c.running.store(false, std::memory_order_relaxed);
  }
  return left;
}

void leak_check_run(LeakCheck& lc) {
  while (leak_check_post()) {
    sample_ticks();
    if (mm::kmemleak_enabled()) {
      for (int i = 0; i < 3; i++) leak_check_scan(lc);
      kmemleak_enable(false);
    } else {
      timer::delay_us(2000);
      kmemleak_enable(true);
    }
    lc.switches++;
    sample_ticks();
  }
  // Every worker is done: a last look with kmemleak on.
  kmemleak_enable(true);
  for (int i = 0; i < 3; i++) leak_check_scan(lc);
}

void leak_check_end(LeakCheck& lc) {
  kmemleak_set_min_age_ms(lc.min_age);
  if (!lc.was_on) kmemleak_enable(false);
}

}  // namespace

namespace torture {

// For the KTEST: a stamped buffer with one byte changed, at each kind of
// checked place (head, a sampled middle chunk, the tail), is reported at
// that offset; the intact buffer is not. The run's counters are left as
// they were.
bool detects_corruption() {
  constexpr size_t kSize = 5000;
  constexpr size_t kOffsets[] = {3, 512 * 3 + 5, kSize - 1};
  if (!state_begin()) return false;
  auto* b = static_cast<uint8_t*>(kmem_alloc(kSize, KM_SLEEP));
  uint64_t before = g_t->corruptions.load();
  unsigned reports = g_t->reports.exchange(kMaxReports);  // not printed
  bool ok = true;
  stamp(b, kSize, 42);
  ok &= check("selftest", b, kSize, 42);
  for (size_t off : kOffsets) {
    b[off] ^= 0x10;
    ok &= !check("selftest", b, kSize, 42) && g_t->last_offset.load() == off;
    b[off] ^= 0x10;
  }
  ok &= !check("selftest", b, kSize, 43);  // another generation
  ok &= check("selftest", b, kSize, 42);
  ok &= g_t->corruptions.load() == before + 4;
  g_t->corruptions.store(before);
  g_t->reports.store(reports);
  kmem_free(b, kSize);
  state_end();
  return ok;
}

int run(const char* cmd, int argc, char** argv) {
  const char* usage =
      "usage: kmem torture OPS [SEED [kmemleak]]; OPS from 1 to 10000000000, SEED a number; kmemleak: switch "
      "kmemleak off and on and scan while it runs (two cores or more)";
  uint64_t ops = 0, seed = 1;
  bool leakcheck = argc == 5 && strcmp(argv[4], "kmemleak") == 0;
  if (argc < 3 || argc > 5 || !shell::parse_u64(argv[2], ops) || ops == 0 || ops > kMaxOps ||
      (argc >= 4 && !shell::parse_u64(argv[3], seed)) || (argc == 5 && !leakcheck))
    return shell::usage_error(cmd, "%s", usage);
  if (leakcheck && cpus_online() < 2) return shell::usage_error(cmd, "kmemleak mode needs two cores or more");

  // Start from a clean slate (the shell runs one command at a time).
  if (!state_begin()) return 1;
  for (unsigned i = 0; i < kMaxCpus; i++) {
    Core& c = g_core[i];
    for (Item& it : c.held) it = Item{};
    c.inbox_head = c.inbox_count = 0;
    c.n = Counts{};
    c.gen = 0;
  }
  for (Registry& r : g_t->reg)
    for (RegSlot& s : r.slot) s = RegSlot{};
  for (auto& a : g_t->bitmap)
    for (auto& w : a) w.store(0, std::memory_order_relaxed);
  g_t->ops = ops;
  g_t->seed = seed;
  g_t->caller = cpu_id();
  g_t->leakcheck = leakcheck;
  g_t->cpus = 0;
  for (unsigned i = 0; i < cpus_online(); i++)
    if (!leakcheck || i != g_t->caller) {
      g_core[i].index = g_t->cpus;
      g_t->worker[g_t->cpus++] = i;
    }
  g_t->finished.store(0, std::memory_order_relaxed);
  g_t->corruptions.store(0);
  g_t->ctors.store(0);
  g_t->dtors.store(0);
  g_t->eph_destroy_fail.store(0);
  g_t->reports.store(0);
  // Cores are numbered 0..cpus-1 when all are online (they all are on the
  // boards we run: every core the DTB lists is started).
  for (unsigned i = 0; i < kMaxCpus; i++) {
    g_core[i].ops = 0;
    g_core[i].rng = Rng{mix(seed * 0x9e3779b97f4a7c15ull + i + 1)};
  }
  for (unsigned k = 0; k < g_t->cpus; k++) g_core[g_t->worker[k]].ops = ops / g_t->cpus + (k < ops % g_t->cpus);

  full_reap();
  uint64_t errors0 = mm::error_count(), bad_pages0 = page_bad_frees();
  uint64_t free0 = free_pages(), meta0 = metadata_pages();
  if (!create_all()) {
    kprintf("kmem torture: could not create its caches and arenas\n");
    Counts none{};
    teardown(none);
    state_end();
    return 1;
  }

  LeakCheck lc;
  if (leakcheck) leak_check_begin(lc);
  g_t->ticks = 0;
  g_t->last_tick = arch::cycles();
  uint64_t t0 = timer::now_ns();
  if (leakcheck) leak_check_run(lc);
  else smp::call_on_all(worker, nullptr);
  uint64_t ns = timer::now_ns() - t0;
  uint64_t ticks = g_t->ticks;
  if (leakcheck) leak_check_end(lc);

  Counts total{};
  for (unsigned i = 0; i < kMaxCpus; i++) {
    const Counts& n = g_core[i].n;
    for (unsigned k = 0; k < kKinds; k++) {
      total.allocs[k] += n.allocs[k];
      total.frees[k] += n.frees[k];
      total.fails[k] += n.fails[k];
      total.cross[k] += n.cross[k];
    }
    total.ops += n.ops;
    total.reaps += n.reaps;
    total.move_passes += n.move_passes;
    total.moves += n.moves;
    total.later += n.later;
    total.dont_need += n.dont_need;
  }
  // What the callback did must be what kmem counted (before the destroys).
  uint64_t kmem_yes = 0, kmem_later = 0, kmem_dont_need = 0;
  for (unsigned i = kFirstMovable; i < kNumCaches; i++) {
    mm::KmemCacheStats st;
    mm::kmem_cache_stats(g_t->cache[i], st);
    kmem_yes += st.moves_yes;
    kmem_later += st.moves_later;
    kmem_dont_need += st.moves_dont_need;
  }
  bool destroyed = teardown(total);
  bool bitmaps_clear = true;
  for (auto& a : g_t->bitmap)
    for (auto& w : a) bitmaps_clear &= w.load(std::memory_order_relaxed) == 0;
  full_reap();
  uint64_t free1 = free_pages(), meta1 = metadata_pages();
  // Page frees the page allocator refused (a page freed twice, say) are
  // allocator errors too: it reports them itself, outside mm::error_count.
  uint64_t bad_pages = page_bad_frees() - bad_pages0;
  uint64_t errors = mm::error_count() - errors0 + bad_pages;

  kprintf("kmem torture: %llu ops on %u cpus, seed %llu\n", (ull)total.ops, g_t->cpus, (ull)seed);
  kprintf("  %-15s %10s %10s %9s %10s\n", "kind", "allocs", "frees", "failed", "cross-cpu");
  bool balanced = kmem_yes == total.moves && kmem_later == total.later && kmem_dont_need == total.dont_need;
  for (unsigned k = 0; k < kKinds; k++) {
    bool eq = total.allocs[k] == total.frees[k];
    balanced &= eq;
    kprintf("  %-15s %10llu %10llu %9llu %10llu%s\n", kKindName[k], (ull)total.allocs[k], (ull)total.frees[k],
            (ull)total.fails[k], (ull)total.cross[k], eq ? "" : "  UNBALANCED");
  }
  uint64_t ctors = g_t->ctors.load(), dtors = g_t->dtors.load();
  balanced &= ctors == dtors && destroyed && bitmaps_clear && !g_t->eph_destroy_fail.load();
  kprintf("  constructors %llu, destructors %llu; reaps %llu, move passes %llu: moved %llu, later %llu, "
          "dont_need %llu\n",
          (ull)ctors, (ull)dtors, (ull)total.reaps, (ull)total.move_passes, (ull)total.moves, (ull)total.later,
          (ull)total.dont_need);
  if (kmem_yes != total.moves || kmem_later != total.later || kmem_dont_need != total.dont_need)
    kprintf("  UNBALANCED: kmem counted %llu moved, %llu later, %llu dont_need\n", (ull)kmem_yes, (ull)kmem_later,
            (ull)kmem_dont_need);
  if (!destroyed || !bitmaps_clear || g_t->eph_destroy_fail.load())
    kprintf("  a cache or arena would not be destroyed (%llu of its own), or a vmem bitmap is not clear\n",
            (ull)g_t->eph_destroy_fail.load());
  uint64_t kept = meta1 > meta0 ? meta1 - meta0 : 0;
  bool pages_ok = free1 + kept == free0;
  kprintf("  free pages: %llu before, %llu after (+%llu kept as kmem/vmem metadata and page tables)%s\n", (ull)free0, (ull)free1,
          (ull)kept, pages_ok ? "" : "  UNBALANCED");
  uint64_t ms = ns / 1000000;
  kprintf("  %llu ms, %llu ops/s, %llu instructions/op (counter ticks: instructions under --icount)\n", (ull)ms,
          (ull)(ns ? total.ops * 1000000000ull / ns : 0), (ull)(total.ops ? ticks / total.ops : 0));
  uint64_t corrupt = g_t->corruptions.load();
  bool pass = corrupt == 0 && balanced && pages_ok && errors == 0 && lc.false_leaks == 0;
  if (leakcheck)
    kprintf("  kmemleak: switched %llu times, %llu scans while the workers ran, %llu false leaks\n",
            (ull)lc.switches, (ull)lc.scans, (ull)lc.false_leaks);
  if (bad_pages) kprintf("  %llu page frees refused by the page allocator (counted as allocator errors)\n", (ull)bad_pages);
  kprintf("kmem torture: %s: %llu corruptions, counts %s, pages %s, %llu allocator errors\n", pass ? "PASS" : "FAIL",
          (ull)corrupt, balanced ? "balanced" : "UNBALANCED", pages_ok ? "balanced" : "UNBALANCED", (ull)errors);
  state_end();
  return pass ? 0 : 1;
}

}  // namespace torture
