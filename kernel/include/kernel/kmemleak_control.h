// SPDX-License-Identifier: Apache-2.0
// kmemleak in the kernel: bootargs, periodic scans and the `kmemleak`
// shell command (kernel/mm/kmemleak_control.cpp); the scanner is mm/kmemleak.cpp.
#pragma once

namespace kmemleak_boot {
// Once kmem is up: applies kmemleak=, kmemleak.scan= and kmemleak.min_age=.
void setup();
}  // namespace kmemleak_boot
