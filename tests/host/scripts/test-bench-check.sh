#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tools/bench-check (the comparison behind CTest BOARD/bench) on
# made-up bench output: in bounds, regressed, cheaper, fallen to 0 or below
# or by more than half (a row that stopped measuring), rows missing on
# either side, failed or skipped rows, a run without -icount, a baseline of
# another shape, a malformed baseline, and writing a baseline.
#
#   test-bench-check.sh PATH/TO/bench-check
set -uo pipefail
shopt -s lastpipe  # case_ runs at the end of pipelines and counts in this shell
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-bench-check.sh PATH/TO/bench-check (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

baseline() {  # the baseline every case compares with
  cat <<'B'
# made up
board qemu-virt-arm64
mode quick
cpus 4
pairs            kmem_cache    16       53.0
cross            kmem_cache    16       58.8
pairs            kmem_alloc    64       76.0
page             page        4096      102.0
B
}
# run [ROWS...]: a console log of a bench run (4 cpus, quick, icount) with
# the given rows (each "pattern allocator size objects figure").
run() {
  local counter=${COUNTER:-1000} board=${BOARD:-qemu-virt-arm64} n=0 r
  printf 'Magpie 0.1.0 (%s, arm64) booting\r\nmagpie> bench quick\r\n' "$board"
  printf 'bench: %s (arm64), 4 cpus, quick: counter ticks per object (alloc + free), net of the empty loop, best of 3\r\n' "$board"
  printf 'counter check: 1000 nops = %s ticks (one per instruction)\r\n' "$counter"
  printf '%-16s %-10s %5s %8s %10s\r\n' pattern allocator size objects per-object
  for r in "$@"; do
    # shellcheck disable=SC2086
    set -- $r
    if [[ $5 == skipped ]]; then
      printf '%-16s %-10s %5s %8s %10s  (one core: boot with --smp 2 or more)\r\n' "$1" "$2" - - skipped
    else
      printf '%-16s %-10s %5s %8s %10s\r\n' "$1" "$2" "$3" "$4" "$5"; n=$((n + 1))
    fi
  done
  printf 'bench: %d rows, 0 failed\r\n(pairs: alloc, free, ...)\r\nmagpie> kmem errors\r\n0 allocator errors reported since boot\r\n' "$n"
}
ok_rows=("pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 76.0" "page page 4096 2000 102.0")

# case NAME WANT-STATUS WANT-PATTERN (the log on stdin) [checker args...]
case_() {
  local name=$1 want=$2 pattern=$3
  shift 3
  cat >"$tmp/log"
  "$checker" "$@" "$tmp/log" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}
baseline >"$tmp/base"
B=(--baseline "$tmp/base")

run "${ok_rows[@]}" | case_ "every row as in the baseline passes" 0 '^bench-check: ok: 4 rows: 0 regressed' "${B[@]}"
run "pairs kmem_cache 16 2000 54.0" "cross kmem_cache 16 640 60.8" "pairs kmem_alloc 64 2000 71.5" "page page 4096 2000 102.0" |
  case_ "growth up to 2 passes; a cheaper row passes and says to update the baseline" 0 \
    'pairs +kmem_alloc +64 +76.0 +71.5 +-4.5 +ok, cheaper: update the baseline' "${B[@]}"
run "pairs kmem_cache 16 2000 54.0" "cross kmem_cache 16 640 60.8" "pairs kmem_alloc 64 2000 71.5" "page page 4096 2000 102.0" |
  case_ "the cheaper hint names the command" 0 "tools/bench-qemu --update-baseline --boards qemu-virt-arm64" "${B[@]}"
baseline >"$tmp/qemu-virt-arm64-variant.txt"
run "pairs kmem_cache 16 2000 54.0" "cross kmem_cache 16 640 60.8" "pairs kmem_alloc 64 2000 71.5" "page page 4096 2000 102.0" |
  case_ "the hint names a board built another way by its baseline's file" 0 \
    "tools/bench-qemu --update-baseline --boards qemu-virt-arm64-variant' and commit bench/baseline/qemu-virt-arm64-variant.txt" \
    --baseline "$tmp/qemu-virt-arm64-variant.txt"
# A row that stops measuring falls to about 0 (the empty loop's cost is
# subtracted) or far below its baseline: it fails, and a real improvement
# of up to half passes.
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 0.0" "page page 4096 2000 102.0" |
  case_ "a row at 0 fails" 1 'pairs +kmem_alloc +64 +76.0 +0.0 +-76.0 +FAILED: 0 or below' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 -0.4" "page page 4096 2000 102.0" |
  case_ "a negative row fails" 1 'pairs +kmem_alloc +64 +76.0 +-0.4 +-76.4 +FAILED: 0 or below' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 37.9" "page page 4096 2000 102.0" |
  case_ "a row fallen by more than half fails" 1 \
    'pairs +kmem_alloc +64 +76.0 +37.9 +-38.1 +FAILED: cheaper by more than 50%' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 37.9" "page page 4096 2000 102.0" |
  case_ "the summary counts it and says what to do" 1 \
    '^bench-check: FAILED: 4 rows: 0 regressed, 0 missing or failed, 0 cheaper, 1 fell too far' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 38.0" "page page 4096 2000 102.0" |
  case_ "a row fallen by exactly half passes as cheaper" 0 \
    'pairs +kmem_alloc +64 +76.0 +38.0 +-38.0 +ok, cheaper: update the baseline' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 37.9" "page page 4096 2000 102.0" |
  case_ "a wider --max-drop lets it pass" 0 '^bench-check: ok' "${B[@]}" --max-drop 60
run "${ok_rows[@]}" | case_ "bad usage: a bad --max-drop" 2 "--max-drop '100' is not a percentage" "${B[@]}" --max-drop 100
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 78.1" "page page 4096 2000 102.0" |
  case_ "one row grown by 2.1 fails, with baseline, measured and delta" 1 \
    'pairs +kmem_alloc +64 +76.0 +78.1 +\+2.1 +REGRESSED' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 78.1" "page page 4096 2000 102.0" |
  case_ "a wider tolerance lets it pass" 0 '^bench-check: ok' "${B[@]}" --tolerance 3
# The rows that walk the stack move with code layout: 0.5% of the baseline.
{ baseline; echo "debug_audit      kmem_cache    64     6477.3"; } >"$tmp/stack"
run "${ok_rows[@]}" "debug_audit kmem_cache 64 2000 6486.4" |
  case_ "a stack-walking row may grow by 0.5% (+9.1 of 6477.3)" 0 \
    'debug_audit +kmem_cache +64 +6477.3 +6486.4 +\+9.1 +ok \(within \+32.3\)' --baseline "$tmp/stack"
run "${ok_rows[@]}" "debug_audit kmem_cache 64 2000 6510.0" |
  case_ "a stack-walking row grown by more than 0.5% fails" 1 \
    'debug_audit +kmem_cache +64 +6477.3 +6510.0 +\+32.7 +REGRESSED: \+32.7 > \+32.3' --baseline "$tmp/stack"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "page page 4096 2000 102.0" |
  case_ "a baseline row missing from the run fails, naming it" 1 \
    'pairs +kmem_alloc +64 +76.0 +- +- +ERROR: in the baseline, missing from the run' "${B[@]}"
run "${ok_rows[@]}" "vmem_fresh vmem 4096 2000 238.0" |
  case_ "a run row missing from the baseline fails, naming it" 1 \
    'vmem_fresh +vmem +4096 +- +238.0 +- +ERROR: in the run, not in the baseline' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 58.8" "pairs kmem_alloc 64 2000 FAILED" "page page 4096 2000 102.0" |
  case_ "a FAILED row fails" 1 'pairs +kmem_alloc +64 +76.0 +FAILED' "${B[@]}"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache - - skipped" "pairs kmem_alloc 64 2000 76.0" "page page 4096 2000 102.0" |
  case_ "a skipped row fails with the run's reason" 1 'missing from the run \(the run skipped it: one core' "${B[@]}"
COUNTER=1374 run "${ok_rows[@]}" | case_ "a run without -icount fails" 1 'not instruction counts' "${B[@]}"
BOARD=qemu-virt-arm run "${ok_rows[@]}" | case_ "another board's run fails" 1 "the run's board is qemu-virt-arm but the baseline's is qemu-virt-arm64" "${B[@]}"
run "${ok_rows[@]}" | head -n 7 | case_ "a run cut short fails" 1 'did not finish' "${B[@]}"
printf 'nothing here\n' | case_ "a log without a bench run fails" 1 'no bench run in the log' "${B[@]}"

printf 'board qemu-virt-arm64\nmode quick\ncpus 4\npairs kmem_cache 16 fast\n' >"$tmp/bad"
run "${ok_rows[@]}" | case_ "a malformed baseline is bad input (status 2, file:line)" 2 'bad:4: expected' --baseline "$tmp/bad"
run "${ok_rows[@]}" | case_ "a missing baseline is bad input" 2 'cannot read the baseline' --baseline "$tmp/nonexistent"
run "${ok_rows[@]}" | case_ "bad usage: no mode" 2 'give --baseline FILE'
run "${ok_rows[@]}" | case_ "bad usage: a bad tolerance" 2 "--tolerance 'two'" "${B[@]}" --tolerance two

run "${ok_rows[@]}" "vmem_fresh vmem 4096 2000 238.0" |
  case_ "--write-baseline writes the run's rows" 0 'wrote .*/new: 5 rows of qemu-virt-arm64 \(bench quick, 4 cpus\)' \
    --write-baseline "$tmp/new" --command "tools/bench-qemu --update-baseline --boards qemu-virt-arm64"
run "${ok_rows[@]}" "vmem_fresh vmem 4096 2000 238.0" |
  case_ "the written baseline passes against the same run" 0 '^bench-check: ok: 5 rows' --baseline "$tmp/new"
total=$((total + 1))
if grep -q '^#   tools/bench-qemu --update-baseline --boards qemu-virt-arm64$' "$tmp/new"; then echo "ok: the baseline says how to regenerate it"; else echo "FAILED: no regenerate command in the written baseline"; fails=$((fails + 1)); fi
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache - - skipped" |
  case_ "--write-baseline refuses a run with a skipped row" 1 'a baseline needs every row measured' --write-baseline "$tmp/new2"
run "pairs kmem_cache 16 2000 53.0" "cross kmem_cache 16 640 0.0" |
  case_ "--write-baseline refuses a row at 0" 1 'row cross kmem_cache 16 is 0.0: 0 or below measures nothing' \
    --write-baseline "$tmp/new3"

summary
