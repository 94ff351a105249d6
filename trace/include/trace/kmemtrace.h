// SPDX-License-Identifier: Apache-2.0
// kmemtrace: allocation events of the whole kernel, one ring per CPU.
//
// 1. What it is. Each allocator's public entry points call record_alloc /
//    record_free; the event (trace/abi.h) goes into the ring of the CPU
//    that runs the call (trace/ring.h). `kmemtrace dump` writes the rings on
//    the console as frames (trace/frame.h); the host tool kmtrace reads a
//    capture of it.
// 2. Cost. Disabled (the default), a recording call is an inline test of
//    one global flag and a branch not taken. Enabled, the out-of-line
//    record_*_slow masks interrupts, takes the next sequence number (a
//    clock read on ARM, an atomic add on a global counter elsewhere: the
//    ABI's cross-CPU order, abi.h, Sequence numbers), writes the
//    event into this CPU's ring and publishes it. No locks, no allocation.
//    The kmem fast paths record inline instead (trace/record.h): masked
//    inside their own critical section, or, while kmemtrace alone has the
//    allocators' hooks on, as a restartable section (arm64, riscv64).
// 3. Interrupts. record_* mask interrupts around the ring write, so a
//    record from an interrupt handler on the same CPU (an allocation in an
//    interrupt) waits until the interrupted one is done: the ring has one
//    writer at a time. (The ring is not re-entrant; callers need not mask.)
// 4. Where to call it (the kernel's allocators):
//      after a successful allocation:
//        record_alloc(kTypeKmalloc, CALLER_ADDRESS(), buf, size, chunk, kmflag)
//      before the memory goes back (so no other CPU can allocate it, and
//      record it, with an earlier sequence number):
//        record_free(kTypeKmalloc, CALLER_ADDRESS(), buf)
//    `caller` is the return address into the allocator's caller: take it in
//    the public entry point, not in a helper.
// 5. Set-up. Once at boot on any CPU, before enable(): init_cpu(cpu, mem,
//    bytes) for each CPU that records (others drop every event and count
//    it), set_boot_id(). The memory stays the ring's until reboot.
//    Ordering: a CPU must see a ring's set-up (init_cpu, or reset()) before
//    it records into it, and the switch does not give it that (it is read
//    with a plain load, below). The kernel runs a cross-call on every core
//    before it turns recording on (kmemtrace::start in the kernel: each core's acquire of the
//    call sees the rings as the enabling core left them). On the host the
//    caller orders it: set up before starting the threads that record, and
//    call reset() only while those threads are quiescent, with a lock, a
//    join or another handover between reset() and their next allocation.
// 6. Readers (the shell): dump(), read(), stats(), total_overruns(). They
//    serialise on an internal lock (one consumer at a time) and may run on
//    any CPU while all CPUs keep recording. Not from interrupt context.
#pragma once
#include <cstddef>
#include <cstdint>
#include <trace/abi.h>
#include <trace/frame.h>
#include <trace/ring.h>
#include <mm/platform_inline.h>

namespace kmemtrace {

// The switch. Read on every allocation: keep it alone, not in a struct
// (not on the line of the sequence number, which every event writes); set
// it only through enable()/disable().
extern bool g_enabled;

namespace detail {
// The recorder's state, in one place so that the restartable ring write
// (trace/record.h) reaches the sequence number and this CPU's ring from
// one address: the rings (128 bytes each), then the ABI's sequence
// counter, where the numbers are one counter for every CPU (sifive_u, the
// host; ARM and QEMU virt's riscv64 read a clock instead: record.h,
// next_seq).
struct Recorder {
  Ring rings[mm::plat::kMaxCpus];
  std::atomic<uint32_t> seq{0};
};
extern Recorder g_rec;
}  // namespace detail

// Out of line and cold (so the hooked function needs no frame for them
// when tracing is off): tag is Ring::alloc_tag(type) / Ring::free_tag(type).
// Each records only if the switch is still on once interrupts are masked.
__attribute__((cold)) void record_alloc_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr, size_t requested,
                                             size_t allocated, uint32_t flags);
__attribute__((cold)) void record_alloc_target_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr, size_t requested,
                                                    size_t allocated, uint32_t flags, int32_t target_cpu);
__attribute__((cold)) void record_free_slow(uint32_t tag, uintptr_t caller, uintptr_t ptr);

// A plain read, on purpose: it compiles to a compare with memory and a
// branch (x86-64: cmpb + jne; arm64/riscv64: address, load, branch), where
// an atomic load of a bool costs an extra test.
// The flag changes rarely (enable/disable) and a stale value only moves the
// point where recording starts or stops by an event or so. It publishes
// nothing (Set-up says what orders the rings' set-up) and a byte is read and
// written whole on every target; ThreadSanitizer reports the read against
// enable()/disable() all the same (tests/host/stress_trace_tsan.cpp
// suppresses that one report).
inline bool enabled() { return __builtin_expect(g_enabled, 0); }

