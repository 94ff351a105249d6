#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/torture: `kmem torture OPS` on 8 cores, or the cores a
# --smp N among the options asks for (a fixed-shape board: its own; and
# --cpus N where the kernel runs on fewer cores than the machine has harts,
# sifive_u's 4 of 5: the count the run must report), with
# MTTCG (the vCPUs run in parallel on the host's cores), then bad
# arguments, then `kmem errors`. OPS is the total, split over the cores.
# Passes when the run's last line says PASS with 0 corruptions, balanced
# counts and pages and 0 allocator errors, every bad argument got its usage
# message, `kmem errors` says 0 and the shell went on to poweroff. With
# fault injection on (an option --append kmem.fail=...), also that
# `kmem fail` made allocations fail. With --kmemleak, the run is
# `kmem torture OPS SEED kmemleak` (kernel/torture.cpp, kmemleak mode: the
# calling core switches kmemleak off and on and scans while the other cores
# work), and it must also report kmemleak switched and scanning, with 0 false
# leaks.
#
#   torture-test.sh QEMU_RUN BOARD BUILD_DIR [OPS [--cpus N] [--kmemleak] [QEMU-RUN OPTIONS...]]
set -uo pipefail
[[ $# -ge 3 ]] || { echo "usage: torture-test.sh QEMU_RUN BOARD BUILD_DIR [OPS [QEMU-RUN OPTIONS...]]" >&2; exit 2; }
run=$1 board=$2 build=$3 ops=${4:-1000000}
shift $(( $# >= 4 ? 4 : 3 ))
opts=() cpus=8 smp_given=0 want_cpus= leak=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kmemleak) leak=" kmemleak"; shift ;;
    --cpus) [[ $# -ge 2 ]] || { echo "torture-test.sh: --cpus needs a number" >&2; exit 2; }
      want_cpus=$2; shift 2 ;;
    --smp) [[ $# -ge 2 ]] || { echo "torture-test.sh: --smp needs a number" >&2; exit 2; }
      cpus=$2 smp_given=1; opts+=("$1" "$2"); shift 2 ;;
    *) opts+=("$1"); shift ;;
  esac
done
((smp_given)) || opts=(--smp "$cpus" "${opts[@]}")
[[ -n $want_cpus ]] && cpus=$want_cpus
workers=$cpus
[[ -n $leak ]] && workers=$((cpus - 1))  # the calling core checks instead
log=$(mktemp)
trap 'rm -f "$log"' EXIT

printf 'kmem torture %s 12345%s\nkmem torture lots\nkmem torture 0\nkmem torture 99999999999\nkmem torture 10 seed\nkmem errors\nkmem fail\npoweroff\n' "$ops" "$leak" |
  "$run" "$board" --build-dir "$build" --timeout 240 "${opts[@]}" >"$log" 2>&1
status=$?
sed -i 's/\r$//' "$log"  # the serial console's line ends
cat "$log"
fails=0
bad() { echo "torture-test: $*"; fails=1; }
[[ $status -eq 0 ]] || bad "the run exited with status $status"
grep -q '^PANIC' "$log" && bad "the kernel panicked"
grep -q 'CORRUPTION' "$log" && bad "corruption reported"
grep -q "^kmem torture: $ops ops on $workers cpus, seed 12345\$" "$log" || bad "no '$ops ops on $workers cpus' line"
last=$(grep '^kmem torture: \(PASS\|FAIL\)' "$log" | tail -1)
[[ $last == "kmem torture: PASS: 0 corruptions, counts balanced, pages balanced, 0 allocator errors" ]] ||
  bad "the final line is '${last:-missing}'"
n=$(grep -c '^kmem: usage: kmem torture OPS \[SEED' "$log")
[[ $n -eq 4 ]] || bad "$n usage messages for the 4 bad commands"
grep -q '^0 allocator errors reported since boot' "$log" || bad "kmem errors is not 0"
grep -q '^powering off' "$log" || bad "the shell did not reach poweroff"
if [[ "${opts[*]}" == *kmem.fail=* ]]; then
  grep -qE '^kmem fail: .*; [1-9][0-9]* failed so far' "$log" || bad "fault injection made nothing fail"
fi
if [[ -n $leak ]]; then
  grep -qE '^  kmemleak: switched [1-9][0-9]* times, [1-9][0-9]* scans while the workers ran, 0 false leaks$' "$log" ||
    bad "kmemleak did not switch and scan with 0 false leaks"
  grep -q 'FALSE LEAK' "$log" && bad "false leaks reported"
fi
grep 'ops/s\|kmemleak: switched' "$log" | sed 's/^ */torture-test: /'
[[ $fails -eq 0 ]] && echo "torture-test: PASS"
exit $fails
