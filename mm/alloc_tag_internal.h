// SPDX-License-Identifier: Apache-2.0
// Allocation profiling, the allocators' side (internal to mm/; the theory is
// in alloc_tag.cpp, the interface in mm/include/mm/alloc_tag.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/alloc_tag.h>
#include <mm/hooks.h>
#include <mm/platform_inline.h>

struct vmem;

namespace mm {

struct AllocTag;

extern uint32_t g_prof_counting;  // the hooked allocations count (read relaxed)
extern uint32_t g_prof_freeing;   // the hooked frees subtract (set once counting was on)
inline bool prof_counting() { return __atomic_load_n(&g_prof_counting, __ATOMIC_RELAXED) != 0; }
inline bool prof_freeing() { return __atomic_load_n(&g_prof_freeing, __ATOMIC_RELAXED) != 0; }

// Do new slabs and the page allocator's banks get tag references (the
// mode is not never)? Set before page_init.
bool prof_records();

// The counters: per CPU slot, one word per tag, live bytes and live calls
// packed as bytes + calls * 2^kCallsShift (alloc_tag.cpp, Counters), so that
// one add counts an object: a restartable section on the fast paths (a single
// store commits it). Set once, before counting is first switched on
// (counters_ready's cross-call orders them before any counting path reads
// them).
constexpr unsigned kCallsShift = 36;
constexpr int64_t kOneCall = int64_t{1} << kCallsShift;
constexpr int64_t prof_delta(uint64_t bytes) { return static_cast<int64_t>(bytes) + kOneCall; }
extern int64_t* g_prof_counters[plat::kCpuSlots];

// A reference names a tag by its address over its size (its alignment):
// (uint32_t)(tag >> kTagShift), 0 for none, so that a fast path turns a
// tag into its reference with one shift, and a reference into its counter
// with one add to a biased base (prof_counter_base). The tags of the image
// are the references g_prof_ref0 .. g_prof_ref0 + g_prof_ntags - 1
// (counters_ready refuses an image where that range wraps or holds 0).
constexpr unsigned kTagShift = __builtin_ctz(sizeof(AllocTag));
inline uint32_t prof_ref(const AllocTag* tag) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(tag) >> kTagShift);
}
// The counter index of tag: its reference, which in the kernel is the
// untruncated shift (counters_ready checks that its tags lie below 2^32
// references), so that no zero-extension follows it.
inline uintptr_t prof_index(const AllocTag* tag) {
#if defined(MM_KERNEL)
  return reinterpret_cast<uintptr_t>(tag) >> kTagShift;
#else
  return prof_ref(tag);
#endif
}
extern uint32_t g_prof_ref0;
extern uint32_t g_prof_ntags;
// The image's references as one word, low half the first, high half
// their number, and the check a fast path makes with it: is ref one of
// them? (One load; on arm64 the compare takes the high half as a shifted
// operand.)
inline uint64_t prof_refs_pack() { return g_prof_ref0 | uint64_t{g_prof_ntags} << 32; }
__attribute__((always_inline)) inline bool prof_ref_in(uint32_t ref, uint64_t refs) {
  return ref - static_cast<uint32_t>(refs) < (refs >> 32);
}
// cpu's counter of reference ref is at base + ref * 8, base being this
// (0 until the counters exist): what the kmem fast paths keep per CPU.
uintptr_t prof_counter_base(unsigned cpu);
// The allocators' hook features beside profiling's, on allocation and on
// free (hooks.cpp): while 0, a hooked call is there for profiling alone
// and takes its profiled fast path (kmem_fastpath.h, Profiled fast paths).
extern uint32_t g_alloc_hooks_beside_prof;
extern uint32_t g_free_hooks_beside_prof;
// The allocation word's bit for "profiling does not count" (low, so that
// kAllocTraceOnly is a compare's immediate on every arch).
constexpr uint32_t kNotCounting = 1u << 8;
static_assert(kNotCounting > kFeatureProfileFree);  // above every feature's bit
// Their values while kmemtrace is the only feature that wants the hooks
// (profiling neither counts, kNotCounting in the allocation word, nor
// subtracts, bit 30 of the free word): the traced copies then take
// kmemtrace's fast paths (kmem_fastpath.h, kmemtrace's fast paths).
constexpr uint32_t kAllocTraceOnly = kFeatureKmemtrace | kNotCounting;
constexpr uint32_t kFreeTraceOnly = kFeatureKmemtrace;
// Kernel: plain loads of an aligned word (single-copy atomic on every arch),
// which GCC folds into one load where an __atomic one takes an address
// add first; the host's are relaxed atomics.
#if defined(MM_KERNEL)
inline bool alloc_hooks_beside_prof() { return g_alloc_hooks_beside_prof != 0; }
inline uint32_t free_hooks_beside_prof_word() { return g_free_hooks_beside_prof; }
inline bool free_hooks_beside_prof() { return g_free_hooks_beside_prof != 0; }
inline bool alloc_trace_only() { return g_alloc_hooks_beside_prof == kAllocTraceOnly; }
inline bool free_trace_only() { return g_free_hooks_beside_prof == kFreeTraceOnly; }
#else
inline bool alloc_hooks_beside_prof() { return __atomic_load_n(&g_alloc_hooks_beside_prof, __ATOMIC_RELAXED) != 0; }
inline uint32_t free_hooks_beside_prof_word() { return __atomic_load_n(&g_free_hooks_beside_prof, __ATOMIC_RELAXED); }
inline bool free_hooks_beside_prof() { return free_hooks_beside_prof_word() != 0; }
inline bool alloc_trace_only() { return __atomic_load_n(&g_alloc_hooks_beside_prof, __ATOMIC_RELAXED) == kAllocTraceOnly; }
inline bool free_trace_only() { return __atomic_load_n(&g_free_hooks_beside_prof, __ATOMIC_RELAXED) == kFreeTraceOnly; }
#endif

