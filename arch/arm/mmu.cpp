// SPDX-License-Identifier: Apache-2.0
// ARMv7-A page tables: the short-descriptor format, which every ARMv7-A
// core has (LPAE is optional). One level-1 table of 4096 entries covers the
// 32-bit address space: each entry is a 1 MiB section or points at a
// level-2 table of 256 entries (1 KiB) mapping 4 KiB small pages.
//
// 1. The kernel runs on an identity map (virtual = physical) of every RAM
//    bank and of the devices it uses; RAM above 4 GiB is out of reach. The
//    image is mapped W^X: text RX, rodata R, data/bss/stacks/tables RW and
//    never executable. The DTB is read-only.
// 2. arm_early_mmu() builds the tables with the MMU off, before .bss is
//    cleared, so everything it touches lives in the .noinit area (invalidated
//    by start.S before use) or on the boot stack. What it maps is the
//    portable part (kernel/boot_map.h), which calls boot_map_range here.
// 3. Memory types come from TEX/C/B directly (SCTLR.TRE = 0): RAM is normal
//    write-back write-allocate and shareable; devices are shareable Device
//    memory. AP[2:0] gives PL1 read-write or read-only and PL0 nothing;
//    SCTLR.AFE = 0, so there is no access flag to manage. Domain 0, client.
// 4. After boot, arch::map() adds mappings (devices, the kernel heap) and
//    arch::unmap() removes them. A level-2 table comes from the free list,
//    then the boot pool, then from the page source mm/ registers (a 4 KiB
//    page holds four level-2 tables). unmap() splits a section it cuts
//    through into pages, and gives back a level-2 table it leaves empty to
//    the free list (tables are never returned to mm/). Turning a valid entry
//    into another one, or into nothing, follows break-before-make: the
//    entry is cleared, cleaned to the point of unification so walks see it
//    on any core, and its translation invalidated on every core in the
//    inner-shareable domain (TLBIMVAAIS: every mapping is global, so
//    "all ASIDs" and "this ASID" remove the same entries) before the next
//    value is written. unmap_deferred() (the heap's release batches) leaves
//    the small pages' invalidations to tlb_sync(), one TLBIALLIS for the
//    batch: nothing maps those addresses or reuses those pages before it.
//    map() and unmap() serialise on g_map_lock;
//    translate() reads the live tables without it, like the hardware walker.
// 6. Ordering. Every live entry is read once (a volatile or single-copy-
//    atomic 32-bit load) and worked on as a copy, and written with one
//    store. A new level-2 table is complete before it becomes reachable:
//    its zeroes (zero_table, or the page source's memset) and any pages
//    split into it are cleaned to the point of unification and completed
//    by the `dsb ish` in clean_to_pou before set_entry stores the level-1
//    entry that links it; that store is the release, and the walks of
//    every core (and this core's own, which a DMB would not order) read
//    the table only after it. Before the MMU is on nothing walks, and the
//    tables, written with the data cache off, go straight to memory
//    (arm_early_mmu ends with a DSB).
// 5. The heap window (arch::heap_window) is [0xc0000000, 0xf0000000). On
//    QEMU virt devices sit below 0x40000000 and RAM starts there; up to
//    2 GiB of RAM ends at 0xc0000000 = arch::kDirectMapLimit, and the
//    identity map stops there whatever the DTB says, so nothing else is ever
//    mapped in the window. Exceptions use VBAR (SCTLR.V = 0), so the high
//    vectors page 0xffff0000 is unused; the top 256 MiB stay unmapped too.
#include <kernel/align.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/boot_map.h>
#include <kernel/config.h>
#include <kernel/panic.h>
#include <kernel/spinlock.h>
#include "sysregs.h"

