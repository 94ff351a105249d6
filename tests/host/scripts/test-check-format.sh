#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tools/check-format (CTest format.clang-format) on made-up trees: one
# formatted, one with a file that is not (listed, shown, exit 1; --fix
# formats it and the check then passes), code between clang-format off and
# on left as it is, and the errors: no .clang-format, a wrong clang-format
# version, a file that does not exist.
#
#   test-check-format.sh PATH/TO/check-format
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-check-format.sh PATH/TO/check-format (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tree() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/mm"
  printf 'BasedOnStyle: Google\nColumnLimit: 120\n' >"$tmp/t/.clang-format"
  printf 'int f(int x) { return x + 1; }\n' >"$tmp/t/mm/a.cpp"
  printf '#pragma once\nint g();\n' >"$tmp/t/mm/a.h"
  git -C "$tmp/t" init -q && git -C "$tmp/t" add -A
}
check() { "$checker" --root "$tmp/t" "$@" >"$tmp/out" 2>&1; }

tree; check; verdict "a formatted tree" $? 0 '^check-format: 2 files formatted'
tree; printf 'int   f(int x){return x+1;}\n' >"$tmp/t/mm/a.cpp"; check
verdict "a file that is not formatted" $? 1 '^  mm/a.cpp$'
grep -q '^+int f(int x) { return x + 1; }' "$tmp/out"; verdict "its difference is shown" $? 0 ''
check --fix; verdict "--fix formats it" $? 0 'reformatted 1 of 2'
check; verdict "and then the check passes" $? 0 '2 files formatted'
tree; printf '// clang-format off\nint   f(int x){return x+1;}\n// clang-format on\n' >"$tmp/t/mm/a.cpp"; check
verdict "code between clang-format off and on" $? 0 '2 files formatted'
tree; rm "$tmp/t/.clang-format"; check; verdict "no .clang-format" $? 2 '\.clang-format: missing'
tree; check mm/none.cpp; verdict "a file that does not exist" $? 2 'mm/none.cpp: no such file'
tree; printf '#!/bin/sh\necho "clang-format version 16.0.6"\n' >"$tmp/cf16"; chmod +x "$tmp/cf16"
CLANG_FORMAT=$tmp/cf16 "$checker" --root "$tmp/t" >"$tmp/out" 2>&1; verdict "clang-format of another version" $? 2 "version '16', not 14"
"$checker" --root "$tmp/nowhere" >"$tmp/out" 2>&1; verdict "a root that is no directory" $? 2 'not a directory'
summary
