// SPDX-License-Identifier: Apache-2.0
// RISC-V Sv39 page tables: 39-bit virtual addresses, three levels of 512
// entries; a leaf at level 2 maps 1 GiB, at level 1 2 MiB, at level 0 4 KiB.
//
// 1. The kernel runs on an identity map (virtual = physical) of every RAM
//    bank and of the devices it uses, all global (G). The image is mapped
//    W^X: text R+X, rodata R, data/bss/stacks/tables R+W. Every leaf has A
//    and D set, read-only ones too (as Linux's PAGE_KERNEL_READ): the
//    privileged spec lets a hart raise a page fault instead of setting them
//    itself, and SiFive's U54 (the FU540 of sifive_u) does, where QEMU sets
//    them in the PTE. Table pointers have neither (the spec reserves A, D
//    and U in non-leaf entries).
// 2. riscv_early_mmu() builds the tables with paging off, after start.S has
//    cleared .bss. The root table and the boot pool live in .pgtables (the
//    .noinit area), like arm64's. What it maps is the portable part
//    (kernel/boot_map.h), which calls boot_map_range here.
// 3. After boot, arch::map() adds mappings (devices, the kernel heap) and
//    arch::unmap() removes them, splitting large leaves it cuts through.
//    RISC-V needs no break-before-make; a changed or new entry is followed by
//    sfence.vma here and, when other harts are online, a remote fence (by
//    IPI, SBI for a hart that does not answer; see fence_all) before
//    map()/unmap() return. They serialise on g_map_lock.
// 4. The heap window (arch::heap_window) is the bottom of Sv39's upper half:
//    addresses there are sign-extended, 0xffffffc0'00000000 and up.
// 5. Memory types: without Svpbmt the platform's PMAs make device ranges
//    uncached and strongly ordered, so kMapDevice sets no PTE bit.
// 6. Ordering. Other harts' walkers, this hart's trap handler
//    (spurious_fault, describe_mapping) and translate() read the tables
//    without g_map_lock. Every entry is read once, with a single-copy-atomic
//    load, and the walk goes on from that copy; every entry is written with
//    one single-copy-atomic store. A new table is complete before it becomes
//    reachable: `fence w,w` (publish_table) orders its zeroes (from
//    new_table or the page source's memset) and any entries split into it
//    before the store of the entry that links it, so a walker on another
//    hart that reads the link reads the finished table. This hart's own
//    walker is ordered by the sfence.vma map()/unmap() issue afterwards.
#include <kernel/align.h>
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/boot_map.h>
#include <kernel/config.h>
#include <kernel/format.h>
#include <kernel/page_table.h>
#include <kernel/spinlock.h>
#include <kernel/timer.h>
#include <atomic>
#include "csr.h"
#include "sbi.h"

namespace arch {
void tlb_fence_service();  // below; also called by the IPI handler (arch.cpp)
}

namespace {

constexpr uint64_t kPteV = 1 << 0, kPteR = 1 << 1, kPteW = 1 << 2, kPteX = 1 << 3, kPteG = 1 << 5,
                   kPteA = 1 << 6, kPteD = 1 << 7;
constexpr uint64_t kPteLeafMask = kPteR | kPteW | kPteX;
constexpr unsigned kPpnShift = 10;
constexpr uint64_t kPpnMask = ((1ull << 44) - 1) << kPpnShift;  // bits 53..10
constexpr unsigned kEntries = page_table::kEntries;
constexpr unsigned kLevels = 3;
constexpr unsigned kPoolPages = 48;
using page_table::load_entry;
using page_table::store_entry;
using page_table::Table;
using page_table::zero_table;
}  // namespace

extern "C" {
__attribute__((section(".pgtables"))) Table riscv_root_table;
}