namespace {

constexpr unsigned kL1Entries = 4096;
constexpr unsigned kL2Entries = 256;
constexpr uint64_t kSectionSize = 1u << 20;
constexpr uint64_t kAddressSpace = 1ull << 32;
constexpr unsigned kPoolTables = 16;

// Level-1 descriptors.
constexpr uint32_t kL1TypeMask = 3;
constexpr uint32_t kL1Table = 1;        // points at a level-2 table (domain 0)
constexpr uint32_t kL1Section = 2;
constexpr uint32_t kSecB = 1u << 2;
constexpr uint32_t kSecC = 1u << 3;
constexpr uint32_t kSecXn = 1u << 4;
constexpr uint32_t kSecAp1 = 1u << 10;  // AP[1:0] = 01: PL1 only
constexpr uint32_t kSecTex1 = 1u << 12; // TEX = 001 (with C, B: write-back write-allocate)
constexpr uint32_t kSecAp2 = 1u << 15;  // read-only
constexpr uint32_t kSecS = 1u << 16;
constexpr uint32_t kSectionMask = 0xfff00000;
constexpr uint32_t kTableMask = 0xfffffc00;

// Level-2 small-page descriptors.
constexpr uint32_t kPgXn = 1u << 0;
constexpr uint32_t kPgSmall = 1u << 1;
constexpr uint32_t kPgB = 1u << 2;
constexpr uint32_t kPgC = 1u << 3;
constexpr uint32_t kPgAp1 = 1u << 4;
constexpr uint32_t kPgTex1 = 1u << 6;
constexpr uint32_t kPgAp2 = 1u << 9;
constexpr uint32_t kPgS = 1u << 10;
constexpr uint32_t kPageMask = 0xfffff000;

// Everything here lives in .noinit: written with the MMU off.
struct alignas(16384) L1Table {
  uint32_t e[kL1Entries];
};
struct alignas(1024) L2Table {
  uint32_t e[kL2Entries];
};
static_assert(sizeof(L2Table) * 4 == kPageSize);

bool valid(uint32_t desc) { return (desc & 3) != 0; }

// One read of a live entry (Ordering, above): never torn, never repeated.
uint32_t load_entry(const uint32_t* slot) { return __atomic_load_n(slot, __ATOMIC_RELAXED); }

}  // namespace

extern "C" {
__attribute__((section(".pgtables"))) L1Table arm_l1_table;
}

