/*
 * The one-column kernels of Q4_0 / Q4_1 / Q5_0 (generation) at 256 bits, for
 * two levels (and of Q8_0: its section below):
 * included by gemm-avx2.c with GV_VNNI 0 (AVX2: vpmaddubsw, then
 * vpmaddwd against ones), by gemm-avx512.c with GV_VNNI 1 (vpdpbusd on
 * ymm registers, AVX512-VL + VNNI) and by gemm-avxvnni.c with GV_VNNI 2
 * (the same instruction in AVX-VNNI's VEX form), each after its target
 * pragma. All read
 * the activation layout of gemm.h (per 128 elements: 4 blocks' low halves,
 * their high halves, per-lane -8 sums, per-lane scales, per-block d * sum)
 * half a group at a time: two weight blocks' 16 bytes of nibbles in the two
 * 128-bit lanes, so their low nibbles meet elements 0..15 and their high
 * nibbles elements 16..31 of the two blocks.
 *
 * Per two blocks and column: the int32 sums of 4 adjacent products of each
 * lane (the -8 sums added for Q4_0): two vpmaddubsw summed in s16 (u <= 15,
 * no saturation), one vpmaddwd and one add, or two vpdpbusd; the two give
 * the same integers. The 4 lanes of each block are then added up in
 * integers (exact), so each block's sum lands in one lane: up to 4 columns
 * (or 2 rows of one column) share one vector, lane c of each 128-bit half
 * (gv_red; at the AVX2 level, with packed column scales, the words are
 * added in s16 first and one vpmaddwd serves 4 columns: gv_red16, the same
 * integers). Then one conversion and one FMA with the product of the
 * activation and weight scales, for all of them at once; Q4_1 adds one FMA
 * of its mins against the d * sum of each column's block, and Q5_0 the same
 * with -16 d for the min (its u <= 31: no saturation either, but the s16
 * sums of 4 columns could pass 32,767, so it keeps gv_red). So the two
 * levels' results are equal bit for bit, and every lane computes the same
 * float operations whichever columns or rows share its vector: a column's
 * result is the same whether it runs alone, beside 3 others, or as one of
 * two rows (test_kernels checks it).
 *
 * Why 256 bits at the AVX-512 level (Q5_0 and Q8_0, which have no 512-bit
 * kernel, Q4_0 / Q4_1 rows shorter than 1,024 elements: gemv_ymm in
 * gemv.c): on CPUs that run 512-bit operations as two 256-bit halves this
 * kernel is faster than the 512-bit one (gemm-avx512.c), which pays twice
 * for every operation there (cllm_cpu_prefer_256 chooses).
 */
#ifndef CLLM_BACKEND_CPU_GEMV_X86_H
#define CLLM_BACKEND_CPU_GEMV_X86_H

#ifndef GV_VNNI
#error "define GV_VNNI (0: AVX2, 1: AVX512-VL + VNNI, 2: AVX-VNNI) before including gemv-x86.h"
#endif
/* acc + the sums of 4 adjacent u8 x s8 products per int32 lane */
#if GV_VNNI == 2
#define GV_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#elif GV_VNNI
#define GV_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#endif

#include "backend/cpu/gemm.h"       /* cllm_cpu_gemv_q8_scales */
#include "backend/cpu/isa.h"        /* CLLM_CPU_PREFETCH_AHEAD */
#include "backend/cpu/x86/target.h" /* CLLM_X86_KEEP */
#include "backend/cpu/x86/vec-avx2.h"
#include "core/quants.h" /* cllm_block_q8_K */

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define GV_INLINE static inline __attribute__((always_inline))
/* Columns at once: one lane of each 128-bit half per column. */
#define GV_COLS 4

/* The kernel of each type (a constant after inlining). Q5_0 takes Q4_1's
 * float steps, its offset of -16 as the min: d (u - 16) = d u + (-16 d). */
enum gv_kind { GV_Q4_0, GV_Q4_1, GV_Q5_0, GV_Q8_0 };
/* Q4_1's float steps (a min against each block's d * sum) */
#define GV_MIN(kind) ((kind) == GV_Q4_1 || (kind) == GV_Q5_0)
/* bytes per block */
#define GV_BSZ(kind) ((kind) == GV_Q4_0 ? 18 : (kind) == GV_Q4_1 ? 20 : 22)

/* Weight scales (and Q4_1 mins) of blocks b and b + 1 (or 0 past the row)
 * in lanes 0..3 and 4..7: each block's halves broadcast from memory, one
 * blend, one conversion (and for Q4_1 two in-lane shuffles), and no
 * cross-lane permute: vpermps is slow on some CPUs (Zen 3) and would sit on
 * the path to every FMA. */
GV_INLINE void gv_scales(enum gv_kind kind, const char *x0, size_t bsz, bool two, __m256 *dw,
                         __m256 *mw) {
    if (kind == GV_Q4_1) { /* d, m of block b in every 32-bit lane of lanes 0..1, b + 1's in 2..3 */
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
        /* Q5_0: -16 d (exact); Q4_0: unused */
        *mw = kind == GV_Q5_0 ? _mm256_mul_ps(*dw, _mm256_set1_ps(-16.0f)) : *dw;
    }
}

/* The nibbles of blocks b and b + 1 (or 0 past the row): the low ones of
 * each block in its 128-bit lane of *lo, the high ones in *hi; Q5_0's fifth
 * bits above them (qh bit j for element j: byte j of *lo, j - 16 of *hi). */
GV_INLINE void gv_unpack(enum gv_kind kind, const char *x0, size_t bsz, bool two, __m256i *lo,
                         __m256i *hi) {
    const size_t qoff = kind == GV_Q4_0 ? 2 : kind == GV_Q4_1 ? 4 : 6;
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(x0 + qoff));
    const __m128i q1 =
        two ? _mm_loadu_si128((const __m128i *)(x0 + bsz + qoff)) : _mm_setzero_si128();
    const __m256i v = _mm256_set_m128i(q1, q0), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (kind == GV_Q5_0) {
        int32_t h0, h1 = 0;
        memcpy(&h0, x0 + 2, 4);
        if (two) memcpy(&h1, x0 + bsz + 2, 4);
        const __m256i qh = _mm256_set_m128i(_mm_set1_epi32(h1), _mm_set1_epi32(h0));
        /* byte j of each lane: the qh byte that holds its bit */
        const __m256i pick_lo = _mm256_set_epi64x(0x0101010101010101, 0, 0x0101010101010101, 0);
        const __m256i pick_hi = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                  0x0303030303030303, 0x0202020202020202);
        *lo = _mm256_or_si256(*lo, cllm_q5_bits256(qh, pick_lo));
        *hi = _mm256_or_si256(*hi, cllm_q5_bits256(qh, pick_hi));
    }
}

/* The int32 sums of 4 adjacent products per lane against one column's
 * halves ga, gb (z8: Q4_0's -8 sums, added). */
GV_INLINE __m256i gv_isum(bool q41, __m256i lo, __m256i hi, __m256i ga, __m256i gb, __m256i z8) {
#if GV_VNNI
    __m256i sum = q41 ? _mm256_setzero_si256() : z8;
    sum = GV_DPBUSD(sum, lo, ga);
    return GV_DPBUSD(sum, hi, gb);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ga), _mm256_maddubs_epi16(hi, gb));
    const __m256i sum = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    return q41 ? sum : _mm256_add_epi32(sum, z8);
#endif
}

#if !GV_VNNI
/* One column's two vpmaddubsw of a pair, summed in s16: 16 sums of 4
 * adjacent products (each at most 2 * 2 * 15 * 127 = 7,620 in magnitude). */
GV_INLINE __m256i gv_psum16(__m256i lo, __m256i hi, const char *gc) {
    return _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)gc)),
        _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(gc + 64))));
}

/* gv_red's result for 4 columns from their s16 sums p0..p3: the sums of
 * each column's 8 words per half are brought together in s16 first (4 words
 * per sum: at most 30,480, no overflow), so one vpmaddwd serves all 4
 * columns where gv_red's input takes one per column. The same integers,
 * 3 fewer operations per pair of blocks. */
GV_INLINE __m256i gv_red16(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    const __m256i q01 =
        _mm256_add_epi16(_mm256_unpacklo_epi32(p0, p1), _mm256_unpackhi_epi32(p0, p1));
    const __m256i q23 =
        _mm256_add_epi16(_mm256_unpacklo_epi32(p2, p3), _mm256_unpackhi_epi32(p2, p3));
    const __m256i q =
        _mm256_add_epi16(_mm256_unpacklo_epi64(q01, q23), _mm256_unpackhi_epi64(q01, q23));
    return _mm256_madd_epi16(q, _mm256_set1_epi16(1));
}
#endif

