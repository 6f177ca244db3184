/*
 * The panel GEMM kernels (gemm.h) for AVX2: the panels of the AVX-512 level,
 * with 8 of their 16 weight rows in the 8 int32 lanes of a ymm register
 * (the first or second 32 bytes of each 64-byte step). Panels of more than
 * 8 rows go both halves at once, 3 columns at a time (gy_tile16: each
 * activation broadcast serves two vpmaddubsw); Q8_0 and panels of up to 8
 * rows half a panel at a time, 4 columns at a time (gy_tile). Both sum
 * every lane the same way, so a row's result does not depend on the
 * panel's height.
 *
 * AVX2 has no u8 x s8 -> s32 dot product, so a step is vpmaddubsw (pairs of
 * u8 x s8 products, summed to saturating s16) and vpmaddwd against ones (s16
 * pairs to s32). Saturation decides the rest:
 *  - every form but Q8_0 has u <= umax <= 63 (gemm.h), so a pair is at
 *    most 2 * umax * 127 and as many steps as fit add up in s16 before one
 *    vpmaddwd (gy_group: a whole 32-element block for 4-bit weights, 4
 *    steps for 5-bit, 2 for Q6_K). The sums are kept in order (CLLM_X86_KEEP):
 *    left to itself, gcc reassociated them into trees that held every
 *    product live at once and spilled the accumulators to the stack;
 *  - Q8_0 (u = q + 128, z = 128) would overflow: at this level its panel
 *    holds q itself (u ^ 0x80), then |q| (gemm.h: form.sabs), and a step
 *    multiplies |q| by the activation with q's sign (at most 2 * 128 * 127
 *    = 32512 per pair), which is the sum of (u - z) * a directly, so the
 *    accumulator starts at 0 and not at -z * s. The packer wrote |q|: per
 *    step a load instead of two operations (vpxor to q, vpabsb), which were
 *    a ninth of a 4-column step's.
 * The float part per scale block is the AVX-512 kernel's: one conversion,
 * one multiply by the activation's scale, one FMA with the 8 weight scales,
 * one more for types with an offset.
 *
 * Float weights (F16 / BF16 panels of 32 F32 rows): 16 rows (two registers)
 * x up to 6 columns of FMAs, 12 accumulators.
 *
 * Compiled for AVX2 + FMA only; gemm.c calls these only at that level.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "core/common.h"
#include "core/quants.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c")

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/x86/vec-avx2.h"

#define GY_INLINE static inline __attribute__((always_inline))
#define GY_COLS   4 /* 4 int32 + 4 float accumulators, weights, ones, activations: 13 of 16 */
#define GY_F_COLS 6 /* 12 float accumulators, 2 weight registers, 1 broadcast: 15 of 16 */
/* gy_tile16: 4 registers a column (6 with int32 sums between groups: the
 * float sums then spill, once per block), 2 of weights, the broadcast,
 * ones. 3 measured faster than 2 and 4 (Zen 3: Q5_K 200 GOP/s against 152
 * and 194, Q4_K 218 against 179 and 222) */
#define GY2_COLS 3

/* Rows 8h..8h+7 of the panel x nc columns over all nb blocks; spb = BS / 4
 * steps per block, summed in s16 by groups of g steps (g divides spb; see
 * gy_group). sgn: Q8_0's signed steps. */
GY_INLINE void gy_tile(int spb, int g, bool off, bool sgn, int nc, int64_t nb, const char *panel,
                       size_t bb, int h, const char *act, size_t astride, size_t ab, float *out,
                       size_t ldo, int nr) {
    const int bs = 4 * spb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 f[GY_COLS];
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) f[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* (Q8_0: steps of 128 bytes, half h's q and |q| at 64 h) */
        const char *blk = panel + (size_t)b * bb, *pb = blk + (sgn ? 64 : 32) * h;
        const size_t ss = sgn ? 128 : 64;
        const char *ax = act + (size_t)b * ab;
        __m256i acc[GY_COLS];
        if (sgn) {
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) acc[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int t = 0; t < spb; t++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(pb + ss * t));
                const __m256i wa = _mm256_loadu_si256((const __m256i *)(pb + ss * t + 32));
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    const __m256i a = _mm256_sign_epi8(
                        _mm256_set1_epi32(cllm_load_i32(ax + j * astride + 4 * t)), w);
                    acc[j] = _mm256_add_epi32(acc[j],
                                              _mm256_madd_epi16(_mm256_maddubs_epi16(wa, a), ones));
                    CLLM_X86_KEEP(acc[j]);
                }
            }
        } else {
            /* each group of g steps: u8 x s8 pairs summed in s16 (no
             * saturation: g * 2 * umax * 127 <= 32767), widened once */
#pragma GCC unroll 4
            for (int t0 = 0; t0 < spb; t0 += g) {
                __m256i p[GY_COLS];
                {
                    const __m256i w = _mm256_loadu_si256((const __m256i *)(pb + 64 * t0));
#pragma GCC unroll 4
                    for (int j = 0; j < nc; j++)
                        p[j] = _mm256_maddubs_epi16(
                            w, _mm256_set1_epi32(cllm_load_i32(ax + j * astride + 4 * t0)));
                }
#pragma GCC unroll 8
                for (int t = t0 + 1; t < t0 + g; t++) {
                    const __m256i w = _mm256_loadu_si256((const __m256i *)(pb + 64 * t));
#pragma GCC unroll 4
                    for (int j = 0; j < nc; j++) {
                        p[j] = _mm256_add_epi16(
                            p[j], _mm256_maddubs_epi16(w, _mm256_set1_epi32(cllm_load_i32(
                                                              ax + j * astride + 4 * t))));
                        CLLM_X86_KEEP(p[j]);
                    }
                }
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    const __m256i q = _mm256_madd_epi16(p[j], ones);
                    acc[j] = t0 == 0 ? _mm256_add_epi32(q, _mm256_set1_epi32(cllm_load_i32(
                                                               ax + j * astride + bs + 8)))
                                     : _mm256_add_epi32(acc[j], q);
                }
            }
        }
        cllm_gemm_block_f256(nc, off, blk + ss * spb + 32 * h, ax, astride, bs, acc, f);
    }
    const __m256i m = cllm_lanes8(nr);
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) cllm_store8(out + (size_t)j * ldo + 8 * h, f[j], nr, m);
}

