#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per stack depot operation on the host, counted by callgrind.
#
#   icount.sh STACKDEPOT_ICOUNT_BINARY [N]
#
# Runs the binary under callgrind with collection off except around each
# measured loop of N calls (client requests), one dump per loop; per call,
# the loop that calls the depot minus the same loop calling an empty
# function is what the operation costs. Prints the figures; fails if
# valgrind is missing (it is what counts: tools/install-deps installs it),
# if a measurement is missing, or past the bounds below.
#
# Bounds (x86-64, GCC 12): headroom over what each operation takes (the
# output prints each figure); a capture's cost is nearly all glibc's
# unwinder, which the kernel replaces with its frame-pointer walk.
set -euo pipefail
readonly kSaveBase=60       # save of a stored trace: at most 60 + 9 per frame
readonly kSavePerFrame=9
readonly kCaptureBase=5000  # capture: at most 5000 + 2500 per frame (host unwinder)
readonly kCapturePerFrame=2500
usage() { sed -n '2,11s/^# \{0,1\}//p' "$0"; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
esac
if [[ $# -lt 1 || $# -gt 2 ]]; then echo "icount.sh: usage: icount.sh STACKDEPOT_ICOUNT_BINARY [N] (see --help)" >&2; exit 2; fi
bin=$1
n=${2:-20000}
[[ -x $bin ]] || { echo "icount.sh: '$bin' is not an executable (the stackdepot_icount program)" >&2; exit 2; }
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "icount.sh: N must be a positive number of calls, not '$n'" >&2; exit 2; }
if ! command -v valgrind >/dev/null; then
  echo "icount.sh: FAILED: 'valgrind' not found: this test counts instructions with valgrind's callgrind;" \
    "install valgrind (tools/install-deps does)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/cg.out" "$bin" "$n" \
    >"$tmp/out" 2>"$tmp/log"; then
  tail -n 20 "$tmp/log" >&2
  echo "icount.sh: FAILED: $bin $n failed under callgrind (log above)" >&2
  exit 1
fi
# One dump file per label: "desc: Trigger: Client Request: LABEL" and "totals: IR".
declare -A ir
for f in "$tmp"/cg.out.*; do
  label=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
  [[ -n $label && -n $total ]] && ir[$label]=$total
done
ok=1
per() {  # per WHAT FRAMES: net instructions per call, or empty
  local a=${ir["$1 $2 $n"]:-} b=${ir["$1-loop $2 $n"]:-}
  [[ -n $a && -n $b ]] || { echo "icount.sh: FAILED: no measurement '$1 $2 $n' (or its loop)" >&2; return 1; }
  awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (a - b) / n }'
}
while read -r what frames _; do
  [[ $what == save || $what == capture ]] || continue
  v=$(per "$what" "$frames") || { ok=0; continue; }
  if [[ $what == save ]]; then
    bound=$((kSaveBase + kSavePerFrame * frames))
    echo "stackdepot_save of a stored trace, $frames frames: $v instructions (bound $bound)"
  else
    bound=$((kCaptureBase + kCapturePerFrame * frames))
    echo "stackdepot_capture, $frames frames (stored): $v instructions (bound $bound)"
  fi
  awk -v v="$v" -v b="$bound" 'BEGIN { exit !(v <= b) }' || { echo "icount.sh: $what of $frames frames over its bound"; ok=0; }
done <"$tmp/out"
grep -q '^save ' "$tmp/out" && grep -q '^capture ' "$tmp/out" || { echo "icount.sh: FAILED: the program measured nothing" >&2; ok=0; }
(( ok ))
