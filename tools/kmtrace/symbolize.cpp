// SPDX-License-Identifier: Apache-2.0
// Symbolizer backends: libdw (elfutils) or addr2line (binutils).
#include "symbolize.h"

#include "allocinfo.h"  // unqualified_function

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
// An address inside the call a return address ra returns from: ra - 1,
// after clearing bit 0 of a 32-bit ARM ELF's return addresses, where it
// marks Thumb code (ARMv7-M: ra - 1 would be the instruction after the
// call, whose line may be the next one; ARM-state addresses are even).
// Elsewhere (x86) a return address may be odd and is taken as it is.
bool is_arm32_elf(const std::string& elf) {
  unsigned char h[20] = {};
  FILE* f = fopen(elf.c_str(), "rb");
  if (!f) return false;
  size_t n = fread(h, 1, sizeof h, f);
  fclose(f);
  return n == sizeof h && h[0] == 0x7f && h[1] == 'E' && h[4] == 1 /* ELFCLASS32 */ &&
         (h[18] | h[19] << 8) == 40 /* EM_ARM */;
}
uint64_t call_pc(uint64_t ra, bool arm32) { return (arm32 ? ra & ~uint64_t{1} : ra) - 1; }
}  // namespace

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
// True if `inlined` is an instance of a function declared
// __attribute__((artificial)): GCC puts DW_AT_artificial on the abstract
// instance (the inlined DIE's DW_AT_abstract_origin, or what that one's
// DW_AT_specification names). GCC also marks the functions it makes up
// itself artificial, a lambda's operator() among them, whose body is the
// lambda's, written by hand; those are all class members, and so are not
// taken here for wrappers.
bool is_artificial_wrapper(Dwarf_Die* inlined) {
  Dwarf_Attribute attr;
  bool flag = false;
  if (!dwarf_attr_integrate(inlined, DW_AT_artificial, &attr) || dwarf_formflag(&attr, &flag) != 0 || !flag)
    return false;
  // The declaration: the abstract origin, or the one it specifies.
  Dwarf_Die origin, decl;
  if (!dwarf_formref_die(dwarf_attr(inlined, DW_AT_abstract_origin, &attr), &origin)) return false;
  if (!dwarf_formref_die(dwarf_attr(&origin, DW_AT_specification, &attr), &decl)) decl = origin;
  Dwarf_Die* scopes = nullptr;  // decl, then what it is declared in
  int n = dwarf_getscopes_die(&decl, &scopes);
  int tag = n > 1 ? dwarf_tag(&scopes[1]) : DW_TAG_compile_unit;
  free(scopes);
  return n > 0 && tag != DW_TAG_class_type && tag != DW_TAG_structure_type && tag != DW_TAG_union_type;
}

// Where `inlined` was called from: DW_AT_call_file (an index into its
// unit's file table) and DW_AT_call_line, what addr2line -i prints as the
// next frame's line. False if it does not say.
bool call_location(Dwarf_Die* inlined, std::string* file, int* line) {
  Dwarf_Attribute attr;
  Dwarf_Word index = 0, call_line = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &index) != 0 ||
      dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &call_line) != 0)
    return false;
  Dwarf_Die cu;
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (!dwarf_diecu(inlined, &cu, nullptr, nullptr) || dwarf_getsrcfiles(&cu, &files, &nfiles) != 0 || index >= nfiles)
    return false;
  const char* name = dwarf_filesrc(files, index, nullptr, nullptr);
  if (!name) return false;
  *file = name;
  *line = static_cast<int>(call_line);
  return true;
}

std::string die_function(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* name = nullptr;
  if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr)) name = dwarf_formstring(&attr);
  else if (dwarf_attr_integrate(die, DW_AT_name, &attr)) name = dwarf_formstring(&attr);
  return name ? demangle(name) : "";
}

// Tags whose DIEs can hold a function's code, or a concrete function.
bool may_hold_code(int tag) {
  return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
         tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
         tag == DW_TAG_union_type;
}

