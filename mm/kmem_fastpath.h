// SPDX-License-Identifier: Apache-2.0
// kmem's magazine fast paths, inlined into the public entry points of
// kmem.cpp (kmem_cache_alloc/free) and kmem_alloc.cpp (kmem_alloc/free).
//
// 1. Allocation pops the CPU's loaded magazine; free pushes onto it. Both
//    take no lock; untraced, where the platform has restartable sections
//    (plat::kRestartable), each is one with interrupts enabled (6),
//    otherwise they run with interrupts masked (the per-CPU state is
//    touched only by its CPU and its interrupts). Anything else (an empty
//    or full magazine, a missing one) is a noinline slow path in
//    kmem_magazine.cpp.
// 2. The free checks, before it touches the magazine, that the buffer
//    belongs to the cache (OwnerCheck): for on-slab caches the slab header
//    at the end of the buffer's page names its cache (a mask and a load);
//    for off-slab caches of the heap the owner id of the buffer's page
//    (heap_index.h) is the cache's, or else the page index names the slab,
//    which names the cache (caches of integer arenas are not checked). A wrong
//    cache, a wrong kmem_free size and a pointer into no slab of this cache
//    are refused there, with a report. A free of the buffer on top of the
//    loaded magazine (an immediate double free) is refused too (the
//    magazine's slot[0] sentinel makes it one compare).
// 3. Nothing else is checked here: a double free of a buffer deeper in a
//    magazine, and an interior pointer into a buffer of the right cache,
//    are caught when the buffer reaches the slab layer (kmem.cpp,
//    "Allocated or free?", says why, with the cost).
// 4. The hooked copies (kTraced: taken while an allocator hook other than
//    profiling's is on, mm/hooks.h; profiling alone: 7) record a kmemtrace event, if tracing is on, inside the
//    masked region on the magazine path (trace/record.h: no second masking,
//    no call); allocation profiling's stamp and kmemleak's are written
//    afterwards, and profiling's reference is taken off a buffer before its
//    free, each out of line (alloc_stamp, free_unstamp) so that the hooked
//    copies stay frameless.
// 5. Ordering: none here. The CpuCache is this CPU's (kmem_cache.h says who
//    else reads it and why that needs no order); the owner checks read
//    words other CPUs wrote, ordered as owner_by_index says (on-slab: the
//    header slab_create wrote before the slab's first buffer left the slab
//    layer under slab_lock, so before any legitimate free of it).
// 6. Restartable fast paths. The pop and push as restartable sections
//    (kmem.cpp, Interrupts and the per-CPU layer), on CpuCache's top and
//    limit (kmem_cache.h): the pop loads top and the round it points at,
//    leaves for the slow path when that is the null sentinel, and commits
//    top - 1; the push loads top and limit, leaves when top is at limit
//    (full) or when obj is on top (the double free check), writes obj into
//    the slot above the top (nothing reads it until the commit; rewound, it
//    is a dead slot above the top), and commits top + 1. The push's count
//    of frees is its own section after it (load, add, the store as
//    commit): an interrupt between the push's commit and the count sees
//    the count one behind, never loses one; the pop counts nothing
//    (allocations are derived: kmem_cache.h, CpuCache::extra). Everything is
//    loaded inside the section, so a handler that swapped, flushed or
//    refilled the magazines meanwhile is seen by the rerun. The functions
//    that inline them carry MM_RESTARTABLE_TEXT (.text.rseq: where the
//    interrupt entry looks; the kernel checks at boot that every section
//    lies there). The hooked copies use them too while kmemtrace does not
//    record; while it does, they mask (its record in its ring is no single
//    store, and it must be in the ring before the buffer can be handed out
//    again).
// 7. Profiled fast paths. cache_alloc_prof and cache_free_prof: while
//    allocation profiling is the only feature with the hooks on
//    (alloc_tag_internal.h, alloc_hooks_beside_prof: one load of a word
//    the hooks switch keeps), the tagged entry points and the hooked frees
//    of kmem_cache and kmem_alloc run the magazine pop and push above,
//    and around them the buffer's reference (a store to, or a load and a
//    clear of, its slab's entry: kmem_cache.h, prof_shift) and one add to
//    its tag's counter on this CPU (a section of its own: load, add, the
//    store as commit; masked on 32-bit ARM, where the counter is two
//    words). The counters' base is per CPU in the cache (CpuCache::prof),
//    0 where the fast path may not go: then the hooked copies' stamps run,
//    as for off-slab caches. Unlike those stamps, the fast free does not
//    check that the pointer is a buffer's start, as the magazine path does
//    not (3): an interior pointer takes the reference of the buffer it
//    points into (or of the next), before the slab layer reports it.
// 8. kmemtrace's fast paths. The top of the traced cache_alloc and
//    cache_free, while kmemtrace is the only feature with the hooks on and
//    the arch has the restartable ring write (trace/record.h, Restartable).
//    The three-way static branches of the entry points and of the macros'
//    call sites branch straight to them then (mm/hook_mode.h; set by
//    mm/hooks.cpp), and the hooked copies also pick them by the words of 7
//    (alloc_trace_only, free_trace_only) for a call that meets a switch while
//    it changes. They run the magazine pop and push above, untouched, and
//    record the event in a section of its own: after the pop (the buffer is
//    ours: nothing another CPU or an interrupt does can involve it before we
//    return it), before the push (once pushed, an interrupt could allocate it
//    and record that first). So a free refused by the push (the buffer on top
//    of the magazine: freed twice in a row) has been recorded, as the masked
//    path (4) records it, and one refused by the slab layer. A miss goes to
//    the traced slow path, which records after the fact (allocation) or is
//    reached after the record (free: free_slow_at records nothing).
#pragma once
#include <cstddef>
#include <mm/failslab.h>
#include <trace/record.h>
#include "heap_index.h"
#include "kmem_cache.h"
#include "kmemtrace_hooks.h"

