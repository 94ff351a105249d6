// SPDX-License-Identifier: Apache-2.0
// Spinlocks: a test-and-test-and-set lock plus an RAII guard with an
// interrupt policy.
//
// Why not a ticket lock: under virtualisation (QEMU with more vCPUs than
// host cores, the CI case) a fair lock hands the lock to a waiter whose vCPU
// may not be running, and every other waiter stalls behind it. TTAS lets
// whichever core is running take it; waiters spin on a plain load.
//
//   SpinLock lock;
//   { Guard<SpinLock, IrqSave> g(lock); ... }   // masks IRQs on this core
//   { Guard<SpinLock, NoIrqSave> g(lock); ... } // caller has IRQs masked or
//                                                 // the lock is never taken
//                                                 // in interrupt context
// Word-sized atomics only (RISC-V has no sub-word atomics without libatomic).
#pragma once
#include <atomic>
#include <cstdint>
#include <kernel/panic.h>
#include <kernel/percpu.h>

class SpinLock {
 public:
  constexpr SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() {
    while (locked_.exchange(1, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) arch::cpu_relax();
    }
    owner_.store(cpu_id(), std::memory_order_relaxed);
  }
  [[nodiscard]] bool try_lock() {
    if (locked_.load(std::memory_order_relaxed) || locked_.exchange(1, std::memory_order_acquire)) return false;
    owner_.store(cpu_id(), std::memory_order_relaxed);
    return true;
  }
  void unlock() {
    owner_.store(kNoOwner, std::memory_order_relaxed);
    locked_.store(0, std::memory_order_release);
  }
  bool is_locked() const { return locked_.load(std::memory_order_relaxed) != 0; }
  // Held by the calling core (cheap, for ASSERTs).
  bool held() const { return is_locked() && owner_.load(std::memory_order_relaxed) == cpu_id(); }
  void assert_held() const { ASSERT(held()); }

 private:
  static constexpr uint32_t kNoOwner = ~0u;
  std::atomic<uint32_t> locked_{0};
  std::atomic<uint32_t> owner_{kNoOwner};
};

struct IrqSave {
  arch::IrqState state;
  void enter() { state = arch::irq_save(); }
  void leave() { arch::irq_restore(state); }
};
struct NoIrqSave {
  void enter() {}
  void leave() {}
};

template <typename Lock, typename Policy>
class [[nodiscard]] Guard {
 public:
  explicit Guard(Lock& l) : lock_(l) {
    policy_.enter();
    lock_.lock();
  }
  ~Guard() {
    lock_.unlock();
    policy_.leave();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  Lock& lock_;
  Policy policy_;
};
