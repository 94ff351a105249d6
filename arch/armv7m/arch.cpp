// SPDX-License-Identifier: Apache-2.0
// ARMv7-M support: exceptions, faults, the SysTick, semihosting, exits,
// register dumps. One core, privileged Thread mode on the main stack.
//
// 1. Exceptions. Every vector but reset enters exception_entry (start.S),
//    which calls armv7m_trap with the frame. The exception number (IPSR)
//    says what it is: SysTick (15) is the tick; 16 and up are the NVIC's
//    external interrupts, dispatched through irq::dispatch (drivers/nvic.cpp
//    claims the one being taken); HardFault, MemManage, BusFault and
//    UsageFault are faults, decoded from the CFSR and HFSR.
// 2. Priorities. Every interrupt and the SysTick keep priority 0, so none
//    preempts another; faults are above them. PRIMASK masks them all
//    (irq_save), and a fault taken with PRIMASK set escalates to HardFault
//    (HFSR.FORCED), whose cause is still in the CFSR.
// 3. Semihosting is a `bkpt 0xab`. With a debugger (or QEMU's -semihosting)
//    it is served; without one it is a HardFault with HFSR.DEBUGEVT, which
//    armv7m_trap answers by returning -1 from the call, so poweroff and the
//    command-line query fall back (arch::exit halts the core).
// 4. Expected faults: a precise BusFault on an instruction listed in
//    __extable (arch::probe_write) resumes at its fixup.
#include <kernel/arch.h>
#include <kernel/semihosting.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/extable.h>
#include <kernel/fdt.h>
#include <kernel/format.h>
#include <kernel/irq.h>
#include <kernel/panic.h>
#include <kernel/string.h>
#include <kernel/timer.h>
#include "trap.h"


namespace arch {
PerCpu* g_this_cpu;
}

namespace {

inline volatile uint32_t& reg(uintptr_t addr) { return *reinterpret_cast<volatile uint32_t*>(addr); }

// System control block and SysTick (ARMv7-M ARM, B3.2 and B3.3).
constexpr uintptr_t kIcsr = 0xe000ed04, kCfsr = 0xe000ed28, kHfsr = 0xe000ed2c, kMmfar = 0xe000ed34,
                    kBfar = 0xe000ed38, kAircr = 0xe000ed0c;
constexpr uintptr_t kSystCsr = 0xe000e010, kSystRvr = 0xe000e014, kSystCvr = 0xe000e018;
constexpr uint32_t kIcsrPendstset = 1u << 26;
constexpr uint32_t kHfsrDebugEvt = 1u << 31, kHfsrForced = 1u << 30, kHfsrVectTbl = 1u << 1;
constexpr uint32_t kSystEnable = 1, kSystTickInt = 2, kSystClkSource = 4;

// Exception numbers.
enum : unsigned { kNmi = 2, kHardFault = 3, kMemManage = 4, kBusFault = 5, kUsageFault = 6, kSvc = 11,
                  kDebugMon = 12, kPendSv = 14, kSysTick = 15, kFirstIrq = 16 };


// The SysTick: a 24-bit down-counter at the CPU clock, reloaded every
// tick (1/kTimerHz). counter() = wraps * period + what has elapsed of the
// current period. g_wraps counts the SysTick exceptions taken.
uint64_t g_clock_hz = 25000000;  // the DTB's clock says (init_from_dtb)
uint32_t g_period = 250000;
uint64_t g_wraps;

inline uint32_t ipsr() {
  uint32_t v;
  asm volatile("mrs %0, ipsr" : "=r"(v));
  return v & 0x1ff;
}

// The CFSR's causes (B3.2.15), most specific first.
const char* fault_cause(uint32_t cfsr, bool& has_addr, uintptr_t& addr) {
  has_addr = false;
  if (cfsr & (1u << 7)) {  // MMARVALID
    has_addr = true;
    addr = reg(kMmfar);
  } else if (cfsr & (1u << 15)) {  // BFARVALID
    has_addr = true;
    addr = reg(kBfar);
  }
  if (cfsr & (1u << 0)) return "MemManage: instruction access violation";
  if (cfsr & (1u << 1)) return "MemManage: data access violation";
  if (cfsr & (1u << 3)) return "MemManage: on exception return (unstacking)";
  if (cfsr & (1u << 4)) return "MemManage: on exception entry (stacking)";
  if (cfsr & (1u << 8)) return "BusFault: instruction fetch";
  if (cfsr & (1u << 9)) return "BusFault: precise data access";
  if (cfsr & (1u << 10)) return "BusFault: imprecise data access";
  if (cfsr & (1u << 11)) return "BusFault: on exception return (unstacking)";
  if (cfsr & (1u << 12)) return "BusFault: on exception entry (stacking)";
  if (cfsr & (1u << 16)) return "UsageFault: undefined instruction";
  if (cfsr & (1u << 17)) return "UsageFault: invalid state (an ARM-state branch?)";
  if (cfsr & (1u << 18)) return "UsageFault: invalid PC load on exception return";
  if (cfsr & (1u << 19)) return "UsageFault: no coprocessor";
  if (cfsr & (1u << 24)) return "UsageFault: unaligned access";
  if (cfsr & (1u << 25)) return "UsageFault: divide by zero";
  return nullptr;
}

void handle_fault(TrapFrame* f, unsigned exc) {
  uint32_t hfsr = reg(kHfsr);
  if (exc == kHardFault && (hfsr & kHfsrDebugEvt)) {
    // A bkpt with no debugger. A semihosting call fails; anything else is fatal.
    reg(kHfsr) = kHfsrDebugEvt;
    if (*reinterpret_cast<const uint16_t*>(f->pc) == 0xbeab) {
      f->r0 = ~0u;
      f->pc += 2;
      return;
    }
    fatal_exception("breakpoint (bkpt) with no debugger", 0, f);
  }
  uint32_t cfsr = reg(kCfsr);
  bool has_addr;
  uintptr_t addr = 0;
  const char* cause = fault_cause(cfsr, has_addr, addr);
  reg(kCfsr) = cfsr;  // write-one-to-clear
  if (exc == kHardFault) reg(kHfsr) = hfsr;
  if (!cause) cause = exc == kHardFault && (hfsr & kHfsrVectTbl) ? "HardFault: vector table read" : "HardFault";
  if (cfsr & (1u << 9)) {
    // A probing store (probe_write) resumes at its fixup.
    if (extable::fixup(f->pc)) {
      f->pc = extable::recover(f->pc, addr, has_addr, "bus fault", cause);
      return;
    }
  }
  fatal_exception(cause, has_addr ? addr : 0, f);
}

}  // namespace

