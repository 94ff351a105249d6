// SPDX-License-Identifier: Apache-2.0
// The platform interface mm/ is written against. mm/ is portable C++: the
// same sources build into the kernel on every board and natively on the host
// (unit tests, benchmarks, and a user-space allocator library).
//
// Two halves:
//   - inline operations, from <mm/platform_inline.h>, which each platform
//     provides on its include path (kernel/mm/include/ in the kernel,
//     mm/host/include/ on the host): they sit on the allocation fast path;
//   - out-of-line operations, declared below, implemented by the platform
//     (kernel/mm/platform.cpp, mm/host/platform.cpp).
//
// Inline contract (namespace mm::plat):
//   constexpr unsigned kMaxCpus;          upper bound of cpu_id()
//   unsigned cpu_id();                    current CPU; stable while irq_save()d
//                                         (kernel) or for the thread (host)
//   unsigned cpu_slot();                  cpu_id() without claiming: may return
//                                         kMaxCpus (host thread with no CPU yet)
//   constexpr unsigned kCpuSlots;         kMaxCpus + 1, for arrays cpu_slot() indexes
//   uintptr_t cpu_line_offset();          cpu_slot() * 64: this CPU's entry in an
//                                         array of 64-byte entries (kmem's
//                                         CpuCache), one load where the arch
//                                         has no scaled-index add (riscv64)
//   constexpr unsigned kMaxArenas;        vmem arenas that can exist at once
//   unsigned cpu_count();                 CPUs that may call in (<= kMaxCpus)
//   void cpu_relax();                     a hint inside a spin-wait loop
//   unsigned highest_bit(uintptr_t x);    index of the highest / lowest set
//   unsigned lowest_bit(uintptr_t x);     bit of x != 0 (inline on every arch)
//   using IrqState; IrqState irq_save(); void irq_restore(IrqState);
//                                         masks what could preempt per-CPU
//                                         work (kernel: IRQs; host: nothing,
//                                         counted per thread under MM_DEBUG)
//   bool irqs_masked();                   is this CPU masked (for checks)
//   class Lock { lock(); unlock(); try_lock(); is_locked(); held(); }
//                                         held(): by the calling CPU (thread)
//                                         a spinlock; kernel: IRQs must be
//                                         masked by the caller where the lock
//                                         is also taken in interrupt context;
//                                         lock()/a successful try_lock()
//                                         acquire, unlock() releases: what a
//                                         holder wrote is visible to the next
//   bool alloc_hooks_on();                are the allocators' hooks on (mm/hooks.h)?
//                                         Tested first by every allocating entry
//                                         point (kernel: a static branch, one
//                                         patched nop; host: a load and a branch)
//   bool free_hooks_on();                 the same, by every freeing entry point
//   HookMode alloc_hooks_mode();          the same switches as three ways
//   HookMode free_hooks_mode();           (mm/hook_mode.h), where an entry point
//                                         or call site has a path for
//                                         kmemtrace alone; kHooked or kOff
//                                         where the platform has no three-way sites
//   T load_shared(const T& word);         a word another CPU may store (relaxed)
//                                         while a fast path loads it: kernel: a
//                                         plain load (single-copy atomic, any
//                                         addressing mode); host: relaxed atomic
//   constexpr bool kRestartable;          restartable per-CPU sections (kernel,
//                                         where the arch has them: kernel/rseq.h);
//                                         false: mask instead (the host)
//   MM_RESTARTABLE_TEXT                   attribute for a function that inlines one
//   MM_FRAMELESS                          attribute for an entry point whose every
//                                         call is a tail call: no frame pointer
//                                         (kernel), nothing (host)
//   MM_ENTRY_CALLER()                     the caller such an entry point passes
//                                         on: 0 (kernel: the callee takes its own
//                                         return address), its own return
//                                         address (host)
//   bool rseq_pop<kTop>(char* base, void*& out);
//   RseqPush rseq_push<kTop>(char* base, void* obj);
//   void rseq_inc<kOff>(char* base);      the magazine pop and push (a stack
//                                         of pointers as top and limit words
//                                         over a null sentinel) and a
//                                         counter increment as restartable
//                                         sections over the fields at base +
//                                         offset (kmem_fastpath.h,
//                                         Restartable fast paths); declared
//                                         and never defined where
//                                         kRestartable is false
//   bool rseq_pop_pair<kTop, kMark>(char* base, void*& first, uintptr_t& second);
//   bool rseq_push_pair<kTop>(char* base, void* first, uintptr_t second);
//                                         the page allocator's per-CPU stack of
//                                         two-word {pointer, value} entries
//                                         (page.cpp, Per-CPU caches), the
//                                         same way: top and limit over a
//                                         sentinel entry whose pointer's mark
//                                         is not kMark
//   constexpr bool kTraceClock;           kmemtrace's sequence numbers from
//   uint64_t trace_clock();                 trace_clock(), a clock every CPU
//   uint64_t trace_clock_hz();              reads alike, read after what came
//                                         before it (trace/abi.h, Sequence
//                                         numbers); false: one atomic counter
//   char* trace_ring();                   this CPU's kmemtrace ring header
//                                         (kmemtrace::ring_header), for the
//                                         restartable ring write; kernel only,
//                                         where the arch has it
//   uint32_t context();                   what this CPU runs, the kernel's
//                                         thread-equivalent, as a 24-bit id
//                                         kept with each audited allocation
//                                         and free (kmem_debug.cpp): kernel,
//                                         the shell command, test, interrupt
//                                         or cross-call (kernel/context.h);
//                                         host, the thread's id. Called with
//                                         interrupts masked
//   uint64_t cycles();                    cycle (or instruction) counter
//   uint64_t ticks();                     timer ticks since boot (kmemleak's
//                                         "jiffies"; kernel: kTimerHz a second;
//                                         host: 100 a second); kernel: a counter
//                                         read and a multiply, no division
//   constexpr bool kPhysicalHeap;         no MMU: the heap is runs of contiguous
//                                         frames at their physical addresses, and
//                                         heap_window / map_heap are not used
//                                         (segkmem.cpp, The physical heap)
//   void* phys_to_virt(uint64_t pa);      the direct map of RAM
//   uint64_t virt_to_phys(const void* va);  inverse, for direct-map addresses
#pragma once
#include <cstddef>
#include <cstdint>

