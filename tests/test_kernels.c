/*
 * The CPU row kernels of every instruction-set level against the portable
 * references of core/quants.c and quants-k.c.
 *
 * For each level the CPU supports (cllm_cpu_set_isa_limit) and each type:
 *  - from_float (F32 -> Q8_0, F32 -> Q8_K with bsums) must write the same
 *    bytes as the reference quantizer: ordinary, tiny (subnormal fp16 scale),
 *    huge (saturated scale), zero and tie-rounding inputs;
 *  - vec_dot and vec_dot_n (1..8 columns, strided) must equal the reference
 *    dot, on rows of 1, 2, 3 and 17 blocks of quantized Gaussian data, random
 *    bytes (every quant pattern, negative scales), all-ones quants (largest
 *    magnitudes), 0x80 bytes (Q8 weights of -128, the one value whose
 *    magnitude does not fit int8) and zeros, against Gaussian, wide-range and
 *    +-127 activations;
 *  - vec_dot_cols (columns as alone, where a level has it) must give each
 *    column's vec_dot result bit for bit;
 *  - vec_dot_mxn (tiles of 1..4 strided weight rows x 1..8 strided columns)
 *    must equal the reference dot of each pair, writing nothing else.
 *
 * Tolerance. The integer sums of a block are exact at every level; only the
 * order of the float additions differs (per-lane and per-block partial sums).
 * With S = sum_i (|x_i| + |z_i|) |y_i|, x the dequantized weights, z the
 * weights' offset part (the block decoded with its quants zeroed: the min of
 * Q4_1 / Q5_1 / Q2_K / Q4_K / Q5_K, which the kernels add separately) and y
 * the dequantized activations, every partial sum and product is bounded by S,
 * and a sum of m terms in float is off by at most about m * eps * S. Both
 * sides add at most n / 32 + a few terms in a row, so
 *     |fast - reference| <= (32 + n / 32) * FLT_EPSILON * S
 * (about 4e-6 S for 17 blocks of 32), far below any quantization error.
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops-impl.h" /* the silu rows of each level */
#include "common/check.h"
#include "core/common.h"
#include "core/quants.h"
#include "core/types.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ------------------------------------------------------------------ */

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) { /* (0, 1) */
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(void) {
    return (float)(sqrt(-2.0 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform()));
}

/* A scale of random sign and magnitude in [1e-3, 2), as fp16. */
static cllm_fp16 rng_scale16(void) {
    const float v = (float)(1e-3 + 2.0 * rng_uniform());
    return cllm_fp32_to_fp16((rng_next() & 1) ? -v : v);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    CLLM_ASSERT(p);
    return p;
}

/* ---- the types under test ---------------------------------------------------- */

static const cllm_type k_types[] = {
    CLLM_TYPE_Q4_0, CLLM_TYPE_Q8_0, CLLM_TYPE_Q4_K, CLLM_TYPE_F16,  CLLM_TYPE_Q4_1,
    CLLM_TYPE_Q5_0, CLLM_TYPE_Q5_1, CLLM_TYPE_Q6_K, CLLM_TYPE_Q5_K, CLLM_TYPE_Q3_K,
    CLLM_TYPE_Q2_K, CLLM_TYPE_BF16, CLLM_TYPE_Q8_1, CLLM_TYPE_Q8_K, CLLM_TYPE_F32,
};

static const char *level_name(cllm_cpu_isa l) { return cllm_cpu_isa_name(l); }

/* Scale fields of a block get sane finite values (random sign): random bytes
 * elsewhere are valid quants of every format. */
static void fix_scales(cllm_type t, void *row, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        switch (t) {
        case CLLM_TYPE_Q4_0: ((cllm_block_q4_0 *)row)[i].d = rng_scale16(); break;
        case CLLM_TYPE_Q4_1:
            ((cllm_block_q4_1 *)row)[i].d = rng_scale16();
            ((cllm_block_q4_1 *)row)[i].m = rng_scale16();
            break;
        case CLLM_TYPE_Q5_0: ((cllm_block_q5_0 *)row)[i].d = rng_scale16(); break;
        case CLLM_TYPE_Q5_1:
            ((cllm_block_q5_1 *)row)[i].d = rng_scale16();
            ((cllm_block_q5_1 *)row)[i].m = rng_scale16();
            break;
        case CLLM_TYPE_Q8_0: ((cllm_block_q8_0 *)row)[i].d = rng_scale16(); break;
        case CLLM_TYPE_Q8_1:
            ((cllm_block_q8_1 *)row)[i].d = rng_scale16();
            ((cllm_block_q8_1 *)row)[i].s = rng_scale16();
            break;
        case CLLM_TYPE_Q2_K:
            ((cllm_block_q2_K *)row)[i].d = rng_scale16();
            ((cllm_block_q2_K *)row)[i].dmin = rng_scale16();
            break;
        case CLLM_TYPE_Q3_K: ((cllm_block_q3_K *)row)[i].d = rng_scale16(); break;
        case CLLM_TYPE_Q4_K:
            ((cllm_block_q4_K *)row)[i].d = rng_scale16();
            ((cllm_block_q4_K *)row)[i].dmin = rng_scale16();
            break;
        case CLLM_TYPE_Q5_K:
            ((cllm_block_q5_K *)row)[i].d = rng_scale16();
            ((cllm_block_q5_K *)row)[i].dmin = rng_scale16();
            break;
        case CLLM_TYPE_Q6_K: ((cllm_block_q6_K *)row)[i].d = rng_scale16(); break;
        case CLLM_TYPE_Q8_K:
            ((cllm_block_q8_K *)row)[i].d = cllm_fp16_to_fp32(rng_scale16());
            break;
        case CLLM_TYPE_F16: {
            cllm_fp16 *h = (cllm_fp16 *)row + i;
            if ((*h & 0x7c00u) == 0x7c00u) *h &= (cllm_fp16)~0x4000u; /* no inf / nan */
            break;
        }
        case CLLM_TYPE_F32: {
            uint32_t *h = (uint32_t *)row + i; /* exponent within 2^-20 .. 2^20 */
            const uint32_t e = 107u + (uint32_t)(rng_next() % 40);
            *h = (*h & 0x807fffffu) | e << 23;
            break;
        }
        case CLLM_TYPE_BF16: {
            cllm_bf16 *h = (cllm_bf16 *)row + i; /* exponent within 2^-20 .. 2^20 */
            const unsigned e = 107u + (unsigned)(rng_next() % 40);
            *h = (cllm_bf16)((*h & 0x807fu) | e << 7);
            break;
        }
        default: CLLM_ASSERT(!"type");
        }
    }
}

/* The weight row with every quant zeroed (scales and mins kept). */
static void zero_quants(cllm_type t, void *row, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        switch (t) {
        case CLLM_TYPE_Q4_0: memset(((cllm_block_q4_0 *)row)[i].qs, 0, 16); break;
        case CLLM_TYPE_Q4_1: memset(((cllm_block_q4_1 *)row)[i].qs, 0, 16); break;
        case CLLM_TYPE_Q5_0:
            memset(((cllm_block_q5_0 *)row)[i].qs, 0, 16);
            memset(((cllm_block_q5_0 *)row)[i].qh, 0, 4);
            break;
        case CLLM_TYPE_Q5_1:
            memset(((cllm_block_q5_1 *)row)[i].qs, 0, 16);
            memset(((cllm_block_q5_1 *)row)[i].qh, 0, 4);
            break;
        case CLLM_TYPE_Q8_0: memset(((cllm_block_q8_0 *)row)[i].qs, 0, 32); break;
        case CLLM_TYPE_Q8_1: memset(((cllm_block_q8_1 *)row)[i].qs, 0, 32); break;
        case CLLM_TYPE_Q2_K: memset(((cllm_block_q2_K *)row)[i].qs, 0, 64); break;
        case CLLM_TYPE_Q3_K:
            memset(((cllm_block_q3_K *)row)[i].qs, 0, 64);
            memset(((cllm_block_q3_K *)row)[i].hmask, 0, 32);
            break;
        case CLLM_TYPE_Q4_K: memset(((cllm_block_q4_K *)row)[i].qs, 0, 128); break;
        case CLLM_TYPE_Q5_K:
            memset(((cllm_block_q5_K *)row)[i].qs, 0, 128);
            memset(((cllm_block_q5_K *)row)[i].qh, 0, 32);
            break;
        case CLLM_TYPE_Q6_K:
            memset(((cllm_block_q6_K *)row)[i].ql, 0, 128);
            memset(((cllm_block_q6_K *)row)[i].qh, 0, 64);
            break;
        case CLLM_TYPE_Q8_K: memset(((cllm_block_q8_K *)row)[i].qs, 0, 256); break;
        case CLLM_TYPE_F16:
        case CLLM_TYPE_BF16: ((uint16_t *)row)[i] = 0; break;
        case CLLM_TYPE_F32: ((float *)row)[i] = 0.0f; break;
        default: CLLM_ASSERT(!"type");
        }
    }
}