extern "C" void armv7m_trap(TrapFrame* f) {
  unsigned exc = ipsr();
  PerCpu& cpu = this_cpu();
  if (exc == kSysTick) {
    g_wraps++;  // first: counter() must see this wrap from here on
    timer_interrupt();
    return;
  }
  if (exc >= kFirstIrq) {
    const TrapFrame* outer = cpu.irq_frame;
    cpu.irq_frame = f;
    cpu.irq_depth++;
    irq::dispatch();
    cpu.irq_depth--;
    cpu.irq_frame = outer;
    return;
  }
  switch (exc) {
    case kHardFault: case kMemManage: case kBusFault: case kUsageFault: handle_fault(f, exc); return;
    case kNmi: fatal_exception("NMI", 0, f);
    case kSvc: fatal_exception("SVC (the kernel makes none)", 0, f);
    case kDebugMon: fatal_exception("DebugMonitor", 0, f);
    case kPendSv: fatal_exception("PendSV (the kernel pends none)", 0, f);
    default: fatal_exception("exception from an unexpected vector", exc, f);
  }
}

namespace {
// The stack's paint (start.S): no MMU, so no guard page below it. Every
// exit reports how deep the stack went, and one that reached its bottom
// (ran off it, into .bss below, or as good as) makes the exit status 3,
// as a panic does.
constexpr uint32_t kStackPaint = 0x5354414b;
size_t stack_use(const PerCpu& cpu) {
  const auto* w = reinterpret_cast<const uint32_t*>(cpu.stack_bottom);
  const auto* top = reinterpret_cast<const uint32_t*>(cpu.stack_top);
  while (w < top && *w == kStackPaint) w++;
  return static_cast<size_t>(reinterpret_cast<uintptr_t>(top) - reinterpret_cast<uintptr_t>(w));
}
}  // namespace

