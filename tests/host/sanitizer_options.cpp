// SPDX-License-Identifier: Apache-2.0
// Default sanitizer options for the host test executables, built into them
// so a test run by hand behaves as under ctest. ASAN_OPTIONS and
// UBSAN_OPTIONS in the environment still override these.

#define MAGPIE_SANITIZER_HOOK \
  extern "C" __attribute__((visibility("default"), used, no_sanitize("address", "undefined")))

MAGPIE_SANITIZER_HOOK const char* __asan_default_options() {
#if defined(MAGPIE_ASAN_LOCALS_ON_STACK)  // programs whose stacks kmemleak scans
  return "detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1";
#else
  return "detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1";
#endif
}

MAGPIE_SANITIZER_HOOK const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }
