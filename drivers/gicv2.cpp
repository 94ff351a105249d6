// SPDX-License-Identifier: Apache-2.0
// ARM GICv2 interrupt controller (QEMU virt's default, GIC-400 on boards).
//
// Distributor: global enable, per-SPI routing to one core. CPU interface:
// banked per core; acknowledge (IAR) and end-of-interrupt (EOIR). SGI 0 is
// the kernel's IPI. Interrupt numbers are GIC INTIDs: SGI 0-15, PPI 16-31,
// SPI 32 and up.
#include <atomic>
#include <kernel/arch.h>
#include <kernel/config.h>
#include <kernel/fdt.h>
#include <kernel/irq.h>
#include <kernel/percpu.h>

namespace {
constexpr uintptr_t kGicdCtlr = 0x000, kGicdTyper = 0x004, kGicdIsenabler = 0x100, kGicdIcenabler = 0x180,
                    kGicdIpriority = 0x400, kGicdItargets = 0x800, kGicdIcfgr = 0xc00, kGicdSgir = 0xf00;
constexpr uintptr_t kGiccCtlr = 0x00, kGiccPmr = 0x04, kGiccBpr = 0x08, kGiccIar = 0x0c, kGiccEoir = 0x10;
constexpr unsigned kIpiSgi = 0;

uintptr_t g_dist, g_cpu;
unsigned g_lines;
// Each core writes its own entry in gic_init_cpu, before it stores its
// PerCpu::online with release; a core sends it an IPI (or routes an SPI to
// it) only after an acquire load of online, so it reads the entry written.
uint8_t g_cpu_mask[kMaxCpus];   // GIC CPU interface bit of each core
uint32_t g_last_iar[kMaxCpus];  // raw IAR (SGIs need the source bits at EOI)

inline volatile uint32_t& d32(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_dist + off); }
inline volatile uint8_t& d8(uintptr_t off) { return *reinterpret_cast<volatile uint8_t*>(g_dist + off); }
inline volatile uint32_t& c32(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_cpu + off); }

void gic_init_cpu() {
  // ITARGETSR0..7 are banked and read back this core's own interface bit.
  uint32_t self = d32(kGicdItargets) & 0xff;
  g_cpu_mask[cpu_id()] = static_cast<uint8_t>(self ? self : 1u << cpu_id());
  for (unsigned i = 0; i < 32; i++) d8(kGicdIpriority + i) = 0x80;
  d32(kGicdIsenabler) = 1u << kIpiSgi;
  c32(kGiccPmr) = 0xf0;
  c32(kGiccBpr) = 0;
  c32(kGiccCtlr) = 1;
}

void gic_enable(unsigned irq, unsigned cpu) {
  if (irq >= 32) d8(kGicdItargets + irq) = g_cpu_mask[cpu];
  d32(kGicdIsenabler + 4 * (irq / 32)) = 1u << (irq % 32);
}

void gic_disable(unsigned irq) { d32(kGicdIcenabler + 4 * (irq / 32)) = 1u << (irq % 32); }

unsigned gic_claim() {
  uint32_t iar = c32(kGiccIar);
  unsigned id = iar & 0x3ff;
  if (id >= 1020) return irq::kNoIrq;
  g_last_iar[cpu_id()] = iar;
  return id;
}

void gic_complete(unsigned) { c32(kGiccEoir) = g_last_iar[cpu_id()]; }

void gic_send_ipi(unsigned cpu) {
  // The stores the IPI announces (a posted call, a completion flag) must be
  // visible to the target before the SGI can reach it: on Arm hardware a
  // device write may overtake earlier normal-memory stores without a barrier.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  d32(kGicdSgir) = (uint32_t{g_cpu_mask[cpu]} << 16) | kIpiSgi;
}

void ipi_handler(unsigned, void*) { ipi_interrupt(); }

const IrqChip kGicV2 = {"GICv2", gic_init_cpu, gic_enable, gic_disable, gic_claim, gic_complete, gic_send_ipi};

bool gic_probe(const fdt::Tree& t, int node) {
  uint64_t dbase, dsize, cbase, csize;
  if (!t.reg(node, 0, dbase, dsize) || !t.reg(node, 1, cbase, csize)) return false;
  g_dist = arch::map_device(dbase, 0x1000);
  g_cpu = arch::map_device(cbase, 0x2000);
  if (!g_dist || !g_cpu) return false;
  g_lines = 32 * ((d32(kGicdTyper) & 0x1f) + 1);
  d32(kGicdCtlr) = 0;
  for (unsigned i = 32; i < g_lines; i += 32) d32(kGicdIcenabler + i / 8) = ~0u;
  for (unsigned i = 32; i < g_lines; i++) d8(kGicdIpriority + i) = 0x80;
  for (unsigned i = 32; i < g_lines; i += 16) d32(kGicdIcfgr + i / 4) = 0;  // level-triggered
  d32(kGicdCtlr) = 1;
  if (irq::add_chip(&kGicV2, g_lines) < 0) return false;
  irq::register_handler(kIpiSgi, ipi_handler, nullptr, "ipi");
  return true;
}

// DTB interrupt specifier: <type number flags>, type 0 = SPI, 1 = PPI.
bool gic_translate(const uint32_t* cells, unsigned n, unsigned& out) {
  if (n < 2) return false;
  if (cells[0] == 0) out = 32 + cells[1];
  else if (cells[0] == 1) out = 16 + cells[1];
  else return false;
  return out < irq::kMaxIrq;
}
}  // namespace

IRQCHIP_DRIVER(irqchip_gic400, "arm,gic-400", gic_probe, gic_translate);
IRQCHIP_DRIVER(irqchip_gic_a15, "arm,cortex-a15-gic", gic_probe, gic_translate);
IRQCHIP_DRIVER(irqchip_gic_a9, "arm,cortex-a9-gic", gic_probe, gic_translate);
