/*
 * The panel GEMM kernel (gemm.h) for AVX-512 VNNI: 16 weight rows in the 16
 * int32 lanes of a zmm register x up to GZ_COLS columns at a time. Per scale
 * block and column: BS / 4 vpdpbusd (each 16 rows x 4 elements, the
 * activation's 4 bytes broadcast from memory), then one conversion, one
 * multiply by the activation's scale and one FMA with the 16 weight scales
 * (and one more FMA for types with an offset); gz_tile2 runs two panels
 * (32 rows) at once, so each broadcast serves two vpdpbusd. Compiled for these
 * instructions only; gemm.c calls it only when the CPU has them.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "backend/cpu/x86/vec-avx512.h"
#include "core/quants.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define GZ_INLINE static inline __attribute__((always_inline))
#define GZ_COLS   12 /* 12 int32 + 12 float accumulators + weights and scales: 27 of 32 registers */

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
#pragma GCC unroll 12
    for (int j = 0; j < nc; j++) f[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *pb = panel + (size_t)b * bb;
        const char *ax = act + (size_t)b * ab;
        __m512i acc[GZ_COLS];
#pragma GCC unroll 12
        for (int j = 0; j < nc; j++) acc[j] = _mm512_set1_epi32(gz_i32(ax + j * astride + bs + 8));
#pragma GCC unroll 12
        for (int t = 0; t < spb; t++) {
            const __m512i w = _mm512_loadu_si512(pb + 64 * t);
#pragma GCC unroll 12
            for (int j = 0; j < nc; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], w,
                                             _mm512_set1_epi32(gz_i32(ax + j * astride + 4 * t)));
        }
        const __m512 sc = _mm512_loadu_ps(pb + 64 * spb);
#pragma GCC unroll 12
        for (int j = 0; j < nc; j++) {
            const __m512 dj = _mm512_set1_ps(gz_f32(ax + j * astride + bs));
            f[j] = _mm512_fmadd_ps(sc, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), dj), f[j]);
        }
        if (off) {
            const __m512 o = _mm512_loadu_ps(pb + 64 * spb + 64);
#pragma GCC unroll 12
            for (int j = 0; j < nc; j++)
                f[j] = _mm512_fmadd_ps(o, _mm512_set1_ps(gz_f32(ax + j * astride + bs + 4)), f[j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < nc; j++) _mm512_mask_storeu_ps(out + (size_t)j * ldo, m, f[j]);
}

/* CALL(n, ...) for the column count nc in 1..GZ_COLS, n a constant in each
 * branch (so the tile functions unroll over their columns). */
#define GZ_BY_COLS(nc, CALL, ...)                                                                  \
    switch (nc) {                                                                                  \
    case 1: CALL(1, __VA_ARGS__); break;                                                           \
    case 2: CALL(2, __VA_ARGS__); break;                                                           \
    case 3: CALL(3, __VA_ARGS__); break;                                                           \
    case 4: CALL(4, __VA_ARGS__); break;                                                           \
    case 5: CALL(5, __VA_ARGS__); break;                                                           \
    case 6: CALL(6, __VA_ARGS__); break;                                                           \
    case 7: CALL(7, __VA_ARGS__); break;                                                           \
    case 8: CALL(8, __VA_ARGS__); break;                                                           \
    case 9: CALL(9, __VA_ARGS__); break;                                                           \
    case 10: CALL(10, __VA_ARGS__); break;                                                         \
    case 11: CALL(11, __VA_ARGS__); break;                                                         \
    default: CALL(12, __VA_ARGS__); break;                                                         \
    }
_Static_assert(GZ_COLS == 12, "GZ_BY_COLS covers 1..12 columns");

/* BY_COLS(nc, TILE, steps per block, offset) for the form: blocks of 32
 * (8 steps) or 16 (4), with or without an offset, each a constant. */
#define GZ_BY_FORM(bs, off, BY_COLS, nc, TILE)                                                     \
    if ((bs) == 32) {                                                                              \
        if (off) {                                                                                 \
            BY_COLS(nc, TILE, 8, true)                                                             \
        } else {                                                                                   \
            BY_COLS(nc, TILE, 8, false)                                                            \
        }                                                                                          \
    } else if (off) {                                                                              \
        BY_COLS(nc, TILE, 4, true)                                                                 \
    } else {                                                                                       \
        BY_COLS(nc, TILE, 4, false)                                                                \
    }

#define GZ_TILE(n, spb, off) gz_tile(spb, off, n, nb, panel, bb, a, astride, ab, o, ldo, m)

static void gz_run(int bs, bool off, int64_t K, const char *panel, const char *act, size_t astride,
                   int ncols, float *out, size_t ldo, int nrows) {
    const int64_t nb = K / bs;
    const size_t bb = (size_t)(bs / 4) * 64 + 64 + (off ? 64 : 0), ab = (size_t)bs + 16;
    const __mmask16 m = cllm_lanes16(nrows);
    for (int j0 = 0; j0 < ncols; j0 += GZ_COLS) {
        const int nc = ncols - j0 < GZ_COLS ? ncols - j0 : GZ_COLS;
        const char *a = act + (size_t)j0 * astride;
        float *o = out + (size_t)j0 * ldo;
        GZ_BY_FORM(bs, off, GZ_BY_COLS, nc, GZ_TILE)
    }
}

void cllm_cpu_gemm_avx512(const cllm_gemm_form *f, int64_t K, const void *panel, const void *act,
                          size_t act_stride, int ncols, float *out, size_t ldo, int nrows) {
    gz_run(f->bs, f->offset, K, panel, act, act_stride, ncols, out, ldo, nrows);
}

/* ---- two panels ----------------------------------------------------------------
 * 32 rows (two panels) x up to GZ2_COLS columns: each activation broadcast
 * feeds one vpdpbusd per panel, so a vpdpbusd waits on 1/2 + 1/nc loads
 * instead of gz_tile's 1 + 1/nc (with 12 columns gz_tile was bound by the
 * load ports, not by vpdpbusd). 12 int32 + 12 float accumulators, the two
 * weight registers and a broadcast: 27 of 32 registers. Every lane is summed
 * as gz_tile sums it: the same bits. */
#define GZ2_COLS 6

GZ_INLINE void gz_tile2(int spb, bool off, int nc, int64_t nb, const char *panel0,
                        const char *panel1, size_t bb, const char *act, size_t astride, size_t ab,
                        float *out, size_t ldo, __mmask16 m1) {
    const int bs = 4 * spb;
    __m512 f0[GZ2_COLS], f1[GZ2_COLS];
#pragma GCC unroll 6
    for (int j = 0; j < nc; j++) f0[j] = f1[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *pb0 = panel0 + (size_t)b * bb, *pb1 = panel1 + (size_t)b * bb;
        const char *ax = act + (size_t)b * ab;
        __m512i a0[GZ2_COLS], a1[GZ2_COLS];
#pragma GCC unroll 6
        for (int j = 0; j < nc; j++)
            a0[j] = a1[j] = _mm512_set1_epi32(gz_i32(ax + j * astride + bs + 8));
#pragma GCC unroll 8
        for (int t = 0; t < spb; t++) {
            const __m512i w0 = _mm512_loadu_si512(pb0 + 64 * t);
            const __m512i w1 = _mm512_loadu_si512(pb1 + 64 * t);
#pragma GCC unroll 6
            for (int j = 0; j < nc; j++) {
                const __m512i x = _mm512_set1_epi32(gz_i32(ax + j * astride + 4 * t));
                a0[j] = _mm512_dpbusd_epi32(a0[j], w0, x);
                a1[j] = _mm512_dpbusd_epi32(a1[j], w1, x);
            }
        }
        const __m512 sc0 = _mm512_loadu_ps(pb0 + 64 * spb), sc1 = _mm512_loadu_ps(pb1 + 64 * spb);
#pragma GCC unroll 6
        for (int j = 0; j < nc; j++) {
            const __m512 dj = _mm512_set1_ps(gz_f32(ax + j * astride + bs));
            f0[j] = _mm512_fmadd_ps(sc0, _mm512_mul_ps(_mm512_cvtepi32_ps(a0[j]), dj), f0[j]);
            f1[j] = _mm512_fmadd_ps(sc1, _mm512_mul_ps(_mm512_cvtepi32_ps(a1[j]), dj), f1[j]);
        }
        if (off) {
            const __m512 o0 = _mm512_loadu_ps(pb0 + 64 * spb + 64);
            const __m512 o1 = _mm512_loadu_ps(pb1 + 64 * spb + 64);
#pragma GCC unroll 6
            for (int j = 0; j < nc; j++) {
                const __m512 e = _mm512_set1_ps(gz_f32(ax + j * astride + bs + 4));
                f0[j] = _mm512_fmadd_ps(o0, e, f0[j]);
                f1[j] = _mm512_fmadd_ps(o1, e, f1[j]);
            }
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < nc; j++) {
        _mm512_storeu_ps(out + (size_t)j * ldo, f0[j]);
        _mm512_mask_storeu_ps(out + (size_t)j * ldo + 16, m1, f1[j]);
    }
}

#define GZ2_BY_COLS(nc, CALL, ...)                                                                 \
    switch (nc) {                                                                                  \
    case 1: CALL(1, __VA_ARGS__); break;                                                           \
    case 2: CALL(2, __VA_ARGS__); break;                                                           \
    case 3: CALL(3, __VA_ARGS__); break;                                                           \
    case 4: CALL(4, __VA_ARGS__); break;                                                           \
    case 5: CALL(5, __VA_ARGS__); break;                                                           \
    default: CALL(6, __VA_ARGS__); break;                                                          \
    }
_Static_assert(GZ2_COLS == 6, "GZ2_BY_COLS covers 1..6 columns");

#define GZ_TILE2(n, spb, off)                                                                      \
    gz_tile2(spb, off, n, nb, panel0, panel1, bb, a, astride, ab, o, ldo, m)

void cllm_cpu_gemm2_avx512(const cllm_gemm_form *f, int64_t K, const void *panel0,
                           const void *panel1, const void *act, size_t astride, int ncols,
                           float *out, size_t ldo, int nrows1) {
    const int bs = f->bs;
    const bool off = f->offset;
    const int64_t nb = K / bs;
    const size_t bb = (size_t)(bs / 4) * 64 + 64 + (off ? 64 : 0), ab = (size_t)bs + 16;
    const __mmask16 m = cllm_lanes16(nrows1);
    for (int j0 = 0; j0 < ncols; j0 += GZ2_COLS) {
        const int nc = ncols - j0 < GZ2_COLS ? ncols - j0 : GZ2_COLS;
        const char *a = (const char *)act + (size_t)j0 * astride;
        float *o = out + (size_t)j0 * ldo;
        GZ_BY_FORM(bs, off, GZ2_BY_COLS, nc, GZ_TILE2)
    }
}

/* ---- activations --------------------------------------------------------------
 * As cllm_cpu_gemm_quantize: d = amax / 127, q = nearest(x / d) (ties to
 * even, as cllm_quant_nearest_int), s = sum q; BS = 16 or 32. */

/* q = nearest(x * id) clamped to -127..127 (ties to even, as the portable
 * cllm_quant_round_clamp), 16 lanes at a time, as int8 in an xmm. */
GZ_INLINE __m128i gz_q8(__m512 v, __m512 vid) {
    const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, vid),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtepi32_epi8(
        _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127)));
}

