/*
 * The panel GEMM of prompt processing (gemm.h) at every fast level the CPU
 * has: one panel of weight rows (16 quantized, 32 float), K = 2048, against
 * 64 activation columns, with the packing and the activation quantization
 * timed apart. Prints GOP/s (2 * rows * K * columns per second) of the
 * kernel as the median and the best of the repetitions (each ~2 ms after a
 * warm-up), the median of two panels at once (cllm_cpu_gemm2, quantized
 * weights: 0 for float ones), and ns per packed panel and per quantized column (float
 * weights: per column copied into the level's column groups, as mul_mat
 * does). The quantized panel (36 KiB for Q4_0) and columns stay in L2, so
 * this measures the arithmetic more than memory; the float panel (256 KiB)
 * and its 512 KiB of F32 columns do not, as in a real prompt.
 *
 * Then the one-column kernels of generation (Q4_0, Q4_1, Q4_K), which a
 * step of several sequences runs on several columns at once, each summed
 * as alone: ns per weight row and column, for 1 and 4 columns, 64 rows of
 * K = 2048 (in L2), median of the repetitions.
 *
 * Then the 16-row one-column kernels (cllm_cpu_gemv_x16) of each type
 * that has them: ns per weight row with 64 rows of K = 2048 in L2, and GB/s
 * of weights streamed from memory by one call over 256 MiB of groups (on
 * huge pages where the system gives them), one thread: what a generated
 * token's matrix multiplies read, against bench_bandwidth's figure.
 *
 * On x86 with AVX2 it first prints the core's F32 FMA peak: 10 independent
 * chains of 256-bit FMAs, all in registers (the ceiling of the float panel
 * kernel, and of any F16 prompt computed in F32).
 *
 *     bench_gemm [repetitions [type]]
 *
 * Never fails: a level or type the CPU cannot run is left out.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "core/common.h"
#include "core/hostmem.h"
#include "core/types.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define B_K    2048
#define B_COLS 64

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static float rng_f(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(g_rng >> 40) / 16777216.0f - 0.5f;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench_case {
    cllm_type t;
    bool flt;       /* gemm_f (float panel) */
    int rows;       /* rows per panel */
    const char *w;  /* rows weight rows of B_K */
    size_t w_row;   /* bytes of one */
    char *panel;    /* packed */
    char *scratch;  /* pack scratch */
    const float *x; /* B_COLS F32 columns */
    char *act;      /* quantized columns (float: grouped, as mul_mat groups them) */
    int group;      /* float: columns per group (cllm_cpu_gemm_f_group) */
    size_t act_row; /* bytes of one */
    float *out;     /* rows x B_COLS (two panels: 2 * rows x B_COLS) */
    volatile float sink;
} bench_case;

enum { OP_GEMM, OP_GEMM2, OP_PACK, OP_QUANT };

static void run_op(bench_case *c, int op) {
    switch (op) {
    case OP_GEMM:
        if (c->flt) {
            cllm_cpu_gemm_f(B_K, (const float *)c->panel, (const float *)c->act,
                            (size_t)c->group * B_K * sizeof(float), c->group, B_COLS, c->out,
                            (size_t)c->rows, c->rows);
        } else {
            cllm_cpu_gemm(c->t, B_K, c->panel, c->act, c->act_row, B_COLS, c->out, (size_t)c->rows,
                          c->rows);
        }
        break;
    case OP_GEMM2: /* the panel as both of a pair (quantized only) */
        cllm_cpu_gemm2(c->t, B_K, c->panel, c->panel, c->act, c->act_row, B_COLS, c->out,
                       (size_t)(2 * c->rows), c->rows);
        break;
    case OP_PACK:
        if (c->flt) {
            cllm_cpu_gemm_f_pack(c->t, c->w, c->w_row, c->rows, B_K, (float *)c->panel);
        } else {
            cllm_cpu_gemm_pack(c->t, c->w, c->w_row, c->rows, B_K, c->panel, c->scratch);
        }
        break;
    default:
        if (c->flt) { /* all columns: the time per column is this / B_COLS */
            for (int j = 0; j < B_COLS; j += c->group)
                cllm_cpu_gemm_f_group_cols(c->x + (size_t)j * B_K, B_K * sizeof(float),
                                           B_COLS - j < c->group ? B_COLS - j : c->group, B_K,
                                           c->group, (float *)c->act + (size_t)j * B_K);
        } else {
            cllm_cpu_gemm_quantize(c->t, c->x, c->act, B_K);
        }
        break;
    }
    c->sink += c->out[0];
}

