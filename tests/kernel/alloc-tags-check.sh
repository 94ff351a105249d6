#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every allocation profiling tag (mm/alloc_tag.h: the statics named
# mm_alloc_tag_) of the kernel image lies in its alloc_tags section,
# between __start_alloc_tags and __stop_alloc_tags: a tag outside (GCC puts
# a template instance's statics in their own section) is a call site
# allocinfo would never count.
# Usage: alloc-tags-check.sh NM KERNEL.ELF
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: alloc-tags-check.sh NM KERNEL.ELF" >&2; exit 2; }
nm=$1 elf=$2
syms=$("$nm" -C "$elf") || { echo "FAILED: $nm $elf exited $?"; exit 1; }
start=$(awk '$3 == "__start_alloc_tags" {print $1}' <<<"$syms")
stop=$(awk '$3 == "__stop_alloc_tags" {print $1}' <<<"$syms")
[[ -n $start && -n $stop ]] || { echo "FAILED: no __start_alloc_tags/__stop_alloc_tags in $elf"; exit 1; }
SYMS=$syms python3 - "$start" "$stop" <<'PY'
import os, sys
start, stop = int(sys.argv[1], 16), int(sys.argv[2], 16)
tags = [l for l in os.environ["SYMS"].splitlines() if l.endswith("::mm_alloc_tag_")]
outside = [l for l in tags if not start <= int(l.split()[0], 16) < stop]
print(f"alloc-tags: {len(tags)} tags, {stop - start} bytes of section, {len(outside)} outside it")
for l in outside: print("  outside: " + l)
sys.exit(1 if outside or not tags else 0)
PY