GZ_INLINE __m512 gz_abs(__m512 v) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* Sums of the 4 groups of 4 bytes of 16 int8. */
GZ_INLINE __m128i gz_sum4(__m128i q) {
    return _mm_dpbusd_epi32(_mm_setzero_si128(), _mm_set1_epi8(1), q);
}

GZ_INLINE int32_t gz_hsum4(__m128i v) {
    return _mm_extract_epi32(v, 0) + _mm_extract_epi32(v, 1) + _mm_extract_epi32(v, 2) +
           _mm_extract_epi32(v, 3);
}

void cllm_cpu_gemm_quantize_avx512(const cllm_gemm_form *f, const float *x, void *act, int64_t K) {
    const int bs = f->bs;
    char *out = act;
    for (int64_t b = 0; b < K / bs; b++, out += bs + 16) {
        const float *xb = x + b * bs;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = bs == 32 ? _mm512_loadu_ps(xb + 16) : v0;
        const float d = _mm512_reduce_max_ps(_mm512_max_ps(gz_abs(v0), gz_abs(v1))) / 127.0f;
        const __m512 vid = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        const __m128i lo = gz_q8(v0, vid);
        _mm_storeu_si128((__m128i *)out, lo);
        __m128i g = gz_sum4(lo);
        if (bs == 32) {
            const __m128i hi = gz_q8(v1, vid);
            _mm_storeu_si128((__m128i *)(out + 16), hi);
            g = _mm_add_epi32(g, gz_sum4(hi));
        }
        const int32_t s = gz_hsum4(g);
        cllm_gemm_act_block_tail(out + bs, f, d, s);
    }
}

/* The packers walk 16 rows at once, which the hardware prefetcher follows
 * poorly: each row's line GZ_PACK_PF bytes ahead is requested explicitly. */
#define GZ_PACK_PF 512

GZ_INLINE void gz_prefetch_rows(const char *p, size_t stride, int nrows) {
    for (int r = 0; r < nrows; r++) _mm_prefetch(p + (size_t)r * stride, _MM_HINT_T0);
}

/* ---- float weights: 32 rows (two registers) x up to 12 columns of FMAs ----------
 * Each column value is broadcast once for both registers: 2 panel loads and
 * 12 broadcasts per 24 FMAs (24 accumulators, 27 of 32 registers). */

