// SPDX-License-Identifier: Apache-2.0
// mm's one lock idiom: a plat::Lock (a spinlock) held through a Guard, with
// an interrupt policy.
//
//   { Guard<> g(lock); ... }             masks interrupts on this CPU, locks
//   { Guard<NoIrqSave> g(lock); ... }    interrupts are already masked, or
//                                        the lock is never taken in
//                                        interrupt context
//   g.unlock(); ...; g.lock();           drop and retake inside the scope
//   assert_held(lock);                   a function that requires the lock
//
// Every mm lock may be taken from an interrupt handler (an allocation there
// is allowed), so holders mask interrupts: IrqSave is the default.
//
// Ordering: taking a lock acquires, dropping it releases (plat::Lock), so
// what one holder wrote is visible to the next. "Ordered by lock X" in mm/
// means this and nothing more: data read without X needs its own ordering.
#pragma once
#include <mm/platform.h>
#include "assert.h"

namespace mm {

struct IrqSave {
  plat::IrqState state{};
  void enter() { state = plat::irq_save(); }
  void leave() { plat::irq_restore(state); }
};
struct NoIrqSave {
  void enter() {}
  void leave() {}
};

template <typename Policy = IrqSave>
class [[nodiscard]] Guard {
 public:
  explicit Guard(plat::Lock& l) : lock_(l) { lock(); }
  // Counts in *contended each time the lock was found taken (kmem's depot
  // grows its magazines from this count).
  Guard(plat::Lock& l, uint64_t* contended) : lock_(l) {
    policy_.enter();
    if (!lock_.try_lock()) {
      lock_.lock();
      (*contended)++;  // under the lock
    }
    held_ = true;
  }
  ~Guard() {
    if (held_) unlock();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  void lock() {
    MM_DEBUG_ASSERT(!held_);
    policy_.enter();
    lock_.lock();
    held_ = true;
  }
  void unlock() {
    MM_DEBUG_ASSERT(held_);
    held_ = false;
    lock_.unlock();
    policy_.leave();
  }

 private:
  plat::Lock& lock_;
  Policy policy_;
  bool held_ = false;
};

// For functions whose contract is "called with l held" (by this CPU).
inline void assert_held([[maybe_unused]] const plat::Lock& l) { MM_DEBUG_ASSERT(l.held()); }

}  // namespace mm