enum { W_GAUSS, W_RANDOM, W_MAX, W_MIN8, W_ZERO, W_KINDS };

/* A weight row of n elements of type t of the given kind. */
static void make_weights(cllm_type t, int kind, void *row, int64_t n) {
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const int64_t nb = n / tt->blck_size;
    const size_t bytes = cllm_row_size(t, n);
    switch (kind) {
    case W_GAUSS: {
        float *f = xmalloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) f[i] = rng_gauss() * 0.5f + 0.1f;
        tt->from_float(f, row, n);
        free(f);
        break;
    }
    case W_RANDOM:
        for (size_t i = 0; i < bytes; i++) ((uint8_t *)row)[i] = (uint8_t)rng_next();
        fix_scales(t, row, nb);
        break;
    case W_MAX:
        memset(row, 0xff, bytes);
        fix_scales(t, row, nb);
        if (t == CLLM_TYPE_F16) {
            for (int64_t i = 0; i < n; i++) ((cllm_fp16 *)row)[i] = 0xfbffu; /* -65504 */
        }
        break;
    case W_MIN8: /* 0x80 bytes: Q8 weights of -128 (not written by cllm, valid in a file) */
        memset(row, 0x80, bytes);
        fix_scales(t, row, nb);
        break;
    default: memset(row, 0, bytes); break;
    }
}

enum { A_GAUSS, A_WIDE, A_MAX, A_KINDS };

/* Activations (F32) of the given kind. */
static void make_acts(int kind, float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case A_GAUSS: f[i] = rng_gauss(); break;
        case A_WIDE: f[i] = rng_gauss() * powf(10.0f, (float)((i / 32) % 9) - 4.0f); break;
        default: f[i] = (rng_next() & 1) ? -3.0f : 3.0f; break;
        }
    }
}

/* S of the file comment: sum_i (|x_i| + |z_i|) |y_i|. */
static double dot_scale(cllm_type t, const void *w, const void *act, cllm_type at, int64_t n) {
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const size_t bytes = cllm_row_size(t, n);
    float *x = xmalloc((size_t)n * sizeof(float)), *z = xmalloc((size_t)n * sizeof(float));
    float *y = xmalloc((size_t)n * sizeof(float));
    void *wz = xmalloc(bytes);
    memcpy(wz, w, bytes);
    zero_quants(t, wz, n / tt->blck_size);
    tt->to_float(w, x, n);
    tt->to_float(wz, z, n);
    if (at == CLLM_TYPE_F32) {
        memcpy(y, act, (size_t)n * sizeof(float));
    } else {
        cllm_type_traits_of(at)->to_float(act, y, n);
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (fabs((double)x[i]) + fabs((double)z[i])) * fabs(y[i]);
    free(x), free(z), free(y), free(wz);
    return s;
}

static double dot_tol(int64_t n, double s) { return (32.0 + (double)n / 32.0) * FLT_EPSILON * s; }

/* ---- from_float --------------------------------------------------------------- */

static void test_from_float(cllm_cpu_isa level, cllm_type at) {
    const cllm_cpu_type_kernels *k =
        cllm_cpu_kernels(at == CLLM_TYPE_Q8_0 ? CLLM_TYPE_Q4_0 : CLLM_TYPE_Q4_K);
    CLLM_ASSERT(k && k->vec_dot_type == at);
    const cllm_from_float_fn ref = cllm_type_traits_of(at)->from_float;
    const int64_t n = 17 * 256;
    const size_t bytes = cllm_row_size(at, n);
    float *f = xmalloc((size_t)n * sizeof(float));
    uint8_t *a = xmalloc(bytes), *b = xmalloc(bytes);
    for (int kind = 0; kind < 8; kind++) {
        for (int64_t i = 0; i < n; i++) {
            switch (kind) {
            case 0: f[i] = rng_gauss(); break;
            case 1: f[i] = rng_gauss() * 1e-7f; break; /* subnormal fp16 scales */
            case 2: f[i] = rng_gauss() * 1e8f; break;  /* saturated fp16 scales */
            case 3: f[i] = 0.0f; break;
            case 4: f[i] = (float)((int)(rng_next() % 255) - 127) + 0.5f; break; /* ties */
            case 5: f[i] = (i % 32 == 0) ? 127.0f : (float)(rng_next() % 255) - 127.0f; break;
            case 6: f[i] = rng_gauss() * powf(10.0f, (float)((i / 32) % 13) - 6.0f); break;
            default: f[i] = (i % 7 == 0) ? -1e-38f : 0.0f; break; /* denormal-ish */
            }
        }
        for (int nblk = 1; nblk <= 17; nblk += 16) {
            const int64_t m = at == CLLM_TYPE_Q8_0 ? nblk * 32 * 8 : nblk * 256;
            memset(a, 0x5a, bytes);
            memset(b, 0x5a, bytes);
            ref(f, a, m);
            k->from_float(f, b, m);
            CHECKF(memcmp(a, b, bytes) == 0, "%s from_float to %s: kind %d, n %lld differs",
                   level_name(level), cllm_type_name(at), kind, (long long)m);
        }
    }
    free(f), free(a), free(b);
}

/* ---- vec_dot / vec_dot_n -------------------------------------------------------- */

static void test_dot(cllm_cpu_isa level, cllm_type t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const cllm_cpu_type_kernels *k = cllm_cpu_kernels(t);
    CHECKF(k != NULL, "%s: no kernels", cllm_type_name(t));
    if (!k) return;
    const cllm_type at = tt->vec_dot_type;
    CHECK(k->vec_dot_type == at);
    CHECK(k->to_float != NULL);
    const cllm_type_traits *ta = cllm_type_traits_of(at);
    const int64_t bs = tt->blck_size;
    /* lengths: 1, 2, 3, 17 blocks; plain types also odd lengths */
    const int64_t lens_q[] = {1, 2, 3, 17};
    const int64_t lens_f[] = {1, 2, 3, 7, 8, 17, 31, 33, 64, 100, 544};
    const int64_t *lens = bs > 1 ? lens_q : lens_f;
    const int nlens = bs > 1 ? 4 : (int)CLLM_ARRAY_SIZE(lens_f);
    int fails = 0;
    for (int li = 0; li < nlens; li++) {
        const int64_t n = bs > 1 ? lens[li] * bs : lens[li];
        const size_t wbytes = cllm_row_size(t, n), abytes = cllm_row_size(at, n);
        const size_t by = (abytes + 63) / 64 * 64 + 64; /* strided columns */
        void *w = xmalloc(wbytes);
        char *act = xmalloc(by * CLLM_CPU_MAX_COLS);
        float *f = xmalloc((size_t)n * sizeof(float));
        float *ref = xmalloc(CLLM_CPU_MAX_COLS * sizeof(float));
        double *scale = xmalloc(CLLM_CPU_MAX_COLS * sizeof(double));
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int ak = 0; ak < A_KINDS; ak++) {
                make_weights(t, wk, w, n);
                for (int c = 0; c < CLLM_CPU_MAX_COLS; c++) {
                    make_acts((ak + c) % A_KINDS, f, n);
                    if (at == CLLM_TYPE_F32) {
                        memcpy(act + (size_t)c * by, f, abytes);
                    } else {
                        ta->from_float(f, act + (size_t)c * by, n);
                    }
                    tt->vec_dot(n, &ref[c], w, act + (size_t)c * by);
                    scale[c] = dot_scale(t, w, act + (size_t)c * by, at, n);
                }
                float got = NAN;
                k->vec_dot(n, &got, w, act);
                const double tol0 = dot_tol(n, scale[0]);
                const bool ok0 = fabs((double)got - ref[0]) <= tol0;
                CHECKF(ok0, "%s %s vec_dot n=%lld w%d a%d: %.9g vs %.9g (tol %.3g)",
                       level_name(level), cllm_type_name(t), (long long)n, wk, ak, got, ref[0],
                       tol0);
                fails += !ok0;
                for (int nc = 1; nc <= CLLM_CPU_MAX_COLS; nc++) {
                    float out[CLLM_CPU_MAX_COLS + 1];
                    for (int c = 0; c <= CLLM_CPU_MAX_COLS; c++) out[c] = NAN;
                    k->vec_dot_n(n, out, w, act, by, nc);
                    for (int c = 0; c < nc; c++) {
                        const double tol = dot_tol(n, scale[c]);
                        const bool ok = fabs((double)out[c] - ref[c]) <= tol;
                        CHECKF(ok, "%s %s vec_dot_n n=%lld w%d a%d nc=%d col %d: %.9g vs %.9g",
                               level_name(level), cllm_type_name(t), (long long)n, wk, ak, nc, c,
                               out[c], ref[c]);
                        fails += !ok;
                    }
                    CHECK(isnan(out[nc])); /* writes nothing past ncols */
                    if (!k->vec_dot_cols) continue;
                    /* columns as alone: each equal to vec_dot's, bit for bit */
                    for (int c = 0; c <= CLLM_CPU_MAX_COLS; c++) out[c] = NAN;
                    k->vec_dot_cols(n, out, w, act, by, nc);
                    for (int c = 0; c < nc; c++) {
                        float one = NAN;
                        k->vec_dot(n, &one, w, act + (size_t)c * by);
                        const bool ok = memcmp(&one, &out[c], sizeof(float)) == 0;
                        CHECKF(ok, "%s %s vec_dot_cols n=%lld w%d a%d nc=%d col %d: %.9g vs %.9g",
                               level_name(level), cllm_type_name(t), (long long)n, wk, ak, nc, c,
                               out[c], one);
                        fails += !ok;
                    }
                    CHECK(isnan(out[nc]));
                }
                if (fails > 20) break; /* one broken kernel: enough said */
            }
        }
        /* to_float: the reference at every level */
        float *g = xmalloc((size_t)n * sizeof(float));
        make_weights(t, W_RANDOM, w, n);
        tt->to_float(w, f, n);
        k->to_float(w, g, n);
        CHECK(memcmp(f, g, (size_t)n * sizeof(float)) == 0);
        free(g);
        free(w), free(act), free(f), free(ref), free(scale);
    }
}