GZ_INLINE void gz_ftile(int nc, int64_t K, const float *panel, const float *cols, size_t cs,
                        float *out, size_t ldo, __mmask16 m0, __mmask16 m1) {
    __m512 a0[GZ_COLS], a1[GZ_COLS];
#pragma GCC unroll 12
    for (int j = 0; j < nc; j++) a0[j] = a1[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 w0 = _mm512_loadu_ps(panel + k * 32);
        const __m512 w1 = _mm512_loadu_ps(panel + k * 32 + 16);
#pragma GCC unroll 12
        for (int j = 0; j < nc; j++) {
            const __m512 c = _mm512_set1_ps(cols[(size_t)j * cs + (size_t)k]);
            a0[j] = _mm512_fmadd_ps(w0, c, a0[j]);
            a1[j] = _mm512_fmadd_ps(w1, c, a1[j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < nc; j++) {
        _mm512_mask_storeu_ps(out + (size_t)j * ldo, m0, a0[j]);
        _mm512_mask_storeu_ps(out + (size_t)j * ldo + 16, m1, a1[j]);
    }
}

#define GZ_FTILE(n, unused) gz_ftile(n, K, panel, c, cs, o, ldo, m0, m1)

void cllm_cpu_gemm_f_avx512(int64_t K, const float *panel, const float *cols, size_t col_stride,
                            int ncols, float *out, size_t ldo, int nrows) {
    const __mmask16 m0 = cllm_lanes16(nrows), m1 = cllm_lanes16(nrows - 16);
    const size_t cs = col_stride / sizeof(float);
    for (int j0 = 0; j0 < ncols; j0 += GZ_COLS) {
        const int nc = ncols - j0 < GZ_COLS ? ncols - j0 : GZ_COLS;
        const float *c = cols + (size_t)j0 * cs;
        float *o = out + (size_t)j0 * ldo;
        GZ_BY_COLS(nc, GZ_FTILE, 0)
    }
}

/* 32 rows of F16 / BF16 into [K][32] F32, 16 rows at a time: one dword
 * gather per 2 elements (lane r: elements k and k + 1 of row r). */
bool cllm_cpu_gemm_f_pack_avx512(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                                 float *panel) {
    if ((uint64_t)stride * 32 > INT32_MAX) return false;
    const __m512i rows =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int32_t)stride));
    const bool f16 = type == CLLM_TYPE_F16;
    for (int half = 0; half < 2; half++) {
        const __mmask16 m = cllm_lanes16(nrows - 16 * half);
        const char *src = (const char *)a + (size_t)(16 * half) * stride;
        float *pp = panel + 16 * half;
        int64_t k = 0;
        const int nh = nrows - 16 * half < 16 ? nrows - 16 * half : 16;
        for (; k + 2 <= K; k += 2) {
            if ((k & 31) == 0) gz_prefetch_rows(src + 2 * k + GZ_PACK_PF, stride, nh);
            const __m512i w =
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, rows, src + 2 * k, 1);
            __m512 lo, hi;
            if (f16) {
                lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
                hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16)));
            } else {
                lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
                hi = _mm512_castsi512_ps(
                    _mm512_and_si512(w, _mm512_set1_epi32((int32_t)0xffff0000)));
            }
            _mm512_storeu_ps(pp + k * 32, lo);
            _mm512_storeu_ps(pp + (k + 1) * 32, hi);
        }
        for (; k < K; k++) { /* odd K: the last element alone */
            for (int r = 0; r < 16; r++) {
                float v = 0.0f;
                if (16 * half + r < nrows) {
                    uint16_t h;
                    memcpy(&h, src + (size_t)r * stride + 2 * k, 2);
                    if (f16) {
                        v = _cvtsh_ss(h);
                    } else {
                        const uint32_t u = (uint32_t)h << 16;
                        memcpy(&v, &u, 4);
                    }
                }
                pp[k * 32 + r] = v;
            }
        }
    }
    return true;
}

/* ---- one column: Q4_0 / Q4_1 rows, 4 blocks per step (layout: gemm.h) ---------- */

/* The word permutations of a group of 4 blocks (9 words each for Q4_0, 10
 * for Q4_1; [q41]): the quants' 8 words of each block, each block's d in
 * lanes 4i..4i+3, Q4_1's m the same. Tables: computed per call, they were
 * about a hundred instructions and stack stores per row, as much as the
 * work of a 576-element row. */
#define GZ_W8(b) (b), (b) + 1, (b) + 2, (b) + 3, (b) + 4, (b) + 5, (b) + 6, (b) + 7
#define GZ_W4(b) (b), (b), (b), (b)
static const int16_t gz_qidx[2][32] = {{GZ_W8(1), GZ_W8(10), GZ_W8(19), GZ_W8(28)},
                                       {GZ_W8(2), GZ_W8(12), GZ_W8(22), GZ_W8(32)}};
static const int16_t gz_didx[2][32] = {{GZ_W4(0), GZ_W4(9), GZ_W4(18), GZ_W4(27)},
                                       {GZ_W4(0), GZ_W4(10), GZ_W4(20), GZ_W4(30)}};
static const int16_t gz_midx[32] = {GZ_W4(1), GZ_W4(11), GZ_W4(21), GZ_W4(31)};

/* One group of 4 blocks (A, B: its bytes) against columns 0 .. nc - 1. */
GZ_INLINE void gz_gemv_n_group(bool q41, int nc, __m512i A, __m512i B, const char *act,
                               size_t act_stride, size_t goff, __m512i qidx, __m512i didx,
                               __m512i midx, __m512 *acc, __m512 *macc) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const __m512i qs = _mm512_permutex2var_epi16(A, qidx, B);
    const __m512i lo = _mm512_and_si512(qs, nib);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), nib);
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, A)));
    __m512 mw = dw;
    if (q41) mw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(midx, A)));
    for (int c = 0; c < nc; c++) {
        const char *g = act + (size_t)c * act_stride + goff;
        __m512i dot = _mm512_loadu_si512(g + 128);
        dot = _mm512_dpbusd_epi32(dot, lo, _mm512_loadu_si512(g));
        dot = _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(g + 64));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 _mm512_mul_ps(dw, _mm512_loadu_ps(g + 192)), acc[c]);
        if (q41) macc[c] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(g + 256), macc[c]);
    }
}

/* Columns 0 .. nc - 1 (nc <= 4) of a Q4_0 / Q4_1 row at once (act: nc
 * columns of activations act_stride bytes apart, out: nc results
 * out_stride floats apart): the weights are loaded and unpacked once per
 * group for every column, and each column is summed on its own, always in
 * the same order (pairs of groups in two accumulators, the groups after the
 * last pair in the first), so each result is what nc = 1, the one-column
 * kernel, gives that column, bit for bit. */
GZ_INLINE void gz_gemv_n(bool q41, int nc, int64_t K, const char *row, const char *act,
                         size_t act_stride, float *out, size_t out_stride) {
    const int bw = q41 ? 10 : 9; /* words per block */
    const __m512i qidx = _mm512_loadu_si512(gz_qidx[q41]), didx = _mm512_loadu_si512(gz_didx[q41]);
    const __m512i midx = _mm512_loadu_si512(gz_midx);
    const size_t gb = (size_t)(2 * bw) * 4; /* bytes of 4 blocks */
    const int64_t nb = K / 32, ng = nb / 4;
    __m512 a0[4], a1[4], m0[4], m1[4];
    for (int c = 0; c < 4; c++) a0[c] = a1[c] = m0[c] = m1[c] = _mm512_setzero_ps();
    int64_t gi = 0;
    for (; gi + 2 <= ng; gi += 2) {
        const char *p = row + (size_t)gi * gb;
        _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
        const char *p1 = p + gb;
        gz_gemv_n_group(q41, nc, _mm512_loadu_si512(p),
                        _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 64))), act,
                        act_stride, (size_t)gi * 320, qidx, didx, midx, a0, m0);
        gz_gemv_n_group(q41, nc, _mm512_loadu_si512(p1),
                        _mm512_castsi128_si512(q41 ? _mm_loadu_si128((const __m128i *)(p1 + 64))
                                                   : _mm_loadl_epi64((const __m128i *)(p1 + 64))),
                        act, act_stride, (size_t)(gi + 1) * 320, qidx, didx, midx, a1, m1);
    }
    for (; gi * 4 < nb; gi++) {
        const char *p = row + (size_t)gi * gb;
        const int64_t left = (nb - gi * 4) * 2 * bw; /* bytes of this row left */
        __m512i A, B = _mm512_setzero_si512();
        if (left >= (int64_t)gb) {
            A = _mm512_loadu_si512(p);
            B = _mm512_castsi128_si512(
                _mm_maskz_loadu_epi8(cllm_lanes16((int64_t)gb - 64), p + 64));
        } else {
            A = _mm512_maskz_loadu_epi8((__mmask64)((1ull << left) - 1ull), p);
        }
        gz_gemv_n_group(q41, nc, A, B, act, act_stride, (size_t)gi * 320, qidx, didx, midx, a0, m0);
    }
    for (int c = 0; c < nc; c++) {
        __m512 t = _mm512_add_ps(a0[c], a1[c]);
        if (q41) t = _mm512_add_ps(t, _mm512_add_ps(m0[c], m1[c]));
        out[(size_t)c * out_stride] = _mm512_reduce_add_ps(t);
    }
}

