/*
 * Quantized types: block layouts, quantize / dequantize round trips, and the
 * dot products against their activation types.
 *
 * Round-trip bounds are on the relative RMS error ||dequant(quant(x)) - x|| /
 * ||x|| over 16 rows of 4096 elements (fixed seed). A uniform grid of step D
 * has RMS error D / sqrt(12); a block scaled to its largest magnitude (about
 * 2.1 sigma for 32 Gaussian values, 2.8 for 256) gives e.g. Q8_0: 2.1 / 127 /
 * 3.46 = 0.48 %, Q4_0: 2.1 / 8 / 3.46 = 7.6 % plus clipping on the short side
 * of the signed range. The bounds are the measured values (printed by this
 * test) plus 10-20 % headroom, so that a real loss of accuracy fails.
 */
#define _POSIX_C_SOURCE 200809L

#include "common/check.h"
#include "core/common.h"
#include "core/quants.h"
#include "core/types.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- data ------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) { /* (0, 1) */
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static int rng_int(int lo, int hi) { /* [lo, hi] */
    return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

static float rng_gauss(void) {
    return (float)(sqrt(-2.0 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform()));
}

static void fill_gauss(float *x, int64_t n, float scale, float mean) {
    for (int64_t i = 0; i < n; i++) x[i] = mean + scale * rng_gauss();
}

/* ---- the types under test ---------------------------------------------------- */

typedef struct quant_case {
    cllm_type type;
    size_t block_bytes;     /* sizeof of the block struct */
    int64_t block;          /* elements per block */
    cllm_type vec_dot_type; /* documented in quants.h */
    double rt_gauss;        /* round-trip bound: N(0, 1) */
    double rt_tiny;         /* N(0, 1e-3): fp16 scales get subnormal */
    double rt_outlier;      /* N(0, 1) with one value at 60 per row */
} quant_case;

/* Measured with this test's data (relative RMS, %): gauss / tiny / outlier
 *   q4_0 8.63 / 8.63 / 8.82    q4_1 7.82 / 7.81 / 10.47   q5_0 4.27 / 4.27 / 6.51
 *   q5_1 3.79 / 3.79 / 4.50    q8_0 0.536 / 0.537 / 0.940 q8_1 as q8_0
 *   q2_K 26.9 / 26.9 / 27.8    q3_K 14.4 / 14.4 / 11.5    q4_K 7.14 / 7.15 / 9.58
 *   q5_K 3.59 / 3.61 / 4.40    q6_K 1.69 / 1.72 / 2.73    q8_K 0.697 / 0.697 / 2.53
 * "tiny" costs little: fp16 scales go subnormal (Q8_0, Q6_K: d ~ 1e-5..1e-6)
 * and lose a few bits. The outlier block's other values fall below its step
 * and mostly quantize to zero, which raises the error (Q8_K: one outlier per
 * 256 values instead of per 32). Bounds: the measured values plus about 10 %. */
static const quant_case k_cases[] = {
    {CLLM_TYPE_Q4_0, sizeof(cllm_block_q4_0), 32, CLLM_TYPE_Q8_0, 0.095, 0.095, 0.097},
    {CLLM_TYPE_Q4_1, sizeof(cllm_block_q4_1), 32, CLLM_TYPE_Q8_0, 0.086, 0.086, 0.115},
    {CLLM_TYPE_Q5_0, sizeof(cllm_block_q5_0), 32, CLLM_TYPE_Q8_0, 0.047, 0.047, 0.072},
    {CLLM_TYPE_Q5_1, sizeof(cllm_block_q5_1), 32, CLLM_TYPE_Q8_0, 0.042, 0.042, 0.050},
    {CLLM_TYPE_Q8_0, sizeof(cllm_block_q8_0), 32, CLLM_TYPE_Q8_0, 0.0060, 0.0060, 0.0105},
    {CLLM_TYPE_Q8_1, sizeof(cllm_block_q8_1), 32, CLLM_TYPE_Q8_0, 0.0060, 0.0060, 0.0105},
    {CLLM_TYPE_Q2_K, sizeof(cllm_block_q2_K), 256, CLLM_TYPE_Q8_K, 0.295, 0.295, 0.305},
    {CLLM_TYPE_Q3_K, sizeof(cllm_block_q3_K), 256, CLLM_TYPE_Q8_K, 0.158, 0.158, 0.127},
    {CLLM_TYPE_Q4_K, sizeof(cllm_block_q4_K), 256, CLLM_TYPE_Q8_K, 0.079, 0.079, 0.105},
    {CLLM_TYPE_Q5_K, sizeof(cllm_block_q5_K), 256, CLLM_TYPE_Q8_K, 0.040, 0.040, 0.049},
    {CLLM_TYPE_Q6_K, sizeof(cllm_block_q6_K), 256, CLLM_TYPE_Q8_K, 0.0186, 0.019, 0.030},
    {CLLM_TYPE_Q8_K, sizeof(cllm_block_q8_K), 256, CLLM_TYPE_Q8_K, 0.0077, 0.0077, 0.028},
};

#define ROW   4096 /* elements per row: 128 blocks of 32, 16 super-blocks */
#define NROWS 16

static const char *tname(cllm_type t) { return cllm_type_name(t); }

/* Quantizes x[0..n) to `type` and back into y; returns the bytes used. */
static size_t round_trip(cllm_type type, const float *x, float *y, int64_t n, void *q) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    tt->from_float(x, q, n);
    tt->to_float(q, y, n);
    return cllm_row_size(type, n);
}