/* All 16 rows of the panel (both halves) x nc columns over all nb blocks:
 * gy_tile's arithmetic lane for lane (the same integer sums, the same float
 * steps per block, so the same bits), but each activation broadcast and
 * each column's d and d * s serve both halves. gy_tile reloads them per
 * half, and its loads (a broadcast per step and column, the weights, the
 * scales) were what bounded it: on Zen 3 about 0.6 vpmaddubsw per cycle
 * of the 2 the core issues. zs: add the block's -z * s (z != 0: the forms
 * without an offset; for the others it is 0). Registers: per column two
 * s16 sums and two float accumulators, and with g < spb two int32 sums
 * (GY2_COLS of each), then two weight rows and the broadcast. */
GY_INLINE void gy_tile16(int spb, int g, bool off, bool zs, int nc, int64_t nb, const char *panel,
                         size_t bb, const char *act, size_t astride, size_t ab, float *out,
                         size_t ldo, int nr) {
    const int bs = 4 * spb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 f[GY2_COLS][2];
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) f[j][0] = f[j][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *pb = panel + (size_t)b * bb;
        const char *ax = act + (size_t)b * ab;
        __m256i acc[GY2_COLS][2];
#pragma GCC unroll 4
        for (int t0 = 0; t0 < spb; t0 += g) {
            __m256i p[GY2_COLS][2];
            {
                const __m256i w0 = _mm256_loadu_si256((const __m256i *)(pb + 64 * t0));
                const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pb + 64 * t0 + 32));
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    const __m256i a = _mm256_set1_epi32(cllm_load_i32(ax + j * astride + 4 * t0));
                    p[j][0] = _mm256_maddubs_epi16(w0, a);
                    p[j][1] = _mm256_maddubs_epi16(w1, a);
                }
            }
#pragma GCC unroll 8
            for (int t = t0 + 1; t < t0 + g; t++) {
                const __m256i w0 = _mm256_loadu_si256((const __m256i *)(pb + 64 * t));
                const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pb + 64 * t + 32));
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    const __m256i a = _mm256_set1_epi32(cllm_load_i32(ax + j * astride + 4 * t));
                    p[j][0] = _mm256_add_epi16(p[j][0], _mm256_maddubs_epi16(w0, a));
                    p[j][1] = _mm256_add_epi16(p[j][1], _mm256_maddubs_epi16(w1, a));
                    CLLM_X86_KEEP(p[j][0]);
                    CLLM_X86_KEEP(p[j][1]);
                }
            }
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                for (int h = 0; h < 2; h++) {
                    const __m256i q = _mm256_madd_epi16(p[j][h], ones);
                    if (t0 == 0) {
                        acc[j][h] =
                            zs ? _mm256_add_epi32(
                                     q, _mm256_set1_epi32(cllm_load_i32(ax + j * astride + bs + 8)))
                               : q;
                    } else {
                        acc[j][h] = _mm256_add_epi32(acc[j][h], q);
                    }
                }
            }
        }
        const char *ps = pb + 64 * spb;
        const __m256 sc0 = _mm256_loadu_ps((const float *)ps);
        const __m256 sc1 = _mm256_loadu_ps((const float *)(ps + 32));
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) {
            const __m256 dj = _mm256_set1_ps(cllm_load_f32(ax + j * astride + bs));
            f[j][0] =
                _mm256_fmadd_ps(sc0, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j][0]), dj), f[j][0]);
            f[j][1] =
                _mm256_fmadd_ps(sc1, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j][1]), dj), f[j][1]);
        }
        if (off) {
            const __m256 o0 = _mm256_loadu_ps((const float *)(ps + 64));
            const __m256 o1 = _mm256_loadu_ps((const float *)(ps + 96));
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                const __m256 ds = _mm256_set1_ps(cllm_load_f32(ax + j * astride + bs + 4));
                f[j][0] = _mm256_fmadd_ps(o0, ds, f[j][0]);
                f[j][1] = _mm256_fmadd_ps(o1, ds, f[j][1]);
            }
        }
    }
    const __m256i m1 = cllm_lanes8(nr - 8);
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) {
        _mm256_storeu_ps(out + (size_t)j * ldo, f[j][0]);
        cllm_store8(out + (size_t)j * ldo + 8, f[j][1], nr - 8, m1);
    }
}

/* Steps a group sums in s16: the most that fit, 2 * umax * 127 per step
 * (umax = 15: 8, a whole 32-element block; 31: 4; 63: 2), a power of two
 * dividing spb. */
