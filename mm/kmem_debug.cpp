// SPDX-License-Identifier: Apache-2.0
// kmem's debug modes: redzones, poisoning, audit trails and the
// transaction log (mm/kmem_debug.h), after illumos's KMF_REDZONE,
// KMF_DEADBEEF, KMF_AUDIT and KMF_CONTENTS, with a left redzone as
// Linux's SLUB has.
//
// 1. Which caches. A cache's KMF_ flags are fixed when it is created: its
//    cflags (KMC_REDZONE ...), plus the configured flags (kmem.debug=, or
//    MM_KMEM_DEBUG on the host) for every cache the configuration names (or
//    all) that can be debugged: heap memory kmem may write to, not mm's own
//    bookkeeping (KMC_NOTRACK, KMC_NODEBUG), not a vmem quantum cache.
//    Contents implies audit.
// 2. No magazines. A debugged cache is KMC_NOMAGAZINE: its per-CPU layer
//    stays empty, so kmem_cache_alloc and kmem_cache_free miss the magazine
//    on their first test and go to the slab layer, where every operation
//    passes the checks. The fast paths of other caches are the same
//    instructions as without debugging (nothing on them tests a debug
//    flag). A buffer is then either allocated or free in its slab: a double
//    free is caught on the second free however late it comes, and buffers
//    of caches with constructors are destructed on every free and
//    constructed on every allocation, so a free buffer can be poisoned
//    (illumos does the same: constructed state and poison cannot coexist).
// 3. The layout. Every buffer of a debugged cache is laid out as
//      [-32, -8)             AuditTag (audit mode): last allocation's and
//                            last free's stack handle, time, CPU and
//                            context (plat::context: the command, test,
//                            interrupt or cross-call; the host's thread)
//      [-8, 0)               the left redzone word: the size word (the
//                            size asked for, bit 31 set if it is exact),
//                            in each half, xor the buffer's address and a
//                            key of each half's own
//      [0, size)             the caller's bytes
//      [size, tag_off)       redzone bytes, 0xbb (redzone mode)
//      [tag_off, +24)        BufTag: the redzone word 0xfeedfacefeedface,
//                            the state word, the size, the slab free-list
//                            link (on-slab caches: kmem_slab.cpp, Free-list
//                            hardening: it lives here, not in the poisoned
//                            bytes), the exact word (0: the size is the
//                            buffer size, for a kmem_alloc class taken
//                            untraced, before the hooks were on; kmem_free's
//                            size is then not checked against it)
//    What lies before a buffer sits at the end of the chunk before it; the
//    first buffer of a slab has the slab's first cp->lead bytes (the lead,
//    rounded up to the alignment). tag_off is the buffer size rounded up to
//    8, so kmem_alloc's buffers get redzone bytes from the exact size asked
//    for (illumos's KMEM_SIZE_ENCODE): an overrun of kmem_alloc(50) into
//    the 64-byte class's slack is caught. The state word is kStateAlloc,
//    kStateFreeing or kStateFree xor the low 32 bits of the buffer's
//    address, so a stray value (or a copy of another buffer's tag) matches
//    none. The size is kept on both sides: an overrun runs over the tag's
//    copy, never over the left one; an underrun the other way round; a
//    long overrun does not reach its own buffer's audit trail either.
// 4. Nothing the write can reach is trusted. A check of a buffer (on its
//    allocation, on its free, by kmem_verify) takes the size from the
//    left redzone word if its halves agree, else from the tag if the tag's
//    redzone and state words hold, else the buffer size; then compares the
//    redzone bytes (allocated) or the poison (free), the tag's words and
//    the left redzone word with what they must be. A damaged left redzone
//    word is an underrun of the buffer, unless the buffer before has a
//    damaged tag too: then the write ran on from that one (across its tag
//    and this buffer's audit tag), and the check walks back to the buffer
//    whose own left word holds, where the write started. Forward, a write
//    whose buffer's tag is damaged runs on into the next buffer when that
//    one's left word is damaged, and so on. One report names the buffer
//    whose bounds were crossed ("buffer overrun", "write after free" for a
//    free one, "buffer underrun"), the offset and bytes of its first bad
//    byte (negative: before the buffer), its trail, and the buffers the
//    write ran into; the checks that report it (a free or an allocation)
//    repair every tag, left word, redzone and poison on the write's path,
//    rebuilding the slab's free list if free buffers' links were on it, so
//    the neighbours go on without a second report (their contents are
//    whatever the write left). An overrun with the buffer's own underrun
//    is reported as the overrun; the left word stays damaged and is
//    reported by the buffer's next check. Checks: on allocation
//    (debug_take), a free buffer must hold its poison and intact words,
//    else a report, and the buffer is repaired and handed out (refusing
//    the allocation would only move the damage); on free
//    (debug_free_check), the slab's bitmap and the state word refuse a
//    double free, the trusted size refuses a kmem_free of a wrong size
//    within the right class, then the checks above (the free goes on).
//    kmem_verify runs the same checks on every buffer of a cache, reporting
//    each write once, and repairs nothing.
//    Underruns: a left redzone, not a check of the previous buffer's tag
//    alone, since the bytes just before a buffer are the end of the chunk
//    before it (its audit tag, or its tag's exact word), values no check
//    can predict, and the first buffer of a slab has no buffer before it
//    (with no room there, an underrun writes into whatever lies below the
//    slab). The word is the size's second copy as well, so it pays for
//    both. Cost: 8 bytes a buffer and cp->lead once a slab (a 64-byte
//    kmem_alloc buffer takes 128 bytes with any mode: its tags fit its
//    alignment's padding); per alloc+free pair, the word's store on
//    allocation and its decoding on each check: about a twentieth of a
//    redzone pair (bench's debug_redzone row under -icount, against the
//    same build with the word neither written nor read).
//    Every board's debug_* rows: bench/baseline/BOARD.txt.
// 5. Locking. The checks, fills and tag updates run under the cache's
//    slab_lock, interrupts masked (a debugged cache's free buffers are only
//    touched under it, and kmem_verify reads a stable picture): the price
//    is a memset under the lock per operation, paid only by debugged
//    caches. The constructor and destructor run without it, the tag saying
//    "being freed" meanwhile (kmem_verify skips such a buffer). Backtraces
//    are taken before the lock (the stack depot has a lock of its own).
// 6. The transaction log: a ring of N entries (kmem.debug=...,log=N),
//    written without a lock by every CPU: an atomic counter hands out
//    sequence numbers; the entry's seq word is cleared, then each field is
//    stored with release, then seq with release. A reader loads seq
//    (acquire), loads each field with acquire, loads seq again: a copy is
//    kept only if both loads give the number it expects. A field the
//    reader loaded from a writer that lapped the ring meanwhile was stored
//    with release after that writer cleared seq, so the reader's acquire of
//    it makes the clearing (or a later seq) visible to its second load.
//    (A seqlock with fences would be cheaper; ThreadSanitizer checks no
//    fences, and this is a debug mode.)
//    Entries name their cache by pointer; a reader prints the name only of
//    caches still on the cache list.
#include <mm/kmem_debug.h>
#include <mm/hooks.h>
#include <mm/segkmem.h>
#include <mm/stackdepot.h>
#include <mm/vmem.h>
#include "kmem_cache.h"
#include "kmem_fastpath.h"
#if !defined(MM_KERNEL)
#include <cstdlib>
#endif