/* ||y - x|| / ||x||, in double. */
static double rel_rms(const float *x, const float *y, int64_t n) {
    double e = 0.0, s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0.0 ? sqrt(e / s) : sqrt(e);
}

/* x == y element by element (so 0 == -0, which a zero quant times a negative scale gives). */
static bool same_values(const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return false;
    }
    return true;
}

static bool all_finite(const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return false;
    }
    return true;
}

/* ---- traits and helpers -------------------------------------------------------- */

static void test_traits(void) {
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(k_cases); c++) {
        const quant_case *qc = &k_cases[c];
        const cllm_type_traits *tt = cllm_type_traits_of(qc->type);
        CHECKF(tt != NULL && tt->is_quantized, "%s", tname(qc->type));
        if (tt == NULL) continue;
        CHECKF(tt->type_size == qc->block_bytes, "%s: %zu vs %zu", tt->name, tt->type_size,
               qc->block_bytes);
        CHECK_EQ_INT(tt->blck_size, qc->block);
        CHECKF(tt->to_float && tt->from_float && tt->vec_dot, "%s", tt->name);
        CHECKF(tt->vec_dot_type == qc->vec_dot_type, "%s", tt->name);
    }
    const cllm_type_traits *f16 = cllm_type_traits_of(CLLM_TYPE_F16);
    const cllm_type_traits *bf16 = cllm_type_traits_of(CLLM_TYPE_BF16);
    CHECK(f16->vec_dot == cllm_vec_dot_f16_f32 && f16->vec_dot_type == CLLM_TYPE_F32);
    CHECK(bf16->vec_dot == cllm_vec_dot_bf16_f32 && bf16->vec_dot_type == CLLM_TYPE_F32);
}

static void test_helpers(void) {
    /* the inline fp16 decoder equals the library's on every bit pattern */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = cllm_quant_fp16_to_fp32((cllm_fp16)h);
        const float b = cllm_fp16_to_fp32((cllm_fp16)h);
        if (isnan(b) ? !isnan(a) : memcmp(&a, &b, sizeof(a)) != 0) bad++;
    }
    CHECK_EQ_INT(bad, 0);

    /* nearest integer, ties to even */
    CHECK_EQ_INT(cllm_quant_nearest_int(2.5f), 2);
    CHECK_EQ_INT(cllm_quant_nearest_int(3.5f), 4);
    CHECK_EQ_INT(cllm_quant_nearest_int(-2.5f), -2);
    CHECK_EQ_INT(cllm_quant_nearest_int(-2.6f), -3);
    CHECK_EQ_INT(cllm_quant_nearest_int(0.49999997f), 0);
    CHECK_EQ_INT(cllm_quant_nearest_int(-127.0f), -127);
    CHECK_EQ_INT(cllm_quant_nearest_int(4000000.4f), 4000000);

    /* scales saturate instead of becoming inf */
    CHECK(cllm_fp16_to_fp32(cllm_quant_scale_to_fp16(1e9f)) == 65504.0f);
    CHECK(cllm_fp16_to_fp32(cllm_quant_scale_to_fp16(-1e9f)) == -65504.0f);

    /* the Q4_K / Q5_K 6-bit scale and min unpacking, by hand */
    const uint8_t b[12] = {0xC5, 0x01, 0x02, 0x03, 0x47, 0x04, 0x05, 0x06, 0x92, 0x31, 0, 0};
    int sc, mn;
    cllm_q4k_scale_min(0, b, &sc, &mn);
    CHECK(sc == 5 && mn == 7);
    cllm_q4k_scale_min(1, b, &sc, &mn);
    CHECK(sc == 1 && mn == 4);
    cllm_q4k_scale_min(4, b, &sc, &mn); /* low 4 of b[8], top 2 from b[0] / b[4] */
    CHECK(sc == (0x2 | 3 << 4) && mn == (0x9 | 1 << 4));
    cllm_q4k_scale_min(5, b, &sc, &mn);
    CHECK(sc == 1 && mn == 3);
}

/* ---- hand-built blocks ----------------------------------------------------------
 * Expected values are worked out by hand from the layouts in quants.h. */

#define H_HALF  0x3800 /* 0.5 */
#define H_ONE   0x3C00 /* 1.0 */
#define H_MONE  0xBC00 /* -1.0 */
#define H_QUART 0x3400 /* 0.25 */

