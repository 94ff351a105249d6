// SPDX-License-Identifier: Apache-2.0
// Reads the device tree into BootInfo, finds the interrupt controller and
// the console UART among the drivers linked in, and translates interrupt
// specifiers for drivers.
#include <kernel/arch.h>
#include <kernel/boot.h>
#include <kernel/console.h>
#include <kernel/format.h>
#include <kernel/irq.h>
#include <kernel/panic.h>
#include <kernel/poweroff.h>
#include <kernel/string.h>

BootInfo g_boot;

extern "C" const IrqChipDriver __drivers_irqchip_start[], __drivers_irqchip_end[];
extern "C" const UartDriver __drivers_uart_start[], __drivers_uart_end[];
extern "C" const PoweroffDriver __drivers_poweroff_start[], __drivers_poweroff_end[];

namespace {
// The power-off device: set once on the boot core before the others start
// (published by smp::start_secondaries' fence).
const PoweroffDriver* g_poweroff;

// What probe_irqchip found for each irq domain (irq::add_chip's index):
// the driver that decodes its specifiers and its node. Boot core only.
const IrqChipDriver* g_irq_driver[irq::kMaxDomains];
fdt::Node g_irq_node[irq::kMaxDomains] = {fdt::kNoNode, fdt::kNoNode, fdt::kNoNode, fdt::kNoNode};
static_assert(irq::kMaxDomains == 4);

int domain_of_node(fdt::Node n) {
  for (int i = 0; i < irq::domain_count(); i++)
    if (g_irq_node[i] == n) return i;
  return -1;
}

void add_reserved(uint64_t base, uint64_t size, const char* what) {
  if (!size) return;
  if (g_boot.reserved_count == kMaxReserved) {
    kprintf("dtb: more than %u reserved ranges; ignoring %s at 0x%llx\n", kMaxReserved, what,
            static_cast<unsigned long long>(base));
    return;
  }
  g_boot.reserved[g_boot.reserved_count++] = {base, size, what};
}

bool status_okay(const fdt::Tree& t, fdt::Node n) {
  fdt::Property p;
  if (!t.prop(n, "status", p) || !p.str()) return true;
  return strcmp(p.str(), "okay") == 0 || strcmp(p.str(), "ok") == 0;
}

// The interrupt parent of n: its own or an ancestor's interrupt-parent.
fdt::Node interrupt_parent(const fdt::Tree& t, fdt::Node n) {
  for (fdt::Node cur = n; cur != fdt::kNoNode; cur = t.parent(cur)) {
    fdt::Property p;
    if (t.prop(cur, "interrupt-parent", p) && p.len == 4) return t.find_phandle(p.u32());
  }
  return fdt::kNoNode;
}

// mem=SIZE[K|M|G] (as Linux's): use only the first SIZE of RAM, in
// address order; the banks above are dropped and the last one cut.
void limit_memory() {
  char buf[24];
  if (!boot::arg_value("mem", buf, sizeof buf)) return;
  uint64_t size = 0;
  const char* s = buf;
  for (; *s >= '0' && *s <= '9'; s++) size = size * 10 + static_cast<uint64_t>(*s - '0');
  if (*s == 'K' || *s == 'k') size <<= 10, s++;
  else if (*s == 'M' || *s == 'm') size <<= 20, s++;
  else if (*s == 'G' || *s == 'g') size <<= 30, s++;
  if (*s || size < kPageSize) {
    kprintf("dtb: mem=%s is not a size like 256K, 64M or 1G; ignored\n", buf);
    return;
  }
  // Sort the banks by address (few: insertion sort), then keep size bytes.
  for (unsigned i = 1; i < g_boot.mem_count; i++)
    for (unsigned j = i; j > 0 && g_boot.mem[j].base < g_boot.mem[j - 1].base; j--) {
      MemRange m = g_boot.mem[j];
      g_boot.mem[j] = g_boot.mem[j - 1];
      g_boot.mem[j - 1] = m;
    }
  uint64_t left = size;
  unsigned n = 0;
  for (; n < g_boot.mem_count && left; n++) {
    if (g_boot.mem[n].size > left) g_boot.mem[n].size = left;
    left -= g_boot.mem[n].size;
  }
  g_boot.mem_count = n;
  kprintf("dtb: mem=%s: using %llu KiB of RAM\n", buf, static_cast<unsigned long long>((size - left) >> 10));
}
}  // namespace

