// SPDX-License-Identifier: Apache-2.0
// kmem_alloc, kmem_zalloc, kmem_free: general-purpose allocation over a
// ladder of size caches.
//
// 1. Size classes. Sizes 1 to 16 KiB go to the smallest of 36 "kmem_alloc_N"
//    caches that fits (8 B steps at the bottom, growing by about 1/8 at the
//    top). One table maps a size to its cache in one indexed load: an entry
//    per 8 bytes up to 16 KiB (2048 entries: 16 KiB of table on 64-bit, 8 KiB
//    on 32-bit), so every class costs one compare and one load. (Two tables,
//    8-byte steps to 1 KiB and 1 KiB steps above, cost the sizes above 1 KiB
//    a second compare, a shift and, on the host, the hook switch's own test.)
//    The caches are ordinary caches (KMC_KMEM_ALLOC only changes how a wrong
//    size is reported), so kmem_alloc's fast path is the table load plus
//    kmem_cache_alloc's.
// 2. Larger sizes are whole pages from the heap (segkmem_alloc_large), each
//    page marked kPageLarge in the page index with the allocation's start, so
//    that kmem_free checks the pointer and the size on the free itself and
//    kmem_whatis knows the span.
// 3. kmem_free takes the size: a size of another class is caught by the
//    owner check of the cache it names (the buffer belongs to another
//    cache), a large size by segkmem's check of the span.
// 4. Before kmem_init. The tables name g_no_class instead of nothing: a cache
//    with no magazines, whose fast paths miss. The fast path then needs no
//    null test of the entry. In the kernel, where kmem_init runs at boot
//    before any allocation, its slow paths refuse the call with a report. On
//    the host, where kmem starts on first use, kmem_alloc's miss on it takes
//    the large path, which brings kmem up and retries (the hooked copies'
//    miss: alloc_slow_traced, kmem_alloc_first_use); a free of it is refused
//    with a report.
//    The tables are read plainly on the kernel's fast path, with relaxed
//    loads on the host's (table_entry). kmem_alloc_init fills
//    them with release stores, so a thread that reads a cache pointer
//    while another runs kmem_init sees the cache initialised through it (an
//    address dependency); its first allocation then takes the slow path,
//    which orders the rest (alloc_slow, host only). In the kernel kmem_init
//    runs before the other CPUs start.
// 5. The hooks bound. The host's hook switches are flags, a load and a branch
//    at every call (mm/host/include/mm/platform_inline.h), where the kernel
//    has a patched nop. kmem_alloc and kmem_free fold theirs into their size
//    test instead: a size takes the table's fast path below a bound that is
//    kAllocMax while that side's hooks are off and 0 while they are on (every
//    size then goes on to the test of the switch). mm/hooks.cpp sets it
//    through kmem_alloc_hooks_bound: to 0 before the switch goes on, back
//    after it goes off, so a call that sees the bound open sees a switch that
//    is off or just turning on (the window every switch has).
#include <mm/segkmem.h>
#include "kmem_fastpath.h"

