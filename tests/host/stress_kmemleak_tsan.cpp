// SPDX-License-Identifier: Apache-2.0
// kmemleak under ThreadSanitizer, with the other threads really stopped for
// every scan (mm/host/platform.cpp). Mutator threads keep a graph reachable
// from a registered root and rewire it as fast as they can: nodes are
// replaced, children move from node to node, slots hold interior pointers,
// and a node is often held only in a register or on its thread's stack at
// the instant the world stops. Meanwhile the main thread scans again and
// again, switching kmemleak off and on every few scans, another thread asks
// kmem_whatis about buffers (its magazine search stops the world too), one
// annotates objects it keeps (kmemleak_not_leak) and frees them (their
// slabs' frees go out of line, where the annotation leaves with the
// buffer, which the mutators then get as nodes), and one reads kmemleak's
// figures and makes marks. No scan may report anything. Then every
// mutator lets go of its whole graph and exits, and two scans must report
// exactly the nodes it held, children included.
//
//   stress_kmemleak_tsan [SECONDS]   (default 5)
//
// Exits 0 when TSan saw no race, no scan reported a live node, the final
// reports were exactly the dropped set and kmem reported no error.
#include <mm/kmem.h>
#include <mm/kmemleak.h>
#include <mm/whatis.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace {

constexpr unsigned kMutators = 3;
constexpr unsigned kSlots = 64;

struct Node {
  Node* child;
  size_t size;  // what it was allocated with
  uint64_t body[2];
};

// The roots: each mutator's slots hold a node's address plus an offset
// inside it (an interior pointer, as a list head embedded in a struct).
// Written plainly by their thread; the scanner reads them with that
// thread stopped (the stop orders them).
uintptr_t g_slots[kMutators][kSlots];
uint16_t g_offset[kMutators][kSlots];  // not an address: never a reference

std::atomic<bool> g_stop{false}, g_drop{false};
std::atomic<uint64_t> g_moves{0}, g_whatis{0}, g_errors{0};
std::atomic<unsigned> g_dropped_threads{0};
// ~address of every node a mutator dropped at the end, in its own row: no
// lock (under TSan a thread blocked on a mutex takes no signal until it
// has it, so one stopped while holding it would hang the stop).
uintptr_t g_dropped[kMutators][2 * kSlots];
unsigned g_ndropped[kMutators];

uintptr_t enc(const void* p) { return ~reinterpret_cast<uintptr_t>(p); }

void on_error(const mm::MemError& e) {
  std::fprintf(stderr, "kmem error: %s\n", e.kind);
  g_errors.fetch_add(1);
}

size_t pick_size(std::mt19937& rng) {
  unsigned r = rng() % 100;
  if (r < 60) return sizeof(Node) + rng() % 96;
  if (r < 97) return sizeof(Node) + rng() % 2000;
  return 20000 + rng() % 30000;  // large: whole pages
}

Node* make(std::mt19937& rng) {
  size_t size = pick_size(rng);
  auto* n = static_cast<Node*>(kmem_alloc(size, KM_SLEEP));
  n->child = nullptr;
  n->size = size;
  n->body[0] = n->body[1] = rng();
  return n;
}
void destroy(Node* n) { kmem_free(n, n->size); }

Node* node_at(unsigned t, unsigned i) { return reinterpret_cast<Node*>(g_slots[t][i] - g_offset[t][i]); }
void set_slot(unsigned t, unsigned i, Node* n, std::mt19937& rng) {
  uint16_t off = static_cast<uint16_t>(rng() % n->size);
  g_offset[t][i] = off;
  g_slots[t][i] = reinterpret_cast<uintptr_t>(n) + off;
}

// A node held only by this frame (and its callees' registers) while the
// thread allocates and frees, then put back.
__attribute__((noinline)) void hold_on_stack(unsigned t, unsigned i, std::mt19937& rng, unsigned depth) {
  Node* volatile held = node_at(t, i);
  g_slots[t][i] = 0;
  if (depth > 1) {
    hold_on_stack(t, (i + 1) % kSlots, rng, depth - 1);
  } else {
    for (int k = 0; k < 4; k++) destroy(make(rng));
  }
  set_slot(t, i, held, rng);
}