namespace {
__attribute__((section(".pgtables"))) L2Table g_pool[kPoolTables];
__attribute__((section(".pgtables"))) unsigned g_pool_used;
__attribute__((section(".pgtables"))) bool g_mmu_live;

// .bss: only used after boot.
arch::TableAllocator g_table_alloc;
uintptr_t g_spare;         // unused level-2 tables in the last page from g_table_alloc
unsigned g_spare_count;
L2Table* g_free_tables;    // emptied by unmap(), linked through e[0]
unsigned g_free_count;
SpinLock g_map_lock;

uint32_t section_desc(uint64_t pa, unsigned flags) {
  uint32_t d = (static_cast<uint32_t>(pa) & kSectionMask) | kL1Section | kSecAp1;
  if (flags & arch::kMapDevice) d |= kSecB;                            // shareable Device
  else d |= kSecTex1 | kSecC | kSecB | kSecS;                         // normal WBWA, shareable
  if (!(flags & arch::kMapWrite)) d |= kSecAp2;
  if (!(flags & arch::kMapExec) || (flags & arch::kMapDevice)) d |= kSecXn;
  return d;
}

uint32_t page_desc(uint64_t pa, unsigned flags) {
  uint32_t d = (static_cast<uint32_t>(pa) & kPageMask) | kPgSmall | kPgAp1;
  if (flags & arch::kMapDevice) d |= kPgB;
  else d |= kPgTex1 | kPgC | kPgB | kPgS;
  if (!(flags & arch::kMapWrite)) d |= kPgAp2;
  if (!(flags & arch::kMapExec) || (flags & arch::kMapDevice)) d |= kPgXn;
  return d;
}

// The MapFlags a section descriptor was made from (to split it into pages).
unsigned section_flags(uint32_t d) {
  unsigned f = arch::kMapRead;
  if (!(d & kSecAp2)) f |= arch::kMapWrite;
  if (!(d & kSecXn)) f |= arch::kMapExec;
  if (!(d & kSecC)) f |= arch::kMapDevice;
  return f;
}

unsigned dcache_line() {
  uint32_t ctr;
  asm("mrc p15, 0, %0, c0, c0, 1" : "=r"(ctr));
  return 4u << ((ctr >> 16) & 0xf);
}

// Cleans [p, p + size) to the point of unification, where table walks look
// (a no-op need on cores with coherent walks, required on the others).
void clean_to_pou(const void* p, size_t size) {
  if (!g_mmu_live) return;
  unsigned line = dcache_line();
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{line - 1};
  for (uintptr_t end = reinterpret_cast<uintptr_t>(p) + size; a < end; a += line)
    asm volatile("mcr p15, 0, %0, c7, c11, 1" ::"r"(a) : "memory");  // DCCMVAU
  asm volatile("dsb ish" ::: "memory");
}

// Invalidates the translations of va on every core (and the branch
// predictors, which may hold targets through the old mapping).
void tlb_invalidate(uint64_t va) {
  if (!g_mmu_live) return;
  uint32_t mva = static_cast<uint32_t>(va) & kPageMask;
  asm volatile(
      "mcr p15, 0, %0, c8, c3, 3\n"  // TLBIMVAAIS
      "mcr p15, 0, %1, c7, c1, 6\n"  // BPIALLIS
      "dsb ish\n isb" ::"r"(mva),
      "r"(0)
      : "memory");
}

// Clears the entry *slot that maps va (the break of break-before-make): no
// core translates through it when this returns.
void clear_entry(uint32_t* slot, uint64_t va) {
  *static_cast<volatile uint32_t*>(slot) = 0;
  clean_to_pou(slot, sizeof *slot);
  tlb_invalidate(va);
}

// Writes entry *slot = v, with break-before-make if a valid entry changes.
void set_entry(uint32_t* slot, uint32_t v, uint64_t va) {
  volatile uint32_t* s = slot;
  uint32_t old = *s;
  if (valid(old) && old != v) {
    *s = 0;
    clean_to_pou(slot, sizeof *slot);
    tlb_invalidate(va);
  }
  *s = v;
  clean_to_pou(slot, sizeof *slot);
  if (g_mmu_live) asm volatile("isb" ::: "memory");
}

void zero_table(L2Table* t) {
  for (auto& e : t->e) e = 0;
}

L2Table* new_l2_table() {
  if (g_mmu_live && g_free_tables) {  // .bss is only valid once the MMU is on
    L2Table* t = g_free_tables;
    g_free_tables = reinterpret_cast<L2Table*>(t->e[0]);
    g_free_count--;
    zero_table(t);
    return t;
  }
  if (g_pool_used < kPoolTables) {
    L2Table* t = &g_pool[g_pool_used++];
    zero_table(t);
    return t;
  }
  if (!g_mmu_live || !g_table_alloc) return nullptr;
  if (g_spare_count == 0) {
    uintptr_t pa = g_table_alloc();  // identity map; comes zeroed
    if (!pa) return nullptr;
    g_spare = pa;
    g_spare_count = kPageSize / sizeof(L2Table);
  }
  auto* t = reinterpret_cast<L2Table*>(g_spare);
  g_spare += sizeof(L2Table);
  g_spare_count--;
  return t;
}

// Takes back a level-2 table no level-1 entry points at any more.
void free_l2_table(L2Table* t) {
  t->e[0] = reinterpret_cast<uintptr_t>(g_free_tables);
  g_free_tables = t;
  g_free_count++;
}

// Points the level-1 entry *slot, a section, at a new level-2 table of 256
// pages with the same attributes (break-before-make through set_entry).
bool split_section(uint32_t* slot, uint64_t va) {
  L2Table* t = new_l2_table();
  if (!t) return false;
  uint32_t cur = load_entry(slot);
  uint32_t base = cur & kSectionMask;
  unsigned f = section_flags(cur);
  for (unsigned i = 0; i < kL2Entries; i++) t->e[i] = page_desc(base + i * kPageSize, f);
  clean_to_pou(t, sizeof *t);  // the split pages, complete (dsb ish) before the link
  set_entry(slot, reinterpret_cast<uintptr_t>(t) | kL1Table, va);  // the link
  return true;
}

// Maps [va, va + size) to [pa, pa + size), or unmaps it when flags is 0
// (early boot: the guard pages); all page-aligned.
bool map_range(uint64_t va, uint64_t pa, uint64_t size, unsigned flags) {
  if (va + size > kAddressSpace || pa + size > kAddressSpace) return false;
  while (size) {
    uint32_t* slot = &arm_l1_table.e[va >> 20];
    uint32_t cur = load_entry(slot);
    bool is_table = (cur & kL1TypeMask) == kL1Table;
    if (!flags && !valid(cur)) {  // unmapping what is not mapped: skip this section
      uint64_t rest = kSectionSize - (va & (kSectionSize - 1));
      if (rest > size) rest = size;
      va += rest;
      pa += rest;
      size -= rest;
      continue;
    }
    if (!is_table && ((va | pa) & (kSectionSize - 1)) == 0 && size >= kSectionSize) {
      set_entry(slot, flags ? section_desc(pa, flags) : 0, va);
      va += kSectionSize;
      pa += kSectionSize;
      size -= kSectionSize;
      continue;
    }
    if ((cur & kL1TypeMask) == kL1Section) {
      if (!split_section(slot, va)) return false;
      cur = load_entry(slot);
    } else if (!is_table) {
      L2Table* t = new_l2_table();
      if (!t) return false;
      clean_to_pou(t, sizeof *t);  // the zeroes, complete (dsb ish) before the link
      cur = reinterpret_cast<uintptr_t>(t) | kL1Table;
      set_entry(slot, cur, va);    // the link: walks that read it find the table complete
    }
    auto* t = reinterpret_cast<L2Table*>(cur & kTableMask);
    set_entry(&t->e[(va >> 12) & (kL2Entries - 1)], flags ? page_desc(pa, flags) : 0, va);
    va += kPageSize;
    pa += kPageSize;
    size -= kPageSize;
  }
  return true;
}

bool table_empty(const L2Table* t) {
  for (uint32_t e : t->e)
    if (e) return false;
  return true;
}

// Removes the mappings of [va, end); page-aligned, end <= 4 GiB. Returns
// false when a section needs splitting and no level-2 table is left (what
// lies before va is unmapped by then). defer: a small page's entry is
// cleared (and cleaned) without invalidating its translation, which
// arch::tlb_sync() does for all of them at once (unmap_deferred's contract:
// neither the addresses nor the pages are reused before it); level-1
// entries are always invalidated at once, before a level-2 table is freed
// for reuse (and that invalidation by address takes the table's walk-cache
// entry with it).
bool unmap_range(uint64_t va, uint64_t end, bool defer = false) {
  while (va < end) {
    uint32_t* slot = &arm_l1_table.e[va >> 20];
    uint64_t section_end = (va & ~(kSectionSize - 1)) + kSectionSize;
    uint64_t stop = section_end < end ? section_end : end;
    uint32_t cur = load_entry(slot);
    if ((cur & kL1TypeMask) == kL1Section) {
      if ((va & (kSectionSize - 1)) == 0 && stop == section_end) {
        clear_entry(slot, va);
        va = stop;
      } else if (!split_section(slot, va)) {
        return false;  // part of a section: split it, then look again
      }
      continue;
    }
    if ((cur & kL1TypeMask) == kL1Table) {
      auto* t = reinterpret_cast<L2Table*>(cur & kTableMask);
      for (uint64_t a = va; a < stop; a += kPageSize) {
        uint32_t* e = &t->e[(a >> 12) & (kL2Entries - 1)];
        if (!valid(load_entry(e))) continue;
        if (defer) {
          *static_cast<volatile uint32_t*>(e) = 0;
          clean_to_pou(e, sizeof *e);
        } else {
          clear_entry(e, a);
        }
      }
      if (table_empty(t)) {
        // No walk can reach t once the level-1 entry is gone everywhere.
        clear_entry(slot, va);
        free_l2_table(t);
      }
    }
    va = stop;
  }
  return true;
}


}  // namespace

