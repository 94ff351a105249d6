// Call sites to function and file:line, from the kernel ELF's DWARF.
//
// Uses elfutils' libdw (libdw-dev) when the build found it, else runs
// binutils' addr2line. Caller addresses are return addresses: the line is
// looked up at address - 1, inside the call instruction.
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
  std::string inlined_in;  // the function the call was inlined into, if any
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