namespace mm {

// (4) Per-CPU caches as CpuCache's initialisers leave them, with no
// magazine (top and limit at g_no_rounds), so every pop and push misses
// into alloc_slow / free_slow, which know it. No owner check: a free goes
// straight to its push. (Every other member is zero: designated
// initializers leave them value-initialised.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
constinit kmem_cache g_no_class = {.owner_check = kOwnerNone};
#pragma GCC diagnostic pop
kmem_cache_t* kmem_no_class() { return &g_no_class; }

namespace {

// kmem_alloc's size ladder.
constexpr uint32_t kAllocSizes[] = {8,    16,   32,   48,   64,   80,   96,    112,  128,  160,  192,
                                    224,  256,  320,  384,  448,  512,   640,  768,  896,  1024, 1280,
                                    1536, 1792, 2048, 2560, 3072, 3584,  4096, 5120, 6144, 7168, 8192,
                                    10240, 12288, 16384};
constexpr unsigned kAllocCaches = sizeof(kAllocSizes) / sizeof(kAllocSizes[0]);
constexpr size_t kAllocMax = 16384;  // the largest class: the table's entries, 8 bytes apart, reach it
static_assert(kAllocSizes[kAllocCaches - 1] == kAllocMax);
kmem_cache_t* g_alloc_caches[kAllocCaches];

// Size -> cache: g_no_class until kmem_init (4).
template <size_t N>
struct NoClassTable {
  kmem_cache_t* e[N];
  consteval NoClassTable() : e() {
    for (auto& p : e) p = &g_no_class;
  }
};
constinit NoClassTable<kAllocMax / 8> g_classes{};
kmem_cache_t* (&g_class_table)[kAllocMax / 8] = g_classes.e;  // (size - 1) >> 3

// An entry is written by kmem_alloc_init's release store, and what it
// points to is reached through the loaded address (4). Host: a relaxed
// load, since a thread's first kmem_alloc may race another's kmem_init.
// Kernel: a plain load (kmem_init runs before the other CPUs start, whose
// start orders it), which arm64 folds into a scaled-index load, where the
// atomic form wants the address in a base register. Never null.
inline kmem_cache_t* table_entry(kmem_cache_t* const* e) {
#if defined(MM_KERNEL)
  kmem_cache_t* cp = *e;
#else
  kmem_cache_t* cp = __atomic_load_n(e, __ATOMIC_RELAXED);
#endif
  if (!cp) __builtin_unreachable();  // g_no_class until kmem_init (4)
  return cp;
}
// The class of a size: null for a size no class serves (0, or more than
// kAllocMax), g_no_class before kmem_init (4). Most calls have a class:
// expected so, GCC lays the table's load in line (on the host it would
// jump out and back otherwise).
inline kmem_cache_t* size_cache(size_t size) {
#if defined(__aarch64__)
  // The bound as a shift: arm64 compares the shifted register with zero,
  // where size - 1 < kAllocMax becomes a compare with 16383, which no
  // immediate holds (a move more on each side). x86-64 pays a move and a
  // shift for it instead of a compare, and arm and RISC-V the same either
  // way: they keep the compare.
  static_assert(kAllocMax == size_t{1} << 14);
  bool in_table = (size - 1) >> 14 == 0;
#else
  bool in_table = size - 1 < kAllocMax;
#endif
  if (__builtin_expect(in_table, 1)) {
#if defined(MM_KERNEL) && defined(__riscv)
    // riscv64: the table's low address bits folded into the load's offset
    // (auipc, add, ld %pcrel_lo), where GCC forms the whole address first
    // (auipc, addi, add, ld): no addi on either side. The pair stays
    // as written: the kernel links with -mno-relax. The same plain load as
    // table_entry's; "memory" keeps it after any store to the table that
    // GCC can see.
    static_assert(sizeof(kmem_cache_t*) == 8);
    kmem_cache_t* cp;
    asm("1: auipc %0, %%pcrel_hi(%1)\n\t"
        "add %0, %0, %2\n\t"
        "ld %0, %%pcrel_lo(1b)(%0)"
        : "=&r"(cp)
        : "i"(g_classes.e), "r"((size - 1) & ~size_t{7})
        : "memory");
    if (!cp) __builtin_unreachable();  // g_no_class until kmem_init (4)
    return cp;
#else
    return table_entry(&g_class_table[(size - 1) >> 3]);
#endif
  }
  return nullptr;
}

#if !defined(MM_KERNEL)
// (5) [0]: kmem_alloc's, [1]: kmem_free's. Read plainly (one compare with
// the memory operand), as the host reads its switches; stored relaxed.
size_t g_hooks_bound[2] = {kAllocMax, kAllocMax};
#endif

// Sizes no size cache serves (before kmem_init on the host: every size).
// *chunk (if chunk is not null) gets the bytes allocated.
MM_RESTARTABLE_TEXT __attribute__((noinline)) void* alloc_uncached(size_t size, int kmflag, size_t* chunk, uintptr_t caller) {
  size_t unused;
  if (!chunk) chunk = &unused;
  *chunk = 0;
  if (size == 0) return nullptr;
  if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE)) kmem_init();  // first use (host): bring kmem up
  // Look again: the caller's plain read of the table may have come before
  // another thread's kmem_init filled it (g_ready's acquire, or kmem_init's
  // lock, orders the tables now).
  if (kmem_cache_t* cp = size_cache(size)) {
    *chunk = cp->chunk;
    // A debugged class (kmem came up on this call) gets the size asked for.
    if (cp->debug) return alloc_unmagazined(cp, kmflag, size, caller ? caller : caller_of_api());
    return cache_alloc(cp, kmflag);
  }
  // Untraced, a tail call from kmem_alloc: our own return address is its caller.
  void* p = segkmem_alloc_large(size, kmflag, caller ? caller : caller_of_api());
  if (p) *chunk = (size + kPageBytes - 1) & ~(kPageBytes - 1);
  return p;
}

