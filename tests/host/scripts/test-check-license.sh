#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tools/check-license (CTest license.spdx) on made-up trees: one in
# order, then one fault at a time: no LICENSE, a C++ file, a script after
# its shebang and a CMake file without the line, the line too far down, and
# a file that is neither a known source nor listed as data.
#
#   test-check-license.sh PATH/TO/check-license
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-check-license.sh PATH/TO/check-license (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tree() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/mm" "$tmp/t/tools" "$tmp/t/bench/baseline" "$tmp/t/docs"
  echo "Apache License" >"$tmp/t/LICENSE"
  printf '// SPDX-License-Identifier: Apache-2.0\nint x;\n' >"$tmp/t/mm/a.cpp"
  printf '#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0\necho hi\n' >"$tmp/t/tools/run"
  printf '# SPDX-License-Identifier: Apache-2.0\nproject(x)\n' >"$tmp/t/CMakeLists.txt"
  printf 'row 1 2\n' >"$tmp/t/bench/baseline/b.txt"
  printf '# Docs\n' >"$tmp/t/docs/a.md"
}
check() { "$checker" --root "$tmp/t" >"$tmp/out" 2>&1; }

tree; check; verdict "a tree in order" $? 0 ', 0 problem'
tree; rm "$tmp/t/LICENSE"; check; verdict "no LICENSE" $? 1 'LICENSE: missing'
tree; printf 'int x;\n' >"$tmp/t/mm/a.cpp"; check; verdict "a C++ file without the line" $? 1 '^mm/a.cpp:1: no'
tree; printf '#!/usr/bin/env bash\necho hi\n' >"$tmp/t/tools/run"; check; verdict "a script without it" $? 1 '^tools/run:1: no'
tree; printf 'project(x)\n' >"$tmp/t/CMakeLists.txt"; check; verdict "a CMake file without it" $? 1 '^CMakeLists.txt:1: no'
tree; printf '\n\n\n\n\n// SPDX-License-Identifier: Apache-2.0\n' >"$tmp/t/mm/a.cpp"; check; verdict "the line on line 6" $? 1 '^mm/a.cpp:1: no'
tree; printf 'blob\n' >"$tmp/t/mm/data.bin"; check; verdict "a file of no known kind" $? 1 'mm/data.bin: neither a known source'
"$checker" --root "$tmp/nowhere" >"$tmp/out" 2>&1; verdict "a root that is no directory" $? 2 'not a directory'
summary
