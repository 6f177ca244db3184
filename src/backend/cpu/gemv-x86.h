/*
 * The one-column kernels of Q4_0 / Q4_1 (generation) at 256 bits, for two
 * levels: included by gemm-avx2.c with GV_VNNI 0 (AVX2: vpmaddubsw, then
 * vpmaddwd against ones) and by gemm-avx512.c with GV_VNNI 1 (vpdpbusd on
 * ymm registers, AVX512-VL + VNNI), each after its target pragma. Both read
 * the activation layout of gemm.h (per 128 elements: 4 blocks' low halves,
 * their high halves, per-lane -8 sums, per-lane scales, per-block d * sum)
 * half a group at a time: two weight blocks' 16 bytes of nibbles in the two
 * 128-bit lanes, so their low nibbles meet elements 0..15 and their high
 * nibbles elements 16..31 of the two blocks.
 *
 * Per two blocks: the int32 sums of 4 adjacent products of each lane (the
 * -8 sums added for Q4_0): two vpmaddubsw summed in s16 (u <= 15, no
 * saturation), one vpmaddwd and one add, or two vpdpbusd; the two give the
 * same integers. Then one conversion, two multiplies (activation and weight
 * scales) and one FMA; Q4_1 adds one FMA of its mins with the d * sum lanes.
 * So the two levels' results are equal bit for bit.
 *
 * gv_gemv_n does nc columns against one row: the row's nibbles and scales
 * are unpacked once per pair of blocks for all of them, and each column is
 * summed on its own in the order of nc = 1 (pairs of blocks alternating
 * between two accumulators, a pair after the last group of 4 in the first),
 * so each result is the one-column kernel's, bit for bit.
 *
 * Why 256 bits at the AVX-512 level: on CPUs that run 512-bit operations as
 * two 256-bit halves (AMD Zen 4), this kernel generated TinyLlama Q4_0 at
 * 30.5 tokens/s with 1 thread and 50.8 with 2, the 512-bit one (gemm-avx512.c)
 * at 26.1 and 42.1 (cllm_cpu_prefer_256 chooses).
 */
#ifndef CLLM_BACKEND_CPU_GEMV_X86_H
#define CLLM_BACKEND_CPU_GEMV_X86_H

#ifndef GV_VNNI
#error "define GV_VNNI (0: AVX2, 1: AVX512-VL + VNNI) before including gemv-x86.h"
#endif

#include "backend/cpu/kernels.h" /* CLLM_CPU_PREFETCH_AHEAD, cllm_type */

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define GV_INLINE static inline __attribute__((always_inline))
/* Columns at once: per column 2 float accumulators, and for Q4_1 2 more
 * for its mins. The AVX-512 level (32 registers) keeps them all; the AVX2
 * level (16) packs the min sums of its 4 columns into two registers
 * (GV_PACK_MINS): a column's own min sum is nonzero only in lanes 0 and 4
 * (its activations' d * sum lanes; the others stay +0 while the weight
 * scales are finite), so column c's goes in lanes c and
 * 4 + c, each lane updated by the same FMA with the same operands as
 * alone, and is moved back to lanes 0 and 4, beside +0, at the end (one
 * column alone keeps its own). With 2 columns at a time a step of 4
 * sequences unpacked every weight row twice: bench_gemm, Zen 3, ns per row
 * and column with 4 columns, Q4_1 82-84 -> 70-71, Q4_0 79-87 -> 61-63. */
#define GV_COLS      4
#define GV_PACK_MINS (!GV_VNNI)

/* Weight scales (and Q4_1 mins) of blocks b and b + 1 (or 0 past the row)
 * in lanes 0..3 and 4..7: each block's halves broadcast from memory, one
 * blend, one conversion (and for Q4_1 two in-lane shuffles). Before, the
 * halves were gathered in a general register and spread by two cross-lane
 * permutes (vpermps: slow on Zen 3, and on the path to every FMA). The
 * values, and so the sums, are the same; gv_gemv_2r says what it gained. */