// Runs with the MMU off: see the design statement above.
extern "C" void arm_early_mmu(uintptr_t dtb) {
  g_pool_used = 0;
  g_mmu_live = false;
  for (auto& e : arm_l1_table.e) e = 0;
  boot_map::map_kernel(dtb);  // what to map: kernel/boot_map.h
  // Tables written with the MMU off went straight to memory.
  asm volatile("dsb" ::: "memory");
}

namespace arm {
uint32_t leaf_descriptor(uintptr_t va, bool& is_section);
}

namespace arch {

void boot_map_range(uint64_t start, uint64_t end, unsigned flags) { map_range(start, start, end - start, flags); }

void mmu_live() { g_mmu_live = true; }

bool map(uintptr_t va, uint64_t pa, size_t size, unsigned flags) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  uint64_t start = align_down(va, kPageSize);
  uint64_t pstart = align_down(pa, kPageSize);
  uint64_t end = align_up(uint64_t{va} + size, kPageSize);
  return map_range(start, pstart, end - start, flags);
}

uintptr_t map_device(uint64_t pa, size_t size) {
  if (!map(static_cast<uintptr_t>(pa), pa, size, kMapRead | kMapWrite | kMapDevice)) return 0;
  return static_cast<uintptr_t>(pa);
}

void unmap(uintptr_t va, size_t size) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  uint64_t start = align_down(va, kPageSize);
  uint64_t end = align_up(uint64_t{va} + size, kPageSize);
  if (end > kAddressSpace) end = kAddressSpace;
  if (!unmap_range(start, end))
    panic("arm: unmap [0x%llx, 0x%llx) cuts through a section and no level-2 table is left to split it",
          static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
}

