/*
 * Panel GEMM for prompt processing: quantized weights x many columns of
 * activations, with the weights unpacked once per matmul into integer
 * panels that an int8 dot-product instruction (AVX-512 VNNI vpdpbusd)
 * consumes with every output row of the panel in its own vector lane.
 *
 * Why: the row kernels (kernels.h) take a weight row and an activation row
 * and reduce them to one float, paying a horizontal reduction, the nibble
 * unpacking and the per-block scale for every (row, column, block). Here a
 * block of 16 weight rows is unpacked once, and one vector instruction then
 * computes 16 rows x 4 elements of one column; the per-block float work is
 * 3 (4 with an offset) vector operations per 16 rows x 1 column x block, and
 * nothing is reduced horizontally. The unpacking costs one pass over the
 * weights per matmul, against N columns of arithmetic.
 *
 * Every supported weight type is written, per scale block of BS elements
 * (16 or 32), as
 *     w[e] = scale * (u[e] - z) + offset       u in 0..255, z per type
 * (Q4_0: u = q, z = 8; Q8_0: u = q + 128, z = 128; Q4_1: z = 0, offset = m;
 * Q4_K: scale = d * sc, offset = -dmin * mn; Q6_K: BS = 16, z = 32; ...).
 * Activations are quantized per scale block to int8 (d = amax / 127, round
 * to nearest: Q8_0's rule), with the block's sum s, so that
 *     sum_e w[e] a[e] = scale * d * (sum_e u[e] q[e] - z * s) + offset * d * s
 * with the bracket in exact int32 arithmetic.
 *
 * Layouts:
 *  - panel (16 weight rows, K elements, nb = K / BS scale blocks; every part
 *    starts at a multiple of 64 bytes): per block
 *    BS / 4 steps of 64 bytes (step t: bytes 4r..4r+3 are u of row r,
 *    elements 4t..4t+3 of the block), then 16 float scales, then 16 float
 *    offsets (types with an offset only). Rows beyond the matrix are zero.
 *    Q8_0 at the AVX2 level (form.sabs): steps of 128 bytes, for rows
 *    0..7 their 32 bytes of u ^ 0x80 = q (as int8) then their 32 of |q|,
 *    then the same for rows 8..15 (cllm_gemm_u_at): vpmaddubsw takes |q|
 *    times the activation with q's sign, and the two operations per step
 *    that made them from u are done once, at packing; a half panel's bytes
 *    stay together (lines of their own).
 *  - activation row (one column, K elements): per block BS int8 quants, then
 *    float d, float d * s, int32 -z * s, 4 bytes of padding.
 *
 *     if (cllm_cpu_gemm_available(type, K)) {
 *         cllm_cpu_gemm_quantize(type, x_f32, act_row, K);                 // per column
 *         cllm_cpu_gemm_pack(type, a_rows, a_stride, nrows, K, panel, tmp);// per 16 rows
 *         cllm_cpu_gemm(type, K, panel, act, act_stride, ncols, out, ldo, nrows);
 *     }
 *
 * Below the panel GEMM, the same scheme for F16 / BF16 weights (gemm_f)
 * and the one-column kernels of generation (gemv).
 *
 * Thread safety: no state; every function writes only its outputs.
 */
#ifndef CLLM_BACKEND_CPU_GEMM_H
#define CLLM_BACKEND_CPU_GEMM_H

#include "core/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CLLM_GEMM_ROWS 16 /* weight rows per panel (vector lanes) */

/* mul_mat: columns from which the panel GEMM beats the one-column and row
 * kernels: below, unpacking the weights costs more than the columns save
 * (measured on a 1.1B model: bench/results/code-notes.md). */
#define CLLM_GEMM_MIN_COLS 8

/* True if `type` has a panel form and K fits it (whole storage blocks). */
bool cllm_cpu_gemm_supports(cllm_type type, int64_t K);

/* True if a fast kernel can run here: supports() and the level in use (see
 * cllm_cpu_set_isa_limit) is AVX2 (gemm-avx2.c: half panels, vpmaddubsw) or
 * AVX-512 (gemm-avx512.c: whole panels, vpdpbusd). */
