#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest BOARD/rseq-singlestep: the restartable sections' KTESTs
# (rseq_magazines_survive_interrupts_that_allocate,
# rseq_kmemtrace_records_survive_interrupts: kmemtrace's ring writes, and
# rseq_synchronous_exception_inside_a_section_restarts_it) with
# QEMU translating one guest instruction per block. QEMU's TCG takes an interrupt only
# between translation blocks, which end at branches, so in a normal run an
# interrupt never lands inside a section without a branch (a counter's
# load, add and store) and a missing rewind there goes unseen; one
# instruction per block lets it land anywhere. Two boots: the untraced
# fast paths, then allocation profiling on from boot (the profiled fast
# paths and their counter sections: the first test then also checks the
# counts at its call sites, and the run that profiling is on; the
# kmemtrace test, which needs every hook off, skips). Passes when the
# first boot reports the three tests passed and the second all but the
# kmemtrace one passed and that one skipped, with no failure, no panic, and the shell
# reached poweroff. (Not on a board whose arch has no restartable
# sections: tests/kernel/CMakeLists.txt.)
#
#   rseq-singlestep.sh QEMU_RUN BOARD BUILD_DIR [QEMU-RUN OPTIONS...]
set -uo pipefail
[[ $# -ge 3 ]] || { echo "usage: rseq-singlestep.sh QEMU_RUN BOARD BUILD_DIR [QEMU-RUN OPTIONS...]" >&2; exit 2; }
run=$1 board=$2 build=$3
shift 3
# QEMU 8.1 and later spell it -accel tcg,one-insn-per-tb=on (and deprecate
# -singlestep); the QEMU of Debian 12 knows only -singlestep.
qemu=$("$run" "$board" --build-dir "$build" --dry-run | awk '{print $1}')
if "$qemu" -help 2>/dev/null | grep -q one-insn-per-tb; then
  one=(-accel tcg,one-insn-per-tb=on)
else
  one=(-singlestep)
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fails=0
bad() { echo "rseq-singlestep: $*"; fails=1; }
for args in "" "sysctl.vm.mem_profiling=1"; do
  what=${args:-"untraced"}
  # A blank line first: one instruction per block slows OpenSBI's start
  # past QEMU_INPUT_DELAY on a busy host, and its flush of the UART then
  # takes the first byte typed (qemu-virt-riscv64 lost the 's' of sysctl).
  printf '\nsysctl vm.mem_profiling\ntest rseq_\npoweroff\n' |
    "$run" "$board" --build-dir "$build" --timeout 240 --append "$args" "$@" -- "${one[@]}" >"$log" 2>&1
  status=$?
  sed -i 's/\r$//' "$log"
  sed "s/^/[$what] /" "$log"
  [[ $status -eq 0 ]] || bad "$what: the run exited with status $status"
  grep -q '^PANIC' "$log" && bad "$what: the kernel panicked"
  grep -q 'FAIL' "$log" && bad "$what: a check failed"
  grep -q '^\[  OK  \] rseq_magazines_survive_interrupts_that_allocate' "$log" || bad "$what: the magazines' test did not pass"
  grep -q '^\[  OK  \] rseq_synchronous_exception_inside_a_section_restarts_it' "$log" ||
    bad "$what: the synchronous exception's test did not pass"
  if [[ -n $args ]]; then
    grep -q '^\[ SKIP \] rseq_kmemtrace_records_survive_interrupts' "$log" && grep -q '^2 passed, 0 failed, 1 skipped' "$log" ||
      bad "$what: not 2 passed and kmemtrace's test skipped"
  else
    grep -q '^\[  OK  \] rseq_kmemtrace_records_survive_interrupts' "$log" && grep -q '^3 passed, 0 failed, 0 skipped' "$log" ||
      bad "$what: the three tests did not pass"
  fi
  grep -q '^powering off' "$log" || bad "$what: the shell did not reach poweroff"
  want=0
  [[ -n $args ]] && want=1
  grep -q "^vm.mem_profiling = $want" "$log" || bad "$what: profiling is not $want"
done
[[ $fails -eq 0 ]] && echo "rseq-singlestep: PASS"
exit $fails
