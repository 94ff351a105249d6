// Patching static branches. Kernel text is mapped read-only and executable
// (W^X), so each instruction is written through a temporary writable
// alias of its frame in the heap window: map the frame there, store the
// 4-byte instruction (one aligned store: cores executing the site see the
// old or the new instruction, never a mix), make it visible to
// instruction fetch (arch::text_written), unmap. Then every online core
// runs arch::sync_instructions through a cross-call, so none goes on
// executing an instruction it fetched before.
#include <kernel/arch.h>
#include <kernel/console.h>
#include <kernel/smp.h>
#include <kernel/static_branch.h>
#include <mm/page.h>
#include <mm/segkmem.h>
#include <mm/vmem.h>

namespace {

struct Site {
  uintptr_t site, target;
};
extern "C" const Site __static_branches_start[], __static_branches_end[];

uintptr_t g_alias;  // one page of heap-window addresses, never mapped but while patching

bool patch(const Site& s, bool on) {
  uint64_t pa = arch::translate(s.site);
  if (!pa || (s.site & 3)) return false;
  uint64_t frame = pa & ~uint64_t{mm::kPageBytes - 1};
  if (!arch::map(g_alias, frame, mm::kPageBytes, arch::kMapRead | arch::kMapWrite)) return false;
  uintptr_t alias = g_alias + static_cast<uintptr_t>(pa - frame);
  *reinterpret_cast<volatile uint32_t*>(alias) = arch::static_branch_insn(s.site, s.target, on);
  arch::text_written(alias, s.site);
  arch::unmap(g_alias, mm::kPageBytes);
  return true;
}

bool set_all(bool on) {
  bool ok = true;
  for (const Site* s = __static_branches_start; s < __static_branches_end; s++) ok = patch(*s, on) && ok;
  smp::call_on_all([](void*) { arch::sync_instructions(); }, nullptr);
  return ok;
}

}  // namespace

namespace static_branch {

bool init() {
  if (g_alias) return true;
  void* va = vmem_alloc(mm::segkmem_heap_arena(), mm::kPageBytes, VM_NOSLEEP);
  g_alias = reinterpret_cast<uintptr_t>(va);
  return va != nullptr;
}

bool set_kmemtrace(bool on) {
  if (!g_alias) return false;
  if (set_all(on)) return true;
  kprintf("static_branch: could not patch every kmemtrace site; all set back to off\n");
  set_all(false);
  return false;
}

}  // namespace static_branch
