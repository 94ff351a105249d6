#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks what tools/make-sdcard writes, with mtools (no root, no loop
# device): an MBR with one bootable FAT32 (LBA) partition that fsck.fat
# finds clean, holding the kernel image byte for byte and:
#   raspi3b: the firmware, config.txt with the lines the board needs, the
#     DTB; with --uboot, U-Boot as the firmware's kernel and a boot.scr;
#   a board U-Boot starts (the virt boards): a boot.scr, as written for
#     U-Boot's default load address, for --load-addr (the header patched so
#     that booti keeps the image there, on arm64 and riscv64) and for
#     --fdt-addr (the DTB moved and left there).
# Options that cannot apply are refused with a message, and no image.
# Usage: sdcard-test.sh MAKE_SDCARD BOARD BUILD_DIR
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: sdcard-test.sh MAKE_SDCARD BOARD BUILD_DIR" >&2; exit 2; }
make_sdcard=$1 board=$2 build=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=/dev/null
source "$root/boards/$board/board.conf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 total=0
check() {
  total=$((total + 1))
  if [[ $2 -eq 0 ]]; then echo "ok: $1"; else echo "FAILED: $1"; fails=$((fails + 1)); fi
}

# card NAME [make-sdcard options...]: writes $work/NAME.img, checks its
# partition table and file system, and that the image on it is the build's.
card() {
  local name=$1; shift
  "$make_sdcard" "$board" "$work/$name.img" --build-dir "$build" "$@" >/dev/null ||
    { echo "FAILED: make-sdcard $*"; exit 1; }
  python3 - "$work/$name.img" <<'PY'
import struct, sys
mbr = open(sys.argv[1], "rb").read(512)
boot, ptype, start, count = mbr[446], mbr[450], *struct.unpack("<II", mbr[454:462])
assert mbr[510:512] == b"\x55\xaa", "no MBR signature"
assert boot == 0x80 and ptype == 0x0c and start == 2048 and count > 0, (boot, ptype, start, count)
PY
  check "$name: MBR: one bootable FAT32 (LBA) partition at 1 MiB" $?
  dd if="$work/$name.img" of="$work/part.img" bs=1M skip=1 status=none
  fsck.fat -n "$work/part.img" >"$work/fsck.log" 2>&1
  check "$name: fsck.fat finds the file system clean" $?
  rm -f "$work/part.img" "$work/$IMAGE"
  mcopy -i "$work/$name.img@@1M" "::$IMAGE" "$work/" && cmp -s "$work/$IMAGE" "$build/$IMAGE"
  check "$name: $IMAGE is the build's" $?
}
files_of() { mdir -i "$work/$1.img@@1M" -b :: | sed 's|^::/||' | sort | tr '\n' ' '; }
# The script in a card's boot.scr: past the 64-byte image header and the
# 8-byte length table.
script_of() {
  rm -f "$work/boot.scr"
  mcopy -i "$work/$1.img@@1M" ::boot.scr "$work/" && tail -c +73 "$work/boot.scr"
}
# has_lines NAME LINE...: the card's boot.scr has each line, exactly.
has_lines() {
  local name=$1 script ok=0; shift
  script=$(script_of "$name")
  for line in "$@"; do
    grep -qxF "$line" <<<"$script" || { echo "$name: boot.scr lacks: $line"; ok=1; }
  done
  return $ok
}

