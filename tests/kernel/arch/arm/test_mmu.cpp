// SPDX-License-Identifier: Apache-2.0
// ARMv7-A MMU checks, by hardware address translation (ATS1CPR/ATS1CPW and
// PAR) and by the leaf descriptors: every RAM bank is identity-mapped end to
// end as shareable write-back memory, devices as Device memory, and the
// kernel image is W^X (text read-only and executable; rodata read-only;
// data, stacks and the DTB never executable). Then arch::map, translate and
// unmap in the heap window, section splitting, break-before-make seen from
// every core, and the cycle counter.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/ktest.h>
#include <kernel/console.h>
#include <kernel/percpu.h>
#include <kernel/smp.h>

namespace arm {
uint32_t leaf_descriptor(uintptr_t va, bool& is_section);
unsigned l2_tables_available(bool& have_page_source);
}  // namespace arm

namespace {

constexpr uint32_t kParFault = 1u << 0;

// PAR after a stage-1 PL1 translation of va for a read or a write.
uint32_t hw_translate(uintptr_t va, bool write) {
  uint32_t par;
  if (write)
    asm volatile("mcr p15, 0, %1, c7, c8, 1\n isb\n mrc p15, 0, %0, c7, c4, 0" : "=r"(par) : "r"(va) : "memory");
  else asm volatile("mcr p15, 0, %1, c7, c8, 0\n isb\n mrc p15, 0, %0, c7, c4, 0" : "=r"(par) : "r"(va) : "memory");
  return par;
}

bool identity(uintptr_t va, bool write) {
  uint32_t par = hw_translate(va, write);
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
  if (section) return {true, (d >> 12) & 7, (d >> 3) & 1, (d >> 2) & 1, (d >> 16) & 1, (d & (1u << 4)) != 0};
  return {true, (d >> 6) & 7, (d >> 3) & 1, (d >> 2) & 1, (d >> 10) & 1, (d & 1u) != 0};
}

bool execute_never(uintptr_t va) { return leaf(va).xn; }

constexpr uintptr_t kSection = 1u << 20;

// A page of RAM the tests map a second time, in the heap window.
alignas(kPageSize) uint32_t g_test_page[kPageSize / 4];

// The top 2 MiB of the heap window: far from where the heap arena starts
// allocating (its bottom), and checked to be unmapped before use.
uintptr_t test_window() {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  return base + size - 2 * kSection;
}

bool unmapped(uintptr_t va, size_t size) {
  for (uintptr_t a = va; a - va < size; a += kPageSize)
    if (arch::translate(a)) return false;
  return true;
}

// Whether `need` level-2 tables can be had; says why not when they cannot.
bool tables_for_test(unsigned need, const char* test) {
  bool page_source;
  unsigned left = arm::l2_tables_available(page_source);
  if (left >= need || page_source) return true;
  kprintf("%s: SKIPPED: needs %u level-2 tables, the boot pool has %u left and mm/ offers no page source\n", test, need,
          left);
  return false;
}

// Probe for another core: write through va, expect a fault.
struct RemoteProbe {
  uintptr_t va;
  bool read_ok;
  bool faulted;
};
void remote_read(void* arg) {
  auto* p = static_cast<RemoteProbe*>(arg);
  p->read_ok = *reinterpret_cast<volatile uint32_t*>(p->va) == g_test_page[0];
}
void remote_probe_write(void* arg) {
  auto* p = static_cast<RemoteProbe*>(arg);
  p->faulted = arch::probe_write(p->va, 0xdead);
}

}  // namespace

KTEST(arm_identity_map_covers_every_ram_bank) {
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t base = g_boot.mem[i].base, end = base + g_boot.mem[i].size;
    // RAM from kDirectMapLimit up (the heap window) is left unmapped.
    if (base >= arch::kDirectMapLimit) continue;
    if (end > arch::kDirectMapLimit) end = arch::kDirectMapLimit;
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
  KEXPECT(hw_translate(0, false) & kParFault);
}

