// SPDX-License-Identifier: Apache-2.0
// The console side of kmem's debug modes (kernel/mm/debug_commands.cpp).
#pragma once

namespace kmem_debug_shell {
// kmem debug | verify | log | test: the result, or -1 if argv[1] is none of them.
int command(const char* cmd, int argc, char** argv);
// whatis: the audit trail of a debugged buffer containing addr, if any.
void print_trail(const void* addr);
// The kmem.debug= bootarg (before kmem_init).
void setup();
}  // namespace kmem_debug_shell
