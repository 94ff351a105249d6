// Allocation profiling on the console (mm/alloc_tag.h): `allocinfo`, Linux's
// /proc/allocinfo, and `sysctl vm.mem_profiling`, its switch.
//
// Bootarg: sysctl.vm.mem_profiling=0|1|never (default 0). never: slabs get
// no tag references and the switch cannot be turned on. Default off: while
// on, every allocation and free takes the allocators' hooked path
// (README, "Allocation profiling", has the measured cost).
#include <kernel/allocinfo.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/shell.h>
#include <kernel/string.h>
#include <mm/alloc_tag.h>

namespace {

const char* mode_name(mm::ProfMode m) {
  switch (m) {
    case mm::ProfMode::kNever: return "never";
    case mm::ProfMode::kOff: return "0";
    case mm::ProfMode::kOn: return "1";
  }
  return "?";
}

int cmd_allocinfo(int argc, char** argv) {
  const char* usage = "usage: allocinfo [--top N] [--sort bytes|calls] [--nonzero]";
  mm::AllocInfoOptions opt;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--nonzero") == 0) {
      opt.nonzero = true;
    } else if (strcmp(a, "--top") == 0) {
      uint64_t n;
      if (i + 1 >= argc) return shell::usage_error(argv[0], "--top needs a number of lines (%s)", usage);
      if (!shell::parse_u64(argv[++i], n) || n == 0 || n > 100000)
        return shell::usage_error(argv[0], "--top %s: expected a number of lines from 1 to 100000", argv[i]);
      opt.top = static_cast<size_t>(n);
    } else if (strcmp(a, "--sort") == 0) {
      if (i + 1 >= argc) return shell::usage_error(argv[0], "--sort needs bytes or calls (%s)", usage);
      const char* by = argv[++i];
      if (strcmp(by, "bytes") == 0) opt.sort = mm::AllocSort::kBytes;
      else if (strcmp(by, "calls") == 0) opt.sort = mm::AllocSort::kCalls;
      else return shell::usage_error(argv[0], "--sort %s: expected bytes or calls", by);
    } else {
      return shell::usage_error(argv[0], "unknown argument '%s' (%s)", a, usage);
    }
  }
  if (mm::prof_mode() != mm::ProfMode::kOn)
    kprintf("allocinfo: profiling is %s (sysctl vm.mem_profiling 1 counts from now on)\n",
            mm::prof_mode() == mm::ProfMode::kNever ? "never (booted with sysctl.vm.mem_profiling=never)" : "off");
  bool ok = mm::allocinfo_print(opt, [](const char* line, void*) { kprintf("%s", line); }, nullptr);
  if (!ok) {
    kprintf("allocinfo: no memory for the counters of %zu tags, or another allocinfo is printing\n",
            mm::alloc_tag_count());
    return 1;
  }
  uint64_t untagged = mm::prof_untagged_frees();
  if (untagged) kprintf("# %llu frees of objects allocated while profiling was off\n", (unsigned long long)untagged);
  return 0;
}

int cmd_sysctl(int argc, char** argv) {
  const char* usage = "usage: sysctl vm.mem_profiling [0|1]";
  if (argc < 2 || argc > 3) return shell::usage_error(argv[0], "%s", usage);
  if (strcmp(argv[1], "vm.mem_profiling") != 0)
    return shell::usage_error(argv[0], "unknown key '%s': the one key is vm.mem_profiling", argv[1]);
  if (argc == 2) {
    kprintf("vm.mem_profiling = %s\n", mode_name(mm::prof_mode()));
    return 0;
  }
  const char* v = argv[2];
  if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
    return shell::usage_error(argv[0], "vm.mem_profiling %s: expected 0 or 1", v);
  if (mm::prof_mode() == mm::ProfMode::kNever)
    return shell::usage_error(argv[0], "vm.mem_profiling is read-only: booted with sysctl.vm.mem_profiling=never");
  if (!mm::prof_set(v[0] == '1')) {
    kprintf("sysctl: vm.mem_profiling could not be switched (no memory for the counters, or the hooks)\n");
    return 1;
  }
  kprintf("vm.mem_profiling = %s\n", mode_name(mm::prof_mode()));
  return 0;
}

}  // namespace

namespace allocinfo_boot {
void setup() {
  char buf[16];
  if (!boot::arg_value("sysctl.vm.mem_profiling", buf, sizeof buf)) return;
  if (strcmp(buf, "never") == 0) mm::prof_boot_mode(mm::ProfMode::kNever);
  else if (strcmp(buf, "1") == 0) mm::prof_boot_mode(mm::ProfMode::kOn);
  else if (strcmp(buf, "0") == 0) mm::prof_boot_mode(mm::ProfMode::kOff);
  else kprintf("mm: sysctl.vm.mem_profiling=%s: expected 0, 1 or never; 0\n", buf);
}

void start() {
  if (mm::prof_mode() != mm::ProfMode::kOn) return;
  mm::prof_boot_mode(mm::ProfMode::kOff);  // prof_set says on once it is
  if (mm::prof_set(true)) kprintf("mm: allocation profiling on (%zu call sites)\n", mm::alloc_tag_count());
  else kprintf("mm: allocation profiling could not be switched on\n");
}
}  // namespace allocinfo_boot

SHELL_COMMAND(allocinfo, "live bytes and objects per allocation call site: allocinfo [--top N] [--sort bytes|calls] "
              "[--nonzero]", cmd_allocinfo);
SHELL_COMMAND(sysctl, "read or set allocation profiling: sysctl vm.mem_profiling [0|1]", cmd_sysctl);