GV_INLINE void gv_scales(bool q41, const char *x0, size_t bsz, bool two, __m256 *dw, __m256 *mw) {
    if (q41) { /* d, m of block b in every 32-bit lane of lanes 0..1, b + 1's in 2..3 */
        const __m128i h0 = _mm_castps_si128(_mm_broadcast_ss((const float *)x0));
        const __m128i h1 = two ? _mm_castps_si128(_mm_broadcast_ss((const float *)(x0 + bsz)))
                               : _mm_setzero_si128();
        const __m256 f = _mm256_cvtph_ps(_mm_blend_epi32(h0, h1, 0xC)); /* d m d m | d' m' d' m' */
        *dw = _mm256_shuffle_ps(f, f, 0x88);
        *mw = _mm256_shuffle_ps(f, f, 0xDD);
    } else {
        uint16_t d0, d1 = 0;
        memcpy(&d0, x0, 2);
        if (two) memcpy(&d1, x0 + bsz, 2);
        *dw = _mm256_cvtph_ps(
            _mm_blend_epi32(_mm_set1_epi16((short)d0), _mm_set1_epi16((short)d1), 0xC));
    }
}

/* Lanes c and 4 + c. */
GV_INLINE __m256i gv_lane_pair(int c) {
    return _mm256_cmpeq_epi32(_mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3), _mm256_set1_epi32(c));
}

/* The nibbles of blocks b and b + 1 (or 0 past the row): the low ones of
 * each block in its 128-bit lane of *lo, the high ones in *hi. */
GV_INLINE void gv_unpack(bool q41, const char *x0, size_t bsz, bool two, __m256i *lo, __m256i *hi) {
    const size_t qoff = q41 ? 4 : 2;
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(x0 + qoff));
    const __m128i q1 =
        two ? _mm_loadu_si128((const __m128i *)(x0 + bsz + qoff)) : _mm_setzero_si128();
    const __m256i v = _mm256_set_m128i(q1, q0), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}

/* The int32 sums of 4 adjacent products per lane against one column's
 * halves ga, gb (z8: Q4_0's -8 sums, added). */
GV_INLINE __m256i gv_isum(bool q41, __m256i lo, __m256i hi, __m256i ga, __m256i gb, __m256i z8) {
#if GV_VNNI
    __m256i sum = q41 ? _mm256_setzero_si256() : z8;
    sum = _mm256_dpbusd_epi32(sum, lo, ga);
    return _mm256_dpbusd_epi32(sum, hi, gb);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ga), _mm256_maddubs_epi16(hi, gb));
    const __m256i sum = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    return q41 ? sum : _mm256_add_epi32(sum, z8);
#endif
}

/* Two blocks (b, and b + 1 when `two`) against nc columns: g is the pair's
 * place in column 0's activations, act_stride the bytes between columns.
 * Q4_1's min sums: accm[c], or with GV_PACK_MINS all in accm[0]. */
GV_INLINE void gv_pair(bool q41, int nc, const char *x0, size_t bsz, bool two, const char *g,
                       size_t act_stride, __m256 *acc, __m256 *accm) {
    __m256i lo, hi;
    gv_unpack(q41, x0, bsz, two, &lo, &hi);
    __m256 dw, mw;
    gv_scales(q41, x0, bsz, two, &dw, &mw);
    __m256 dsums = _mm256_setzero_ps(); /* GV_PACK_MINS: column c's in lanes c, 4 + c */
    (void)dsums;
    for (int c = 0; c < nc; c++) {
        const char *gc = g + (size_t)c * act_stride;
        const __m256i sum =
            gv_isum(q41, lo, hi, _mm256_loadu_si256((const __m256i *)gc),
                    _mm256_loadu_si256((const __m256i *)(gc + 64)),
                    q41 ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(gc + 128)));
        const __m256 da = _mm256_loadu_ps((const float *)(gc + 192));
        acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), da), dw, acc[c]);
        if (q41 && GV_PACK_MINS && nc > 1) {
            dsums = _mm256_or_ps(
                dsums, _mm256_maskload_ps((const float *)(gc + 256) - c, gv_lane_pair(c)));
        } else if (q41) {
            accm[c] = _mm256_fmadd_ps(mw, _mm256_loadu_ps((const float *)(gc + 256)), accm[c]);
        }
    }
    if (q41 && GV_PACK_MINS && nc > 1) accm[0] = _mm256_fmadd_ps(mw, dsums, accm[0]);
}

GV_INLINE float gv_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[c * out_stride] = dot(row, act + c * act_stride) for c < nc (<= GV_COLS,
 * a constant after inlining). */
