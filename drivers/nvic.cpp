// SPDX-License-Identifier: Apache-2.0
// The ARMv7-M Nested Vectored Interrupt Controller ("arm,armv7m-nvic").
//
// Every external interrupt has its own vector, so the core already knows
// which one it is taking: the exception number in IPSR, minus 16. claim()
// returns that number once per exception and kNoIrq the second time (which
// readies it for the next exception); complete() has nothing to do, since
// the exception return ends it. Interrupts never preempt one another here
// (every priority stays 0, arch/armv7m/arch.cpp), so one exception is
// dispatched at a time.
//
// Registers (ARMv7-M ARM B3.4): ISER at +0x000 and ICER at +0x080 from the
// DTB's reg (0xe000e100), 32 interrupts a word; ICTR (0xe000e004) says how
// many words there are.
#include <kernel/arch.h>
#include <kernel/fdt.h>
#include <kernel/irq.h>
#include <cstdint>

namespace {
constexpr uintptr_t kIser = 0x000, kIcer = 0x080, kIpr = 0x300;
constexpr uintptr_t kIctr = 0xe000e004;

uintptr_t g_base;
unsigned g_count;
unsigned g_claimed = irq::kNoIrq;

inline volatile uint32_t& reg(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_base + off); }

void nvic_init_cpu() {
  for (unsigned i = 0; i < g_count; i += 4) reg(kIpr + i) = 0;  // every priority 0: no preemption
}

void nvic_enable(unsigned irq, unsigned) {
  if (irq < g_count) reg(kIser + 4 * (irq / 32)) = 1u << (irq % 32);
}

void nvic_disable(unsigned irq) {
  if (irq < g_count) reg(kIcer + 4 * (irq / 32)) = 1u << (irq % 32);
}

unsigned nvic_claim() {
  uint32_t ipsr;
  asm volatile("mrs %0, ipsr" : "=r"(ipsr));
  ipsr &= 0x1ff;
  unsigned irq = ipsr >= 16 ? ipsr - 16 : irq::kNoIrq;
  if (irq == g_claimed || irq == irq::kNoIrq) {
    g_claimed = irq::kNoIrq;
    return irq::kNoIrq;
  }
  g_claimed = irq;
  return irq;
}

void nvic_complete(unsigned) {}

const IrqChip kNvic = {"nvic", nvic_init_cpu, nvic_enable, nvic_disable, nvic_claim, nvic_complete, nullptr};

bool nvic_probe(const fdt::Tree& t, int node) {
  uint64_t base, size;
  if (!t.reg(node, 0, base, size)) return false;
  g_base = arch::map_device(base, size);
  g_count = 32 * ((*reinterpret_cast<volatile uint32_t*>(kIctr) & 0xf) + 1);
  return irq::add_chip(&kNvic, g_count) >= 0;
}

bool nvic_translate(const uint32_t* cells, unsigned ncells, unsigned& out) {
  if (ncells < 1 || cells[0] >= g_count) return false;
  out = cells[0];
  return true;
}
}  // namespace

IRQCHIP_DRIVER(irqchip_armv7m_nvic, "arm,armv7m-nvic", nvic_probe, nvic_translate);
