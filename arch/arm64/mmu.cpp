// SPDX-License-Identifier: Apache-2.0
// AArch64 page tables: 4 KiB granule, 39-bit virtual addresses, walks start
// at level 1 (1 GiB blocks), level 2 (2 MiB blocks), level 3 (4 KiB pages).
//
// 1. The kernel runs on an identity map (virtual = physical) of every RAM
//    bank and of the devices it uses. The image is mapped W^X: text RX,
//    rodata R, data/bss/stacks/tables RW and never executable.
// 2. arm64_early_mmu() builds the tables with the MMU off, before .bss is
//    cleared, so everything it touches lives in the .noinit area (invalidated
//    by start.S before use) or on the boot stack. What it maps is the
//    portable part (kernel/boot_map.h), which calls boot_map_range here.
// 3. After boot, arch::map() adds mappings (devices, later the kernel heap).
//    Turning a valid entry into another one follows break-before-make.
//    Callers serialise: map() and unmap() take g_map_lock.
// 4. Ordering. Other cores' table walkers (and this core's own) read the
//    tables while they change, and so does translate() without the lock.
//    Every entry is read once, with a single-copy-atomic 64-bit load, and
//    the walk goes on from that copy (a second read could see the other
//    side of a break-before-make); every entry is written with one
//    single-copy-atomic store. A new table is complete before it becomes
//    reachable: its zeroes (from new_table or the page source's memset) and
//    any entries split into it are ordered before the store of the entry
//    that links it by `dsb ishst` (publish_table). A DMB would order them
//    for other cores' walks but not for this core's own walker, which the
//    architecture lets read ahead at any time; the DSB covers both.
#include <kernel/align.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/boot_map.h>
#include <kernel/config.h>
#include <kernel/page_table.h>
#include <kernel/panic.h>
#include <kernel/spinlock.h>
#include "sysregs.h"

namespace {

constexpr uint64_t kDescValid = 1;
constexpr uint64_t kDescTable = 3;    // levels 1-2: next-level table
constexpr uint64_t kDescBlock = 1;    // levels 1-2: block
constexpr uint64_t kDescPage = 3;     // level 3: page
constexpr uint64_t kAttrIdxShift = 2;
constexpr uint64_t kApReadOnly = 1ull << 7;
constexpr uint64_t kShInner = 3ull << 8;
constexpr uint64_t kAccessFlag = 1ull << 10;
constexpr uint64_t kPxn = 1ull << 53;
constexpr uint64_t kUxn = 1ull << 54;
constexpr uint64_t kOutputMask = 0x0000fffffffff000ull;
constexpr uint64_t kAttrMask = ~kOutputMask & ~3ull;
constexpr unsigned kEntries = page_table::kEntries;
constexpr unsigned kPoolPages = 48;
using page_table::load_entry;
using page_table::store_entry;
using page_table::Table;
using page_table::zero_table;
}  // namespace

extern "C" {
__attribute__((section(".pgtables"))) Table arm64_root_table;
}

