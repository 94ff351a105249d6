// SPDX-License-Identifier: Apache-2.0
// NS16550A-compatible UART (QEMU virt's serial port, many SoCs' console).
// The firmware (or QEMU) has set the baud rate; we only move bytes and
// enable the receive interrupt.
//
// Registers are byte-wide and consecutive unless the DTB node says
// otherwise: "reg-shift" spaces them 1 << shift bytes apart and
// "reg-io-width" = 4 makes them 32-bit (DesignWare APB UARTs). UartOps
// carry only a base address, so the driver looks the node up by that base
// (kernel virtual = physical on the identity map) the first time it sees a
// base after the DTB is open; before that (the early console) and for a
// base no node has, it uses byte registers 1 byte apart.
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/fdt.h>
#include <cstdint>

namespace {
constexpr unsigned kRbr = 0, kThr = 0, kIer = 1, kMcr = 4, kLsr = 5;
constexpr uint8_t kLsrDataReady = 1 << 0, kLsrThrEmpty = 1 << 5;
constexpr uint8_t kIerRxAvailable = 1 << 0;
constexpr uint8_t kMcrOut2 = 1 << 3;  // gates the IRQ line on PC-style boards
const char* const kCompatibles[] = {"ns16550a", "ns16550"};

struct Port {
  uintptr_t base;
  uint8_t shift;
  uint8_t width;  // 1 or 4 bytes
};
Port g_port;  // the last base looked up: the console uses one UART at a time

Port lookup(uintptr_t base) {
  if (g_port.base == base) return g_port;
  Port p{base, 0, 1};
  const fdt::Tree& t = g_boot.dtb;
  if (!t.valid()) return p;  // early console: defaults, look again later
  for (const char* compat : kCompatibles) {
    for (fdt::Node n = t.find_compatible(compat); n != fdt::kNoNode; n = t.find_compatible(compat, n)) {
      uint64_t reg, size;
      if (!t.reg(n, 0, reg, size) || reg != base) continue;
      fdt::Property prop;
      if (t.prop(n, "reg-shift", prop) && prop.len == 4 && prop.u32() < 8) p.shift = static_cast<uint8_t>(prop.u32());
      if (t.prop(n, "reg-io-width", prop) && prop.len == 4 && prop.u32() == 4) p.width = 4;
      g_port = p;
      return p;
    }
  }
  g_port = p;
  return p;
}

uint8_t rd(const Port& p, unsigned reg) {
  uintptr_t a = p.base + (uintptr_t{reg} << p.shift);
  if (p.width == 4) return static_cast<uint8_t>(*reinterpret_cast<volatile uint32_t*>(a));
  return *reinterpret_cast<volatile uint8_t*>(a);
}

void wr(const Port& p, unsigned reg, uint8_t v) {
  uintptr_t a = p.base + (uintptr_t{reg} << p.shift);
  if (p.width == 4) *reinterpret_cast<volatile uint32_t*>(a) = v;
  else *reinterpret_cast<volatile uint8_t*>(a) = v;
}

void ns16550_putc(uintptr_t base, char c) {
  Port p = lookup(base);
  while (!(rd(p, kLsr) & kLsrThrEmpty)) {
  }
  wr(p, kThr, static_cast<uint8_t>(c));
}

int ns16550_getc(uintptr_t base) {
  Port p = lookup(base);
  if (!(rd(p, kLsr) & kLsrDataReady)) return -1;
  return rd(p, kRbr);
}

void ns16550_set_rx_irq(uintptr_t base, bool on) {
  Port p = lookup(base);
  if (on) wr(p, kMcr, rd(p, kMcr) | kMcrOut2);
  wr(p, kIer, on ? kIerRxAvailable : 0);
}

const UartOps kNs16550 = {"ns16550a", ns16550_putc, ns16550_getc, ns16550_set_rx_irq, nullptr};
}  // namespace

extern const UartOps* const g_uart_ns16550a = &kNs16550;
UART_DRIVER(uart_driver_ns16550a, "ns16550a", &kNs16550);
UART_DRIVER(uart_driver_ns16550, "ns16550", &kNs16550);
