/*
 * Row normalisations. a: [n, ...] F32, F16 or BF16, any strides; dst: F32,
 * contiguous, possibly a's own memory (in place). eps is op param 0.
 *   rms_norm: y = x / sqrt(mean(x^2) + eps)
 *   norm:     y = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)
 * Sums are accumulated in double (rms_norm's at the AVX2 level in 16 partial
 * sums, cllm_cpu_sumsq_avx2: one chain of double adds waits an add's
 * latency per element, which shows where q and k are normed per head, as
 * Gemma 3's are); each
 * thread takes whole rows, reads a row completely before writing it.
 */
#include "backend/cpu/kernels.h" /* cllm_cpu_isa_level */
#include "backend/cpu/ops-impl.h"

#include <math.h>

void cllm_cpu_rms_norm(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0];
    const int64_t n = dst->ne[0];
    const float eps = cllm_get_op_param_f32(dst, 0);
#if defined(__x86_64__) || defined(__i386__)
    const bool avx2 = cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
#else
    const bool avx2 = false;
#endif
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)cllm_cpu_row(dst, r);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_row(a, r), n, y);
        double sum = 0.0;
#if defined(__x86_64__) || defined(__i386__)
        if (avx2) sum = cllm_cpu_sumsq_avx2(n, x);
#endif
        if (!avx2) {
            for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
        }
        const float s = (float)(1.0 / sqrt(sum / (double)n + (double)eps));
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    }
}

void cllm_cpu_norm(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0];
    const int64_t n = dst->ne[0];
    const float eps = cllm_get_op_param_f32(dst, 0);
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)cllm_cpu_row(dst, r);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_row(a, r), n, y);
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)x[i];
        const double mean = sum / (double)n;
        double var = 0.0;
        for (int64_t i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
        const float s = (float)(1.0 / sqrt(var / (double)n + (double)eps));
        const float m = (float)mean;
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * s;
    }
}
