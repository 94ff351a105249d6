#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/bench: runs `bench quick` under -icount (exact instruction
# counts) and compares every row with the board's checked-in baseline
# (tools/bench-check: a row that grows by more than 2 instructions per object
# fails); also checks that nothing failed and the allocators reported no
# error. In the same boot, the KTEST stackdepot_cost_per_call, whose bounds
# are in instructions only under icount: it must pass, counting them.
#
#   bench-test.sh [--update] QEMU_RUN BOARD BUILD_DIR BASELINE
#
# --update writes BASELINE from the run instead (the same run the test
# makes, so test and baseline always measure alike). Use it through
#   tools/bench-qemu --update-baseline --boards BOARD
# after a deliberate change, and commit bench/baseline/BOARD.txt.
set -uo pipefail
update=0
case "${1:-}" in
  -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
  --update) update=1; shift ;;
esac
[[ $# -eq 4 ]] || { echo "usage: bench-test.sh [--update] QEMU_RUN BOARD BUILD_DIR BASELINE (see --help)" >&2; exit 2; }
run=$1 board=$2 build=$3 baseline=$4
name=$(basename "$baseline" .txt)  # the board, or qemu-virt-arm-armstate (tools/bench-qemu)
check=$(cd "$(dirname "$0")/../.." && pwd)/tools/bench-check
if [[ $update -eq 0 && ! -f $baseline ]]; then
  echo "bench-test: no baseline $baseline: create it with tools/bench-qemu --update-baseline --boards $name" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT

printf 'bench quick\nkmem errors\ntest stackdepot_cost_per_call\npoweroff\n' | QEMU_INPUT_DELAY=2 "$run" "$board" --build-dir "$build" --icount --timeout 240 >"$log" 2>&1
status=$?
cat "$log"
fails=0
[[ $status -eq 0 ]] || { echo "bench-test: the run exited with status $status"; fails=1; }
grep -q '^PANIC' "$log" && { echo "bench-test: the kernel panicked"; fails=1; }
grep -q '^0 allocator errors reported' "$log" || { echo "bench-test: no '0 allocator errors' line: the allocators reported errors"; fails=1; }
if ! grep -q '^    stackdepot: the counter is counting instructions' "$log" || ! grep -q '^\[  OK  \] stackdepot_cost_per_call' "$log"; then
  echo "bench-test: stackdepot_cost_per_call did not pass counting instructions (its bounds, above)"
  fails=1
fi
if [[ $update -eq 1 ]]; then
  [[ $fails -eq 0 ]] || { echo "bench-test: $baseline not written"; exit 1; }
  "$check" --write-baseline "$baseline" --command "tools/bench-qemu --update-baseline --boards $name" "$log"
  exit
fi
echo "=== compare with $baseline"
"$check" --baseline "$baseline" "$log" || fails=1
exit $fails
