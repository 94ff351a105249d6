// Kernel-wide limits. Board facts do not live here: they come from the DTB.
#pragma once
#include <cstddef>
#include <kernel/stack_layout.h>

constexpr unsigned kMaxCpus = 8;             // virt's GICv2 serves at most 8 cores
constexpr size_t kPageSize = 4096;
constexpr size_t kKernelStackSize = KSTACK_SIZE;  // see kernel/stack_layout.h
constexpr unsigned kTimerHz = 100;           // periodic tick per core
constexpr unsigned kMaxMemBanks = 16;
constexpr unsigned kMaxReserved = 32;
