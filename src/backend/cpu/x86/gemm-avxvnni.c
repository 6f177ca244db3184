/*
 * The AVXVNNI level (kernels.h): the AVX2 level's panel GEMM and one-column
 * kernels with AVX-VNNI's vpdpbusd on ymm registers (VEX encoded: Intel
 * Alder Lake and later, AMD Zen 5), which sums 4 adjacent u8 x s8 products
 * into an int32 lane in one instruction where AVX2 takes vpmaddubsw and
 * vpmaddwd, with no s16 step to saturate.
 *
 * The panel GEMM reads gemm-avx2.c's half panels (8 of a panel's 16 rows
 * per register) and the same activations; every type, Q8_0 included, is
 * then one vpdpbusd per step and column from the block's -z * s: Q8_0's
 * u = q + 128 is unsigned, so it needs none of AVX2's sign steps. The
 * integers are AVX2's (exact either way) and the float steps per block are
 * gy_tile's (cllm_gemm_block_f256, vec-avx2.h), so the two levels' results
 * are equal bit for bit (test_kernels compares them). The one-column kernels are
 * gemv-x86.h's with GV_VNNI 2 (the AVX-512 level's 256-bit ones, VEX
 * encoded). Q4_K's one-column kernel, the packers and the quantizers are the
 * AVX2 level's.
 *
 * Compiled for AVX2 + FMA + F16C + AVX-VNNI; gemm.c calls these only at
 * this level.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "core/common.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c,avxvnni")

#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/x86/vec-avx2.h"

#define GN_INLINE static inline __attribute__((always_inline))
#define GN_COLS   4 /* 4 int32 + 4 float accumulators, weights, activations: 10 of 16 */

/* Rows 8h..8h+7 of the panel x nc columns over all nb blocks of spb steps
 * (gemm-avx2.c's gy_tile, a vpdpbusd per step and column). */
GN_INLINE void gn_tile(int spb, bool off, int nc, int64_t nb, const char *panel, size_t bb, int h,
                       const char *act, size_t astride, size_t ab, float *out, size_t ldo, int nr) {
    const int bs = 4 * spb;
    __m256 f[GN_COLS];
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) f[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *pb = panel + (size_t)b * bb + 32 * h;
        const char *ax = act + (size_t)b * ab;
        __m256i acc[GN_COLS];
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++)
            acc[j] = _mm256_set1_epi32(cllm_load_i32(ax + j * astride + bs + 8));
#pragma GCC unroll 8
        for (int t = 0; t < spb; t++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(pb + 64 * t));
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                acc[j] = _mm256_dpbusd_avx_epi32(
                    acc[j], w, _mm256_set1_epi32(cllm_load_i32(ax + j * astride + 4 * t)));
            }
        }
        cllm_gemm_block_f256(nc, off, pb + 64 * spb, ax, astride, bs, acc, f);
    }
    const __m256i m = cllm_lanes8(nr);
#pragma GCC unroll 4
    for (int j = 0; j < nc; j++) cllm_store8(out + (size_t)j * ldo + 8 * h, f[j], nr, m);
}

#define GN_TILE(n, spb, off) gn_tile(spb, off, n, nb, panel, bb, h, a, astride, ab, o, ldo, nr)

_Static_assert(GN_COLS == 4, "CLLM_GEMM_BY_COLS4 covers 1..4 columns");

void cllm_cpu_gemm_avxvnni(const cllm_gemm_form *fm, int64_t K, const void *panel_, const void *act,
                           size_t astride, int ncols, float *out, size_t ldo, int nrows) {
    const char *panel = panel_;
    const int bs = fm->bs, spb = bs / 4;
    const bool off = fm->offset;
    CLLM_ASSERT(spb == 4 || spb == 8);
    const int64_t nb = K / bs;
    const size_t bb = (size_t)spb * 64 + 64 + (off ? 64 : 0), ab = (size_t)bs + 16;
    for (int j0 = 0; j0 < ncols; j0 += GN_COLS) {
        const int nc = ncols - j0 < GN_COLS ? ncols - j0 : GN_COLS;
        const char *a = (const char *)act + (size_t)j0 * astride;
        float *o = out + (size_t)j0 * ldo;
        for (int h = 0; h < 2 && 8 * h < nrows; h++) {
            const int nr = nrows - 8 * h < 8 ? nrows - 8 * h : 8;
            if (spb == 8) {
                if (off) {
                    CLLM_GEMM_BY_COLS4(nc, GN_TILE, 8, true)
                } else {
                    CLLM_GEMM_BY_COLS4(nc, GN_TILE, 8, false)
                }
            } else {
                if (off) {
                    CLLM_GEMM_BY_COLS4(nc, GN_TILE, 4, true)
                } else {
                    CLLM_GEMM_BY_COLS4(nc, GN_TILE, 4, false)
                }
            }
        }
    }
}

/* ---- one column (generation): Q4_0, Q4_1, Q5_0 and Q8_0 (gemv-x86.h) ------------ */

#define GV_VNNI 2
#include "backend/cpu/x86/gemv-x86.h"

void cllm_cpu_gemv_x16_avxvnni(cllm_type type, int64_t K, const void *w, int ngroups,
                               const void *act, size_t act_stride, int nc, float *out,
                               size_t out_stride) {
    gv_gemv_x16(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
}

void cllm_cpu_gemm_pack_x16_avxvnni(cllm_type type, int64_t K, const void *group, void *panel) {
    gv_gemm_pack_x16(type, K, group, panel);
}

void cllm_cpu_gemv_avxvnni(cllm_type type, int64_t K, const void *row, const void *act,
                           float *out) {
    gv_gemv_type(type, K, row, act, 0, 1, out, 0);
}

void cllm_cpu_gemv_n_avxvnni(cllm_type type, int64_t K, const void *row, const void *act,
                             size_t act_stride, int n, float *out, size_t out_stride) {
    gv_gemv_type(type, K, row, act, act_stride, n, out, out_stride);
}

void cllm_cpu_gemv_rows_avxvnni(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                int nr, const void *act, size_t act_stride, int nc,
                                const void *cols, size_t cols_stride, float *out,
                                size_t out_stride) {
    gv_gemv_rows_type(type, K, row, row_stride, nr, act, act_stride, nc, cols, cols_stride, out,
                      out_stride);
}

CLLM_X86_TARGET_END

#endif /* x86 */
