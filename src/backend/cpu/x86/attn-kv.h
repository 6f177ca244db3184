/*
 * Internal: 8 values of a KV cache row as F32, for the attention kernels of
 * both x86 levels (attn-avx2.c, attn-avx512.c). Include only from files
 * compiled for AVX2 + FMA + F16C (after their target pragma).
 *
 * A row is F32, F16, BF16 or whole Q8_0 / Q4_0 blocks (a quantized KV cache,
 * read where it lies: no converted copy of the cache). The values are those
 * of the type's to_float bit for bit (block scale times the integer, one
 * rounding), so a batch's keys and a generation step's (converted by
 * to_float, ops-attn.c) are the same numbers.
 */
#ifndef CLLM_BACKEND_CPU_X86_ATTN_KV_H
#define CLLM_BACKEND_CPU_X86_ATTN_KV_H

#include "core/quants.h"
#include "core/tensor.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The F32 value of the fp16 scale at p (any alignment). */
static inline __attribute__((always_inline)) __m256 cllm_attn_kv_scale(const char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* Values o .. o + 7 (o 0, 8, 16 or 24) of the Q8_0 block at b, its scale
 * s (cllm_attn_kv_scale). */
static inline __attribute__((always_inline)) __m256 cllm_attn_q8_0_8(const char *b, int64_t o,
                                                                     __m256 s) {
    const __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + o));
    return _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* The same of a Q4_0 block: element o < 16 is the low nibble of qs[o],
 * else the high nibble of qs[o - 16]; minus 8. */
static inline __attribute__((always_inline)) __m256 cllm_attn_q4_0_8(const char *b, int64_t o,
                                                                     __m256 s) {
    __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + (o & 15)));
    if (o >= 16) q = _mm_srli_epi16(q, 4);
    q = _mm_and_si128(q, _mm_set1_epi8(0x0F));
    const __m256i x = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), _mm256_set1_epi32(8));
    return _mm256_mul_ps(s, _mm256_cvtepi32_ps(x));
}

/* Values d .. d + 7 (d a multiple of 8) of the row at `row`, of type t. */
static inline __attribute__((always_inline)) __m256 cllm_attn_kv8(cllm_type t, const char *row,
                                                                  int64_t d) {
    switch (t) {
    case CLLM_TYPE_F32: return _mm256_loadu_ps((const float *)row + d);
    case CLLM_TYPE_BF16: {
        const __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * d));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case CLLM_TYPE_Q8_0: {
        const char *b = row + (size_t)(d / CLLM_QK8_0) * sizeof(cllm_block_q8_0);
        return cllm_attn_q8_0_8(b, d % CLLM_QK8_0, cllm_attn_kv_scale(b));
    }
    case CLLM_TYPE_Q4_0: {
        const char *b = row + (size_t)(d / CLLM_QK4_0) * sizeof(cllm_block_q4_0);
        return cllm_attn_q4_0_8(b, d % CLLM_QK4_0, cllm_attn_kv_scale(b));
    }
    default: /* F16 */ return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * d)));
    }
}

#endif /* CLLM_BACKEND_CPU_X86_ATTN_KV_H */