/* The block sums of up to 4 columns' (or rows') lane sums s0..s3 (those
 * past nc ignored): lane c of each 128-bit half holds the sum of s_c's 4
 * lanes in that half (exact). With nc = 1 every lane holds it. */
GV_INLINE __m256i gv_red(int nc, __m256i s0, __m256i s1, __m256i s2, __m256i s3) {
    if (nc == 1) {
        const __m256i t = _mm256_add_epi32(s0, _mm256_shuffle_epi32(s0, 0x4E));
        return _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0xB1));
    }
    /* lanes: s0 of 0 + 2, s1 of 0 + 2, s0 of 1 + 3, s1 of 1 + 3 */
    const __m256i t01 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(s0, s1), _mm256_unpackhi_epi32(s0, s1));
    if (nc == 2) return _mm256_add_epi32(t01, _mm256_shuffle_epi32(t01, 0x4E));
    const __m256i t23 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(s2, s3), _mm256_unpackhi_epi32(s2, s3));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
}

/* v with lane c of each half taken from x (c = 0: all of x), c a constant
 * after unrolling: a column's scales into its lane. */
GV_INLINE __m256 gv_lane_c(__m256 v, __m256 x, int c) {
    switch (c) {
    case 0: return x;
    case 1: return _mm256_blend_ps(v, x, 0x22);
    case 2: return _mm256_blend_ps(v, x, 0x44);
    default: return _mm256_blend_ps(v, x, 0x88);
    }
}

/* The float steps of a pair of blocks for every lane at once: u the block
 * sums, da the activation scales, dw the weight scales (and Q4_1: mw the
 * mins, ds the activations' d * sums), each lane's as gv_red placed it.
 * The product of the two scales does not wait for the integer sums, so the
 * chain from the sums to the accumulator is one conversion and one FMA
 * (shorter than sum * da, then * dw, where rows sit in the cache). */
GV_INLINE void gv_fma(bool q41, __m256i u, __m256 da, __m256 dw, __m256 mw, __m256 ds, __m256 *acc,
                      __m256 *accm) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), _mm256_mul_ps(da, dw), *acc);
    if (q41) *accm = _mm256_fmadd_ps(mw, ds, *accm);
}

/* Two blocks (b, and b + 1 when `two`) against nc columns (g: the pair's
 * place in column 0's activations, act_stride the bytes between columns):
 * column c in lane c of each half. The columns' scales come packed (pk:
 * the pair's 64 bytes of cllm_cpu_gemv_cols_pack, Q4_0's -8 sums added once
 * to the block sums) or, with pk NULL, from each column's row: its
 * activation scales fill its block's half, so a blend takes lane c; its
 * d * sum sits in lane 0 of the half and is moved to lane c; Q4_0's -8 sums
 * go into each column's lane sums. Both give the same integers and floats. */
GV_INLINE void gv_pair(enum gv_kind kind, int nc, const char *x0, size_t bsz, bool two,
                       const char *g, size_t act_stride, const char *pk, __m256 *acc,
                       __m256 *accm) {
    const bool q41 = GV_MIN(kind);
    __m256i lo, hi;
    gv_unpack(kind, x0, bsz, two, &lo, &hi);
    __m256 dw, mw;
    gv_scales(kind, x0, bsz, two, &dw, &mw);
    const bool z8_lanes = !q41 && !pk; /* Q4_0's -8 sums per lane */
#if !GV_VNNI
    /* (Q5_0's s16 sums of 4 columns could pass 32,767: gv_red's way) */
    const bool red16 = pk && kind != GV_Q5_0;
#endif
    __m256i s[GV_COLS];
    __m256 da = _mm256_setzero_ps(), ds = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++) {
        const char *gc = g + (size_t)c * act_stride;
#if !GV_VNNI
        if (red16) { /* s16 sums, reduced by gv_red16 */
            s[c] = gv_psum16(lo, hi, gc);
            continue;
        }
#endif
        s[c] = gv_isum(!z8_lanes, lo, hi, _mm256_loadu_si256((const __m256i *)gc),
                       _mm256_loadu_si256((const __m256i *)(gc + 64)),
                       z8_lanes ? _mm256_loadu_si256((const __m256i *)(gc + 128))
                                : _mm256_setzero_si256());
        if (pk) continue;
        const __m256 dac = _mm256_loadu_ps((const float *)(gc + 192));
        da = gv_lane_c(da, dac, c);
        if (q41) {
            const __m256i dsc = _mm256_loadu_si256((const __m256i *)(gc + 256));
            switch (c) {
            case 0: ds = _mm256_castsi256_ps(dsc); break;
            case 1: ds = _mm256_or_ps(ds, _mm256_castsi256_ps(_mm256_slli_si256(dsc, 4))); break;
            case 2: ds = _mm256_or_ps(ds, _mm256_castsi256_ps(_mm256_slli_si256(dsc, 8))); break;
            default: ds = _mm256_or_ps(ds, _mm256_castsi256_ps(_mm256_slli_si256(dsc, 12))); break;
            }
        }
    }
    for (int c = nc; c < GV_COLS; c++) s[c] = s[0];
#if !GV_VNNI
    __m256i u = red16 ? gv_red16(s[0], s[1], s[2], s[3]) : gv_red(nc, s[0], s[1], s[2], s[3]);
#else
    __m256i u = gv_red(nc, s[0], s[1], s[2], s[3]);
#endif
    if (pk) {
        da = _mm256_loadu_ps((const float *)pk);
        ds = _mm256_loadu_ps((const float *)(pk + 32));
        if (!q41) u = _mm256_add_epi32(u, _mm256_castps_si256(ds)); /* the -8 sums */
    }
    gv_fma(q41, u, da, dw, mw, ds, acc, accm);
}

/* The results of lanes 0..3: (a0 + a1) + (m0 + m1), then half 0 + half 1. */
GV_INLINE __m128 gv_lanes(__m256 a0, __m256 a1, __m256 m0, __m256 m1) {
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(m0, m1));
    return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

GV_INLINE float gv_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[c * out_stride] = dot(row, act + c * act_stride) for c < nc (<= GV_COLS,
 * a constant after inlining). Pairs of blocks alternate between two
 * accumulators (a pair after the last group of 4 in the first). */
GV_INLINE void gv_gemv_n(enum gv_kind kind, int nc, int64_t K, const char *row, const char *act,
                         size_t act_stride, const char *pk, float *out, size_t out_stride) {
    const size_t bsz = GV_BSZ(kind), group = 320;
    const int64_t nb = K / 32;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * bsz, *g = act + (size_t)(b / 4) * group;
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
        if (pk) { /* (two copies of the loop body, each with its source of scales) */
            gv_pair(kind, nc, x0, bsz, true, g, act_stride, pk + 32 * b, &a0, &m0);
            gv_pair(kind, nc, x0 + 2 * bsz, bsz, true, g + 32, act_stride, pk + 32 * b + 64, &a1,
                    &m1);
        } else {
            gv_pair(kind, nc, x0, bsz, true, g, act_stride, NULL, &a0, &m0);
            gv_pair(kind, nc, x0 + 2 * bsz, bsz, true, g + 32, act_stride, NULL, &a1, &m1);
        }
    }
    for (; b < nb; b += 2) {
        const char *g = act + (size_t)(b / 4) * group + 32 * ((b % 4) / 2);
        gv_pair(kind, nc, row + (size_t)b * bsz, bsz, b + 1 < nb, g, act_stride,
                pk ? pk + 32 * b : NULL, &a0, &m0);
    }
    float r[4];
    _mm_storeu_ps(r, gv_lanes(a0, a1, m0, m1));
    for (int c = 0; c < nc; c++) out[(size_t)c * out_stride] = r[c];
}

/* 32 bits at p in lane 0 (a plain load). */
GV_INLINE __m128i gv_load32(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
}

/* The weight scales (and Q4_1 mins) of blocks b and b + 1 (or 0 past the
 * row) of rows x and y, as gv_pair_2r's lanes want them: x's in lane 0 and
 * y's in lane 1 of each half (2 and 3: 0). The four blocks' first 32 bits
 * are interleaved, and one conversion serves both rows (the same values as
 * gv_scales gives each row). */
GV_INLINE void gv_scales_2r(bool q41, const char *x0, const char *y0, size_t bsz, bool two,
                            __m256 *dw, __m256 *mw) {
    const __m128i z = _mm_setzero_si128();
    const __m128i b1x = two ? gv_load32(x0 + bsz) : z, b1y = two ? gv_load32(y0 + bsz) : z;
    if (q41) { /* d, m of one block in 32 bits: dx mx dy my | dx' mx' dy' my' */
        const __m128i h = _mm_unpacklo_epi64(_mm_unpacklo_epi32(gv_load32(x0), gv_load32(y0)),
                                             _mm_unpacklo_epi32(b1x, b1y));
        const __m256 f = _mm256_cvtph_ps(h);
        *dw = _mm256_shuffle_ps(f, f, 0x88);
        *mw = _mm256_shuffle_ps(f, f, 0xDD);
    } else { /* d in the low 16 bits: dx dy . . | dx' dy' . ., the quants' words cleared */
        const __m128i h = _mm_unpacklo_epi64(_mm_unpacklo_epi16(gv_load32(x0), gv_load32(y0)),
                                             _mm_unpacklo_epi16(b1x, b1y));
        *dw = _mm256_cvtph_ps(_mm_blend_epi16(h, z, 0xCC));
        *mw = *dw; /* unused */
    }
}

