/*
 * The prologue of every x86 kernel file: the functions between
 * CLLM_X86_TARGET_BEGIN("avx2,fma,...") and CLLM_X86_TARGET_END are compiled
 * for those instruction sets whatever the compiler's default target is, so
 * that one library holds every level and chooses at run time (kernels.h:
 * cllm_cpu_isa_level). Include it before <immintrin.h>.
 *
 *     #include "backend/cpu/x86/target.h"
 *     #if defined(__x86_64__) || defined(__i386__)
 *     CLLM_X86_TARGET_BEGIN("avx2,fma,f16c")
 *     #include <immintrin.h>
 *     ... kernels ...
 *     CLLM_X86_TARGET_END
 *     #endif
 */
#ifndef CLLM_BACKEND_CPU_X86_TARGET_H
#define CLLM_BACKEND_CPU_X86_TARGET_H

#define CLLM_X86_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define CLLM_X86_TARGET_BEGIN(isa)                                                                 \
    CLLM_X86_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define CLLM_X86_TARGET_END CLLM_X86_PRAGMA(clang attribute pop)
#else
#define CLLM_X86_TARGET_BEGIN(isa)                                                                 \
    CLLM_X86_PRAGMA(GCC push_options) CLLM_X86_PRAGMA(GCC target(isa))
#define CLLM_X86_TARGET_END CLLM_X86_PRAGMA(GCC pop_options)
#endif

/* v (a vector in a register), opaque to the optimiser: keeps a chain of
 * integer adds in its order, which gcc otherwise reassociates into a tree
 * that holds every product live at once (more than the 16 registers of
 * AVX2: they spill to the stack). No instruction. */
#define CLLM_X86_KEEP(v) __asm__("" : "+x"(v))

#endif /* CLLM_BACKEND_CPU_X86_TARGET_H */
