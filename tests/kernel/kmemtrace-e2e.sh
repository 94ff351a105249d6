#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kmemtrace end to end on one board: boot, trace a known workload, dump the
# rings over the console, decode the capture with the host tool kmtrace and
# check its counts against the kernel's own.
# Usage: kmemtrace-e2e.sh QEMU_RUN BOARD BUILD_DIR KMTRACE
#
# 1. A dump. Checks, exactly:
#  - per CPU, the events kmtrace decoded = the events `kmemtrace stats`
#    says the rings hold (what the dump sent);
#  - per type, allocs and frees decoded = the kernel's per-type counts;
#  - per call site of the workload (kernel/mm/commands.cpp exercise_cpu,
#    named through the ELF's DWARF): allocs and frees = what `kmem exercise`
#    says it did;
#  - no damaged frames, no overruns, the abi_version the kernel printed.
set -uo pipefail
run=$1 board=$2 build=$3 kmtrace=$4
rounds=300
log=$(mktemp) sum=$(mktemp) sites=$(mktemp)
trap 'rm -f "$log" "$sum" "$sites"' EXIT
if [[ ! -x $kmtrace ]]; then
  echo "FAILED: no host tool at $kmtrace (build the host preset: cmake --preset host && cmake --build build/host)"
  exit 1
fi

printf 'kmemtrace clear\nkmemtrace on\nkmem exercise %s\nkmemtrace off\nkmemtrace stats\nkmemtrace dump\npoweroff\n' "$rounds" |
  "$run" "$board" --build-dir "$build" --timeout 120 >"$log" 2>&1
st=$?
fail() { echo "FAILED: $*"; echo "--- console (frames elided) ---"; grep -v '^@KMT' "$log"; echo "---"; exit 1; }
[[ $st -eq 0 ]] || fail "qemu-run exited $st"
grep -q '^kmemtrace: dump: ' "$log" || fail "no dump summary line"
"$kmtrace" summary --json "$log" >"$sum" || fail "kmtrace summary exited $?"
"$kmtrace" sites --json --elf "$build/kernel.elf" "$log" >"$sites" || fail "kmtrace sites exited $?"

python3 - "$log" "$sum" "$sites" "$rounds" <<'PY' || fail "counts differ (above)"
import json, re, sys
log, summ, sites, rounds = open(sys.argv[1], errors="replace").read(), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
bad = []
def expect(what, got, want):
    print(("ok:     " if got == want else "WRONG:  ") + f"{what}: kmtrace {got}, kernel {want}")
    if got != want: bad.append(what)

m = re.search(r"kmemtrace: \w+, abi_version (\d+)", log)
expect("abi_version", summ["abi_version"], int(m.group(1)))
types = ["kmalloc", "cache", "pages", "vmem"]
kernel_cpu, kernel_type = {}, {t: [0, 0] for t in types}
for line in log.splitlines():
    f = line.split()
    if len(f) == 10 and f[0].isdigit() and "/" in f[6]:
        kernel_cpu[f[0]] = int(f[2])
        expect(f"cpu {f[0]} overrun bytes", int(f[4]), 0)
        for t, col in zip(types, f[6:10]):
            a, fr = col.split("/")
            kernel_type[t][0] += int(a); kernel_type[t][1] += int(fr)
if not kernel_cpu: bad.append("no per-CPU rows in kmemtrace stats")
expect("per-CPU events", {k: v for k, v in summ["per_cpu"].items() if v or k in kernel_cpu},
       {k: v for k, v in kernel_cpu.items() if v or k in summ["per_cpu"]})
for t in types:
    expect(f"{t} allocs", summ["by_type"].get(t, {}).get("allocs", 0), kernel_type[t][0])
    expect(f"{t} frees", summ["by_type"].get(t, {}).get("frees", 0), kernel_type[t][1])
expect("events", summ["events"], sum(kernel_cpu.values()))
for k in ["bad_frames", "crc_errors", "rejected_frames", "missing_bytes", "total_overruns", "unknown_events"]:
    expect(k, summ[k], 0)

# The workload's own account: "kmem exercise: 4 cpus x 300 rounds: kmem_alloc N, kmem_zalloc N, ..."
m = re.search(r"kmem exercise: (\d+) cpus x (\d+) rounds: kmem_alloc (\d+), kmem_zalloc (\d+), large kmem_alloc (\d+), "
              r"kmem_cache_alloc (\d+), page_alloc (\d+), vmem_alloc (\d+), each freed; (\d+) failed", log)
if not m:
    bad.append("no kmem exercise line")