namespace {
__attribute__((section(".pgtables"))) Table g_pool[kPoolPages];
__attribute__((section(".pgtables"))) unsigned g_pool_used;
__attribute__((section(".pgtables"))) bool g_mmu_live;

arch::TableAllocator g_table_alloc;  // .bss: only used after boot
SpinLock g_map_lock;


// Orders every store to a new table before the store that links it (the
// release): a walker that reads the link, on any core, then reads the
// table's zeroes or split entries, never what the page held before.
void publish_table() { asm volatile("dsb ishst" ::: "memory"); }

Table* table_of(uint64_t desc) { return reinterpret_cast<Table*>(desc & kOutputMask); }

Table* new_table() { return page_table::new_table(g_pool, g_pool_used, g_mmu_live, g_table_alloc); }

uint64_t leaf_attrs(unsigned flags) {
  uint64_t a = kAccessFlag;
  if (flags & arch::kMapDevice) {
    a |= uint64_t{MAIR_IDX_DEVICE} << kAttrIdxShift;
  } else {
    a |= (uint64_t{MAIR_IDX_NORMAL} << kAttrIdxShift) | kShInner;
  }
  if (!(flags & arch::kMapWrite)) a |= kApReadOnly;
  a |= kUxn;
  if (!(flags & arch::kMapExec)) a |= kPxn;
  return a;
}

void sync_entry_change(uint64_t va) {
  if (!g_mmu_live) return;
  asm volatile("dsb ishst\n tlbi vaae1is, %0\n dsb ish\n isb" ::"r"(va >> 12) : "memory");
}

// Writes entry *slot = v, with break-before-make if a valid entry changes:
// the invalid entry is visible to every walker and no TLB holds the old one
// (sync_entry_change) before v is stored. Then `dsb ishst; isb` makes v
// visible to this core's walker before the next instruction; other cores'
// walks find it when they read the slot (TLBs never hold invalid entries,
// so invalid -> valid needs no invalidation).
void set_entry(uint64_t* slot, uint64_t v, uint64_t va) {
  uint64_t old = load_entry(slot);
  if ((old & kDescValid) && old != v) {
    store_entry(slot, 0);
    sync_entry_change(va);
  }
  store_entry(slot, v);
  if (g_mmu_live) asm volatile("dsb ishst\n isb" ::: "memory");
}

// Fills a new next-level table with the blocks or pages of the block entry
// desc (level `level`), same attributes.
void fill_from_block(Table* next, uint64_t desc, unsigned level) {
  uint64_t block = 1ull << (39 - 9 * level);
  uint64_t base = desc & kOutputMask & ~(block - 1);
  uint64_t attrs = desc & kAttrMask;
  uint64_t sub = block >> 9;
  for (unsigned i = 0; i < kEntries; i++)
    next->e[i] = (base + i * sub) | attrs | (level + 1 == 3 ? kDescPage : kDescBlock);
}

// Maps [va, va + size) to pa with attrs, or unmaps it when attrs is 0
// (early boot: the guard pages). Page-aligned.
bool map_range(uint64_t va, uint64_t pa, uint64_t size, uint64_t attrs) {
  while (size) {
    Table* t = &arm64_root_table;
    for (unsigned level = 1;; level++) {
      unsigned shift = 39 - 9 * level;  // 30, 21, 12
      uint64_t block = 1ull << shift;
      uint64_t* slot = &t->e[(va >> shift) & (kEntries - 1)];
      if (level == 3) {
        set_entry(slot, attrs ? (pa & kOutputMask) | attrs | kDescPage : 0, va);
        va += block;
        pa += block;
        size -= block;
        break;
      }
      uint64_t cur = load_entry(slot);
      bool fits = ((va | pa) & (block - 1)) == 0 && size >= block;
      bool is_table = (cur & 3) == kDescTable;
      if (fits && !is_table && level >= 2) {
        set_entry(slot, attrs ? (pa & kOutputMask) | attrs | kDescBlock : 0, va);
        va += block;
        pa += block;
        size -= block;
        break;
      }
      if (!attrs && !(cur & kDescValid)) {  // unmapping what is not mapped: skip this block
        uint64_t rest = block - (va & (block - 1));
        if (rest > size) rest = size;
        va += rest;
        pa += rest;
        size -= rest;
        break;
      }
      if (!is_table) {
        Table* next = new_table();
        if (!next) return false;
        // Split an existing block into the next level's blocks or pages.
        if (cur & kDescValid) fill_from_block(next, cur, level);
        publish_table();  // the zeroes and the split entries, before the link
        cur = reinterpret_cast<uintptr_t>(next) | kDescTable;
        set_entry(slot, cur, va);  // the link: walkers that read it find the table complete
      }
      t = table_of(cur);
    }
  }
  return true;
}


}  // namespace

// Runs with the MMU off: see the design statement above.
extern "C" void arm64_early_mmu(uintptr_t dtb) {
  g_pool_used = 0;
  g_mmu_live = false;
  zero_table(&arm64_root_table);
  boot_map::map_kernel(dtb);  // what to map: kernel/boot_map.h
  // Tables written with the MMU off: make sure no stale line shadows them.
  asm volatile("dsb sy" ::: "memory");
}

namespace arch {

void boot_map_range(uint64_t start, uint64_t end, unsigned flags) {
  map_range(start, start, end - start, flags ? leaf_attrs(flags) : 0);
}

void mmu_live() { g_mmu_live = true; }

bool map(uintptr_t va, uint64_t pa, size_t size, unsigned flags) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  uint64_t start = align_down(va, kPageSize);
  uint64_t pstart = align_down(pa, kPageSize);
  uint64_t end = align_up(va + size, kPageSize);
  return map_range(start, pstart, end - start, leaf_attrs(flags));
}

uintptr_t map_device(uint64_t pa, size_t size) {
  if (!map(pa, pa, size, kMapRead | kMapWrite | kMapDevice)) return 0;
  return pa;
}

void set_table_allocator(TableAllocator alloc) { g_table_alloc = alloc; }

// Walks to the leaf entry for va; returns its slot, the entry as read
// (once: see Ordering, above), its block size and level, or nullptr if
// nothing valid maps va.
namespace {
uint64_t* find_leaf(uint64_t va, uint64_t& entry, uint64_t& block, unsigned& level_out) {
  Table* t = &arm64_root_table;
  for (unsigned level = 1; level <= 3; level++) {
    unsigned shift = 39 - 9 * level;
    block = 1ull << shift;
    uint64_t* slot = &t->e[(va >> shift) & (kEntries - 1)];
    uint64_t e = load_entry(slot);
    if (!(e & kDescValid)) return nullptr;
    level_out = level;
    if (level == 3 || (e & 3) == kDescBlock) {
      entry = e;
      return slot;
    }
    t = table_of(e);
  }
  return nullptr;
}

// Replaces the block entry desc at *slot by a table of the next level's
// entries with the same attributes (break-before-make through set_entry).
bool split_block(uint64_t* slot, uint64_t desc, unsigned level, uint64_t va) {
  Table* next = new_table();
  if (!next) return false;
  uint64_t block = 1ull << (39 - 9 * level);
  fill_from_block(next, desc, level);
  publish_table();  // the split entries, before the link
  set_entry(slot, reinterpret_cast<uintptr_t>(next) | kDescTable, va & ~(block - 1));
  return true;
}
}  // namespace

