/*
 * Reference kernels of the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q8_1) and the dot products of F16 / BF16 rows with F32 rows.
 *
 * Layouts and maths are in quants.h. The loops are plain on purpose: integer
 * sums of fixed length, which compilers vectorise; SIMD kernels come later and
 * are tested against these.
 */
#include "core/quants.h"
#include "core/common.h"

#include <math.h>

static inline float fp16_f32(cllm_fp16 h) { return cllm_quant_fp16_to_fp32(h); }

static inline float bf16_f32(cllm_bf16 h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* Integer dot product and sum of 32 int8 (the weight quants of a block are
 * unpacked to int8 first, so that every type shares this loop). */
static inline int32_t dot_i8(const int8_t *a, const int8_t *b) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += a[j] * b[j];
    return s;
}

static inline int32_t sum_i8(const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += a[j];
    return s;
}

/* The value of largest magnitude of x[0..n) (its sign kept), and that magnitude. */
static float signed_absmax(const float *x, int n, float *amax) {
    float m = 0.0f, am = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        if (a > am) {
            am = a;
            m = x[j];
        }
    }
    *amax = am;
    return m;
}

static void min_max(const float *x, int n, float *lo, float *hi) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < n; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    *lo = mn;
    *hi = mx;
}

/* ---- Q4_0 ------------------------------------------------------------------
 * x = d * (q - 8). The value of largest magnitude maps to q = 0 (-8 is the
 * longer side of the signed range), so d = max / -8 and that value is exact;
 * the others round to nearest on the grid of the stored (fp16) d. */

void cllm_quantize_row_q4_0(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK4_0 == 0);
    cllm_block_q4_0 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK4_0; ib++) {
        const float *x = src + ib * CLLM_QK4_0;
        float amax;
        const float max = signed_absmax(x, CLLM_QK4_0, &amax);
        y[ib].d = cllm_quant_scale_to_fp16(max / -8.0f);
        const float d = fp16_f32(y[ib].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < CLLM_QK4_0 / 2; j++) {
            const int q0 = cllm_quant_round_clamp(x[j] * id + 8.0f, 0.0f, 15.0f);
            const int q1 = cllm_quant_round_clamp(x[j + 16] * id + 8.0f, 0.0f, 15.0f);
            y[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void cllm_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK4_0 == 0);
    const cllm_block_q4_0 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK4_0; ib++) {
        const float d = fp16_f32(x[ib].d);
        float *y = dst + ib * CLLM_QK4_0;
        for (int j = 0; j < CLLM_QK4_0 / 2; j++) {
            y[j] = d * (float)((x[ib].qs[j] & 0x0F) - 8);
            y[j + 16] = d * (float)((x[ib].qs[j] >> 4) - 8);
        }
    }
}

/* dot = sum over blocks of dx * dy * sum_j (qx[j] - 8) * qy[j] */
void cllm_vec_dot_q4_0_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK4_0 == 0);
    const cllm_block_q4_0 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK4_0; ib++) {
        int8_t q[CLLM_QK4_0];
        for (int j = 0; j < CLLM_QK4_0 / 2; j++) {
            q[j] = (int8_t)((x[ib].qs[j] & 0x0F) - 8);
            q[j + 16] = (int8_t)((x[ib].qs[j] >> 4) - 8);
        }
        sum += fp16_f32(x[ib].d) * fp16_f32(y[ib].d) * (float)dot_i8(q, y[ib].qs);
    }
    *out = sum;
}

/* ---- Q4_1 ------------------------------------------------------------------
 * x = d * q + m: m = min, d = (max - min) / 15, q = round((x - m) / d) with
 * the stored (fp16) d and m. */

void cllm_quantize_row_q4_1(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK4_1 == 0);
    cllm_block_q4_1 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK4_1; ib++) {
        const float *x = src + ib * CLLM_QK4_1;
        float lo, hi;
        min_max(x, CLLM_QK4_1, &lo, &hi);
        y[ib].d = cllm_quant_scale_to_fp16((hi - lo) / 15.0f);
        y[ib].m = cllm_quant_scale_to_fp16(lo);
        const float d = fp16_f32(y[ib].d), m = fp16_f32(y[ib].m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < CLLM_QK4_1 / 2; j++) {
            const int q0 = cllm_quant_round_clamp((x[j] - m) * id, 0.0f, 15.0f);
            const int q1 = cllm_quant_round_clamp((x[j + 16] - m) * id, 0.0f, 15.0f);
            y[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void cllm_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK4_1 == 0);
    const cllm_block_q4_1 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK4_1; ib++) {
        const float d = fp16_f32(x[ib].d), m = fp16_f32(x[ib].m);
        float *y = dst + ib * CLLM_QK4_1;
        for (int j = 0; j < CLLM_QK4_1 / 2; j++) {
            y[j] = d * (float)(x[ib].qs[j] & 0x0F) + m;
            y[j + 16] = d * (float)(x[ib].qs[j] >> 4) + m;
        }
    }
}

