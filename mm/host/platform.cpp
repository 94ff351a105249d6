// SPDX-License-Identifier: Apache-2.0
// mm/'s platform on the host (see mm/platform.h and mm/host/include/mm/platform_inline.h).
//
// 1. "Physical memory" is a memfd of MM_HOST_MEMORY bytes (default 256 MiB):
//    the direct map is one shared mapping of all of it, and map_heap() maps
//    pages of it again inside a reserved heap window (MAP_FIXED over a
//    PROT_NONE reservation), as the kernel's page tables would. A flat table
//    remembers which physical page backs each heap page. The page allocator
//    runs over it from the library's first use (init_page_allocator: kmem's
//    or an arena's, whichever comes first).
// 2. CPUs are threads. A thread claims a free slot on its first cpu_id() and
//    gives it back when it exits (SlotRelease, after the exit hook has
//    flushed its caches). Claiming records the thread's kernel tid and its
//    stack: [lo, hi) from pthread_getattr_np, or for the main thread the
//    mapping of /proc/self/maps that holds its stack (hi is that mapping's
//    end; lo for "may grow to" is the end of the mapping below it). Claim and
//    release take the stop lock (3), so a stopper's view of the slot table
//    is exact: every registered thread is alive and can take a signal, and
//    no thread becomes or stops being a CPU during a stop (a new thread's
//    first cpu_id() waits for the stop to end). In the child of a fork, the
//    other threads' slots are freed (pthread_atfork).
// 3. stop_others stops every other thread that holds a slot with a signal:
//    SIGUSR2, unless MM_HOST_STOP_SIGNAL names another (a number, or USR1,
//    SIGUSR2, RTMIN+3, SIGRTMAX-2, PWR, ...; read at the first stop) or the
//    program called mm::host::set_stop_signal() (mm/host.h). The handler is
//    installed at the first stop (SA_SIGINFO | SA_RESTART, so system calls
//    the signal interrupts carry on). Protocol, all under the stop lock (a
//    ticket lock, so back-to-back stops do not starve threads that wait to
//    claim or release a slot; waiters poll it with sched_yield and
//    nanosleep, so a waiting thread that holds a slot can itself be stopped,
//    even under TSan, which only delivers signals in calls it knows block):
//    a. the stopper claims a slot for itself first (cpu_id()), takes the
//       lock, bumps the generation g_gen and publishes it in g_stopping;
//    b. for each other registered slot it sets the slot's sent_gen and
//       sends the signal to that tid (rt_tgsigqueueinfo, SI_QUEUE, the slot
//       in si_value): n signals. A tid that is gone (ESRCH: its thread died
//       without releasing its slot) loses its slot, with a message;
//    c. it waits until n handlers have counted themselves in g_stopped
//       (acquire). A thread not stopped after 50 ms gets the signal again,
//       every 200 ms (TSan can lose one; a duplicate is ignored), and a
//       message every 10 s names the ones missing;
//    d. it runs fn(arg) with t_in_stop_fn set and "interrupts masked";
//    e. it publishes g_released = g_gen (release, futex wake) and waits
//       until n handlers have counted themselves in g_left, so none is
//       still inside when the next stop starts; then drops the lock.
//    One stop at a time: a second stopper waits for the lock (and is
//    stopped meanwhile if it holds a slot). stop_others from inside fn is a
//    fatal error, and so is for_each_stack outside one.
// 4. The handler touches only atomics, its own stack and syscalls: it
//    ignores a signal that is not ours (not SI_QUEUE from this process with
//    our tag, no stop for its slot in progress, or one it already stopped
//    for: a duplicate, or one TSan delivers late), saves errno, spills the
//    callee-saved registers (__builtin_unwind_init), and in a noinline
//    function records its frame address as the thread's saved sp: every
//    register of the interrupted code is above it, in the kernel's signal
//    frame or in those spills. If that sp is outside the thread's stack it
//    also records the alternate signal stack it runs on (sigaltstack,
//    SS_ONSTACK). It counts itself stopped (release), waits for the release
//    (spins briefly, then futex-waits on g_released), counts itself out.
// 5. for_each_stack (inside fn): for each stopped slot, [saved sp, top of
//    its stack). A thread stopped while on its alternate signal stack (our
//    handler is installed without SA_ONSTACK, so only when the signal
//    interrupts another handler running there) gives two ranges: [saved sp,
//    top of the alternate stack) and its whole thread stack (as mapped when
//    it claimed the slot), since where that handler interrupted it is not
//    known. A thread stopped on a stack of neither kind (one it switched to
//    itself) gives [saved sp, end of the signal frame's ucontext) and its
//    whole thread stack. The caller spills its own callee-saved registers
//    (__builtin_unwind_init) and reports [its sp below them, top). For a
//    thread other than the main one, top is the top of glibc's stack block,
//    which also holds its static TLS (thread_local variables); the main
//    thread's TLS is elsewhere and not reported.
// 6. fn runs while the others may be anywhere: inside mm's locks (the host
//    masks nothing), malloc's, stdio's, the sanitizers'. So fn only reads
//    memory and uses its own stack and preallocated memory: no locks (in
//    debug builds a plat::Lock that it waits for is a fatal error after 2 s:
//    Lock::lock's contended path checks t_in_stop_fn), no malloc or free, no stdio, no
//    kmem or vmem call, no plat::log. Threads that hold no slot are not
//    stopped.
// 7. Sanitizers. ASan: with detect_stack_use_after_return (the host tests'
//    default) a local whose address is taken lives in a fake frame on
//    ASan's heap, not in any range reported here; code that reads other
//    threads' stacks must be no_sanitize("address") (their redzones are
//    poisoned). TSan delivers a signal only when the thread calls into its
//    runtime (an atomic, an intercepted call) or waits in a call it knows
//    blocks (poll, nanosleep, pthread_cond_wait, sem_wait, pthread_join,
//    ...): a thread in a loop without either, in read() or in a contended
//    pthread_mutex_lock stops only when it gets out (GCC 12's TSan).
#include <mm/host.h>
#include <mm/page.h>
#include <mm/platform.h>
#include <execinfo.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace mm::plat {