namespace mm {

// Cold paths, out of line. The untraced entry points tail-call them, so
// their own return address is the entry point's caller: caller 0 means
// "take your own".
// noinline: inlined, their caller_of_api() would give the entry point a
// stack frame (it reads the link register) on its fast path too.
// free_bad_owner: the owner check said no (wrong_owner). For an off-slab
// cache of the heap it was the owner ids' answer, which the page index
// decides: cp's buffer after all (a cache with no id, a page past the
// ids), it is freed as the magazine path frees it, recorded first if
// kmemtrace records; anything else is reported. The untraced paths call
// free_bad_owner_untraced, which records nothing: they run while kmemtrace
// is off, or after free_trace_full has recorded the free.
[[gnu::noinline, gnu::cold]] void free_bad_owner(kmem_cache_t* cp, void* obj, uintptr_t caller);
[[gnu::noinline, gnu::cold]] void free_bad_owner_untraced(kmem_cache_t* cp, void* obj, uintptr_t caller);
// The report alone (a free the slab layer found in no buffer of cp).
[[gnu::noinline, gnu::cold]] void report_wrong_owner(kmem_cache_t* cp, void* obj, uintptr_t caller);
[[gnu::noinline, gnu::cold]] void free_twice(kmem_cache_t* cp, void* obj, uintptr_t caller);
[[gnu::noinline]] void free_slow_entry(kmem_cache_t* cp, void* obj, uintptr_t caller);
// The same two for the cache whose CpuCache of this CPU is at base (as
// alloc_slow_at: cp is then dead once base is made, which spares 32-bit
// ARM a register, and so a save and a restore, on the free fast path).
[[gnu::noinline, gnu::cold]] void free_twice_at(char* base, void* obj, uintptr_t caller);
[[gnu::noinline]] void free_slow_at(char* base, void* obj, uintptr_t caller);
void* alloc_slow_traced(kmem_cache_t* cp, int kmflag, uint8_t type, size_t requested, uintptr_t caller,
                        const AllocTag* tag);
void* alloc_failslab(kmem_cache_t* cp, int kmflag, uint8_t type, size_t requested, uintptr_t caller,
                     const AllocTag* tag);
// The hooked copies' stamps after a magazine hit while allocation
// profiling counts: its own, then kmemleak's if that is on too (a tail
// call: the hooked copy stays frameless). Returns obj.
void* alloc_stamp(kmem_cache_t* cp, void* obj, uintptr_t caller, const AllocTag* tag);
// A hooked free while allocation profiling subtracts: the reference off
// the buffer, then the free (a tail call, for the same reason).
void free_unstamp(kmem_cache_t* cp, void* obj, uint8_t type, uintptr_t caller);

// Off-slab caches: does the heap page index say obj is in a slab of cp?
// (A mismatch is reported by free_bad_owner.) A heap page's owner is its
// Slab when kPageSlab is set and g_no_owner otherwise (heap_index.h), so
// neither the flag nor a null pointer needs a test. Plain loads, each one
// aligned word (single-copy atomic on every arch; an __atomic load would
// keep GCC from folding the index into the addressing mode): a legitimate
// free got its buffer through the allocator, which ordered the index
// entries (set before the page reached vmem) and the page's owner (set
// before the slab's first buffer left the slab layer) before it. A stray
// pointer racing their publication loads each word through the one it just
// loaded (leaf, entry, owner, Slab): address dependencies, which keep the
// loads in order on every arch we run on, against release stores on the
// writers' side (index_prepare's leaf, index_set's entry, mark_slab_pages'
// owner), so it finds a filled leaf, a set-up descriptor and an
// initialised Slab or g_no_owner. Unless it races the release of the very
// page it points into: having loaded the page's entry just before
// forget_page cleared it (segkmem.cpp), it may find the owner null there,
// or null or another page's link once the page is back in the page
// allocator (its caches, its free lists: Page::owner shares their word).
// Null is tested (the one answer that would fault), and is no slab: the
// free is reported. Out of line (free_bad_owner), so no fast path pays it.
__attribute__((always_inline)) inline bool owner_by_index(const kmem_cache_t* cp, const void* obj) {
  uintptr_t off = reinterpret_cast<uintptr_t>(obj) - g_heap_index.base;
  if (__builtin_expect(off >= g_heap_index.size, 0)) return false;
  Page** leaf = g_heap_index.dir[off >> kIndexLeafShift];
  const Page* p = leaf[(off >> kPageShift) & (kIndexLeafEntries - 1)];
  const void* owner = p->owner;  // a Slab or g_no_owner; null for a page being released
  return owner && plat::load_shared(static_cast<const Slab*>(owner)->check) == cp;
}

// The owner check of the magazine frees (2): does obj not belong to cp?
// A cache with no owner check (integer arenas) still refuses null: pushed,
// it would read as the magazine's bottom sentinel and hide the rounds
// beneath it (kmem_cache.h, CpuCache). The other two refuse it by their
// lookups (the on-slab header of page 0 faults, as any wild pointer).
//
// Off-slab caches of the heap first compare the owner id of obj's page
// (heap_index.h, through the cache's copies of its base, span and array)
// with theirs: equal, obj is in a slab of cp. Any other
// answer (another cache's page, a page with no slab, an address past the
// ids or outside the heap, a cache with no id or of no heap memory: their
// owner_check is no page's id) goes on to the check that decides it. A
// plain load of a byte (single-copy atomic on every arch):
// a legitimate free got its buffer through the allocator, which stored its
// slab's ids (mark_slab_pages) before the buffer left the slab layer under
// slab_lock. A stray pointer racing a slab's creation or destruction reads
// the old id or the new one: 0 or another cache's sends it on to the
// index; a slab of cp's being made or torn down around it is the race
// owner_by_index has too (the page it points into changes under it).
//
// kNullOk (kmem_free, which takes null as a no-op): null is refused here
// like any stranger, and the caller lets it go: on-slab caches test it
// before the header's load (page 0's would fault), the others need no test
// (null's page never has an id: mark_slab_pages gives none to a page at
// address 0, which only a physical heap from address 0 could hold), so it
// costs their frees nothing.
template <bool kNullOk = false>
__attribute__((always_inline)) inline bool wrong_owner(const kmem_cache_t* cp, const void* obj) {
  uint32_t check = cp->owner_check;
  if (__builtin_expect(check != kOwnerOnSlab, 0)) {
    uintptr_t off = reinterpret_cast<uintptr_t>(obj) - cp->ids_base;
    if (__builtin_expect(off < cp->ids_span && cp->ids[off >> kPageShift] == check, 1)) return false;
    // Out of line, so that nothing of the index's check holds a register
    // here (on 32-bit ARM it made every free save two): free_bad_owner
    // asks the page index first, and frees what it finds to be cp's.
    return check != kOwnerNone || obj == nullptr;
  }
  if (kNullOk && obj == nullptr) return true;
  // The check word changes while the slab lives when kmemleak diverts its
  // frees (Slab::check): a free that sees either value goes right.
  return plat::load_shared(onslab_header(reinterpret_cast<uintptr_t>(obj))->check) != cp;
}

// The restartable fast paths address this CPU's CpuCache fields as
// cpu_base(cp) + kCpuOff + the field's offset: one register for the base,
// every offset folded into its instruction (kCpuOff is 64: kmem_cache.h).
constexpr size_t kCpuOff = offsetof(kmem_cache, cpu);
static_assert(kCpuOff == 64, "the hot fields before cpu outgrew their line");
static_assert(kCpuOff + sizeof(CpuCache) <= 256, "CpuCache fields out of ldp/ldrd reach");
static_assert(offsetof(kmem_cache, prof_delta) + 8 <= 256, "out of ldrd reach");
static_assert(sizeof(CpuCache) == 64, "plat::cpu_line_offset scales by 64");
__attribute__((always_inline)) inline char* cpu_base(kmem_cache_t* cp) {
  return reinterpret_cast<char*>(cp) + plat::cpu_line_offset();
}
// This CPU's CpuCache, for the masked paths (IRQs masked: the CPU is
// stable): &cp->cpu[cpu_slot()], through the line offset (the host keeps
// it scaled: no shift).
__attribute__((always_inline)) inline CpuCache* this_cpu_cache(kmem_cache_t* cp) {
  return reinterpret_cast<CpuCache*>(cpu_base(cp) + kCpuOff);
}

// Where the fast paths are restartable, the hooked copies come to the
// masked path only when kmemtrace::enabled() was just seen true: they
// record without asking again (a stale switch only moves where recording
// starts or stops by an event: trace/kmemtrace.h).
constexpr bool kTracing = plat::kRestartable;

// The magazine pop of the paths that do not record a kmemtrace event: a
// restartable section (6), or masked where there is none. No count: the
// CPU's allocations are derived from its frees and rounds (kmem_cache.h,
// CpuCache::extra). base: cpu_base(cp). False, with nothing done, when the
// loaded magazine is empty (its top round is the null sentinel) or there is
// none (g_no_rounds).
__attribute__((always_inline)) inline bool magazine_pop(kmem_cache_t* cp, char* base, void*& obj) {
  if constexpr (plat::kRestartable) {
    return __builtin_expect(plat::rseq_pop<kCpuOff + offsetof(CpuCache, top)>(base, obj), 1);
  } else {
    (void)base;
    auto s = plat::irq_save();
    CpuCache* cc = this_cpu_cache(cp);
    obj = *cc->top;
    bool hit = __builtin_expect(obj != nullptr, 1);
    if (hit) cc->top--;
    plat::irq_restore(s);
    return hit;
  }
}

// The magazine push of the same paths, after the owner check: kRseqPushed
// (and counted), or kRseqFull / kRseqOnTop (obj is on top already: freed
// twice in a row) with nothing done.
__attribute__((always_inline)) inline plat::RseqPush magazine_push(kmem_cache_t* cp, char* base, void* obj) {
  static_assert(offsetof(CpuCache, limit) == offsetof(CpuCache, top) + sizeof(void*));
  if constexpr (plat::kRestartable) {
    plat::RseqPush r = plat::rseq_push<kCpuOff + offsetof(CpuCache, top)>(base, obj);
    if (__builtin_expect(r == plat::kRseqPushed, 1)) plat::rseq_inc<kCpuOff + offsetof(CpuCache, frees)>(base);
    return r;
  } else {
    (void)base;
    auto s = plat::irq_save();
    CpuCache* cc = this_cpu_cache(cp);
    plat::RseqPush r = plat::kRseqFull;
    if (__builtin_expect(cc->top < cc->limit, 1)) {
      if (__builtin_expect(*cc->top == obj, 0)) {
        r = plat::kRseqOnTop;
      } else {
        *++cc->top = obj;
        cc->frees++;
        r = plat::kRseqPushed;
      }
    }
    plat::irq_restore(s);
    return r;
  }
}

// kmemleak's stamp of an allocation of a type (kmemtrace's kTypeCache or
// kTypeKmalloc: a constant where the hooked copies inline it).
__attribute__((always_inline)) inline void* leak_stamp_typed(kmem_cache_t* cp, void* obj, uintptr_t caller,
                                                             uint8_t type, size_t requested) {
  if (type == kmemtrace::kTypeKmalloc) return leak_stamp_sized(cp, obj, caller, requested);
  return leak_stamp(cp, obj, caller);
}

// The magazine layer's allocation. kmem_cache_alloc and kmem_alloc use it
// untraced, and traced (kTraced) from their out-of-line traced copies:
// then it records the event (type, requested, caller) as well, inside the
// masked region on the magazine path, after the fact on the slow path.
// kFailslab: fault injection may fail it (mm/failslab.h), a tail call to
// alloc_failslab while injection is on, so that the hooked copy stays a
// leaf otherwise.
template <bool kTraced = false, bool kFailslab = kTraced>
__attribute__((always_inline)) inline void* cache_alloc(kmem_cache_t* cp, int kmflag, uint8_t type = 0,
                                                        size_t requested = 0, uintptr_t caller = 0,
                                                        const AllocTag* tag = nullptr) {
  if constexpr (kFailslab)
    if (__builtin_expect(failslab_armed(), 0)) return alloc_failslab(cp, kmflag, type, requested, caller, tag);
  if constexpr (!kTraced) {
    void* obj;
    char* base = cpu_base(cp);
    if (__builtin_expect(magazine_pop(cp, base, obj), 1)) return obj;
    // Restartable: the slow path finds cp again from base, so that cp is
    // dead once base is made, and takes its arguments in the second and
    // third registers, where kmflag already is and base can be made: the
    // pop's result is then loaded straight into the return register and
    // nothing is moved.
    if constexpr (plat::kRestartable) return alloc_slow_at(nullptr, kmflag, base);
    return alloc_slow(cp, kmflag);
  } else {
    // Interrupts stay on (6): the pop commits by its store of top; an
    // interrupt inside it rewinds it. Hooked, the same while kmemtrace
    // does not record (kmemleak, profiling: their stamps come after the
    // pop anyway).
    if (plat::kRestartable && !kmemtrace::enabled()) {
      void* obj;
      if (__builtin_expect(magazine_pop(cp, cpu_base(cp), obj), 1)) {
        if (__builtin_expect(prof_counting(), 0)) return alloc_stamp(cp, obj, caller, tag);
        if (__builtin_expect(leak_stamping(), 0)) return leak_stamp_typed(cp, obj, caller, type, requested);
        return obj;
      }
      return alloc_slow_traced(cp, kmflag, type, requested, caller, tag);
    }
    auto s = plat::irq_save();
    CpuCache* cc = this_cpu_cache(cp);
    if (void* obj = *cc->top; __builtin_expect(obj != nullptr, 1)) {
      cc->top--;
      if (kTracing || kmemtrace::enabled())
        kmemtrace::detail::alloc_masked(kmemtrace::Ring::alloc_tag(type), caller, reinterpret_cast<uintptr_t>(obj),
                                        requested, cp->chunk, static_cast<uint32_t>(kmflag));
      plat::irq_restore(s);
      if (__builtin_expect(prof_counting(), 0)) return alloc_stamp(cp, obj, caller, tag);
      if (__builtin_expect(leak_stamping(), 0)) return leak_stamp_typed(cp, obj, caller, type, requested);
      return obj;
    }
    plat::irq_restore(s);
    return alloc_slow_traced(cp, kmflag, type, requested, caller, tag);
  }
}

// The magazine layer's free. Always inlined into the public entry points:
// the cold paths' tail calls then still return to their caller. kTraced:
// record the free (type, caller) inside the masked region, before the
// object can be handed out again. A free refused for its owner records
// nothing; one of the buffer on top of the magazine (freed twice in a
// row) and one refused by the slab layer have been recorded.
// kNullOk: kmem_free's, for which null is a no-op (wrong_owner).
template <bool kTraced = false, bool kProf = kTraced, bool kNullOk = false>
__attribute__((always_inline)) inline void cache_free(kmem_cache_t* cp, void* obj, uint8_t type = 0,
                                                      uintptr_t caller = 0) {
  if constexpr (kProf)
    if (__builtin_expect(prof_freeing(), 0)) return free_unstamp(cp, obj, type, caller);
  if (__builtin_expect(wrong_owner<kNullOk>(cp, obj), 0)) {
    if (kNullOk && obj == nullptr) return;
    return kTraced ? free_bad_owner(cp, obj, caller) : free_bad_owner_untraced(cp, obj, caller);
  }
  if (!kTraced || (plat::kRestartable && !kmemtrace::enabled())) {  // as in cache_alloc
    char* base = cpu_base(cp);
    plat::RseqPush r = magazine_push(cp, base, obj);
    if (__builtin_expect(r == plat::kRseqPushed, 1)) return;
    if constexpr (plat::kRestartable) {
      if (r == plat::kRseqOnTop) return free_twice_at(base, obj, caller);
      return free_slow_at(base, obj, caller);
    }
    if (r == plat::kRseqOnTop) return free_twice(cp, obj, caller);
    return free_slow_entry(cp, obj, caller);
  }
  auto s = plat::irq_save();
  CpuCache* cc = this_cpu_cache(cp);
  if (__builtin_expect(cc->top < cc->limit, 1)) {
    if (__builtin_expect(*cc->top == obj, 0)) {  // freed twice in a row
      // Recorded, as kmemtrace's fast path records it (8): the call was made.
      if (kTracing || kmemtrace::enabled())
        kmemtrace::detail::free_masked(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
      plat::irq_restore(s);
      return free_twice(cp, obj, caller);
    }
    if (kTracing || kmemtrace::enabled())
      kmemtrace::detail::free_masked(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
    *++cc->top = obj;
    cc->frees++;
    plat::irq_restore(s);
    return;
  }
  if (kTracing || kmemtrace::enabled())
    kmemtrace::detail::free_masked(kmemtrace::Ring::free_tag(type), caller, reinterpret_cast<uintptr_t>(obj));
  plat::irq_restore(s);
  return free_slow_entry(cp, obj, caller);
}

// The profiled fast paths (7): the tagged entry points and the hooked
// frees while allocation profiling is the only feature that wants the
// hooks. The magazine pop and push as untraced, and between them and the
// caller the buffer's reference and its tag's counter: the reference in
// the entry of its slab's array that the address's offset in its page
// names (kmem_cache.h, prof_shift), the counter added to in a restartable
// section (plat::cpu_add_indexed) through this CPU's biased base, which
// the cache keeps per CPU (CpuCache::prof: 0 for a cache that is off-slab
// or keeps no references, and until the counters exist, which sends its
// calls to the hooked copies' stamps). requested only reaches the slow
// path (alloc_slow_prof): kmem_alloc's size, or 0 for a kmem_cache_alloc
// (four arguments, so that 32-bit ARM passes them all in registers and
// can jump there).
[[gnu::noinline]] void* alloc_slow_prof(kmem_cache_t* cp, int kmflag, size_t requested, const AllocTag* tag);
// What alloc_slow_prof does, with the caller given.
inline void* alloc_slow_prof_from(kmem_cache_t* cp, int kmflag, size_t requested, const AllocTag* tag,
                                  uintptr_t caller) {
  if (!requested)  // a kmem_cache_alloc: its size is not loaded on the fast path
    return alloc_slow_traced(cp, kmflag, kmemtrace::kTypeCache, cp->bufsize, caller, tag);
  return alloc_slow_traced(cp, kmflag, kmemtrace::kTypeKmalloc, requested, caller, tag);
}
// caller: MM_ENTRY_CALLER() of the entry point (0 in the kernel, where
// every cold path is a tail call and takes its own return address; the
// host passes the entry point's).
__attribute__((always_inline)) inline void* cache_alloc_prof(kmem_cache_t* cp, int kmflag, size_t requested,
                                                             const AllocTag* tag, uintptr_t caller) {
  char* base = cpu_base(cp);
  void* obj;
  if (__builtin_expect(!magazine_pop(cp, base, obj), 0)) {
    if (caller)  // the host: alloc_slow_prof could not take it in four registers' worth of arguments
      return alloc_slow_prof_from(cp, kmflag, requested, tag, caller);
    return alloc_slow_prof(cp, kmflag, requested, tag);
  }
  // The slot's fields as base + their offset (as the sections address
  // them): GCC then folds each offset into its load.
  uintptr_t counters = *reinterpret_cast<const uintptr_t*>(base + kCpuOff + offsetof(CpuCache, prof));
  if (__builtin_expect(!counters, 0)) return alloc_stamp(cp, obj, caller, tag);
  // A tag that is not one of this image's (a call site in a template, or
  // none) is not counted, as by the hooked stamp (prof_charge_masked).
  uintptr_t ref = prof_index(tag);
  uint64_t refs = *reinterpret_cast<const uint64_t*>(base + kCpuOff + offsetof(CpuCache, prof_refs));
  if (__builtin_expect(!prof_ref_in(static_cast<uint32_t>(ref), refs), 0))
    return alloc_stamp(cp, obj, caller, tag);
  auto a = reinterpret_cast<uintptr_t>(obj);
  uint32_t* tags = onslab_header(a)->tags;
  if (__builtin_expect(!tags, 0)) return obj;  // a slab refused its references: not counted (prof_refless_slabs)
  tags[(a & (kPageBytes - 1)) >> cp->prof_shift] = static_cast<uint32_t>(ref);
  plat::cpu_add_indexed(counters, ref, cp->prof_delta);
  return obj;
}

// The free: the owner check, the reference taken off (a buffer without
// one, allocated while profiling was off or freed twice, goes to the
// hooked copy's free_unstamp, which reports it), then the push. caller as
// for cache_alloc_prof.
template <uint8_t kType>
__attribute__((always_inline)) inline void cache_free_prof(kmem_cache_t* cp, void* obj, uintptr_t caller) {
  char* base = cpu_base(cp);
  uintptr_t counters = reinterpret_cast<CpuCache*>(base + kCpuOff)->prof;
  if (__builtin_expect(!counters, 0)) return free_unstamp(cp, obj, kType, caller);
  auto a = reinterpret_cast<uintptr_t>(obj);
  Slab* sp = onslab_header(a);  // counters: an on-slab cache
  // Not cp's to push here (a wrong free, or a slab whose frees go out of
  // line: Slab::check): the hooked copy takes the reference off, if the
  // buffer is cp's, and then decides.
  if (__builtin_expect(plat::load_shared(sp->check) != cp, 0)) return free_unstamp(cp, obj, kType, caller);
  if (uint32_t* tags = sp->tags) {
    uint32_t* slot = &tags[(a & (kPageBytes - 1)) >> cp->prof_shift];
    uint32_t ref = *slot;
    if (__builtin_expect(ref != 0, 1)) {
      *slot = 0;
      plat::cpu_add_indexed<true>(counters, ref, cp->prof_delta);
    } else if (prof_counting()) {
      // Allocated while profiling was off (or freed twice): the hooked
      // copy reports it. While profiling is off there is nothing to
      // subtract (every object allocated since has no reference).
      return free_unstamp(cp, obj, kType, caller);
    }
  }
  plat::RseqPush r = magazine_push(cp, base, obj);
  if (__builtin_expect(r == plat::kRseqPushed, 1)) return;
  if (r == plat::kRseqOnTop) return free_twice(cp, obj, caller);
  return free_slow_entry(cp, obj, caller);
}

#if defined(ARCH_HAS_RSEQ_RECORD)
// kmemtrace's fast paths (8), for frameless out-of-line copies that the
// entry points tail-call while alloc_trace_only() / free_trace_only():
// every call below is a tail call, with at most four arguments (32-bit
// ARM passes no more in registers, and a call with arguments on the stack
// cannot be a tail call). alloc_trace_full_* and alloc_slow_traced_* take
// the entry point's caller as their own return address, and have a copy
// per event type; free_trace_full takes it as an argument.
// The record's cold path when the ring had no room: the masked write,
// then obj back to the caller.
[[gnu::cold, gnu::noinline]] void* alloc_trace_full_cache(void* obj, size_t requested, size_t allocated, int kmflag);
[[gnu::cold, gnu::noinline]] void* alloc_trace_full_kmalloc(void* obj, size_t requested, size_t allocated,
                                                            int kmflag);
// A magazine miss: alloc_slow_traced, which records after the fact.
[[gnu::noinline]] void* alloc_slow_traced_cache(kmem_cache_t* cp, int kmflag, size_t requested, const AllocTag* tag);
[[gnu::noinline]] void* alloc_slow_traced_kmalloc(kmem_cache_t* cp, int kmflag, size_t requested,
                                                  const AllocTag* tag);
// The same for a free, then the free itself (the untraced push and its
// slow paths).
[[gnu::cold, gnu::noinline]] void free_trace_full(kmem_cache_t* cp, void* obj, uint8_t type, uintptr_t caller);

// The caller of the entry point is the link register throughout (these
// run in frameless functions that the entry points tail-call, and make
// only tail calls): the record takes it from there (arm64, riscv64) or
// as caller_of_leaf() (arm; trace/record.h), the slow paths as
// caller_of_leaf() or as their own return address.
template <uint8_t kType>
__attribute__((always_inline)) inline void* cache_alloc_trace(kmem_cache_t* cp, int kmflag, size_t requested,
                                                              const AllocTag* tag) {
  void* obj;
  size_t chunk = cp->chunk;  // before the pop, so that cp is dead after it (obj lands in the return register)
  if (__builtin_expect(!magazine_pop(cp, cpu_base(cp), obj), 0))
    return kType == kmemtrace::kTypeCache ? alloc_slow_traced_cache(cp, kmflag, requested, tag)
                                          : alloc_slow_traced_kmalloc(cp, kmflag, requested, tag);
  if (__builtin_expect(kmemtrace::detail::alloc_rseq<kmemtrace::Ring::alloc_tag(kType)>(
                           reinterpret_cast<uintptr_t>(obj), requested, chunk, static_cast<uint32_t>(kmflag),
                           caller_of_leaf()) ==
                           arch::kRecordFull,
                       0))
    return kType == kmemtrace::kTypeCache ? alloc_trace_full_cache(obj, requested, chunk, kmflag)
                                          : alloc_trace_full_kmalloc(obj, requested, chunk, kmflag);
  return obj;
}

// The owner check as cache_free's, the record, then the push.
template <uint8_t kType>
__attribute__((always_inline)) inline void cache_free_trace(kmem_cache_t* cp, void* obj) {
  if (__builtin_expect(wrong_owner(cp, obj), 0)) return free_bad_owner(cp, obj, 0);
  if (__builtin_expect(kmemtrace::detail::free_rseq<kmemtrace::Ring::free_tag(kType)>(reinterpret_cast<uintptr_t>(obj),
                                                                                    caller_of_leaf()) ==
                           arch::kRecordFull,
                       0))
    return free_trace_full(cp, obj, kType, caller_of_leaf());
  char* base = cpu_base(cp);
  plat::RseqPush r = magazine_push(cp, base, obj);
  if (__builtin_expect(r == plat::kRseqPushed, 1)) return;
  if (r == plat::kRseqOnTop) return free_twice_at(base, obj, 0);  // 0: they take their own return address
  return free_slow_at(base, obj, 0);
}
#endif

}  // namespace mm
