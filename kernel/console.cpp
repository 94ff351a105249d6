// SPDX-License-Identifier: Apache-2.0
// Serial console: output under a lock with IRQs masked, input through a
// ring buffer filled by the UART's receive interrupt.
//
// Locking: g_out_lock serialises writers on all cores so lines do not
// interleave mid-line. In panic context the lock is skipped (the panicking
// core may hold it, or another core may be stuck while holding it).
// The input ring has one producer (the UART interrupt, on the boot core) and
// one consumer (the shell, also on the boot core). Each side publishes with
// a release store of its index and reads the other's with acquire: the
// producer's store of g_rx_head releases the byte it wrote (the consumer's
// acquire of g_rx_head sees it), the consumer's store of g_rx_tail releases
// the slot it read (the producer's acquire of g_rx_tail sees it free before
// writing it again). Correct on one core as on two.
//
// Flow control: a full ring is never a reason to drop a byte. The producer
// stops reading the UART, switches its receive interrupt off and sets
// g_rx_throttled; the bytes wait in the UART's FIFO, and behind it QEMU's
// serial backend waits for room (a real line without RTS/CTS overruns the
// FIFO instead, as it would had we read and discarded them). The consumer
// switches the interrupt back on once half the ring is free; the interrupt
// is level-triggered, so what waited in the FIFO comes at once. The flag is
// written only while the interrupt is off at the UART (by the producer that
// turns it off, then by the consumer that turns it on), and both run on the
// boot core, where the UART interrupt is routed. Without this, input faster
// than the shell overflowed the ring and was lost: under QEMU a piped script
// arrives as fast as the interrupt takes it, even during boot (raspi3b lost
// everything past the 256th byte of kmemleak-e2e's commands, and most of
// shell-test's 6000 random bytes, so both waited for input to the timeout).
//
// g_uart and g_uart_base are written by attach() on the boot core before the
// other cores start (published by smp::start_secondaries' fence) and never
// again. The idle hooks belong to the shell's core.
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/panic.h>
#include <kernel/spinlock.h>
#include <arch/ops.h>
#include <atomic>

namespace {
const UartOps* g_uart;
uintptr_t g_uart_base;
SpinLock g_out_lock;

constexpr unsigned kRxSize = 256;  // power of two
char g_rx[kRxSize];
std::atomic<unsigned> g_rx_head{0}, g_rx_tail{0};
std::atomic<bool> g_rx_throttled{false};
constexpr unsigned kMaxIdleHooks = 4;
void (*g_idle_hooks[kMaxIdleHooks])();

void put_locked(const char* s, size_t n) {
  if (!g_uart) return;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\n') g_uart->putc(g_uart_base, '\r');
    g_uart->putc(g_uart_base, s[i]);
  }
}

void sink(void*, const char* s, size_t n) { put_locked(s, n); }
}  // namespace

namespace console {

void attach(const UartOps* ops, uintptr_t base) {
  if (ops->init) ops->init(base);
  g_uart_base = base;
  g_uart = ops;
}

const UartOps* uart() { return g_uart; }

void write(const char* s, size_t n) {
  if (in_panic()) {
    put_locked(s, n);
    return;
  }
  Guard<SpinLock, IrqSave> g(g_out_lock);
  put_locked(s, n);
}

void write_raw(const void* data, size_t n) {
  Guard<SpinLock, IrqSave> g(g_out_lock);
  const char* p = static_cast<const char*>(data);
  for (size_t i = 0; i < n; i++) g_uart->putc(g_uart_base, p[i]);
}

void rx_interrupt() {
  for (;;) {
    unsigned head = g_rx_head.load(std::memory_order_relaxed);
    if (head - g_rx_tail.load(std::memory_order_acquire) == kRxSize) {
      g_uart->set_rx_irq(g_uart_base, false);
      g_rx_throttled.store(true, std::memory_order_release);
      return;
    }
    int c = g_uart->getc(g_uart_base);
    if (c < 0) return;
    g_rx[head % kRxSize] = static_cast<char>(c);
    g_rx_head.store(head + 1, std::memory_order_release);
  }
}

bool input_waiting() {
  return g_rx_tail.load(std::memory_order_relaxed) != g_rx_head.load(std::memory_order_acquire);
}

int try_getc() {
  unsigned tail = g_rx_tail.load(std::memory_order_relaxed);
  unsigned head = g_rx_head.load(std::memory_order_acquire);
  if (g_rx_throttled.load(std::memory_order_acquire) && head - tail <= kRxSize / 2) {
    g_rx_throttled.store(false, std::memory_order_release);
    g_uart->set_rx_irq(g_uart_base, true);
  }
  if (tail == head) {
    // Fall back to polling if the receive interrupt is not wired up.
    return g_uart ? g_uart->getc(g_uart_base) : -1;
  }
  char c = g_rx[tail % kRxSize];
  g_rx_tail.store(tail + 1, std::memory_order_release);
  return static_cast<unsigned char>(c);
}

int getc() {
  for (;;) {
    arch::IrqState s = arch::irq_save();
    int c = try_getc();
    if (c >= 0) {
      arch::irq_restore(s);
      return c;
    }
    // Sleep with interrupts masked: wfi still wakes on a pending interrupt,
    // which is taken once they are restored, so no wake-up is lost.
    arch::wait_for_interrupt();
    arch::irq_restore(s);
    for (auto* hook : g_idle_hooks)
      if (hook) hook();
  }
}

bool add_idle_hook(void (*fn)()) {
  for (auto*& hook : g_idle_hooks) {
    if (hook == fn) return true;
    if (!hook) {
      hook = fn;
      return true;
    }
  }
  return false;
}

}  // namespace console

void kvprintf(const char* f, va_list ap) {
  if (in_panic()) {
    fmt::vformat(sink, nullptr, f, ap);
    return;
  }
  Guard<SpinLock, IrqSave> g(g_out_lock);
  fmt::vformat(sink, nullptr, f, ap);
}

void kprintf(const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  kvprintf(f, ap);
  va_end(ap);
}

void kputs(const char* s) {
  size_t n = 0;
  while (s[n]) n++;
  console::write(s, n);
  console::write("\n", 1);
}