/* dot = sum over blocks of dx * dy * sum_j qx[j] * qy[j] + mx * dy * sum_j qy[j] */
void cllm_vec_dot_q4_1_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK4_1 == 0);
    const cllm_block_q4_1 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK4_1; ib++) {
        int8_t q[CLLM_QK4_1];
        for (int j = 0; j < CLLM_QK4_1 / 2; j++) {
            q[j] = (int8_t)(x[ib].qs[j] & 0x0F);
            q[j + 16] = (int8_t)(x[ib].qs[j] >> 4);
        }
        const int32_t sumi = dot_i8(q, y[ib].qs), sumy = sum_i8(y[ib].qs);
        const float dy = fp16_f32(y[ib].d);
        sum += fp16_f32(x[ib].d) * dy * (float)sumi + fp16_f32(x[ib].m) * dy * (float)sumy;
    }
    *out = sum;
}

/* ---- Q5_0 ------------------------------------------------------------------
 * x = d * (q - 16), q = low nibble | (bit j of qh) << 4; d = max / -16 as Q4_0. */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t v) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(v >> (8 * k));
}

/* The 32 quants (0..31) of a Q5_0 / Q5_1 block: nibbles, then the fifth bits. */
static inline void unpack_q5(const uint8_t qs[16], const uint8_t qh[4], int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(qs[j] & 0x0F);
        q[j + 16] = (int8_t)(qs[j] >> 4);
    }
    /* bit j of qh; a table of masks instead of a shift by j, which SSE2 and
     * NEON cannot vectorise */
    static const uint32_t bit[32] = {
        1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
        1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
        1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
        1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
    const uint32_t h = load_qh(qh);
    for (int j = 0; j < 32; j++) q[j] |= (int8_t)((h & bit[j]) ? 16 : 0);
}

void cllm_quantize_row_q5_0(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK5_0 == 0);
    cllm_block_q5_0 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK5_0; ib++) {
        const float *x = src + ib * CLLM_QK5_0;
        float amax;
        const float max = signed_absmax(x, CLLM_QK5_0, &amax);
        y[ib].d = cllm_quant_scale_to_fp16(max / -16.0f);
        const float d = fp16_f32(y[ib].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < CLLM_QK5_0 / 2; j++) {
            const int q0 = cllm_quant_round_clamp(x[j] * id + 16.0f, 0.0f, 31.0f);
            const int q1 = cllm_quant_round_clamp(x[j + 16] * id + 16.0f, 0.0f, 31.0f);
            y[ib].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[ib].qh, qh);
    }
}

void cllm_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK5_0 == 0);
    const cllm_block_q5_0 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK5_0; ib++) {
        const float d = fp16_f32(x[ib].d);
        int8_t q[CLLM_QK5_0];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        float *y = dst + ib * CLLM_QK5_0;
        for (int j = 0; j < CLLM_QK5_0; j++) y[j] = d * (float)(q[j] - 16);
    }
}

/* dot = sum over blocks of dx * dy * sum_j (qx[j] - 16) * qy[j] */
void cllm_vec_dot_q5_0_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK5_0 == 0);
    const cllm_block_q5_0 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK5_0; ib++) {
        int8_t q[CLLM_QK5_0];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        const int32_t sumi = dot_i8(q, y[ib].qs) - 16 * sum_i8(y[ib].qs);
        sum += fp16_f32(x[ib].d) * fp16_f32(y[ib].d) * (float)sumi;
    }
    *out = sum;
}

/* ---- Q5_1 ------------------------------------------------------------------
 * x = d * q + m, q in 0..31 with bits as Q5_0; d = (max - min) / 31. */

void cllm_quantize_row_q5_1(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK5_1 == 0);
    cllm_block_q5_1 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK5_1; ib++) {
        const float *x = src + ib * CLLM_QK5_1;
        float lo, hi;
        min_max(x, CLLM_QK5_1, &lo, &hi);
        y[ib].d = cllm_quant_scale_to_fp16((hi - lo) / 31.0f);
        y[ib].m = cllm_quant_scale_to_fp16(lo);
        const float d = fp16_f32(y[ib].d), m = fp16_f32(y[ib].m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < CLLM_QK5_1 / 2; j++) {
            const int q0 = cllm_quant_round_clamp((x[j] - m) * id, 0.0f, 31.0f);
            const int q1 = cllm_quant_round_clamp((x[j + 16] - m) * id, 0.0f, 31.0f);
            y[ib].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[ib].qh, qh);
    }
}

void cllm_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK5_1 == 0);
    const cllm_block_q5_1 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK5_1; ib++) {
        const float d = fp16_f32(x[ib].d), m = fp16_f32(x[ib].m);
        int8_t q[CLLM_QK5_1];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        float *y = dst + ib * CLLM_QK5_1;
        for (int j = 0; j < CLLM_QK5_1; j++) y[j] = d * (float)q[j] + m;
    }
}

