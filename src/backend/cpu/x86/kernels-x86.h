/*
 * The x86 SIMD row kernels, written once for 256-bit vectors and compiled
 * twice: by kernels-avx2.c (KX_VNNI 0: AVX2 + FMA + F16C) and by
 * kernels-avx512.c (KX_VNNI 1: the same loops with AVX-512 VNNI vpdpbusd and
 * AVX-512 BW mask instructions). Include only from those files, after their
 * target pragma; every function here is static to the including file.
 *
 * The reference maths of every kernel is in core/quants.c and quants-k.c;
 * these compute the same integer sums exactly and differ from the reference
 * only in the order of the float additions (per-lane accumulators summed at
 * the end), which tests/test_kernels.c bounds.
 *
 * Integer dot products of int8 vectors use an unsigned x signed byte product
 * (vpmaddubsw + vpmaddwd, or vpdpbusd): signed weights w go in as |w| with
 * their sign moved onto the activations (vpsignb). |w| <= 128 and activations
 * in -127..127 keep vpmaddubsw's pair sums below 2 * 128 * 127 < 32767, so
 * nothing saturates (Q8_0 / Q8_K writers never emit -128 activations).
 *
 * vec_dot_n unpacks a weight block once and dots it with up to 4 columns of
 * activations held in registers (4 float accumulators), then the next 4.
 * vec_dot_mxn (32-element blocks) goes by tiles of KX_ROWS weight rows x 4
 * columns: each activation block is also loaded once for KX_ROWS rows.
 */
#ifndef KX_VNNI
#error "kernels-x86.h: define KX_VNNI (0 or 1) before including"
#endif

#include "core/quants.h"

#include "backend/cpu/x86/vec-avx2.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define KX_INLINE static inline __attribute__((always_inline))
#ifndef KX_COLS
#define KX_COLS 4 /* columns of activations kept in registers (16 vector registers) */
#endif
#define KX_NC(c) ((c) < KX_COLS ? (c) : KX_COLS)

/* ---- helpers --------------------------------------------------------------- */

KX_INLINE float kx_h2f(cllm_fp16 h) { return _cvtsh_ss(h); }

/* The fp16 at p in every lane (broadcast, then one conversion). */
KX_INLINE __m256 kx_h2f8(const cllm_fp16 *p) { return _mm256_cvtph_ps(_mm_set1_epi16((short)*p)); }

KX_INLINE float kx_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc + sum of u[4i..4i+3] * s[4i..4i+3] per int32 lane, u unsigned, s signed
 * (u <= 128, so vpmaddubsw cannot saturate). */
KX_INLINE __m256i kx_dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if KX_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    const __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* 0x10 in byte j where bit j of h is set (the fifth bit of Q5 quants). */
KX_INLINE __m256i kx_bits_to_0x10(uint32_t h) {
#if KX_VNNI
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
#else
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)h),
        _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
#endif
}

/* 32 nibbles of a 16-byte qs: low nibbles (elements 0..15), then high ones. */
KX_INLINE __m256i kx_nibbles32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i w = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(w, _mm256_set1_epi8(0x0F));
}

KX_INLINE uint32_t kx_load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Round x (already clamped to [-127, 127]) to nearest even, as
 * cllm_quant_round_clamp does, and pack 32 results to int8 in order. */
KX_INLINE __m256i kx_pack32(__m256 a, __m256 b, __m256 c, __m256 d) {
    return cllm_pack256_i8(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b), _mm256_cvtps_epi32(c),
                           _mm256_cvtps_epi32(d));
}

KX_INLINE __m256 kx_clamp127(__m256 v) {
    return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
}

/* ---- activations: F32 -> Q8_0, F32 -> Q8_K -----------------------------------
 * Bit-identical to cllm_quantize_row_q8_0 / _q8_K: the same scale (F16C
 * rounds to nearest even like cllm_fp32_to_fp16; the reference saturates at
 * 65504 first, so do we), the same float products, the same rounding. */

static void kx_quantize_row_q8_0(const float *src, void *dst, int64_t n) {
    cllm_block_q8_0 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK8_0; ib++) {
        const float *x = src + ib * CLLM_QK8_0;
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(cllm_abs256(v[0]), cllm_abs256(v[1])),
                                       _mm256_max_ps(cllm_abs256(v[2]), cllm_abs256(v[3])));
        float d = cllm_hmax256(m) / 127.0f;
        d = d > 65504.0f ? 65504.0f : d;
        y[ib].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const float dd = kx_h2f(y[ib].d);
        const __m256 id = _mm256_set1_ps(dd != 0.0f ? 1.0f / dd : 0.0f);
        for (int k = 0; k < 4; k++) v[k] = kx_clamp127(_mm256_mul_ps(v[k], id));
        _mm256_storeu_si256((__m256i *)y[ib].qs, kx_pack32(v[0], v[1], v[2], v[3]));
    }
}

static void kx_quantize_row_q8_K(const float *src, void *dst, int64_t n) {
    cllm_block_q8_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float *x = src + ib * CLLM_QK_K;
        const float amax = cllm_amax256(x, CLLM_QK_K);
        y[ib].d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax > 1e-30f ? 127.0f / amax : 0.0f);
        for (int k = 0; k < CLLM_QK_K; k += 32) {
            __m256 v[4];
            for (int j = 0; j < 4; j++)
                v[j] = kx_clamp127(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), id));
            const __m256i q = kx_pack32(v[0], v[1], v[2], v[3]);
            _mm256_storeu_si256((__m256i *)(y[ib].qs + k), q);
            /* two bsums: sums of 16 bytes, one per 128-bit lane */
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                          _mm256_set1_epi16(1));
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            y[ib].bsums[k / 16] = (int16_t)_mm256_cvtsi256_si32(s);
            y[ib].bsums[k / 16 + 1] = (int16_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1));
        }
    }
}