// An untraced allocation from cp, size's class: cache_alloc, where on the
// host a miss on g_no_class is kmem's first use (4) and takes the large
// path, which brings kmem up.
__attribute__((always_inline)) inline void* class_alloc(kmem_cache_t* cp, size_t size, int kmflag) {
#if defined(MM_KERNEL)
  (void)size;
  return cache_alloc(cp, kmflag);
#else
  void* obj;
  if (__builtin_expect(magazine_pop(cp, cpu_base(cp), obj), 1)) return obj;
  if (__builtin_expect(cp != &g_no_class, 1)) return alloc_slow(cp, kmflag);
  return alloc_uncached(size, kmflag, nullptr, 0);
#endif
}

// kmem_alloc's body, untraced.
__attribute__((always_inline)) inline void* kmem_alloc_body(size_t size, int kmflag) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return class_alloc(cp, size, kmflag);
  return alloc_uncached(size, kmflag, nullptr, 0);
}

// caller 0: the entry point tail-called this, so its own return address is
// the entry point's caller (kmem.cpp, cache_alloc_traced).
MM_RESTARTABLE_TEXT __attribute__((noinline)) void* kmem_alloc_traced(size_t size, int kmflag, uintptr_t caller, const AllocTag* tag) {
  if (!caller) caller = caller_of_api();
  kmem_cache_t* cp = size_cache(size);
#if !defined(MM_KERNEL)
  if (__builtin_expect(cp == &g_no_class, 0)) {  // the host's first use (4): kmem comes up first,
    kmem_init();                                 // so that fault injection decides once, on the class
    cp = size_cache(size);
  }
#endif
  if (__builtin_expect(cp != nullptr, 1))
    return cache_alloc<true>(cp, kmflag, kmemtrace::kTypeKmalloc, size, caller, tag);
  // A size no class serves (0, or a large one).
  if (failslab_armed() && (kmflag & KM_NOSLEEP) && size && failslab_should_fail("kmem_alloc", size)) return nullptr;
  size_t chunk;
  void* p = alloc_uncached(size, kmflag, &chunk, caller);
  kmemtrace::note_alloc(kmemtrace::kTypeKmalloc, caller, p, size, chunk, kmflag);
  if (p && prof_counting()) vmem_prof_retag(segkmem_default_arena(), p, chunk, tag);  // counted at segkmem's call until now
  if (p && leak_stamping()) leak_note_large(p, caller, size);
  return p;
}

#if !defined(MM_KERNEL)
}  // namespace

// The hooked copies' miss on g_no_class (alloc_slow_traced): the host's
// first use (4), which the traced copy handles (kmem comes up, and it
// looks the size up again in the filled tables).
__attribute__((noinline)) void* kmem_alloc_first_use(size_t size, int kmflag, uintptr_t caller,
                                                     const AllocTag* tag) {
  return kmem_alloc_traced(size, kmflag, caller, tag);
}

