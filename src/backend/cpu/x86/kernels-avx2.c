/*
 * CPU row kernels for AVX2 + FMA + F16C (kernels-x86.h compiled for that
 * level). Only this file is compiled for these instructions; kernels.c calls
 * cllm_cpu_kernels_fill_avx2 only on CPUs (and OSes) that support them.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/kernels-impl.h"

#if CLLM_CPU_X86

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c")

#define KX_VNNI 0
#include "backend/cpu/x86/kernels-x86.h"

void cllm_cpu_kernels_fill_avx2(cllm_cpu_type_kernels tab[CLLM_TYPE_COUNT]) { kx_fill(tab); }

CLLM_X86_TARGET_END

#else
typedef int cllm_kernels_avx2_unused; /* not x86: nothing to build */
#endif