/* ---- 32-element blocks x Q8_0 ------------------------------------------------
 * Per block: the weight quants as 32 bytes, signed (q - offset) for Q4_0,
 * Q5_0, Q8_0, Q8_1, unsigned with a min for Q4_1, Q5_1:
 *   signed:   dot += dx * dy * sum w[j] y[j]
 *   affine:   dot += dx * dy * sum q[j] y[j] + mx * dy * sum y[j] */

enum { KX_Q4_0, KX_Q4_1, KX_Q5_0, KX_Q5_1, KX_Q8_0, KX_Q8_1 };

KX_INLINE bool kx_affine32(int t) { return t == KX_Q4_1 || t == KX_Q5_1; }

/* Bytes of one block of type t. */
KX_INLINE size_t kx_bytes32(int t) {
    static const size_t bytes[] = {sizeof(cllm_block_q4_0), sizeof(cllm_block_q4_1),
                                   sizeof(cllm_block_q5_0), sizeof(cllm_block_q5_1),
                                   sizeof(cllm_block_q8_0), sizeof(cllm_block_q8_1)};
    return bytes[t];
}

/* Weight quants of block i of a row of type t; *d its scale, *m its min
 * (fp16 bits). */
KX_INLINE __m256i kx_unpack32(int t, const void *vx, int64_t i, cllm_fp16 *d, cllm_fp16 *m) {
    switch (t) {
    case KX_Q4_0: {
        const cllm_block_q4_0 *b = (const cllm_block_q4_0 *)vx + i;
        *d = b->d;
        return _mm256_sub_epi8(kx_nibbles32(b->qs), _mm256_set1_epi8(8));
    }
    case KX_Q4_1: {
        const cllm_block_q4_1 *b = (const cllm_block_q4_1 *)vx + i;
        *d = b->d;
        *m = b->m;
        return kx_nibbles32(b->qs);
    }
    case KX_Q5_0: {
        const cllm_block_q5_0 *b = (const cllm_block_q5_0 *)vx + i;
        *d = b->d;
        const __m256i q = _mm256_or_si256(kx_nibbles32(b->qs), kx_bits_to_0x10(kx_load_u32(b->qh)));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
    case KX_Q5_1: {
        const cllm_block_q5_1 *b = (const cllm_block_q5_1 *)vx + i;
        *d = b->d;
        *m = b->m;
        return _mm256_or_si256(kx_nibbles32(b->qs), kx_bits_to_0x10(kx_load_u32(b->qh)));
    }
    case KX_Q8_0: {
        const cllm_block_q8_0 *b = (const cllm_block_q8_0 *)vx + i;
        *d = b->d;
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    default: {
        const cllm_block_q8_1 *b = (const cllm_block_q8_1 *)vx + i;
        *d = b->d;
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    }
}

/* acc + the dot of one unpacked weight block (w, u = |w| or w) with
 * activation block yb; sd = dx * dy and sm = mx * dy in every lane. */
KX_INLINE __m256 kx_block32(int t, __m256i w, __m256i u, __m256 sd, __m256 sm,
                            const cllm_block_q8_0 *yb, __m256 acc) {
    const __m256i yq = _mm256_loadu_si256((const __m256i *)yb->qs);
    const __m256i s = kx_affine32(t) ? yq : _mm256_sign_epi8(yq, w);
    const __m256i p = kx_dot_u8s8(_mm256_setzero_si256(), u, s);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sd, acc);
    if (kx_affine32(t)) {
        const __m256i sy = kx_dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(1), yq);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sy), sm, acc);
    }
    return acc;
}

/* acc + the dot of weight block i with activation block i, scales
 * converted one by one. */
KX_INLINE __m256 kx_step32(int t, const void *vx, const cllm_block_q8_0 *yb, int64_t i,
                           __m256 acc) {
    cllm_fp16 hd = 0, hm = 0;
    const __m256i w = kx_unpack32(t, vx, i, &hd, &hm);
    const __m256i u = kx_affine32(t) ? w : _mm256_sign_epi8(w, w);
    const __m256 dy = kx_h2f8(&yb->d);
    const __m256 sd = _mm256_mul_ps(kx_h2f8(&hd), dy);
    const __m256 sm = kx_affine32(t) ? _mm256_mul_ps(kx_h2f8(&hm), dy) : sd;
    return kx_block32(t, w, u, sd, sm, yb, acc);
}

/* acc + the dot of Q4_0 block i with activation block i: the nibbles stay
 * unsigned, sum (q - 8) y = sum q y - 8 sum y (the dot starts from -8 sum y),
 * and both scales are converted as vectors (broadcast, then vcvtph2ps). */
KX_INLINE __m256 kx_step_q4_0(const cllm_block_q4_0 *xb, const cllm_block_q8_0 *yb, __m256 acc) {
    const __m256i yq = _mm256_loadu_si256((const __m256i *)yb->qs);
    const __m256i zero = _mm256_setzero_si256();
    const __m256i s8 = _mm256_sub_epi32(zero, kx_dot_u8s8(zero, _mm256_set1_epi8(8), yq));
    const __m256i p = kx_dot_u8s8(s8, kx_nibbles32(xb->qs), yq);
    const __m256 d = _mm256_mul_ps(kx_h2f8(&xb->d), kx_h2f8(&yb->d));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
}

/* Accumulators of a one-column dot over 32-element blocks: block i of a
 * group of 4 goes into accumulator i % KX_ACCS, the blocks after the last
 * whole group into the first, so that the FMA latency does not chain one
 * block to the next. 4 at the AVX-512 level; 2 at the AVX2 level, where a
 * block takes longer than an FMA's latency anyway, so that the columns-as-
 * alone kernel below keeps 4 columns' accumulators in 16 registers. */
#define KX_ACCS (KX_VNNI ? 4 : 2)

/* The one-column sum of KX_ACCS accumulators. */
KX_INLINE float kx_hsum_accs(const __m256 *a) {
#if KX_VNNI
    return kx_hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
#else
    return kx_hsum(_mm256_add_ps(a[0], a[1]));
#endif
}

