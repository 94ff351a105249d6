#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Drives the console shell of a board in QEMU over its serial line and checks
# what it prints. Usage: shell-test.sh QEMU_RUN BOARD BUILD_DIR
set -uo pipefail
run=$1 board=$2 build=$3
fails=0 total=0 skips=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# boot INPUT QEMU-RUN-ARGS...: runs the board with INPUT on its console.
boot() {
  local input=$1; shift
  printf '%b' "$input" | "$run" "$board" --build-dir "$build" --timeout 60 "$@" >"$log" 2>&1
}
# What `version` prints (kernel/commands.cpp), not the boot banner's
# "Magpie VERSION (BOARD, ARCH) booting": proof that the command ran.
version_line="^Magpie [^ ]*, board $board, arch [a-z0-9]*, built with GCC "
check() {  # check NAME CONDITION-STATUS
  total=$((total + 1))
  if [[ $2 -eq 0 ]]; then echo "ok: $1"; else echo "FAILED: $1"; echo "--- console ---"; cat "$log"; echo "---"; fails=$((fails + 1)); fi
}

# 1. cpus lists every core, poweroff exits 0: 3 cores, or the board's own
#    count where its machine has a fixed shape (raspi3b: 4; sifive_u: 4,
#    its CPUS, the U54s of its 5 harts).
ncpu=3 smp_args=(--smp 3)
conf=$(dirname "$run")/../boards/$board/board.conf
if [[ -n $(sed -n 's/^QEMU_FIXED_SHAPE=//p' "$conf") ]]; then
  ncpu=$(sed -n 's/^CPUS=//p' "$conf")
  [[ -n $ncpu ]] || ncpu=$(sed -n 's/^QEMU_SMP=//p' "$conf")
  smp_args=()
fi
boot 'cpus\npoweroff\n' "${smp_args[@]}"; st=$?
[[ $st -eq 0 && $(grep -c '^cpu [0-9]*: .* online' "$log") -eq $ncpu ]] && grep -q "^cpu $((ncpu - 1)): " "$log"
check "cpus lists $ncpu cores and poweroff exits 0" $?

# 2. Every basic command answers.
boot 'help\nversion\nuptime\nmeminfo\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && grep -q 'poweroff ' "$log" && grep -q "$version_line" "$log" &&
  grep -q '^up [0-9]*\.[0-9]* s' "$log" && grep -q '^  ram ' "$log" && grep -q 'reserved .* dtb' "$log"
check "help, version, uptime, meminfo" $?

# 2b. Typed input arrives through the UART's receive interrupt.
boot 'irqs\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && grep -Eq 'irq +[0-9]+ uart +[1-9]' "$log"
check "typed input arrives through the UART receive interrupt" $?

# 3. Unknown commands and bad arguments are reported; the shell goes on.
boot 'frobnicate\ncpus please\nhelp nosuchcmd\nversion\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && grep -q 'frobnicate: unknown command' "$log" && grep -q 'cpus: takes no arguments' "$log" &&
  grep -q "help: no command 'nosuchcmd'" "$log" && grep -q "$version_line" "$log"
check "bad input gets an error and the shell goes on" $?

# 4. Line editing: backspace erases, ^U kills the line.
boot 'verx\x7fsion\nabc\x15uptime\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && grep -q "$version_line" "$log" && grep -q '^up ' "$log" && ! grep -q 'unknown command' "$log"
check "backspace and ^U" $?

