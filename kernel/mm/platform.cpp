// SPDX-License-Identifier: Apache-2.0
// The kernel side of mm/'s platform interface (mm/platform.h).
#include <kernel/arch.h>
#include <kernel/backtrace.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/context.h>
#include <kernel/format.h>
#include <kernel/panic.h>
#include <kernel/smp.h>
#include <kernel/timer.h>
#include <kernel/static_branch.h>
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

bool g_alloc_hooks, g_free_hooks;
namespace {
static_branch::Way way_of(HookMode mode) {
  return mode == HookMode::kOff      ? static_branch::Way::kOff
         : mode == HookMode::kHooked ? static_branch::Way::kTarget
                                     : static_branch::Way::kAlt;
}
}  // namespace
bool set_alloc_hooks(HookMode mode) {
  __atomic_store_n(&g_alloc_hooks, mode != HookMode::kOff, __ATOMIC_RELAXED);
  return static_branch::set(static_branch::Key::kAllocHooks, way_of(mode));
}
bool set_free_hooks(HookMode mode) {
  __atomic_store_n(&g_free_hooks, mode != HookMode::kOff, __ATOMIC_RELAXED);
  return static_branch::set(static_branch::Key::kFreeHooks, way_of(mode));
}

void stop_others(void (*fn)(void*), void* arg) { smp::freeze_others(fn, arg); }

// ticks() (platform_inline.h): the reciprocal of the counter's rate per
// tick, floor((2^64 - 1) / d). Written once on the boot CPU before the
// others start (their start orders it).
uint64_t g_tick_reciprocal;
void init_ticks() {
  uint64_t per_tick = arch::counter_frequency() / kTimerHz;
  g_tick_reciprocal = ~uint64_t{0} / (per_tick ? per_tick : 1);
}
unsigned ticks_per_second() { return kTimerHz; }
uint64_t monotonic_ns() { return timer::now_ns(); }
bool stopped_cpus_may_hold_locks() { return false; }

void context_name(uint32_t id, char* out, size_t len) { ::context::name(id, out, len); }

// The writable image sections (per-CPU data, g_percpu, is in .bss).
void for_each_root(void (*fn)(uintptr_t lo, uintptr_t hi, const char* name, void* arg), void* arg) {
  fn(reinterpret_cast<uintptr_t>(__data_start), reinterpret_cast<uintptr_t>(__data_end), ".data", arg);
  fn(reinterpret_cast<uintptr_t>(__bss_start), reinterpret_cast<uintptr_t>(__bss_end), ".bss", arg);
}

namespace {
// The caller's part: its callee-saved registers spilled into this frame
// (__builtin_unwind_init), scanned from here to the stack's top.
__attribute__((noinline)) void own_stack(void (*fn)(uintptr_t, uintptr_t, unsigned, void*), void* arg) {
  __builtin_unwind_init();
  // The lowest of the frame pointer and a local: where the arch saves the
  // callee-saved registers, below or above the frame pointer, is covered.
  volatile uintptr_t here = 0;
  uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t local = reinterpret_cast<uintptr_t>(&here);
  fn(local < sp ? local : sp, ::this_cpu().stack_top, cpu_id(), arg);
}
}  // namespace

void for_each_stack(void (*fn)(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg), void* arg) {
  unsigned self = cpu_id();
  for_each_cpu([&](PerCpu& c) {
    if (c.index == self || !c.online.load(std::memory_order_acquire)) return;
    // frozen_sp was stored before the core counted itself frozen (see percpu.h).
    uintptr_t sp = __atomic_load_n(&c.frozen_sp, __ATOMIC_ACQUIRE);
    if (sp >= c.stack_bottom && sp < c.stack_top) fn(sp, c.stack_top, c.index, arg);
  });
  own_stack(fn, arg);
}

bool describe_region(uintptr_t addr, const char*& name, uintptr_t& start, size_t& size, unsigned& cpu) {
  cpu = ~0u;
  // Stacks first: the secondaries' live in .bss.
  for (unsigned i = 0; i < g_cpu_count; i++) {
    uintptr_t top = g_percpu[i].stack_top;
    if (top && addr < top && addr >= top - kKernelStackSize) {
      static constexpr const char* kStackNames[] = {"cpu 0's stack", "cpu 1's stack", "cpu 2's stack",
                                                    "cpu 3's stack", "cpu 4's stack", "cpu 5's stack",
                                                    "cpu 6's stack", "cpu 7's stack"};
      static_assert(sizeof(kStackNames) / sizeof(kStackNames[0]) >= kMaxCpus);
      name = kStackNames[i];
      start = top - kKernelStackSize;
      size = kKernelStackSize;
      cpu = i;
      return true;
    }
  }
  struct Section {
    const char* name;
    const char* start;
    const char* end;
  };
  const Section sections[] = {
      {"kernel text", __text_start, __text_end},
      {"kernel rodata", __rodata_start, __rodata_end},
      {"kernel data", __data_start, __data_end},
      {"kernel bss", __bss_start, __bss_end},
      {"the kernel's .noinit area (boot page tables, overflow stacks, stack guards)", __bss_end, __kernel_end},
  };
  for (const Section& s : sections) {
    auto b = reinterpret_cast<uintptr_t>(s.start), e = reinterpret_cast<uintptr_t>(s.end);
    if (addr >= b && addr < e) {
      name = s.name;
      start = b;
      size = e - b;
      return true;
    }
  }
  return false;
}

void wait_for_memory() {
  // Let interrupts (and the work they trigger on other cores) happen.
  arch::IrqState s = arch::irq_save();
  arch::wait_for_interrupt();
  arch::irq_restore(s);
}

// The kernel's frame-pointer walk from this function's own frame, whose
// record holds the return address into our caller: that is pcs[0] before
// the skip.
__attribute__((noinline)) unsigned backtrace(uintptr_t* pcs, unsigned max, unsigned skip) {
  constexpr unsigned kWalk = 48;
  uintptr_t walk[kWalk];
  size_t want = size_t{max} + skip;
  if (want > kWalk) want = kWalk;
  size_t got = ::backtrace::walk(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), nullptr, walk, want);
  unsigned n = 0;
  for (size_t i = skip; i < got && n < max; i++) pcs[n++] = walk[i];
  return n;
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

