/*
 * Rotary position embedding. a: [head_dim, n_head, n_tokens, ne3] F32, any
 * strides; pos: int32 [n_tokens]; freq_factors: optional F32 [>= n_dims/2].
 * Op params: n_dims, mode, freq_base, freq_scale.
 *
 *   theta_i = pos * freq_scale * freq_base^(-2i / n_dims) / ff[i],  i < n_dims/2
 *   NORMAL: (x[2i], x[2i+1])          -> rotated by theta_i
 *   NEOX:   (x[i],  x[i + n_dims/2])  -> rotated by theta_i
 *   rotation: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
 *   x[j] for j >= n_dims passes through (partial rotary).
 *
 * Angles are computed in double once per token into a per-thread table
 * (cos, sin: n_dims floats of workspace). dst: F32, contiguous, possibly a's
 * own memory: each pair is read before it is written, by one thread.
 */
#include "backend/cpu/ops-impl.h"

#include <math.h>

size_t cllm_cpu_rope_workspace(const cllm_tensor *dst, int n_threads) {
    const int n_dims = cllm_get_op_param_i32(dst, 0);
    return (size_t)n_threads * cllm_cpu_ws_round((size_t)n_dims * sizeof(float));
}

/* cs[i] = cos(theta_i), cs[n_dims/2 + i] = sin(theta_i) for position p. */
static void rope_table(float *cs, int n_dims, int32_t p, double base, double scale,
                       const cllm_tensor *ff) {
    const int half = n_dims / 2;
    for (int i = 0; i < half; i++) {
        double theta = (double)p * scale * pow(base, -2.0 * i / n_dims);
        if (ff) theta /= (double)cllm_cpu_load(CLLM_TYPE_F32, cllm_cpu_elem(ff, i, 0, 0, 0));
        cs[i] = (float)cos(theta);
        cs[half + i] = (float)sin(theta);
    }
}

void cllm_cpu_rope(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *pos = dst->src[1], *ff = dst->src[2];
    const int n_dims = cllm_get_op_param_i32(dst, 0);
    const int mode = cllm_get_op_param_i32(dst, 1);
    const double base = cllm_get_op_param_f32(dst, 2);
    const double scale = cllm_get_op_param_f32(dst, 3);
    const int64_t head_dim = dst->ne[0], ne1 = dst->ne[1], ne2 = dst->ne[2];
    const int half = n_dims / 2;

    const size_t slice = cllm_cpu_ws_round((size_t)n_dims * sizeof(float));
    float *cs = cllm_cpu_ws(params, dst, (size_t)params->ith * slice, slice);
    const float *cos_t = cs, *sin_t = cs + half;

    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    int64_t table_of = -1; /* the token (i2 + ne2 * i3) the table holds */
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        if (table_of != r / ne1) {
            int32_t p;
            memcpy(&p, cllm_cpu_elem(pos, i2, 0, 0, 0), sizeof(p));
            rope_table(cs, n_dims, p, base, scale, ff);
            table_of = r / ne1;
        }
        float *y = (float *)cllm_cpu_elem(dst, 0, i1, i2, i3);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, i1, i2, i3), head_dim, y);
        if (mode == CLLM_ROPE_NEOX) {
            for (int i = 0; i < half; i++) {
                const float x0 = x[i], x1 = x[i + half];
                y[i] = x0 * cos_t[i] - x1 * sin_t[i];
                y[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                const float x0 = x[2 * i], x1 = x[2 * i + 1];
                y[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
                y[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
            }
        }
        for (int64_t j = n_dims; j < head_dim; j++) y[j] = x[j];
    }
}