// Without the lock, as the hardware walker reads: each entry is read once.
uint64_t translate(uintptr_t va) {
  uint32_t l1 = *static_cast<volatile const uint32_t*>(&arm_l1_table.e[va >> 20]);
  if ((l1 & kL1TypeMask) == kL1Section) return (l1 & kSectionMask) | (va & (kSectionSize - 1));
  if ((l1 & kL1TypeMask) != kL1Table) return 0;
  const auto* t = reinterpret_cast<const L2Table*>(l1 & kTableMask);
  uint32_t l2 = *static_cast<volatile const uint32_t*>(&t->e[(va >> 12) & (kL2Entries - 1)]);
  if (!(l2 & kPgSmall)) return 0;  // the kernel makes no 64 KiB large pages
  return (l2 & kPageMask) | (va & (kPageSize - 1));
}

unsigned mapping_flags(uintptr_t va) {
  bool section;
  uint32_t d = arm::leaf_descriptor(va, section);
  if (!d) return 0;
  unsigned f = kMapRead;
  if (!(d & (section ? kSecAp2 : kPgAp2))) f |= kMapWrite;
  if (!(d & (section ? kSecXn : kPgXn))) f |= kMapExec;
  if (!(d & (section ? kSecC : kPgC))) f |= kMapDevice;
  return f;
}

uint32_t return_instruction() { return 0xe12fff1e; }  // bx lr

