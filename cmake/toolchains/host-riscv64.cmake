# SPDX-License-Identifier: Apache-2.0
# The host library (mm, trace) for a RISC-V 64 Linux host, built with
# Debian's riscv64-linux-gnu cross compiler (preset host-riscv64: build only,
# nothing runs). No CMAKE_SYSTEM_NAME on purpose: CMake then keeps
# CMAKE_CROSSCOMPILING off, and mm/ and trace/ build their host libraries
# rather than joining a kernel.
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
