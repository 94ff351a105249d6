// mm/'s inline platform operations in the kernel (the contract is in
// mm/include/mm/platform.h).
#pragma once
#include <kernel/config.h>
#include <kernel/percpu.h>
#include <kernel/spinlock.h>
#include <arch/ops.h>

namespace mm::plat {
extern bool g_alloc_hooks;  // kernel/mm/platform.cpp: where the arch has no static branches
}

namespace mm::plat {

constexpr unsigned kMaxCpus = ::kMaxCpus;
constexpr unsigned kCpuSlots = kMaxCpus + 1;  // see mm/host/mm_platform.h
inline unsigned cpu_id() { return arch::this_cpu()->index; }
inline unsigned cpu_slot() { return cpu_id(); }
inline unsigned cpu_count() { return g_cpu_count; }

inline void cpu_relax() { arch::cpu_relax(); }
inline unsigned highest_bit(uintptr_t x) { return arch::highest_bit(x); }
inline unsigned lowest_bit(uintptr_t x) { return arch::lowest_bit(x); }

using IrqState = arch::IrqState;
inline IrqState irq_save() { return arch::irq_save(); }
inline void irq_restore(IrqState s) { arch::irq_restore(s); }
inline bool irqs_masked() { return !arch::irqs_enabled(); }

using Lock = SpinLock;

inline uint64_t cycles() { return arch::cycles(); }

// The allocators' hook switch (mm/hooks.h): a static branch (one nop,
// patched into a branch by kernel/static_branch.cpp while a feature has the
// hooks on) where the arch has them.
__attribute__((always_inline)) inline bool alloc_hooks_on() {
#if defined(ARCH_HAS_STATIC_BRANCH)
  return arch::static_branch_kmemtrace();
#else
  return __builtin_expect(g_alloc_hooks, 0);
#endif
}

// RAM is identity-mapped in the kernel.
inline void* phys_to_virt(uint64_t pa) { return reinterpret_cast<void*>(static_cast<uintptr_t>(pa)); }
inline uint64_t virt_to_phys(const void* va) { return reinterpret_cast<uintptr_t>(va); }

}  // namespace mm::plat