// See the design statement, The heap window.
constexpr uintptr_t kHeapWindowBase = 0xc0000000;
constexpr size_t kHeapWindowSize = 0x30000000;  // 768 MiB, up to 0xf0000000
static_assert(kHeapWindowBase >= kDirectMapLimit, "the heap window overlaps the identity map of RAM");

void heap_window(uintptr_t& base, size_t& size) {
  base = kHeapWindowBase;
  size = kHeapWindowSize;
}

void set_table_allocator(TableAllocator alloc) { g_table_alloc = alloc; }

const char* mmu_description() { return "ARMv7 short descriptors, 1M sections + 4K pages, 32-bit VA"; }

// The heap's batched unmaps (segkmem's release batch): the entries go at
// once, their translations all together in tlb_sync, one broadcast
// TLBIALLIS instead of one TLBIMVAAIS per page (each of which QEMU's
// multi-threaded TCG carries out by synchronising every vCPU).
void unmap_deferred(uintptr_t va, size_t size) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  uint64_t start = align_down(va, kPageSize);
  uint64_t end = align_up(uint64_t{va} + size, kPageSize);
  if (end > kAddressSpace) end = kAddressSpace;
  if (!unmap_range(start, end, true))
    panic("arm: unmap [0x%llx, 0x%llx) cuts through a section and no level-2 table is left to split it",
          static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
}
// Every core's TLB and branch predictors, after the cleared entries were
// made visible to the walkers (clean_to_pou's dsb ish).
void tlb_sync() {
  if (!g_mmu_live) return;
  asm volatile(
      "dsb ish\n"
      "mcr p15, 0, %0, c8, c3, 0\n"  // TLBIALLIS
      "mcr p15, 0, %0, c7, c1, 6\n"  // BPIALLIS
      "dsb ish\n isb" ::"r"(0)
      : "memory");
}

// Static branches. Thumb-2: nop.w <-> b.w (encoding T4), 32 bits on any
// halfword; B.W encodes a halfword offset from pc + 4 in 24 bits
// (S:I1:I2:imm10:imm11): [-16 MiB, +16 MiB - 2]. ARM state: nop <-> b;
// B encodes a word offset from pc + 8 in 24 bits: [-32 MiB, +32 MiB - 4].
#if defined(__thumb__)
constexpr int64_t kBranchReach = int64_t{1} << 24, kPcAhead = 4, kInsnAlign = 2;
#else
constexpr int64_t kBranchReach = int64_t{1} << 25, kPcAhead = 8, kInsnAlign = 4;
#endif
bool static_branch_reachable(uintptr_t site, uintptr_t target) {
  int64_t off = static_cast<int64_t>(uint64_t{target}) - static_cast<int64_t>(uint64_t{site}) - kPcAhead;
  return (off & (kInsnAlign - 1)) == 0 && off >= -kBranchReach && off < kBranchReach;
}
// Every site and target lie in the kernel's text: a text of at most this
// size keeps every branch in range (backwards the pc's bytes ahead count
// against it). linker/kernel.ld.in checks it at link time; patch time
// checks each branch (kernel/static_branch.cpp).
#if defined(__thumb__)
asm(".globl __static_branch_reach\n.set __static_branch_reach, 0xfffffc");
static_assert(kBranchReach - kPcAhead == 0xfffffc);

// The instruction as the little-endian word at site: its first halfword
// (the one with the opcode) in the low half.
uint32_t static_branch_insn(uintptr_t site, uintptr_t target, bool on) {
  if (!on) return 0x8000f3afu;  // nop.w: f3af 8000
  ASSERT(static_branch_reachable(site, target));  // masking the offset would branch elsewhere
  auto off = static_cast<uint32_t>(static_cast<int32_t>(target - site - kPcAhead));
  uint32_t s = (off >> 24) & 1, i1 = (off >> 23) & 1, i2 = (off >> 22) & 1;
  uint32_t j1 = (i1 ^ s ^ 1), j2 = (i2 ^ s ^ 1);  // I1 = NOT(J1 XOR S), I2 likewise
  uint32_t hw1 = 0xf000u | (s << 10) | ((off >> 12) & 0x3ffu);
  uint32_t hw2 = 0x9000u | (j1 << 13) | (j2 << 11) | ((off >> 1) & 0x7ffu);
  return hw1 | (hw2 << 16);  // b.w target
}

