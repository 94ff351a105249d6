// SPDX-License-Identifier: Apache-2.0
// RISC-V Platform-Level Interrupt Controller (SiFive PLIC, QEMU virt's).
//
// Sources 1..ndev each have a priority (0 = never delivered). Each interrupt
// target ("context": one privilege mode of one hart) has a bit per source in
// its enable array, a priority threshold, and a claim/complete register:
// reading it claims the highest pending enabled source (0 if none), writing
// the number back completes it. The kernel uses every hart's S-mode context;
// which context that is comes from the node's interrupts-extended: entry i
// (<phandle of a hart's interrupt-controller, cause>) describes context i,
// and cause 9 is the supervisor external interrupt.
//
// Routing: enable(irq, cpu) sets the source's bit in that cpu's context only
// (like the GIC's target register). IPIs do not go through the PLIC: the
// arch sends them with SBI. g_lock serialises the read-modify-write of the
// enable words.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/config.h>
#include <kernel/console.h>
#include <kernel/fdt.h>
#include <kernel/irq.h>
#include <kernel/percpu.h>
#include <kernel/spinlock.h>

namespace {
constexpr uintptr_t kPriority = 0x0, kEnable = 0x2000, kEnableStride = 0x80, kContext = 0x200000,
                    kContextStride = 0x1000, kThreshold = 0x0, kClaim = 0x4;
constexpr uint32_t kCauseSupervisorExternal = 9;
constexpr unsigned kMaxSources = 1023;

uintptr_t g_base;
unsigned g_ndev;
int g_ctx[kMaxCpus];  // S-mode context of each cpu index, -1 if it has none
SpinLock g_lock;

inline volatile uint32_t& r32(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_base + off); }
inline volatile uint32_t& enable_word(int ctx, unsigned irq) {
  return r32(kEnable + kEnableStride * static_cast<unsigned>(ctx) + 4 * (irq / 32));
}
inline volatile uint32_t& ctx_reg(int ctx, uintptr_t off) {
  return r32(kContext + kContextStride * static_cast<unsigned>(ctx) + off);
}

void plic_init_cpu() {
  int ctx = g_ctx[cpu_id()];
  if (ctx < 0) return;
  ctx_reg(ctx, kThreshold) = 0;
  asm volatile("csrs sie, %0" ::"r"(1ul << kCauseSupervisorExternal) : "memory");
}

void plic_enable(unsigned irq, unsigned cpu) {
  if (irq == 0 || irq > g_ndev || cpu >= g_boot.cpu_count || g_ctx[cpu] < 0) return;
  Guard<SpinLock, IrqSave> g(g_lock);
  r32(kPriority + 4 * irq) = 1;
  for (unsigned c = 0; c < g_boot.cpu_count; c++)
    if (g_ctx[c] >= 0 && c != cpu) enable_word(g_ctx[c], irq) = enable_word(g_ctx[c], irq) & ~(1u << (irq % 32));
  enable_word(g_ctx[cpu], irq) = enable_word(g_ctx[cpu], irq) | (1u << (irq % 32));
}

void plic_disable(unsigned irq) {
  if (irq == 0 || irq > g_ndev) return;
  Guard<SpinLock, IrqSave> g(g_lock);
  for (unsigned c = 0; c < g_boot.cpu_count; c++)
    if (g_ctx[c] >= 0) enable_word(g_ctx[c], irq) = enable_word(g_ctx[c], irq) & ~(1u << (irq % 32));
}

unsigned plic_claim() {
  int ctx = g_ctx[cpu_id()];
  if (ctx < 0) return irq::kNoIrq;
  uint32_t id = ctx_reg(ctx, kClaim);
  return id ? id : irq::kNoIrq;
}

void plic_complete(unsigned irq) {
  int ctx = g_ctx[cpu_id()];
  if (ctx >= 0) ctx_reg(ctx, kClaim) = irq;
}

const IrqChip kPlic = {"PLIC", plic_init_cpu, plic_enable, plic_disable, plic_claim, plic_complete, nullptr};

// Fills g_ctx from interrupts-extended; returns how many cpus got one.
unsigned find_contexts(const fdt::Tree& t, int node) {
  for (int& c : g_ctx) c = -1;
  fdt::Property ie;
  if (!t.prop(node, "interrupts-extended", ie)) return 0;
  unsigned found = 0;
  const uint32_t count = ie.len / 4;
  uint32_t i = 0;
  for (int ctx = 0; i + 2 <= count; ctx++) {
    fdt::Node intc = t.find_phandle(ie.u32(i));
    fdt::Property p;
    uint32_t ncells = intc != fdt::kNoNode && t.prop(intc, "#interrupt-cells", p) && p.len == 4 ? p.u32() : 1;
    uint32_t cause = ie.u32(i + 1);
    i += 1 + ncells;
    if (intc == fdt::kNoNode || ncells != 1 || cause != kCauseSupervisorExternal) continue;
    fdt::Node cpu = t.parent(intc);
    uint64_t hartid;
    if (cpu == fdt::kNoNode || !t.prop(cpu, "reg", p) || !p.cells(0, t.address_cells(t.parent(cpu)), hartid)) continue;
    for (unsigned c = 0; c < g_boot.cpu_count; c++) {
      if (g_boot.cpu_hwid[c] == hartid && g_ctx[c] < 0) {
        g_ctx[c] = ctx;
        found++;
      }
    }
  }
  return found;
}

bool plic_probe(const fdt::Tree& t, int node) {
  uint64_t base, size;
  if (!t.reg(node, 0, base, size)) return false;
  fdt::Property p;
  g_ndev = t.prop(node, "riscv,ndev", p) && p.len == 4 ? p.u32() : kMaxSources;
  if (g_ndev > kMaxSources) g_ndev = kMaxSources;
  if (g_ndev >= irq::kMaxIrq) g_ndev = irq::kMaxIrq - 1;
  unsigned found = find_contexts(t, node);
  if (g_ctx[0] < 0) {
    kprintf("plic: no S-mode context for the boot hart in %s\n", t.name(node));
    return false;
  }
  if (found < g_boot.cpu_count)
    kprintf("plic: only %u of %u cpus have an S-mode context; the others take no device interrupts\n", found,
            g_boot.cpu_count);
  g_base = arch::map_device(base, size);
  if (!g_base) return false;
  // Quiet start: every source off, our contexts masked until init_cpu.
  for (unsigned irq = 1; irq <= g_ndev; irq++) r32(kPriority + 4 * irq) = 0;
  for (unsigned c = 0; c < g_boot.cpu_count; c++) {
    if (g_ctx[c] < 0) continue;
    ctx_reg(g_ctx[c], kThreshold) = 1;
    for (unsigned w = 0; w <= g_ndev / 32; w++) enable_word(g_ctx[c], 32 * w) = 0;
  }
  if (irq::add_chip(&kPlic, g_ndev + 1) < 0) return false;
  return true;
}

// DTB interrupt specifier: one cell, the source number.
bool plic_translate(const uint32_t* cells, unsigned n, unsigned& out) {
  if (n < 1 || cells[0] == 0 || cells[0] > g_ndev) return false;
  out = cells[0];
  return true;
}
}  // namespace

IRQCHIP_DRIVER(irqchip_sifive_plic, "sifive,plic-1.0.0", plic_probe, plic_translate);
IRQCHIP_DRIVER(irqchip_riscv_plic, "riscv,plic0", plic_probe, plic_translate);
