/*
 * mul_mat: a: [K, M, A2, A3] any type with to_float (or vec_dot), any
 * strides for plain types; b: [K, N, B2, B3] F32, any strides.
 *   out[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3]
 * out: F32 [M, N, B2, B3], contiguous.
 *
 * How a row of a meets a row of b (one plan, shared by the workspace
 * declaration and the kernel, so they always agree), first match wins:
 *  - gemm (panel GEMM, gemm.h; AVX-512 VNNI, quantized a with a panel form,
 *    at least CLLM_GEMM_MIN_COLS columns: prompt processing): b's rows are
 *    quantized into the GEMM's activation form in the shared workspace;
 *    each thread packs 16 weight rows at a time into its panel (once per
 *    tile), two groups of 16 into two panels where its tile has them (the
 *    tiles are pairs of groups when there are enough: cllm_cpu_gemm2, whose
 *    activation loads serve both), and runs them against the tile's columns.
 *  - gemm_f (the same for F16 / BF16 weights, 32 rows per panel): b's rows
 *    read in place as F32 (gathered into the workspace if strided), or
 *    copied into the workspace in the column groups the level's kernel
 *    prefers (cllm_cpu_gemm_f_group: AVX2).
 *  - gemv (one-column kernels, gemm.h; AVX2 and AVX-512, Q4_0 / Q4_1 /
 *    Q4_K / Q8_0; fewer columns: generation): b's rows
 *    in the kernel's activation form, the weight rows read in place.
 *  - kernels: a has contiguous rows and a dot product in the kernel dispatch
 *    (kernels.h) — every quantized type with vec_dot, and F32/F16/BF16 whose
 *    dot reads F32 activations. Rows of b are converted once to the kernel's
 *    vec_dot_type in the shared workspace (rows split over threads, then a
 *    barrier); F32 activations are read in place when b's rows are
 *    contiguous, gathered into the workspace otherwise. Not for a quantized a
 *    when the node asks for CLLM_PREC_F32 (activations kept in F32).
 *  - converted: anything else (strided plain a such as a transposed V, a
 *    quantized a under CLLM_PREC_F32, types without a kernel): each row of a
 *    is converted to F32 once into a per-thread workspace row, then dotted
 *    with every b column.
 *
 * Blocking (kernels plan): the output of one batch is an M x N tile walked
 * in blocks of MB weight rows; for each block, columns go by chunks of up
 * to CLLM_CPU_MAX_COLS and every weight row of the block meets the whole
 * chunk in vec_dot_mxn calls (tiles of CLLM_CPU_MAX_ROWS weight rows x the
 * chunk), so a quantized row is unpacked once per chunk and an activation
 * block is loaded once per tile; the chunk of b stays in L1 across the
 * block's rows and the block stays in L2 across the chunks. With N = 1
 * (generation) this degenerates into streaming each weight row exactly once
 * with vec_dot (a 4 x 1 tile gains nothing there: four interleaved row
 * streams defeat the hardware prefetcher). Columns as alone (a step of several sequences) go
 * through vec_dot_cols where the level has it (each weight row unpacked
 * once for a chunk of columns, each column summed as vec_dot sums it),
 * else through one vec_dot per column.
 *
 * Work split: the outputs of all batches form a grid of tiles (a range of
 * weight rows x a range of columns), about two per thread (the panel plan:
 * one or two groups of 16 rows, mm_make_gemm_tiles): whole columns when there are
 * enough weight rows, column ranges too otherwise, so small matrices still
 * use every thread. Thread ith starts with tile ith; when b is converted
 * (there is a barrier anyway) the remaining tiles are handed out through an
 * atomic counter in the workspace, so a thread that the OS delays (a shared
 * machine) does not hold the others back at the next barrier; otherwise
 * each thread takes every nth tile. Tiles are not made smaller than that:
 * in a one-token step of a small model each tile starts a prefetch stream
 * and takes a counter that another core holds, so many small tiles cost
 * more than they balance. A fixed tile per thread, without the hand-out,
 * would leave every thread waiting for one that the OS delays.
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops-impl.h"
#include "backend/cpu/repack.h"

#include <stdatomic.h>

/* Bytes of weight rows in one block (fits L2 with room for b and out). */
#define MM_BLOCK_BYTES (96 * 1024)
#define MM_BLOCK_MIN   4
#define MM_BLOCK_MAX   64

