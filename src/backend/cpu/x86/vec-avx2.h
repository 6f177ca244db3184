/*
 * Internal: 256-bit vector helpers shared by the AVX2 kernels. Include only
 * from files compiled for AVX2 + FMA (after their target pragma).
 */
#ifndef CLLM_BACKEND_CPU_VEC_AVX2_H
#define CLLM_BACKEND_CPU_VEC_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* r[i] = row i of an 8 x 8 block of floats -> r[e] = element e of the 8
 * rows (three rounds of unpack, shuffle and lane permute). */
static inline __attribute__((always_inline)) void cllm_transpose8_ps(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* 32 bits at p, as an integer or a float (any alignment). */
static inline __attribute__((always_inline)) int32_t cllm_load_i32(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) float cllm_load_f32(const char *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The float steps of one scale block of the 256-bit panel GEMM (gemm.h),
 * for nc columns (a constant after inlining): f[j] += scales * (acc[j] *
 * d_j), then, for types with an offset, += offsets * (d * s)_j. pb: the
 * block's scales in the half panel (its offsets 64 bytes on); ax: column
 * 0's activation block of bs quants, the next column astride bytes on. The
 * AVX2 and AVX-VNNI tiles both end a block here, so their results match
 * bit for bit whenever their integer sums do. */
static inline __attribute__((always_inline)) void
cllm_gemm_block_f256(int nc, bool off, const char *pb, const char *ax, size_t astride, int bs,
                     const __m256i *acc, __m256 *f) {
    const __m256 sc = _mm256_loadu_ps((const float *)pb);
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) {
        const __m256 dj = _mm256_set1_ps(cllm_load_f32(ax + j * astride + bs));
        f[j] = _mm256_fmadd_ps(sc, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j]), dj), f[j]);
    }
    if (off) {
        const __m256 o = _mm256_loadu_ps((const float *)(pb + 64));
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++)
            f[j] =
                _mm256_fmadd_ps(o, _mm256_set1_ps(cllm_load_f32(ax + j * astride + bs + 4)), f[j]);
    }
}

/* CALL(n, ...) with n the constant of nc's case, 1..4 (more: 4): the
 * 256-bit panel tiles are compiled for each column count. */
#define CLLM_GEMM_BY_COLS4(nc, CALL, ...)                                                          \
    switch (nc) {                                                                                  \
    case 1: CALL(1, __VA_ARGS__); break;                                                           \
    case 2: CALL(2, __VA_ARGS__); break;                                                           \
    case 3: CALL(3, __VA_ARGS__); break;                                                           \
    default: CALL(4, __VA_ARGS__); break;                                                          \
    }

/* Lanes [0, n) of 8 set (n in 1..8), for masked stores. */
static inline __attribute__((always_inline)) __m256i cllm_lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first n of v's 8 lanes to out (m: cllm_lanes8(n)). */
static inline __attribute__((always_inline)) void cllm_store8(float *out, __m256 v, int n,
                                                              __m256i m) {
    if (n == 8) {
        _mm256_storeu_ps(out, v);
    } else {
        _mm256_maskstore_ps(out, m, v);
    }
}

/* |v| per lane. */
static inline __attribute__((always_inline)) __m256 cllm_abs256(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* The largest lane; the sum of the 8 int32 lanes. */
static inline __attribute__((always_inline)) float cllm_hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) int32_t cllm_hsum256_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The largest |x| of n floats (n a multiple of 8). */
static inline __attribute__((always_inline)) float cllm_amax256(const float *x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, cllm_abs256(_mm256_loadu_ps(x + i)));
    return cllm_hmax256(m);
}

/* 4 x 8 int32 in -128..127 (elements 0..7, 8..15, ...) -> 32 int8 in element
 * order: the packs work per 128-bit lane, a permutation puts them back. */
static inline __attribute__((always_inline)) __m256i cllm_pack256_i8(__m256i a, __m256i b,
                                                                     __m256i c, __m256i d) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* e^x for 8 floats, as cllm_exp512 computes it (x = n ln2 + r, the Taylor
 * polynomial of degree 6 of e^r, relative error < 2e-7), with 2^n built in
 * the exponent field: x is first clamped to [-87, 88], so that n stays a
 * normal exponent (e^-87 ~ 1.6e-38 stands for anything smaller; callers
 * that need an exact 0 for -inf mask it). */
static inline __attribute__((always_inline)) __m256 cllm_exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x); /* ln2 high bits */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);      /* ln2 - high */
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Q5's fifth bits as 0x10 bytes: byte j of each 128-bit lane takes byte
 * pick[j] of that lane of qh (the blocks' 32-bit qh words) and, of it, bit
 * j % 8. */
static inline __attribute__((always_inline)) __m256i cllm_q5_bits256(__m256i qh, __m256i pick) {
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set =
        _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh, pick), bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

#endif /* CLLM_BACKEND_CPU_VEC_AVX2_H */