static int gy_group(int spb, int umax) {
    int g = spb;
    while (g > 1 && g * 2 * umax * 127 > 32767) g /= 2;
    return g;
}

#define GY_TILE(n, spb, g, off, sgn)                                                               \
    gy_tile(spb, g, off, sgn, n, nb, panel, bb, h, a, astride, ab, o, ldo, nr)

_Static_assert(GY_COLS == 4, "CLLM_GEMM_BY_COLS4 covers 1..4 columns");

/* The (steps per block, steps per group, offset) forms compiled. */
#define GY_FORMS(X)                                                                                \
    X(8, 8, false) /* Q4_0 */                                                                      \
    X(8, 8, true)  /* Q4_1, Q4_K */                                                                \
    X(8, 4, false) /* Q5_0 */                                                                      \
    X(8, 4, true)  /* Q5_1, Q5_K */                                                                \
    X(4, 4, false) /* Q3_K */                                                                      \
    X(4, 4, true)  /* Q2_K */                                                                      \
    X(4, 2, false) /* Q6_K */

/* (K is not walked in passes that keep the part of the panel in use in L1
 * while every column meets it: the columns' short runs per pass, 3 KiB
 * apart, defeat the prefetcher, which costs more than the passes save.) */
void cllm_cpu_gemm_avx2(const cllm_gemm_form *fm, int64_t K, const void *panel_, const void *act,
                        size_t astride, int ncols, float *out, size_t ldo, int nrows) {
    const char *panel = panel_;
    const int bs = fm->bs, spb = bs / 4;
    const bool off = fm->offset, sgn = fm->sabs;
    const int g = sgn ? 1 : gy_group(spb, fm->umax);
    CLLM_ASSERT(sgn || g >= 2); /* umax <= 63 */
    const int64_t nb = K / bs;
    const size_t bb = cllm_gemm_scales_at(fm) + 64 + (off ? 64 : 0), ab = (size_t)bs + 16;
    if (!sgn && nrows > 8) {
        /* both halves at once, GY2_COLS columns at a time */
        const int cols = GY2_COLS;
        for (int j0 = 0; j0 < ncols; j0 += cols) {
            const int nc = ncols - j0 < cols ? ncols - j0 : cols;
            const char *a = (const char *)act + (size_t)j0 * astride;
            float *o = out + (size_t)j0 * ldo;
#define GY_TILE16(n, S, G, OFF)                                                                    \
    gy_tile16(S, G, OFF, !(OFF), n, nb, panel, bb, a, astride, ab, o, ldo, nrows)
#define GY_FORM16_CASE(S, G, OFF)                                                                  \
    if (spb == (S) && g == (G) && off == (OFF)) {                                                  \
        if (nc == 1)                                                                               \
            GY_TILE16(1, S, G, OFF);                                                               \
        else if (nc == 2)                                                                          \
            GY_TILE16(2, S, G, OFF);                                                               \
        else                                                                                       \
            GY_TILE16(3, S, G, OFF);                                                               \
        continue;                                                                                  \
    }
            GY_FORMS(GY_FORM16_CASE)
#undef GY_FORM16_CASE
#undef GY_TILE16
            CLLM_ASSERT(!"gemm form without an AVX2 tile");
        }
        return;
    }
    for (int j0 = 0; j0 < ncols; j0 += GY_COLS) {
        const int nc = ncols - j0 < GY_COLS ? ncols - j0 : GY_COLS;
        const char *a = (const char *)act + (size_t)j0 * astride;
        float *o = out + (size_t)j0 * ldo;
        for (int h = 0; h < 2 && 8 * h < nrows; h++) {
            const int nr = nrows - 8 * h < 8 ? nrows - 8 * h : 8;
            if (sgn) {
                CLLM_GEMM_BY_COLS4(nc, GY_TILE, 8, 1, false, true) /* Q8_0: BS 32, no offset */
                continue;
            }
#define GY_FORM_CASE(S, G, OFF)                                                                    \
    if (spb == (S) && g == (G) && off == (OFF)) {                                                  \
        CLLM_GEMM_BY_COLS4(nc, GY_TILE, S, G, OFF, false)                                          \
        continue;                                                                                  \
    }
            GY_FORMS(GY_FORM_CASE)
#undef GY_FORM_CASE
            CLLM_ASSERT(!"gemm form without an AVX2 tile");
        }
    }
}

/* ---- activations: gemm.h's form, as the portable quantizer writes it ---------- */

GY_INLINE __m256i gy_q8(__m256 v, __m256 vid) { /* nearest(v * id), clamped to +-127 */
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, vid));
    return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

/* 32 floats quantized with 1 / d = id into 32 int8 at q, in element order;
 * returns the int32 lanes whose sum is the sum of the quants: lane j holds
 * q[j] + q[8 + j] + q[16 + j] + q[24 + j]. */
GY_INLINE __m256i gy_quant32(const float *x, __m256 vid, char *q, __m256i *q02, __m256i *q13) {
    const __m256i q0 = gy_q8(_mm256_loadu_ps(x), vid), q1 = gy_q8(_mm256_loadu_ps(x + 8), vid);
    const __m256i q2 = gy_q8(_mm256_loadu_ps(x + 16), vid);
    const __m256i q3 = gy_q8(_mm256_loadu_ps(x + 24), vid);
    _mm256_storeu_si256((__m256i *)q, cllm_pack256_i8(q0, q1, q2, q3));
    *q02 = _mm256_add_epi32(q0, q2);
    *q13 = _mm256_add_epi32(q1, q3);
    return _mm256_add_epi32(*q02, *q13);
}

