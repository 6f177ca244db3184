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
 * leaves threads idle (few kv heads, few token blocks).
 *
 * The scores of one key against all the unit's query rows come from one
 * kernels.h vec_dot_n call per CLLM_CPU_MAX_COLS rows, reading the key
 * straight from the cache (F16/BF16/F32 x F32; other layouts are converted
 * to F32 first).
 *
 * One token (a generation step) goes by key chunks instead: a unit is
 * ATTN_KC keys of every kv head, so a thread reads whole cache rows (one
 * row holds every head) from a contiguous range of them, and the threads
 * share the keys, not the heads. Per-head units had every thread read
 * parts of every row, and a generation step's rows come from memory (the
 * weights streamed since pushed them out). Each chunk leaves its softmax
 * state per query head; after a barrier, the heads' states are combined
 * chunk by chunk in order. Chunks are fixed (ATTN_KC keys from key 0), so
 * the result does not depend on the number of threads. With F16 caches a
 * chunk's rows are first converted to F32 whole, row by row
 * (cllm_cpu_attn_rows_avx2), and the AVX2 unit kernel reads them there, at
 * the AVX-512 level too: a kernel that reads one head at a time takes each
 * row in pieces, which streams from memory at a third of the rate (Zen 3),
 * and on a Zen 5 SmolLM2's attention took 16 % of a generated token that
 * way against 9 % this way.
 *
 * Per-thread workspace: q rows as F32 [tb, cs, D] (one token: [n_head, D]),
 * acc [tb, cs, Dv] and running max and sum [tb, cs] each (not for one
 * token), scores [tb, cs], the current k row [D] and v row [Dv] as F32, a
 * chunk's k and v rows as F32 where they are converted; for one token,
 * then, the chunks' states: acc [chunks, n_head, Dv], max and sum
 * [chunks, n_head] each.
 */
#include "backend/cpu/attn.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops-impl.h"

#include <limits.h>
#include <math.h>

#define ATTN_TB 8  /* tokens per unit */
#define ATTN_KC 32 /* keys per chunk of one token */

typedef struct attn_shape {
    int64_t group;    /* query heads per kv head */
    int64_t cs;       /* query heads per chunk */
    int64_t n_chunks; /* chunks per group */
    int64_t tb;       /* tokens per block */
    int64_t n_blocks; /* token blocks */
} attn_shape;

/* One token: units are key chunks (see the top). */
static bool attn_split(const cllm_tensor *dst) { return dst->src[0]->ne[1] == 1; }

static attn_shape attn_shape_of(const cllm_tensor *dst, int n_threads) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1];
    if (attn_split(dst)) { /* a chunk's unit: all heads, one token */
        return (attn_shape){.group = q->ne[2] / k->ne[2],
                            .cs = q->ne[2],
                            .n_chunks = (k->ne[1] + ATTN_KC - 1) / ATTN_KC,
                            .tb = 1,
                            .n_blocks = 1};
    }
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

/* One token with F16 caches, at both x86 levels: a chunk's rows are
 * converted whole first (cllm_cpu_attn_rows_avx2) for the AVX2 unit kernel. */
static bool attn_rows_f32(const cllm_tensor *dst) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2];
#if defined(__x86_64__) || defined(__i386__)
    return attn_split(dst) && cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
           k->type == CLLM_TYPE_F16 && v->type == CLLM_TYPE_F16;
#else
    (void)k, (void)v;
    return false;
#endif
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
    size_t part;                 /* one token: the chunks' states (shared), or 0 */
    size_t rows;                 /* one token: a chunk's k and v rows as F32, or 0 */
} attn_slices;

