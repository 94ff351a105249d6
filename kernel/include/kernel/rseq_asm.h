// SPDX-License-Identifier: Apache-2.0
// What every arch's restartable sections (arch/<a>/include/arch/rseq.h)
// share: the text section the functions that inline them go into, the
// table entry each section's asm statement emits right after its commit
// ({start, end, restart} = {1b, 2b, 1b}, pointer-sized: kernel/rseq.h, The
// table), and the outcomes of a magazine push.
#pragma once

#define ARCH_RSEQ_TEXT __attribute__((section(".text.rseq")))

#if __SIZEOF_POINTER__ == 8
#define ARCH_RSEQ_WORDS ".balign 8\n.quad "
#else
#define ARCH_RSEQ_WORDS ".balign 4\n.long "
#endif
#define ARCH_RSEQ_ENTRY ".pushsection .rseq_table, \"a\"\n" ARCH_RSEQ_WORDS "1b, 2b, 1b\n.popsection\n"

namespace arch {
enum RseqPush { kRseqPushed, kRseqFull, kRseqOnTop };
}  // namespace arch
