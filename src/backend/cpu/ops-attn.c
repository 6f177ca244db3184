/*
 * Fused attention with an online softmax; the n_tokens x n_kv scores are
 * never stored.
 *   q: [D, n_tokens, n_head, 1] F32; k: [D, n_kv, n_head_kv, 1] and
 *   v: [Dv, n_kv, n_head_kv, 1] F32, F16 or BF16, any strides, or rows of
 *   whole Q8_0 / Q4_0 blocks (a quantized KV cache: read in place by the
 *   SIMD kernels, 8 values at a time, else each row through the type's
 *   to_float, a row or a chunk's rows at a time; never the whole cache);
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
 * the result does not depend on the number of threads. With F16, BF16,
 * Q8_0 or Q4_0 caches a chunk's rows are first converted to F32 whole, row by row
 * (cllm_cpu_attn_rows_avx2), and the unit kernels read them there (the
 * AVX2 one, or at the AVX-512 level cllm_cpu_attn_token_avx512): a kernel
 * that reads one head at a time takes each row in pieces, which streams
 * from memory at a fraction of the rate of whole rows.
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

/* A cache the one-token path reads as F32 rows converted per chunk: F16,
 * BF16 or rows of Q8_0 / Q4_0 blocks (a quantized KV cache; its blocks are
 * read where they lie, a chunk's rows at a time). */
static bool attn_convertible(const cllm_tensor *t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    return (t->type == CLLM_TYPE_F16 || t->type == CLLM_TYPE_BF16 || t->type == CLLM_TYPE_Q8_0 ||
            t->type == CLLM_TYPE_Q4_0) &&
           t->nb[0] == tt->type_size;
}

/* Rows the SIMD unit kernel reads in place for a batch of tokens (the
 * 8-value loads of x86/attn-kv.h): plain rows, BF16 or whole blocks. */
static bool attn_kv_rows(const cllm_tensor *t) { return attn_plain_rows(t) || attn_convertible(t); }

/* One token with F16, BF16 or block caches, at both x86 levels: a chunk's
 * rows are converted whole first (cllm_cpu_attn_rows_avx2, each type's
 * 8-value loads) for the unit kernels. */
static bool attn_rows_f32(const cllm_tensor *dst) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2];
#if defined(__x86_64__) || defined(__i386__)
    return attn_split(dst) && cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 && attn_convertible(k) &&
           attn_convertible(v);
#else
    (void)k, (void)v;
    return false;
#endif
}

/* Whether the SIMD unit kernel (attn.h) computes this node: plain rows,
 * one token's rows converted per chunk, or a batch's rows of any cache type
 * read in place (BF16, Q8_0, Q4_0 too). */
static bool attn_fast(const cllm_tensor *dst) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
#if defined(__x86_64__) || defined(__i386__)
    return cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
           ((attn_plain_rows(k) && attn_plain_rows(v)) || attn_rows_f32(dst) ||
            (!attn_split(dst) && attn_kv_rows(k) && attn_kv_rows(v))) &&
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

static size_t attn_per_thread(const attn_slices *s) {
    return s->q + s->acc + s->ml + s->sc + s->k + s->v + s->fast + s->rows;
}