namespace {
#endif

// kmem_free of a size no class serves (a large buffer, or a refused free);
// caller for the reports, 0 when kmem_free tail-called this (take our own).
__attribute__((noinline)) void kmem_free_uncached(void* buf, size_t size, uintptr_t caller) {
  if (!caller) caller = caller_of_api();
  if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE)) {
    report("kmem_free before any allocation", "kmem_alloc", buf, caller, size);
    return;
  }
  if (size == 0) {
    report("kmem_free with size 0", "kmem_alloc", buf, caller, size);
    return;
  }
  segkmem_free_large(buf, size, caller);
}

// kmem_free's body, untraced; caller for the reports, or 0 from the entry
// point, which then passes MM_ENTRY_CALLER() on the uncached branch alone
// (the host's is a load, kept off the fast path).
// Before kmem_init a class's free is g_no_class's, refused by free_slow (4).
// Null is a no-op: the size class's owner check lets it go (cache_free's
// kNullOk: no test of its own on the fast path of the classes above 512
// bytes), the uncached branch tests it.
__attribute__((always_inline)) inline void kmem_free_body(void* buf, size_t size, uintptr_t caller) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return cache_free<false, false, true>(cp, buf);
  if (!buf) return;
  return kmem_free_uncached(buf, size, caller ? caller : MM_ENTRY_CALLER());
}

// caller 0: tail-called by kmem_free (or kmem_free_traced), whose caller
// is our return address.
MM_RESTARTABLE_TEXT __attribute__((noinline)) void kmem_free_hooked(void* buf, size_t size, uintptr_t caller) {
  if (!caller) caller = caller_of_api();
  kmem_cache_t* cp = size_cache(size);
#if !defined(MM_KERNEL)
  // g_no_class, the host's before kmem_init (4): kmem_free_body refuses
  // it below, unrecorded.
  if (cp == &g_no_class) return kmem_free_body(buf, size, caller);
#endif
  if (__builtin_expect(cp != nullptr, 1)) {
    if (cp->debug) {  // no magazines: straight to the slab layer, which checks the size (kmem_debug.cpp)
      if (prof_freeing()) prof_unstamp(cp, buf, caller);
      kmemtrace::note_free(kmemtrace::kTypeKmalloc, caller, buf);
      return free_unmagazined(cp, buf, caller, size);
    }
    return cache_free<true>(cp, buf, kmemtrace::kTypeKmalloc, caller);
  }
  // Relaxed: only whether to record; kmem_free_body checks again with acquire.
  if (__atomic_load_n(&g_ready, __ATOMIC_RELAXED) && size != 0)
    kmemtrace::note_free(kmemtrace::kTypeKmalloc, caller, buf);  // else refused below
  kmem_free_body(buf, size, caller);
}

// The hooked free: the profiled fast path on the size caches while
// profiling alone has the free hooks on (kmem_fastpath.h, Profiled fast
// paths; a debugged class has no magazines), else kmem_free_hooked.
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void kmem_free_traced(void* buf, size_t size,
                                                                                 uintptr_t caller) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr && !cp->debug && !free_hooks_beside_prof(), 1))
    return cache_free_prof<kmemtrace::kTypeKmalloc>(cp, buf, caller);
#if defined(ARCH_HAS_RSEQ_RECORD)
  // kmemtrace alone (kmem_fastpath.h, kmemtrace's fast paths): debugged
  // classes are kFeatureDebug's.
  if (__builtin_expect(cp != nullptr && free_trace_only(), 1))  // (caller 0 here)
    return cache_free_trace<kmemtrace::kTypeKmalloc>(cp, buf);
#endif
  return kmem_free_hooked(buf, size, caller);
}