/* ---- vec_dot_mxn ------------------------------------------------------------------ */

/* Tiles of 1..CLLM_CPU_MAX_ROWS strided weight rows x 1..CLLM_CPU_MAX_COLS
 * strided columns against the reference dot of each pair; nothing written
 * outside the tile (ldo leaves a gap after each row). */
static void test_dot_mxn(cllm_cpu_isa level, cllm_type t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const cllm_cpu_type_kernels *k = cllm_cpu_kernels(t);
    if (!k) return;
    CHECK(k->vec_dot_mxn != NULL);
    const cllm_type at = tt->vec_dot_type;
    const cllm_type_traits *ta = cllm_type_traits_of(at);
    const int64_t bs = tt->blck_size;
    const int64_t lens_q[] = {1, 2, 3, 17};
    const int64_t lens_f[] = {1, 7, 8, 33, 100};
    const int64_t *lens = bs > 1 ? lens_q : lens_f;
    const int nlens = bs > 1 ? 4 : (int)CLLM_ARRAY_SIZE(lens_f);
    enum { R = CLLM_CPU_MAX_ROWS, C = CLLM_CPU_MAX_COLS, LDO = CLLM_CPU_MAX_COLS + 1 };
    int fails = 0;
    for (int li = 0; li < nlens; li++) {
        const int64_t n = bs > 1 ? lens[li] * bs : lens[li];
        const size_t wbytes = cllm_row_size(t, n), abytes = cllm_row_size(at, n);
        const size_t bx = (wbytes + 63) / 64 * 64 + 64, by = (abytes + 63) / 64 * 64 + 128;
        char *w = xmalloc(bx * R);
        char *act = xmalloc(by * C);
        float *f = xmalloc((size_t)n * sizeof(float));
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int ak = 0; ak < A_KINDS; ak++) {
                float ref[R][C];
                double scale[R][C];
                for (int r = 0; r < R; r++) make_weights(t, (wk + r) % W_KINDS, w + r * bx, n);
                for (int c = 0; c < C; c++) {
                    make_acts((ak + c) % A_KINDS, f, n);
                    if (at == CLLM_TYPE_F32) {
                        memcpy(act + (size_t)c * by, f, abytes);
                    } else {
                        ta->from_float(f, act + (size_t)c * by, n);
                    }
                }
                for (int r = 0; r < R; r++) {
                    for (int c = 0; c < C; c++) {
                        tt->vec_dot(n, &ref[r][c], w + r * bx, act + (size_t)c * by);
                        scale[r][c] = dot_scale(t, w + r * bx, act + (size_t)c * by, at, n);
                    }
                }
                for (int nr = 1; nr <= R; nr++) {
                    for (int nc = 1; nc <= C; nc++) {
                        float out[R * LDO];
                        for (int i = 0; i < R * LDO; i++) out[i] = NAN;
                        k->vec_dot_mxn(n, out, LDO, w, bx, act, by, nr, nc);
                        for (int r = 0; r < R; r++) {
                            for (int c = 0; c < LDO; c++) {
                                const float got = out[r * LDO + c];
                                if (r >= nr || c >= nc) {
                                    CHECK(isnan(got)); /* nothing outside the tile */
                                    continue;
                                }
                                const double tol = dot_tol(n, scale[r][c]);
                                const bool ok = fabs((double)got - ref[r][c]) <= tol;
                                CHECKF(ok,
                                       "%s %s vec_dot_mxn n=%lld w%d a%d %dx%d (%d,%d): %.9g vs "
                                       "%.9g",
                                       level_name(level), cllm_type_name(t), (long long)n, wk, ak,
                                       nr, nc, r, c, got, ref[r][c]);
                                fails += !ok;
                            }
                        }
                    }
                }
                if (fails > 20) break;
            }
        }
        free(w), free(act), free(f);
    }
}

/* ---- panel GEMM ------------------------------------------------------------------
 * The reference kernel against the exact sum of the decoded weights times the
 * quantized activations (so the packers and decoders are checked too), and
 * the fast kernel (where the CPU has it) against the reference, for every
 * panel height and column count; nothing may be written outside the tile. */

/* Quantizes n activations f for weights of type t into act at the level in
 * use, and checks that the portable level writes the same bytes (ref:
 * scratch of `size` bytes). */
static void quantize_as_portable(void (*quantize)(cllm_type, const float *, void *, int64_t),
                                 cllm_type t, const float *f, int64_t n, void *act, void *ref,
                                 size_t size) {
    quantize(t, f, act, n);
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_PORTABLE);
    quantize(t, f, ref, n);
    cllm_cpu_set_isa_limit(level);
    CHECK(memcmp(ref, act, size) == 0);
}

/* Panel heights to test: the edges of one and two registers of rows. */
static const int k_heights[] = {1, 2, 3, 9, 15, 16, 17, 31, 32};

