// SPDX-License-Identifier: Apache-2.0
// Call sites to function and file:line, from the kernel ELF's DWARF.
//
// Uses elfutils' libdw (libdw-dev) when the build found it, else runs
// binutils' addr2line. Caller addresses are return addresses: the line is
// looked up at address - 1, inside the call instruction.
//
// A call site is where the allocator's public name is written, which is
// what the kernel's allocation tags record (__FILE__, __LINE__, __func__).
// Where that name expands to a call of an always-inline wrapper declared
// __attribute__((artificial)) (mm::page_alloc -> mm::page_alloc_site in
// mm/include/mm/page.h), the call instruction lies in the wrapper's inlined
// copy; the lookup steps out of it to the frame around it: that frame's
// function, and the line the wrapper is called from (DW_AT_call_file and
// DW_AT_call_line, what addr2line -i prints as the outer frame's line),
// repeatedly if wrappers nest. libdw knows a wrapper by DW_AT_artificial on
// the inlined function's abstract instance; the addr2line backend, which
// sees no attributes, by its names: an inlined frame whose function's
// unqualified name ends in "_site" and whose file is under mm/include/mm/.
// This holds for every command (sites, live, allocinfo, timeline).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kmtrace {

struct SourceInfo {
  std::string function;  // "?" if unknown
  std::string file;      // "" if unknown
  int line = 0;
  std::string inlined_in;  // the function `function` is inlined into, if any (not an artificial wrapper)
  std::string location() const { return file.empty() ? "?" : file + ":" + std::to_string(line); }
};

class Symbolizer {
 public:
  virtual ~Symbolizer() = default;
  // Opens elf; null and *error set if it cannot be read.
  static std::unique_ptr<Symbolizer> open(const std::string& elf, std::string* error);
  // Looks up many return addresses at once.
  virtual std::map<uint64_t, SourceInfo> lookup(const std::vector<uint64_t>& return_addresses) = 0;
  // Each compilation unit's DW_AT_comp_dir and DW_AT_name (either may be
  // ""); empty from the addr2line backend, which cannot list them.
  virtual std::vector<std::pair<std::string, std::string>> compile_units() = 0;
  // Which backend ("libdw" or "addr2line").
  virtual const char* backend() const = 0;
};

}  // namespace kmtrace
