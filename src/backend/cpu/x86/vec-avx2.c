/*
 * Row functions of the element-wise kernels for AVX2 + FMA (ops-elementwise.c
 * calls them only at that level or above).
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/rows.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c")

#include "backend/cpu/x86/vec-avx2.h"

/* silu, x / (1 + e^-x), or GELU's tanh form, x/2 (1 + tanh(u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3): the same shape, x / (1 + e^(-2u)),
 * since (1 + tanh(u)) / 2 is the logistic of 2u, so one polynomial exp
 * serves both, far cheaper than a call to tanhf per element. The exp
 * clamps its
 * argument: far below 0 the result is a tiny value of x's sign, far above
 * it x. */
static inline __attribute__((always_inline)) __m256 act8(bool gelu, __m256 v) {
    __m256 nz; /* minus the logistic's argument */
    if (gelu) {
        const __m256 v2 = _mm256_mul_ps(v, v);
        const __m256 u = _mm256_mul_ps(
            _mm256_mul_ps(_mm256_set1_ps(CLLM_GELU_COEF_A), v),
            _mm256_fmadd_ps(_mm256_set1_ps(CLLM_GELU_COEF_B), v2, _mm256_set1_ps(1.0f)));
        nz = _mm256_mul_ps(_mm256_set1_ps(-2.0f), u);
    } else {
        nz = _mm256_sub_ps(_mm256_setzero_ps(), v);
    }
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), cllm_exp256(nz)));
}

/* y = act8(x) 8 at a time, the tail through masked loads and stores; y may
 * be x. */
static inline __attribute__((always_inline)) void act_row(bool gelu, int64_t n, float *y,
                                                          const float *x) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, act8(gelu, _mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + i, m, act8(gelu, _mm256_maskload_ps(x + i, m)));
    }
}

void cllm_cpu_silu_row_avx2(int64_t n, float *y, const float *x) { act_row(false, n, y, x); }

void cllm_cpu_gelu_row_avx2(int64_t n, float *y, const float *x) { act_row(true, n, y, x); }

/* The sum of x[i]^2 in double: 16 partial sums (4 accumulators of 4
 * lanes), added up at the end, so the row is not one chain of dependent
 * double adds (4 cycles an element). */
double cllm_cpu_sumsq_avx2(int64_t n, const float *x) {
    __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
            a[k] = _mm256_fmadd_pd(v, v, a[k]);
        }
    }
    const __m256d t = _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3]));
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++) sum += (double)x[i] * (double)x[i];
    return sum;
}

/* y[i] = x[i] as F16, rounded to nearest even (vcvtps2ph): the values of
 * cllm_fp32_to_fp16, and a NaN stays a NaN. */
void cllm_cpu_f32_to_f16_row_avx2(int64_t n, cllm_fp16 *y, const float *x) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = cllm_fp32_to_fp16(x[i]);
}

CLLM_X86_TARGET_END

#else
typedef int cllm_vec_avx2_unused; /* not x86: nothing to build */
#endif