GY_INLINE __m256 gy_inv(float d) { return _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f); }

void cllm_cpu_gemm_quantize_avx2(const cllm_gemm_form *f, const float *x, void *act, int64_t K) {
    const int bs = f->bs; /* 16 or 32 */
    char *out = act;
    for (int64_t b = 0; b < K / bs; b++, out += bs + 16) {
        const float *xb = x + b * bs;
        const float d = cllm_amax256(xb, bs) / 127.0f;
        const __m256 vid = gy_inv(d);
        __m256i sum, q02, q13;
        if (bs == 32) {
            sum = gy_quant32(xb, vid, out, &q02, &q13);
        } else { /* 16: int32 -> int16 -> int8 as gy_quant32 does */
            const __m256i q0 = gy_q8(_mm256_loadu_ps(xb), vid);
            const __m256i q1 = gy_q8(_mm256_loadu_ps(xb + 8), vid);
            sum = _mm256_add_epi32(q0, q1);
            const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
            _mm_storeu_si128((__m128i *)out, _mm_packs_epi16(_mm256_castsi256_si128(w),
                                                             _mm256_extracti128_si256(w, 1)));
        }
        cllm_gemm_act_block_tail(out + bs, f, d, cllm_hsum256_i32(sum));
    }
}

/* The one-column kernels' Q4_0 / Q4_1 activations (gemm.h: per group of 128
 * elements, 4 blocks' halves, per-lane -8 sums, scales, d * sums), with the
 * portable quantizer's bytes. The caller zeroed the row (groups past K). */
static void gy_gemv_quantize_q4(bool q40, const float *x, char *act, int64_t K) {
    for (int64_t b = 0; b < K / 32; b++) {
        char *g = act + (size_t)(b / 4) * 320;
        const int i = (int)(b % 4);
        const float *xb = x + b * 32;
        const float d = cllm_amax256(xb, 32) / 127.0f;
        char q[32];
        __m256i q02, q13;
        gy_quant32(xb, gy_inv(d), q, &q02, &q13);
        memcpy(g + 16 * i, q, 16);
        memcpy(g + 64 + 16 * i, q + 16, 16);
        /* lane l meets elements 4l..4l+3 and 16+4l..16+4l+3 */
        int32_t t[16];
        _mm256_storeu_si256((__m256i *)t, q02);
        _mm256_storeu_si256((__m256i *)(t + 8), q13);
        int32_t s = 0;
        for (int l = 0; l < 4; l++) {
            const int32_t sl = t[4 * l] + t[4 * l + 1] + t[4 * l + 2] + t[4 * l + 3];
            const int32_t zs = q40 ? -8 * sl : 0;
            memcpy(g + 128 + 4 * (4 * i + l), &zs, 4);
            memcpy(g + 192 + 4 * (4 * i + l), &d, 4);
            s += sl;
        }
        const float ds = d * (float)s;
        memcpy(g + 256 + 16 * i, &ds, 4);
    }
}

/* Q4_K's (gemm.h: per super-block the 256 quants with sub-blocks in the
 * order 0 2 1 3 4 6 5 7, their int16 sums, d, 12 zero bytes), with the
 * portable quantizer's bytes. */
static void gy_gemv_quantize_q4_k(const float *x, char *act, int64_t K) {
    static const int pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const float *xs = x + sb * 256;
        char *out = act + (size_t)sb * 288;
        const float d = cllm_amax256(xs, 256) / 127.0f;
        const __m256 vid = gy_inv(d);
        int16_t sums[8];
        for (int s8 = 0; s8 < 8; s8++) {
            __m256i q02, q13;
            sums[s8] = (int16_t)cllm_hsum256_i32(
                gy_quant32(xs + 32 * s8, vid, out + 32 * pos[s8], &q02, &q13));
        }
        memcpy(out + 256, sums, 16);
        memcpy(out + 272, &d, 4);
        memset(out + 276, 0, 12);
    }
}

/* Q8_0's (gemm.h: the quants of pairs of blocks interleaved by halves, then
 * the blocks' float scales), with the portable quantizer's bytes. The
 * caller zeroed the row (a lone last block's partner). */
static void gy_gemv_quantize_q8(const float *x, char *act, int64_t K) {
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + b * 32;
        const float d = cllm_amax256(xb, 32) / 127.0f;
        char q[32];
        __m256i q02, q13;
        gy_quant32(xb, gy_inv(d), q, &q02, &q13);
        memcpy(act + cllm_cpu_gemv_q8_pos(b, 0), q, 16);
        memcpy(act + cllm_cpu_gemv_q8_pos(b, 16), q + 16, 16);
        memcpy(act + cllm_cpu_gemv_q8_scales(K) + 4 * b, &d, 4);
    }
}

void cllm_cpu_gemv_quantize_avx2(cllm_type type, const float *x, void *act, int64_t K) {
    if (type == CLLM_TYPE_Q4_K) {
        gy_gemv_quantize_q4_k(x, act, K);
    } else if (type == CLLM_TYPE_Q8_0) {
        gy_gemv_quantize_q8(x, act, K);
    } else {
        gy_gemv_quantize_q4(type == CLLM_TYPE_Q4_0, x, act, K);
    }
}

