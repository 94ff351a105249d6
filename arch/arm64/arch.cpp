// SPDX-License-Identifier: Apache-2.0
// AArch64 support: traps, the PSCI call, the generic timer, exits, register
// dumps.
#include <drivers/psci.h>
#include <kernel/arch.h>
#include <kernel/semihosting.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/expected_fault.h>
#include <kernel/extable.h>
#include <kernel/fdt.h>
#include <kernel/format.h>
#include <kernel/irq.h>
#include <kernel/panic.h>
#include <kernel/rseq.h>
#include <kernel/stack.h>
#include <cstddef>
#include "sysregs.h"
#include "trap.h"

static_assert(offsetof(PerCpu, index) == PERCPU_INDEX);
static_assert(offsetof(PerCpu, stack_top) == PERCPU_STACK_TOP);
static_assert(offsetof(PerCpu, stack_bottom) == PERCPU_STACK_BOTTOM);
static_assert(offsetof(PerCpu, overflow_top) == PERCPU_OVERFLOW_TOP);

extern "C" char arm64_vectors[], secondary_entry[];

namespace arch {
void mmu_live();
}

namespace {

unsigned g_timer_irq = 27;  // virtual timer PPI 11; the DTB says for sure

const char* fault_status(uint64_t dfsc) {
  switch (dfsc & 0x3c) {
    case 0x04: return "translation fault";
    case 0x08: return "access flag fault";
    case 0x0c: return "permission fault";
    case 0x00: return "address size fault";
    case 0x10: return dfsc == 0x10 ? "synchronous external abort" : "external abort on walk";
    case 0x20: return dfsc == 0x21 ? "alignment fault" : "fault";
    case 0x30: return "TLB conflict";
  }
  return "fault";
}

const char* exception_class(uint64_t ec) {
  switch (ec) {
    case 0x00: return "undefined instruction";
    case 0x01: return "WFI/WFE trap";
    case 0x07: return "FP/SIMD access trap";
    case 0x0e: return "illegal execution state";
    case 0x15: return "SVC";
    case 0x16: return "HVC";
    case 0x17: return "SMC";
    case 0x18: return "system register trap";
    case 0x20: return "instruction abort from lower EL";
    case 0x21: return "instruction abort";
    case 0x22: return "PC alignment fault";
    case 0x24: return "data abort from lower EL";
    case 0x25: return "data abort";
    case 0x26: return "SP alignment fault";
    case 0x2f: return "SError";
    case 0x3c: return "BRK instruction";
  }
  return "unknown exception";
}

// Builds "data abort: write, permission fault (level 3)" into buf.
const char* describe_sync(uint64_t esr, char* buf, size_t size) {
  uint64_t ec = esr >> 26;
  if (ec == 0x25 || ec == 0x24 || ec == 0x21 || ec == 0x20) {
    uint64_t dfsc = esr & 0x3f;
    bool write = (ec == 0x25 || ec == 0x24) && (esr & (1u << 6));
    ksnprintf(buf, size, "%s: %s%s (level %u)", exception_class(ec),
              (ec == 0x25 || ec == 0x24) ? (write ? "write, " : "read, ") : "", fault_status(dfsc),
              static_cast<unsigned>(dfsc & 3));
    return buf;
  }
  ksnprintf(buf, size, "%s (ESR 0x%llx)", exception_class(ec), static_cast<unsigned long long>(esr));
  return buf;
}

}  // namespace

