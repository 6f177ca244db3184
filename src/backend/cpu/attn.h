/*
 * Internal: the SIMD unit kernels of the fused attention (ops-attn.c), one
 * per x86 level (attn-avx512.c, attn-avx2.c).
 *
 * A unit is (kv head g, query heads h0..h0+nh-1, tokens t0..t0+nt-1), its
 * query rows (row = ti * nh + h) already F32 in q [rows][D], with the online
 * softmax state acc [rows][Dv], mx [rows] (running max, -inf at the start)
 * and sum [rows] (running sum). The kernel folds the first n_kv keys of the
 * cache into that state; ops-attn.c divides at the end.
 */
#ifndef CLLM_BACKEND_CPU_ATTN_H
#define CLLM_BACKEND_CPU_ATTN_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLLM_ATTN_KB 64 /* keys per block of the SIMD kernel */

typedef struct cllm_attn_unit {
    int64_t g, t0, nt, nh; /* kv head, first token, tokens (<= 8), query heads */
    int64_t n_kv;          /* keys to fold: the first n_kv of the cache view */
    const float *q;
    float *acc, *mx, *sum;
} cllm_attn_unit;

/* Floats of scratch the SIMD kernel needs (per thread). */
static inline size_t cllm_attn_fast_scratch(int64_t D, int64_t Dv) {
    return (size_t)(D * CLLM_ATTN_KB + CLLM_ATTN_KB * Dv + 8 * CLLM_ATTN_KB + 2 * CLLM_ATTN_KB);
}

void cllm_cpu_attn_unit_avx512(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch);
void cllm_cpu_attn_unit_avx2(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch);

#endif /* CLLM_BACKEND_CPU_ATTN_H */
