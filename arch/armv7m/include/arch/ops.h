// SPDX-License-Identifier: Apache-2.0
// ARMv7-M inline operations for portable code (see kernel/arch.h).
//
// One core, no MMU: the kernel runs privileged in Thread mode on the main
// stack (MSP); every exception is taken on the same stack. Interrupts are
// masked with PRIMASK. The per-CPU pointer is a plain variable (one core).
#pragma once
#include <cstdint>
#include <kernel/bitscan_builtin.h>  // highest_bit, lowest_bit

struct PerCpu;

namespace arch {

using IrqState = uint32_t;  // PRIMASK

// No MMU: every address is physical and nothing is mapped. RAM anywhere
// below the peripheral region (0x40000000) can be used.
constexpr bool kHasMmu = false;
constexpr uint64_t kDirectMapLimit = 0x40000000;

inline IrqState irq_save() {
  uint32_t primask;
  asm volatile("mrs %0, primask\n cpsid i" : "=r"(primask)::"memory");
  return primask;
}
inline void irq_restore(IrqState s) { asm volatile("msr primask, %0" ::"r"(s) : "memory"); }
inline void irq_enable() { asm volatile("cpsie i" ::: "memory"); }
inline void irq_disable() { asm volatile("cpsid i" ::: "memory"); }
inline bool irqs_enabled() {
  uint32_t primask;
  asm volatile("mrs %0, primask" : "=r"(primask));
  return !(primask & 1);
}

inline void cpu_relax() { asm volatile("yield" ::: "memory"); }

inline void wait_for_interrupt() { asm volatile("dsb\n wfi" ::: "memory"); }

// One core: its PerCpu is a variable (arch.cpp).
extern PerCpu* g_this_cpu;
inline PerCpu* this_cpu() { return g_this_cpu; }
inline void set_this_cpu(PerCpu* p) { g_this_cpu = p; }

// A 64-bit counter at the SysTick's clock (the CPU clock), built from the
// 24-bit SysTick and the count of its wraps (systick.cpp).
uint64_t counter();
uint64_t counter_frequency();
inline uint64_t coarse_counter() { return counter(); }
// No cycle counter QEMU models (the DWT's CYCCNT reads 0 there): the
// SysTick counter, which counts CPU clock cycles.
inline uint64_t cycles() { return counter(); }

inline uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// Frame records: Thumb code keeps none that can be walked (GCC's r7 points
// at the locals, not at a {fp, lr} pair). The offsets are never used:
// kHasFrameRecords is false and backtraces come from the unwinder
// (unwind.cpp, over the image's .ARM.exidx tables).
constexpr bool kHasFrameRecords = false;
constexpr int kFrameSavedFp = 0;
constexpr int kFrameSavedRa = 4;
constexpr bool kLeafFramesSaveOnlyFp = false;

// No static branches: the allocators' hooks are a flag (mm/platform_inline.h).

}  // namespace arch
