#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tests/kernel/torture-test.sh (the checker behind CTest BOARD/torture)
# on made-up console logs: a stand-in for qemu-run prints the log (with the
# serial console's \r\n); each case gives the log, the expected exit status
# and a line the checker must print.
#
#   test-torture-test.sh PATH/TO/torture-test.sh
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-torture-test.sh PATH/TO/torture-test.sh (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# qemu-run has no --cpus: the checker keeps it for itself.
stand_in 'for a; do [[ $a == --cpus ]] && { echo "qemu-run: unknown option '\''--cpus'\''"; exit 2; }; done'

# case NAME WANT-STATUS WANT-PATTERN LOG-TEXT [checker args after OPS...]
case_() {
  local name=$1 want=$2 pattern=$3 text=$4
  shift 4
  console_log "$text"
  echo "${RUN_STATUS:-0}" >"$tmp/status"
  "$checker" "$tmp/run" board "$tmp" 1000 "$@" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}

head='magpie> kmem torture 1000 12345\nkmem torture: 1000 ops on 8 cpus, seed 12345\n'
pass='kmem torture: PASS: 0 corruptions, counts balanced, pages balanced, 0 allocator errors\n'
usage='kmem: usage: kmem torture OPS [SEED]; OPS from 1 to 10000000000, SEED a number\n'
tail_='0 allocator errors reported since boot\nkmem fail: off\npowering off\n'
good="$head$pass$usage$usage$usage$usage$tail_"

case_ "a clean run passes" 0 '^torture-test: PASS$' "$good"
case_ "a corruption fails it" 1 'corruption reported' \
  "${head}kmem torture: CORRUPTION in torture_200: buffer 0x1000 offset 3: found 0x00, expected 0x5a (cpu 2)\n$pass$usage$usage$usage$usage$tail_"
case_ "a FAIL line fails it" 1 "final line is 'kmem torture: FAIL" \
  "${head}kmem torture: FAIL: 0 corruptions, counts UNBALANCED, pages balanced, 0 allocator errors\n$usage$usage$usage$usage$tail_"
case_ "no verdict fails it" 1 "final line is 'missing'" "$head$usage$usage$usage$usage$tail_"
case_ "another core count fails it" 1 "no '1000 ops on 8 cpus' line" \
  "${head/8 cpus/4 cpus}$pass$usage$usage$usage$usage$tail_"
case_ "--smp 4 (a fixed-shape board's cores) expects 4 cpus" 0 '^torture-test: PASS$' \
  "${head/8 cpus/4 cpus}$pass$usage$usage$usage$usage$tail_" --smp 4
case_ "--smp 4 and a run on 8 fails it" 1 "no '1000 ops on 4 cpus' line" "$good" --smp 4
case_ "--smp 5 --cpus 4 (sifive_u: 4 of 5 harts) expects 4 cpus" 0 '^torture-test: PASS$' \
  "${head/8 cpus/4 cpus}$pass$usage$usage$usage$usage$tail_" --smp 5 --cpus 4
case_ "--smp 5 --cpus 4 and a run on 5 fails it" 1 "no '1000 ops on 4 cpus' line" \
  "${head/8 cpus/5 cpus}$pass$usage$usage$usage$usage$tail_" --smp 5 --cpus 4
case_ "a bad argument without its usage message fails it" 1 '3 usage messages' \
  "$head$pass$usage$usage$usage$tail_"
case_ "allocator errors fail it" 1 'kmem errors is not 0' \
  "$head$pass$usage$usage$usage$usage${tail_/0 allocator/2 allocator}"
case_ "a panic fails it" 1 'the kernel panicked' "${good}PANIC on cpu 3: assertion failed\n"
case_ "no poweroff fails it" 1 'did not reach poweroff' "${good%powering off\\n}"
RUN_STATUS=3 case_ "qemu-run's failure fails it" 1 'exited with status 3' "$good"
case_ "fault injection that made nothing fail fails it" 1 'fault injection made nothing fail' "$good" \
  --append kmem.fail=10,1,-1
case_ "fault injection that made allocations fail passes" 0 '^torture-test: PASS$' \
  "${good/kmem fail: off/kmem fail: 10% of KM_NOSLEEP\/VM_NOSLEEP allocations, every 1 eligible, no limit, every cache and arena; 9743 failed so far}" \
  --append kmem.fail=10,1,-1

summary
