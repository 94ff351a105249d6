#!/usr/bin/env bash
# Instructions per kmemtrace event on the host, counted by callgrind.
#
#   icount.sh TRACE_ICOUNT_BINARY [N]
#
# Runs the binary with tracing off and on; per call, the difference between
# the hooked stand-in allocator (traced_alloc/traced_free plus the
# out-of-line record_*_slow they call) and the same code without hooks
# (plain_alloc/plain_free) is what recording costs. Prints the numbers; fails
# only on a regression past generous bounds (off > 8, on > 64 per event).
#
# What the numbers hold (x86-64, GCC 12): off, the check itself is 2
# instructions (cmpb $0, g_enabled; jne); the rest is the compiler's
# (it hoists the load of the caller address above the branch, and a
# function without a frame of its own gets one for the cold call). On, the
# host platform's cpu_id() (a thread's lazily claimed CPU slot) adds a
# bounds check and a register save/restore that the kernel's (a load through
# the per-CPU register) does not have: count the kernel's with
#   aarch64-linux-gnu-objdump -d build/qemu-virt-arm64/kernel/CMakeFiles/kernel.dir/__/trace/kmemtrace.cpp.obj
set -euo pipefail
bin=$1
n=${2:-20000}
command -v valgrind >/dev/null || { echo "icount.sh: valgrind not installed, skipped"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() {  # ir FILE FUNCTION: self instructions of FUNCTION
  callgrind_annotate --threshold=100 --auto=no "$1" 2>/dev/null |
    awk -v f="$2" '$0 ~ f { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}
for mode in off on; do
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$mode" "$bin" "$mode" "$n" >/dev/null 2>&1
done
per() { awk -v a="$1" -v n="$n" 'BEGIN { printf "%.2f", a / n }'; }
off_alloc=$(( $(ir "$tmp/off" traced_alloc) - $(ir "$tmp/off" plain_alloc) ))
off_free=$(( $(ir "$tmp/off" traced_free) - $(ir "$tmp/off" plain_free) ))
on_alloc=$(( $(ir "$tmp/on" traced_alloc) + $(ir "$tmp/on" record_alloc_slow) - $(ir "$tmp/on" plain_alloc) ))
on_free=$(( $(ir "$tmp/on" traced_free) + $(ir "$tmp/on" record_free_slow) - $(ir "$tmp/on" plain_free) ))
slow_alloc=$(ir "$tmp/on" record_alloc_slow)
echo "tracing off: alloc +$(per $off_alloc), free +$(per $off_free) instructions per call"
echo "tracing on:  alloc event $(per $on_alloc) (record_alloc_slow $(per $slow_alloc)), free event $(per $on_free) instructions"
ok=1
(( off_alloc <= 8 * n && off_free <= 8 * n )) || { echo "icount.sh: more than 8 instructions per call when off"; ok=0; }
(( on_alloc <= 64 * n && on_free <= 64 * n )) || { echo "icount.sh: more than 64 instructions per event when on"; ok=0; }
(( ok ))