bool cllm_cpu_gemm_available(cllm_type type, int64_t K);

/* Bytes of one panel / one activation row / the pack scratch (per thread). */
size_t cllm_cpu_gemm_panel_size(cllm_type type, int64_t K);
size_t cllm_cpu_gemm_act_size(cllm_type type, int64_t K);
size_t cllm_cpu_gemm_pack_scratch(cllm_type type, int64_t K);

/* Quantizes K floats of one activation column for weights of `type`. */
void cllm_cpu_gemm_quantize(cllm_type type, const float *x, void *act, int64_t K);

/* The values an activation row stands for (d * q), for tests. */
void cllm_cpu_gemm_act_to_float(cllm_type type, const void *act, float *x, int64_t K);

/* Packs nrows (1..16) weight rows, `stride` bytes apart, into a panel;
 * `scratch` holds cllm_cpu_gemm_pack_scratch bytes. */
void cllm_cpu_gemm_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                        void *panel, void *scratch);

/* The same bytes in portable C (what the level's packers are tested against). */
void cllm_cpu_gemm_pack_portable(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                                 void *panel, void *scratch);

/* out[r + j * ldo] = dot(row r of the panel, column j) for r < nrows,
 * j < ncols; columns are activation rows `act_stride` bytes apart. The fast
 * kernel (cllm_cpu_gemm_available must be true). */
void cllm_cpu_gemm(cllm_type type, int64_t K, const void *panel, const void *act, size_t act_stride,
                   int ncols, float *out, size_t ldo, int nrows);

/* Two panels at once: panel0 holds rows 0..15 (all present), panel1 rows
 * 16..16 + nrows1 - 1 of a group of 32, written to out[r + j * ldo] for r in
 * 0..16 + nrows1 - 1. The same bits as cllm_cpu_gemm on each panel (which is
 * what runs where the level has no two-panel kernel); at the AVX-512 level
 * each activation load serves both panels (gemm-avx512.c). */
void cllm_cpu_gemm2(cllm_type type, int64_t K, const void *panel0, const void *panel1,
                    const void *act, size_t act_stride, int ncols, float *out, size_t ldo,
                    int nrows1);

/* The same in portable C: the reference the fast kernel is tested against. */
void cllm_cpu_gemm_ref(cllm_type type, int64_t K, const void *panel, const void *act,
                       size_t act_stride, int ncols, float *out, size_t ldo, int nrows);

/* Internal: the shape of a type's panel (also for gemm-avx512.c). */
typedef struct cllm_gemm_form {
    int bs;      /* elements per scale block: 16 or 32 (0: no panel form) */
    int z;       /* zero point */
    bool offset; /* per-block float offset */
    int qk;      /* elements per storage block of the type */
    int umax;    /* the largest u the packer writes (bounds the AVX2 kernel's s16 sums) */
    bool sabs;   /* u stored as u ^ 0x80, then |u - z| (Q8_0 at the AVX2 level) */
} cllm_gemm_form;

cllm_gemm_form cllm_cpu_gemm_form(cllm_type type);

/* Internal: where u of row r, elements 4t..4t+3, lies in a panel block (in
 * the sabs form |q| follows 32 bytes on), and where the block's scales
 * start. */
static inline size_t cllm_gemm_u_at(const cllm_gemm_form *f, int t, int r) {
    return f->sabs ? (size_t)(128 * t + 64 * (r / 8) + 4 * (r % 8)) : (size_t)(64 * t + 4 * r);
}
static inline size_t cllm_gemm_scales_at(const cllm_gemm_form *f) {
    return (size_t)(f->bs / 4) * (f->sabs ? 128 : 64);
}

void cllm_cpu_gemm_avx512(const cllm_gemm_form *f, int64_t K, const void *panel, const void *act,
                          size_t act_stride, int ncols, float *out, size_t ldo, int nrows);
void cllm_cpu_gemm2_avx512(const cllm_gemm_form *f, int64_t K, const void *panel0,
                           const void *panel1, const void *act, size_t act_stride, int ncols,
                           float *out, size_t ldo, int nrows1);
