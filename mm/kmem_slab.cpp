// SPDX-License-Identifier: Apache-2.0
// kmem's slab layer: where buffers come from and go back to.
//
// 1. A slab is a run of memory from the cache's vmem arena carved into
//    buffers of the cache's chunk size. Buffers in the slab layer are NOT
//    constructed: the constructor runs when a buffer leaves it (slab_alloc),
//    the destructor when it comes back (slab_free of a constructed buffer).
// 2. Layout (cache_layout). Small buffers (chunk <= page/8, memory we may
//    write to) live in one-page slabs with the Slab header at the end of the
//    page: buffer -> slab is a mask, and the free list is threaded through
//    the free buffers themselves. Other caches (large buffers, KMC_NOTOUCH,
//    vmem quantum caches over integer arenas) keep the header off-slab, with
//    one HashEnt per buffer, and a per-cache hash finds buffer -> slab. Off-
//    slab headers come from the kmem_alloc size caches' slab layer directly
//    (not through magazines), so a reap that destroys slabs leaves no headers
//    cached behind it.
// 3. Every slab has a bitmap of the buffers free in the slab layer, so a
//    double free reaching the slab layer, or a pointer that is not a buffer
//    boundary, is caught here.
// 4. Colouring: successive slabs start their buffers at offsets 0, align,
//    2*align, ... within the slab's slack, to spread buffers over cache lines
//    (after the cache's lead: what a debugged cache keeps before a buffer,
//    kmem_debug.cpp, The layout).
// 5. The page index. Every heap page of a slab has kPageSlab set in its page
//    descriptor and owner = the Slab, for on-slab and off-slab caches alike;
//    both are set before the slab's first buffer is handed out and cleared
//    when the slab is destroyed. With segkmem's heap index (heap address ->
//    page descriptor in O(1)), any address inside a slab finds the slab, its
//    cache and the buffer index in constant time: the free fast path of off-
//    slab caches checks ownership this way, kmem_whatis answers with it.
//    Both read without a lock (mark_slab_pages says what orders them).
// 6. Empty slabs: one is kept per cache to absorb churn at the slab boundary
//    (and any the consolidator is emptying); the rest go back to vmem at once.
//    slab_reap destroys the kept ones.
// 7. Locking: slab_lock (interrupts masked) guards the slab lists, the hash,
//    the colour and the counters. It is never held while calling a
//    constructor or destructor, vmem, or another cache (including the size
//    cache an off-slab header comes from); slab_create and slab_destroy run
//    without it.
// 8. Free-list hardening (Linux's SLAB_FREELIST_HARDENED). An on-slab free
//    buffer keeps the index of the next free buffer in a word inside itself
//    (at link_off: its first word, or its BufTag's link in a debugged
//    cache), where a stray write or a write after free lands first. The
//    word is stored xor a key mixed from the cache's secret and the word's
//    own address (link_store), so a plausible index written there decodes
//    to garbage, and every link is checked when it is followed (slab_take):
//    it must name a buffer of the slab that the slab's free bitmap says is
//    free. A bad link is reported ("free list corruption": cache, slab, the
//    bad value) and never followed: the slab's free list is rebuilt from
//    the bitmap, which lives in the header. Off-slab caches keep their
//    links in the HashEnts, outside the buffers. The secret is mixed from
//    the time and the cache's address at creation: no defence against
//    someone who can read kernel memory, only against stray writes.
//    Cost, slab-layer alloc+free pair (host callgrind, bench's slab rows):
//    see bench/RESULTS.md ("free-list hardening").
#include <mm/failslab.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>
#include "heap_index.h"
#include "kmem_cache.h"
#include "kmemleak_meta.h"

