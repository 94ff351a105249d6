#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tests/kernel/halt-test.sh (the checker behind CTest BOARD/halt) on
# made-up console logs: a stand-in for qemu-run prints the log (with the
# serial console's \r\n) and exits with a given status; each case gives the
# log, the status, the expected verdict and a line the checker must print.
#
#   test-halt-test.sh PATH/TO/halt-test.sh
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-halt-test.sh PATH/TO/halt-test.sh (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The checker must boot as the board, without semihosting.
stand_in '[[ " $* " == *" --no-semihosting "* ]] || { echo "stand-in: no --no-semihosting in $*"; exit 2; }'

# case NAME RUN-STATUS WANT-STATUS WANT-PATTERN LOG-TEXT
case_() {
  local name=$1 status=$2 want=$3 pattern=$4 text=$5
  console_log "$text"
  echo "$status" >"$tmp/status"
  "$checker" "$tmp/run" board "$tmp" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}

# One log serves both boots (poweroff and the panic): it has both lines.
trapped='fault (expected) on cpu 0: semihosting unavailable at pc 0x8020f8d4\n'
halt='poweroff: no SBI shutdown, semihosting or power-off device: halting (it is safe to cut the power)\n'
head='magpie> poweroff\npowering off\nPANIC on cpu 0: ASSERT failed: v == 42 at kernel/commands.cpp:91\nSystem halted.\n'
good="$head$trapped$halt"

case_ "halted and still running at the timeout passes" 124 0 '^halt-test: PASS$' "$good"
case_ "an exit (semihosting served after all) fails it" 0 1 'status 0, wanted 124' "$good"
case_ "a second trap fails it" 124 1 "2 'semihosting unavailable' lines" "$head$trapped$trapped$halt"
case_ "no trap caught fails it" 124 1 "0 'semihosting unavailable' lines" "$head$halt"
case_ "a silent hang (no halt message) fails it" 124 1 'FAILED: poweroff' "$head$trapped"
case_ "a panic without its report fails it" 124 1 'FAILED: a panic' "${good/PANIC on cpu 0: ASSERT failed: v == 42/PANIC on cpu 0: data abort}"

summary