void cllm_cpu_gemm_avx2(const cllm_gemm_form *f, int64_t K, const void *panel, const void *act,
                        size_t act_stride, int ncols, float *out, size_t ldo, int nrows);

/* ---- one column (generation): Q4_0, Q4_1, Q5_0 and Q4_K rows against
 * activations laid out for 4 blocks (Q4_K: 2 sub-blocks) per 512-bit register
 * Q4_0 / Q4_1 / Q5_0: per group of 128 elements (4 blocks of 32), 320 bytes:
 *   [0, 64)    elements 0..15 of blocks 0..3 (int8, 16 per block)
 *   [64, 128)  elements 16..31 of blocks 0..3
 *   [128, 192) int32 per lane: -8 * (sum of the 8 activations lane l of
 *              block i meets: elements 4l'..4l'+3 and 16+4l'..16+4l'+3,
 *              lane = 4i + l'); Q4_0 only, 0 for Q4_1 and Q5_0
 *   [192, 256) float per lane: d of block i (lanes 4i..4i+3)
 *   [256, 320) float per lane: d * sum of block i in lane 4i, 0 elsewhere
 * Groups past K (K % 128 != 0) are zero. The weights are read in place:
 * vpdpbusd of 4 blocks' nibbles at once, the scales of 4 blocks by one word
 * permutation, so no repacking and no per-block horizontal work.
 *
 * Q4_K: per super-block of 256 elements, 288 bytes: the 256 int8 quants with
 * the 32-element sub-blocks in the order 0 2 1 3 4 6 5 7 (one 64-byte load
 * of the weights' nibbles holds sub-blocks 2c and 2c + 2 in its low nibbles,
 * 2c + 1 and 2c + 3 in its high ones), int16 sums of the 8 sub-blocks (in
 * order), float d (one scale per super-block, as Q8_K), 12 bytes of zeros.
 * Per super-block: 4 vpdpbusd, the 6-bit scales unpacked with word
 * arithmetic, the mins against the sub-block sums.
 *
 * Q8_0 (256-bit kernels at both levels): per pair of blocks b, b + 1, 64
 * bytes of int8 quants: elements 0..15 of b, of b + 1, then 16..31 of b,
 * of b + 1 (a lone last block: zeros for b + 1), so that a 32-byte load
 * meets the two blocks' weights in its two 128-bit lanes; then the K / 32
 * float scales (block b's at cllm_cpu_gemv_q8_scales(K) + 4 b). The kernel
 * (gemv-x86.h) takes |w| against the activations with w's sign and brings
 * each column's block sums into one lane before the float steps, as for
 * Q4_0 / Q4_1, so that a block and column cost one vpmaddubsw, one
 * vpmaddwd, a conversion, a multiply and an FMA.
 */

/* Q8_0 activations: the byte of element e (0..31) of block b, and where the
 * scales start. */
static inline size_t cllm_cpu_gemv_q8_pos(int64_t b, int e) {
    return (size_t)(b / 2) * 64 + (size_t)(e / 16) * 32 + (size_t)(b % 2) * 16 + (size_t)(e % 16);
}
static inline size_t cllm_cpu_gemv_q8_scales(int64_t K) { return (size_t)((K / 32 + 1) / 2) * 64; }

/* True if the fast one-column kernel handles `type` here. */
bool cllm_cpu_gemv_available(cllm_type type, int64_t K);
size_t cllm_cpu_gemv_act_size(cllm_type type, int64_t K);
void cllm_cpu_gemv_quantize(cllm_type type, const float *x, void *act, int64_t K);
/* *out = dot(row, activations) for a row of K elements. */
void cllm_cpu_gemv(cllm_type type, int64_t K, const void *row, const void *act, float *out);
void cllm_cpu_gemv_ref(cllm_type type, int64_t K, const void *row, const void *act, float *out);
/* cllm_cpu_gemv's choice, made once (for loops over rows). */
typedef void (*cllm_gemv_fn)(cllm_type type, int64_t K, const void *row, const void *act,
                             float *out);
