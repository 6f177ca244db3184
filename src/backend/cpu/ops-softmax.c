/*
 * soft_max: per row of a (F32, any strides),
 *   v = a * scale + mask[:, i1, i2 % mask.ne2, i3 % mask.ne3]
 *   y = exp(v - max(v)) / sum(exp(v - max(v)))
 * mask (optional) is F32 or F16; -INFINITY masks an element out, and a row
 * masked out entirely gives zeros (not NaN). dst: F32, contiguous, possibly
 * a's own memory (in place): each thread writes only the rows it reads.
 */
#include "backend/cpu/ops-impl.h"

#include <math.h>

void cllm_cpu_soft_max(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *mask = dst->src[1];
    const int64_t n = dst->ne[0], ne1 = dst->ne[1], ne2 = dst->ne[2];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const bool mask_f32_rows = mask && mask->type == CLLM_TYPE_F32 && mask->nb[0] == sizeof(float);
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        float *y = (float *)cllm_cpu_elem(dst, 0, i1, i2, i3);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, i1, i2, i3), n, y);

        /* y = x * scale + mask */
        if (!mask) {
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
        } else {
            const char *m = cllm_cpu_elem(mask, 0, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
            if (mask_f32_rows) {
                const float *mf = (const float *)m;
                for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale + mf[i];
            } else {
                for (int64_t i = 0; i < n; i++) {
                    y[i] = x[i] * scale + cllm_cpu_load(mask->type, m + (size_t)i * mask->nb[0]);
                }
            }
        }

        float max = -INFINITY;
        for (int64_t i = 0; i < n; i++) max = y[i] > max ? y[i] : max;
        if (max == -INFINITY) {
            /* every element masked out */
            memset(y, 0, (size_t)n * sizeof(float));
            continue;
        }
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) {
            y[i] = expf(y[i] - max);
            sum += (double)y[i];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}
