// SPDX-License-Identifier: Apache-2.0
// The stack depot: each distinct backtrace stored once, named by a handle
// (after Linux's lib/stackdepot.c; our own code).
//
// 1. It stores records of up to kStackDepotMaxFrames return addresses,
//    innermost first, immutable once published and never freed: a handle,
//    and a pointer into its record, stay good for as long as the kernel runs.
// 2. Memory: a fixed pool from the page allocator (page_alloc_va,
//    KM_NOSLEEP; never kmem, whose allocations the depot describes), taken
//    by stackdepot_init: a bucket table (4 bytes per 128 bytes of pool, a
//    power of two of pages), then chunks of 64 KiB (smaller orders for the
//    remainder or when memory is fragmented), at most kMaxChunks. Records
//    are carved in order by a bump pointer; one that does not fit the rest
//    of a chunk starts the next, and the tail it leaves is zeroed.
// 3. A record is {next, hash, self, n} (32-bit words) and n frames, rounded
//    up to 8 bytes: 16 + 8n bytes on 64-bit, 16 + 4n (+4) on 32-bit.
// 4. The handle is where the record is: (chunk + 1) << 13 | offset / 8, so
//    fetch finds it in O(1), and 0 is never a record. Handles grow in carving
//    order, below (kMaxChunks + 1) << 13 < 1 << kStackHandleBits; g_top is
//    the next one. fetch accepts h only if h < g_top, the record at h names
//    itself (self == h: no frame, zeroed tail or record interior can, frames
//    being text addresses far above any handle) and n is in range.
// 5. Lookup: a hash of the frames picks a bucket, which holds the handle of
//    its newest record, each record the next older (next). save hashes and
//    walks the chain comparing hash, n and frames: no lock, no store.
// 6. Insertion takes g_lock (interrupts masked), walks the chain again
//    (another CPU may have inserted the trace since), carves and writes the
//    record, then publishes it:
//      - g_top.store(release) after the record (and a zeroed tail) is
//        written; fetch's g_top.load(acquire) acquires it, so fetch needs
//        nothing from however the handle reached it;
//      - bucket.store(release) last; the walk's bucket.load(acquire)
//        acquires the record and its next. Older records down the chain
//        were published before, and g_lock orders their insertion before
//        this one, so happens-before reaches them too;
//      - stackdepot_init writes the chunk table, the mask and the zeroed
//        buckets, then g_buckets.store(release), which save's
//        g_buckets.load(acquire) acquires. fetch reads the chunk table only
//        for h < g_top, a value stored (release) by an insertion that took
//        g_lock after init released it.
//    Record fields and next are plain: written before their publication,
//    never after.
// 7. Full: a record that fits no chunk is not stored; save returns 0,
//    counts it (dropped) and, the first time, logs one line (after dropping
//    the lock). Lookups go on, and a shorter trace may still fit the last
//    chunk's tail.
// 8. Bound. The depot never holds more than its pool (bytes_total), at most
//    256 x 64 KiB of records and their table. A 16-frame trace costs 144
//    bytes on 64-bit (80 on 32-bit), 8 frames 80 (48), plus 4 bytes of
//    bucket per 128 of pool. kStackDepotDefaultPool (1 MiB: a 32 KiB table
//    of 8192 buckets, 992 KiB of records) holds 7052 traces of 16 frames or
//    12 694 of 8 on 64-bit (12 694 and 21 157 on 32-bit).
// 9. Contexts: lookup and fetch take no lock; insertion and statistics take
//    g_lock, a leaf. save, capture and fetch never allocate and may run with
//    interrupts masked or in an interrupt handler; stackdepot_init allocates
//    under g_lock, so not there. A capture in an interrupt handler walks on
//    into the interrupted code (the walk crosses traps), so such traces vary
//    with where the interrupt landed; Linux cuts them at the interrupt entry
//    (filter_irq_stacks), which the walker could do if they crowd the pool.
#include <mm/flags.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <mm/stackdepot.h>
#include <atomic>
#include <new>
#include "lock.h"