/* out[c] = dot(x, y + c * by) for c < nc (nc a constant after inlining). */
KX_INLINE void kx_dot32(int t, int nc, int64_t nb, float *out, const void *vx, const char *y,
                        size_t by) {
    if (nc == 1 && t == KX_Q4_0) {
        const cllm_block_q8_0 *y0 = (const cllm_block_q8_0 *)y;
        const cllm_block_q4_0 *x0 = vx;
        __m256 a[KX_ACCS];
        for (int j = 0; j < KX_ACCS; j++) a[j] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 4 <= nb; i += 4) {
            /* the hardware prefetcher alone leaves this loop waiting on
             * memory */
            _mm_prefetch((const char *)(x0 + i) + 1024, _MM_HINT_T0);
            for (int j = 0; j < 4; j++)
                a[j % KX_ACCS] = kx_step_q4_0(x0 + i + j, y0 + i + j, a[j % KX_ACCS]);
        }
        for (; i < nb; i++) a[0] = kx_step_q4_0(x0 + i, y0 + i, a[0]);
        out[0] = kx_hsum_accs(a);
        return;
    }
    if (nc == 1) {
        const cllm_block_q8_0 *y0 = (const cllm_block_q8_0 *)y;
        __m256 a[KX_ACCS];
        for (int j = 0; j < KX_ACCS; j++) a[j] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 4 <= nb; i += 4) {
            /* the hardware prefetcher alone leaves one core waiting on
             * memory (kernels.h: CLLM_CPU_PREFETCH_AHEAD) */
            const char *ahead =
                (const char *)vx + (size_t)i * kx_bytes32(t) + CLLM_CPU_PREFETCH_AHEAD;
            _mm_prefetch(ahead, CLLM_CPU_PREFETCH_HINT);
            _mm_prefetch(ahead + 64, CLLM_CPU_PREFETCH_HINT);
            _mm_prefetch(ahead + 128, CLLM_CPU_PREFETCH_HINT);
            for (int j = 0; j < 4; j++)
                a[j % KX_ACCS] = kx_step32(t, vx, y0 + i + j, i + j, a[j % KX_ACCS]);
        }
        for (; i < nb; i++) a[0] = kx_step32(t, vx, y0 + i, i, a[0]);
        out[0] = kx_hsum_accs(a);
        return;
    }
    __m256 acc[KX_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        cllm_fp16 hd = 0, hm = 0;
        const __m256i w = kx_unpack32(t, vx, i, &hd, &hm);
        const __m256i u = kx_affine32(t) ? w : _mm256_sign_epi8(w, w);
        const float dx = kx_h2f(hd), mx = kx_h2f(hm);
        for (int c = 0; c < nc; c++) {
            const cllm_block_q8_0 *yb = (const cllm_block_q8_0 *)(y + (size_t)c * by) + i;
            const float dy = kx_h2f(yb->d);
            const __m256 sd = _mm256_set1_ps(dx * dy);
            const __m256 sm = kx_affine32(t) ? _mm256_set1_ps(mx * dy) : sd;
            acc[c] = kx_block32(t, w, u, sd, sm, yb, acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) out[c] = kx_hsum(acc[c]);
}

/* vec_dot and vec_dot_n of a type whose kernel is fn(t, nc, blocks, ...),
 * qk elements per block (nc a constant in each branch). */
#define KX_DEFINE_DOT(name, t, fn, qk)                                                             \
    static void kx_vec_dot_##name(int64_t n, float *out, const void *x, const void *y) {           \
        fn(t, 1, n / (qk), out, x, (const char *)y, 0);                                            \
    }                                                                                              \
    static void kx_vec_dot_n_##name(int64_t n, float *out, const void *x, const void *y,           \
                                    size_t by, int ncols) {                                        \
        for (int c0 = 0; c0 < ncols; c0 += KX_COLS) {                                              \
            const char *yc = (const char *)y + (size_t)c0 * by;                                    \
            switch (ncols - c0) {                                                                  \
            case 1: fn(t, KX_NC(1), n / (qk), out + c0, x, yc, by); break;                         \
            case 2: fn(t, KX_NC(2), n / (qk), out + c0, x, yc, by); break;                         \
            case 3: fn(t, KX_NC(3), n / (qk), out + c0, x, yc, by); break;                         \
            case 4: fn(t, KX_NC(4), n / (qk), out + c0, x, yc, by); break;                         \
            case 5: fn(t, KX_NC(5), n / (qk), out + c0, x, yc, by); break;                         \
            case 6: fn(t, KX_NC(6), n / (qk), out + c0, x, yc, by); break;                         \
            case 7: fn(t, KX_NC(7), n / (qk), out + c0, x, yc, by); break;                         \
            default: fn(t, KX_NC(8), n / (qk), out + c0, x, yc, by); break;                        \
            }                                                                                      \
        }                                                                                          \
    }
#define KX_DEFINE_DOT32(name, t) KX_DEFINE_DOT(name, t, kx_dot32, 32)

KX_DEFINE_DOT32(q4_0, KX_Q4_0)
KX_DEFINE_DOT32(q4_1, KX_Q4_1)
KX_DEFINE_DOT32(q5_0, KX_Q5_0)
KX_DEFINE_DOT32(q5_1, KX_Q5_1)
KX_DEFINE_DOT32(q8_0, KX_Q8_0)
KX_DEFINE_DOT32(q8_1, KX_Q8_1)

/* ---- columns as alone: vec_dot_cols for 32-element blocks x Q8_0 -------------
 * A step of several sequences (one token each) needs every column computed
 * exactly as it would be alone, so that no sequence depends on the others.
 * kx_dot32_cols sums each column as kx_dot32 sums one (KX_ACCS
 * accumulators, the same operations per block in the same order), so each
 * result equals vec_dot's bit for bit, while a weight block is loaded and
 * unpacked once for all the columns: 4 columns at a time (KX_ACCS
 * accumulators each: 16 of the AVX-512 level's 32 registers, 8 of the AVX2
 * level's 16). With 2 columns at a time at the AVX2 level, a step of 4
 * sequences read every weight row twice. The K-quants' vec_dot_n already
 * sums each column as it sums one, and serves as their vec_dot_cols. */
