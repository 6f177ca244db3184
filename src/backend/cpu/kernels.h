/*
 * Dispatch of the CPU's row kernels: for each weight type, the fastest dot
 * product the machine supports (AVX-512 VNNI, AVX2 + FMA, or the portable C
 * reference of types.h / quants.h), chosen once at run time from CPUID.
 * Every fast kernel has its reference and is tested against it.
 *
 *     const cllm_cpu_type_kernels *k = cllm_cpu_kernels(CLLM_TYPE_Q4_0);
 *     k->from_float(b_row_f32, b_row_q8, K);          // activations -> Q8_0
 *     k->vec_dot(K, &out, a_row_q4, b_row_q8);        // one dot
 *     k->vec_dot_n(K, out, a_row_q4, b_rows_q8, stride, 4);  // 1 row x 4 columns
 *     k->vec_dot_mxn(K, out, 8, a_rows_q4, a_stride, b_rows_q8, stride, 4, 8);  // 4 x 8 tile
 *
 * Thread safety: the tables are filled once (on first use, guarded) and read
 * only afterwards.
 */
#ifndef CLLM_BACKEND_CPU_KERNELS_H
#define CLLM_BACKEND_CPU_KERNELS_H

#include "backend/cpu/isa.h"
#include "core/types.h"

#include <stddef.h>

/* out[j] = dot(x, y + j * by) for j in [0, ncols): one row of weights
 * against ncols rows of activations (ncols <= CLLM_CPU_MAX_COLS). */
typedef void (*cllm_vec_dot_n_fn)(int64_t n, float *out, const void *x, const void *y, size_t by,
                                  int ncols);
#define CLLM_CPU_MAX_COLS 8

/* out[r * ldo + c] = dot(x + r * bx, y + c * by) for r in [0, nrows), c in
 * [0, ncols): a tile of nrows weight rows x ncols activation rows
 * (nrows <= CLLM_CPU_MAX_ROWS, ncols <= CLLM_CPU_MAX_COLS). Register-tiled
 * where a level implements it (each activation block loaded once for several
 * weight rows, each weight block unpacked once for several columns), rows of
 * vec_dot_n calls otherwise. */
typedef void (*cllm_vec_dot_mxn_fn)(int64_t n, float *out, size_t ldo, const void *x, size_t bx,
                                    const void *y, size_t by, int nrows, int ncols);
#define CLLM_CPU_MAX_ROWS 4

typedef struct cllm_cpu_type_kernels {
    cllm_type vec_dot_type;          /* the activations' type for vec_dot */
    cllm_from_float_fn from_float;   /* F32 activations -> vec_dot_type (NULL if F32) */
    cllm_vec_dot_fn vec_dot;         /* row of this type . row of vec_dot_type */
    cllm_vec_dot_n_fn vec_dot_n;     /* one row . ncols rows */
    cllm_vec_dot_n_fn vec_dot_cols;  /* the same, each column bit for bit vec_dot's; or NULL */
    cllm_vec_dot_mxn_fn vec_dot_mxn; /* nrows rows . ncols rows */
    cllm_to_float_fn to_float;       /* dequantize a row */
} cllm_cpu_type_kernels;

/* Kernels for `type` at the best level the CPU has (capped by
 * cllm_cpu_set_isa_limit); NULL if the type has no dot product at all. */
const cllm_cpu_type_kernels *cllm_cpu_kernels(cllm_type type);

/* The setters of the level (isa.h) that also fill the kernels again:
 * cllm_cpu_set_prefer_256 changes the AVX-512 level's choice of widths and
 * returns the previous one; cllm_cpu_set_isa_limit caps the level (for tests
 * and benchmarks that compare levels) and returns the level in use
 * afterwards. Not thread-safe with running compute. */
bool cllm_cpu_set_prefer_256(bool prefer);
cllm_cpu_isa cllm_cpu_set_isa_limit(cllm_cpu_isa max);

#endif /* CLLM_BACKEND_CPU_KERNELS_H */
