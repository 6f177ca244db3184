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
 * out: F32 [Dv, n_head, n_tokens, 1].
 *
 * The query heads of one GQA group read the same k and v rows, and so do
 * consecutive tokens of a batch: a unit of work is (kv head g, a chunk of
 * g's query heads, a block of up to ATTN_TB tokens), so each k and v row
 * (F16/BF16 in the cache) is converted to F32 once per unit, not once per
 * query head and token, and a key that the mask hides from every token of
 * the block is skipped outright. Chunks are the whole group unless that
 * leaves threads idle (few kv heads, one token).
 *
 * The scores of one key against all the unit's query rows come from one
 * kernels.h vec_dot_n call per CLLM_CPU_MAX_COLS rows, reading the key
 * straight from the cache (F16/BF16/F32 x F32; other layouts are converted
 * to F32 first).
 *
 * Per-thread workspace: q rows as F32 [tb, cs, D], acc [tb, cs, Dv],
 * running max and sum [tb, cs] each, scores [tb, cs], the current k row [D]
 * and v row [Dv] as F32.
 */
#include "backend/cpu/attn.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops-impl.h"

#include <limits.h>
#include <math.h>

#define ATTN_TB 8 /* tokens per unit */

typedef struct attn_shape {
    int64_t group;    /* query heads per kv head */
    int64_t cs;       /* query heads per chunk */
    int64_t n_chunks; /* chunks per group */
    int64_t tb;       /* tokens per block */
    int64_t n_blocks; /* token blocks */
} attn_shape;

static attn_shape attn_shape_of(const cllm_tensor *dst, int n_threads) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1];
    const int64_t n_kv_head = k->ne[2], group = q->ne[2] / k->ne[2], T = q->ne[1];
    const int64_t tb = CLLM_MAX(CLLM_MIN(T, (int64_t)ATTN_TB), (int64_t)1);
    const int64_t n_blocks = (T + tb - 1) / tb;
    const int64_t units = CLLM_MAX(n_kv_head * n_blocks, (int64_t)1); /* (g, block) pairs */
    /* at least two units per thread where the heads allow it */
    const int64_t want =
        CLLM_MAX(CLLM_MIN(group, (2 * (int64_t)n_threads + units - 1) / units), (int64_t)1);
    const int64_t cs = (group + want - 1) / want;
    return (attn_shape){.group = group,
                        .cs = cs,
                        .n_chunks = (group + cs - 1) / cs,
                        .tb = tb,
                        .n_blocks = n_blocks};
}

/* F16 or F32 with contiguous rows (for the SIMD unit kernel). */
static bool attn_plain_rows(const cllm_tensor *t) {
    return (t->type == CLLM_TYPE_F16 || t->type == CLLM_TYPE_F32) &&
           t->nb[0] == cllm_type_traits_of(t->type)->type_size;
}

/* Whether the SIMD unit kernel (attn.h) computes this node. */
static bool attn_fast(const cllm_tensor *dst) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
#if defined(__x86_64__) || defined(__i386__)
    return cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 && attn_plain_rows(k) && attn_plain_rows(v) &&
           (!mask || attn_plain_rows(mask)) && k->ne[0] % 16 == 0 && v->ne[0] % 16 == 0 &&
           k->nb[1] <= INT32_MAX / 16;
#else
    (void)k, (void)v, (void)mask;
    return false;
#endif
}

typedef struct attn_slices {
    size_t q, acc, ml, sc, k, v; /* rounded bytes of each per-thread array */
    size_t fast;                 /* scratch of the SIMD unit kernel, or 0 */
} attn_slices;

static attn_slices attn_slice_sizes(const cllm_tensor *dst, const attn_shape *sh) {
    const size_t d = (size_t)dst->src[0]->ne[0], dv = (size_t)dst->src[2]->ne[0];
    const size_t rows = (size_t)(sh->tb * sh->cs);
    return (attn_slices){
        .fast = attn_fast(dst) ? cllm_cpu_ws_round(cllm_attn_fast_scratch((int64_t)d, (int64_t)dv) *
                                                   sizeof(float))
                               : 0,
        .q = cllm_cpu_ws_round(rows * d * sizeof(float)),
        .acc = cllm_cpu_ws_round(rows * dv * sizeof(float)),
        .ml = cllm_cpu_ws_round(2 * rows * sizeof(float)),
        .sc = cllm_cpu_ws_round(rows * sizeof(float)),
        .k = cllm_cpu_ws_round(d * sizeof(float)),
        .v = cllm_cpu_ws_round(dv * sizeof(float)),
    };
}