/* Two blocks of rows x and y against one column (g: the pair's place in
 * its activations, loaded once for both): row x in lane 0 of each half,
 * row y in lane 1, each lane computing what gv_pair computes for the
 * column. */
GV_INLINE void gv_pair_2r(bool q41, const char *x0, const char *y0, size_t bsz, bool two,
                          const char *g, __m256 *acc, __m256 *accm) {
    const __m256i ga = _mm256_loadu_si256((const __m256i *)g);
    const __m256i gb = _mm256_loadu_si256((const __m256i *)(g + 64));
    const __m256i z8 =
        q41 ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(g + 128));
    __m256i lx, hx, ly, hy;
    const enum gv_kind kind = q41 ? GV_Q4_1 : GV_Q4_0;
    gv_unpack(kind, x0, bsz, two, &lx, &hx);
    gv_unpack(kind, y0, bsz, two, &ly, &hy);
    __m256 dw, mw;
    gv_scales_2r(q41, x0, y0, bsz, two, &dw, &mw);
    const __m256i sx = gv_isum(q41, lx, hx, ga, gb, z8), sy = gv_isum(q41, ly, hy, ga, gb, z8);
    __m256 ds = _mm256_setzero_ps();
    if (q41) {
        ds = _mm256_loadu_ps((const float *)(g + 256));
        ds = _mm256_shuffle_ps(ds, ds, 0); /* lane 0's d * sum in lanes 0 and 1 */
    }
    gv_fma(q41, gv_red(2, sx, sy, sx, sy), _mm256_loadu_ps((const float *)(g + 192)), dw, mw, ds,
           acc, accm);
}

/* out[0] and out[1]: rows `row` and `row + row_stride` against one column,
 * each summed as gv_gemv_n sums it (so each is the one-column kernel's
 * result, bit for bit). Each column load serves two rows, and the loop has
 * two rows' work to overlap. The prefetch runs along both rows as one
 * stream (rows of a matrix follow each other): prefetching each row on its
 * own would start two streams per pair and make two rows slower than
 * one at a time. */
GV_INLINE void gv_gemv_2r(bool q41, int64_t K, const char *row, size_t row_stride, const char *act,
                          float *out) {
    const size_t bsz = q41 ? 20 : 18, group = 320;
    const int64_t nb = K / 32;
    const char *row1 = row + row_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * bsz, *y0 = row1 + (size_t)b * bsz;
        const char *g = act + (size_t)(b / 4) * group;
        const char *pf = row + 2 * (size_t)b * bsz + CLLM_CPU_PREFETCH_AHEAD;
        _mm_prefetch(pf, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(pf + 64, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(pf + 128, CLLM_CPU_PREFETCH_HINT);
        gv_pair_2r(q41, x0, y0, bsz, true, g, &a0, &m0);
        gv_pair_2r(q41, x0 + 2 * bsz, y0 + 2 * bsz, bsz, true, g + 32, &a1, &m1);
    }
    for (; b < nb; b += 2) {
        const char *g = act + (size_t)(b / 4) * group + 32 * ((b % 4) / 2);
        gv_pair_2r(q41, row + (size_t)b * bsz, row1 + (size_t)b * bsz, bsz, b + 1 < nb, g, &a0,
                   &m0);
    }
    float r[4];
    _mm_storeu_ps(r, gv_lanes(a0, a1, m0, m1));
    out[0] = r[0];
    out[1] = r[1];
}

/* ---- Q8_0 weights (gemm.h's activations: pairs of blocks interleaved by
 * halves, then the blocks' float scales) -------------------------------------
 * Two blocks per step: elements 0..15 of blocks b and b + 1 in the two
 * 128-bit lanes of one register, 16..31 in another, for the weights (two
 * 16-byte loads each) as for the activations (one 32-byte load each). |w|
 * against the activations with w's sign (vpsignb; |w| <= 128 and |a| <=
 * 127, so a vpmaddubsw pair is at most 32,512: no saturation), one
 * vpmaddwd per half and an add give block b's sums in lanes 0..3 and b +
 * 1's in lanes 4..7; gv_red brings each column's block sum into lane c of
 * its half. The float steps are gv_fma's on those lanes, so a column's
 * result is the same alone or beside 3 others. */

/* The weight scales of blocks b and b + 1 (or 0 past the row) in lanes
 * 0..3 and 4..7. */
GV_INLINE __m128i gv_scale_halves_q8(const char *x0, bool two) { /* (before the conversion) */
    uint16_t d0, d1 = 0;
    memcpy(&d0, x0, 2);
    if (two) memcpy(&d1, x0 + 34, 2);
    return _mm_blend_epi32(_mm_set1_epi16((short)d0), _mm_set1_epi16((short)d1), 0xC);
}

GV_INLINE __m256 gv_scales_q8(const char *x0, bool two) {
    return _mm256_cvtph_ps(gv_scale_halves_q8(x0, two));
}

/* Bytes off..off + 15 of blocks b and b + 1 (or 0 past the row) in the two
 * lanes. */
GV_INLINE __m256i gv_halves_q8(const char *x0, size_t off, bool two) {
    const __m128i h0 = _mm_loadu_si128((const __m128i *)(x0 + 2 + off));
    const __m128i h1 =
        two ? _mm_loadu_si128((const __m128i *)(x0 + 36 + off)) : _mm_setzero_si128();
    return _mm256_set_m128i(h1, h0);
}

/* One column's sums against the pair (a: its 64 bytes of the pair): block
 * b's in lanes 0..3, b + 1's in lanes 4..7. */
GV_INLINE __m256i gv_isum_q8(__m256i ul, __m256i wl, __m256i uh, __m256i wh, const char *a) {
    const __m256i al = _mm256_loadu_si256((const __m256i *)a);
    const __m256i ah = _mm256_loadu_si256((const __m256i *)(a + 32));
#if GV_VNNI /* the same sums of 4 products, without the s16 step */
    const __m256i s = GV_DPBUSD(_mm256_setzero_si256(), ul, _mm256_sign_epi8(al, wl));
    return GV_DPBUSD(s, uh, _mm256_sign_epi8(ah, wh));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    return _mm256_add_epi32(
        _mm256_madd_epi16(_mm256_maddubs_epi16(ul, _mm256_sign_epi8(al, wl)), ones),
        _mm256_madd_epi16(_mm256_maddubs_epi16(uh, _mm256_sign_epi8(ah, wh)), ones));
#endif
}

/* Blocks b and b + 1 (when `two`) of a Q8_0 row against nc columns (a:
 * column 0's pair of blocks, sc: its scale of block b, each further column
 * act_stride bytes on), column c in lane c of each half; the columns'
 * scales packed (pk: the pair's 32 bytes of cllm_cpu_gemv_cols_pack) or
 * from each column (pk NULL): the same floats. */
GV_INLINE void gv_pair_q8(int nc, const char *x0, bool two, const char *a, const char *sc,
                          size_t act_stride, const char *pk, __m256 *acc) {
    const __m256i wl = gv_halves_q8(x0, 0, two), wh = gv_halves_q8(x0, 16, two);
    const __m256i ul = _mm256_abs_epi8(wl), uh = _mm256_abs_epi8(wh);
    __m256i s[GV_COLS];
    __m256 da = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++) {
        s[c] = gv_isum_q8(ul, wl, uh, wh, a + (size_t)c * act_stride);
        if (pk) continue;
        const float *scc = (const float *)(sc + (size_t)c * act_stride);
        const __m256 dac = _mm256_set_m128(two ? _mm_broadcast_ss(scc + 1) : _mm_setzero_ps(),
                                           _mm_broadcast_ss(scc));
        da = gv_lane_c(da, dac, c);
    }
    for (int c = nc; c < GV_COLS; c++) s[c] = s[0];
    const __m256i u = gv_red(nc, s[0], s[1], s[2], s[3]);
    if (pk) da = _mm256_loadu_ps((const float *)pk);
    const __m256 zero = _mm256_setzero_ps();
    gv_fma(false, u, da, gv_scales_q8(x0, two), zero, zero, acc, NULL);
}

