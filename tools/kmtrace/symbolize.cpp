// Symbolizer backends: libdw (elfutils) or addr2line (binutils).
#include "symbolize.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if KMTRACE_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

namespace kmtrace {
namespace {

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string s = d;
  free(d);
  return s;
}

#if KMTRACE_HAVE_LIBDW
class DwSymbolizer : public Symbolizer {
 public:
  ~DwSymbolizer() override {
    if (dwfl_) dwfl_end(dwfl_);
  }
  bool open(const std::string& elf, std::string* error) {
    static const Dwfl_Callbacks callbacks = {
        nullptr, dwfl_standard_find_debuginfo, dwfl_offline_section_address, nullptr};
    dwfl_ = dwfl_begin(&callbacks);
    if (!dwfl_) return fail(error, elf);
    dwfl_report_begin(dwfl_);
    mod_ = dwfl_report_offline(dwfl_, "kernel", elf.c_str(), -1);
    if (!mod_ || dwfl_report_end(dwfl_, nullptr, nullptr) != 0) return fail(error, elf);
    // A position-independent file is laid out at some base: trace addresses
    // are link-time addresses (the kernel is linked where it runs), so shift
    // them by the module's bias (0 for the kernel's ET_EXEC).
    if (!dwfl_module_getelf(mod_, &bias_)) return fail(error, elf);
    return true;
  }
  std::map<uint64_t, SourceInfo> lookup(const std::vector<uint64_t>& addrs) override {
    std::map<uint64_t, SourceInfo> out;
    for (uint64_t ra : addrs) {
      SourceInfo& si = out[ra];
      si.function = "?";
      if (ra == 0) continue;
      Dwarf_Addr pc = ra - 1 + bias_;
      Dwfl_Module* m = dwfl_addrmodule(dwfl_, pc);
      if (!m) continue;
      si.function = demangle(dwfl_module_addrname(m, pc));
      if (Dwfl_Line* l = dwfl_module_getsrc(m, pc)) {
        int line = 0;
        const char* file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr);
        if (file) si.file = file;
        si.line = line;
      }
      // The innermost inlined function containing pc, if any.
      Dwarf_Addr bias = 0;
      if (Dwarf_Die* cu = dwfl_module_addrdie(m, pc, &bias)) {
        Dwarf_Die* scopes = nullptr;
        int n = dwarf_getscopes(cu, pc - bias, &scopes);
        for (int i = 0; i < n; i++) {
          if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
          Dwarf_Attribute attr;
          const char* name = nullptr;
          if (dwarf_attr_integrate(&scopes[i], DW_AT_linkage_name, &attr))
            name = dwarf_formstring(&attr);
          else if (dwarf_attr_integrate(&scopes[i], DW_AT_name, &attr))
            name = dwarf_formstring(&attr);
          if (name) {
            si.inlined_in = si.function;
            si.function = demangle(name);
          }
          break;
        }
        free(scopes);
      }
    }
    return out;
  }
  std::vector<std::pair<std::string, std::string>> compile_units() override {
    std::vector<std::pair<std::string, std::string>> out;
    Dwarf_Die* cu = nullptr;
    Dwarf_Addr bias = 0;
    while ((cu = dwfl_module_nextcu(mod_, cu, &bias))) {
      Dwarf_Attribute attr;
      const char* dir = dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr));
      const char* name = dwarf_diename(cu);
      out.emplace_back(dir ? dir : "", name ? name : "");
    }
    return out;
  }
  const char* backend() const override { return "libdw"; }

 private:
  bool fail(std::string* error, const std::string& elf) {
    if (error) *error = elf + ": " + dwfl_errmsg(-1);
    return false;
  }
  Dwfl* dwfl_ = nullptr;
  Dwfl_Module* mod_ = nullptr;
  Dwarf_Addr bias_ = 0;
};
#endif

// binutils addr2line, batch mode through a temporary file of addresses.
class Addr2lineSymbolizer : public Symbolizer {
 public:
  explicit Addr2lineSymbolizer(std::string elf) : elf_(std::move(elf)) {}
  std::map<uint64_t, SourceInfo> lookup(const std::vector<uint64_t>& addrs) override {
    std::map<uint64_t, SourceInfo> out;
    if (addrs.empty()) return out;
    char path[] = "/tmp/kmtrace-addrs-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return out;
    std::string list;
    for (uint64_t a : addrs) {
      char buf[32];
      snprintf(buf, sizeof buf, "0x%llx\n", static_cast<unsigned long long>(a ? a - 1 : 0));
      list += buf;
    }
    bool ok = write(fd, list.data(), list.size()) == static_cast<ssize_t>(list.size());
    close(fd);
    // Two lines per address (function, file:line); no -i, so the count
    // of lines is known.
    std::string cmd = "addr2line -f -C -e '" + elf_ + "' < " + path;
    FILE* p = ok ? popen(cmd.c_str(), "r") : nullptr;
    char fn[4096], loc[4096];
    for (uint64_t a : addrs) {
      SourceInfo& si = out[a];
      si.function = "?";
      if (!p || !fgets(fn, sizeof fn, p) || !fgets(loc, sizeof loc, p)) continue;
      fn[strcspn(fn, "\n")] = 0;
      loc[strcspn(loc, "\n")] = 0;
      si.function = fn;
      std::string l = loc;
      size_t colon = l.rfind(':');
      if (colon != std::string::npos && l.compare(0, 2, "??") != 0) {
        si.file = l.substr(0, colon);
        si.line = atoi(l.c_str() + colon + 1);
      }
    }
    if (p) pclose(p);
    unlink(path);
    return out;
  }
  std::vector<std::pair<std::string, std::string>> compile_units() override { return {}; }
  const char* backend() const override { return "addr2line"; }

 private:
  std::string elf_;
};

}  // namespace

std::unique_ptr<Symbolizer> Symbolizer::open(const std::string& elf, std::string* error) {
  int fd = ::open(elf.c_str(), O_RDONLY);
  if (fd < 0) {
    if (error) *error = elf + ": " + strerror(errno);
    return nullptr;
  }
  char magic[4] = {};
  bool is_elf = read(fd, magic, 4) == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0;
  close(fd);
  if (!is_elf) {
    if (error) *error = elf + ": not an ELF file";
    return nullptr;
  }
  // KMTRACE_SYMBOLIZER=addr2line picks binutils even when libdw is built in.
  const char* want = getenv("KMTRACE_SYMBOLIZER");
  if (want && strcmp(want, "addr2line") == 0) return std::make_unique<Addr2lineSymbolizer>(elf);
#if KMTRACE_HAVE_LIBDW
  auto dw = std::make_unique<DwSymbolizer>();
  if (dw->open(elf, error)) return dw;
  return nullptr;
#else
  return std::make_unique<Addr2lineSymbolizer>(elf);
#endif
}

}  // namespace kmtrace
