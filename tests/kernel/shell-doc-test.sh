#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shell reference against the kernel: boots the board, types `help`, and
# checks with tools/check-shell-doc that docs/shell.md has an entry for
# every command help lists and none other, and a heading for every
# subcommand of kmem and kmemleak and none other.
#
#   shell-doc-test.sh QEMU_RUN BOARD BUILD_DIR
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: shell-doc-test.sh QEMU_RUN BOARD BUILD_DIR" >&2; exit 2; }
run=$1 board=$2 build=$3
tools=$(dirname "$run")
log=$(mktemp)
trap 'rm -f "$log"' EXIT

printf 'help\npoweroff\n' | "$run" "$board" --build-dir "$build" --timeout 60 >"$log" 2>&1
st=$?
if [[ $st -ne 0 ]]; then
  echo "FAILED: the board did not boot, list its commands and power off (status $st); console:"
  cat "$log"
  exit 1
fi
"$tools/check-shell-doc" --doc "$tools/../docs/shell.md" --subcommands kmem,kmemleak "$log"
