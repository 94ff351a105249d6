// SPDX-License-Identifier: Apache-2.0
// The debug modes on the console (mm/kmem_debug.h): the kmem.debug=
// bootarg, and the kmem subcommands debug, verify, log and test.
//
//   kmem debug            the configuration and every debugged cache
//   kmem verify [CACHE]   every redzone and poisoned free buffer checked
//                         (mdb's ::kmem_verify)
//   kmem log [ADDR]       the transaction log, or only the entries of the
//                         buffer containing ADDR (::kmem_log, ::bufctl -h),
//                         each with its CPU and context (the command, test,
//                         interrupt or cross-call that ran)
//   kmem test [KIND|all]  makes one misuse of each kind on a scratch cache
//                         with every debug mode on and shows its report, as
//                         `kmemleak test` does for leaks
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/kmem_debug_shell.h>
#include <kernel/shell.h>
#include <kernel/string.h>
#include <mm/kmem.h>
#include <mm/kmem_debug.h>
#include <mm/platform.h>
#include <mm/stackdepot.h>

namespace {

using ull = unsigned long long;

void print_frames(uint32_t stack, const char* indent) {
  const uintptr_t* pcs;
  unsigned n = mm::stackdepot_fetch(stack, &pcs);
  for (unsigned i = 0; i < n; i++) kprintf("%s[<0x%llx>]\n", indent, (ull)pcs[i]);
}

int cmd_debug_show() {
  mm::KmemDebugConfig c;
  mm::kmem_debug_config(c);
  char flags[48];
  mm::kmem_debug_flags_name(c.flags, flags, sizeof flags);
  kprintf("kmem.debug: %s", flags);
  if (c.flags) {
    if (c.nnames == 0) kprintf(", every cache");
    for (unsigned i = 0; i < c.nnames; i++) kprintf("%scache %s", i ? ", " : ", ", c.names[i]);
  }
  kprintf("; transaction log %u entries, %llu operations logged\n", static_cast<unsigned>(mm::kmem_log_capacity()),
          (ull)mm::kmem_log_total());
  struct Ctx {
    unsigned n;
  } ctx{0};
  mm::kmem_cache_walk(
      [](const kmem_cache_t* cp, void* arg) {
        uint32_t f = mm::kmem_cache_debug_flags(cp);
        if (!f) return;
        mm::KmemCacheStats st;
        mm::kmem_cache_stats(cp, st);
        char names[48];
        mm::kmem_debug_flags_name(f, names, sizeof names);
        kprintf("  %-24s %-28s buffer %llu, chunk %llu\n", st.name, names, (ull)st.bufsize, (ull)st.chunksize);
        static_cast<Ctx*>(arg)->n++;
      },
      &ctx);
  kprintf("%u debugged caches\n", ctx.n);
  return 0;
}

struct FindCache {
  const char* name;
  kmem_cache_t* found;
};

int cmd_verify(const char* cmd, int argc, char** argv) {
  if (argc > 3) return shell::usage_error(cmd, "usage: kmem verify [CACHE]");
  kmem_cache_t* cp = nullptr;
  if (argc == 3) {
    FindCache f{argv[2], nullptr};
    mm::kmem_cache_walk(
        [](const kmem_cache_t* c, void* arg) {
          auto* f = static_cast<FindCache*>(arg);
          mm::KmemCacheStats st;
          mm::kmem_cache_stats(c, st);
          if (strcmp(st.name, f->name) == 0) f->found = const_cast<kmem_cache_t*>(c);
        },
        &f);
    if (!f.found) return shell::usage_error(cmd, "no cache named '%s' (slabinfo lists them)", argv[2]);
    if (!mm::kmem_cache_debug_flags(f.found))
      return shell::usage_error(cmd, "'%s' is not debugged: boot with kmem.debug=...,cache=%s", argv[2], argv[2]);
    cp = f.found;
  }
  uint64_t checked = 0;
  uint64_t bad = mm::kmem_verify(cp, &checked);
  kprintf("kmem verify: %llu buffers checked, %llu corrupt\n", (ull)checked, (ull)bad);
  return bad ? 1 : 0;
}

void print_log_entry(const mm::KmemLogEntry& e, void*) {
  char who[64];
  mm::plat::context_name(e.context, who, sizeof who);
  kprintf("%8llu  cpu %-2u tick %-8u %-5s 0x%llx  %s  by %s\n", (ull)e.seq, static_cast<unsigned>(e.cpu),
          static_cast<unsigned>(e.ticks), e.alloc ? "alloc" : "free", (ull)e.buffer, e.cache, who);
  if (e.ncontents) {
    kprintf("          contents:");
    for (unsigned i = 0; i < e.ncontents; i++) kprintf(" %02x", e.contents[i]);
    kprintf("\n");
  }
  print_frames(e.stack, "          ");
}

int cmd_log(const char* cmd, int argc, char** argv) {
  if (argc > 3) return shell::usage_error(cmd, "usage: kmem log [ADDR]");
  uint64_t addr = 0;
  if (argc == 3 && (!shell::parse_u64(argv[2], addr) || addr == 0 || addr > UINTPTR_MAX))
    return shell::usage_error(cmd, "'%s' is not an address", argv[2]);
  if (!mm::kmem_log_capacity()) {
    kprintf("kmem log: no transaction log (no cache is audited: boot with kmem.debug=audit[,cache=NAME])\n");
    return 0;
  }
  uint64_t n = mm::kmem_log_walk(static_cast<uintptr_t>(addr), print_log_entry, nullptr);
  kprintf("%llu entries%s (of the last %u operations; %llu logged since boot)\n", (ull)n,
          addr ? " for that buffer" : "", static_cast<unsigned>(mm::kmem_log_capacity()), (ull)mm::kmem_log_total());
  return 0;
}

// --- kmem test: each misuse once, on a scratch cache -------------------------------------

struct Misuse {
  const char* name;
  void (*run)(kmem_cache_t* cp, kmem_cache_t* other);
};

// Each makes its misuse and leaves the cache with no live buffer.
const Misuse kMisuses[] = {
    {"overrun",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
       p[40] = 0x41;  // one byte past the 40 asked for
       p[41] = 0x41;
       kmem_cache_free(cp, p);
     }},
    {"long-overrun",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       // Two neighbours, the lower one overrun by 100 bytes: over its tag
       // and into the next buffer. kmem verify finds it, then the free.
       mm::KmemCacheStats st;
       mm::kmem_cache_stats(cp, st);
       uint8_t* v[8];
       uint8_t* p = nullptr;
       for (auto& b : v) b = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
       for (uint8_t* a : v)
         for (uint8_t* b : v)
           if (b == a + st.chunksize) p = a;
       if (p) memset(p + 40, 0x43, 100);
       else kprintf("kmem test: no two neighbours among 8 buffers\n");
       uint64_t checked = 0;
       uint64_t bad = mm::kmem_verify(cp, &checked);
       kprintf("kmem test: kmem verify: %llu buffers checked, %llu corrupt\n", (ull)checked, (ull)bad);
       for (uint8_t* b : v) kmem_cache_free(cp, b);
     }},
    {"underrun",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
       p[-1] = 0x44;  // the byte before the buffer
       kmem_cache_free(cp, p);
     }},
    {"write-after-free",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       auto* p = static_cast<uint8_t*>(kmem_cache_alloc(cp, KM_SLEEP));
       kmem_cache_free(cp, p);
       p[8] = 0;                                  // into the freed buffer
       void* q = kmem_cache_alloc(cp, KM_SLEEP);  // the same buffer: reported here
       kmem_cache_free(cp, q);
     }},
    {"double-free",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       void* p = kmem_cache_alloc(cp, KM_SLEEP);
       void* q = kmem_cache_alloc(cp, KM_SLEEP);
       kmem_cache_free(cp, p);
       kmem_cache_free(cp, q);
       kmem_cache_free(cp, p);
     }},
    {"interior",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       auto* p = static_cast<char*>(kmem_cache_alloc(cp, KM_SLEEP));
       kmem_cache_free(cp, p + 16);
       kmem_cache_free(cp, p);
     }},
    {"wrong-cache",
     [](kmem_cache_t* cp, kmem_cache_t* other) {
       void* p = kmem_cache_alloc(other, KM_SLEEP);
       kmem_cache_free(cp, p);
       kmem_cache_free(other, p);
     }},
    {"wrong-size",
     [](kmem_cache_t*, kmem_cache_t*) {
       void* p = kmem_alloc(40, KM_SLEEP);
       kmem_free(p, 2000);  // another size class
       kmem_free(p, 40);
     }},
    {"stranger",
     [](kmem_cache_t* cp, kmem_cache_t*) {
       static uint64_t not_kmem[4];
       kmem_cache_free(cp, &not_kmem[1]);
     }},
    {"destroy-live",
     [](kmem_cache_t*, kmem_cache_t*) {
       kmem_cache_t* c =
           kmem_cache_create("kmem_test_live", 32, 0, nullptr, nullptr, nullptr, nullptr, nullptr, KMC_AUDIT);
       void* p = kmem_cache_alloc(c, KM_SLEEP);
       kmem_cache_destroy(c);  // refused
       kmem_cache_free(c, p);
       kmem_cache_destroy(c);
     }},
};