static attn_slices attn_slice_sizes(const cllm_tensor *dst, const attn_shape *sh) {
    const size_t d = (size_t)dst->src[0]->ne[0], dv = (size_t)dst->src[2]->ne[0];
    const size_t rows = (size_t)(sh->tb * sh->cs);
    const bool split = attn_split(dst);
    return (attn_slices){
        .fast = attn_fast(dst) ? cllm_cpu_ws_round(cllm_attn_fast_scratch((int64_t)d, (int64_t)dv) *
                                                   sizeof(float))
                               : 0,
        .q = cllm_cpu_ws_round(rows * d * sizeof(float)),
        /* one token keeps its states in part */
        .acc = split ? 0 : cllm_cpu_ws_round(rows * dv * sizeof(float)),
        .ml = split ? 0 : cllm_cpu_ws_round(2 * rows * sizeof(float)),
        .sc = cllm_cpu_ws_round(rows * sizeof(float)),
        .k = cllm_cpu_ws_round(d * sizeof(float)),
        .v = cllm_cpu_ws_round(dv * sizeof(float)),
        .rows = attn_fast(dst) && attn_rows_f32(dst)
                    ? cllm_cpu_ws_round((size_t)ATTN_KC * (size_t)dst->src[1]->ne[2] * (d + dv) *
                                        sizeof(float))
                    : 0,
        .part =
            split ? cllm_cpu_ws_round((size_t)sh->n_chunks * rows * (dv + 2) * sizeof(float)) : 0,
    };
}

size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads) {
    const attn_shape sh = attn_shape_of(dst, n_threads);
    const attn_slices s = attn_slice_sizes(dst, &sh);
    return (size_t)n_threads * (s.q + s.acc + s.ml + s.sc + s.k + s.v + s.fast + s.rows) + s.part;
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

/* A thread's arrays (attn_slices) and how it reads keys. */
typedef struct attn_ws {
    float *qf, *acc, *mx, *sum, *sc, *kf, *vf;
    float *fast; /* the SIMD unit kernel's scratch, or NULL */
    float *rows; /* one token: a chunk's rows as F32 (attn_rows_f32), or NULL */
    const cllm_cpu_type_kernels *kk;
    bool k_direct; /* kk's dot product reads k rows from the cache */
} attn_ws;

/* Folds keys u->k0 .. u->n_kv - 1 into the unit's state: the SIMD kernel
 * where it runs, else key by key. */
static void attn_fold(const cllm_tensor *dst, const cllm_attn_unit *u, const attn_ws *w) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
#if defined(__x86_64__) || defined(__i386__)
    if (w->fast) {
        if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 && !u->kf) {
            cllm_cpu_attn_unit_avx512(dst, u, w->fast);
        } else {
            cllm_cpu_attn_unit_avx2(dst, u, w->fast);
        }
        return;
    }
#endif
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = k->ne[0], Dv = v->ne[0], nt = u->nt, nh = u->nh;
    for (int64_t j = u->k0; j < u->n_kv; j++) {
        float mv[ATTN_TB];
        bool any = false;
        for (int64_t ti = 0; ti < nt; ti++) {
            mv[ti] =
                mask ? cllm_cpu_load(mask->type, cllm_cpu_elem(mask, j, u->t0 + ti, 0, 0)) : 0.0f;
            any = any || mv[ti] != -INFINITY;
        }
        if (!any) continue; /* hidden from every token of the block */
        const char *kraw = cllm_cpu_elem(k, 0, j, u->g, 0);
        const void *krow = w->k_direct ? (const void *)kraw : cllm_cpu_row_f32(k, kraw, D, w->kf);
        for (int64_t i = 0; i < nt * nh; i += CLLM_CPU_MAX_COLS) {
            const int nc = (int)CLLM_MIN((int64_t)CLLM_CPU_MAX_COLS, nt * nh - i);
            w->kk->vec_dot_n(D, w->sc + i, krow, u->q + i * D, (size_t)D * sizeof(float), nc);
        }
        const float *vrow = NULL; /* converted on first use */
        for (int64_t ti = 0; ti < nt; ti++) {
            if (mv[ti] == -INFINITY) continue;
            for (int64_t h = 0; h < nh; h++) {
                const int64_t row = ti * nh + h;
                const float sj = w->sc[row] * scale + mv[ti];
                if (sj == -INFINITY) continue;
                if (!vrow) vrow = cllm_cpu_row_f32(v, cllm_cpu_elem(v, 0, j, u->g, 0), Dv, w->vf);
                float *ah = u->acc + row * Dv;
                if (sj > u->mx[row]) {
                    /* new maximum: rescale what was summed so far by e^(m - sj) */
                    const float cf = expf(u->mx[row] - sj);
                    attn_scale_add(Dv, ah, cf, vrow);
                    u->sum[row] = u->sum[row] * cf + 1.0f;
                    u->mx[row] = sj;
                } else {
                    const float wj = expf(sj - u->mx[row]);
                    attn_axpy(Dv, ah, wj, vrow);
                    u->sum[row] += wj;
                }
            }
        }
    }
}

