/*
 * Internal: 512-bit vector maths shared by the AVX-512 kernels. Include only
 * from files compiled for AVX-512 (after their target pragma).
 */
#ifndef CLLM_BACKEND_CPU_VEC_AVX512_H
#define CLLM_BACKEND_CPU_VEC_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* The first n of 16 lanes (none for n <= 0, all for n >= 16). */
static inline __attribute__((always_inline)) __mmask16 cllm_lanes16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* e^x for 16 floats: x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor
 * polynomial of degree 6 (relative error < 2e-7), times 2^n by vscalefps.
 * x <= -104 (-inf included) gives 0 or a denormal; x is capped at 88.7. */
static inline __attribute__((always_inline)) __m512 cllm_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x); /* ln2 high bits */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);      /* ln2 - high */
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif /* CLLM_BACKEND_CPU_VEC_AVX512_H */