static void test_hand_32(void) {
    float y[32];
    {
        cllm_block_q4_0 b = {.d = H_HALF};
        memset(b.qs, 0x88, sizeof(b.qs)); /* all q = 8: zero */
        b.qs[0] = 0x1F;                   /* element 0: q 15, element 16: q 1 */
        b.qs[15] = 0x80;                  /* element 15: q 0, element 31: q 8 */
        cllm_dequantize_row_q4_0(&b, y, 32);
        CHECK(y[0] == 3.5f && y[16] == -3.5f && y[15] == -4.0f && y[31] == 0.0f && y[1] == 0.0f);
    }
    {
        cllm_block_q4_1 b = {.d = H_HALF, .m = H_MONE};
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[0] = 0x1F;
        cllm_dequantize_row_q4_1(&b, y, 32);
        CHECK(y[0] == 6.5f && y[16] == -0.5f && y[1] == -1.0f);
    }
    {
        cllm_block_q5_0 b = {.d = H_ONE, .qh = {0x08, 0, 0x08, 0}}; /* bits 3 and 19 */
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[3] = 0x21;
        cllm_dequantize_row_q5_0(&b, y, 32);
        /* element 3: 1 | 16 -> 1; element 19: 2 | 16 -> 2; element 4: 0 -> -16 */
        CHECK(y[3] == 1.0f && y[19] == 2.0f && y[4] == -16.0f && y[20] == -16.0f);
    }
    {
        cllm_block_q5_1 b = {.d = H_HALF, .m = H_MONE, .qh = {0, 0, 0, 0x80}}; /* bit 31 */
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[15] = 0xF3;
        cllm_dequantize_row_q5_1(&b, y, 32);
        /* element 15: 3 -> 0.5 * 3 - 1; element 31: 15 | 16 -> 0.5 * 31 - 1 */
        CHECK(y[15] == 0.5f && y[31] == 14.5f && y[0] == -1.0f);
    }
    {
        cllm_block_q8_0 b = {.d = H_QUART};
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[5] = -7;
        b.qs[31] = 127;
        cllm_dequantize_row_q8_0(&b, y, 32);
        CHECK(y[5] == -1.75f && y[31] == 31.75f && y[0] == 0.0f);
    }
    {
        cllm_block_q8_1 b = {.d = H_QUART, .s = H_ONE}; /* s is not used to decode */
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[2] = -128;
        cllm_dequantize_row_q8_1(&b, y, 32);
        CHECK(y[2] == -32.0f && y[3] == 0.0f);
    }
}