void cllm_cpu_gemv_n_avx512(cllm_type type, int64_t K, const void *row, const void *act,
                            size_t act_stride, int n, float *out, size_t out_stride) {
    const bool q41 = type == CLLM_TYPE_Q4_1;
    if (type == CLLM_TYPE_Q4_K) { /* one column at a time */
        for (int c = 0; c < n; c++) {
            cllm_cpu_gemv_avx512(type, K, row, (const char *)act + (size_t)c * act_stride,
                                 out + (size_t)c * out_stride);
        }
        return;
    }
    /* constant column counts, so that each loop over them unrolls */
    for (int c0 = 0; c0 < n; c0 += 4) {
        const char *a = (const char *)act + (size_t)c0 * act_stride;
        float *o = out + (size_t)c0 * out_stride;
        switch (n - c0 < 4 ? n - c0 : 4) {
        case 1: gz_gemv_n(q41, 1, K, row, a, act_stride, o, out_stride); break;
        case 2: gz_gemv_n(q41, 2, K, row, a, act_stride, o, out_stride); break;
        case 3: gz_gemv_n(q41, 3, K, row, a, act_stride, o, out_stride); break;
        default: gz_gemv_n(q41, 4, K, row, a, act_stride, o, out_stride); break;
        }
    }
}

/* Q4_K: one super-block per step (layout: gemm.h). The 6-bit scales and
 * mins are unpacked in 32-bit words (4 per word), converted to floats once,
 * and each dot vector (2 sub-blocks of 8 lanes) takes its lanes' scales by a
 * permutation. */
GZ_INLINE void gz_q4k_sb(const char *b, const char *in, __m512 *a0, __m512 *a1, __m128 *am) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const __m512i p0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i p1 = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m512i p2 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6);
    const __m512i p3 = _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7);
    uint16_t hd, hm;
    uint32_t u0, u1, u2;
    memcpy(&hd, b, 2);
    memcpy(&hm, b + 2, 2);
    memcpy(&u0, b + 4, 4);
    memcpy(&u1, b + 8, 4);
    memcpy(&u2, b + 12, 4);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    const __m128i scm = _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
    float da;
    memcpy(&da, in + 272, 4);
    const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scm)),
                                    _mm512_set1_ps(_cvtsh_ss(hd) * da));
    const __m512i q01 = _mm512_loadu_si512(b + 16), q23 = _mm512_loadu_si512(b + 80);
    const __m512i z = _mm512_setzero_si512();
    const __m512i d0 = _mm512_dpbusd_epi32(z, _mm512_and_si512(q01, nib), _mm512_loadu_si512(in));
    const __m512i d1 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q01, 4), nib),
                                           _mm512_loadu_si512(in + 64));
    const __m512i d2 =
        _mm512_dpbusd_epi32(z, _mm512_and_si512(q23, nib), _mm512_loadu_si512(in + 128));
    const __m512i d3 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(q23, 4), nib),
                                           _mm512_loadu_si512(in + 192));
    *a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(p0, sc), *a0);
    *a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(p1, sc), *a1);
    *a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2), _mm512_permutexvar_ps(p2, sc), *a0);
    *a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d3), _mm512_permutexvar_ps(p3, sc), *a1);
    /* mins: sum_s mn[s] * (sum of sub-block s), times dmin * d */
    const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
    const __m128i mi = _mm_madd_epi16(mn, _mm_loadu_si128((const __m128i *)(in + 256)));
    *am = _mm_fmadd_ps(_mm_cvtepi32_ps(mi), _mm_set1_ps(_cvtsh_ss(hm) * da), *am);
}

/* The sums of x (into lane 0) and of y (into lane 8), each in the order of
 * _mm512_reduce_add_ps (halves, quarters, pairs, then lanes 0 + 1), the
 * two rows' steps in the same operations. */
GZ_INLINE __m512 gz_reduce2(__m512 x, __m512 y) {
    const __m512 lo = _mm512_shuffle_f32x4(x, y, 0x44), hi = _mm512_shuffle_f32x4(x, y, 0xEE);
    const __m512 h = _mm512_add_ps(hi, lo); /* x's 256-bit halves in 0..7, y's in 8..15 */
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(h, h, 0xB1), h);
    const __m512 r = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
    return _mm512_add_ps(r, _mm512_permute_ps(r, 0xB1));
}

/* A row's sum: its two accumulators, less the mins (lanes 0..3). */
GZ_INLINE __m512 gz_q4k_total(__m512 a0, __m512 a1, __m128 am) {
    return _mm512_sub_ps(_mm512_add_ps(a0, a1), _mm512_zextps128_ps512(am));
}

static void gz_gemv_q4k(int64_t K, const char *row, const char *act, float *out) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    __m128 am = _mm_setzero_ps();
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const char *b = row + (size_t)sb * 144;
        _mm_prefetch(b + CLLM_CPU_PREFETCH_AHEAD, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(b + CLLM_CPU_PREFETCH_AHEAD + 64, CLLM_CPU_PREFETCH_HINT);
        gz_q4k_sb(b, act + (size_t)sb * 288, &a0, &a1, &am);
    }
    const __m512 t = gz_q4k_total(a0, a1, am);
    *out = _mm512_cvtss_f32(gz_reduce2(t, t));
}

/* Two rows (row, row + row_stride) against one column, each summed as
 * gz_gemv_q4k sums it (the same result bit for bit): each activation
 * super-block serves both, and the two rows' ends share one reduction.
 * Rows of 2,048 elements are only 8 super-blocks, so the one-row kernel's
 * reduction and return are a large share of its work. The prefetch runs
 * along both rows as one stream, as gv_gemv_2r's. */
static void gz_gemv_q4k_2r(int64_t K, const char *row, size_t row_stride, const char *act,
                           float *out) {
    const char *row1 = row + row_stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    __m128 am = _mm_setzero_ps(), bm = am;
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const char *pf = row + 2 * (size_t)sb * 144 + CLLM_CPU_PREFETCH_AHEAD;
        for (int l = 0; l < 5; l++) _mm_prefetch(pf + 64 * l, CLLM_CPU_PREFETCH_HINT);
        const char *in = act + (size_t)sb * 288;
        gz_q4k_sb(row + (size_t)sb * 144, in, &a0, &a1, &am);
        gz_q4k_sb(row1 + (size_t)sb * 144, in, &b0, &b1, &bm);
    }
    const __m512 r = gz_reduce2(gz_q4k_total(a0, a1, am), gz_q4k_total(b0, b1, bm));
    out[0] = _mm512_cvtss_f32(r);
    out[1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(r, 2));
}

void cllm_cpu_gemv_rows_q4k_avx512(int64_t K, const void *row, size_t row_stride, int nr,
                                   const void *act, float *out) {
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        gz_gemv_q4k_2r(K, (const char *)row + (size_t)r * row_stride, row_stride, act, out + r);
    for (; r < nr; r++) gz_gemv_q4k(K, (const char *)row + (size_t)r * row_stride, act, out + r);
}

/* ---- one column at 256 bits: Q4_0 / Q4_1 (gemv-x86.h, with vpdpbusd) ---------- */

#define GV_VNNI 1
#include "backend/cpu/x86/gemv-x86.h"

void cllm_cpu_gemv_x16_avx512vl(cllm_type type, int64_t K, const void *w, int ngroups,
                                const void *act, size_t act_stride, int nc, float *out,
                                size_t out_stride) {
    gv_gemv_x16(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
}

void cllm_cpu_gemm_pack_x16_avx512vl(cllm_type type, int64_t K, const void *group, void *panel) {
    gv_gemm_pack_x16(type, K, group, panel);
}

void cllm_cpu_gemv_n_avx512vl(cllm_type type, int64_t K, const void *row, const void *act,
                              size_t act_stride, int n, float *out, size_t out_stride) {
    gv_gemv_type(type, K, row, act, act_stride, n, out, out_stride);
}

void cllm_cpu_gemv_avx512vl(cllm_type type, int64_t K, const void *row, const void *act,
                            float *out) {
    gv_gemv_type(type, K, row, act, 0, 1, out, 0);
}

/*
 * Two rows of Q4_0 / Q4_1 against 2..4 columns at 512 bits: row x in the low
 * 256 bits of every register, row y in the high ones, and each half runs
 * the operations gv_pair runs on a ymm register with packed column scales
 * (the shuffles, unpacks and blends of gv_red, gv_scales and gv_lanes stay
 * within 128-bit lanes at either width). So every column's result is the
 * 256-bit kernel's, bit for bit, with half the operations for the two rows:
 * the unpacked nibbles, the scales and the reduction serve both rows, and
 * each column's activations are loaded once (broadcast to both halves).
 * Where 512-bit operations cost what 256-bit ones do, a step of a few
 * sequences of a small model spends most of its time in these columns:
 * they are bound by operations, not by memory.
 */

/* The zmm of 256-bit x in the low half and y in the high one. */
GZ_INLINE __m512i gw_pair_i(__m256i x, __m256i y) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1);
}

