// SPDX-License-Identifier: Apache-2.0
// kmemleak: a leak scanner built into the allocator (mm/kmemleak.cpp has
// the design). The annotations are Linux's (include/linux/kmemleak.h), with
// KM flags where Linux takes gfp flags; the rest drives the scanner from a
// program (the kernel's shell command `kmemleak` uses the same calls).
//
// Objects are every allocated buffer of every tracked kmem cache, every
// large kmem_alloc, and ranges registered with kmemleak_alloc. A pointer
// anywhere inside an object references it (one past the end does not).
// Annotations take the object's start address (kmemleak_scan_area: an
// address inside it) and report anything else as a misuse.
#pragma once
#include <cstddef>
#include <cstdint>

// --- Linux's annotations ------------------------------------------------------
// Registers [ptr, ptr + size) as an object the allocators do not know about
// (pages a driver keeps, say). min_count: 0 never reported (and scanned as a
// root), -1 ignored (not scanned, not reported), N needs N references.
void kmemleak_alloc(const void* ptr, size_t size, int min_count, int kmflag);
// Forgets an object registered with kmemleak_alloc.
void kmemleak_free(const void* ptr);
// Never reported; scanned (a root).
void kmemleak_not_leak(const void* ptr);
// Never reported, never scanned.
void kmemleak_ignore(const void* ptr);
// Reported if unreferenced, but its contents are not scanned.
void kmemleak_no_scan(const void* ptr);
// Scan only [ptr, ptr + size) of the object containing ptr (areas add up;
// SIZE_MAX: to the end of the object).
void kmemleak_scan_area(const void* ptr, size_t size, int kmflag);
// A reference that moved away and is coming back: do not report the object
// at the next scan.
void kmemleak_transient_leak(const void* ptr);
inline void kmemleak_erase(void** ptr) { *ptr = nullptr; }

// --- Driving the scanner ----------------------------------------------------------
// On: every allocation from then on is stamped (time, CPU, backtrace); the
// objects allocated before are still scanned and reported, with no
// backtrace. Off: no stamps, no scans, no reports (the per-buffer records
// stay with their slabs). Annotations made on or off stay with their
// objects. Not from interrupt context.
// The calls below that stop the world (kmemleak_scan, kmemleak_reports,
// kmemleak_lookup, kmemleak_clear, kmemleak_since, kmemleak_summary) are
// for threads with interrupts enabled; the annotations, kmemleak_alloc
// and kmemleak_free, kmemleak_last_scan, kmemleak_mark and kmemleak_memory
// may be called from any context.
void kmemleak_enable(bool on);
// Host: the program's roots (the kernel's writable sections, per-CPU data
// and every CPU's stack are roots without asking).
void kmemleak_add_root(const void* start, size_t size);
void kmemleak_del_root(const void* start);
// Unreferenced objects younger than this are not reported (default 5000 ms).
void kmemleak_set_min_age_ms(unsigned ms);
// Scans now, with every other CPU stopped; returns the number of new reports.
size_t kmemleak_scan(void);
// Start addresses of the current reports (reported and still unreferenced
// at the last scan), at most max; returns how many there are in all.
size_t kmemleak_leaks(const void** out, size_t max);

namespace mm {

bool kmemleak_enabled();
void kmemleak_set_backtraces(bool on);  // record allocation backtraces (default on)
void kmemleak_set_stack_scan(bool on);  // scan the CPUs' stacks (Linux's stack=on|off; default on)
// While stacks are scanned: zeroes the dead stack below the caller (a few
// KiB), so that frames built there next do not keep what earlier, deeper
// frames left in the slots they never write (alignment padding, spill
// slots of paths not taken). A core calls it before it runs work that may
// then wait, scanned, for a long time (the kernel: each cross-call). Costs
// one load when kmemleak is off.
void kmemleak_scrub_stack();
unsigned kmemleak_min_age_ms();

// What a scan did.
struct LeakScanStats {
  uint64_t scans;        // since boot
  uint64_t duration_ns;  // this scan, all phases
  uint64_t pause_ns;     // the longest time the other CPUs were stopped
  uint64_t bytes_scanned;
  uint64_t objects;       // live objects found
  uint64_t unreferenced;  // of them, unreferenced (reported or not yet old/settled enough)
  uint64_t new_reports;
  uint64_t gray_overflows;  // times the mark stack filled (extra passes)
  // Buffers of slabs that have no records (memory was short when they were
  // wanted): scanned as roots, never reported; and those slabs.
  uint64_t untracked_objects, untracked_slabs;
};
void kmemleak_last_scan(LeakScanStats& out);

// One object, as reports, dump=, since and summary show it.
struct LeakObject {
  uintptr_t start;
  size_t size;     // what the allocation asked for, where known (kmem_alloc); else the buffer's size
  uint32_t ticks;  // timer ticks at allocation, 0 if not recorded
  unsigned cpu;    // that allocated it
  uint32_t stack;  // stack depot handle, 0 if not recorded
  uint32_t crc;    // crc32_le(0, object, size) at the last scan
  uint8_t flags;   // kmemleak's (mm/kmemleak_meta.h LeakFlags)
  int min_count, count;
  const char* kind;  // "kmem_alloc_128", the cache's name; "kmem_alloc" (large); "registered"
  uint8_t head[32];  // its first bytes (at most 32)
};
// The current reports, skipping the first `skip`: fills out[0..max), returns
// how many it filled. Taken with every other CPU stopped (contents copied).
size_t kmemleak_reports(LeakObject* out, size_t max, size_t skip);
// The object containing addr, with its state; false if none.
bool kmemleak_lookup(const void* addr, LeakObject& out);
// Current reports become roots and are not reported again.
size_t kmemleak_clear();
// Leak epochs: a mark is a point in time; since(mark) lists the live objects
// allocated after it (or only those the last scan found unreferenced),
// grouped by backtrace. Marks are numbered from 1 and all kept; 0: no
// memory for another.
unsigned kmemleak_mark();
struct LeakGroup {
  uint32_t stack;
  uint64_t count, bytes;
  uintptr_t example;  // one object's start
  const char* kind;
};
// Fills groups (the max with the most bytes, most first), returns how many
// distinct backtraces there are (may exceed max); 0 and *bad_mark set for an
// unknown mark; 0 while kmemleak is off.
size_t kmemleak_since(unsigned mark, bool unreferenced_only, LeakGroup* out, size_t max, bool* bad_mark);
// The current reports grouped by backtrace (like illumos ::findleaks).
size_t kmemleak_summary(LeakGroup* out, size_t max);
// Memory kmemleak uses: per-slab records, its tables, the stack depot.
struct LeakMemory {
  uint64_t slab_records_bytes, tables_bytes, stackdepot_bytes;
};
void kmemleak_memory(LeakMemory& out);

}  // namespace mm