int cmd_test(const char* cmd, int argc, char** argv) {
  const char* usage =
      "usage: kmem test overrun|long-overrun|underrun|write-after-free|double-free|interior|wrong-cache|wrong-size|"
      "stranger|destroy-live|all";
  if (argc != 3) return shell::usage_error(cmd, "%s", usage);
  bool all = strcmp(argv[2], "all") == 0;
  bool known = all;
  for (const Misuse& m : kMisuses) known |= strcmp(argv[2], m.name) == 0;
  if (!known) return shell::usage_error(cmd, "unknown misuse '%s'; %s", argv[2], usage);
  kmem_cache_t* cp = kmem_cache_create("kmem_test_debug", 40, 0, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       KMC_REDZONE | KMC_DEADBEEF | KMC_AUDIT | KMC_CONTENTS);
  kmem_cache_t* other = kmem_cache_create("kmem_test_other", 40, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  if (!cp || !other) {
    kprintf("kmem test: could not create the scratch caches\n");
    if (cp) kmem_cache_destroy(cp);
    if (other) kmem_cache_destroy(other);
    return 1;
  }
  uint64_t before = mm::error_count();
  unsigned ran = 0;
  for (const Misuse& m : kMisuses) {
    if (!all && strcmp(argv[2], m.name) != 0) continue;
    kprintf("kmem test: %s\n", m.name);
    uint64_t was = mm::error_count();
    m.run(cp, other);
    kprintf("kmem test: %s: %llu report(s)\n", m.name, (ull)(mm::error_count() - was));
    ran++;
  }
  // One buffer held, so that the cache has a slab to check (a destroy
  // among the misuses gives every cache's empty slabs back).
  void* held = kmem_cache_alloc(cp, KM_SLEEP);
  uint64_t checked = 0;
  bool clean = mm::kmem_verify(cp, &checked) == 0;
  kmem_cache_free(cp, held);
  bool destroyed = kmem_cache_destroy(cp) && kmem_cache_destroy(other);
  kprintf(
      "kmem test: %u misuse(s), %llu report(s); afterwards the caches verify %s (%llu buffers checked) and %s "
      "destroyed\n",
      ran, (ull)(mm::error_count() - before), clean ? "clean" : "CORRUPT", (ull)checked,
      destroyed ? "are" : "could NOT be");
  return clean && destroyed ? 0 : 1;
}

}  // namespace

