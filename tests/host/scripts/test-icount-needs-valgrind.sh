#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# trace.InstructionsPerEvent must fail, not pass, where valgrind is missing:
# runs its script with a PATH that has no valgrind and expects status 1 and
# a message that says so.
#
#   test-icount-needs-valgrind.sh PATH/TO/icount.sh TRACE_ICOUNT_BINARY
set -uo pipefail
[[ $# -eq 2 && -f "$1" && -x "$2" ]] ||
  { echo "usage: test-icount-needs-valgrind.sh PATH/TO/icount.sh TRACE_ICOUNT_BINARY" >&2; exit 2; }
out=$(PATH=/nonexistent /bin/bash "$1" "$2" 2>&1)
status=$?
echo "$out"
if [[ $status -eq 1 ]] && grep -q "FAILED: 'valgrind' not found" <<<"$out"; then
  echo "ok: without valgrind the test fails and says why"
else
  echo "FAILED: without valgrind icount.sh gave status $status (wanted 1 and a message)"
  exit 1
fi
