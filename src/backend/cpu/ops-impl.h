/*
 * Internal to the CPU kernels (ops*.c): the kernel entry points of each op
 * family and the helpers they share (element addresses, reading one element
 * of any plain type, rows as F32, the F32 dot product, workspace slices).
 *
 * Conventions of every kernel `cllm_cpu_<op>(params, dst)`:
 *  - it computes the share of thread params->ith of params->nth, split by
 *    rows with cllm_cpu_split (mul_mat: by output rows or columns);
 *  - inputs are read through their nb[] strides;
 *  - dst is F32 and contiguous (except cpy, written through its strides);
 *  - for add, mul, scale, silu, gelu, rms_norm, norm, soft_max and rope, dst
 *    may be the very memory of src[0] (same shape and strides): a thread
 *    reads each of its rows before writing it and touches no other rows;
 *  - workspace: exactly what cllm_cpu_<op>_workspace declares, taken through
 *    cllm_cpu_ws(), which asserts that it lies within params->wsize.
 *
 *     float *acc = cllm_cpu_ws(params, dst, params->ith * slice, slice);
 *     const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, i1, i2, i3), a->ne[0], y);
 */
#ifndef CLLM_BACKEND_CPU_OPS_IMPL_H
#define CLLM_BACKEND_CPU_OPS_IMPL_H

#include "backend/cpu/cpu-ops.h"

#include <string.h>

/* Every thread's slice of the workspace starts on its own cache line. */
#define CLLM_CPU_WS_ALIGN 64

static inline size_t cllm_cpu_ws_round(size_t bytes) {
    return cllm_align_up(bytes, CLLM_CPU_WS_ALIGN);
}

/* `bytes` of the workspace at `offset` for computing dst; asserts that they
 * lie within what dst declared (cllm_cpu_op_workspace) and was allocated. */
static inline void *cllm_cpu_ws(const cllm_cpu_params *params, const cllm_tensor *dst,
                                size_t offset, size_t bytes) {
    const size_t declared = cllm_cpu_op_workspace(dst, params->nth);
    CLLM_ASSERTF(offset <= declared && bytes <= declared - offset && declared <= params->wsize,
                 "cpu: %s (%s) uses workspace [%zu, +%zu) beyond the %zu bytes it declared "
                 "(%zu allocated)",
                 dst->name, cllm_op_name(dst->op), offset, bytes, declared, params->wsize);
    return (char *)params->wdata + offset;
}

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

/* ---- kernels, one family per file -------------------------------------- */

/* ops-elementwise.c */
void cllm_cpu_add(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_mul(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_scale(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_silu(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_gelu(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-copy.c: cpy and cont (a cont is a copy into a contiguous tensor) */
bool cllm_cpu_copy_supported(const cllm_tensor *src, const cllm_tensor *dst);
size_t cllm_cpu_copy_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_copy(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-rows.c */
void cllm_cpu_get_rows(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_concat_rows(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-norm.c */
void cllm_cpu_rms_norm(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_norm(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-softmax.c */
void cllm_cpu_soft_max(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-rope.c */
size_t cllm_cpu_rope_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_rope(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_rope_table(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-matmul.c */
bool cllm_cpu_mul_mat_supported(const cllm_tensor *dst);
size_t cllm_cpu_mul_mat_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_mul_mat(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-attn.c */
size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst);

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

#endif /* CLLM_BACKEND_CPU_OPS_IMPL_H */
