#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tools/check-shell-doc (the check behind CTest BOARD/shell-doc) on a
# made-up console log and shell reference: one that matches, then one
# difference at a time: a command with no entry, an entry for no command,
# a subcommand with no heading, a heading for no subcommand; and a log
# without a `help` listing.
#
#   test-check-shell-doc.sh PATH/TO/check-shell-doc
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-check-shell-doc.sh PATH/TO/check-shell-doc (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

console_log 'Magpie booting\nmagpie> help\n  help         list commands, or describe one: help [command]\n  kmem         kmem reap | move | test KIND|all | exercise [rounds] | exercise status\n  kmemleak     leak scanner: kmemleak [all|scan|on|off|stack=|dump=ADDR|since N [unreferenced]|test [done]]\n  crash        deliberately fail: crash panic|stack (halts)\nmagpie> poweroff\npowering off'

doc() {
  cat >"$tmp/shell.md" <<'EOF'
# The shell

### `help`

```console
### `frobnicate`
(inside code: not an entry)
```

### `kmem`

#### `kmem reap`
#### `kmem move`
#### `kmem test`
#### `kmem exercise [rounds]`, `kmem exercise status`

### `kmemleak`

#### `kmemleak all`
#### `kmemleak scan`
#### `kmemleak on`, `kmemleak off`
#### `kmemleak stack=on|off`
#### `kmemleak dump=ADDR`
#### `kmemleak since N [unreferenced]`
#### `kmemleak test [done]`

### `crash`

## Elsewhere

#### `kmem notasubcommand` (not under a command's entry)
EOF
}

# run NAME WANT-STATUS WANT-PATTERN: checks $tmp/shell.md against $tmp/log.
run() {
  "$checker" --doc "$tmp/shell.md" --subcommands kmem,kmemleak "$tmp/log" >"$tmp/out" 2>&1
  verdict "$1" $? "$2" "$3"
}

doc
run "the reference matches help" 0 'help lists 4 commands; shell.md has 4 command entries and 12 subcommand headings; 0 differences$'

doc
sed -i '/^### `crash`/d' "$tmp/shell.md"
run "a command help lists has no entry" 1 'shell.md: `crash` is listed by help \("deliberately fail: crash panic\|stack \(halts\)"\) but has no entry'

doc
printf '\n### `uptime`\n' >>"$tmp/shell.md"
run "an entry for a command help does not list" 1 'shell.md:[0-9]+: entry ### `uptime`: help lists no such command'

doc
sed -i '/^#### `kmem move`/d' "$tmp/shell.md"
run "a subcommand of kmem with no heading" 1 'shell.md: `kmem move` is in help.s synopsis but has no heading'

doc
sed -i '/^#### `kmemleak stack=on|off`/d' "$tmp/shell.md"
run "a kmemleak setting (stack=) with no heading" 1 'shell.md: `kmemleak stack=` is in help.s synopsis but has no heading'

doc
sed -i 's/^#### `kmemleak on`, `kmemleak off`/#### `kmemleak on`/' "$tmp/shell.md"
run "every code span of a heading counts: off lost" 1 'shell.md: `kmemleak off` is in help.s synopsis but has no heading'

doc
sed -i 's/^#### `kmem reap`/#### `kmem reap`\n#### `kmem shrink`/' "$tmp/shell.md"
run "a heading for a subcommand help does not list" 1 'shell.md:[0-9]+: heading for `kmem shrink`: help.s synopsis .* has no such subcommand'

doc
sed -i 's/^### `crash`/### `crash`\n#### `crash panic`/' "$tmp/shell.md"
run "a command with one subcommand heading needs them all" 1 'shell.md: `crash stack` is in help.s synopsis but has no heading'

doc
console_log 'Magpie booting\nmagpie> version\nMagpie 0.1.0'
run "a log without a help listing is bad input" 2 'no `help` listing in the log'

"$checker" --help >"$tmp/out" 2>&1
verdict "--help states the convention" $? 0 '### `kmem`'

summary