static void test_gemm(cllm_type t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const int64_t qk = tt->blck_size;
    if (!cllm_cpu_gemm_supports(t, qk)) return;
    CHECK(!cllm_cpu_gemm_supports(t, qk + 1));
    const bool fast = cllm_cpu_gemm_available(t, qk);
    enum { R = CLLM_GEMM_ROWS, C = 19, LDO = R + 3, LDO2 = 2 * R + 3 };
    const int64_t lens[] = {1, 3};
    int fails = 0;
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * qk;
        const size_t wbytes = cllm_row_size(t, n), as = cllm_cpu_gemm_act_size(t, n);
        char *w = xmalloc(wbytes * R);
        char *act = xmalloc(as * C), *wz_act = xmalloc(as);
        const size_t panel_size = cllm_cpu_gemm_panel_size(t, n);
        char *panel = xmalloc(panel_size), *panel_ref = xmalloc(panel_size);
        char *panel_full = xmalloc(panel_size);
        char *scratch = xmalloc(cllm_cpu_gemm_pack_scratch(t, n));
        float *f = xmalloc((size_t)n * sizeof(float)), *x = xmalloc((size_t)n * sizeof(float));
        float *z = xmalloc((size_t)n * sizeof(float)), *y = xmalloc((size_t)n * C * sizeof(float));
        char *wz = xmalloc(wbytes);
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int ak = 0; ak < A_KINDS; ak++) {
                double want[R][C], scale[R][C];
                for (int r = 0; r < R; r++) make_weights(t, (wk + r) % W_KINDS, w + r * wbytes, n);
                for (int c = 0; c < C; c++) {
                    make_acts((ak + c) % A_KINDS, f, n);
                    quantize_as_portable(cllm_cpu_gemm_quantize, t, f, n, act + (size_t)c * as,
                                         wz_act, as);
                    cllm_cpu_gemm_act_to_float(t, act + (size_t)c * as, y + c * n, n);
                }
                for (int r = 0; r < R; r++) {
                    memcpy(wz, w + r * wbytes, wbytes);
                    zero_quants(t, wz, n / qk);
                    tt->to_float(w + r * wbytes, x, n);
                    tt->to_float(wz, z, n);
                    for (int c = 0; c < C; c++) {
                        double v = 0.0, sc = 0.0;
                        for (int64_t i = 0; i < n; i++) {
                            v += (double)x[i] * y[c * n + i];
                            sc += (fabs((double)x[i]) + fabs((double)z[i])) * fabs(y[c * n + i]);
                        }
                        want[r][c] = v;
                        scale[r][c] = sc;
                    }
                }
                cllm_cpu_gemm_pack(t, w, wbytes, R, n, panel_full, scratch);
                for (size_t hi = 0; hi < CLLM_ARRAY_SIZE(k_heights) && k_heights[hi] <= R; hi++) {
                    const int nr = k_heights[hi];
                    cllm_cpu_gemm_pack(t, w, wbytes, nr, n, panel, scratch);
                    /* the level's packer writes the portable packer's bytes */
                    cllm_cpu_gemm_pack_portable(t, w, wbytes, nr, n, panel_ref, scratch);
                    CHECKF(memcmp(panel, panel_ref, panel_size) == 0, "%s pack n=%lld %d rows",
                           cllm_type_name(t), (long long)n, nr);
                    /* and the AVX-512 level's packer of the other width
                     * (cllm_cpu_prefer_256 chooses between two for Q4_0 /
                     * Q4_1): the same bytes */
                    const bool dflt = cllm_cpu_set_prefer_256(!cllm_cpu_prefer_256());
                    cllm_cpu_gemm_pack(t, w, wbytes, nr, n, panel_ref, scratch);
                    cllm_cpu_set_prefer_256(dflt);
                    CHECKF(memcmp(panel, panel_ref, panel_size) == 0,
                           "%s pack n=%lld %d rows, other width", cllm_type_name(t), (long long)n,
                           nr);
                    for (int nc = 1; nc <= C; nc += (nc < 9 ? 1 : 5)) {
                        for (int impl = 0; impl <= (int)fast; impl++) {
                            float out[C * LDO];
                            for (int i = 0; i < C * LDO; i++) out[i] = NAN;
                            (impl ? cllm_cpu_gemm : cllm_cpu_gemm_ref)(t, n, panel, act, as, nc,
                                                                       out, LDO, nr);
                            for (int c = 0; c < C; c++) {
                                for (int r = 0; r < LDO; r++) {
                                    const float got = out[c * LDO + r];
                                    if (r >= nr || c >= nc) {
                                        CHECK(isnan(got)); /* nothing outside the tile */
                                        continue;
                                    }
                                    const bool ok =
                                        fabs((double)got - want[r][c]) <= dot_tol(n, scale[r][c]);
                                    CHECKF(ok,
                                           "%s gemm%s n=%lld w%d a%d %dx%d (%d,%d): %.9g vs %.9g",
                                           cllm_type_name(t), impl ? "" : "_ref", (long long)n, wk,
                                           ak, nr, nc, r, c, got, want[r][c]);
                                    fails += !ok;
                                }
                            }
                        }
                        /* two panels at once (a full one, then this one): each
                         * panel's rows the bits of cllm_cpu_gemm on it alone */
                        if (!fast) continue;
                        float two[C * LDO2], full[C * LDO], one[C * LDO];
                        for (int i = 0; i < C * LDO2; i++) two[i] = NAN;
                        cllm_cpu_gemm2(t, n, panel_full, panel, act, as, nc, two, LDO2, nr);
                        cllm_cpu_gemm(t, n, panel_full, act, as, nc, full, LDO, R);
                        cllm_cpu_gemm(t, n, panel, act, as, nc, one, LDO, nr);
                        for (int c = 0; c < C; c++) {
                            for (int r = 0; r < LDO2; r++) {
                                const float got = two[c * LDO2 + r];
                                if (c >= nc || r >= R + nr) {
                                    CHECK(isnan(got));
                                    continue;
                                }
                                const float want1 =
                                    r < R ? full[c * LDO + r] : one[c * LDO + r - R];
                                CHECKF(memcmp(&got, &want1, sizeof got) == 0,
                                       "%s gemm2 n=%lld w%d a%d %dx%d (%d,%d): %.9g vs %.9g",
                                       cllm_type_name(t), (long long)n, wk, ak, nr, nc, r, c, got,
                                       want1);
                            }
                        }
                    }
                }
                if (fails > 20) break;
            }
        }
        free(w), free(act), free(panel), free(panel_ref), free(panel_full), free(scratch), free(f),
            free(x), free(z), free(y);
        free(wz), free(wz_act);
    }
}

/* ---- panel GEMM at the edges of its integer range ------------------------------
 * Every weight byte at 0 or at the form's largest u (where the panel stores
 * q = u ^ 0x80 and then |q|, Q8_0 at the AVX2 level: q at -128, 0 and 127),
 * every activation at +-127: the sums a kernel keeps in narrow integers
 * (the AVX2 level's s16) are largest here, and a saturated or wrapped one
 * differs from the portable reference. Scales 1, offsets 0: the results are
 * exact integers. */

static void test_gemm_extremes(cllm_type t) {
    const cllm_gemm_form fm = cllm_cpu_gemm_form(t);
    if (!cllm_cpu_gemm_available(t, fm.qk)) return;
    const int64_t K = 2 * (int64_t)fm.qk;
    const size_t as = cllm_cpu_gemm_act_size(t, K),
                 bb = cllm_cpu_gemm_panel_size(t, K) / (size_t)(K / fm.bs);
    char *panel = xmalloc(cllm_cpu_gemm_panel_size(t, K));
    char *act = xmalloc(2 * as);
    float *x = xmalloc((size_t)K * sizeof(float));
    const int big = fm.sabs ? -128 : fm.umax;
    const int us[][2] = {{big, big}, {0, 0}, {big, 0}, {fm.sabs ? 127 : 0, big}};
    for (size_t ui = 0; ui < CLLM_ARRAY_SIZE(us); ui++) {
        for (int64_t b = 0; b < K / fm.bs; b++) {
            char *pb = panel + (size_t)b * bb;
            for (int st = 0; st < fm.bs / 4; st++) {
                for (int r = 0; r < 16; r++) {
                    const int v = us[ui][r % 2];
                    char *u = pb + cllm_gemm_u_at(&fm, st, r);
                    for (int e = 0; e < 4; e++) {
                        u[e] = (char)(uint8_t)v;
                        if (fm.sabs) u[32 + e] = (char)(uint8_t)(v < 0 ? -v : v);
                    }
                }
            }
            float *sc = (float *)(pb + cllm_gemm_scales_at(&fm));
            for (int r = 0; r < 16; r++) sc[r] = 1.0f;
            for (int r = 0; fm.offset && r < 16; r++) sc[16 + r] = 0.0f;
        }
        for (int sign = 0; sign < 2; sign++) {
            for (int c = 0; c < 2; c++) {
                for (int64_t i = 0; i < K; i++) x[i] = (sign ^ (c & (int)(i & 1))) ? -1.0f : 1.0f;
                cllm_cpu_gemm_quantize(t, x, act + (size_t)c * as, K);
            }
            float got[2 * 16], want[2 * 16];
            cllm_cpu_gemm(t, K, panel, act, as, 2, got, 16, 16);
            cllm_cpu_gemm_ref(t, K, panel, act, as, 2, want, 16, 16);
            for (int i = 0; i < 2 * 16; i++)
                CHECKF(got[i] == want[i], "%s gemm u=%d/%d sign %d [%d]: %.9g vs %.9g",
                       cllm_type_name(t), us[ui][0], us[ui][1], sign, i, got[i], want[i]);
        }
    }
    free(panel), free(act), free(x);
}

/* ---- panel GEMM of float weights -------------------------------------------------
 * Packed F16 / BF16 rows times F32 columns against the exact sums, for every
 * panel height, column count, and odd and even lengths, with the columns in
 * place and in groups (the AVX2 kernel's 6, and 4, which only the
 * reference takes); every grouping gives the same bits. */