#include <mm/hook_mode.h>
#include <mm/platform_inline.h>

namespace mm::plat {

// The kernel heap's virtual window, which the "heap" vmem arena manages.
void heap_window(uintptr_t& base, size_t& size);

// Maps [va, va + size) to physical [pa, pa + size) as normal, writable,
// non-executable memory (the kernel heap). False if page tables ran out.
[[nodiscard]] bool map_heap(uintptr_t va, uint64_t pa, size_t size);
void unmap_heap(uintptr_t va, size_t size);
// Unmaps, but other CPUs may still hold stale translations until the next
// heap_tlb_sync(): neither the addresses nor the pages may be reused before.
void unmap_heap_deferred(uintptr_t va, size_t size);
void heap_tlb_sync();
// The physical address behind a heap virtual address, 0 if unmapped.
uint64_t heap_to_phys(uintptr_t va);

// KM_SLEEP / VM_SLEEP: wait until memory may have been freed (kernel: until
// an interrupt; host: yields the thread).
void wait_for_memory();

// Runs fn(arg) on every CPU (the caller's included) and waits for all: used
// to flush per-CPU magazines. What the caller wrote before is visible to fn,
// and what fn wrote on each CPU is visible to the caller after. Host: runs
// it on the calling thread only (each thread flushes its own caches when it
// exits).
void on_each_cpu(void (*fn)(void*), void* arg);

// Host: fn runs on a thread that is about to give up its CPU slot (it
// exits), so its per-CPU caches can be flushed. Kernel: CPUs never leave.
void set_cpu_exit_hook(void (*fn)());


// Flip the allocators' hook switches (alloc_hooks_on, free_hooks_on): in
// the kernel, patch every static-branch site of the switch on every core.
// Not from interrupt context. False if it could not (the switch is then
// left off).
bool set_alloc_hooks(HookMode mode);
bool set_free_hooks(HookMode mode);

// Runs fn(arg) on this CPU, with interrupts masked, while every other CPU
// is stopped where it was (kernel: in an IPI handler, so never inside a
// masked region or holding a lock taken with interrupts masked, with its
// interrupted registers saved on its own stack). Everything a stopped CPU
// wrote before it stopped is visible to fn (kernel: each one's release of
// the stop count, acquired before fn runs; host: the same, from each
// stopped thread's signal handler). Host: every other thread that holds a
// CPU slot is stopped in a signal handler (SIGUSR2 unless changed:
// mm/host.h), anywhere, inside mm's locks, malloc's or stdio's included, so
// there fn must take no lock a stopped thread might hold, and not allocate
// or print: it reads memory (a plat::Lock that fn waits for is a fatal
// error). Threads without a slot run on. One stop at a time; not from
// inside fn, nor from an interrupt (signal) handler.
void stop_others(void (*fn)(void*), void* arg);


// --- For the leak scanner (kmemleak) -----------------------------------------
// Ticks a second (ticks(): mm/platform_inline.h), and a monotonic clock in
// nanoseconds.
unsigned ticks_per_second();
uint64_t monotonic_ns();
// Inside a stop_others fn only: calls fn(lo, hi, cpu, arg) for the live part of every CPU's stack, lo
// its saved stack pointer and hi its top: a stopped CPU's interrupted registers lie in [lo, hi) (the
// kernel's trap frame; the host's signal frame); the calling CPU's own registers are spilled onto its
// stack first. cpu is the CPU slot. Host: every thread that holds a CPU slot, and the caller.
void for_each_stack(void (*fn)(uintptr_t lo, uintptr_t hi, unsigned cpu, void* arg), void* arg);
// The platform's own roots: every writable kernel section (.data, .bss, and
// per-CPU data, which lives there). Host: none (programs register theirs).
void for_each_root(void (*fn)(uintptr_t lo, uintptr_t hi, const char* name, void* arg), void* arg);
// Whether a CPU stopped by stop_others may be holding one of mm's locks
// (host: yes, a thread stops anywhere; kernel: no, a core stops only with
// interrupts enabled and mm's locks are taken with them masked). Where it
// may, the scanner takes the locks it needs before it stops the others.
bool stopped_cpus_may_hold_locks();

// Kernel regions that are not mm's: if addr is in one (an image section, a
// CPU's stack, the boot page tables), its name, start and size, and the CPU
// for a stack (else ~0u). Host: none.
bool describe_region(uintptr_t addr, const char*& name, uintptr_t& start, size_t& size, unsigned& cpu);

// --- For the debug modes' audit trails ------------------------------------------
// The name of a context (context(), inline: "command kmem", "irq 33
// (uart)", "tid 4711") into out, cut to len - 1 characters; any id gives a
// name ("context 0x...": one the platform does not know).
void context_name(uint32_t id, char* out, size_t len);

// The caller's return addresses, innermost first (pcs[0]: where this returns to), minus the first skip; the count.
unsigned backtrace(uintptr_t* pcs, unsigned max, unsigned skip);

// Diagnostics: a line for the console (kernel) or stderr (host).
void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mm::plat
