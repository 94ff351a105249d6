// SPDX-License-Identifier: Apache-2.0
// RISC-V 64 support: traps, SBI (harts, timer, IPIs, power), exits,
// register dumps, trap records for the backtrace walker.
#include <atomic>
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
#include <kernel/string.h>
#include <cstddef>
#include <initializer_list>
#include "csr.h"
#include "sbi.h"
#include "trap.h"

static_assert(offsetof(PerCpu, hwid) == PERCPU_HWID);
static_assert(offsetof(PerCpu, stack_top) == PERCPU_STACK_TOP);
static_assert(offsetof(PerCpu, arch_scratch) == PERCPU_ARCH_SCRATCH);
static_assert(offsetof(PerCpu, stack_bottom) == PERCPU_STACK_BOTTOM);
static_assert(offsetof(PerCpu, overflow_top) == PERCPU_OVERFLOW_TOP);

// The secondary being started, for a hart that enters at _start instead of
// secondary_entry (start.S, stray_start). In .data: such a hart may read it
// before .bss is cleared.
extern "C" {
__attribute__((section(".data"))) PerCpu* riscv_starting_cpu = nullptr;
}

extern "C" char riscv_trap_entry[], secondary_entry[];
extern "C" bool riscv_stimecmp_usable();

namespace arch {
uint64_t g_timebase_hz = 10000000;  // QEMU virt's; the DTB says for sure
uint64_t g_counter_at_tick;         // coarse_counter() (ops.h)
void mmu_live();
const char* describe_mapping(uintptr_t va, char* buf, size_t size);
}  // namespace arch

namespace {

constexpr uint64_t kCauseInterrupt = 1ull << 63;
constexpr uint64_t kStimecmp = 0x14d;  // Sstc

bool g_sstc;           // program the timer through stimecmp, not SBI
uintptr_t g_test_dev;  // QEMU's "sifive,test" finisher, 0 if none
constexpr uint32_t kTestFail = 0x3333;

// A cause name for every exception code the privileged spec defines.
const char* exception_name(uint64_t code) {
  switch (code) {
    case 0: return "instruction address misaligned";
    case 1: return "instruction access fault";
    case 2: return "illegal instruction";
    case 3: return "breakpoint";
    case 4: return "load address misaligned";
    case 5: return "load access fault";
    case 6: return "store/AMO address misaligned";
    case 7: return "store/AMO access fault";
    case 8: return "environment call from U-mode";
    case 9: return "environment call from S-mode";
    case 11: return "environment call from M-mode";
    case 12: return "instruction page fault";
    case 13: return "load page fault";
    case 15: return "store/AMO page fault";
    case 18: return "software check";
    case 19: return "hardware error";
  }
  return "unknown exception";
}

// Misaligned accesses, access and page faults: stval holds the address.
bool has_address(uint64_t code) {
  return code == 0 || code == 1 || (code >= 4 && code <= 7) || code == 12 || code == 13 || code == 15;
}
bool is_page_fault(uint64_t code) { return code == 12 || code == 13 || code == 15; }

// The access a fault code stands for, or null.
const char* access_kind(uint64_t code) {
  switch (code) {
    case 1:
    case 12: return "execute";
    case 4:
    case 5:
    case 13: return "read";
    case 6:
    case 7:
    case 15: return "write";
  }
  return nullptr;
}

// "store/AMO page fault: write, page mapped r-x (4 KiB)" or
// "illegal instruction (0x0000c0001073)" into buf.
const char* describe_exception(const TrapFrame* f, char* buf, size_t size) {
  uint64_t code = f->scause;
  char how[48];
  if (is_page_fault(code))
    ksnprintf(buf, size, "%s: %s, %s", exception_name(code), access_kind(code),
              arch::describe_mapping(f->stval, how, sizeof how));
  else if (access_kind(code)) ksnprintf(buf, size, "%s: %s", exception_name(code), access_kind(code));
  else if (code == 2 && f->stval)
    ksnprintf(buf, size, "%s (0x%08llx)", exception_name(code), static_cast<unsigned long long>(f->stval));
  else ksnprintf(buf, size, "%s (scause %llu)", exception_name(code), static_cast<unsigned long long>(code));
  return buf;
}

void write_stvec() { asm volatile("csrw stvec, %0" ::"r"(riscv_trap_entry) : "memory"); }

// A whole word of an ISA string, bounded by '_' or the ends: "sstc" in
// "rv64imafdc_zicsr_sstc".
bool isa_has(const char* isa, const char* ext) {
  size_t n = strlen(ext);
  for (const char* s = isa; *s;) {
    const char* e = s;
    while (*e && *e != '_') e++;
    if (static_cast<size_t>(e - s) == n && strncmp(s, ext, n) == 0) return true;
    s = *e ? e + 1 : e;
  }
  return false;
}

}  // namespace