extern "C" void arm64_trap(TrapFrame* f, unsigned kind) {
  PerCpu& cpu = this_cpu();
  if (kind & TRAP_OVERFLOW) {
    // The frame is on the overflow stack (vectors.S). A data abort's FAR is
    // the store that hit the guard page; other exceptions have no address.
    bool abort = (kind & ~TRAP_OVERFLOW) == TRAP_SYNC && (f->esr >> 26) == 0x25;
    kstack::overflow(f, abort ? f->far : 0);
  }
  if (kind == TRAP_IRQ) {
    // Before any handler runs: an interrupted restartable section starts
    // again from its beginning (kernel/rseq.h, Interrupts). FIQs and SErrors
    // are fatal; the synchronous exceptions that return are below (rseq.h,
    // Synchronous exceptions).
    f->elr = rseq::restart_pc(f->elr);
    const TrapFrame* outer = cpu.irq_frame;
    cpu.irq_frame = f;  // where the interrupted registers are (smp::freeze_others)
    cpu.irq_depth++;
    irq::dispatch();
    cpu.irq_depth--;
    cpu.irq_frame = outer;
    return;
  }
  char buf[96];
  if (kind == TRAP_SYNC) {
    uint64_t ec = f->esr >> 26;
    // Each one that returns goes back through rseq::restart_pc, as an
    // interrupt does (kernel/rseq.h, Synchronous exceptions): a fixup inside
    // a restartable section starts it again from its beginning.
    // A probing store (probe_write) resumes at its fixup.
    if (ec == 0x25 && extable::fixup(f->elr)) {
      f->elr = rseq::restart_pc(
          extable::recover(f->elr, f->far, true, "data abort", describe_sync(f->esr, buf, sizeof buf)));
      return;
    }
    // A semihosting call where nothing serves it (arch_semihost).
    if (ec == 0x00 && extable::fixup(f->elr)) {
      f->elr = rseq::restart_pc(extable::recover(f->elr, 0, false, "undefined instruction", "semihosting unavailable"));
      return;
    }
    // An instruction fetch a probe expects (expected_fault::probe_execute).
    if (ec == 0x21) expected_fault::instruction_fetch(f->elr, f->far, describe_sync(f->esr, buf, sizeof buf));
    bool has_far = ec == 0x25 || ec == 0x24 || ec == 0x21 || ec == 0x20 || ec == 0x22;
    fatal_exception(describe_sync(f->esr, buf, sizeof buf), has_far ? f->far : 0, f);
  }
  const char* what = kind == TRAP_FIQ ? "FIQ" : kind == TRAP_SERROR ? "SError" : "exception from an unexpected vector";
  fatal_exception(what, 0, f);
}

