# SPDX-License-Identifier: Apache-2.0
# Shared by the tests of the QEMU checkers (test-*.sh, sourced): a scratch
# directory, the case counts, a stand-in for qemu-run, and each case's
# verdict.

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 total=0

# stand_in [CHECK]: writes $tmp/run, a stand-in for tools/qemu-run that
# runs CHECK (a line of bash over its arguments, "$@"), swallows its input,
# prints $tmp/log and exits with the status in $tmp/status.
stand_in() {
  cat >"$tmp/run" <<EOF2
#!/usr/bin/env bash
${1:-}
cat >/dev/null
cat "$tmp/log"
exit \$(cat "$tmp/status")
EOF2
  chmod +x "$tmp/run"
}

# console_log TEXT: $tmp/log is TEXT (printf %b) as the serial console
# sends it, each line ending in \r\n.
console_log() { printf '%b' "$1" | sed 's/$/\r/' >"$tmp/log"; }

# verdict NAME STATUS WANT-STATUS WANT-PATTERN: one case, whose checker
# exited with STATUS and wrote $tmp/out: it passes if the status is the one
# wanted and a line matches the pattern (grep -E).
verdict() {
  local name=$1 got=$2 want=$3 pattern=$4
  total=$((total + 1))
  if [[ $got -eq $want ]] && grep -Eq -- "$pattern" "$tmp/out"; then
    echo "ok: $name"
  else
    echo "FAILED: $name (status $got, wanted $want and a line matching '$pattern'); output:"
    sed 's/^/    /' "$tmp/out"
    fails=$((fails + 1))
  fi
}

# summary: the counts; the status of the whole test.
summary() {
  echo "$((total - fails)) of $total cases passed"
  [[ $fails -eq 0 ]]
}