// The recording hooks. `type` is a TypeId; `flags` the caller's KM_*/VM_*;
// `ptr` an address or a vmem span's base.
__attribute__((always_inline)) inline void record_alloc(uint8_t type, uintptr_t caller, uintptr_t ptr, size_t requested,
                                                        size_t allocated, uint32_t flags) {
  if (enabled()) record_alloc_slow(Ring::alloc_tag(type), caller, ptr, requested, allocated, flags);
}
__attribute__((always_inline)) inline void record_alloc(uint8_t type, uintptr_t caller, const void* ptr,
                                                        size_t requested, size_t allocated, uint32_t flags) {
  record_alloc(type, caller, reinterpret_cast<uintptr_t>(ptr), requested, allocated, flags);
}
// An allocation for another CPU than the recording one (the ABI's target
// CPU field; record_alloc records kSameCpu).
__attribute__((always_inline)) inline void record_alloc_for_cpu(uint8_t type, uintptr_t caller, uintptr_t ptr,
                                                                size_t requested, size_t allocated, uint32_t flags,
                                                                int32_t target_cpu) {
  if (enabled()) record_alloc_target_slow(Ring::alloc_tag(type), caller, ptr, requested, allocated, flags, target_cpu);
}
__attribute__((always_inline)) inline void record_free(uint8_t type, uintptr_t caller, uintptr_t ptr) {
  if (enabled()) record_free_slow(Ring::free_tag(type), caller, ptr);
}
__attribute__((always_inline)) inline void record_free(uint8_t type, uintptr_t caller, const void* ptr) {
  record_free(type, caller, reinterpret_cast<uintptr_t>(ptr));
}

// Clock anchors (abi.h, Sequence numbers), where the platform's sequence
// numbers come from a clock (plat::kTraceClock; otherwise both do nothing).
// Each masks interrupts, reads the clock, and records it in this CPU's ring.
// clock_anchor: now, whether or not tracing is on: the kernel calls it on
// every CPU before enable(), so that it comes before every event of the
// session. clock_tick: from every CPU's timer tick, while tracing is on,
// when 2^30 clock ticks have passed since the CPU's last anchor (or that
// one was dropped).
void clock_anchor();
void clock_tick();

// --- Set-up and control --------------------------------------------------
// CPUs that can have a ring (the platform's kMaxCpus).
unsigned max_cpus();
// CPU `cpu`'s ring header (a fixed address; null past max_cpus()), which
// the restartable ring write takes from the platform (plat::trace_ring:
// the kernel keeps it in PerCpu). A CPU whose ring has no memory finds its
// header full: its events go to the slow path, which drops them.
void* ring_header(unsigned cpu);
// Gives CPU `cpu` the ring memory mem[0, bytes); Ring::bytes_for(cap) is
// the size for a capacity cap (a power of two). False if cpu is out of
// range or the memory too small (that CPU then drops every event).
// Only while disabled (or before that CPU ever records).
bool init_cpu(unsigned cpu, void* mem, size_t bytes);
// Identifies this boot in every frame, so captures of two boots never mix
// (e.g. the cycle counter or a DTB random seed at boot).
void set_boot_id(uint32_t id);
void enable();
void disable();
// Empties every ring and zeroes its counters (events, overruns), as at
// boot. Only while disabled and once no CPU can still be inside a
// record_*_slow call that saw it enabled (the kernel makes sure with a
// cross-call to every CPU: a CPU that runs it has left any masked region).
void reset();

// --- Readers -------------------------------------------------------------
struct CpuStats {
  bool has_ring;
  Ring::Stats ring;
};
// False if cpu is out of range.
bool stats(unsigned cpu, CpuStats& out);
// The unconsumed events of one CPU's ring, counted by event and type id:
// what the next dump of that CPU will send (other ids and types in other).
struct TypeCounts {
  uint64_t allocs[kTypeCount];
  uint64_t frees[kTypeCount];
  uint64_t alloc_bytes[kTypeCount];  // allocated bytes of the alloc events
  uint64_t other;
};
// False if cpu is out of range.
bool count_types(unsigned cpu, TypeCounts& out);
// Bytes of committed, unconsumed events in one CPU's ring (0 if out of
// range): cheap, for a streamer's poll.
size_t pending_bytes(unsigned cpu);
// Sum of every CPU's overrun bytes: the ABI's total_overruns.
uint64_t total_overruns();

// Writes a dump of every CPU that has a ring through sink (the raw UART
// writer: frames are lines of their own, "\r\n" included). consume: also
// drain what was sent, so the next dump starts after it (otherwise a dump
// is a snapshot and the next one repeats it, plus what came since).
frame::DumpResult dump(frame::ByteSink sink, void* ctx, bool consume = false,
                       size_t max_payload = frame::kDefaultPayload);

// Streaming: copies whole committed events of `cpu`, at most max bytes,
// into out and consumes them; *offset gets their stream offset. Returns the
// bytes copied (0: nothing new).
size_t read(unsigned cpu, void* out, size_t max, uint64_t* offset = nullptr);

}  // namespace kmemtrace