cllm_gemv_fn cllm_cpu_gemv_kernel(cllm_type type, int64_t K);
void cllm_cpu_gemv_act_to_float(cllm_type type, const void *act, float *x, int64_t K);
/* n columns against one row: out[c * out_stride] = dot(row, act + c *
 * act_stride) for c < n, each bit for bit what cllm_cpu_gemv gives it (the
 * kernels unpack the row once for up to 4 columns, Q4_K at the AVX2 level
 * too: a step of several sequences reads and unpacks the weights once). */
typedef void (*cllm_gemv_n_fn)(cllm_type type, int64_t K, const void *row, const void *act,
                               size_t act_stride, int n, float *out, size_t out_stride);
cllm_gemv_n_fn cllm_cpu_gemv_n_kernel(cllm_type type, int64_t K);
void cllm_cpu_gemv_n_avx512(cllm_type type, int64_t K, const void *row, const void *act,
                            size_t act_stride, int n, float *out, size_t out_stride);
void cllm_cpu_gemv_avx512(cllm_type type, int64_t K, const void *row, const void *act, float *out);
/* The same at the AVX2 level (gemm-avx2.c; several columns of Q4_0 / Q4_1 /
 * Q4_K: the row unpacked once for 4 of them). */
void cllm_cpu_gemv_avx2(cllm_type type, int64_t K, const void *row, const void *act, float *out);
void cllm_cpu_gemv_n_avx2(cllm_type type, int64_t K, const void *row, const void *act,
                          size_t act_stride, int n, float *out, size_t out_stride);
/* The scales of a group of up to 4 columns of Q4_0 / Q4_1 / Q8_0
 * activations as the AVX2 tile kernel reads them (gemv-x86.h): per pair of
 * blocks 8 floats of the columns' activation scales (lane c: column c's d
 * of the pair's first block, lane 4 + c: of its second), then (Q4_0 /
 * Q4_1: 64 bytes per pair) 8 of the same lanes' Q4_1 d * sums, or Q4_0 -8
 * * sums (int32); 0 in the lanes of absent columns. Bytes per group (0 for
 * other types). */
size_t cllm_cpu_gemv_cols_size(cllm_type type, int64_t K);
/* Writes the lanes of column c (0..3) of a group of n (1..4) columns from
 * its activation row act (column 0 also clears the lanes of columns n..3):
 * each column's writer touches only its own lanes. */
void cllm_cpu_gemv_cols_pack(cllm_type type, int64_t K, const void *act, int c, int n, void *cols);
/* A tile: nr rows (row_stride bytes apart) x nc columns, out[r + c *
 * out_stride], each result bit for bit cllm_cpu_gemv's. cols: the packed
 * scales (cllm_cpu_gemv_cols_pack) of the tile's columns 0..3, the next 4
 * cols_stride bytes further, or NULL. With the 256-bit kernels (the AVX2
 * level; the AVX-512 level's Q5_0, Q8_0 and short Q4_0 / Q4_1 rows) one
 * column of Q4_0 / Q4_1 goes two rows at a time, several columns (and
 * Q5_0's and Q8_0's) 4 at a time with their scales from cols (gemv-x86.h);
 * other kernels and types run their gemv_n kernel row by row. */
void cllm_cpu_gemv_rows(cllm_type type, int64_t K, const void *row, size_t row_stride, int nr,
                        const void *act, size_t act_stride, int nc, const void *cols,
                        size_t cols_stride, float *out, size_t out_stride);
/* (Q4_0 / Q4_1 / Q8_0 only) */
void cllm_cpu_gemv_rows_avx2(cllm_type type, int64_t K, const void *row, size_t row_stride, int nr,
                             const void *act, size_t act_stride, int nc, const void *cols,
                             size_t cols_stride, float *out, size_t out_stride);
/* Q4_0 / Q4_1 / Q5_0 / Q8_0 at the AVX-512 level on 256-bit registers
 * (gemv-x86.h: the AVX2 kernels with vpdpbusd, equal to them bit for bit; 4
 * columns at once, one column of Q4_0 / Q4_1 two rows at a time). Which
 * rows take them: gemv_ymm in gemm.c. */