static void test_hand_k(void) {
    float y[256];
    {
        /* Q2_K: scales[s] = s | ((s + 1) & 15) << 4; d 1, dmin 0.5 */
        cllm_block_q2_K b = {.d = H_ONE, .dmin = H_HALF};
        for (int s = 0; s < 16; s++) b.scales[s] = (uint8_t)(s | ((s + 1) & 15) << 4);
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[32 + 7] = 0xE4; /* 3,2,1,0 from the top: elements 135, 167, 199, 231 */
        cllm_dequantize_row_q2_K(&b, y, 256);
        CHECK(y[0] == -0.5f);   /* s 0: 0 * 0 - 0.5 * 1 */
        CHECK(y[135] == -4.5f); /* s 8: 8 * 0 - 0.5 * 9 */
        CHECK(y[167] == 4.5f);  /* s 10: 10 * 1 - 0.5 * 11 */
        CHECK(y[199] == 17.5f); /* s 12: 12 * 2 - 0.5 * 13 */
        CHECK(y[231] == 34.5f); /* s 14: 14 * 3 - 0.5 * 15 */
        CHECK(y[255] == 0.0f);  /* s 15: 15 * 0 - 0.5 * 0 */
    }
    {
        /* Q3_K, d 0.5. Scales: s 0 = 10 | 0 << 4, s 4 = 3 | 1 << 4, s 8 = 5 | 2 << 4,
         * s 12 = 0 | 3 << 4, s 1 = 0; each minus 32: -22, -13, 5, 16, -32. */
        cllm_block_q3_K b = {.d = H_HALF};
        memset(b.hmask, 0, sizeof(b.hmask));
        memset(b.qs, 0, sizeof(b.qs));
        memset(b.scales, 0, sizeof(b.scales));
        b.scales[0] = 0x5A;
        b.scales[4] = 0x03;
        b.scales[8] = 0xE4;
        b.qs[5] = 0x03;    /* element 5 (h 0, j 0, l 5): low 3 */
        b.hmask[5] = 0x01; /* high bit: q 7 -> 3 */
        b.qs[34] = 0x01;   /* element 130 (h 1, j 0, l 2): q 1 -> -3 */
        b.qs[6] = 0x20;    /* element 70 (h 0, j 2, l 6): low 2 */
        b.hmask[6] = 0x04; /* high bit: q 6 -> 2 */
        b.qs[40] = 0x30;   /* element 200 (h 1, j 2, l 8): q 3 -> -1 */
        cllm_dequantize_row_q3_K(&b, y, 256);
        CHECK(y[5] == -33.0f);  /* 0.5 * -22 * 3 */
        CHECK(y[130] == -7.5f); /* 0.5 * 5 * -3 */
        CHECK(y[70] == -13.0f); /* 0.5 * -13 * 2 */
        CHECK(y[200] == -8.0f); /* 0.5 * 16 * -1 */
        CHECK(y[31] == 64.0f);  /* s 1: 0.5 * -32 * -4 */
    }
    {
        /* Q4_K / Q5_K, d 0.5, dmin 1: sub-block 0: sc 5 mn 7; 4: sc 50 mn 25; 5: sc 1 mn 3 */
        const uint8_t scales[12] = {0xC5, 0, 0, 0, 0x47, 0, 0, 0, 0x92, 0x31, 0, 0};
        cllm_block_q4_K b = {.d = H_HALF, .dmin = H_ONE};
        memcpy(b.scales, scales, 12);
        memset(b.qs, 0, sizeof(b.qs));
        b.qs[3] = 0x0C;  /* element 3 (c 0, t 0): 12 */
        b.qs[66] = 0xAB; /* element 130 (c 2, t 0, l 2): 11; element 162 (t 1): 10 */
        cllm_dequantize_row_q4_K(&b, y, 256);
        CHECK(y[3] == 23.0f);    /* 0.5 * 5 * 12 - 7 */
        CHECK(y[130] == 250.0f); /* 0.5 * 50 * 11 - 25 */
        CHECK(y[162] == 2.0f);   /* 0.5 * 1 * 10 - 3 */
        CHECK(y[0] == -7.0f);

        cllm_block_q5_K b5 = {.d = H_HALF, .dmin = H_ONE};
        memcpy(b5.scales, scales, 12);
        memcpy(b5.qs, b.qs, sizeof(b.qs));
        memset(b5.qh, 0, sizeof(b5.qh));
        b5.qh[2] = 0x10; /* bit 4 = element 130 / 32: element 130 gets + 16 */
        b5.qh[3] = 0x01; /* bit 0: element 3 */
        cllm_dequantize_row_q5_K(&b5, y, 256);
        CHECK(y[3] == 63.0f);    /* 0.5 * 5 * 28 - 7 */
        CHECK(y[130] == 650.0f); /* 0.5 * 50 * 27 - 25 */
        CHECK(y[162] == 2.0f);   /* bit 5 of qh[2] clear */
        CHECK(y[35] == 0.0f);    /* s 1: sc 0 mn 0 */
    }
    {
        /* Q6_K, d 0.5 */
        cllm_block_q6_K b = {.d = H_HALF};
        memset(b.ql, 0, sizeof(b.ql));
        memset(b.qh, 0, sizeof(b.qh));
        memset(b.scales, 0, sizeof(b.scales));
        b.scales[0] = 3;
        b.scales[2] = -4;
        b.scales[4] = 2;
        b.scales[6] = 1;
        b.scales[12] = -128;
        b.ql[5] = 0x07;  /* element 5 (h 0, k 0, l 5): low 7 */
        b.qh[5] = 0x02;  /* high 2 -> 39 - 32 = 7 */
        b.ql[40] = 0x0F; /* element 40 (h 0, k 1, l 8): low 15 */
        b.qh[8] = 0x04;  /* high 1 -> 31 - 32 = -1 */
        b.ql[6] = 0x90;  /* element 70 (h 0, k 2, l 6): high nibble 9 */
        b.qh[6] = 0x30;  /* high 3 -> 57 - 32 = 25 */
        b.ql[36] = 0x50; /* element 100 (h 0, k 3, l 4): high nibble 5 */
        b.qh[4] = 0x40;  /* high 1 -> 21 - 32 = -11 */
        b.ql[72] = 0x10; /* element 200 (h 1, k 2, l 8): 1 -> -31 */
        cllm_dequantize_row_q6_K(&b, y, 256);
        CHECK(y[5] == 10.5f);     /* 0.5 * 3 * 7 */
        CHECK(y[40] == 2.0f);     /* 0.5 * -4 * -1 */
        CHECK(y[70] == 25.0f);    /* 0.5 * 2 * 25 */
        CHECK(y[100] == -5.5f);   /* 0.5 * 1 * -11 */
        CHECK(y[200] == 1984.0f); /* 0.5 * -128 * -31 */
    }
    {
        cllm_block_q8_K b = {.d = 0.5f};
        memset(b.qs, 0, sizeof(b.qs));
        memset(b.bsums, 0, sizeof(b.bsums));
        b.qs[7] = -3;
        b.qs[255] = 127;
        cllm_dequantize_row_q8_K(&b, y, 256);
        CHECK(y[7] == -1.5f && y[255] == 63.5f && y[0] == 0.0f);
    }
}