/* Nanoseconds per call: median and best of reps (each a batch of ~2 ms). */
static void measure(bench_case *c, int op, int reps, double *med, double *best) {
    int inner = 1;
    for (;;) { /* calibrate */
        const double t0 = now_ns();
        for (int i = 0; i < inner; i++) run_op(c, op);
        if (now_ns() - t0 > 2e6 || inner >= (1 << 20)) break;
        inner *= 2;
    }
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_ns();
        for (int i = 0; i < inner; i++) run_op(c, op);
        v[r] = (now_ns() - t0) / inner;
    }
    qsort(v, (size_t)reps, sizeof(double), cmp_double);
    *med = v[reps / 2];
    *best = v[0];
}

#if defined(__x86_64__) || defined(__i386__)
/* GFLOP/s of n rounds of 10 dependent FMA chains (2 x 8 flops each). */
#define FMA_STEP(x)                                                                                \
    x = _mm256_fmadd_ps(x, m, c);                                                                  \
    __asm__("" : "+x"(x)) /* each chain stays in its own register */

__attribute__((target("avx2,fma"))) static double fma_rate(long n) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 x0 = m, x1 = m, x2 = m, x3 = m, x4 = m, x5 = m, x6 = m, x7 = m, x8 = m, x9 = m;
    const double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        FMA_STEP(x0);
        FMA_STEP(x1);
        FMA_STEP(x2);
        FMA_STEP(x3);
        FMA_STEP(x4);
        FMA_STEP(x5);
        FMA_STEP(x6);
        FMA_STEP(x7);
        FMA_STEP(x8);
        FMA_STEP(x9);
    }
    const double ns = now_ns() - t0;
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)),
                                    _mm256_add_ps(x8, x9)));
    if (_mm256_cvtss_f32(s) == 0.125f) printf(" "); /* keeps the chains alive */
    return (double)n * 10 * 16 / ns;
}

static void print_fma_peak(int reps) {
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        const double g = fma_rate(2000000);
        if (g > best) best = g;
    }
    printf("f32 FMA peak of one core (avx2): %.1f GFLOP/s, best of %d\n", best, reps);
}
#endif

static const char *level_name(cllm_cpu_isa l);

/* Median ns per row-column of the one-column kernels of `t` over GV_ROWS
 * rows, with nc columns, as mul_mat runs them (cllm_cpu_gemv_rows). */
#define GV_ROWS 64
static double gemv_ns(cllm_type t, const char *w, size_t w_row, const char *act, size_t act_row,
                      int nc, int reps) {
    float out[GV_ROWS * 4];
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        const double t0 = now_ns();
        for (int it = 0; it < 50; it++) {
            cllm_cpu_gemv_rows(t, B_K, w, w_row, GV_ROWS, act, act_row, nc, NULL, 0, out, GV_ROWS);
        }
        if (r >= 0) v[r] = (now_ns() - t0) / (50.0 * GV_ROWS * nc);
    }
    qsort(v, (size_t)reps, sizeof(double), cmp_double);
    return v[reps / 2];
}

static void bench_gemv(const cllm_type *types, int n_types, const char *only, const float *f,
                       cllm_cpu_isa best, int reps) {
    printf("%-6s %-7s %16s %16s\n", "type", "level", "gemv ns 1 col", "gemv ns/col 4");
    for (int ti = 0; ti < n_types; ti++) {
        const cllm_type t = types[ti];
        const cllm_type_traits *tt = cllm_type_traits_of(t);
        if (only && strcmp(only, cllm_type_name(t)) != 0) continue;
        const size_t w_row = cllm_row_size(t, B_K);
        char *w = malloc(w_row * GV_ROWS);
        if (!w) return;
        for (int m = 0; m < GV_ROWS; m++)
            tt->from_float(f + (size_t)(m % 32) * B_K, w + (size_t)m * w_row, B_K);
        for (int l = 1; l <= (int)best; l++) {
            if (cllm_cpu_set_isa_limit((cllm_cpu_isa)l) != (cllm_cpu_isa)l)
                continue; /* AVX-512 without AVX-VNNI */
            if (!cllm_cpu_gemv_available(t, B_K)) continue;
            const size_t act_row = cllm_cpu_gemv_act_size(t, B_K);
            char *act = malloc(act_row * 4);
            if (!act) break;
            for (int c = 0; c < 4; c++)
                cllm_cpu_gemv_quantize(t, f + (size_t)(32 + c) * B_K, act + c * act_row, B_K);
            const double one = gemv_ns(t, w, w_row, act, act_row, 1, reps);
            const double four = gemv_ns(t, w, w_row, act, act_row, 4, reps);
            printf("%-6s %-7s %16.1f %16.1f\n", cllm_type_name(t), level_name((cllm_cpu_isa)l), one,
                   four);
            free(act);
        }
        free(w);
    }
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
}

