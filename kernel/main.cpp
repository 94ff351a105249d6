// SPDX-License-Identifier: Apache-2.0
// kernel_main: from the arch's entry (MMU on, .bss clear, boot stack) to the
// shell or the test run.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/context.h>
#include <kernel/irq.h>
#include <kernel/ktest.h>
#include <kernel/panic.h>
#include <kernel/rseq.h>
#include <kernel/shell.h>
#include <kernel/smp.h>
#include <kernel/stack.h>
#include <kernel/timer.h>
#include <mm/failslab.h>
#include "mm/accounting.h"

extern const UartOps* const EARLY_UART_OPS;

#include <kernel/poweroff.h>

namespace platform {
void read_boot_info();
void probe_irqchip();
bool probe_console(uint64_t& base, fdt::Node& node, const UartOps*& ops);
}  // namespace platform

namespace {
void rx_irq(unsigned, void*) { console::rx_interrupt(); }

void setup_console() {
  uint64_t base;
  fdt::Node node;
  const UartOps* ops;
  if (!platform::probe_console(base, node, ops)) {
    kprintf("console: no UART in the device tree that a driver knows; staying on the early UART\n");
    return;
  }
  uintptr_t va = arch::map_device(base, 0x1000);
  if (!va) panic("console: cannot map UART at 0x%llx", static_cast<unsigned long long>(base));
  console::attach(ops, va);
  unsigned irq;
  if (irq::from_dtb(g_boot.dtb, node, 0, irq)) {
    irq::register_handler(irq, rx_irq, nullptr, "uart");
    irq::enable(irq, 0);
    ops->set_rx_irq(va, true);
  } else {
    kprintf("console: UART interrupt not usable; input is polled\n");
  }
}
}  // namespace

extern "C" void kernel_main(uintptr_t dtb, uintptr_t boot_hwid) {
  PerCpu& boot = g_percpu[0];
  set_index(boot, 0);
  boot.context = context::make(context::kBoot);
  boot.hwid = boot_hwid;
  kstack::assign(boot);  // the stack it runs on, before any trap can look
  arch::init_boot_cpu(boot);
  console::attach(EARLY_UART_OPS, EARLY_UART_BASE);
  kprintf("\nMagpie " MAGPIE_VERSION " (" MAGPIE_BOARD ", " MAGPIE_ARCH ") booting\n");

  g_boot.dtb_addr = dtb;
  g_boot.boot_hwid = boot_hwid;
  if (!dtb) panic("no device tree: the bootloader passed a null DTB pointer");
  uint32_t total = fdt::be32(reinterpret_cast<const uint8_t*>(dtb) + 4);
  fdt::Error e = g_boot.dtb.open(reinterpret_cast<const void*>(dtb),
                                 total < kMaxDtbSize ? total : static_cast<uint32_t>(kMaxDtbSize));
  if (e != fdt::Error::kOk)
    panic("device tree at 0x%lx is unusable: %s", static_cast<unsigned long>(dtb), fdt::error_name(e));

  platform::read_boot_info();
  platform::probe_irqchip();
  arch::init_from_dtb(g_boot.dtb);  // after the controllers: it translates the timer's interrupts
  irq::init_cpu();                  // before any irq is routed to this core
  setup_console();
  platform::probe_poweroff();
  kprintf("%s: %u cpus, %u memory banks, bootargs \"%s\"\n", g_boot.model, g_boot.cpu_count, g_boot.mem_count,
          g_boot.bootargs);
  rseq::check_table();  // before the first allocation: every restartable section where the entry looks
  mm_boot::init();

  timer::init_cpu();
  boot.online.store(true, std::memory_order_release);
  arch::irq_enable();
  smp::start_secondaries();
  kprintf("%u of %u cpus online\n", cpus_online(), g_boot.cpu_count);

  if (boot::has_arg("test")) {
    unsigned passed = 0;
    unsigned failed = ktest::run_all(nullptr, &passed);
    // Under kmem.fail, what it did: the suite's checker (CTest
    // suite-failslab) requires failures to have been injected.
    mm::FailState fs;
    if (mm::failslab_state(fs))
      kprintf("kmem fail: %llu allocations failed by injection since it was switched on\n",
              static_cast<unsigned long long>(fs.injected));
    arch::exit(failed || passed == 0 ? 1 : 0);
  }
  shell::run();
}
