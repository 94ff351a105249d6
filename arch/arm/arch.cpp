// SPDX-License-Identifier: Apache-2.0
// ARMv7-A support: traps, the exception modes' save areas, the PSCI call,
// the generic timer, the cycle counter, exits, register dumps.
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

extern "C" char arm_vectors[], secondary_entry[];

namespace arch {
void mmu_live();
}

namespace {

unsigned g_timer_irq = 27;  // virtual timer PPI 11; the DTB says for sure

// The semihosting trap: svc 0x123456 in ARM state, svc 0xab in Thumb.
constexpr uint32_t kSemihostingSvcArm = 0x123456, kSemihostingSvcThumb = 0xab;
#if defined(__thumb__)
constexpr uint32_t kSemihostingSvc = kSemihostingSvcThumb;
#else
constexpr uint32_t kSemihostingSvc = kSemihostingSvcArm;
#endif


// Short-descriptor fault status: FS = FSR[10]:FSR[3:0].
const char* fault_status(uint32_t fsr, bool& has_level, const char*& level) {
  unsigned fs = ((fsr >> 6) & 0x10) | (fsr & 0xf);
  has_level = true;
  level = (fs & 2) ? "page" : "section";
  switch (fs) {
    case 0x05:
    case 0x07: return "translation fault";
    case 0x03:
    case 0x06: level = fs == 0x06 ? "page" : "section"; return "access flag fault";
    case 0x09:
    case 0x0b: return "domain fault";
    case 0x0d:
    case 0x0f: return "permission fault";
    case 0x0c:
    case 0x0e: level = fs == 0x0e ? "level 2" : "level 1"; return "external abort on table walk";
    case 0x1c:
    case 0x1e: level = fs == 0x1e ? "level 2" : "level 1"; return "parity error on table walk";
  }
  has_level = false;
  switch (fs) {
    case 0x01: return "alignment fault";
    case 0x02: return "debug event";
    case 0x04: return "fault on instruction cache maintenance";
    case 0x08: return "synchronous external abort";
    case 0x10: return "TLB conflict abort";
    case 0x16: return "asynchronous external abort";
    case 0x18: return "asynchronous parity error";
    case 0x19: return "synchronous parity error";
    case 0x1a: return "coprocessor abort";
  }
  return "fault";
}

// Builds "data abort: write, permission fault (page)" into buf.
const char* describe_abort(const TrapFrame* f, char* buf, size_t size) {
  bool data = f->kind == TRAP_DABT;
  bool has_level;
  const char* level;
  const char* what = fault_status(f->fsr, has_level, level);
  ksnprintf(buf, size, "%s: %s%s%s%s%s", data ? "data abort" : "prefetch abort",
            data ? ((f->fsr & (1u << 11)) ? "write, " : "read, ") : "", what, has_level ? " (" : "",
            has_level ? level : "", has_level ? ")" : "");
  return buf;
}

// What an exception mode's stub keeps until it is in SVC mode (vectors.S).
// The banked sp of the abort, undefined, IRQ and FIQ modes point at one
// each; they never hold more than one exception's state at a time (the
// stub copies it out with interrupts masked).
struct ModeSave {
  uint32_t r0, r1, r2, pc, cpsr, sp;
};
static_assert(offsetof(ModeSave, r0) == MODE_SAVE_R0 && offsetof(ModeSave, r1) == MODE_SAVE_R1 &&
              offsetof(ModeSave, r2) == MODE_SAVE_R2 && offsetof(ModeSave, pc) == MODE_SAVE_PC &&
              offsetof(ModeSave, cpsr) == MODE_SAVE_CPSR && offsetof(ModeSave, sp) == MODE_SAVE_SP &&
              sizeof(ModeSave) == MODE_SAVE_SIZE);
enum { kModeAbt, kModeUnd, kModeIrq, kModeFiq, kModes };
// In .noscan (linker/kernel.ld.in), which kmemleak does not read: after an
// exception the area keeps stale copies of registers, and one that held a
// leaked object's address would hide the leak for good. Nothing is lost:
// an exception's live registers are in its trap frame on the stack by the
// time anything runs, and that is scanned.
__attribute__((section(".noscan"))) ModeSave g_mode_save[kMaxCpus][kModes];

// Points the banked sp of every exception mode at this core's save areas.
// With interrupts masked (boot). The operands are pinned to r0-r3: FIQ mode
// banks r8-r12.
void set_mode_stacks(const PerCpu& cpu) {
  register ModeSave* abt asm("r0") = &g_mode_save[cpu.index][kModeAbt];
  register ModeSave* und asm("r1") = &g_mode_save[cpu.index][kModeUnd];
  register ModeSave* irq asm("r2") = &g_mode_save[cpu.index][kModeIrq];
  register ModeSave* fiq asm("r3") = &g_mode_save[cpu.index][kModeFiq];
  asm volatile(
      "cps #" STRINGIFY(PSR_MODE_ABT) "\n mov sp, %0\n"
      "cps #" STRINGIFY(PSR_MODE_UND) "\n mov sp, %1\n"
      "cps #" STRINGIFY(PSR_MODE_IRQ) "\n mov sp, %2\n"
      "cps #" STRINGIFY(PSR_MODE_FIQ) "\n mov sp, %3\n"
      "cps #" STRINGIFY(PSR_MODE_SVC) "\n" ::"r"(abt),
      "r"(und), "r"(irq), "r"(fiq)
      : "memory");
}

// Where an exception returns: pc, or, inside a restartable section, the
// section's start (kernel/rseq.h: every interrupt, 3, and every exception
// that returns, 4). A section restarts with no IT block in progress: the
// sections hold no IT instruction, so this only keeps a wrong SPSR.IT from
// applying to the first instructions of the section.
void resume_at(TrapFrame* f, uint32_t pc) {
  uint32_t to = rseq::restart_pc(pc);
  if (to != pc) f->cpsr &= ~uint32_t{PSR_IT_MASK};
  f->pc = to;
}

}  // namespace

