// SPDX-License-Identifier: Apache-2.0
// The BCM2835 mini-UART ("brcm,bcm2835-aux-uart"), the Raspberry Pi's
// console on GPIO 14/15 when the PL011 drives Bluetooth (the 3B's default).
//
// It sits in the AUX block with two SPI masters: AUX_ENABLES (AUX base +4,
// outside the UART's own reg window, on the same page) powers each one, and
// its registers read as zero until bit 0 is set. Its baud rate derives from
// the VPU core clock: baud = core / (8 * (BAUD + 1)). That clock moves with
// the VPU's frequency unless the firmware pins it, which `enable_uart=1` in
// config.txt does (core_freq = 250 MHz, BAUD = 270 for 115200) besides
// putting GPIO 14/15 on ALT5: the board's README step. init keeps the
// firmware's divisor; only a UART nobody set up (BAUD = 0) gets 115200 from
// 250 MHz. QEMU models no clock and needs none of it, but does it no harm.
//
// Receive interrupts go to the BCM2835 controller as GPU IRQ 29 (the DTB's
// <1 29>), shared with the two SPI masters.
#include <kernel/console.h>
#include <cstdint>

namespace {
constexpr uintptr_t kIo = 0x00, kIer = 0x04, kIir = 0x08, kLcr = 0x0c, kMcr = 0x10, kLsr = 0x14, kCntl = 0x20,
                    kBaud = 0x28;
constexpr uintptr_t kAuxEnables = 0x04 - 0x40;  // relative to the UART's base (AUX + 0x40)
constexpr uint32_t kAuxEnableUart = 1 << 0;
constexpr uint32_t kLsrDataReady = 1 << 0, kLsrTxEmpty = 1 << 5;
constexpr uint32_t kIerRx = 1 << 0;  // BCM2835 ARM Peripherals errata: bit 0 is receive
constexpr uint32_t kIirClearFifos = 0xc6;
constexpr uint32_t kLcr8Bit = 3;
constexpr uint32_t kCntlRxTx = 3;
constexpr uint32_t kCoreClockHz = 250000000, kBaudRate = 115200;

inline volatile uint32_t& reg(uintptr_t base, uintptr_t off) {
  return *reinterpret_cast<volatile uint32_t*>(base + off);
}

// A UART already on (the firmware's, or ours from the early console) is
// left as it is: resetting it would drop received bytes from its 8-byte
// FIFO.
void aux_init(uintptr_t base) {
  if ((reg(base, kAuxEnables) & kAuxEnableUart) && (reg(base, kCntl) & kCntlRxTx) == kCntlRxTx) return;
  reg(base, kAuxEnables) = reg(base, kAuxEnables) | kAuxEnableUart;
  reg(base, kCntl) = 0;
  reg(base, kIer) = 0;
  reg(base, kLcr) = kLcr8Bit;
  reg(base, kMcr) = 0;
  reg(base, kIir) = kIirClearFifos;
  if (reg(base, kBaud) == 0) reg(base, kBaud) = kCoreClockHz / (8 * kBaudRate) - 1;
  reg(base, kCntl) = kCntlRxTx;
}

void aux_putc(uintptr_t base, char c) {
  while (!(reg(base, kLsr) & kLsrTxEmpty)) {
  }
  reg(base, kIo) = static_cast<uint8_t>(c);
}

int aux_getc(uintptr_t base) {
  if (!(reg(base, kLsr) & kLsrDataReady)) return -1;
  return static_cast<int>(reg(base, kIo) & 0xff);
}

void aux_set_rx_irq(uintptr_t base, bool on) { reg(base, kIer) = on ? kIerRx : 0; }

const UartOps kAuxUart = {"bcm2835-aux", aux_putc, aux_getc, aux_set_rx_irq, aux_init};
}  // namespace

extern const UartOps* const g_uart_bcm2835_aux = &kAuxUart;
UART_DRIVER(uart_driver_bcm2835_aux, "brcm,bcm2835-aux-uart", &kAuxUart);