namespace platform {

// Fills g_boot from the DTB at dtb (already validated into g_boot.dtb).
void read_boot_info() {
  const fdt::Tree& t = g_boot.dtb;
  fdt::Property p;
  g_boot.model = t.prop(t.root(), "model", p) && p.str() ? p.str() : "unknown";
  fdt::Node chosen = t.find("/chosen");
  g_boot.bootargs = chosen != fdt::kNoNode && t.prop(chosen, "bootargs", p) && p.str() ? p.str() : "";
  // A built-in DTB's bootargs, then the firmware's or debugger's.
  static char s_bootargs[256];
  char extra[192];
  if (arch::firmware_bootargs(extra, sizeof extra)) {
    ksnprintf(s_bootargs, sizeof s_bootargs, "%s%s%s", g_boot.bootargs, g_boot.bootargs[0] ? " " : "", extra);
    g_boot.bootargs = s_bootargs;
  }

  for (fdt::Node n = t.find_device_type("memory"); n != fdt::kNoNode; n = t.find_device_type("memory", n)) {
    if (!status_okay(t, n)) continue;
    uint64_t base, size;
    for (uint32_t i = 0; t.reg(n, i, base, size); i++) {
      if (!size) continue;
      if (g_boot.mem_count == kMaxMemBanks) {
        kprintf("dtb: more than %u memory banks; ignoring 0x%llx\n", kMaxMemBanks,
                static_cast<unsigned long long>(base));
        break;
      }
      g_boot.mem[g_boot.mem_count++] = {base, size, t.name(n)};
    }
  }
  if (g_boot.mem_count == 0) panic("device tree describes no memory (no /memory node with a reg)");
  limit_memory();

  // The image: one range, or two where its RAM part (.data on) is linked
  // apart from its text (armv7m: code memory and RAM).
  auto kstart = reinterpret_cast<uintptr_t>(__kernel_start), rodata_end = reinterpret_cast<uintptr_t>(__rodata_end);
  auto data = reinterpret_cast<uintptr_t>(__data_start), kend = reinterpret_cast<uintptr_t>(__kernel_end);
  if (data >= kstart && data <= rodata_end + kPageSize) {
    add_reserved(kstart, kend - kstart, "kernel");
  } else {
    add_reserved(kstart, rodata_end - kstart, "kernel");
    add_reserved(data, kend - data, "kernel data");
  }
  add_reserved(g_boot.dtb_addr, t.total_size(), "dtb");
  for (uint32_t i = 0; i < t.memreserve_count(); i++) {
    uint64_t base, size;
    if (t.memreserve(i, base, size)) add_reserved(base, size, "memreserve");
  }
  fdt::Node rm = t.find("/reserved-memory");
  for (fdt::Node n = t.first_child(rm); n != fdt::kNoNode; n = t.next_sibling(n)) {
    uint64_t base, size;
    for (uint32_t i = 0; t.reg(n, i, base, size); i++) add_reserved(base, size, t.name(n));
  }

  fdt::Node cpus = t.find("/cpus");
  if (cpus == fdt::kNoNode) panic("device tree has no /cpus node");
  // The boot core is index 0; the others follow in DTB order.
  g_boot.cpu_hwid[0] = g_boot.boot_hwid;
  g_boot.cpu_count = 1;
  bool saw_boot = false;
  uint32_t ac = t.address_cells(cpus);
  for (fdt::Node n = t.first_child(cpus); n != fdt::kNoNode; n = t.next_sibling(n)) {
    if (!t.prop(n, "device_type", p) || !p.str() || strcmp(p.str(), "cpu") != 0) continue;
    if (!status_okay(t, n) || !arch::cpu_usable(t, n)) continue;
    uint64_t hwid;
    if (!t.prop(n, "reg", p) || !p.cells(0, ac, hwid)) continue;
    if (hwid == g_boot.boot_hwid) {
      saw_boot = true;
      continue;
    }
    if (g_boot.cpu_count == kMaxCpus) {
      g_boot.cpus_ignored++;
      continue;
    }
    g_boot.cpu_hwid[g_boot.cpu_count++] = hwid;
  }
  if (!saw_boot)
    kprintf("dtb: boot core (hwid 0x%llx) is not listed under /cpus\n",
            static_cast<unsigned long long>(g_boot.boot_hwid));
  if (g_boot.cpus_ignored)
    kprintf("dtb: %u cores beyond the limit of %u are left off\n", g_boot.cpus_ignored, kMaxCpus);
}

// Probes the interrupt controllers in the order the DTB's interrupt-parent
// chain gives. The root is a controller whose interrupt parent is itself,
// absent, or none we drive (a RISC-V hart's local controller). Then, round
// by round, every controller whose parent is already probed becomes a
// cascade behind the parent's interrupt it names (its "interrupts"), routed
// to the boot core. Nothing here knows a particular chain: the Pi's
// BCM2835 behind the BCM2836 local controller is one instance.
void probe_irqchip() {
  const fdt::Tree& t = g_boot.dtb;
  auto known = [&](fdt::Node n) {
    for (const IrqChipDriver* d = __drivers_irqchip_start; d < __drivers_irqchip_end; d++)
      if (t.is_compatible(n, d->compatible)) return true;
    return false;
  };
  for (int round = 0; round < irq::kMaxDomains; round++) {
    bool progress = false;
    for (const IrqChipDriver* d = __drivers_irqchip_start; d < __drivers_irqchip_end; d++) {
      for (fdt::Node n = t.find_compatible(d->compatible); n != fdt::kNoNode; n = t.find_compatible(d->compatible, n)) {
        if (!status_okay(t, n) || domain_of_node(n) >= 0 || irq::domain_count() == irq::kMaxDomains) continue;
        fdt::Node parent = interrupt_parent(t, n);
        bool root = parent == n || parent == fdt::kNoNode || !known(parent);
        if (root != (irq::domain_count() == 0)) continue;   // one root, first
        if (!root && domain_of_node(parent) < 0) continue;  // its parent in a later round
        int before = irq::domain_count();
        if (!d->probe(t, n) || irq::domain_count() != before + 1) continue;
        g_irq_driver[before] = d;
        g_irq_node[before] = n;
        progress = true;
        if (root) {
          kprintf("irq: %s (%s)\n", irq::chip()->name, t.name(n));
          continue;
        }
        unsigned parent_irq;
        if (!irq::from_dtb(t, n, 0, parent_irq)) {
          kprintf("irq: %s (%s) has no usable interrupt on %s: its interrupts are lost\n",
                  irq::domain_chip(before)->name, t.name(n), t.name(parent));
          continue;
        }
        irq::set_cascade(before, parent_irq, 0);
        kprintf("irq: %s (%s) cascaded on %s irq %u, irqs from %u\n", irq::domain_chip(before)->name, t.name(n),
                t.name(parent), parent_irq, irq::domain_base(before));
      }
    }
    if (!progress) break;
  }
  if (!irq::chip()) kprintf("irq: no supported interrupt controller in the device tree; no interrupts\n");
}

// The UART named by /chosen/stdout-path, else the first one a driver knows.
bool probe_console(uint64_t& base_out, fdt::Node& node_out, const UartOps*& ops_out) {
  const fdt::Tree& t = g_boot.dtb;
  fdt::Node want = fdt::kNoNode;
  fdt::Property p;
  fdt::Node chosen = t.find("/chosen");
  if (chosen != fdt::kNoNode && t.prop(chosen, "stdout-path", p) && p.str()) {
    char path[96];
    size_t i = 0;
    for (const char* s = p.str(); *s && *s != ':' && i + 1 < sizeof path; s++) path[i++] = *s;
    path[i] = 0;
    if (path[0] == '/') {
      want = t.find(path);
    } else {
      fdt::Node aliases = t.find("/aliases");
      if (aliases != fdt::kNoNode && t.prop(aliases, path, p) && p.str()) want = t.find(p.str());
    }
  }
  for (const UartDriver* d = __drivers_uart_start; d < __drivers_uart_end; d++) {
    for (fdt::Node n = t.find_compatible(d->compatible); n != fdt::kNoNode; n = t.find_compatible(d->compatible, n)) {
      if (want != fdt::kNoNode && n != want) continue;
      uint64_t base, size;
      if (!t.reg(n, 0, base, size)) continue;
      base_out = base;
      node_out = n;
      ops_out = d->ops;
      return true;
    }
  }
  if (want != fdt::kNoNode) {
    // stdout-path names a UART no driver handles: take any we know.
    for (const UartDriver* d = __drivers_uart_start; d < __drivers_uart_end; d++) {
      fdt::Node n = t.find_compatible(d->compatible);
      uint64_t base, size;
      if (n != fdt::kNoNode && t.reg(n, 0, base, size)) {
        base_out = base;
        node_out = n;
        ops_out = d->ops;
        return true;
      }
    }
  }
  return false;
}

void probe_poweroff() {
  const fdt::Tree& t = g_boot.dtb;
  for (int pass = 0; pass < 2 && !g_poweroff; pass++) {
    for (const PoweroffDriver* d = __drivers_poweroff_start; d < __drivers_poweroff_end && !g_poweroff; d++) {
      for (fdt::Node n = t.find_compatible(d->compatible); n != fdt::kNoNode; n = t.find_compatible(d->compatible, n)) {
        fdt::Property p;
        if (!status_okay(t, n) || (pass == 0 && !t.prop(n, "system-power-controller", p))) continue;
        if (d->probe(t, n)) {
          g_poweroff = d;
          break;
        }
      }
    }
  }
}

}  // namespace platform

