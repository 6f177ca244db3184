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

/* Software prefetch distance of the one-column (generation) loops, in bytes
 * of weights; rows are consecutive, so it runs into the next rows. A single
 * core keeps too few misses in flight with the hardware prefetcher alone;
 * 8 KiB was the best distance measured over Q4_0, Q8_0 and Q4_K generation
 * with 1 thread (shorter ones leave misses unhidden, 16 KiB was no better).
 * -D overrides it, to measure other distances. */
#ifndef CLLM_CPU_PREFETCH_AHEAD
#define CLLM_CPU_PREFETCH_AHEAD 8192
#endif

/* Instruction-set levels, in increasing order. A CPU has every level up to
 * its best one, except that an AVX-512 CPU may lack AVX-VNNI (AMD Zen 4,
 * Intel Ice Lake): cllm_cpu_set_isa_limit then gives it the AVX2 level. */
typedef enum cllm_cpu_isa {
    CLLM_CPU_ISA_PORTABLE = 0,
    CLLM_CPU_ISA_AVX2,    /* AVX2 + FMA + F16C */
    CLLM_CPU_ISA_AVXVNNI, /* the AVX2 level with AVX-VNNI's vpdpbusd on ymm (VEX): the
                           * panel GEMM and one-column kernels; Intel Alder Lake and later,
                           * AMD Zen 5 */
    CLLM_CPU_ISA_AVX512,  /* AVX-512 F/BW/VL (+ VNNI, BF16 where present) */
    CLLM_CPU_ISA_COUNT
} cllm_cpu_isa;

/* "portable", "avx2", "avxvnni", "avx512": the names CLLM_CPU_ISA takes. */
const char *cllm_cpu_isa_name(cllm_cpu_isa level);

/* Kernels for `type` at the best level the CPU has (capped by
 * cllm_cpu_set_isa_limit); NULL if the type has no dot product at all. */
const cllm_cpu_type_kernels *cllm_cpu_kernels(cllm_type type);

/* The level in use, and a description of the features used ("avx512 vnni bf16"). */
cllm_cpu_isa cllm_cpu_isa_level(void);
const char *cllm_cpu_features_str(void);
/*
 * Whether the AVX-512 level uses its 256-bit kernels where it has both
 * widths: the float dots of F16 / BF16 / F32 rows (kernels-x86.h rather than
 * kernels-avx512.c's) and the Q4_0 / Q4_1 one-column kernels (gemv-x86.h
 * rather than gemm-avx512.c's). True on CPUs that run 512-bit operations as
 * two 256-bit halves (AMD family 19h: Zen 4), where the 256-bit ones are
 * faster: a 512-bit operation costs two there, and the 256-bit kernels
 * need less set-up per row.
 * CLLM_CPU_WIDTH=256 or 512 decides instead. cllm_cpu_set_prefer_256
 * (tests) changes it and fills the kernels again; returns the previous
 * choice. Not thread-safe with running compute.
 */
bool cllm_cpu_prefer_256(void);
bool cllm_cpu_set_prefer_256(bool prefer);

/* Caps the level (for tests and benchmarks that compare levels); returns the
 * level actually in use afterwards. Not thread-safe with running compute. */
cllm_cpu_isa cllm_cpu_set_isa_limit(cllm_cpu_isa max);

#endif /* CLLM_BACKEND_CPU_KERNELS_H */