if [[ $board == raspi3b ]]; then
  card sd
  [[ $(files_of sd) == "bcm2837-rpi-3-b.dtb bootcode.bin config.txt fixup.dat kernel8.img start.elf " ]]
  check "sd: files: $(files_of sd)" $?
  mtype -i "$work/sd.img@@1M" ::config.txt >"$work/config.txt"
  ok=0
  for line in arm_64bit=1 kernel=kernel8.img kernel_address=0x80000 enable_uart=1 upstream_kernel=1 \
      device_tree=bcm2837-rpi-3-b.dtb; do
    grep -qx "$line" "$work/config.txt" || { echo "config.txt lacks $line"; ok=1; }
  done
  check "sd: config.txt" $ok
  mcopy -i "$work/sd.img@@1M" ::bcm2837-rpi-3-b.dtb ::start.elf "$work/"
  cmp -s "$work/bcm2837-rpi-3-b.dtb" "$build/bcm2837-rpi-3-b.dtb"
  check "sd: the DTB is the build's" $?
  [[ $(stat -c %s "$work/start.elf") -gt 1000000 ]]
  check "sd: start.elf is the firmware (over 1 MB)" $?

  # The U-Boot card: the firmware starts U-Boot, whose distro boot runs boot.scr.
  card ub --uboot --append "test kmemtrace=on"
  [[ $(files_of ub) == "bcm2837-rpi-3-b.dtb boot.scr bootcode.bin config.txt fixup.dat kernel8.img start.elf u-boot-rpi3.bin " ]]
  check "ub: files: $(files_of ub)" $?
  mtype -i "$work/ub.img@@1M" ::config.txt | grep -qx kernel=u-boot-rpi3.bin
  check "ub: config.txt starts U-Boot" $?
  has_lines ub 'load ${devtype} ${devnum}:${distro_bootpart} ${kernel_addr_r} kernel8.img' \
    'setenv bootargs "test kmemtrace=on"' 'booti ${kernel_addr_r} - ${fdt_addr}'
  check "ub: boot.scr loads kernel8.img, sets bootargs, runs booti with the firmware's DTB" $?
  bad=("--append test")
else
  # A board whose firmware is U-Boot: the card holds the image and boot.scr.
  card ub --append "test kmemtrace=on"
  [[ $(files_of ub) == "boot.scr $IMAGE " ]]
  check "ub: files: $(files_of ub)" $?
  has_lines ub "load \${devtype} \${devnum}:\${distro_bootpart} \${kernel_addr_r} $IMAGE" \
    'setenv bootargs "test kmemtrace=on"' "$UBOOT_BOOT \${kernel_addr_r} - \${fdtcontroladdr}"
  check "ub: boot.scr loads $IMAGE at kernel_addr_r, sets bootargs, runs $UBOOT_BOOT" $?
  # Another load address: booti made to keep the image there.
  case $ARCH in
    arm) addr=0x40008000 fdt=0x400a0000 patch=() ;;
    arm64) addr=0x48000000 fdt=0x40100000 patch=("mw.l 0x48000018 0xa") ;;
    riscv64) addr=0x80400000 fdt=0x80300000 patch=("mw.l 0x80400008 0x400000") ;;
  esac
  card at --load-addr "$addr" --fdt-addr "$fdt"
  has_lines at "load \${devtype} \${devnum}:\${distro_bootpart} $addr $IMAGE" "${patch[@]}" \
    'setenv fdt_high 0xffffffffffffffff' 'fdt addr ${fdtcontroladdr}' 'fdt header get fdtsize totalsize' \
    "fdt move \${fdtcontroladdr} $fdt \${fdtsize}" "$UBOOT_BOOT $addr - $fdt"
  check "at: boot.scr loads at $addr${patch:+ (${patch[*]})}, moves the DTB, runs $UBOOT_BOOT there" $?
  bad=("--load-addr 0x12g" "--fdt-addr 1234" "--fdt-addr 0x40100004" "--load-addr 0x2")
fi

# Options that cannot apply are refused, with a message, and no image.
bad+=("--uboot --load-addr 12" "--uboot --append a\"b" "--uboot --append a\$b" "--frobnicate")
ok=0
for b in "${bad[@]}"; do
  rm -f "$work/bad.img"
  # shellcheck disable=SC2086
  if "$make_sdcard" "$board" "$work/bad.img" --build-dir "$build" $b >"$work/bad.log" 2>&1 || [[ -e $work/bad.img ]]; then
    echo "accepted: $b"; ok=1
  elif ! grep -q '^make-sdcard: ' "$work/bad.log"; then
    echo "no message for: $b"; ok=1
  fi
done
check "bad options refused with a message: ${bad[*]}" $ok

echo "$((total - fails)) passed, $fails failed"
exit $((fails ? 1 : 0))
