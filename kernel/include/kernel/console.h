// SPDX-License-Identifier: Apache-2.0
// The serial console. Output is serialised by a lock with interrupts masked;
// in panic context the lock is bypassed so the last words always get out.
// Input arrives through the UART's receive interrupt into a ring buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdarg>
#include <kernel/compiler.h>

struct UartOps {
  const char* name;
  void (*putc)(uintptr_t base, char c);
  int (*getc)(uintptr_t base);  // -1 when nothing is waiting
  // on: received bytes raise an interrupt; off: they wait in the UART's
  // FIFO (and, once it is full, the sender waits where there is flow
  // control, as QEMU's serial backends do; on a bare line they are lost).
  void (*set_rx_irq)(uintptr_t base, bool on);
  // Makes the UART usable (powered, enabled; the baud rate the firmware set
  // is kept). Idempotent: console::attach runs it for the early console and
  // again for the DTB's. May be null.
  void (*init)(uintptr_t base);
};

// UART drivers register by DTB compatible.
struct UartDriver {
  const char* compatible;
  const UartOps* ops;
};
#define UART_DRIVER(name, compat, ops_ptr) \
  extern const UartDriver name __attribute__((section(".drivers.uart"), used)) = {compat, ops_ptr}

namespace console {
// Use uart at base (already mapped) from now on.
void attach(const UartOps* ops, uintptr_t base);
const UartOps* uart();
void write(const char* s, size_t n);
// Called from the UART's interrupt: drains the UART into the input ring.
// When the ring is full it switches the receive interrupt off and leaves
// the rest in the UART (throttling); the reader switches it back on once
// the ring is half empty.
void rx_interrupt();
// True if the receive interrupt has queued input (not counting a UART that
// is only polled).
bool input_waiting();
// Next input byte, or -1 if none is waiting.
int try_getc();
// Blocks (wfi) until a byte arrives. While it waits, the idle hooks run
// each time the core wakes, with interrupts enabled.
int getc();
// Adds fn to the idle hooks (once; boot time, one CPU). False if full.
bool add_idle_hook(void (*fn)());
// True when a raw byte writer (kmemtrace dump) may bypass line discipline.
void write_raw(const void* data, size_t n);
}  // namespace console

void kprintf(const char* fmt, ...) PRINTF_LIKE(1, 2);
void kvprintf(const char* fmt, va_list ap);
void kputs(const char* s);