KTEST(arm_heap_window_is_clear_of_the_identity_map) {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  KEXPECT_EQ(base, 0xc0000000u);
  KEXPECT_EQ(size, 0x30000000u);
  KEXPECT(base >= arch::kDirectMapLimit);
  KEXPECT(uint64_t{base} + size <= 0xffff0000u);  // below the (unused) high vectors
  // No RAM bank is identity-mapped into the window, whatever its size.
  for (unsigned i = 0; i < g_boot.mem_count; i++) {
    uint64_t b = g_boot.mem[i].base, e = b + g_boot.mem[i].size;
    if (e > arch::kDirectMapLimit && b < (1ull << 32)) {
      uint64_t first = b > arch::kDirectMapLimit ? b : arch::kDirectMapLimit;
      KEXPECT_EQ(arch::translate(static_cast<uintptr_t>(first)), 0u);
    }
  }
}

KTEST(arm_map_translate_unmap_page_in_heap_window) {
  if (!tables_for_test(1, "arm_map_translate_unmap_page_in_heap_window")) return;
  const uintptr_t va = test_window();
  const auto pa = reinterpret_cast<uintptr_t>(g_test_page);  // identity map: VA = PA
  KASSERT(unmapped(va, kSection));
  bool page_source;
  unsigned tables_before = arm::l2_tables_available(page_source);

  KASSERT(arch::map(va, pa, kPageSize, arch::kMapRead | arch::kMapWrite));
  KEXPECT_EQ(arch::translate(va), uint64_t{pa});
  KEXPECT_EQ(arch::translate(va + 0x123), uint64_t{pa} + 0x123);
  KEXPECT_EQ(arch::translate(va + kPageSize), 0u);  // only the one page
  KEXPECT((hw_translate(va, true) & 0xfffff000) == pa && !(hw_translate(va, true) & kParFault));
  KEXPECT(leaf(va).normal_write_back());
  KEXPECT(execute_never(va));

  // Written through the window, read through the identity map, and back.
  auto* alias = reinterpret_cast<volatile uint32_t*>(va);
  for (unsigned i = 0; i < kPageSize / 4; i++) alias[i] = 0xc0de0000u + i;
  bool same = true;
  for (unsigned i = 0; i < kPageSize / 4; i++) same &= g_test_page[i] == 0xc0de0000u + i;
  KEXPECT(same);
  g_test_page[7] = 0x5eed;
  KEXPECT_EQ(alias[7], 0x5eedu);

  // Another core caches the translation before the unmap...
  RemoteProbe rp{va, false, false};
  unsigned other = cpu_id() == 0 ? 1 : 0;
  bool remote = g_cpu_count > 1;
  if (remote) {
    smp::call_on(other, remote_read, &rp);
    KEXPECT(rp.read_ok);
  }

  arch::unmap(va, kPageSize);
  KEXPECT_EQ(arch::translate(va), 0u);
  KEXPECT(hw_translate(va, false) & kParFault);
  uint32_t kept = g_test_page[0];
  KEXPECT(arch::probe_write(va, 0xdead));
  KEXPECT_EQ(this_cpu().last_fault.address, va);
  // ...and faults after it: the invalidation reached every core.
  if (remote) {
    smp::call_on(other, remote_probe_write, &rp);
    KEXPECT(rp.faulted);
  }
  KEXPECT_EQ(g_test_page[0], kept);
  // The emptied level-2 table went back for reuse.
  KEXPECT_EQ(arm::l2_tables_available(page_source), tables_before);
}

// The heap's batched unmap (unmap_deferred, then tlb_sync): the entries go
// at once, the translations of every core by the tlb_sync; after it, this
// core and another that had cached the translation fault on the address,
// and the emptied level-2 table is back for reuse.
KTEST(arm_unmap_deferred_then_tlb_sync_reaches_every_core) {
  if (!tables_for_test(1, "arm_unmap_deferred_then_tlb_sync_reaches_every_core")) return;
  // Two pages of the window, both onto the test page. Unmapping both empties
  // the level-2 table, whose level-1 entry is invalidated at once by the
  // first page's address: the second page's translation is the one only
  // tlb_sync removes, so that is the one probed.
  const uintptr_t va = test_window(), va2 = va + kPageSize;
  const auto pa = reinterpret_cast<uintptr_t>(g_test_page);
  KASSERT(unmapped(va, kSection));
  bool page_source;
  unsigned tables_before = arm::l2_tables_available(page_source);
  KASSERT(arch::map(va, pa, kPageSize, arch::kMapRead | arch::kMapWrite));
  KASSERT(arch::map(va2, pa, kPageSize, arch::kMapRead | arch::kMapWrite));
  reinterpret_cast<volatile uint32_t*>(va2)[3] = 0xdefe4;  // this core caches it
  KEXPECT_EQ(g_test_page[3], 0xdefe4u);
  RemoteProbe rp{va2, false, false};
  unsigned other = cpu_id() == 0 ? 1 : 0;
  bool remote = g_cpu_count > 1;
  if (remote) {
    smp::call_on(other, remote_read, &rp);  // and so does another
    KEXPECT(rp.read_ok);
  }
  arch::unmap_deferred(va, 2 * kPageSize);
  KEXPECT_EQ(arch::translate(va), 0u);  // the entries are gone at once
  KEXPECT_EQ(arch::translate(va2), 0u);
  arch::tlb_sync();
  KEXPECT(hw_translate(va2, false) & kParFault);
  uint32_t kept = g_test_page[0];
  KEXPECT(arch::probe_write(va2, 0xdead));
  if (remote) {
    smp::call_on(other, remote_probe_write, &rp);
    KEXPECT(rp.faulted);
  }
  KEXPECT_EQ(g_test_page[0], kept);
  KEXPECT_EQ(arm::l2_tables_available(page_source), tables_before);
}

