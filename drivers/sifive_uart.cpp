// SPDX-License-Identifier: Apache-2.0
// The SiFive UART ("sifive,uart0"): the FU540's (HiFive Unleashed) two
// serial ports, and QEMU sifive_u's.
//
// Registers are 32-bit. txdata: a write queues a byte; a read's bit 31
// says the transmit FIFO is full. rxdata: one read pops a byte, bit 31
// set meaning the FIFO was empty (so read it once per byte, never twice).
// txctrl/rxctrl bit 0 enable the transmitter and the receiver; the
// receive watermark (rxctrl bits 18:16, rxcnt) raises ip.rxwm while the
// FIFO holds more than rxcnt bytes, so rxcnt = 0 interrupts for every byte,
// level-triggered, until the FIFO is drained. The baud divisor (div) is
// the firmware's: OpenSBI (or U-Boot) set it from the bus clock, which the
// kernel does not track.
//
// Receive interrupts go to the PLIC (source 4 for UART0 on the FU540, the
// DTB's "interrupts").
#include <kernel/console.h>
#include <cstdint>

namespace {
constexpr uintptr_t kTxdata = 0x00, kRxdata = 0x04, kTxctrl = 0x08, kRxctrl = 0x0c, kIe = 0x10;
constexpr uint32_t kTxFull = 1u << 31, kRxEmpty = 1u << 31;
constexpr uint32_t kTxEnable = 1 << 0, kRxEnable = 1 << 0;
constexpr uint32_t kRxCntMask = 7u << 16;
constexpr uint32_t kIeRxwm = 1 << 1;

inline volatile uint32_t& reg(uintptr_t base, uintptr_t off) {
  return *reinterpret_cast<volatile uint32_t*>(base + off);
}

// Both directions on, receive watermark 0; the rest (stop bits, transmit
// watermark, divisor) as the firmware left it. Idempotent.
void sifive_init(uintptr_t base) {
  reg(base, kTxctrl) = reg(base, kTxctrl) | kTxEnable;
  reg(base, kRxctrl) = (reg(base, kRxctrl) & ~kRxCntMask) | kRxEnable;
}

void sifive_putc(uintptr_t base, char c) {
  while (reg(base, kTxdata) & kTxFull) {
  }
  reg(base, kTxdata) = static_cast<uint8_t>(c);
}

int sifive_getc(uintptr_t base) {
  uint32_t v = reg(base, kRxdata);
  if (v & kRxEmpty) return -1;
  return static_cast<int>(v & 0xff);
}

void sifive_set_rx_irq(uintptr_t base, bool on) { reg(base, kIe) = on ? kIeRxwm : 0; }

const UartOps kSifiveUart = {"sifive-uart", sifive_putc, sifive_getc, sifive_set_rx_irq, sifive_init};
}  // namespace

extern const UartOps* const g_uart_sifive_uart0 = &kSifiveUart;
UART_DRIVER(uart_driver_sifive_uart0, "sifive,uart0", &kSifiveUart);
