// SPDX-License-Identifier: Apache-2.0
// The host platform's stopped world (mm/host/platform.cpp's design statement):
// plat::stop_others stops every thread that holds a CPU slot with a signal,
// and plat::for_each_stack reports each one's live stack with its
// interrupted registers in it, and the caller's with its own spilled.
//
// Built twice: under ASan/UBSan (host_platform_tests) and under TSan
// (host_platform_tests_tsan, without the death tests and the alternate
// signal stack test: TSan runs signal handlers late, on the thread's own
// stack, see below).
//
// fn runs while the other threads are stopped anywhere, so the fns here
// take no lock, allocate nothing and assert nothing: they record into
// preallocated structures, and the test checks those after stop_others.
#include <mm/host.h>
#include <mm/kmem.h>
#include <mm/platform.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace plat = mm::plat;

#if defined(__SANITIZE_THREAD__)
#define MAGPIE_TSAN 1
#else
#define MAGPIE_TSAN 0
#endif

// The locals of these functions must be on the thread's real stack: under
// ASan's detect_stack_use_after_return (tests/host/sanitizer_options.cpp)
// a local whose address is taken lives in a "fake frame" on ASan's heap.
#define ON_REAL_STACK __attribute__((noinline, no_sanitize("address")))
// Reads other threads' stacks: no shadow checks (their frames' redzones),
// no TSan instrumentation.
#define RAW_READER __attribute__((noinline, no_sanitize("address", "thread")))