else:
    did = list(map(int, m.groups()))
    expect("exercise failures", did[8], 0)
    # Sites in exercise_cpu: the kernel's calls, one site each, in source order.
    ex = sorted((s for s in sites["sites"] if "exercise_cpu" in s.get("function", "")), key=lambda s: s["line"])
    got = [(s["type"], s["allocs"], s["frees"]) for s in ex]
    want = [("kmalloc", did[2], did[2]), ("kmalloc", did[3], did[3]), ("kmalloc", did[4], did[4]),
            ("cache", did[5], did[5]), ("pages", did[6], did[6]), ("vmem", did[7], did[7])]
    expect("exercise_cpu call sites (type, allocs, frees) by line", got, want)
    expect("exercise_cpu file", sorted({s["file"].rsplit("/", 1)[-1] for s in ex}), ["commands.cpp"])
sys.exit(1 if bad else 0)
PY
echo "ok: kmemtrace dump end to end on $board"

# 2. Streaming, from boot (bootarg), with small rings: other cores run the
#    workload while the shell's core streams their events; what the rings
#    could not hold is counted. Then a longer workload in the foreground,
#    which holds the stream back until it returns (kernel/mm/kmemtrace_control.cpp,
#    Streaming): every core's 64 KiB ring overflows (about 240 bytes of events
#    a round, 1000 rounds), so events are dropped for certain. The capture
#    must account for every event: per CPU, events decoded = events the
#    kernel recorded; dropped events and overrun bytes as the kernel
#    counted them, and not 0; no stream bytes missing.
#    A board of one core (QEMU_SMP=1 in a fixed shape: the MPS2) has no
#    other core: the first exercise runs in the foreground there too, and
#    the stream carries its events after each command.
conf=$(dirname "$run")/../boards/$board/board.conf
exercise="kmem exercise $rounds background"
overflow_rounds=1000
if [[ -n $(sed -n 's/^QEMU_FIXED_SHAPE=//p' "$conf") && $(sed -n 's/^QEMU_SMP=//p' "$conf") == 1 ]]; then
  exercise="kmem exercise $rounds"
fi
{ printf 'kmemtrace stream on\n%s\n' "$exercise"; sleep 3
  for _ in 1 2 3 4 5; do printf 'kmem exercise status\n'; sleep 1; done
  printf 'kmem exercise %s\n' "$overflow_rounds"; sleep 2
  printf 'kmemtrace stream off\nkmemtrace off\nkmemtrace stats\nkmemtrace dump drain\npoweroff\n'; } |
  "$run" "$board" --build-dir "$build" --timeout 120 --append "kmemtrace=on kmemtrace.ring=64K" >"$log" 2>&1
st=$?
[[ $st -eq 0 ]] || fail "streaming run: qemu-run exited $st"
grep -q '^kmemtrace: on, abi_version [0-9]*, [0-9]* rings of 64 KiB' "$log" || fail "kmemtrace=on kmemtrace.ring=64K not taken at boot"
grep -q "^kmem exercise: [0-9]* cpus x $rounds rounds" "$log" || fail "the background exercise did not finish"
grep -q "^kmem exercise: [0-9]* cpus x $overflow_rounds rounds" "$log" || fail "the foreground exercise did not run"
[[ $(grep -c '^@KMT' "$log") -gt 10 ]] || fail "nothing streamed"
"$kmtrace" summary --json "$log" >"$sum" || fail "kmtrace summary exited $?"
python3 - "$log" "$sum" <<'PY' || fail "streamed counts differ (above)"
import json, re, sys
log, summ = open(sys.argv[1], errors="replace").read(), json.load(open(sys.argv[2]))
bad = []
def expect(what, got, want):
    print(("ok:     " if got == want else "WRONG:  ") + f"{what}: kmtrace {got}, kernel {want}")
    if got != want: bad.append(what)
recorded, dropped, overrun = {}, 0, 0
for line in log.splitlines():
    f = line.split()
    if len(f) == 10 and f[0].isdigit() and "/" in f[6]:
        recorded[f[0]] = int(f[1])
        dropped += int(f[5]); overrun += int(f[4])
        expect(f"cpu {f[0]} events still pending after the drain", int(f[2]), 0)
expect("per-CPU events streamed", {k: v for k, v in summ["per_cpu"].items() if v}, {k: v for k, v in recorded.items() if v})
expect("dropped events", summ["dropped_events"], dropped)
expect("overrun bytes", summ["total_overruns"], overrun)
# The foreground exercise overflowed the rings: 0 here means nothing was
# tested about drops.
if dropped == 0 or overrun == 0:
    print(f"WRONG:  the kernel counted {dropped} dropped events and {overrun} overrun bytes: the foreground "
          "exercise must have overflowed the rings")
    bad.append("no drops")
m = re.search(r"^total_overruns (\d+)", log, re.M)
expect("total_overruns line", summ["total_overruns"], int(m.group(1)) if m else -1)
for k in ["bad_frames", "crc_errors", "rejected_frames", "missing_bytes", "unknown_events"]:
    expect(k, summ[k], 0)
sys.exit(1 if bad else 0)
PY
echo "ok: kmemtrace streaming end to end on $board"