/* 256 bits at p in both halves. */
GZ_INLINE __m512i gw_bcast(const char *p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

/* gv_scales's 16-bit halves of one row's blocks b and b + 1, before the
 * conversion (Q4_1: d, m pairs; Q4_0: d in every word). */
GZ_INLINE __m128i gw_scale_halves(bool q41, const char *x0, size_t bsz, bool two) {
    if (q41) {
        const __m128i h0 = _mm_castps_si128(_mm_broadcast_ss((const float *)x0));
        const __m128i h1 = two ? _mm_castps_si128(_mm_broadcast_ss((const float *)(x0 + bsz)))
                               : _mm_setzero_si128();
        return _mm_blend_epi32(h0, h1, 0xC);
    }
    uint16_t d0, d1 = 0;
    memcpy(&d0, x0, 2);
    if (two) memcpy(&d1, x0 + bsz, 2);
    return _mm_blend_epi32(_mm_set1_epi16((short)d0), _mm_set1_epi16((short)d1), 0xC);
}

/* gv_red at 512 bits (each 128-bit lane as gv_red's). */
GZ_INLINE __m512i gw_red(int nc, __m512i s0, __m512i s1, __m512i s2, __m512i s3) {
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    if (nc == 2) return _mm512_add_epi32(t01, _mm512_shuffle_epi32(t01, 0x4E));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* The two rows' results from the sums v of their lanes (gv_lanes's last
 * step per half): out[c * out_stride] (row x: lanes c of halves 0 and 1)
 * and out[1 + c * out_stride] (row y: halves 2 and 3). */
GZ_INLINE void gw_store2(int nc, __m512 v, float *out, size_t out_stride) {
    float r[8];
    _mm256_storeu_ps(r, _mm256_castps128_ps256(
                            _mm_add_ps(_mm512_castps512_ps128(v), _mm512_extractf32x4_ps(v, 1))));
    _mm_storeu_ps(r + 4, _mm_add_ps(_mm512_extractf32x4_ps(v, 2), _mm512_extractf32x4_ps(v, 3)));
    for (int c = 0; c < nc; c++) {
        out[(size_t)c * out_stride] = r[c];
        out[1 + (size_t)c * out_stride] = r[4 + c];
    }
}

/* gv_pair (packed scales pk, nc >= 2) for rows x (x0) and y (y0). */
GZ_INLINE void gw_pair(bool q41, int nc, const char *x0, const char *y0, size_t bsz, bool two,
                       const char *g, size_t act_stride, const char *pk, __m512 *acc,
                       __m512 *accm) {
    const size_t qoff = q41 ? 4 : 2;
    const __m128i z = _mm_setzero_si128();
    const __m256i vx =
        _mm256_set_m128i(two ? _mm_loadu_si128((const __m128i *)(x0 + bsz + qoff)) : z,
                         _mm_loadu_si128((const __m128i *)(x0 + qoff)));
    const __m256i vy =
        _mm256_set_m128i(two ? _mm_loadu_si128((const __m128i *)(y0 + bsz + qoff)) : z,
                         _mm_loadu_si128((const __m128i *)(y0 + qoff)));
    const __m512i v = gw_pair_i(vx, vy), m4 = _mm512_set1_epi8(0x0F);
    const __m512i lo = _mm512_and_si512(v, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    const __m512 f = _mm512_cvtph_ps(
        _mm256_set_m128i(gw_scale_halves(q41, y0, bsz, two), gw_scale_halves(q41, x0, bsz, two)));
    const __m512 dw = q41 ? _mm512_shuffle_ps(f, f, 0x88) : f;
    __m512i s[GV_COLS];
    for (int c = 0; c < nc; c++) {
        const char *gc = g + (size_t)c * act_stride;
        s[c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, gw_bcast(gc)),
                                   hi, gw_bcast(gc + 64));
    }
    for (int c = nc; c < GV_COLS; c++) s[c] = s[0];
    __m512i u = gw_red(nc, s[0], s[1], s[2], s[3]);
    const __m512 da = _mm512_castsi512_ps(gw_bcast(pk));
    const __m512 ds = _mm512_castsi512_ps(gw_bcast(pk + 32));
    if (!q41) u = _mm512_add_epi32(u, _mm512_castps_si512(ds)); /* the -8 sums */
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(da, dw), *acc);
    if (q41) *accm = _mm512_fmadd_ps(_mm512_shuffle_ps(f, f, 0xDD), ds, *accm);
}

/* gv_gemv_n (packed scales, nc >= 2) for rows `row` and `row + row_stride`:
 * out[c * out_stride] and out[1 + c * out_stride]. */
GZ_INLINE void gw_gemv_n2(bool q41, int nc, int64_t K, const char *row, size_t row_stride,
                          const char *act, size_t act_stride, const char *pk, float *out,
                          size_t out_stride) {
    const size_t bsz = q41 ? 20 : 18, group = 320;
    const int64_t nb = K / 32;
    const char *row1 = row + row_stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * bsz, *y0 = row1 + (size_t)b * bsz;
        const char *g = act + (size_t)(b / 4) * group;
        const char *pf = row + 2 * (size_t)b * bsz + CLLM_CPU_PREFETCH_AHEAD;
        _mm_prefetch(pf, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(pf + 64, CLLM_CPU_PREFETCH_HINT);
        _mm_prefetch(pf + 128, CLLM_CPU_PREFETCH_HINT);
        gw_pair(q41, nc, x0, y0, bsz, true, g, act_stride, pk + 32 * b, &a0, &m0);
        gw_pair(q41, nc, x0 + 2 * bsz, y0 + 2 * bsz, bsz, true, g + 32, act_stride,
                pk + 32 * b + 64, &a1, &m1);
    }
    for (; b < nb; b += 2) {
        const char *g = act + (size_t)(b / 4) * group + 32 * ((b % 4) / 2);
        gw_pair(q41, nc, row + (size_t)b * bsz, row1 + (size_t)b * bsz, bsz, b + 1 < nb, g,
                act_stride, pk + 32 * b, &a0, &m0);
    }
    gw_store2(nc, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(m0, m1)), out, out_stride);
}

/*
 * Two rows of Q8_0 against 2..4 columns at 512 bits, the same way: each
 * half runs gv_pair_q8's operations with packed scales, so every result is
 * the 256-bit kernel's bit for bit. vpsignb has no 512-bit form: each
 * activation is negated where its weight is negative (a masked subtraction
 * from zero). Where the weight is 0, vpsignb gives 0 and this keeps the
 * activation, but |w| = 0 meets it: the same integer sums. A step of 4
 * sequences of SmolLM2 spends a fifth of its time in its output layer
 * (Q8_0, 49,152 rows of 576 elements), bound by operations like the Q4_1
 * matrices above.
 */

/* gv_halves_q8 (bytes off..off + 15 of blocks b and b + 1) of rows x and y. */
GZ_INLINE __m512i gw_halves_q8(const char *x0, const char *y0, size_t off, bool two) {
    return gw_pair_i(gv_halves_q8(x0, off, two), gv_halves_q8(y0, off, two));
}

