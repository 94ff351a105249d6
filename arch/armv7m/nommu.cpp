// SPDX-License-Identifier: Apache-2.0
// ARMv7-M has no MMU: every address the kernel uses is physical, and the
// memory-map part of kernel/arch.h is the identity with nothing to change.
//
// 1. map() can only "map" an address to itself (va == pa): that is what
//    is already there. unmap() and TLB maintenance have nothing to do.
//    translate() is the identity; mapping_flags() says every address is
//    readable, writable and executable, which is the truth here (the MPU,
//    which could say otherwise, is left off).
// 2. mm/ does not map its heap at all on this arch: its platform says the
//    heap is physical (mm::plat::kPhysicalHeap, kernel/mm/include), so
//    segkmem hands out runs of contiguous frames at their own addresses.
// 3. No static branches (kernel/static_branch.cpp is not asked to patch);
//    no cores to park.
// 4. Tests of MMU features (guard pages, W^X, page tables) declare a skip
//    on !arch::kHasMmu.
#include <kernel/arch.h>

namespace arch {

bool map(uintptr_t va, uint64_t pa, size_t, unsigned) { return va == pa; }
void unmap(uintptr_t, size_t) {}
void unmap_deferred(uintptr_t, size_t) {}
void tlb_sync() {}

uint32_t static_branch_insn(uintptr_t, uintptr_t, bool) { return 0; }
void text_written(uintptr_t, uintptr_t) {}
void sync_instructions() { asm volatile("dsb\n isb" ::: "memory"); }
bool static_branch_reachable(uintptr_t, uintptr_t) { return false; }
bool text_patch_stops_others() { return false; }

uintptr_t park_begin() { return irq_save(); }
void park_poll() {}
void park_sleep() { wait_for_interrupt(); }
void park_end(uintptr_t state) { irq_restore(static_cast<IrqState>(state)); }

uint64_t translate(uintptr_t va) { return va; }
unsigned mapping_flags(uintptr_t) { return kMapRead | kMapWrite | kMapExec; }
uint32_t return_instruction() { return 0x4770; }  // bx lr

// Physical addresses up to the peripherals: mm/ places its physical heap in
// the RAM the DTB gives, within this.
void heap_window(uintptr_t& base, size_t& size) {
  base = 0;
  size = static_cast<size_t>(kDirectMapLimit);
}

uintptr_t map_device(uint64_t pa, size_t) { return static_cast<uintptr_t>(pa); }
void boot_map_range(uint64_t, uint64_t, unsigned) {}
void set_table_allocator(TableAllocator) {}
const char* mmu_description() { return "none (ARMv7-M: physical addresses, no MMU)"; }

}  // namespace arch