void mutator(unsigned t) {
  std::mt19937 rng(1000 + t);
  for (unsigned i = 0; i < kSlots; i++) set_slot(t, i, make(rng), rng);
  uint64_t moves = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned i = rng() % kSlots, j = rng() % kSlots;
    if (!g_slots[t][i] || !g_slots[t][j]) continue;  // (never: hold_on_stack puts them back)
    switch (rng() % 5) {
      case 0: {  // swap through registers
        uintptr_t a = g_slots[t][i];
        uint16_t ao = g_offset[t][i];
        g_slots[t][i] = g_slots[t][j];
        g_offset[t][i] = g_offset[t][j];
        g_slots[t][j] = a;
        g_offset[t][j] = ao;
        break;
      }
      case 1: {  // replace a node, keeping its child
        Node* old = node_at(t, i);
        Node* n = make(rng);
        n->child = old->child;
        old->child = nullptr;
        set_slot(t, i, n, rng);
        destroy(old);
        break;
      }
      case 2: {  // a child moves to another node, or a new one is made
        Node* a = node_at(t, i);
        Node* b = node_at(t, j);
        if (a != b && a->child && !b->child) {
          b->child = a->child;
          a->child = nullptr;
        } else if (!a->child) {
          a->child = make(rng);
        } else {
          Node* c = a->child;
          a->child = nullptr;
          destroy(c);
        }
        break;
      }
      case 3: hold_on_stack(t, i, rng, 1 + rng() % 4); break;
      default: {  // allocate and free something unrelated
        Node* n = make(rng);
        destroy(n);
        break;
      }
    }
    moves++;
  }
  g_moves.fetch_add(moves);
  // Let go of everything: the nodes and their children leak.
  for (unsigned i = 0; i < kSlots; i++) {
    Node* n = node_at(t, i);
    g_dropped[t][g_ndropped[t]++] = enc(n);
    if (n->child) g_dropped[t][g_ndropped[t]++] = enc(n->child);
  }
  for (unsigned i = 0; i < kSlots; i++) g_slots[t][i] = 0;
  g_dropped_threads.fetch_add(1);
}

// kmem_whatis on buffers this thread holds (kept in a registered root) and
// on ones it freed: every answer must be right for the held ones.
uintptr_t g_whatis_held[32];
void whatis_thread() {
  std::mt19937 rng(4242);
  uint64_t n = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned i = rng() % 32;
    size_t size = 64 + (i % 4) * 64;
    if (g_whatis_held[i]) {
      mm::WhatIs w;
      if (!mm::kmem_whatis(reinterpret_cast<void*>(g_whatis_held[i] + 8), w) || w.kind != mm::WhatKind::kBuffer ||
          w.state != mm::BufferState::kAllocated || w.start != g_whatis_held[i]) {
        std::fprintf(stderr, "whatis: wrong answer for a held buffer\n");
        g_errors.fetch_add(1);
      }
      void* p = reinterpret_cast<void*>(g_whatis_held[i]);
      g_whatis_held[i] = 0;
      kmem_free(p, size);
    } else {
      g_whatis_held[i] = reinterpret_cast<uintptr_t>(kmem_alloc(size, KM_SLEEP));
    }
    n++;
  }
  for (unsigned i = 0; i < 32; i++)
    if (g_whatis_held[i]) {
      kmem_free(reinterpret_cast<void*>(g_whatis_held[i]), 64 + (i % 4) * 64);
      g_whatis_held[i] = 0;  // a mutator may get the buffer as a node next
    }
  g_whatis.fetch_add(n);
}

// Objects annotated kmemleak_not_leak while kept in a registered root, then
// freed: their slabs are diverted while they live, and the buffers go back
// with no annotation (a mutator's node that gets one must be reported
// when dropped at the end).
uintptr_t g_annotated[32];
std::atomic<uint64_t> g_annotations{0};
void annotator_thread() {
  std::mt19937 rng(777);
  uint64_t n = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned i = rng() % 32;
    size_t size = sizeof(Node) + (i % 4) * 40;
    if (g_annotated[i]) {
      void* p = reinterpret_cast<void*>(g_annotated[i]);
      g_annotated[i] = 0;
      kmem_free(p, size);
    } else {
      void* p = kmem_alloc(size, KM_SLEEP);
      g_annotated[i] = reinterpret_cast<uintptr_t>(p);
      kmemleak_not_leak(p);
      n++;
    }
  }
  for (unsigned i = 0; i < 32; i++)
    if (g_annotated[i]) {
      kmem_free(reinterpret_cast<void*>(g_annotated[i]), sizeof(Node) + (i % 4) * 40);
      g_annotated[i] = 0;
    }
  g_annotations.fetch_add(n);
}