/* Query rows h0 .. h0 + nh - 1 of tokens t0 .. t0 + nt - 1 as F32 into qf
 * (row ti * nh + h). */
static void attn_load_rows(const cllm_tensor *q, int64_t t0, int64_t nt, int64_t h0, int64_t nh,
                           float *qf) {
    const int64_t D = q->ne[0];
    for (int64_t ti = 0; ti < nt; ti++) {
        for (int64_t h = 0; h < nh; h++) {
            float *qh = qf + (ti * nh + h) * D;
            const float *src = cllm_cpu_row_f32(q, cllm_cpu_elem(q, 0, t0 + ti, h0 + h, 0), D, qh);
            if (src != qh) memcpy(qh, src, (size_t)D * sizeof(float));
        }
    }
}

/* The online softmax states of n rows, cleared. */
static void attn_clear_states(int64_t n, int64_t Dv, float *acc, float *mx, float *sum) {
    for (int64_t r = 0; r < n; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    memset(acc, 0, (size_t)(n * Dv) * sizeof(float));
}

/* One token by key chunks (see the top): this thread's contiguous range of
 * chunks, all heads each, then, after the barrier, its share of the heads
 * combined over the chunks. part: the shared states. */
static void attn_one_token(const cllm_cpu_params *params, cllm_tensor *dst, const attn_shape *sh,
                           const attn_ws *w, float *part) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t Dv = v->ne[0], H = q->ne[2], n_kv_head = k->ne[2];
    const int64_t n_live = attn_live_keys(mask, k->ne[1], 0, 1);
    const int64_t n_c = (n_live + ATTN_KC - 1) / ATTN_KC; /* chunks with keys */
    float *pacc = part, *pmx = pacc + sh->n_chunks * H * Dv, *psum = pmx + sh->n_chunks * H;

    attn_load_rows(q, 0, 1, 0, H, w->qf);
    const int64_t c0 = n_c * params->ith / params->nth, c1 = n_c * (params->ith + 1) / params->nth;
    for (int64_t c = c0; c < c1; c++) {
        float *acc = pacc + c * H * Dv, *mx = pmx + c * H, *sum = psum + c * H;
        attn_clear_states(H, Dv, acc, mx, sum);
        const int64_t k0 = c * ATTN_KC, k1 = CLLM_MIN(n_live, k0 + ATTN_KC);
        float *kf = w->rows, *vf = kf ? kf + n_kv_head * (k1 - k0) * q->ne[0] : NULL;
#if defined(__x86_64__) || defined(__i386__)
        if (kf) cllm_cpu_attn_rows_avx2(k, v, k0, k1 - k0, kf, vf);
#endif
        if (!kf && c + 1 < c1 && attn_plain_rows(k) && attn_plain_rows(v)) {
            for (int64_t g = 0; g < n_kv_head; g++)
                cllm_attn_prefetch(k, v, g, k1, CLLM_MIN(n_live - k1, (int64_t)ATTN_KC));
        }
        for (int64_t g = 0; g < n_kv_head; g++) {
            const int64_t h0 = g * sh->group;
            const cllm_attn_unit u = {.g = g,
                                      .t0 = 0,
                                      .nt = 1,
                                      .nh = sh->group,
                                      .k0 = k0,
                                      .n_kv = k1,
                                      .q = w->qf + h0 * q->ne[0],
                                      .acc = acc + h0 * Dv,
                                      .mx = mx + h0,
                                      .sum = sum + h0,
                                      .kf = kf ? kf + g * (k1 - k0) * q->ne[0] : NULL,
                                      .vf = vf ? vf + g * (k1 - k0) * Dv : NULL};
            attn_fold(dst, &u, w);
        }
    }
    cllm_threadpool_barrier(params->pool); /* every chunk's state is in part */

    for (int64_t h = params->ith; h < H; h += params->nth) {
        float m = -INFINITY;
        for (int64_t c = 0; c < n_c; c++) {
            if (psum[c * H + h] > 0.0f && pmx[c * H + h] > m) m = pmx[c * H + h];
        }
        float *y = (float *)cllm_cpu_elem(dst, 0, h, 0, 0);
        for (int64_t i = 0; i < Dv; i++) y[i] = 0.0f;
        float l = 0.0f;
        for (int64_t c = 0; c < n_c; c++) {
            const float sc = psum[c * H + h];
            if (!(sc > 0.0f)) continue; /* every key of the chunk hidden */
            const float f = expf(pmx[c * H + h] - m);
            l += sc * f;
            attn_axpy(Dv, y, f, pacc + (c * H + h) * Dv);
        }
        /* l == 0: every key masked out */
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int64_t i = 0; i < Dv; i++) y[i] *= inv;
    }
}