typedef struct mm_plan {
    bool alone;                     /* columns as alone: one-column kernels only */
    bool gemv;                      /* one-column plan (gemm.h): b in gemv form, a read in place */
    bool gemm;                      /* panel plan (gemm.h): b quantized by gemm, a packed */
    bool gemm_f;                    /* ... of float weights: b F32, in place if it can be */
    int f_group;                    /* gemm_f: b's columns in groups of this many (gemm.h) */
    size_t panel_bytes;             /* gemm: per-thread panel + pack scratch (in thread_bytes) */
    const cllm_cpu_type_kernels *k; /* kernels plan; NULL: converted plan */
    bool convert_b;                 /* b rows are converted into the shared workspace */
    cllm_type b_type;               /* type of the b rows the dots read */
    size_t b_row_size;              /* bytes of one converted b row */
    size_t cols_size;               /* gemv: packed scales per group of 4 columns (gemm.h) */
    size_t counter_bytes;           /* the tile counter at offset 0 (dynamic split), or 0 */
    size_t shared_bytes;            /* converted b (rounded), after the counter */
    size_t thread_bytes;            /* per-thread F32 row of K (rounded), 0 if none */
    /* a stored 16 rows at a time (repack.h: CLLM_CPU_LAYOUT_X16): read by
     * cllm_cpu_gemv_x16, packed by cllm_cpu_gemm_pack_x16, or (another
     * level, F32 activations) its rows converted one by one */
    bool x16_gemv, x16_gemm, x16_rows;
} mm_plan;

static mm_plan mm_make_plan_rows(const cllm_tensor *dst, bool converted);

static mm_plan mm_make_plan(const cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0];
    const int64_t K = a->ne[0];
    mm_plan p = mm_make_plan_rows(dst, false);
    /* The workspace must not depend on the layout: a plan made before the
     * weights were loaded (cllm_plan) has them as the file stores them.
     * The one-column and panel plans keep their bytes (the packed scales
     * unused); another plan reads a's rows converted one by one (each as
     * to_float gives it), which needs no more than the converted plan. */
    if (a->layout == CLLM_CPU_LAYOUT_X16) {
        if (p.gemm && !p.gemm_f && cllm_cpu_x16_available(a->type, K)) {
            p.x16_gemm = true;
        } else if (p.gemv && cllm_cpu_x16_available(a->type, K)) {
            p.x16_gemv = true;
        } else if (p.k && p.k->vec_dot_type == CLLM_TYPE_Q8_K &&
                   cllm_cpu_x16_available(a->type, K)) {
            /* (Q6_K: the kernels plan's Q8_K columns, read by its
             * one-column kernel of 16 rows) */
            p.x16_gemv = true;
        } else {
            p = mm_make_plan_rows(dst, true);
            p.x16_rows = true;
        }
    }
    return p;
}

/* The plan of a's rows as the file stores them (mm_make_plan adds what a
 * matrix stored 16 rows at a time needs); `converted`: the converted plan
 * whatever else could run. */