GV_INLINE void gv_gemv_n(bool q41, int nc, int64_t K, const char *row, const char *act,
                         size_t act_stride, float *out, size_t out_stride) {
    const size_t bsz = q41 ? 20 : 18, group = 320;
    const int64_t nb = K / 32;
    __m256 a0[GV_COLS], a1[GV_COLS], m0[GV_COLS], m1[GV_COLS];
    for (int c = 0; c < nc; c++) a0[c] = a1[c] = m0[c] = m1[c] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * bsz, *g = act + (size_t)(b / 4) * group;
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD + 64, _MM_HINT_T0);
        gv_pair(q41, nc, x0, bsz, true, g, act_stride, a0, m0);
        gv_pair(q41, nc, x0 + 2 * bsz, bsz, true, g + 32, act_stride, a1, m1);
    }
    for (; b < nb; b += 2) {
        const char *g = act + (size_t)(b / 4) * group + 32 * ((b % 4) / 2);
        gv_pair(q41, nc, row + (size_t)b * bsz, bsz, b + 1 < nb, g, act_stride, a0, m0);
    }
    if (GV_PACK_MINS && nc > 1) {
        const __m256 m = _mm256_add_ps(m0[0], m1[0]);
        for (int c = 0; c < nc; c++) {
            const __m256i lanes = _mm256_setr_epi32(c, c, c, c, 4 + c, 4 + c, 4 + c, 4 + c);
            const __m256 mc =
                _mm256_blend_ps(_mm256_setzero_ps(), _mm256_permutevar8x32_ps(m, lanes), 0x11);
            out[(size_t)c * out_stride] = gv_hsum(_mm256_add_ps(_mm256_add_ps(a0[c], a1[c]), mc));
        }
        return;
    }
    for (int c = 0; c < nc; c++) {
        out[(size_t)c * out_stride] =
            gv_hsum(_mm256_add_ps(_mm256_add_ps(a0[c], a1[c]), _mm256_add_ps(m0[c], m1[c])));
    }
}

/* Two blocks of one row against one column whose activations (ga, gb: the
 * two halves; z8: Q4_0's -8 sums; da: scales; ds: Q4_1's d * sums) are
 * loaded: gv_pair's steps for nc = 1, in its order. */
GV_INLINE void gv_pair_row(bool q41, const char *x0, size_t bsz, bool two, __m256i ga, __m256i gb,
                           __m256i z8, __m256 da, __m256 ds, __m256 *acc, __m256 *accm) {
    __m256i lo, hi;
    gv_unpack(q41, x0, bsz, two, &lo, &hi);
    __m256 dw, mw;
    gv_scales(q41, x0, bsz, two, &dw, &mw);
    const __m256i sum = gv_isum(q41, lo, hi, ga, gb, z8);
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), da), dw, *acc);
    if (q41) *accm = _mm256_fmadd_ps(mw, ds, *accm);
}

/* Two blocks of rows x and y against one column (g: the pair's place in
 * its activations), which is loaded once for both. */
GV_INLINE void gv_pair_2r(bool q41, const char *x0, const char *y0, size_t bsz, bool two,
                          const char *g, __m256 *ax, __m256 *mx, __m256 *ay, __m256 *my) {
    const __m256i ga = _mm256_loadu_si256((const __m256i *)g);
    const __m256i gb = _mm256_loadu_si256((const __m256i *)(g + 64));
    const __m256i z8 =
        q41 ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(g + 128));
    const __m256 da = _mm256_loadu_ps((const float *)(g + 192));
    const __m256 ds = q41 ? _mm256_loadu_ps((const float *)(g + 256)) : _mm256_setzero_ps();
    gv_pair_row(q41, x0, bsz, two, ga, gb, z8, da, ds, ax, mx);
    gv_pair_row(q41, y0, bsz, two, ga, gb, z8, da, ds, ay, my);
}

/* out[0] and out[1]: rows `row` and `row + row_stride` against one column,
 * each summed in gv_gemv_n's order (so each is the one-column kernel's
 * result, bit for bit). Each column load serves two rows, and the loop has
 * two rows' independent work to overlap. One Zen 3 core streaming rows
 * from memory (a one-off harness, Q4_1 / Q4_0): 576-element rows 3 % / 7 %
 * faster than one row at a time, 10 % / 12 % with gv_scales' loads;
 * 1,536-element rows 1 % / 3 %, and 2 % / 16 %. Whole generation steps
 * gained more (SmolLM2 and TinyLlama Q4_0, 1 and 2 threads: 12-38 %). The
 * prefetch runs along both rows as one stream (rows of a matrix follow each
 * other): prefetching each row on its own, two rows of 1,536 elements ran
 * 16-23 % slower than one at a time. */