thread_local constinit unsigned t_cpu = kMaxCpus;
thread_local constinit uintptr_t t_cpu_line = uintptr_t{kMaxCpus} * 64;
#if defined(MM_DEBUG)
thread_local constinit int t_irq_masked = 0;
#endif
uint8_t* g_direct_map;
uint64_t g_phys_base;

namespace {
// Word-sized, as Lock's: no libatomic call for a sub-word compare-exchange.
// A slot's per-CPU state passes from thread to thread: the exiting thread
// flushes it (the exit hook) and frees the slot with a release store; the
// next claimer's compare-exchange acquires it.
std::atomic<uint32_t> g_slot_used[kMaxCpus];
// Only grows: a bound for loops over the slots. It publishes nothing.
std::atomic<unsigned> g_slots_high{0};

// --- The stop lock (3): claim, release, stop_others, set_stop_signal ------
// A ticket lock, so back-to-back stops cannot starve a thread that waits to
// claim or release a slot. Waiters poll (sched_yield, then nanosleep): see 3.
std::atomic<uint32_t> g_stop_next{0};     // next ticket
std::atomic<uint32_t> g_stop_serving{0};  // the ticket that holds the lock

void sleep_ns(long ns) {
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

void stop_lock() {
  uint32_t ticket = g_stop_next.fetch_add(1, std::memory_order_relaxed);
  // Acquire: pairs with the previous holder's release in stop_unlock.
  for (unsigned n = 0; g_stop_serving.load(std::memory_order_acquire) != ticket; n++) {
    if (n < 16) sched_yield();
    else sleep_ns(n < 64 ? 20000 : 200000);
  }
}
void stop_unlock() { g_stop_serving.fetch_add(1, std::memory_order_release); }

pid_t this_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Messages while other threads may be stopped (holding stdio's lock, or
// malloc's): formatted on the stack, written with write(2).
__attribute__((format(printf, 1, 2))) void raw_log(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = static_cast<size_t>(n) < sizeof buf - 1 ? static_cast<size_t>(n) : sizeof buf - 2;
  buf[len++] = '\n';
  for (size_t off = 0; off < len;) {
    ssize_t w = write(2, buf + off, len - off);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) off += static_cast<size_t>(w);
  }
}
[[noreturn]] void raw_fatal(const char* what) {
  raw_log("mm: fatal: %s", what);
  abort();
}

// --- CPU slots' threads (2) ---------------------------------------------
struct CpuThread {
  // Written when the slot is claimed or released, under the stop lock; read
  // by stoppers under it, and by the thread's own handler.
  bool live = false;
  pid_t tid = 0;
  uintptr_t stack_lo = 0;   // lowest address the stack may grow to
  uintptr_t mapped_lo = 0;  // lowest address mapped when the slot was claimed
  uintptr_t stack_hi = 0;   // its top (exclusive); 0: unknown
  // One stop: the stopper sets sent_gen before the signal; the handler
  // writes the rest, then counts itself in g_stopped (release).
  std::atomic<uint32_t> sent_gen{0};
  std::atomic<uint32_t> stopped_gen{0};
  std::atomic<uintptr_t> sp{0};        // the handler's frame: registers above
  std::atomic<uintptr_t> alt_lo{0};    // the alternate signal stack it runs
  std::atomic<uintptr_t> alt_hi{0};    // on, if not on its own stack
  std::atomic<uintptr_t> frame_hi{0};  // end of the signal frame's ucontext
};
CpuThread g_threads[kMaxCpus];

struct StackBounds {
  uintptr_t lo = 0, mapped_lo = 0, hi = 0;
};

// Hex number at p (no prefix); advances p.
uintptr_t parse_hex(const char*& p, const char* end) {
  uintptr_t v = 0;
  for (; p < end; p++) {
    char c = *p;
    unsigned d;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else break;
    v = v << 4 | d;
  }
  return v;
}

// The mapping of /proc/self/maps that holds addr, and the end of the one
// below it. Reads with open/read into a stack buffer: no malloc.
bool find_mapping(uintptr_t addr, StackBounds& b) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  char line[64];  // the start of the current line: "lo-hi " fits
  size_t line_len = 0;
  bool skipping = false, found = false;
  uintptr_t prev_hi = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && !found; i++) {
      char c = buf[i];
      if (c != '\n') {
        if (!skipping && line_len < sizeof line) line[line_len++] = c;
        if (line_len == sizeof line) skipping = true;
        continue;
      }
      const char* p = line;
      const char* e = line + line_len;
      uintptr_t lo = parse_hex(p, e);
      uintptr_t hi = (p < e && *p == '-') ? parse_hex(++p, e) : 0;
      if (addr >= lo && addr < hi) {
        b.lo = prev_hi;
        b.mapped_lo = lo;
        b.hi = hi;
        found = true;
      }
      prev_hi = hi;
      line_len = 0;
      skipping = false;
    }
    if (found) break;
  }
  close(fd);
  return found;
}