extern "C" void arm_trap(TrapFrame* f, unsigned kind) {
  PerCpu& cpu = this_cpu();
  if (kind & TRAP_OVERFLOW) {
    // The frame is on the overflow stack (vectors.S). A data abort's DFAR
    // is the store that hit the guard page; other exceptions have none.
    kstack::overflow(f, f->kind == TRAP_DABT ? f->far : 0);
  }
  if (kind == TRAP_IRQ) {
    // Before any handler runs: an interrupted restartable section starts
    // again from its beginning (kernel/rseq.h, Interrupts). FIQs are fatal;
    // the exceptions that return are below (rseq.h, Synchronous exceptions).
    resume_at(f, f->pc);
    const TrapFrame* outer = cpu.irq_frame;
    cpu.irq_frame = f;  // where the interrupted registers are (smp::freeze_others)
    cpu.irq_depth++;
    irq::dispatch();
    cpu.irq_depth--;
    cpu.irq_frame = outer;
    return;
  }
  char buf[96];
  switch (kind) {
    case TRAP_DABT:
      // A probing store (probe_write) resumes at its fixup.
      if (extable::fixup(f->pc)) {
        resume_at(f, extable::recover(f->pc, f->far, true, "data abort", describe_abort(f, buf, sizeof buf)));
        return;
      }
      fatal_exception(describe_abort(f, buf, sizeof buf), f->far, f);
    case TRAP_PABT:
      // An instruction fetch a probe expects (expected_fault::probe_execute).
      expected_fault::instruction_fetch(f->pc, f->far, describe_abort(f, buf, sizeof buf));
      fatal_exception(describe_abort(f, buf, sizeof buf), f->far, f);
    case TRAP_UNDEF: {
      bool thumb = f->cpsr & PSR_T;
      f->pc -= thumb ? 2 : 4;  // lr_und points past the instruction
      if (thumb)
        ksnprintf(buf, sizeof buf, "undefined instruction (Thumb) 0x%04x", *reinterpret_cast<const uint16_t*>(f->pc));
      else
        ksnprintf(buf, sizeof buf, "undefined instruction 0x%08lx",
                  static_cast<unsigned long>(*reinterpret_cast<const uint32_t*>(f->pc)));
      fatal_exception(buf, 0, f);
    }
    case TRAP_SVC: {
      // A semihosting call with no debugger to take it: report failure and
      // let the caller fall back (arch::exit powers off instead).
      bool arm_state = !(f->cpsr & PSR_T);
      uint32_t imm = arm_state ? *reinterpret_cast<const uint32_t*>(f->pc - 4) & 0x00ffffff
                               : *reinterpret_cast<const uint16_t*>(f->pc - 2) & 0xff;
      if (imm == (arm_state ? kSemihostingSvcArm : kSemihostingSvcThumb)) {
        f->r[0] = ~0u;
        resume_at(f, f->pc);
        return;
      }
      f->pc -= arm_state ? 4 : 2;  // report the svc itself
      ksnprintf(buf, sizeof buf, "SVC #0x%lx", static_cast<unsigned long>(imm));
      fatal_exception(buf, 0, f);
    }
    case TRAP_FIQ: fatal_exception("FIQ", 0, f);
    default: fatal_exception("exception from an unexpected vector", 0, f);
  }
}