#define KX_ALONE_COLS 4

/* Block i of the row against column c of nc, into acc[c][j]. */
KX_INLINE void kx_step32_cols(int t, int nc, const void *vx, const char *y, size_t by, int64_t i,
                              int j, __m256 acc[][KX_ACCS]) {
    if (t == KX_Q4_0) { /* kx_step_q4_0, its weight half hoisted */
        const cllm_block_q4_0 *xb = (const cllm_block_q4_0 *)vx + i;
        const __m256i q = kx_nibbles32(xb->qs), zero = _mm256_setzero_si256();
        const __m256 dx = kx_h2f8(&xb->d);
        for (int c = 0; c < nc; c++) {
            const cllm_block_q8_0 *yb = (const cllm_block_q8_0 *)(y + (size_t)c * by) + i;
            const __m256i yq = _mm256_loadu_si256((const __m256i *)yb->qs);
            const __m256i s8 = _mm256_sub_epi32(zero, kx_dot_u8s8(zero, _mm256_set1_epi8(8), yq));
            const __m256i p = kx_dot_u8s8(s8, q, yq);
            const __m256 d = _mm256_mul_ps(dx, kx_h2f8(&yb->d));
            acc[c][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[c][j]);
        }
        return;
    }
    /* kx_step32, its weight half hoisted */
    cllm_fp16 hd = 0, hm = 0;
    const __m256i w = kx_unpack32(t, vx, i, &hd, &hm);
    const __m256i u = kx_affine32(t) ? w : _mm256_sign_epi8(w, w);
    const __m256 dx = kx_h2f8(&hd), mx = kx_h2f8(&hm);
    for (int c = 0; c < nc; c++) {
        const cllm_block_q8_0 *yb = (const cllm_block_q8_0 *)(y + (size_t)c * by) + i;
        const __m256 dy = kx_h2f8(&yb->d);
        const __m256 sd = _mm256_mul_ps(dx, dy);
        const __m256 sm = kx_affine32(t) ? _mm256_mul_ps(mx, dy) : sd;
        acc[c][j] = kx_block32(t, w, u, sd, sm, yb, acc[c][j]);
    }
}

/* out[c] = dot(x, y + c * by) for c < nc (<= KX_ALONE_COLS, a constant after
 * inlining), each as kx_dot32 with nc = 1 computes it. */