StackBounds this_thread_stack() {
  StackBounds b;
  auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (this_tid() == getpid()) {
    if (find_mapping(here, b)) return b;
  }
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr;
    size_t size;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      b.lo = b.mapped_lo = reinterpret_cast<uintptr_t>(addr);
      b.hi = b.lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  if (here < b.lo || here >= b.hi) {
    log("mm: cannot tell where thread %d's stack is: for_each_stack will not report it", this_tid());
    b = {};
  }
  return b;
}

// Frees the thread's CPU slot when it exits, so threads can come and go.
// The hook is stored with release (set_cpu_exit_hook, from kmem_init) and
// loaded with acquire.
std::atomic<void (*)()> g_exit_hook{nullptr};
struct SlotRelease {
  ~SlotRelease() {
    if (t_cpu >= kMaxCpus) return;
    if (auto hook = g_exit_hook.load(std::memory_order_acquire)) hook();
    stop_lock();
    g_threads[t_cpu].live = false;
    g_slot_used[t_cpu].store(0, std::memory_order_release);
    stop_unlock();
    t_cpu = kMaxCpus;
    t_cpu_line = uintptr_t{kMaxCpus} * 64;
  }
};
thread_local SlotRelease t_release;

// --- Stopping (3, 4) -------------------------------------------------------
constexpr int kDefaultStopSignal = SIGUSR2;
constexpr uint32_t kStopTag = 0x4d530000u;  // si_value: tag | slot
std::atomic<int> g_stop_signal{0};          // 0: not chosen yet
int g_installed_signal = 0;                 // under the stop lock
struct sigaction g_previous_action;         // what the installed signal had

std::atomic<uint32_t> g_gen{0};       // the current (or last) stop
std::atomic<uint32_t> g_stopping{0};  // g_gen while a stop is in progress, else 0
std::atomic<uint32_t> g_released{0};  // futex word: = g_gen when the stopped may go
std::atomic<unsigned> g_stopped{0};   // handlers that count themselves stopped
std::atomic<unsigned> g_left{0};      // ... and then out
unsigned g_stopper;                   // the stopper's slot, under the stop lock

long futex(std::atomic<uint32_t>* word, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, nullptr, nullptr, 0);
}

