#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel image's loaded bytes are exactly [__kernel_start, __data_end):
# start.S's relocate moves __loaded_size bytes when a loader put the image
# elsewhere, and the zImage header gives the same size to U-Boot's bootz.
# A section the linker script leaves out of .data (a .got, say)
# would be loaded but not moved. Checked against the ELF's LOAD segments,
# and against the raw image's size.
# Usage: image-check.sh NM READELF KERNEL.ELF RAW_IMAGE
set -uo pipefail
[[ $# -eq 4 ]] || { echo "usage: image-check.sh NM READELF KERNEL.ELF RAW_IMAGE" >&2; exit 2; }
nm=$1 readelf=$2 elf=$3 raw=$4
syms=$("$nm" "$elf") || { echo "FAILED: $nm $elf"; exit 1; }
segs=$("$readelf" -lW "$elf") || { echo "FAILED: $readelf -l $elf"; exit 1; }
SYMS=$syms SEGS=$segs python3 - "$raw" <<'PY'
import os, sys
sym = {l.split()[2]: int(l.split()[0], 16) for l in os.environ["SYMS"].splitlines() if len(l.split()) == 3}
start, size = sym["__kernel_start"], sym["__loaded_size"]
ends = []
for l in os.environ["SEGS"].splitlines():
    f = l.split()
    if f and f[0] == "LOAD" and int(f[4], 16):  # filesz
        ends.append(int(f[2], 16) + int(f[4], 16))
end = max(ends) - start
raw = os.path.getsize(sys.argv[1])
print(f"image: __loaded_size {size:#x}, loaded bytes in the ELF {end:#x}, raw image {raw:#x}")
ok = end == size and raw == size
if not ok: print("FAILED: the loaded bytes, __loaded_size and the raw image must agree")
sys.exit(0 if ok else 1)
PY