// kmemleak's figures and marks, which take no stopped world.
std::atomic<uint64_t> g_figures{0};
void figures_thread() {
  uint64_t n = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    mm::LeakScanStats st;
    mm::kmemleak_last_scan(st);
    mm::LeakMemory m;
    mm::kmemleak_memory(m);
    if (n % 64 == 0 && !mm::kmemleak_mark()) g_errors.fetch_add(1);
    n++;
  }
  g_figures.fetch_add(n);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 5;
  if (argc > 2 || !(seconds > 0)) {
    std::fprintf(stderr, "usage: stress_kmemleak_tsan [SECONDS]\n");
    return 2;
  }
  mm::set_error_hook(on_error);
  kmemleak_enable(true);
  kmemleak_set_min_age_ms(0);
  if (getenv("STRESS_NO_STACKS")) mm::kmemleak_set_stack_scan(false);  // (to see the test fail)
  kmemleak_add_root(g_slots, sizeof g_slots);
  kmemleak_add_root(g_whatis_held, sizeof g_whatis_held);
  kmemleak_add_root(g_annotated, sizeof g_annotated);

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kMutators; t++) threads.emplace_back(mutator, t);
  threads.emplace_back(whatis_thread);
  threads.emplace_back(annotator_thread);
  threads.emplace_back(figures_thread);

  uint64_t scans = 0, false_reports = 0, max_pause_ns = 0, switches = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the mutators run between scans
    if (scans % 8 == 7) {  // off for a while, then on again over what changed meanwhile
      kmemleak_enable(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      kmemleak_enable(true);
      switches++;
    }
    size_t n = kmemleak_scan();
    scans++;
    mm::LeakScanStats st;
    mm::kmemleak_last_scan(st);
    max_pause_ns = std::max(max_pause_ns, st.pause_ns);
    if (n) {
      std::fprintf(stderr, "scan %llu: %zu reports of live nodes\n", static_cast<unsigned long long>(scans), n);
      false_reports += n;
      mm::kmemleak_clear();
    }
  }
  g_stop.store(true);
  for (auto& t : threads) t.join();
  std::set<uintptr_t> g_expected;
  for (unsigned t = 0; t < kMutators; t++) g_expected.insert(g_dropped[t], g_dropped[t] + g_ndropped[t]);

  // Everything the mutators held is unreferenced now: new at the first
  // scan (no checksum yet), reported at the second.
  kmemleak_scan();
  size_t reported = kmemleak_scan();
  std::vector<const void*> out(g_expected.size() + 64);
  size_t total = kmemleak_leaks(out.data(), out.size());
  std::set<uintptr_t> got;
  for (size_t i = 0; i < total && i < out.size(); i++) got.insert(enc(out[i]));
  bool exact = got == g_expected;
  for (uintptr_t e : g_expected)
    if (!got.count(e)) std::fprintf(stderr, "not reported: %#lx\n", static_cast<unsigned long>(~e));

  std::printf(
      "%llu scans over %.1f s (%llu switches off and on), %llu moves, %llu whatis, %llu annotations, "
      "%llu figures read, longest pause %.2f ms; "
      "%llu reports of live nodes; at the end %zu of %zu dropped nodes reported (%zu in all)%s\n",
      static_cast<unsigned long long>(scans), seconds, static_cast<unsigned long long>(switches),
      static_cast<unsigned long long>(g_moves.load()), static_cast<unsigned long long>(g_whatis.load()),
      static_cast<unsigned long long>(g_annotations.load()), static_cast<unsigned long long>(g_figures.load()),
      max_pause_ns / 1e6, static_cast<unsigned long long>(false_reports), reported, g_expected.size(), total,
      exact ? "" : ": NOT the dropped set");
  // Tidy up: the reports become roots; free them.
  mm::kmemleak_clear();
  for (uintptr_t e : g_expected) {
    auto* n = reinterpret_cast<Node*>(~e);
    kmem_free(n, n->size);
  }
  bool ok = scans > 1 && switches > 0 && g_annotations.load() > 0 && false_reports == 0 && exact &&
            reported == g_expected.size() && g_errors.load() == 0;
  return ok ? 0 : 1;
}