namespace kmem_debug_shell {

int command(const char* cmd, int argc, char** argv) {
  if (strcmp(argv[1], "debug") == 0) {
    if (argc != 2)
      return shell::usage_error(cmd, "usage: kmem debug (the debug modes are chosen at boot: kmem.debug=)");
    return cmd_debug_show();
  }
  if (strcmp(argv[1], "verify") == 0) return cmd_verify(cmd, argc, argv);
  if (strcmp(argv[1], "log") == 0) return cmd_log(cmd, argc, argv);
  if (strcmp(argv[1], "test") == 0) return cmd_test(cmd, argc, argv);
  return -1;
}

void print_trail(const void* addr) {
  mm::KmemTrail t;
  if (!mm::kmem_debug_trail(addr, t)) return;
  kprintf("  %s buffer 0x%llx, last asked for %llu bytes\n", t.allocated ? "allocated" : "free", (ull)t.buffer,
          (ull)t.size);
  if (t.alloc.valid) mm::print_audit("allocated", t.alloc);
  if (t.free.valid) mm::print_audit("freed", t.free);
}

// kmem.debug=FLAGS[,cache=NAME...][,log=N], before kmem_init.
void setup() {
  char buf[160];
  if (!boot::arg_value("kmem.debug", buf, sizeof buf)) return;
  mm::KmemDebugConfig c;
  const char* why = "";
  if (!mm::kmem_debug_parse(buf, c, &why)) {
    kprintf("mm: kmem.debug=%s: %s; debugging stays off\n", buf, why);
    return;
  }
  mm::kmem_debug_configure(c);
  char names[48];
  mm::kmem_debug_flags_name(c.flags, names, sizeof names);
  kprintf("mm: debug modes %s for %s%s\n", names, c.nnames ? "the named caches" : "every cache",
          c.nnames ? " (kmem debug lists them)" : "");
}

}  // namespace kmem_debug_shell