/* The 16-row kernels of generation (cllm_cpu_gemv_x16), one column: ns
 * per weight row with 64 rows in L2 (the arithmetic), and GB/s of weights
 * over X16_MIB of groups read once per call (memory, as a token reads
 * them), medians of the repetitions. */
#define X16_MIB 256
static void bench_x16(const char *only, const float *f, cllm_cpu_isa best, int reps) {
    static const cllm_type types[] = {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1, CLLM_TYPE_Q4_K,
                                      CLLM_TYPE_Q5_K, CLLM_TYPE_Q6_K};
    printf("%-6s %-7s %16s %16s\n", "type", "level", "x16 ns/row L2", "x16 GB/s memory");
    for (size_t ti = 0; ti < CLLM_ARRAY_SIZE(types); ti++) {
        const cllm_type t = types[ti];
        if (only && strcmp(only, cllm_type_name(t)) != 0) continue;
        if (!cllm_cpu_x16_available(t, B_K)) continue;
        const bool q8k = t == CLLM_TYPE_Q5_K || t == CLLM_TYPE_Q6_K;
        const size_t row = cllm_row_size(t, B_K), gbytes = CLLM_X16_ROWS * row;
        const int ngroups = (int)(((size_t)X16_MIB << 20) / gbytes);
        /* on huge pages where the system gives them, as weights are */
        char *rows = malloc(gbytes), *w = cllm_aligned_alloc_huge(64, gbytes * (size_t)ngroups);
        float *out = malloc(sizeof(float) * CLLM_X16_ROWS * (size_t)ngroups);
        if (!rows || !w || !out) return;
        for (int r = 0; r < CLLM_X16_ROWS; r++)
            cllm_type_traits_of(t)->from_float(f + (size_t)r * B_K, rows + (size_t)r * row, B_K);
        for (int g = 0; g < ngroups; g++)
            cllm_cpu_x16_pack(t, B_K, rows, row, w + (size_t)g * gbytes);
        for (int l = 1; l <= (int)best; l++) {
            if (cllm_cpu_set_isa_limit((cllm_cpu_isa)l) != (cllm_cpu_isa)l) continue;
            if (!cllm_cpu_x16_available(t, B_K)) continue;
            const size_t ab =
                q8k ? cllm_row_size(CLLM_TYPE_Q8_K, B_K) : cllm_cpu_gemv_act_size(t, B_K);
            char *act = malloc(ab);
            if (!act) break;
            if (q8k) {
                cllm_type_traits_of(CLLM_TYPE_Q8_K)->from_float(f + (size_t)32 * B_K, act, B_K);
            } else {
                cllm_cpu_gemv_quantize(t, f + (size_t)32 * B_K, act, B_K);
            }
            double v[64], m[64];
            const int n = reps > 64 ? 64 : reps;
            for (int r = -1; r < n; r++) { /* r = -1: warm-up */
                double t0 = now_ns();
                for (int it = 0; it < 50; it++)
                    cllm_cpu_gemv_x16(t, B_K, w, 4, act, ab, 1, out, 64);
                const double l2 = (now_ns() - t0) / (50.0 * 64);
                t0 = now_ns();
                cllm_cpu_gemv_x16(t, B_K, w, ngroups, act, ab, 1, out, (size_t)ngroups * 16);
                const double mem = (double)gbytes * ngroups / (now_ns() - t0);
                if (r >= 0) v[r] = l2, m[r] = mem;
            }
            qsort(v, (size_t)n, sizeof(double), cmp_double);
            qsort(m, (size_t)n, sizeof(double), cmp_double);
            printf("%-6s %-7s %16.1f %16.2f\n", cllm_type_name(t), level_name((cllm_cpu_isa)l),
                   v[n / 2], m[n / 2]);
            free(act);
        }
        free(rows);
        cllm_free(w);
        free(out);
    }
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
}

static const char *level_name(cllm_cpu_isa l) { return cllm_cpu_isa_name(l); }

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_gemm [repetitions >= 1 [type]]\n");
        return 0;
    }
    static const cllm_type types[] = {
        CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1, CLLM_TYPE_Q5_0, CLLM_TYPE_Q5_1,
        CLLM_TYPE_Q8_0, CLLM_TYPE_Q2_K, CLLM_TYPE_Q3_K, CLLM_TYPE_Q4_K,
        CLLM_TYPE_Q5_K, CLLM_TYPE_Q6_K, CLLM_TYPE_F16,  CLLM_TYPE_BF16,
    };
    const cllm_cpu_isa best = cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    printf("bench_gemm: K = %d, %d columns, %d reps; best level %s (%s)\n", B_K, B_COLS, reps,
           level_name(best), cllm_cpu_features_str());
