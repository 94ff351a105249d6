// SPDX-License-Identifier: Apache-2.0
// Interrupt routing between controllers (GIC, PLIC, the Pi's two) and
// handlers.
//
// Each controller driver registers an IrqChip (add_chip), which becomes a
// domain: a range of the kernel's interrupt numbers, [base, base + count),
// where the chip's own number n is base + n. The first chip is the root:
// the arch's IRQ entry calls irq::dispatch(), which claims from it. A chip
// whose output is an input of another (the DTB's interrupt-parent chain:
// the BCM2835 controller behind the BCM2836 local one) is a cascade: its
// parent's interrupt runs a handler that claims from the child, so chains
// of any depth work the same way. Drivers register handlers by the number
// from_dtb gives (the specifier translated by the node's interrupt parent,
// plus that domain's base).
#pragma once
#include <cstdint>

namespace fdt {
class Tree;
}

struct IrqChip {
  const char* name;
  void (*init_cpu)();                          // per-core set-up, on that core
  void (*enable)(unsigned irq, unsigned cpu);  // route irq to cpu and unmask
  void (*disable)(unsigned irq);
  unsigned (*claim)();  // next pending irq, or kNoIrq
  void (*complete)(unsigned irq);
  void (*send_ipi)(unsigned cpu);  // may be null (RISC-V uses SBI)
};

namespace irq {
constexpr unsigned kNoIrq = ~0u;
#ifndef MAGPIE_MAX_IRQ
#define MAGPIE_MAX_IRQ 1024
#endif
constexpr unsigned kMaxIrq = MAGPIE_MAX_IRQ;  // an arch with few (armv7m: the NVIC's) sets it
using Handler = void (*)(unsigned irq, void* arg);

constexpr int kMaxDomains = 4;
// Registers chip as the next domain with count interrupt numbers (the root
// first, at base 0); returns the domain's index, or -1 if the numbers or
// the domains are used up. Boot core, before interrupts are enabled.
int add_chip(const IrqChip* chip, unsigned count);
// Makes domain child a cascade behind parent_irq (a number of an earlier
// domain): its handler claims from child; parent_irq is enabled on cpu.
void set_cascade(int child, unsigned parent_irq, unsigned cpu);
unsigned domain_base(int domain);
int domain_count();
const IrqChip* domain_chip(int domain);
// The root chip (null before one is probed).
const IrqChip* chip();
// Every chip's per-core set-up, on the calling core.
void init_cpu();
// name shows in the shell's `irqs` listing.
void register_handler(unsigned irq, Handler h, void* arg, const char* name = nullptr);
void enable(unsigned irq, unsigned cpu);
// Claims and handles every pending interrupt of the controller.
void dispatch();
// Decodes the interrupt specifier of `node` (index i) for the active chip.
bool from_dtb(const fdt::Tree& tree, int node, unsigned i, unsigned& irq_out);
uint64_t count(unsigned irq);
// The name its handler was registered with; null if none.
const char* name(unsigned irq);
}  // namespace irq

// Controller drivers probe by DTB compatible through this table.
struct IrqChipDriver {
  const char* compatible;
  // Maps and initialises the controller and registers it (irq::add_chip);
  // returns false if unusable.
  bool (*probe)(const fdt::Tree& tree, int node);
  // Translates an "interrupts" specifier (cells) to the chip's irq number.
  bool (*translate)(const uint32_t* cells, unsigned ncells, unsigned& irq_out);
};
#define IRQCHIP_DRIVER(name, ...) \
  extern const IrqChipDriver name __attribute__((section(".drivers.irqchip"), used)) = {__VA_ARGS__}
