/* Kernel dispatch. Portable level: the reference functions of the type
 * traits. Faster levels are filled in by the SIMD files (x86/kernels-avx2.c,
 * x86/kernels-avx512.c) at the level in use (isa.h). */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels-impl.h"
#include "core/common.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cllm_cpu_type_kernels g_kernels[CLLM_TYPE_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The portable vec_dot_n: ncols calls of vec_dot. */
static cllm_vec_dot_fn g_portable_dot[CLLM_TYPE_COUNT];

static void portable_dot_n(cllm_type t, int64_t n, float *out, const void *x, const void *y,
                           size_t by, int ncols) {
    for (int j = 0; j < ncols; j++)
        g_portable_dot[t](n, &out[j], x, (const char *)y + (size_t)j * by);
}

/* The fallback vec_dot_mxn: one vec_dot_n call of the level in use per
 * weight row (types and levels without a register-tiled kernel). */
static void fallback_dot_mxn(cllm_type t, int64_t n, float *out, size_t ldo, const void *x,
                             size_t bx, const void *y, size_t by, int nrows, int ncols) {
    const cllm_vec_dot_n_fn dot_n = g_kernels[t].vec_dot_n;
    for (int r = 0; r < nrows; r++)
        dot_n(n, out + (size_t)r * ldo, (const char *)x + (size_t)r * bx, y, by, ncols);
}

/* One trampoline per type id, so the table holds plain function pointers
 * (each ends in a declaration, so that a use of T ends in a semicolon). */
#define T(id)                                                                                      \
    static void dot_n_##id(int64_t n, float *out, const void *x, const void *y, size_t by,         \
                           int ncols) {                                                            \
        portable_dot_n((cllm_type)id, n, out, x, y, by, ncols);                                    \
    }                                                                                              \
    static void dot_mxn_##id(int64_t n, float *out, size_t ldo, const void *x, size_t bx,          \
                             const void *y, size_t by, int nrows, int ncols) {                     \
        fallback_dot_mxn((cllm_type)id, n, out, ldo, x, bx, y, by, nrows, ncols);                  \
    }                                                                                              \
    static void dot_n_##id(int64_t n, float *out, const void *x, const void *y, size_t by,         \
                           int ncols)
T(0);
T(1);
T(2);
T(3);
T(6);
T(7);
T(8);
T(9);
T(10);
T(11);
T(12);
T(13);
T(14);
T(15);
T(30);
#undef T

static cllm_vec_dot_n_fn portable_dot_n_for(cllm_type t) {
    switch ((int)t) {
    case 0: return dot_n_0;
    case 1: return dot_n_1;
    case 2: return dot_n_2;
    case 3: return dot_n_3;
    case 6: return dot_n_6;
    case 7: return dot_n_7;
    case 8: return dot_n_8;
    case 9: return dot_n_9;
    case 10: return dot_n_10;
    case 11: return dot_n_11;
    case 12: return dot_n_12;
    case 13: return dot_n_13;
    case 14: return dot_n_14;
    case 15: return dot_n_15;
    case 30: return dot_n_30;
    default: return NULL;
    }
}

static cllm_vec_dot_mxn_fn fallback_dot_mxn_for(cllm_type t) {
    switch ((int)t) {
    case 0: return dot_mxn_0;
    case 1: return dot_mxn_1;
    case 2: return dot_mxn_2;
    case 3: return dot_mxn_3;
    case 6: return dot_mxn_6;
    case 7: return dot_mxn_7;
    case 8: return dot_mxn_8;
    case 9: return dot_mxn_9;
    case 10: return dot_mxn_10;
    case 11: return dot_mxn_11;
    case 12: return dot_mxn_12;
    case 13: return dot_mxn_13;
    case 14: return dot_mxn_14;
    case 15: return dot_mxn_15;
    case 30: return dot_mxn_30;
    default: return NULL;
    }
}

static void fill_portable(void) {
    for (int t = 0; t < CLLM_TYPE_COUNT; t++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)t);
        cllm_cpu_type_kernels *k = &g_kernels[t];
        *k = (cllm_cpu_type_kernels){0};
        if (!tt || !tt->vec_dot) continue;
        g_portable_dot[t] = tt->vec_dot;
        k->vec_dot_type = tt->vec_dot_type;
        k->from_float = tt->vec_dot_type == CLLM_TYPE_F32
                            ? NULL
                            : cllm_type_traits_of(tt->vec_dot_type)->from_float;
        k->vec_dot = tt->vec_dot;
        k->vec_dot_n = portable_dot_n_for((cllm_type)t);
        k->vec_dot_cols = k->vec_dot_n; /* vec_dot column by column */
        k->vec_dot_mxn = fallback_dot_mxn_for((cllm_type)t);
        k->to_float = tt->to_float;
    }
}

/* Fills the table for the level in use (isa.h). */
static void fill_level(void) {
    fill_portable();
#if CLLM_CPU_X86
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    if (level >= CLLM_CPU_ISA_AVX2) cllm_cpu_kernels_fill_avx2(g_kernels);
    /* AVXVNNI: the AVX2 table; gemm.c and gemv.c pick the VNNI kernels */
    if (level >= CLLM_CPU_ISA_AVX512)
        cllm_cpu_kernels_fill_avx512(g_kernels, cllm_cpu_prefer_256());
#endif
}

static void init_once(void) { fill_level(); }

static void init(void) { pthread_once(&g_once, init_once); }

const cllm_cpu_type_kernels *cllm_cpu_kernels(cllm_type type) {
    init();
    if ((unsigned)type >= CLLM_TYPE_COUNT || !g_kernels[type].vec_dot) return NULL;
    return &g_kernels[type];
}

bool cllm_cpu_set_prefer_256(bool prefer) {
    init();
    const bool old = cllm_cpu_prefer_256();
    if (prefer != old) {
        cllm_cpu_isa_select(cllm_cpu_isa_level(), prefer);
        fill_level();
    }
    return old;
}

cllm_cpu_isa cllm_cpu_set_isa_limit(cllm_cpu_isa max) {
    init();
    const cllm_cpu_isa old = cllm_cpu_isa_level();
    const cllm_cpu_isa level = cllm_cpu_isa_select(max, cllm_cpu_prefer_256());
    if (level != old) fill_level();
    return level;
}
