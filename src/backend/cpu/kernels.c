/* Kernel dispatch. Portable level: the reference functions of the type
 * traits. Faster levels are filled in by the SIMD files (kernels-avx2.c,
 * kernels-avx512.c) once CPUID says the CPU and the OS support them. */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels-impl.h"
#include "core/common.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if CLLM_CPU_X86
#include <cpuid.h>
#endif

static cllm_cpu_type_kernels g_kernels[CLLM_TYPE_COUNT];
static cllm_cpu_isa g_level = CLLM_CPU_ISA_PORTABLE;
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

/* ---- CPU features ------------------------------------------------------------ */

typedef struct cpu_features {
    bool avx2, fma, f16c;                       /* the AVX2 level */
    bool avx512f, avx512bw, avx512vl, avx512dq; /* the AVX-512 level ... */
    bool avx512vnni;                            /* ... needs VNNI too */
    bool avxvnni;                               /* the AVXVNNI level */
    bool avx512bf16;                            /* detected; no kernel uses it yet */
    bool halves512; /* 512-bit operations run as two 256-bit halves (AMD family 19h) */
} cpu_features;

/* The AVX-512 level's choice of 256-bit kernels (cllm_cpu_prefer_256). */
static bool g_prefer_256;

static cpu_features g_cpu;
static cllm_cpu_isa g_best = CLLM_CPU_ISA_PORTABLE; /* best level the CPU supports */
static const char *g_features = "portable";

#if CLLM_CPU_X86
/* XCR0: which register states the OS saves on a context switch. */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void detect_cpu(cpu_features *f) {
    *f = (cpu_features){0};
    unsigned a, b, c, d;
    bool amd = false;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        char vendor[13];
        memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
        vendor[12] = '\0';
        amd = strcmp(vendor, "AuthenticAMD") == 0;
    }
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const unsigned family = ((a >> 8) & 0xF) == 0xF ? 0xF + ((a >> 20) & 0xFF) : (a >> 8) & 0xF;
    f->halves512 = amd && family == 0x19; /* Zen 4 (Zen 3, also 19h, has no AVX-512) */
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    if (!osxsave || !avx) return;
    const uint64_t xcr0 = read_xcr0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;   /* XMM, YMM */
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6; /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_ymm) return;
    f->fma = c & (1u << 12);
    f->f16c = c & (1u << 29);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    f->avx2 = b & (1u << 5);
    if (os_zmm) {
        f->avx512f = b & (1u << 16);
        f->avx512dq = b & (1u << 17);
        f->avx512bw = b & (1u << 30);
        f->avx512vl = b & (1u << 31);
        f->avx512vnni = c & (1u << 11);
    }
    const unsigned max_sub = a;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avxvnni = a & (1u << 4);
        f->avx512bf16 = os_zmm && (a & (1u << 5));
    }
}
#endif

static cllm_cpu_isa best_level(const cpu_features *f) {
    if (!(f->avx2 && f->fma && f->f16c)) return CLLM_CPU_ISA_PORTABLE;
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni)
        return CLLM_CPU_ISA_AVX512;
    return f->avxvnni ? CLLM_CPU_ISA_AVXVNNI : CLLM_CPU_ISA_AVX2;
}

/* `level` capped by the best one, and AVX-VNNI's level replaced by AVX2's
 * where the CPU lacks it (an AVX-512 CPU without it). */
static cllm_cpu_isa usable_level(cllm_cpu_isa level) {
    if (level > g_best) level = g_best;
    if (level == CLLM_CPU_ISA_AVXVNNI && !g_cpu.avxvnni) level = CLLM_CPU_ISA_AVX2;
    return level < CLLM_CPU_ISA_PORTABLE ? CLLM_CPU_ISA_PORTABLE : level;
}

const char *cllm_cpu_isa_name(cllm_cpu_isa level) {
    static const char *const names[] = {"portable", "avx2", "avxvnni", "avx512"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == CLLM_CPU_ISA_COUNT, "level names");
    return (unsigned)level < CLLM_CPU_ISA_COUNT ? names[level] : "unknown";
}

/* Fills the table for `level` (<= g_best) and names what it uses. */
static void fill_level(cllm_cpu_isa level) {
    fill_portable();
    g_level = CLLM_CPU_ISA_PORTABLE;
    g_features = "portable";
#if CLLM_CPU_X86
    if (level >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_kernels_fill_avx2(g_kernels);
        g_level = CLLM_CPU_ISA_AVX2;
        g_features = "avx2 fma f16c";
    }
    if (level == CLLM_CPU_ISA_AVXVNNI) { /* the AVX2 table; gemm.c picks the VNNI kernels */
        g_level = CLLM_CPU_ISA_AVXVNNI;
        g_features = "avx2 fma f16c avx-vnni";
    }
    if (level >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_kernels_fill_avx512(g_kernels, g_prefer_256);
        g_level = CLLM_CPU_ISA_AVX512;
        g_features = g_prefer_256 ? "avx512 vnni, 256-bit float and gemv" : "avx512 vnni";
    }
#else
    CLLM_UNUSED(level);
#endif
}

/* CLLM_CPU_ISA=portable|avx2|avxvnni|avx512 caps the level for the whole
 * process (benchmarks, bisecting a numerical difference); unknown values are
 * ignored. */
static cllm_cpu_isa env_limit(void) {
    const char *v = getenv("CLLM_CPU_ISA");
    if (!v) return CLLM_CPU_ISA_COUNT;
    for (int l = 0; l < CLLM_CPU_ISA_COUNT; l++)
        if (strcmp(v, cllm_cpu_isa_name((cllm_cpu_isa)l)) == 0) return (cllm_cpu_isa)l;
    return CLLM_CPU_ISA_COUNT;
}

/* CLLM_CPU_WIDTH=256|512 chooses the AVX-512 level's kernels where it has
 * both widths; else the CPU decides (cllm_cpu_prefer_256). */
static bool env_prefer_256(bool dflt) {
    const char *v = getenv("CLLM_CPU_WIDTH");
    if (v && strcmp(v, "256") == 0) return true;
    if (v && strcmp(v, "512") == 0) return false;
    return dflt;
}

static void init_once(void) {
#if CLLM_CPU_X86
    detect_cpu(&g_cpu);
#endif
    g_prefer_256 = env_prefer_256(g_cpu.halves512);
    g_best = best_level(&g_cpu);
    g_best = usable_level(env_limit());
    fill_level(g_best);
}

static void init(void) { pthread_once(&g_once, init_once); }

const cllm_cpu_type_kernels *cllm_cpu_kernels(cllm_type type) {
    init();
    if ((unsigned)type >= CLLM_TYPE_COUNT || !g_kernels[type].vec_dot) return NULL;
    return &g_kernels[type];
}

cllm_cpu_isa cllm_cpu_isa_level(void) {
    init();
    return g_level;
}

const char *cllm_cpu_features_str(void) {
    init();
    return g_features;
}

bool cllm_cpu_prefer_256(void) {
    init();
    return g_prefer_256;
}

bool cllm_cpu_set_prefer_256(bool prefer) {
    init();
    const bool old = g_prefer_256;
    g_prefer_256 = prefer;
    if (prefer != old) fill_level(g_level);
    return old;
}

cllm_cpu_isa cllm_cpu_set_isa_limit(cllm_cpu_isa max) {
    init();
    const cllm_cpu_isa level = usable_level(max);
    if (level != g_level) fill_level(level);
    return g_level;
}