/* out[c * out_stride] = dot(row, act + c * act_stride) for c < nc (<=
 * GV_COLS, a constant after inlining); pairs of blocks alternate between two
 * accumulators, as gv_gemv_n's. */
GV_INLINE void gv_gemv_q8_n(int nc, int64_t K, const char *row, const char *act, size_t act_stride,
                            const char *pk, float *out, size_t out_stride) {
    const int64_t nb = K / 32;
    const char *sc = act + cllm_cpu_gemv_q8_scales(K); /* column 0's block scales */
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * 34, *g = act + 32 * b, *s0 = sc + 4 * b;
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(x0 + CLLM_CPU_PREFETCH_AHEAD + 128, CLLM_CPU_PREFETCH_HINT);
        if (pk) { /* (two copies of the loop body, each with its source of scales) */
            gv_pair_q8(nc, x0, true, g, s0, act_stride, pk + 16 * b, &a0);
            gv_pair_q8(nc, x0 + 68, true, g + 64, s0 + 8, act_stride, pk + 16 * b + 32, &a1);
        } else {
            gv_pair_q8(nc, x0, true, g, s0, act_stride, NULL, &a0);
            gv_pair_q8(nc, x0 + 68, true, g + 64, s0 + 8, act_stride, NULL, &a1);
        }
    }
    for (; b < nb; b += 2) {
        gv_pair_q8(nc, row + (size_t)b * 34, b + 1 < nb, act + 32 * b, sc + 4 * b, act_stride,
                   pk ? pk + 16 * b : NULL, &a0);
    }
    const __m256 zero = _mm256_setzero_ps();
    float r[4];
    _mm_storeu_ps(r, gv_lanes(a0, a1, zero, zero));
    for (int c = 0; c < nc; c++) out[(size_t)c * out_stride] = r[c];
}

/* Any number of columns, GV_COLS at a time (constant counts, so that each
 * loop over them unrolls); cols: their packed scales (NULL: none), group
 * after group cols_stride bytes apart. One column never reads them. */
GV_INLINE void gv_gemv_cols(enum gv_kind kind, int64_t K, const char *row, const char *act,
                            size_t act_stride, int n, const char *cols, size_t cols_stride,
                            float *out, size_t out_stride) {
    for (int c0 = 0; c0 < n; c0 += GV_COLS) {
        const char *a = act + (size_t)c0 * act_stride;
        const char *pk = cols ? cols + (size_t)(c0 / GV_COLS) * cols_stride : NULL;
        float *o = out + (size_t)c0 * out_stride;
        const int nc = n - c0 < GV_COLS ? n - c0 : GV_COLS;
        if (kind == GV_Q8_0) {
            switch (nc) {
            case 1: gv_gemv_q8_n(1, K, row, a, act_stride, NULL, o, out_stride); break;
            case 2: gv_gemv_q8_n(2, K, row, a, act_stride, pk, o, out_stride); break;
            case 3: gv_gemv_q8_n(3, K, row, a, act_stride, pk, o, out_stride); break;
            default: gv_gemv_q8_n(GV_COLS, K, row, a, act_stride, pk, o, out_stride); break;
            }
            continue;
        }
        switch (nc) {
        case 1: gv_gemv_n(kind, 1, K, row, a, act_stride, NULL, o, out_stride); break;
        case 2: gv_gemv_n(kind, 2, K, row, a, act_stride, pk, o, out_stride); break;
        case 3: gv_gemv_n(kind, 3, K, row, a, act_stride, pk, o, out_stride); break;
        default: gv_gemv_n(kind, GV_COLS, K, row, a, act_stride, pk, o, out_stride); break;
        }
    }
}

/* A level's entry point: n columns of a Q4_0, Q4_1 or Q8_0 row (n = 1: the
 * one-column kernel). */
GV_INLINE void gv_gemv_type(cllm_type type, int64_t K, const void *row, const void *act,
                            size_t act_stride, int n, float *out, size_t out_stride) {
    if (type == CLLM_TYPE_Q8_0) {
        gv_gemv_cols(GV_Q8_0, K, row, act, act_stride, n, NULL, 0, out, out_stride);
    } else if (type == CLLM_TYPE_Q4_1) {
        gv_gemv_cols(GV_Q4_1, K, row, act, act_stride, n, NULL, 0, out, out_stride);
    } else if (type == CLLM_TYPE_Q5_0) {
        gv_gemv_cols(GV_Q5_0, K, row, act, act_stride, n, NULL, 0, out, out_stride);
    } else {
        gv_gemv_cols(GV_Q4_0, K, row, act, act_stride, n, NULL, 0, out, out_stride);
    }
}

/* nr rows (row_stride bytes apart) x nc columns: out[r + c * out_stride].
 * One column of Q4_0 / Q4_1 goes two rows at a time; several columns (and
 * Q8_0's) one row at a time (gv_gemv_cols: the row unpacked once for 4
 * columns). */
GV_INLINE void gv_gemv_rows_q(enum gv_kind kind, int64_t K, const char *row, size_t row_stride,
                              int nr, const char *act, size_t act_stride, int nc, const char *cols,
                              size_t cols_stride, float *out, size_t out_stride) {
    int r = 0;
    if (nc == 1 && (kind == GV_Q4_0 || kind == GV_Q4_1)) {
        for (; r + 2 <= nr; r += 2)
            gv_gemv_2r(kind == GV_Q4_1, K, row + (size_t)r * row_stride, row_stride, act, out + r);
    }
    for (; r < nr; r++)
        gv_gemv_cols(kind, K, row + (size_t)r * row_stride, act, act_stride, nc, cols, cols_stride,
                     out + r, out_stride);
}

/* A level's entry point for a tile of Q4_0, Q4_1 or Q8_0 rows. */
GV_INLINE void gv_gemv_rows_type(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                 int nr, const void *act, size_t act_stride, int nc,
                                 const void *cols, size_t cols_stride, float *out,
                                 size_t out_stride) {
    if (type == CLLM_TYPE_Q8_0) {
        gv_gemv_rows_q(GV_Q8_0, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                       out_stride);
    } else if (type == CLLM_TYPE_Q4_1) {
        gv_gemv_rows_q(GV_Q4_1, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                       out_stride);
    } else if (type == CLLM_TYPE_Q5_0) {
        gv_gemv_rows_q(GV_Q5_0, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                       out_stride);
    } else {
        gv_gemv_rows_q(GV_Q4_0, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                       out_stride);
    }
}

/* Half h's 8 scales d of a 16-row block p, and its mins (Q4_0: -8 d,
 * exact), for the FMA against each column's d * sum. */
GV_INLINE void gv_x16_dm(bool q41, const char *p, int h, __m256 *dw, __m256 *mw) {
    *dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 256 + 16 * h)));
    *mw = q41 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 288 + 16 * h)))
              : _mm256_mul_ps(*dw, _mm256_set1_ps(-8.0f));
}

/* ---- 16 rows in the lanes (gemm.h: CLLM_X16), 8 at a time -----------------------
 * Rows 8h..8h+7 of a group are the 32-byte half h of each 64-byte part: per
 * block 4 loads give their nibbles, split once into 4 vectors of low and 4
 * of high nibbles; per column 8 products against the column's 4 activation
 * bytes broadcast (vpdpbusd, or vpmaddubsw summed in s16: 8 sums of two
 * products of at most 15 x 127 stay below 32,767, then one vpmaddwd), one
 * conversion and one FMA, then one more of the mins against the column's
 * d * sum (Q4_0: -8 d), every result in its row's lane. The same integers
 * at every level, the same float steps: the AVX2, AVXVNNI and 256-bit
 * AVX-512 kernels agree bit for bit (test_kernels), and a column's results
 * do not depend on the other columns. */
GV_INLINE void gv_x16_half(bool q41, int nc, int64_t K, const char *w, int h, const char *act,
                           size_t act_stride, float *out, size_t out_stride) {
    const int64_t nb = K / 32;
    const size_t bb = q41 ? 320 : 288;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[GV_COLS];
    for (int c = 0; c < GV_COLS; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = w + (size_t)b * bb;
        if (h == 0) {
            for (size_t l = 0; l < bb; l += 64)
                _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        }
        __m256i lo[4], hi[4];
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * j + 32 * h));
            lo[j] = _mm256_and_si256(v, m4);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        __m256 dw, mw;
        gv_x16_dm(q41, p, h, &dw, &mw);
        const char *g = act + (size_t)(b / 4) * 320 + 16 * (size_t)(b % 4);
        for (int c = 0; c < nc; c++) {
            const char *gc = g + (size_t)c * act_stride;
            int32_t a4[8];
            memcpy(a4, gc, 16);
            memcpy(a4 + 4, gc + 64, 16);
#if GV_VNNI
            __m256i s = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                s = GV_DPBUSD(s, lo[j], _mm256_set1_epi32(a4[j]));
                s = GV_DPBUSD(s, hi[j], _mm256_set1_epi32(a4[4 + j]));
            }
