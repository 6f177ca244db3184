/*
 * Quantized types: block layouts and the reference (portable C) kernels.
 *
 * Every quantized type stores a row as consecutive blocks; the structs below
 * are the exact GGUF on-disk layouts (little-endian, no padding; their sizes
 * are checked below). Per type there are three kernels, with the signatures
 * of the traits table (core/types.h), so that they go into it directly:
 *
 *     cllm_dequantize_row_<t>(src, dst, n)   blocks -> n floats       (to_float)
 *     cllm_quantize_row_<t>(src, dst, n)     n floats -> blocks       (from_float)
 *     cllm_vec_dot_<t>_<u>(n, out, x, y)     *out = dot(x, y), x a row of <t>,
 *                                            y a row of <u> = vec_dot_type
 *
 * n is an element count and must be a multiple of the block size (asserted:
 * callers validate shapes). Rows need the alignment of their block struct
 * (2 bytes, 4 for Q8_K), which whole blocks in a GGUF tensor always have.
 *
 * The activation ("vec_dot_type") of each dot product:
 *
 *     weights                                 activations
 *     Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1           Q8_0   (Q4_1/Q5_1 take the block sum
 *                                                     of the activation quants in
 *                                                     exact integer arithmetic, so
 *                                                     no Q8_1 with its fp16 sum)
 *     Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K           Q8_K   (float d, bsums for the mins)
 *     F16 BF16                                F32    (no loss on the activations)
 *
 * Usage (one row of weights times one row of activations):
 *
 *     const cllm_type_traits *tw = cllm_type_traits_of(CLLM_TYPE_Q4_K);
 *     const cllm_type_traits *ta = cllm_type_traits_of(tw->vec_dot_type);
 *     ta->from_float(act_f32, act_q, n);     // n % 256 == 0
 *     float r;
 *     tw->vec_dot(n, &r, weight_row, act_q);
 *
 * The quantizers round to nearest on the grid of the format; the K-quants
 * search each sub-block's scale (and min) by least squares, then quantize the
 * sub-block scales against the super-block scale and requantize with the
 * scales actually stored. They are not bit-identical with other quantizers of
 * the format, but every block they write decodes by the format's rules.
 * Inputs must be finite; a scale that would overflow fp16 saturates to 65504.
 *
 * All kernels are thread-safe (no state) and allocate nothing.
 */
#ifndef CLLM_CORE_QUANTS_H
#define CLLM_CORE_QUANTS_H

#include "core/types.h"

#include <stdint.h>
#include <string.h>

#define CLLM_QK4_0 32
#define CLLM_QK4_1 32
#define CLLM_QK5_0 32
#define CLLM_QK5_1 32
#define CLLM_QK8_0 32
#define CLLM_QK8_1 32
#define CLLM_QK_K  256 /* elements of a K-quant super-block */

/* ---- 32-element blocks --------------------------------------------------- */

/* Q4_0: x[j] = d * (q[j] - 8), q in 0..15.
 * qs[j] holds element j in its low nibble and element j + 16 in its high one. */
typedef struct cllm_block_q4_0 {
    cllm_fp16 d;
    uint8_t qs[CLLM_QK4_0 / 2];
} cllm_block_q4_0;
_Static_assert(sizeof(cllm_block_q4_0) == 2 + 16, "q4_0 block");

/* Q4_1: x[j] = d * q[j] + m, q in 0..15; nibbles as Q4_0. */
typedef struct cllm_block_q4_1 {
    cllm_fp16 d;
    cllm_fp16 m;
    uint8_t qs[CLLM_QK4_1 / 2];
} cllm_block_q4_1;
_Static_assert(sizeof(cllm_block_q4_1) == 2 + 2 + 16, "q4_1 block");

/* Q5_0: x[j] = d * (q[j] - 16), q in 0..31. The low 4 bits as Q4_0; bit 4 of
 * q[j] is bit j of qh read as a little-endian uint32. */
typedef struct cllm_block_q5_0 {
    cllm_fp16 d;
    uint8_t qh[4];
    uint8_t qs[CLLM_QK5_0 / 2];
} cllm_block_q5_0;
_Static_assert(sizeof(cllm_block_q5_0) == 2 + 4 + 16, "q5_0 block");

/* Q5_1: x[j] = d * q[j] + m, q in 0..31; bits as Q5_0. */
typedef struct cllm_block_q5_1 {
    cllm_fp16 d;
    cllm_fp16 m;
    uint8_t qh[4];
    uint8_t qs[CLLM_QK5_1 / 2];
} cllm_block_q5_1;
_Static_assert(sizeof(cllm_block_q5_1) == 2 + 2 + 4 + 16, "q5_1 block");

