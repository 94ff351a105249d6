// SPDX-License-Identifier: Apache-2.0
// Kernel-wide limits. Board facts do not live here: they come from the DTB.
#pragma once
#include <cstddef>
#include <kernel/stack_layout.h>

// Cores: virt's GICv2 serves at most 8. An arch of one core (armv7m) sets
// MAGPIE_MAX_CPUS=1, which shrinks every per-CPU array.
#ifndef MAGPIE_MAX_CPUS
#define MAGPIE_MAX_CPUS 8
#endif
constexpr unsigned kMaxCpus = MAGPIE_MAX_CPUS;
constexpr size_t kPageSize = 4096;
// vmem arenas at once (mm/vmem.cpp keeps a slot of ~600 bytes for each, in
// .data): an arch for small boards (armv7m) sets fewer.
#ifndef MAGPIE_MAX_ARENAS
#define MAGPIE_MAX_ARENAS 64
#endif
constexpr unsigned kMaxVmemArenas = MAGPIE_MAX_ARENAS;
constexpr size_t kKernelStackSize = KSTACK_SIZE;  // see kernel/stack_layout.h
constexpr unsigned kTimerHz = 100;                // periodic tick per core
constexpr unsigned kMaxMemBanks = 16;
constexpr unsigned kMaxReserved = 32;