#else
            __m256i p16 = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(lo[j], _mm256_set1_epi32(a4[j])));
                p16 = _mm256_add_epi16(p16,
                                       _mm256_maddubs_epi16(hi[j], _mm256_set1_epi32(a4[4 + j])));
            }
            __m256i s = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
            float da, ds;
            memcpy(&da, gc + 192, 4);
            memcpy(&ds, gc + 256, 4);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(da)),
                                     acc[c]);
            acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ds), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(out + (size_t)c * out_stride + 8 * h, acc[c]);
}

/* acc + the products of u (unsigned) and a (signed), 4 per row lane: with
 * vpdpbusd their int32 sums; else vpmaddubsw's sums of two added in s16
 * (the callers add at most 8 of those, each of two nibbles times bytes of
 * at most 127 in magnitude: 8 x 3,810 = 30,480 < 32,767). */
GV_INLINE __m256i gv_x16_dot(__m256i acc, __m256i u, __m256i a) {
#if GV_VNNI
    return GV_DPBUSD(acc, u, a);
#else
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, a));
#endif
}

/* One column, both halves in one pass over the blocks: the group's bytes
 * stream once, and the column's activation bytes are broadcast once a block
 * (gv_x16_half reads the group twice, the second time from the cache, with
 * half the work overlapping the memory). The same integers and float steps
 * per lane as gv_x16_half: the same bits. */
GV_INLINE void gv_x16_one(bool q41, int64_t K, const char *w, const char *act, float *out) {
    const int64_t nb = K / 32;
    const size_t bb = q41 ? 320 : 288;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = w + (size_t)b * bb;
        for (size_t l = 0; l < bb; l += 64)
            _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        const char *g = act + (size_t)(b / 4) * 320 + 16 * (size_t)(b % 4);
        int32_t a4[8];
        memcpy(a4, g, 16);
        memcpy(a4 + 4, g + 64, 16);
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + 64 * j));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + 64 * j + 32));
            const __m256i al = _mm256_set1_epi32(a4[j]), ah = _mm256_set1_epi32(a4[4 + j]);
            const __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4);
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
            s0 = gv_x16_dot(gv_x16_dot(s0, l0, al), h0, ah);
            s1 = gv_x16_dot(gv_x16_dot(s1, l1, al), h1, ah);
        }
#if !GV_VNNI
        s0 = _mm256_madd_epi16(s0, _mm256_set1_epi16(1));
        s1 = _mm256_madd_epi16(s1, _mm256_set1_epi16(1));
#endif
        __m256 dw0, mw0, dw1, mw1;
        gv_x16_dm(q41, p, 0, &dw0, &mw0);
        gv_x16_dm(q41, p, 1, &dw1, &mw1);
        float da, ds;
        memcpy(&da, g + 192, 4);
        memcpy(&ds, g + 256, 4);
        const __m256 va = _mm256_set1_ps(da), vs = _mm256_set1_ps(ds);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dw0, va), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(dw1, va), acc1);
        acc0 = _mm256_fmadd_ps(mw0, vs, acc0);
        acc1 = _mm256_fmadd_ps(mw1, vs, acc1);
    }
    _mm256_storeu_ps(out, acc0);
    _mm256_storeu_ps(out + 8, acc1);
}

/* ---- Q4_K, 16 rows in the lanes (gemm.h: CLLM_X16_Q4_K_BYTES) --------------------
 * Per super-block the 16 rows' scale bytes give, 8 rows per operation, the
 * 6-bit scales and mins of sub-blocks 0..3 (low 6 bits of scale dwords 0
 * and 1) and 4..7 (the nibbles of dword 2, the top 2 bits of dwords 0 and 1
 * above them), one byte per row and sub-block; vpshufb then gives each
 * sub-block's scale as the multiplier of its rows' lanes. Each sub-block's
 * 32 products sum in the rows' lanes (vpdpbusd; or vpmaddubsw summed in
 * s16: 8 sums of two products of at most 15 x 127 stay below 32,767), then
 * take their scale (vpmulld; vpmaddwd with the scale in both halves), and
 * the mins meet the column's sub-block sums in 4 vpmaddwd. Then one FMA of
 * the super-block's sums against d and one of its mins against dmin. The
 * same integers at every level, the same float steps: the AVX2, AVXVNNI and
 * AVX-512 (256-bit) kernels agree bit for bit. */

/* The vpshufb control taking, in every dword (row) k of a 128-bit lane,
 * its byte b0 into the low int16 and b1 into the high one (-1: zero). */
GV_INLINE __m256i gv_q4k_ctl(int b0, int b1) {
#define GV_CTL(k)                                                                                  \
    ((b0 < 0 ? 0x80 : 4 * (k) + b0) | 0x80 << 8 | (b1 < 0 ? 0x80 : 4 * (k) + b1) << 16 |           \
     (int)(0x80u << 24))
    return _mm256_setr_epi32(GV_CTL(0), GV_CTL(1), GV_CTL(2), GV_CTL(3), GV_CTL(0), GV_CTL(1),
                             GV_CTL(2), GV_CTL(3));
#undef GV_CTL
}

/* Half h's (rows 8h..8h+7) 6-bit scales and mins of a group's super-block
 * p, one byte per row (its lane) and sub-block: s03 / m03 bytes s of
 * sub-blocks 0..3, s47 / m47 of sub-blocks 4 + s. */
GV_INLINE void gv_q4k_scales_x16(const char *p, int h, __m256i *s03, __m256i *s47, __m256i *m03,
                                 __m256i *m47) {
    const __m256i lo6 = _mm256_set1_epi8(0x3F), m4 = _mm256_set1_epi8(0x0F);
    const __m256i top2 = _mm256_set1_epi8(0x30);
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(p + 64 + 32 * h));
    const __m256i w2 = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
    *s03 = _mm256_and_si256(w0, lo6), *m03 = _mm256_and_si256(w1, lo6);
    *s47 =
        _mm256_or_si256(_mm256_and_si256(w2, m4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), top2));
    *m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi32(w1, 2), top2));
}

/* 16 rows of a group against one column (gemm.h's Q4_K activation: per
 * super-block the quants of sub-blocks 0 2 1 3 4 6 5 7, their int16 sums,
 * the float d): out[0..15]. */
GV_INLINE void gv_x16_q4k_one(int64_t K, const char *w, const char *act, float *out) {
    static const int pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++) {
        const char *p = w + (size_t)b * CLLM_X16_Q4_K_BYTES;
        const char *a = act + (size_t)b * 288;
        for (size_t l = 0; l < 256; l += 64)
            _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        __m256i sc[2][8], mins[2];
        for (int h = 0; h < 2; h++) {
            __m256i s03, s47, m03, m47;
            gv_q4k_scales_x16(p, h, &s03, &s47, &m03, &m47);
            for (int s = 0; s < 4; s++) {
#if GV_VNNI
                sc[h][s] = _mm256_shuffle_epi8(s03, gv_q4k_ctl(s, -1));
                sc[h][4 + s] = _mm256_shuffle_epi8(s47, gv_q4k_ctl(s, -1));
#else
                sc[h][s] = _mm256_shuffle_epi8(s03, gv_q4k_ctl(s, s));
                sc[h][4 + s] = _mm256_shuffle_epi8(s47, gv_q4k_ctl(s, s));
#endif
            }
            /* (m_2k, m_2k+1) against the column's (sum_2k, sum_2k+1) */
            __m256i mm = _mm256_madd_epi16(_mm256_shuffle_epi8(m03, gv_q4k_ctl(0, 1)),
                                           _mm256_set1_epi32(cllm_load_i32(a + 256)));
            mm = _mm256_add_epi32(mm, _mm256_madd_epi16(_mm256_shuffle_epi8(m03, gv_q4k_ctl(2, 3)),
                                                        _mm256_set1_epi32(cllm_load_i32(a + 260))));
            mm = _mm256_add_epi32(mm, _mm256_madd_epi16(_mm256_shuffle_epi8(m47, gv_q4k_ctl(0, 1)),
                                                        _mm256_set1_epi32(cllm_load_i32(a + 264))));
            mm = _mm256_add_epi32(mm, _mm256_madd_epi16(_mm256_shuffle_epi8(m47, gv_q4k_ctl(2, 3)),
                                                        _mm256_set1_epi32(cllm_load_i32(a + 268))));
            mins[h] = mm;
        }
        __m256i is0 = _mm256_setzero_si256(), is1 = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const char *q = p + 256 + 512 * (size_t)c;
            const char *al = a + 32 * pos[2 * c], *ah = a + 32 * pos[2 * c + 1];
            __m256i l0 = _mm256_setzero_si256(), h0 = l0, l1 = l0, h1 = l0;
            for (int j = 0; j < 8; j++) {
                _mm_prefetch(q + 64 * j + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(q + 64 * j));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(q + 64 * j + 32));
                const __m256i bl = _mm256_set1_epi32(cllm_load_i32(al + 4 * j));
                const __m256i bh = _mm256_set1_epi32(cllm_load_i32(ah + 4 * j));
                const __m256i u0 = _mm256_and_si256(v0, m4), u1 = _mm256_and_si256(v1, m4);
                const __m256i t0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
                const __m256i t1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                l0 = gv_x16_dot(l0, u0, bl), l1 = gv_x16_dot(l1, u1, bl);
                h0 = gv_x16_dot(h0, t0, bh), h1 = gv_x16_dot(h1, t1, bh);
                CLLM_X86_KEEP(l0);
                CLLM_X86_KEEP(l1);
                CLLM_X86_KEEP(h0);
                CLLM_X86_KEEP(h1);
            }
