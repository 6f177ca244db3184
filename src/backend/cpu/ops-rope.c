/*
 * Rotary position embedding. a: [head_dim, n_head, n_tokens, ne3] F32, any
 * strides; pos: int32 [n_tokens]; freq_factors: optional F32 [>= n_dims/2].
 * Op params: n_dims, mode, freq_base, freq_scale, n_ctx_orig, ext_factor,
 * attn_factor, beta_fast, beta_slow (YaRN: see cllm_rope_ext in tensor.h).
 *
 *   theta_i = pos * freq_scale * freq_base^(-2i / n_dims) / ff[i],  i < n_dims/2
 *   (with ext_factor != 0, YaRN's blend of that and the unscaled angle)
 *   NORMAL: (x[2i], x[2i+1])          -> rotated by theta_i
 *   NEOX:   (x[i],  x[i + n_dims/2])  -> rotated by theta_i
 *   rotation: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos) * attn_factor
 *   x[j] for j >= n_dims passes through (partial rotary).
 *
 * Angles are computed in double once per token into a per-thread table
 * (cos, sin: n_dims floats of workspace), or taken from the rows of a
 * rope_table node (src[1] F32 [n_dims, n_tokens] instead of the positions),
 * which computes the same rows once for every rope node of the graph. dst:
 * F32, contiguous, possibly a's own memory: each pair is read before it is
 * written, by one thread.
 */
#include "backend/cpu/ops-impl.h"

#include <math.h>

size_t cllm_cpu_rope_workspace(const cllm_tensor *dst, int n_threads) {
    if (dst->src[1]->type == CLLM_TYPE_F32) return 0; /* the rows of a rope_table */
    const int n_dims = cllm_get_op_param_i32(dst, 0);
    return (size_t)n_threads * cllm_cpu_ws_round((size_t)n_dims * sizeof(float));
}

typedef struct rope_yarn {
    double ext_factor, mscale; /* mscale: attn_factor, times YaRN's correction */
    double lo, hi;             /* the dims YaRN ramps between */
} rope_yarn;

/* YaRN's correction dims: where a dim's wavelength is beta rotations over
 * the original context. */
static double yarn_corr_dim(int n_dims, int n_ctx_orig, double beta, double base) {
    return n_dims * log(n_ctx_orig / (beta * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

static rope_yarn yarn_of(const cllm_tensor *dst, int n_dims, double base, double scale) {
    rope_yarn y = {.ext_factor = cllm_get_op_param_f32(dst, 5),
                   .mscale = cllm_get_op_param_f32(dst, 6)};
    if (y.ext_factor != 0.0) {
        const int n_ctx_orig = cllm_get_op_param_i32(dst, 4);
        const double beta_fast = cllm_get_op_param_f32(dst, 7);
        const double beta_slow = cllm_get_op_param_f32(dst, 8);
        y.lo = fmax(0.0, floor(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, base)));
        y.hi = fmin(n_dims - 1, ceil(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, base)));
        y.mscale *= 1.0 + 0.1 * log(1.0 / scale);
    }
    return y;
}

/* cs[i] = cos(theta_i) m, cs[n_dims/2 + i] = sin(theta_i) m for position p. */
static void rope_table(float *cs, int n_dims, int32_t p, double base, double scale,
                       const cllm_tensor *ff, const rope_yarn *y) {
    const int half = n_dims / 2;
    for (int i = 0; i < half; i++) {
        double theta_e = (double)p * pow(base, -2.0 * i / n_dims);
        if (ff) theta_e /= (double)cllm_cpu_load(CLLM_TYPE_F32, cllm_cpu_elem(ff, i, 0, 0, 0));
        double theta = scale * theta_e;
        if (y->ext_factor != 0.0) {
            const double r =
                (1.0 - fmin(1.0, fmax(0.0, (i - y->lo) / fmax(0.001, y->hi - y->lo)))) *
                y->ext_factor;
            theta = theta * (1.0 - r) + theta_e * r;
        }
        cs[i] = (float)(cos(theta) * y->mscale);
        cs[half + i] = (float)(sin(theta) * y->mscale);
    }
}

void cllm_cpu_rope_table(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *pos = dst->src[0], *ff = dst->src[1];
    const int n_dims = cllm_get_op_param_i32(dst, 0);
    const double base = cllm_get_op_param_f32(dst, 2);
    const double scale = cllm_get_op_param_f32(dst, 3);
    const rope_yarn yarn = yarn_of(dst, n_dims, base, scale);
    int64_t t0, t1;
    cllm_cpu_split(dst->ne[1], params->ith, params->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        int32_t p;
        memcpy(&p, cllm_cpu_elem(pos, t, 0, 0, 0), sizeof(p));
        rope_table((float *)cllm_cpu_elem(dst, 0, t, 0, 0), n_dims, p, base, scale, ff, &yarn);
    }
}

void cllm_cpu_rope(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *pos = dst->src[1], *ff = dst->src[2];
    const int n_dims = cllm_get_op_param_i32(dst, 0);
    const int mode = cllm_get_op_param_i32(dst, 1);
    const int64_t head_dim = dst->ne[0], ne1 = dst->ne[1], ne2 = dst->ne[2];
    const int half = n_dims / 2;
    /* the rotations of each token: a rope_table's rows, or computed here */
    const bool tabled = pos->type == CLLM_TYPE_F32;
    double base = 0.0, scale = 0.0;
    rope_yarn yarn = {0};
    float *cs = NULL;
    if (!tabled) {
        base = cllm_get_op_param_f32(dst, 2);
        scale = cllm_get_op_param_f32(dst, 3);
        yarn = yarn_of(dst, n_dims, base, scale);
        const size_t slice = cllm_cpu_ws_round((size_t)n_dims * sizeof(float));
        cs = cllm_cpu_ws(params, dst, (size_t)params->ith * slice, slice);
    }
    const float *cos_t = cs, *sin_t = cs ? cs + half : NULL;

    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    int64_t table_of = -1; /* the token (i2 + ne2 * i3) the table holds */
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        if (tabled) {
            cos_t = (const float *)cllm_cpu_elem(pos, 0, i2, 0, 0);
            sin_t = cos_t + half;
        } else if (table_of != r / ne1) {
            int32_t p;
            memcpy(&p, cllm_cpu_elem(pos, i2, 0, 0, 0), sizeof(p));
            rope_table(cs, n_dims, p, base, scale, ff, &yarn);
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
