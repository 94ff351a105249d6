#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tests/kernel/ktest-suite (the checker behind the in-QEMU CTest
# suites) on made-up console logs: each case gives a log, the expected exit
# status and a line the checker must print.
#
#   test-ktest-suite.sh PATH/TO/ktest-suite
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-ktest-suite.sh PATH/TO/ktest-suite (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# case NAME WANT-STATUS WANT-PATTERN LOG-TEXT [checker args...]
case_() {
  local name=$1 want=$2 pattern=$3 text=$4
  shift 4
  printf '%b' "$text" >"$tmp/log"
  "$checker" "$@" --log "$tmp/log" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}

boot='Magpie 0.1.0 (qemu-virt-arm64, arm64) booting\r\n'
ok1='[ RUN  ] alpha\r\n[  OK  ] alpha (3 ms)\r\n'
ok2='[ RUN  ] beta\r\n    moved 12 objects\r\n[  OK  ] beta (0 ms)\r\n'
skip_gamma='[ RUN  ] gamma\r\n[ SKIP ] gamma (one cpu: no other core to free on)\r\n'
ok_gamma='[ RUN  ] gamma\r\n[  OK  ] gamma (1 ms)\r\n'
fail_beta='[ RUN  ] beta\r\n    FAIL t.cpp:3: expected: x\r\n[ FAIL ] beta (0 ms)\r\n'

case_ "every test passed" 0 '^ktest-suite: ok: 3 passed, 0 failed, 0 skipped$' \
  "$boot$ok1$ok2$ok_gamma"'3 passed, 0 failed, 0 skipped\r\n'
case_ "a skip the suite does not expect fails it, naming the test and reason" 1 \
  'test gamma skipped \(one cpu: no other core to free on\), which this suite does not expect' \
  "$boot$ok1$ok2$skip_gamma"'2 passed, 0 failed, 1 skipped\r\n'
case_ "a declared skip passes" 0 '^ktest-suite: ok: 2 passed, 0 failed, 1 skipped \(expected: gamma\)$' \
  "$boot$ok1$ok2$skip_gamma"'2 passed, 0 failed, 1 skipped\r\n' --expect-skip gamma
case_ "a declared skip that ran is stale" 1 'test gamma was expected to skip on this machine shape but ran' \
  "$boot$ok1$ok2$ok_gamma"'3 passed, 0 failed, 0 skipped\r\n' --expect-skip gamma
case_ "a declared skip of a test not in the log" 1 'test delta was expected to skip but is not in the log' \
  "$boot$ok1$ok2$skip_gamma"'2 passed, 0 failed, 1 skipped\r\n' --expect-skip gamma --expect-skip delta
case_ "a failed test fails the suite" 1 '^ktest-suite: test beta failed$' \
  "$boot$ok1$fail_beta"'1 passed, 1 failed, 0 skipped\r\n' --status 1
case_ "a summary that does not add up" 1 'summary says 3 passed, 0 failed, 0 skipped, but the log has 2 OK, 0 FAIL and 1 SKIP' \
  "$boot$ok1$ok2$skip_gamma"'3 passed, 0 failed, 0 skipped\r\n' --expect-skip gamma
case_ "the old summary line (no skip count)" 1 'summary without a skip count' \
  "$boot$ok1$ok2"'2 passed, 0 failed\r\n'
case_ "a run cut short inside a test" 1 'test gamma started but never finished' \
  "$boot$ok1$ok2"'[ RUN  ] gamma\r\n'
case_ "a panic" 1 'the kernel panicked' \
  "$boot$ok1"'[ RUN  ] beta\r\nPANIC on cpu 1: data abort\r\n'
case_ "a non-zero exit status" 1 'the run exited with status 3' \
  "$boot$ok1$ok2"'2 passed, 0 failed, 0 skipped\r\n' --status 3
case_ "no test passed" 1 'no test passed' \
  "$boot$skip_gamma"'0 passed, 0 failed, 1 skipped\r\n' --expect-skip gamma
case_ "two summary lines" 1 '2 summary lines' \
  "$boot$ok1"'1 passed, 0 failed, 0 skipped\r\n'"$ok2"'1 passed, 0 failed, 0 skipped\r\n'
injected='kmem fail: 17 allocations failed by injection since it was switched on\r\n'
case_ "an expected line present passes" 0 '^ktest-suite: ok: 2 passed' \
  "$boot$ok1$ok2"'2 passed, 0 failed, 0 skipped\r\n'"$injected" --expect-line '^kmem fail: [1-9][0-9]* allocations failed'
case_ "an expected line missing fails, naming the pattern" 1 \
  "no line of the log matches '\^kmem fail: \[1-9\]\[0-9\]\* allocations failed', which this suite expects" \
  "$boot$ok1$ok2"'2 passed, 0 failed, 0 skipped\r\nkmem fail: 0 allocations failed by injection since it was switched on\r\n' \
  --expect-line '^kmem fail: [1-9][0-9]* allocations failed'

# Bad usage: status 2 and a message.
total=$((total + 1))
"$checker" --expect-skip 'not a name' --log /dev/null >"$tmp/out" 2>&1
a=$?
"$checker" >"$tmp/out2" 2>&1
b=$?
if [[ $a -eq 2 && $b -eq 2 ]] && grep -q 'is not a test name' "$tmp/out" && grep -q 'give either --log FILE or -- COMMAND' "$tmp/out2"; then
  echo "ok: bad usage is refused with status 2 and a message"
else
  echo "FAILED: bad usage (statuses $a, $b)"; cat "$tmp/out" "$tmp/out2"; fails=$((fails + 1))
fi

# The command form: runs it, passes its output through, checks its status.
total=$((total + 1))
"$checker" --expect-skip gamma -- sh -c 'printf "[ RUN  ] alpha\r\n[  OK  ] alpha (1 ms)\r\n[ RUN  ] gamma\r\n[ SKIP ] gamma (why)\r\n1 passed, 0 failed, 1 skipped\r\n"; exit 0' >"$tmp/out" 2>&1
a=$?
"$checker" -- sh -c 'printf "[ RUN  ] alpha\r\n[  OK  ] alpha (1 ms)\r\n1 passed, 0 failed, 0 skipped\r\n"; exit 4' >"$tmp/out2" 2>&1
b=$?
if [[ $a -eq 0 && $b -eq 1 ]] && grep -q '^\[ SKIP \] gamma (why)' "$tmp/out" && grep -q 'exited with status 4' "$tmp/out2"; then
  echo "ok: the command form passes output through and checks the command's status"
else
  echo "FAILED: the command form (statuses $a, $b)"; cat "$tmp/out" "$tmp/out2"; fails=$((fails + 1))
fi

summary
