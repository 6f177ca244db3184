/*
 * One-column kernels (gemm.h): the activation quantizer and packed column
 * scales, the portable reference kernels and the dispatch to the kernels of
 * the level in use (x86/).
 */
#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/kernels.h"

#include <string.h>

/* ---- one column ------------------------------------------------------------------- */

#define GEMV_GROUP 320 /* bytes per 128 elements */

#define GEMV_K_SB 288 /* Q4_K: bytes per super-block */

bool cllm_cpu_gemv_available(cllm_type type, int64_t K) {
    if (type == CLLM_TYPE_Q8_0 || type == CLLM_TYPE_Q5_0) /* (256-bit kernels at both levels) */
        return K > 0 && K % 32 == 0 && cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
    const bool ok = ((type == CLLM_TYPE_Q4_0 || type == CLLM_TYPE_Q4_1) && K % 32 == 0) ||
                    (type == CLLM_TYPE_Q4_K && K % 256 == 0);
    return ok && K > 0 && cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
}

size_t cllm_cpu_gemv_act_size(cllm_type type, int64_t K) {
    if (type == CLLM_TYPE_Q4_K) return (size_t)(K / 256) * GEMV_K_SB;
    if (type == CLLM_TYPE_Q8_0)
        return cllm_cpu_gemv_q8_scales(K) + (size_t)(K / 32) * sizeof(float);
    return (size_t)((K + 127) / 128) * GEMV_GROUP;
}

/* Sub-block s of a Q4_K super-block sits at position gemv_k_pos[s] of the
 * activation's order (0 2 1 3 4 6 5 7). */
static const int gemv_k_pos[8] = {0, 2, 1, 3, 4, 6, 5, 7};

static void gemv_quantize_q4_k(const float *x, void *act, int64_t K) {
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const float *xs = x + sb * 256;
        char *out = (char *)act + (size_t)sb * GEMV_K_SB;
        const float d = act_scale(xs, 256);
        int16_t sums[8];
        for (int s = 0; s < 8; s++)
            sums[s] = (int16_t)act_quantize(xs + 32 * s, 32, d, (int8_t *)out + 32 * gemv_k_pos[s]);
        memcpy(out + 256, sums, 16);
        memcpy(out + 272, &d, 4);
        memset(out + 276, 0, 12);
    }
}

void cllm_cpu_gemv_quantize(cllm_type type, const float *x, void *act, int64_t K) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 && cllm_cpu_gemv_available(type, K) &&
        type != CLLM_TYPE_Q8_0) { /* (Q8_0: the AVX2 level's, below) */
        cllm_cpu_gemv_quantize_avx512(type, x, act, K);
        return;
    }
#endif
    CLLM_ASSERT(K % (type == CLLM_TYPE_Q4_K ? 256 : 32) == 0);
    if (type != CLLM_TYPE_Q4_K) memset(act, 0, cllm_cpu_gemv_act_size(type, K));
    if (type == CLLM_TYPE_Q8_0 && cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX2) {
        for (int64_t b = 0; b < K / 32; b++) {
            const float d = act_scale(x + b * 32, 32);
            int8_t q[32];
            (void)act_quantize(x + b * 32, 32, d, q);
            for (int e = 0; e < 32; e++) ((int8_t *)act)[cllm_cpu_gemv_q8_pos(b, e)] = q[e];
            memcpy((char *)act + cllm_cpu_gemv_q8_scales(K) + 4 * b, &d, 4);
        }
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemv_quantize_avx2(type, x, act, K);
        return;
    }
#endif
    if (type == CLLM_TYPE_Q4_K) {
        gemv_quantize_q4_k(x, act, K);
        return;
    }
    const int32_t z = type == CLLM_TYPE_Q4_0 ? 8 : 0;
    for (int64_t b = 0; b < K / 32; b++) {
        char *g = (char *)act + (size_t)(b / 4) * GEMV_GROUP;
        const int i = (int)(b % 4);
        const float *xb = x + b * 32;
        const float d = act_scale(xb, 32);
        int8_t q[32];
        const int32_t s = act_quantize(xb, 32, d, q);
        memcpy(g + 16 * i, q, 16);
        memcpy(g + 64 + 16 * i, q + 16, 16);
        int32_t *zs = (int32_t *)(g + 128);
        float *da = (float *)(g + 192), *das = (float *)(g + 256);
        for (int l = 0; l < 4; l++) {
            int32_t sl = 0;
            for (int e = 0; e < 4; e++) sl += q[4 * l + e] + q[16 + 4 * l + e];
            zs[4 * i + l] = -z * sl;
            da[4 * i + l] = d;
        }
        das[4 * i] = d * (float)s;
    }
}