// Without the lock, as a walker reads: meaningful for a va whose mapping
// the caller keeps stable (arm64 never frees a table, so the walk itself is
// safe whatever runs meanwhile).
uint64_t translate(uintptr_t va) {
  uint64_t entry, block;
  unsigned level;
  if (!find_leaf(va, entry, block, level)) return 0;
  return ((entry & kOutputMask) & ~(block - 1)) | (va & (block - 1));
}

unsigned mapping_flags(uintptr_t va) {
  uint64_t entry, block;
  unsigned level;
  if (!find_leaf(va, entry, block, level)) return 0;
  unsigned f = kMapRead;
  if (!(entry & kApReadOnly)) f |= kMapWrite;
  if (!(entry & kPxn)) f |= kMapExec;
  if (((entry >> kAttrIdxShift) & 7) == MAIR_IDX_DEVICE) f |= kMapDevice;
  return f;
}

uint32_t return_instruction() { return 0xd65f03c0; }  // ret

void unmap(uintptr_t va, size_t size) {
  Guard<SpinLock, IrqSave> g(g_map_lock);
  uint64_t end = align_up(va + size, kPageSize);
  for (uint64_t a = align_down(va, kPageSize); a < end;) {
    uint64_t entry, block;
    unsigned level;
    uint64_t* slot = find_leaf(a, entry, block, level);
    if (!slot) {
      a += kPageSize;
      continue;
    }
    if (block != kPageSize && ((a & (block - 1)) || a + block > end)) {
      // Part of a block: split it, then look again.
      if (!split_block(slot, entry, level, a)) return;
      continue;
    }
    store_entry(slot, 0);
    sync_entry_change(a);
    a += block;
  }
}

void heap_window(uintptr_t& base, size_t& size) {
  // 64 GiB at 384 GiB: above every RAM bank virt can have (RAM ends below
  // 256 GiB), clear of its high device windows, below the 39-bit limit.
  base = uintptr_t{0x60} << 32;
  size = uintptr_t{64} << 30;
}

const char* mmu_description() { return "AArch64 4K granule, 39-bit VA, 3 levels"; }

// TLB invalidations here are broadcast to every core already (inner
// shareable), and cheap: nothing to defer.
void unmap_deferred(uintptr_t va, size_t size) { unmap(va, size); }
void tlb_sync() {}

// Static branches: nop <-> b. Both are among the instructions the
// architecture lets one core rewrite while others execute them (ARM DDI
// 0487, B2.2.5 "Concurrent modification and execution of instructions").
// B encodes a word offset in 26 bits: [-128 MiB, +128 MiB - 4].
constexpr int64_t kBranchReach = int64_t{1} << 27;
bool static_branch_reachable(uintptr_t site, uintptr_t target) {
  int64_t off = static_cast<int64_t>(target - site);
  return (off & 3) == 0 && off >= -kBranchReach && off < kBranchReach;
}
// Every site and target lie in the kernel's text: a text smaller than the
// reach keeps every branch in range. linker/kernel.ld.in checks it at link
// time; patch time checks each branch (kernel/static_branch.cpp).
asm(".globl __static_branch_reach\n.set __static_branch_reach, 0x8000000");
static_assert(kBranchReach == 0x8000000);

uint32_t static_branch_insn(uintptr_t site, uintptr_t target, bool on) {
  if (!on) return 0xd503201f;  // nop
  ASSERT(static_branch_reachable(site, target));  // masking the offset would branch elsewhere
  int64_t off = static_cast<int64_t>(target - site);
  return 0x14000000u | (static_cast<uint32_t>(off >> 2) & 0x03ffffffu);  // b target
}

// nop <-> b may be rewritten under a running core (above): nothing to stop.
bool text_patch_stops_others() { return false; }

// Clean the new instruction to the point of unification (through the
// alias: data caches are physically indexed), invalidate the instruction
// cache line at site in every core of the inner shareable domain.
void text_written(uintptr_t alias, uintptr_t site) {
  asm volatile("dc cvau, %0\n dsb ish\n ic ivau, %1\n dsb ish\n isb" ::"r"(alias), "r"(site) : "memory");
}

void sync_instructions() { asm volatile("isb" ::: "memory"); }

// Never used for patching here (text_patch_stops_others); smp::stop_others
// still parks cores on request: a yield per round, no sleep (a wfi would
// return at once for the interrupts masked meanwhile).
uintptr_t park_begin() { return 0; }
void park_poll() {}
void park_sleep() { cpu_relax(); }
void park_end(uintptr_t) {}

}  // namespace arch