// Runs on the stopped thread, below the handler's spills (4).
__attribute__((noinline, no_sanitize("address"))) void park(unsigned cpu, uint32_t gen, const void* uc) {
  CpuThread& t = g_threads[cpu];
  auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t alt_lo = 0, alt_hi = 0;
  if (sp < t.stack_lo || sp >= t.stack_hi) {
    stack_t ss;
    if (sigaltstack(nullptr, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)) {
      alt_lo = reinterpret_cast<uintptr_t>(ss.ss_sp);
      alt_hi = alt_lo + ss.ss_size;
    }
  }
  // The kernel's ucontext lies just above the handler's frame (unless a
  // sanitizer delivered the signal late, from a copy elsewhere).
  uintptr_t frame_hi = reinterpret_cast<uintptr_t>(uc) + sizeof(ucontext_t);
  if (frame_hi <= sp || frame_hi - sp > (uintptr_t{64} << 10)) frame_hi = 0;
  t.sp.store(sp, std::memory_order_relaxed);
  t.alt_lo.store(alt_lo, std::memory_order_relaxed);
  t.alt_hi.store(alt_hi, std::memory_order_relaxed);
  t.frame_hi.store(frame_hi, std::memory_order_relaxed);
  t.stopped_gen.store(gen, std::memory_order_relaxed);
  // Release: the stopper's acquire of the count sees the fields above and
  // everything this thread wrote before it was stopped.
  g_stopped.fetch_add(1, std::memory_order_release);
  for (unsigned spins = 0;; spins++) {
    // Acquire: pairs with the stopper's release after fn.
    uint32_t r = g_released.load(std::memory_order_acquire);
    if (r == gen) break;
    if (spins < 200) cpu_relax();
    else futex(&g_released, FUTEX_WAIT_PRIVATE, r);
  }
  g_left.fetch_add(1, std::memory_order_release);
}

__attribute__((no_sanitize("address"))) void stop_handler(int, siginfo_t* si, void* uc) {
  int saved_errno = errno;
  auto value = static_cast<uint32_t>(si->si_value.sival_int);
  if (si->si_code == SI_QUEUE && si->si_pid == getpid() && (value & 0xffff0000u) == kStopTag) {
    unsigned cpu = value & 0xffffu;
    uint32_t gen = g_stopping.load(std::memory_order_acquire);
    // Ours, for a stop in progress that sent it to this slot, and not yet
    // stopped in this one (the stopper may have sent it again).
    if (cpu < kMaxCpus && gen != 0 && g_threads[cpu].sent_gen.load(std::memory_order_acquire) == gen &&
        g_threads[cpu].stopped_gen.load(std::memory_order_relaxed) != gen) {
      __builtin_unwind_init();  // the interrupted code's callee-saved registers, onto this stack
      park(cpu, gen, uc);
      asm volatile("" ::: "memory");  // no tail call: the spills stay until park returns
    }
  }
  errno = saved_errno;
}

bool usable_stop_signal(int sig) {
  if (sig <= 0 || sig >= NSIG) return false;
  switch (sig) {
    case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGTRAP:
    case SIGABRT: case SIGSYS: case SIGCHLD: case SIGCONT:
      return false;
    default:
      break;
  }
  return sig < 32 || sig >= SIGRTMIN;  // glibc keeps 32 .. SIGRTMIN-1 for itself
}

// MM_HOST_STOP_SIGNAL's value: a number or a name; -1 if neither.
int parse_signal(const char* s) {
  if (!s || !*s) return -1;
  if (s[0] >= '0' && s[0] <= '9') {
    char* end;
    long v = strtol(s, &end, 10);
    return *end || v <= 0 || v >= NSIG ? -1 : static_cast<int>(v);
  }
  if (!strncmp(s, "SIG", 3)) s += 3;
  static constexpr struct {
    const char* name;
    int sig;
  } kNames[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PWR", SIGPWR}, {"XCPU", SIGXCPU},
                {"URG", SIGURG},   {"WINCH", SIGWINCH}, {"HUP", SIGHUP}, {"PROF", SIGPROF},
                {"VTALRM", SIGVTALRM}, {"ALRM", SIGALRM}, {"IO", SIGIO}, {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU}};
  for (const auto& n : kNames)
    if (!strcmp(s, n.name)) return n.sig;
  for (int base : {0, 1}) {
    const char* name = base ? "RTMAX" : "RTMIN";
    size_t len = strlen(name);
    if (strncmp(s, name, len)) continue;
    const char* rest = s + len;
    int sig = base ? SIGRTMAX : SIGRTMIN;
    if (!*rest) return sig;
    if (*rest != (base ? '-' : '+')) return -1;
    char* end;
    long off = strtol(rest + 1, &end, 10);
    if (*end || off < 0 || off > SIGRTMAX - SIGRTMIN) return -1;
    return base ? sig - static_cast<int>(off) : sig + static_cast<int>(off);
  }
  return -1;
}

