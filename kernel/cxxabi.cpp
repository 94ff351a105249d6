// SPDX-License-Identifier: Apache-2.0
// The few C++ runtime hooks a freestanding kernel must provide. The kernel
// has no exceptions, no RTTI and no heap behind operator new: any attempt to
// use them is a bug and panics.
#include <cstddef>
#include <kernel/panic.h>

extern "C" {
void* __dso_handle = nullptr;
int __cxa_atexit(void (*)(void*), void*, void*) { return 0; }  // kernel objects live forever
int __aeabi_atexit(void*, void (*)(void*), void*) { return 0; }
void __cxa_pure_virtual() { panic("pure virtual function called"); }
// Static locals are initialised on the boot core before secondaries start.
int __cxa_guard_acquire(void* g) { return !*reinterpret_cast<char*>(g); }
void __cxa_guard_release(void* g) { *reinterpret_cast<char*>(g) = 1; }
void __cxa_guard_abort(void*) {}
}

void operator delete(void*) noexcept { panic("operator delete called in the kernel"); }
void operator delete(void*, size_t) noexcept { panic("operator delete called in the kernel"); }
