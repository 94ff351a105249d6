#!/usr/bin/env bash
# Tests tests/kernel/halt-test.sh (the checker behind CTest BOARD/halt) on
# made-up console logs: a stand-in for qemu-run prints the log (with the
# serial console's \r\n) and exits with a given status; each case gives the
# log, the status, the expected verdict and a line the checker must print.
#
#   test-halt-test.sh PATH/TO/halt-test.sh
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-halt-test.sh PATH/TO/halt-test.sh (an executable)" >&2; exit 2; }
checker=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 total=0
cat >"$tmp/run" <<EOF2
#!/usr/bin/env bash
# The checker must boot as the board, without semihosting.
[[ " \$* " == *" --no-semihosting "* ]] || { echo "stand-in: no --no-semihosting in \$*"; exit 2; }
cat >/dev/null
cat "$tmp/log"
exit \$(cat "$tmp/status")
EOF2
chmod +x "$tmp/run"

# case NAME RUN-STATUS WANT-STATUS WANT-PATTERN LOG-TEXT
case_() {
  local name=$1 status=$2 want=$3 pattern=$4 text=$5
  total=$((total + 1))
  printf '%b' "$text" | sed 's/$/\r/' >"$tmp/log"
  echo "$status" >"$tmp/status"
  "$checker" "$tmp/run" board "$tmp" >"$tmp/out" 2>&1
  local got=$?
  if [[ $got -eq $want ]] && grep -Eq -- "$pattern" "$tmp/out"; then
    echo "ok: $name"
  else
    echo "FAILED: $name (status $got, wanted $want and a line matching '$pattern'); output:"
    sed 's/^/    /' "$tmp/out"
    fails=$((fails + 1))
  fi
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

echo "$((total - fails)) of $total cases passed"
[[ $fails -eq 0 ]]