/* Whole blocks of pseudo-random bytes (fixed fp16 scales: 0.5, and -0.25 / 0.25
 * for m / dmin), decoded and summed with position weights: sum (i + 1) * y[i]
 * catches any element out of place. The expected sums were computed from the
 * same bytes with an independent decoder of the format (the numpy dequantizers
 * of the gguf Python package); every value is a multiple of 1/4, so the sums
 * are exact in double. */
static void test_golden(void) {
    static const struct {
        cllm_type type;
        int scale_at[2]; /* byte offsets of the fp16 scale fields; -1: none */
        uint16_t scale[2];
        double weighted, abs_sum;
    } golden[] = {
        {CLLM_TYPE_Q4_0, {0, -1}, {0x3800, 0}, -1242.5, 244.0},
        {CLLM_TYPE_Q4_1, {0, 2}, {0x3800, 0xB400}, 27212.0, 437.5},
        {CLLM_TYPE_Q5_0, {0, -1}, {0x3800, 0}, -492.0, 523.0},
        {CLLM_TYPE_Q5_1, {0, 2}, {0x3800, 0xB400}, 57522.5, 958.0},
        {CLLM_TYPE_Q8_0, {0, -1}, {0x3800, 0}, -23381.0, 3923.5},
        {CLLM_TYPE_Q2_K, {80, 82}, {0x3800, 0x3400}, 2090033.0, 5569.5},
        {CLLM_TYPE_Q3_K, {108, -1}, {0x3800, 0}, 241938.0, 16028.5},
        {CLLM_TYPE_Q4_K, {0, 2}, {0x3800, 0x3400}, 58542425.5, 112068.5},
        {CLLM_TYPE_Q5_K, {0, 2}, {0x3800, 0x3400}, 115872109.0, 232332.0},
        {CLLM_TYPE_Q6_K, {208, -1}, {0x3800, 0}, -6839981.0, 563792.0},
    };
    static uint8_t raw[4 * 256];
    static float y[4 * 256];
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(golden); c++) {
        const cllm_type_traits *tt = cllm_type_traits_of(golden[c].type);
        const int nb = 4;
        g_rng = (uint64_t)golden[c].type;
        for (size_t i = 0; i < (size_t)nb * tt->type_size; i++)
            raw[i] = (uint8_t)(rng_next() >> 56);
        for (int b = 0; b < nb; b++) {
            for (int k = 0; k < 2; k++) {
                if (golden[c].scale_at[k] < 0) continue;
                uint8_t *p = raw + (size_t)b * tt->type_size + golden[c].scale_at[k];
                p[0] = (uint8_t)(golden[c].scale[k] & 0xFF);
                p[1] = (uint8_t)(golden[c].scale[k] >> 8);
            }
        }
        const int64_t n = nb * tt->blck_size;
        tt->to_float(raw, y, n);
        double weighted = 0.0, abs_sum = 0.0;
        for (int64_t i = 0; i < n; i++) {
            weighted += (double)(i + 1) * y[i];
            abs_sum += fabs((double)y[i]);
        }
        CHECKF(weighted == golden[c].weighted && abs_sum == golden[c].abs_sum,
               "%s: %.17g %.17g, want %.17g %.17g", tt->name, weighted, abs_sum, golden[c].weighted,
               golden[c].abs_sum);
    }
}

/* ---- round trips ----------------------------------------------------------------- */

static void test_round_trip(void) {
    const int64_t n = (int64_t)ROW * NROWS;
    float *x = malloc((size_t)n * sizeof(float));
    float *y = malloc((size_t)n * sizeof(float));
    void *q = malloc((size_t)n * sizeof(float)); /* more than any type needs */
    CHECK(x && y && q);
    if (!x || !y || !q) goto done;

    printf("round-trip relative RMS error (%%): gauss / tiny / outlier\n");
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(k_cases); c++) {
        const quant_case *qc = &k_cases[c];
        double e[3];

        g_rng = 1234; /* the same data for every type */
        fill_gauss(x, n, 1.0f, 0.0f);
        round_trip(qc->type, x, y, n, q);
        e[0] = rel_rms(x, y, n);

        for (int64_t i = 0; i < n; i++) x[i] *= 1e-3f;
        round_trip(qc->type, x, y, n, q);
        e[1] = rel_rms(x, y, n);

        for (int64_t i = 0; i < n; i++) x[i] *= 1e3f;
        for (int r = 0; r < NROWS; r++) x[(int64_t)r * ROW + 37 + 97 * r] = 60.0f;
        round_trip(qc->type, x, y, n, q);
        e[2] = rel_rms(x, y, n);
        /* the outlier itself survives: it sets its block's scale */
        double worst_outlier = 0.0;
        for (int r = 0; r < NROWS; r++) {
            const int64_t i = (int64_t)r * ROW + 37 + 97 * r;
            worst_outlier = fmax(worst_outlier, fabs(y[i] - 60.0) / 60.0);
        }

        printf("  %-5s %7.3f %7.3f %7.3f   (bounds %.3g / %.3g / %.3g)  outlier %.2g\n",
               tname(qc->type), 100 * e[0], 100 * e[1], 100 * e[2], 100 * qc->rt_gauss,
               100 * qc->rt_tiny, 100 * qc->rt_outlier, worst_outlier);
        CHECKF(e[0] <= qc->rt_gauss, "%s gauss %.4f > %.4f", tname(qc->type), e[0], qc->rt_gauss);
        CHECKF(e[1] <= qc->rt_tiny, "%s tiny %.4f > %.4f", tname(qc->type), e[1], qc->rt_tiny);
        CHECKF(e[2] <= qc->rt_outlier, "%s outlier %.4f > %.4f", tname(qc->type), e[2],
               qc->rt_outlier);
        CHECKF(worst_outlier <= 0.03, "%s outlier value off by %.4f", tname(qc->type),
               worst_outlier);
    }