namespace {

using namespace std::chrono_literals;

void claim_cpu() {
  void* p = kmem_alloc(16, KM_SLEEP);
  kmem_free(p, 16);
}

// Values that exist only in a register of the thread that computes them
// (never stored): the checker computes the same value in its own registers.
constexpr uintptr_t kWorkerMagic = 0x7e57'5eed'0000'0000ull;
constexpr uintptr_t kCallerMagic = 0x0ca1'1e45'0000'0000ull;
inline uintptr_t mix(uintptr_t seed, uintptr_t magic) { return (seed * 0x1000'0001ull + 0x5a5a) ^ magic; }

RAW_READER bool contains_word(uintptr_t lo, uintptr_t hi, uintptr_t seed, uintptr_t magic) {
  uintptr_t want = mix(seed, magic);  // in a register: this frame lies outside the ranges searched
  for (uintptr_t a = (lo + 7) & ~uintptr_t{7}; a + 8 <= hi; a += 8)
    if (*reinterpret_cast<const uintptr_t*>(a) == want) return true;
  return false;
}

RAW_READER uintptr_t touch(uintptr_t lo, uintptr_t hi) {
  // The first and last word of a range: it is mapped.
  return *reinterpret_cast<const volatile uintptr_t*>(lo & ~uintptr_t{7}) ^
         *reinterpret_cast<const volatile uintptr_t*>((hi - 8) & ~uintptr_t{7});
}

// ---- Threads that hold a CPU slot and spin --------------------------------
struct Worker {
  unsigned index = 0;
  std::atomic<uint64_t> counter{0};
  std::atomic<bool> quit{false};
  std::atomic<uintptr_t> local{0};  // a local of its spin loop
  std::atomic<unsigned> cpu{~0u};
  std::thread thread;
};

ON_REAL_STACK void spin(Worker* w) {
  claim_cpu();
  volatile uintptr_t local = 0x10ca1;
  w->local.store(reinterpret_cast<uintptr_t>(&local), std::memory_order_relaxed);
  w->cpu.store(plat::cpu_slot(), std::memory_order_release);
  uintptr_t v = w->index;
  asm volatile("" : "+r"(v));
  v = mix(v, kWorkerMagic);  // only ever in a register
  while (!w->quit.load(std::memory_order_relaxed)) {
    w->counter.fetch_add(1, std::memory_order_relaxed);
    asm volatile("" : "+r"(v));
  }
  asm volatile("" ::"r"(v));
  (void)local;
}

struct Workers {
  std::vector<Worker> w;
  explicit Workers(unsigned n) : w(n) {
    // kmem up before the threads' first kmem_alloc: that first call brings
    // kmem up, and two threads making it at once race on kmem's size tables
    // (kmem_alloc_init's writes against size_cache's plain reads).
    claim_cpu();
    for (unsigned i = 0; i < n; i++) {
      w[i].index = 100 + i;
      w[i].thread = std::thread(spin, &w[i]);
    }
    for (auto& x : w)  // each has its slot and spins
      while (x.cpu.load(std::memory_order_acquire) == ~0u || x.counter.load(std::memory_order_relaxed) == 0)
        std::this_thread::sleep_for(1ms);
  }
  ~Workers() {
    for (auto& x : w) x.quit.store(true);
    for (auto& x : w) x.thread.join();
  }
};

// ---- What one for_each_stack reported ---------------------------------------
struct Range {
  uintptr_t lo, hi;
  unsigned cpu;
};
struct Report {
  Range ranges[2 * plat::kMaxCpus + 4];
  unsigned n = 0;
  bool overflow = false;
  bool misordered = false;  // a range with lo >= hi
};

void record(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg) {
  auto* r = static_cast<Report*>(arg);
  if (lo >= hi) r->misordered = true;
  if (r->n == sizeof r->ranges / sizeof r->ranges[0]) {
    r->overflow = true;
    return;
  }
  r->ranges[r->n++] = {lo, hi, cpu};
}

unsigned calls_for(const Report& r, unsigned cpu) {
  unsigned n = 0;
  for (unsigned i = 0; i < r.n; i++) n += r.ranges[i].cpu == cpu;
  return n;
}

bool in_range_of(const Report& r, unsigned cpu, uintptr_t addr) {
  for (unsigned i = 0; i < r.n; i++)
    if (r.ranges[i].cpu == cpu && addr >= r.ranges[i].lo && addr < r.ranges[i].hi) return true;
  return false;
}

// ---- Stopping spinning workers ----------------------------------------------
constexpr unsigned kMaxWorkers = 4;
struct StopCheck {
  Workers* workers;
  uint64_t before[kMaxWorkers], after[kMaxWorkers];
  uintptr_t caller_seed;
  uintptr_t caller_local = 0;
  bool caller_register_found = false;
  bool worker_register_found[kMaxWorkers] = {};
  Report report;
};

void record_and_scan(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg) {
  auto* c = static_cast<StopCheck*>(arg);
  record(lo, hi, cpu, &c->report);
  // Scanned here, in a frame below every reported range of this thread.
  if (cpu == plat::cpu_slot() && contains_word(lo, hi, c->caller_seed, kCallerMagic)) c->caller_register_found = true;
  for (unsigned i = 0; i < c->workers->w.size(); i++) {
    const Worker& w = c->workers->w[i];
    if (w.cpu.load(std::memory_order_relaxed) == cpu && contains_word(lo, hi, w.index, kWorkerMagic))
      c->worker_register_found[i] = true;
  }
}

ON_REAL_STACK void check_stopped(void* arg) {
  auto* c = static_cast<StopCheck*>(arg);
  std::vector<Worker>& w = c->workers->w;
  for (unsigned i = 0; i < w.size(); i++) c->before[i] = w[i].counter.load(std::memory_order_relaxed);
  timespec ts{0, 30'000'000};
  nanosleep(&ts, nullptr);  // a syscall, no lock: allowed in fn
  for (unsigned i = 0; i < w.size(); i++) c->after[i] = w[i].counter.load(std::memory_order_relaxed);

  volatile uintptr_t local = 0xca11e4;
  c->caller_local = reinterpret_cast<uintptr_t>(&local);
  uintptr_t v = c->caller_seed;
  asm volatile("" : "+r"(v));
  v = mix(v, kCallerMagic);  // only in a register (or spilled by the call)
  asm volatile("" : "+r"(v));
  plat::for_each_stack(record_and_scan, c);
  asm volatile("" ::"r"(v));
  (void)local;
}

// The end of the [stack] mapping: the main thread's stack top.
uintptr_t main_stack_top() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("[stack]") != std::string::npos) return std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
  return 0;
}

bool is_main_thread() { return gettid() == getpid(); }

TEST(HostStop, StopsEverySlotThreadAndReportsItsStackAndRegisters) {
  claim_cpu();
  Workers workers(kMaxWorkers);
  for (int round = 0; round < 5; round++) {
    StopCheck c{};
    c.workers = &workers;
    c.caller_seed = 77 + static_cast<uintptr_t>(round);
    plat::stop_others(check_stopped, &c);
    ASSERT_FALSE(c.report.overflow);
    EXPECT_FALSE(c.report.misordered);
    unsigned self = plat::cpu_slot();
    EXPECT_EQ(calls_for(c.report, self), 1u) << "the caller, once";
    EXPECT_TRUE(in_range_of(c.report, self, c.caller_local)) << "a local of the caller";
    EXPECT_TRUE(c.caller_register_found) << "a value only in a register of the caller";
    for (unsigned i = 0; i < kMaxWorkers; i++) {
      const Worker& w = workers.w[i];
      unsigned cpu = w.cpu.load();
      EXPECT_EQ(c.before[i], c.after[i]) << "worker " << i << " ran while stopped";
      EXPECT_EQ(calls_for(c.report, cpu), 1u) << "worker " << i << " on cpu " << cpu;
      EXPECT_TRUE(in_range_of(c.report, cpu, w.local.load())) << "a local of worker " << i;
      EXPECT_TRUE(c.worker_register_found[i]) << "worker " << i << "'s register value, in its signal frame";
    }
    EXPECT_EQ(c.report.n, 1u + kMaxWorkers) << "nobody else holds a slot";
    // Released: every counter moves again.
    for (unsigned i = 0; i < kMaxWorkers; i++) {
      auto deadline = std::chrono::steady_clock::now() + 10s;
      while (workers.w[i].counter.load() == c.after[i] && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      EXPECT_NE(workers.w[i].counter.load(), c.after[i]) << "worker " << i << " was not released";
    }
    // The main thread's stack top is the end of its mapping.
    if (is_main_thread()) {
      uintptr_t top = main_stack_top();
      for (unsigned i = 0; i < c.report.n; i++)
        if (c.report.ranges[i].cpu == self) {
          EXPECT_EQ(c.report.ranges[i].hi, top);
        }
    }
  }
}

TEST(HostStop, WithoutOtherThreads) {
  claim_cpu();
  Report r;
  plat::stop_others([](void* a) { plat::for_each_stack(record, a); }, &r);
  EXPECT_EQ(r.n, 1u);
  EXPECT_EQ(r.ranges[0].cpu, plat::cpu_slot());
}

// A thread that holds no slot is not stopped and not reported.
TEST(HostStop, ThreadsWithoutASlotRunOn) {
  claim_cpu();
  std::atomic<uint64_t> counter{0};
  std::atomic<bool> quit{false};
  std::thread t([&] {
    while (!quit.load(std::memory_order_relaxed)) counter.fetch_add(1, std::memory_order_relaxed);
  });
  while (counter.load() == 0) std::this_thread::sleep_for(1ms);
  struct Ctx {
    std::atomic<uint64_t>* counter;
    uint64_t before, after;
    Report r;
  } c{&counter, 0, 0, {}};
  plat::stop_others(
      [](void* a) {
        auto* c = static_cast<Ctx*>(a);
        c->before = c->counter->load();
        for (int i = 0; i < 200 && c->counter->load() == c->before; i++) {
          timespec ts{0, 1'000'000};
          nanosleep(&ts, nullptr);
        }
        c->after = c->counter->load();
        plat::for_each_stack(record, &c->r);
      },
      &c);
  quit = true;
  t.join();
  EXPECT_NE(c.before, c.after);
  EXPECT_EQ(c.r.n, 1u);
}

// ---- Threads exiting while stops follow each other --------------------------
struct Sanity {
  Report r;
  uintptr_t sink = 0;
  unsigned duplicates = 0;
};

void check_ranges(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg) {
  auto* s = static_cast<Sanity*>(arg);
  if (calls_for(s->r, cpu)) s->duplicates++;
  record(lo, hi, cpu, &s->r);
  if (lo < hi) s->sink += touch(lo, hi);
}

TEST(HostStop, ThreadsExitWhileStopsHappenBackToBack) {
  claim_cpu();
  std::atomic<bool> done{false};
  std::atomic<unsigned> exited{0};
  std::thread spawner([&] {
    for (unsigned round = 0; !done.load(); round++) {
      std::thread ts[4];
      for (unsigned i = 0; i < 4; i++)
        ts[i] = std::thread([&, i, round] {
          claim_cpu();
          volatile unsigned x = 0;
          for (unsigned k = 0; k < (round * 7 + i * 13) % 50 * 1000; k++) x = x + 1;
          exited.fetch_add(1);
        });
      for (auto& t : ts) t.join();
    }
  });
  while (exited.load() < 4) std::this_thread::sleep_for(1ms);
  unsigned bad = 0, caught = 0, exited_before = exited.load();
  // At least 1000 stops, and on until 100 threads exited meanwhile.
  for (int i = 0; i < 1000 || (exited.load() - exited_before < 100 && i < 1000000); i++) {
    Sanity s;
    plat::stop_others([](void* a) { plat::for_each_stack(check_ranges, a); }, &s);
    if (s.r.overflow || s.r.misordered || s.duplicates || calls_for(s.r, plat::cpu_slot()) != 1) bad++;
    caught += s.r.n > 1;
  }
  unsigned exited_during = exited.load() - exited_before;
  done = true;
  spawner.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(exited_during, 100u) << "threads exited during the stops";
  EXPECT_GT(caught, 0u) << "no stop caught a thread";
  std::printf("%u stops caught other threads, %u threads exited meanwhile\n", caught, exited_during);
}

// ---- Two stoppers at once ----------------------------------------------------
struct Exclusion {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  int total = 0;  // only written inside fn: one fn at a time
};

TEST(HostStop, TwoThreadsStopAtOnce) {
  Workers workers(2);
  Exclusion x;
  auto stopper = [&] {
    claim_cpu();
    for (int i = 0; i < 200; i++)
      plat::stop_others(
          [](void* a) {
            auto* x = static_cast<Exclusion*>(a);
            if (x->inside.fetch_add(1)) x->overlaps.fetch_add(1);
            x->total++;
            x->inside.fetch_sub(1);
          },
          &x);
  };
  std::thread a(stopper), b(stopper);
  a.join();
  b.join();
  EXPECT_EQ(x.total, 400);
  EXPECT_EQ(x.overlaps.load(), 0);
}

// ---- Threads blocked in system calls ----------------------------------------
// Until the thread sleeps in the kernel (state S in /proc).
void wait_until_sleeping(const std::atomic<pid_t>& tid) {
  for (int i = 0; i < 5000; i++) {
    if (tid.load()) {
      std::ifstream st("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
      std::string s((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
      auto p = s.rfind(')');
      if (p != std::string::npos && p + 2 < s.size() && s[p + 2] == 'S') return;
    }
    std::this_thread::sleep_for(1ms);
  }
}

unsigned stops_that_report(unsigned cpu, int stops) {
  unsigned reported = 0;
  for (int i = 0; i < stops; i++) {
    Report r;
    plat::stop_others([](void* a) { plat::for_each_stack(record, a); }, &r);
    reported += calls_for(r, cpu) == 1;
  }
  return reported;
}

// A condition variable's wait (a futex) goes on waiting after the handler.
TEST(HostStop, ThreadWaitingOnAConditionVariableIsStoppedAndWaitsOn) {
  claim_cpu();
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<unsigned> cpu{~0u};
  std::atomic<pid_t> tid{0};
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    claim_cpu();
    cpu.store(plat::cpu_slot());
    std::unique_lock<std::mutex> l(m);
    tid = gettid();
    cv.wait(l, [&] { return go; });
    woke = true;
  });
  wait_until_sleeping(tid);
  EXPECT_EQ(stops_that_report(cpu.load(), 20), 20u);
  EXPECT_FALSE(woke.load()) << "woken by the stops";
  {
    std::lock_guard<std::mutex> g(m);
    go = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(woke.load());
}

#if !MAGPIE_TSAN
// TSan (GCC 12's) delivers a signal to a thread in read() only once read()
// returns: such a thread cannot be stopped under TSan (stop_others waits,
// and says so every 10 s), so this test runs under ASan only.
TEST(HostStop, ThreadBlockedInReadIsStoppedAndItsReadGoesOn) {
  claim_cpu();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::atomic<unsigned> cpu{~0u};
  std::atomic<pid_t> tid{0};
  ssize_t got = 0;
  int err = 0;
  char buf[8] = {};
  std::thread reader([&] {
    claim_cpu();
    tid = gettid();
    cpu.store(plat::cpu_slot());
    got = read(fds[0], buf, 4);
    err = got < 0 ? errno : 0;
  });
  wait_until_sleeping(tid);  // in read()
  EXPECT_EQ(stops_that_report(cpu.load(), 20), 20u);
  ASSERT_EQ(write(fds[1], "abcd", 4), 4);
  reader.join();
  EXPECT_EQ(got, 4) << "read() failed with errno " << err << " (EINTR: not restarted)";
  EXPECT_EQ(std::string(buf), "abcd");
  close(fds[0]);
  close(fds[1]);
}
#endif

// ---- Choosing the signal -------------------------------------------------------
TEST(HostStop, TheSignalCanBeChanged) {
  claim_cpu();
  EXPECT_FALSE(mm::host::set_stop_signal(SIGKILL));
  EXPECT_FALSE(mm::host::set_stop_signal(SIGSEGV));
  EXPECT_FALSE(mm::host::set_stop_signal(SIGRTMIN - 1));  // glibc's
  EXPECT_FALSE(mm::host::set_stop_signal(0));
  int old = mm::host::stop_signal();
  EXPECT_EQ(old, SIGUSR2) << "the default (unless MM_HOST_STOP_SIGNAL is set)";
  ASSERT_TRUE(mm::host::set_stop_signal(SIGRTMIN + 3));
  EXPECT_EQ(mm::host::stop_signal(), SIGRTMIN + 3);
  {
    Workers workers(2);
    StopCheck c{};
    c.workers = &workers;
    c.caller_seed = 5;
    plat::stop_others(check_stopped, &c);
    for (unsigned i = 0; i < 2; i++) {
      EXPECT_EQ(c.before[i], c.after[i]);
      EXPECT_EQ(calls_for(c.report, workers.w[i].cpu.load()), 1u);
    }
    struct sigaction sa;
    ASSERT_EQ(sigaction(old, nullptr, &sa), 0);
    EXPECT_TRUE(sa.sa_handler == SIG_DFL) << "the old signal's disposition is given back";
  }
  ASSERT_TRUE(mm::host::set_stop_signal(old));
  Report r;
  plat::stop_others([](void* a) { plat::for_each_stack(record, a); }, &r);
  EXPECT_EQ(r.n, 1u);
}

#if !MAGPIE_TSAN
// ---- fork ----------------------------------------------------------------------
// In the child only the forking thread lives: the others' slots are freed,
// and a stop there stops nobody (no signal to a tid of the parent's).
TEST(HostStop, AfterForkOnlyTheForkingThreadIsACpu) {
  claim_cpu();
  Workers workers(2);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Report r;
    plat::stop_others([](void* a) { plat::for_each_stack(record, a); }, &r);
    bool ok = r.n == 1 && r.ranges[0].cpu == plat::cpu_slot();
    claim_cpu();  // kmem works
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  StopCheck c{};
  c.workers = &workers;
  c.caller_seed = 9;
  plat::stop_others(check_stopped, &c);
  EXPECT_EQ(c.report.n, 3u) << "the parent's threads are all still CPUs";
}

// ---- A thread stopped on its alternate signal stack -------------------------
// TSan runs signal handlers late, from its runtime, on the thread's own
// stack: there is no alternate-stack case under it.
struct AltThread {
  std::atomic<uintptr_t> normal_local{0};
  std::atomic<uintptr_t> alt_local{0};
  std::atomic<unsigned> cpu{~0u};
  std::atomic<bool> quit{false};
  uintptr_t alt_lo = 0, alt_hi = 0;
};
std::atomic<AltThread*> g_alt{nullptr};
constexpr unsigned kAltIndex = 4242;

ON_REAL_STACK void on_alt_stack(int, siginfo_t*, void*) {
  AltThread* t = g_alt.load();
  volatile uintptr_t local = 0xa17;
  t->alt_local.store(reinterpret_cast<uintptr_t>(&local));
  uintptr_t v = kAltIndex;
  asm volatile("" : "+r"(v));
  v = mix(v, kWorkerMagic);
  while (!t->quit.load(std::memory_order_relaxed)) asm volatile("" : "+r"(v));
  asm volatile("" ::"r"(v));
}

ON_REAL_STACK void alt_thread(AltThread* t) {
  claim_cpu();
  volatile uintptr_t local = 0x4e4;
  t->normal_local.store(reinterpret_cast<uintptr_t>(&local));
  size_t size = 256 << 10;
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  t->alt_lo = reinterpret_cast<uintptr_t>(mem);
  t->alt_hi = t->alt_lo + size;
  stack_t ss{}, old{};
  ss.ss_sp = mem;
  ss.ss_size = size;
  sigaltstack(&ss, &old);
  struct sigaction sa {};
  sa.sa_sigaction = on_alt_stack;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  t->cpu.store(plat::cpu_slot());
  pthread_kill(pthread_self(), SIGUSR1);  // spins in on_alt_stack until quit
  sigaltstack(&old, nullptr);             // ASan's own, which it unmaps at exit
  munmap(mem, size);
  (void)local;
}

struct AltCheck {
  Report r;
  bool register_found = false;
  unsigned cpu;
};

void record_alt(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg) {
  auto* c = static_cast<AltCheck*>(arg);
  record(lo, hi, cpu, &c->r);
  if (cpu == c->cpu && contains_word(lo, hi, kAltIndex, kWorkerMagic)) c->register_found = true;
}

TEST(HostStop, ThreadOnItsAlternateSignalStack) {
  claim_cpu();
  AltThread t;
  g_alt = &t;
  std::thread th(alt_thread, &t);
  while (!t.alt_local.load()) std::this_thread::sleep_for(1ms);
  AltCheck c;
  c.cpu = t.cpu.load();
  plat::stop_others([](void* a) { plat::for_each_stack(record_alt, a); }, &c);
  t.quit = true;
  th.join();
  EXPECT_EQ(calls_for(c.r, c.cpu), 2u) << "its alternate stack, then its own";
  EXPECT_TRUE(in_range_of(c.r, c.cpu, t.alt_local.load())) << "a local of the handler on the alternate stack";
  EXPECT_TRUE(in_range_of(c.r, c.cpu, t.normal_local.load())) << "a local of the thread on its own stack";
  EXPECT_TRUE(c.register_found) << "the interrupted handler's register value";
  for (unsigned i = 0; i < c.r.n; i++)
    if (c.r.ranges[i].cpu == c.cpu && c.r.ranges[i].lo >= t.alt_lo && c.r.ranges[i].lo < t.alt_hi) {
      EXPECT_EQ(c.r.ranges[i].hi, t.alt_hi);
    }
}

// ---- What is not allowed -------------------------------------------------------
class HostStopDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(HostStopDeathTest, StopOthersFromInsideFn) {
  EXPECT_DEATH(plat::stop_others([](void*) { plat::stop_others([](void*) {}, nullptr); }, nullptr),
               "stop_others called from inside a stop_others fn");
}

TEST_F(HostStopDeathTest, ForEachStackOutsideFn) {
  EXPECT_DEATH(plat::for_each_stack(record, nullptr), "for_each_stack called outside a stop_others fn");
}

// A lock that a stopped thread holds: fn waiting for it would hang; it dies
// with a message instead.
TEST_F(HostStopDeathTest, FnWaitingForALockAStoppedThreadHolds) {
  EXPECT_DEATH(
      {
        static plat::Lock lock;
        static std::atomic<bool> held{false};
        std::thread([] {
          claim_cpu();
          lock.lock();
          held = true;
          for (;;) std::this_thread::sleep_for(1s);
        }).detach();
        while (!held) std::this_thread::sleep_for(1ms);
        plat::stop_others(
            [](void*) {
              lock.lock();
              lock.unlock();
            },
            nullptr);
      },
      "waited 2 s for a lock");
}

TEST_F(HostStopDeathTest, EnvironmentChoosesTheSignal) {
  EXPECT_EXIT(
      {
        setenv("MM_HOST_STOP_SIGNAL", "SIGRTMIN+4", 1);
        _exit(mm::host::stop_signal() == SIGRTMIN + 4 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("MM_HOST_STOP_SIGNAL", "10", 1);
        _exit(mm::host::stop_signal() == 10 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_DEATH(
      {
        setenv("MM_HOST_STOP_SIGNAL", "KILL", 1);
        mm::host::stop_signal();
      },
      "MM_HOST_STOP_SIGNAL=KILL: not a signal stop_others can use");
}
#endif  // !MAGPIE_TSAN

}  // namespace