void cllm_cpu_gemv_act_to_float(cllm_type type, const void *act, float *x, int64_t K) {
    if (type == CLLM_TYPE_Q4_K) {
        for (int64_t sb = 0; sb < K / 256; sb++) {
            const char *in = (const char *)act + (size_t)sb * GEMV_K_SB;
            float d;
            memcpy(&d, in + 272, 4);
            for (int s = 0; s < 8; s++) {
                for (int l = 0; l < 32; l++)
                    x[sb * 256 + 32 * s + l] = d * (float)(int8_t)in[32 * gemv_k_pos[s] + l];
            }
        }
        return;
    }
    if (type == CLLM_TYPE_Q8_0) {
        for (int64_t b = 0; b < K / 32; b++) {
            float d;
            memcpy(&d, (const char *)act + cllm_cpu_gemv_q8_scales(K) + 4 * b, 4);
            for (int e = 0; e < 32; e++)
                x[b * 32 + e] = d * (float)((const int8_t *)act)[cllm_cpu_gemv_q8_pos(b, e)];
        }
        return;
    }
    for (int64_t b = 0; b < K / 32; b++) {
        const char *g = (const char *)act + (size_t)(b / 4) * GEMV_GROUP;
        const int i = (int)(b % 4);
        float d;
        memcpy(&d, g + 192 + 16 * i, 4);
        for (int e = 0; e < 16; e++) {
            x[b * 32 + e] = d * (float)(int8_t)g[16 * i + e];
            x[b * 32 + 16 + e] = d * (float)(int8_t)g[64 + 16 * i + e];
        }
    }
}

/* Q4_K: the decoder of the panel form (scales and mins as floats) against
 * the sub-blocks, in exact integer sums per sub-block. */
static void gemv_ref_q4_k(int64_t K, const void *row, const void *act, float *out) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < K / 256; sb++) {
        const char *in = (const char *)act + (size_t)sb * GEMV_K_SB;
        uint8_t u[256];
        float sc[8], off[8], d;
        cllm_cpu_gemm_decode_q4_k((const cllm_block_q4_K *)row + sb, u, sc, off);
        memcpy(&d, in + 272, 4);
        for (int s = 0; s < 8; s++) {
            const int8_t *q = (const int8_t *)in + 32 * gemv_k_pos[s];
            int32_t dot = 0, sum = 0;
            for (int l = 0; l < 32; l++) {
                dot += u[32 * s + l] * q[l];
                sum += q[l];
            }
            acc += sc[s] * (d * (float)dot) + off[s] * (d * (float)sum);
        }
    }
    *out = acc;
}

void cllm_cpu_gemv_ref(cllm_type type, int64_t K, const void *row, const void *act, float *out) {
    if (type == CLLM_TYPE_Q4_K) {
        gemv_ref_q4_k(K, row, act, out);
        return;
    }
    float acc = 0.0f;
    if (type == CLLM_TYPE_Q8_0) {
        for (int64_t b = 0; b < K / 32; b++) {
            const cllm_block_q8_0 *x = (const cllm_block_q8_0 *)row + b;
            int32_t dot = 0;
            for (int e = 0; e < 32; e++)
                dot += x->qs[e] * ((const int8_t *)act)[cllm_cpu_gemv_q8_pos(b, e)];
            float da;
            memcpy(&da, (const char *)act + cllm_cpu_gemv_q8_scales(K) + 4 * b, 4);
            acc += h2f(x->d) * (da * (float)dot);
        }
        *out = acc;
        return;
    }
    for (int64_t b = 0; b < K / 32; b++) {
        const char *g = (const char *)act + (size_t)(b / 4) * GEMV_GROUP;
        const int i = (int)(b % 4);
        const uint8_t *qs;
        uint32_t qh = 0; /* Q5_0's fifth bits */
        float dw, mw = 0.0f;
        if (type == CLLM_TYPE_Q4_0) {
            const cllm_block_q4_0 *x = (const cllm_block_q4_0 *)row + b;
            qs = x->qs;
            dw = h2f(x->d);
        } else if (type == CLLM_TYPE_Q5_0) { /* as Q4_1 with the min -16 d */
            const cllm_block_q5_0 *x = (const cllm_block_q5_0 *)row + b;
            qs = x->qs;
            memcpy(&qh, x->qh, 4);
            dw = h2f(x->d);
            mw = -16.0f * dw;
        } else {
            const cllm_block_q4_1 *x = (const cllm_block_q4_1 *)row + b;
            qs = x->qs;
            dw = h2f(x->d);
            mw = h2f(x->m);
        }
        int32_t dot = 0, s = 0;
        for (int e = 0; e < 16; e++) {
            const int lo = (int8_t)g[16 * i + e], hi = (int8_t)g[64 + 16 * i + e];
            const int ul = (qs[e] & 0xF) | (int)((qh >> e) & 1) << 4;
            const int uh = (qs[e] >> 4) | (int)((qh >> (e + 16)) & 1) << 4;
            dot += ul * lo + uh * hi;
            s += lo + hi;
        }
        float da;
        memcpy(&da, g + 192 + 16 * i, 4);
        if (type == CLLM_TYPE_Q4_0) {
            acc += dw * (da * (float)(dot - 8 * s));
        } else {
            acc += dw * (da * (float)dot) + mw * (da * (float)s);
        }
    }
    *out = acc;
}