void cllm_cpu_gemv_avx512vl(cllm_type type, int64_t K, const void *row, const void *act,
                            float *out);
void cllm_cpu_gemv_n_avx512vl(cllm_type type, int64_t K, const void *row, const void *act,
                              size_t act_stride, int n, float *out, size_t out_stride);
/* Q4_0 / Q4_1 / Q5_0 / Q8_0 at the AVXVNNI level (gemv-x86.h with AVX-VNNI's
 * vpdpbusd: the AVX2 kernels' results bit for bit; Q4_K takes the AVX2
 * level's kernel). */
void cllm_cpu_gemv_avxvnni(cllm_type type, int64_t K, const void *row, const void *act, float *out);
void cllm_cpu_gemv_n_avxvnni(cllm_type type, int64_t K, const void *row, const void *act,
                             size_t act_stride, int n, float *out, size_t out_stride);
void cllm_cpu_gemv_rows_avxvnni(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                int nr, const void *act, size_t act_stride, int nc,
                                const void *cols, size_t cols_stride, float *out,
                                size_t out_stride);
/* Q4_K at the AVX2 level, one column: two rows at a time. */
void cllm_cpu_gemv_rows_q4k_avx2(int64_t K, const void *row, size_t row_stride, int nr,
                                 const void *act, float *out);
/* Q4_K at the AVX-512 level, one column: two rows at a time. */
void cllm_cpu_gemv_rows_q4k_avx512(int64_t K, const void *row, size_t row_stride, int nr,
                                   const void *act, float *out);
void cllm_cpu_gemv_rows_avx512vl(cllm_type type, int64_t K, const void *row, size_t row_stride,
                                 int nr, const void *act, size_t act_stride, int nc,
                                 const void *cols, size_t cols_stride, float *out,
                                 size_t out_stride);
/* (which of the two widths the AVX-512 level uses: cllm_cpu_prefer_256, kernels.h) */
void cllm_cpu_gemv_quantize_avx512(cllm_type type, const float *x, void *act, int64_t K);
/* The same at the AVX2 level (Q4_0 / Q4_1 into a zeroed row; Q4_K; Q8_0). */
void cllm_cpu_gemv_quantize_avx2(cllm_type type, const float *x, void *act, int64_t K);

/* ---- float weights (F16, BF16) against F32 columns --------------------------------
 * The same scheme without quantization: a panel holds 32 weight rows as F32,
 * element-major ([K][32], 128 bytes per element: two registers), and the
 * kernel is 32 rows x up to 12 columns of FMAs, each column's value
 * broadcast once for both registers. nrows: 1..32.
 *
 * Columns are F32 in groups of `group`: column j's element k is at
 * cols[(j / group) * group_stride / 4 + k * group + j % group]. With
 * group 1 these are plain rows `group_stride` bytes apart, read in place;
 * the AVX2 kernel prefers groups of 6 (cllm_cpu_gemm_f_group), its whole
 * register tile: one sequential stream of 24 bytes per element instead of
 * six rows a power of two apart, which collide in the caches
 * (bench/results/code-notes.md). Results do not depend on the grouping: each sum runs in the same
 * order. */

#define CLLM_GEMM_F_ROWS 32

bool cllm_cpu_gemm_f_available(cllm_type type, int64_t K);
size_t cllm_cpu_gemm_f_panel_size(int64_t K);
void cllm_cpu_gemm_f_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                          float *panel);
/* The column grouping the kernel of this CPU level runs fastest with. */
int cllm_cpu_gemm_f_group(void);
/* ncols (1..group) F32 rows, `stride` bytes apart, into one group
 * (group * K floats); lanes past ncols are zero. */
void cllm_cpu_gemm_f_group_cols(const float *x, size_t stride, int ncols, int64_t K, int group,
                                float *out);
void cllm_cpu_gemm_f(int64_t K, const float *panel, const float *cols, size_t group_stride,
                     int group, int ncols, float *out, size_t ldo, int nrows);