namespace arch {

namespace {
// Starts the PMU cycle counter (arch::cycles) on this core: PMCR.E on,
// PMCR.D off (count every cycle, not every 64th), PMCNTENSET.C.
void enable_cycle_counter() {
  uint32_t pmcr;
  asm volatile("mrc p15, 0, %0, c9, c12, 0" : "=r"(pmcr));
  pmcr = (pmcr | 1u) & ~(1u << 3);
  asm volatile(
      "mcr p15, 0, %0, c9, c12, 0\n"  // PMCR
      "mcr p15, 0, %1, c9, c12, 1\n"  // PMCNTENSET
      "isb" ::"r"(pmcr),
      "r"(1u << 31)
      : "memory");
}
}  // namespace

void init_boot_cpu(PerCpu& cpu) {
  mmu_live();
  enable_cycle_counter();
  set_this_cpu(&cpu);
  set_mode_stacks(cpu);
  asm volatile("mcr p15, 0, %0, c12, c0, 0\n isb" ::"r"(arm_vectors) : "memory");  // VBAR
}

void init_secondary_cpu(PerCpu& cpu) {
  enable_cycle_counter();
  set_mode_stacks(cpu);
  asm volatile("mcr p15, 0, %0, c12, c0, 0\n isb" ::"r"(arm_vectors) : "memory");  // VBAR
}

void init_from_dtb(const fdt::Tree& t) {
  psci::init(t);
  fdt::Node timer = t.find_compatible("arm,armv7-timer");
  unsigned irq;
  if (timer != fdt::kNoNode && irq::from_dtb(t, timer, 2, irq)) g_timer_irq = irq;
}

bool cpu_usable(const fdt::Tree&, int) { return true; }

bool start_cpu(PerCpu& cpu) {
  // The HVC/SMC is not a memory access: complete every store the new core
  // will read (its PerCpu, the tables) before the firmware starts it.
  asm volatile("dsb ish" ::: "memory");
  return psci::cpu_on(cpu.index, cpu.hwid, reinterpret_cast<uintptr_t>(secondary_entry),
                      reinterpret_cast<uintptr_t>(&cpu));
}

namespace {
void timer_irq(unsigned, void*) { timer_interrupt(); }
}  // namespace

void timer_init_cpu() {
  if (cpu_id() == 0) irq::register_handler(g_timer_irq, timer_irq, nullptr);
  irq::enable(g_timer_irq, cpu_id());
}

void timer_arm(uint64_t ticks) {
  // CNTV_TVAL is a signed 32-bit down-counter.
  uint32_t tval = ticks > 0x7fffffffu ? 0x7fffffffu : static_cast<uint32_t>(ticks);
  asm volatile(
      "mcr p15, 0, %0, c14, c3, 0\n"  // CNTV_TVAL
      "mcr p15, 0, %1, c14, c3, 1\n"  // CNTV_CTL: enabled, not masked
      "isb" ::"r"(tval),
      "r"(1u)
      : "memory");
}

void poweroff() {
  psci::system_off();
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
    uint32_t tmp;
    asm volatile(
        "stmia %1, {r0-r12}\n"
        "str sp, [%1, #" STRINGIFY(TF_SP) "]\n"
        "str lr, [%1, #" STRINGIFY(TF_LR) "]\n"
        "adr %0, .\n str %0, [%1, #" STRINGIFY(TF_PC) "]\n"
        "mrs %0, cpsr\n str %0, [%1, #" STRINGIFY(TF_CPSR) "]\n"
        : "=&r"(tmp)
        : "r"(&now)
        : "memory");
    now.fsr = 0;
    now.far = 0;
    now.kind = 0;
    f = &now;
  }
  for (int i = 0; i < 13; i += 4) {
    for (int j = i; j < i + 4 && j < 13; j++) kprintf("  r%-2d %08lx", j, static_cast<unsigned long>(f->r[j]));
    kprintf("\n");
  }
  kprintf("  sp  %08lx  lr  %08lx  pc  %08lx  cpsr %08lx\n  fsr %08lx  far %08lx\n", static_cast<unsigned long>(f->sp),
          static_cast<unsigned long>(f->lr), static_cast<unsigned long>(f->pc), static_cast<unsigned long>(f->cpsr),
          static_cast<unsigned long>(f->fsr), static_cast<unsigned long>(f->far));
}