KX_INLINE void kx_dot32_cols(int t, int nc, int64_t nb, float *out, const void *vx, const char *y,
                             size_t by) {
    __m256 acc[KX_ALONE_COLS][KX_ACCS];
    for (int c = 0; c < nc; c++) {
        for (int j = 0; j < KX_ACCS; j++) acc[c][j] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        /* the one-column loops' prefetch */
        const char *ahead = (const char *)vx + (size_t)i * kx_bytes32(t);
        if (t == KX_Q4_0) {
            _mm_prefetch(ahead + 1024, _MM_HINT_T0);
        } else {
            _mm_prefetch(ahead + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
            _mm_prefetch(ahead + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
            _mm_prefetch(ahead + CLLM_CPU_PREFETCH_AHEAD + 128, CLLM_CPU_PREFETCH_HINT);
        }
        for (int j = 0; j < 4; j++) kx_step32_cols(t, nc, vx, y, by, i + j, j % KX_ACCS, acc);
    }
    for (; i < nb; i++) kx_step32_cols(t, nc, vx, y, by, i, 0, acc);
    for (int c = 0; c < nc; c++) out[c] = kx_hsum_accs(acc[c]);
}

#define KX_DEFINE_COLS32(name, t)                                                                  \
    static void kx_vec_dot_cols_##name(int64_t n, float *out, const void *x, const void *y,        \
                                       size_t by, int ncols) {                                     \
        for (int c0 = 0; c0 < ncols; c0 += KX_ALONE_COLS) {                                        \
            const char *yc = (const char *)y + (size_t)c0 * by;                                    \
            if (ncols - c0 >= KX_ALONE_COLS) {                                                     \
                kx_dot32_cols(t, KX_ALONE_COLS, n / 32, out + c0, x, yc, by);                      \
            } else if (ncols - c0 == 3) {                                                          \
                kx_dot32_cols(t, 3, n / 32, out + c0, x, yc, by);                                  \
            } else if (ncols - c0 == 2) {                                                          \
                kx_dot32_cols(t, 2, n / 32, out + c0, x, yc, by);                                  \
            } else {                                                                               \
                kx_dot32(t, 1, n / 32, out + c0, x, yc, 0);                                        \
            }                                                                                      \
        }                                                                                          \
    }

KX_DEFINE_COLS32(q4_0, KX_Q4_0)
KX_DEFINE_COLS32(q4_1, KX_Q4_1)
KX_DEFINE_COLS32(q5_0, KX_Q5_0)
KX_DEFINE_COLS32(q5_1, KX_Q5_1)
KX_DEFINE_COLS32(q8_0, KX_Q8_0)
KX_DEFINE_COLS32(q8_1, KX_Q8_1)

/* ---- register-tiled vec_dot_mxn for 32-element blocks x Q8_0 ----------------
 * A tile of nr weight rows x nc activation columns: per block, each weight
 * row is unpacked once (and its scales converted once) for all nc columns,
 * each activation block loaded once (and its scale converted once) for all
 * nr rows, with nr x nc float accumulators in registers. Q4_0 keeps its
 * nibbles unsigned: sum (q - 8) y = sum q y - 8 sum y, with 8 sum y computed
 * once per column (no sign instructions in the inner loop). */

#ifndef KX_ROWS
#define KX_ROWS 2 /* weight rows per tile (16 vector registers) */
#endif
#define KX_TC    4 /* activation columns per tile */
#define KX_NR(r) ((r) < KX_ROWS ? (r) : KX_ROWS)

KX_INLINE void kx_tile32(int t, int nr, int nc, int64_t nb, float *out, size_t ldo, const char *x,
                         size_t bx, const char *y, size_t by) {
    __m256 acc[KX_ROWS][KX_TC];
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i w[KX_ROWS], u[KX_ROWS];
        __m256 dx[KX_ROWS], mx[KX_ROWS];
        for (int r = 0; r < nr; r++) {
            cllm_fp16 hd = 0, hm = 0;
            if (t == KX_Q4_0) {
                const cllm_block_q4_0 *b = (const cllm_block_q4_0 *)(x + (size_t)r * bx) + i;
                dx[r] = kx_h2f8(&b->d);
                w[r] = u[r] = kx_nibbles32(b->qs);
            } else {
                w[r] = kx_unpack32(t, x + (size_t)r * bx, i, &hd, &hm);
                u[r] = kx_affine32(t) ? w[r] : _mm256_sign_epi8(w[r], w[r]);
                dx[r] = kx_h2f8(&hd);
            }
            mx[r] = kx_affine32(t) ? kx_h2f8(&hm) : dx[r];
        }
        for (int c = 0; c < nc; c++) {
            const cllm_block_q8_0 *yb = (const cllm_block_q8_0 *)(y + (size_t)c * by) + i;
            const __m256i yq = _mm256_loadu_si256((const __m256i *)yb->qs);
            const __m256 dy = kx_h2f8(&yb->d);
            /* Q4_0: the dots start from -8 sum y; Q4_1, Q5_1: sum y for the min */
            __m256i sy = _mm256_setzero_si256();
            if (t == KX_Q4_0) sy = _mm256_sub_epi32(sy, kx_dot_u8s8(sy, _mm256_set1_epi8(8), yq));
            if (kx_affine32(t)) sy = kx_dot_u8s8(sy, _mm256_set1_epi8(1), yq);
            const __m256 syf = _mm256_cvtepi32_ps(sy);
            for (int r = 0; r < nr; r++) {
                const __m256i sv =
                    (t == KX_Q4_0 || kx_affine32(t)) ? yq : _mm256_sign_epi8(yq, w[r]);
                const __m256i p = kx_dot_u8s8(t == KX_Q4_0 ? sy : _mm256_setzero_si256(), u[r], sv);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx[r], dy), acc[r][c]);
                if (kx_affine32(t))
                    acc[r][c] = _mm256_fmadd_ps(syf, _mm256_mul_ps(mx[r], dy), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[(size_t)r * ldo + (size_t)c] = kx_hsum(acc[r][c]);
}

/* One tile of nr x nc (runtime values) through the instance of those sizes. */
#define KX_TILE_CASE(R, C)                                                                         \
    case (R)*8 + (C): kx_tile32(t, KX_NR(R), C, nb, out, ldo, x, bx, y, by); break
KX_INLINE void kx_tile32_any(int t, int nr, int nc, int64_t nb, float *out, size_t ldo,
                             const char *x, size_t bx, const char *y, size_t by) {
    switch (nr * 8 + nc) {
        KX_TILE_CASE(1, 1);
        KX_TILE_CASE(1, 2);
        KX_TILE_CASE(1, 3);
        KX_TILE_CASE(1, 4);
        KX_TILE_CASE(2, 1);
        KX_TILE_CASE(2, 2);
        KX_TILE_CASE(2, 3);
        KX_TILE_CASE(2, 4);
        KX_TILE_CASE(3, 1);
        KX_TILE_CASE(3, 2);
        KX_TILE_CASE(3, 3);
        KX_TILE_CASE(3, 4);
        KX_TILE_CASE(4, 1);
        KX_TILE_CASE(4, 2);
        KX_TILE_CASE(4, 3);
    default: kx_tile32(t, KX_NR(4), 4, nb, out, ldo, x, bx, y, by); break;
    }
}
#undef KX_TILE_CASE

#define KX_DEFINE_MXN32(name, t)                                                                   \
    static void kx_vec_dot_mxn_##name(int64_t n, float *out, size_t ldo, const void *x, size_t bx, \
                                      const void *y, size_t by, int nrows, int ncols) {            \
        for (int r0 = 0; r0 < nrows; r0 += KX_ROWS) {                                              \
            const int nr = nrows - r0 < KX_ROWS ? nrows - r0 : KX_ROWS;                            \
            for (int c0 = 0; c0 < ncols; c0 += KX_TC) {                                            \
                const int nc = ncols - c0 < KX_TC ? ncols - c0 : KX_TC;                            \
                kx_tile32_any(t, nr, nc, n / 32, out + (size_t)r0 * ldo + (size_t)c0, ldo,         \
                              (const char *)x + (size_t)r0 * bx, bx,                               \
                              (const char *)y + (size_t)c0 * by, by);                              \
            }                                                                                      \
        }                                                                                          \
    }

KX_DEFINE_MXN32(q4_0, KX_Q4_0)
KX_DEFINE_MXN32(q4_1, KX_Q4_1)
KX_DEFINE_MXN32(q5_0, KX_Q5_0)
KX_DEFINE_MXN32(q5_1, KX_Q5_1)
KX_DEFINE_MXN32(q8_0, KX_Q8_0)
KX_DEFINE_MXN32(q8_1, KX_Q8_1)

/* ---- K-quants x Q8_K ---------------------------------------------------------
 * A super-block is unpacked once into kx_sb: its 256 quants as 8 vectors of
 * 32 (chunk k = elements 32k..32k+31), signed or unsigned, the integer scale
 * of each 16-element group as int16 (chunk k's vector: group 2k in its low
 * lane, 2k + 1 in its high one) and the integer mins per group. Then per
 * column:
 *   dot += dy * (d * sum_g sc[g] * sum_{e in g} q[e] y[e] - dmin * sum_g mn[g] * bsums[g])
 * The integer sums are exact (int32 cannot overflow: |sc * q * y| summed over
 * 256 elements stays below 2^31 for every format). */

enum { KX_Q2_K, KX_Q3_K, KX_Q4_K, KX_Q5_K, KX_Q6_K, KX_Q8_K };

typedef struct kx_sb {
    __m256i q[8];  /* quants (signed: q - offset) */
    __m256i aq[8]; /* |q| for signed formats */
    __m256i sc[8]; /* int16 group scales, per chunk */
    __m256i mn;    /* int16 group mins (affine formats) */
    float d, dmin;
} kx_sb;

KX_INLINE bool kx_affine_k(int t) { return t == KX_Q2_K || t == KX_Q4_K || t == KX_Q5_K; }

KX_INLINE void kx_set_scales16(kx_sb *s, const int16_t g[16]) {
    for (int k = 0; k < 8; k++)
        s->sc[k] = _mm256_set_m128i(_mm_set1_epi16(g[2 * k + 1]), _mm_set1_epi16(g[2 * k]));
}

/* Sub-block scales and mins of Q4_K / Q5_K: bytes 0..7 of the result are
 * sc[0..7], bytes 8..15 mn[0..7] (layout in quants.h, cllm_q4k_scale_min). */
KX_INLINE void kx_q4k_scales(const uint8_t b[12], uint8_t out[16]) {
    uint32_t u[3];
    memcpy(u, b, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint32_t r[4] = {
        u[0] & m6,                                    /* sc 0..3 */
        (u[2] & m4) | ((u[0] >> 6) & m2) << 4,        /* sc 4..7 */
        u[1] & m6,                                    /* mn 0..3 */
        ((u[2] >> 4) & m4) | ((u[1] >> 6) & m2) << 4, /* mn 4..7 */
    };
    memcpy(out, r, 16);
}

KX_INLINE void kx_q45k_scales(kx_sb *s, const uint8_t scales[12]) {
    uint8_t sm[16];
    kx_q4k_scales(scales, sm);
    int16_t g[16], m[16];
    for (int j = 0; j < 16; j++) {
        g[j] = sm[j / 2];
        m[j] = sm[8 + j / 2];
    }
    kx_set_scales16(s, g);
    s->mn = _mm256_loadu_si256((const __m256i *)m);
}

KX_INLINE void kx_unpack_k(int t, const void *vx, int64_t i, kx_sb *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    switch (t) {
    case KX_Q2_K: {
        const cllm_block_q2_K *b = (const cllm_block_q2_K *)vx + i;
        s->d = kx_h2f(b->d);
        s->dmin = kx_h2f(b->dmin);
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int j = 0; j < 4; j++)
                s->q[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
        }
        int16_t g[16], m[16];
        for (int j = 0; j < 16; j++) {
            g[j] = b->scales[j] & 0xF;
            m[j] = b->scales[j] >> 4;
        }
        kx_set_scales16(s, g);
        s->mn = _mm256_loadu_si256((const __m256i *)m);
        break;
    }
    case KX_Q3_K: {
        const cllm_block_q3_K *b = (const cllm_block_q3_K *)vx + i;
        s->d = kx_h2f(b->d);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                const __m256i hi = _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), _mm256_set1_epi8(4));
                s->q[4 * h + j] = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(4));
            }
        }
        int16_t g[16];
        const uint8_t *sb = b->scales;
        for (int j = 0; j < 16; j++) {
            const int low = j < 8 ? sb[j] & 0xF : sb[j - 8] >> 4;
            const int high = (sb[8 + j % 4] >> (2 * (j / 4))) & 3;
            g[j] = (int16_t)((low | high << 4) - 32);
        }
        kx_set_scales16(s, g);
        break;
    }
    case KX_Q4_K: {
        const cllm_block_q4_K *b = (const cllm_block_q4_K *)vx + i;
        s->d = kx_h2f(b->d);
        s->dmin = kx_h2f(b->dmin);
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            s->q[2 * c] = _mm256_and_si256(v, m4);
            s->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        kx_q45k_scales(s, b->scales);
        break;
    }
    case KX_Q5_K: {
        const cllm_block_q5_K *b = (const cllm_block_q5_K *)vx + i;
        s->d = kx_h2f(b->d);
        s->dmin = kx_h2f(b->dmin);
        const __m256i hv = _mm256_loadu_si256((const __m256i *)b->qh);
        const __m256i b4 = _mm256_set1_epi8(0x10);
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            for (int t2 = 0; t2 < 2; t2++) {
                const int sub = 2 * c + t2;
                const __m256i bit = _mm256_set1_epi8((char)(1 << sub));
                const __m256i hi =
                    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, bit), bit), b4);
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 4 * t2), m4);
                s->q[sub] = _mm256_or_si256(lo, hi);
            }
        }
        kx_q45k_scales(s, b->scales);
        break;
    }
    case KX_Q6_K: {
        const cllm_block_q6_K *b = (const cllm_block_q6_K *)vx + i;
        s->d = kx_h2f(b->d);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            for (int k = 0; k < 4; k++) {
                const __m256i l = (k & 1) ? l1 : l0;
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, 4 * (k >> 1)), m4);
                const __m256i hi =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2 * k), m2), 4);
                s->q[4 * h + k] = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
            }
        }
        int16_t g[16];
        for (int j = 0; j < 16; j++) g[j] = b->scales[j];
        kx_set_scales16(s, g);
        break;
    }
    default: { /* Q8_K */
        const cllm_block_q8_K *b = (const cllm_block_q8_K *)vx + i;
        s->d = b->d;
        for (int k = 0; k < 8; k++) s->q[k] = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * k));
        for (int k = 0; k < 8; k++) s->sc[k] = _mm256_set1_epi16(1);
        break;
    }
    }
    if (!kx_affine_k(t)) {
        for (int k = 0; k < 8; k++) s->aq[k] = _mm256_sign_epi8(s->q[k], s->q[k]);
    }
}

