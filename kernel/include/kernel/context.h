// SPDX-License-Identifier: Apache-2.0
// What a core is running: the kernel's thread-equivalent, kept in each
// audited allocation and free (mm::plat::context, mm/kmem_debug.cpp) and
// printed by the debug modes' reports and `kmem log`.
//
// The kernel has no threads. What runs on a core is the boot, the shell
// (between commands), a shell command, an in-kernel test, a cross-call
// (made on behalf of what its caller ran), the idle loop, or an interrupt
// (a numbered one, the timer's, an IPI). Each is a 24-bit id: its kind in
// bits 20..23, a value below (a command's or a test's index in its linker
// section, an interrupt's number; a cross-call's value is its caller's
// kind and low 16 bits of value).
//
// Invariants: PerCpu::context is written by its own core only: set once
// when the core starts, then by Scopes, each restoring what it found when
// it ends; an interrupt's Scope nests
// inside whatever it interrupted and is gone before that resumes, so the
// word always names the innermost thing running. Another core reads it
// only through a cross-call's mailbox (post stores the caller's, released
// with the call).
#pragma once
#include <cstddef>
#include <cstdint>
#include <kernel/percpu.h>

namespace context {

enum Kind : uint32_t {
  kNone = 0,  // never set (a core before its first Scope)
  kBoot,      // kernel_main up to the shell or the test run
  kIdle,      // a secondary core's idle loop
  kShell,     // the shell, reading a line
  kCommand,   // value: the command's index in .shell_commands
  kTest,      // value: the test's index in .ktests
  kCall,      // value: the caller's kind << 16 | its value's low 16 bits
  kIrq,       // value: the interrupt's number (irq::dispatch)
  kTimer,     // the timer's interrupt
  kIpi,       // an inter-processor interrupt (a freeze, a call's wake-up)
};

constexpr uint32_t make(Kind k, uint32_t value = 0) { return uint32_t{k} << 20 | (value & 0xfffff); }
constexpr Kind kind_of(uint32_t id) { return static_cast<Kind>(id >> 20 & 15); }
constexpr uint32_t value_of(uint32_t id) { return id & 0xfffff; }
// A cross-call's id, for a call made from `from`.
constexpr uint32_t call_from(uint32_t from) { return make(kCall, uint32_t{kind_of(from)} << 16 | (from & 0xffff)); }

inline uint32_t current() { return this_cpu().context; }

// Sets this core's context for a scope (interrupts: around the handler).
class Scope {
 public:
  explicit Scope(uint32_t id) : saved_(this_cpu().context) { this_cpu().context = id; }
  ~Scope() { this_cpu().context = saved_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  uint32_t saved_;
};

// "command kmem", "test kmem_debug_...", "cross-call from command kmem",
// "irq 33 (uart)", "timer", "ipi", "boot", ... into out (len > 0).
void name(uint32_t id, char* out, size_t len);

}  // namespace context