/* Q8_0: x[j] = d * qs[j], qs in -127..127 (as written here). */
typedef struct cllm_block_q8_0 {
    cllm_fp16 d;
    int8_t qs[CLLM_QK8_0];
} cllm_block_q8_0;
_Static_assert(sizeof(cllm_block_q8_0) == 2 + 32, "q8_0 block");

/* Q8_1: x[j] = d * qs[j]; s = d * sum(qs) (rounded to fp16). */
typedef struct cllm_block_q8_1 {
    cllm_fp16 d;
    cllm_fp16 s;
    int8_t qs[CLLM_QK8_1];
} cllm_block_q8_1;
_Static_assert(sizeof(cllm_block_q8_1) == 2 + 2 + 32, "q8_1 block");

/* ---- 256-element super-blocks (K-quants) ---------------------------------
 *
 * In the element orders below, e is the index in the super-block (0..255).
 */

/* Q2_K: 16 sub-blocks of 16, sub-block s = e / 16.
 *   x[e] = d * (scales[s] & 0xF) * q[e] - dmin * (scales[s] >> 4),  q in 0..3
 *   e = 128*h + 32*j + l (h 0..1, j 0..3, l 0..31):
 *   q[e] = (qs[32*h + l] >> (2*j)) & 3 */
typedef struct cllm_block_q2_K {
    uint8_t scales[CLLM_QK_K / 16];
    uint8_t qs[CLLM_QK_K / 4];
    cllm_fp16 d;
    cllm_fp16 dmin;
} cllm_block_q2_K;
_Static_assert(sizeof(cllm_block_q2_K) == 16 + 64 + 2 + 2, "q2_K block");

/* Q3_K: 16 sub-blocks of 16, s = e / 16.
 *   x[e] = d * (sc[s] - 32) * (q[e] - 4),  sc 6 bits, q in 0..7
 *   e = 128*h + 32*j + l (h 0..1, j 0..3, l 0..31):
 *   q[e] = ((qs[32*h + l] >> (2*j)) & 3) | (((hmask[l] >> (4*h + j)) & 1) << 2)
 *   sc[s] = low | high << 4, with
 *     low  = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4
 *     high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3 */
typedef struct cllm_block_q3_K {
    uint8_t hmask[CLLM_QK_K / 8];
    uint8_t qs[CLLM_QK_K / 4];
    uint8_t scales[12];
    cllm_fp16 d;
} cllm_block_q3_K;
_Static_assert(sizeof(cllm_block_q3_K) == 32 + 64 + 12 + 2, "q3_K block");

/* Q4_K: 8 sub-blocks of 32, s = e / 32.
 *   x[e] = d * sc[s] * q[e] - dmin * mn[s],  sc, mn 6 bits, q in 0..15
 *   e = 64*c + 32*t + l (c 0..3, t 0..1, l 0..31):
 *   q[e] = (qs[32*c + l] >> (4*t)) & 0xF
 *   sc, mn packed in scales[12] (see cllm_q4k_scale_min). */
typedef struct cllm_block_q4_K {
    cllm_fp16 d;
    cllm_fp16 dmin;
    uint8_t scales[12];
    uint8_t qs[CLLM_QK_K / 2];
} cllm_block_q4_K;
_Static_assert(sizeof(cllm_block_q4_K) == 2 + 2 + 12 + 128, "q4_K block");

/* Q5_K: as Q4_K with a fifth bit: q in 0..31,
 *   q[e] = ((qs[32*c + l] >> (4*t)) & 0xF) | (((qh[l] >> (e / 32)) & 1) << 4) */
typedef struct cllm_block_q5_K {
    cllm_fp16 d;
    cllm_fp16 dmin;
    uint8_t scales[12];
    uint8_t qh[CLLM_QK_K / 8];
    uint8_t qs[CLLM_QK_K / 2];
} cllm_block_q5_K;
_Static_assert(sizeof(cllm_block_q5_K) == 2 + 2 + 12 + 32 + 128, "q5_K block");

/* Q6_K: 16 sub-blocks of 16, s = e / 16.
 *   x[e] = d * scales[s] * (q[e] - 32),  scales int8, q in 0..63
 *   e = 128*h + 32*k + l (h 0..1, k 0..3, l 0..31):
 *   q[e] = ((ql[64*h + 32*(k & 1) + l] >> (4*(k >> 1))) & 0xF)
 *        | (((qh[32*h + l] >> (2*k)) & 3) << 4) */