void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t Dv = v->ne[0], T = q->ne[1];
    const int64_t n_kv = k->ne[1], n_kv_head = k->ne[2];
    const attn_shape sh = attn_shape_of(dst, params->nth);

    const attn_slices s = attn_slice_sizes(dst, &sh);
    const size_t per_thread = s.q + s.acc + s.ml + s.sc + s.k + s.v + s.fast + s.rows;
    char *ws = cllm_cpu_ws(params, dst, (size_t)params->ith * per_thread, per_thread);
    attn_ws w = {.qf = (float *)ws,                               /* [tb, cs, D] */
                 .acc = s.acc ? (float *)(ws + s.q) : NULL,       /* [tb, cs, Dv] */
                 .mx = s.ml ? (float *)(ws + s.q + s.acc) : NULL, /* [tb, cs] running max */
                 .sc = (float *)(ws + s.q + s.acc + s.ml),        /* [tb, cs] scores of key j */
                 .kf = (float *)(ws + s.q + s.acc + s.ml + s.sc),
                 .vf = (float *)(ws + s.q + s.acc + s.ml + s.sc + s.k),
                 .fast = s.fast ? (float *)(ws + s.q + s.acc + s.ml + s.sc + s.k + s.v) : NULL};
    w.sum = w.mx ? w.mx + sh.tb * sh.cs : NULL; /* [tb, cs] running sum of e^(s_j - max) */
    w.rows = s.rows ? (float *)(ws + per_thread - s.rows) : NULL;
    /* the key's dot product: straight from the cache where the kernels can */
    w.kk = cllm_cpu_kernels(k->type);
    w.k_direct = w.kk && w.kk->vec_dot_type == CLLM_TYPE_F32 && !w.kk->from_float &&
                 k->nb[0] == cllm_type_traits_of(k->type)->type_size;
    if (!w.k_direct) w.kk = cllm_cpu_kernels(CLLM_TYPE_F32);

    if (attn_split(dst)) {
        float *part = (float *)cllm_cpu_ws(params, dst, (size_t)params->nth * per_thread, s.part);
        attn_one_token(params, dst, &sh, &w, part);
        return;
    }

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
        attn_load_rows(q, t0, nt, h0, nh, w.qf);
        attn_clear_states(nt * nh, Dv, w.acc, w.mx, w.sum);
        const cllm_attn_unit u = {.g = g,
                                  .t0 = t0,
                                  .nt = nt,
                                  .nh = nh,
                                  .k0 = 0,
                                  .n_kv = attn_live_keys(mask, n_kv, t0, nt),
                                  .q = w.qf,
                                  .acc = w.acc,
                                  .mx = w.mx,
                                  .sum = w.sum};
        attn_fold(dst, &u, &w);

        for (int64_t ti = 0; ti < nt; ti++) {
            for (int64_t h = 0; h < nh; h++) {
                const int64_t row = ti * nh + h;
                float *y = (float *)cllm_cpu_elem(dst, 0, h0 + h, t0 + ti, 0);
                /* sum == 0: every key masked out */
                const float inv = w.sum[row] > 0.0f ? 1.0f / w.sum[row] : 0.0f;
                for (int64_t i = 0; i < Dv; i++) y[i] = w.acc[row * Dv + i] * inv;
            }
        }
    }
}
