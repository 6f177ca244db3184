/*
 * mul_mat: a: [K, M, A2, A3] any type with to_float (or vec_dot), any
 * strides for plain types; b: [K, N, B2, B3] F32, any strides.
 *   out[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3]
 * out: F32 [M, N, B2, B3], contiguous.
 *
 * How a row of a meets a row of b (one plan, shared by the workspace
 * declaration and the kernel, so they always agree):
 *  - vec_dot: a's type has vec_dot with a vec_dot_type other than F32: every
 *    row of b is converted once to vec_dot_type in the shared workspace
 *    (rows split over threads, then a barrier), then vec_dot(a row, b row);
 *  - direct: a is F32 with contiguous rows: F32 dot straight from memory;
 *    Not when the node asks for CLLM_PREC_F32 (activations kept in F32).
 *  - converted: anything else (F16, BF16, quantized without vec_dot, strided
 *    plain a such as a transposed V): each row of a is converted to F32 once
 *    into a per-thread workspace row, then dotted with every b column.
 * b rows that are not contiguous are first gathered as F32 into the shared
 * workspace (same phase and barrier as the vec_dot conversion).
 *
 * Work split: the output of every batch is M x N; threads take ranges of
 * (batch, m) units when M >= N, of (batch, n) units otherwise, so a
 * single-token product (N = 1) still spreads its rows over every thread.
 */
#include "backend/cpu/ops-impl.h"

typedef struct mm_plan {
    bool vec_dot;        /* a row . b row converted to vec_dot_type */
    bool a_direct;       /* a is F32 with contiguous rows */
    bool convert_b;      /* b rows are converted into the shared workspace */
    cllm_type b_type;    /* type of the b rows the dots read */
    size_t b_row_size;   /* bytes of one converted b row */
    size_t shared_bytes; /* converted b (rounded), at workspace offset 0 */
    size_t thread_bytes; /* per-thread F32 row of K (rounded), 0 if none */
} mm_plan;

static mm_plan mm_make_plan(const cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    const int64_t K = a->ne[0];
    const bool a_rows = a->nb[0] == tt->type_size;
    const bool b_rows = b->nb[0] == sizeof(float);
    const cllm_type_traits *vt = tt->vec_dot ? cllm_type_traits_of(tt->vec_dot_type) : NULL;
    mm_plan p = {.b_type = CLLM_TYPE_F32};
    p.vec_dot = vt && tt->vec_dot_type != CLLM_TYPE_F32 && vt->from_float &&
                K % vt->blck_size == 0 && a_rows && cllm_mul_mat_prec(dst) != CLLM_PREC_F32;
    if (p.vec_dot) {
        p.convert_b = true;
        p.b_type = tt->vec_dot_type;
        /* a strided b is gathered as F32 before from_float */
        if (!b_rows) p.thread_bytes = cllm_cpu_ws_round((size_t)K * sizeof(float));
    } else {
        p.a_direct = a->type == CLLM_TYPE_F32 && a_rows;
        p.convert_b = !b_rows;
        if (!p.a_direct) p.thread_bytes = cllm_cpu_ws_round((size_t)K * sizeof(float));
    }
    p.b_row_size = cllm_row_size(p.b_type, K);
    if (p.convert_b) p.shared_bytes = cllm_cpu_ws_round((size_t)cllm_nrows(b) * p.b_row_size);
    return p;
}

bool cllm_cpu_mul_mat_supported(const cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0];
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    if (!tt) return false;
    if (tt->blck_size > 1 && a->nb[0] != tt->type_size) return false; /* split blocks */
    /* without to_float, only the vec_dot plan can do it */
    return tt->to_float || mm_make_plan(dst).vec_dot;
}

size_t cllm_cpu_mul_mat_workspace(const cllm_tensor *dst, int n_threads) {
    const mm_plan p = mm_make_plan(dst);
    return p.shared_bytes + (size_t)n_threads * p.thread_bytes;
}

/* Converts this thread's share of the rows of b into the shared workspace:
 * converted row rb = n + N * (i2 + B2 * i3) at rb * b_row_size. */
static void mm_convert_b(const cllm_cpu_params *params, const cllm_tensor *b, const mm_plan *p,
                         char *wb, float *f32) {
    const int64_t K = b->ne[0];
    const cllm_from_float_fn from_float = cllm_type_traits_of(p->b_type)->from_float;
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(b), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *out = wb + (size_t)r * p->b_row_size;
        if (p->b_type == CLLM_TYPE_F32) {
            cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, (float *)out); /* gathers b's row */
        } else {
            from_float(cllm_cpu_row_f32(b, cllm_cpu_row(b, r), K, f32), out, K);
        }
    }
}

void cllm_cpu_mul_mat(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const mm_plan p = mm_make_plan(dst);
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    const int64_t K = a->ne[0], M = a->ne[1];
    const int64_t N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];

    char *wb = p.shared_bytes ? cllm_cpu_ws(params, dst, 0, p.shared_bytes) : NULL;
    float *f32 = p.thread_bytes ? cllm_cpu_ws(params, dst,
                                              p.shared_bytes + (size_t)params->ith * p.thread_bytes,
                                              p.thread_bytes)
                                : NULL;
    if (p.convert_b) {
        mm_convert_b(params, b, &p, wb, f32);
        cllm_threadpool_barrier(params->pool); /* every converted row is ready */
    }

    const bool split_m = M >= N;
    const int64_t X = split_m ? M : N; /* units per batch */
    int64_t u0, u1;
    cllm_cpu_split(X * B2 * B3, params->ith, params->nth, &u0, &u1);
    for (int64_t u = u0; u < u1;) {
        const int64_t batch = u / X, x0 = u % X;
        const int64_t x1 = CLLM_MIN(X, x0 + (u1 - u));
        const int64_t i2 = batch % B2, i3 = batch / B2;
        const int64_t m0 = split_m ? x0 : 0, m1 = split_m ? x1 : M;
        const int64_t n0 = split_m ? 0 : x0, n1 = split_m ? N : x1;
        u += x1 - x0;

        for (int64_t m = m0; m < m1; m++) {
            const char *arow = cllm_cpu_elem(a, 0, m, i2 / r2, i3 / r3);
            const float *af = NULL;
            if (!p.vec_dot)
                af = p.a_direct ? (const float *)arow : cllm_cpu_row_f32(a, arow, K, f32);
            for (int64_t n = n0; n < n1; n++) {
                const char *brow = p.convert_b
                                       ? wb + (size_t)(n + N * (i2 + B2 * i3)) * p.b_row_size
                                       : cllm_cpu_elem(b, 0, n, i2, i3);
                float *out = (float *)cllm_cpu_elem(dst, m, n, i2, i3);
                if (p.vec_dot) {
                    tt->vec_dot(K, out, arow, brow);
                } else {
                    *out = cllm_cpu_dot_f32(K, af, (const float *)brow);
                }
            }
        }
    }
}
