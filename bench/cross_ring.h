// SPDX-License-Identifier: Apache-2.0
// What the host's patterns need beyond patterns.h: the random pattern's
// free order and the cross pattern's ring between two threads.
#pragma once
#include <atomic>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "patterns.h"

namespace bench {

// A permutation of 0..n-1 from a fixed seed: Fisher-Yates over mt19937,
// whose output the standard fixes, so every run frees in the same order.
inline std::vector<uint32_t> random_order(unsigned n) {
  std::vector<uint32_t> order(n);
  for (unsigned i = 0; i < n; i++) order[i] = i;
  std::mt19937 rng(20240601);
  for (unsigned i = n; i > 1; i--) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

// A single-producer, single-consumer ring of object batches. The producer
// fills a free slot and publishes it; the consumer takes full slots in
// order and hands them back. A batch of 0 objects tells the consumer to
// stop. Waiting spins briefly, then sleeps on the counter (futex).
// With depth 1 the two threads run in lockstep: never inside an allocator
// at the same time, which keeps instruction counts deterministic.
class BatchRing {
 public:
  BatchRing(unsigned depth, unsigned batch)
      : depth_(depth), batch_(batch), objs_(size_t{depth} * batch), counts_(depth) {}

  unsigned batch() const { return batch_; }

  // Producer side.
  void** free_slot() {
    uint32_t h = head_.load(std::memory_order_relaxed);
    for (;;) {
      uint32_t t = tail_.load(std::memory_order_acquire);
      if (h - t < depth_) return &objs_[size_t{h % depth_} * batch_];
      wait_change(tail_, t);
    }
  }
  void publish(unsigned count) {
    uint32_t h = head_.load(std::memory_order_relaxed);
    counts_[h % depth_] = count;
    head_.store(h + 1, std::memory_order_release);
    head_.notify_one();
  }
  void close() {
    free_slot();
    publish(0);
  }
  // Waits until the consumer has handed back every published batch.
  void drain() {
    uint32_t h = head_.load(std::memory_order_relaxed);
    for (uint32_t t; (t = tail_.load(std::memory_order_acquire)) != h;) wait_change(tail_, t);
  }

  // Consumer side: the next full batch (count 0: stop).
  void** full_slot(unsigned& count) {
    uint32_t t = tail_.load(std::memory_order_relaxed);
    for (;;) {
      uint32_t h = head_.load(std::memory_order_acquire);
      if (h != t) {
        count = counts_[t % depth_];
        return &objs_[size_t{t % depth_} * batch_];
      }
      wait_change(head_, h);
    }
  }
  void release_slot() {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    tail_.notify_one();
  }

 private:
  static void wait_change(const std::atomic<uint32_t>& a, uint32_t seen) {
    for (int i = 0; i < 2000; i++) {
      if (a.load(std::memory_order_acquire) != seen) return;
      __builtin_ia32_pause();
    }
    a.wait(seen, std::memory_order_acquire);
  }

  const unsigned depth_, batch_;
  std::vector<void*> objs_;
  std::vector<unsigned> counts_;
  alignas(64) std::atomic<uint32_t> head_{0};  // batches published
  alignas(64) std::atomic<uint32_t> tail_{0};  // batches handed back
};

}  // namespace bench