static void test_gemm_f(cllm_type t) {
    if (t != CLLM_TYPE_F16 && t != CLLM_TYPE_BF16) return;
    const bool fast = cllm_cpu_gemm_f_available(t, 1);
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    enum { R = CLLM_GEMM_F_ROWS, C = 27, LDO = R + 3 };
    const int64_t lens[] = {1, 7, 64, 301};
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li];
        const size_t wbytes = cllm_row_size(t, n);
        char *w = xmalloc(wbytes * R);
        float *panel = xmalloc(cllm_cpu_gemm_f_panel_size(n));
        float *cols = xmalloc((size_t)(n * C) * sizeof(float));
        float *grouped = xmalloc((size_t)(n * (C + CLLM_GEMM_F_GROUP_AVX2)) * sizeof(float));
        float *x = xmalloc((size_t)(n * R) * sizeof(float));
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int r = 0; r < R; r++) {
                make_weights(t, (wk + r) % W_KINDS, w + r * wbytes, n);
                tt->to_float(w + r * wbytes, x + r * n, n);
            }
            for (int c = 0; c < C; c++) make_acts(c % A_KINDS, cols + c * n, n);
            for (size_t hi = 0; hi < CLLM_ARRAY_SIZE(k_heights) && k_heights[hi] <= R; hi++) {
                const int nr = k_heights[hi];
                cllm_cpu_gemm_f_pack(t, w, wbytes, nr, n, panel);
                for (int nc = 1; nc <= C; nc += (nc < 13 ? 1 : 7)) {
                    float first[2][C * LDO]; /* per implementation, columns in place */
                    for (int v = 0; v < 6; v++) {
                        const int impl = v & 1,
                                  group = (const int[]){1, CLLM_GEMM_F_GROUP_AVX2, 4}[v / 2];
                        if (impl && (!fast || group == 4)) continue; /* 4: the reference */
                        const float *cv = cols;
                        if (group > 1) {
                            for (int c = 0; c < nc; c += group)
                                cllm_cpu_gemm_f_group_cols(cols + c * n, (size_t)n * sizeof(float),
                                                           CLLM_MIN(group, nc - c), n, group,
                                                           grouped + c * n);
                            cv = grouped;
                        }
                        float out[C * LDO];
                        for (int i = 0; i < C * LDO; i++) out[i] = NAN;
                        (impl ? cllm_cpu_gemm_f : cllm_cpu_gemm_f_ref)(
                            n, panel, cv, (size_t)(group * n) * sizeof(float), group, nc, out, LDO,
                            nr);
                        if (group == 1) memcpy(first[impl], out, sizeof(out));
                        CHECKF(memcmp(out, first[impl], sizeof(out)) == 0,
                               "%s gemm_f%s n=%lld %dx%d: groups of %d change the sums",
                               cllm_type_name(t), impl ? "" : "_ref", (long long)n, nr, nc, group);
                        for (int c = 0; c < C; c++) {
                            for (int r = 0; r < LDO; r++) {
                                const float got = out[c * LDO + r];
                                if (r >= nr || c >= nc) {
                                    CHECK(isnan(got));
                                    continue;
                                }
                                double want = 0.0, scale = 0.0;
                                for (int64_t i = 0; i < n; i++) {
                                    want += (double)x[r * n + i] * cols[c * n + i];
                                    scale += fabs((double)x[r * n + i] * cols[c * n + i]);
                                }
                                CHECKF(fabs((double)got - want) <= dot_tol(n, scale),
                                       "%s gemm_f%s n=%lld w%d %dx%d (%d,%d): %.9g vs %.9g",
                                       cllm_type_name(t), impl ? "" : "_ref", (long long)n, wk, nr,
                                       nc, r, c, got, want);
                            }
                        }
                    }
                }
            }
        }
        free(w), free(panel), free(cols), free(grouped), free(x);
    }
}

/* ---- one column (Q4_0 / Q4_1 generation kernel) ------------------------------------
 * The reference and the fast kernel against the exact sum of the decoded
 * weights times the quantized activations, for lengths with and without a
 * partial last group of 4 blocks. */

/* Several columns against one row: each result bit for bit the one-column
 * kernel's (a step of several sequences gives each what it would get
 * alone), for 1..6 columns (the kernel takes 4 at a time) and lengths with
 * partial and unpaired groups. */
static void test_gemv_n(cllm_type t) {
    const int64_t qk = cllm_type_traits_of(t)->blck_size;
    const int64_t lens[] = {1, 3, 4, 5, 8, 12, 18, 67};
    enum { NC = 6 };
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * qk;
        if (!cllm_cpu_gemv_available(t, n)) continue;
        const size_t wbytes = cllm_row_size(t, n), abytes = cllm_cpu_gemv_act_size(t, n);
        char *w = xmalloc(wbytes), *act = xmalloc(NC * abytes), *act_ref = xmalloc(abytes);
        float *f = xmalloc((size_t)n * sizeof(float));
        make_weights(t, 0, w, n);
        for (int c = 0; c < NC; c++) {
            make_acts(c % A_KINDS, f, n);
            for (int64_t i = 0; i < n; i++) f[i] *= 1.0f + 0.25f * (float)c;
            quantize_as_portable(cllm_cpu_gemv_quantize, t, f, n, act + (size_t)c * abytes, act_ref,
                                 abytes);
        }
        float want[NC], got[2 * NC];
        for (int c = 0; c < NC; c++) cllm_cpu_gemv(t, n, w, act + (size_t)c * abytes, &want[c]);
        for (int nc = 1; nc <= NC; nc++) {
            for (int c = 0; c < 2 * NC; c++) got[c] = NAN;
            cllm_cpu_gemv_n_kernel(t, n)(t, n, w, act, abytes, nc, got, 2); /* every other */
            for (int c = 0; c < nc; c++) {
                CHECKF(memcmp(&got[2 * c], &want[c], sizeof(float)) == 0,
                       "%s gemv_n n=%lld, %d columns, column %d: %.9g vs %.9g", cllm_type_name(t),
                       (long long)n, nc, c, got[2 * c], want[c]);
                CHECK(isnan(got[2 * c + 1]));
            }
        }
        free(w), free(act), free(act_ref), free(f);
    }
}

/* A tile of rows x columns (cllm_cpu_gemv_rows, what mul_mat runs): each
 * result bit for bit the one-column kernel's, for 1..5 rows (the AVX2
 * level takes one column two rows at a time: an odd last row), 1..6
 * columns, with and without their packed scales (cllm_cpu_gemv_cols_pack,
 * written over 0xff bytes: the lanes of absent columns must come out 0),
 * rows packed and rows with a gap between them, and lengths with partial
 * and unpaired groups. */
static void test_gemv_rows(cllm_type t) {
    const int64_t qk = cllm_type_traits_of(t)->blck_size;
    const int64_t lens[] = {1, 3, 4, 5, 18, 67};
    enum { NR = 5, NC = 6, LDO = 8 };
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * qk;
        if (!cllm_cpu_gemv_available(t, n)) continue;
        const size_t wbytes = cllm_row_size(t, n), abytes = cllm_cpu_gemv_act_size(t, n);
        for (int gap = 0; gap <= 1; gap++) {
            const size_t stride = wbytes + (size_t)gap * 40;
            char *w = xmalloc(NR * stride), *act = xmalloc(NC * abytes);
            char *act_ref = xmalloc(abytes);
            float *f = xmalloc((size_t)n * sizeof(float));
            memset(w, 0x5a, NR * stride);
            for (int r = 0; r < NR; r++) make_weights(t, r % W_KINDS, w + (size_t)r * stride, n);
            for (int c = 0; c < NC; c++) {
                make_acts(c % A_KINDS, f, n);
                for (int64_t i = 0; i < n; i++) f[i] *= 1.0f - 0.125f * (float)c;
                quantize_as_portable(cllm_cpu_gemv_quantize, t, f, n, act + (size_t)c * abytes,
                                     act_ref, abytes);
            }
            float want[NR][NC], got[NC * LDO];
            for (int r = 0; r < NR; r++)
                for (int c = 0; c < NC; c++)
                    cllm_cpu_gemv(t, n, w + (size_t)r * stride, act + (size_t)c * abytes,
                                  &want[r][c]);
            const size_t cs = cllm_cpu_gemv_cols_size(t, n);
            char *cols = xmalloc(2 * cs + 1);
            for (int nr = 1; nr <= NR; nr++) {
                for (int nc = 1; nc <= 2 * NC; nc++) {
                    const bool packed = nc > NC; /* the same nc - NC columns, with cols */
                    const int ncol = packed ? nc - NC : nc;
                    if (packed && cs == 0) break; /* Q4_K: none */
                    if (packed) {
                        memset(cols, 0xff, 2 * cs);
                        for (int c = 0; c < ncol; c++) {
                            const int g = c / 4, in_g = CLLM_MIN(4, ncol - 4 * g);
                            cllm_cpu_gemv_cols_pack(t, n, act + (size_t)c * abytes, c % 4, in_g,
                                                    cols + (size_t)g * cs);
                        }
                        for (int g = 0; g * 4 < ncol; g++) { /* absent columns' lanes */
                            for (size_t v = 0; v < cs / 4; v++) {
                                int32_t lane;
                                memcpy(&lane, cols + (size_t)g * cs + 4 * v, 4);
                                if ((int)(v % 4) >= ncol - 4 * g) CHECK(lane == 0);
                            }
                        }
                    }
                    for (int i = 0; i < NC * LDO; i++) got[i] = NAN;
                    cllm_cpu_gemv_rows(t, n, w, stride, nr, act, abytes, ncol, packed ? cols : NULL,
                                       cs, got, LDO);
                    for (int c = 0; c < NC; c++) {
                        for (int r = 0; r < LDO; r++) {
                            const float g = got[r + c * LDO];
                            if (r >= nr || c >= ncol) {
                                CHECK(isnan(g));
                                continue;
                            }
                            CHECKF(memcmp(&g, &want[r][c], sizeof(float)) == 0,
                                   "%s gemv_rows n=%lld gap %d, %dx%d%s, (%d,%d): %.9g vs %.9g",
                                   cllm_type_name(t), (long long)n, gap, nr, ncol,
                                   packed ? " packed" : "", r, c, g, want[r][c]);
                        }
                    }
                }
            }
            free(w), free(act), free(act_ref), free(f), free(cols);
        }
    }
}

