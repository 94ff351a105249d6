// SPDX-License-Identifier: Apache-2.0
// kmem's debug modes (illumos kmem_flags, Linux slub_debug): per cache,
// chosen when the cache is created, from its cflags (KMC_REDZONE ...,
// mm/kmem.h) or from the configuration set before kmem_init
// (kmem_debug_configure: the kernel's kmem.debug= bootarg, the host
// library's MM_KMEM_DEBUG environment variable).
//
//   redzone   guard bytes after each buffer (from the size the caller asked
//             for to the buffer tag) and a guard word before it, checked on
//             every free, allocation and by kmem_verify: an overrun or an
//             underrun is reported against the buffer whose bounds it
//             crossed, however far it ran, with the offset and the bytes
//             found.
//   poison    free buffers hold 0xdeadbeef, checked when they are handed
//             out again (a write after free is reported with the offset);
//             new buffers of caches without a constructor hold 0xbaddcafe.
//   audit     each buffer keeps its last allocation and last free
//             (backtrace, CPU, context: the command, test, interrupt or
//             cross-call that ran, the host's thread; time), and a
//             transaction log keeps the last N operations of audited caches.
//   contents  the log also keeps the first bytes of each freed buffer.
//
// A debugged cache has no magazine layer: every allocation and free goes
// through the checks at the slab layer (as Linux's SLUB bypasses its
// per-CPU slabs for debug caches), and a double free is caught on the
// second free at any depth. Caches without debugging keep their fast path
// unchanged. Design: mm/kmem_debug.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mm/kmem.h>

// illumos's kmem_flags values.
#define KMF_AUDIT 0x00000001
#define KMF_DEADBEEF 0x00000002
#define KMF_REDZONE 0x00000004
#define KMF_CONTENTS 0x00000008
#define KMF_ALL (KMF_AUDIT | KMF_DEADBEEF | KMF_REDZONE | KMF_CONTENTS)

namespace mm {

// What kmem_debug_configure takes: the flags, and the caches they apply to
// (none named: every cache that can be debugged; mm's own bookkeeping
// caches and vmem's quantum caches never are).
struct KmemDebugConfig {
  static constexpr unsigned kMaxNames = 8;
  uint32_t flags = 0;
  unsigned nnames = 0;
  char names[kMaxNames][32] = {};
  uint32_t log_entries = 0;  // transaction log size (0: the default, 1024)
};
// Parses "FLAGS[,cache=NAME...][,log=N]": FLAGS are redzone, poison,
// audit, contents, all and none joined by '+' or ',' (or a number, the KMF_
// bits as illumos's kmem_flags). False with *why saying what is wrong.
bool kmem_debug_parse(const char* spec, KmemDebugConfig& out, const char** why);
// Sets the configuration for the caches created from now on (before
// kmem_init: every cache, kmem_alloc's included).
void kmem_debug_configure(const KmemDebugConfig& c);
// After kmem_init, once the platform can switch the allocators' hooks (the
// kernel: after its static branches are set up; the host's kmem_init calls
// it): kmem_alloc's debugged caches need the hooked copies, which pass the
// size the caller asked for. False if the hooks could not be switched on.
bool kmem_debug_start();
// The configuration in force.
void kmem_debug_config(KmemDebugConfig& out);
// The KMF_ flags of a cache (0: not debugged).
uint32_t kmem_cache_debug_flags(const kmem_cache_t* cp);
// Writes "redzone+poison+audit" (or "none") into out.
void kmem_debug_flags_name(uint32_t flags, char* out, size_t len);

// A buffer's audit record, one for its last allocation and one for its last
// free (valid: recorded at all).
struct BufAudit {
  bool valid;
  uint16_t cpu;
  uint32_t stack;    // stack depot handle (0: none)
  uint32_t ticks;    // plat::ticks() when it happened (low 32 bits)
  uint32_t context;  // plat::context(): what ran (plat::context_name names it)
};

// Prints a trail through plat::log: "kmem:   last allocated on cpu 1
// (command kmem) at 2.500 s (tick 250):", then its frames as "[<0x...>]"
// (tools/symbolize).
void print_audit(const char* what, const BufAudit& a);

// What a debug mode found, attached to the MemError it reports.
struct MemDetail {
  uintptr_t buffer;   // the buffer's start (0: none)
  uint64_t size;      // the size its caller asked for
  int64_t offset;     // of the first bad byte from buffer (negative: before it), if nfound
  uint8_t found[16];  // bytes from offset
  uint8_t nfound;
  uint16_t reached;      // buffers after this one that the write ran into
  uint32_t reached_off;  // the first of them, from buffer (in the padding: the size stays)
  const char* expected;  // what should have been there ("0xbb", "0xdeadbeef")
  const char* other;     // the other cache of a wrong-cache free (or null)
  BufAudit alloc, free;  // the buffer's trail (audit)
};

// Checks every redzone and every poisoned free buffer of one cache (null:
// every debugged cache) as a free or an allocation would, and reports each
// write found once, against the buffer whose bounds it crossed (not again
// for the buffers it ran into); returns how many it found. Repairs nothing.
// Buffers being allocated or freed at that instant are skipped.
// Holds each cache's slab lock (interrupts masked) while it walks that
// cache: a pause of the cache's users for the walk, as the command is meant.
uint64_t kmem_verify(kmem_cache_t* cp, uint64_t* checked = nullptr);

// The audit trail of the buffer containing addr (any debugged cache).
struct KmemTrail {
  kmem_cache_t* cache;
  uintptr_t buffer;
  uint64_t size;  // bytes asked for by its last allocation
  bool allocated;
  BufAudit alloc, free;
};
bool kmem_debug_trail(const void* addr, KmemTrail& out);

// The transaction log: the last N allocations and frees of audited caches.
struct KmemLogEntry {
  uint64_t seq;  // order of the operations (1, 2, ...)
  uintptr_t buffer;
  const char* cache;  // the cache's name, or "(destroyed cache)"
  bool alloc;         // else a free
  uint32_t cpu, ticks, stack;
  uint32_t context;   // plat::context() of the operation
  uint8_t ncontents;  // bytes kept of a freed buffer (contents)
  uint8_t contents[16];
};
// Calls fn for every entry, oldest first, whose buffer contains addr (0:
// every entry). Returns the entries visited.
uint64_t kmem_log_walk(uintptr_t addr, void (*fn)(const KmemLogEntry& e, void* arg), void* arg);
// Entries the log holds (0: no log) and operations logged since boot.
uint32_t kmem_log_capacity();
uint64_t kmem_log_total();

}  // namespace mm