#if GV_VNNI
            is0 = _mm256_add_epi32(is0, _mm256_add_epi32(_mm256_mullo_epi32(l0, sc[0][2 * c]),
                                                         _mm256_mullo_epi32(h0, sc[0][2 * c + 1])));
            is1 = _mm256_add_epi32(is1, _mm256_add_epi32(_mm256_mullo_epi32(l1, sc[1][2 * c]),
                                                         _mm256_mullo_epi32(h1, sc[1][2 * c + 1])));
#else
            is0 = _mm256_add_epi32(is0, _mm256_add_epi32(_mm256_madd_epi16(l0, sc[0][2 * c]),
                                                         _mm256_madd_epi16(h0, sc[0][2 * c + 1])));
            is1 = _mm256_add_epi32(is1, _mm256_add_epi32(_mm256_madd_epi16(l1, sc[1][2 * c]),
                                                         _mm256_madd_epi16(h1, sc[1][2 * c + 1])));
#endif
        }
        float d;
        memcpy(&d, a + 272, 4);
        const __m256 da = _mm256_set1_ps(d);
        const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 192)));
        const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 208)));
        const __m256 mw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 224)));
        const __m256 mw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 240)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is0), _mm256_mul_ps(dw0, da), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is1), _mm256_mul_ps(dw1, da), acc1);
        acc0 = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[0]), _mm256_mul_ps(mw0, da), acc0);
        acc1 = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[1]), _mm256_mul_ps(mw1, da), acc1);
    }
    _mm256_storeu_ps(out, acc0);
    _mm256_storeu_ps(out + 8, acc1);
}

/* ---- Q6_K, 16 rows in the lanes (gemm.h: CLLM_X16_Q6_K_BYTES) --------------------
 * Against Q8_K activations (the type's vec_dot_type: d, 256 int8 quants,
 * int16 sums of each 16). Per half n of a super-block and dword Q (0..7) of
 * its 32 elements per quarter k, the 16 rows' ql dwords Q and Q + 8 and
 * their qh dword Q give, 8 rows per 256-bit register, the 6-bit quants u
 * of elements 128 n + 32 k + 4 Q .. + 3 for k = 0..3: (ql Q: low nibbles k
 * = 0, high k = 2; ql Q + 8: k = 1, 3) | (qh bits 2k, 2k + 1) << 4. Their
 * products with the column's 4 bytes sum in the rows' lanes (vpdpbusd; or
 * vpmaddubsw summed in s16 two dwords at a time: 4 products of at most 63 x
 * 127 stay below 32,767) and take the sub-block's signed scale (vpmaddwd
 * of the scale in both int16 halves; vpmulld of it as int32); the zero
 * point 32 meets the column's sums of 16 in 8 vpmaddwd of scale pairs. Then
 * one FMA of the super-block's int32 sum against d_row * d. The same
 * integers at every level, the same float steps: the AVX2, AVXVNNI and
 * AVX-512 (256-bit) kernels agree bit for bit. */

/* The vpshufb control taking, in every dword (row) k of a 128-bit lane,
 * its byte b0 into the high byte of the low int16 and b1 into the high
 * byte of the high one (then an arithmetic shift by 8 sign-extends them). */
GV_INLINE __m256i gv_q6k_ctl(int b0, int b1) {
#define GV_CTL(k) (0x80 | (4 * (k) + b0) << 8 | 0x80 << 16 | (int)((unsigned)(4 * (k) + b1) << 24))
    return _mm256_setr_epi32(GV_CTL(0), GV_CTL(1), GV_CTL(2), GV_CTL(3), GV_CTL(0), GV_CTL(1),
                             GV_CTL(2), GV_CTL(3));
#undef GV_CTL
}

/* Rows 8h..8h+7's 6-bit quants of (n, Q) of a Q6_K group's super-block p
 * (u[k]: quarter k). */
GV_INLINE void gv_q6k_quants(const char *p, int h, int n, int q, __m256i u[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 64 * (16 * n + q) + 32 * h));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 64 * (16 * n + q + 8) + 32 * h));
    const __m256i x = _mm256_loadu_si256((const __m256i *)(p + 2048 + 64 * (8 * n + q) + 32 * h));
    u[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(x, 4), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(x, 2), m30));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(x, m30));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(x, 2), m30));
}

/* Rows 8h..8h+7's scale of sub-block s of a Q6_K group's super-block p,
 * sign-extended: in both int16 halves of each lane, or (VNNI) the int32. */
GV_INLINE __m256i gv_q6k_scale(const char *p, int h, int s) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(p + 3072 + 64 * (s / 4) + 32 * h));
#if GV_VNNI
    return _mm256_srai_epi32(_mm256_shuffle_epi8(w, gv_q6k_ctl(s % 4, s % 4)), 24);
#else
    return _mm256_srai_epi16(_mm256_shuffle_epi8(w, gv_q6k_ctl(s % 4, s % 4)), 8);
#endif
}

/* 16 rows of a Q6_K group against one column of Q8_K: out[0..15]. */
GV_INLINE void gv_x16_q6k_one(int64_t K, const char *w, const char *act, float *out) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t bi = 0; bi < K / 256; bi++) {
        const char *p = w + (size_t)bi * CLLM_X16_Q6_K_BYTES;
        const char *a = act + (size_t)bi * sizeof(cllm_block_q8_K);
        const char *qs = a + 4;
        for (size_t l = 2048 + 1024; l < CLLM_X16_Q6_K_BYTES; l += 64)
            _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        __m256i is[2];
        for (int h = 0; h < 2; h++) { /* -32 sum_s sc_s bsum_s */
            __m256i m = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const __m256i sw =
                    _mm256_loadu_si256((const __m256i *)(p + 3072 + 64 * (j / 2) + 32 * h));
                const __m256i sp = _mm256_srai_epi16(
                    _mm256_shuffle_epi8(sw, gv_q6k_ctl(2 * (j % 2), 2 * (j % 2) + 1)), 8);
                m = _mm256_add_epi32(
                    m, _mm256_madd_epi16(sp, _mm256_set1_epi32(cllm_load_i32(a + 260 + 4 * j))));
            }
            is[h] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(m, 5));
        }
        for (int n = 0; n < 2; n++) {
            for (int qq = 0; qq < 2; qq++) { /* sub-blocks 8n + 2k + qq */
                __m256i s[2][4];
                for (int h = 0; h < 2; h++)
                    for (int k = 0; k < 4; k++) s[h][k] = _mm256_setzero_si256();
                for (int q = 4 * qq; q < 4 * qq + 4; q++) {
                    _mm_prefetch(p + 64 * (16 * n + q) + CLLM_CPU_PREFETCH_AHEAD,
                                 CLLM_CPU_PREFETCH_HINT);
                    _mm_prefetch(p + 64 * (16 * n + q + 8) + CLLM_CPU_PREFETCH_AHEAD,
                                 CLLM_CPU_PREFETCH_HINT);
                    _mm_prefetch(p + 2048 + 64 * (8 * n + q) + CLLM_CPU_PREFETCH_AHEAD,
                                 _MM_HINT_T0);
                    __m256i bk[4];
                    for (int k = 0; k < 4; k++)
                        bk[k] = _mm256_set1_epi32(cllm_load_i32(qs + 128 * n + 32 * k + 4 * q));
                    for (int h = 0; h < 2; h++) {
                        __m256i u[4];
                        gv_q6k_quants(p, h, n, q, u);
                        for (int k = 0; k < 4; k++) s[h][k] = gv_x16_dot(s[h][k], u[k], bk[k]);
                    }
#if !GV_VNNI
                    if (q % 2 == 1) { /* two dwords summed in s16: into int32 with the scale */
                        for (int h = 0; h < 2; h++) {
                            for (int k = 0; k < 4; k++) {
                                is[h] = _mm256_add_epi32(
                                    is[h], _mm256_madd_epi16(
                                               s[h][k], gv_q6k_scale(p, h, 8 * n + 2 * k + qq)));
                                s[h][k] = _mm256_setzero_si256();
                            }
                        }
                    }
#endif
                }
#if GV_VNNI
                for (int h = 0; h < 2; h++)
                    for (int k = 0; k < 4; k++)
                        is[h] = _mm256_add_epi32(
                            is[h],
                            _mm256_mullo_epi32(s[h][k], gv_q6k_scale(p, h, 8 * n + 2 * k + qq)));
#endif
            }
        }
        float d;
        memcpy(&d, a, 4);
        const __m256 da = _mm256_set1_ps(d);
        for (int h = 0; h < 2; h++) {
            const __m256 dw =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 3328 + 16 * h)));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h]), _mm256_mul_ps(dw, da), acc[h]);
        }
    }
    _mm256_storeu_ps(out, acc[0]);
    _mm256_storeu_ps(out + 8, acc[1]);
}

