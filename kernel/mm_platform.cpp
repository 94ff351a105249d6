// The kernel side of mm/'s platform interface (mm/platform.h).
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/panic.h>
#include <kernel/smp.h>
#include <mm/platform.h>
#include <cstdarg>

namespace mm::plat {

bool map_heap(uintptr_t va, uint64_t pa, size_t size) {
  return arch::map(va, pa, size, arch::kMapRead | arch::kMapWrite);
}

void unmap_heap(uintptr_t va, size_t size) { arch::unmap(va, size); }
void unmap_heap_deferred(uintptr_t va, size_t size) { arch::unmap_deferred(va, size); }
void heap_tlb_sync() { arch::tlb_sync(); }

uint64_t heap_to_phys(uintptr_t va) {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  if (va < base || va - base >= size) return 0;
  return arch::translate(va);
}

void heap_window(uintptr_t& base, size_t& size) { arch::heap_window(base, size); }

void on_each_cpu(void (*fn)(void*), void* arg) {
  if (arch::irqs_enabled() && !smp::in_cross_call()) {
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