/* dot = sum over blocks of dx * dy * sum_j qx[j] * qy[j] + mx * dy * sum_j qy[j] */
void cllm_vec_dot_q5_1_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK5_1 == 0);
    const cllm_block_q5_1 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK5_1; ib++) {
        int8_t q[CLLM_QK5_1];
        unpack_q5(x[ib].qs, x[ib].qh, q);
        const int32_t sumi = dot_i8(q, y[ib].qs), sumy = sum_i8(y[ib].qs);
        const float dy = fp16_f32(y[ib].d);
        sum += fp16_f32(x[ib].d) * dy * (float)sumi + fp16_f32(x[ib].m) * dy * (float)sumy;
    }
    *out = sum;
}

/* ---- Q8_0 / Q8_1 -----------------------------------------------------------
 * x = d * q, d = amax / 127, q = round(x / d) in -127..127 (-128 is never
 * written, so SIMD kernels may negate quants freely). */

/* Quantizes 32 values; returns the stored d and, in *sum, the sum of the quants. */
static cllm_fp16 quantize_block_q8(const float *x, int8_t *qs, int32_t *sum) {
    float amax;
    signed_absmax(x, 32, &amax);
    const cllm_fp16 dh = cllm_quant_scale_to_fp16(amax / 127.0f);
    const float d = fp16_f32(dh);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < 32; j++) {
        const int q = cllm_quant_round_clamp(x[j] * id, -127.0f, 127.0f);
        qs[j] = (int8_t)q;
        s += q;
    }
    *sum = s;
    return dh;
}

void cllm_quantize_row_q8_0(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK8_0 == 0);
    cllm_block_q8_0 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK8_0; ib++) {
        int32_t sum;
        y[ib].d = quantize_block_q8(src + ib * CLLM_QK8_0, y[ib].qs, &sum);
    }
}

void cllm_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK8_0 == 0);
    const cllm_block_q8_0 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK8_0; ib++) {
        const float d = fp16_f32(x[ib].d);
        float *y = dst + ib * CLLM_QK8_0;
        for (int j = 0; j < CLLM_QK8_0; j++) y[j] = d * (float)x[ib].qs[j];
    }
}

/* dot = sum over blocks of dx * dy * sum_j qx[j] * qy[j] */
void cllm_vec_dot_q8_0_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK8_0 == 0);
    const cllm_block_q8_0 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK8_0; ib++) {
        sum += fp16_f32(x[ib].d) * fp16_f32(y[ib].d) * (float)dot_i8(x[ib].qs, y[ib].qs);
    }
    *out = sum;
}

/* Q8_1 as Q8_0, plus s = d * sum(q) with the stored d. */
void cllm_quantize_row_q8_1(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK8_1 == 0);
    cllm_block_q8_1 *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK8_1; ib++) {
        int32_t sum;
        y[ib].d = quantize_block_q8(src + ib * CLLM_QK8_1, y[ib].qs, &sum);
        y[ib].s = cllm_quant_scale_to_fp16(fp16_f32(y[ib].d) * (float)sum);
    }
}

void cllm_dequantize_row_q8_1(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK8_1 == 0);
    const cllm_block_q8_1 *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK8_1; ib++) {
        const float d = fp16_f32(x[ib].d);
        float *y = dst + ib * CLLM_QK8_1;
        for (int j = 0; j < CLLM_QK8_1; j++) y[j] = d * (float)x[ib].qs[j];
    }
}

/* dot = sum over blocks of dx * dy * sum_j qx[j] * qy[j] (s is not needed) */
void cllm_vec_dot_q8_1_q8_0(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK8_1 == 0);
    const cllm_block_q8_1 *x = vx;
    const cllm_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK8_1; ib++) {
        sum += fp16_f32(x[ib].d) * fp16_f32(y[ib].d) * (float)dot_i8(x[ib].qs, y[ib].qs);
    }
    *out = sum;
}

/* ---- F16 / BF16 x F32 ------------------------------------------------------
 * Float sums do not vectorise as one accumulator (the order of additions
 * would change), so 32 independent accumulators take one lane each; they are
 * added up at the end. Any n (plain types have blocks of 1). */

#define DOT_LANES 32

static float sum_lanes(const float acc[DOT_LANES]) {
    float s = 0.0f;
    for (int k = 0; k < DOT_LANES; k++) s += acc[k];
    return s;
}

void cllm_vec_dot_f16_f32(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n >= 0);
    const cllm_fp16 *x = vx;
    const float *y = vy;
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES) {
        for (int k = 0; k < DOT_LANES; k++) acc[k] += fp16_f32(x[i + k]) * y[i + k];
    }
    for (int k = 0; i < n; i++, k++) acc[k] += fp16_f32(x[i]) * y[i];
    *out = sum_lanes(acc);
}

void cllm_vec_dot_bf16_f32(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n >= 0);
    const cllm_bf16 *x = vx;
    const float *y = vy;
    float acc[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES) {
        for (int k = 0; k < DOT_LANES; k++) acc[k] += bf16_f32(x[i + k]) * y[i + k];
    }
    for (int k = 0; i < n; i++, k++) acc[k] += bf16_f32(x[i]) * y[i];
    *out = sum_lanes(acc);
}