typedef struct cllm_block_q6_K {
    uint8_t ql[CLLM_QK_K / 2];
    uint8_t qh[CLLM_QK_K / 4];
    int8_t scales[CLLM_QK_K / 16];
    cllm_fp16 d;
} cllm_block_q6_K;
_Static_assert(sizeof(cllm_block_q6_K) == 128 + 64 + 16 + 2, "q6_K block");

/* Q8_K (activations of the K-quant dot products): x[e] = d * qs[e],
 * qs in -127..127, bsums[g] = sum of qs[16*g .. 16*g + 15]. */
typedef struct cllm_block_q8_K {
    float d;
    int8_t qs[CLLM_QK_K];
    int16_t bsums[CLLM_QK_K / 16];
} cllm_block_q8_K;
_Static_assert(sizeof(cllm_block_q8_K) == 4 + 256 + 32, "q8_K block");

/* Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block: the 12 bytes
 * hold eight 6-bit scales and eight 6-bit mins.
 *   j < 4: sc = scales[j] & 63,  mn = scales[j + 4] & 63
 *   j >= 4: sc = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4
 *           mn = (scales[j + 4] >> 4)  | (scales[j] >> 6) << 4 */
static inline void cllm_q4k_scale_min(int j, const uint8_t *scales, int *sc, int *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
        *mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

/*
 * fp16 -> fp32 for the kernels, inline (the out-of-line cllm_fp16_to_fp32 is
 * the same function; the tests compare all 65536 values). The exponent and
 * mantissa bits moved into place form a float 2^-112 times too small, for
 * normal and subnormal halves alike; the multiply is exact (as long as
 * subnormal floats are not flushed to zero, i.e. no -ffast-math). Inf and NaN
 * are moved separately.
 */
static inline float cllm_quant_fp16_to_fp32(cllm_fp16 h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t bits;
    if ((h & 0x7c00u) == 0x7c00u) {
        bits = sign | 0x7f800000u | em; /* inf, nan */
    } else {
        float f;
        memcpy(&f, &em, sizeof(f));
        f *= 0x1p112f;
        memcpy(&bits, &f, sizeof(bits));
        bits |= sign;
    }
    float r;
    memcpy(&r, &bits, sizeof(r));
    return r;
}

/* Nearest integer of x, ties to even, for |x| < 2^22 (callers clamp first):
 * adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits, a
 * form compilers vectorise (unlike lrintf). Needs IEEE float arithmetic in
 * the default rounding mode, without -ffast-math. */
static inline int cllm_quant_nearest_int(float x) {
    const float f = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* x clamped to [lo, hi] (|lo|, |hi| < 2^22), then rounded to nearest. Clamping
 * first keeps the rounding trick in range for any x, infinities included (a
 * NaN gives some integer, not UB). */
static inline int cllm_quant_round_clamp(float x, float lo, float hi) {
    return cllm_quant_nearest_int(x < lo ? lo : (x > hi ? hi : x));
}

/* fp32 -> fp16 for a block scale: round to nearest, saturating at +-65504
 * instead of becoming inf (an inf scale would decode 0 quants as NaN). */
static inline cllm_fp16 cllm_quant_scale_to_fp16(float d) {
    if (d > 65504.0f) d = 65504.0f;
    if (d < -65504.0f) d = -65504.0f;
    return cllm_fp32_to_fp16(d);
}

/* ---- kernels ------------------------------------------------------------- */

void cllm_dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q8_0(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q8_1(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q2_K(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q3_K(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q4_K(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q5_K(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q6_K(const void *src, float *dst, int64_t n);
void cllm_dequantize_row_q8_K(const void *src, float *dst, int64_t n);

void cllm_quantize_row_q4_0(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q4_1(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q5_0(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q5_1(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q8_0(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q8_1(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q2_K(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q3_K(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q4_K(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q5_K(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q6_K(const float *src, void *dst, int64_t n);
void cllm_quantize_row_q8_K(const float *src, void *dst, int64_t n);

/* x: weights of the first type, y: activations of the second. */
void cllm_vec_dot_q4_0_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q4_1_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q5_0_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q5_1_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q8_0_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q8_1_q8_0(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_q8_K_q8_K(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_f16_f32(int64_t n, float *out, const void *x, const void *y);
void cllm_vec_dot_bf16_f32(int64_t n, float *out, const void *x, const void *y);

#endif /* CLLM_CORE_QUANTS_H */
