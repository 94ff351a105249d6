// SPDX-License-Identifier: Apache-2.0
// The contract between portable kernel code and each arch/<name>/.
//
// Inline, hot operations (interrupt masking, the per-CPU register, counters,
// spin-wait hints) live in <arch/ops.h>, which every arch provides under
// arch/<name>/include/arch/ops.h. The out-of-line operations below are
// implemented in arch/<name>/*.cpp. Unless noted, they run on the calling core
// with no locks held.
#pragma once
#include <cstddef>
#include <cstdint>
#include <kernel/percpu.h>

namespace fdt {
class Tree;
}

// Saved registers of an exception, as the arch's trap entry pushed them.
struct TrapFrame;

namespace arch {

// Boot core, after the MMU is on and .bss is clear: install exception vectors
// and per-core state of the boot core. Called once from kernel_main.
void init_boot_cpu(PerCpu& cpu);

// Secondary core, first thing in secondary_main (MMU on, stack and per-CPU
// register set by the entry code): install exception vectors.
void init_secondary_cpu(PerCpu& cpu);

// Reads the arch's boot-time facts from the DTB (PSCI conduit, timer
// interrupt numbers, ISA extensions). Called once, on the boot core, after
// the interrupt controllers are probed (it translates interrupt specifiers).
void init_from_dtb(const fdt::Tree& tree);

// Whether the kernel can run on the /cpus node n (RISC-V: it needs S-mode
// and an MMU; a monitor core such as the E51 is skipped).
bool cpu_usable(const fdt::Tree& tree, int node);

// Starts the core with hardware id hwid (MPIDR or hart id) at the kernel's
// secondary entry; it calls secondary_main(cpu) with its own stack. Returns
// false if the firmware refused.
[[nodiscard]] bool start_cpu(PerCpu& cpu);

// Per-core timer: program the next interrupt `ticks` counter ticks from now.
// The arch calls timer_interrupt() (kernel/timer.cpp) when it fires.
void timer_init_cpu();
void timer_arm(uint64_t ticks);

// Power. poweroff() asks the firmware to turn the machine off (QEMU exits
// with status 0). exit() ends a QEMU run with a status code (semihosting or
// the virt test device); on hardware it falls back to poweroff().
[[noreturn]] void poweroff();
[[noreturn]] void exit(int code);

// Prints the registers of a trap frame, or of the caller when frame is null.
void dump_registers(const TrapFrame* frame);
// A trap frame's registers: the frame pointer, pc, stack pointer and
// return-address register of the trapped code (for kernel/backtrace.cpp,
// whose frame layout the arch gives in <arch/ops.h>).
uintptr_t trap_frame_fp(const TrapFrame* frame);
uintptr_t trap_frame_pc(const TrapFrame* frame);
uintptr_t trap_frame_sp(const TrapFrame* frame);
uintptr_t trap_frame_ra(const TrapFrame* frame);
// The trap frame whose record the trap entry pushed at frame pointer fp,
// if the arch marks them (riscv64), else null. Reads only this core's
// stacks.
const TrapFrame* trap_frame_at(uintptr_t fp);

// A place to resume at after a fault the kernel expects and cannot step
// over (kernel/expected_fault.h): callee-saved registers, stack pointer,
// return address and interrupt state, laid out by the arch.
struct RecoveryPoint {
  uintptr_t reg[16];
};
// Calls fn(arg) and returns true. If resume_recovery(rp) runs on this core
// before fn returns (from a trap handler, on any stack), call_with_recovery
// returns false instead, with the registers, stack pointer and interrupt
// state it was called with; whatever fn had on the stack is abandoned.
bool call_with_recovery(void (*fn)(void*), void* arg, RecoveryPoint& rp) __asm__("arch_call_with_recovery");
[[noreturn]] void resume_recovery(RecoveryPoint& rp) __asm__("arch_resume_recovery");

// Writes value to addr and reports whether it faulted (the write is expected
// to fault: the trap handler resumes after it and fills cpu.last_fault).
[[nodiscard]] bool probe_write(uintptr_t addr, uint32_t value);

// Sends an inter-processor wake-up to cpu (it runs its mailbox).
void send_ipi(const PerCpu& cpu);

// Memory map. Kernel virtual addresses equal physical ones for RAM and
// devices (an identity map); map() adds mappings later on (mm/ uses it for
// the heap). Pages for page tables come from a boot pool until mm/ offers
// a page source through set_table_allocator().
enum MapFlags : unsigned {
  kMapRead = 1,
  kMapWrite = 2,
  kMapExec = 4,
  kMapDevice = 8,  // device memory: uncached, no speculation, no merging
};
[[nodiscard]] bool map(uintptr_t va, uint64_t pa, size_t size, unsigned flags);
// Removes the mappings of [va, va + size) (page-aligned), with the TLB
// maintenance every core needs.
void unmap(uintptr_t va, size_t size);
// Like unmap(), but other cores' TLBs may keep the old entries until the
// next tlb_sync(): the caller must not reuse the addresses or free the pages
// before it. Lets the heap batch its shootdowns (one per many unmaps where
// they are expensive, as with SBI remote fences).
void unmap_deferred(uintptr_t va, size_t size);
void tlb_sync();
// Static branches (kernel/static_branch.cpp). The instruction at site: a
// branch to target (on) or the nop it replaces (off); site and target are
// within the kernel's text.
uint32_t static_branch_insn(uintptr_t site, uintptr_t target, bool on);
// After insn was stored at alias (a writable mapping of site's frame) on
// this core: makes the instruction at site the one fetched from now on, by
// every core (cache maintenance broadcast where the arch has it).
void text_written(uintptr_t alias, uintptr_t site);
// Run on every core after patching: discards instructions fetched before.
void sync_instructions();
// Whether target is within reach of a branch at site (both in the kernel's
// text): static_branch_insn(site, target, true) encodes it only then.
bool static_branch_reachable(uintptr_t site, uintptr_t target);
// Whether other cores must be stopped while text is patched
// (smp::stop_others): true where the ISA does not let one core rewrite an
// instruction another may be executing.
bool text_patch_stops_others();
// A core parked by smp::stop_others, with interrupts masked, runs
//   s = park_begin(); loop { park_poll(); if released: break; park_sleep(); }
//   park_end(s);
// park_poll consumes the wake-up that got it here and does what a parked
// core still owes the others (riscv64: answer TLB shootdown requests);
// park_sleep waits for the next wake-up (an IPI), or a moment.
uintptr_t park_begin();
void park_poll();
void park_sleep();
void park_end(uintptr_t state);
// The physical address va maps to, or 0 if unmapped.
uint64_t translate(uintptr_t va);
// What the live page tables let the kernel do at va: MapFlags of its leaf
// entry (kMapDevice where the format says so), 0 if unmapped. Without the
// lock; for tests and reports.
unsigned mapping_flags(uintptr_t va);
// An instruction that returns to the caller (ret, bx lr, jalr x0, 0(ra)),
// for probing whether memory is executable (expected_fault::probe_execute).
uint32_t return_instruction();
// The kernel heap's virtual window (outside the identity map of RAM and
// devices), managed by mm/'s "heap" vmem arena.
void heap_window(uintptr_t& base, size_t& size);
// Device MMIO: returns the kernel virtual address of [pa, pa + size).
uintptr_t map_device(uint64_t pa, size_t size);
// Boot-time mapping (kernel/boot_map.cpp, with the MMU off, before .bss
// is cleared on ARM): identity-maps the page-aligned [start, end) with
// flags, or leaves it unmapped when flags is 0, splitting larger leaves it
// cuts through. Tables come from the arch's boot pool.
void boot_map_range(uint64_t start, uint64_t end, unsigned flags);
using TableAllocator = uintptr_t (*)();  // returns a zeroed page's physical address or 0
void set_table_allocator(TableAllocator alloc);
// Name of the page-table format, for meminfo.
const char* mmu_description();

// Bootargs held outside the DTB, for a board whose DTB is built into the
// image (armv7m: semihosting's SYS_GET_CMDLINE, which QEMU fills from
// -append and a debugger from its own setting). Copies them into buf and
// returns true if there are any; kernel/platform.cpp appends them to the
// DTB's /chosen/bootargs. Boot core, once.
bool firmware_bootargs(char* buf, size_t size);

// Where <arch/ops.h> says arch::kHasFrameRecords is false (Thumb code):
// backtrace::walk's work, done by the arch's unwinder instead of a walk of
// frame records (same arguments and result, kernel/backtrace.h).
size_t unwind(uintptr_t fp, const TrapFrame* trap, uintptr_t* pcs, size_t max, unsigned* repeats);
// The same arches: drops what the unwinder cached of the frames it undid
// on this core (arch/arm/ehabi.cpp, Recipes), so that the next walk reads the
// tables again. For tests.
void unwind_forget();

}  // namespace arch

// Kernel entry points the arch calls.
extern "C" [[noreturn]] void kernel_main(uintptr_t dtb, uintptr_t boot_hwid);
extern "C" [[noreturn]] void secondary_main(PerCpu* cpu);
void timer_interrupt();  // from the arch's timer interrupt
// The DTB's power-off device (kernel/poweroff.h), for an arch::poweroff()
// whose firmware cannot turn the board off; returns if there is none.
void board_poweroff();
void ipi_interrupt();  // from the arch's IPI interrupt
// Reports an unexpected exception and panics (cause names the exception).
[[noreturn]] void fatal_exception(const char* cause, uintptr_t fault_addr, const TrapFrame* frame);