namespace arch {
bool spurious_fault(uintptr_t va, bool write, bool exec);  // mmu.cpp
void tlb_fence_service();                                  // mmu.cpp: a remote fence request
}  // namespace arch

// overflow: trap.S found no room for the frame on the stack and saved it on
// the overflow stack (kernel/stack.h).
extern "C" void riscv_trap(TrapFrame* f, unsigned long overflow) {
  PerCpu& cpu = this_cpu();
  if (overflow) {
    // A store that ran into the guard page faults with its address in
    // stval; other traps (an interrupt with the stack nearly full) have none.
    bool store = !(f->scause & kCauseInterrupt) && (f->scause == 15 || f->scause == 7);
    kstack::overflow(f, store ? f->stval : 0);
  }
  if (f->scause & kCauseInterrupt) {
    // Before any handler runs: an interrupted restartable section starts
    // again from its beginning (kernel/rseq.h, Interrupts). Every
    // asynchronous entry comes here (timer, IPI, external); the exceptions
    // that return are below (rseq.h, Synchronous exceptions).
    f->sepc = rseq::restart_pc(f->sepc);
    uint64_t code = f->scause & ~kCauseInterrupt;
    const TrapFrame* outer = cpu.irq_frame;
    cpu.irq_frame = f;  // where the interrupted registers are (smp::freeze_others)
    cpu.irq_depth++;
    switch (code) {
      case IRQ_S_TIMER: timer_interrupt(); break;
      case IRQ_S_SOFT:
        asm volatile("csrc sip, %0" ::"r"(SIE_SSIE) : "memory");
        arch::tlb_fence_service();
        ipi_interrupt();
        break;
      case IRQ_S_EXT: irq::dispatch(); break;
      default: {
        char buf[48];
        ksnprintf(buf, sizeof buf, "unexpected interrupt %llu", static_cast<unsigned long long>(code));
        fatal_exception(buf, 0, f);
      }
    }
    cpu.irq_depth--;
    cpu.irq_frame = outer;
    return;
  }
  // Every exception that returns goes back through rseq::restart_pc, as an
  // interrupt does (kernel/rseq.h, Synchronous exceptions): a section it
  // lands in (the faulting one retried, or a fixup's) starts again from its
  // beginning.
  // A page fault on a mapping another hart just made (this hart's TLB held
  // the old invalid entry, which no remote fence removed): fence and retry.
  // The section's memory (a magazine another hart allocated from fresh
  // heap pages) can be such a mapping.
  uint64_t cause = f->scause;
  if ((cause == 12 || cause == 13 || cause == 15) && arch::spurious_fault(f->stval, cause == 15, cause == 12)) {
    f->sepc = rseq::restart_pc(f->sepc);
    return;
  }
  // A semihosting call where nothing serves it (arch_semihost).
  if (cause == 3 && extable::fixup(f->sepc)) {
    f->sepc = rseq::restart_pc(extable::recover(f->sepc, 0, false, "breakpoint", "semihosting unavailable"));
    return;
  }
  char buf[96];
  // An instruction fetch a probe expects (expected_fault::probe_execute).
  if (cause == 12 || cause == 1)
    expected_fault::instruction_fetch(f->sepc, f->stval, describe_exception(f, buf, sizeof buf));
  // A probing instruction (probe_write, the stimecmp probe) resumes at its
  // fixup; the fault is recorded for the caller to look at.
  if (extable::fixup(f->sepc)) {
    f->sepc = rseq::restart_pc(extable::recover(f->sepc, f->stval, has_address(f->scause), exception_name(f->scause),
                                                describe_exception(f, buf, sizeof buf)));
    return;
  }
  fatal_exception(describe_exception(f, buf, sizeof buf), has_address(f->scause) ? f->stval : 0, f);
}