static mm_plan mm_make_plan_rows(const cllm_tensor *dst, bool converted) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    const int64_t K = a->ne[0];
    /* (every plan but the converted one reads a's rows in place) */
    const bool a_rows = !converted && a->nb[0] == tt->type_size;
    const bool b_rows = b->nb[0] == sizeof(float);
    const cllm_cpu_type_kernels *k = a_rows ? cllm_cpu_kernels(a->type) : NULL;
    mm_plan p = {.b_type = CLLM_TYPE_F32, .alone = cllm_mul_mat_cols_alone(dst)};
    if (a_rows && !p.alone && b->ne[1] >= CLLM_GEMM_MIN_COLS &&
        cllm_mul_mat_prec(dst) != CLLM_PREC_F32 && cllm_cpu_gemm_available(a->type, K)) {
        p.gemm = true;
        p.convert_b = true;
        p.b_type = a->type; /* rows of b in the gemm activation form of a's type */
        p.b_row_size = cllm_cpu_gemm_act_size(a->type, K);
        p.counter_bytes = CLLM_CPU_WS_ALIGN;
        p.shared_bytes = cllm_cpu_ws_round((size_t)cllm_nrows(b) * p.b_row_size);
        /* two panels: groups of 32 rows go through cllm_cpu_gemm2 */
        p.panel_bytes = 2 * cllm_cpu_ws_round(cllm_cpu_gemm_panel_size(a->type, K));
        p.thread_bytes = p.panel_bytes + cllm_cpu_ws_round(cllm_cpu_gemm_pack_scratch(a->type, K)) +
                         (b_rows ? 0 : cllm_cpu_ws_round((size_t)K * sizeof(float)));
        return p;
    }
    if (a_rows && !p.alone && b->ne[1] >= CLLM_GEMM_MIN_COLS &&
        cllm_cpu_gemm_f_available(a->type, K)) {
        p.gemm = p.gemm_f = true;
        /* grouped when the level prefers it (a strided b stays ungrouped:
         * gathered as F32 rows) */
        p.f_group = b_rows ? cllm_cpu_gemm_f_group() : 1;
        p.convert_b = !b_rows || p.f_group > 1;
        p.b_row_size = (size_t)K * sizeof(float);
        if (p.convert_b) {
            /* whole groups per batch, the last one padded with zeros */
            const int64_t n_groups = (b->ne[1] + p.f_group - 1) / p.f_group;
            p.counter_bytes = CLLM_CPU_WS_ALIGN;
            p.shared_bytes = cllm_cpu_ws_round((size_t)(n_groups * p.f_group) * p.b_row_size *
                                               (size_t)(b->ne[2] * b->ne[3]));
        }
        p.panel_bytes = cllm_cpu_ws_round(cllm_cpu_gemm_f_panel_size(K));
        p.thread_bytes = p.panel_bytes;
        return p;
    }
    if (a_rows && cllm_mul_mat_prec(dst) != CLLM_PREC_F32 && cllm_cpu_gemv_available(a->type, K)) {
        p.gemv = true;
        p.convert_b = true;
        p.b_type = a->type;
        p.b_row_size = cllm_cpu_gemv_act_size(a->type, K);
        p.counter_bytes = CLLM_CPU_WS_ALIGN;
        /* the rows, then (several columns) their scales per group of 4 */
        p.cols_size = b->ne[1] > 1 ? cllm_cpu_gemv_cols_size(a->type, K) : 0;
        p.shared_bytes = cllm_cpu_ws_round((size_t)cllm_nrows(b) * p.b_row_size) +
                         cllm_cpu_ws_round((size_t)((b->ne[1] + 3) / 4 * b->ne[2] * b->ne[3]) *
                                           p.cols_size); /* groups of 4 per batch */
        p.thread_bytes = b_rows ? 0 : cllm_cpu_ws_round((size_t)K * sizeof(float));
        return p;
    }
    if (k) {
        const bool f32_dot = k->vec_dot_type == CLLM_TYPE_F32;
        const cllm_type_traits *vt = cllm_type_traits_of(k->vec_dot_type);
        const bool ok = f32_dot ? true
                                : k->from_float && K % vt->blck_size == 0 &&
                                      cllm_mul_mat_prec(dst) != CLLM_PREC_F32;
        if (!ok) k = NULL;
    }
    p.k = k;
    if (k) {
        p.b_type = k->vec_dot_type;
        p.convert_b = p.b_type != CLLM_TYPE_F32 || !b_rows;
        /* a strided b is gathered as F32 before from_float */
        if (p.b_type != CLLM_TYPE_F32 && !b_rows)
            p.thread_bytes = cllm_cpu_ws_round((size_t)K * sizeof(float));
    } else {
        p.convert_b = !b_rows;
        p.thread_bytes = cllm_cpu_ws_round((size_t)K * sizeof(float));
    }
    p.b_row_size = cllm_row_size(p.b_type, K);
    if (p.convert_b) {
        p.counter_bytes = CLLM_CPU_WS_ALIGN;
        p.shared_bytes = cllm_cpu_ws_round((size_t)cllm_nrows(b) * p.b_row_size);
    }
    return p;
}

bool cllm_cpu_mul_mat_supported(const cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0];
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    if (!tt) return false;
    if (tt->blck_size > 1 && a->nb[0] != tt->type_size) return false; /* split blocks */
    /* without to_float, only the kernels plan can do it */
    return tt->to_float || mm_make_plan(dst).k;
}

/* A mul_mat whose first columns, not all, are computed as alone
 * (cllm_mul_mat_n_alone): two mul_mats over views of b and dst, the alone
 * columns (a: their own plan, the one-column kernels) and the others (b: the
 * plan of a mul_mat of those columns alone, the panel GEMM for a prompt
 * chunk), one after the other in the same workspace. Each column then gets
 * what it gets in a mul_mat without the other part. */
typedef struct mm_parts {
    cllm_tensor dst_a, b_a, dst_b, b_b;
} mm_parts;

static bool mm_split(const cllm_tensor *dst, mm_parts *s) {
    const cllm_tensor *b = dst->src[1];
    const int64_t n = cllm_mul_mat_n_alone(dst);
    if (n == 0 || n == b->ne[1]) return false;
    s->b_a = *b;
    s->b_a.ne[1] = n;
    s->dst_a = *dst;
    s->dst_a.ne[1] = n;
    s->dst_a.src[1] = &s->b_a;
    cllm_mul_mat_set_cols_alone(&s->dst_a, true);
    s->b_b = *b;
    s->b_b.ne[1] = b->ne[1] - n;
    s->b_b.data = (char *)b->data + (size_t)n * b->nb[1];
    s->dst_b = *dst;
    s->dst_b.ne[1] = b->ne[1] - n;
    s->dst_b.data = (char *)dst->data + (size_t)n * dst->nb[1];
    s->dst_b.src[1] = &s->b_b;
    cllm_mul_mat_set_cols_alone(&s->dst_b, false);
    return true;
}

