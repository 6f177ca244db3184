/*
 * Fused attention with an online softmax; the n_tokens x n_kv scores are
 * never stored.
 *   q: [D, n_tokens, n_head, 1] F32; k: [D, n_kv, n_head_kv, 1] and
 *   v: [Dv, n_kv, n_head_kv, 1] F32, F16 or BF16, any strides;
 *   mask: optional [n_kv, >= n_tokens] F32 or F16. scale: op param 0.
 * For query head h, kv head g = h / (n_head / n_head_kv), token t:
 *   s_j = scale * q[:, t, h] . k[:, j, g] + mask[j, t]
 *   out[:, h, t] = sum_j e^(s_j - max s) v[:, j, g] / sum_j e^(s_j - max s)
 * Online: a running max m, running sum l and accumulator acc[Dv]; a new
 * maximum rescales both by e^(m_old - m_new). Keys masked with -INFINITY are
 * skipped (no dot product); a row masked out entirely gives zeros.
 * out: F32 [Dv, n_head, n_tokens, 1]; each thread takes (h, t) rows.
 *
 * Per-thread workspace: q as F32 [D], the current k row [D] and v row [Dv]
 * converted to F32 (when they are not F32 rows already), acc [Dv].
 */
#include "backend/cpu/ops-impl.h"

#include <math.h>

typedef struct attn_slices {
    size_t q, k, v, acc; /* rounded bytes of each per-thread array */
} attn_slices;

static attn_slices attn_slice_sizes(const cllm_tensor *dst) {
    const size_t d = (size_t)dst->src[0]->ne[0], dv = (size_t)dst->src[2]->ne[0];
    return (attn_slices){
        .q = cllm_cpu_ws_round(d * sizeof(float)),
        .k = cllm_cpu_ws_round(d * sizeof(float)),
        .v = cllm_cpu_ws_round(dv * sizeof(float)),
        .acc = cllm_cpu_ws_round(dv * sizeof(float)),
    };
}

size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads) {
    const attn_slices s = attn_slice_sizes(dst);
    return (size_t)n_threads * (s.q + s.k + s.v + s.acc);
}

void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = q->ne[0], Dv = v->ne[0];
    const int64_t n_head = q->ne[2], n_kv = k->ne[1];
    const int64_t group = n_head / k->ne[2]; /* query heads per kv head */

    const attn_slices s = attn_slice_sizes(dst);
    const size_t per_thread = s.q + s.k + s.v + s.acc;
    char *ws = cllm_cpu_ws(params, dst, (size_t)params->ith * per_thread, per_thread);
    float *qf = (float *)ws;
    float *kf = (float *)(ws + s.q);
    float *vf = (float *)(ws + s.q + s.k);
    float *acc = (float *)(ws + s.q + s.k + s.v);

    int64_t r0, r1;
    cllm_cpu_split(n_head * q->ne[1], params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % n_head, t = r / n_head, g = h / group;
        const float *qrow = cllm_cpu_row_f32(q, cllm_cpu_elem(q, 0, t, h, 0), D, qf);
        float m = -INFINITY; /* running max of the scores */
        float l = 0.0f;      /* running sum of e^(s_j - m) */
        for (int64_t i = 0; i < Dv; i++) acc[i] = 0.0f;

        for (int64_t j = 0; j < n_kv; j++) {
            const float mv =
                mask ? cllm_cpu_load(mask->type, cllm_cpu_elem(mask, j, t, 0, 0)) : 0.0f;
            if (mv == -INFINITY) continue;
            const float *krow = cllm_cpu_row_f32(k, cllm_cpu_elem(k, 0, j, g, 0), D, kf);
            const float sj = cllm_cpu_dot_f32(D, qrow, krow) * scale + mv;
            if (sj == -INFINITY) continue;
            const float *vrow = cllm_cpu_row_f32(v, cllm_cpu_elem(v, 0, j, g, 0), Dv, vf);
            if (sj > m) {
                /* new maximum: rescale what was summed so far by e^(m - sj) */
                const float c = expf(m - sj);
                for (int64_t i = 0; i < Dv; i++) acc[i] = acc[i] * c + vrow[i];
                l = l * c + 1.0f;
                m = sj;
            } else {
                const float w = expf(sj - m);
                for (int64_t i = 0; i < Dv; i++) acc[i] += w * vrow[i];
                l += w;
            }
        }

        float *y = (float *)cllm_cpu_elem(dst, 0, h, t, 0);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* l == 0: every key masked out */
        for (int64_t i = 0; i < Dv; i++) y[i] = acc[i] * inv;
    }
}
