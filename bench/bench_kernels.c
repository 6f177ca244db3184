/*
 * The CPU row kernels at every instruction-set level the CPU supports:
 * nanoseconds per 256 elements of
 *   - vec_dot      one weight row . one activation row,
 *   - vec_dot_n/4, /8  one weight row . 4 or 8 activation rows (per row),
 *   - vec_dot_mxn/4x1  tiles of 4 weight rows x 1 activation row (generation),
 *   - vec_dot_mxn/4x8  tiles of 4 weight rows x 8 activation rows (per pair),
 *   - from_float   F32 activations -> Q8_0 / Q8_K,
 * as mean +- stddev over repetitions after a warm-up (and the fastest
 * repetition: on a busy machine the mean mostly measures the neighbours). Rows of 4096 elements,
 * 16 weight rows (in L2, so this measures compute, not memory bandwidth).
 * Prints a table; never fails.
 *
 *     bench_kernels [repetitions]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "backend/cpu/kernels.h"
#include "core/common.h"
#include "core/types.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K_ELEMS 4096
#define ROWS    16
#define NCOLS   8 /* activation rows (the most vec_dot_n takes) */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rng_gauss(void) { /* sum of 4 uniforms: shape is irrelevant here */
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)(g_rng >> 40) / 16777216.0f - 0.5f;
    }
    return s;
}

typedef struct bench_ctx {
    const cllm_cpu_type_kernels *k;
    const char *w;  /* ROWS weight rows */
    size_t w_row;   /* bytes of a weight row */
    const char *a;  /* NCOLS activation rows */
    size_t a_row;   /* bytes of an activation row */
    const float *f; /* F32 activations (from_float input) */
    char *q;        /* from_float output */
    int ncols;      /* columns of OP_DOT_N */
    volatile float sink;
} bench_ctx;

enum { OP_DOT, OP_DOT_N, OP_DOT_MXN, OP_FROM_FLOAT };

/* One pass over the rows; returns the elements processed (per column). */
static int64_t run_op(bench_ctx *b, int op) {
    float out[CLLM_CPU_MAX_ROWS * NCOLS];
    switch (op) {
    case OP_DOT:
        for (int r = 0; r < ROWS; r++) {
            b->k->vec_dot(K_ELEMS, out, b->w + (size_t)r * b->w_row, b->a);
            b->sink += out[0];
        }
        return (int64_t)ROWS * K_ELEMS;
    case OP_DOT_N:
        for (int r = 0; r < ROWS; r++) {
            b->k->vec_dot_n(K_ELEMS, out, b->w + (size_t)r * b->w_row, b->a, b->a_row, b->ncols);
            b->sink += out[0];
        }
        return (int64_t)ROWS * K_ELEMS * b->ncols;
    case OP_DOT_MXN:
        for (int r = 0; r < ROWS; r += CLLM_CPU_MAX_ROWS) {
            b->k->vec_dot_mxn(K_ELEMS, out, NCOLS, b->w + (size_t)r * b->w_row, b->w_row, b->a,
                              b->a_row, CLLM_CPU_MAX_ROWS, b->ncols);
            b->sink += out[0];
        }
        return (int64_t)ROWS * K_ELEMS * b->ncols;
    default:
        for (int r = 0; r < ROWS; r++) b->k->from_float(b->f, b->q, K_ELEMS);
        return (int64_t)ROWS * K_ELEMS;
    }
}

/* ns per 256 elements: mean and stddev over reps (each rep ~1 ms). */
static void measure(bench_ctx *b, int op, int reps, double *mean, double *sd, double *min) {
    int inner = 1;
    for (;;) { /* calibrate */
        const double t0 = now_ns();
        for (int i = 0; i < inner; i++) run_op(b, op);
        if (now_ns() - t0 > 1e6 || inner >= (1 << 20)) break;
        inner *= 2;
    }
    for (int i = 0; i < inner; i++) run_op(b, op); /* warm-up */
    double s = 0.0, s2 = 0.0;
    *min = INFINITY;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_ns();
        int64_t elems = 0;
        for (int i = 0; i < inner; i++) elems += run_op(b, op);
        const double v = (now_ns() - t0) / ((double)elems / 256.0);
        s += v;
        s2 += v * v;
        *min = v < *min ? v : *min;
    }
    *mean = s / reps;
    const double var = s2 / reps - *mean * *mean;
    *sd = var > 0.0 ? sqrt(var) : 0.0;
}

