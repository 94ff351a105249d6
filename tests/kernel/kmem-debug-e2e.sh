#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kmem's debug modes end to end on one board: boot with
# kmem.debug=redzone+poison+audit,cache=kmem_alloc_64, make every misuse
# class once (`kmem test all`), capture the reports over the console,
# symbolize them and check:
#  - each misuse gave exactly one report, of its own kind, naming the
#    cache, with the offset and bytes for an overrun (40: the size asked
#    for), an underrun (1 before the buffer) and a write after free (8);
#    the long overrun (100 bytes, into the next buffer) two: kmem verify's
#    and the free's, the same buffer and offset, verify's count a real one;
#  - the audited reports carry backtraces whose frames symbolize to the
#    function of `kmem test` that made the misuse (kernel/mm/debug_commands.cpp),
#    and name the command that ran (context "command kmem");
#  - afterwards the scratch cache verifies clean with buffers checked (a
#    count above 0) and the caches are destroyed; `kmem verify` over every
#    debugged cache finds nothing (kmem_alloc_64 may have no slab then:
#    the idle reap gives empty slabs back, so its count may be 0; the
#    counts that must be real are kmem test's); `kmem log` names the
#    command of each entry; `kmem debug` lists
#    kmem_alloc_64 as debugged and no other kmem_alloc cache;
#  - bad input to each command is refused with a message and the shell
#    goes on.
# Usage: kmem-debug-e2e.sh QEMU_RUN BOARD BUILD_DIR SYMBOLIZE [qemu-run options...]
set -uo pipefail
[[ $# -ge 4 ]] || { echo "usage: kmem-debug-e2e.sh QEMU_RUN BOARD BUILD_DIR SYMBOLIZE [qemu-run options...]" >&2; exit 2; }
run=$1 board=$2 build=$3 symbolize=$4
shift 4
log=$(mktemp) sym=$(mktemp)
trap 'rm -f "$log" "$sym"' EXIT

input='kmem debug
kmem test all
kmem verify
kmem verify kmem_alloc_64
kmem verify nosuchcache
kmem verify kmem_alloc_128
kmem log 0xzz
kmem test bogus
kmem test
kmem log
kmem errors
poweroff
'
printf '%s' "$input" | "$run" "$board" --build-dir "$build" --timeout 200 \
  --append "kmem.debug=redzone+poison+audit,cache=kmem_alloc_64" "$@" >"$log" 2>&1
st=$?
fail() { echo "FAILED: $*"; echo "--- console ---"; cat "$log"; echo "---"; exit 1; }
[[ $st -eq 0 ]] || fail "qemu-run exited $st"
"$symbolize" "$board" "$log" --elf "$build/kernel.elf" >"$sym" || fail "symbolize exited $?"

python3 - "$sym" <<'PY' || fail "see above"
import re, sys
text = open(sys.argv[1], errors="replace").read().replace("\r", "")
bad = []
def check(what, ok):
    if not ok:
        bad.append(what)

check("the bootarg is taken", "mm: debug modes redzone+poison+audit for the named caches" in text)
check("kmem debug lists kmem_alloc_64", re.search(r"^\s+kmem_alloc_64\s+redzone\+poison\+audit", text, re.M))
check("no other kmem_alloc cache is debugged", not re.search(r"^\s+kmem_alloc_(?!64\b)\d+\s+redzone", text, re.M))

# Each misuse: its section, from "kmem test: NAME" to "kmem test: NAME: N report(s)".
kinds = {
    "overrun": "buffer overrun",
    "long-overrun": "buffer overrun",
    "underrun": "buffer underrun",
    "write-after-free": "write after free",
    "double-free": "double free",
    "interior": "free of an address inside a buffer",
    "wrong-cache": "free to the wrong cache",
    "wrong-size": "kmem_free with the wrong size",
    "stranger": "free of a pointer kmem never allocated",
    "destroy-live": "kmem_cache_destroy of a cache with live objects",
}
# The function of kmem test that made each audited misuse (its lambda, in
# the symbolized frames: kernel/mm/debug_commands.cpp).
for name, kind in kinds.items():
    m = re.search(r"^kmem test: %s\n(.*?)^kmem test: %s: (\d+) report\(s\)" % (re.escape(name), re.escape(name)),
                  text, re.M | re.S)
    if not m:
        check("a section for " + name, False)
        continue
    body, n = m.group(1), int(m.group(2))
    want = 2 if name == "long-overrun" else 1
    check(name + ": %d report(s) (got %d)" % (want, n), n == want)
    reports = re.findall(r"^kmem: (.*?) in '([^']+)': address (0x[0-9a-f]+)", body, re.M)
    check(name + ": %d report line(s)" % want, len(reports) == want)
    for rep in reports:
        check(name + ": kind '%s' (got '%s')" % (kind, rep[0]), rep[0].startswith(kind))
    if name == "overrun":
        check("overrun at offset 40 with the bytes written", re.search(r"first bad byte at offset 40 \(0x28\): 41 41", body))
        check("overrun: the allocation's backtrace", "last allocated on cpu" in body)
        check("overrun: the command that allocated", re.search(r"last allocated on cpu \d+ \(command kmem\)", body))
    if name == "long-overrun":
        check("long overrun: verify and the free name the same buffer",
              len(reports) == 2 and reports[0][2] == reports[1][2])
        check("long overrun: both at offset 40",
              len(re.findall(r"first bad byte at offset 40 \(0x28\): 43 43", body)) == 2)
        check("long overrun: into the next buffer", len(re.findall(r"the write ran on into the next 1 buffer", body)) == 2)
        check("long overrun: kmem verify checked buffers and found it",
              re.search(r"^kmem test: kmem verify: [1-9]\d* buffers checked, 1 corrupt$", body, re.M))
    if name == "underrun":
        check("underrun: the byte before the buffer", re.search(r"first bad byte 1 before the buffer: 44$", body, re.M))
    if name == "write-after-free":
        check("write after free at offset 8", re.search(r"first bad byte at offset 8 \(0x8\): 00 be ad de", body))
        check("write after free: the last free's backtrace", "last freed on cpu" in body)
    if name in ("overrun", "long-overrun", "underrun", "write-after-free", "double-free", "destroy-live"):
        check(name + ": frames symbolized into debug_commands.cpp",
              re.search(r"debug_commands\.cpp:\d+", body))

check("all ten, then clean with buffers checked",
      re.search(r"^kmem test: 10 misuse\(s\), 11 report\(s\); afterwards the caches verify clean "
                r"\([1-9]\d* buffers checked\) and are destroyed$", text, re.M))
check("kmem verify over every debugged cache: clean", re.search(r"^kmem verify: \d+ buffers checked, 0 corrupt$", text, re.M))
check("kmem verify of an unknown cache refused", "no cache named 'nosuchcache'" in text)
check("kmem verify of an undebugged cache refused", "'kmem_alloc_128' is not debugged" in text)
check("kmem log with a bad address refused", "'0xzz' is not an address" in text)
check("kmem test with an unknown misuse refused", "unknown misuse 'bogus'" in text)
check("kmem test without a misuse: usage", text.count("usage: kmem test overrun|") >= 2)
check("kmem log prints entries", re.search(r"^\d+ entries \(of the last \d+ operations; \d+ logged since boot\)$", text, re.M))
check("kmem log names the command of each entry",
      re.search(r"^\s+\d+  cpu \d+\s+tick \d+\s+(alloc|free)\s+0x[0-9a-f]+  .+  by command kmem$", text, re.M))
check("the shell went on to the end", "powering off" in text)
if bad:
    for b in bad: print("FAILED:", b)
    sys.exit(1)
print("kmem-debug-e2e: PASS")
PY
