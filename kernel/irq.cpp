// Interrupt dispatch: the active controller's claim/complete around a table
// of handlers indexed by interrupt number. Handlers are registered at boot
// (before interrupts are enabled) and never change afterwards. Dispatch may
// run on any core without a lock: register_handler writes arg and name,
// then releases them with the store of fn; dispatch loads fn with acquire
// before it reads arg. The counts are relaxed statistics.
#include <kernel/fdt.h>
#include <kernel/irq.h>
#include <kernel/panic.h>
#include <kernel/console.h>
#include <kernel/shell.h>
#include <atomic>

namespace {
struct Slot {
  std::atomic<irq::Handler> fn{nullptr};
  void* arg = nullptr;
  const char* name = nullptr;
  std::atomic<uint64_t> count{0};
};
Slot g_slots[irq::kMaxIrq];
const IrqChip* g_chip;
}  // namespace

namespace irq {

void set_chip(const IrqChip* chip) { g_chip = chip; }
const IrqChip* chip() { return g_chip; }

void register_handler(unsigned irq, Handler h, void* arg, const char* name) {
  ASSERT(irq < kMaxIrq);
  g_slots[irq].arg = arg;
  g_slots[irq].name = name ? name : "?";
  g_slots[irq].fn.store(h, std::memory_order_release);
}

void enable(unsigned irq, unsigned cpu) {
  if (g_chip) g_chip->enable(irq, cpu);
}

void dispatch() {
  if (!g_chip) return;
  for (;;) {
    unsigned n = g_chip->claim();
    if (n == kNoIrq) return;
    irq::Handler fn = n < kMaxIrq ? g_slots[n].fn.load(std::memory_order_acquire) : nullptr;
    if (fn) {
      g_slots[n].count.fetch_add(1, std::memory_order_relaxed);
      fn(n, g_slots[n].arg);
    }
    g_chip->complete(n);
  }
}

uint64_t count(unsigned irq) { return irq < kMaxIrq ? g_slots[irq].count.load(std::memory_order_relaxed) : 0; }

}  // namespace irq

namespace {
int cmd_irqs(int argc, char** argv) {
  if (argc != 1) return shell::usage_error(argv[0], "takes no arguments");
  kprintf("controller: %s\n", g_chip ? g_chip->name : "none");
  for (unsigned i = 0; i < irq::kMaxIrq; i++) {
    if (!g_slots[i].fn.load(std::memory_order_acquire)) continue;
    kprintf("  irq %4u %-10s %llu\n", i, g_slots[i].name,
            static_cast<unsigned long long>(g_slots[i].count.load(std::memory_order_relaxed)));
  }
  return 0;
}
}  // namespace
SHELL_COMMAND(irqs, "interrupts with handlers and how often each fired", cmd_irqs);