// The innermost DW_TAG_inlined_subroutine under `parent` whose code holds
// pc, into *inlined (*found set). Not dwarf_getscopes: it looks only
// inside DIEs whose code holds pc, and GCC puts the concrete DIE of a
// lambda's static invoker (_FUN) inside the class type inside the
// enclosing function's concrete DIE, whose code does not hold the
// invoker's: pc in there gave no scopes at all. So functions and blocks
// are searched whatever their code, for functions nested in them; only
// inlined instances are pruned by it.
void innermost_inlined(Dwarf_Die* parent, Dwarf_Addr pc, Dwarf_Die* inlined, bool* found) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    int tag = dwarf_tag(&child);
    if (!may_hold_code(tag)) continue;
    bool has_code = dwarf_hasattr(&child, DW_AT_low_pc) || dwarf_hasattr(&child, DW_AT_ranges);
    bool holds_pc = has_code && dwarf_haspc(&child, pc) == 1;
    if (tag == DW_TAG_inlined_subroutine) {
      if (!holds_pc) continue;
      *inlined = child;
      *found = true;
    }
    innermost_inlined(&child, pc, inlined, found);
    if (holds_pc) return;  // no other code holds it
  } while (dwarf_siblingof(&child, &child) == 0);
}

// si holds the symbol's function and pc's line; `innermost` is the
// innermost inlined instance containing pc. Steps out of artificial
// wrappers, one by one (each step: the wrapper's call location, and the
// function around it), then names the inlined function reached, if any,
// with the symbol's function as the one it is inlined in.
void call_site(Dwarf_Die* innermost, SourceInfo* si) {
  // innermost and the DIEs around it in the concrete tree: the
  // functions it is inlined in, lexical blocks, the subprogram, the unit.
  Dwarf_Die* chain = nullptr;
  int n = dwarf_getscopes_die(innermost, &chain);
  int at = 0;  // an inlined instance in chain
  while (at < n && is_artificial_wrapper(&chain[at])) {
    std::string file;
    int line = 0;
    if (!call_location(&chain[at], &file, &line)) break;
    si->file = file;
    si->line = line;
    int next = at + 1;
    while (next < n && dwarf_tag(&chain[next]) != DW_TAG_inlined_subroutine &&
           dwarf_tag(&chain[next]) != DW_TAG_subprogram)
      next++;
    at = next;
    if (at < n && dwarf_tag(&chain[at]) != DW_TAG_inlined_subroutine) break;  // the subprogram: the symbol's
  }
  if (at < n && dwarf_tag(&chain[at]) == DW_TAG_inlined_subroutine) {
    std::string name = die_function(&chain[at]);
    if (!name.empty()) {
      si->inlined_in = si->function;
      si->function = name;
    }
  }
  free(chain);
}

class DwSymbolizer : public Symbolizer {
 public:
  ~DwSymbolizer() override {
    if (dwfl_) dwfl_end(dwfl_);
  }
  bool open(const std::string& elf, std::string* error) {
    arm32_ = is_arm32_elf(elf);
    static const Dwfl_Callbacks callbacks = {nullptr, dwfl_standard_find_debuginfo, dwfl_offline_section_address,
                                             nullptr};
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
      Dwarf_Addr pc = call_pc(ra, arm32_) + bias_;
      Dwfl_Module* m = dwfl_addrmodule(dwfl_, pc);
      if (!m) continue;
      si.function = demangle(dwfl_module_addrname(m, pc));
      if (Dwfl_Line* l = dwfl_module_getsrc(m, pc)) {
        int line = 0;
        const char* file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr);
        if (file) si.file = file;
        si.line = line;
      }
      // The innermost inlined function containing pc, if any, past the
      // artificial wrappers (symbolize.h).
      Dwarf_Addr bias = 0;
      Dwarf_Die inlined;
      bool found = false;
      if (Dwarf_Die* cu = dwfl_module_addrdie(m, pc, &bias)) innermost_inlined(cu, pc - bias, &inlined, &found);
      if (found) call_site(&inlined, &si);
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
  bool arm32_ = false;
};
#endif