namespace {
__attribute__((section(".pgtables"))) Table g_pool[kPoolPages];
__attribute__((section(".pgtables"))) unsigned g_pool_used;
__attribute__((section(".pgtables"))) bool g_mmu_live;

arch::TableAllocator g_table_alloc;
SpinLock g_map_lock;
bool g_changed;  // under g_map_lock: a live table changed, fence before returning


// Orders every store to a new table before the store that links it (the
// release): a walker that reads the link, on any hart, then reads the
// table's zeroes or split entries, never what the page held before.
void publish_table() { asm volatile("fence w, w" ::: "memory"); }

Table* new_table() { return page_table::new_table(g_pool, g_pool_used, g_mmu_live, g_table_alloc); }

uint64_t pte_pa(uint64_t pte) { return (pte & kPpnMask) << 2; }
uint64_t make_pte(uint64_t pa, uint64_t bits) { return ((pa >> 12) << kPpnShift) | bits; }
bool is_leaf(uint64_t pte) { return (pte & kPteV) && (pte & kPteLeafMask); }
bool is_table(uint64_t pte) { return (pte & kPteV) && !(pte & kPteLeafMask); }

uint64_t leaf_bits(unsigned flags) {
  uint64_t b = kPteV | kPteA | kPteD | kPteG;  // A and D always (the identity map, above)
  if (flags & arch::kMapRead) b |= kPteR;
  if (flags & arch::kMapWrite) b |= kPteW | kPteR;  // W without R is reserved
  if (flags & arch::kMapExec) b |= kPteX;
  return b;
}

bool g_changed_valid;  // under g_map_lock: a valid entry changed (needs remote fences)

// Under g_map_lock (or at boot). The store is what other harts' walks see;
// map()/unmap() fence before returning (After boot, above).
void set_entry(uint64_t* slot, uint64_t v) {
  uint64_t old = load_entry(slot);
  if (old == v) return;
  if (g_mmu_live && (old & kPteV)) g_changed_valid = true;
  store_entry(slot, v);
  if (g_mmu_live) g_changed = true;
}

// Points *slot (a level `level` entry whose value is cur, empty or a leaf)
// at a new table; a leaf becomes 512 leaves of the next level with the
// same bits. Returns the new entry (0 if no table could be had).
uint64_t split(uint64_t* slot, uint64_t cur, unsigned level) {
  Table* next = new_table();
  if (!next) return 0;
  if (is_leaf(cur)) {
    uint64_t block = 1ull << (12 + 9 * level);
    uint64_t base = pte_pa(cur) & ~(block - 1);
    uint64_t old_bits = cur & ~kPpnMask;
    uint64_t sub = block >> 9;
    for (unsigned i = 0; i < kEntries; i++) next->e[i] = make_pte(base + i * sub, old_bits);
  }
  publish_table();  // the zeroes and the split leaves, before the link
  uint64_t link = make_pte(reinterpret_cast<uintptr_t>(next), kPteV);
  set_entry(slot, link);  // the link: walkers that read it find the table complete
  return link;
}

// The leaf entry that maps va, the value read (once: Ordering, above) and its
// level, or nullptr.
uint64_t* find_leaf(uint64_t va, uint64_t& entry, unsigned& level_out) {
  Table* t = &riscv_root_table;
  for (unsigned level = kLevels - 1;; level--) {
    uint64_t* slot = &t->e[(va >> (12 + 9 * level)) & (kEntries - 1)];
    uint64_t e = load_entry(slot);
    if (!(e & kPteV)) return nullptr;
    if (is_leaf(e)) {
      level_out = level;
      entry = e;
      return slot;
    }
    if (level == 0) return nullptr;  // a table pointer at level 0 is malformed
    t = reinterpret_cast<Table*>(pte_pa(e));
  }
}

// Maps [va, va + size) to pa with the PTE bits, or unmaps it when bits is
// 0 (early boot: the guard pages). Page-aligned.
bool map_range(uint64_t va, uint64_t pa, uint64_t size, uint64_t bits) {
  while (size) {
    Table* t = &riscv_root_table;
    for (unsigned level = kLevels - 1;; level--) {
      unsigned shift = 12 + 9 * level;  // 30, 21, 12
      uint64_t block = 1ull << shift;
      uint64_t* slot = &t->e[(va >> shift) & (kEntries - 1)];
      uint64_t cur = load_entry(slot);
      bool fits = ((va | pa) & (block - 1)) == 0 && size >= block;
      if (level == 0 || (fits && !is_table(cur))) {
        set_entry(slot, bits ? make_pte(pa, bits) : 0);
        va += block;
        pa += block;
        size -= block;
        break;
      }
      if (!bits && !(cur & kPteV)) {  // unmapping what is not mapped: skip this block
        uint64_t rest = block - (va & (block - 1));
        if (rest > size) rest = size;
        va += rest;
        pa += rest;
        size -= rest;
        break;
      }
      if (!is_table(cur) && !(cur = split(slot, cur, level))) return false;
      t = reinterpret_cast<Table*>(pte_pa(cur));
    }
  }
  return true;
}


// Makes table changes visible: this hart's TLB, then every other online
// hart's.
//
// The other harts fence themselves when an IPI asks them to (a request
// number in g_fence_slot, done in tlb_fence_service from the IPI handler
// and from the lock waits here), and this hart waits for them with wfi.
// Whichever has not answered within kFenceWaitNs (interrupts masked
// that long, e.g. spinning on a lock this hart holds) gets an SBI remote
// fence, all in one call when the hart ids fit one 64-bit mask (else one
// call per hart).
//
// Why not SBI remote fences for everyone: OpenSBI waits for the
// targets' acknowledgement in M-mode, spinning with interrupts off, and
// QEMU before 8.1 (commit 83ecdb18eb65, "accel/tcg/tcg-accel-ops-rr: ensure
// fairness with icount") gives the spinning vCPU the whole instruction
// budget up to the next timer deadline under -icount: the target hart next
// in round-robin order gets none, ever, and both hang (QEMU 7.2's
// -icount shift=0 runs of the test suite and "bench quick"). wfi ends a
// vCPU's time slice, so waiting here in S-mode lets the targets run.
//
// One fencing hart at a time (g_fence_lock): harts waiting for it answer
// requests meanwhile.
//
// Ordering: the fencing hart stores g_fencer (relaxed), then each target's
// request with release: that releases g_fencer and every table store made
// before it. The target loads request with acquire, so its sfence.vma
// comes after those stores are visible to it and its later walks see
// them; it then stores done with release, which the fencing hart loads
// with acquire before it lets the caller reuse the addresses or free the
// pages.
SpinLock g_fence_lock;
constexpr uint64_t kFenceWaitNs = 10'000'000;
struct alignas(64) FenceSlot {
  std::atomic<uint64_t> request{0};  // set by the fencing hart, then an IPI
  std::atomic<uint64_t> done{0};     // the last request this hart fenced for
};
FenceSlot g_fence_slot[kMaxCpus];
uint64_t g_fence_seq;               // under g_fence_lock
std::atomic<unsigned> g_fencer{0};  // the fencing hart's index, for the reply IPI

// Takes lock with interrupts masked, answering fence requests while it
// waits (the holder may be fencing and waiting for this hart).
void lock_answering(SpinLock& lock) {
  while (!lock.try_lock()) {
    arch::tlb_fence_service();
    arch::cpu_relax();
  }
}

struct [[nodiscard]] MapGuard {
  explicit MapGuard(SpinLock& l) : lock(l), irq(arch::irq_save()) { lock_answering(lock); }
  ~MapGuard() {
    lock.unlock();
    arch::irq_restore(irq);
  }
  MapGuard(const MapGuard&) = delete;
  MapGuard& operator=(const MapGuard&) = delete;
  SpinLock& lock;
  arch::IrqState irq;
};

void sbi_fence(unsigned self, uint64_t seq, uintptr_t start, size_t size) {
  unsigned long mask = 0, base = ~0ul, high = 0;
  auto late = [&](const PerCpu& c) {
    return c.index != self && c.online.load(std::memory_order_acquire) &&
           g_fence_slot[c.index].done.load(std::memory_order_acquire) != seq;
  };
  for_each_cpu([&](PerCpu& c) {
    if (!late(c)) return;
    if (c.hwid < base) base = c.hwid;
    if (c.hwid > high) high = c.hwid;
  });
  if (base == ~0ul) return;
  if (high - base < 64) {
    for_each_cpu([&](PerCpu& c) {
      if (late(c)) mask |= 1ul << (c.hwid - base);
    });
    (void)sbi::remote_sfence_vma_mask(mask, base, start, size);
    return;
  }
  for_each_cpu([&](PerCpu& c) {
    if (late(c)) (void)sbi::remote_sfence_vma(c.hwid);
  });
}

void fence_all(uintptr_t start = 0, size_t size = ~size_t{0}) {
  asm volatile("sfence.vma" ::: "memory");
  unsigned self = cpu_id();
  bool others = false;
  for_each_cpu([&](PerCpu& c) { others |= c.index != self && c.online.load(std::memory_order_acquire); });
  if (!others) return;
  MapGuard g(g_fence_lock);
  uint64_t seq = ++g_fence_seq;
  g_fencer.store(self, std::memory_order_relaxed);
  for_each_cpu([&](PerCpu& c) {
    if (c.index == self || !c.online.load(std::memory_order_acquire)) return;
    g_fence_slot[c.index].request.store(seq, std::memory_order_release);
    arch::send_ipi(c);
  });
  uint64_t deadline = timer::now_ns() + kFenceWaitNs;
  for (;;) {
    bool all = true;
    for_each_cpu([&](PerCpu& c) {
      if (c.index != self && c.online.load(std::memory_order_acquire) &&
          g_fence_slot[c.index].done.load(std::memory_order_acquire) != seq)
        all = false;
    });
    if (all) return;
    if (timer::now_ns() > deadline) break;
    // Interrupts are masked: a reply IPI or the tick ends the wait (and
    // under QEMU's round-robin TCG it hands the time slice on).
    arch::wait_for_interrupt();
  }
  sbi_fence(self, seq, start, size);
}

}  // namespace