/* ---- packing: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 --------------------------------------
 * The portable packer decodes each block into bytes and floats one row at a
 * time and scatters 4 bytes at a time, which costs a short prompt more than
 * the kernel does. Here 8 rows' blocks
 * are unpacked into registers (32 unsigned bytes each, in element order)
 * and transposed as 8 x 8 dwords, so each 32-byte store fills 8 rows of a
 * panel line; the scales are converted 8 at a time. The same bytes as the
 * portable packer (test_kernels compares them). (Q5_0 and Q5_1 are here
 * too: files whose rows are no multiple of 256, as Gemma 3 270M's of 640,
 * hold Q5_0 where K-quants do not fit.) */

/* 32 unsigned bytes of the block at blk, in element order (gemm.c's
 * decoders: nibbles low then high, Q5's fifth bits above them; Q8_0 biased
 * by 128). */
GY_INLINE __m256i gy_pack_u(cllm_type type, const char *blk) {
    if (type == CLLM_TYPE_Q8_0) {
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)),
                                _mm256_set1_epi8((char)0x80));
    }
    const bool q5 = type == CLLM_TYPE_Q5_0 || type == CLLM_TYPE_Q5_1;
    /* where the nibbles start: after d (and m), and Q5's 4 bytes of fifth bits */
    const size_t qs = (type == CLLM_TYPE_Q4_1 || type == CLLM_TYPE_Q5_1 ? 4 : 2) + (q5 ? 4 : 0);
    const __m128i v = _mm_loadu_si128((const __m128i *)(blk + qs));
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
    if (q5) { /* byte j gets bit j of qh (the 4 bytes before qs) as 0x10 */
        int32_t qh;
        memcpy(&qh, blk + qs - 4, 4);
        const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        u = _mm256_or_si256(u, cllm_q5_bits256(_mm256_set1_epi32(qh), idx));
    }
    return u;
}

bool cllm_cpu_gemm_pack_avx2(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                             void *panel) {
    size_t bsz;
    switch (type) {
    case CLLM_TYPE_Q4_0: bsz = sizeof(cllm_block_q4_0); break;
    case CLLM_TYPE_Q4_1: bsz = sizeof(cllm_block_q4_1); break;
    case CLLM_TYPE_Q5_0: bsz = sizeof(cllm_block_q5_0); break;
    case CLLM_TYPE_Q5_1: bsz = sizeof(cllm_block_q5_1); break;
    case CLLM_TYPE_Q8_0: bsz = sizeof(cllm_block_q8_0); break;
    default: return false;
    }
    const bool off = type == CLLM_TYPE_Q4_1 || type == CLLM_TYPE_Q5_1;
    const bool sabs = cllm_cpu_gemm_form(type).sabs; /* Q8_0 here: q, then |q| */
    const int64_t nb = K / 32;
    /* the next 16 rows (mul_mat packs them next), into L2 as one stream
     * along with these: read block by block, 16 rows are 16 streams that
     * the hardware prefetcher follows poorly, and a prefetch along each
     * row lands in the following rows when they are short (SmolLM2: 360
     * bytes) */
    const size_t span = 16 * stride;
    const char *next = (const char *)a + span;
    char *p = panel;
    const size_t ss = sabs ? 128 : 64; /* bytes a step (Q8_0 here: q, then |q|) */
    for (int64_t b = 0; b < nb; b++, p += 8 * ss + 64 + (off ? 64 : 0)) {
        const size_t lo = (size_t)b * span / (size_t)nb, hi = (size_t)(b + 1) * span / (size_t)nb;
        for (size_t x = lo & ~(size_t)63; x < hi; x += 64) _mm_prefetch(next + x, _MM_HINT_T1);
        uint16_t hd[16] = {0}, hm[16] = {0}; /* scales and offsets, fp16 */
        for (int h = 0; h < 2; h++) {        /* rows 8h..8h+7 */
            __m256 y[8]; /* the bytes of rows 8h..8h+7, then dword t of each in y[t] */
            for (int i = 0; i < 8; i++) {
                const int r = 8 * h + i;
                y[i] = _mm256_setzero_ps();
                if (r >= nrows) continue;
                const char *blk = (const char *)a + (size_t)r * stride + (size_t)b * bsz;
                y[i] = _mm256_castsi256_ps(sabs ? _mm256_loadu_si256((const __m256i *)(blk + 2))
                                                : gy_pack_u(type, blk));
                memcpy(&hd[r], blk, 2);
                if (off) memcpy(&hm[r], blk + 2, 2);
            }
            cllm_transpose8_ps(y);
            for (int t = 0; t < 8; t++) {
                _mm256_storeu_ps((float *)(p + ss * t + (sabs ? 64 : 32) * h), y[t]);
                if (sabs) {
                    _mm256_storeu_si256((__m256i *)(p + ss * t + 64 * h + 32),
                                        _mm256_abs_epi8(_mm256_castps_si256(y[t])));
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            _mm256_storeu_ps((float *)(p + 8 * ss) + 8 * h,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hd + 8 * h))));
            if (off) {
                _mm256_storeu_ps((float *)(p + 8 * ss + 64) + 8 * h,
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hm + 8 * h))));
            }
        }
    }
    return true;
}

/* ---- float weights ---------------------------------------------------------------- */

/* Rows 16h..16h+15 of the panel x nc columns; column j's element k at
 * cols[j * js + k * ks] (in place: js = the row stride, ks = 1; grouped:
 * js = 1, ks = 6). (K is not walked in passes that keep a part of the
 * panel in L1: with columns in place their short runs per pass, 8 KiB
 * apart, defeat the prefetcher; with grouped columns passes gain
 * nothing.) */