/* The AVXVNNI level's one-column kernels: every type but Q4_K (AVX2's). */
static bool gemv_vnni256(cllm_type type) {
    return cllm_cpu_isa_level() == CLLM_CPU_ISA_AVXVNNI && type != CLLM_TYPE_Q4_K;
}

/* The AVX-512 level's kernels at 256 bits (gemv-x86.h with vpdpbusd): Q8_0
 * and Q5_0 always (they have no 512-bit one), Q4_0 / Q4_1 where 512-bit
 * operations run as two halves (cllm_cpu_prefer_256) and for rows shorter
 * than GEMV_ZMM_MIN_K, where taking two rows per column load pays: a short
 * row gives the 512-bit kernel too few blocks to amortise its set-up. */
#define GEMV_ZMM_MIN_K 1024
static bool gemv_ymm(cllm_type type, int64_t K) {
    if (type == CLLM_TYPE_Q8_0 || type == CLLM_TYPE_Q5_0) return true;
    if (type == CLLM_TYPE_Q4_K) return false;
    return cllm_cpu_prefer_256() || K < GEMV_ZMM_MIN_K;
}

cllm_gemv_fn cllm_cpu_gemv_kernel(cllm_type type, int64_t K) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_gemv_available(type, K)) {
        if (gemv_vnni256(type)) return cllm_cpu_gemv_avxvnni;
        if (cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX512) return cllm_cpu_gemv_avx2;
        return gemv_ymm(type, K) ? cllm_cpu_gemv_avx512vl : cllm_cpu_gemv_avx512;
    }
#endif
    (void)type, (void)K;
    return cllm_cpu_gemv_ref;
}

void cllm_cpu_gemv(cllm_type type, int64_t K, const void *row, const void *act, float *out) {
    cllm_cpu_gemv_kernel(type, K)(type, K, row, act, out);
}

/* The columns one by one with the one-column kernel of this level. */
static void gemv_n_loop(cllm_type type, int64_t K, const void *row, const void *act,
                        size_t act_stride, int n, float *out, size_t out_stride) {
    const cllm_gemv_fn gemv = cllm_cpu_gemv_kernel(type, K);
    for (int c = 0; c < n; c++) {
        gemv(type, K, row, (const char *)act + (size_t)c * act_stride,
             out + (size_t)c * out_stride);
    }
}

cllm_gemv_n_fn cllm_cpu_gemv_n_kernel(cllm_type type, int64_t K) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_gemv_available(type, K)) {
        if (gemv_vnni256(type)) return cllm_cpu_gemv_n_avxvnni;
        if (cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX512) {
            return cllm_cpu_gemv_n_avx2;
        }
        return gemv_ymm(type, K) ? cllm_cpu_gemv_n_avx512vl : cllm_cpu_gemv_n_avx512;
    }
#endif
    (void)type, (void)K;
    return gemv_n_loop;
}

