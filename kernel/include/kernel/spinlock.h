// Spinlocks: a ticket lock (fair under contention) plus an RAII guard with an
// interrupt policy.
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
    uint32_t me = next_.fetch_add(1, std::memory_order_relaxed);
    while (serving_.load(std::memory_order_acquire) != me) arch::cpu_relax();
    owner_.store(cpu_id(), std::memory_order_relaxed);
  }
  [[nodiscard]] bool try_lock() {
    uint32_t s = serving_.load(std::memory_order_relaxed);
    uint32_t expect = s;
    if (!next_.compare_exchange_strong(expect, s + 1, std::memory_order_acquire, std::memory_order_relaxed))
      return false;
    owner_.store(cpu_id(), std::memory_order_relaxed);
    return true;
  }
  void unlock() {
    owner_.store(kNoOwner, std::memory_order_relaxed);
    serving_.store(serving_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  bool is_locked() const {
    return next_.load(std::memory_order_relaxed) != serving_.load(std::memory_order_relaxed);
  }
  // Held by the calling core (cheap, for ASSERTs).
  bool held() const { return is_locked() && owner_.load(std::memory_order_relaxed) == cpu_id(); }
  void assert_held() const { ASSERT(held()); }

 private:
  static constexpr uint32_t kNoOwner = ~0u;
  std::atomic<uint32_t> next_{0};
  std::atomic<uint32_t> serving_{0};
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
