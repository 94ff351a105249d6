// SPDX-License-Identifier: Apache-2.0
// Memory allocation profiling: live bytes and calls per allocation call
// site, printed in Linux's /proc/allocinfo format (the reference is Linux's
// Documentation/mm/allocation-profiling.rst). mm/alloc_tag.cpp has the
// theory; this is the interface.
//
// Every call of kmem_alloc, kmem_zalloc and kmem_cache_alloc names a static
// tag (file, line, function) placed in the linker section alloc_tags: the
// public names are macros (the alloc_hooks() pattern) that pass the call
// site's tag to the tagged entry point while the allocators' hooks are on,
// and call the Solaris function otherwise. The functions stay callable and
// their addresses can be taken ((kmem_alloc)(size, flags), &kmem_alloc):
// such calls are counted at one tag per function, the line of its
// definition in mm/ (the "indirect" tags).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mm {

// Its size is its alignment (a power of two), so that the compiler's own
// alignment of static data (16 or 32 bytes for objects this size on some
// targets) leaves no gaps between tags: the section is an array.
// Which allocator a tag's call is to (allocinfo --totals counts the RAM of
// kmem's and the page allocator's; vmem's bytes are an arena's units).
enum class AllocKind : uint8_t { kKmem, kPage, kVmem };

struct alignas(sizeof(void*) == 8 ? 32 : 16) AllocTag {
  const char* file;  // relative to the source tree
  const char* func;
  uint32_t line;
  AllocKind kind;
  bool internal;  // a call mm/ makes for itself (its file is in mm/): slabs, spans, metadata
};
// Is the call at file (relative to the source tree) one mm/ makes for
// itself? The functions' own tags (indirect calls) are not.
constexpr bool alloc_site_internal(const char* file) { return file[0] == 'm' && file[1] == 'm' && file[2] == '/'; }
static_assert(sizeof(AllocTag) == alignof(AllocTag));

// sysctl vm.mem_profiling: never (no per-object metadata, cannot be
// switched on), 0 (off, switchable), 1 (on). Set once at boot before kmem
// is up (prof_boot_mode; the kernel's bootarg sysctl.vm.mem_profiling=),
// then switched with prof_set.
enum class ProfMode : uint8_t { kNever, kOff, kOn };
void prof_boot_mode(ProfMode mode);  // before the first allocation
ProfMode prof_mode();
// Switches counting on or off; false (nothing changed) under never, or if
// the allocators' hooks could not be switched. Not from interrupt context.
bool prof_set(bool on);

// One tag's counters, summed over the CPUs.
struct AllocTagCounts {
  const AllocTag* tag;
  int64_t bytes;   // live bytes (each object counted at its allocated size)
  uint64_t calls;  // live objects
};
// The number of tags in the image.
size_t alloc_tag_count();
// The i-th tag (in section order) and its counts; false past the end.
bool alloc_tag_read(size_t i, AllocTagCounts& out);
// The counts of the tag of the call site at file:line (for tests).
bool alloc_tag_find(const char* file, uint32_t line, AllocTagCounts& out);
// Frees of objects that were allocated while profiling was off (counted,
// the first one reported on the console), since boot.
uint64_t prof_untagged_frees();
// Slabs made without tag references because memory ran out (their buffers
// are counted at no tag), since boot (kmem_slab.cpp).
uint64_t prof_refless_slabs();
// Bytes of the per-CPU counters and allocinfo's snapshot (the references
// are the page allocator's descriptor pages and kmem's metadata).
uint64_t prof_metadata_bytes();

// allocinfo, as Linux's /proc/allocinfo: a version line, a column line,
// then one line per tag "%12lli %8llu file:line func:name ". Default order:
// by file, then line; sort_by bytes or calls: descending. top: at most that
// many lines (0: all). nonzero: only tags with live calls.
enum class AllocSort : uint8_t { kSource, kBytes, kCalls };
struct AllocInfoOptions {
  AllocSort sort = AllocSort::kSource;
  size_t top = 0;
  bool nonzero = false;
};
// Writes the table through out (one line per call, with its newline),
// from a snapshot of the counters; allocates nothing (the snapshot's room
// comes with the counters). False, with nothing written, if the counters
// could not be allocated or another print is under way.
bool allocinfo_print(const AllocInfoOptions& opt, void (*out)(const char* line, void* arg), void* arg);

}  // namespace mm

// The call site's tag, in the alloc_tags section (read-only: the counters
// live elsewhere). A statement expression: one static per expansion. Not
// inside a template: GCC puts a template instance's statics in its own
// COMDAT section whatever their section attribute says, so the tag would be
// outside alloc_tags and the call not counted (the CTest BOARD/alloc-tags
// fails the build's image if one is; call a non-template function there).
// An inline function is fine.
#define MM_ALLOC_TAG_AS(kind_, internal_)                                                      \
  ({                                                                                           \
    static const ::mm::AllocTag mm_alloc_tag_ __attribute__((section("alloc_tags"), used)) = { \
        __FILE__, __func__, __LINE__, ::mm::AllocKind::kind_, internal_};                      \
    &mm_alloc_tag_;                                                                            \
  })
#define MM_ALLOC_TAG(kind_) MM_ALLOC_TAG_AS(kind_, ::mm::alloc_site_internal(__FILE__))
// The functions' own tags: the calls that do not go through the macros.
#define MM_ALLOC_TAG_INDIRECT(kind_) MM_ALLOC_TAG_AS(kind_, false)
