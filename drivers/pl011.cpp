// SPDX-License-Identifier: Apache-2.0
// ARM PL011 UART. The firmware (or QEMU) has set the baud rate; we only move
// bytes and enable the receive interrupt.
#include <kernel/console.h>
#include <cstdint>

namespace {
constexpr uintptr_t kDr = 0x00, kFr = 0x18, kCr = 0x30, kImsc = 0x38, kIcr = 0x44;
constexpr uint32_t kCrUartEn = 1 << 0, kCrTxe = 1 << 8, kCrRxe = 1 << 9;
constexpr uint32_t kFrTxFull = 1 << 5, kFrRxEmpty = 1 << 4;
constexpr uint32_t kIntRx = 1 << 4, kIntRxTimeout = 1 << 6;

inline volatile uint32_t& reg(uintptr_t base, uintptr_t off) {
  return *reinterpret_cast<volatile uint32_t*>(base + off);
}

void pl011_putc(uintptr_t base, char c) {
  while (reg(base, kFr) & kFrTxFull) {
  }
  reg(base, kDr) = static_cast<uint8_t>(c);
}

int pl011_getc(uintptr_t base) {
  if (reg(base, kFr) & kFrRxEmpty) return -1;
  return static_cast<int>(reg(base, kDr) & 0xff);
}

void pl011_set_rx_irq(uintptr_t base, bool on) {
  if (!on) {
    reg(base, kImsc) = reg(base, kImsc) & ~(kIntRx | kIntRxTimeout);
    return;
  }
  reg(base, kIcr) = kIntRx | kIntRxTimeout;
  reg(base, kImsc) = reg(base, kImsc) | kIntRx | kIntRxTimeout;
}

// QEMU's PL011 moves bytes with UARTEN clear (its reset CR is 0x300); a real
// one does not, and firmware that routed it elsewhere (the Pi's Bluetooth)
// may have left it off. The baud rate stays what the firmware set.
void pl011_init(uintptr_t base) {
  uint32_t cr = reg(base, kCr);
  if ((cr & (kCrUartEn | kCrTxe | kCrRxe)) != (kCrUartEn | kCrTxe | kCrRxe))
    reg(base, kCr) = cr | kCrUartEn | kCrTxe | kCrRxe;
}

const UartOps kPl011 = {"pl011", pl011_putc, pl011_getc, pl011_set_rx_irq, pl011_init};
}  // namespace

extern const UartOps* const g_uart_pl011 = &kPl011;
UART_DRIVER(uart_driver_pl011, "arm,pl011", &kPl011);
