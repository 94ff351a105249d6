#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/no-dtb: an ARM kernel booted without the boot protocol (the
# ELF, qemu-run --elf) gets no DTB pointer. It must say so in a panic and
# stop QEMU with the panic's exit status (3, kernel/panic.cpp): a kernel
# that prints the panic and then hangs until the timeout (status 124), one
# that exits 0 or 1, or one that panics for another reason fails.
#   no-dtb-test.sh QEMU_RUN BOARD BUILD_DIR
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: no-dtb-test.sh QEMU_RUN BOARD BUILD_DIR" >&2; exit 2; }
run=$1 board=$2 build=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT

"$run" "$board" --build-dir "$build" --elf --timeout 30 </dev/null >"$log" 2>&1
st=$?
sed -i 's/\r$//' "$log"
cat "$log"
n=$(grep -c '^PANIC on cpu 0: no device tree' "$log")
if [[ $st -eq 3 && $n -eq 1 ]]; then
  echo "no-dtb-test: PASS"
  exit 0
fi
why=
[[ $st -eq 124 ]] && why=" (the timeout stopped it: the kernel hung)"
echo "no-dtb-test: FAILED: status $st, wanted 3 (a panic's)$why; $n 'PANIC on cpu 0: no device tree' lines, wanted 1"
exit 1