# 5. Random bytes (fixed seed), an over-long line, then a command still works.
garbage=$(python3 -c '
import random, sys
r = random.Random(1234)
b = bytes(r.randrange(256) for _ in range(6000))
sys.stdout.write("".join("\\x%02x" % c for c in b))')
long=$(printf 'x%.0s' $(seq 1 400))
boot "${garbage}\n${long}\nversion\npoweroff\n"; st=$?
[[ $st -eq 0 ]] && grep -q "$version_line" "$log" && grep -q 'line too long' "$log"
check "random bytes and over-long lines do not crash or hang the shell" $?

# 6. A fault is reported by cause and address with a backtrace that
#    tools/symbolize resolves to the functions involved; QEMU exits 3.
#    A board without an MMU (MMU=none in its board.conf: the MPS2) has
#    writable text and no guard pages: an undefined instruction instead,
#    and no stack overflow test (crash refuses those three there).
symbolize=$(dirname "$run")/symbolize
no_mmu=$(sed -n 's/^MMU=none$/1/p' "$conf")
if [[ -n $no_mmu ]]; then
  boot 'crash text\ncrash undef\n'; st=$?
  sym=$("$symbolize" "$board" "$log" --elf "$build/kernel.elf" 2>&1)
  [[ $st -eq 3 ]] && grep -q "crash: no MMU here: 'text' would corrupt memory" "$log" &&
    grep -q 'PANIC on cpu 0: unexpected exception: .*undefined instruction' "$log" &&
    grep -Eq '^pc: 0x[0-9a-f]+ .*crash_undef' <<<"$sym" && grep -Eq '^bt: 0x[0-9a-f]+ .*shell::execute' <<<"$sym" &&
    grep -Eq '^bt: 0x[0-9a-f]+ .*kernel_main' <<<"$sym"
  check "no MMU: crash text refused; an undefined instruction panics with its cause and a symbolizable backtrace" $?
else
  boot 'crash text\n'; st=$?
  sym=$("$symbolize" "$board" "$log" --elf "$build/kernel.elf" 2>&1)
  [[ $st -eq 3 ]] && grep -q 'PANIC on cpu 0: unexpected exception: .*write.*at address 0x' "$log" &&
    grep -Eq '^pc: 0x[0-9a-f]+ .*crash_text' <<<"$sym" && grep -Eq '^bt: 0x[0-9a-f]+ .*shell::execute' <<<"$sym" &&
    grep -Eq '^bt: 0x[0-9a-f]+ .*kernel_main' <<<"$sym"
  check "a write to kernel text panics with cause, address and a symbolizable backtrace" $?
fi

boot 'crash assert\n'; st=$?
[[ $st -eq 3 ]] && grep -q 'ASSERT failed: v == 42 at .*commands.cpp' "$log" && grep -q '^bt: 0x' "$log"
check "ASSERT prints expression, file:line and a backtrace" $?

# A stack overflow runs into the guard page below the stack: the panic says
# so, with the recursion folded into one backtrace line and the way back to
# the shell after it.
if [[ -n $no_mmu ]]; then
  echo "skipped: crash stack (no MMU: no guard page)"
  skips=$((skips + 1))
else
  boot 'crash stack\n'; st=$?
  sym=$("$symbolize" "$board" "$log" --elf "$build/kernel.elf" 2>&1)
  [[ $st -eq 3 ]] && grep -q '^PANIC on cpu 0: stack overflow on cpu 0: sp 0x' "$log" &&
    grep -Eq '^bt: 0x[0-9a-f]+ \([0-9]+ times\) .*descend' <<<"$sym" && grep -Eq '^bt: 0x[0-9a-f]+ .*crash_stack' <<<"$sym" &&
    grep -Eq '^bt: 0x[0-9a-f]+ .*shell::execute' <<<"$sym"
  check "crash stack overflows the stack into its guard page: 'stack overflow on cpu 0' with a backtrace" $?
fi

# 7. The memory and trace commands refuse bad arguments, and go on.
boot 'kmemtrace bogus\nkmemtrace stream maybe\nkmemtrace dump now\nkmem exercise 0\nkmem exercise x\nbench slow\nkmemtrace\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && grep -q 'kmemtrace: bad arguments (usage: kmemtrace on|off' "$log" &&
  grep -q "kmemtrace: stream takes on or off, not 'maybe'" "$log" && [[ $(grep -c 'kmemtrace: bad arguments' "$log") -eq 2 ]] &&
  [[ $(grep -c 'kmem: usage: kmem exercise \[rounds\]' "$log") -eq 2 ]] && grep -q "bench: unknown mode 'slow'" "$log" &&
  grep -q '^total_overruns 0' "$log"
check "kmemtrace, kmem exercise and bench reject bad arguments" $?

# 8. `test NAME` runs the matching in-kernel tests with the runner's summary
#    line; a test whose precondition is missing says SKIP with its reason
#    (tracing on from boot: the kmemtrace switch test needs it off).
boot 'test spinlock_guard\ntest kmemtrace_switch\ntest nosuchtest\npoweroff\n' --append kmemtrace; st=$?
[[ $st -eq 0 ]] && grep -q '^\[  OK  \] spinlock_guard_restores_irq_state (' "$log" &&
  grep -q '^1 passed, 0 failed, 0 skipped[[:space:]]*$' "$log" &&
  grep -q '^\[ SKIP \] kmemtrace_switch_patches_the_allocators_and_records_only_while_on (tracing is on' "$log" &&
  grep -q '^0 passed, 0 failed, 1 skipped[[:space:]]*$' "$log" && grep -q "test: no test name contains 'nosuchtest'" "$log"
check "test NAME runs matching tests; a missing precondition is a visible SKIP with its reason" $?

# 9. Fault injection from the shell: bad specs are refused with the reason,
#    a good one is shown with its counts, a cache's NOSLEEP allocations fail
#    (kmem exercise's own cache, twice), the exercise says they were
#    injected and handled, and off is off.
boot 'kmem fail\nkmem fail 101,1,1\nkmem fail 10,0,1\nkmem fail 10,1,1,colour=red\nkmem fail 100,1,2,cache=exercise\nkmem exercise 5\nkmem fail\nkmem fail off\nkmem fail\nkmem errors\npoweroff\n'; st=$?
[[ $st -eq 0 ]] && [[ $(grep -c '^kmem fail: off[[:space:]]*$' "$log") -eq 3 ]] &&
  grep -q "kmem: '101,1,1': PROBABILITY is a percentage, 0 to 100" "$log" &&
  grep -q "kmem: '10,0,1': INTERVAL is a number of calls, 1 or more" "$log" &&
  grep -q "kmem: '10,1,1,colour=red': after TIMES only cache=NAME and space=BYTES may follow" "$log" &&
  grep -q '^kmem fail: 100% of KM_NOSLEEP/VM_NOSLEEP allocations, every 1 eligible, 2 of 2 left, cache exercise; 0 failed so far' "$log" &&
  grep -q '; 2 failed[[:space:]]*$' "$log" && grep -q '^kmem exercise: kmem fail injected 2 failures meanwhile: each one handled' "$log" &&
  grep -q '0 of 2 left, cache exercise; 2 failed so far' "$log" && grep -q '^0 allocator errors reported since boot' "$log"
check "kmem fail: bad specs refused with the reason, injection counted, exercise handles it, off" $?

echo "$((total - fails)) passed, $fails failed, $skips skipped"
exit $(( fails > 0 ))
