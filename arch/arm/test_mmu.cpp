// ARMv7-A MMU checks, by hardware address translation (ATS1CPR/ATS1CPW and
// PAR) and by the leaf descriptors: every RAM bank is identity-mapped end to
// end as shareable write-back memory, devices as Device memory, and the
// kernel image is W^X (text read-only and executable; rodata read-only;
// data, stacks and the DTB never executable).
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/ktest.h>
#include <kernel/percpu.h>

namespace arm {
uint32_t leaf_descriptor(uintptr_t va, bool& is_section);
}

namespace {

constexpr uint32_t kParFault = 1u << 0;

// PAR after a stage-1 PL1 translation of va for a read or a write.
uint32_t translate(uintptr_t va, bool write) {
  uint32_t par;
  if (write)
    asm volatile("mcr p15, 0, %1, c7, c8, 1\n isb\n mrc p15, 0, %0, c7, c4, 0" : "=r"(par) : "r"(va) : "memory");
  else
    asm volatile("mcr p15, 0, %1, c7, c8, 0\n isb\n mrc p15, 0, %0, c7, c4, 0" : "=r"(par) : "r"(va) : "memory");
  return par;
}

bool identity(uintptr_t va, bool write) {
  uint32_t par = translate(va, write);
  return !(par & kParFault) && (par & 0xfffff000) == (va & 0xfffff000);
}

// The memory type and execute permission the leaf descriptor of va gives
// (PAR's attribute fields are not filled in by every implementation, QEMU's
// among them, so the descriptors are read directly).
struct Leaf {
  bool mapped;
  unsigned tex, c, b, s;
  bool xn;
  bool normal_write_back() const { return mapped && tex == 1 && c && b && s; }
  bool shareable_device() const { return mapped && tex == 0 && !c && b; }
};

Leaf leaf(uintptr_t va) {
  bool section;
  uint32_t d = arm::leaf_descriptor(va, section);
  if (!d) return {};
  if (section)
    return {true, (d >> 12) & 7, (d >> 3) & 1, (d >> 2) & 1, (d >> 16) & 1, (d & (1u << 4)) != 0};
  return {true, (d >> 6) & 7, (d >> 3) & 1, (d >> 2) & 1, (d >> 10) & 1, (d & 1u) != 0};
}

bool execute_never(uintptr_t va) { return leaf(va).xn; }

}  // namespace

KTEST(arm_identity_map_covers_every_ram_bank) {
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t base = g_boot.mem[i].base, end = base + g_boot.mem[i].size;
    if (base >> 32) continue;  // beyond a 32-bit address space
    if (end > (1ull << 32)) end = 1ull << 32;
    const uint64_t probes[] = {base, base + (end - base) / 2, end - 4};
    for (uint64_t p : probes) {
      auto va = static_cast<uintptr_t>(p);
      bool dtb = va >= g_boot.dtb_addr && va < g_boot.dtb_addr + g_boot.dtb.total_size();
      KEXPECT(identity(va, false));
      if (!dtb) KEXPECT(identity(va, true));
      KEXPECT(leaf(va).normal_write_back());
      KEXPECT(execute_never(va));
    }
    // The last word is really there: write it back with its own value.
    auto last = static_cast<uintptr_t>(end - 4);
    KEXPECT(!arch::probe_write(last, *reinterpret_cast<volatile uint32_t*>(last)));
  }
}

KTEST(arm_kernel_image_is_wx) {
  auto text = reinterpret_cast<uintptr_t>(__text_start);
  auto rodata = reinterpret_cast<uintptr_t>(__rodata_start);
  auto data = reinterpret_cast<uintptr_t>(__data_start);
  auto bss_last = reinterpret_cast<uintptr_t>(__bss_end) - 4;
  int local;
  auto stack = reinterpret_cast<uintptr_t>(&local);
  KEXPECT(identity(text, false));
  KEXPECT(!identity(text, true));
  KEXPECT(!execute_never(text));
  KEXPECT(!execute_never(reinterpret_cast<uintptr_t>(__text_end) - 4));
  KEXPECT(leaf(text).normal_write_back());
  KEXPECT(identity(rodata, false));
  KEXPECT(!identity(rodata, true));
  KEXPECT(execute_never(rodata));
  const uintptr_t writable[] = {data, bss_last, stack};
  for (uintptr_t va : writable) {
    KEXPECT(identity(va, true));
    KEXPECT(execute_never(va));
  }
  // The DTB is read-only and never executable.
  KEXPECT(identity(g_boot.dtb_addr, false));
  KEXPECT(!identity(g_boot.dtb_addr, true));
  KEXPECT(execute_never(g_boot.dtb_addr));
}

KTEST(arm_devices_are_device_memory) {
  KEXPECT(identity(EARLY_UART_BASE, true));
  KEXPECT(leaf(EARLY_UART_BASE).shareable_device());
  KEXPECT(execute_never(EARLY_UART_BASE));
  // Nothing is mapped at 0 (the flash): null dereferences fault.
  KEXPECT(translate(0, false) & kParFault);
}
