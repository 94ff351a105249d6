// The kernel side of mm/'s platform interface (mm/platform.h), and bringing
// the memory subsystem up from what the DTB said.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/panic.h>
#include <kernel/smp.h>
#include <mm/kmem.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <cstdarg>

namespace mm::plat {

bool map_heap(uintptr_t va, uint64_t pa, size_t size) {
  return arch::map(va, pa, size, arch::kMapRead | arch::kMapWrite);
}

void unmap_heap(uintptr_t va, size_t size) { arch::unmap(va, size); }

uint64_t heap_to_phys(uintptr_t va) {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  if (va < base || va - base >= size) return 0;
  return arch::translate(va);
}

void heap_window(uintptr_t& base, size_t& size) { arch::heap_window(base, size); }

void on_each_cpu(void (*fn)(void*), void* arg) {
  if (arch::irqs_enabled()) {
    smp::call_on_all(fn, arg);
  } else {
    fn(arg);  // cannot wait for other cores here: do this core's share
  }
}

void set_cpu_exit_hook(void (*)()) {}  // kernel CPUs never leave

void wait_for_memory() {
  // Let interrupts (and the work they trigger on other cores) happen.
  arch::IrqState s = arch::irq_save();
  arch::wait_for_interrupt();
  arch::irq_restore(s);
}

void log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kvprintf(fmt, ap);
  va_end(ap);
  kprintf("\n");
}

void fatal(const char* fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  kvsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  panic("%s", buf);
}

}  // namespace mm::plat

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
