// SPDX-License-Identifier: Apache-2.0
// SBI calls (see sbi.h).
#include "sbi.h"
#include <kernel/format.h>

namespace sbi {
namespace {

constexpr long kEidBase = 0x10, kEidTime = 0x54494D45, kEidIpi = 0x735049, kEidRfence = 0x52464E43, kEidHsm = 0x48534D,
               kEidSrst = 0x53525354;
// Legacy (v0.1) extensions, one function each.
constexpr long kLegacySetTimer = 0x00, kLegacySendIpi = 0x04, kLegacyRemoteSfenceVma = 0x06, kLegacyShutdown = 0x08;

struct Support {
  long spec_version;  // major << 24 | minor
  long impl_id, impl_version;
  bool time, ipi, rfence, hsm, srst;
};
Support g_sbi;

Result call(long eid, long fid, unsigned long a0 = 0, unsigned long a1 = 0, unsigned long a2 = 0,
            unsigned long a3 = 0) {
  register unsigned long r0 asm("a0") = a0;
  register unsigned long r1 asm("a1") = a1;
  register unsigned long r2 asm("a2") = a2;
  register unsigned long r3 asm("a3") = a3;
  register unsigned long r6 asm("a6") = static_cast<unsigned long>(fid);
  register unsigned long r7 asm("a7") = static_cast<unsigned long>(eid);
  asm volatile("ecall" : "+r"(r0), "+r"(r1) : "r"(r2), "r"(r3), "r"(r6), "r"(r7) : "memory");
  return {static_cast<long>(r0), static_cast<long>(r1)};
}

// Legacy calls return their result in a0 only and may clobber a1.
long legacy(long eid, unsigned long a0 = 0) { return call(eid, 0, a0).error; }

bool probe(long eid) {
  Result r = call(kEidBase, 3, static_cast<unsigned long>(eid));
  return r.error == kSuccess && r.value != 0;
}

const char* impl_name(long id) {
  switch (id) {
    case 0: return "BBL";
    case 1: return "OpenSBI";
    case 2: return "Xvisor";
    case 3: return "KVM";
    case 4: return "RustSBI";
    case 5: return "Diosix";
    case 6: return "Coffer";
  }
  return "unknown firmware";
}

}  // namespace

void init() {
  Result v = call(kEidBase, 0);
  if (v.error != kSuccess) {  // a v0.1 firmware: legacy calls only
    g_sbi = {};
    g_sbi.spec_version = 1;
    g_sbi.impl_id = -1;
    return;
  }
  g_sbi.spec_version = v.value;
  g_sbi.impl_id = call(kEidBase, 1).value;
  g_sbi.impl_version = call(kEidBase, 2).value;
  g_sbi.time = probe(kEidTime);
  g_sbi.ipi = probe(kEidIpi);
  g_sbi.rfence = probe(kEidRfence);
  g_sbi.hsm = probe(kEidHsm);
  g_sbi.srst = probe(kEidSrst);
}

void describe(char* buf, unsigned size) {
  long major = (g_sbi.spec_version >> 24) & 0x7f, minor = g_sbi.spec_version & 0xffffff;
  if (g_sbi.impl_id == 1)  // OpenSBI numbers its versions major << 16 | minor
    ksnprintf(buf, size, "SBI v%ld.%ld, OpenSBI %ld.%ld%s%s%s%s%s", major, minor, g_sbi.impl_version >> 16,
              g_sbi.impl_version & 0xffff, g_sbi.hsm ? ", HSM" : "", g_sbi.ipi ? ", IPI" : "",
              g_sbi.time ? ", TIME" : "", g_sbi.rfence ? ", RFENCE" : "", g_sbi.srst ? ", SRST" : "");
  else
    ksnprintf(buf, size, "SBI v%ld.%ld, %s (impl version 0x%lx)%s%s%s%s%s", major, minor,
              g_sbi.impl_id < 0 ? "legacy firmware" : impl_name(g_sbi.impl_id),
              static_cast<unsigned long>(g_sbi.impl_version), g_sbi.hsm ? ", HSM" : "", g_sbi.ipi ? ", IPI" : "",
              g_sbi.time ? ", TIME" : "", g_sbi.rfence ? ", RFENCE" : "", g_sbi.srst ? ", SRST" : "");
}

Result hart_start(uint64_t hartid, uintptr_t start, uintptr_t opaque) {
  if (!g_sbi.hsm) return {kErrNotSupported, 0};
  return call(kEidHsm, 0, hartid, start, opaque);
}

void set_timer(uint64_t when) {
  if (g_sbi.time) call(kEidTime, 0, when);
  else legacy(kLegacySetTimer, when);
}

Result send_ipi(uint64_t hartid) {
  if (g_sbi.ipi) return call(kEidIpi, 0, 1, hartid);
  unsigned long mask = 1ul << hartid;  // legacy: a pointer to a mask from hart 0
  if (hartid >= 64) return {kErrNotSupported, 0};
  return {legacy(kLegacySendIpi, reinterpret_cast<uintptr_t>(&mask)), 0};
}

Result remote_sfence_vma(uint64_t hartid) {
  // start 0, size ~0: the whole address space.
  if (g_sbi.rfence) return call(kEidRfence, 1, 1, hartid, 0, ~0ul);
  unsigned long mask = 1ul << hartid;
  if (hartid >= 64) return {kErrNotSupported, 0};
  return {call(kLegacyRemoteSfenceVma, 0, reinterpret_cast<uintptr_t>(&mask), 0, ~0ul).error, 0};
}

Result remote_sfence_vma_mask(unsigned long mask, unsigned long base, uintptr_t start, size_t size) {
  if (g_sbi.rfence) return call(kEidRfence, 1, mask, base, start, size);
  unsigned long m = mask << base;
  if (base >= 64) return {kErrNotSupported, 0};
  return {call(kLegacyRemoteSfenceVma, 0, reinterpret_cast<uintptr_t>(&m), start, size).error, 0};
}

void system_off(bool failure) {
  if (g_sbi.srst) call(kEidSrst, 0, 0 /* shutdown */, failure ? 1 : 0);
}

bool has_srst() { return g_sbi.srst; }

void legacy_shutdown() { legacy(kLegacyShutdown); }

}  // namespace sbi