static size_t mm_workspace(const cllm_tensor *dst, int n_threads) {
    const mm_plan p = mm_make_plan(dst);
    return p.counter_bytes + p.shared_bytes + (size_t)n_threads * p.thread_bytes;
}

size_t cllm_cpu_mul_mat_workspace(const cllm_tensor *dst, int n_threads) {
    mm_parts s;
    if (mm_split(dst, &s)) {
        return CLLM_MAX(mm_workspace(&s.dst_a, n_threads), mm_workspace(&s.dst_b, n_threads));
    }
    return mm_workspace(dst, n_threads);
}

/* Where the gemv plan's packed scales of column n of batch `batch` (its
 * group of 4) lie in the shared workspace: after the converted rows. */
static size_t mm_cols_offset(const mm_plan *p, const cllm_tensor *b, int64_t batch, int64_t n) {
    const int64_t groups = (b->ne[1] + 3) / 4; /* per batch */
    return cllm_cpu_ws_round((size_t)cllm_nrows(b) * p->b_row_size) +
           (size_t)(batch * groups + n / 4) * p->cols_size;
}

/* Converts this thread's share of the rows of b into the shared workspace:
 * converted row rb = n + N * (i2 + B2 * i3) at rb * b_row_size. */
static void mm_convert_b(const cllm_cpu_params *params, const cllm_tensor *b, const mm_plan *p,
                         char *wb, float *f32) {
    const int64_t K = b->ne[0];
    int64_t r0, r1;
    if (p->gemm_f && p->f_group > 1) { /* b's rows contiguous: whole groups of columns */
        const int g = p->f_group;
        const int64_t N = b->ne[1], per_batch = (N + g - 1) / g;
        const size_t group_bytes = (size_t)g * p->b_row_size;
        cllm_cpu_split(per_batch * b->ne[2] * b->ne[3], params->ith, params->nth, &r0, &r1);
        for (int64_t i = r0; i < r1; i++) {
            const int64_t n = i % per_batch * g, batch = i / per_batch;
            cllm_cpu_gemm_f_group_cols(
                (const float *)cllm_cpu_elem(b, 0, n, batch % b->ne[2], batch / b->ne[2]), b->nb[1],
                (int)CLLM_MIN((int64_t)g, N - n), K, g, (float *)(wb + (size_t)i * group_bytes));
        }
        return;
    }
    cllm_cpu_split(cllm_nrows(b), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *out = wb + (size_t)r * p->b_row_size;
        if (p->gemv) {
            cllm_cpu_gemv_quantize(p->b_type, cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, f32), out,
                                   K);
            if (p->cols_size && !p->x16_gemv) { /* column n of batch r / N: its group's lanes */
                const int64_t N = b->ne[1], n = r % N;
                cllm_cpu_gemv_cols_pack(p->b_type, K, out, (int)(n % 4),
                                        (int)CLLM_MIN((int64_t)4, N - n / 4 * 4),
                                        wb + mm_cols_offset(p, b, r / N, n));
            }
        } else if (p->gemm && !p->gemm_f) {
            cllm_cpu_gemm_quantize(p->b_type, cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, f32), out,
                                   K);
        } else if (p->b_type == CLLM_TYPE_F32) {
            cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, (float *)out); /* gathers b's row */
        } else {
            p->k->from_float(cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, f32), out, K);
        }
    }
}

/* Weight rows per block: MM_BLOCK_BYTES of them, within [MIN, MAX]. */
static int64_t mm_block_rows(size_t a_row_bytes) {
    const int64_t r = (int64_t)(MM_BLOCK_BYTES / CLLM_MAX(a_row_bytes, (size_t)1));
    return CLLM_MAX(MM_BLOCK_MIN, CLLM_MIN(MM_BLOCK_MAX, r));
}