GY_INLINE void gy_tile_f(int nc, int64_t K, const float *panel, int h, const float *cols, size_t js,
                         size_t ks, float *out, size_t ldo, int nr) {
    __m256 acc[GY_F_COLS][2];
#pragma GCC unroll 6
    for (int j = 0; j < nc; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    const float *p = panel + 16 * h, *c = cols;
    for (int64_t k = 0; k < K; k++, p += CLLM_GEMM_F_ROWS, c += ks) {
        const __m256 w0 = _mm256_loadu_ps(p), w1 = _mm256_loadu_ps(p + 8);
#pragma GCC unroll 6
        for (int j = 0; j < nc; j++) {
            const __m256 cj = _mm256_broadcast_ss(c + (size_t)j * js);
            acc[j][0] = _mm256_fmadd_ps(w0, cj, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(w1, cj, acc[j][1]);
        }
    }
    const int n0 = nr < 8 ? nr : 8, n1 = nr - n0;
    const __m256i m0 = cllm_lanes8(n0), m1 = cllm_lanes8(n1 > 0 ? n1 : 1);
#pragma GCC unroll 6
    for (int j = 0; j < nc; j++) {
        float *oj = out + (size_t)j * ldo + 16 * h;
        cllm_store8(oj, acc[j][0], n0, m0);
        if (n1 > 0) cllm_store8(oj + 8, acc[j][1], n1, m1);
    }
}

#define GY_TILE_F(n, unused) gy_tile_f(n, K, panel, h, c, js, ks, o, ldo, nr)

/* Every group of up to 6 columns meets both halves of the panel. */
GY_INLINE void gy_gemm_f(int64_t K, const float *panel, const float *cols, size_t group_stride,
                         size_t js, size_t ks, int ncols, float *out, size_t ldo, int nrows) {
    for (int j0 = 0; j0 < ncols; j0 += GY_F_COLS) {
        const int nc = ncols - j0 < GY_F_COLS ? ncols - j0 : GY_F_COLS;
        const float *c =
            (const float *)((const char *)cols + (size_t)(j0 / GY_F_COLS) * group_stride);
        float *o = out + (size_t)j0 * ldo;
        for (int h = 0; h < 2 && 16 * h < nrows; h++) {
            const int nr = nrows - 16 * h < 16 ? nrows - 16 * h : 16;
            switch (nc) {
            case 1: GY_TILE_F(1, 0); break;
            case 2: GY_TILE_F(2, 0); break;
            case 3: GY_TILE_F(3, 0); break;
            case 4: GY_TILE_F(4, 0); break;
            case 5: GY_TILE_F(5, 0); break;
            default: GY_TILE_F(6, 0); break;
            }
        }
    }
}

void cllm_cpu_gemm_f_avx2(int64_t K, const float *panel, const float *cols, size_t group_stride,
                          int group, int ncols, float *out, size_t ldo, int nrows) {
    if (group == GY_F_COLS) {
        gy_gemm_f(K, panel, cols, group_stride, 1, GY_F_COLS, ncols, out, ldo, nrows);
    } else { /* in place: a "group" of 6 columns is 6 rows */
        gy_gemm_f(K, panel, cols, GY_F_COLS * group_stride, group_stride / sizeof(float), 1, ncols,
                  out, ldo, nrows);
    }
}
_Static_assert(GY_F_COLS == CLLM_GEMM_F_GROUP_AVX2, "the AVX2 column group is its register tile");
_Static_assert(GY_F_COLS == 6, "cllm_cpu_gemm_f_avx2 covers 1..6 columns");

/* The float packer: 8 rows x 8 elements at a time, converted (vcvtph2ps,
 * or a shift for BF16) and transposed in registers, so each 32-byte store
 * fills 8 rows of one element's panel line. Rows past nrows are zero. */

GY_INLINE __m256 gy_f8(bool f16, const char *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (f16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

GY_INLINE float gy_f1(bool f16, const char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    if (f16) return _cvtsh_ss(h);
    const uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

void cllm_cpu_gemm_f_pack_avx2(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                               float *panel) {
    const bool f16 = type == CLLM_TYPE_F16;
    for (int r0 = 0; r0 < CLLM_GEMM_F_ROWS; r0 += 8) {
        const char *src = (const char *)a + (size_t)r0 * stride;
        const int nr = nrows - r0 < 0 ? 0 : (nrows - r0 > 8 ? 8 : nrows - r0);
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256 r[8];
            /* the next 8 rows' line at this place, on its way to L2: a
             * row of 4 KiB (K = 2048) is one page, too short for the
             * hardware prefetcher to follow, and these loads would wait
             * on memory */
            if ((k & 31) == 0) {
                for (int i = 8; i < 16 && r0 + i < nrows; i++) {
                    _mm_prefetch(src + (size_t)i * stride + 2 * k, _MM_HINT_T1);
                }
            }
            for (int i = 0; i < 8; i++)
                r[i] = i < nr ? gy_f8(f16, src + (size_t)i * stride + 2 * k) : _mm256_setzero_ps();
            cllm_transpose8_ps(r);
            for (int e = 0; e < 8; e++)
                _mm256_storeu_ps(panel + (k + e) * CLLM_GEMM_F_ROWS + r0, r[e]);
        }
        for (; k < K; k++) {
            for (int i = 0; i < 8; i++)
                panel[k * CLLM_GEMM_F_ROWS + r0 + i] =
                    i < nr ? gy_f1(f16, src + (size_t)i * stride + 2 * k) : 0.0f;
        }
    }
}

/* ---- one column (generation): Q4_0 and Q4_1 (gemv-x86.h) -------------------------- */

#define GV_VNNI 0
#include "backend/cpu/x86/gemv-x86.h"

void cllm_cpu_gemv_x16_avx2(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                            size_t act_stride, int nc, float *out, size_t out_stride) {
    gv_gemv_x16(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
}

void cllm_cpu_gemm_pack_x16_avx2(cllm_type type, int64_t K, const void *group, void *panel) {
    gv_gemm_pack_x16(type, K, group, panel);
}

/* Q4_K, per super-block (gemm.h's 288-byte activation: sub-blocks in the
 * order 0 2 1 3 4 6 5 7, their int16 sums, d). The 6-bit scales and mins
 * come out of the 12 bytes with word arithmetic: for sub-blocks 0..3 the low
 * 6 bits of bytes 0..3 (scales) and 4..7 (mins); for 4..7 the nibbles of
 * bytes 8..11 with the top 2 bits of bytes 0..3 (scales) and 4..7 (mins)
 * above them. Each chunk of 32 weight bytes holds sub-block 2c in its low
 * nibbles and 2c + 1 in its high ones: one vpmaddubsw per sub-block, then
 * vpmaddwd with the sub-block's scale (<= 63) broadcast, which both widens
 * and scales; the mins meet the sums in one vpmaddwd per super-block. */
GY_INLINE void gy_q4k_scales(const uint8_t sc12[12], uint64_t *scales, uint64_t *mins) {
    uint32_t w[3];
    memcpy(w, sc12, 12);
    const uint32_t lo6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, lo2 = 0x03030303;
    const uint32_t s03 = w[0] & lo6, m03 = w[1] & lo6;
    const uint32_t s47 = (w[2] & lo4) | (((w[0] >> 6) & lo2) << 4);
    const uint32_t m47 = ((w[2] >> 4) & lo4) | (((w[1] >> 6) & lo2) << 4);
    *scales = (uint64_t)s03 | (uint64_t)s47 << 32;
    *mins = (uint64_t)m03 | (uint64_t)m47 << 32;
}

/* One super-block b of a row against nc columns (<= 4, a constant after
 * inlining; column j's super-block at a + j * act_stride): the weights
 * unpacked (nibbles, scales) once for all the columns, each column summed
 * with the very operations of one column alone (so the same bits), into
 * acc[j] (the scaled sums) and accm[j] (the mins, subtracted at the end). */
GY_INLINE void gy_q4k_sb(int nc, const cllm_block_q4_K *b, const char *a, size_t act_stride,
                         __m256 *acc, __m128 *accm) {
    static const int pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    uint64_t sc8, mn8;
    gy_q4k_scales(b->scales, &sc8, &mn8);
    /* scales as int16, both 128-bit lanes, each doubled (s0 s0 s1 s1 ...:
     * one per 32-bit lane for 0..3, then 4..7), broadcast by vpshufd with an
     * immediate (no shuffle-control registers to hold) */
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)sc8)));
    const __m256i sc03 = _mm256_unpacklo_epi16(sc16, sc16),
                  sc47 = _mm256_unpackhi_epi16(sc16, sc16);
    __m256i sub[8];
    sub[0] = _mm256_shuffle_epi32(sc03, 0x00), sub[1] = _mm256_shuffle_epi32(sc03, 0x55);
    sub[2] = _mm256_shuffle_epi32(sc03, 0xAA), sub[3] = _mm256_shuffle_epi32(sc03, 0xFF);
    sub[4] = _mm256_shuffle_epi32(sc47, 0x00), sub[5] = _mm256_shuffle_epi32(sc47, 0x55);
    sub[6] = _mm256_shuffle_epi32(sc47, 0xAA), sub[7] = _mm256_shuffle_epi32(sc47, 0xFF);
    __m256i isum[4];
    for (int j = 0; j < nc; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        const __m256i slo = sub[2 * c], shi = sub[2 * c + 1];
        for (int j = 0; j < nc; j++) {
            const char *aj = a + (size_t)j * act_stride;
            const __m256i plo = _mm256_maddubs_epi16(
                lo, _mm256_loadu_si256((const __m256i *)(aj + 32 * pos[2 * c])));
            const __m256i phi = _mm256_maddubs_epi16(
                hi, _mm256_loadu_si256((const __m256i *)(aj + 32 * pos[2 * c + 1])));
            isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(plo, slo),
                                                                 _mm256_madd_epi16(phi, shi)));
        }
    }
    /* d and dmin (adjacent F16s) in one conversion, times the column's scale */
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(cllm_load_i32((const char *)&b->d)));
    const __m128i mn16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)mn8));
    for (int j = 0; j < nc; j++) {
        const char *aj = a + (size_t)j * act_stride;
        const __m128 f = _mm_mul_ps(dd, _mm_broadcast_ss((const float *)(const void *)(aj + 272)));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_broadcastss_ps(f), acc[j]);
        const __m128i mins = _mm_madd_epi16(mn16, _mm_loadu_si128((const __m128i *)(aj + 256)));
        accm[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_permute_ps(f, 0x55), accm[j]);
    }
}