GV_INLINE void gv_gemv_2r(bool q41, int64_t K, const char *row, size_t row_stride, const char *act,
                          float *out) {
    const size_t bsz = q41 ? 20 : 18, group = 320;
    const int64_t nb = K / 32;
    const char *row1 = row + row_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
    __m256 b0 = a0, b1 = a0, n0 = a0, n1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * bsz, *y0 = row1 + (size_t)b * bsz;
        const char *g = act + (size_t)(b / 4) * group;
        const char *pf = row + 2 * (size_t)b * bsz + CLLM_CPU_PREFETCH_AHEAD;
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        _mm_prefetch(pf + 128, _MM_HINT_T0);
        gv_pair_2r(q41, x0, y0, bsz, true, g, &a0, &m0, &b0, &n0);
        gv_pair_2r(q41, x0 + 2 * bsz, y0 + 2 * bsz, bsz, true, g + 32, &a1, &m1, &b1, &n1);
    }
    for (; b < nb; b += 2) {
        const char *g = act + (size_t)(b / 4) * group + 32 * ((b % 4) / 2);
        gv_pair_2r(q41, row + (size_t)b * bsz, row1 + (size_t)b * bsz, bsz, b + 1 < nb, g, &a0, &m0,
                   &b0, &n0);
    }
    out[0] = gv_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(m0, m1)));
    out[1] = gv_hsum(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(n0, n1)));
}

/* Any number of columns, GV_COLS at a time (constant counts, so that each
 * loop over them unrolls). */
GV_INLINE void gv_gemv_cols(bool q41, int64_t K, const char *row, const char *act,
                            size_t act_stride, int n, float *out, size_t out_stride) {
    for (int c0 = 0; c0 < n; c0 += GV_COLS) {
        const char *a = act + (size_t)c0 * act_stride;
        float *o = out + (size_t)c0 * out_stride;
        switch (n - c0 < GV_COLS ? n - c0 : GV_COLS) {
        case 1: gv_gemv_n(q41, 1, K, row, a, act_stride, o, out_stride); break;
        case 2: gv_gemv_n(q41, 2, K, row, a, act_stride, o, out_stride); break;
        case 3: gv_gemv_n(q41, 3, K, row, a, act_stride, o, out_stride); break;
        default: gv_gemv_n(q41, GV_COLS, K, row, a, act_stride, o, out_stride); break;
        }
    }
}

/* A level's entry point: n columns of a Q4_0 or Q4_1 row (n = 1: the
 * one-column kernel). */
GV_INLINE void gv_gemv_type(cllm_type type, int64_t K, const void *row, const void *act,
                            size_t act_stride, int n, float *out, size_t out_stride) {
    if (type == CLLM_TYPE_Q4_1) {
        gv_gemv_cols(true, K, row, act, act_stride, n, out, out_stride);
    } else {
        gv_gemv_cols(false, K, row, act, act_stride, n, out, out_stride);
    }
}

/* nr rows (row_stride bytes apart) x nc columns: out[r + c * out_stride].
 * One column goes two rows at a time; several columns one row at a time
 * (gv_gemv_cols: the row unpacked once for 4 columns). */
GV_INLINE void gv_gemv_rows_q(bool q41, int64_t K, const char *row, size_t row_stride, int nr,
                              const char *act, size_t act_stride, int nc, float *out,
                              size_t out_stride) {
    int r = 0;
    if (nc == 1) {
        for (; r + 2 <= nr; r += 2)
            gv_gemv_2r(q41, K, row + (size_t)r * row_stride, row_stride, act, out + r);
    }
    for (; r < nr; r++)
        gv_gemv_cols(q41, K, row + (size_t)r * row_stride, act, act_stride, nc, out + r,
                     out_stride);
}

/* A level's entry point for a tile of Q4_0 or Q4_1 rows. */
GV_INLINE void gv_gemv_rows_type(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                 int nr, const void *act, size_t act_stride, int nc, float *out,
                                 size_t out_stride) {
    if (type == CLLM_TYPE_Q4_1) {
        gv_gemv_rows_q(true, K, row, row_stride, nr, act, act_stride, nc, out, out_stride);
    } else {
        gv_gemv_rows_q(false, K, row, row_stride, nr, act, act_stride, nc, out, out_stride);
    }
}

#endif /* CLLM_BACKEND_CPU_GEMV_X86_H */