done:
    free(x);
    free(y);
    free(q);
}

static void test_edge_rows(void) {
    const int64_t n = 1024; /* 4 super-blocks */
    static float x[1024], y[1024];
    static uint8_t q[1024 * 4];
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(k_cases); c++) {
        const cllm_type type = k_cases[c].type;

        /* zeros: exact zeros, no NaN */
        memset(x, 0, sizeof(x));
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        round_trip(type, x, y, n, q);
        bool zeros = true;
        for (int64_t i = 0; i < n; i++) zeros = zeros && y[i] == 0.0f;
        CHECKF(zeros, "%s: zero row", tname(type));

        /* constant rows: only the fp16 rounding of a scale (2^-11 relative) */
        const float consts[3] = {0.7f, -1.3f, 25.0f};
        for (int k = 0; k < 3; k++) {
            for (int64_t i = 0; i < n; i++) x[i] = consts[k];
            round_trip(type, x, y, n, q);
            const double e = rel_rms(x, y, n);
            CHECKF(e <= 1e-3, "%s: constant %g: %.3g", tname(type), consts[k], e);
        }

        /* values far below any fp16 scale: finite, and no bigger than the input */
        g_rng = 99;
        fill_gauss(x, n, 1e-9f, 0.0f);
        round_trip(type, x, y, n, q);
        bool small = all_finite(y, n);
        for (int64_t i = 0; i < n; i++) small = small && fabsf(y[i]) <= 1e-8f;
        CHECKF(small, "%s: tiny values", tname(type));

        /* huge values: scales saturate, the result stays finite */
        fill_gauss(x, n, 1e6f, 0.0f);
        round_trip(type, x, y, n, q);
        CHECKF(all_finite(y, n), "%s: huge values", tname(type));
    }
}

/* Values already on the grid come back exactly. Each block gets its extreme
 * grid points so that the quantizer's choice of scale lands on the same grid. */
