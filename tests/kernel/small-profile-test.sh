#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/small-meminfo: the board booted with only SIZE of RAM (the
# small profile, bootarg mem=SIZE: SMALL_PROFILE in its board.conf) reaches
# the shell, meminfo's books add up to SIZE with every page claimed by the
# subsystem that holds it ("other" 0: the sum is SIZE by construction, as
# "other" is what the rest leaves), and more than half of it is free at
# the prompt.
#   small-profile-test.sh QEMU_RUN BOARD BUILD_DIR SIZE_KIB
set -uo pipefail
run=$1 board=$2 build=$3 kib=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf 'meminfo\npoweroff\n' | "$run" "$board" --build-dir "$build" --append "mem=${kib}K" --timeout 60 >"$log" 2>&1
status=$?
cat "$log"
fails=0
[[ $status -eq 0 ]] || { echo "small-profile: the run exited with status $status"; fails=1; }
grep -q "total RAM ${kib} KiB in 1 bank" "$log" || { echo "small-profile: meminfo does not say total RAM ${kib} KiB"; fails=1; }
free=$(sed -n 's/^  free \([0-9]*\) KiB + .*/\1/p' "$log")
[[ -n $free ]] || { echo "small-profile: no 'free N KiB' in meminfo"; exit 1; }
grep -q "= ${kib} KiB = RAM ${kib} KiB" "$log" || { echo "small-profile: meminfo's books do not add up to ${kib} KiB"; fails=1; }
grep -q " + other 0 KiB + " "$log" || { echo "small-profile: meminfo's other is not 0 KiB: pages no subsystem claims"; fails=1; }
if (( free * 2 <= kib )); then
  echo "small-profile: ${free} KiB free of ${kib} KiB: not more than half"
  fails=1
else
  echo "small-profile: ${free} KiB free of ${kib} KiB at the prompt"
fi
exit $fails