/* gv_pair_q8 (packed scales pk, nc >= 2) for rows x (x0) and y (y0). */
GZ_INLINE void gw_pair_q8(int nc, const char *x0, const char *y0, bool two, const char *a,
                          size_t act_stride, const char *pk, __m512 *acc) {
    const __m512i wl = gw_halves_q8(x0, y0, 0, two), wh = gw_halves_q8(x0, y0, 16, two);
    const __m512i ul = _mm512_abs_epi8(wl), uh = _mm512_abs_epi8(wh);
    const __mmask64 nl = _mm512_movepi8_mask(wl), nh = _mm512_movepi8_mask(wh);
    const __m512i zero = _mm512_setzero_si512();
    __m512i s[GV_COLS];
    for (int c = 0; c < nc; c++) {
        const char *ac = a + (size_t)c * act_stride;
        const __m512i al = gw_bcast(ac), ah = gw_bcast(ac + 32);
        s[c] = _mm512_dpbusd_epi32(zero, ul, _mm512_mask_sub_epi8(al, nl, zero, al));
        s[c] = _mm512_dpbusd_epi32(s[c], uh, _mm512_mask_sub_epi8(ah, nh, zero, ah));
    }
    for (int c = nc; c < GV_COLS; c++) s[c] = s[0];
    const __m512i u = gw_red(nc, s[0], s[1], s[2], s[3]);
    const __m512 da = _mm512_castsi512_ps(gw_bcast(pk));
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_set_m128i(gv_scale_halves_q8(y0, two), gv_scale_halves_q8(x0, two)));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(da, dw), *acc);
}

/* gv_gemv_q8_n (packed scales, nc >= 2) for rows `row` and `row +
 * row_stride`: out[c * out_stride] and out[1 + c * out_stride]. */
GZ_INLINE void gw_gemv_q8_n2(int nc, int64_t K, const char *row, size_t row_stride, const char *act,
                             size_t act_stride, const char *pk, float *out, size_t out_stride) {
    const int64_t nb = K / 32;
    const char *row1 = row + row_stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const char *x0 = row + (size_t)b * 34, *y0 = row1 + (size_t)b * 34, *g = act + 32 * b;
        const char *pf = row + 2 * (size_t)b * 34 + CLLM_CPU_PREFETCH_AHEAD;
        for (int l = 0; l < 5; l++) _mm_prefetch(pf + 64 * l, CLLM_CPU_PREFETCH_HINT);
        gw_pair_q8(nc, x0, y0, true, g, act_stride, pk + 16 * b, &a0);
        gw_pair_q8(nc, x0 + 68, y0 + 68, true, g + 64, act_stride, pk + 16 * b + 32, &a1);
    }
    for (; b < nb; b += 2) {
        gw_pair_q8(nc, row + (size_t)b * 34, row1 + (size_t)b * 34, b + 1 < nb, act + 32 * b,
                   act_stride, pk + 16 * b, &a0);
    }
    /* gv_lanes's sum with zero mins: (a0 + a1) + (0 + 0) */
    gw_store2(nc, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_setzero_ps()), out, out_stride);
}

/* nr rows x nc columns (>= 2, packed scales) of Q4_0, Q4_1 or Q8_0 (kind a
 * constant after inlining): pairs of rows by gw_gemv_n2 / gw_gemv_q8_n2, a
 * lone last column and an odd last row by the 256-bit kernel (the same
 * results). */
GZ_INLINE void gw_gemv_n2_kind(enum gv_kind kind, int nc, int64_t K, const char *row,
                               size_t row_stride, const char *act, size_t act_stride,
                               const char *pk, float *out, size_t out_stride) {
    if (kind == GV_Q8_0) {
        gw_gemv_q8_n2(nc, K, row, row_stride, act, act_stride, pk, out, out_stride);
    } else {
        gw_gemv_n2(kind == GV_Q4_1, nc, K, row, row_stride, act, act_stride, pk, out, out_stride);
    }
}

GZ_INLINE void gw_gemv_rows(enum gv_kind kind, int64_t K, const char *row, size_t row_stride,
                            int nr, const char *act, size_t act_stride, int nc, const char *cols,
                            size_t cols_stride, float *out, size_t out_stride) {
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        const char *x = row + (size_t)r * row_stride;
        for (int c0 = 0; c0 < nc; c0 += GV_COLS) {
            const char *a = act + (size_t)c0 * act_stride;
            const char *pk = cols + (size_t)(c0 / GV_COLS) * cols_stride;
            float *o = out + r + (size_t)c0 * out_stride;
            switch (nc - c0 < GV_COLS ? nc - c0 : GV_COLS) {
            case 1:
                gv_gemv_cols(kind, K, x, a, act_stride, 1, pk, cols_stride, o, out_stride);
                gv_gemv_cols(kind, K, x + row_stride, a, act_stride, 1, pk, cols_stride, o + 1,
                             out_stride);
                break;
            case 2:
                gw_gemv_n2_kind(kind, 2, K, x, row_stride, a, act_stride, pk, o, out_stride);
                break;
            case 3:
                gw_gemv_n2_kind(kind, 3, K, x, row_stride, a, act_stride, pk, o, out_stride);
                break;
            default:
                gw_gemv_n2_kind(kind, GV_COLS, K, x, row_stride, a, act_stride, pk, o, out_stride);
                break;
            }
        }
    }
    if (r < nr) {
        gv_gemv_rows_q(kind, K, row + (size_t)r * row_stride, row_stride, nr - r, act, act_stride,
                       nc, cols, cols_stride, out + r, out_stride);
    }
}

void cllm_cpu_gemv_rows_avx512vl(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                 int nr, const void *act, size_t act_stride, int nc,
                                 const void *cols, size_t cols_stride, float *out,
                                 size_t out_stride) {
    if (nc >= 2 && cols && !cllm_cpu_prefer_256()) {
        if (type == CLLM_TYPE_Q4_1) {
            gw_gemv_rows(GV_Q4_1, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride,
                         out, out_stride);
            return;
        }
        if (type == CLLM_TYPE_Q4_0) {
            gw_gemv_rows(GV_Q4_0, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride,
                         out, out_stride);
            return;
        }
        if (type == CLLM_TYPE_Q8_0) {
            gw_gemv_rows(GV_Q8_0, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride,
                         out, out_stride);
            return;
        }
    }
    gv_gemv_rows_type(type, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                      out_stride);
}

void cllm_cpu_gemv_avx512(cllm_type type, int64_t K, const void *row, const void *act, float *out) {
    if (type == CLLM_TYPE_Q4_K) {
        gz_gemv_q4k(K, row, act, out);
        return;
    }
    /* one column: the multi-column kernel's nc = 1 (its sums are this
     * kernel's by construction) */
    gz_gemv_n(type == CLLM_TYPE_Q4_1, 1, K, row, act, 0, out, 0);
}

/* ---- one-column activations (layouts: gemm.h), as cllm_cpu_gemv_quantize ---- */