/* The same in portable C (the reference, and the kernel off x86). */
void cllm_cpu_gemm_f_ref(int64_t K, const float *panel, const float *cols, size_t group_stride,
                         int group, int ncols, float *out, size_t ldo, int nrows);
/* In place only (group 1). */
void cllm_cpu_gemm_f_avx512(int64_t K, const float *panel, const float *cols, size_t col_stride,
                            int ncols, float *out, size_t ldo, int nrows);
/* group 1 or CLLM_GEMM_F_GROUP_AVX2. */
#define CLLM_GEMM_F_GROUP_AVX2 6
void cllm_cpu_gemm_f_avx2(int64_t K, const float *panel, const float *cols, size_t group_stride,
                          int group, int ncols, float *out, size_t ldo, int nrows);

bool cllm_cpu_gemm_f_pack_avx512(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                                 float *panel);
void cllm_cpu_gemm_f_pack_avx2(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                               float *panel);

/* Internal: the 16 bytes after a block's BS quants in an activation row (d,
 * d * s, -z * s, padding), from its scale d and the sum s of its quants;
 * every quantizer writes them through this. */
static inline void cllm_gemm_act_block_tail(char *tail, const cllm_gemm_form *f, float d,
                                            int32_t s) {
    const float ds = d * (float)s;
    const int32_t zs = -f->z * s;
    memcpy(tail, &d, 4);
    memcpy(tail + 4, &ds, 4);
    memcpy(tail + 8, &zs, 4);
    memset(tail + 12, 0, 4);
}

/* The AVXVNNI level's panel GEMM (gemm-avxvnni.c): the AVX2 level's panels
 * and activations, vpdpbusd on ymm; its results bit for bit AVX2's. */
void cllm_cpu_gemm_avxvnni(const cllm_gemm_form *f, int64_t K, const void *panel, const void *act,
                           size_t act_stride, int ncols, float *out, size_t ldo, int nrows);
void cllm_cpu_gemm_quantize_avx512(const cllm_gemm_form *f, const float *x, void *act, int64_t K);
void cllm_cpu_gemm_quantize_avx2(const cllm_gemm_form *f, const float *x, void *act, int64_t K);
/* The AVX2 packer of Q4_0, Q4_1 and Q8_0 (false: another type), the same
 * bytes as cllm_cpu_gemm_pack's portable path; also used at the AVX-512
 * level for the types its own packer leaves. */
bool cllm_cpu_gemm_pack_avx2(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                             void *panel);
/* False if this type has no AVX-512 packer (the AVX2 or portable one then
 * runs). */
bool cllm_cpu_gemm_pack_avx512(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                               void *panel);

/* ---- 16 rows in the vector lanes (CLLM_X16) --------------------------------------
 * Q4_0 / Q4_1 weights of a matrix whose rows are a multiple of 16 can be
 * stored 16 rows at a time with each row in a 32-bit lane of a 512-bit
 * register: per block of 32 elements (its index b in the rows), 4 x 64
 * bytes of quants (bytes 4r..4r+3 of part j: bytes 4j..4j+3 of row r's 16,
 * so that part j's low nibbles are elements 4j..4j+3 of every row and its
 * high nibbles elements 16+4j..16+4j+3), then the 16 rows' fp16 d (Q4_1:
 * then their 16 fp16 m): 288 / 320 bytes, 16 rows' blocks in the bytes of
 * the 16 rows. The one-column kernels then need no shuffles and no
 * horizontal sums (cllm_cpu_gemv_x16: 16 rows per 512-bit register at the
 * AVX-512 level, 8 per 256-bit one at the AVX2 and AVXVNNI levels and where
 * 512-bit operations run as two halves, cllm_cpu_prefer_256); the panel
 * GEMM packs its panels straight from the blocks. x86 levels from AVX2.
 * Q4_K (where the AVX2 row kernel spent a quarter of its operations turning
 * each row's 6-bit scales into vectors), per super-block of 256 elements,
 * 2,304 bytes: the 16 rows' 12 scale bytes as 3 x 64 bytes (bytes 4r..4r+3
 * of part w: row r's bytes 4w..4w+3), their fp16 d, their fp16 dmin, then
 * 32 x 64 bytes of quants (part P: row r's qs[4P..4P+3]; part 8c + j holds
 * elements 4j..4j+3 of sub-block 2c in its low nibbles and of 2c + 1 in its
 * high ones). The scales then decode for 8 rows per operation, and each
 * sub-block's products sum in the rows' lanes before one multiply by the
 * sub-block's scales; 8 rows per 256-bit register at every level.
 * Q5_K (2,816 bytes per super-block): Q4_K's scale parts, d and dmin at
 * the same places, then 8 x 64 bytes of qh (part Q: row r's qh[4Q..4Q+3]),
 * then Q4_K's 32 parts of quants. Q6_K (3,360 bytes): 32 x 64 bytes of ql
 * (part P: row r's ql[4P..4P+3]), 16 x 64 of qh, 4 x 64 of the int8 scales
 * (part w: row r's scales[4w..4w+3]), the 16 rows' fp16 d. Their
 * one-column kernels read the columns as the row kernels do, Q8_K (the
 * types' vec_dot_type: a matmul's workspace is the same whatever the
 * layout); the quants of 8 rows unpack with a few AND / shift / OR per
 * 32 bytes, and each 16- or 32-element sub-block's products sum in the
 * rows' lanes before one multiply by its scale. */