namespace mm {
namespace {

constexpr unsigned kChunkOrder = 4;                                  // 64 KiB chunks
constexpr unsigned kAlignShift = 3;                                  // records 8-byte aligned
constexpr unsigned kOffsetBits = kPageShift + kChunkOrder - kAlignShift;  // 13
constexpr StackHandle kOffsetMask = (StackHandle{1} << kOffsetBits) - 1;
constexpr unsigned kMaxChunks = 256;
constexpr StackHandle kFirstHandle = StackHandle{1} << kOffsetBits;  // chunk 0, offset 0
constexpr size_t kPoolBytesPerBucket = 128;
// The largest pool (16.5 MiB): every chunk at 64 KiB, and its table.
constexpr size_t kMaxRecordPages = size_t{kMaxChunks} << kChunkOrder;
constexpr size_t kMaxPoolPages = kMaxRecordPages + kMaxRecordPages * sizeof(StackHandle) / kPoolBytesPerBucket;
static_assert((uint64_t{kMaxChunks} + 1) << kOffsetBits <= uint64_t{1} << kStackHandleBits,
              "handles must fit in kStackHandleBits");

struct Record {
  StackHandle next;  // the next older record in this bucket's chain, 0 ends it
  uint32_t hash;
  StackHandle self;  // this record's own handle (fetch's check)
  uint32_t n;        // frames, 1..kStackDepotMaxFrames
  // then n frames
};
static_assert(sizeof(Record) % sizeof(uintptr_t) == 0 && sizeof(Record) == 16);

inline uintptr_t* frames(Record* r) { return reinterpret_cast<uintptr_t*>(r + 1); }
inline const uintptr_t* frames(const Record* r) { return reinterpret_cast<const uintptr_t*>(r + 1); }
constexpr size_t record_bytes(unsigned n) {
  return (sizeof(Record) + n * sizeof(uintptr_t) + (size_t{1} << kAlignShift) - 1) & ~((size_t{1} << kAlignShift) - 1);
}

// Written by stackdepot_init before g_buckets publishes them; never again.
uint8_t* g_chunk[kMaxChunks];
uint32_t g_chunk_bytes[kMaxChunks];
unsigned g_nchunks;
uint32_t g_bucket_mask;
unsigned g_table_order;
std::atomic<size_t> g_pages{0};  // a statistic: relaxed

// The bucket table; null until stackdepot_init is done (see 6.).
std::atomic<std::atomic<StackHandle>*> g_buckets{nullptr};
// The handle the next record gets: every byte of record space below it is
// written (see 6.). Stored only under g_lock.
std::atomic<StackHandle> g_top{0};

plat::Lock g_lock;  // insertion and statistics: a leaf, taken with interrupts masked
// Under g_lock:
uint64_t g_traces, g_record_bytes, g_dropped;
bool g_said_full;

inline Record* record_at(StackHandle h) {
  return reinterpret_cast<Record*>(g_chunk[(h >> kOffsetBits) - 1] + ((h & kOffsetMask) << kAlignShift));
}

// One multiply per frame, a fold, multiply, fold at the end: return
// addresses differ mostly in their low bits, which each multiply carries
// upward; the folds bring the high half (which every bit of every frame has
// reached) down to the bucket index.
inline uint32_t hash_frames(const uintptr_t* pcs, unsigned n) {
  constexpr unsigned kHalf = sizeof(uintptr_t) * 4;
  constexpr uintptr_t kMul = sizeof(uintptr_t) == 8 ? static_cast<uintptr_t>(0x9e3779b97f4a7c15ull) : 0x9e3779b1u;
  uintptr_t h = n;
#pragma GCC unroll 2
  for (unsigned i = 0; i < n; i++) h = (h ^ pcs[i]) * kMul;
  h ^= h >> kHalf;
  h *= kMul;
  h ^= h >> kHalf;
  return static_cast<uint32_t>(h);
}

inline bool same_frames(const uintptr_t* a, const uintptr_t* b, unsigned n) {
#pragma GCC unroll 2
  for (unsigned i = 0; i < n; i++)
    if (a[i] != b[i]) return false;
  return true;
}

// Walks a chain from head (published: see 6.) for pcs; its handle or 0.
inline StackHandle find(StackHandle h, const uintptr_t* pcs, unsigned n, uint32_t hash) {
  while (h) {
    const Record* r = record_at(h);
    if (r->hash == hash && r->n == n && same_frames(frames(r), pcs, n)) return h;
    h = r->next;
  }
  return 0;
}

// Record space for `bytes`: its handle, with *top the handle after it; 0
// when no chunk has room. Under g_lock.
StackHandle carve(size_t bytes, StackHandle* top) {
  assert_held(g_lock);
  StackHandle t = g_top.load(std::memory_order_relaxed);  // only g_lock's holder stores it
  unsigned c = (t >> kOffsetBits) - 1;
  size_t off = static_cast<size_t>(t & kOffsetMask) << kAlignShift;
  if (c >= g_nchunks) return 0;  // the last chunk ended exactly at its end
  if (off + bytes > g_chunk_bytes[c]) {
    if (c + 1 >= g_nchunks) return 0;  // keep the last tail for shorter traces
    // Leave this tail, zeroed so that no stale word there passes fetch's
    // check; the next g_top store releases it with the record.
    for (size_t i = off; i < g_chunk_bytes[c]; i++) g_chunk[c][i] = 0;
    g_record_bytes += g_chunk_bytes[c] - off;
    c++;
    off = 0;
  }
  MM_DEBUG_ASSERT(off + bytes <= g_chunk_bytes[c]);
  StackHandle h = static_cast<StackHandle>(((c + 1) << kOffsetBits) | (off >> kAlignShift));
  *top = h + static_cast<StackHandle>(bytes >> kAlignShift);
  g_record_bytes += bytes;
  return h;
}

__attribute__((noinline)) StackHandle insert(std::atomic<StackHandle>& bucket, const uintptr_t* pcs, unsigned n,
                                             uint32_t hash) {
  StackHandle h;
  uint64_t traces = 0;
  bool say_full = false;
  {
    Guard<> g(g_lock);
    // Relaxed: under g_lock, whose acquire orders every earlier insertion.
    StackHandle head = bucket.load(std::memory_order_relaxed);
    h = find(head, pcs, n, hash);
    if (h) return h;  // another CPU stored it meanwhile
    StackHandle top;
    h = carve(record_bytes(n), &top);
    if (!h) {
      g_dropped++;
      say_full = !g_said_full;
      g_said_full = true;
      traces = g_traces;
    } else {
      Record* r = record_at(h);
      r->next = head;
      r->hash = hash;
      r->self = h;
      r->n = n;
      uintptr_t* f = frames(r);
      for (unsigned i = 0; i < n; i++) f[i] = pcs[i];
      g_traces++;
      // Releases the record (and a zeroed tail) to fetch's acquire of g_top.
      g_top.store(top, std::memory_order_release);
      // Releases the record, next included, to the lock-free walk's acquire
      // of the bucket.
      bucket.store(h, std::memory_order_release);
    }
  }
  if (say_full)
    plat::log("stackdepot: pool of %llu bytes full (%llu traces): new backtraces are not recorded",
              static_cast<unsigned long long>(g_pages.load(std::memory_order_relaxed) * kPageBytes),
              static_cast<unsigned long long>(traces));
  return h;
}

}  // namespace

size_t stackdepot_default_pool() {
  size_t want = static_cast<size_t>(page_ram_bytes() / 16);
  size_t pool = kStackDepotDefaultPool;
  while (pool > want && pool > 2 * kPageBytes) pool >>= 1;
  return pool;
}

bool stackdepot_init(size_t pool_bytes) {
#if !defined(MM_KERNEL)
  if (!kmem_ready()) kmem_init();  // host: the first use brings the page allocator up
#endif
  size_t pages = pool_bytes / kPageBytes + (pool_bytes % kPageBytes != 0);
  if (pages < 2) pages = 2;
  if (pages > kMaxPoolPages) pages = kMaxPoolPages;
  size_t unplaced;
  {
    Guard<> g(g_lock);
    if (g_buckets.load(std::memory_order_relaxed)) return true;
    // The table: a power of two of pages, one bucket per kPoolBytesPerBucket.
    size_t want = pages * kPageBytes / kPoolBytesPerBucket * sizeof(StackHandle) / kPageBytes;
    unsigned order = want ? plat::highest_bit(want) : 0;
    if (order > kMaxOrder) order = kMaxOrder;
    void* table = nullptr;
    for (;; order--) {
      table = page_alloc_va(order, KM_NOSLEEP);
      if (table || order == 0) break;
    }
    if (!table) return false;
    size_t nbuckets = (kPageBytes << order) / sizeof(StackHandle);
    auto* buckets = static_cast<std::atomic<StackHandle>*>(table);
    for (size_t i = 0; i < nbuckets; i++) new (&buckets[i]) std::atomic<StackHandle>(0);
    size_t left = pages > (size_t{1} << order) ? pages - (size_t{1} << order) : 1;
    size_t held = size_t{1} << order;
    // The chunks: 64 KiB while the rest allows, smaller when memory is
    // fragmented (an order that failed is not tried again).
    unsigned cap = kChunkOrder;
    g_nchunks = 0;
    while (left && g_nchunks < kMaxChunks) {
      unsigned o = plat::highest_bit(left);
      if (o > cap) o = cap;
      void* p = page_alloc_va(o, KM_NOSLEEP);
      if (!p) {
        if (o == 0) break;
        cap = o - 1;
        continue;
      }
      g_chunk[g_nchunks] = static_cast<uint8_t*>(p);
      g_chunk_bytes[g_nchunks++] = static_cast<uint32_t>(kPageBytes << o);
      left -= size_t{1} << o;
      held += size_t{1} << o;
    }
    if (!g_nchunks) {
      page_free_va(table, order);
      return false;
    }
    unplaced = left;
    g_bucket_mask = static_cast<uint32_t>(nbuckets - 1);
    g_table_order = order;
    g_pages.store(held, std::memory_order_relaxed);
    g_top.store(kFirstHandle, std::memory_order_relaxed);  // published with the rest, below
    // Releases the chunk table, the mask, g_top and the zeroed buckets to
    // save's acquire of g_buckets (and, through g_lock, to every insertion).
    g_buckets.store(buckets, std::memory_order_release);
  }
  if (unplaced)
    plat::log("stackdepot: %llu of %llu pages not placed (no memory, or more than %u chunks)",
              static_cast<unsigned long long>(unplaced), static_cast<unsigned long long>(pages), kMaxChunks);
  return true;
}

StackHandle stackdepot_save(const uintptr_t* pcs, unsigned n) {
  // Acquires what stackdepot_init released: the table, mask and chunks.
  std::atomic<StackHandle>* buckets = g_buckets.load(std::memory_order_acquire);
  if (__builtin_expect(!buckets || n == 0, 0)) return 0;
  if (n > kStackDepotMaxFrames) n = kStackDepotMaxFrames;
  uint32_t hash = hash_frames(pcs, n);
  std::atomic<StackHandle>& bucket = buckets[hash & g_bucket_mask];
  // Acquires the chain the last insertion into this bucket released.
  StackHandle h = find(bucket.load(std::memory_order_acquire), pcs, n, hash);
  if (__builtin_expect(h != 0, 1)) return h;
  return insert(bucket, pcs, n, hash);
}

__attribute__((noinline)) StackHandle stackdepot_capture(unsigned skip) {
  // Not initialised: skip the walk (save checks again, with acquire).
  if (!g_buckets.load(std::memory_order_relaxed)) return 0;
  uintptr_t pcs[kStackDepotMaxFrames];
  // + 1: the first frame plat::backtrace gives is our own return address.
  unsigned n = plat::backtrace(pcs, kStackDepotMaxFrames, skip + 1);
  return stackdepot_save(pcs, n);
}

__attribute__((noinline)) StackHandle stackdepot_capture_from(uintptr_t caller) {
  if (!g_buckets.load(std::memory_order_relaxed)) return 0;
  uintptr_t pcs[kStackDepotMaxFrames + 8];
  unsigned n = plat::backtrace(pcs, kStackDepotMaxFrames + 8, 1);
  if (!caller) return stackdepot_save(pcs, n);
  unsigned from = 0;
  while (from < n && pcs[from] != caller) from++;
  if (from == n) {  // the walk did not reach the caller: start with it
    pcs[0] = caller;
    return stackdepot_save(pcs, 1);
  }
  return stackdepot_save(pcs + from, n - from);
}

unsigned stackdepot_fetch(StackHandle h, const uintptr_t** pcs) {
  MM_DEBUG_ASSERT(pcs);
  *pcs = nullptr;
  // Acquires the record space below g_top (see 6.); 0 before init.
  StackHandle top = g_top.load(std::memory_order_acquire);
  if (h < kFirstHandle || h >= top) return 0;
  unsigned c = (h >> kOffsetBits) - 1;  // < g_nchunks, since h < top
  size_t off = static_cast<size_t>(h & kOffsetMask) << kAlignShift;
  if (off + sizeof(Record) > g_chunk_bytes[c]) return 0;
  const Record* r = record_at(h);
  if (r->self != h || r->n - 1 >= kStackDepotMaxFrames || off + record_bytes(r->n) > g_chunk_bytes[c]) return 0;
  *pcs = frames(r);
  return r->n;
}

void stackdepot_stats(StackDepotStats& out) {
  Guard<> g(g_lock);
  out = StackDepotStats{};
  if (!g_buckets.load(std::memory_order_relaxed)) return;
  uint64_t table = kPageBytes << g_table_order;
  out.traces = g_traces;
  out.bytes_used = table + g_record_bytes;
  out.bytes_total = g_pages.load(std::memory_order_relaxed) * kPageBytes;
  out.dropped = g_dropped;
}

uint64_t stackdepot_pages() { return g_pages.load(std::memory_order_relaxed); }

}  // namespace mm