namespace mm {
namespace {

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t freemap_words(uint32_t chunks) { return (chunks + 63) / 64; }

void list_insert(SlabList& l, Slab* sp) {
  sp->prev = nullptr;
  sp->next = l.head;
  if (l.head) l.head->prev = sp;
  l.head = sp;
  l.count++;
}

// The first slab from sp on that the consolidator is not emptying.
Slab* skip_victims(Slab* sp) {
  while (sp && (sp->flags & kSlabVictim)) sp = sp->next;
  return sp;
}

void list_remove(SlabList& l, Slab* sp) {
  if (sp->prev) sp->prev->next = sp->next;
  else l.head = sp->next;
  if (sp->next) sp->next->prev = sp->prev;
  sp->next = sp->prev = nullptr;
  l.count--;
}

size_t hash_index(const kmem_cache_t* cp, uintptr_t addr) {
  uint64_t h = div_chunk(cp, addr);
  h ^= h >> 17;
  return static_cast<size_t>(h & (cp->hash_buckets - 1));
}

unsigned order_for(size_t bytes) {
  unsigned order = 0;
  while ((kPageBytes << order) < bytes && order < kMaxOrder) order++;
  return order;
}

// Grows the off-slab hash when it averages more than 2 entries per bucket.
// Called without slab_lock; takes it.
void hash_maybe_grow(kmem_cache_t* cp) {
  uint64_t want;
  {
    Guard<> g(cp->slab_lock);
    want = cp->hash_count > 2 * cp->hash_buckets ? cp->hash_buckets * 4 : 0;
  }
  if (!want) return;
  size_t bytes = want * sizeof(HashEnt*);
  unsigned order = order_for(bytes);
  if ((kPageBytes << order) < bytes) return;
  auto** nb = static_cast<HashEnt**>(meta_alloc(order, KM_NOSLEEP));
  if (!nb) return;
  __builtin_memset(nb, 0, kPageBytes << order);
  want = (kPageBytes << order) / sizeof(HashEnt*);
  HashEnt** old;
  uint64_t old_buckets;
  {
    Guard<> g(cp->slab_lock);
    old = cp->hash;
    old_buckets = cp->hash_buckets;
    cp->hash = nb;
    cp->hash_buckets = want;
    for (uint64_t i = 0; i < old_buckets; i++) {
      for (HashEnt* e = old[i]; e;) {
        HashEnt* n = e->next;
        size_t j = hash_index(cp, e->addr);
        e->next = nb[j];
        nb[j] = e;
        e = n;
      }
    }
    cp->hash_rescales++;
  }
  if (old != cp->hash0) meta_free(old, order_for(old_buckets * sizeof(HashEnt*)));
}

// kmemleak's per-slab records (kmemleak_meta.h).
size_t leak_slab_bytes(uint32_t chunks) {
  size_t words = freemap_words(chunks);
  return sizeof(LeakSlab) + 3 * words * sizeof(uint64_t) + size_t{chunks} * sizeof(LeakMeta);
}

uint64_t g_leak_bytes;  // of every LeakSlab (statistics)

LeakSlab* leak_slab_alloc(uint32_t chunks) {
  size_t bytes = leak_slab_bytes(chunks);
  // Fault injection may refuse them under their own name (mm/failslab.h),
  // so that the scanner's way with a slab without records is tested.
  if (failslab_armed() && failslab_should_fail("kmemleak_records", bytes)) return nullptr;
  auto* ls = static_cast<LeakSlab*>(internal_alloc(bytes, KM_NOSLEEP));
  if (!ls) return nullptr;
  __builtin_memset(ls, 0, bytes);
  uint32_t words = static_cast<uint32_t>(freemap_words(chunks));
  auto* maps = reinterpret_cast<uint64_t*>(ls + 1);
  ls->words = words;
  ls->chunks = chunks;
  ls->reached = maps;
  ls->scanned = maps + words;
  ls->magfree = maps + 2 * words;
  ls->meta = reinterpret_cast<LeakMeta*>(maps + 3 * words);
  __atomic_fetch_add(&g_leak_bytes, uint64_t{bytes}, __ATOMIC_RELAXED);
  return ls;
}

void set_owner_ids(const kmem_cache_t* cp, const Slab* sp, bool on);

// Diverts sp's frees out of line (kmemleak_meta.h, Annotations), or lets them
// go the fast way again (slab_lock held, or every other CPU stopped). A slab
// being destroyed is never diverted: its last buffers came back, and their
// annotations with them.
void slab_divert(kmem_cache_t* cp, Slab* sp, bool on) {
  if (on) sp->flags |= kSlabDiverted;
  else sp->flags &= ~kSlabDiverted;
  // Relaxed: a free of the annotated buffer is ordered after the annotation
  // by its caller (the free of an object it annotates comes after it), and
  // a free that still sees the other value goes either way correctly: out
  // of line, a buffer of cp is freed as the fast path frees it.
  __atomic_store_n(&sp->check, on ? static_cast<kmem_cache_t*>(nullptr) : cp, __ATOMIC_RELAXED);
  set_owner_ids(cp, sp, !on);
}

}  // namespace

void leak_record_flags(kmem_cache_t* cp, Slab* sp, uint32_t i, uint8_t flags) {
  LeakSlab* ls = sp->leak;
  bool was = ls->meta[i].flags & kLeakKept, now = flags & kLeakKept;
  ls->meta[i].flags = flags;
  if (was == now) return;
  // Relaxed stores (under the lock): leak_free_diverted reads kept without it.
  uint32_t kept = ls->kept + (now ? 1 : -1);
  __atomic_store_n(&ls->kept, kept, __ATOMIC_RELAXED);
  if (now && kept == 1) slab_divert(cp, sp, true);
  if (!now && kept == 0) slab_divert(cp, sp, false);
}

namespace {
// Buffer i's record is cleared (as leak_record_flags).
void leak_record_clear(kmem_cache_t* cp, Slab* sp, uint32_t i) {
  leak_record_flags(cp, sp, i, 0);
  sp->leak->meta[i] = LeakMeta{};
}

// Allocation profiling's references, one per buffer (alloc_tag.cpp,
// References), zeroed. A slab without them (the mode is never, or memory ran
// out) has its buffers counted at no tag.
uint64_t g_prof_refless;  // slabs made without references (memory ran out): their buffers are not counted
// Entries: one per buffer off-slab (indexed from the slab's first buffer);
// on-slab, one per 2^prof_shift bytes of the page (indexed by the
// address's offset in it: kmem_cache.h, prof_shift).
uint32_t prof_tag_entries(const kmem_cache_t* cp, const Slab* sp) {
  return cp->offslab ? sp->chunks : static_cast<uint32_t>(kPageBytes >> cp->prof_shift);
}
uint32_t* prof_tags_alloc(uint32_t chunks) {
  size_t bytes = size_t{chunks} * sizeof(uint32_t);
  auto* t = static_cast<uint32_t*>(internal_alloc(bytes, KM_NOSLEEP));
  if (!t) {
    __atomic_fetch_add(&g_prof_refless, uint64_t{1}, __ATOMIC_RELAXED);
    return nullptr;
  }
  __builtin_memset(t, 0, bytes);
  return t;
}
void prof_tags_free(uint32_t* t, uint32_t chunks) {
  size_t bytes = size_t{chunks} * sizeof(uint32_t);
  internal_free(t, bytes);
}

void leak_slab_free(LeakSlab* ls) {
  size_t bytes = leak_slab_bytes(ls->chunks);
  internal_free(ls, bytes);
  __atomic_fetch_sub(&g_leak_bytes, uint64_t{bytes}, __ATOMIC_RELAXED);
}

// The internal ladder (kmem_cache.h: internal_alloc): powers of two.
constexpr unsigned kInternalMinShift = 6, kInternalMaxShift = 14;  // 64 B .. 16 KiB
kmem_cache_t* g_internal[kInternalMaxShift - kInternalMinShift + 1];

kmem_cache_t* internal_cache(size_t size) {
  unsigned shift = kInternalMinShift;
  while ((size_t{1} << shift) < size && shift < kInternalMaxShift) shift++;
  return (size_t{1} << shift) >= size ? g_internal[shift - kInternalMinShift] : nullptr;
}

// The owner id bytes (heap_index.h) of slab sp's pages: cp's id (on) or
// none. Relaxed: the free that reads one is ordered after this by the
// buffer's way out of the slab layer (a new slab), or by the annotation
// that diverted the slab (kmemleak_meta.h, Annotations). None for a page at
// address 0 (a physical heap from address 0): null must never match an id
// (kmem_fastpath.h, wrong_owner); its buffers take the page index's check.
void set_owner_ids(const kmem_cache_t* cp, const Slab* sp, bool on) {
  if (!owner_has_id(cp->owner_check)) return;
  for (uintptr_t va = sp->mem; va < sp->mem + cp->slab_size; va += kPageBytes) {
    uintptr_t off = va - g_heap_index.base;
    if (off < g_heap_index.id_span && va != 0)
      __atomic_store_n(&g_heap_index.ids[off >> kPageShift], static_cast<uint8_t>(on ? cp->owner_check : 0),
                       __ATOMIC_RELAXED);
  }
}

// Marks (on) or unmarks (off) the heap pages of slab sp's memory in
// the page index. Pages of integer arenas have no descriptor: nothing to do.
// Readers hold no lock: slab_of_heap_address and kmem_whatis (acquire the
// flag, then load owner), and the off-slab owner check of kmem_fastpath.h
// (loads owner plainly and reads the Slab through it: an address
// dependency). Marking stores owner with release (the Slab header
// slab_create wrote before it), then the flag with release (owner before
// it). Clearing needs no order: a reader that loaded the flag before the
// clear may load owner after it whatever the stores' order, so readers
// take g_no_owner as "no slab" (and a Slab being destroyed under a reader
// of an arbitrary address is the reader's race: no answer is right).
void mark_slab_pages(kmem_cache_t* cp, Slab* sp, bool on) {
  if (cp->owner_check == kOwnerNone) return;
  for (uintptr_t va = sp->mem; va < sp->mem + cp->slab_size; va += kPageBytes) {
    Page* p = segkmem_page_of(va);
    if (!p) continue;
    // p->flags is ours to read plainly: nobody else writes a slab page's.
    // Fresh from vmem, no slab and no large allocation may own the page
    // still; going back, it must be this slab's (a range handed out twice,
    // caught where it starts or ends).
    if (__builtin_expect(on ? (p->flags & (kPageSlab | kPageLarge)) || p->owner != g_no_owner : p->owner != sp, 0))
      plat::fatal("kmem: slab 0x%lx of '%s' %s heap page 0x%lx, owned by %p (flags 0x%x)",
                  static_cast<unsigned long>(sp->mem), cp->name, on ? "got" : "gives back", static_cast<unsigned long>(va),
                  p->owner, unsigned{p->flags});
    if (on) {
      __atomic_store_n(&p->owner, static_cast<void*>(sp), __ATOMIC_RELEASE);
      __atomic_store_n(&p->flags, static_cast<uint16_t>(p->flags | kPageSlab), __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(&p->flags, static_cast<uint16_t>(p->flags & ~kPageSlab), __ATOMIC_RELAXED);
      __atomic_store_n(&p->owner, static_cast<void*>(const_cast<void**>(g_no_owner)), __ATOMIC_RELAXED);
    }
  }
  set_owner_ids(cp, sp, on && !(sp->flags & kSlabDiverted));
}

// Creates a slab (no lock held: it calls vmem and the header cache).
// Returns it ready to insert, all buffers free.
Slab* slab_create(kmem_cache_t* cp, int kmflag) {
  int vmflag = (kmflag & KM_VMFLAGS) | VM_NOSLEEP;  // KM_SLEEP waits in the caller
  size_t align = cp->offslab ? cp->align : cp->slab_size;
  void* mem = vmem_xalloc(cp->arena, cp->slab_size, align, 0, 0, nullptr, nullptr, vmflag);
  if (!mem) return nullptr;
  Slab* sp;
  if (cp->offslab) {
    sp = static_cast<Slab*>(internal_alloc(cp->header_bytes, kmflag));
    if (!sp) {
      vmem_xfree(cp->arena, mem, cp->slab_size);
      return nullptr;
    }
  } else {
    sp = onslab_header(reinterpret_cast<uintptr_t>(mem));
  }
  uint32_t color;
  {
    Guard<> g(cp->slab_lock);
    color = cp->color;
    cp->color = cp->color + cp->align > cp->color_max ? 0 : cp->color + static_cast<uint32_t>(cp->align);
  }
  sp->check = cp;
  sp->cache = cp;
  sp->next = sp->prev = nullptr;
  sp->mem = reinterpret_cast<uintptr_t>(mem);
  sp->base = sp->mem + color + cp->lead;
  sp->chunks = cp->objs_per_slab;
  sp->refcnt = 0;
  sp->flags = 0;
  size_t words = freemap_words(sp->chunks);
  for (size_t w = 0; w < words; w++) sp->freemap[w] = ~uint64_t{0};
  if (sp->chunks % 64) sp->freemap[words - 1] = (uint64_t{1} << (sp->chunks % 64)) - 1;
  sp->free_head = 0;
  if (cp->offslab) {
    sp->ents = reinterpret_cast<HashEnt*>(sp + 1);
    for (uint32_t i = 0; i < sp->chunks; i++) {
      sp->ents[i].addr = sp->base + i * cp->chunk;
      sp->ents[i].slab = sp;
      sp->ents[i].link = i + 1 < sp->chunks ? i + 1 : kNone;
    }
  } else {
    sp->ents = nullptr;
    for (uint32_t i = 0; i < sp->chunks; i++) link_store(cp, sp->base + i * cp->chunk, i + 1 < sp->chunks ? i + 1 : kNone);
  }
  if (cp->debug) debug_slab_init(cp, sp);
  sp->leak = nullptr;
  if (cp->tracked && __atomic_load_n(&g_leak_records, __ATOMIC_RELAXED)) {
    sp->leak = leak_slab_alloc(sp->chunks);
    // Scanned as a root, its buffers untracked, until a scan's retry
    // (leak_records_fill) finds memory for its records.
    if (!sp->leak) __atomic_store_n(&g_leak_records_short, 1u, __ATOMIC_RELAXED);
  }
  sp->tags = cp->profiled && prof_records() ? prof_tags_alloc(prof_tag_entries(cp, sp)) : nullptr;
  mark_slab_pages(cp, sp, true);
  return sp;
}

// Gives a wholly free slab's memory back (no lock held).
void slab_destroy(kmem_cache_t* cp, Slab* sp) {
  void* mem = reinterpret_cast<void*>(sp->mem);
  // Only a wholly free slab goes (a live buffer would be handed out again).
  if (__builtin_expect(sp->refcnt != 0, 0))
    plat::fatal("kmem: slab 0x%lx of '%s' destroyed with %u buffers in use", static_cast<unsigned long>(sp->mem),
                cp->name, static_cast<unsigned>(sp->refcnt));
  // An on-slab header goes back to vmem inside its page. A stale pointer
  // into the slab, freed after this, reads the header: its check word on
  // every magazine free (kmem_fastpath.h, wrong_owner), then its tags on
  // the profiled free, and kmemleak's annotations its leak. The check word
  // would still name cp, which is also the next cache created in cp's
  // structure (kmem.cpp, cache_alloc_struct): null, it names no cache,
  // and the free is refused and reported (free_bad_owner: the page index
  // names no slab either). The other words are cleared too, the arrays'
  // before the arrays are freed. Relaxed: only a pointer racing its slab's
  // destruction reads them meanwhile, and no answer is right for it.
  LeakSlab* leak = sp->leak;
  uint32_t* tags = sp->tags;
  uint32_t tag_entries = prof_tag_entries(cp, sp);
  __atomic_store_n(&sp->check, static_cast<kmem_cache_t*>(nullptr), __ATOMIC_RELAXED);
  if (!cp->offslab) {
    __atomic_store_n(&sp->cache, static_cast<kmem_cache_t*>(nullptr), __ATOMIC_RELAXED);
    __atomic_store_n(&sp->tags, static_cast<uint32_t*>(nullptr), __ATOMIC_RELAXED);
    __atomic_store_n(&sp->leak, static_cast<LeakSlab*>(nullptr), __ATOMIC_RELAXED);
  }
  mark_slab_pages(cp, sp, false);
  if (leak) leak_slab_free(leak);
  if (tags) prof_tags_free(tags, tag_entries);
  if (cp->offslab) internal_free(sp, cp->header_bytes);
  vmem_xfree(cp->arena, mem, cp->slab_size);
}

// Links a new slab's hash entries into the cache's hash (slab_lock held).
void hash_insert_slab(kmem_cache_t* cp, Slab* sp) {
  for (uint32_t i = 0; i < sp->chunks; i++) {
    HashEnt* e = &sp->ents[i];
    size_t j = hash_index(cp, e->addr);
    e->next = cp->hash[j];
    cp->hash[j] = e;
  }
  cp->hash_count += sp->chunks;
}

void hash_remove_slab(kmem_cache_t* cp, Slab* sp) {
  for (uint32_t i = 0; i < sp->chunks; i++) {
    HashEnt* e = &sp->ents[i];
    HashEnt** pp = &cp->hash[hash_index(cp, e->addr)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
  }
  cp->hash_count -= sp->chunks;
}

// sp's free list built from its bitmap; returns its head (slab_lock held).
inline uint32_t freelist_from_bitmap(kmem_cache_t* cp, Slab* sp) {
  uint32_t head = kNone;
  for (uint32_t j = sp->chunks; j-- > 0;)
    if (slab_buffer_free(sp, j)) {
      link_store(cp, sp->base + uintptr_t{j} * cp->chunk, head);
      head = j;
    }
  return head;
}

}  // namespace

void slab_freelist_rebuild(kmem_cache_t* cp, Slab* sp) {
  assert_held(cp->slab_lock);
  sp->free_head = freelist_from_bitmap(cp, sp);
}

namespace {
// A link that names no free buffer of sp (8.): rebuilds sp's free list
// from its bitmap and returns its head; f gets the report (slab_lock held).
__attribute__((noinline, cold)) uint32_t freelist_corrupt(kmem_cache_t* cp, Slab* sp, uintptr_t buf, uint32_t bad,
                                                         Finding& f) {
  f.kind = "free list corruption (a free buffer's link names no free buffer of its slab)";
  f.addr = buf;
  f.detail = bad;
  f.d->buffer = reinterpret_cast<uintptr_t>(sp);  // the slab, in the report
  f.d->size = cp->bufsize;
  f.d->offset = cp->link_off;
  return freelist_from_bitmap(cp, sp);
}

// Takes one buffer out of sp (slab_lock held). A bad free-list link is
// reported through f (the caller reports it once the lock is dropped).
void* slab_take(kmem_cache_t* cp, Slab* sp, Finding& f) {
  assert_held(cp->slab_lock);
  uint32_t i = sp->free_head;
  MM_ASSERT(i != kNone && slab_buffer_free(sp, i));
  uintptr_t buf = sp->base + i * cp->chunk;
  sp->freemap[i / 64] &= ~(uint64_t{1} << (i % 64));
  uint32_t next;
  if (cp->offslab) {
    next = sp->ents[i].link;
  } else {
    next = link_load(cp, buf);
    if (__builtin_expect(next != kNone && (next >= sp->chunks || !slab_buffer_free(sp, next)), 0))
      next = freelist_corrupt(cp, sp, buf, next, f);
  }
  sp->free_head = next;
  sp->refcnt++;
  cp->buf_slab_inuse++;
  cp->slab_allocs++;
  if (sp->refcnt == 1) {
    list_remove(cp->empty, sp);
    list_insert(sp->refcnt == sp->chunks ? cp->full : cp->partial, sp);
  } else if (sp->refcnt == sp->chunks) {
    list_remove(cp->partial, sp);
    list_insert(cp->full, sp);
  }
  return reinterpret_cast<void*>(buf);
}

// Returns an unconstructed buffer to its slab (g holds slab_lock). Returns a
// slab that became empty and should be destroyed (the caller does it
// without the lock), or nullptr. Bad buffers are reported (with the lock
// dropped) and ignored.
Slab* slab_put(kmem_cache_t* cp, void* obj, uintptr_t caller, Guard<>& g) {
  auto buf = reinterpret_cast<uintptr_t>(obj);
  uint32_t i;
  Slab* sp = slab_lookup(cp, buf, i);
  if (!sp || slab_buffer_free(sp, i)) {
    g.unlock();
    report(sp ? "double free" : "free of a buffer this cache never allocated", cp->name, obj, caller);
    g.lock();
    return nullptr;
  }
  sp->freemap[i / 64] |= uint64_t{1} << (i % 64);
  if (sp->leak) leak_record_clear(cp, sp, i);  // no stale stamp or annotation for the next owner
  if (cp->offslab) sp->ents[i].link = sp->free_head;
  else link_store(cp, buf, sp->free_head);
  sp->free_head = i;
  cp->buf_slab_inuse--;
  cp->slab_frees++;
  if (sp->refcnt-- == sp->chunks) {
    list_remove(cp->full, sp);
    if (sp->refcnt) list_insert(cp->partial, sp);
  } else if (sp->refcnt == 0) {
    list_remove(cp->partial, sp);
  }
  if (sp->refcnt == 0) {
    // Keep one empty slab to absorb alloc/free churn at the slab boundary,
    // and any the consolidator is emptying; destroy the rest at once.
    if (cp->empty.count == 0 || (sp->flags & kSlabVictim)) {
      list_insert(cp->empty, sp);
      return nullptr;
    }
    if (cp->offslab) hash_remove_slab(cp, sp);
    cp->buf_total -= sp->chunks;
    cp->slab_destroys++;
    return sp;
  }
  return nullptr;
}

}  // namespace

void internal_init() {
  for (unsigned shift = kInternalMinShift; shift <= kInternalMaxShift; shift++) {
    char name[kNameLen];
    cache_size_name(name, "kmem_internal_", uint32_t{1} << shift);
    g_internal[shift - kInternalMinShift] =
        cache_create(name, size_t{1} << shift, 64, nullptr, nullptr, nullptr, nullptr, nullptr,
                     KMC_NOMAGAZINE | KMC_NOTRACK);
  }
}

void* internal_alloc(size_t size, int kmflag) {
  if (kmem_cache_t* ic = internal_cache(size)) return slab_alloc(ic, kmflag | KM_NOSLEEP);
  void* p = segkmem_alloc_large(size, kmflag | KM_NOSLEEP, 0);
  if (p) segkmem_large_set_untracked(p);
  return p;
}

void internal_free(void* p, size_t size) {
  if (kmem_cache_t* ic = internal_cache(size)) slab_free(ic, p, true, 0);
  else segkmem_free_large(p, size, 0);
}

// Chooses slab size and layout.
void cache_layout(kmem_cache_t* cp, size_t quantum) {
  const size_t chunk = cp->chunk;
  const size_t lead = cp->lead;  // before the first buffer (a debugged cache's)
  bool may_touch = !(cp->flags & (KMC_NOTOUCH | KMC_QCACHE));
  if (may_touch && chunk <= kPageBytes / 8 && quantum == kPageBytes) {
    cp->offslab = false;
    cp->slab_size = kPageBytes;
    cp->header_bytes = sizeof(Slab);
    uint32_t objs = static_cast<uint32_t>((kOnSlabHeader - lead) / chunk);
    cp->objs_per_slab = objs < kMaxChunks ? objs : kMaxChunks;
  } else {
    cp->offslab = true;
    size_t q = quantum ? quantum : kPageBytes;
    size_t best = 0;
    // Smallest slab (in quanta) wasting at most 1/8, at least 8 buffers
    // for quantum caches (vmem asks for n * quantum at a time).
    for (size_t n = 1; n <= 64; n++) {
      size_t sz = n * q;
      if (sz < lead + chunk) continue;
      size_t objs = (sz - lead) / chunk;
      if (objs > kMaxChunks) break;
      if ((cp->flags & KMC_QCACHE) && objs < 8) continue;
      best = sz;
      if ((sz - lead - objs * chunk) * 8 <= sz) break;
    }
    if (!best) best = round_up(lead + chunk, q);
    cp->slab_size = best;
    uint32_t objs = static_cast<uint32_t>((best - lead) / chunk);
    cp->objs_per_slab = objs < kMaxChunks ? objs : kMaxChunks;
    cp->header_bytes = sizeof(Slab) + cp->objs_per_slab * sizeof(HashEnt);
  }
  MM_ASSERT(cp->objs_per_slab >= 1 && cp->slab_size >= lead + cp->objs_per_slab * chunk);
  size_t slack = cp->slab_size - (cp->offslab ? 0 : cp->header_bytes) - lead - cp->objs_per_slab * chunk;
  cp->color_max = static_cast<uint32_t>(slack / cp->align * cp->align);
  cp->color = 0;
}

// Finds the slab and index of buf; nullptr if buf is not a buffer of this
// cache (slab_lock held).
Slab* slab_lookup(kmem_cache_t* cp, uintptr_t buf, uint32_t& index) {
  assert_held(cp->slab_lock);
  Slab* sp;
  if (cp->offslab) {
    HashEnt* e = cp->hash ? cp->hash[hash_index(cp, buf)] : nullptr;
    while (e && e->addr != buf) e = e->next;
    if (!e) return nullptr;
    sp = e->slab;
  } else {
    sp = onslab_header(buf);
    if (sp->cache != cp) return nullptr;
  }
  if (buf < sp->base) return nullptr;
  uintptr_t off = buf - sp->base, i = div_chunk(cp, off);
  if (off - i * static_cast<uintptr_t>(cp->chunk) || i >= sp->chunks) return nullptr;  // inside a buffer, past the slab
  index = static_cast<uint32_t>(i);
  return sp;
}

// Allocates one constructed buffer from the slab layer.
void* slab_alloc(kmem_cache_t* cp, int kmflag, size_t requested, uintptr_t caller) {
  // A debugged cache's audit backtrace, taken before slab_lock (the stack
  // depot has a lock of its own, and slab_lock is a leaf).
  uint32_t stack = cp->debug ? debug_stack(cp, caller) : 0;
  // requested 0: the caller's size is not known (a kmem_alloc class taken
  // untraced): the buffer's size, and kmem_free's size is not checked.
  for (;;) {
    void* buf = nullptr;
    MemDetail d{};
    Finding f{nullptr, 0, 0, &d};   // the free list
    Finding fd{nullptr, 0, 0, &d};  // the debug checks of the buffer
    {
      Guard<> g(cp->slab_lock);
      // Never from a victim (kmem_consolidate.cpp, Victims): an emptied
      // victim waits on the empty list too.
      Slab* sp = skip_victims(cp->partial.head);
      if (!sp) sp = skip_victims(cp->empty.head);
      if (sp) {
        buf = slab_take(cp, sp, f);
        if (cp->debug && !f.kind)
          debug_take(cp, sp, static_cast<uint32_t>(div_chunk(cp, reinterpret_cast<uintptr_t>(buf) - sp->base)),
                     requested, stack, fd);
      }
    }
    if (!buf) {
      Slab* sp = slab_create(cp, kmflag);
      if (sp) {
        {
          Guard<> g(cp->slab_lock);
          if (cp->offslab) hash_insert_slab(cp, sp);
          list_insert(cp->empty, sp);
          cp->buf_total += sp->chunks;
          cp->slab_creates++;
          buf = slab_take(cp, sp, f);
          if (cp->debug && !f.kind) debug_take(cp, sp, 0, requested, stack, fd);
        }
        if (cp->offslab) hash_maybe_grow(cp);
      }
    }
    if (__builtin_expect(f.kind != nullptr, 0)) {
      // The buffer whose link was bad was taken unchecked: it goes back (the
      // free list is whole again) and the allocation starts over.
      report_finding(cp, f, caller);
      Slab* dead;
      {
        Guard<> g(cp->slab_lock);
        dead = slab_put(cp, buf, 0, g);
      }
      if (dead) slab_destroy(cp, dead);
      continue;
    }
    if (__builtin_expect(fd.kind != nullptr, 0)) report_finding(cp, fd, caller);
    if (!buf) {
      if (!(kmflag & KM_NOSLEEP)) {
        // KM_SLEEP: never fail. Reclaim what this CPU can, then wait.
        reap_local();
        plat::wait_for_memory();
        continue;
      }
      Guard<> g(cp->slab_lock);
      cp->alloc_fail++;
      return nullptr;
    }
    if (cp->ctor && cp->ctor(buf, cp->priv, kmflag) != 0) {
      Slab* dead;
      {
        Guard<> g(cp->slab_lock);
        cp->ctor_fail++;
        if (cp->debug) debug_untake(cp, reinterpret_cast<uintptr_t>(buf));
        dead = slab_put(cp, buf, 0, g);
      }
      if (dead) slab_destroy(cp, dead);
      if (!(kmflag & KM_NOSLEEP)) {
        plat::wait_for_memory();
        continue;
      }
      return nullptr;
    }
    return buf;
  }
}

namespace {
// slab_free of a debugged cache (kmem_debug.cpp): checked under slab_lock,
// destructed without it, then poisoned, audited and put back under it.
void slab_free_debug(kmem_cache_t* cp, void* buf, bool constructed, uintptr_t caller, size_t size) {
  uint32_t stack = debug_stack(cp, caller);
  MemDetail d{};
  Finding f{nullptr, 0, 0, &d};
  bool ok;
  {
    Guard<> g(cp->slab_lock);
    uint32_t i;
    Slab* sp = slab_lookup(cp, reinterpret_cast<uintptr_t>(buf), i);
    ok = sp && debug_free_check(cp, sp, i, size, f);
    if (!sp) f.kind = nullptr;
  }
  if (f.kind) report_finding(cp, f, caller);
  else if (!ok) debug_report_bad_pointer(cp, buf, caller);
  if (!ok) return;
  if (constructed && cp->dtor) cp->dtor(buf, cp->priv);
  Slab* dead;
  {
    Guard<> g(cp->slab_lock);
    debug_free_commit(cp, reinterpret_cast<uintptr_t>(buf), stack);
    dead = slab_put(cp, buf, caller, g);
  }
  if (dead) slab_destroy(cp, dead);
}
}  // namespace

// Destructs (if constructed) and returns a buffer to the slab layer.
void slab_free(kmem_cache_t* cp, void* buf, bool constructed, uintptr_t caller, size_t size) {
  if (cp->debug) return slab_free_debug(cp, buf, constructed, caller, size);
  if (constructed && cp->dtor) {
    // Only destruct a buffer the slab layer will accept: check first.
    bool ok;
    {
      Guard<> g(cp->slab_lock);
      uint32_t i;
      Slab* sp = slab_lookup(cp, reinterpret_cast<uintptr_t>(buf), i);
      ok = sp && !slab_buffer_free(sp, i);
    }
    if (ok) cp->dtor(buf, cp->priv);
  }
  Slab* dead;
  {
    Guard<> g(cp->slab_lock);
    dead = slab_put(cp, buf, caller, g);
  }
  if (dead) slab_destroy(cp, dead);
}

// Destroys the kept empty slab(s); returns how many.
unsigned slab_reap(kmem_cache_t* cp) {
  unsigned n = 0;
  for (;;) {
    Slab* sp;
    {
      Guard<> g(cp->slab_lock);
      sp = skip_victims(cp->empty.head);  // the consolidator is on them
      if (sp) {
        list_remove(cp->empty, sp);
        if (cp->offslab) hash_remove_slab(cp, sp);
        cp->buf_total -= sp->chunks;
        cp->slab_destroys++;
      }
    }
    if (!sp) break;
    slab_destroy(cp, sp);
    n++;
  }
  return n;
}

// Destroying a slab frees its off-slab header into a size cache, which may
// then hold an empty slab of its own: repeat until a pass frees nothing.
void slab_reap_all() {
  for (unsigned freed = 1; freed;) {
    freed = 0;
    for_each_cache([&](kmem_cache_t* c) { freed += slab_reap(c); });
  }
}

bool g_leak_records;
uint32_t g_leak_records_short;

namespace {
// Records for every slab of cp that has none, `want` of them made at a time
// outside the lock (the internal ladder is another cache) and handed out
// under it; slabs come and go meanwhile, and a slab made since the flag
// went up has its own (or failed to get them: counted again). Done when
// none lacks them; false if memory ran out first.
bool leak_records_attach(kmem_cache_t* cp, uint64_t want) {
  for (;;) {
    if (!want) return true;
    LeakSlab* spare = nullptr;
    uint64_t made = 0;
    for (; made < want; made++) {
      // Records fit the largest slab of this cache.
      LeakSlab* ls = leak_slab_alloc(cp->objs_per_slab);
      if (!ls) break;
      ls->next = spare;
      spare = ls;
    }
    uint64_t missing = 0;
    {
      Guard<> g(cp->slab_lock);
      SlabList* lists[] = {&cp->partial, &cp->full, &cp->empty};
      for (SlabList* l : lists)
        for (Slab* sp = l->head; sp; sp = sp->next) {
          if (sp->leak) continue;
          if (!spare) {
            missing++;
            continue;
          }
          LeakSlab* ls = spare;
          spare = ls->next;
          ls->next = nullptr;
          // Release: the zeroed records before the pointer, for a stamp
          // that loads it (relaxed, then an address dependency).
          __atomic_store_n(&sp->leak, ls, __ATOMIC_RELEASE);
        }
    }
    while (spare) {
      LeakSlab* next = spare->next;
      leak_slab_free(spare);
      spare = next;
    }
    if (made < want) return missing == 0;  // memory ran out (what it gave may have sufficed)
    want = missing;
  }
}
}  // namespace

bool leak_records_fill(kmem_cache_t* cp) {
  if (!cp->tracked) return true;
  uint64_t missing = 0;
  {
    Guard<> g(cp->slab_lock);
    SlabList* lists[] = {&cp->partial, &cp->full, &cp->empty};
    for (SlabList* l : lists)
      for (Slab* sp = l->head; sp; sp = sp->next) missing += sp->leak ? 0 : 1;
  }
  return leak_records_attach(cp, missing);
}

void leak_records_forget_stamps(kmem_cache_t* cp) {
  if (!cp->tracked) return;
  SlabList* lists[] = {&cp->partial, &cp->full, &cp->empty};
  for (SlabList* l : lists)
    for (Slab* sp = l->head; sp; sp = sp->next) {
      LeakSlab* ls = sp->leak;
      if (!ls) continue;
      for (uint32_t i = 0; i < ls->chunks; i++) {
        uint8_t kept = ls->meta[i].flags & kLeakKept;
        ls->meta[i] = LeakMeta{};
        ls->meta[i].flags = kept;
      }
    }
}

LeakMeta* leak_meta_of(kmem_cache_t* cp, const void* buf) {
  if (!cp->tracked) return nullptr;
  auto addr = reinterpret_cast<uintptr_t>(buf);
  Slab* sp = cp->offslab ? slab_of_heap_address(addr) : onslab_header(addr);
  LeakSlab* ls = sp ? __atomic_load_n(&sp->leak, __ATOMIC_RELAXED) : nullptr;
  if (!ls) return nullptr;
  return &ls->meta[div_chunk(cp, addr - sp->base)];
}

namespace {
// The index of buffer buf in sp, if buf is a buffer's start; else kNone.
uint32_t buffer_index(const kmem_cache_t* cp, const Slab* sp, uintptr_t buf) {
  if (buf < sp->base) return kNone;
  uintptr_t off = buf - sp->base, i = div_chunk(cp, off);
  return i < sp->chunks && i * static_cast<uintptr_t>(cp->chunk) == off ? static_cast<uint32_t>(i) : kNone;
}
}  // namespace

LeakAnnotation leak_annotate(kmem_cache_t* cp, Slab* sp, uintptr_t buf, uint8_t set, uint8_t clear) {
  for (;;) {
    {
      Guard<> g(cp->slab_lock);
      uint32_t i = buffer_index(cp, sp, buf);
      if (i == kNone || slab_buffer_free(sp, i)) return LeakAnnotation::kNoObject;
      if (LeakSlab* ls = sp->leak) {
        LeakMeta& m = ls->meta[i];
        leak_record_flags(cp, sp, i, static_cast<uint8_t>((m.flags | set) & ~clear));
        if (clear & kLeakCandidate) m.crc = 0;
        return LeakAnnotation::kDone;
      }
    }
    // No records yet (kmemleak off, or memory was short): made now. The
    // buffer is the caller's, so its slab stays while we are unlocked.
    LeakSlab* ls = leak_slab_alloc(cp->objs_per_slab);
    if (!ls) return LeakAnnotation::kNoMemory;
    bool used = false;
    {
      Guard<> g(cp->slab_lock);
      if (!sp->leak) {
        __atomic_store_n(&sp->leak, ls, __ATOMIC_RELEASE);  // zeroed before (leak_records_attach)
        used = true;
      }
    }
    if (!used) leak_slab_free(ls);
  }
}

uint8_t leak_free_diverted(kmem_cache_t* cp, Slab* sp, uintptr_t buf) {
  // Relaxed: records stay while the slab does (it holds buf), and an
  // annotation of buf came before this free (its caller's order), so
  // kept is seen non-zero when buf's record keeps any; for another buffer
  // a stale count only costs the lock or skips a record that keeps nothing.
  LeakSlab* ls = __atomic_load_n(&sp->leak, __ATOMIC_RELAXED);
  if (!ls || !__atomic_load_n(&ls->kept, __ATOMIC_RELAXED)) return 0;
  Guard<> g(cp->slab_lock);
  uint32_t i = buffer_index(cp, sp, buf);
  if (i == kNone || slab_buffer_free(sp, i)) return 0;  // the slab layer reports it
  uint8_t was = ls->meta[i].flags;
  if (was & kLeakKept) leak_record_clear(cp, sp, i);
  return was;
}

void leak_move(kmem_cache_t* cp, uintptr_t from, uintptr_t to) {
  // Both buffers are the consolidator's (allocated): their slabs stay.
  Slab* fs = cp->offslab ? slab_of_heap_address(from) : onslab_header(from);
  Slab* ts = cp->offslab ? slab_of_heap_address(to) : onslab_header(to);
  if (!fs || !ts) return;
  LeakMeta m{};
  {
    Guard<> g(cp->slab_lock);
    uint32_t fi = buffer_index(cp, fs, from);
    if (!fs->leak || fi == kNone) return;
    m = fs->leak->meta[fi];
    if (!ts->leak) {
      if (!(m.flags & kLeakKept)) return;
    } else {
      uint32_t ti = buffer_index(cp, ts, to);
      if (ti == kNone) return;
      leak_record_clear(cp, ts, ti);
      uint8_t flags = m.flags;
      m.flags = 0;
      ts->leak->meta[ti] = m;
      leak_record_flags(cp, ts, ti, flags);
      return;
    }
  }
  // The destination's slab has no records and the object keeps an
  // annotation: the annotation goes with it.
  if (leak_annotate(cp, ts, to, m.flags & kLeakKept, 0) != LeakAnnotation::kDone)
    plat::log("kmemleak: no memory for the records of a moved object's slab: its annotation is lost");
}

namespace {
// Buffer obj's tag reference, if obj is a buffer of a slab of cp that has
// references; else null. kExact: also check that obj is a buffer's start
// (a free's pointer; an allocation's is one).
template <bool kExact>
__attribute__((always_inline)) inline uint32_t* prof_slot(const kmem_cache_t* cp, const void* obj) {
  if (!cp->profiled) return nullptr;
  auto addr = reinterpret_cast<uintptr_t>(obj);
  Slab* sp = __builtin_expect(cp->offslab, 0) ? slab_of_heap_address(addr) : onslab_header(addr);
  if (!sp || !sp->tags || (kExact && (sp->cache != cp || addr < sp->base))) return nullptr;
  uintptr_t off = addr - sp->base;
  if (kExact || cp->offslab) {
    // Exact for every buffer start: off * (2^32 / chunk + e) / 2^32 with
    // 0 <= e < 1 is the index plus off * e / 2^32 < 1 (off < 2^32).
    auto i = static_cast<uint32_t>((uint64_t{off} * cp->prof_recip) >> 32);
    if (kExact && (i >= sp->chunks || i * cp->chunk != off)) return nullptr;  // past the slab, inside a buffer
    if (cp->offslab) return &sp->tags[i];
  }
  return &sp->tags[(addr & (kPageBytes - 1)) >> cp->prof_shift];
}
}  // namespace
uint64_t prof_refless_slabs() { return __atomic_load_n(&g_prof_refless, __ATOMIC_RELAXED); }

void* prof_stamp_irq(const kmem_cache_t* cp, void* obj, const AllocTag* tag) {
  auto irq = plat::irq_save();
  if (uint32_t* slot = prof_slot<false>(cp, obj)) *slot = prof_charge_masked(tag, cp->chunk);
  plat::irq_restore(irq);
  return obj;
}

void prof_unstamp(const kmem_cache_t* cp, void* obj, uintptr_t caller) {
  auto irq = plat::irq_save();
  if (uint32_t* slot = prof_slot<true>(cp, obj)) {
    uint32_t ref = *slot;
    *slot = 0;
    prof_uncharge_masked(ref, cp->chunk, cp->name, obj, caller);
  }
  plat::irq_restore(irq);
}

void prof_move(const kmem_cache_t* cp, void* from, void* to) {
  uint32_t* f = prof_slot<true>(cp, from);
  if (!f) return;
  if (uint32_t* t = prof_slot<true>(cp, to)) {
    *t = *f;
    *f = 0;
  } else {
    prof_unstamp(cp, from, 0);
  }
}

uint64_t leak_records_bytes() { return __atomic_load_n(&g_leak_bytes, __ATOMIC_RELAXED); }

// The flag's acquire pairs with mark_slab_pages' release: owner and the
// Slab header are visible. g_no_owner (or null, from segkmem's forget_page)
// with the flag set: the slab was destroyed under us.
Slab* slab_of_heap_address(uintptr_t addr) {
  Page* p = segkmem_page_of(addr);
  if (!p || !(__atomic_load_n(&p->flags, __ATOMIC_ACQUIRE) & kPageSlab)) return nullptr;
  void* owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
  return owner == g_no_owner ? nullptr : static_cast<Slab*>(owner);
}

}  // namespace mm