static void test_exact_grid(void) {
    static float x[512], y[512];
    static uint8_t q[512 * 4];
    const int64_t n = 512;
    g_rng = 7;

    /* Q8_0 / Q8_1: d = 2^-7, quants in -127..127 with +-127 in each block */
    for (int64_t i = 0; i < n; i++) {
        const int v = i % 32 == 0 ? (i % 64 ? 127 : -127) : rng_int(-127, 127);
        x[i] = ldexpf((float)v, -7);
    }
    round_trip(CLLM_TYPE_Q8_0, x, y, n, q);
    CHECK(same_values(x, y, n));
    round_trip(CLLM_TYPE_Q8_1, x, y, n, q);
    CHECK(same_values(x, y, n));
    /* Q8_1's s is d times the sum of its quants */
    const cllm_block_q8_1 *b81 = (const cllm_block_q8_1 *)q;
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += b81->qs[j];
    CHECK(cllm_fp16_to_fp32(b81->s) ==
          cllm_fp16_to_fp32(cllm_fp32_to_fp16(ldexpf((float)sum, -7))));

    /* Q8_K: d = 2^-5 */
    for (int64_t i = 0; i < n; i++) {
        const int v = i % 256 == 3 ? -127 : rng_int(-127, 127);
        x[i] = ldexpf((float)v, -5);
    }
    round_trip(CLLM_TYPE_Q8_K, x, y, n, q);
    CHECK(same_values(x, y, n));

    /* Q4_0 / Q5_0: d * (q - 8) (q - 16) with q = 0 (the largest magnitude) in each block */
    for (int64_t i = 0; i < n; i++) x[i] = 0.25f * (float)((i % 32 == 5 ? 0 : rng_int(0, 15)) - 8);
    round_trip(CLLM_TYPE_Q4_0, x, y, n, q);
    CHECK(same_values(x, y, n));
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * (float)((i % 32 == 9 ? 0 : rng_int(0, 31)) - 16);
    round_trip(CLLM_TYPE_Q5_0, x, y, n, q);
    CHECK(same_values(x, y, n));

    /* Q4_1 / Q5_1: d * q + m with q = 0 and the top value in each block */
    for (int64_t i = 0; i < n; i++) {
        const int v = i % 32 == 1 ? 0 : (i % 32 == 30 ? 15 : rng_int(0, 15));
        x[i] = 0.125f * (float)v - 1.0f;
    }
    round_trip(CLLM_TYPE_Q4_1, x, y, n, q);
    CHECK(same_values(x, y, n));
    for (int64_t i = 0; i < n; i++) {
        const int v = i % 32 == 2 ? 0 : (i % 32 == 17 ? 31 : rng_int(0, 31));
        x[i] = 0.0625f * (float)v + 0.5f;
    }
    round_trip(CLLM_TYPE_Q5_1, x, y, n, q);
    CHECK(same_values(x, y, n));

    /* Q2_K / Q4_K / Q5_K: D * sc[s] * L - M * mn[s], with the largest sc and
     * mn in each super-block and L's extremes in each sub-block. */
    const struct {
        cllm_type type;
        int sub, smax, lmax;
    } affine[3] = {
        {CLLM_TYPE_Q2_K, 16, 15, 3},
        {CLLM_TYPE_Q4_K, 32, 63, 15},
        {CLLM_TYPE_Q5_K, 32, 63, 31},
    };
    for (int t = 0; t < 3; t++) {
        const int sub = affine[t].sub;
        for (int64_t s0 = 0; s0 < n; s0 += sub) {
            const int s = (int)((s0 % 256) / sub);
            const int sc = s == 1 ? affine[t].smax : rng_int(1, affine[t].smax);
            const int mn = s == 2 ? affine[t].smax : rng_int(0, affine[t].smax);
            for (int l = 0; l < sub; l++) {
                const int L = l == 0 ? 0 : (l == 1 ? affine[t].lmax : rng_int(0, affine[t].lmax));
                x[s0 + l] = ldexpf((float)(sc * L), -8) - ldexpf((float)mn, -7);
            }
        }
        round_trip(affine[t].type, x, y, n, q);
        CHECKF(same_values(x, y, n), "%s on its grid: %.3g", tname(affine[t].type),
               rel_rms(x, y, n));
    }

    /* Q3_K / Q6_K: D * sc[s] * L, signed sc with its negative extreme once per
     * super-block and L's negative extreme in each sub-block. */
    const struct {
        cllm_type type;
        int smin, smax, lmin, lmax;
    } sym[2] = {
        {CLLM_TYPE_Q3_K, -32, 31, -4, 3},
        {CLLM_TYPE_Q6_K, -128, 127, -32, 31},
    };
    for (int t = 0; t < 2; t++) {
        for (int64_t s0 = 0; s0 < n; s0 += 16) {
            const int s = (int)((s0 % 256) / 16);
            const int sc = s == 3 ? sym[t].smin : rng_int(sym[t].smin + 1, sym[t].smax);
            for (int l = 0; l < 16; l++) {
                const int L = l == 4 ? sym[t].lmin : rng_int(sym[t].lmin + 1, sym[t].lmax);
                x[s0 + l] = ldexpf((float)(sc * L), -10);
            }
        }
        round_trip(sym[t].type, x, y, n, q);
        CHECKF(same_values(x, y, n), "%s on its grid: %.3g", tname(sym[t].type), rel_rms(x, y, n));
    }
}

/* Blocks are independent: a row quantizes to its blocks quantized one by one. */
static void test_blocks_independent(void) {
    static float x[1024];
    static uint8_t whole[1024 * 4], parts[1024 * 4];
    g_rng = 5;
    fill_gauss(x, 1024, 2.0f, 0.3f);
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(k_cases); c++) {
        const cllm_type_traits *tt = cllm_type_traits_of(k_cases[c].type);
        tt->from_float(x, whole, 1024);
        for (int64_t b = 0; b < 1024 / tt->blck_size; b++) {
            tt->from_float(x + b * tt->blck_size, parts + (size_t)b * tt->type_size, tt->blck_size);
        }
        CHECKF(memcmp(whole, parts, cllm_row_size(k_cases[c].type, 1024)) == 0, "%s", tt->name);
    }
    /* Q8_K's bsums are the sums of its quants */
    const cllm_block_q8_K *b = (const cllm_block_q8_K *)whole;
    cllm_quantize_row_q8_K(x, whole, 1024);
    bool ok = true;
    for (int ib = 0; ib < 4; ib++) {
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[ib].qs[16 * g + l];
            ok = ok && s == b[ib].bsums[g];
        }
    }
    CHECK(ok);
}

/* ---- dot products ------------------------------------------------------------------ */