#if defined(__x86_64__) || defined(__i386__)
    if (best >= CLLM_CPU_ISA_AVX2) print_fma_peak(reps);
#endif
    printf("%-6s %-7s %16s %16s %16s %14s %14s\n", "type", "level", "GOP/s median", "GOP/s best",
           "2 panels median", "pack ns/panel", "quant ns/col");

    const int max_rows = CLLM_GEMM_F_ROWS;
    float *f = malloc((size_t)B_K * sizeof(float) * (max_rows + B_COLS));
    char *w = malloc(cllm_row_size(CLLM_TYPE_F32, B_K) * max_rows);
    if (!f || !w) return 0;
    for (size_t i = 0; i < (size_t)B_K * (max_rows + B_COLS); i++) f[i] = rng_f();

    for (size_t ti = 0; ti < CLLM_ARRAY_SIZE(types); ti++) {
        const cllm_type t = types[ti];
        const cllm_type_traits *tt = cllm_type_traits_of(t);
        if (!tt || !tt->from_float) continue;
        if (argc > 2 && strcmp(argv[2], cllm_type_name(t)) != 0) continue;
        bench_case c = {.t = t, .w = w, .x = f + (size_t)max_rows * B_K};
        c.flt = t == CLLM_TYPE_F16 || t == CLLM_TYPE_BF16;
        c.rows = c.flt ? CLLM_GEMM_F_ROWS : CLLM_GEMM_ROWS;
        c.w_row = cllm_row_size(t, B_K);
        for (int r = 0; r < c.rows; r++)
            tt->from_float(f + (size_t)r * B_K, w + (size_t)r * c.w_row, B_K);
        for (int l = 1; l <= (int)best; l++) {
            if (cllm_cpu_set_isa_limit((cllm_cpu_isa)l) != (cllm_cpu_isa)l)
                continue; /* AVX-512 without AVX-VNNI */
            const bool ok =
                c.flt ? cllm_cpu_gemm_f_available(t, B_K) : cllm_cpu_gemm_available(t, B_K);
            if (!ok) continue;
            const size_t psize =
                c.flt ? cllm_cpu_gemm_f_panel_size(B_K) : cllm_cpu_gemm_panel_size(t, B_K);
            c.panel = malloc(psize);
            c.scratch = c.flt ? NULL : malloc(cllm_cpu_gemm_pack_scratch(t, B_K) + 1);
            c.group = c.flt ? cllm_cpu_gemm_f_group() : 0;
            c.act_row = c.flt ? B_K * sizeof(float) : cllm_cpu_gemm_act_size(t, B_K);
            c.act = malloc(c.act_row * (B_COLS + CLLM_GEMM_F_GROUP_AVX2)); /* whole groups */
            c.out = malloc(sizeof(float) * (size_t)(2 * c.rows) * B_COLS);
            if (!c.panel || !c.out || !c.act || (!c.flt && !c.scratch)) return 0;
            run_op(&c, OP_PACK);
            for (int j = 0; !c.flt && j < B_COLS; j++)
                cllm_cpu_gemm_quantize(t, c.x + (size_t)j * B_K, c.act + (size_t)j * c.act_row,
                                       B_K);
            if (c.flt) run_op(&c, OP_QUANT);
            double gm, gb, g2m = 0.0, g2b, pm, pb, qm, qb;
            measure(&c, OP_GEMM, reps, &gm, &gb);
            if (!c.flt) measure(&c, OP_GEMM2, reps, &g2m, &g2b);
            measure(&c, OP_PACK, reps, &pm, &pb);
            measure(&c, OP_QUANT, reps, &qm, &qb);
            if (c.flt) qm /= B_COLS;
            const double ops = 2.0 * c.rows * B_K * B_COLS;
            printf("%-6s %-7s %16.1f %16.1f %16.1f %14.0f %14.0f\n", cllm_type_name(t),
                   level_name((cllm_cpu_isa)l), ops / gm, ops / gb, c.flt ? 0.0 : 2.0 * ops / g2m,
                   pm, qm);
            free(c.panel);
            free(c.scratch);
            free(c.act);
            free(c.out);
        }
    }
    cllm_cpu_set_isa_limit(CLLM_CPU_ISA_COUNT);
    static const cllm_type gemv_types[] = {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1, CLLM_TYPE_Q4_K};
    bench_gemv(gemv_types, (int)CLLM_ARRAY_SIZE(gemv_types), argc > 2 ? argv[2] : NULL, f, best,
               reps);
    bench_x16(argc > 2 ? argv[2] : NULL, f, best, reps);
    free(f);
    free(w);
    return 0;
}