namespace mm {
namespace {

constexpr uint64_t kRedzoneWord = 0xfeedfacefeedfaceull;
constexpr uint8_t kRedzoneByte = 0xbb;
constexpr uint32_t kFreePattern = 0xdeadbeef;
constexpr uint32_t kUninitPattern = 0xbaddcafe;
constexpr uint32_t kStateAlloc = 0xa110ca7e;
constexpr uint32_t kStateFreeing = 0xf4eeb5ed;
constexpr uint32_t kStateFree = 0xf4eef4ee;
// The left redzone word's keys (3.), one a half.
constexpr uint32_t kLeftLo = 0x1ef7ab1e;
constexpr uint32_t kLeftHi = 0x5a1ec0de;
constexpr uint32_t kExactBit = 0x80000000u;  // in a size word: the size is what the caller asked for
constexpr int64_t kNoBad = INT64_MIN;        // no bad byte
constexpr uint32_t kNoIndex = ~0u;

struct BufTag {
  uint64_t redzone;
  uint32_t state;  // kState* ^ uint32_t(buffer address)
  uint32_t size;   // bytes asked for by the last allocation
  uint32_t link;   // the slab free list's (kmem_slab.cpp, Free-list hardening)
  uint32_t exact;  // 1: size is what the caller asked for; 0: the buffer size (a kmem_free's size is not checked)
};
static_assert(sizeof(BufTag) == 24);
constexpr size_t kLeftBytes = 8;

struct AuditTag {
  uint32_t stack[2];  // [0]: last allocation, [1]: last free
  uint32_t ticks[2];
  uint32_t who[2];    // kWhoValid | CPU << 24 | plat::context()
};
static_assert(sizeof(AuditTag) == 24);
constexpr uint32_t kWhoValid = 1u << 31;
static_assert(plat::kMaxCpus <= 128, "AuditTag::who keeps 7 bits of CPU");

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

BufTag* tag_of(const kmem_cache_t* cp, uintptr_t buf) { return reinterpret_cast<BufTag*>(buf + cp->tag_off); }
AuditTag* audit_of(uintptr_t buf) { return reinterpret_cast<AuditTag*>(buf - kLeftBytes - sizeof(AuditTag)); }
uint32_t state_word(uint32_t state, uintptr_t buf) { return state ^ static_cast<uint32_t>(buf); }
uint32_t size_word(uint32_t size, bool exact) { return size | (exact ? kExactBit : 0); }
uintptr_t buffer_at(const kmem_cache_t* cp, const Slab* sp, uint32_t i) { return sp->base + uintptr_t{i} * cp->chunk; }

uint64_t load64(uintptr_t at) {
  uint64_t w;
  __builtin_memcpy(&w, reinterpret_cast<const void*>(at), 8);
  return w;
}
void store64(uintptr_t at, uint64_t w) { __builtin_memcpy(reinterpret_cast<void*>(at), &w, 8); }

// The left redzone word of buf for size word v (3.).
uint64_t left_word(uintptr_t buf, uint32_t v) {
  uint32_t a = static_cast<uint32_t>(buf);
  return uint64_t{v ^ a ^ kLeftHi} << 32 | (v ^ a ^ kLeftLo);
}
void set_left(uintptr_t buf, uint32_t v) { store64(buf - kLeftBytes, left_word(buf, v)); }
// The size word buf's left redzone word holds, if it holds one: its halves
// agree on a size this cache can have.
bool left_size(const kmem_cache_t* cp, uintptr_t buf, uint32_t& v) {
  uint64_t w = load64(buf - kLeftBytes);
  uint32_t a = static_cast<uint32_t>(buf);
  uint32_t lo = static_cast<uint32_t>(w) ^ a ^ kLeftLo, hi = static_cast<uint32_t>(w >> 32) ^ a ^ kLeftHi;
  if (lo != hi || (lo & ~kExactBit) > cp->bufsize) return false;
  v = lo;
  return true;
}
bool left_holds(const kmem_cache_t* cp, uintptr_t buf) {
  uint32_t v;
  return left_size(cp, buf, v);
}

// The configuration (kmem_debug_configure), under g_lock.
plat::Lock g_lock;
KmemDebugConfig g_config;

// --- Patterns -------------------------------------------------------------

uint64_t pattern64(uint32_t p) { return uint64_t{p} << 32 | p; }

// Fills [p, p + n) with the 32-bit pattern as if from a pattern-aligned
// start (byte k is byte k % 4 of the pattern, little-endian).
void fill_pattern(uint8_t* p, size_t n, uint32_t pattern) {
  size_t i = 0;
  uint64_t w = pattern64(pattern);
  for (; i + 8 <= n; i += 8) __builtin_memcpy(p + i, &w, 8);
  for (; i < n; i++) p[i] = static_cast<uint8_t>(pattern >> (8 * (i % 4)));
}

// --- Checks (4.) -------------------------------------------------------------

// A buffer as a check sees it (slab_lock held).
struct View {
  uintptr_t buf;
  uint32_t state;  // what its tag must say: kStateFree, kStateAlloc or kStateFreeing
  bool left_ok;    // its left redzone word holds a size word
  bool known;      // v is the size word its allocation set (from the left word, else from an intact tag)
  uint32_t v;      // else the buffer size, not exact
  uint32_t size() const { return v & ~kExactBit; }
};

// The state buffer i's tag must say: free in the slab (or the buffer being
// taken, whose bit is already clear), else allocated or being freed (the
// destructor runs without the lock).
uint32_t state_for(const kmem_cache_t* cp, const Slab* sp, uint32_t i, uint32_t taking) {
  uintptr_t buf = buffer_at(cp, sp, i);
  if (i == taking || slab_buffer_free(sp, i)) return kStateFree;
  return tag_of(cp, buf)->state == state_word(kStateFreeing, buf) ? kStateFreeing : kStateAlloc;
}

// The tag's redzone and state words hold: every write from inside the
// buffer out to the next one crosses them.
bool guard_holds(const kmem_cache_t* cp, uintptr_t buf, uint32_t state) {
  const BufTag* t = tag_of(cp, buf);
  return t->redzone == kRedzoneWord && t->state == state_word(state, buf);
}
bool tag_broken(const kmem_cache_t* cp, const Slab* sp, uint32_t i, uint32_t taking) {
  return !guard_holds(cp, buffer_at(cp, sp, i), state_for(cp, sp, i, taking));
}

View view(const kmem_cache_t* cp, const Slab* sp, uint32_t i, uint32_t taking) {
  View w;
  w.buf = buffer_at(cp, sp, i);
  w.state = state_for(cp, sp, i, taking);
  w.left_ok = left_size(cp, w.buf, w.v);
  w.known = w.left_ok;
  const BufTag* t = tag_of(cp, w.buf);
  if (!w.known && guard_holds(cp, w.buf, w.state) && t->size <= cp->bufsize && t->exact <= 1) {
    w.v = size_word(t->size, t->exact != 0);
    w.known = true;
  }
  if (!w.known) w.v = static_cast<uint32_t>(cp->bufsize);
  return w;
}

// What w's tag must hold (its link is the slab's: checked when followed).
BufTag expected_tag(const View& w) {
  return BufTag{kRedzoneWord, state_word(w.state, w.buf), w.size(), 0, (w.v & kExactBit) ? 1u : 0u};
}

// The first bad byte, from w's start, of what lies after its caller's
// bytes: the redzone bytes (allocated, redzone mode) or the poison (free,
// poison mode), then the tag's words. kNoBad if all hold.
int64_t tag_bad(const kmem_cache_t* cp, const View& w) {
  auto* p = reinterpret_cast<const uint8_t*>(w.buf);
  if (w.state == kStateFree) {
    if (cp->debug & KMF_DEADBEEF) {
      size_t off = 0;
      uint64_t pat = pattern64(kFreePattern);
      for (; off + 8 <= cp->tag_off && load64(w.buf + off) == pat; off += 8) {
      }
      for (; off < cp->tag_off; off++)
        if (p[off] != static_cast<uint8_t>(kFreePattern >> (8 * (off % 4)))) return static_cast<int64_t>(off);
    }
  } else if (cp->debug & KMF_REDZONE) {
    for (size_t off = w.size(); off < cp->tag_off; off++)
      if (p[off] != kRedzoneByte) return static_cast<int64_t>(off);
  }
  BufTag want = expected_tag(w);
  const BufTag* t = tag_of(cp, w.buf);
  if (t->redzone == want.redzone && t->state == want.state && t->size == want.size && t->exact == want.exact)
    return kNoBad;
  auto* got = reinterpret_cast<const uint8_t*>(t);
  auto* exp = reinterpret_cast<const uint8_t*>(&want);
  for (size_t k = 0; k < sizeof(BufTag); k++) {
    if (k >= offsetof(BufTag, link) && k < offsetof(BufTag, link) + sizeof(want.link)) continue;
    if (got[k] != exp[k]) return static_cast<int64_t>(cp->tag_off + k);
  }
  return kNoBad;
}

// The first bad byte of w's left redzone word (-8 .. -1 from its start),
// against the word its size gives; -8 if the size is not known.
int64_t left_bad(const View& w) {
  if (!w.known) return -static_cast<int64_t>(kLeftBytes);
  uint64_t want = left_word(w.buf, w.v), got = load64(w.buf - kLeftBytes);
  for (unsigned k = 0; k < kLeftBytes; k++)
    if (static_cast<uint8_t>(got >> (8 * k)) != static_cast<uint8_t>(want >> (8 * k)))
      return static_cast<int64_t>(k) - static_cast<int64_t>(kLeftBytes);
  return kNoBad;
}

const char* const kOverrun = "buffer overrun (the redzone after the buffer was written)";
const char* const kUnderrun = "buffer underrun (the redzone before the buffer was written)";
const char* const kWriteAfterFree = "write after free (a free buffer was modified)";

// A write found by a check: the buffer whose bounds it crossed.
struct Damage {
  const char* kind = nullptr;  // null: none
  View w;
  uint32_t index = 0;
  int64_t bad = kNoBad;        // its first bad byte (negative: before it)
  uint32_t reached = 0;        // buffers after it that the write ran into
};

// Checks buffer i of sp, which w views (taking: the index of a buffer
// being handed out, free though its bit is clear; kNoIndex for none), 4.
Damage examine(const kmem_cache_t* cp, const Slab* sp, uint32_t i, uint32_t taking, const View& w) {
  Damage d;
  uint32_t c = i;
  if (!w.left_ok)  // written from below? back to where the write started
    while (c > 0 && tag_broken(cp, sp, c - 1, taking)) {
      c--;
      if (left_holds(cp, buffer_at(cp, sp, c))) break;
    }
  if (c != i) {
    d.w = view(cp, sp, c, taking);
    d.bad = tag_bad(cp, d.w);  // found: its tag is broken
  } else {
    d.w = w;
    d.bad = tag_bad(cp, w);
    if (d.bad == kNoBad && !w.left_ok) {
      d.kind = kUnderrun;
      d.index = i;
      d.bad = left_bad(w);
      if (d.bad == kNoBad) d.bad = -static_cast<int64_t>(kLeftBytes);  // a word no size gives, all of it
      return d;
    }
    if (d.bad == kNoBad) return d;
  }
  d.kind = d.w.state == kStateFree ? kWriteAfterFree : kOverrun;
  d.index = c;
  uint32_t j = c;
  while (j + 1 < sp->chunks && tag_broken(cp, sp, j, taking) && !left_holds(cp, buffer_at(cp, sp, j + 1))) j++;
  d.reached = j - c;
  return d;
}

// Restores w's redzone bytes or poison and its tag's words.
void restore(const kmem_cache_t* cp, const View& w) {
  auto* p = reinterpret_cast<uint8_t*>(w.buf);
  if (w.state == kStateFree) {
    if (cp->debug & KMF_DEADBEEF) fill_pattern(p, cp->tag_off, kFreePattern);
  } else if (cp->debug & KMF_REDZONE) {
    __builtin_memset(p + w.size(), kRedzoneByte, cp->tag_off - w.size());
  }
  BufTag want = expected_tag(w);
  BufTag* t = tag_of(cp, w.buf);
  want.link = t->link;
  *t = want;
}

// Repairs what the write d found lay over (4.): the damaged buffer's own
// words, and for each buffer it ran into, that one's audit tag (zeroed: its
// trail is gone), left word and own words. Free buffers' links were on the
// path: the slab's free list is rebuilt from its bitmap.
void repair(kmem_cache_t* cp, Slab* sp, const Damage& d, uint32_t taking) {
  if (d.kind == kUnderrun) {
    set_left(d.w.buf, d.w.v);
    return;
  }
  bool relink = false;
  for (uint32_t j = d.index; j <= d.index + d.reached; j++) {
    View x = j == d.index ? d.w : view(cp, sp, j, taking);
    if (j != d.index) {
      if (cp->debug & KMF_AUDIT) __builtin_memset(audit_of(x.buf), 0, sizeof(AuditTag));
      set_left(x.buf, x.v);
    }
    restore(cp, x);
    relink |= x.state == kStateFree && j != taking;
  }
  if (relink && !cp->offslab) slab_freelist_rebuild(cp, sp);
}

void fill_trail(const kmem_cache_t* cp, uintptr_t buf, MemDetail& d) {
  if (!(cp->debug & KMF_AUDIT)) return;
  const AuditTag* a = audit_of(buf);
  BufAudit* out[2] = {&d.alloc, &d.free};
  for (int k = 0; k < 2; k++) {
    uint32_t who = a->who[k];
    *out[k] = BufAudit{(who & kWhoValid) != 0, static_cast<uint16_t>(who >> 24 & 127), a->stack[k], a->ticks[k],
                       who & 0xffffff};
  }
}

const char* expected_name(const kmem_cache_t* cp, int64_t bad, bool free_buffer) {
  if (bad < 0) return "the left redzone word (the size, encoded, in each half)";
  auto off = static_cast<size_t>(bad);
  if (off < cp->tag_off) return free_buffer ? "0xdeadbeef (poison)" : "0xbb (redzone)";
  size_t t = off - cp->tag_off;
  if (t < offsetof(BufTag, state)) return "the redzone word 0xfeedfacefeedface";
  if (t < offsetof(BufTag, size)) return "the buffer's state word";
  if (t < offsetof(BufTag, link)) return "the tag's size word (the size asked for)";
  return "the tag's exact word";
}

// The report of d (f: the caller's, filled; f.d its detail).
void found(const kmem_cache_t* cp, const Damage& d, Finding& f) {
  f.kind = d.kind;
  f.addr = d.w.buf;
  f.detail = static_cast<uint64_t>(d.bad < 0 ? -d.bad : d.bad);
  MemDetail& m = *f.d;
  m = MemDetail{};
  m.buffer = d.w.buf;
  m.size = d.w.size();
  m.offset = d.bad;
  size_t n = d.bad < 0 ? static_cast<size_t>(-d.bad) : cp->tag_off + sizeof(BufTag) - static_cast<size_t>(d.bad);
  m.nfound = static_cast<uint8_t>(n < sizeof m.found ? n : sizeof m.found);
  __builtin_memcpy(m.found, reinterpret_cast<const uint8_t*>(d.w.buf) + d.bad, m.nfound);
  m.expected = expected_name(cp, d.bad, d.w.state == kStateFree);
  m.reached = static_cast<uint16_t>(d.reached);  // at most a slab's buffers, kMaxChunks
  m.reached_off = d.reached ? static_cast<uint32_t>(cp->chunk) : 0;
  fill_trail(cp, d.w.buf, m);
}

// --- The transaction log (6.) ---------------------------------------------------

struct LogSlot {
  uint64_t seq;  // 0: being written
  uintptr_t buf;
  const kmem_cache_t* cp;
  uint32_t stack, ticks;
  uint32_t op;  // bit 0: alloc; bits 8..15: bytes of contents
  uint32_t who;  // CPU << 24 | context, as AuditTag::who (without kWhoValid)
  uint64_t contents[2];
};

constexpr uint32_t kDefaultLogEntries = 1024;
LogSlot* g_log;          // set once (release) under g_lock; read with acquire
uint32_t g_log_entries;  // written before g_log is published
uint64_t g_log_next;     // sequence numbers handed out (atomic)

template <typename T>
void st(T& v, T x) {
  __atomic_store_n(&v, x, __ATOMIC_RELEASE);  // after seq's clearing (6.)
}
template <typename T>
T ld(const T& v) {
  return __atomic_load_n(&v, __ATOMIC_ACQUIRE);  // before seq's second load (6.)
}

void log_op(const kmem_cache_t* cp, uintptr_t buf, bool alloc, uint32_t stack, uint32_t ticks, uint32_t cpu,
            uint32_t context) {
  LogSlot* log = __atomic_load_n(&g_log, __ATOMIC_ACQUIRE);
  if (!log) return;
  uint64_t seq = __atomic_add_fetch(&g_log_next, 1, __ATOMIC_RELAXED);
  LogSlot& s = log[(seq - 1) % g_log_entries];
  __atomic_store_n(&s.seq, uint64_t{0}, __ATOMIC_RELAXED);
  st(s.buf, buf);
  st(s.cp, cp);
  st(s.stack, stack);
  st(s.ticks, ticks);
  st(s.who, (cpu & 127) << 24 | context);
  uint32_t op = alloc ? 1u : 0u;
  uint64_t c[2] = {0, 0};
  if (!alloc && (cp->debug & KMF_CONTENTS)) {  // before the poison: the caller holds slab_lock
    uint32_t size = tag_of(cp, buf)->size;       // checked (or repaired) by the free's check
    uint32_t n = size < 16 ? size : 16;
    __builtin_memcpy(c, reinterpret_cast<const void*>(buf), n);
    op |= n << 8;
  }
  st(s.contents[0], c[0]);
  st(s.contents[1], c[1]);
  st(s.op, op);
  __atomic_store_n(&s.seq, seq, __ATOMIC_RELEASE);  // the fields before the number
}

bool log_read(const LogSlot& s, uint64_t want, KmemLogEntry& e, const kmem_cache_t*& cp) {
  if (__atomic_load_n(&s.seq, __ATOMIC_ACQUIRE) != want) return false;
  e.seq = want;
  e.buffer = ld(s.buf);
  cp = ld(s.cp);
  e.stack = ld(s.stack);
  e.ticks = ld(s.ticks);
  uint32_t who = ld(s.who);
  e.cpu = who >> 24;
  e.context = who & 0xffffff;
  uint32_t op = ld(s.op);
  uint64_t c[2] = {ld(s.contents[0]), ld(s.contents[1])};
  if (__atomic_load_n(&s.seq, __ATOMIC_RELAXED) != want) return false;
  e.alloc = op & 1;
  e.ncontents = static_cast<uint8_t>(op >> 8);
  __builtin_memcpy(e.contents, c, sizeof e.contents);
  return true;
}

// Sets the log up (once) with the configured size: the first audited cache.
void log_ensure() {
  if (__atomic_load_n(&g_log, __ATOMIC_ACQUIRE)) return;
  Guard<> g(g_lock);
  if (g_log) return;
  uint32_t n = g_config.log_entries ? g_config.log_entries : kDefaultLogEntries;
  size_t bytes = size_t{n} * sizeof(LogSlot);
  unsigned order = 0;
  while ((kPageBytes << order) < bytes && order < kMaxOrder) order++;
  g.unlock();
  auto* log = static_cast<LogSlot*>(meta_alloc(order, KM_NOSLEEP));
  if (!log) {
    plat::log("kmem: no memory for the transaction log (%u entries); audit goes on without it", static_cast<unsigned>(n));
    return;
  }
  __builtin_memset(log, 0, kPageBytes << order);
  g.lock();
  if (g_log) {
    g.unlock();
    meta_free(log, order);
    return;
  }
  g_log_entries = static_cast<uint32_t>((kPageBytes << order) / sizeof(LogSlot));
  __atomic_store_n(&g_log, log, __ATOMIC_RELEASE);  // entries, zeroed, and the size before the pointer
}

void audit_ensure() {
  stackdepot_init(stackdepot_default_pool());  // idempotent; without it, trails have no backtraces
  log_ensure();
}

void audit_note(const kmem_cache_t* cp, uintptr_t buf, bool alloc, uint32_t stack) {
  if (!(cp->debug & KMF_AUDIT)) return;
  AuditTag* a = audit_of(buf);
  int k = alloc ? 0 : 1;
  uint32_t ticks = static_cast<uint32_t>(plat::ticks());
  uint32_t cpu = plat::cpu_id();
  uint32_t context = plat::context() & 0xffffff;
  a->stack[k] = stack;
  a->ticks[k] = ticks;
  a->who[k] = kWhoValid | (cpu & 127) << 24 | context;
  log_op(cp, buf, alloc, stack, ticks, cpu, context);
}

bool name_is(const char* a, const char* b) {
  for (unsigned i = 0; i < 32; i++) {
    if (a[i] != b[i]) return false;
    if (!a[i]) return true;
  }
  return true;
}

}  // namespace

// --- Configuration -----------------------------------------------------------

bool kmem_debug_parse(const char* spec, KmemDebugConfig& out, const char** why) {
  out = KmemDebugConfig{};
  static const char* bad = "";
  *why = bad;
  if (!spec || !*spec) {
    *why = "empty: give redzone, poison, audit, contents, all, none or a number, then ,cache=NAME or ,log=N";
    return false;
  }
  const char* p = spec;
  bool any_flag = false;
  while (*p) {
    const char* end = p;
    while (*end && *end != ',' && *end != '+') end++;
    size_t n = static_cast<size_t>(end - p);
    auto is = [&](const char* w) {
      size_t k = 0;
      while (w[k] && k < n && p[k] == w[k]) k++;
      return !w[k] && k == n;
    };
    auto starts = [&](const char* w, size_t& len) {
      len = 0;
      while (w[len] && len < n && p[len] == w[len]) len++;
      return !w[len];
    };
    size_t plen;
    if (n == 0) {
      *why = "an empty word (two separators in a row)";
      return false;
    } else if (is("redzone")) {
      out.flags |= KMF_REDZONE;
      any_flag = true;
    } else if (is("poison") || is("deadbeef")) {
      out.flags |= KMF_DEADBEEF;
      any_flag = true;
    } else if (is("audit")) {
      out.flags |= KMF_AUDIT;
      any_flag = true;
    } else if (is("contents")) {
      out.flags |= KMF_CONTENTS | KMF_AUDIT;
      any_flag = true;
    } else if (is("all")) {
      out.flags |= KMF_ALL;
      any_flag = true;
    } else if (is("none")) {
      any_flag = true;
    } else if (starts("cache=", plen)) {
      if (n == plen) {
        *why = "cache= without a name";
        return false;
      }
      if (n - plen >= sizeof out.names[0]) {
        *why = "a cache name longer than 31 characters";
        return false;
      }
      if (out.nnames == KmemDebugConfig::kMaxNames) {
        *why = "more than 8 cache= names";
        return false;
      }
      __builtin_memcpy(out.names[out.nnames], p + plen, n - plen);
      out.names[out.nnames][n - plen] = 0;
      out.nnames++;
    } else if (starts("log=", plen)) {
      uint64_t v = 0;
      size_t k = plen;
      for (; k < n && p[k] >= '0' && p[k] <= '9' && v <= 1000000; k++) v = v * 10 + static_cast<uint64_t>(p[k] - '0');
      if (k == plen || k != n || v == 0 || v > 1000000) {
        *why = "log= takes a number of entries from 1 to 1000000";
        return false;
      }
      out.log_entries = static_cast<uint32_t>(v);
    } else if (*p >= '0' && *p <= '9') {
      uint64_t v = 0;
      bool hex = n > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
      size_t k = hex ? 2 : 0;
      for (; k < n; k++) {
        char c = p[k];
        unsigned dgt;
        if (c >= '0' && c <= '9') dgt = static_cast<unsigned>(c - '0');
        else if (hex && c >= 'a' && c <= 'f') dgt = static_cast<unsigned>(c - 'a' + 10);
        else if (hex && c >= 'A' && c <= 'F') dgt = static_cast<unsigned>(c - 'A' + 10);
        else break;
        v = v * (hex ? 16 : 10) + dgt;
        if (v > 0xffff) break;
      }
      if (k != n || (v & ~uint64_t{KMF_ALL})) {
        *why = "a number must be KMF_ bits: audit 1, poison (deadbeef) 2, redzone 4, contents 8";
        return false;
      }
      out.flags |= static_cast<uint32_t>(v);
      if (v & KMF_CONTENTS) out.flags |= KMF_AUDIT;
      any_flag = true;
    } else {
      *why = "unknown word: use redzone, poison, audit, contents, all, none, a number, cache=NAME or log=N";
      return false;
    }
    p = *end ? end + 1 : end;
    if (*end && !*p) {
      *why = "a separator at the end";
      return false;
    }
  }
  if (!any_flag) {
    *why = "no mode given (redzone, poison, audit, contents, all or none)";
    return false;
  }
  return true;
}

void kmem_debug_configure(const KmemDebugConfig& c) {
  Guard<> g(g_lock);
  g_config = c;
}

void kmem_debug_config(KmemDebugConfig& out) {
  Guard<> g(g_lock);
  out = g_config;
}

uint32_t kmem_cache_debug_flags(const kmem_cache_t* cp) { return cp->debug; }

void kmem_debug_flags_name(uint32_t flags, char* out, size_t len) {
  static const struct {
    uint32_t bit;
    const char* name;
  } names[] = {{KMF_REDZONE, "redzone"}, {KMF_DEADBEEF, "poison"}, {KMF_AUDIT, "audit"}, {KMF_CONTENTS, "contents"}};
  size_t n = 0;
  auto put = [&](const char* s) {
    for (; *s && n + 1 < len; s++) out[n++] = *s;
  };
  for (auto& e : names)
    if (flags & e.bit) {
      if (n) put("+");
      put(e.name);
    }
  if (!n) put("none");
  if (len) out[n < len ? n : len - 1] = 0;
}


// --- Creation ------------------------------------------------------------------

uint32_t debug_flags_for(const char* name, int cflags, bool heap_memory) {
  if (cflags & (KMC_NOTOUCH | KMC_QCACHE)) return 0;
  uint32_t f = static_cast<uint32_t>(cflags >> KMC_DEBUG_SHIFT) & KMF_ALL;
  if (!(cflags & (KMC_NODEBUG | KMC_NOTRACK)) && heap_memory) {
    Guard<> g(g_lock);
    bool named = g_config.nnames == 0;
    for (unsigned i = 0; i < g_config.nnames && !named; i++) named = name_is(g_config.names[i], name);
    if (named) f |= g_config.flags;
  }
  if (f & KMF_CONTENTS) f |= KMF_AUDIT;
  return f;
}

void debug_layout(kmem_cache_t* cp) {
  // What lies before each buffer: its left redzone word, its audit tag.
  size_t before = kLeftBytes + (cp->debug & KMF_AUDIT ? sizeof(AuditTag) : 0);
  size_t lead = round_up(before, cp->align);
  if (lead > UINT16_MAX) {  // an alignment of 64 KiB or more: cp->lead cannot say it
    plat::log("kmem: '%s' is not debugged: its alignment (%llu) leaves no room before its first buffer", cp->name,
              static_cast<unsigned long long>(cp->align));
    cp->debug = 0;
    return;
  }
  cp->tag_off = static_cast<uint32_t>(round_up(cp->bufsize, 8));
  cp->chunk = round_up(cp->tag_off + sizeof(BufTag) + before, cp->align);
  cp->lead = static_cast<uint16_t>(lead);
  cp->flags |= KMC_NOMAGAZINE;
  // Audit's backtraces and log; kmem_init's own caches get them at its end
  // (the host's stackdepot_init brings kmem up first).
  if ((cp->debug & KMF_AUDIT) && kmem_ready()) audit_ensure();
}

void debug_slab_init(kmem_cache_t* cp, Slab* sp) {
  for (uint32_t i = 0; i < sp->chunks; i++) {
    uintptr_t buf = buffer_at(cp, sp, i);
    BufTag* t = tag_of(cp, buf);  // t->link: set by slab_create already
    t->redzone = kRedzoneWord;
    t->state = state_word(kStateFree, buf);
    t->size = 0;
    t->exact = 0;
    set_left(buf, 0);
    if (cp->debug & KMF_AUDIT) __builtin_memset(audit_of(buf), 0, sizeof(AuditTag));
    if (cp->debug & KMF_DEADBEEF) fill_pattern(reinterpret_cast<uint8_t*>(buf), cp->tag_off, kFreePattern);
  }
}

uint32_t debug_stack(const kmem_cache_t* cp, uintptr_t caller) {
  if (!(cp->debug & KMF_AUDIT)) return 0;
  return stackdepot_capture_from(caller);
}

// --- Allocation and free ------------------------------------------------------------

void debug_take(kmem_cache_t* cp, Slab* sp, uint32_t i, size_t requested, uint32_t stack, Finding& f) {
  assert_held(cp->slab_lock);
  bool exact = requested != 0;
  if (!exact) requested = cp->bufsize;
  uintptr_t buf = buffer_at(cp, sp, i);
  Damage d = examine(cp, sp, i, i, view(cp, sp, i, i));
  if (__builtin_expect(d.kind != nullptr, 0)) {
    found(cp, d, f);
    repair(cp, sp, d, i);
  }
  auto* p = reinterpret_cast<uint8_t*>(buf);
  if ((cp->debug & KMF_DEADBEEF) && !cp->ctor) fill_pattern(p, requested, kUninitPattern);
  if (cp->debug & KMF_REDZONE) __builtin_memset(p + requested, kRedzoneByte, cp->tag_off - requested);
  BufTag* t = tag_of(cp, buf);
  t->size = static_cast<uint32_t>(requested);
  t->exact = exact;
  t->state = state_word(kStateAlloc, buf);
  set_left(buf, size_word(t->size, exact));
  audit_note(cp, buf, true, stack);
}

void debug_untake(kmem_cache_t* cp, uintptr_t buf) {
  assert_held(cp->slab_lock);
  tag_of(cp, buf)->state = state_word(kStateFree, buf);
  if (cp->debug & KMF_DEADBEEF) fill_pattern(reinterpret_cast<uint8_t*>(buf), cp->tag_off, kFreePattern);
}

bool debug_free_check(kmem_cache_t* cp, Slab* sp, uint32_t i, size_t size, Finding& f) {
  assert_held(cp->slab_lock);
  uintptr_t buf = buffer_at(cp, sp, i);
  uint32_t state = tag_of(cp, buf)->state ^ static_cast<uint32_t>(buf);
  View w = view(cp, sp, i, kNoIndex);
  auto refuse = [&](const char* kind, uint64_t detail) {
    f.kind = kind;
    f.addr = buf;
    f.detail = detail;
    *f.d = MemDetail{};
    f.d->buffer = buf;
    f.d->size = w.size();
    f.d->offset = -1;
    fill_trail(cp, buf, *f.d);
    return false;
  };
  if (slab_buffer_free(sp, i) || state == kStateFree || state == kStateFreeing) return refuse("double free", 0);
  // The size from the left redzone word (or an intact tag): never from a
  // word the buffer's own overrun may have written.
  if (size && w.known && (w.v & kExactBit) && size != w.size())
    return refuse("kmem_free with the wrong size (not the size kmem_alloc was given)", size);
  Damage d = examine(cp, sp, i, kNoIndex, w);
  if (__builtin_expect(d.kind != nullptr, 0)) {
    found(cp, d, f);
    repair(cp, sp, d, kNoIndex);
  }
  tag_of(cp, buf)->state = state_word(kStateFreeing, buf);
  return true;
}

void debug_free_commit(kmem_cache_t* cp, uintptr_t buf, uint32_t stack) {
  assert_held(cp->slab_lock);
  audit_note(cp, buf, false, stack);  // contents, into the log, before the poison
  if (cp->debug & KMF_DEADBEEF) fill_pattern(reinterpret_cast<uint8_t*>(buf), cp->tag_off, kFreePattern);
  tag_of(cp, buf)->state = state_word(kStateFree, buf);
}

void debug_report_bad_pointer(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  auto a = reinterpret_cast<uintptr_t>(obj);
  Slab* sp = slab_of_heap_address(a);
  if (sp && sp->cache == cp && a >= sp->base && a < sp->base + uintptr_t{sp->chunks} * cp->chunk) {
    auto i = static_cast<uint32_t>(div_chunk(cp, a - sp->base));
    uintptr_t start = buffer_at(cp, sp, i);
    MemDetail d{};
    d.buffer = start;
    d.offset = static_cast<int64_t>(a - start);
    {
      Guard<> g(cp->slab_lock);
      d.size = view(cp, sp, i, kNoIndex).size();
      fill_trail(cp, start, d);
    }
    report_error(MemError{"free of an address inside a buffer (not its start)", cp->name, a, caller,
                          a - start, &d});
    return;
  }
  report_wrong_owner(cp, obj, caller);
}

void debug_report_live(kmem_cache_t* cp, uint64_t live, uintptr_t caller) {
  constexpr unsigned kShown = 4;
  MemDetail d[kShown] = {};
  unsigned n = 0;
  {
    Guard<> g(cp->slab_lock);
    SlabList* lists[] = {&cp->partial, &cp->full};
    for (SlabList* l : lists)
      for (Slab* sp = l->head; sp && n < kShown; sp = sp->next)
        for (uint32_t i = 0; i < sp->chunks && n < kShown; i++) {
          if (slab_buffer_free(sp, i)) continue;
          uintptr_t buf = buffer_at(cp, sp, i);
          d[n].buffer = buf;
          d[n].size = view(cp, sp, i, kNoIndex).size();
          d[n].offset = -1;
          fill_trail(cp, buf, d[n]);
          n++;
        }
  }
  report_error(MemError{"kmem_cache_destroy of a cache with live objects", cp->name,
                        n ? d[0].buffer : reinterpret_cast<uintptr_t>(cp), caller, live, n ? &d[0] : nullptr});
  for (unsigned k = 1; k < n; k++) {
    plat::log("kmem:   also live: buffer %p (size %llu)", reinterpret_cast<void*>(d[k].buffer),
              static_cast<unsigned long long>(d[k].size));
    print_audit("allocated", d[k].alloc);
  }
  if (live > n) plat::log("kmem:   and %llu more", static_cast<unsigned long long>(live - n));
}

// The frames in the format kmemleak prints ("[<0x...>]"), which
// tools/symbolize turns into function and line.
void print_audit(const char* what, const BufAudit& a) {
  unsigned tps = plat::ticks_per_second();
  unsigned long long ms = tps ? static_cast<unsigned long long>(a.ticks) * 1000 / tps : 0;
  char who[64];
  plat::context_name(a.context, who, sizeof who);
  plat::log("kmem:   last %s on cpu %u (%s) at %llu.%03llu s (tick %u)%s", what, static_cast<unsigned>(a.cpu), who,
            ms / 1000, ms % 1000, static_cast<unsigned>(a.ticks), a.stack ? ":" : ", no backtrace");
  const uintptr_t* pcs;
  unsigned n = stackdepot_fetch(a.stack, &pcs);
  for (unsigned i = 0; i < n; i++) plat::log("kmem:     [<0x%llx>]", static_cast<unsigned long long>(pcs[i]));
}

void print_mem_detail(const MemDetail& d) {  // report.cpp's default hook
  if (d.buffer) plat::log("kmem:   buffer %p, size %llu", reinterpret_cast<void*>(d.buffer),
                          static_cast<unsigned long long>(d.size));
  if (d.nfound) {
    char hex[16 * 3 + 1];
    unsigned n = 0;
    for (unsigned i = 0; i < d.nfound; i++) {
      const char* digits = "0123456789abcdef";
      hex[n++] = digits[d.found[i] >> 4];
      hex[n++] = digits[d.found[i] & 15];
      hex[n++] = ' ';
    }
    hex[n ? n - 1 : 0] = 0;
    if (d.offset < 0)
      plat::log("kmem:   first bad byte %lld before the buffer: %s", static_cast<long long>(-d.offset), hex);
    else
      plat::log("kmem:   first bad byte at offset %lld (0x%llx): %s", static_cast<long long>(d.offset),
                static_cast<unsigned long long>(d.offset), hex);
    if (d.expected) plat::log("kmem:   expected %s", d.expected);
  }
  if (d.reached)
    plat::log("kmem:   the write ran on into the next %u buffer(s), from %p: their tags are repaired, not their "
              "contents",
              static_cast<unsigned>(d.reached), reinterpret_cast<void*>(d.buffer + d.reached_off));
  if (d.alloc.valid) print_audit("allocated", d.alloc);
  if (d.free.valid) print_audit("freed", d.free);
}

void report_finding(kmem_cache_t* cp, const Finding& f, uintptr_t caller) {
  report_error(MemError{f.kind, cp->name, f.addr, caller, f.detail, f.d});
}

void debug_init() {
#if !defined(MM_KERNEL)
  // The host library's configuration: MM_KMEM_DEBUG, the bootarg's syntax.
  if (const char* env = getenv("MM_KMEM_DEBUG")) {
    KmemDebugConfig c;
    const char* why;
    if (kmem_debug_parse(env, c, &why)) kmem_debug_configure(c);
    else plat::log("MM_KMEM_DEBUG=%s: %s; debugging stays off", env, why);
  }
#endif
}

void debug_init_done() {
  bool audit = false;
  for_each_cache([&](kmem_cache_t* c) { audit |= (c->debug & KMF_AUDIT) != 0; });
  if (audit) audit_ensure();
#if !defined(MM_KERNEL)
  kmem_debug_start();
#endif
}

// kmem_alloc's debugged size caches need the size the caller asked for:
// its hooked copies pass it (mm/hooks.h, kFeatureDebug).
bool kmem_debug_start() {
  bool any = false;
  for_each_cache([&](kmem_cache_t* c) { any |= c->debug && (c->flags & KMC_KMEM_ALLOC); });
  if (!any) return true;
  if (alloc_hooks_set(kFeatureDebug, true)) return true;
  plat::log("kmem: the allocators' hooks could not be switched on: kmem_alloc's redzones start at the class size");
  return false;
}


// --- Inspection ----------------------------------------------------------------------

uint64_t kmem_verify(kmem_cache_t* only, uint64_t* checked) {
  uint64_t total = 0, seen = 0;
  auto one = [&](kmem_cache_t* cp) {
    if (!cp->debug) return;
    constexpr unsigned kShown = 4;
    MemDetail d[kShown];
    Finding f[kShown];
    unsigned n = 0;
    uint64_t bad_here = 0;
    {
      Guard<> g(cp->slab_lock);
      SlabList* lists[] = {&cp->partial, &cp->full, &cp->empty};
      for (SlabList* l : lists)
        for (Slab* sp = l->head; sp; sp = sp->next) {
          uint32_t covered = 0;  // buffers below it lie on a write reported already
          for (uint32_t i = 0; i < sp->chunks; i++) {
            uintptr_t buf = buffer_at(cp, sp, i);
            bool is_free = slab_buffer_free(sp, i);
            uint32_t state = tag_of(cp, buf)->state ^ static_cast<uint32_t>(buf);
            if (!is_free && (state == kStateFree || state == kStateFreeing))
              continue;  // being allocated or freed right now
            seen++;
            if (i < covered) continue;
            // The same check as a free's or an allocation's (4.), which
            // repair and so report each write once: here each write is
            // reported at its first buffer, and the buffers it ran into
            // are not reported again.
            Damage dm = examine(cp, sp, i, kNoIndex, view(cp, sp, i, kNoIndex));
            if (!dm.kind || dm.index < covered) continue;
            covered = dm.index + dm.reached + 1;
            bad_here++;
            if (n == kShown) continue;
            f[n] = Finding{nullptr, 0, 0, &d[n]};
            found(cp, dm, f[n]);
            n++;
          }
        }
    }
    for (unsigned k = 0; k < n; k++) report_finding(cp, f[k], 0);
    if (bad_here > n)
      plat::log("kmem verify: %llu more corrupt buffers in '%s'", static_cast<unsigned long long>(bad_here - n),
                cp->name);
    total += bad_here;
  };
  if (only) one(only);
  else for_each_cache(one);
  if (checked) *checked = seen;
  return total;
}

bool kmem_debug_trail(const void* addr, KmemTrail& out) {
  auto a = reinterpret_cast<uintptr_t>(addr);
  Slab* sp = slab_of_heap_address(a);
  if (!sp) return false;
  kmem_cache_t* cp = sp->cache;
  if (!cp->debug || a < sp->base || a >= sp->base + uintptr_t{sp->chunks} * cp->chunk) return false;
  uint32_t i = static_cast<uint32_t>(div_chunk(cp, a - sp->base));
  uintptr_t buf = buffer_at(cp, sp, i);
  out = KmemTrail{};
  out.cache = cp;
  out.buffer = buf;
  MemDetail d{};
  Guard<> g(cp->slab_lock);
  out.allocated = !slab_buffer_free(sp, i);
  out.size = view(cp, sp, i, kNoIndex).size();
  fill_trail(cp, buf, d);
  out.alloc = d.alloc;
  out.free = d.free;
  return true;
}

uint64_t kmem_log_walk(uintptr_t addr, void (*fn)(const KmemLogEntry& e, void* arg), void* arg) {
  LogSlot* log = __atomic_load_n(&g_log, __ATOMIC_ACQUIRE);
  if (!log) return 0;
  uint64_t last = __atomic_load_n(&g_log_next, __ATOMIC_RELAXED);
  uint64_t first = last > g_log_entries ? last - g_log_entries + 1 : 1;
  uint64_t visited = 0;
  for (uint64_t seq = first; seq <= last; seq++) {
    KmemLogEntry e{};
    const kmem_cache_t* cp;
    if (!log_read(log[(seq - 1) % g_log_entries], seq, e, cp)) continue;  // overwritten meanwhile
    if (addr) {
      // The buffer's chunk, from the cache if it still exists.
      bool alive = false;
      uint64_t chunk = 0;
      for_each_cache([&](kmem_cache_t* c) {
        if (c == cp) {
          alive = true;
          chunk = c->chunk;
        }
      });
      if (!alive || addr < e.buffer || addr >= e.buffer + chunk) continue;
    }
    e.cache = "(destroyed cache)";
    for_each_cache([&](kmem_cache_t* c) {
      if (c == cp) e.cache = c->name;  // valid while the cache lives: printed at once by fn
    });
    fn(e, arg);
    visited++;
  }
  return visited;
}

uint32_t kmem_log_capacity() { return __atomic_load_n(&g_log, __ATOMIC_ACQUIRE) ? g_log_entries : 0; }
uint64_t kmem_log_total() { return __atomic_load_n(&g_log_next, __ATOMIC_RELAXED); }

}  // namespace mm
