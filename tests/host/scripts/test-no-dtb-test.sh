#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests tests/kernel/no-dtb-test.sh (the checker behind CTest BOARD/no-dtb)
# on made-up console logs: a stand-in for qemu-run prints the log and exits
# with a given status; only the panic's status with its one report passes.
#
#   test-no-dtb-test.sh PATH/TO/no-dtb-test.sh
set -uo pipefail
[[ $# -eq 1 && -x "$1" ]] || { echo "usage: test-no-dtb-test.sh PATH/TO/no-dtb-test.sh (an executable)" >&2; exit 2; }
checker=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The checker must boot the ELF (no boot protocol, no DTB pointer).
stand_in '[[ " $* " == *" --elf "* ]] || { echo "stand-in: no --elf in $*"; exit 2; }'

# case NAME RUN-STATUS WANT-STATUS WANT-PATTERN LOG-TEXT
case_() {
  local name=$1 status=$2 want=$3 pattern=$4 text=$5
  console_log "$text"
  echo "$status" >"$tmp/status"
  "$checker" "$tmp/run" board "$tmp" >"$tmp/out" 2>&1
  verdict "$name" $? "$want" "$pattern"
}

banner='\nMagpie 0.1.0 (qemu-virt-arm64, arm64) booting\n'
panic='\nPANIC on cpu 0: no device tree: the bootloader passed a null DTB pointer\nbacktrace (2 frames; symbolize with tools/symbolize):\nbt: 0x40080123\nSystem halted.\n'
case_ "the panic, then its exit status 3, passes" 3 0 '^no-dtb-test: PASS$' "$banner$panic"
case_ "the panic, then a hang until the timeout, fails" 124 1 'status 124, wanted 3.*the kernel hung' "$banner$panic"
case_ "the panic with status 0 fails" 0 1 'status 0, wanted 3' "$banner$panic"
case_ "another panic fails" 3 1 "0 'PANIC on cpu 0: no device tree' lines" \
  "$banner\nPANIC on cpu 0: unexpected exception: data abort\nSystem halted.\n"
case_ "no panic at all, a hang, fails" 124 1 'status 124' "$banner"

summary