/* The kernels plan on rows [m0, m1) x columns [n0, n1) of batch (i2, i3). */
static void mm_tile_kernels(const cllm_tensor *a, const cllm_tensor *b, cllm_tensor *dst,
                            const mm_plan *p, const char *wb, int64_t i2, int64_t i3, int64_t m0,
                            int64_t m1, int64_t n0, int64_t n1) {
    const int64_t K = a->ne[0], N = b->ne[1], B2 = b->ne[2];
    const int64_t r2 = B2 / a->ne[2], r3 = b->ne[3] / a->ne[3];
    const cllm_cpu_type_kernels *k = p->k;
    /* b column n of this batch, and the stride between columns */
    const char *b0 = p->convert_b ? wb + (size_t)(N * (i2 + B2 * i3)) * p->b_row_size
                                  : cllm_cpu_elem(b, 0, 0, i2, i3);
    const size_t by = p->convert_b ? p->b_row_size : b->nb[1];
    const size_t dn = dst->nb[1]; /* between output columns */

    if (p->alone && n1 - n0 > 1 && k->vec_dot_cols) {
        /* columns as alone: each weight row unpacked once for a chunk of
         * columns, each column summed as the one-column dot sums it */
        float tmp[CLLM_CPU_MAX_COLS];
        for (int64_t m = m0; m < m1; m++) {
            const char *arow = cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3);
            for (int64_t nb = n0; nb < n1; nb += CLLM_CPU_MAX_COLS) {
                const int nc = (int)CLLM_MIN((int64_t)CLLM_CPU_MAX_COLS, n1 - nb);
                k->vec_dot_cols(K, tmp, arow, b0 + (size_t)nb * by, by, nc);
                char *out = cllm_cpu_elem(dst, m, nb, i2, i3);
                for (int j = 0; j < nc; j++) *(float *)(out + (size_t)j * dn) = tmp[j];
            }
        }
        return;
    }
    if (n1 - n0 == 1 || p->alone) {
        /* one column (generation), or columns as alone: each weight row
         * against every column with the one-column dot (read once from
         * memory, then from L1) */
        for (int64_t m = m0; m < m1; m++) {
            const char *arow = cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3);
            for (int64_t n = n0; n < n1; n++) {
                k->vec_dot(K, (float *)cllm_cpu_elem(dst, m, n, i2, i3), arow, b0 + (size_t)n * by);
            }
        }
        return;
    }
    const int64_t MB = mm_block_rows(cllm_row_size(a->type, K));
    const size_t bx = a->nb[1], dm = dst->nb[0]; /* between weight rows, output rows */
    float tmp[CLLM_CPU_MAX_ROWS * CLLM_CPU_MAX_COLS];
    for (int64_t mb = m0; mb < m1; mb += MB) {
        const int64_t me = CLLM_MIN(m1, mb + MB);
        for (int64_t nb = n0; nb < n1; nb += CLLM_CPU_MAX_COLS) {
            const int nc = (int)CLLM_MIN((int64_t)CLLM_CPU_MAX_COLS, n1 - nb);
            const char *bn = b0 + (size_t)nb * by;
            /* tiles of up to CLLM_CPU_MAX_ROWS weight rows x nc columns */
            for (int64_t m = mb; m < me; m += CLLM_CPU_MAX_ROWS) {
                const int nr = (int)CLLM_MIN((int64_t)CLLM_CPU_MAX_ROWS, me - m);
                const char *arow = cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3);
                char *out = cllm_cpu_elem(dst, m, nb, i2, i3);
                /* (a lone row and column too: vec_dot may sum it otherwise,
                 * and a column's bits must not depend on the columns in its
                 * chunk, cllm_session_decode_seqs) */
                k->vec_dot_mxn(K, tmp, CLLM_CPU_MAX_COLS, arow, bx, bn, by, nr, nc);
                for (int r = 0; r < nr; r++) {
                    for (int j = 0; j < nc; j++) {
                        *(float *)(out + (size_t)r * dm + (size_t)j * dn) =
                            tmp[r * CLLM_CPU_MAX_COLS + j];
                    }
                }
            }
        }
    }
}

/* The converted plan: each row of a as F32 once, dotted with every column. */
static void mm_tile_converted(const cllm_tensor *a, const cllm_tensor *b, cllm_tensor *dst,
                              const mm_plan *p, const char *wb, float *f32, int64_t i2, int64_t i3,
                              int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const int64_t K = a->ne[0], N = b->ne[1], B2 = b->ne[2];
    const int64_t r2 = B2 / a->ne[2], r3 = b->ne[3] / a->ne[3];
    for (int64_t m = m0; m < m1; m++) {
        const float *af;
        if (p->x16_rows) { /* row m % 16 of its group */
            const int64_t g = m / CLLM_X16_ROWS * CLLM_X16_ROWS;
            cllm_cpu_x16_row_to_float(a->type, K, cllm_cpu_elem(a, 0, g, i2 / r2, i3 / r3),
                                      (int)(m - g), f32);
            af = f32;
        } else {
            af = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3), K, f32);
        }
        for (int64_t n = n0; n < n1; n++) {
            const char *brow = p->convert_b ? wb + (size_t)(n + N * (i2 + B2 * i3)) * p->b_row_size
                                            : cllm_cpu_elem(b, 0, n, i2, i3);
            *(float *)cllm_cpu_elem(dst, m, n, i2, i3) =
                cllm_cpu_dot_f32(K, af, (const float *)brow);
        }
    }
}

