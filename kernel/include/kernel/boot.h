// SPDX-License-Identifier: Apache-2.0
// What the kernel learnt at boot: RAM, reserved ranges, cores, bootargs.
// Filled from the device tree by kernel/platform.cpp; nothing here is
// hard-coded per board.
#pragma once
#include <cstdint>
#include <kernel/config.h>
#include <kernel/fdt.h>

struct MemRange {
  uint64_t base = 0;
  uint64_t size = 0;
  const char* what = nullptr;  // for reserved ranges: "dtb", "kernel", "memreserve", node name
};

struct BootInfo {
  fdt::Tree dtb;
  uintptr_t dtb_addr = 0;
  MemRange mem[kMaxMemBanks];
  unsigned mem_count = 0;
  MemRange reserved[kMaxReserved];
  unsigned reserved_count = 0;
  uint64_t cpu_hwid[kMaxCpus] = {};
  unsigned cpu_count = 0;
  unsigned cpus_ignored = 0;  // listed in the DTB beyond kMaxCpus
  uint64_t boot_hwid = 0;
  const char* bootargs = nullptr;
  const char* model = nullptr;
};

extern BootInfo g_boot;

// The most of a DTB the kernel reads (and maps at boot when it cannot tell
// the DTB's size).
constexpr uint64_t kMaxDtbSize = 2 << 20;

// Linker-script symbols bounding the kernel image and its sections.
extern "C" char __kernel_start[], __text_start[], __text_end[], __rodata_start[], __rodata_end[], __data_start[],
    __data_end[], __bss_start[], __bss_end[], __kernel_end[];

namespace boot {
// True if the bootargs contain word (as "word" or "word=...").
bool has_arg(const char* word);
// The value of "key=value" in bootargs, copied to buf; false if absent.
bool arg_value(const char* key, char* buf, unsigned size);
}  // namespace boot
