// SPDX-License-Identifier: Apache-2.0
// Interrupt dispatch: the active controller's claim/complete around a table
// of handlers indexed by interrupt number. Handlers are registered at boot
// (before interrupts are enabled) and never change afterwards. Dispatch may
// run on any core without a lock: register_handler writes arg and name,
// then releases them with the store of fn; dispatch loads fn with acquire
// before it reads arg. The counts are relaxed statistics.
#include <kernel/context.h>
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

struct Domain {
  const IrqChip* chip = nullptr;
  unsigned base = 0, count = 0;
};
// Written by add_chip on the boot core before interrupts are enabled and
// before the other cores start (published by smp::start_secondaries'
// fence); read-only afterwards.
Domain g_domains[irq::kMaxDomains];
int g_ndomains;
const IrqChip* g_chip;  // the root's: g_domains[0].chip

// The domain whose numbers hold n, or null.
const Domain* domain_of(unsigned n) {
  for (int i = 0; i < g_ndomains; i++)
    if (n >= g_domains[i].base && n - g_domains[i].base < g_domains[i].count) return &g_domains[i];
  return nullptr;
}

void run(unsigned n) {
  irq::Handler fn = n < irq::kMaxIrq ? g_slots[n].fn.load(std::memory_order_acquire) : nullptr;
  if (fn) {
    g_slots[n].count.fetch_add(1, std::memory_order_relaxed);
    context::Scope in(context::make(context::kIrq, n));  // what the handler allocates is the interrupt's
    fn(n, g_slots[n].arg);
  }
}

// The parent's handler for a cascaded chip: everything pending there, in
// its numbering shifted by its base; the parent completes its own line
// after this returns.
void cascade_handler(unsigned, void* arg) {
  const Domain* d = static_cast<const Domain*>(arg);
  for (;;) {
    unsigned n = d->chip->claim();
    if (n == irq::kNoIrq) return;
    run(d->base + n);
    d->chip->complete(n);
  }
}
}  // namespace

namespace irq {

int add_chip(const IrqChip* chip, unsigned count) {
  if (g_ndomains == kMaxDomains) return -1;
  unsigned base = g_ndomains ? g_domains[g_ndomains - 1].base + g_domains[g_ndomains - 1].count : 0;
  if (count > kMaxIrq - base) {
    if (g_ndomains) return -1;
    count = kMaxIrq;  // a root larger than the table: its low numbers
  }
  g_domains[g_ndomains] = {chip, base, count};
  if (g_ndomains == 0) g_chip = chip;
  return g_ndomains++;
}

void set_cascade(int child, unsigned parent_irq, unsigned cpu) {
  ASSERT(child > 0 && child < g_ndomains);
  register_handler(parent_irq, cascade_handler, &g_domains[child], g_domains[child].chip->name);
  enable(parent_irq, cpu);
}

unsigned domain_base(int domain) { return g_domains[domain].base; }
int domain_count() { return g_ndomains; }
const IrqChip* domain_chip(int domain) { return g_domains[domain].chip; }
const IrqChip* chip() { return g_chip; }

void init_cpu() {
  for (int i = 0; i < g_ndomains; i++)
    if (g_domains[i].chip->init_cpu) g_domains[i].chip->init_cpu();
}

void register_handler(unsigned irq, Handler h, void* arg, const char* name) {
  ASSERT(irq < kMaxIrq);
  g_slots[irq].arg = arg;
  g_slots[irq].name = name ? name : "?";
  g_slots[irq].fn.store(h, std::memory_order_release);
}

void enable(unsigned irq, unsigned cpu) {
  if (const Domain* d = domain_of(irq)) d->chip->enable(irq - d->base, cpu);
}

void dispatch() {
  if (!g_chip) return;
  for (;;) {
    unsigned n = g_chip->claim();
    if (n == kNoIrq) return;
    run(n);  // the root's base is 0
    g_chip->complete(n);
  }
}

uint64_t count(unsigned irq) { return irq < kMaxIrq ? g_slots[irq].count.load(std::memory_order_relaxed) : 0; }

// name is written before fn is released (register_handler): read after fn's acquire.
const char* name(unsigned irq) {
  if (irq >= kMaxIrq || !g_slots[irq].fn.load(std::memory_order_acquire)) return nullptr;
  return g_slots[irq].name;
}

}  // namespace irq

namespace {
int cmd_irqs(int argc, char** argv) {
  if (argc != 1) return shell::usage_error(argv[0], "takes no arguments");
  kprintf("controller: %s\n", g_chip ? g_chip->name : "none");
  for (int i = 1; i < g_ndomains; i++)
    kprintf("  cascade: %s, irqs %u-%u\n", g_domains[i].chip->name, g_domains[i].base,
            g_domains[i].base + g_domains[i].count - 1);
  for (unsigned i = 0; i < irq::kMaxIrq; i++) {
    if (!g_slots[i].fn.load(std::memory_order_acquire)) continue;
    kprintf("  irq %4u %-10s %llu\n", i, g_slots[i].name,
            static_cast<unsigned long long>(g_slots[i].count.load(std::memory_order_relaxed)));
  }
  return 0;
}
}  // namespace
SHELL_COMMAND(irqs, "interrupts with handlers and how often each fired", cmd_irqs);