/* Asks for the first CLLM_CPU_PREFETCH_AHEAD bytes of a tile's weight rows
 * (or all, when fewer). The kernels prefetch that far ahead along the rows,
 * so without this the start of every tile waits on memory, and the next
 * tile a thread takes is anywhere. */
static void mm_prefetch_rows(const char *w, size_t bytes) {
    bytes = CLLM_MIN(bytes, (size_t)CLLM_CPU_PREFETCH_AHEAD);
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(w + o, 0, 3);
}

/* The panel plan on rows [m0, m1) x columns [n0, n1) of batch (i2, i3):
 * groups of CLLM_GEMM_ROWS (float weights: CLLM_GEMM_F_ROWS) weight rows
 * packed into a panel (skipped when the thread packed that very group into
 * it for its previous tile: packed[]), then run against the tile's columns;
 * quantized weights two groups at a time where the tile has them (the
 * second panel follows the first, cllm_cpu_gemm2). */
static void mm_pack_gemm(const cllm_tensor *a, const mm_plan *p, const char *arow, int nr,
                         char *panel, char *scratch, const char **packed) {
    const int64_t K = a->ne[0];
    if (*packed == arow) return;
    if (p->gemm_f) {
        cllm_cpu_gemm_f_pack(a->type, arow, a->nb[1], nr, K, (float *)panel);
    } else if (p->x16_gemm) { /* (whole groups: the tiles' rows) */
        mm_prefetch_rows(arow, CLLM_X16_ROWS * a->nb[1]);
        cllm_cpu_gemm_pack_x16(a->type, K, arow, panel);
    } else {
        cllm_cpu_gemm_pack(a->type, arow, a->nb[1], nr, K, panel, scratch);
    }
    *packed = arow;
}

static void mm_tile_gemm(const cllm_tensor *a, const cllm_tensor *b, cllm_tensor *dst,
                         const mm_plan *p, const char *wb, char *panel, char *scratch,
                         const char *packed[2], int64_t i2, int64_t i3, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1) {
    const int64_t K = a->ne[0], N = b->ne[1], B2 = b->ne[2];
    const int64_t r2 = B2 / a->ne[2], r3 = b->ne[3] / a->ne[3];
    const char *b0 = p->convert_b ? wb + (size_t)(N * (i2 + B2 * i3) + n0) * p->b_row_size
                                  : cllm_cpu_elem(b, 0, n0, i2, i3);
    size_t by = p->convert_b ? p->b_row_size : b->nb[1];
    const int group = p->gemm_f ? p->f_group : 1;
    if (group > 1) { /* n0 is a multiple of the group (mm_make_gemm_tiles) */
        const int64_t per_batch = (N + group - 1) / group;
        by = (size_t)group * p->b_row_size;
        b0 = wb + (size_t)(per_batch * (i2 + B2 * i3) + n0 / group) * by;
    }
    const size_t ldo = dst->nb[1] / sizeof(float);
    const int64_t rows = p->gemm_f ? CLLM_GEMM_F_ROWS : CLLM_GEMM_ROWS;
    char *panel1 = panel + p->panel_bytes / 2;
    for (int64_t m = m0; m < m1; m += rows) {
        const int nr = (int)CLLM_MIN(rows, m1 - m);
        const char *arow = cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3);
        float *out = (float *)cllm_cpu_elem(dst, m, n0, i2, i3);
        mm_pack_gemm(a, p, arow, nr, panel, scratch, &packed[0]);
        if (p->gemm_f) {
            cllm_cpu_gemm_f(K, (const float *)panel, (const float *)b0, by, group, (int)(n1 - n0),
                            out, ldo, nr);
        } else if (m + rows < m1) {
            const int nr1 = (int)CLLM_MIN(rows, m1 - m - rows);
            mm_pack_gemm(a, p, cllm_cpu_elem(a, 0, m + rows, i2 / r2, i3 / r3), nr1, panel1,
                         scratch, &packed[1]);
            cllm_cpu_gemm2(a->type, K, panel, panel1, b0, by, (int)(n1 - n0), out, ldo, nr1);
            m += rows;
        } else {
            cllm_cpu_gemm(a->type, K, panel, b0, by, (int)(n1 - n0), out, ldo, nr);
        }
    }
}