static void test_gemv(cllm_type t) {
    if (t != CLLM_TYPE_Q4_0 && t != CLLM_TYPE_Q4_1 && t != CLLM_TYPE_Q5_0 && t != CLLM_TYPE_Q4_K &&
        t != CLLM_TYPE_Q8_0)
        return;
    const cllm_type_traits *tt = cllm_type_traits_of(t);
    const int64_t qk = tt->blck_size;
    const bool fast = cllm_cpu_gemv_available(t, qk);
    CHECK(!cllm_cpu_gemv_available(t, qk / 2));
    const int64_t lens[] = {1, 2, 3, 4, 5, 7, 8, 18, 64, 67};
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * qk;
        const size_t wbytes = cllm_row_size(t, n);
        /* rows of their own allocation: a read past the row's end (the
         * kernel's last group) is an ASan error in the sanitizer build */
        char *w = xmalloc(wbytes), *wz = xmalloc(wbytes);
        char *act = xmalloc(cllm_cpu_gemv_act_size(t, n));
        char *act_ref = xmalloc(cllm_cpu_gemv_act_size(t, n));
        float *f = xmalloc((size_t)n * sizeof(float)), *x = xmalloc((size_t)n * sizeof(float));
        float *z = xmalloc((size_t)n * sizeof(float)), *y = xmalloc((size_t)n * sizeof(float));
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int ak = 0; ak < A_KINDS; ak++) {
                make_weights(t, wk, w, n);
                make_acts(ak, f, n);
                quantize_as_portable(cllm_cpu_gemv_quantize, t, f, n, act, act_ref,
                                     cllm_cpu_gemv_act_size(t, n));
                cllm_cpu_gemv_act_to_float(t, act, y, n);
                memcpy(wz, w, wbytes);
                zero_quants(t, wz, n / qk);
                tt->to_float(w, x, n);
                tt->to_float(wz, z, n);
                double want = 0.0, scale = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    want += (double)x[i] * y[i];
                    scale += (fabs((double)x[i]) + fabs((double)z[i])) * fabs(y[i]);
                }
                for (int impl = 0; impl <= (int)fast; impl++) {
                    float got = NAN;
                    (impl ? cllm_cpu_gemv : cllm_cpu_gemv_ref)(t, n, w, act, &got);
                    CHECKF(fabs((double)got - want) <= dot_tol(n, scale),
                           "%s gemv%s n=%lld w%d a%d: %.9g vs %.9g", cllm_type_name(t),
                           impl ? "" : "_ref", (long long)n, wk, ak, got, want);
                }
            }
        }
        free(w), free(wz), free(act), free(act_ref), free(f), free(x), free(z), free(y);
    }
    test_gemv_n(t);
    test_gemv_rows(t);
}

/* Matrices stored 16 rows at a time (gemm.h: CLLM_X16), Q4_0, Q4_1, Q4_K,
 * Q5_K and Q6_K (their columns Q8_K, the types' vec_dot_type):
 * packing and unpacking give back the rows; each row converts to what
 * to_float gives the row; and where the level has the kernels, the group's
 * panel is the bytes cllm_cpu_gemm_pack writes from the rows, and the
 * one-column kernel gives each (row, column) the dot product within the
 * bound (against the exact sum), each column the same bits whether alone
 * or among 1..6 columns, and the 256-bit kernels the AVX2 one's bits. Two groups, rows of every
 * weight kind, lengths with partial and whole groups of 4 blocks (K-quants: 1..11
 * super-blocks). */
static void x16_quantize_q8_k(cllm_type t, const float *x, void *act, int64_t n) {
    (void)t;
    cllm_type_traits_of(CLLM_TYPE_Q8_K)->from_float(x, act, n);
}

static void test_x16(cllm_type t) {
    if (t != CLLM_TYPE_Q4_0 && t != CLLM_TYPE_Q4_1 && t != CLLM_TYPE_Q4_K && t != CLLM_TYPE_Q5_K &&
        t != CLLM_TYPE_Q6_K)
        return;
    const int64_t lens[] = {1, 3, 4, 5, 18, 67}, lens_k[] = {1, 2, 3, 11}; /* blocks */
    const bool q8k = t == CLLM_TYPE_Q5_K || t == CLLM_TYPE_Q6_K;           /* columns of Q8_K */
    const bool q4k = t == CLLM_TYPE_Q4_K || q8k;
    enum { R = 2 * CLLM_X16_ROWS, NC = 6 };
    for (size_t li = 0; li < (q4k ? CLLM_ARRAY_SIZE(lens_k) : CLLM_ARRAY_SIZE(lens)); li++) {
        const int64_t n = q4k ? lens_k[li] * 256 : lens[li] * 32;
        const size_t rb = cllm_row_size(t, n), gb = CLLM_X16_ROWS * rb;
        char *w = xmalloc(R * rb), *wx = xmalloc(R * rb), *back = xmalloc(R * rb);
        float *f = xmalloc((size_t)n * sizeof(float)), *x = xmalloc((size_t)n * sizeof(float));
        for (int r = 0; r < R; r++) make_weights(t, r % W_KINDS, w + (size_t)r * rb, n);
        for (int g = 0; g < R / CLLM_X16_ROWS; g++) {
            cllm_cpu_x16_pack(t, n, w + g * gb, rb, wx + g * gb);
            cllm_cpu_x16_unpack(t, n, wx + g * gb, back + g * gb, rb);
        }
        CHECKF(memcmp(back, w, R * rb) == 0, "%s x16 n=%lld: unpacked rows differ",
               cllm_type_name(t), (long long)n);
        for (int r = 0; r < R; r++) {
            cllm_type_traits_of(t)->to_float(w + (size_t)r * rb, f, n);
            cllm_cpu_x16_row_to_float(t, n, wx + (size_t)(r / CLLM_X16_ROWS) * gb,
                                      r % CLLM_X16_ROWS, x);
            CHECK(memcmp(f, x, (size_t)n * sizeof(float)) == 0);
        }
        if (cllm_cpu_x16_available(t, n)) {
            /* the panel */
            const size_t pbytes = cllm_cpu_gemm_panel_size(t, n);
            char *panel = xmalloc(pbytes), *panel_x = xmalloc(pbytes);
            char *scratch = xmalloc(cllm_cpu_gemm_pack_scratch(t, n));
            for (int g = 0; g < R / CLLM_X16_ROWS; g++) {
                cllm_cpu_gemm_pack(t, w + g * gb, rb, CLLM_X16_ROWS, n, panel, scratch);
                cllm_cpu_gemm_pack_x16(t, n, wx + g * gb, panel_x);
                CHECKF(memcmp(panel, panel_x, pbytes) == 0, "%s x16 n=%lld: panel differs",
                       cllm_type_name(t), (long long)n);
            }
            /* the one-column kernel */
            const size_t ab = q8k ? cllm_row_size(CLLM_TYPE_Q8_K, n) : cllm_cpu_gemv_act_size(t, n);
            char *act = xmalloc(NC * ab), *act_ref = xmalloc(ab);
            float *y = xmalloc((size_t)n * sizeof(float));
            for (int c = 0; c < NC; c++) {
                make_acts(c % A_KINDS, f, n);
                quantize_as_portable(q8k ? x16_quantize_q8_k : cllm_cpu_gemv_quantize, t, f, n,
                                     act + (size_t)c * ab, act_ref, ab);
            }
            float alone[NC][R], got[NC * R];
            for (int c = 0; c < NC; c++) {
                cllm_cpu_gemv_x16(t, n, wx, R / CLLM_X16_ROWS, act + (size_t)c * ab, ab, 1,
                                  alone[c], R);
                if (q8k) {
                    cllm_type_traits_of(CLLM_TYPE_Q8_K)->to_float(act + (size_t)c * ab, y, n);
                } else {
                    cllm_cpu_gemv_act_to_float(t, act + (size_t)c * ab, y, n);
                }
                for (int r = 0; r < R; r++) {
                    cllm_type_traits_of(t)->to_float(w + (size_t)r * rb, x, n);
                    double want = 0.0;
                    for (int64_t i = 0; i < n; i++) want += (double)x[i] * y[i];
                    const double tol =
                        dot_tol(n, dot_scale(t, w + (size_t)r * rb, y, CLLM_TYPE_F32, n));
                    CHECKF(fabs((double)alone[c][r] - want) <= tol,
                           "%s gemv_x16 n=%lld (%d,%d): %.9g vs %.9g", cllm_type_name(t),
                           (long long)n, r, c, alone[c][r], want);
                }
            }
            /* the 256-bit kernels (AVXVNNI, AVX-512 at half width) give the
             * AVX2 one's bits: the same integers, the same float steps */
            const cllm_cpu_isa lv = cllm_cpu_isa_level();
            if (lv == CLLM_CPU_ISA_AVXVNNI ||
                (lv >= CLLM_CPU_ISA_AVX512 && (cllm_cpu_prefer_256() || q4k))) {
                cllm_cpu_gemv_x16_avx2(t, n, wx, R / CLLM_X16_ROWS, act, ab, NC, got, R);
                for (int c = 0; c < NC; c++)
                    CHECKF(memcmp(got + c * R, alone[c], R * sizeof(float)) == 0,
                           "%s gemv_x16 n=%lld column %d: not the AVX2 kernel's bits",
                           cllm_type_name(t), (long long)n, c);
            }
            for (int nc = 2; nc <= NC; nc++) {
                for (int i = 0; i < NC * R; i++) got[i] = NAN;
                cllm_cpu_gemv_x16(t, n, wx, R / CLLM_X16_ROWS, act, ab, nc, got, R);
                for (int c = 0; c < NC; c++) {
                    for (int r = 0; r < R; r++) {
                        const float g = got[r + c * R];
                        if (c >= nc) {
                            CHECK(isnan(g));
                        } else {
                            CHECKF(memcmp(&g, &alone[c][r], sizeof(float)) == 0,
                                   "%s gemv_x16 n=%lld, %d columns, (%d,%d): %.9g vs %.9g",
                                   cllm_type_name(t), (long long)n, nc, r, c, g, alone[c][r]);
                        }
                    }
                }
            }
            free(panel), free(panel_x), free(scratch), free(act), free(act_ref), free(y);
        }
        free(w), free(wx), free(back), free(f), free(x);
    }
}