/* Q6_K's panel (gemm.h: per scale block of 16, 4 steps of 64 bytes of u,
 * 16 float scales d * sc: 320 bytes) from a group: the quants of (n, Q) of
 * quarter k are step Q % 4 of block 8n + 2k + Q / 4; each scale the
 * portable packer's single product. */
GV_INLINE void gv_gemm_pack_x16_q6k(int64_t K, const char *group, char *panel) {
    for (int64_t bi = 0; bi < K / 256; bi++) {
        const char *x = group + (size_t)bi * CLLM_X16_Q6_K_BYTES;
        char *o = panel + (size_t)bi * 16 * 320;
        for (size_t l = 0; l < CLLM_X16_Q6_K_BYTES; l += 64)
            _mm_prefetch(x + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        for (int n = 0; n < 2; n++) {
            for (int q = 0; q < 8; q++) {
                for (int h = 0; h < 2; h++) {
                    __m256i u[4];
                    gv_q6k_quants(x, h, n, q, u);
                    for (int k = 0; k < 4; k++)
                        _mm256_storeu_si256(
                            (__m256i *)(o + 320 * (8 * n + 2 * k + q / 4) + 64 * (q % 4) + 32 * h),
                            u[k]);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 3328 + 16 * h)));
            for (int s = 0; s < 16; s++) {
                const __m256i w =
                    _mm256_loadu_si256((const __m256i *)(x + 3072 + 64 * (s / 4) + 32 * h));
                const __m256i sc =
                    _mm256_srai_epi32(_mm256_shuffle_epi8(w, gv_q6k_ctl(s % 4, s % 4)), 24);
                _mm256_storeu_ps((float *)(o + 320 * s + 256) + 8 * h,
                                 _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
            }
        }
    }
}

/* ---- Q5_K, 16 rows in the lanes (gemm.h: CLLM_X16_Q5_K_BYTES) --------------------
 * Against Q8_K activations. The scales, mins, d and dmin lie where Q4_K's
 * do (gv_q4k_scales_x16 decodes them); quants part 8c + j (at 768) holds
 * elements 4j..4j+3 of sub-block 2c in its low nibbles and of 2c + 1 in its
 * high ones, their fifth bits bits 2c and 2c + 1 of qh part j (at 256).
 * Each sub-block's 32 products sum in the rows' lanes (vpdpbusd; or
 * vpmaddubsw summed in s16 four dwords at a time: 8 products of at most 31
 * x 127 stay below 32,767) and take their scale; the mins meet the column's
 * sums of 16 in 8 vpmaddwd of each min in both int16 halves. Then one FMA
 * of the super-block's sums against d and one of its mins against dmin, as
 * Q4_K's. The same integers and float steps at every level. */

/* Rows 8h..8h+7's 5-bit quants of part (c, j) of a Q5_K group's
 * super-block p: sub-block 2c (*lo) and 2c + 1 (*hi). */
GV_INLINE void gv_q5k_quants(const char *p, int h, int c, int j, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 768 + 64 * (8 * c + j) + 32 * h));
    const __m256i x = _mm256_srl_epi16(
        _mm256_loadu_si256((const __m256i *)(p + 256 + 64 * j + 32 * h)), _mm_cvtsi32_si128(2 * c));
    *lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_slli_epi16(x, 4), b4));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                          _mm256_and_si256(_mm256_slli_epi16(x, 3), b4));
}

/* 16 rows of a Q5_K group against one column of Q8_K: out[0..15]. */
GV_INLINE void gv_x16_q5k_one(int64_t K, const char *w, const char *act, float *out) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t bi = 0; bi < K / 256; bi++) {
        const char *p = w + (size_t)bi * CLLM_X16_Q5_K_BYTES;
        const char *a = act + (size_t)bi * sizeof(cllm_block_q8_K);
        const char *qs = a + 4;
        for (size_t l = 0; l < 768; l += 64)
            _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        __m256i sc[2][8], mins[2];
        for (int h = 0; h < 2; h++) {
            __m256i s03, s47, m03, m47;
            gv_q4k_scales_x16(p, h, &s03, &s47, &m03, &m47);
            __m256i mm = _mm256_setzero_si256();
            for (int s = 0; s < 4; s++) {
#if GV_VNNI
                sc[h][s] = _mm256_shuffle_epi8(s03, gv_q4k_ctl(s, -1));
                sc[h][4 + s] = _mm256_shuffle_epi8(s47, gv_q4k_ctl(s, -1));
#else
                sc[h][s] = _mm256_shuffle_epi8(s03, gv_q4k_ctl(s, s));
                sc[h][4 + s] = _mm256_shuffle_epi8(s47, gv_q4k_ctl(s, s));
#endif
                /* m_s against the column's (bsum 2s, bsum 2s + 1) */
                mm = _mm256_add_epi32(
                    mm, _mm256_madd_epi16(_mm256_shuffle_epi8(m03, gv_q4k_ctl(s, s)),
                                          _mm256_set1_epi32(cllm_load_i32(a + 260 + 4 * s))));
                mm = _mm256_add_epi32(
                    mm, _mm256_madd_epi16(_mm256_shuffle_epi8(m47, gv_q4k_ctl(s, s)),
                                          _mm256_set1_epi32(cllm_load_i32(a + 276 + 4 * s))));
            }
            mins[h] = mm;
        }
        __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int c = 0; c < 4; c++) {
            __m256i l[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            __m256i t[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int j = 0; j < 8; j++) {
                _mm_prefetch(p + 768 + 64 * (8 * c + j) + CLLM_CPU_PREFETCH_AHEAD,
                             CLLM_CPU_PREFETCH_HINT);
                const __m256i bl = _mm256_set1_epi32(cllm_load_i32(qs + 64 * c + 4 * j));
                const __m256i bh = _mm256_set1_epi32(cllm_load_i32(qs + 64 * c + 32 + 4 * j));
                for (int h = 0; h < 2; h++) {
                    __m256i ul, uh;
                    gv_q5k_quants(p, h, c, j, &ul, &uh);
                    l[h] = gv_x16_dot(l[h], ul, bl);
                    t[h] = gv_x16_dot(t[h], uh, bh);
                }
#if !GV_VNNI
                if (j % 4 == 3) { /* four dwords summed in s16: into int32 with the scale */
                    for (int h = 0; h < 2; h++) {
                        is[h] = _mm256_add_epi32(
                            is[h], _mm256_add_epi32(_mm256_madd_epi16(l[h], sc[h][2 * c]),
                                                    _mm256_madd_epi16(t[h], sc[h][2 * c + 1])));
                        l[h] = t[h] = _mm256_setzero_si256();
                    }
                }
#endif
            }
#if GV_VNNI
            for (int h = 0; h < 2; h++)
                is[h] = _mm256_add_epi32(
                    is[h], _mm256_add_epi32(_mm256_mullo_epi32(l[h], sc[h][2 * c]),
                                            _mm256_mullo_epi32(t[h], sc[h][2 * c + 1])));
#endif
        }
        float d;
        memcpy(&d, a, 4);
        const __m256 da = _mm256_set1_ps(d);
        for (int h = 0; h < 2; h++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 192 + 16 * h)));
            const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 224 + 16 * h)));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h]), _mm256_mul_ps(dw, da), acc[h]);
            acc[h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[h]), _mm256_mul_ps(mw, da), acc[h]);
        }
    }
    _mm256_storeu_ps(out, acc[0]);
    _mm256_storeu_ps(out + 8, acc[1]);
}

/* Q5_K's panel (Q4_K's form: per scale block of 32, 8 steps of 64 bytes of
 * u, 16 float scales, 16 float offsets) from a group, as Q4_K's with the
 * fifth bits. */
