#!/usr/bin/env bash
# Checks what tools/make-sdcard writes, with mtools (no root, no loop
# device): an MBR with one bootable FAT32 (LBA) partition that fsck.fat
# finds clean, holding the firmware, config.txt with the lines the board
# needs, and the kernel image and DTB byte for byte; with --uboot, U-Boot
# as the firmware's kernel and a boot.scr that loads and starts ours; and
# options that cannot apply refused with a message.
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

# The U-Boot card: the firmware starts U-Boot, whose distro boot runs boot.scr.
"$make_sdcard" "$board" "$work/ub.img" --build-dir "$build" --uboot --append "test kmemtrace=on" >/dev/null ||
  { echo "FAILED: make-sdcard --uboot"; exit 1; }
uimg="$work/ub.img@@1M"
files=$(mdir -i "$uimg" -b :: | sed 's|^::/||' | sort | tr '\n' ' ')
[[ $files == "bcm2837-rpi-3-b.dtb boot.scr bootcode.bin config.txt fixup.dat kernel8.img start.elf u-boot-rpi3.bin " ]]
check "--uboot files: $files" $?
mtype -i "$uimg" ::config.txt | grep -qx kernel=u-boot-rpi3.bin
check "--uboot: config.txt starts U-Boot" $?
mcopy -i "$uimg" ::boot.scr "$work/"
script=$(tail -c +73 "$work/boot.scr")   # past the 64-byte image header and the 8-byte length table
ok=0
for line in 'load ${devtype} ${devnum}:${distro_bootpart} ${kernel_addr_r} kernel8.img' \
    'setenv bootargs "test kmemtrace=on"' 'booti ${kernel_addr_r} - ${fdt_addr}'; do
  grep -qxF "$line" <<<"$script" || { echo "boot.scr lacks: $line"; ok=1; }
done
check "--uboot: boot.scr loads kernel8.img, sets bootargs, runs booti" $ok

# Options that cannot apply are refused, with a message, and no image.
ok=0
for bad in "--append test" "--uboot --load-addr 12" "--uboot --append a\"b" "--frobnicate"; do
  # shellcheck disable=SC2086
  if "$make_sdcard" "$board" "$work/bad.img" --build-dir "$build" $bad >"$work/bad.log" 2>&1 || [[ -e $work/bad.img ]]; then
    echo "accepted: $bad"; ok=1
  elif ! grep -q '^make-sdcard: ' "$work/bad.log"; then
    echo "no message for: $bad"; ok=1
  fi
done
check "bad options refused with a message" $ok

echo "$((9 - fails)) passed, $fails failed"
exit $((fails ? 1 : 0))
