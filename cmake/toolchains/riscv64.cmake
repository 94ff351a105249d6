# SPDX-License-Identifier: Apache-2.0
# RISC-V 64, freestanding, with Debian's riscv64-linux-gnu cross compiler
# (riscv64-unknown-elf-g++ ships no C++ headers).
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_OBJCOPY riscv64-linux-gnu-objcopy CACHE FILEPATH "")
set(CMAKE_ADDR2LINE riscv64-linux-gnu-addr2line CACHE FILEPATH "")
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