// Runs with paging off: see the design statement above.
extern "C" void riscv_early_mmu(uintptr_t dtb) {
  g_pool_used = 0;
  g_mmu_live = false;
  zero_table(&riscv_root_table);
  boot_map::map_kernel(dtb);  // what to map: kernel/boot_map.h
}

namespace arch {

void boot_map_range(uint64_t start, uint64_t end, unsigned flags) {
  map_range(start, start, end - start, flags ? leaf_bits(flags) : 0);
}

void mmu_live() { g_mmu_live = true; }

void tlb_fence_service() {
  IrqState s = irq_save();
  unsigned self = cpu_id();
  FenceSlot& f = g_fence_slot[self];
  uint64_t r = f.request.load(std::memory_order_acquire);
  if (r != f.done.load(std::memory_order_relaxed)) {
    asm volatile("sfence.vma" ::: "memory");
    f.done.store(r, std::memory_order_release);
    unsigned to = g_fencer.load(std::memory_order_relaxed);
    if (to != self) send_ipi(g_percpu[to]);  // wake the fencing hart
  }
  irq_restore(s);
}

bool map(uintptr_t va, uint64_t pa, size_t size, unsigned flags) {
  MapGuard g(g_map_lock);
  uint64_t start = align_down(va, kPageSize);
  uint64_t pstart = align_down(pa, kPageSize);
  uint64_t end = align_up(va + size, kPageSize);
  g_changed = false;
  g_changed_valid = false;
  bool ok = map_range(start, pstart, end - start, leaf_bits(flags));
  // Invalid -> valid needs only this hart's fence: another hart that cached
  // the invalid entry takes a spurious page fault, which the trap handler
  // retries after its own fence (arch::spurious_fault). Changing a valid
  // entry needs every hart.
  if (g_changed_valid) fence_all();
  else if (g_changed) asm volatile("sfence.vma" ::: "memory");
  return ok;
}

uintptr_t map_device(uint64_t pa, size_t size) {
  if (!map(pa, pa, size, kMapRead | kMapWrite | kMapDevice)) return 0;
  return pa;
}

namespace {
void unmap_range(uintptr_t va, size_t size, bool remote) {
  MapGuard g(g_map_lock);
  g_changed = false;
  uint64_t end = align_up(va + size, kPageSize);
  for (uint64_t a = align_down(va, kPageSize); a < end;) {
    unsigned level;
    uint64_t entry;
    uint64_t* slot = find_leaf(a, entry, level);
    if (!slot) {
      a += kPageSize;
      continue;
    }
    uint64_t block = 1ull << (12 + 9 * level);
    if (block != kPageSize && ((a & (block - 1)) || a + block > end)) {
      if (!split(slot, entry, level)) break;  // part of a large leaf: split, look again
      continue;
    }
    set_entry(slot, 0);
    a += block;
  }
  if (!g_changed) return;
  if (remote) fence_all(align_down(va, kPageSize), end - align_down(va, kPageSize));
  else asm volatile("sfence.vma" ::: "memory");
}
}  // namespace

void unmap(uintptr_t va, size_t size) { unmap_range(va, size, true); }

// From the trap handler, without the lock: one read of each entry.
bool spurious_fault(uintptr_t va, bool write, bool exec) {
  unsigned level;
  uint64_t pte;
  if (!find_leaf(va, pte, level)) return false;
  if (write ? !(pte & kPteW) : exec ? !(pte & kPteX) : !(pte & kPteR)) return false;
  asm volatile("sfence.vma %0" ::"r"(va) : "memory");
  return true;
}

// Only this hart's TLB now; the others at the next tlb_sync(): SBI remote
// fences are slow (a round trip through the firmware to every hart).
void unmap_deferred(uintptr_t va, size_t size) { unmap_range(va, size, false); }

void tlb_sync() {
  MapGuard g(g_map_lock);
  fence_all();
}

// Without the lock, as a walker reads: meaningful for a va whose mapping
// the caller keeps stable (tables are never freed, so the walk itself is
// safe whatever runs meanwhile).
uint64_t translate(uintptr_t va) {
  unsigned level;
  uint64_t pte;
  if (!find_leaf(va, pte, level)) return 0;
  uint64_t block = 1ull << (12 + 9 * level);
  return (pte_pa(pte) & ~(block - 1)) | (va & (block - 1));
}

unsigned mapping_flags(uintptr_t va) {
  unsigned level;
  uint64_t pte;
  if (!find_leaf(va, pte, level)) return 0;
  // No PTE bit says device here (Memory types, above): the PMAs do.
  unsigned f = 0;
  if (pte & kPteR) f |= kMapRead;
  if (pte & kPteW) f |= kMapWrite;
  if (pte & kPteX) f |= kMapExec;
  return f;
}

}  // namespace arch