/* out[c * out_stride] = dot(row, act + c * act_stride) for c < nc (<= 4). */
GY_INLINE void gy_gemv_q4_k_n(int nc, int64_t K, const void *row, const char *act,
                              size_t act_stride, float *out, size_t out_stride) {
    const cllm_block_q4_K *x = row;
    __m256 acc[4];
    __m128 accm[4];
    for (int j = 0; j < nc; j++) acc[j] = _mm256_setzero_ps(), accm[j] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const cllm_block_q4_K *b = x + sb;
        _mm_prefetch((const char *)b + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch((const char *)b + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
        gy_q4k_sb(nc, b, act + (size_t)sb * 288, act_stride, acc, accm);
    }
    for (int j = 0; j < nc; j++)
        out[(size_t)j * out_stride] =
            gv_hsum(_mm256_sub_ps(acc[j], _mm256_zextps128_ps256(accm[j])));
}

/* Two rows (row, row + row_stride) against one column, each summed as
 * gy_gemv_q4_k sums it (the same bits): each activation super-block serves
 * both rows, and their ends share one reduction, in gv_hsum's order (the
 * halves, then lanes 0 + 2 and 1 + 3, then those two). Rows of 2,048
 * elements are 8 super-blocks. The prefetch runs along both rows as one
 * stream, as gv_gemv_2r's. */
static void gy_gemv_q4_k_2r(int64_t K, const char *row, size_t row_stride, const char *act,
                            float *out) {
    const cllm_block_q4_K *x0 = (const cllm_block_q4_K *)row;
    const cllm_block_q4_K *x1 = (const cllm_block_q4_K *)(row + row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    __m128 accm0 = _mm_setzero_ps(), accm1 = accm0;
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const char *pf = row + 2 * (size_t)sb * sizeof(cllm_block_q4_K) + CLLM_CPU_PREFETCH_AHEAD;
        for (int l = 0; l < 5; l++) _mm_prefetch(pf + 64 * l, CLLM_CPU_PREFETCH_HINT);
        const char *a = act + (size_t)sb * 288;
        gy_q4k_sb(1, x0 + sb, a, 0, &acc0, &accm0);
        gy_q4k_sb(1, x1 + sb, a, 0, &acc1, &accm1);
    }
    const __m256 v0 = _mm256_sub_ps(acc0, _mm256_zextps128_ps256(accm0));
    const __m256 v1 = _mm256_sub_ps(acc1, _mm256_zextps128_ps256(accm1));
    const __m256 h =
        _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
    const __m256 q = _mm256_add_ps(h, _mm256_permute_ps(h, 0x0E));
    const __m256 r = _mm256_add_ps(q, _mm256_permute_ps(q, 0x01));
    out[0] = _mm256_cvtss_f32(r);
    out[1] = _mm_cvtss_f32(_mm256_extractf128_ps(r, 1));
}

static void gy_gemv_q4_k(int64_t K, const void *row, const void *act, float *out) {
    gy_gemv_q4_k_n(1, K, row, act, 0, out, 0);
}

/* Any number of columns of a Q4_K row, up to 4 at a time. With 4
 * sequences of TinyLlama Q4_K each weight row was unpacked 4 times. */
static void gy_gemv_q4_k_cols(int64_t K, const void *row, const char *act, size_t act_stride, int n,
                              float *out, size_t out_stride) {
    for (int c0 = 0; c0 < n; c0 += 4) {
        const char *a = act + (size_t)c0 * act_stride;
        float *o = out + (size_t)c0 * out_stride;
        switch (n - c0 < 4 ? n - c0 : 4) {
        case 1: gy_gemv_q4_k_n(1, K, row, a, act_stride, o, out_stride); break;
        case 2: gy_gemv_q4_k_n(2, K, row, a, act_stride, o, out_stride); break;
        case 3: gy_gemv_q4_k_n(3, K, row, a, act_stride, o, out_stride); break;
        default: gy_gemv_q4_k_n(4, K, row, a, act_stride, o, out_stride); break;
        }
    }
}

/* n columns; Q4_K up to 4 at a time (called here directly: through
 * cllm_cpu_gemv_kernel, every weight row would pay the level look-up). */
void cllm_cpu_gemv_n_avx2(cllm_type type, int64_t K, const void *row, const void *act,
                          size_t act_stride, int n, float *out, size_t out_stride) {
    if (type == CLLM_TYPE_Q4_K) {
        gy_gemv_q4_k_cols(K, row, act, act_stride, n, out, out_stride);
    } else {
        gv_gemv_type(type, K, row, act, act_stride, n, out, out_stride);
    }
}

void cllm_cpu_gemv_rows_avx2(cllm_type type, int64_t K, const void *row, size_t row_stride, int nr,
                             const void *act, size_t act_stride, int nc, const void *cols,
                             size_t cols_stride, float *out, size_t out_stride) {
    gv_gemv_rows_type(type, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                      out_stride);
}

void cllm_cpu_gemv_rows_q4k_avx2(int64_t K, const void *row, size_t row_stride, int nr,
                                 const void *act, float *out) {
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        gy_gemv_q4_k_2r(K, (const char *)row + (size_t)r * row_stride, row_stride, act, out + r);
    for (; r < nr; r++) gy_gemv_q4_k(K, (const char *)row + (size_t)r * row_stride, act, out + r);
}

void cllm_cpu_gemv_avx2(cllm_type type, int64_t K, const void *row, const void *act, float *out) {
    if (type == CLLM_TYPE_Q4_K) {
        gy_gemv_q4_k(K, row, act, out);
    } else {
        gv_gemv_type(type, K, row, act, 0, 1, out, 0);
    }
}

CLLM_X86_TARGET_END

#endif /* x86 */
