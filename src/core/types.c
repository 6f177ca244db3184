/* Element types: the traits table and the float conversions of plain types. */
#include "core/types.h"
#include "core/common.h"
#include "core/quants.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float cllm_fp16_to_fp32(cllm_fp16 h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        const float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

cllm_fp16 cllm_fp32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf or nan (keep a nan a nan) */
        return (cllm_fp16)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    }
    if (ax >= 0x477ff000u) return (cllm_fp16)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: value / 2^-24, rounded to nearest even */
        if (ax < 0x33000000u) return (cllm_fp16)sign; /* < 2^-25: rounds to zero */
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; /* 14 + (112 - e) + ... : bits dropped */
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (cllm_fp16)(sign | r);
    }
    /* normal: rebias exponent, round mantissa to 10 bits, nearest even */
    uint32_t r = ((ax >> 13) - (112u << 10));
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (cllm_fp16)(sign | r);
}

float cllm_bf16_to_fp32(cllm_bf16 h) { return bits_f32((uint32_t)h << 16); }

cllm_bf16 cllm_fp32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (cllm_bf16)((x >> 16) | 0x40u); /* quiet nan */
    return (cllm_bf16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static void f32_vec_dot(int64_t n, float *out, const void *x, const void *y) {
    const float *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)b[i];
    *out = (float)sum;
}

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f16_to_float(const void *src, float *dst, int64_t n) {
    const cllm_fp16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = cllm_fp16_to_fp32(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    cllm_fp16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = cllm_fp32_to_fp16(src[i]);
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const cllm_bf16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = cllm_bf16_to_fp32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    cllm_bf16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = cllm_fp32_to_bf16(src[i]);
}

#define QK_K 256

/* Block layouts follow the GGUF/ggml file format. Quantized arithmetic is
 * joins this table as each type's kernels are written. */
static const cllm_type_traits g_traits[CLLM_TYPE_COUNT] = {
    [CLLM_TYPE_F32] = {"f32", 1, 4, false, f32_to_float, f32_from_float, f32_vec_dot,
                       CLLM_TYPE_F32},
    [CLLM_TYPE_F16] = {"f16", 1, 2, false, f16_to_float, f16_from_float, cllm_vec_dot_f16_f32,
                       CLLM_TYPE_F32},
    [CLLM_TYPE_Q4_0] = {"q4_0", 32, 2 + 16, true, cllm_dequantize_row_q4_0, cllm_quantize_row_q4_0,
                        cllm_vec_dot_q4_0_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q4_1] = {"q4_1", 32, 2 + 2 + 16, true, cllm_dequantize_row_q4_1,
                        cllm_quantize_row_q4_1, cllm_vec_dot_q4_1_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q5_0] = {"q5_0", 32, 2 + 4 + 16, true, cllm_dequantize_row_q5_0,
                        cllm_quantize_row_q5_0, cllm_vec_dot_q5_0_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q5_1] = {"q5_1", 32, 2 + 2 + 4 + 16, true, cllm_dequantize_row_q5_1,
                        cllm_quantize_row_q5_1, cllm_vec_dot_q5_1_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q8_0] = {"q8_0", 32, 2 + 32, true, cllm_dequantize_row_q8_0, cllm_quantize_row_q8_0,
                        cllm_vec_dot_q8_0_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q8_1] = {"q8_1", 32, 2 + 2 + 32, true, cllm_dequantize_row_q8_1,
                        cllm_quantize_row_q8_1, cllm_vec_dot_q8_1_q8_0, CLLM_TYPE_Q8_0},
    [CLLM_TYPE_Q2_K] = {"q2_k", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, true, cllm_dequantize_row_q2_K,
                        cllm_quantize_row_q2_K, cllm_vec_dot_q2_K_q8_K, CLLM_TYPE_Q8_K},
    [CLLM_TYPE_Q3_K] = {"q3_k", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true, cllm_dequantize_row_q3_K,
                        cllm_quantize_row_q3_K, cllm_vec_dot_q3_K_q8_K, CLLM_TYPE_Q8_K},
    [CLLM_TYPE_Q4_K] = {"q4_k", QK_K, 2 + 2 + 12 + QK_K / 2, true, cllm_dequantize_row_q4_K,
                        cllm_quantize_row_q4_K, cllm_vec_dot_q4_K_q8_K, CLLM_TYPE_Q8_K},
    [CLLM_TYPE_Q5_K] = {"q5_k", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true,
                        cllm_dequantize_row_q5_K, cllm_quantize_row_q5_K, cllm_vec_dot_q5_K_q8_K,
                        CLLM_TYPE_Q8_K},
    [CLLM_TYPE_Q6_K] = {"q6_k", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true,
                        cllm_dequantize_row_q6_K, cllm_quantize_row_q6_K, cllm_vec_dot_q6_K_q8_K,
                        CLLM_TYPE_Q8_K},
    [CLLM_TYPE_Q8_K] = {"q8_k", QK_K, 4 + QK_K + QK_K / 16 * 2, true, cllm_dequantize_row_q8_K,
                        cllm_quantize_row_q8_K, cllm_vec_dot_q8_K_q8_K, CLLM_TYPE_Q8_K},
    [CLLM_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 2 + QK_K / 4, true, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_IQ2_XS] = {"iq2_xs", QK_K, 2 + QK_K / 4 + QK_K / 32, true, NULL, NULL, NULL,
                          CLLM_TYPE_F32},
    [CLLM_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 2 + 3 * QK_K / 8, true, NULL, NULL, NULL,
                           CLLM_TYPE_F32},
    [CLLM_TYPE_IQ1_S] = {"iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16, true, NULL, NULL, NULL,
                         CLLM_TYPE_F32},
    [CLLM_TYPE_IQ4_NL] = {"iq4_nl", 32, 2 + 16, true, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_IQ3_S] = {"iq3_s", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64, true, NULL,
                         NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_IQ2_S] = {"iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 32, true, NULL, NULL,
                         NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_IQ4_XS] = {"iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2, true, NULL, NULL, NULL,
                          CLLM_TYPE_F32},
    [CLLM_TYPE_I8] = {"i8", 1, 1, false, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_I16] = {"i16", 1, 2, false, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_I32] = {"i32", 1, 4, false, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_I64] = {"i64", 1, 8, false, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_F64] = {"f64", 1, 8, false, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_IQ1_M] = {"iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, true, NULL, NULL, NULL,
                         CLLM_TYPE_F32},
    [CLLM_TYPE_BF16] = {"bf16", 1, 2, false, bf16_to_float, bf16_from_float, cllm_vec_dot_bf16_f32,
                        CLLM_TYPE_F32},
    [CLLM_TYPE_TQ1_0] = {"tq1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2, true, NULL,
                         NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_TQ2_0] = {"tq2_0", QK_K, 2 + QK_K / 4, true, NULL, NULL, NULL, CLLM_TYPE_F32},
    [CLLM_TYPE_MXFP4] = {"mxfp4", 32, 1 + 16, true, NULL, NULL, NULL, CLLM_TYPE_F32},
};
_Static_assert(CLLM_ARRAY_SIZE(g_traits) == CLLM_TYPE_COUNT, "one traits entry per type id");

const cllm_type_traits *cllm_type_traits_of(cllm_type type) {
    if ((unsigned)type >= CLLM_TYPE_COUNT || g_traits[type].name == NULL) return NULL;
    return &g_traits[type];
}

bool cllm_type_is_valid(int64_t type) {
    return type >= 0 && type < CLLM_TYPE_COUNT && g_traits[type].name != NULL;
}

const char *cllm_type_name(cllm_type type) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    return tt ? tt->name : "unknown";
}

size_t cllm_row_size(cllm_type type, int64_t ne0) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    CLLM_ASSERTF(tt != NULL, "row size of invalid type %d", (int)type);
    CLLM_ASSERTF(ne0 >= 0 && ne0 % tt->blck_size == 0,
                 "row of %lld %s elements is not whole blocks", (long long)ne0, tt->name);
    return (size_t)(ne0 / tt->blck_size) * tt->type_size;
}
