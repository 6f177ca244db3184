/*
 * Helpers shared by the panel GEMM's and the one-column kernels' portable
 * code (gemm-forms.c, gemm.c, gemv.c): not part of gemm.h.
 */
#ifndef CLLM_BACKEND_CPU_GEMM_IMPL_H
#define CLLM_BACKEND_CPU_GEMM_IMPL_H

#include "backend/cpu/gemm.h"
#include "core/common.h"
#include "core/quants.h"

#include <math.h>

static inline float h2f(cllm_fp16 h) { return cllm_fp16_to_fp32(h); }

/* Q4_K's decoder of the panel forms (gemm-forms.c): one super-block into
 * u[0..256), and its 8 scales and offsets. */
void cllm_cpu_gemm_decode_q4_k(const void *blk, uint8_t *u, float *sc, float *off);

static inline size_t block_bytes(const cllm_gemm_form *f) {
    return cllm_gemm_scales_at(f) + 64 + (f->offset ? 64 : 0);
}

static inline size_t act_block_bytes(const cllm_gemm_form *f) { return (size_t)f->bs + 16; }

/* The scale of n activations: their largest magnitude / 127 (Q8_0's rule,
 * kept as a float). */
static inline float act_scale(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = fabsf(x[j]);
        amax = v > amax ? v : amax;
    }
    return amax / 127.0f;
}

/* q[j] = nearest(x[j] / d) in -127..127 for n values; returns their sum. */
static inline int32_t act_quantize(const float *x, int n, float d, int8_t *q) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < n; j++) {
        q[j] = (int8_t)cllm_quant_round_clamp(x[j] * id, -127.0f, 127.0f);
        s += q[j];
    }
    return s;
}

#endif /* CLLM_BACKEND_CPU_GEMM_IMPL_H */