GV_INLINE void gv_gemm_pack_x16_q5k(int64_t K, const char *group, char *panel) {
    for (int64_t b = 0; b < K / 256; b++) {
        const char *x = group + (size_t)b * CLLM_X16_Q5_K_BYTES;
        char *o = panel + (size_t)b * 8 * 640;
        for (size_t l = 0; l < CLLM_X16_Q5_K_BYTES; l += 64)
            _mm_prefetch(x + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        for (int c = 0; c < 4; c++) {
            for (int j = 0; j < 8; j++) {
                for (int h = 0; h < 2; h++) {
                    __m256i lo, hi;
                    gv_q5k_quants(x, h, c, j, &lo, &hi);
                    _mm256_storeu_si256((__m256i *)(o + 640 * (2 * c) + 64 * j + 32 * h), lo);
                    _mm256_storeu_si256((__m256i *)(o + 640 * (2 * c + 1) + 64 * j + 32 * h), hi);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            __m256i s03, s47, m03, m47;
            gv_q4k_scales_x16(x, h, &s03, &s47, &m03, &m47);
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 192 + 16 * h)));
            const __m256 nm =
                _mm256_xor_ps(/* -dmin (-0 for 0, as the packer's) */
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 224 + 16 * h))),
                              _mm256_set1_ps(-0.0f));
            for (int s = 0; s < 8; s++) {
                const __m256i ctl = gv_q4k_ctl(s % 4, -1);
                const __m256i sc = _mm256_shuffle_epi8(s < 4 ? s03 : s47, ctl);
                const __m256i mn = _mm256_shuffle_epi8(s < 4 ? m03 : m47, ctl);
                float *ps = (float *)(o + 640 * s + 512) + 8 * h;
                _mm256_storeu_ps(ps, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
                _mm256_storeu_ps(ps + 16, _mm256_mul_ps(nm, _mm256_cvtepi32_ps(mn)));
            }
        }
    }
}

/* A level's cllm_cpu_gemv_x16: groups of 16 rows x nc columns. */
GV_INLINE void gv_gemv_x16(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                           size_t act_stride, int nc, float *out, size_t out_stride) {
    if (type == CLLM_TYPE_Q5_K) { /* one column of Q8_K at a time */
        const size_t gbytes = (size_t)(K / 256) * CLLM_X16_Q5_K_BYTES;
        for (int gi = 0; gi < ngroups; gi++) {
            for (int c = 0; c < nc; c++)
                gv_x16_q5k_one(K, (const char *)w + (size_t)gi * gbytes,
                               (const char *)act + (size_t)c * act_stride,
                               out + 16 * gi + (size_t)c * out_stride);
        }
        return;
    }
    if (type == CLLM_TYPE_Q6_K) { /* one column of Q8_K at a time */
        const size_t gbytes = (size_t)(K / 256) * CLLM_X16_Q6_K_BYTES;
        for (int gi = 0; gi < ngroups; gi++) {
            for (int c = 0; c < nc; c++)
                gv_x16_q6k_one(K, (const char *)w + (size_t)gi * gbytes,
                               (const char *)act + (size_t)c * act_stride,
                               out + 16 * gi + (size_t)c * out_stride);
        }
        return;
    }
    if (type == CLLM_TYPE_Q4_K) { /* one column at a time */
        const size_t gbytes = (size_t)(K / 256) * CLLM_X16_Q4_K_BYTES;
        for (int gi = 0; gi < ngroups; gi++) {
            for (int c = 0; c < nc; c++)
                gv_x16_q4k_one(K, (const char *)w + (size_t)gi * gbytes,
                               (const char *)act + (size_t)c * act_stride,
                               out + 16 * gi + (size_t)c * out_stride);
        }
        return;
    }
    const bool q41 = type == CLLM_TYPE_Q4_1;
    const size_t gbytes = (size_t)(K / 32) * (q41 ? 320 : 288);
    for (int gi = 0; gi < ngroups; gi++) {
        const char *wg = (const char *)w + (size_t)gi * gbytes;
        for (int c0 = 0; c0 < nc; c0 += GV_COLS) {
            const char *a = (const char *)act + (size_t)c0 * act_stride;
            float *o = out + 16 * gi + (size_t)c0 * out_stride;
            const int n = nc - c0 < GV_COLS ? nc - c0 : GV_COLS;
            if (n == 1) {
                gv_x16_one(q41, K, wg, a, o);
                continue;
            }
            for (int h = 0; h < 2; h++) {
#define GV_X16_CASE(n_)                                                                            \
    (q41 ? gv_x16_half(true, n_, K, wg, h, a, act_stride, o, out_stride)                           \
         : gv_x16_half(false, n_, K, wg, h, a, act_stride, o, out_stride))
                switch (n) {
                case 1: GV_X16_CASE(1); break;
                case 2: GV_X16_CASE(2); break;
                case 3: GV_X16_CASE(3); break;
                default: GV_X16_CASE(4); break;
                }
#undef GV_X16_CASE
            }
        }
    }
}

/* Q4_K's panel (gemm.h: per scale block of 32, 8 steps of 64 bytes of u,
 * 16 float scales d * sc, 16 float offsets -dmin * m: 640 bytes) from a
 * group: part 8c + j's low nibbles are step j of block 2c, its high ones
 * step j of block 2c + 1; the scales decode as gv_x16_q4k_one's, and each
 * float is the portable packer's single product. */
GV_INLINE void gv_gemm_pack_x16_q4k(int64_t K, const char *group, char *panel) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < K / 256; b++) {
        const char *x = group + (size_t)b * CLLM_X16_Q4_K_BYTES;
        char *o = panel + (size_t)b * 8 * 640;
        for (size_t l = 0; l < CLLM_X16_Q4_K_BYTES; l += 64)
            _mm_prefetch(x + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        for (int c = 0; c < 4; c++) {
            for (int k = 0; k < 16; k++) { /* step k / 2, half k % 2 */
                const __m256i v = _mm256_loadu_si256((const __m256i *)(x + 256 + 512 * c + 32 * k));
                _mm256_storeu_si256((__m256i *)(o + 640 * (2 * c) + 32 * k),
                                    _mm256_and_si256(v, m4));
                _mm256_storeu_si256((__m256i *)(o + 640 * (2 * c + 1) + 32 * k),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
        }
        for (int h = 0; h < 2; h++) {
            __m256i s03, s47, m03, m47;
            gv_q4k_scales_x16(x, h, &s03, &s47, &m03, &m47);
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 192 + 16 * h)));
            const __m256 nm =
                _mm256_xor_ps(/* -dmin (-0 for 0, as the packer's) */
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 224 + 16 * h))),
                              _mm256_set1_ps(-0.0f));
            for (int s = 0; s < 8; s++) {
                const __m256i ctl = gv_q4k_ctl(s % 4, -1);
                const __m256i sc = _mm256_shuffle_epi8(s < 4 ? s03 : s47, ctl);
                const __m256i mn = _mm256_shuffle_epi8(s < 4 ? m03 : m47, ctl);
                float *ps = (float *)(o + 640 * s + 512) + 8 * h;
                _mm256_storeu_ps(ps, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
                _mm256_storeu_ps(ps + 16, _mm256_mul_ps(nm, _mm256_cvtepi32_ps(mn)));
            }
        }
    }
}

/* A level's cllm_cpu_gemm_pack_x16 (the panel: gemm.h). */
GV_INLINE void gv_gemm_pack_x16(cllm_type type, int64_t K, const void *group, void *panel) {
    if (type == CLLM_TYPE_Q4_K) {
        gv_gemm_pack_x16_q4k(K, group, panel);
        return;
    }
    if (type == CLLM_TYPE_Q6_K) {
        gv_gemm_pack_x16_q6k(K, group, panel);
        return;
    }
    if (type == CLLM_TYPE_Q5_K) {
        gv_gemm_pack_x16_q5k(K, group, panel);
        return;
    }
    const bool q41 = type == CLLM_TYPE_Q4_1;
    const size_t bb = q41 ? 320 : 288, pb = q41 ? 640 : 576;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < K / 32; b++) {
        const char *x = (const char *)group + (size_t)b * bb;
        char *o = (char *)panel + (size_t)b * pb;
        for (size_t l = 0; l < bb; l += 64)
            _mm_prefetch(x + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        for (int j = 0; j < 8; j++) { /* part j / 2, half j % 2 */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x + 32 * j));
            _mm256_storeu_si256((__m256i *)(o + 32 * j), _mm256_and_si256(v, m4));
            _mm256_storeu_si256((__m256i *)(o + 256 + 32 * j),
                                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
        for (int h = 0; h < (q41 ? 4 : 2); h++) { /* d (and m) of rows 8h'..: floats */
            _mm256_storeu_ps((float *)(o + 512 + 32 * h),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 256 + 16 * h))));
        }
    }
}

#endif /* CLLM_BACKEND_CPU_GEMV_X86_H */
