// Allocation profiling, the allocators' side (internal to mm/; the theory is
// in alloc_tag.cpp, the interface in mm/include/mm/alloc_tag.h).
#pragma once
#include <cstddef>
#include <cstdint>

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

// Counts an object of bytes at tag on this CPU; returns the reference the
// object keeps (tag index + 1), or 0 if tag is not one of this image's
// (then nothing was counted).
uint32_t prof_charge(const AllocTag* tag, uint64_t bytes);
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
