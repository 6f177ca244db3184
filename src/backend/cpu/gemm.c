/*
 * Panel GEMM (gemm.h): the activation quantizer, the packers and the
 * products, each dispatched to the kernels of the level in use (x86/) or
 * to the portable ones (gemm-forms.c); float weights likewise.
 */
#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/kernels.h"

#include <string.h>

/* ---- activations ---------------------------------------------------------------- */

void cllm_cpu_gemm_quantize(cllm_type type, const float *x, void *act, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    CLLM_ASSERT(f.bs > 0 && K % f.bs == 0);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemm_quantize_avx512(&f, x, act, K);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_quantize_avx2(&f, x, act, K);
        return;
    }
#endif
    const int bs = f.bs;
    char *out = act;
    for (int64_t b = 0; b < K / bs; b++, out += act_block_bytes(&f)) {
        const float *xb = x + b * bs;
        const float d = act_scale(xb, bs);
        const int32_t s = act_quantize(xb, bs, d, (int8_t *)out);
        cllm_gemm_act_block_tail(out + bs, &f, d, s);
    }
}

/* ---- packing -------------------------------------------------------------------- */

void cllm_cpu_gemm_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                        void *panel, void *scratch) {
#if defined(__x86_64__) || defined(__i386__)
    CLLM_ASSERT(cllm_cpu_gemm_supports(type, K) && nrows >= 1 && nrows <= CLLM_GEMM_ROWS);
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 &&
        cllm_cpu_gemm_pack_avx512(type, a, stride, nrows, K, panel))
        return;
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
        cllm_cpu_gemm_pack_avx2(type, a, stride, nrows, K, panel))
        return;
#endif
    cllm_cpu_gemm_pack_portable(type, a, stride, nrows, K, panel, scratch);
}

/* ---- float weights ------------------------------------------------------------------
 * The packer is portable (it converts each weight once per matmul); the
 * kernels are in gemm-avx512.c and gemm-avx2.c. */

bool cllm_cpu_gemm_f_available(cllm_type type, int64_t K) {
    return (type == CLLM_TYPE_F16 || type == CLLM_TYPE_BF16) && K > 0 &&
           cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
}

size_t cllm_cpu_gemm_f_panel_size(int64_t K) {
    return (size_t)K * CLLM_GEMM_F_ROWS * sizeof(float);
}

void cllm_cpu_gemm_f_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                          float *panel) {
    CLLM_ASSERT(nrows >= 1 && nrows <= CLLM_GEMM_F_ROWS);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 &&
        cllm_cpu_gemm_f_pack_avx512(type, a, stride, nrows, K, panel))
        return;
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_f_pack_avx2(type, a, stride, nrows, K, panel);
        return;
    }
#endif
    for (int r = 0; r < CLLM_GEMM_F_ROWS; r++) {
        const uint16_t *row = (const uint16_t *)((const char *)a + (size_t)r * stride);
        for (int64_t k = 0; k < K; k++) {
            float v = 0.0f;
            if (r < nrows) {
                if (type == CLLM_TYPE_F16) {
                    v = cllm_fp16_to_fp32(row[k]);
                } else {
                    const uint32_t u = (uint32_t)row[k] << 16;
                    memcpy(&v, &u, 4);
                }
            }
            panel[k * CLLM_GEMM_F_ROWS + r] = v;
        }
    }
}

int cllm_cpu_gemm_f_group(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* AVX-512 reads its 12 columns in place: not measured grouped */
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 && cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX512)
        return CLLM_GEMM_F_GROUP_AVX2;
#endif
    return 1;
}

void cllm_cpu_gemm_f_group_cols(const float *x, size_t stride, int ncols, int64_t K, int group,
                                float *out) {
    CLLM_ASSERT(ncols >= 1 && ncols <= group);
    for (int j = 0; j < group; j++) {
        const float *c = (const float *)((const char *)x + (size_t)j * stride);
        if (j < ncols) {
            for (int64_t k = 0; k < K; k++) out[k * group + j] = c[k];
        } else {
            for (int64_t k = 0; k < K; k++) out[k * group + j] = 0.0f;
        }
    }
}

void cllm_cpu_gemm_f_ref(int64_t K, const float *panel, const float *cols, size_t group_stride,
                         int group, int ncols, float *out, size_t ldo, int nrows) {
    for (int j = 0; j < ncols; j++) {
        const float *c =
            (const float *)((const char *)cols + (size_t)(j / group) * group_stride) + j % group;
        for (int r = 0; r < nrows; r++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += panel[k * CLLM_GEMM_F_ROWS + r] * c[k * group];
            out[(size_t)j * ldo + (size_t)r] = acc;
        }
    }
}

void cllm_cpu_gemm_f(int64_t K, const float *panel, const float *cols, size_t group_stride,
                     int group, int ncols, float *out, size_t ldo, int nrows) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 && group == 1) {
        cllm_cpu_gemm_f_avx512(K, panel, cols, group_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
        (group == 1 || group == CLLM_GEMM_F_GROUP_AVX2)) {
        cllm_cpu_gemm_f_avx2(K, panel, cols, group_stride, group, ncols, out, ldo, nrows);
        return;
    }
#endif
    cllm_cpu_gemm_f_ref(K, panel, cols, group_stride, group, ncols, out, ldo, nrows);
}

/* ---- the panel product -------------------------------------------------------- */

void cllm_cpu_gemm(cllm_type type, int64_t K, const void *panel, const void *act, size_t act_stride,
                   int ncols, float *out, size_t ldo, int nrows) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemm_avx512(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemm_avxvnni(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_avx2(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
#endif
    (void)f;
    cllm_cpu_gemm_ref(type, K, panel, act, act_stride, ncols, out, ldo, nrows);
}

void cllm_cpu_gemm2(cllm_type type, int64_t K, const void *panel0, const void *panel1,
                    const void *act, size_t act_stride, int ncols, float *out, size_t ldo,
                    int nrows1) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
        const cllm_gemm_form f = cllm_cpu_gemm_form(type);
        cllm_cpu_gemm2_avx512(&f, K, panel0, panel1, act, act_stride, ncols, out, ldo, nrows1);
        return;
    }
#endif
    cllm_cpu_gemm(type, K, panel0, act, act_stride, ncols, out, ldo, CLLM_GEMM_ROWS);
    cllm_cpu_gemm(type, K, panel1, act, act_stride, ncols, out + CLLM_GEMM_ROWS, ldo, nrows1);
}
