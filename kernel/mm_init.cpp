// Brings the memory subsystem up from what the DTB said.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/panic.h>
#include <mm/kmem.h>
#include <mm/page.h>

namespace mm_boot {

uint64_t g_boot_free_pages;

// Gives the page allocator every RAM bank minus the reserved ranges, then
// brings vmem and kmem up.
void init() {
  mm::PhysRange banks[kMaxMemBanks];
  mm::PhysRange reserved[kMaxReserved];
  unsigned nb = 0;
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t base = g_boot.mem[i].base, end = base + g_boot.mem[i].size;
    uint64_t limit = arch::kDirectMapLimit;
    if (base >= limit) {
      kprintf("mm: RAM at 0x%llx is beyond what this arch maps; left unused\n", static_cast<unsigned long long>(base));
      continue;
    }
    if (end > limit) {
      kprintf("mm: RAM above 0x%llx is beyond what this arch maps; left unused\n", static_cast<unsigned long long>(limit));
      end = limit;
    }
    banks[nb++] = {base, end - base};
  }
  for (unsigned i = 0; i < g_boot.reserved_count; i++) reserved[i] = {g_boot.reserved[i].base, g_boot.reserved[i].size};
  if (!mm::page_init(banks, nb, reserved, g_boot.reserved_count)) panic("mm: no usable RAM for the page allocator");
  arch::set_table_allocator([]() -> uintptr_t {
    void* p = mm::page_alloc_va(0, KM_NOSLEEP | KM_PUSHPAGE);
    if (!p) return 0;
    __builtin_memset(p, 0, mm::kPageBytes);
    return reinterpret_cast<uintptr_t>(p);
  });
  mm::kmem_init();
  mm::PageStats st;
  mm::page_stats(st);
  g_boot_free_pages = st.free_pages;
}

}  // namespace mm_boot