/* The AVX-512 level's 256-bit one-column kernel (Q4_0, Q4_1, Q5_0, Q8_0) is the
 * AVX2 one with vpdpbusd for vpmaddubsw + vpmaddwd: the same integer sums
 * and float steps, so the same results bit for bit (and each is checked
 * against the exact sum by test_gemv, with cllm_cpu_set_prefer_256 choosing
 * it for every length; without it, rows of 1,024 elements and more, 64 and
 * 67 blocks here, go through the 512-bit kernel). */
static void test_gemv_256(cllm_type t) {
    if (t != CLLM_TYPE_Q4_0 && t != CLLM_TYPE_Q4_1 && t != CLLM_TYPE_Q5_0 && t != CLLM_TYPE_Q8_0)
        return;
    const int64_t lens[] = {1, 2, 3, 4, 5, 7, 8, 18, 64, 67};
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * 32;
        const size_t wbytes = cllm_row_size(t, n), abytes = cllm_cpu_gemv_act_size(t, n);
        char *w = xmalloc(wbytes), *act = xmalloc(abytes), *act_ref = xmalloc(abytes);
        float *f = xmalloc((size_t)n * sizeof(float));
        for (int wk = 0; wk < W_KINDS; wk++) {
            for (int ak = 0; ak < A_KINDS; ak++) {
                make_weights(t, wk, w, n);
                make_acts(ak, f, n);
                quantize_as_portable(cllm_cpu_gemv_quantize, t, f, n, act, act_ref, abytes);
                float a2 = NAN, a512 = NAN;
                cllm_cpu_gemv_avx2(t, n, w, act, &a2);
                cllm_cpu_gemv_avx512vl(t, n, w, act, &a512);
                CHECKF(memcmp(&a2, &a512, sizeof(float)) == 0,
                       "%s gemv n=%lld w%d a%d: AVX2 %.9g, AVX-512 at 256 bits %.9g",
                       cllm_type_name(t), (long long)n, wk, ak, a2, a512);
            }
        }
        free(w), free(act), free(act_ref), free(f);
    }
}

/* The AVXVNNI level's kernels are the AVX2 level's with vpdpbusd for
 * vpmaddubsw + vpmaddwd (and, in the panel GEMM, for Q8_0's sign steps):
 * the same integers and float steps, so the same results bit for bit. Each
 * is also checked against the exact sums by test_gemv and test_gemm at its
 * level; this checks the two levels against each other, for one and several
 * columns, panel heights of 1 to 16 rows and tiles of 1 to 7 columns. */
static void test_vnni_as_avx2(cllm_type t) {
    const bool gemv =
        t == CLLM_TYPE_Q4_0 || t == CLLM_TYPE_Q4_1 || t == CLLM_TYPE_Q5_0 || t == CLLM_TYPE_Q8_0;
    const int64_t qk = cllm_type_traits_of(t)->blck_size;
    enum { NC = 7, R = CLLM_GEMM_ROWS, LDO = R + 1 };
    const int64_t lens[] = {1, 3, 5, 18};
    for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
        const int64_t n = lens[li] * qk;
        float *f = xmalloc((size_t)n * sizeof(float));
        if (gemv && cllm_cpu_gemv_available(t, n)) {
            const size_t wbytes = cllm_row_size(t, n), abytes = cllm_cpu_gemv_act_size(t, n);
            char *w = xmalloc(wbytes), *act = xmalloc(NC * abytes), *act_ref = xmalloc(abytes);
            for (int wk = 0; wk < W_KINDS; wk++) {
                make_weights(t, wk, w, n);
                for (int c = 0; c < NC; c++) {
                    make_acts(c % A_KINDS, f, n);
                    quantize_as_portable(cllm_cpu_gemv_quantize, t, f, n, act + c * abytes, act_ref,
                                         abytes);
                }
                float a2[NC], av[NC];
                cllm_cpu_gemv_avx2(t, n, w, act, &a2[0]);
                cllm_cpu_gemv_avxvnni(t, n, w, act, &av[0]);
                CHECKF(memcmp(&a2[0], &av[0], sizeof(float)) == 0,
                       "%s gemv n=%lld w%d: AVX2 %.9g, AVX-VNNI %.9g", cllm_type_name(t),
                       (long long)n, wk, a2[0], av[0]);
                cllm_cpu_gemv_n_avx2(t, n, w, act, abytes, NC, a2, 1);
                cllm_cpu_gemv_n_avxvnni(t, n, w, act, abytes, NC, av, 1);
                CHECKF(memcmp(a2, av, sizeof(a2)) == 0, "%s gemv of %d columns n=%lld w%d",
                       cllm_type_name(t), NC, (long long)n, wk);
            }
            free(w), free(act), free(act_ref);
        }
        if (cllm_cpu_gemm_available(t, n)) {
            const cllm_gemm_form fm = cllm_cpu_gemm_form(t);
            const size_t wbytes = cllm_row_size(t, n), as = cllm_cpu_gemm_act_size(t, n);
            char *w = xmalloc(wbytes * R), *act = xmalloc(as * NC), *act_ref = xmalloc(as);
            char *panel = xmalloc(cllm_cpu_gemm_panel_size(t, n));
            char *scratch = xmalloc(cllm_cpu_gemm_pack_scratch(t, n));
            for (int r = 0; r < R; r++) make_weights(t, r % W_KINDS, w + r * wbytes, n);
            for (int c = 0; c < NC; c++) {
                make_acts(c % A_KINDS, f, n);
                quantize_as_portable(cllm_cpu_gemm_quantize, t, f, n, act + c * as, act_ref, as);
            }
            /* the AVX2 level's own panel where its form differs (Q8_0: q,
             * then |q|) */
            const cllm_cpu_isa level = cllm_cpu_isa_level();
            cllm_cpu_set_isa_limit(CLLM_CPU_ISA_AVX2);
            const cllm_gemm_form fm2 = cllm_cpu_gemm_form(t);
            char *panel2 = xmalloc(cllm_cpu_gemm_panel_size(t, n));
            cllm_cpu_set_isa_limit(level);
            for (int nr = 1; nr <= R; nr += 5) {
                cllm_cpu_gemm_pack(t, w, wbytes, nr, n, panel, scratch);
                cllm_cpu_set_isa_limit(CLLM_CPU_ISA_AVX2);
                cllm_cpu_gemm_pack(t, w, wbytes, nr, n, panel2, scratch);
                cllm_cpu_set_isa_limit(level);
                for (int nc = 1; nc <= NC; nc++) {
                    float o2[NC * LDO], ov[NC * LDO];
                    memset(o2, 0, sizeof(o2)), memset(ov, 0, sizeof(ov));
                    cllm_cpu_gemm_avx2(&fm2, n, panel2, act, as, nc, o2, LDO, nr);
                    cllm_cpu_gemm_avxvnni(&fm, n, panel, act, as, nc, ov, LDO, nr);
                    CHECKF(memcmp(o2, ov, sizeof(o2)) == 0,
                           "%s gemm n=%lld %dx%d: AVX-VNNI differs from AVX2", cllm_type_name(t),
                           (long long)n, nr, nc);
                }
            }
            free(w), free(act), free(act_ref), free(panel), free(scratch), free(panel2);
        }
        free(f);
    }
}

/* ---- dispatch ------------------------------------------------------------------ */