// Under the stop lock: the signal, with the handler installed for it.
int install_stop_handler() {
  int sig = g_stop_signal.load(std::memory_order_relaxed);
  if (!sig) {
    sig = kDefaultStopSignal;
    if (const char* env = getenv("MM_HOST_STOP_SIGNAL")) {
      sig = parse_signal(env);
      if (!usable_stop_signal(sig))
        fatal("MM_HOST_STOP_SIGNAL=%s: not a signal stop_others can use (try USR1, USR2, RTMIN+N or a number)", env);
    }
    g_stop_signal.store(sig, std::memory_order_relaxed);
  }
  if (g_installed_signal != sig) {
    if (g_installed_signal) sigaction(g_installed_signal, &g_previous_action, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = stop_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &g_previous_action) != 0) fatal("stop_others: cannot install a handler for signal %d", sig);
    g_installed_signal = sig;
  }
  return sig;
}

// Sends the stop signal to slot cpu's thread; false if the thread is gone.
bool send_stop(unsigned cpu, int sig) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sig;
  si.si_code = SI_QUEUE;
  si.si_pid = getpid();
  si.si_uid = getuid();
  si.si_value.sival_int = static_cast<int>(kStopTag | cpu);
  for (;;) {
    if (syscall(SYS_rt_tgsigqueueinfo, getpid(), g_threads[cpu].tid, sig, &si) == 0) return true;
    if (errno != EAGAIN) return false;  // ESRCH: gone
    sched_yield();                      // the queue of real-time signals is full
  }
}

// The ranges of one CPU's stack (5).
void report_stack(const CpuThread& t, unsigned cpu, uintptr_t sp, uintptr_t alt_lo, uintptr_t alt_hi,
                  uintptr_t frame_hi, void (*fn)(uintptr_t, uintptr_t, unsigned, void*), void* arg) {
  if (t.stack_hi && sp >= t.stack_lo && sp < t.stack_hi) {
    fn(sp, t.stack_hi, cpu, arg);
    return;
  }
  if (alt_hi && sp >= alt_lo && sp < alt_hi) fn(sp, alt_hi, cpu, arg);
  else if (frame_hi > sp) fn(sp, frame_hi, cpu, arg);  // a stack we do not know: the signal frame
  if (t.stack_hi) fn(t.mapped_lo, t.stack_hi, cpu, arg);
}

// Called by for_each_stack, so its frame lies below for_each_stack's spills.
__attribute__((noinline)) void report_stacks(void (*fn)(uintptr_t, uintptr_t, unsigned, void*), void* arg) {
  auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uint32_t gen = g_gen.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < kMaxCpus; i++) {
    const CpuThread& t = g_threads[i];
    if (!t.live) continue;
    if (i == g_stopper) {
      uintptr_t alt_lo = 0, alt_hi = 0;
      stack_t ss;
      if (sigaltstack(nullptr, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)) {
        alt_lo = reinterpret_cast<uintptr_t>(ss.ss_sp);
        alt_hi = alt_lo + ss.ss_size;
      }
      report_stack(t, i, sp, alt_lo, alt_hi, 0, fn, arg);
    } else if (t.sent_gen.load(std::memory_order_relaxed) == gen &&
               t.stopped_gen.load(std::memory_order_relaxed) == gen) {
      report_stack(t, i, t.sp.load(std::memory_order_relaxed), t.alt_lo.load(std::memory_order_relaxed),
                   t.alt_hi.load(std::memory_order_relaxed), t.frame_hi.load(std::memory_order_relaxed), fn, arg);
    }
  }
}

// Lock::lock's contended path inside a stop_others fn.
struct LockWait {
  const void* lock;
  uint64_t start, last;
};
thread_local constinit LockWait t_lock_wait{nullptr, 0, 0};

uint8_t* g_heap_base;
size_t g_heap_size;
// Physical address per heap page, 0 = unmapped. Plain: written by
// map_heap/unmap_heap and read by heap_to_phys only for pages the caller
// holds (segkmem's import and release, page_of of a heap address it owns),
// so the allocator's own synchronisation orders each entry.
uint64_t* g_heap_pt;
int g_memfd = -1;
uint64_t g_phys_size;
}  // namespace

thread_local constinit bool t_in_stop_fn = false;