KX_INLINE void kx_dot_k(int t, int nc, int64_t nb, float *out, const void *vx, const char *y,
                        size_t by) {
    __m256 acc[KX_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        kx_sb s;
        kx_unpack_k(t, vx, i, &s);
        for (int c = 0; c < nc; c++) {
            const cllm_block_q8_K *yb = (const cllm_block_q8_K *)(y + (size_t)c * by) + i;
            __m256i sum = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++) {
                const __m256i yq = _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * k));
                const __m256i p = kx_affine_k(t)
                                      ? _mm256_maddubs_epi16(s.q[k], yq)
                                      : _mm256_maddubs_epi16(s.aq[k], _mm256_sign_epi8(yq, s.q[k]));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, s.sc[k]));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(s.d * yb->d), acc[c]);
            if (kx_affine_k(t)) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)yb->bsums);
                const __m256i mm = _mm256_madd_epi16(bs, s.mn);
                acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(s.dmin * yb->d),
                                          acc[c]);
            }
        }
    }
    for (int c = 0; c < nc; c++) out[c] = kx_hsum(acc[c]);
}

#define KX_DEFINE_DOT_K(name, t) KX_DEFINE_DOT(name, t, kx_dot_k, CLLM_QK_K)

KX_DEFINE_DOT_K(q2_K, KX_Q2_K)
KX_DEFINE_DOT_K(q3_K, KX_Q3_K)
KX_DEFINE_DOT_K(q4_K, KX_Q4_K)
KX_DEFINE_DOT_K(q5_K, KX_Q5_K)
KX_DEFINE_DOT_K(q6_K, KX_Q6_K)
KX_DEFINE_DOT_K(q8_K, KX_Q8_K)

