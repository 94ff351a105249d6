// SPDX-License-Identifier: Apache-2.0
// The Raspberry Pi 2/3 interrupt controllers: no GIC, but two chips in a
// cascade, each a domain of kernel/irq.cpp, linked by the DTB's
// interrupt-parent chain (kernel/platform.cpp probes them in that order).
//
// 1. The BCM2836 per-core local controller ("brcm,bcm2836-l1-intc", the
//    ARM-local block at 0x40000000) is the root. Each core has its own
//    interrupt source register; its numbers are the DTB's (and Linux's):
//      0-3  the core's generic timers (CNTPS, CNTPNS, CNTHP, CNTV), enabled
//           per core in the timer control register;
//      4-7  the core's four mailboxes, enabled per core; mailbox 0 is the
//           kernel's IPI: a core sets bits in another's mailbox-0 set
//           register, and the target clears what it read through the
//           write-1-to-clear register;
//      8    the GPU interrupt: the BCM2835 controller's output, routed to
//           one core (the GPU routing register);
//      9    the PMU, routed per core.
//    Timers and mailboxes are per-core sources: enable(irq, cpu) sets the
//    bit of that core only (timer_init_cpu runs on each core).
// 2. The BCM2835 "ARM control" controller ("brcm,bcm2836-armctrl-ic" on the
//    BCM2836/7) collects the peripherals' interrupts (the UARTs among them)
//    and feeds the local controller's interrupt 8, as its DTB node says
//    (interrupts = <8 4> on the local controller). Its numbers are
//    bank * 32 + bit, from the DTB's <bank bit>: bank 0 the basic
//    register's ARM interrupts, bank 1 GPU IRQs 0-31, bank 2 GPU IRQs 32-63
//    (the PL011 is 2/25, GPU IRQ 57; the mini-UART 1/29). Its enables are
//    write-1-to-set and write-1-to-clear registers; the pending registers
//    also show the VideoCore's interrupts, so claims mask them with the
//    enables this kernel set.
//
// Ordering: every interrupt here is level-triggered and cleared at its
// source by the handler (the timer re-armed, the UART drained), except the
// mailboxes, which claim clears before the handler runs, so an IPI sent
// while the handler runs is taken again. send_ipi orders the sender's
// earlier stores before its mailbox write with a full fence (a device write
// may overtake normal-memory stores otherwise); the target's IPI handler
// then loads what those stores published with acquire (kernel/smp.cpp).
// The enable masks are written at boot and by enable() under g_lock;
// claims read them relaxed (a claim that misses a just-enabled bit finds
// it pending on the next interrupt).
#include <atomic>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/config.h>
#include <kernel/fdt.h>
#include <kernel/irq.h>
#include <kernel/percpu.h>
#include <kernel/spinlock.h>

namespace {

// ---- BCM2836 local controller ----
constexpr uintptr_t kGpuRouting = 0x0c, kPmuRouteSet = 0x10, kPmuRouteClear = 0x14, kTimerCtl = 0x40,
                    kMailboxCtl = 0x50, kIrqSource = 0x60, kMailboxSet = 0x80, kMailboxClear = 0xc0;
constexpr unsigned kLocalCores = 4;
constexpr unsigned kLocalIrqs = 32;
constexpr unsigned kIrqTimerLast = 3, kIrqMailbox0 = 4, kIrqMailboxLast = 7, kIrqGpu = 8, kIrqPmu = 9;

uintptr_t g_local;
SpinLock g_local_lock;                          // the per-core control registers' read-modify-writes
std::atomic<uint32_t> g_local_enabled[kLocalCores];  // per core: which numbers it takes

inline volatile uint32_t& local(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_local + off); }

// A cpu index's core number in the local block: MPIDR Aff0.
unsigned core_of(unsigned cpu) { return static_cast<unsigned>(g_boot.cpu_hwid[cpu] & 0xff); }
unsigned this_core() { return core_of(cpu_id()); }

void local_set(unsigned irq, unsigned core, bool on) {
  if (core >= kLocalCores) return;
  Guard<SpinLock, IrqSave> g(g_local_lock);
  if (irq <= kIrqTimerLast || (irq >= kIrqMailbox0 && irq <= kIrqMailboxLast)) {
    uintptr_t r = irq <= kIrqTimerLast ? kTimerCtl + 4 * core : kMailboxCtl + 4 * core;
    uint32_t bit = 1u << (irq <= kIrqTimerLast ? irq : irq - kIrqMailbox0);
    local(r) = on ? (local(r) | bit) : (local(r) & ~bit);
  } else if (irq == kIrqGpu) {
    if (on) local(kGpuRouting) = core;  // bits 1:0: the core taking the GPU IRQ
  } else if (irq == kIrqPmu) {
    local(on ? kPmuRouteSet : kPmuRouteClear) = 1u << core;
  } else {
    return;
  }
  if (on) g_local_enabled[core].fetch_or(1u << irq, std::memory_order_relaxed);
  else g_local_enabled[core].fetch_and(~(1u << irq), std::memory_order_relaxed);
}

void local_init_cpu() { local_set(kIrqMailbox0, this_core(), true); }  // this core's IPI

void local_enable(unsigned irq, unsigned cpu) { local_set(irq, core_of(cpu), true); }

void local_disable(unsigned irq) {
  for (unsigned c = 0; c < kLocalCores; c++) local_set(irq, c, false);
}

