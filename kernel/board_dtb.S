/* SPDX-License-Identifier: Apache-2.0 */
// The board's device tree, compiled from boards/<name>/<DTS> by dtc at
// build time (kernel/CMakeLists.txt), for a board with no bootloader to
// pass one. The arch's entry hands g_board_dtb to kernel_main.
.section .rodata.fdt, "a"
.balign 8
.global g_board_dtb
g_board_dtb:
    .incbin "board.dtb"
.balign 8