void cllm_cpu_gemv_quantize_avx512(cllm_type type, const float *x, void *act, int64_t K) {
    if (type == CLLM_TYPE_Q4_K) {
        static const int pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};
        for (int64_t sb = 0; sb < K / 256; sb++) {
            const float *xs = x + sb * 256;
            char *out = (char *)act + (size_t)sb * 288;
            __m512 m = _mm512_setzero_ps();
            for (int j = 0; j < 256; j += 16) m = _mm512_max_ps(m, gz_abs(_mm512_loadu_ps(xs + j)));
            const float d = _mm512_reduce_max_ps(m) / 127.0f;
            const __m512 vid = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            int16_t sums[8];
            for (int s8 = 0; s8 < 8; s8++) {
                const __m128i lo = gz_q8(_mm512_loadu_ps(xs + 32 * s8), vid);
                const __m128i hi = gz_q8(_mm512_loadu_ps(xs + 32 * s8 + 16), vid);
                char *q = out + 32 * pos[s8];
                _mm_storeu_si128((__m128i *)q, lo);
                _mm_storeu_si128((__m128i *)(q + 16), hi);
                sums[s8] = (int16_t)gz_hsum4(_mm_add_epi32(gz_sum4(lo), gz_sum4(hi)));
            }
            memcpy(out + 256, sums, 16);
            memcpy(out + 272, &d, 4);
            memset(out + 276, 0, 12);
        }
        return;
    }
    const int32_t z = type == CLLM_TYPE_Q4_0 ? 8 : 0;
    const int64_t nb = K / 32;
    for (int64_t g0 = 0; g0 < (nb + 3) / 4; g0++) {
        char *g = (char *)act + (size_t)g0 * 320;
        memset(g, 0, 320);
        for (int i = 0; i < 4 && g0 * 4 + i < nb; i++) {
            const float *xb = x + (g0 * 4 + i) * 32;
            const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
            const float d = _mm512_reduce_max_ps(_mm512_max_ps(gz_abs(v0), gz_abs(v1))) / 127.0f;
            const __m512 vid = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            const __m128i lo = gz_q8(v0, vid), hi = gz_q8(v1, vid);
            _mm_storeu_si128((__m128i *)(g + 16 * i), lo);
            _mm_storeu_si128((__m128i *)(g + 64 + 16 * i), hi);
            /* lane l: q[4l..4l+3] + q[16+4l..16+4l+3] */
            const __m128i sl = _mm_add_epi32(gz_sum4(lo), gz_sum4(hi));
            _mm_storeu_si128((__m128i *)(g + 128 + 16 * i),
                             _mm_mullo_epi32(sl, _mm_set1_epi32(-z)));
            _mm_storeu_ps((float *)(g + 192 + 16 * i), _mm_set1_ps(d));
            const float ds = d * (float)gz_hsum4(sl);
            memcpy(g + 256 + 16 * i, &ds, 4);
        }
    }
}

/* ---- packing -----------------------------------------------------------------
 * Q4_0 and Q4_1: 16 rows' blocks in registers, 4 rows to a register,
 * transposed (gz_pack_q4), one gather for the scales. Q4_K straight into
 * the panel: one 16-lane dword gather (lane r: 4 quant bytes of row r) per
 * step, masked for rows beyond nrows. The other types take the AVX2 packer
 * (8 rows' blocks in registers, transposed), the faster one where a block
 * would need many gathers or rows are short; gz_pack_q4 beats gathers and
 * the AVX2 packer alike for Q4_0 and Q4_1. */

GZ_INLINE __m512i gz_gather(__m512i idx, const char *base, __mmask16 m) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, base, 1);
}

/* The fp16 at base + idx[r] in lane r, as float (0 outside m). */
GZ_INLINE __m512 gz_gather_f16(__m512i idx, const char *base, __mmask16 m) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gz_gather(idx, base, m)));
}

/* The 16 bytes of nibbles of block b of rows 4g..4g+3 (zeros for rows at
 * or past nrows) in the four 128-bit lanes. */
GZ_INLINE __m128i gz_pack_row(const char *blk, size_t stride, int r, int nrows) {
    return r < nrows ? _mm_loadu_si128((const __m128i *)(blk + (size_t)r * stride))
                     : _mm_setzero_si128();
}

GZ_INLINE __m512i gz_pack_rows4(const char *blk, size_t stride, int g, int nrows) {
    __m512i v = _mm512_castsi128_si512(gz_pack_row(blk, stride, 4 * g, nrows));
    v = _mm512_inserti32x4(v, gz_pack_row(blk, stride, 4 * g + 1, nrows), 1);
    v = _mm512_inserti32x4(v, gz_pack_row(blk, stride, 4 * g + 2, nrows), 2);
    return _mm512_inserti32x4(v, gz_pack_row(blk, stride, 4 * g + 3, nrows), 3);
}

/* x0..x3 (rows 4g + j in lane j of x_g, dwords 0..3) to the panel's steps
 * 0..3 at p (64 bytes each: dword t of row r at 4 r): a 4 x 4 transpose of
 * dwords within each lane, then one permutation putting row 4g + j (at
 * dword 4j + g) in place. */
GZ_INLINE void gz_pack_steps4(__m512i x0, __m512i x1, __m512i x2, __m512i x3, char *p) {
    const __m512i t0 = _mm512_unpacklo_epi32(x0, x1), t1 = _mm512_unpackhi_epi32(x0, x1);
    const __m512i t2 = _mm512_unpacklo_epi32(x2, x3), t3 = _mm512_unpackhi_epi32(x2, x3);
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(p, _mm512_permutexvar_epi32(idx, _mm512_unpacklo_epi64(t0, t2)));
    _mm512_storeu_si512(p + 64, _mm512_permutexvar_epi32(idx, _mm512_unpackhi_epi64(t0, t2)));
    _mm512_storeu_si512(p + 128, _mm512_permutexvar_epi32(idx, _mm512_unpacklo_epi64(t1, t3)));
    _mm512_storeu_si512(p + 192, _mm512_permutexvar_epi32(idx, _mm512_unpackhi_epi64(t1, t3)));
}

/* Q4_0 / Q4_1 without gathers: each block's 16 rows of nibbles loaded 4 rows
 * to a register, split into low and high nibbles, transposed in registers;
 * the scales (and Q4_1's mins) of the 16 rows by one gather. */
GZ_INLINE void gz_pack_q4(bool q41, const char *src, size_t stride, int nrows, int64_t K, char *p,
                          __m512i rows, __mmask16 m) {
    const size_t bsz = q41 ? 20 : 18, qs = q41 ? 4 : 2;
    const __m512i nib = _mm512_set1_epi8(0x0F);
    /* Rows shorter than 2 * GZ_PACK_PF: the next 16 rows into L2 as one
     * stream, a share per block (the AVX2 packer's way: a prefetch along a
     * short row lands rows further down); longer ones: each row
     * GZ_PACK_PF ahead (a stream over long rows would fetch what the
     * row's own prefetch already asked for). */
    const int64_t nb = K / 32;
    const bool stream = stride < 2 * GZ_PACK_PF;
    const size_t span = 16 * stride;
    const char *next = src + span;
    for (int64_t b = 0; b < nb; b++, p += 8 * 64 + 64 + (q41 ? 64 : 0)) {
        const char *blk = src + b * (int64_t)bsz;
        if (stream) {
            const size_t from = (size_t)b * span / (size_t)nb;
            const size_t to = (size_t)(b + 1) * span / (size_t)nb;
            for (size_t x = from & ~(size_t)63; x < to; x += 64)
                _mm_prefetch(next + x, _MM_HINT_T1);
        } else if ((b & 3) == 0) {
            gz_prefetch_rows(blk + GZ_PACK_PF, stride, nrows);
        }
        __m512i lo[4], hi[4];
        for (int g = 0; g < 4; g++) {
            const __m512i v = gz_pack_rows4(blk + qs, stride, g, nrows);
            lo[g] = _mm512_and_si512(v, nib);
            hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        }
        gz_pack_steps4(lo[0], lo[1], lo[2], lo[3], p);
        gz_pack_steps4(hi[0], hi[1], hi[2], hi[3], p + 4 * 64);
        const __m512i dm = gz_gather(rows, blk, m); /* d (Q4_1: and m above it) */
        _mm512_storeu_ps(p + 8 * 64, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
        if (q41) {
            _mm512_storeu_ps(p + 8 * 64 + 64,
                             _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))));
        }
    }
}