void stop_fn_waits_for_lock(const void* lock) {
  uint64_t now = now_ns();
  LockWait& w = t_lock_wait;
  if (w.lock != lock || now - w.last > 50'000'000) w = {lock, now, now};  // a new wait
  w.last = now;
  if (now - w.start > 2'000'000'000)
    raw_fatal("a stop_others fn has waited 2 s for a lock that a stopped thread holds (fn must take no lock)");
}

namespace {
// In the child of a fork only the forking thread lives on: the other slots'
// threads are gone, and the stop lock and a stop in progress belong to the
// parent.
void forget_other_threads_after_fork() {
  g_stop_next.store(0, std::memory_order_relaxed);
  g_stop_serving.store(0, std::memory_order_relaxed);
  g_stopping.store(0, std::memory_order_relaxed);
  t_in_stop_fn = false;
  for (unsigned i = 0; i < kMaxCpus; i++) {
    CpuThread& t = g_threads[i];
    if (i == t_cpu) {
      t.tid = this_tid();
    } else if (t.live) {
      t.live = false;
      g_slot_used[i].store(0, std::memory_order_relaxed);
    }
  }
}
}  // namespace

unsigned claim_cpu_slot() {
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, forget_other_threads_after_fork); });
  StackBounds b = this_thread_stack();
  pid_t tid = this_tid();
  stop_lock();  // not during a stop (2)
  for (unsigned i = 0; i < kMaxCpus; i++) {
    uint32_t expect = 0;
    if (g_slot_used[i].compare_exchange_strong(expect, 1, std::memory_order_acq_rel)) {
      CpuThread& t = g_threads[i];
      t.tid = tid;
      t.stack_lo = b.lo;
      t.mapped_lo = b.mapped_lo;
      t.stack_hi = b.hi;
      t.live = true;
      t_cpu = i;
      t_cpu_line = uintptr_t{i} * 64;
      (void)&t_release;  // make sure the thread_local destructor is registered
      unsigned high = g_slots_high.load(std::memory_order_relaxed);
      while (high < i + 1 && !g_slots_high.compare_exchange_weak(high, i + 1)) {
      }
      stop_unlock();
      return i;
    }
  }
  stop_unlock();
  fatal("more than %u threads use the allocator at once", kMaxCpus);
}

unsigned cpu_count() {
  unsigned n = g_slots_high.load(std::memory_order_acquire);
  return n ? n : 1;
}

bool map_heap(uintptr_t va, uint64_t pa, size_t size) {
  auto* p = reinterpret_cast<uint8_t*>(va);
  if (p < g_heap_base || p + size > g_heap_base + g_heap_size || pa < g_phys_base ||
      pa + size > g_phys_base + g_phys_size)
    fatal("map_heap(%p, 0x%llx, %zu) outside the heap window or physical memory", p,
          static_cast<unsigned long long>(pa), size);
  void* r = mmap(p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g_memfd,
                 static_cast<off_t>(pa - g_phys_base));
  if (r == MAP_FAILED) return false;
  for (size_t off = 0; off < size; off += 4096) g_heap_pt[(va + off - reinterpret_cast<uintptr_t>(g_heap_base)) >> 12] = pa + off;
  return true;
}