namespace arch {

void init_boot_cpu(PerCpu& cpu) { set_this_cpu(&cpu); }
void init_secondary_cpu(PerCpu&) {}

void init_from_dtb(const fdt::Tree& t) {
  // The SysTick's clock: its own clock-frequency, or its clock's.
  fdt::Node st = t.find_compatible("arm,armv7m-systick");
  fdt::Property p;
  if (st != fdt::kNoNode) {
    if (t.prop(st, "clock-frequency", p) && p.len == 4) {
      g_clock_hz = p.u32();
    } else if (t.prop(st, "clocks", p) && p.len >= 4) {
      fdt::Node clk = t.find_phandle(p.u32());
      fdt::Property f;
      if (clk != fdt::kNoNode && t.prop(clk, "clock-frequency", f) && f.len == 4) g_clock_hz = f.u32();
    }
  }
  uint64_t period = g_clock_hz / kTimerHz;
  if (period < 2 || period > (1u << 24)) panic("systick: a %llu Hz clock cannot tick %u times a second",
                                               static_cast<unsigned long long>(g_clock_hz), kTimerHz);
  g_period = static_cast<uint32_t>(period);
  // Counting from now (counter()); the tick's exception waits in PENDSTSET
  // until interrupts are on.
  reg(kSystCsr) = 0;
  reg(kSystRvr) = g_period - 1;
  reg(kSystCvr) = 0;
  reg(kSystCsr) = kSystEnable | kSystTickInt | kSystClkSource;
}

bool cpu_usable(const fdt::Tree&, int) { return true; }
bool start_cpu(PerCpu&) { return false; }  // one core

// The SysTick runs from init_from_dtb on, at a fixed period: a tick every
// 1/kTimerHz, which is all timer_arm is ever asked for (kernel/timer.cpp).
void timer_init_cpu() {}
void timer_arm(uint64_t) {}

uint64_t counter_frequency() { return g_clock_hz; }

uint64_t counter() {
  IrqState s = irq_save();
  uint64_t w = g_wraps;
  uint32_t v = reg(kSystCvr);
  if (reg(kIcsr) & kIcsrPendstset) {
    // A wrap whose exception has not run yet: count it, and read the
    // counter again (the first read may be from before the wrap).
    w++;
    v = reg(kSystCvr);
  }
  irq_restore(s);
  uint32_t elapsed = g_period - 1 - (v < g_period ? v : g_period - 1);
  return w * g_period + elapsed;
}

namespace {
[[noreturn]] void halt() {
  kprintf("halted: no debugger took the semihosting exit; reset or power-cycle the board\n");
  irq_disable();
  for (;;) asm volatile("wfi");
}
}  // namespace

void poweroff() {
  board_poweroff();
  exit(0);
}

void exit(int code) {
  const PerCpu& cpu = ::this_cpu();
  size_t used = stack_use(cpu), size = cpu.stack_top - cpu.stack_bottom;
  kprintf("stack: %zu of %zu bytes used at most\n", used, size);
  if (used + 64 > size) {
    kprintf("stack: it reached its last 64 bytes (no guard page here): counted as a failure\n");
    if (code == 0 || code == 1) code = 3;
  }
  semihosting::exit(code);
  halt();
}

bool firmware_bootargs(char* buf, size_t size) {
  // SYS_GET_CMDLINE: QEMU gives "IMAGE -append's text"; a debugger gives
  // what it was told (OpenOCD: arm semihosting_cmdline).
  return semihosting::command_line(buf, size);
}

void dump_registers(const TrapFrame* f) {
  if (!f) {
    uint32_t sp, lr, psr, primask;
    asm volatile("mov %0, sp\n mov %1, lr\n mrs %2, xpsr\n mrs %3, primask"
                 : "=r"(sp), "=r"(lr), "=r"(psr), "=r"(primask));
    kprintf("  sp  %08lx  lr  %08lx  xpsr %08lx  primask %lx\n", static_cast<unsigned long>(sp),
            static_cast<unsigned long>(lr), static_cast<unsigned long>(psr), static_cast<unsigned long>(primask));
    return;
  }
  const uint32_t r[13] = {f->r0, f->r1, f->r2, f->r3, f->r4_r11[0], f->r4_r11[1], f->r4_r11[2],
                          f->r4_r11[3], f->r4_r11[4], f->r4_r11[5], f->r4_r11[6], f->r4_r11[7], f->r12};
  for (int i = 0; i < 13; i += 4) {
    for (int j = i; j < i + 4 && j < 13; j++) kprintf("  r%-2d %08lx", j, static_cast<unsigned long>(r[j]));
    kprintf("\n");
  }
  kprintf("  sp  %08lx  lr  %08lx  pc  %08lx  xpsr %08lx\n  cfsr %08lx  hfsr %08lx  exc_return %08lx\n",
          static_cast<unsigned long>(trap_frame_sp(f)), static_cast<unsigned long>(f->lr),
          static_cast<unsigned long>(f->pc), static_cast<unsigned long>(f->xpsr),
          static_cast<unsigned long>(reg(kCfsr)), static_cast<unsigned long>(reg(kHfsr)),
          static_cast<unsigned long>(f->exc_return));
}

uintptr_t trap_frame_fp(const TrapFrame* f) { return f ? f->r4_r11[3] : 0; }
uintptr_t trap_frame_pc(const TrapFrame* f) { return f ? f->pc : 0; }
uintptr_t trap_frame_sp(const TrapFrame* f) {
  if (!f) return 0;
  return reinterpret_cast<uintptr_t>(f + 1) + ((f->xpsr & kXpsrStackRealigned) ? 4 : 0);
}
uintptr_t trap_frame_ra(const TrapFrame* f) { return f ? f->lr : 0; }
const TrapFrame* trap_frame_at(uintptr_t) { return nullptr; }

void send_ipi(const PerCpu&) {}  // one core: nobody to wake

}  // namespace arch