namespace arch {

void init_boot_cpu(PerCpu& cpu) {
  mmu_live();
  set_this_cpu(&cpu);
  write_stvec();
  asm volatile("csrs sie, %0" ::"r"(SIE_SSIE) : "memory");
}

void init_secondary_cpu(PerCpu& cpu) {
  write_stvec();
  asm volatile("csrs sie, %0" ::"r"(SIE_SSIE) : "memory");
  if (cpu.arch_scratch[0] == 1)
    kprintf("cpu %u (hart %llu): entered at _start, not secondary_entry; redirected (firmware race)\n", cpu.index,
            static_cast<unsigned long long>(cpu.hwid));
  cpu.arch_scratch[0] = 0;
}

void init_from_dtb(const fdt::Tree& t) {
  sbi::init();
  // Then the exit path, so a panic from here on reports its status.
  for (const char* compat : {"sifive,test1", "sifive,test0"}) {
    fdt::Node n = t.find_compatible(compat);
    uint64_t base, size;
    if (n != fdt::kNoNode && t.reg(n, 0, base, size)) {
      g_test_dev = map_device(base, kPageSize);
      break;
    }
  }

  fdt::Property p;
  fdt::Node cpus = t.find("/cpus");
  uint64_t hz;
  if (cpus != fdt::kNoNode && t.prop(cpus, "timebase-frequency", p) && p.cells(0, p.len / 4, hz) && hz)
    g_timebase_hz = hz;

  // Sstc: a hart's ISA string names it (older trees) or its
  // riscv,isa-extensions list does. Every usable hart must have it, and the
  // firmware must let S-mode at stimecmp (menvcfg.STCE).
  g_sstc = true;
  bool any = false;
  for (fdt::Node n = t.first_child(cpus); n != fdt::kNoNode; n = t.next_sibling(n)) {
    if (!t.prop(n, "device_type", p) || !p.str() || strcmp(p.str(), "cpu") != 0 || !cpu_usable(t, n)) continue;
    any = true;
    bool has = (t.prop(n, "riscv,isa", p) && p.str() && isa_has(p.str(), "sstc")) ||
               (t.prop(n, "riscv,isa-extensions", p) && p.has_string("sstc"));
    g_sstc &= has;
  }
  g_sstc &= any;
  if (g_sstc && !riscv_stimecmp_usable()) {
    kprintf("riscv: the ISA string lists Sstc but the firmware keeps stimecmp from S-mode; using SBI\n");
    g_sstc = false;
  }

  char buf[128];
  sbi::describe(buf, sizeof buf);
  kprintf("riscv: %s; timer %s at %llu Hz%s\n", buf, g_sstc ? "Sstc" : "SBI",
          static_cast<unsigned long long>(g_timebase_hz), g_test_dev ? "; test device for exit codes" : "");
}

// A hart the kernel can run on has S-mode with paging: an "mmu-type" other
// than "riscv,none". SiFive's E51 monitor hart (sifive_u hart 0) has none.
bool cpu_usable(const fdt::Tree& t, int node) {
  fdt::Property p;
  if (!t.prop(node, "mmu-type", p) || !p.str()) return false;
  return strcmp(p.str(), "riscv,none") != 0;
}

bool start_cpu(PerCpu& cpu) {
  cpu.arch_scratch[0] = 0;
  // Releases cpu (and all this hart wrote before) to a hart waiting in
  // stray_start, whose `fence r, rw` after the load is the acquire. A hart
  // started at secondary_entry reads cpu after the ecall, which the fence
  // in smp::start_secondaries orders (OpenSBI fences before raising the
  // start IPI too).
  __atomic_store_n(&riscv_starting_cpu, &cpu, __ATOMIC_RELEASE);
  sbi::Result r =
      sbi::hart_start(cpu.hwid, reinterpret_cast<uintptr_t>(secondary_entry), reinterpret_cast<uintptr_t>(&cpu));
  // Without HSM the firmware started every hart at _start, where the others
  // wait for riscv_starting_cpu to name them.
  if (r.error == sbi::kErrNotSupported) return true;
  if (r.error != sbi::kSuccess)
    kprintf("sbi: hart_start for cpu %u (hart %llu) failed: %ld\n", cpu.index,
            static_cast<unsigned long long>(cpu.hwid), r.error);
  return r.error == sbi::kSuccess;
}

void timer_init_cpu() { asm volatile("csrs sie, %0" ::"r"(SIE_STIE) : "memory"); }

void timer_arm(uint64_t ticks) {
  uint64_t now = counter();
  // The largest reading yet, for coarse_counter(): amomaxu keeps it from
  // going back when two harts' ticks race. A time stamp, publishing
  // nothing: no ordering.
  asm volatile("amomaxu.d zero, %1, %0" : "+A"(g_counter_at_tick) : "r"(now));
  uint64_t when = now + ticks;
  if (g_sstc) asm volatile("csrw %0, %1" ::"i"(kStimecmp), "r"(when) : "memory");
  else sbi::set_timer(when);
}

// SBI SRST where the firmware can shut this machine down (virt); else
// semihosting's exit with status 0 (QEMU sifive_u, whose OpenSBI has no
// shutdown device); else the DTB's power-off device; else the legacy SBI
// shutdown where there is no SRST at all (pre-0.3 firmware); else nothing
// can turn the board off (the HiFive Unleashed has no power-off device):
// stop here.
void poweroff() {
  sbi::system_off(false);
  semihosting::exit(0);
  board_poweroff();
  if (!sbi::has_srst()) sbi::legacy_shutdown();
  kprintf("poweroff: no SBI shutdown, semihosting or power-off device: halting (it is safe to cut the power)\n");
  irq_disable();
  for (;;) asm volatile("wfi");
}

// The status through the virt test device, else semihosting (sifive_u);
// the SRST shutdown's failure reason says only "failed".
void exit(int code) {
  if (code == 0) poweroff();
  if (g_test_dev) {
    *reinterpret_cast<volatile uint32_t*>(g_test_dev) = (static_cast<uint32_t>(code) << 16) | kTestFail;
    asm volatile("fence" ::: "memory");
  }
  semihosting::exit(code);
  sbi::system_off(true);
  poweroff();
}

void dump_registers(const TrapFrame* f) {
  static const char* const kNames[32] = {"zero", "ra", "sp", "gp", "tp",  "t0",  "t1", "t2", "s0", "s1", "a0",
                                         "a1",   "a2", "a3", "a4", "a5",  "a6",  "a7", "s2", "s3", "s4", "s5",
                                         "s6",   "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6"};
  TrapFrame now;
  if (!f) {
    // No trap: snapshot the registers as they are here.
    asm volatile(
        "sd x1, 8(%0)\n sd x2, 16(%0)\n sd x3, 24(%0)\n sd x4, 32(%0)\n sd x5, 40(%0)\n"
        "sd x6, 48(%0)\n sd x7, 56(%0)\n sd x8, 64(%0)\n sd x9, 72(%0)\n sd x10, 80(%0)\n"
        "sd x11, 88(%0)\n sd x12, 96(%0)\n sd x13, 104(%0)\n sd x14, 112(%0)\n sd x15, 120(%0)\n"
        "sd x16, 128(%0)\n sd x17, 136(%0)\n sd x18, 144(%0)\n sd x19, 152(%0)\n sd x20, 160(%0)\n"
        "sd x21, 168(%0)\n sd x22, 176(%0)\n sd x23, 184(%0)\n sd x24, 192(%0)\n sd x25, 200(%0)\n"
        "sd x26, 208(%0)\n sd x27, 216(%0)\n sd x28, 224(%0)\n sd x29, 232(%0)\n sd x30, 240(%0)\n"
        "sd x31, 248(%0)\n"
        :
        : "r"(&now)
        : "memory");
    now.x[0] = 0;
    uint64_t pc;
    asm volatile("auipc %0, 0" : "=r"(pc));
    now.sepc = pc;
    asm volatile("csrr %0, sstatus" : "=r"(now.sstatus));
    now.scause = 0;
    now.stval = 0;
    f = &now;
  }
  for (int i = 0; i < 32; i += 4) {
    for (int j = i; j < i + 4; j++) kprintf("  %-4s %016llx", kNames[j], static_cast<unsigned long long>(f->x[j]));
    kprintf("\n");
  }
  kprintf("  sepc %016llx  sstatus %016llx  scause %016llx  stval %016llx\n", static_cast<unsigned long long>(f->sepc),
          static_cast<unsigned long long>(f->sstatus), static_cast<unsigned long long>(f->scause),
          static_cast<unsigned long long>(f->stval));
}

uintptr_t trap_frame_fp(const TrapFrame* f) { return f ? f->x[8] : 0; }
uintptr_t trap_frame_pc(const TrapFrame* f) { return f ? f->sepc : 0; }
uintptr_t trap_frame_sp(const TrapFrame* f) { return f ? f->x[2] : 0; }
uintptr_t trap_frame_ra(const TrapFrame* f) { return f ? f->x[1] : 0; }

// trap.S pushes a frame record {s0, sepc} right below each TrapFrame, whose
// s0 points at the TrapFrame, with TRAP_MARKER two words below the record.
// (A function that trapped after its epilogue restored s0, which GCC
// schedules early, shows in a backtrace as its caller; the register dump's
// ra names it.)
const TrapFrame* trap_frame_at(uintptr_t fp) {
  uintptr_t lo, hi;
  if (!kstack::find(fp - TRAP_RECORD_SIZE, lo, hi) || fp - TRAP_RECORD_SIZE < lo || fp + TF_SIZE > hi) return nullptr;
  if (*reinterpret_cast<const uint64_t*>(fp - TRAP_RECORD_SIZE) != TRAP_MARKER) return nullptr;
  return reinterpret_cast<const TrapFrame*>(fp);
}

void send_ipi(const PerCpu& cpu) {
  // What the IPI announces is visible before the firmware raises it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  sbi::Result r = sbi::send_ipi(cpu.hwid);
  if (r.error != sbi::kSuccess)
    kprintf("sbi: send_ipi to hart %llu failed: %ld\n", static_cast<unsigned long long>(cpu.hwid), r.error);
}

// The bootargs are the DTB's, which the bootloader wrote.
bool firmware_bootargs(char*, size_t) { return false; }

}  // namespace arch