KTEST(arm_unmap_splits_a_section) {
  if (!tables_for_test(1, "arm_unmap_splits_a_section")) return;
  const uintptr_t va = test_window() + kSection;  // 1 MiB-aligned
  const auto page_pa = reinterpret_cast<uintptr_t>(g_test_page);
  const uintptr_t pa = page_pa & ~(kSection - 1);  // the section around the test page
  const uintptr_t off = page_pa - pa;
  KASSERT(unmapped(va, kSection));
  bool page_source;
  unsigned tables_before = arm::l2_tables_available(page_source);
  bool section;

  // A whole section comes and goes as one entry.
  KASSERT(arch::map(va, pa, kSection, arch::kMapRead | arch::kMapWrite));
  KEXPECT(arm::leaf_descriptor(va, section) && section);
  arch::unmap(va, kSection);
  KEXPECT(unmapped(va, kSection));
  KEXPECT_EQ(arm::l2_tables_available(page_source), tables_before);

  // Unmapping one page of it splits it; the other 255 pages stay.
  KASSERT(arch::map(va, pa, kSection, arch::kMapRead | arch::kMapWrite));
  KEXPECT(arm::leaf_descriptor(va, section) && section);
  KEXPECT_EQ(arch::translate(va + off + 8), uint64_t{pa} + off + 8);
  arch::unmap(va + off, kPageSize);
  KEXPECT(arm::leaf_descriptor(va, section) && !section);
  KEXPECT_EQ(arch::translate(va + off), 0u);
  KEXPECT(arch::probe_write(va + off, 0xdead));
  unsigned still = 0;
  bool right = true;
  for (uintptr_t o = 0; o < kSection; o += kPageSize) {
    if (o == off) continue;
    uint64_t t = arch::translate(va + o + 4);
    still += t != 0;
    right &= t == uint64_t{pa} + o + 4;
  }
  KEXPECT_EQ(still, kSection / kPageSize - 1);
  KEXPECT(right);
  // Same memory type and permissions as the section had; readable.
  uintptr_t neighbour = off ? va + off - kPageSize : va + off + kPageSize;
  KEXPECT(leaf(neighbour).normal_write_back());
  KEXPECT(execute_never(neighbour));
  KEXPECT(!(hw_translate(neighbour, true) & kParFault));
  KEXPECT_EQ(*reinterpret_cast<volatile uint32_t*>(neighbour),
             *reinterpret_cast<volatile uint32_t*>(pa + (neighbour - va)));

  // The rest goes too, and so does the level-2 table the split took.
  arch::unmap(va, kSection);
  KEXPECT(unmapped(va, kSection));
  KEXPECT(!arm::leaf_descriptor(va, section));
  KEXPECT_EQ(arm::l2_tables_available(page_source), tables_before);
}

namespace {
struct CycleCheck {
  std::atomic<unsigned> counting{0};
};
void check_cycles(void* arg) {
  uint64_t a = arch::cycles();
  for (volatile unsigned i = 0; i < 1000; i = i + 1) {
  }
  uint64_t b = arch::cycles();
  if (b != a) static_cast<CycleCheck*>(arg)->counting.fetch_add(1);
}
}  // namespace

KTEST(arm_cycle_counter_counts_on_every_core) {
  CycleCheck c;
  smp::call_on_all(check_cycles, &c);
  KEXPECT_EQ(c.counting.load(), cpus_online());
}
