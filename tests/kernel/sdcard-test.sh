#!/usr/bin/env bash
# Checks what tools/make-sdcard writes, with mtools (no root, no loop
# device): an MBR with one bootable FAT32 (LBA) partition that fsck.fat
# finds clean, holding the firmware, config.txt with the lines the board
# needs, and the kernel image and DTB byte for byte.
# Usage: sdcard-test.sh MAKE_SDCARD BOARD BUILD_DIR
set -uo pipefail
make_sdcard=$1 board=$2 build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
check() { if [[ $2 -eq 0 ]]; then echo "ok: $1"; else echo "FAILED: $1"; fails=$((fails + 1)); fi; }

"$make_sdcard" "$board" "$work/sd.img" --build-dir "$build" || { echo "FAILED: make-sdcard"; exit 1; }
img="$work/sd.img@@1M"
python3 - "$work/sd.img" <<'PY'
import struct, sys
mbr = open(sys.argv[1], "rb").read(512)
boot, ptype, start, count = mbr[446], mbr[450], *struct.unpack("<II", mbr[454:462])
assert mbr[510:512] == b"\x55\xaa", "no MBR signature"
assert boot == 0x80 and ptype == 0x0c and start == 2048 and count > 0, (boot, ptype, start, count)
PY
check "MBR: one bootable FAT32 (LBA) partition at 1 MiB" $?

dd if="$work/sd.img" of="$work/part.img" bs=1M skip=1 status=none
fsck.fat -n "$work/part.img" >"$work/fsck.log" 2>&1
check "fsck.fat finds the file system clean" $?

files=$(mdir -i "$img" -b :: | sed 's|^::/||' | sort | tr '\n' ' ')
[[ $files == "bcm2837-rpi-3-b.dtb bootcode.bin config.txt fixup.dat kernel8.img start.elf " ]]
check "files: $files" $?

mtype -i "$img" ::config.txt >"$work/config.txt"
ok=0
for line in arm_64bit=1 kernel=kernel8.img kernel_address=0x80000 enable_uart=1 upstream_kernel=1 \
    device_tree=bcm2837-rpi-3-b.dtb; do
  grep -qx "$line" "$work/config.txt" || { echo "config.txt lacks $line"; ok=1; }
done
check "config.txt" $ok

mcopy -i "$img" ::kernel8.img ::bcm2837-rpi-3-b.dtb ::start.elf "$work/"
cmp -s "$work/kernel8.img" "$build/kernel8.img" && cmp -s "$work/bcm2837-rpi-3-b.dtb" "$build/bcm2837-rpi-3-b.dtb"
check "kernel8.img and the DTB are the build's" $?
[[ $(stat -c %s "$work/start.elf") -gt 1000000 ]]
check "start.elf is the firmware (over 1 MB)" $?

echo "$((6 - fails)) passed, $fails failed"
exit $((fails ? 1 : 0))