void unmap_heap(uintptr_t va, size_t size) {
  auto* p = reinterpret_cast<uint8_t*>(va);
  if (mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    fatal("unmap_heap: %s", strerror(errno));
  for (size_t off = 0; off < size; off += 4096) g_heap_pt[(va + off - reinterpret_cast<uintptr_t>(g_heap_base)) >> 12] = 0;
}

void unmap_heap_deferred(uintptr_t va, size_t size) { unmap_heap(va, size); }
void heap_tlb_sync() {}

uint64_t heap_to_phys(uintptr_t va) {
  uintptr_t base = reinterpret_cast<uintptr_t>(g_heap_base);
  if (va < base || va >= base + g_heap_size) return 0;
  uint64_t pa = g_heap_pt[(va - base) >> 12];
  return pa ? pa + (va & 4095) : 0;
}

void wait_for_memory() { sched_yield(); }

uint64_t cycles_fallback() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void heap_window(uintptr_t& base, size_t& size) {
  base = reinterpret_cast<uintptr_t>(g_heap_base);
  size = g_heap_size;
}

void on_each_cpu(void (*fn)(void*), void* arg) { fn(arg); }

bool g_alloc_hooks, g_free_hooks;
bool set_alloc_hooks(HookMode mode) {
  __atomic_store_n(&g_alloc_hooks, mode != HookMode::kOff, __ATOMIC_RELAXED);
  return true;
}
bool set_free_hooks(HookMode mode) {
  __atomic_store_n(&g_free_hooks, mode != HookMode::kOff, __ATOMIC_RELAXED);
  return true;
}

void stop_others(void (*fn)(void*), void* arg) {
  if (t_in_stop_fn) raw_fatal("stop_others called from inside a stop_others fn");
  unsigned self = cpu_id();  // the caller is a CPU too (for_each_stack reports it)
  stop_lock();
  int sig = install_stop_handler();
  uint32_t gen = g_gen.load(std::memory_order_relaxed) + 1;
  if (gen == 0) gen = 1;
  g_gen.store(gen, std::memory_order_relaxed);
  g_stopped.store(0, std::memory_order_relaxed);
  g_left.store(0, std::memory_order_relaxed);
  g_stopper = self;
  // Release: a handler that acquires g_stopping sees the resets above.
  g_stopping.store(gen, std::memory_order_release);
  unsigned n = 0;
  for (unsigned i = 0; i < kMaxCpus; i++) {
    CpuThread& t = g_threads[i];
    if (!t.live || i == self) continue;
    t.sent_gen.store(gen, std::memory_order_release);
    if (send_stop(i, sig)) {
      n++;
      continue;
    }
    raw_log("mm: stop_others: cpu %u's thread %d is gone without giving its slot back; slot freed", i, t.tid);
    t.sent_gen.store(0, std::memory_order_relaxed);
    t.live = false;
    g_slot_used[i].store(0, std::memory_order_release);
  }
  // Acquire: pairs with each handler's release (4). A thread that has not
  // stopped after a while gets the signal again: TSan can lose one (seen
  // with a thread in its thread_local destructors), and a duplicate is
  // harmless (the handler of a thread already stopped ignores it).
  uint64_t start = now_ns(), next_resend = start + 50'000'000, next_warning = start + 10'000'000'000;
  for (unsigned spins = 0; g_stopped.load(std::memory_order_acquire) != n; spins++) {
    if (spins < 100) {
      cpu_relax();
      continue;
    }
    sched_yield();
    if ((spins & 63) != 0) continue;
    uint64_t now = now_ns();
    if (now < next_resend) continue;
    next_resend = now + 200'000'000;
    bool warn = now > next_warning;
    if (warn) next_warning = now + 10'000'000'000;
    for (unsigned i = 0; i < kMaxCpus; i++) {
      CpuThread& t = g_threads[i];
      if (!t.live || i == self || t.sent_gen.load(std::memory_order_relaxed) != gen ||
          t.stopped_gen.load(std::memory_order_acquire) == gen)
        continue;
      if (!send_stop(i, sig)) {
        raw_log("mm: stop_others: cpu %u's thread %d is gone without giving its slot back; slot freed", i, t.tid);
        t.sent_gen.store(0, std::memory_order_relaxed);
        t.live = false;
        g_slot_used[i].store(0, std::memory_order_release);
        n--;
        continue;
      }
      if (warn)
        raw_log("mm: stop_others: cpu %u (thread %d) has not stopped after %llu s: is signal %d blocked there, or "
                "its handler replaced? (Under TSan: is it in read() or a contended pthread_mutex_lock?)",
                i, t.tid, static_cast<unsigned long long>((now - start) / 1000000000u), sig);
    }
  }
  t_in_stop_fn = true;
  IrqState s = irq_save();
  fn(arg);
  irq_restore(s);
  t_in_stop_fn = false;
  // Release: the stopped threads see what fn wrote.
  g_released.store(gen, std::memory_order_release);
  futex(&g_released, FUTEX_WAKE_PRIVATE, INT_MAX);
  for (unsigned spins = 0; g_left.load(std::memory_order_acquire) != n; spins++) {
    if (spins < 100) cpu_relax();
    else sched_yield();
  }
  g_stopping.store(0, std::memory_order_relaxed);
  stop_unlock();
}

__attribute__((noinline)) void for_each_stack(void (*fn)(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg),
                                              void* arg) {
  if (!t_in_stop_fn) raw_fatal("for_each_stack called outside a stop_others fn");
  __builtin_unwind_init();  // the caller's callee-saved registers, onto the stack
  report_stacks(fn, arg);
  asm volatile("" ::: "memory");  // no tail call: the spills stay until it returns
}

bool describe_region(uintptr_t, const char*&, uintptr_t&, size_t&, unsigned&) { return false; }

namespace {
const uint64_t g_start_ns = now_ns();  // host only: a process-start reference
}  // namespace

uint64_t monotonic_ns() { return now_ns(); }
// CLOCK_MONOTONIC_COARSE: a tick is 10 ms, the coarse clock's resolution
// is the host kernel's tick (1 to 10 ms), and it reads in a few
// nanoseconds where CLOCK_MONOTONIC takes tens (kmemleak stamps every
// allocation with one).
uint64_t ticks_from_clock() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  return ns > g_start_ns ? (ns - g_start_ns) / 10000000u : 0;
}
unsigned ticks_per_second() { return 100; }