// The cores are parked while sites change: ARMv7's list of instructions one
// core may rewrite while another executes them (ARM DDI 0406C, A3.5.4) is
// not relied on for 32-bit Thumb ones, and a site on a halfword boundary
// takes two stores (kernel/static_branch.cpp). Linux parks every core for
// any ARM patch (stop_machine).
bool text_patch_stops_others() { return true; }
#else
asm(".globl __static_branch_reach\n.set __static_branch_reach, 0x1fffff8");
static_assert(kBranchReach - kPcAhead == 0x1fffff8);

uint32_t static_branch_insn(uintptr_t site, uintptr_t target, bool on) {
  if (!on) return 0xe320f000u;  // nop
  ASSERT(static_branch_reachable(site, target));  // masking the offset would branch elsewhere
  auto off = static_cast<int32_t>(target - site - kPcAhead);
  return 0xea000000u | (static_cast<uint32_t>(off >> 2) & 0x00ffffffu);  // b target
}

// nop <-> b are among the instructions ARMv7 lets one core rewrite while
// others execute them (ARM DDI 0406C, A3.5.4 "Concurrent modification and
// execution of instructions"): nothing to stop.
bool text_patch_stops_others() { return false; }
#endif

// DCCMVAU through the alias (the data cache is physically indexed),
// ICIMVAU at site and BPIALLIS: broadcast to the inner shareable domain by
// the multiprocessing extensions.
void text_written(uintptr_t alias, uintptr_t site) {
  asm volatile(
      "mcr p15, 0, %0, c7, c11, 1\n"
      "dsb ish\n"
      "mcr p15, 0, %1, c7, c5, 1\n"
      "mcr p15, 0, %2, c7, c1, 6\n"
      "dsb ish\n"
      "isb\n" ::"r"(alias),
      "r"(site), "r"(0)
      : "memory");
}

void sync_instructions() { asm volatile("mcr p15, 0, %0, c7, c5, 6\n dsb\n isb" ::"r"(0) : "memory"); }

// Parked cores (smp::stop_others: Thumb-2's patching, and other requests)
// yield once a round, no sleep (a wfi would return at once for the
// interrupts masked meanwhile).
uintptr_t park_begin() { return 0; }
void park_poll() {}
void park_sleep() { cpu_relax(); }
void park_end(uintptr_t) {}

}  // namespace arch

namespace arm {

// The descriptor that maps va (a section or a small page), 0 if none. For
// tests and debugging; reads the live tables without the lock.
uint32_t leaf_descriptor(uintptr_t va, bool& is_section) {
  uint32_t l1 = load_entry(&arm_l1_table.e[va >> 20]);
  is_section = (l1 & kL1TypeMask) == kL1Section;
  if (is_section || (l1 & kL1TypeMask) != kL1Table) return is_section ? l1 : 0;
  uint32_t l2 = load_entry(&reinterpret_cast<const L2Table*>(l1 & kTableMask)->e[(va >> 12) & (kL2Entries - 1)]);
  return (l2 & kPgSmall) ? l2 : 0;
}

// How many level-2 tables map() and unmap() can still take without the page
// source mm/ registers, and whether that source is set. For tests.
unsigned l2_tables_available(bool& have_page_source) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  have_page_source = g_table_alloc != nullptr;
  return g_free_count + (kPoolTables - g_pool_used) + g_spare_count;
}

}  // namespace arm