namespace arch {

namespace {
void enable_cycle_counter() {
  asm volatile(
      "msr pmccfiltr_el0, xzr\n"  // count at EL1 too
      "mrs x0, pmcr_el0\n orr x0, x0, #1\n msr pmcr_el0, x0\n"
      "mov x0, #(1 << 31)\n msr pmcntenset_el0, x0\n isb" ::
          : "x0", "memory");
}
}  // namespace

void init_boot_cpu(PerCpu& cpu) {
  mmu_live();
  enable_cycle_counter();
  set_this_cpu(&cpu);
  asm volatile("msr vbar_el1, %0\n isb" ::"r"(arm64_vectors) : "memory");
}

void init_from_dtb(const fdt::Tree& t) {
  psci::init(t);
  // Interrupts in the binding's order: secure physical, non-secure
  // physical, virtual, hypervisor; the kernel uses the virtual timer. The
  // Pi's DTB says armv7-timer (the binding's older name) for the same timer.
  fdt::Node timer = t.find_compatible("arm,armv8-timer");
  if (timer == fdt::kNoNode) timer = t.find_compatible("arm,armv7-timer");
  unsigned irq;
  if (timer != fdt::kNoNode && irq::from_dtb(t, timer, 2, irq)) g_timer_irq = irq;
}

void init_secondary_cpu(PerCpu&) {
  asm volatile("msr vbar_el1, %0\n isb" ::"r"(arm64_vectors) : "memory");
  enable_cycle_counter();
}

namespace {
void timer_irq(unsigned, void*) { timer_interrupt(); }
}  // namespace

void timer_init_cpu() {
  if (cpu_id() == 0) irq::register_handler(g_timer_irq, timer_irq, nullptr, "timer");
  irq::enable(g_timer_irq, cpu_id());
}

void timer_arm(uint64_t ticks) {
  asm volatile("msr cntv_tval_el0, %0\n msr cntv_ctl_el0, %1\n isb" ::"r"(ticks), "r"(1ull) : "memory");
}

// PSCI where the DTB has it (virt); else semihosting's exit with status 0
// (QEMU raspi3b); else the board's power-off device (the Pi's watchdog);
// else nothing can turn the board off: stop here.
void poweroff() {
  psci::system_off();
  semihosting::exit(0);
  board_poweroff();
  kprintf("poweroff: no PSCI, semihosting or power-off device: halting (it is safe to cut the power)\n");
  irq_disable();
  for (;;) asm volatile("wfi");
}

void exit(int code) {
  if (code == 0) poweroff();
  semihosting::exit(code);
  poweroff();
}

void dump_registers(const TrapFrame* f) {
  TrapFrame now;
  if (!f) {
    // No exception: snapshot the registers as they are here.
    asm volatile(
        "stp x0, x1, [%0, #0]\n stp x2, x3, [%0, #16]\n stp x4, x5, [%0, #32]\n"
        "stp x6, x7, [%0, #48]\n stp x8, x9, [%0, #64]\n stp x10, x11, [%0, #80]\n"
        "stp x12, x13, [%0, #96]\n stp x14, x15, [%0, #112]\n stp x16, x17, [%0, #128]\n"
        "stp x18, x19, [%0, #144]\n stp x20, x21, [%0, #160]\n stp x22, x23, [%0, #176]\n"
        "stp x24, x25, [%0, #192]\n stp x26, x27, [%0, #208]\n stp x28, x29, [%0, #224]\n"
        "str x30, [%0, #240]\n mov x1, sp\n str x1, [%0, #248]\n adr x1, .\n str x1, [%0, #256]\n"
        "mrs x1, spsr_el1\n str x1, [%0, #264]\n"
        :
        : "r"(&now)
        : "x1", "memory");
    now.esr = 0;
    now.far = 0;
    f = &now;
  }
  for (int i = 0; i < 31; i += 3) {
    for (int j = i; j < i + 3 && j < 31; j++) kprintf("  x%-2d %016llx", j, static_cast<unsigned long long>(f->x[j]));
    kprintf("\n");
  }
  kprintf("  sp  %016llx  pc  %016llx  spsr %08llx\n  esr %016llx  far %016llx\n",
          static_cast<unsigned long long>(f->sp), static_cast<unsigned long long>(f->elr),
          static_cast<unsigned long long>(f->spsr), static_cast<unsigned long long>(f->esr),
          static_cast<unsigned long long>(f->far));
}

uintptr_t trap_frame_fp(const TrapFrame* f) { return f ? f->x[29] : 0; }
uintptr_t trap_frame_pc(const TrapFrame* f) { return f ? f->elr : 0; }
uintptr_t trap_frame_sp(const TrapFrame* f) { return f ? f->sp : 0; }
uintptr_t trap_frame_ra(const TrapFrame* f) { return f ? f->x[30] : 0; }
// vectors.S pushes an ordinary frame record {x29, elr} for each trap.
const TrapFrame* trap_frame_at(uintptr_t) { return nullptr; }

void send_ipi(const PerCpu& cpu) {
  const IrqChip* c = irq::chip();
  if (c && c->send_ipi) c->send_ipi(cpu.index);
}

}  // namespace arch

namespace arch {
bool cpu_usable(const fdt::Tree&, int) { return true; }
// The bootargs are the DTB's, which the bootloader wrote.
bool firmware_bootargs(char*, size_t) { return false; }

}  // namespace arch

// SMCCC for AArch64: x0 = function id, x1-x3 arguments, results in x0-x3;
// firmware following SMCCC v1.0 may also change x4-x17.
intptr_t psci::smccc(Conduit conduit, uint32_t fn, uintptr_t a1, uintptr_t a2, uintptr_t a3) {
  register uint64_t x0 asm("x0") = fn;
  register uint64_t x1 asm("x1") = a1;
  register uint64_t x2 asm("x2") = a2;
  register uint64_t x3 asm("x3") = a3;
  if (conduit == Conduit::kHvc)
    asm volatile("hvc #0"
                 : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3)
                 :
                 : "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17",
                   "memory");
  else if (conduit == Conduit::kSmc)
    asm volatile("smc #0"
                 : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3)
                 :
                 : "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17",
                   "memory");
  else return -1;
  return static_cast<intptr_t>(x0);
}