// A thread's context is its kernel thread id (below 2^22 on Linux, so
// within the 24 bits): what top, gdb and /proc name it by.
thread_local constinit uint32_t t_context = 0;
uint32_t context_slow() { return t_context = static_cast<uint32_t>(this_tid()) & 0xffffff; }
void context_name(uint32_t id, char* out, size_t len) { snprintf(out, len, "tid %u", static_cast<unsigned>(id)); }
bool stopped_cpus_may_hold_locks() { return true; }
void for_each_root(void (*)(uintptr_t, uintptr_t, const char*, void*), void*) {}

void set_cpu_exit_hook(void (*fn)()) { g_exit_hook.store(fn, std::memory_order_release); }

// glibc's backtrace() unwinds with the tables in .eh_frame (the host
// library is not built with frame pointers). Its first call loads libgcc's
// unwinder, which calls malloc, once per process. The walk starts where
// our own return address is (the first frame is normally the return
// address into this function, but a sanitizer's interceptor of backtrace()
// adds its own frame before it).
__attribute__((noinline)) unsigned backtrace(uintptr_t* pcs, unsigned max, unsigned skip) {
  constexpr unsigned kWalk = 64;
  void* walk[kWalk];
  auto ours = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  unsigned want = skip + 3 + max;
  if (want > kWalk) want = kWalk;
  unsigned got = static_cast<unsigned>(::backtrace(walk, static_cast<int>(want)));
  unsigned first = 0;
  while (first < got && reinterpret_cast<uintptr_t>(walk[first]) != ours) first++;
  if (first == got) first = 1;  // not found: assume the plain layout
  unsigned n = 0;
  for (unsigned i = first + skip; i < got && n < max; i++) pcs[n++] = reinterpret_cast<uintptr_t>(walk[i]);
  return n;
}

void log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mm: fatal: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

}  // namespace mm::plat

namespace mm::host {

namespace {
std::once_flag g_once;
HostMemory g_mem;
}

const HostMemory& memory() { return g_mem; }

bool set_stop_signal(int sig) {
  using namespace mm::plat;
  if (!usable_stop_signal(sig)) return false;
  stop_lock();
  g_stop_signal.store(sig, std::memory_order_relaxed);
  stop_unlock();
  return true;
}

int stop_signal() {
  using namespace mm::plat;
  stop_lock();
  int sig = g_stop_signal.load(std::memory_order_relaxed);
  if (!sig) sig = install_stop_handler();  // reads MM_HOST_STOP_SIGNAL
  stop_unlock();
  return sig;
}

void init_memory(size_t phys_bytes, size_t heap_bytes) {
  std::call_once(g_once, [&] {
    using namespace mm::plat;
    if (const char* env = getenv("MM_HOST_MEMORY")) {
      char* end;
      unsigned long long v = strtoull(env, &end, 0);
      if (*end == 'M' || *end == 'm') v <<= 20;
      else if (*end == 'G' || *end == 'g') v <<= 30;
      if (v >= (4u << 20)) phys_bytes = v;
    }
    phys_bytes &= ~size_t{4095};
    g_memfd = memfd_create("mm-phys", 0);
    if (g_memfd < 0 || ftruncate(g_memfd, static_cast<off_t>(phys_bytes)) != 0)
      fatal("cannot create %zu bytes of host 'physical' memory: %s", phys_bytes, strerror(errno));
    void* dm = mmap(nullptr, phys_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g_memfd, 0);
    void* heap = mmap(nullptr, heap_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_heap_pt = static_cast<uint64_t*>(calloc(heap_bytes >> 12, sizeof(uint64_t)));
    if (dm == MAP_FAILED || heap == MAP_FAILED || !g_heap_pt) fatal("cannot map host memory: %s", strerror(errno));
    // A physical base that is not zero, so a 0 return can mean "none".
    g_phys_base = 0x40000000;
    g_direct_map = static_cast<uint8_t*>(dm);
    g_phys_size = phys_bytes;
    g_heap_base = static_cast<uint8_t*>(heap);
    g_heap_size = heap_bytes;
    g_mem = {g_phys_base, phys_bytes, reinterpret_cast<uintptr_t>(heap), heap_bytes};
  });
}

void init_page_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    init_memory();
    PhysRange bank{g_mem.phys_base, g_mem.phys_size};
    page_init(&bank, 1, nullptr, 0);
  });
}

}  // namespace mm::host