#define CLLM_X16_ROWS       16
#define CLLM_X16_Q4_K_BYTES (CLLM_X16_ROWS * 144)
#define CLLM_X16_Q5_K_BYTES (CLLM_X16_ROWS * 176)
#define CLLM_X16_Q6_K_BYTES (CLLM_X16_ROWS * 210)
bool cllm_cpu_x16_available(cllm_type type, int64_t K);
/* 16 rows (stride bytes apart) into one group (16 row sizes) / back. */
void cllm_cpu_x16_pack(cllm_type type, int64_t K, const void *rows, size_t stride, void *group);
void cllm_cpu_x16_unpack(cllm_type type, int64_t K, const void *group, void *rows, size_t stride);
/* out[r + 16 g + c * out_stride] = dot(row r of group g, column c) for
 * ngroups groups (16 row sizes apart) x nc columns of the one-column
 * activations (cllm_cpu_gemv_quantize; Q5_K / Q6_K: Q8_K rows), each
 * column's results the same whatever nc. */
void cllm_cpu_gemv_x16(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                       size_t act_stride, int nc, float *out, size_t out_stride);
/* Row r (0..15) of a group as F32: what the type's to_float gives the row. */
void cllm_cpu_x16_row_to_float(cllm_type type, int64_t K, const void *group, int r, float *out);
/* A group into a panel of the panel GEMM: the bytes cllm_cpu_gemm_pack
 * writes from its 16 rows. */
void cllm_cpu_gemm_pack_x16(cllm_type type, int64_t K, const void *group, void *panel);
void cllm_cpu_gemv_x16_avx512(cllm_type type, int64_t K, const void *w, int ngroups,
                              const void *act, size_t act_stride, int nc, float *out,
                              size_t out_stride);
void cllm_cpu_gemv_x16_avx512vl(cllm_type type, int64_t K, const void *w, int ngroups,
                                const void *act, size_t act_stride, int nc, float *out,
                                size_t out_stride);
void cllm_cpu_gemm_pack_x16_avx512vl(cllm_type type, int64_t K, const void *group, void *panel);
void cllm_cpu_gemv_x16_avxvnni(cllm_type type, int64_t K, const void *w, int ngroups,
                               const void *act, size_t act_stride, int nc, float *out,
                               size_t out_stride);
void cllm_cpu_gemm_pack_x16_avxvnni(cllm_type type, int64_t K, const void *group, void *panel);
void cllm_cpu_gemv_x16_avx2(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                            size_t act_stride, int nc, float *out, size_t out_stride);
void cllm_cpu_gemm_pack_x16_avx2(cllm_type type, int64_t K, const void *group, void *panel);

#endif /* CLLM_BACKEND_CPU_GEMM_H */
