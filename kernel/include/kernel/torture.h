// SPDX-License-Identifier: Apache-2.0
// `kmem torture OPS [SEED]` (kernel/torture.cpp): every allocator at once
// on every core, every buffer's pattern checked.
#pragma once

namespace torture {
// The `kmem torture` subcommand: argv[0] is "kmem", argv[1] "torture".
// Returns 0 when the run passed, non-zero on bad arguments or a failure.
// From the shell or a KTEST (it makes cross-calls).
int run(const char* cmd, int argc, char** argv);
// The pattern checker reports a changed byte at its offset (for a KTEST).
bool detects_corruption();
}  // namespace torture
