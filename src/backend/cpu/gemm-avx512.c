/*
 * The panel GEMM kernel (gemm.h) for AVX-512 VNNI: 16 weight rows in the 16
 * int32 lanes of a zmm register x up to GZ_COLS columns at a time. Per scale
 * block and column: BS / 4 vpdpbusd (each 16 rows x 4 elements, the
 * activation's 4 bytes broadcast from memory), then one conversion, one
 * multiply by the activation's scale and one FMA with the 16 weight scales
 * (and one more FMA for types with an offset). Compiled for these
 * instructions only; gemm.c calls it only when the CPU has them.
 */
#include "backend/cpu/gemm.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#include <immintrin.h>
#include <string.h>

#define GZ_INLINE static inline __attribute__((always_inline))
#define GZ_COLS   8 /* 8 int32 + 8 float accumulators + weights and scales: 19 of 32 registers */

GZ_INLINE int32_t gz_i32(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

GZ_INLINE float gz_f32(const char *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* 16 rows x nc columns over all nb blocks; spb = BS / 4 steps per block. */
GZ_INLINE void gz_tile(int spb, bool off, int nc, int64_t nb, const char *panel, size_t bb,
                       const char *act, size_t astride, size_t ab, float *out, size_t ldo,
                       __mmask16 m) {
    const int bs = 4 * spb;
    __m512 f[GZ_COLS];
#pragma GCC unroll 8
    for (int j = 0; j < nc; j++) f[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *pb = panel + (size_t)b * bb;
        const char *ax = act + (size_t)b * ab;
        __m512i acc[GZ_COLS];
#pragma GCC unroll 8
        for (int j = 0; j < nc; j++) acc[j] = _mm512_set1_epi32(gz_i32(ax + j * astride + bs + 8));
#pragma GCC unroll 8
        for (int t = 0; t < spb; t++) {
            const __m512i w = _mm512_loadu_si512(pb + 64 * t);
#pragma GCC unroll 8
            for (int j = 0; j < nc; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], w,
                                             _mm512_set1_epi32(gz_i32(ax + j * astride + 4 * t)));
        }
        const __m512 sc = _mm512_loadu_ps(pb + 64 * spb);
#pragma GCC unroll 8
        for (int j = 0; j < nc; j++) {
            const __m512 dj = _mm512_set1_ps(gz_f32(ax + j * astride + bs));
            f[j] = _mm512_fmadd_ps(sc, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), dj), f[j]);
        }
        if (off) {
            const __m512 o = _mm512_loadu_ps(pb + 64 * spb + 64);
#pragma GCC unroll 8
            for (int j = 0; j < nc; j++)
                f[j] = _mm512_fmadd_ps(o, _mm512_set1_ps(gz_f32(ax + j * astride + bs + 4)), f[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < nc; j++) _mm512_mask_storeu_ps(out + (size_t)j * ldo, m, f[j]);
}

#define GZ_CASES(spb, off)                                                                         \
    switch (nc) {                                                                                  \
    case 1: gz_tile(spb, off, 1, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 2: gz_tile(spb, off, 2, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 3: gz_tile(spb, off, 3, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 4: gz_tile(spb, off, 4, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 5: gz_tile(spb, off, 5, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 6: gz_tile(spb, off, 6, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    case 7: gz_tile(spb, off, 7, nb, panel, bb, a, astride, ab, o, ldo, m); break;                 \
    default: gz_tile(spb, off, 8, nb, panel, bb, a, astride, ab, o, ldo, m); break;                \
    }

static void gz_run(int bs, bool off, int64_t K, const char *panel, const char *act, size_t astride,
                   int ncols, float *out, size_t ldo, int nrows) {
    const int64_t nb = K / bs;
    const size_t bb = (size_t)(bs / 4) * 64 + 64 + (off ? 64 : 0), ab = (size_t)bs + 16;
    const __mmask16 m = nrows >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nrows) - 1u);
    for (int j0 = 0; j0 < ncols; j0 += GZ_COLS) {
        const int nc = ncols - j0 < GZ_COLS ? ncols - j0 : GZ_COLS;
        const char *a = act + (size_t)j0 * astride;
        float *o = out + (size_t)j0 * ldo;
        if (bs == 32) {
            if (off) {
                GZ_CASES(8, true)
            } else {
                GZ_CASES(8, false)
            }
        } else {
            if (off) {
                GZ_CASES(4, true)
            } else {
                GZ_CASES(4, false)
            }
        }
    }
}

void cllm_cpu_gemm_avx512(const cllm_gemm_form *f, int64_t K, const void *panel, const void *act,
                          size_t act_stride, int ncols, float *out, size_t ldo, int nrows) {
    gz_run(f->bs, f->offset, K, panel, act, act_stride, ncols, out, ldo, nrows);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
typedef int cllm_gemm_avx512_unused; /* not x86: nothing to build */
#endif