// Sets every cache's per-CPU copies of those bases (kmem.cpp), once the
// counters exist; a cache created later copies them itself. Weak: vmem
// and the page allocator also build without kmem (a host test does).
__attribute__((weak)) void kmem_prof_bases_set();
// The same for the page allocator's per-CPU caches (page.cpp).
void page_prof_bases_set();

// Adds delta to this CPU's counter of ref. The kernel's counters are each
// CPU's own and updated with interrupts masked, plain adds; the host's last
// slot is shared by threads beyond kMaxCpus, so its adds are atomic.
__attribute__((always_inline)) inline void prof_add_masked(uint32_t ref, int64_t delta) {
  int64_t& c = g_prof_counters[plat::cpu_slot()][ref - g_prof_ref0];
#if defined(MM_KERNEL)
  c += delta;
#else
  __atomic_fetch_add(&c, delta, __ATOMIC_RELAXED);
#endif
}
// Counts an object of bytes at tag on this CPU; returns the reference the
// object keeps, or 0 if tag is not one of this image's (then nothing was
// counted).
__attribute__((always_inline)) inline uint32_t prof_charge_masked(const AllocTag* tag, uint64_t bytes) {
  uint32_t ref = prof_ref(tag);
  if (__builtin_expect(ref - g_prof_ref0 >= g_prof_ntags, 0)) return 0;  // null, or not a tag of this image
  prof_add_masked(ref, prof_delta(bytes));
  return ref;
}
// The same with interrupts as they are (masks them in the kernel).
uint32_t prof_charge(const AllocTag* tag, uint64_t bytes);
// Adds calls allocations of no bytes to the tag of ref (interrupts masked):
// one allocation became several (page_split).
__attribute__((always_inline)) inline void prof_recount_masked(uint32_t ref, int64_t calls) {
  if (__builtin_expect(ref - g_prof_ref0 >= g_prof_ntags, 0)) return;
  prof_add_masked(ref, calls * kOneCall);
}
// Subtracts an object of bytes from the tag of ref (interrupts masked, as
// prof_charge_masked); a ref that names no tag goes to prof_untagged.
void prof_untagged(uint32_t ref, const char* what, const void* obj, uintptr_t caller);
__attribute__((always_inline)) inline void prof_uncharge_masked(uint32_t ref, uint64_t bytes, const char* what,
                                                                const void* obj, uintptr_t caller) {
  if (__builtin_expect(ref - g_prof_ref0 >= g_prof_ntags, 0)) return prof_untagged(ref, what, obj, caller);
  prof_add_masked(ref, -prof_delta(bytes));
}
// Subtracts an object of bytes from the tag of ref. A ref of 0 while
// counting is on (the object was allocated while it was off, or freed
// twice) is counted and reported once: what names the allocator, obj and
// caller the free.
void prof_uncharge(uint32_t ref, uint64_t bytes, const char* what, const void* obj, uintptr_t caller);

// The host library's switch (kmem_init, nothing in the kernel):
// MM_MEM_PROFILING=0|1|never, the bootarg's values; read before the page
// allocator is set up, and counting switched on once kmem is.
void prof_host_init();
void prof_host_start();

// Moves the allocated segment of vmp at p (size bytes) to tag (vmem.cpp).
void vmem_prof_retag(struct ::vmem* vmp, void* p, size_t size, const AllocTag* tag);

// The page allocator's references, one per frame (page.cpp): the frame's,
// or null if it has none (the mode is never, or pa is not RAM we manage).
uint32_t* page_tag_slot(uint64_t pa);

}  // namespace mm
