#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tools/check-docs (the link check behind CTest docs.links) on a small
# made-up tree: one whose links all resolve (file links, anchors in the file
# itself and in others, headings with code, punctuation and repeats, links
# in code that are not links), then the same tree with one thing broken at
# a time: a missing file, an anchor no heading has (in another file, in the
# file itself), a link out of the tree, an anchor on a file that has no
# headings; and bad usage.
#
#   test-check-docs.sh PATH/TO/check-docs
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-check-docs.sh PATH/TO/check-docs (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# tree: writes the good tree into $tmp/t (README.md, docs/, a source file).
tree() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t/docs/design" "$tmp/t/src"
  printf 'int main() {\n  return 0;\n}\n' >"$tmp/t/src/main.c"
  cat >"$tmp/t/README.md" <<'EOF'
# Project

See [getting started](docs/getting-started.md), its
[build step](docs/getting-started.md#build-the-image-cmake---preset), the
[memory subsystem](#the-memory-subsystem-mm) below, a
[design page](docs/design/page.md#3-buddies), the [source](src/main.c#L2)
and [the tree](src/).
![logo](docs/getting-started.md)

## The memory subsystem (`mm/`)

```sh
echo "[not a link](nowhere.md)"
```

Inline code is no link either: `[x](nowhere.md)`. A URL is not fetched:
[site](https://example.invalid/x.md#y).

[ref]: docs/design/page.md#notes-1
EOF
  cat >"$tmp/t/docs/getting-started.md" <<'EOF'
# Getting started

## Build the image (`cmake --preset`)

Back to the [README](../README.md#project) and [here](#getting-started).
EOF
  cat >"$tmp/t/docs/design/page.md" <<'EOF'
Page allocator
==============

## 3. Buddies

## Notes

## Notes

Up: [getting started](../getting-started.md), [design](./page.md#page-allocator).
EOF
}

# run NAME WANT-STATUS WANT-PATTERN [ARGS]: checks $tmp/t with ARGS.
run() {
  local name=$1 want=$2 pattern=$3
  shift 3
  "$checker" --root "$tmp/t" "$@" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}

tree
run "every link resolves" 0 '^check-docs: 3 files, 12 relative links, 0 broken$'

tree
sed -i 's|docs/getting-started.md), its|docs/getting-startd.md), its|' "$tmp/t/README.md"
run "a missing file is named with file:line" 1 "^README.md:3: no such file or directory: docs/getting-startd.md \(link 'docs/getting-startd.md'\)$"

tree
sed -i 's|#3-buddies|#3-buddy|' "$tmp/t/README.md"
run "an anchor no heading of the other file has" 1 "^README.md:6: no heading in docs/design/page.md has the anchor '#3-buddy' \(did you mean '#3-buddies'\?\)"

tree
sed -i 's|(#getting-started)|(#getting-started-now)|' "$tmp/t/docs/getting-started.md"
run "an anchor no heading of the file itself has" 1 "^docs/getting-started.md:5: no heading in docs/getting-started.md has the anchor '#getting-started-now'"

tree
sed -i 's|#notes-1|#notes-2|' "$tmp/t/README.md"
run "a repeated heading has -1, not -2" 1 "^README.md:19: no heading in docs/design/page.md has the anchor '#notes-2'"

tree
sed -i 's|(#the-memory-subsystem-mm)|(#the-memory-subsystem-mm-)|' "$tmp/t/README.md"
run "a heading's code and punctuation are slugged as GitHub does" 1 "^README.md:5: .*'#the-memory-subsystem-mm-'"

tree
sed -i 's|(../README.md#project)|(../../README.md)|' "$tmp/t/docs/getting-started.md"
run "a link out of the tree" 1 "^docs/getting-started.md:5: '../../README.md' leads outside the tree"

tree
sed -i 's|src/main.c#L2|src/main.c#L9|' "$tmp/t/README.md"
run "a line anchor past the end of a source file" 1 "^README.md:6: '#L9' is not a line anchor \(#L1 to #L4\) of src/main.c"

tree
sed -i 's|(src/)|(src/#top)|' "$tmp/t/README.md"
run "an anchor on a directory" 1 "^README.md:7: an anchor on a directory"

tree
printf '\nA [second](docs/nope.md) and a [third](#nope) on one line.\n' >>"$tmp/t/README.md"
run "every broken link is reported, not only the first" 1 '^check-docs: 3 files, 14 relative links, 2 broken$'

run "--help says what it checks" 0 '^usage: tools/check-docs' --help
"$checker" --root "$tmp/nowhere" >"$tmp/out" 2>&1
verdict "a root that is no directory is bad usage" $? 2 'is not a directory'

summary
