#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fast paths' entry points that carry MM_FRAMELESS (kmem_cache_alloc,
# kmem_cache_free, kmem_alloc, kmem_free, their hooked frees
# cache_free_prof_only and kmem_free_traced, page_alloc and page_free and
# page_free's free_hooked_of_api, and the tagged entry points of allocation
# profiling) are built without a frame pointer
# (kernel/mm/include/mm/platform_inline.h): that is only right while every
# call they make is a tail call. A real call (bl, blx, blr; jal, jalr, call)
# from one would break the frame-pointer chain of its callee's backtraces.
# Checked in the disassembly of the image.
# kmemtrace's frameless copies (kmem_cache_alloc_trace_only,
# kmem_alloc_trace_only_cp, cache_free_trace_only, kmem_free_trace_only;
# only where the arch has the restartable ring write; and
# kmem_alloc_trace_only, which the macros' call sites call and which
# tail-calls the first of them) and kmem_free_traced read the link register itself as their
# caller (mm/kmem_cache.h, caller_of_leaf): that is only right while nothing else is written to it
# in them, so any write to x30 / ra fails too, except a reload of a saved
# value from the stack and arm64's xpaclri (which only strips a signature:
# none here).
# (32-bit ARM's copies take the caller from __builtin_return_address, which
# GCC keeps right whatever it does with lr: only their calls are checked.)
# The tail-call check also keeps right the caller that the cold functions
# they jump to take as their own return address (alloc_trace_full_*,
# alloc_slow_traced_*, and cache_free_hooked in the kernel).
# Usage: frameless-check.sh OBJDUMP NM KERNEL.ELF
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: frameless-check.sh OBJDUMP NM KERNEL.ELF" >&2; exit 2; }
objdump=$1 nm=$2 elf=$3
syms=$("$nm" -S "$elf") || { echo "FAILED: $nm $elf"; exit 1; }
fail=0
optional=" kmem_alloc_trace_only_cp cache_free_trace_only kmem_free_trace_only "
leaf_callers=" kmem_cache_alloc_trace_only kmem_alloc_trace_only_cp cache_free_trace_only kmem_free_trace_only kmem_free_traced "
for f in kmem_cache_alloc kmem_cache_free kmem_alloc kmem_free cache_free_prof_only kmem_free_traced page_alloc \
  page_free free_hooked_of_api kmem_cache_alloc_tagged kmem_alloc_tagged page_alloc_tagged page_alloc_va_tagged \
  kmem_cache_alloc_trace_only kmem_alloc_trace_only kmem_alloc_trace_only_cp cache_free_trace_only kmem_free_trace_only; do
  # The mangled name: global (_Z<len><name>), in namespace mm
  # (_ZN2mm<len><name>E), in an anonymous one (_ZN12_GLOBAL__N_1<len><name>E)
  # or in an anonymous one inside mm, a .constprop clone included.
  line=$(grep -E " [Tt] _Z(N12_GLOBAL__N_1|N2mm(12_GLOBAL__N_1)?)?${#f}${f}[A-Za-z]" <<<"$syms" | head -1)
  if [[ -z $line ]]; then
    if [[ $optional == *" $f "* ]]; then echo "$f: not in this image (no restartable ring write)"; continue; fi
    echo "FAILED: $f not found in $elf"; fail=1; continue
  fi
  read -r addr size _ name <<<"$line"
  start=$((16#$addr)) end=$((16#$addr + 16#$size))
  dis=$("$objdump" -d --no-show-raw-insn --start-address=$start --stop-address=$end "$elf") ||
    { echo "FAILED: $objdump"; exit 1; }
  calls=$(awk -F'\t' 'NF >= 2 { split($2, m, /[ \t]/); if (m[1] ~ /^(bl|blx|blr|jal|jalr|call)$/) print }' <<<"$dis")
  n=$(grep -c . <<<"$(awk -F'\t' 'NF >= 2' <<<"$dis")")
  lr_writes=""
  if [[ $leaf_callers == *" $f "* ]]; then
    # Destination first: any instruction but stores, compares and branches
    # whose first operand is the link register (arm64 ldp: either of two).
    lr_writes=$(awk -F'\t' 'NF >= 3 {
        split($2, m, /[ \t]/); op = m[1]; args = $3; gsub(/ /, "", args); n = split(args, a, ",")
        if (op ~ /^(st[a-z0-9]*|s[bhwd]|cmp|cmn|tst|b|b\.[a-z]+|bl|blr|br|ret|cbz|cbnz|tbz|tbnz|j|jr|fence|xpaclri|nop|beq|bne|blt|bge|bltu|bgeu|beqz|bnez|bltz|bgez|blez|bgtz|bgt|ble|bgtu|bleu)$/) next
        # The link register reloaded from where the function saved it.
        if ((op == "ldr" && a[1] == "x30" && args ~ /^x30,\[sp/) || (op == "ldp" && a[2] == "x30" && args ~ /\[sp/) ||
            (op == "ld" && a[1] == "ra" && args ~ /\(sp\)$/)) next
        if (a[1] == "x30" || a[1] == "ra" || (op == "ldp" && a[2] == "x30")) print }' <<<"$dis")
  fi
  if [[ -n $calls ]]; then
    echo "FAILED: $name makes a call that is not a tail call:"
    echo "$calls"
    fail=1
  elif [[ -n $lr_writes ]]; then
    echo "FAILED: $name reads its caller from the link register but writes it:"
    echo "$lr_writes"
    fail=1
  else
    echo "$name: $n instructions, only tail calls"
  fi
done
exit $fail