size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads) {
    const attn_shape sh = attn_shape_of(dst, n_threads);
    const attn_slices s = attn_slice_sizes(dst, &sh);
    return (size_t)n_threads * (s.q + s.acc + s.ml + s.sc + s.k + s.v + s.fast);
}

/* acc = acc * c + v over n floats */
static void attn_scale_add(int64_t n, float *acc, float c, const float *v) {
    for (int64_t i = 0; i < n; i++) acc[i] = acc[i] * c + v[i];
}

/* acc += w * v over n floats */
static void attn_axpy(int64_t n, float *acc, float w, const float *v) {
    for (int64_t i = 0; i < n; i++) acc[i] += w * v[i];
}

/* Keys up to the last one the mask shows to some token of t0 .. t0+nt-1:
 * those after it are skipped outright, without a look at each. A session
 * pads the cache rows it attends to (so that one graph serves many tokens)
 * and hides the padding this way. */
static int64_t attn_live_keys(const cllm_tensor *mask, int64_t n_kv, int64_t t0, int64_t nt) {
    if (!mask) return n_kv;
    const bool plain = mask->type == CLLM_TYPE_F32 && mask->nb[0] == sizeof(float);
    int64_t end = 0;
    for (int64_t ti = nt - 1; ti >= 0 && end < n_kv; ti--) {
        int64_t j = n_kv;
        if (plain) {
            const float *row = (const float *)cllm_cpu_elem(mask, 0, t0 + ti, 0, 0);
            while (j > end && row[j - 1] == -INFINITY) j--;
        } else {
            while (j > end && cllm_cpu_load(mask->type, cllm_cpu_elem(mask, j - 1, t0 + ti, 0,
                                                                      0)) == -INFINITY) {
                j--;
            }
        }
        end = j;
    }
    return end;
}

void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = q->ne[0], Dv = v->ne[0], T = q->ne[1];
    const int64_t n_kv = k->ne[1], n_kv_head = k->ne[2];
    const attn_shape sh = attn_shape_of(dst, params->nth);

    const attn_slices s = attn_slice_sizes(dst, &sh);
    const size_t per_thread = s.q + s.acc + s.ml + s.sc + s.k + s.v + s.fast;
    char *ws = cllm_cpu_ws(params, dst, (size_t)params->ith * per_thread, per_thread);
    float *qf = (float *)ws;                        /* [tb, cs, D] */
    float *acc = (float *)(ws + s.q);               /* [tb, cs, Dv] */
    float *mx = (float *)(ws + s.q + s.acc);        /* [tb, cs] running max of the scores */
    float *sum = mx + sh.tb * sh.cs;                /* [tb, cs] running sum of e^(s_j - max) */
    float *sc = (float *)(ws + s.q + s.acc + s.ml); /* [tb, cs] scores of key j */
    float *kf = (float *)(ws + s.q + s.acc + s.ml + s.sc);
    float *vf = (float *)(ws + s.q + s.acc + s.ml + s.sc + s.k);
    float *fast = s.fast ? (float *)(ws + s.q + s.acc + s.ml + s.sc + s.k + s.v) : NULL;
    /* the key's dot product: straight from the cache where the kernels can */
    const cllm_cpu_type_kernels *kk = cllm_cpu_kernels(k->type);
    const bool k_direct = kk && kk->vec_dot_type == CLLM_TYPE_F32 && !kk->from_float &&
                          k->nb[0] == cllm_type_traits_of(k->type)->type_size;
    if (!k_direct) kk = cllm_cpu_kernels(CLLM_TYPE_F32);

    /* units round-robin: with a causal mask later token blocks see more keys,
     * so contiguous ranges would give the last thread the most work. The
     * chunk order turns with the kv head: a short last chunk (3 heads in
     * chunks of 2 and 1) would otherwise fall to the same threads for
     * every head (2 threads: 6 rows against 3, now 5 against 4). */
    const int64_t n_units = n_kv_head * sh.n_chunks * sh.n_blocks;
    /* keys of the next unit asked for ahead (cllm_attn_prefetch): a block's worth */
    const int64_t n_ahead = attn_plain_rows(k) && attn_plain_rows(v) ? CLLM_MIN(n_kv, 32) : 0;
    for (int64_t r = params->ith; r < n_units; r += params->nth) {
        const int64_t g = (r / sh.n_chunks) % n_kv_head, c = (r % sh.n_chunks + g) % sh.n_chunks;
        const int64_t t0 = (r / (sh.n_chunks * n_kv_head)) * sh.tb;
        const int64_t nt = CLLM_MIN(sh.tb, T - t0);
        const int64_t h0 = g * sh.group + c * sh.cs;
        const int64_t nh = CLLM_MIN(sh.cs, (g + 1) * sh.group - h0);
        if (r + params->nth < n_units)
            cllm_attn_prefetch(k, v, ((r + params->nth) / sh.n_chunks) % n_kv_head, 0, n_ahead);
        for (int64_t ti = 0; ti < nt; ti++) {
            for (int64_t h = 0; h < nh; h++) {
                const int64_t row = ti * nh + h;
                float *qh = qf + row * D;
                const float *src =
                    cllm_cpu_row_f32(q, cllm_cpu_elem(q, 0, t0 + ti, h0 + h, 0), D, qh);
                if (src != qh) memcpy(qh, src, (size_t)D * sizeof(float));
                mx[row] = -INFINITY;
                sum[row] = 0.0f;
                for (int64_t i = 0; i < Dv; i++) acc[row * Dv + i] = 0.0f;
            }
        }

        const int64_t n_live = attn_live_keys(mask, n_kv, t0, nt);
#if defined(__x86_64__) || defined(__i386__)
        if (fast) {
            const cllm_attn_unit u = {.g = g,
                                      .t0 = t0,
                                      .nt = nt,
                                      .nh = nh,
                                      .n_kv = n_live,
                                      .q = qf,
                                      .acc = acc,
                                      .mx = mx,
                                      .sum = sum};
            if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
                cllm_cpu_attn_unit_avx512(dst, &u, fast);
            } else {
                cllm_cpu_attn_unit_avx2(dst, &u, fast);
            }
        }
