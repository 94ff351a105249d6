// Interrupt routing between controllers (GIC, PLIC) and handlers.
//
// A controller driver registers an IrqChip; drivers register handlers by the
// interrupt number the DTB gives (already translated to the controller's
// numbering). The arch's IRQ entry calls irq::dispatch().
#pragma once
#include <cstdint>

namespace fdt {
class Tree;
}

struct IrqChip {
  const char* name;
  void (*init_cpu)();                             // per-core set-up, on that core
  void (*enable)(unsigned irq, unsigned cpu);     // route irq to cpu and unmask
  void (*disable)(unsigned irq);
  unsigned (*claim)();                            // next pending irq, or kNoIrq
  void (*complete)(unsigned irq);
  void (*send_ipi)(unsigned cpu);                 // may be null (RISC-V uses SBI)
};

namespace irq {
constexpr unsigned kNoIrq = ~0u;
constexpr unsigned kMaxIrq = 1024;
using Handler = void (*)(unsigned irq, void* arg);

void set_chip(const IrqChip* chip);
const IrqChip* chip();
// name shows in the shell's `irqs` listing.
void register_handler(unsigned irq, Handler h, void* arg, const char* name = nullptr);
void enable(unsigned irq, unsigned cpu);
// Claims and handles every pending interrupt of the controller.
void dispatch();
// Decodes the interrupt specifier of `node` (index i) for the active chip.
bool from_dtb(const fdt::Tree& tree, int node, unsigned i, unsigned& irq_out);
uint64_t count(unsigned irq);
}  // namespace irq

// Controller drivers probe by DTB compatible through this table.
struct IrqChipDriver {
  const char* compatible;
  // Maps and initialises the controller; returns false if unusable.
  bool (*probe)(const fdt::Tree& tree, int node);
  // Translates an "interrupts" specifier (cells) to the chip's irq number.
  bool (*translate)(const uint32_t* cells, unsigned ncells, unsigned& irq_out);
};
#define IRQCHIP_DRIVER(name, ...) \
  extern const IrqChipDriver name __attribute__((section(".drivers.irqchip"), used)) = {__VA_ARGS__}