unsigned local_claim() {
  unsigned core = this_core();
  if (core >= kLocalCores) return irq::kNoIrq;
  uint32_t pending = local(kIrqSource + 4 * core) & g_local_enabled[core].load(std::memory_order_relaxed);
  if (!pending) return irq::kNoIrq;
  unsigned irq = static_cast<unsigned>(__builtin_ctz(pending));
  if (irq >= kIrqMailbox0 && irq <= kIrqMailboxLast) {
    // Clear what was sent before the handler looks: a later IPI sets it again.
    uintptr_t r = kMailboxClear + 16 * core + 4 * (irq - kIrqMailbox0);
    local(r) = local(r);
  }
  return irq;
}

void local_complete(unsigned) {}

void local_send_ipi(unsigned cpu) {
  // The stores the IPI announces, before the mailbox write (see the top).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  unsigned core = core_of(cpu);
  if (core < kLocalCores) local(kMailboxSet + 16 * core) = 1;
}

void ipi_handler(unsigned, void*) { ipi_interrupt(); }

const IrqChip kLocal = {"BCM2836 local", local_init_cpu, local_enable, local_disable,
                        local_claim,     local_complete, local_send_ipi};

bool local_probe(const fdt::Tree& t, int node) {
  uint64_t base, size;
  if (!t.reg(node, 0, base, size)) return false;
  g_local = arch::map_device(base, 0x100);
  if (!g_local) return false;
  // Quiet start: no timer or mailbox interrupt on any core, mailboxes
  // empty, the GPU interrupt to core 0, the PMU nowhere.
  for (unsigned c = 0; c < kLocalCores; c++) {
    local(kTimerCtl + 4 * c) = 0;
    local(kMailboxCtl + 4 * c) = 0;
    for (unsigned m = 0; m < 4; m++) local(kMailboxClear + 16 * c + 4 * m) = ~0u;
  }
  local(kGpuRouting) = 0;
  local(kPmuRouteClear) = (1u << kLocalCores) - 1;
  if (irq::add_chip(&kLocal, kLocalIrqs) != 0) return false;  // the root, at base 0
  irq::register_handler(kIrqMailbox0, ipi_handler, nullptr, "ipi");
  return true;
}

// <number flags>
bool local_translate(const uint32_t* cells, unsigned n, unsigned& out) {
  if (n < 1 || cells[0] >= kLocalIrqs) return false;
  out = cells[0];
  return true;
}

// ---- BCM2835 ARM control (cascaded) ----
constexpr uintptr_t kBasicPending = 0x00, kPending1 = 0x04, kPending2 = 0x08, kEnable1 = 0x10, kEnable2 = 0x14,
                    kEnableBasic = 0x18, kDisable1 = 0x1c, kDisable2 = 0x20, kDisableBasic = 0x24;
constexpr unsigned kBanks = 3;
constexpr uint32_t kBasicArmIrqs = 0xff;  // bank 0: the basic register's own ARM interrupts

uintptr_t g_ctrl;
std::atomic<uint32_t> g_ctrl_enabled[kBanks];

inline volatile uint32_t& ctrl(uintptr_t off) { return *reinterpret_cast<volatile uint32_t*>(g_ctrl + off); }
constexpr uintptr_t kEnableReg[kBanks] = {kEnableBasic, kEnable1, kEnable2};
constexpr uintptr_t kDisableReg[kBanks] = {kDisableBasic, kDisable1, kDisable2};

// Every interrupt of this chip reaches the one core the local controller
// routes its output to (the cascade's line, set up by platform.cpp): cpu
// is not a choice here.
void ctrl_enable(unsigned irq, unsigned) {
  unsigned bank = irq / 32;
  uint32_t bit = 1u << (irq % 32);
  g_ctrl_enabled[bank].fetch_or(bit, std::memory_order_relaxed);
  ctrl(kEnableReg[bank]) = bit;
}

void ctrl_disable(unsigned irq) {
  unsigned bank = irq / 32;
  uint32_t bit = 1u << (irq % 32);
  ctrl(kDisableReg[bank]) = bit;
  g_ctrl_enabled[bank].fetch_and(~bit, std::memory_order_relaxed);
}

unsigned ctrl_claim() {
  uint32_t pending[kBanks] = {ctrl(kBasicPending) & kBasicArmIrqs, ctrl(kPending1), ctrl(kPending2)};
  for (unsigned b = 0; b < kBanks; b++) {
    uint32_t p = pending[b] & g_ctrl_enabled[b].load(std::memory_order_relaxed);
    if (p) return 32 * b + static_cast<unsigned>(__builtin_ctz(p));
  }
  return irq::kNoIrq;
}

void ctrl_complete(unsigned) {}

const IrqChip kCtrl = {"BCM2835 armctrl", nullptr, ctrl_enable, ctrl_disable, ctrl_claim, ctrl_complete, nullptr};

bool ctrl_probe(const fdt::Tree& t, int node) {
  uint64_t base, size;
  if (!t.reg(node, 0, base, size)) return false;
  g_ctrl = arch::map_device(base, size);
  if (!g_ctrl) return false;
  for (unsigned b = 0; b < kBanks; b++) ctrl(kDisableReg[b]) = ~0u;  // quiet start
  return irq::add_chip(&kCtrl, 32 * kBanks) > 0;  // behind another controller, never the root
}

// <bank bit>
bool ctrl_translate(const uint32_t* cells, unsigned n, unsigned& out) {
  if (n < 2 || cells[0] >= kBanks || cells[1] >= 32) return false;
  if (cells[0] == 0 && !((1u << cells[1]) & kBasicArmIrqs)) return false;
  out = 32 * cells[0] + cells[1];
  return true;
}

}  // namespace

IRQCHIP_DRIVER(irqchip_bcm2836_l1, "brcm,bcm2836-l1-intc", local_probe, local_translate);
IRQCHIP_DRIVER(irqchip_bcm2836_armctrl, "brcm,bcm2836-armctrl-ic", ctrl_probe, ctrl_translate);
