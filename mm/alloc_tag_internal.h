// Allocation profiling, the allocators' side (internal to mm/; the theory is
// in alloc_tag.cpp, the interface in mm/include/mm/alloc_tag.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/alloc_tag.h>
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

// The counters: per CPU slot, one per tag (alloc_tag.cpp, 2). Set once,
// before counting is first switched on (g_prof_counting's release orders
// them before any counting path reads them).
struct TagCounter {
  int64_t bytes;
  int64_t calls;
};
extern TagCounter* g_prof_counters[plat::kCpuSlots];
extern uintptr_t g_prof_tags;   // the first tag's address
extern uint32_t g_prof_ntags;

// Counts an object of bytes at tag on this CPU; returns the reference the
// object keeps (tag index + 1), or 0 if tag is not one of this image's
// (then nothing was counted). The kernel's counters are each CPU's own and
// updated with interrupts masked, plain adds; the host's last slot is
// shared by threads beyond kMaxCpus, so its adds are atomic.
__attribute__((always_inline)) inline uint32_t prof_charge_masked(const AllocTag* tag, uint64_t bytes) {
  uintptr_t i = (reinterpret_cast<uintptr_t>(tag) - g_prof_tags) / sizeof(AllocTag);
  if (__builtin_expect(i >= g_prof_ntags, 0)) return 0;  // null, or not a tag of this image
  TagCounter& c = g_prof_counters[plat::cpu_slot()][i];
#if defined(MM_KERNEL)
  c.bytes += static_cast<int64_t>(bytes);
  c.calls++;
#else
  __atomic_fetch_add(&c.bytes, static_cast<int64_t>(bytes), __ATOMIC_RELAXED);
  __atomic_fetch_add(&c.calls, int64_t{1}, __ATOMIC_RELAXED);
#endif
  return static_cast<uint32_t>(i) + 1;
}
// The same with interrupts as they are (masks them in the kernel).
uint32_t prof_charge(const AllocTag* tag, uint64_t bytes);
// Adds calls allocations of no bytes to the tag of ref (interrupts masked):
// one allocation became several (page_split).
__attribute__((always_inline)) inline void prof_recount_masked(uint32_t ref, int64_t calls) {
  if (__builtin_expect(ref - 1 >= g_prof_ntags, 0)) return;
  TagCounter& c = g_prof_counters[plat::cpu_slot()][ref - 1];
#if defined(MM_KERNEL)
  c.calls += calls;
#else
  __atomic_fetch_add(&c.calls, calls, __ATOMIC_RELAXED);
#endif
}
// Subtracts an object of bytes from the tag of ref (interrupts masked, as
// prof_charge_masked); a ref that names no tag goes to prof_untagged.
void prof_untagged(uint32_t ref, const char* what, const void* obj, uintptr_t caller);
__attribute__((always_inline)) inline void prof_uncharge_masked(uint32_t ref, uint64_t bytes, const char* what,
                                                                const void* obj, uintptr_t caller) {
  if (__builtin_expect(ref - 1 >= g_prof_ntags, 0)) return prof_untagged(ref, what, obj, caller);
  TagCounter& c = g_prof_counters[plat::cpu_slot()][ref - 1];
#if defined(MM_KERNEL)
  c.bytes -= static_cast<int64_t>(bytes);
  c.calls--;
#else
  __atomic_fetch_sub(&c.bytes, static_cast<int64_t>(bytes), __ATOMIC_RELAXED);
  __atomic_fetch_sub(&c.calls, int64_t{1}, __ATOMIC_RELAXED);
#endif
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