size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads) {
    const attn_shape sh = attn_shape_of(dst, n_threads);
    const attn_slices s = attn_slice_sizes(dst, &sh);
    return (size_t)n_threads * attn_per_thread(&s) + s.part;
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
        if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
            if (u->kf) /* one token, its rows converted */
                cllm_cpu_attn_token_avx512(dst, u, w->fast);
            else
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

/* A one-token node's chunks with keys, and where their states lie in its
 * part of the workspace (acc [n_chunks, H, Dv], then max and sum
 * [n_chunks, H] each). */
typedef struct attn_token {
    cllm_tensor *dst;
    attn_shape sh;
    int64_t n_live, n_c;
    float *acc, *mx, *sum;
} attn_token;

static attn_token attn_token_of(cllm_tensor *dst, int nth, float *part) {
    const int64_t H = dst->src[0]->ne[2], Dv = dst->src[2]->ne[0];
    attn_token t = {.dst = dst, .sh = attn_shape_of(dst, nth)};
    t.n_live = attn_live_keys(dst->src[3], dst->src[1]->ne[1], 0, 1);
    t.n_c = (t.n_live + ATTN_KC - 1) / ATTN_KC;
    t.acc = part;
    t.mx = part + t.sh.n_chunks * H * Dv;
    t.sum = t.mx + t.sh.n_chunks * H;
    return t;
}

/* Chunk c of a one-token node (its query rows already in w->qf): every
 * head's state over the chunk's keys, into the node's part. */
static void attn_token_chunk(const attn_token *t, const attn_ws *w, int64_t c, bool prefetch) {
    const cllm_tensor *dst = t->dst, *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t Dv = v->ne[0], H = q->ne[2], n_kv_head = k->ne[2];
    float *acc = t->acc + c * H * Dv, *mx = t->mx + c * H, *sum = t->sum + c * H;
    attn_clear_states(H, Dv, acc, mx, sum);
    const int64_t k0 = c * ATTN_KC, k1 = CLLM_MIN(t->n_live, k0 + ATTN_KC);
    float *kf = w->rows, *vf = kf ? kf + n_kv_head * (k1 - k0) * q->ne[0] : NULL;
#if defined(__x86_64__) || defined(__i386__)
    if (kf) cllm_cpu_attn_rows_avx2(k, v, k0, k1 - k0, kf, vf);
#endif
    if (!kf && prefetch && attn_plain_rows(k) && attn_plain_rows(v)) {
        for (int64_t g = 0; g < n_kv_head; g++)
            cllm_attn_prefetch(k, v, g, k1, CLLM_MIN(t->n_live - k1, (int64_t)ATTN_KC));
    }
    for (int64_t g = 0; g < n_kv_head; g++) {
        const int64_t h0 = g * t->sh.group;
        const cllm_attn_unit u = {.g = g,
                                  .t0 = 0,
                                  .nt = 1,
                                  .nh = t->sh.group,
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

/* Head h of a one-token node: its chunks' states combined in chunk order. */
static void attn_token_head(const attn_token *t, int64_t h) {
    const int64_t Dv = t->dst->src[2]->ne[0], H = t->dst->src[0]->ne[2];
    float m = -INFINITY;
    for (int64_t c = 0; c < t->n_c; c++) {
        if (t->sum[c * H + h] > 0.0f && t->mx[c * H + h] > m) m = t->mx[c * H + h];
    }
    float *y = (float *)cllm_cpu_elem(t->dst, 0, h, 0, 0);
    for (int64_t i = 0; i < Dv; i++) y[i] = 0.0f;
    float l = 0.0f;
    for (int64_t c = 0; c < t->n_c; c++) {
        const float sc = t->sum[c * H + h];
        if (!(sc > 0.0f)) continue; /* every key of the chunk hidden */
        const float f = expf(t->mx[c * H + h] - m);
        l += sc * f;
        attn_axpy(Dv, y, f, t->acc + (c * H + h) * Dv);
    }
    /* l == 0: every key masked out */
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < Dv; i++) y[i] *= inv;
}

/* The one-token nodes[0..n) by key chunks (see the top): this thread's
 * contiguous range of all the nodes' chunks, all heads each, then, after
 * the barrier, its share of the nodes' heads combined over their chunks.
 * Every source is read before the barrier and every dst written after it,
 * so one node's dst may take the memory of another's source. parts: the
 * nodes' states, one after the other. */
static void attn_tokens(const cllm_cpu_params *params, cllm_tensor *const *nodes, int n,
                        const attn_ws *w, float *parts) {
    attn_token t[CLLM_CPU_ATTN_GROUP_MAX];
    int64_t total = 0;
    float *part = parts;
    for (int i = 0; i < n; i++) {
        t[i] = attn_token_of(nodes[i], params->nth, part);
        part += attn_slice_sizes(nodes[i], &t[i].sh).part / sizeof(float);
        total += t[i].n_c;
    }
    const int64_t f0 = total * params->ith / params->nth;
    const int64_t f1 = total * (params->ith + 1) / params->nth;
    int64_t base = 0; /* chunks of the nodes before node i */
    for (int i = 0; i < n && base < f1; base += t[i].n_c, i++) {
        const int64_t c0 = CLLM_MAX(f0 - base, (int64_t)0), c1 = CLLM_MIN(f1 - base, t[i].n_c);
        if (c0 >= c1) continue;
        const cllm_tensor *q = nodes[i]->src[0];
        attn_load_rows(q, 0, 1, 0, q->ne[2], w->qf);
        for (int64_t c = c0; c < c1; c++) attn_token_chunk(&t[i], w, c, c + 1 < c1);
    }
    cllm_threadpool_barrier(params->pool); /* every chunk's state is in parts */

    const int64_t H = nodes[0]->src[0]->ne[2];
    for (int64_t r = params->ith; r < (int64_t)n * H; r += params->nth) {
        attn_token_head(&t[r / H], r % H);
    }
}

/* A thread's arrays for nodes of dst's shape, at ws. */
static attn_ws attn_ws_of(const cllm_tensor *dst, const attn_shape *sh, const attn_slices *s,
                          char *ws) {
    const size_t per_thread = attn_per_thread(s);
    attn_ws w = {.qf = (float *)ws,                                  /* [tb, cs, D] */
                 .acc = s->acc ? (float *)(ws + s->q) : NULL,        /* [tb, cs, Dv] */
                 .mx = s->ml ? (float *)(ws + s->q + s->acc) : NULL, /* [tb, cs] running max */
                 .sc = (float *)(ws + s->q + s->acc + s->ml),        /* [tb, cs] scores of key j */
                 .kf = (float *)(ws + s->q + s->acc + s->ml + s->sc),
                 .vf = (float *)(ws + s->q + s->acc + s->ml + s->sc + s->k),
                 .fast =
                     s->fast ? (float *)(ws + s->q + s->acc + s->ml + s->sc + s->k + s->v) : NULL};
    w.sum = w.mx ? w.mx + sh->tb * sh->cs : NULL; /* [tb, cs] running sum of e^(s_j - max) */
    w.rows = s->rows ? (float *)(ws + per_thread - s->rows) : NULL;
    /* the key's dot product: straight from the cache where the kernels can */
    const cllm_tensor *k = dst->src[1];
    w.kk = cllm_cpu_kernels(k->type);
    w.k_direct = w.kk && w.kk->vec_dot_type == CLLM_TYPE_F32 && !w.kk->from_float &&
                 k->nb[0] == cllm_type_traits_of(k->type)->type_size;
    if (!w.k_direct) w.kk = cllm_cpu_kernels(CLLM_TYPE_F32);
    return w;
}

/* ---- one-token nodes of several sequences together ---------------------- */

bool cllm_cpu_attn_joins(const cllm_tensor *a, const cllm_tensor *b) {
    if (a->op != CLLM_OP_ATTN || b->op != CLLM_OP_ATTN || !attn_split(a) || !attn_split(b))
        return false;
    for (int i = 0; i < 4; i++) {
        const cllm_tensor *x = a->src[i], *y = b->src[i];
        if (!x != !y) return false;
        if (!x) continue;
        /* (q, k and v: head size and heads; a mask's rows are the keys) */
        if (x->type != y->type || x->nb[0] != y->nb[0] ||
            attn_plain_rows(x) != attn_plain_rows(y) ||
            (i < 3 && (x->ne[0] != y->ne[0] || x->ne[2] != y->ne[2])))
            return false;
        /* b reads no attention result (of a or of a node before a) */
        for (const cllm_tensor *t = y; t; t = t->view_src) {
            if (t->op == CLLM_OP_ATTN) return false;
        }
    }
    if (cllm_get_op_param_f32(a, 0) != cllm_get_op_param_f32(b, 0)) return false;
    return attn_fast(a) == attn_fast(b) && attn_rows_f32(a) == attn_rows_f32(b);
}

size_t cllm_cpu_attn_group_workspace(cllm_tensor *const *nodes, int n, int n_threads) {
    size_t size = 0;
    for (int i = 0; i < n; i++) {
        const attn_shape sh = attn_shape_of(nodes[i], n_threads);
        const attn_slices s = attn_slice_sizes(nodes[i], &sh);
        if (i == 0) size = (size_t)n_threads * attn_per_thread(&s); /* the same for all */
        size += s.part;
    }
    return size;
}

void cllm_cpu_attn_group(const cllm_cpu_params *params, cllm_tensor *const *nodes, int n) {
    CLLM_ASSERTF(n >= 1 && n <= CLLM_CPU_ATTN_GROUP_MAX, "cpu: a group of %d attention nodes", n);
    const size_t need = cllm_cpu_attn_group_workspace(nodes, n, params->nth);
    CLLM_ASSERTF(need <= params->wsize,
                 "cpu: %d attention nodes (%s, ...) use %zu bytes of workspace (%zu allocated)", n,
                 nodes[0]->name, need, params->wsize);
    const attn_shape sh = attn_shape_of(nodes[0], params->nth);
    const attn_slices s = attn_slice_sizes(nodes[0], &sh);
    const size_t per_thread = attn_per_thread(&s);
    char *ws = (char *)params->wdata;
    const attn_ws w = attn_ws_of(nodes[0], &sh, &s, ws + (size_t)params->ith * per_thread);
    attn_tokens(params, nodes, n, &w, (float *)(ws + (size_t)params->nth * per_thread));
}

void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t Dv = v->ne[0], T = q->ne[1];
    const int64_t n_kv = k->ne[1], n_kv_head = k->ne[2];
    const attn_shape sh = attn_shape_of(dst, params->nth);

    const attn_slices s = attn_slice_sizes(dst, &sh);
    const size_t per_thread = attn_per_thread(&s);
    char *ws = cllm_cpu_ws(params, dst, (size_t)params->ith * per_thread, per_thread);
    const attn_ws w = attn_ws_of(dst, &sh, &s, ws);

    if (attn_split(dst)) {
        float *part = (float *)cllm_cpu_ws(params, dst, (size_t)params->nth * per_thread, s.part);
        attn_tokens(params, &dst, 1, &w, part);
        return;
    }

    /* units round-robin: with a causal mask later token blocks see more keys,
     * so contiguous ranges would give the last thread the most work. The
     * chunk order turns with the kv head: a short last chunk (3 heads in
     * chunks of 2 and 1) would otherwise fall to the same threads for
     * every head (2 threads: 6 rows against 3, now 5 against 4). */
    const int64_t n_units = n_kv_head * sh.n_chunks * sh.n_blocks;
    /* keys of the next unit asked for ahead (cllm_attn_prefetch): a block's worth */
    const int64_t n_ahead = attn_kv_rows(k) && attn_kv_rows(v) ? CLLM_MIN(n_kv, 32) : 0;
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