size_t cllm_cpu_gemv_cols_size(cllm_type type, int64_t K) {
    if (type == CLLM_TYPE_Q8_0) return (size_t)((K / 32 + 1) / 2) * 32;
    if (type != CLLM_TYPE_Q4_0 && type != CLLM_TYPE_Q4_1 && type != CLLM_TYPE_Q5_0) return 0;
    return (size_t)((K / 32 + 1) / 2) * 64;
}

void cllm_cpu_gemv_cols_pack(cllm_type type, int64_t K, const void *act, int c, int n, void *cols) {
    CLLM_ASSERT(c >= 0 && c < n && n <= 4 && cllm_cpu_gemv_cols_size(type, K) > 0);
    const int64_t nb = K / 32;
    if (type == CLLM_TYPE_Q8_0) { /* the scales only: 32 bytes per pair */
        for (int64_t b = 0; b < (nb + 1) / 2 * 2; b++) {
            float *pk = (float *)((char *)cols + (size_t)(b / 2) * 32) + 4 * (b % 2);
            pk[c] = 0.0f;
            if (b < nb) memcpy(&pk[c], (const char *)act + cllm_cpu_gemv_q8_scales(K) + 4 * b, 4);
            for (int e = n; c == 0 && e < 4; e++) pk[e] = 0.0f; /* absent columns */
        }
        return;
    }
    for (int64_t p = 0; p < (nb + 1) / 2; p++) {
        char *pk = (char *)cols + (size_t)p * 64;
        for (int h = 0; h < 2; h++) { /* the pair's blocks */
            const int64_t b = 2 * p + h;
            float d = 0.0f, ds = 0.0f;
            int32_t z = 0;
            if (b < nb) {
                const char *g = (const char *)act + (size_t)(b / 4) * 320;
                const int i = (int)(b % 4);
                memcpy(&d, g + 192 + 16 * i, 4);
                memcpy(&ds, g + 256 + 16 * i, 4);
                for (int l = 0; l < 4; l++) {
                    int32_t zl;
                    memcpy(&zl, g + 128 + 16 * i + 4 * l, 4);
                    z += zl;
                }
            }
            memcpy(pk + 4 * (4 * h + c), &d, 4);
            if (type != CLLM_TYPE_Q4_0) { /* Q4_1, Q5_0 */
                memcpy(pk + 32 + 4 * (4 * h + c), &ds, 4);
            } else {
                memcpy(pk + 32 + 4 * (4 * h + c), &z, 4);
            }
            for (int e = n; c == 0 && e < 4; e++) { /* absent columns */
                memset(pk + 4 * (4 * h + e), 0, 4);
                memset(pk + 32 + 4 * (4 * h + e), 0, 4);
            }
        }
    }
}

void cllm_cpu_gemv_rows(cllm_type type, int64_t K, const void *row, size_t row_stride, int nr,
                        const void *act, size_t act_stride, int nc, const void *cols,
                        size_t cols_stride, float *out, size_t out_stride) {
#if defined(__x86_64__) || defined(__i386__)
    if (type != CLLM_TYPE_Q4_K && cllm_cpu_gemv_available(type, K)) {
        if (gemv_vnni256(type)) {
            cllm_cpu_gemv_rows_avxvnni(type, K, row, row_stride, nr, act, act_stride, nc, cols,
                                       cols_stride, out, out_stride);
            return;
        }
        if (cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX512) {
            cllm_cpu_gemv_rows_avx2(type, K, row, row_stride, nr, act, act_stride, nc, cols,
                                    cols_stride, out, out_stride);
            return;
        }
        if (gemv_ymm(type, K)) {
            cllm_cpu_gemv_rows_avx512vl(type, K, row, row_stride, nr, act, act_stride, nc, cols,
                                        cols_stride, out, out_stride);
            return;
        }
    }
    if (type == CLLM_TYPE_Q4_K && nc == 1 && cllm_cpu_gemv_available(type, K)) {
        if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
            cllm_cpu_gemv_rows_q4k_avx512(K, row, row_stride, nr, act, out);
        } else {
            cllm_cpu_gemv_rows_q4k_avx2(K, row, row_stride, nr, act, out);
        }
        return;
    }
#endif
    (void)cols, (void)cols_stride;
    const cllm_gemv_n_fn gemv_n = cllm_cpu_gemv_n_kernel(type, K);
    for (int r = 0; r < nr; r++)
        gemv_n(type, K, (const char *)row + (size_t)r * row_stride, act, act_stride, nc, out + r,
               out_stride);
}