#if defined(ARCH_HAS_RSEQ_RECORD)
// kmemtrace alone, on a size cache (kmem_fastpath.h, kmemtrace's fast paths):
// the entry points tail-call it with caller 0 (the kernel's MM_ENTRY_CALLER).
// The entry point's own arguments first, in their registers, so that the call
// moves only cp.
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void* kmem_alloc_trace_only_cp(size_t size, int kmflag,
                                                                                         const AllocTag* tag,
                                                                                         kmem_cache_t* cp) {
  return cache_alloc_trace<kmemtrace::kTypeKmalloc>(cp, kmflag, size, tag);
}
// The same for kmem_free, from its three-way site (HookMode): kmemtrace
// alone has the free hooks on, so no class is debugged (kFeatureDebug's).
MM_RESTARTABLE_TEXT MM_FRAMELESS __attribute__((noinline)) void kmem_free_trace_only(void* buf, size_t size) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return cache_free_trace<kmemtrace::kTypeKmalloc>(cp, buf);
  return kmem_free_hooked(buf, size, 0);
}
#endif

}  // namespace

// Which size classes get a cache. With less than kSmallRam of RAM only the
// powers of two: each class costs a cache structure and, once used, a slab
// of buffers that mostly wait for the next request of that size; on a
// board with 256 KiB of RAM the 36 classes' partial slabs alone would be
// most of it. The sizes between go to the next power of two (at most half
// wasted, in a buffer that is in use).
constexpr uint64_t kSmallRam = uint64_t{1} << 20;
bool class_wanted(size_t size, bool small_ram) { return !small_ram || (size & (size - 1)) == 0; }

#if !defined(MM_KERNEL)
void kmem_alloc_hooks_bound(bool free_side, bool hooks_on) {
  __atomic_store_n(&g_hooks_bound[free_side ? 1 : 0], hooks_on ? size_t{0} : kAllocMax, __ATOMIC_RELAXED);
}
#endif

void kmem_alloc_init() {
  bool small_ram = page_ram_bytes() < kSmallRam;
  for (unsigned i = 0; i < kAllocCaches; i++) {
    if (!class_wanted(kAllocSizes[i], small_ram)) continue;  // g_alloc_caches[i] stays null
    char name[kNameLen];
    cache_size_name(name, "kmem_alloc_", kAllocSizes[i]);
    size_t align = kAllocSizes[i] >= 64 ? 64 : kAllocSizes[i] >= 16 ? 16 : 8;
    if (kAllocSizes[i] % align) align = 8;
    g_alloc_caches[i] = cache_create(name, kAllocSizes[i], align, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     KMC_KMEM_ALLOC);
  }
  // The size table: the smallest cache that fits. Each entry is stored with
  // release: the cache (and all kmem_init did before) to whoever reads it (4).
  // (Classes without a cache are passed over: the last, kAllocMax, always has one.)
  unsigned c = 0;
  for (size_t i = 0; i < kAllocMax / 8; i++) {
    size_t size = (i + 1) * 8;
    while (kAllocSizes[c] < size || !g_alloc_caches[c]) c++;
    __atomic_store_n(&g_class_table[i], g_alloc_caches[c], __ATOMIC_RELEASE);
  }
}


}  // namespace mm

using namespace mm;

// kmemtrace alone (mm/kmem.h): the macro's call sites call it from their
// three-way site, kmem_alloc tail-calls it from its own. Where there is no
// restartable record the tagged copy (never called then: every arch with
// three-way sites has the record).
MM_RESTARTABLE_TEXT MM_FRAMELESS void* kmem_alloc_trace_only(size_t size, int kmflag, const AllocTag* tag) {
#if defined(ARCH_HAS_RSEQ_RECORD)
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr, 1)) return kmem_alloc_trace_only_cp(size, kmflag, tag, cp);
  return kmem_alloc_traced(size, kmflag, MM_ENTRY_CALLER(), tag);
#else
  return kmem_alloc_tagged(size, kmflag, tag);
#endif
}