static void test_dispatch(cllm_cpu_isa best) {
    CHECK(cllm_cpu_kernels((cllm_type)CLLM_TYPE_COUNT) == NULL);
    CHECK(cllm_cpu_kernels((cllm_type)-1) == NULL);
    CHECK(cllm_cpu_kernels(CLLM_TYPE_IQ2_XXS) == NULL);
    CHECK(cllm_cpu_set_isa_limit(CLLM_CPU_ISA_PORTABLE) == CLLM_CPU_ISA_PORTABLE);
    CHECK(strcmp(cllm_cpu_features_str(), "portable") == 0);
    CHECK(cllm_cpu_kernels(CLLM_TYPE_Q4_0)->vec_dot == cllm_vec_dot_q4_0_q8_0);
    CHECK(cllm_cpu_kernels(CLLM_TYPE_Q4_K)->from_float == cllm_quantize_row_q8_K);
    CHECK(cllm_cpu_kernels(CLLM_TYPE_F16)->from_float == NULL);
    CHECK(cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT) == best);
    CHECK(cllm_cpu_isa_level() == best);
    if (best >= CLLM_CPU_ISA_AVX2) {
        CHECK(cllm_cpu_set_isa_limit(CLLM_CPU_ISA_AVX2) == CLLM_CPU_ISA_AVX2);
        CHECK(strstr(cllm_cpu_features_str(), "avx2") != NULL);
        CHECK(cllm_cpu_kernels(CLLM_TYPE_Q4_0)->vec_dot != cllm_vec_dot_q4_0_q8_0);
        /* AVX-VNNI's level, or AVX2's where an AVX-512 CPU lacks it */
        const cllm_cpu_isa v = cllm_cpu_set_isa_limit(CLLM_CPU_ISA_AVXVNNI);
        CHECK(v == CLLM_CPU_ISA_AVXVNNI ||
              (v == CLLM_CPU_ISA_AVX2 && best != CLLM_CPU_ISA_AVXVNNI));
        CHECK((v == CLLM_CPU_ISA_AVXVNNI) == (strstr(cllm_cpu_features_str(), "avx-vnni") != NULL));
    }
    for (int l = 0; l < CLLM_CPU_ISA_COUNT; l++)
        CHECK(strcmp(cllm_cpu_isa_name((cllm_cpu_isa)l), "unknown") != 0);
    CHECK(strcmp(cllm_cpu_isa_name(CLLM_CPU_ISA_COUNT), "unknown") == 0);
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
}

/* ---- silu and gelu rows of the vector levels (ops-elementwise.c calls the
 * best one; test_ops sees only that one) ----------------------------------------
 * Against x / (1 + e^-x) and x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in
 * double: the polynomial exp is within 2e-7, and GELU's tanh is taken as the
 * logistic of twice its argument. The AVX2 GELU row is the one of both
 * levels. */

static double want_silu(double x) { return x / (1.0 + exp(-x)); }

static double want_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

static void test_act_rows(cllm_cpu_isa best) {
#if defined(__x86_64__) || defined(__i386__)
    static const int64_t lens[] = {1, 5, 8, 9, 16, 31, 64};
    for (int gelu = 0; gelu <= 1; gelu++) {
        for (size_t li = 0; li < CLLM_ARRAY_SIZE(lens); li++) {
            const int64_t n = lens[li];
            float x[64], y[64];
            /* GELU bends within a few units of 0: most values there */
            for (int64_t i = 0; i < n; i++) x[i] = (gelu ? 3.0f : 12.0f) * rng_gauss();
            if (li == 1) x[0] = -200.0f; /* the ends where the exp clamps */
            if (li == 2) x[0] = 200.0f;
            if (li == 3) x[1] = -9.5f, x[2] = 0.0f, x[3] = 1e-30f;
            for (int l = CLLM_CPU_ISA_AVX2; l <= (int)(gelu ? CLLM_CPU_ISA_AVX2 : best); l++) {
                if (l == CLLM_CPU_ISA_AVXVNNI) continue; /* the AVX2 rows */
                void (*row)(int64_t, float *, const float *) = gelu ? cllm_cpu_gelu_row_avx2
                                                               : l < CLLM_CPU_ISA_AVX512
                                                                   ? cllm_cpu_silu_row_avx2
                                                                   : cllm_cpu_silu_row_avx512;
                if (l > (int)best) break;
                for (int inplace = 0; inplace <= 1; inplace++) {
                    for (int i = 0; i < 64; i++) y[i] = NAN; /* past n: untouched */
                    if (inplace) {
                        memcpy(y, x, sizeof(float) * (size_t)n);
                        row(n, y, y);
                    } else {
                        row(n, y, x);
                    }
                    for (int64_t i = 0; i < 64; i++) {
                        if (i >= n) {
                            CHECK(isnan(y[i]));
                            continue;
                        }
                        const double want = gelu ? want_gelu(x[i]) : want_silu(x[i]);
                        CHECKF(fabs((double)y[i] - want) <= 1e-6 * fmax(1.0, fabs(want)),
                               "%s level %s n=%lld [%lld] of %.9g: %.9g vs %.9g",
                               gelu ? "gelu" : "silu", level_name((cllm_cpu_isa)l), (long long)n,
                               (long long)i, x[i], y[i], want);
                    }
                }
            }
        }
    }
#else
    (void)best;
#endif
}

/* ---- F32 rows into F16 (a KV cache's cpy; test_ops sees only the best level)
 * Every value bit for bit cllm_fp32_to_fp16's: exponents from the subnormal
 * range through overflow, halfway cases of both parities, infinities; a NaN
 * stays a NaN. */

static void test_f16_rows(cllm_cpu_isa best) {
#if defined(__x86_64__) || defined(__i386__)
    if (best < CLLM_CPU_ISA_AVX2) return;
    enum { N = 4099 }; /* 8 at a time and a tail */
    static float x[N];
    static cllm_fp16 y[N + 1];
    for (int i = 0; i < N; i++) {
        /* exponents 100..155 (2^-27 .. 2^28), then mantissas ending in
         * halfway patterns for F16's 10 bits */
        uint32_t bits = ((uint32_t)(rng_next() & 1) << 31) |
                        ((100u + (uint32_t)(rng_next() % 56)) << 23) |
                        (uint32_t)(rng_next() & 0x7fffffu);
        if (i % 3 == 0) bits = (bits & ~0x1fffu) | 0x1000u; /* exactly halfway */
        memcpy(&x[i], &bits, 4);
    }
    x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = 65519.0f, x[4] = 65520.0f, x[5] = -0.0f;
    y[N] = 0x5555; /* past n: untouched */
    cllm_cpu_f32_to_f16_row_avx2(N, y, x);
    for (int i = 0; i < N; i++) {
        const cllm_fp16 want = cllm_fp32_to_fp16(x[i]);
        if (isnan(x[i])) {
            CHECKF((y[i] & 0x7c00) == 0x7c00 && (y[i] & 0x3ff) != 0, "f16 row [%d]: NaN -> 0x%04x",
                   i, y[i]);
            continue;
        }
        CHECKF(y[i] == want, "f16 row [%d]: %.9g -> 0x%04x, want 0x%04x", i, x[i], y[i], want);
    }
    CHECK(y[N] == 0x5555);
#else
    (void)best;
#endif
}

int main(void) {
    const cllm_cpu_isa best = cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    printf("test_kernels: best level %s (%s)\n", level_name(best), cllm_cpu_features_str());
    test_dispatch(best);
    test_act_rows(best);
    test_f16_rows(best);
    for (int l = CLLM_CPU_ISA_PORTABLE; l <= (int)best; l++) {
        const cllm_cpu_isa level = (cllm_cpu_isa)l;
        if (cllm_cpu_set_isa_limit(level) != level) { /* an AVX-512 CPU without AVX-VNNI */
            CHECK(level == CLLM_CPU_ISA_AVXVNNI && cllm_cpu_isa_level() == CLLM_CPU_ISA_AVX2);
            continue;
        }
        test_from_float(level, CLLM_TYPE_Q8_0);
        test_from_float(level, CLLM_TYPE_Q8_K);
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_types); i++) {
            test_dot(level, k_types[i]);
            test_dot_mxn(level, k_types[i]);
            test_gemm(k_types[i]);
            test_gemm_extremes(k_types[i]);
            test_gemv(k_types[i]);
            test_x16(k_types[i]);
            if (level == CLLM_CPU_ISA_AVX512) {
                /* the level's kernels of the other width too, whichever
                 * this CPU uses */
                const bool dflt = cllm_cpu_set_prefer_256(!cllm_cpu_prefer_256());
                test_dot(level, k_types[i]);
                test_gemv(k_types[i]);
                test_x16(k_types[i]);
                cllm_cpu_set_prefer_256(dflt);
                CHECK(cllm_cpu_prefer_256() == dflt);
                test_gemv_256(k_types[i]);
            }
            test_gemm_f(k_types[i]);
            if (level == CLLM_CPU_ISA_AVXVNNI) test_vnni_as_avx2(k_types[i]);
        }
    }
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    return check_summary("test_kernels");
}
