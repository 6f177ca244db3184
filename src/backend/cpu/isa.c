/* The CPU's instruction-set level (isa.h): CPUID, what the OS saves, the
 * CLLM_CPU_ISA and CLLM_CPU_WIDTH caps, and the level in use. */
#include "backend/cpu/isa.h"
#include "core/common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define CLLM_CPU_X86 1
#include <cpuid.h>
#else
#define CLLM_CPU_X86 0
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cllm_cpu_isa g_level = CLLM_CPU_ISA_PORTABLE;

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

/* Makes `level` (<= g_best) the one in use and names what it uses. */
static void set_level(cllm_cpu_isa level) {
    g_level = CLLM_CPU_ISA_PORTABLE;
    g_features = "portable";
#if CLLM_CPU_X86
    if (level >= CLLM_CPU_ISA_AVX2) {
        g_level = CLLM_CPU_ISA_AVX2;
        g_features = "avx2 fma f16c";
    }
    if (level == CLLM_CPU_ISA_AVXVNNI) {
        g_level = CLLM_CPU_ISA_AVXVNNI;
        g_features = "avx2 fma f16c avx-vnni";
    }
    if (level >= CLLM_CPU_ISA_AVX512) {
        g_level = CLLM_CPU_ISA_AVX512;
        g_features = g_prefer_256 ? "avx512 vnni, 256-bit float and gemv" : "avx512 vnni";
    }
#else
    CLLM_UNUSED(level);
#endif
}

static void init_once(void) {
#if CLLM_CPU_X86
    detect_cpu(&g_cpu);
#endif
    g_prefer_256 = env_prefer_256(g_cpu.halves512);
    g_best = best_level(&g_cpu);
    g_best = usable_level(env_limit());
    set_level(g_best);
}

static void init(void) { pthread_once(&g_once, init_once); }

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

cllm_cpu_isa cllm_cpu_isa_select(cllm_cpu_isa max, bool prefer_256) {
    init();
    g_prefer_256 = prefer_256;
    set_level(usable_level(max));
    return g_level;
}
