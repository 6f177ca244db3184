/* Type traits and the float conversions of plain types. */
#include "common/check.h"
#include "core/types.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Reference: the nearest half to x (ties to even), by search over all halves. */
static double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return sign * ldexp(m, -24);
    return sign * ldexp(1024 + m, e - 25);
}

static void test_fp16_exhaustive(void) {
    /* every finite half survives half -> float -> half exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const int e = (h >> 10) & 0x1f;
        const float f = cllm_fp16_to_fp32((cllm_fp16)h);
        if (e == 0x1f) {
            if ((h & 0x3ff) == 0 ? !isinf(f) : !isnan(f)) bad++;
            continue;
        }
        if ((double)f != half_value((uint16_t)h)) bad++;
        if (cllm_fp32_to_fp16(f) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_fp16_rounding(void) {
    /* midpoints between consecutive positive halves round to the even one */
    int bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        const double lo = half_value((uint16_t)h), hi = half_value((uint16_t)(h + 1));
        const float mid = (float)((lo + hi) / 2);
        if ((double)mid != (lo + hi) / 2) continue; /* not representable in float */
        const uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (cllm_fp32_to_fp16(mid) != want) bad++;
        /* just above / below the midpoint */
        if (cllm_fp32_to_fp16(nextafterf(mid, INFINITY)) != h + 1) bad++;
        if (cllm_fp32_to_fp16(nextafterf(mid, -INFINITY)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(cllm_fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(cllm_fp32_to_fp16(65520.0f) == 0x7c00); /* rounds to inf */
    CHECK(cllm_fp32_to_fp16(-1e9f) == 0xfc00);
    CHECK((cllm_fp32_to_fp16(NAN) & 0x7c00) == 0x7c00 && (cllm_fp32_to_fp16(NAN) & 0x3ff) != 0);
    CHECK(cllm_fp32_to_fp16(1e-9f) == 0);
    CHECK(cllm_fp32_to_fp16(-0.0f) == 0x8000);
}

static void test_bf16(void) {
    CHECK(cllm_bf16_to_fp32(cllm_fp32_to_bf16(1.0f)) == 1.0f);
    CHECK(cllm_bf16_to_fp32(cllm_fp32_to_bf16(-3.5f)) == -3.5f);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0) */
    CHECK(cllm_bf16_to_fp32(cllm_fp32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
    CHECK(cllm_bf16_to_fp32(cllm_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
    CHECK(isnan(cllm_bf16_to_fp32(cllm_fp32_to_bf16(NAN))));
    CHECK(isinf(cllm_bf16_to_fp32(cllm_fp32_to_bf16(INFINITY))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = cllm_bf16_to_fp32((cllm_bf16)h);
        if (!isnan(f) && cllm_fp32_to_bf16(f) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_traits(void) {
    /* GGUF block sizes and bytes per block (file-format facts) */
    static const struct {
        cllm_type type;
        int64_t blck;
        size_t size;
    } k[] = {
        {CLLM_TYPE_F32, 1, 4},      {CLLM_TYPE_F16, 1, 2},        {CLLM_TYPE_BF16, 1, 2},
        {CLLM_TYPE_I32, 1, 4},      {CLLM_TYPE_Q4_0, 32, 18},     {CLLM_TYPE_Q4_1, 32, 20},
        {CLLM_TYPE_Q5_0, 32, 22},   {CLLM_TYPE_Q5_1, 32, 24},     {CLLM_TYPE_Q8_0, 32, 34},
        {CLLM_TYPE_Q8_1, 32, 36},   {CLLM_TYPE_Q2_K, 256, 84},    {CLLM_TYPE_Q3_K, 256, 110},
        {CLLM_TYPE_Q4_K, 256, 144}, {CLLM_TYPE_Q5_K, 256, 176},   {CLLM_TYPE_Q6_K, 256, 210},
        {CLLM_TYPE_Q8_K, 256, 292}, {CLLM_TYPE_TQ1_0, 256, 54},   {CLLM_TYPE_TQ2_0, 256, 66},
        {CLLM_TYPE_IQ4_NL, 32, 18}, {CLLM_TYPE_IQ4_XS, 256, 136}, {CLLM_TYPE_MXFP4, 32, 17},
    };
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        const cllm_type_traits *tt = cllm_type_traits_of(k[i].type);
        CHECKF(tt && tt->blck_size == k[i].blck && tt->type_size == k[i].size, "type %s",
               cllm_type_name(k[i].type));
    }
    CHECK(cllm_type_traits_of((cllm_type)4) == NULL); /* retired ids */
    CHECK(cllm_type_traits_of((cllm_type)31) == NULL);
    CHECK(cllm_type_traits_of((cllm_type)CLLM_TYPE_COUNT) == NULL);
    CHECK(!cllm_type_is_valid(-1) && !cllm_type_is_valid(1000) && cllm_type_is_valid(12));
    CHECK(strcmp(cllm_type_name((cllm_type)77), "unknown") == 0);
    CHECK(cllm_row_size(CLLM_TYPE_Q4_0, 64) == 36);
    CHECK(cllm_row_size(CLLM_TYPE_F16, 4096) == 8192);
}

static void test_row_conversions(void) {
    float src[37], back[37];
    uint16_t half[37];
    for (int i = 0; i < 37; i++) src[i] = (float)(i - 18) * 0.37f;
    const cllm_type types[] = {CLLM_TYPE_F16, CLLM_TYPE_BF16};
    for (int t = 0; t < 2; t++) {
        const cllm_type_traits *tt = cllm_type_traits_of(types[t]);
        tt->from_float(src, half, 37);
        tt->to_float(half, back, 37);
        double err = 0;
        for (int i = 0; i < 37; i++)
            err = fmax(err, fabs(back[i] - src[i]) / (fabs(src[i]) + 1e-30));
        CHECKF(err < (t == 0 ? 1e-3 : 8e-3), "%s relative error %g", tt->name, err);
    }
}

int main(void) {
    test_fp16_exhaustive();
    test_fp16_rounding();
    test_bf16();
    test_traits();
    test_row_conversions();
    return check_summary("test_types");
}