bool cllm_cpu_gemm_pack_avx512(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                               void *panel) {
    if (type != CLLM_TYPE_Q4_0 && type != CLLM_TYPE_Q4_1 && type != CLLM_TYPE_Q4_K) return false;
    if ((uint64_t)stride * 16 > INT32_MAX) return false;
    const __mmask16 m = cllm_lanes16(nrows);
    const __m512i rows =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int32_t)stride));
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const char *src = a;
    char *p = panel;
    /* where 512-bit operations run as two halves (cllm_cpu_prefer_256),
     * gathers for Q4_0 and the AVX2 packer for Q4_1: gz_pack_q4's 512-bit
     * shuffles cost twice there */
    if (type == CLLM_TYPE_Q4_0 && cllm_cpu_prefer_256()) {
        for (int64_t b = 0; b < K / 32; b++, p += 8 * 64 + 64) {
            const char *blk = src + b * 18;
            if ((b & 3) == 0) gz_prefetch_rows(blk + GZ_PACK_PF, stride, nrows);
            for (int c = 0; c < 4; c++) {
                const __m512i v = gz_gather(rows, blk + 2 + 4 * c, m);
                _mm512_storeu_si512(p + 64 * c, _mm512_and_si512(v, nib));
                _mm512_storeu_si512(p + 64 * (c + 4),
                                    _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
            }
            _mm512_storeu_ps(p + 8 * 64, gz_gather_f16(rows, blk, m));
        }
        return true;
    }
    if (type == CLLM_TYPE_Q4_0 || type == CLLM_TYPE_Q4_1) {
        if (cllm_cpu_prefer_256()) return false;
        gz_pack_q4(type == CLLM_TYPE_Q4_1, src, stride, nrows, K, p, rows, m);
        return true;
    }
    /* Q4_K: 144-byte super-blocks: d, dmin, 12 bytes of scales, 128 of nibbles;
     * sub-block s = 2c + h takes nibble h of qs[32c + l] */
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const char *blk = src + sb * 144;
        float sc[8][16], mn[8][16];
        gz_prefetch_rows(blk + GZ_PACK_PF, stride, nrows);
        gz_prefetch_rows(blk + GZ_PACK_PF + 64, stride, nrows);
        const __m512 d = gz_gather_f16(rows, blk, m);
        /* -dmin by its sign bit, as the portable packer's -dmin * mn (0 - dmin
         * gave +0 where that gives -0: other panel bytes); absent rows 0 */
        const __m512 ndmin = _mm512_xor_ps(gz_gather_f16(rows, blk + 2, m), _mm512_set1_ps(-0.0f));
        for (int r = 0; r < 16; r++) {
            const uint8_t *scales = (const uint8_t *)(src + (size_t)r * stride + sb * 144 + 4);
            for (int s = 0; s < 8; s++) {
                int scale = 0, mm = 0;
                if (r < nrows) cllm_q4k_scale_min(s, scales, &scale, &mm);
                sc[s][r] = (float)scale;
                mn[s][r] = (float)mm;
            }
        }
        for (int c = 0; c < 4; c++) {
            char *p0 = p + (size_t)(2 * c) * (8 * 64 + 128), *p1 = p0 + 8 * 64 + 128;
            for (int t = 0; t < 8; t++) {
                const __m512i v = gz_gather(rows, blk + 16 + 32 * c + 4 * t, m);
                _mm512_storeu_si512(p0 + 64 * t, _mm512_and_si512(v, nib));
                _mm512_storeu_si512(p1 + 64 * t, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
            }
            for (int h = 0; h < 2; h++) {
                char *ps = (h ? p1 : p0) + 8 * 64;
                _mm512_storeu_ps(ps, _mm512_mul_ps(d, _mm512_loadu_ps(sc[2 * c + h])));
                _mm512_storeu_ps(ps + 64,
                                 _mm512_maskz_mul_ps(m, ndmin, _mm512_loadu_ps(mn[2 * c + h])));
            }
        }
        p += 8 * (8 * 64 + 128);
    }
    return true;
}

/* ---- 16 rows in the lanes (layout: gemm.h, CLLM_X16) ----------------------------
 * Per block of the 16 rows: 4 loads give each row's 16 bytes of nibbles in
 * its lane, split once into 4 vectors of low nibbles (elements 4j..4j+3 of
 * every row) and 4 of high ones (16+4j..); then per column 8 vpdpbusd
 * against the column's 4 activation bytes broadcast, one conversion and
 * one FMA, and one of the mins (Q4_0: -8 d) against the column's d * sum:
 * no shuffles and no horizontal sums,
 * and every result lands in its row's lane. Each column's sums run in the
 * same order whatever the other columns, so a column's 16 results are the
 * same alone and beside others. */
GZ_INLINE void gx_gemv(bool q41, int nc, int64_t K, const char *w, const char *act,
                       size_t act_stride, float *out, size_t out_stride) {
    const int64_t nb = K / 32;
    const size_t bb = q41 ? 320 : 288;
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    __m512 acc[GV_COLS], macc[GV_COLS];
    for (int c = 0; c < GV_COLS; c++) acc[c] = macc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = w + (size_t)b * bb;
        for (size_t l = 0; l < bb; l += 64)
            _mm_prefetch(p + CLLM_CPU_PREFETCH_AHEAD + l, CLLM_CPU_PREFETCH_HINT);
        __m512i lo[4], hi[4];
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(p + 64 * j);
            lo[j] = _mm512_and_si512(v, m4);
            hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 256)));
        /* the mins (Q4_0: -8 d, exact) against each column's d * sum */
        const __m512 mw = q41 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 288)))
                              : _mm512_mul_ps(dw, _mm512_set1_ps(-8.0f));
        /* block b's place in the activations' group of 4 blocks */
        const char *g = act + (size_t)(b / 4) * 320 + 16 * (size_t)(b % 4);
        for (int c = 0; c < nc; c++) {
            const char *gc = g + (size_t)c * act_stride;
            __m512i s0 = zero, s1 = zero;
            for (int j = 0; j < 4; j++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[j], _mm512_set1_epi32(gz_i32(gc + 4 * j)));
                s1 = _mm512_dpbusd_epi32(s1, hi[j], _mm512_set1_epi32(gz_i32(gc + 64 + 4 * j)));
            }
            const __m512 da = _mm512_set1_ps(gz_f32(gc + 192));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                     _mm512_mul_ps(dw, da), acc[c]);
            macc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(gz_f32(gc + 256)), macc[c]);
        }
    }
    for (int c = 0; c < nc; c++) {
        _mm512_storeu_ps(out + (size_t)c * out_stride, _mm512_add_ps(acc[c], macc[c]));
    }
}

void cllm_cpu_gemv_x16_avx512(cllm_type type, int64_t K, const void *w, int ngroups,
                              const void *act, size_t act_stride, int nc, float *out,
                              size_t out_stride) {
    const bool q41 = type == CLLM_TYPE_Q4_1;
    const size_t gbytes = (size_t)(K / 32) * (q41 ? 320 : 288);
    for (int gi = 0; gi < ngroups; gi++) {
        const char *wg = (const char *)w + (size_t)gi * gbytes;
        float *og = out + 16 * gi;
        for (int c0 = 0; c0 < nc; c0 += GV_COLS) {
            const char *a = (const char *)act + (size_t)c0 * act_stride;
            float *o = og + (size_t)c0 * out_stride;
            const int n = nc - c0 < GV_COLS ? nc - c0 : GV_COLS;
#define GX_CASE(n_)                                                                                \
    (q41 ? gx_gemv(true, n_, K, wg, a, act_stride, o, out_stride)                                  \
         : gx_gemv(false, n_, K, wg, a, act_stride, o, out_stride))
            switch (n) {
            case 1: GX_CASE(1); break;
            case 2: GX_CASE(2); break;
            case 3: GX_CASE(3); break;
            default: GX_CASE(4); break;
            }
#undef GX_CASE
        }
    }
}

CLLM_X86_TARGET_END

#else
typedef int cllm_gemm_avx512_unused; /* not x86: nothing to build */
#endif