// binutils addr2line, batch mode through a temporary file of addresses.
// Without DWARF attributes to go by, a frame is an artificial wrapper by
// the names (symbolize.h): an inlined frame whose function's unqualified
// name ends in "_site" and whose file is under mm/include/mm/ (see
// is_wrapper for addr2line's misnamed innermost frames).
class Addr2lineSymbolizer : public Symbolizer {
 public:
  explicit Addr2lineSymbolizer(std::string elf) : elf_(std::move(elf)), arm32_(is_arm32_elf(elf_)) {}
  std::map<uint64_t, SourceInfo> lookup(const std::vector<uint64_t>& addrs) override {
    std::map<uint64_t, SourceInfo> out;
    for (uint64_t a : addrs) out[a].function = "?";
    if (addrs.empty()) return out;
    char path[] = "/tmp/kmtrace-addrs-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return out;
    std::string list;
    for (uint64_t a : addrs) {
      char buf[32];
      snprintf(buf, sizeof buf, "0x%llx\n", static_cast<unsigned long long>(a ? call_pc(a, arm32_) : 0));
      list += buf;
    }
    bool ok = write(fd, list.data(), list.size()) == static_cast<ssize_t>(list.size());
    close(fd);
    // -a: each address's frames (-i: the innermost first, then the
    // functions it is inlined in, each at the line of the call) follow a
    // line with the address, which no function or file name looks like.
    std::string cmd = "addr2line -a -f -i -C -e '" + elf_ + "' < " + path;
    FILE* p = ok ? popen(cmd.c_str(), "r") : nullptr;
    std::vector<std::vector<std::string>> answers;  // per address: function, location, function, ...
    char line[4096];
    while (p && fgets(line, sizeof line, p)) {
      line[strcspn(line, "\n")] = 0;
      if (is_address_line(line)) answers.emplace_back();
      else if (!answers.empty()) answers.back().push_back(line);
    }
    if (p) pclose(p);
    unlink(path);
    for (size_t i = 0; i < addrs.size() && i < answers.size(); i++) out[addrs[i]] = call_site(answers[i]);
    return out;
  }
  std::vector<std::pair<std::string, std::string>> compile_units() override { return {}; }
  const char* backend() const override { return "addr2line"; }

 private:
  static bool is_address_line(const char* l) {
    if (l[0] != '0' || l[1] != 'x' || !l[2]) return false;
    return strspn(l + 2, "0123456789abcdefABCDEF") == strlen(l + 2);
  }
  // "mm/include/mm/..." or ".../mm/include/mm/...".
  static bool in_mm_headers(const std::string& file) {
    return file.rfind("mm/include/mm/", 0) == 0 || file.find("/mm/include/mm/") != std::string::npos;
  }
  // frames[at] is a wrapper, and inlined (not the last). addr2line
  // sometimes names the innermost inlined frame after the function it is
  // all inlined in (the last frame's, qualified): such a frame in
  // mm/include/mm/ is taken for a wrapper too (no allocation tag is in
  // those headers).
  static bool is_wrapper(const std::vector<SourceInfo>& frames, size_t at) {
    if (at + 1 >= frames.size() || !in_mm_headers(frames[at].file)) return false;
    std::string name = unqualified_function(frames[at].function);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, "_site") == 0) return true;
    return at == 0 && name == unqualified_function(frames.back().function);
  }
  // One address's frames, as addr2line -f -i prints them, to the call site.
  static SourceInfo call_site(const std::vector<std::string>& lines) {
    std::vector<SourceInfo> frames;
    for (size_t i = 0; i + 1 < lines.size(); i += 2) {
      SourceInfo f;
      f.function = lines[i];
      const std::string& l = lines[i + 1];
      size_t colon = l.rfind(':');
      if (colon != std::string::npos && l.compare(0, 2, "??") != 0) {
        f.file = l.substr(0, colon);
        f.line = atoi(l.c_str() + colon + 1);
      }
      frames.push_back(f);
    }
    if (frames.empty()) return SourceInfo{"?", "", 0, ""};
    size_t at = 0;  // frames[at + 1] is where frames[at] is called, at its line
    while (is_wrapper(frames, at)) at++;
    SourceInfo si = frames[at];
    if (at + 1 < frames.size()) si.inlined_in = frames.back().function;
    return si;
  }
  std::string elf_;
  bool arm32_;
};

}  // namespace

std::unique_ptr<Symbolizer> Symbolizer::open(const std::string& elf, std::string* error) {
  int fd = ::open(elf.c_str(), O_RDONLY);
  if (fd < 0) {
    if (error) *error = elf + ": " + strerror(errno);
    return nullptr;
  }
  char magic[4] = {};
  bool is_elf = read(fd, magic, 4) == 4 && memcmp(magic,
                                                  "\x7f"
                                                  "ELF",
                                                  4) == 0;
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
