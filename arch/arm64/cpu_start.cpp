// SPDX-License-Identifier: Apache-2.0
// Starting a secondary core the way its /cpus node says (enable-method),
// per core, as Linux does: "psci" (CPU_ON through the DTB's conduit: QEMU
// virt) or "spin-table" (the firmware holds the core in a wfe loop on the
// 64-bit cpu-release-addr: the Raspberry Pi 3). A core with no
// enable-method uses PSCI when the DTB has it.
//
// Spin table, in this order (each step's ordering named):
//   1. arm64_spin_release = {PerCpu*, hwid}: plain stores, then `dc civac`
//      over the line and `dsb sy`: the waiting core reads it with its MMU
//      and caches off, so it must be in memory, not only in our cache
//      (spin_table_entry, start.S). Everything else the new core reads
//      (its PerCpu, the page tables, g_boot) it reads after turning its
//      MMU and caches on, coherent with ours: smp::start_secondaries' fence
//      and the dsb below order those stores before the release.
//   2. The release: the entry's physical address stored to
//      cpu-release-addr, through a normal mapping of its page (page 0 on
//      the Pi, which the kernel otherwise leaves unmapped), cleaned to the
//      point of coherency (`dc civac`) and completed (`dsb sy`) before
//   3. `sev`, which wakes the core from its wfe (QEMU's wfe does not sleep,
//      so QEMU passes without it; the board does not).
// Cores are released one at a time (start_secondaries waits for each to
// come online), so one arm64_spin_release serves them all; the hwid in it
// keeps a core released late from taking another's PerCpu.
#include <drivers/psci.h>
#include <kernel/align.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/fdt.h>
#include <kernel/string.h>

extern "C" char secondary_entry[], spin_table_entry[];

extern "C" {
// {PerCpu*, hwid}, its own cache line (CTR_EL0.CWG is at most 2 KiB; the
// A53's line is 64 bytes, and nothing else shares these 64).
alignas(64) volatile uint64_t arm64_spin_release[8];
}

namespace {

// Between the direct map's limit (kDirectMapLimit, 256 GiB) and the heap
// window (384 GiB): a page the kernel maps for the release write alone.
constexpr uintptr_t kReleaseWindow = uintptr_t{0x5f} << 32;

void clean_to_poc(const volatile void* p) { asm volatile("dc civac, %0" ::"r"(p) : "memory"); }

fdt::Node cpu_node(const fdt::Tree& t, uint64_t hwid) {
  fdt::Node cpus = t.find("/cpus");
  uint32_t ac = t.address_cells(cpus);
  fdt::Property p;
  for (fdt::Node n = t.first_child(cpus); n != fdt::kNoNode; n = t.next_sibling(n)) {
    uint64_t reg;
    if (t.prop(n, "reg", p) && p.cells(0, ac, reg) && reg == hwid) return n;
  }
  return fdt::kNoNode;
}

bool spin_table_start(PerCpu& cpu, uint64_t release_addr) {
  if (release_addr & 7) {
    kprintf("smp: cpu %u: cpu-release-addr 0x%llx is not 8-byte aligned\n", cpu.index,
            static_cast<unsigned long long>(release_addr));
    return false;
  }
  // 1. Which core, and its PerCpu.
  arm64_spin_release[0] = reinterpret_cast<uintptr_t>(&cpu);
  arm64_spin_release[1] = cpu.hwid;
  clean_to_poc(arm64_spin_release);
  asm volatile("dsb sy" ::: "memory");

  // 2. The release, through a mapping of its own where the identity map
  // has none (page 0).
  uintptr_t page = align_down(static_cast<uintptr_t>(release_addr), kPageSize);
  uintptr_t va = static_cast<uintptr_t>(release_addr);
  bool mapped_here = false;
  if (arch::translate(va) != release_addr) {
    if (!arch::map(kReleaseWindow, page, kPageSize, arch::kMapRead | arch::kMapWrite)) {
      kprintf("smp: cpu %u: cannot map cpu-release-addr 0x%llx\n", cpu.index,
              static_cast<unsigned long long>(release_addr));
      return false;
    }
    va = kReleaseWindow + (release_addr - page);
    mapped_here = true;
  }
  auto* slot = reinterpret_cast<volatile uint64_t*>(va);
  *slot = reinterpret_cast<uintptr_t>(spin_table_entry);  // the identity map: its physical address
  clean_to_poc(slot);
  asm volatile("dsb sy" ::: "memory");
  // 3. Wake it.
  asm volatile("sev" ::: "memory");
  if (mapped_here) arch::unmap(kReleaseWindow, kPageSize);
  return true;
}

}  // namespace

namespace arch {

bool start_cpu(PerCpu& cpu) {
  // The HVC/SMC or the release store: every store the new core will read
  // (its PerCpu, the tables) is complete first.
  asm volatile("dsb ish" ::: "memory");
  const fdt::Tree& t = g_boot.dtb;
  fdt::Node n = cpu_node(t, cpu.hwid);
  fdt::Property p;
  const char* method = n != fdt::kNoNode && t.prop(n, "enable-method", p) && p.str() ? p.str() : "psci";
  if (strcmp(method, "spin-table") == 0) {
    uint64_t release;
    if (!t.prop(n, "cpu-release-addr", p) || !p.cells(0, p.len / 4, release) || (p.len != 4 && p.len != 8)) {
      kprintf("smp: cpu %u: spin-table without a cpu-release-addr\n", cpu.index);
      return false;
    }
    return spin_table_start(cpu, release);
  }
  if (strcmp(method, "psci") == 0)
    return psci::cpu_on(cpu.index, cpu.hwid, reinterpret_cast<uintptr_t>(secondary_entry),
                        reinterpret_cast<uintptr_t>(&cpu));
  kprintf("smp: cpu %u (hwid 0x%llx): enable-method \"%s\" is not supported\n", cpu.index,
          static_cast<unsigned long long>(cpu.hwid), method);
  return false;
}

}  // namespace arch