/* The one-column plan on rows [m0, m1) x columns [n0, n1) of batch (i2, i3). */
static void mm_tile_gemv(const cllm_tensor *a, const cllm_tensor *b, cllm_tensor *dst,
                         const mm_plan *p, const char *wb, int64_t i2, int64_t i3, int64_t m0,
                         int64_t m1, int64_t n0, int64_t n1) {
    const int64_t K = a->ne[0], N = b->ne[1], B2 = b->ne[2];
    const int64_t r2 = B2 / a->ne[2], r3 = b->ne[3] / a->ne[3];
    const char *b0 = wb + (size_t)(N * (i2 + B2 * i3)) * p->b_row_size;
    /* the packed scales of the tile's columns: n0 starts a group of 4
     * (mm_make_tiles splits columns by CLLM_CPU_MAX_COLS) */
    const char *cols = NULL;
    if (p->cols_size && n0 % 4 == 0) cols = wb + mm_cols_offset(p, b, i2 + B2 * i3, n0);
    /* every column of the tile against each weight row, read (and
     * unpacked) once for all of them */
    const char *w = cllm_cpu_elem(a, 0, m0, i2 / r2, i3 / r3);
    mm_prefetch_rows(w, (size_t)(m1 - m0) * a->nb[1]);
    cllm_cpu_gemv_rows(a->type, K, w, a->nb[1], (int)(m1 - m0), b0 + (size_t)n0 * p->b_row_size,
                       p->b_row_size, (int)(n1 - n0), cols, p->cols_size,
                       (float *)cllm_cpu_elem(dst, m0, n0, i2, i3), dst->nb[1] / sizeof(float));
}

/* The one-column plan of a matrix stored 16 rows at a time: rows [m0, m1)
 * (whole groups) x columns [n0, n1) of batch (i2, i3). */
static void mm_tile_gemv_x16(const cllm_tensor *a, const cllm_tensor *b, cllm_tensor *dst,
                             const mm_plan *p, const char *wb, int64_t i2, int64_t i3, int64_t m0,
                             int64_t m1, int64_t n0, int64_t n1) {
    const int64_t K = a->ne[0], N = b->ne[1], B2 = b->ne[2];
    const char *b0 = wb + (size_t)(N * (i2 + B2 * i3) + n0) * p->b_row_size;
    const char *w = cllm_cpu_elem(a, 0, m0, 0, 0);
    mm_prefetch_rows(w, (size_t)(m1 - m0) * a->nb[1]);
    cllm_cpu_gemv_x16(a->type, K, w, (int)((m1 - m0) / CLLM_X16_ROWS), b0, p->b_row_size,
                      (int)(n1 - n0), (float *)cllm_cpu_elem(dst, m0, n0, i2, i3),
                      dst->nb[1] / sizeof(float));
}

/* The tile grid: tm weight rows x tn columns per tile, per batch. */
typedef struct mm_tiles {
    int64_t tm, tn;  /* tile size */
    int64_t nm, nn;  /* tiles per batch along M and N */
    int64_t n_tiles; /* over all batches */
} mm_tiles;

/* The panel plan's grid: whole groups of weight rows x all columns, the
 * columns split (by multiples of `unit`) only when there are few groups. */
static mm_tiles mm_make_gemm_tiles(int64_t M, int64_t N, int64_t batches, int nth, int64_t rows,
                                   int64_t unit, bool pairs) {
    mm_tiles t = {.tm = rows, .tn = N};
    int64_t groups = (M + rows - 1) / rows;
    const int64_t target = 4 * (int64_t)nth;
    if (pairs && groups * batches >= 2 * target) { /* tiles of two groups (cllm_cpu_gemm2) */
        t.tm = 2 * rows;
        groups = (groups + 1) / 2;
    }
    if (groups * batches < target) {
        const int64_t chunks = (N + unit - 1) / unit;
        const int64_t nt = CLLM_MIN(chunks, (target + groups * batches - 1) / (groups * batches));
        t.tn = (chunks + nt - 1) / nt * unit;
    }
    t.nm = groups;
    t.nn = (N + t.tn - 1) / t.tn;
    t.n_tiles = t.nm * t.nn * batches;
    return t;
}