static double dot_d(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double abs_dot_d(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    return s;
}

static void test_vec_dot(void) {
    const int64_t sizes[2] = {256, 2304}; /* 1 and 9 super-blocks (8, 72 blocks of 32) */
    static float w[2304], a[2304], wd[2304], ad[2304];
    static uint8_t wq[2304 * 4], aq[2304 * 4];
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(k_cases); c++) {
        const quant_case *qc = &k_cases[c];
        const cllm_type_traits *tw = cllm_type_traits_of(qc->type);
        const cllm_type_traits *ta = cllm_type_traits_of(tw->vec_dot_type);
        double bound_a = 0.0;
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(k_cases); k++) {
            if (k_cases[k].type == tw->vec_dot_type) bound_a = k_cases[k].rt_gauss;
        }
        for (int si = 0; si < 2; si++) {
            const int64_t n = sizes[si];
            for (int variant = 0; variant < 2; variant++) {
                g_rng = 100 + (uint64_t)(10 * si + variant);
                /* variant 0: zero-mean data; 1: offsets, so that mins and bsums matter */
                const float mw = variant ? 0.4f : 0.0f, ma = variant ? -0.3f : 0.0f;
                fill_gauss(w, n, 1.0f, mw);
                for (int64_t i = 0; i < n; i++) a[i] = ma + 0.8f * w[i] + 0.6f * rng_gauss();

                tw->from_float(w, wq, n);
                ta->from_float(a, aq, n);
                tw->to_float(wq, wd, n);
                ta->to_float(aq, ad, n);
                float r = NAN;
                tw->vec_dot(n, &r, wq, aq);

                /* tight: the dot of what the two rows decode to */
                const double ref = dot_d(wd, ad, n);
                const double tol = 2e-6 * abs_dot_d(wd, ad, n) + 1e-6;
                CHECKF(fabs(r - ref) <= tol, "%s n %lld v %d: %.9g vs %.9g", tw->name, (long long)n,
                       variant, r, ref);

                /* loose: the float dot, within the two round-trip errors */
                const double exact = dot_d(w, a, n);
                CHECKF(fabs(r - exact) <= (qc->rt_gauss + bound_a) * fabs(exact),
                       "%s n %lld v %d: %.6g vs float %.6g", tw->name, (long long)n, variant, r,
                       exact);
            }
        }

        /* zero rows: exactly 0, no NaN */
        memset(w, 0, sizeof(w));
        tw->from_float(w, wq, 512);
        fill_gauss(a, 512, 1.0f, 0.0f);
        ta->from_float(a, aq, 512);
        float r = NAN;
        tw->vec_dot(512, &r, wq, aq);
        CHECKF(r == 0.0f, "%s: zero weights give %g", tw->name, r);
        fill_gauss(w, 512, 1.0f, 0.5f);
        tw->from_float(w, wq, 512);
        memset(a, 0, sizeof(a));
        ta->from_float(a, aq, 512);
        r = NAN;
        tw->vec_dot(512, &r, wq, aq);
        CHECKF(r == 0.0f, "%s: zero activations give %g", tw->name, r);
    }
}

static void test_vec_dot_f16_bf16(void) {
    const int64_t sizes[3] = {0, 77, 1000}; /* not multiples of the 32 lanes */
    static float x[1000], y[1000], xd[1000];
    static uint16_t h[1000];
    g_rng = 11;
    fill_gauss(x, 1000, 1.0f, 0.1f);
    fill_gauss(y, 1000, 1.0f, -0.1f);
    for (int t = 0; t < 2; t++) {
        const cllm_type type = t ? CLLM_TYPE_BF16 : CLLM_TYPE_F16;
        const cllm_type_traits *tt = cllm_type_traits_of(type);
        tt->from_float(x, h, 1000);
        tt->to_float(h, xd, 1000);
        for (int k = 0; k < 3; k++) {
            const int64_t n = sizes[k];
            float r = NAN;
            tt->vec_dot(n, &r, h, y);
            const double ref = dot_d(xd, y, n);
            CHECKF(fabs(r - ref) <= 1e-6 * abs_dot_d(xd, y, n) + 1e-9, "%s n %lld: %.9g vs %.9g",
                   tt->name, (long long)n, r, ref);
        }
    }
}

/* ---- programmer errors --------------------------------------------------------------- */

static void partial_block(void) {
    float x[48] = {0};
    cllm_block_q4_0 q[2];
    cllm_quantize_row_q4_0(x, q, 48);
}

static void partial_superblock(void) {
    static cllm_block_q4_K x[2];
    static cllm_block_q8_K y[2];
    float r;
    cllm_vec_dot_q4_K_q8_K(300, &r, x, y);
}

static void test_bad_n(void) {
    CHECK(check_aborts_with(partial_block, "n % CLLM_QK4_0 == 0"));
    CHECK(check_aborts_with(partial_superblock, "n % CLLM_QK_K == 0"));
}

int main(void) {
    test_traits();
    test_helpers();
    test_hand_32();
    test_hand_k();
    test_golden();
    test_round_trip();
    test_edge_rows();
    test_exact_grid();
    test_blocks_independent();
    test_vec_dot();
    test_vec_dot_f16_bf16();
    test_bad_n();
    return check_summary("test_quants");
}