// The frame pointer: r11 in ARM state, r7 in Thumb-2 (what GCC's
// __builtin_frame_address reads there).
#if defined(__thumb__)
uintptr_t trap_frame_fp(const TrapFrame* f) { return f ? f->r[7] : 0; }
#else
uintptr_t trap_frame_fp(const TrapFrame* f) { return f ? f->r[11] : 0; }
#endif
uintptr_t trap_frame_pc(const TrapFrame* f) { return f ? f->pc : 0; }
uintptr_t trap_frame_sp(const TrapFrame* f) { return f ? f->sp : 0; }
uintptr_t trap_frame_ra(const TrapFrame* f) { return f ? f->lr : 0; }
// vectors.S pushes an ordinary frame record {fp, pc} for each trap (ARM
// state; Thumb-2's unwinder finds the frame itself: unwind.cpp).
const TrapFrame* trap_frame_at(uintptr_t) { return nullptr; }

void send_ipi(const PerCpu& cpu) {
  const IrqChip* c = irq::chip();
  if (c && c->send_ipi) c->send_ipi(cpu.index);
}

// The bootargs are the DTB's, which the bootloader wrote.
bool firmware_bootargs(char*, size_t) { return false; }

}  // namespace arch

// SMCCC for AArch32: r0 = function id, r1-r3 arguments, results in r0-r3.
intptr_t psci::smccc(Conduit conduit, uint32_t fn, uintptr_t a1, uintptr_t a2, uintptr_t a3) {
  register uint32_t r0 asm("r0") = fn;
  register uint32_t r1 asm("r1") = a1;
  register uint32_t r2 asm("r2") = a2;
  register uint32_t r3 asm("r3") = a3;
  if (conduit == Conduit::kHvc)
    asm volatile(".arch_extension virt\n hvc #0" : "+r"(r0), "+r"(r1), "+r"(r2), "+r"(r3)::"memory");
  else if (conduit == Conduit::kSmc)
    asm volatile(".arch_extension sec\n smc #0" : "+r"(r0), "+r"(r1), "+r"(r2), "+r"(r3)::"memory");
  else return -1;
  return static_cast<int32_t>(r0);
}

// Without a debugger behind it, the svc traps (and clobbers lr_svc): the
// TRAP_SVC case above answers -1.
extern "C" uintptr_t arch_semihost(uintptr_t op, uintptr_t arg) {
  register uint32_t r0 asm("r0") = op;
  register uint32_t r1 asm("r1") = arg;
  asm volatile("svc %2" : "+r"(r0) : "r"(r1), "i"(kSemihostingSvc) : "lr", "memory");
  return r0;
}