static const char *level_name(cllm_cpu_isa l) { return cllm_cpu_isa_name(l); }

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 10;
    if (reps < 2) {
        fprintf(stderr, "usage: bench_kernels [repetitions >= 2]\n");
        return 0;
    }
    static const cllm_type types[] = {
        CLLM_TYPE_Q4_0, CLLM_TYPE_Q8_0, CLLM_TYPE_Q4_K, CLLM_TYPE_F16,  CLLM_TYPE_Q4_1,
        CLLM_TYPE_Q5_0, CLLM_TYPE_Q5_1, CLLM_TYPE_Q6_K, CLLM_TYPE_Q5_K, CLLM_TYPE_Q3_K,
        CLLM_TYPE_Q2_K, CLLM_TYPE_BF16, CLLM_TYPE_F32,
    };
    const cllm_cpu_isa best = cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    printf("bench_kernels: rows of %d elements, %d rows, %d reps; best level %s (%s)\n", K_ELEMS,
           ROWS, reps, level_name(best), cllm_cpu_features_str());
    printf("ns per 256 elements (mean +- stddev)\n");
    printf("%-6s %-9s %-29s %-29s %-29s %-29s %-29s\n", "type", "level", "vec_dot",
           "vec_dot_n/4 per col", "vec_dot_n/8 per col", "vec_dot_mxn/4x1 per row",
           "vec_dot_mxn/4x8 per pair");

    float *f = malloc(K_ELEMS * sizeof(float) * ROWS);
    char *w = malloc(cllm_row_size(CLLM_TYPE_F32, K_ELEMS) * ROWS);
    char *a = malloc(cllm_row_size(CLLM_TYPE_F32, K_ELEMS) * NCOLS);
    char *q = malloc(cllm_row_size(CLLM_TYPE_F32, K_ELEMS));
    if (!f || !w || !a || !q) return 0;
    for (int i = 0; i < K_ELEMS * ROWS; i++) f[i] = rng_gauss();

    for (size_t ti = 0; ti < CLLM_ARRAY_SIZE(types); ti++) {
        const cllm_type t = types[ti];
        const cllm_type_traits *tt = cllm_type_traits_of(t);
        bench_ctx b = {.w = w, .a = a, .f = f, .q = q};
        b.w_row = cllm_row_size(t, K_ELEMS);
        for (int r = 0; r < ROWS; r++) tt->from_float(f + r * K_ELEMS, w + r * b.w_row, K_ELEMS);
        const cllm_type at = tt->vec_dot_type;
        b.a_row = cllm_row_size(at, K_ELEMS);
        for (int c = 0; c < NCOLS; c++) {
            const float *src = f + ((c + 5) % ROWS) * K_ELEMS;
            if (at == CLLM_TYPE_F32) {
                memcpy(a + c * b.a_row, src, b.a_row);
            } else {
                cllm_type_traits_of(at)->from_float(src, a + c * b.a_row, K_ELEMS);
            }
        }
        for (int l = 0; l <= (int)best; l++) {
            if (cllm_cpu_set_isa_limit((cllm_cpu_isa)l) != (cllm_cpu_isa)l)
                continue; /* AVX-512 without AVX-VNNI */
            b.k = cllm_cpu_kernels(t);
            if (!b.k) continue;
            double m1, s1, n1, m2, s2, n2, m3, s3, n3, m4, s4, n4, m5, s5, n5;
            measure(&b, OP_DOT, reps, &m1, &s1, &n1);
            b.ncols = 4;
            measure(&b, OP_DOT_N, reps, &m2, &s2, &n2);
            b.ncols = 8;
            measure(&b, OP_DOT_N, reps, &m3, &s3, &n3);
            b.ncols = 1;
            measure(&b, OP_DOT_MXN, reps, &m4, &s4, &n4);
            b.ncols = 8;
            measure(&b, OP_DOT_MXN, reps, &m5, &s5, &n5);
            printf("%-6s %-9s %7.2f +- %5.2f (min %6.2f) %7.2f +- %5.2f (min %6.2f) %7.2f +- %5.2f "
                   "(min %6.2f) %7.2f +- %5.2f (min %6.2f) %7.2f +- %5.2f (min %6.2f)\n",
                   cllm_type_name(t), level_name((cllm_cpu_isa)l), m1, s1, n1, m2, s2, n2, m3, s3,
                   n3, m4, s4, n4, m5, s5, n5);
        }
    }

    printf("\n%-6s %-9s %s\n", "to", "level", "from_float");
    static const cllm_type via[] = {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_K}; /* -> Q8_0, Q8_K */
    for (size_t vi = 0; vi < CLLM_ARRAY_SIZE(via); vi++) {
        for (int l = 0; l <= (int)best; l++) {
            if (cllm_cpu_set_isa_limit((cllm_cpu_isa)l) != (cllm_cpu_isa)l)
                continue; /* AVX-512 without AVX-VNNI */
            bench_ctx b = {.k = cllm_cpu_kernels(via[vi]), .f = f, .q = q};
            double m, s, mn;
            measure(&b, OP_FROM_FLOAT, reps, &m, &s, &mn);
            printf("%-6s %-9s %9.2f +- %6.2f (min %7.2f)\n", cllm_type_name(b.k->vec_dot_type),
                   level_name((cllm_cpu_isa)l), m, s, mn);
        }
    }
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    free(f), free(w), free(a), free(q);
    return 0;
}