/* ---- F32 / F16 / BF16 x F32 ----------------------------------------------------
 * 8 elements per step (converted once, used by every column); the last
 * n % 8 elements one by one. x is read as 16-bit units, 2 per F32 element. */

enum { KX_F16, KX_BF16, KX_F32 };

KX_INLINE __m256 kx_load8_half(int t, const uint16_t *p) {
    if (t == KX_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (t == KX_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KX_INLINE float kx_half1(int t, const uint16_t *p) {
    if (t == KX_F16) return kx_h2f(*p);
    if (t == KX_F32) {
        float f;
        memcpy(&f, p, sizeof(f));
        return f;
    }
    const uint32_t bits = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* alone: vec_dot's one column (4 accumulators); vec_dot_n sums every
 * column, a lone one too, with one accumulator, so that a column's bits do
 * not depend on how many columns share its group (prompts of several
 * sequences read in one batch: cllm_session_decode_seqs). */
KX_INLINE void kx_dot_half(int t, int nc, bool alone, int64_t n, float *out, const void *vx,
                           const char *y, size_t by) {
    const uint16_t *x = vx;
    const int64_t u = t == KX_F32 ? 2 : 1; /* 16-bit units per element */
    __m256 acc[KX_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    int64_t i = 0;
    if (alone) { /* one column: 4 accumulators hide the FMA latency */
        __m256 a1 = _mm256_setzero_ps(), a2 = a1, a3 = a1;
        const float *y0 = (const float *)y;
        for (; i + 32 <= n; i += 32) {
            const char *ahead = (const char *)(x + u * i) + CLLM_CPU_PREFETCH_AHEAD;
            _mm_prefetch(ahead, CLLM_CPU_PREFETCH_HINT);
            if (t == KX_F32) _mm_prefetch(ahead + 64, CLLM_CPU_PREFETCH_HINT);
            acc[0] = _mm256_fmadd_ps(kx_load8_half(t, x + u * i), _mm256_loadu_ps(y0 + i), acc[0]);
            a1 =
                _mm256_fmadd_ps(kx_load8_half(t, x + u * (i + 8)), _mm256_loadu_ps(y0 + i + 8), a1);
            a2 = _mm256_fmadd_ps(kx_load8_half(t, x + u * (i + 16)), _mm256_loadu_ps(y0 + i + 16),
                                 a2);
            a3 = _mm256_fmadd_ps(kx_load8_half(t, x + u * (i + 24)), _mm256_loadu_ps(y0 + i + 24),
                                 a3);
        }
        acc[0] = _mm256_add_ps(_mm256_add_ps(acc[0], a1), _mm256_add_ps(a2, a3));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 xv = kx_load8_half(t, x + u * i);
        for (int c = 0; c < nc; c++) {
            const float *yc = (const float *)(y + (size_t)c * by);
            acc[c] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(yc + i), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) {
        const float *yc = (const float *)(y + (size_t)c * by);
        float s = kx_hsum(acc[c]);
        for (int64_t j = i; j < n; j++) s += kx_half1(t, x + u * j) * yc[j];
        out[c] = s;
    }
}

#define KX_DEFINE_DOT_HALF(name, t)                                                                \
    static void kx_vec_dot_##name(int64_t n, float *out, const void *x, const void *y) {           \
        kx_dot_half(t, 1, true, n, out, x, (const char *)y, 0);                                    \
    }                                                                                              \
    static void kx_vec_dot_n_##name(int64_t n, float *out, const void *x, const void *y,           \
                                    size_t by, int ncols) {                                        \
        for (int c0 = 0; c0 < ncols; c0 += KX_COLS) {                                              \
            const char *yc = (const char *)y + (size_t)c0 * by;                                    \
            switch (ncols - c0) {                                                                  \
            case 1: kx_dot_half(t, KX_NC(1), false, n, out + c0, x, yc, by); break;                \
            case 2: kx_dot_half(t, KX_NC(2), false, n, out + c0, x, yc, by); break;                \
            case 3: kx_dot_half(t, KX_NC(3), false, n, out + c0, x, yc, by); break;                \
            case 4: kx_dot_half(t, KX_NC(4), false, n, out + c0, x, yc, by); break;                \
            case 5: kx_dot_half(t, KX_NC(5), false, n, out + c0, x, yc, by); break;                \
            case 6: kx_dot_half(t, KX_NC(6), false, n, out + c0, x, yc, by); break;                \
            case 7: kx_dot_half(t, KX_NC(7), false, n, out + c0, x, yc, by); break;                \
            default: kx_dot_half(t, KX_NC(8), false, n, out + c0, x, yc, by); break;               \
            }                                                                                      \
        }                                                                                          \
    }

KX_DEFINE_DOT_HALF(f16, KX_F16)
KX_DEFINE_DOT_HALF(bf16, KX_BF16)
KX_DEFINE_DOT_HALF(f32, KX_F32)

/* ---- the table ------------------------------------------------------------- */

KX_INLINE void kx_set(cllm_cpu_type_kernels *tab, cllm_type t, cllm_vec_dot_fn dot,
                      cllm_vec_dot_n_fn dot_n) {
    if (!tab[t].vec_dot) return; /* no reference: the type is not computable */
    tab[t].vec_dot = dot;
    tab[t].vec_dot_n = dot_n;
    tab[t].vec_dot_cols = NULL; /* kx_set_cols, for a vec_dot of this file */
    if (tab[t].vec_dot_type == CLLM_TYPE_Q8_0) tab[t].from_float = kx_quantize_row_q8_0;
    if (tab[t].vec_dot_type == CLLM_TYPE_Q8_K) tab[t].from_float = kx_quantize_row_q8_K;
}

KX_INLINE void kx_set_mxn(cllm_cpu_type_kernels *tab, cllm_type t, cllm_vec_dot_mxn_fn mxn) {
    if (tab[t].vec_dot) tab[t].vec_dot_mxn = mxn;
}

KX_INLINE void kx_set_cols(cllm_cpu_type_kernels *tab, cllm_type t, cllm_vec_dot_n_fn cols) {
    if (tab[t].vec_dot) tab[t].vec_dot_cols = cols;
}

KX_INLINE void kx_fill(cllm_cpu_type_kernels *tab) {
    kx_set_mxn(tab, CLLM_TYPE_Q4_0, kx_vec_dot_mxn_q4_0);
    kx_set_mxn(tab, CLLM_TYPE_Q4_1, kx_vec_dot_mxn_q4_1);
    kx_set_mxn(tab, CLLM_TYPE_Q5_0, kx_vec_dot_mxn_q5_0);
    kx_set_mxn(tab, CLLM_TYPE_Q5_1, kx_vec_dot_mxn_q5_1);
    kx_set_mxn(tab, CLLM_TYPE_Q8_0, kx_vec_dot_mxn_q8_0);
    kx_set_mxn(tab, CLLM_TYPE_Q8_1, kx_vec_dot_mxn_q8_1);
    kx_set(tab, CLLM_TYPE_Q4_0, kx_vec_dot_q4_0, kx_vec_dot_n_q4_0);
    kx_set(tab, CLLM_TYPE_Q4_1, kx_vec_dot_q4_1, kx_vec_dot_n_q4_1);
    kx_set(tab, CLLM_TYPE_Q5_0, kx_vec_dot_q5_0, kx_vec_dot_n_q5_0);
    kx_set(tab, CLLM_TYPE_Q5_1, kx_vec_dot_q5_1, kx_vec_dot_n_q5_1);
    kx_set(tab, CLLM_TYPE_Q8_0, kx_vec_dot_q8_0, kx_vec_dot_n_q8_0);
    kx_set(tab, CLLM_TYPE_Q8_1, kx_vec_dot_q8_1, kx_vec_dot_n_q8_1);
    kx_set(tab, CLLM_TYPE_Q2_K, kx_vec_dot_q2_K, kx_vec_dot_n_q2_K);
    kx_set(tab, CLLM_TYPE_Q3_K, kx_vec_dot_q3_K, kx_vec_dot_n_q3_K);
    kx_set(tab, CLLM_TYPE_Q4_K, kx_vec_dot_q4_K, kx_vec_dot_n_q4_K);
    kx_set(tab, CLLM_TYPE_Q5_K, kx_vec_dot_q5_K, kx_vec_dot_n_q5_K);
    kx_set(tab, CLLM_TYPE_Q6_K, kx_vec_dot_q6_K, kx_vec_dot_n_q6_K);
    kx_set(tab, CLLM_TYPE_Q8_K, kx_vec_dot_q8_K, kx_vec_dot_n_q8_K);
    kx_set(tab, CLLM_TYPE_F16, kx_vec_dot_f16, kx_vec_dot_n_f16);
    kx_set(tab, CLLM_TYPE_BF16, kx_vec_dot_bf16, kx_vec_dot_n_bf16);
    kx_set(tab, CLLM_TYPE_F32, kx_vec_dot_f32, kx_vec_dot_n_f32);
    kx_set_cols(tab, CLLM_TYPE_Q4_0, kx_vec_dot_cols_q4_0);
    kx_set_cols(tab, CLLM_TYPE_Q4_1, kx_vec_dot_cols_q4_1);
    kx_set_cols(tab, CLLM_TYPE_Q5_0, kx_vec_dot_cols_q5_0);
    kx_set_cols(tab, CLLM_TYPE_Q5_1, kx_vec_dot_cols_q5_1);
    kx_set_cols(tab, CLLM_TYPE_Q8_0, kx_vec_dot_cols_q8_0);
    kx_set_cols(tab, CLLM_TYPE_Q8_1, kx_vec_dot_cols_q8_1);
    /* kx_dot_k sums every column as it sums one */
    kx_set_cols(tab, CLLM_TYPE_Q2_K, kx_vec_dot_n_q2_K);
    kx_set_cols(tab, CLLM_TYPE_Q3_K, kx_vec_dot_n_q3_K);
    kx_set_cols(tab, CLLM_TYPE_Q4_K, kx_vec_dot_n_q4_K);
    kx_set_cols(tab, CLLM_TYPE_Q5_K, kx_vec_dot_n_q5_K);
    kx_set_cols(tab, CLLM_TYPE_Q6_K, kx_vec_dot_n_q6_K);
    kx_set_cols(tab, CLLM_TYPE_Q8_K, kx_vec_dot_n_q8_K);
}