// For tests/kernel/arch/riscv64/test_mmu.cpp: every entry of the live tables, and one
// leaf. Lock-free reads, as the walkers' (Ordering, above): tables are never freed.
namespace riscv {
void visit_entries(void (*fn)(uint64_t pte, unsigned level, void* arg), void* arg) {
  struct Walk {
    static void table(const Table* t, unsigned level, void (*fn)(uint64_t, unsigned, void*), void* arg) {
      for (const uint64_t& slot : t->e) {
        uint64_t e = load_entry(&slot);
        if (!(e & kPteV)) continue;
        fn(e, level, arg);
        if (is_table(e) && level > 0) table(reinterpret_cast<const Table*>(pte_pa(e)), level - 1, fn, arg);
      }
    }
  };
  Walk::table(&riscv_root_table, kLevels - 1, fn, arg);
}

uint64_t leaf_entry(uintptr_t va) {
  unsigned level;
  uint64_t pte;
  return find_leaf(va, pte, level) ? pte : 0;
}
}  // namespace riscv

namespace arch {

uint32_t return_instruction() { return 0x00008067; }  // jalr x0, 0(ra)

void heap_window(uintptr_t& base, size_t& size) {
  // 64 GiB at the bottom of Sv39's upper half (sign-extended addresses from
  // -256 GiB): clear of the identity map, which stays below kDirectMapLimit.
  base = ~uintptr_t{0} << 38;
  size = uintptr_t{64} << 30;
}

void set_table_allocator(TableAllocator alloc) { g_table_alloc = alloc; }

const char* mmu_description() { return "RISC-V Sv39, 4K pages, 3 levels"; }

// For fault reports: how va is mapped now, e.g. "page mapped r-x (4 KiB)".
const char* describe_mapping(uintptr_t va, char* buf, size_t size) {
  if ((va >> 38) != 0 && (va >> 38) != (~0ull >> 38)) return "not a valid Sv39 address";
  unsigned level;
  uint64_t pte;
  if (!find_leaf(va, pte, level)) return "page not mapped";
  static const char* const kSizes[] = {"4 KiB", "2 MiB", "1 GiB"};
  ksnprintf(buf, size, "page mapped %c%c%c (%s)", pte & kPteR ? 'r' : '-', pte & kPteW ? 'w' : '-',
            pte & kPteX ? 'x' : '-', kSizes[level]);
  return buf;
}

// Static branches: a 4-byte nop <-> jal x0 on a 2-byte boundary (one
// aligned store, or two halves for a site that is not 4-aligned). Without Ziccif the ISA does not say what a hart fetching
// an instruction sees while another hart rewrites it, so the other harts
// are parked while text changes (text_patch_stops_others): each one waits
// with interrupts masked in park_*, below, and runs fence.i
// (sync_instructions) before it goes back to what it was doing.
//
// jal encodes a halfword offset in 20 bits: [-1 MiB, +1 MiB - 2].
constexpr int64_t kBranchReach = int64_t{1} << 20;
bool static_branch_reachable(uintptr_t site, uintptr_t target) {
  int64_t off = static_cast<int64_t>(target - site);
  return (off & 1) == 0 && off >= -kBranchReach && off < kBranchReach;
}
// Every site and target lie in the kernel's text: a text smaller than the
// reach keeps every branch in range. linker/kernel.ld.in checks it at link
// time; patch time checks each branch (kernel/static_branch.cpp).
asm(".globl __static_branch_reach\n.set __static_branch_reach, 0x100000");
static_assert(kBranchReach == 0x100000);

uint32_t static_branch_insn(uintptr_t site, uintptr_t target, bool on) {
  if (!on) return 0x00000013u;  // addi x0, x0, 0
  ASSERT(static_branch_reachable(site, target));  // masking the offset would jump elsewhere
  uint32_t imm = static_cast<uint32_t>(static_cast<int64_t>(target - site));
  return (((imm >> 20) & 1u) << 31) | (((imm >> 1) & 0x3ffu) << 21) | (((imm >> 11) & 1u) << 20) |
         (((imm >> 12) & 0xffu) << 12) | 0x6fu;  // jal x0, target
}

bool text_patch_stops_others() { return true; }

void text_written(uintptr_t, uintptr_t) { asm volatile("fence rw, rw\n fence.i" ::: "memory"); }

void sync_instructions() { asm volatile("fence.i" ::: "memory"); }

// A parked hart (interrupts masked) sleeps in wfi, which wakes for an
// interrupt pending and enabled in sie whatever sstatus.SIE says: only the
// software interrupt (IPIs) stays enabled, so the timer cannot keep it
// awake. park_poll clears the IPI before the caller looks at what it
// announced (release, or a TLB fence request from the stopping hart, which
// maps and unmaps while it patches), so none is lost.
uintptr_t park_begin() {
  uintptr_t sie;
  asm volatile("csrrw %0, sie, %1" : "=r"(sie) : "r"(uintptr_t{SIE_SSIE}) : "memory");
  return sie;
}
void park_poll() {
  asm volatile("csrc sip, %0" ::"r"(SIE_SSIE) : "memory");
  tlb_fence_service();
}
void park_sleep() { wait_for_interrupt(); }
void park_end(uintptr_t sie) { asm volatile("csrw sie, %0" ::"r"(sie) : "memory"); }

}  // namespace arch
