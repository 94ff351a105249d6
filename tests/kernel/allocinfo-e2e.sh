#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Allocation profiling end to end on one board: with profiling on from boot
# and kmemtrace recording, `allocinfo test` makes known allocations at known
# lines of kernel/mm/allocinfo.cpp; then the kernel's `allocinfo` and `kmtrace
# allocinfo` (rebuilt offline from the dump of the same run) must print the
# same lines, in the same format, for every site of that file; each site has
# the count the command made; --totals adds up to RAM with nothing live
# untagged; `allocinfo test done` takes them all back to
# zero; bad options are refused; `sysctl vm.mem_profiling` reads and
# switches; nothing is reported as an allocator error.
# Usage: allocinfo-e2e.sh QEMU_RUN BOARD BUILD_DIR KMTRACE [qemu-run options...]
set -uo pipefail
[[ $# -ge 4 ]] || { echo "usage: allocinfo-e2e.sh QEMU_RUN BOARD BUILD_DIR KMTRACE [qemu-run options...]" >&2; exit 2; }
run=$1 board=$2 build=$3 kmtrace=$4
shift 4
if [[ ! -x $kmtrace ]]; then
  echo "FAILED: no host tool at $kmtrace (build the host preset: cmake --preset host && cmake --build build/host)"
  exit 1
fi
log=$(mktemp) offline=$(mktemp)
trap 'rm -f "$log" "$offline"' EXIT
input='sysctl vm.mem_profiling
kmemtrace clear
kmemtrace on
allocinfo test
kmemtrace off
allocinfo --nonzero
allocinfo --totals --top 1
kmemtrace dump
allocinfo test done
allocinfo --nonzero
allocinfo --top 3 --sort calls
allocinfo --sort size
allocinfo --top 0
allocinfo --nonzero extra
sysctl vm.mem_profiling 0
sysctl vm.mem_profiling
sysctl vm.mem_profiling 1
sysctl vm.mem_profiling 7
kmem errors
poweroff
'
printf '%s' "$input" | "$run" "$board" --build-dir "$build" --timeout 200 --append "kmemtrace sysctl.vm.mem_profiling=1" "$@" \
  >"$log" 2>&1
st=$?
fail() { echo "FAILED: $*"; echo "--- console (frames elided) ---"; grep -v '^@KMT' "$log"; echo "---"; exit 1; }
[[ $st -eq 0 ]] || fail "qemu-run exited $st"
"$kmtrace" allocinfo --elf "$build/kernel.elf" "$log" >"$offline" || fail "kmtrace allocinfo exited $?"
python3 - "$log" "$offline" <<'PY' || fail "see above"
import re, sys
text = open(sys.argv[1], errors="replace").read().replace("\r", "")
offline = open(sys.argv[2]).read().splitlines(keepends=True)
bad = []
def check(what, ok):
    print(("ok:     " if ok else "WRONG:  ") + what)
    if not ok: bad.append(what)

# The kernel's tables, each from its command's echo to the next prompt.
def table(after):
    i = text.index(after)
    body = text[i:].split("\n", 1)[1].split("magpie> ", 1)[0]
    return body.splitlines(keepends=True)
live = table("magpie> allocinfo --nonzero\n")
line_re = re.compile(r"^ {0,11}-?\d{1,12} {1,8}\d{1,8} \S+:\d+ func:\S+ \n$")
for name, t in (("kernel", live), ("kmtrace", offline)):
    check(f"{name}: the header lines", t[:2] == ["allocinfo - version: 1.0\n", "#     <size>  <calls> <tag info>\n"])
    check(f"{name}: every line in Linux's format", all(line_re.match(l) for l in t[2:]))
site = "kernel/mm/allocinfo.cpp:"
mine = lambda t: [l for l in t[2:] if site in l]
k, o = mine(live), mine(offline)
check(f"the kernel's {len(k)} lines of {site} are kmtrace's {len(o)}\n" + "".join("        kernel:  " + l for l in k)
      + "".join("        kmtrace: " + l for l in o), k == o)
calls = sorted(int(l.split()[1]) for l in k)
check(f"one line per kind of allocation the test made, with its count ({calls})", calls == sorted([12, 5, 9, 1, 3, 1, 4, 1]))
check("the test's func is test_start", all(l.rstrip().endswith("func:test_start") for l in k))
# After 'allocinfo test done', no line of the test's sites in the --nonzero table.
i = text.index("allocinfo test: freed")
done_table = text[i:].split("magpie> allocinfo --nonzero\n", 1)[1].split("magpie> ", 1)[0]
check("after allocinfo test done, none of its sites is nonzero", site not in done_table)
top = text.split("magpie> allocinfo --top 3 --sort calls\n", 1)[1].split("magpie> ", 1)[0].splitlines()
check(f"--top 3 prints the header and 3 lines ({len(top)})", len(top) == 5)
check("--top 3 --sort calls is in descending calls", [int(l.split()[1]) for l in top[2:]] == sorted((int(l.split()[1]) for l in top[2:]), reverse=True))
for cmd, msg in (("allocinfo --sort size", "expected bytes or calls"), ("allocinfo --top 0", "expected a number of lines"),
                 ("allocinfo --nonzero extra", "unknown argument 'extra'"), ("sysctl vm.mem_profiling 7", "expected 0 or 1")):
    out = text.split("magpie> " + cmd + "\n", 1)[1].split("magpie> ", 1)[0]
    check(f"'{cmd}' refused: {out.strip()}", msg in out)
check("sysctl reads 1 at boot, 0 once switched off, 1 again",
      re.findall(r"vm\.mem_profiling = (\S+)", text) == ["1", "0", "0", "1"])
# The books (--totals), profiling on since boot: nothing live is untagged,
# and the lines add up to RAM.
tot = text.split("magpie> allocinfo --totals --top 1\n", 1)[1].split("magpie> ", 1)[0]
vals = {m.group(2).split(":")[0].split(" (")[0]: int(m.group(1)) for m in re.finditer(r"^# +(-?\d+) (.*)$", tot, re.M)}
check(f"--totals prints every line ({sorted(vals)})",
      {"tagged", "untagged", "held for reuse", "allocator metadata", "free", "reserved", "RAM"} <= set(vals))
if "RAM" in vals:
    parts = sum(v for k, v in vals.items() if k != "RAM")
    check(f"--totals: the parts add up to RAM ({parts} = {vals['RAM']})", parts == vals["RAM"])
    check(f"--totals: nothing live is untagged ({vals.get('untagged')})", vals.get("untagged") == 0)
    check("--totals says the books balance", "RAM: the sum of the above" in tot)
check("no allocator error or panic", "PANIC" not in text and "\n0 allocator errors reported since boot" in text)
sys.exit(1 if bad else 0)
PY
# never: no references (fewer descriptor pages), the switch read-only.
printf 'sysctl vm.mem_profiling\nsysctl vm.mem_profiling 1\nallocinfo --nonzero\npoweroff\n' |
  "$run" "$board" --build-dir "$build" --timeout 100 --append "sysctl.vm.mem_profiling=never" "$@" >"$offline" 2>&1 ||
  fail "qemu-run (never) exited $?"
python3 - "$log" "$offline" <<'PY' || { echo "--- console (never) ---"; cat "$offline"; fail "never: see above"; }
import re, sys
on, never = (open(f, errors="replace").read().replace("\r", "") for f in sys.argv[1:3])
bad = []
def check(what, ok):
    print(("ok:     " if ok else "WRONG:  ") + what)
    if not ok: bad.append(what)
desc = lambda t: int(re.search(r"(\d+) descriptor pages", t).group(1))
check(f"never: fewer descriptor pages ({desc(never)} < {desc(on)})", desc(never) < desc(on))
check("never: sysctl reads never", "vm.mem_profiling = never" in never)
check("never: switching it on is refused", "vm.mem_profiling is read-only" in never)
check("never: allocinfo says so", "profiling is never" in never)
sys.exit(1 if bad else 0)
PY
echo "allocinfo-e2e: $board $*: ok"
