/*
 * The CPU's instruction-set level: what CPUID and the OS allow, capped by
 * CLLM_CPU_ISA, and the level the kernels use; and the prefetch distance
 * every level's kernels share. The bottom of the CPU backend: every level's
 * kernels and every dispatch read it.
 */
#ifndef CLLM_BACKEND_CPU_ISA_H
#define CLLM_BACKEND_CPU_ISA_H

#include <stdbool.h>

/* Software prefetch distance of the one-column (generation) loops, in bytes
 * of weights; rows are consecutive, so it runs into the next rows. A single
 * core keeps too few misses in flight with the hardware prefetcher alone,
 * and 8 KiB is where one-thread generation stopped gaining (shorter
 * distances leave misses exposed, longer ones evict what is still to be
 * read). -D overrides it, to measure it again. */
#ifndef CLLM_CPU_PREFETCH_AHEAD
#define CLLM_CPU_PREFETCH_AHEAD 8192
#endif
/* The cache those prefetches fill (a hint of <immintrin.h>): the L2 (T1).
 * Into the L1 (T0), on an Intel core each one holds one of the L1's few
 * miss buffers for the whole trip from memory, and the 4-bit kernels,
 * which ask for lines fastest, were held to about two thirds of the
 * memory's bandwidth (bench_gemm's x16 figures; bench/results/code-notes.md).
 * AMD documents its cores before Zen 4 as filling the L1 whatever the
 * hint (Zen 4 and later fill the L2, as Intel's do). */
#ifndef CLLM_CPU_PREFETCH_HINT
#define CLLM_CPU_PREFETCH_HINT _MM_HINT_T1
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

/* The level in use, and a description of the features used ("avx512 vnni bf16"). */
cllm_cpu_isa cllm_cpu_isa_level(void);
const char *cllm_cpu_features_str(void);
/*
 * Whether the AVX-512 level uses its 256-bit kernels where it has both
 * widths: the float dots of F16 / BF16 / F32 rows (kernels-x86.h rather than
 * kernels-avx512.c's) and the Q4_0 / Q4_1 one-column kernels (gemv-x86.h
 * rather than gemm-avx512.c's). True on CPUs that run 512-bit operations as
 * two 256-bit halves (AMD family 19h: Zen 4), where a 512-bit operation
 * costs two 256-bit ones and the 256-bit kernels are therefore faster.
 * CLLM_CPU_WIDTH=256 or 512 decides instead; cllm_cpu_set_prefer_256
 * (kernels.h, tests) changes it.
 */
bool cllm_cpu_prefer_256(void);

/* Internal to kernels.c, whose setters fill the kernels of the new level:
 * makes `max` (capped by what the CPU has) and `prefer_256` the level and
 * width in use; returns the level. */
cllm_cpu_isa cllm_cpu_isa_select(cllm_cpu_isa max, bool prefer_256);

#endif /* CLLM_BACKEND_CPU_ISA_H */