#endif
        for (int64_t j = 0; j < n_live && !fast; j++) {
            float mv[ATTN_TB];
            bool any = false;
            for (int64_t ti = 0; ti < nt; ti++) {
                mv[ti] =
                    mask ? cllm_cpu_load(mask->type, cllm_cpu_elem(mask, j, t0 + ti, 0, 0)) : 0.0f;
                any = any || mv[ti] != -INFINITY;
            }
            if (!any) continue; /* hidden from every token of the block */
            const char *kraw = cllm_cpu_elem(k, 0, j, g, 0);
            const void *krow = k_direct ? (const void *)kraw : cllm_cpu_row_f32(k, kraw, D, kf);
            for (int64_t i = 0; i < nt * nh; i += CLLM_CPU_MAX_COLS) {
                const int nc = (int)CLLM_MIN((int64_t)CLLM_CPU_MAX_COLS, nt * nh - i);
                kk->vec_dot_n(D, sc + i, krow, qf + i * D, (size_t)D * sizeof(float), nc);
            }
            const float *vrow = NULL; /* converted on first use */
            for (int64_t ti = 0; ti < nt; ti++) {
                if (mv[ti] == -INFINITY) continue;
                for (int64_t h = 0; h < nh; h++) {
                    const int64_t row = ti * nh + h;
                    const float sj = sc[row] * scale + mv[ti];
                    if (sj == -INFINITY) continue;
                    if (!vrow) vrow = cllm_cpu_row_f32(v, cllm_cpu_elem(v, 0, j, g, 0), Dv, vf);
                    float *ah = acc + row * Dv;
                    if (sj > mx[row]) {
                        /* new maximum: rescale what was summed so far by e^(m - sj) */
                        const float cf = expf(mx[row] - sj);
                        attn_scale_add(Dv, ah, cf, vrow);
                        sum[row] = sum[row] * cf + 1.0f;
                        mx[row] = sj;
                    } else {
                        const float w = expf(sj - mx[row]);
                        attn_axpy(Dv, ah, w, vrow);
                        sum[row] += w;
                    }
                }
            }
        }

        for (int64_t ti = 0; ti < nt; ti++) {
            for (int64_t h = 0; h < nh; h++) {
                const int64_t row = ti * nh + h;
                float *y = (float *)cllm_cpu_elem(dst, 0, h0 + h, t0 + ti, 0);
                /* sum == 0: every key masked out */
                const float inv = sum[row] > 0.0f ? 1.0f / sum[row] : 0.0f;
                for (int64_t i = 0; i < Dv; i++) y[i] = acc[row * Dv + i] * inv;
            }
        }
    }
}
