// SPDX-License-Identifier: Apache-2.0
/* Debian's riscv64-linux-gnu C++ headers reach glibc's <gnu/stubs.h>, which
 * includes this file for the soft-float ABI (lp64) the kernel uses; Debian
 * ships only the lp64d one. It would list glibc functions that are stubs;
 * a freestanding kernel calls none of them, so it is empty. */
