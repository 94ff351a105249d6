#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/uboot-boot: the image started by U-Boot (Debian's u-boot-qemu,
# or u-boot-rpi on raspi3b) as a board's bootloader starts it, from the
# boot.scr on a disk or SD card that tools/make-sdcard writes: at U-Boot's default ${kernel_addr_r}, and, for
# the arches whose boot protocol lets a loader put the image anywhere, at
# addresses where the kernel must move itself to its link address first:
#   arm:   below the link address, overlapping it (RAM + 32 KiB, a common
#          zImage address), and so close below that a backward copy would
#          overwrite the code doing it (two moves); above it, overlapping
#          (two moves); the same with the DTB where the kernel's .bss and
#          stacks will be (the DTB moves too); far above;
#   arm64 (virt and raspi3b): a higher 2 MiB base than RAM's (booti keeps it there once the
#          header's placement bit says it may);
#   riscv64: another 2 MiB-aligned address (booti keeps it there once the
#          header's text_offset says so).
# Each with the DTB where the kernel's .bss and stacks will be, too.
# Each boot must reach the shell, list every core, print meminfo (the DTB
# reserved where the kernel moved it, outside the kernel) and power off
# with status 0.
#   uboot-test.sh QEMU_RUN BOARD BUILD_DIR CPUS
set -uo pipefail
[[ $# -eq 4 ]] || { echo "usage: uboot-test.sh QEMU_RUN BOARD BUILD_DIR CPUS" >&2; exit 2; }
run=$1 board=$2 build=$3 cpus=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fails=0 total=0

# boot NAME [qemu-run options...]
boot() {
  local name=$1; shift
  total=$((total + 1))
  printf 'cpus\nmeminfo\npoweroff\n' | "$run" "$board" --build-dir "$build" --timeout 60 "$@" >"$log" 2>&1
  local st=$? why=
  sed -i 's/\r$//' "$log"
  grep -q '^Starting kernel' "$log" || why="U-Boot did not start the kernel"
  [[ -z $why ]] && ! grep -q "^$cpus of $cpus cpus online" "$log" && why="not '$cpus of $cpus cpus online'"
  [[ -z $why && $(grep -c '^cpu [0-9]*: hwid .* online' "$log") -ne $cpus ]] && why="cpus did not list $cpus online cores"
  if [[ -z $why ]]; then
    # The DTB's reserved range lies outside the kernel's.
    local k d
    k=$(awk '/^  reserved .* kernel$/ {print $2}' "$log")
    d=$(awk '/^  reserved .* dtb$/ {print $2}' "$log")
    if [[ -z $k || -z $d ]]; then
      why="meminfo lists no kernel or dtb range"
    else
      local ks=$((${k%-*})) ke=$((0x${k#*-0x})) ds=$((${d%-*})) de=$((0x${d#*-0x}))
      (( de < ks || ds > ke )) || why="the DTB ($d) lies inside the kernel ($k)"
    fi
  fi
  [[ -z $why && $st -ne 0 ]] && why="exit status $st"
  if [[ -z $why ]]; then
    echo "ok: $name"
  else
    echo "FAILED: $name: $why"
    echo "--- console ---"; cat "$log"; echo "---"
    fails=$((fails + 1))
  fi
}

boot "at U-Boot's kernel_addr_r" --uboot
case $board in
  qemu-virt-arm)
    boot "at 0x40008000, overlapping below the link address" --uboot-addr 0x40008000
    boot "at 0x4000ff00, so close below that the copy would reach its own code (two moves)" --uboot-addr 0x4000ff00
    boot "at 0x40018000, overlapping above it (two moves)" --uboot-addr 0x40018000
    boot "at 0x40018000 with the DTB at 0x400a0000, in the kernel's .bss" --uboot-addr 0x40018000 --uboot-fdt-addr 0x400a0000
    boot "at 0x47f00000, far above" --uboot-addr 0x47f00000 ;;
  qemu-virt-arm64)
    boot "at the 2 MiB base 0x48000000" --uboot-addr 0x48000000
    boot "at the 2 MiB base 0x40200000 with the DTB at 0x40100000, in the kernel's .bss" --uboot-addr 0x40200000 --uboot-fdt-addr 0x40100000 ;;
  raspi3b)
    boot "at the 2 MiB base 0x1000000" --uboot-addr 0x1000000
    boot "at the 2 MiB base 0x200000 with the DTB at 0x100000, in the kernel's .bss" --uboot-addr 0x200000 --uboot-fdt-addr 0x100000 ;;
  qemu-virt-riscv64)
    boot "at 0x80400000" --uboot-addr 0x80400000
    boot "at 0x90000000" --uboot-addr 0x90000000
    boot "at 0x80400000 with the DTB at 0x80300000, in the kernel's .bss" --uboot-addr 0x80400000 --uboot-fdt-addr 0x80300000 ;;
esac
echo "$((total - fails)) passed, $fails failed"
exit $((fails ? 1 : 0))