void board_poweroff() {
  if (g_poweroff) g_poweroff->off();
}

namespace irq {

// For a controller node, its interrupt parent is the controller its
// output feeds (interrupt_parent starts at the node itself).
bool from_dtb(const fdt::Tree& t, int node, unsigned i, unsigned& out) {
  fdt::Node parent = interrupt_parent(t, node);
  int dom = domain_of_node(parent);
  if (dom < 0) return false;
  fdt::Property cells_p, ints;
  if (!t.prop(parent, "#interrupt-cells", cells_p) || cells_p.len != 4) return false;
  uint32_t nc = cells_p.u32();
  if (nc == 0 || nc > 4 || !t.prop(node, "interrupts", ints)) return false;
  if ((i + 1) * nc * 4 > ints.len) return false;
  uint32_t cells[4];
  for (uint32_t k = 0; k < nc; k++) cells[k] = ints.u32(i * nc + k);
  unsigned n;
  if (!g_irq_driver[dom]->translate(cells, nc, n)) return false;
  out = irq::domain_base(dom) + n;
  return out < irq::kMaxIrq;
}

}  // namespace irq

namespace boot {

bool arg_value(const char* key, char* buf, unsigned size) {
  size_t kl = strlen(key);
  const char* s = g_boot.bootargs ? g_boot.bootargs : "";
  while (*s) {
    while (*s == ' ') s++;
    const char* w = s;
    while (*s && *s != ' ') s++;
    size_t wl = static_cast<size_t>(s - w);
    if (wl >= kl && strncmp(w, key, kl) == 0 && (wl == kl || w[kl] == '=')) {
      if (buf && size) {
        const char* v = wl == kl ? w + kl : w + kl + 1;
        unsigned n = 0;
        while (v < s && n + 1 < size) buf[n++] = *v++;
        buf[n] = 0;
      }
      return true;
    }
  }
  return false;
}

bool has_arg(const char* word) { return arg_value(word, nullptr, 0); }

}  // namespace boot
