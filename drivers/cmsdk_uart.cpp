// SPDX-License-Identifier: Apache-2.0
// The Arm CMSDK APB UART ("arm,mps2-uart"): the MPS2's five serial ports,
// and QEMU mps2-an385's.
//
// Registers are 32-bit: DATA (+0x00, one byte), STATE (+0x04: bit 0 TX
// buffer full, bit 1 RX buffer full), CTRL (+0x08: bit 0 TX enable, bit 1
// RX enable, bit 3 RX interrupt enable), INTSTATUS/INTCLEAR (+0x0c: bit 1
// RX, write one to clear) and BAUDDIV (+0x10: the peripheral clock divided
// by the baud rate, at least 16). Nothing moves until CTRL enables it (the
// board and QEMU alike); after reset BAUDDIV is 0, so the driver sets it
// for 115200 baud from the MPS2's 25 MHz peripheral clock, the DTB's
// oscclk0, unless something set it before.
//
// Receive interrupts: the DTB's first interrupt (NVIC 0 for UART0). The
// RX interrupt stays raised until INTCLEAR, whether enabled or not; getc
// clears it before it takes the byte, so a byte that arrives after raises
// it again, and so does switching it off.
#include <kernel/console.h>
#include <cstdint>

namespace {
constexpr uintptr_t kData = 0x00, kState = 0x04, kCtrl = 0x08, kIntClear = 0x0c, kBaudDiv = 0x10;
constexpr uint32_t kStateTxFull = 1 << 0, kStateRxFull = 1 << 1;
constexpr uint32_t kCtrlTxEn = 1 << 0, kCtrlRxEn = 1 << 1, kCtrlRxIntEn = 1 << 3;
constexpr uint32_t kIntRx = 1 << 1;
constexpr uint32_t kClockHz = 25000000, kBaud = 115200;

inline volatile uint32_t& reg(uintptr_t base, uintptr_t off) {
  return *reinterpret_cast<volatile uint32_t*>(base + off);
}

void cmsdk_putc(uintptr_t base, char c) {
  while (reg(base, kState) & kStateTxFull) {
  }
  reg(base, kData) = static_cast<uint8_t>(c);
}

int cmsdk_getc(uintptr_t base) {
  if (!(reg(base, kState) & kStateRxFull)) return -1;
  reg(base, kIntClear) = kIntRx;
  return static_cast<int>(reg(base, kData) & 0xff);
}

void cmsdk_set_rx_irq(uintptr_t base, bool on) {
  if (!on) {
    // The interrupt follows INTSTATUS, which the enable does not clear: clear
    // it too, or a held-back byte keeps interrupting (the console's
    // throttle). The byte stays in the buffer for the next getc.
    reg(base, kCtrl) = reg(base, kCtrl) & ~kCtrlRxIntEn;
    reg(base, kIntClear) = kIntRx;
    return;
  }
  reg(base, kIntClear) = kIntRx;
  reg(base, kCtrl) = reg(base, kCtrl) | kCtrlRxIntEn;
}

void cmsdk_init(uintptr_t base) {
  if (reg(base, kBaudDiv) < 16) reg(base, kBaudDiv) = kClockHz / kBaud;
  uint32_t ctrl = reg(base, kCtrl);
  if ((ctrl & (kCtrlTxEn | kCtrlRxEn)) != (kCtrlTxEn | kCtrlRxEn)) reg(base, kCtrl) = ctrl | kCtrlTxEn | kCtrlRxEn;
}

const UartOps kCmsdk = {"cmsdk-uart", cmsdk_putc, cmsdk_getc, cmsdk_set_rx_irq, cmsdk_init};
}  // namespace

extern const UartOps* const g_uart_cmsdk_uart = &kCmsdk;
UART_DRIVER(uart_driver_mps2, "arm,mps2-uart", &kCmsdk);
