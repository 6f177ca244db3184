/*
 * Element-wise kernels: add, mul (b broadcast over a), scale, silu, gelu.
 *
 * a: [ne0, ne1, ne2, ne3] F32, F16 or BF16, any strides; dst: F32,
 * contiguous, shape of a, possibly the very memory of a (in place). Each
 * thread takes whole rows of dst; a row of a is read as F32 either in place
 * (F32 rows) or converted into the dst row first, then dst = f(x) in place.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops-impl.h"

#include <math.h>

typedef enum binary_kind { BINARY_ADD, BINARY_MUL } binary_kind;

/* y[i] = x[i] (+ or *) b[i mod nb], nb = b.ne0 divides n; b a contiguous F32 row. */
static void binary_row_f32(binary_kind kind, int64_t n, float *y, const float *x, int64_t nb,
                           const float *b) {
    if (nb == 1) {
        const float v = b[0];
        if (kind == BINARY_ADD) {
            for (int64_t i = 0; i < n; i++) y[i] = x[i] + v;
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * v;
        }
        return;
    }
    for (int64_t j = 0; j < n; j += nb) {
        if (kind == BINARY_ADD) {
            for (int64_t i = 0; i < nb; i++) y[j + i] = x[j + i] + b[i];
        } else {
            for (int64_t i = 0; i < nb; i++) y[j + i] = x[j + i] * b[i];
        }
    }
}

/* out[i0, i1, i2, i3] = a[i0, i1, i2, i3] (+ or *) b[i0 % b.ne0, i1 % b.ne1, ...] */
static void binary_op(const cllm_cpu_params *params, cllm_tensor *dst, binary_kind kind) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t ne0 = dst->ne[0], ne1 = dst->ne[1], ne2 = dst->ne[2];
    const int64_t bne0 = b->ne[0];
    const bool b_f32_rows = b->type == CLLM_TYPE_F32 && b->nb[0] == sizeof(float);
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        float *y = (float *)cllm_cpu_elem(dst, 0, i1, i2, i3);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, i1, i2, i3), ne0, y);
        const char *brow = cllm_cpu_elem(b, 0, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
        if (b_f32_rows) {
            binary_row_f32(kind, ne0, y, x, bne0, (const float *)brow);
            continue;
        }
        for (int64_t i = 0; i < ne0; i++) {
            const float v = cllm_cpu_load(b->type, brow + (size_t)(i % bne0) * b->nb[0]);
            y[i] = kind == BINARY_ADD ? x[i] + v : x[i] * v;
        }
    }
}

void cllm_cpu_add(const cllm_cpu_params *params, cllm_tensor *dst) {
    binary_op(params, dst, BINARY_ADD);
}

void cllm_cpu_mul(const cllm_cpu_params *params, cllm_tensor *dst) {
    binary_op(params, dst, BINARY_MUL);
}

typedef enum unary_kind { UNARY_SCALE, UNARY_SILU, UNARY_GELU } unary_kind;

static void unary_op(const cllm_cpu_params *params, cllm_tensor *dst, unary_kind kind) {
    const cllm_tensor *a = dst->src[0];
    const int64_t ne0 = dst->ne[0];
    const float s = kind == UNARY_SCALE ? cllm_get_op_param_f32(dst, 0) : 0.0f;
    const bool avx512 = cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512;
    const bool avx2 = cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)cllm_cpu_row(dst, r);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_row(a, r), ne0, y);
        switch (kind) {
        case UNARY_SCALE: /* y = x s */
            for (int64_t i = 0; i < ne0; i++) y[i] = x[i] * s;
            break;
        case UNARY_SILU: /* y = x / (1 + e^-x) */
#if defined(__x86_64__) || defined(__i386__)
            if (avx512) {
                cllm_cpu_silu_row_avx512(ne0, y, x);
                break;
            }
            if (avx2) {
                cllm_cpu_silu_row_avx2(ne0, y, x);
                break;
            }
#endif
            for (int64_t i = 0; i < ne0; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
            break;
        case UNARY_GELU: /* y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#if defined(__x86_64__) || defined(__i386__)
            if (avx2) {
                cllm_cpu_gelu_row_avx2(ne0, y, x);
                break;
            }
#endif
            for (int64_t i = 0; i < ne0; i++) {
                const float v = x[i];
                y[i] = 0.5f * v *
                       (1.0f + tanhf(CLLM_GELU_COEF_A * v * (1.0f + CLLM_GELU_COEF_B * v * v)));
            }
            break;
        }
    }
}

void cllm_cpu_scale(const cllm_cpu_params *params, cllm_tensor *dst) {
    unary_op(params, dst, UNARY_SCALE);
}

void cllm_cpu_silu(const cllm_cpu_params *params, cllm_tensor *dst) {
    unary_op(params, dst, UNARY_SILU);
}

void cllm_cpu_gelu(const cllm_cpu_params *params, cllm_tensor *dst) {
    unary_op(params, dst, UNARY_GELU);
}
