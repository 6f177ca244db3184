/*
 * Internal: the SIMD unit kernels of the fused attention (ops-attn.c), one
 * per x86 level (attn-avx512.c, attn-avx2.c).
 *
 * A unit is (kv head g, query heads h0..h0+nh-1, tokens t0..t0+nt-1), its
 * query rows (row = ti * nh + h) already F32 in q [rows][D], with the online
 * softmax state acc [rows][Dv], mx [rows] (running max, -inf at the start)
 * and sum [rows] (running sum). The kernel folds keys k0 .. n_kv - 1 of the
 * cache into that state; ops-attn.c divides at the end (or first combines
 * the states of several key chunks).
 */
#ifndef CLLM_BACKEND_CPU_ATTN_H
#define CLLM_BACKEND_CPU_ATTN_H

#include "backend/cpu/rows.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLLM_ATTN_KB 64 /* keys per block of the SIMD kernel */

typedef struct cllm_attn_unit {
    int64_t g, t0, nt, nh; /* kv head, first token, tokens (<= 8), query heads */
    int64_t k0, n_kv;      /* keys to fold: k0 .. n_kv - 1 of the cache view */
    const float *q;
    float *acc, *mx, *sum;
    /* AVX2, one token: those keys' k and v rows of head g already F32,
     * [n_kv - k0][D] and [n_kv - k0][Dv] (cllm_cpu_attn_rows_avx2), or NULL:
     * read the cache */
    const float *kf, *vf;
} cllm_attn_unit;

/* Floats of scratch the SIMD kernel needs (per thread). */
static inline size_t cllm_attn_fast_scratch(int64_t D, int64_t Dv) {
    return (size_t)(D * CLLM_ATTN_KB + CLLM_ATTN_KB * Dv + 8 * CLLM_ATTN_KB + 2 * CLLM_ATTN_KB);
}

/* Asks for the k and v rows of keys j0 .. j0 + n - 1 (none when n <= 0) of
 * kv head g. A generation step's attention reads rows that the weights
 * streamed since have pushed out of the caches, and the rows of one kv
 * head lie apart (one cache row per position holds every head): a thread
 * asks for its next unit's first rows (ops-attn.c), and the SIMD kernels
 * for each next block of a unit, before they are needed. */
static inline void cllm_attn_prefetch(const cllm_tensor *k, const cllm_tensor *v, int64_t g,
                                      int64_t j0, int64_t n) {
    const size_t kbytes = cllm_row_size(k->type, k->ne[0]); /* blocks: a row's blocks */
    const size_t vbytes = cllm_row_size(v->type, v->ne[0]);
    for (int64_t j = j0; j < j0 + n; j++) {
        const char *kr = cllm_cpu_elem(k, 0, j, g, 0), *vr = cllm_cpu_elem(v, 0, j, g, 0);
        for (size_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kr + o);
        for (size_t o = 0; o < vbytes; o += 64) __builtin_prefetch(vr + o);
    }
}

void cllm_cpu_attn_unit_avx512(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch);
/* One token (u->nt == 1) whose key and value rows the caller converted to
 * F32 (u->kf, u->vf: cllm_cpu_attn_rows_avx2), at the AVX-512 level. Keys
 * by blocks of 16: a query row's 16 scores come from one FMA chain per key
 * over 16-wide slices of d (the row in registers, the key read in place)
 * and one reduction of the 16 chains into the 16 lanes; up to 4 query rows
 * share each block's value loads: fewer horizontal sums than the AVX2
 * kernel on the same rows (8-wide, two rows at a time, a horizontal sum per
 * 4 keys). */
void cllm_cpu_attn_token_avx512(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch);
void cllm_cpu_attn_unit_avx2(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch);

/* Keys k0 .. k0 + n - 1 of every kv head of caches k and v (F16, BF16,
 * Q8_0 or Q4_0, each its own; the values of the type's to_float), as F32 in
 * kf [head][n][D] and vf [head][n][Dv], read row by row: one cache row
 * holds every head, and reading it whole streams from memory several times
 * faster than reading one head's part of many rows. */
void cllm_cpu_attn_rows_avx2(const cllm_tensor *k, const cllm_tensor *v, int64_t k0, int64_t n,
                             float *kf, float *vf);

#endif /* CLLM_BACKEND_CPU_ATTN_H */
