/*
 * Row functions of the element-wise kernels for AVX-512 (ops-elementwise.c
 * calls them only on CPUs that have it).
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/rows.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,avx512f,avx512dq")

#include "backend/cpu/x86/vec-avx512.h"

/* y = x / (1 + e^-x); y may be x. */
void cllm_cpu_silu_row_avx512(int64_t n, float *y, const float *x) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = cllm_lanes16(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 e = cllm_exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
}

CLLM_X86_TARGET_END

#else
typedef int cllm_vec_avx512_unused; /* not x86: nothing to build */
#endif
