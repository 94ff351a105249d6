# SPDX-License-Identifier: Apache-2.0
# The host library (mm, trace) for an AArch64 Linux host, built with Debian's
# aarch64-linux-gnu cross compiler (preset host-aarch64: build only, nothing
# runs). No CMAKE_SYSTEM_NAME on purpose: CMake then keeps
# CMAKE_CROSSCOMPILING off, and mm/ and trace/ build their host libraries
# rather than joining a kernel.
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
