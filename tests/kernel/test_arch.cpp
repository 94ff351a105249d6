// Portable checks of the arch layer: page-table changes seen through
// arch::translate (large leaves split by a partial unmap on every arch).
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/ktest.h>

namespace {

constexpr uintptr_t kLarge = uintptr_t{2} << 20;  // a level-2 block (arm64, riscv64), two sections (arm)

// The top 4 MiB of the heap window: far from where the heap arena starts
// allocating (its bottom), and checked to be unmapped before use.
uintptr_t test_window() {
  uintptr_t base;
  size_t size;
  arch::heap_window(base, size);
  return base + size - 2 * kLarge;
}

bool unmapped(uintptr_t va, size_t size) {
  for (uintptr_t a = va; a - va < size; a += kPageSize)
    if (arch::translate(a)) return false;
  return true;
}

}  // namespace

KTEST(map_large_leaf_then_split_it_by_a_partial_unmap) {
  const uintptr_t va = test_window();
  // 2 MiB of RAM around the kernel image, mapped a second time read-only.
  const uint64_t pa = reinterpret_cast<uintptr_t>(__kernel_start) & ~uint64_t{kLarge - 1};
  KASSERT(unmapped(va, kLarge));
  KASSERT(arch::map(va, pa, kLarge, arch::kMapRead));
  bool right = true;
  for (uintptr_t o = 0; o < kLarge; o += 64 * 1024) right &= arch::translate(va + o + 8) == pa + o + 8;
  KEXPECT(right);
  KEXPECT_EQ(*reinterpret_cast<volatile const uint32_t*>(va + 0x1234 * 4),
             *reinterpret_cast<volatile const uint32_t*>(static_cast<uintptr_t>(pa) + 0x1234 * 4));

  // One page out of the middle: the leaf is split, the other pages stay.
  const uintptr_t hole = va + kLarge / 2 + 3 * kPageSize;
  arch::unmap(hole, kPageSize);
  KEXPECT_EQ(arch::translate(hole), 0u);
  unsigned still = 0;
  right = true;
  for (uintptr_t o = 0; o < kLarge; o += kPageSize) {
    if (va + o == hole) continue;
    uint64_t t = arch::translate(va + o + 4);
    still += t != 0;
    right &= t == pa + o + 4;
  }
  KEXPECT_EQ(still, kLarge / kPageSize - 1);
  KEXPECT(right);
  KEXPECT_EQ(*reinterpret_cast<volatile const uint32_t*>(hole + kPageSize),
             *reinterpret_cast<volatile const uint32_t*>(static_cast<uintptr_t>(pa) + (hole + kPageSize - va)));

  arch::unmap(va, kLarge);
  KEXPECT(unmapped(va, kLarge));
}
