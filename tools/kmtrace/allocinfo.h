// SPDX-License-Identifier: Apache-2.0
// kmtrace allocinfo: the table the kernel's `allocinfo` shell command
// prints (Linux's /proc/allocinfo format), rebuilt offline from a trace so
// that the two can be compared line by line.
//
// 1. A line is a call site: the file:line of the call and the function it
//    is written in, as the kernel's code tag has them (__FILE__ compiled
//    with -fmacro-prefix-map=<source root>/=, __LINE__, __func__). Here they
//    come from the caller address through the ELF's DWARF (symbolize.h);
//    several addresses can map to one line, and are one line here too.
// 2. bytes and calls are the objects still live at the end of the trace:
//    calls counts them, bytes sums their allocated size (the event's
//    bytes_alloc, which is what the kernel counts). An object freed in the
//    trace counts nowhere, so offline every line has calls != 0.
// 3. The kernel lists its tags in tag order, which a trace does not carry:
//    the default order here, which the kernel's command also uses, is by
//    file (bytewise), then line, then function.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "analysis.h"
#include "render.h"

namespace kmtrace {

struct AllocinfoLine {
  std::string file;      // relative to the source root; "?" if unknown
  unsigned line = 0;     // 0 if unknown
  std::string function;  // unqualified, as __func__ gives it; "?" if unknown
  uint64_t bytes = 0, calls = 0;
};

enum class AllocinfoSort { kSite, kBytes, kCalls };  // kBytes, kCalls: largest first

struct AllocinfoOptions {
  std::string source_root;  // stripped from the front of file names; "" keeps them
  AllocinfoSort sort = AllocinfoSort::kSite;
  size_t top = 0;        // 0: every line
  bool nonzero = false;  // only lines with calls != 0
};

// The sites' live objects, grouped by (file, line, function), filtered,
// sorted and cut to opts.top lines.
std::vector<AllocinfoLine> allocinfo(const std::vector<Site>& sites, const SymbolMap& syms,
                                     const AllocinfoOptions& opts);
// The header and one `printf("%12lli %8llu %s:%u func:%s \n")` line each.
std::string allocinfo_text(const std::vector<AllocinfoLine>& lines);

// What __func__ gives for a demangled name: the last component of the
// qualified name, without namespaces, return type, template arguments,
// ABI tags, parameters, qualifiers, " [clone ...]" suffixes or a C name's
// ".part.0"-style ones:
// "mm::(anonymous namespace)::slab_create(kmem_cache*, int)" -> "slab_create",
// "foo()::{lambda(void*)#1}::operator()(void*) const" -> "operator()".
std::string unqualified_function(const std::string& demangled);

// file without the leading "source_root/" (unchanged if it is elsewhere).
std::string relative_path(const std::string& file, const std::string& source_root);

// The source root of an ELF, from its compilation units (compilation
// directory, source file name as DW_AT_comp_dir and DW_AT_name give them):
// the units compiled from the most common compilation directory are the
// project's, and the root is the deepest directory holding all of their
// source files. "" if that cannot be told (no absolute names, or nothing
// in common but "/").
std::string source_root(const std::vector<std::pair<std::string, std::string>>& compile_units);

}  // namespace kmtrace
