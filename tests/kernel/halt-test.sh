#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/halt: what `poweroff` and a panic do on the real board, where
# no debugger serves semihosting (qemu-run --no-semihosting) and the board
# has no power-off device (REAL_POWEROFF=halt in its board.conf: the
# HiFive Unleashed). The semihosting call must trap and be caught (the
# kernel says "semihosting unavailable", once), the kernel must say it
# halts, and QEMU must still be running when the timeout stops it: a
# silent hang, a second trap or an exit would fail.
#   halt-test.sh QEMU_RUN BOARD BUILD_DIR
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: halt-test.sh QEMU_RUN BOARD BUILD_DIR" >&2; exit 2; }
run=$1 board=$2 build=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fails=0

# check NAME INPUT EXTRA-PATTERN: boots, types INPUT, checks the halt.
check() {
  local name=$1 input=$2 extra=$3
  printf '%b' "$input" | "$run" "$board" --build-dir "$build" --no-semihosting --timeout 15 >"$log" 2>&1
  local st=$?
  sed -i 's/\r$//' "$log"
  local n
  n=$(grep -c '^fault (expected) on cpu [0-9]*: semihosting unavailable at pc 0x' "$log")
  if [[ $st -eq 124 && $n -eq 1 ]] && grep -q "$extra" "$log" &&
     grep -q '^poweroff: no SBI shutdown, semihosting or power-off device: halting' "$log"; then
    echo "ok: $name"
  else
    echo "FAILED: $name (status $st, wanted 124 from the timeout; $n 'semihosting unavailable' lines, wanted 1)"
    echo "--- console ---"; cat "$log"; echo "---"
    fails=$((fails + 1))
  fi
}

check "poweroff: semihosting traps and is caught, then the board halts" 'poweroff\n' '^powering off'
check "a panic: the status cannot be reported, the board halts" 'crash assert\n' '^PANIC on cpu 0: ASSERT failed'
[[ $fails -eq 0 ]] && echo "halt-test: PASS"
exit $(( fails > 0 ))