// The Solaris names, for calls that do not go through the macros
// (mm/kmem.h): counted at these functions' own tags. kmem_alloc and
// kmem_free have a three-way site (HookMode): the nop, kmemtrace's path
// alone (whose size lookup is its own: on the site's branch here it cost
// the untraced path a move on riscv64), or the traced copy.
MM_RESTARTABLE_TEXT MM_FRAMELESS void* (kmem_alloc)(size_t size, int kmflag) {
#if !defined(MM_KERNEL)
  if (__builtin_expect(size - 1 < plat::load_shared(g_hooks_bound[0]), 1))  // (5): the table's class, or g_no_class (4)
    return class_alloc(table_entry(&g_class_table[(size - 1) >> 3]), size, kmflag);
#endif
  plat::HookMode mode = plat::alloc_hooks_mode();
  if (mode != plat::HookMode::kOff) {
    if (mode == plat::HookMode::kTraceOnly) return kmem_alloc_trace_only(size, kmflag, MM_ALLOC_TAG_INDIRECT(kKmem));
    return kmem_alloc_traced(size, kmflag, MM_ENTRY_CALLER(), MM_ALLOC_TAG_INDIRECT(kKmem));
  }
  return kmem_alloc_body(size, kmflag);
}

MM_RESTARTABLE_TEXT void* (kmem_zalloc)(size_t size, int kmflag) {
  void* p;
  if (kmemtrace::on()) {
    p = kmem_alloc_traced(size, kmflag, caller_of_api(), MM_ALLOC_TAG_INDIRECT(kKmem));
  } else {
    p = kmem_alloc_body(size, kmflag);
  }
  if (p) __builtin_memset(p, 0, size);
  return p;
}

// The hooked copy itself (the macro's call lands here): the profiled fast
// path on the size caches while profiling alone has the hooks on
// (kmem_fastpath.h, Profiled fast paths), else the traced copy.
MM_RESTARTABLE_TEXT MM_FRAMELESS void* kmem_alloc_tagged(size_t size, int kmflag, const AllocTag* tag) {
  kmem_cache_t* cp = size_cache(size);
  if (__builtin_expect(cp != nullptr && !alloc_hooks_beside_prof(), 1))
    return cache_alloc_prof(cp, kmflag, size, tag, MM_ENTRY_CALLER());
#if defined(ARCH_HAS_RSEQ_RECORD)
  if (__builtin_expect(cp != nullptr && alloc_trace_only(), 1)) return kmem_alloc_trace_only_cp(size, kmflag, tag, cp);
#endif
  return kmem_alloc_traced(size, kmflag, MM_ENTRY_CALLER(), tag);
}

void* kmem_zalloc_tagged(size_t size, int kmflag, const AllocTag* tag) {
  void* p = kmem_alloc_traced(size, kmflag, caller_of_api(), tag);
  if (p) __builtin_memset(p, 0, size);
  return p;
}

#if !defined(MM_KERNEL)
namespace {
// The rest of the host's kmem_free (5), out of line: a second inlined
// magazine push in kmem_free (kmem_free_body's) made GCC merge the two
// owner checks' results into a flag it then tested (2 more on every call).
__attribute__((noinline)) void kmem_free_rest(void* buf, size_t size, uintptr_t caller) {
  if (!buf) return;
  if (plat::free_hooks_on()) return kmem_free_traced(buf, size, caller);
  kmem_free_body(buf, size, caller);
}
}  // namespace
#endif

// Null is a no-op, tested off the fast path of the classes above 512 bytes
// (kmem_free_body).
MM_RESTARTABLE_TEXT MM_FRAMELESS void kmem_free(void* buf, size_t size) {
#if !defined(MM_KERNEL)
  if (__builtin_expect(size - 1 < plat::load_shared(g_hooks_bound[1]), 1)) {  // (5): the table's class, or g_no_class (4)
    kmem_cache_t* cp = table_entry(&g_class_table[(size - 1) >> 3]);
    return cache_free<false, false, true>(cp, buf);
  }
  return kmem_free_rest(buf, size, MM_ENTRY_CALLER());
#else
  plat::HookMode mode = plat::free_hooks_mode();
  if (mode != plat::HookMode::kOff) {
    if (!buf) return;
#if defined(ARCH_HAS_RSEQ_RECORD)
    if (mode == plat::HookMode::kTraceOnly) return kmem_free_trace_only(buf, size);
#endif
    return kmem_free_traced(buf, size, MM_ENTRY_CALLER());
  }
  kmem_free_body(buf, size, 0);
#endif
}