static mm_tiles mm_make_tiles(int64_t M, int64_t N, int64_t batches, int nth, int64_t unit_m) {
    mm_tiles t = {.tm = M, .tn = N, .nm = 1, .nn = 1};
    if (nth > 1) {
        const int64_t target = 2 * (int64_t)nth;
        const int64_t mt = CLLM_MIN(M, CLLM_MAX((int64_t)1, target / batches));
        t.tm = ((M + mt - 1) / mt + unit_m - 1) / unit_m * unit_m; /* whole groups of rows */
        t.nm = (M + t.tm - 1) / t.tm;
        if (t.nm * batches < target && N > CLLM_CPU_MAX_COLS) {
            /* few weight rows: split the columns too, by whole vec_dot_n chunks */
            const int64_t chunks = (N + CLLM_CPU_MAX_COLS - 1) / CLLM_CPU_MAX_COLS;
            const int64_t nt = CLLM_MIN(chunks, (target + t.nm * batches - 1) / (t.nm * batches));
            t.tn = (chunks + nt - 1) / nt * CLLM_CPU_MAX_COLS;
            t.nn = (N + t.tn - 1) / t.tn;
        }
    }
    t.n_tiles = t.nm * t.nn * batches;
    return t;
}

static void mm_run(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const mm_plan p = mm_make_plan(dst);
    const int64_t M = a->ne[1];
    const int64_t N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];

    _Atomic int64_t *counter =
        p.counter_bytes ? cllm_cpu_ws(params, dst, 0, p.counter_bytes) : NULL;
    char *wb = p.shared_bytes ? cllm_cpu_ws(params, dst, p.counter_bytes, p.shared_bytes) : NULL;
    float *f32 =
        p.thread_bytes
            ? cllm_cpu_ws(params, dst,
                          p.counter_bytes + p.shared_bytes + (size_t)params->ith * p.thread_bytes,
                          p.thread_bytes)
            : NULL;
    /* column splits of grouped columns (gemm_f) keep whole groups: 24 = 4 groups of 6 */
    const int64_t unit = p.gemm_f && p.f_group > 1 ? 4 * (int64_t)p.f_group : 8;
    const bool x16 = p.x16_gemv || p.x16_gemm; /* tiles of whole groups of 16 rows */
    const mm_tiles t =
        p.gemm ? mm_make_gemm_tiles(M, N, B2 * B3, params->nth,
                                    p.gemm_f ? CLLM_GEMM_F_ROWS : CLLM_GEMM_ROWS, unit, !p.gemm_f)
               : mm_make_tiles(M, N, B2 * B3, params->nth, x16 ? CLLM_X16_ROWS : 1);
    char *panel = NULL, *scratch = NULL;  /* gemm: thread slice = panel, scratch, F32 row */
    const char *packed[2] = {NULL, NULL}; /* the groups in the panels (mm_tile_gemm) */
    if (p.gemm) {
        panel = (char *)f32;
        scratch = panel + p.panel_bytes;
        if (!p.gemm_f) /* the F32 row for gathering b follows the pack scratch */
            f32 = (float *)(scratch +
                            cllm_cpu_ws_round(cllm_cpu_gemm_pack_scratch(a->type, a->ne[0])));
    }
    if (p.convert_b) {
        /* every thread passed the barrier before this node: nobody reads the
         * counter of the previous one any more */
        if (params->ith == 0) atomic_store_explicit(counter, params->nth, memory_order_relaxed);
        mm_convert_b(params, b, &p, wb, f32);
        cllm_threadpool_barrier(params->pool); /* converted rows and the counter are ready */
    }

    for (int64_t tile = params->ith; tile < t.n_tiles;) {
        const int64_t ni = tile % t.nn, mi = (tile / t.nn) % t.nm, batch = tile / (t.nn * t.nm);
        const int64_t i2 = batch % B2, i3 = batch / B2;
        const int64_t m0 = mi * t.tm, m1 = CLLM_MIN(M, m0 + t.tm);
        const int64_t n0 = ni * t.tn, n1 = CLLM_MIN(N, n0 + t.tn);
        if (p.x16_gemv) {
            mm_tile_gemv_x16(a, b, dst, &p, wb, i2, i3, m0, m1, n0, n1);
        } else if (p.gemv) {
            mm_tile_gemv(a, b, dst, &p, wb, i2, i3, m0, m1, n0, n1);
        } else if (p.gemm) {
            mm_tile_gemm(a, b, dst, &p, wb, panel, scratch, packed, i2, i3, m0, m1, n0, n1);
        } else if (p.k) {
            mm_tile_kernels(a, b, dst, &p, wb, i2, i3, m0, m1, n0, n1);
        } else {
            mm_tile_converted(a, b, dst, &p, wb, f32, i2, i3, m0, m1, n0, n1);
        }
        tile = counter ? atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)
                       : tile + params->nth;
    }
}

void cllm_cpu_mul_mat(const cllm_cpu_params *params, cllm_tensor *dst) {
    mm_parts s;
    if (!mm_split(dst, &s)) {
        mm_run(params, dst);
        return;
    }
    mm_run(params, &s.dst_a);
    cllm_threadpool_barrier(params->pool); /* the second part reuses the workspace */
    mm_run(params, &s.dst_b);
}
