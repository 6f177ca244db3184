/*
 * Element and row helpers of the CPU kernels, below every op family and
 * every level's kernels: element addresses, reading and writing one element
 * of any plain type, rows as F32, the F32 dot product (rows.c), and the row
 * functions of the x86 levels (x86/vec-*.c) that the op families call.
 */
#ifndef CLLM_BACKEND_CPU_ROWS_H
#define CLLM_BACKEND_CPU_ROWS_H

#include "core/quants.h"
#include "core/tensor.h"
#include "core/types.h"

#include <string.h>

/* Address of element (i0, i1, i2, i3) of t (i0 in elements; for quantized
 * types pass i0 = 0: rows are addressed as a whole). */
static inline char *cllm_cpu_elem(const cllm_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                                  int64_t i3) {
    return (char *)t->data + (size_t)i0 * t->nb[0] + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] +
           (size_t)i3 * t->nb[3];
}

/* Row r of t, counting rows over dims 1-3 (r = i1 + ne1 * (i2 + ne2 * i3)). */
static inline char *cllm_cpu_row(const cllm_tensor *t, int64_t r) {
    const int64_t i1 = r % t->ne[1];
    const int64_t i2 = (r / t->ne[1]) % t->ne[2];
    const int64_t i3 = r / (t->ne[1] * t->ne[2]);
    return cllm_cpu_elem(t, 0, i1, i2, i3);
}

static inline bool cllm_cpu_is_float(cllm_type type) {
    return type == CLLM_TYPE_F32 || type == CLLM_TYPE_F16 || type == CLLM_TYPE_BF16;
}

/* One element of a plain type (blck_size 1, with to_float) as float. The
 * memcpy keeps unaligned views defined; it compiles to a plain load. */
static inline float cllm_cpu_load(cllm_type type, const void *p) {
    switch (type) {
    case CLLM_TYPE_F32: {
        float f;
        memcpy(&f, p, sizeof(f));
        return f;
    }
    case CLLM_TYPE_F16: {
        cllm_fp16 h;
        memcpy(&h, p, sizeof(h));
        return cllm_fp16_to_fp32(h);
    }
    case CLLM_TYPE_BF16: {
        cllm_bf16 h;
        memcpy(&h, p, sizeof(h));
        return cllm_bf16_to_fp32(h);
    }
    default: {
        float f;
        cllm_type_traits_of(type)->to_float(p, &f, 1);
        return f;
    }
    }
}

/* Writes one element of a plain type (blck_size 1, with from_float). */
static inline void cllm_cpu_store(cllm_type type, void *p, float v) {
    switch (type) {
    case CLLM_TYPE_F32: memcpy(p, &v, sizeof(v)); break;
    case CLLM_TYPE_F16: {
        const cllm_fp16 h = cllm_fp32_to_fp16(v);
        memcpy(p, &h, sizeof(h));
        break;
    }
    case CLLM_TYPE_BF16: {
        const cllm_bf16 h = cllm_fp32_to_bf16(v);
        memcpy(p, &h, sizeof(h));
        break;
    }
    default: cllm_type_traits_of(type)->from_float(&v, p, 1); break;
    }
}

/*
 * The n elements of the row of t at `row` as contiguous F32: `row` itself
 * when t is F32 with contiguous rows, else the row converted into
 * scratch[0..n) (to_float for contiguous rows, element by element through
 * nb[0] otherwise) and scratch returned. scratch may be the caller's dst row
 * (then the conversion happens in the memory the caller will overwrite), but
 * must not overlap `row` otherwise.
 */
const float *cllm_cpu_row_f32(const cllm_tensor *t, const void *row, int64_t n, float *scratch);

/* sum_i x[i] * y[i] over contiguous F32 rows, accumulated in F32 lanes. */
float cllm_cpu_dot_f32(int64_t n, const float *x, const float *y);

/* ---- row functions of the x86 levels ------------------------------------ */

/* Row functions of the AVX-512 level (vec-avx512.c); call only where
 * cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512. */
void cllm_cpu_silu_row_avx512(int64_t n, float *y, const float *x);
/* The same at the AVX2 level (vec-avx2.c; cllm_cpu_isa_level() >= AVX2). */
void cllm_cpu_silu_row_avx2(int64_t n, float *y, const float *x);
/* GELU, tanh form (ops-elementwise.c), at the AVX2 level: the AVX-512 level
 * calls it too (a row of a few thousand elements; one token's runs on one
 * thread). */
void cllm_cpu_gelu_row_avx2(int64_t n, float *y, const float *x);
/* The sum of x[i]^2 in double, 16 partial sums (rms_norm's row; AVX2 and
 * above). */
double cllm_cpu_sumsq_avx2(int64_t n, const float *x);
/* GELU's constants: sqrt(2 / pi), and the cubic term's. */
#define CLLM_GELU_COEF_A 0.7978845608028654f
#define CLLM_GELU_COEF_B 0.044715f
/* y[i] = cllm_fp32_to_fp16(x[i]) (a NaN: some NaN), 8 at a time with F16C. */
void cllm_cpu_f32_to_f16_row_avx2(int64_t n, cllm_fp16 *y, const float *x);

#endif /* CLLM_BACKEND_CPU_ROWS_H */
