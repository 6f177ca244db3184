/*
 * CPU row kernels for AVX-512 (F, BW, VL, DQ, VNNI): the loops of
 * kernels-x86.h with vpdpbusd (256-bit, AVX512_VNNI + VL) for the integer
 * dots, and 512-bit versions of the float dots and activation quantizers.
 * Only this file is compiled for these instructions; kernels.c calls
 * cllm_cpu_kernels_fill_avx512 only on CPUs (and OSes) that support them.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/kernels-impl.h"

#if CLLM_CPU_X86

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#define KX_VNNI 1
#define KX_COLS 8 /* 32 vector registers: a whole CLLM_CPU_MAX_COLS chunk at once */
#define KX_ROWS 4 /* and 4 x 4 tiles for vec_dot_mxn */
#include "backend/cpu/x86/kernels-x86.h"
#include "backend/cpu/x86/vec-avx512.h"

/* ---- F32 / F16 / BF16 x F32, 16 elements per step --------------------------------------
 * The last n % 16 elements through masked loads (zeros beyond the row). */

KX_INLINE __m512 kz_load16_half(int t, const uint16_t *p, __mmask16 m) {
    if (t == KX_F32) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (t == KX_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* alone: vec_dot's one column; vec_dot_n sums a lone column as it sums
 * several (kx_dot_half says why). */
KX_INLINE void kz_dot_half(int t, int nc, bool alone, int64_t n, float *out, const void *vx,
                           const char *y, size_t by) {
    const uint16_t *x = vx;
    const int64_t u = t == KX_F32 ? 2 : 1; /* 16-bit units per element */
    __m512 acc[KX_COLS];
    for (int c = 0; c < nc; c++) acc[c] = _mm512_setzero_ps();
    int64_t i = 0;
    if (alone) { /* one column: 4 accumulators hide the FMA latency */
        __m512 a1 = _mm512_setzero_ps(), a2 = a1, a3 = a1;
        const float *y0 = (const float *)y;
        for (; i + 64 <= n; i += 64) {
            const char *ahead = (const char *)(x + u * i) + CLLM_CPU_PREFETCH_AHEAD;
            _mm_prefetch(ahead, CLLM_CPU_PREFETCH_HINT);
            _mm_prefetch(ahead + 64, CLLM_CPU_PREFETCH_HINT);
            if (t == KX_F32) {
                _mm_prefetch(ahead + 128, CLLM_CPU_PREFETCH_HINT);
                _mm_prefetch(ahead + 192, CLLM_CPU_PREFETCH_HINT);
            }
            acc[0] = _mm512_fmadd_ps(kz_load16_half(t, x + u * i, 0xffff), _mm512_loadu_ps(y0 + i),
                                     acc[0]);
            a1 = _mm512_fmadd_ps(kz_load16_half(t, x + u * (i + 16), 0xffff),
                                 _mm512_loadu_ps(y0 + i + 16), a1);
            a2 = _mm512_fmadd_ps(kz_load16_half(t, x + u * (i + 32), 0xffff),
                                 _mm512_loadu_ps(y0 + i + 32), a2);
            a3 = _mm512_fmadd_ps(kz_load16_half(t, x + u * (i + 48), 0xffff),
                                 _mm512_loadu_ps(y0 + i + 48), a3);
        }
        acc[0] = _mm512_add_ps(_mm512_add_ps(acc[0], a1), _mm512_add_ps(a2, a3));
    }
    for (; i < n; i += 16) {
        const __mmask16 m = cllm_lanes16(n - i);
        const __m512 xv = kz_load16_half(t, x + u * i, m);
        for (int c = 0; c < nc; c++) {
            const float *yc = (const float *)(y + (size_t)c * by);
            acc[c] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, yc + i), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) out[c] = _mm512_reduce_add_ps(acc[c]);
}

static void kz_vec_dot_f16(int64_t n, float *out, const void *x, const void *y) {
    kz_dot_half(KX_F16, 1, true, n, out, x, (const char *)y, 0);
}

static void kz_vec_dot_bf16(int64_t n, float *out, const void *x, const void *y) {
    kz_dot_half(KX_BF16, 1, true, n, out, x, (const char *)y, 0);
}

KX_INLINE void kz_dot_half_n(int t, int64_t n, float *out, const void *x, const void *y, size_t by,
                             int ncols) {
    for (int c0 = 0; c0 < ncols; c0 += KX_COLS) {
        const char *yc = (const char *)y + (size_t)c0 * by;
        switch (ncols - c0) {
        case 1: kz_dot_half(t, 1, false, n, out + c0, x, yc, by); break;
        case 2: kz_dot_half(t, 2, false, n, out + c0, x, yc, by); break;
        case 3: kz_dot_half(t, 3, false, n, out + c0, x, yc, by); break;
        case 4: kz_dot_half(t, 4, false, n, out + c0, x, yc, by); break;
        case 5: kz_dot_half(t, 5, false, n, out + c0, x, yc, by); break;
        case 6: kz_dot_half(t, 6, false, n, out + c0, x, yc, by); break;
        case 7: kz_dot_half(t, 7, false, n, out + c0, x, yc, by); break;
        default: kz_dot_half(t, 8, false, n, out + c0, x, yc, by); break;
        }
    }
}

static void kz_vec_dot_f32(int64_t n, float *out, const void *x, const void *y) {
    kz_dot_half(KX_F32, 1, true, n, out, x, (const char *)y, 0);
}

static void kz_vec_dot_n_f32(int64_t n, float *out, const void *x, const void *y, size_t by,
                             int ncols) {
    kz_dot_half_n(KX_F32, n, out, x, y, by, ncols);
}

static void kz_vec_dot_n_f16(int64_t n, float *out, const void *x, const void *y, size_t by,
                             int ncols) {
    kz_dot_half_n(KX_F16, n, out, x, y, by, ncols);
}

static void kz_vec_dot_n_bf16(int64_t n, float *out, const void *x, const void *y, size_t by,
                              int ncols) {
    kz_dot_half_n(KX_BF16, n, out, x, y, by, ncols);
}

void cllm_cpu_kernels_fill_avx512(cllm_cpu_type_kernels tab[CLLM_TYPE_COUNT], bool prefer_256) {
    kx_fill(tab);
    if (prefer_256) return; /* the float dots of kernels-x86.h, at 256 bits */
    kx_set(tab, CLLM_TYPE_F16, kz_vec_dot_f16, kz_vec_dot_n_f16);
    kx_set(tab, CLLM_TYPE_BF16, kz_vec_dot_bf16, kz_vec_dot_n_bf16);
    kx_set(tab, CLLM_TYPE_F32, kz_vec_dot_f32, kz_vec_dot_n_f32);
}

CLLM_X86_TARGET_END

#else
typedef int cllm_kernels_avx512_unused; /* not x86: nothing to build */
#endif
