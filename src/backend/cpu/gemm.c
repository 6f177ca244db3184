/*
 * Panel GEMM and one-column kernels (gemm.h): the panel forms of the weight
 * types, the packers, the activation quantizers, the portable reference
 * kernels and the dispatch to the AVX-512 kernels (gemm-avx512.c).
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "core/common.h"
#include "core/quants.h"

#include <math.h>
#include <string.h>

/* ---- forms and decoders --------------------------------------------------------
 * A decoder turns one storage block (qk elements) into u[0..qk), and one
 * scale and offset per scale block. */

typedef void (*gemm_decode_fn)(const void *blk, uint8_t *u, float *sc, float *off);

static float h2f(cllm_fp16 h) { return cllm_fp16_to_fp32(h); }

static void nibbles32(const uint8_t qs[16], uint8_t *u) {
    for (int j = 0; j < 16; j++) {
        u[j] = qs[j] & 0xF;
        u[j + 16] = qs[j] >> 4;
    }
}

static void high_bits32(const uint8_t qh[4], uint8_t *u) {
    uint32_t h;
    memcpy(&h, qh, 4);
    for (int j = 0; j < 32; j++) u[j] |= (uint8_t)(((h >> j) & 1) << 4);
}

static void decode_q4_0(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q4_0 *b = blk;
    (void)off;
    nibbles32(b->qs, u);
    sc[0] = h2f(b->d);
}

static void decode_q4_1(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q4_1 *b = blk;
    nibbles32(b->qs, u);
    sc[0] = h2f(b->d);
    off[0] = h2f(b->m);
}

static void decode_q5_0(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q5_0 *b = blk;
    (void)off;
    nibbles32(b->qs, u);
    high_bits32(b->qh, u);
    sc[0] = h2f(b->d);
}

static void decode_q5_1(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q5_1 *b = blk;
    nibbles32(b->qs, u);
    high_bits32(b->qh, u);
    sc[0] = h2f(b->d);
    off[0] = h2f(b->m);
}

static void decode_q8_0(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q8_0 *b = blk;
    (void)off;
    for (int j = 0; j < 32; j++) u[j] = (uint8_t)((uint8_t)b->qs[j] ^ 0x80); /* q + 128 */
    sc[0] = h2f(b->d);
}

static void decode_q45_k(const uint8_t scales[12], const uint8_t qs[128], const uint8_t *qh,
                         float d, float dmin, uint8_t *u, float *sc, float *off) {
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            u[64 * c + l] = qs[32 * c + l] & 0xF;
            u[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    }
    if (qh) {
        for (int s = 0; s < 8; s++) {
            for (int l = 0; l < 32; l++) u[32 * s + l] |= (uint8_t)(((qh[l] >> s) & 1) << 4);
        }
    }
    for (int s = 0; s < 8; s++) {
        int scale, mn;
        cllm_q4k_scale_min(s, scales, &scale, &mn);
        sc[s] = d * (float)scale;
        off[s] = -dmin * (float)mn;
    }
}

static void decode_q4_k(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q4_K *b = blk;
    decode_q45_k(b->scales, b->qs, NULL, h2f(b->d), h2f(b->dmin), u, sc, off);
}

static void decode_q5_k(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q5_K *b = blk;
    decode_q45_k(b->scales, b->qs, b->qh, h2f(b->d), h2f(b->dmin), u, sc, off);
}

static void decode_q6_k(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q6_K *b = blk;
    (void)off;
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
                u[128 * h + 32 * k + l] = (uint8_t)(lo | hi << 4);
            }
        }
    }
    const float d = h2f(b->d);
    for (int s = 0; s < 16; s++) sc[s] = d * (float)b->scales[s];
}

static void decode_q3_k(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q3_K *b = blk;
    (void)off;
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                u[128 * h + 32 * j + l] = (uint8_t)(((b->qs[32 * h + l] >> (2 * j)) & 3) |
                                                    (((b->hmask[l] >> (4 * h + j)) & 1) << 2));
            }
        }
    }
    const float d = h2f(b->d);
    for (int s = 0; s < 16; s++) {
        const int low = s < 8 ? b->scales[s] & 0xF : b->scales[s - 8] >> 4;
        const int high = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        sc[s] = d * (float)((low | high << 4) - 32);
    }
}

static void decode_q2_k(const void *blk, uint8_t *u, float *sc, float *off) {
    const cllm_block_q2_K *b = blk;
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++)
                u[128 * h + 32 * j + l] = (uint8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
        }
    }
    const float d = h2f(b->d), dmin = h2f(b->dmin);
    for (int s = 0; s < 16; s++) {
        sc[s] = d * (float)(b->scales[s] & 0xF);
        off[s] = -dmin * (float)(b->scales[s] >> 4);
    }
}

typedef struct gemm_type {
    cllm_gemm_form form;
    gemm_decode_fn decode;
} gemm_type;

static gemm_type gemm_type_of(cllm_type t) {
    switch (t) {
    case CLLM_TYPE_Q4_0: return (gemm_type){{32, 8, false, 32, 15, false}, decode_q4_0};
    case CLLM_TYPE_Q4_1: return (gemm_type){{32, 0, true, 32, 15, false}, decode_q4_1};
    case CLLM_TYPE_Q5_0: return (gemm_type){{32, 16, false, 32, 31, false}, decode_q5_0};
    case CLLM_TYPE_Q5_1: return (gemm_type){{32, 0, true, 32, 31, false}, decode_q5_1};
    case CLLM_TYPE_Q8_0: return (gemm_type){{32, 128, false, 32, 255, false}, decode_q8_0};
    case CLLM_TYPE_Q2_K: return (gemm_type){{16, 0, true, 256, 3, false}, decode_q2_k};
    case CLLM_TYPE_Q3_K: return (gemm_type){{16, 4, false, 256, 7, false}, decode_q3_k};
    case CLLM_TYPE_Q4_K: return (gemm_type){{32, 0, true, 256, 15, false}, decode_q4_k};
    case CLLM_TYPE_Q5_K: return (gemm_type){{32, 0, true, 256, 31, false}, decode_q5_k};
    case CLLM_TYPE_Q6_K: return (gemm_type){{16, 32, false, 256, 63, false}, decode_q6_k};
    default: return (gemm_type){{0, 0, false, 0, 0, false}, NULL};
    }
}

cllm_gemm_form cllm_cpu_gemm_form(cllm_type type) {
    cllm_gemm_form f = gemm_type_of(type).form;
    /* u stored as u ^ 0x80 = q, then |q| (gemm.h) */
    if (type == CLLM_TYPE_Q8_0 && cllm_cpu_isa_level() == CLLM_CPU_ISA_AVX2) f.sabs = true;
    return f;
}

bool cllm_cpu_gemm_supports(cllm_type type, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    return f.bs > 0 && K > 0 && K % f.qk == 0;
}

bool cllm_cpu_gemm_available(cllm_type type, int64_t K) {
    return cllm_cpu_gemm_supports(type, K) && cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
}

/* ---- sizes -------------------------------------------------------------------- */

static size_t block_bytes(const cllm_gemm_form *f) {
    return cllm_gemm_scales_at(f) + 64 + (f->offset ? 64 : 0);
}

static size_t act_block_bytes(const cllm_gemm_form *f) { return (size_t)f->bs + 16; }

size_t cllm_cpu_gemm_panel_size(cllm_type type, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    return (size_t)(K / f.bs) * block_bytes(&f);
}

size_t cllm_cpu_gemm_act_size(cllm_type type, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    return (size_t)(K / f.bs) * act_block_bytes(&f);
}

size_t cllm_cpu_gemm_pack_scratch(cllm_type type, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    return (size_t)K + 2 * sizeof(float) * (size_t)(K / f.bs);
}

/* ---- activations ---------------------------------------------------------------- */

/* The scale of n activations: their largest magnitude / 127 (Q8_0's rule,
 * kept as a float). */
static float act_scale(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = fabsf(x[j]);
        amax = v > amax ? v : amax;
    }
    return amax / 127.0f;
}

/* q[j] = nearest(x[j] / d) in -127..127 for n values; returns their sum. */
static int32_t act_quantize(const float *x, int n, float d, int8_t *q) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < n; j++) {
        q[j] = (int8_t)cllm_quant_round_clamp(x[j] * id, -127.0f, 127.0f);
        s += q[j];
    }
    return s;
}

void cllm_cpu_gemm_quantize(cllm_type type, const float *x, void *act, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    CLLM_ASSERT(f.bs > 0 && K % f.bs == 0);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemm_quantize_avx512(&f, x, act, K);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_quantize_avx2(&f, x, act, K);
        return;
    }
#endif
    const int bs = f.bs;
    char *out = act;
    for (int64_t b = 0; b < K / bs; b++, out += act_block_bytes(&f)) {
        const float *xb = x + b * bs;
        const float d = act_scale(xb, bs);
        const int32_t s = act_quantize(xb, bs, d, (int8_t *)out);
        cllm_gemm_act_block_tail(out + bs, &f, d, s);
    }
}

void cllm_cpu_gemm_act_to_float(cllm_type type, const void *act, float *x, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    const char *in = act;
    for (int64_t b = 0; b < K / f.bs; b++, in += act_block_bytes(&f)) {
        float d;
        memcpy(&d, in + f.bs, 4);
        for (int j = 0; j < f.bs; j++) x[b * f.bs + j] = d * (float)((const int8_t *)in)[j];
    }
}

/* ---- packing -------------------------------------------------------------------- */

void cllm_cpu_gemm_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                        void *panel, void *scratch) {
#if defined(__x86_64__) || defined(__i386__)
    CLLM_ASSERT(cllm_cpu_gemm_supports(type, K) && nrows >= 1 && nrows <= CLLM_GEMM_ROWS);
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 &&
        cllm_cpu_gemm_pack_avx512(type, a, stride, nrows, K, panel))
        return;
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
        cllm_cpu_gemm_pack_avx2(type, a, stride, nrows, K, panel))
        return;
#endif
    cllm_cpu_gemm_pack_portable(type, a, stride, nrows, K, panel, scratch);
}

void cllm_cpu_gemm_pack_portable(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                                 void *panel, void *scratch) {
    const gemm_type g = gemm_type_of(type);
    const cllm_gemm_form form = cllm_cpu_gemm_form(type), *f = &form;
    CLLM_ASSERT(f->bs > 0 && K % f->qk == 0 && nrows >= 1 && nrows <= CLLM_GEMM_ROWS);
    const int64_t nb = K / f->bs, nblk = K / f->qk, per = f->qk / f->bs;
    const size_t blk_size = cllm_type_traits_of(type)->type_size, bb = block_bytes(f);
    uint8_t *u = scratch;
    float *sc = (float *)(u + cllm_align_up((size_t)K, 4));
    float *off = sc + nb;
    char *p = panel;
    for (int r = 0; r < CLLM_GEMM_ROWS; r++) {
        if (r < nrows) {
            const char *row = (const char *)a + (size_t)r * stride;
            for (int64_t i = 0; i < nblk; i++)
                g.decode(row + (size_t)i * blk_size, u + i * f->qk, sc + i * per, off + i * per);
        } else {
            memset(u, 0, (size_t)K);
            for (int64_t b = 0; b < nb; b++) sc[b] = off[b] = 0.0f;
        }
        for (int64_t b = 0; b < nb; b++) {
            char *pb = p + (size_t)b * bb;
            for (int t = 0; t < f->bs / 4; t++) {
                uint8_t *q = (uint8_t *)pb + cllm_gemm_u_at(f, t, r);
                memcpy(q, u + b * f->bs + 4 * t, 4);
                for (int e = 0; f->sabs && e < 4; e++) { /* q = u ^ 0x80, then |q| */
                    q[e] = r < nrows ? q[e] ^ 0x80 : 0;  /* rows beyond: zero */
                    const int v = (int8_t)q[e];
                    q[32 + e] = (uint8_t)(v < 0 ? -v : v);
                }
            }
            float *psc = (float *)(pb + cllm_gemm_scales_at(f));
            psc[r] = sc[b];
            if (f->offset) psc[16 + r] = off[b];
        }
    }
}

/* ---- reference kernel ---------------------------------------------------------- */

void cllm_cpu_gemm_ref(cllm_type type, int64_t K, const void *panel, const void *act,
                       size_t act_stride, int ncols, float *out, size_t ldo, int nrows) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    const int64_t nb = K / f.bs;
    const size_t bb = block_bytes(&f), ab = act_block_bytes(&f);
    for (int j = 0; j < ncols; j++) {
        const char *aj = (const char *)act + (size_t)j * act_stride;
        for (int r = 0; r < nrows; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *pb = (const uint8_t *)panel + (size_t)b * bb;
                const char *ablk = aj + (size_t)b * ab;
                const int8_t *q = (const int8_t *)ablk;
                int32_t dot;
                memcpy(&dot, ablk + f.bs + 8, 4); /* -z * s */
                for (int t = 0; t < f.bs / 4; t++) {
                    for (int e = 0; e < 4; e++) {
                        const uint8_t ub = pb[cllm_gemm_u_at(&f, t, r) + e]; /* sabs: u ^ 0x80 */
                        dot += (f.sabs ? (int8_t)ub + 128 : ub) * q[4 * t + e];
                    }
                }
                float d, ds, sc, off = 0.0f;
                memcpy(&d, ablk + f.bs, 4);
                memcpy(&ds, ablk + f.bs + 4, 4);
                memcpy(&sc, pb + cllm_gemm_scales_at(&f) + 4 * r, 4);
                if (f.offset) memcpy(&off, pb + cllm_gemm_scales_at(&f) + 64 + 4 * r, 4);
                acc += sc * (d * (float)dot) + off * ds;
            }
            out[(size_t)j * ldo + (size_t)r] = acc;
        }
    }
}

/* ---- float weights ------------------------------------------------------------------
 * The packer is portable (it converts each weight once per matmul); the
 * kernels are in gemm-avx512.c and gemm-avx2.c. */

bool cllm_cpu_gemm_f_available(cllm_type type, int64_t K) {
    return (type == CLLM_TYPE_F16 || type == CLLM_TYPE_BF16) && K > 0 &&
           cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
}

size_t cllm_cpu_gemm_f_panel_size(int64_t K) {
    return (size_t)K * CLLM_GEMM_F_ROWS * sizeof(float);
}

void cllm_cpu_gemm_f_pack(cllm_type type, const void *a, size_t stride, int nrows, int64_t K,
                          float *panel) {
    CLLM_ASSERT(nrows >= 1 && nrows <= CLLM_GEMM_F_ROWS);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 &&
        cllm_cpu_gemm_f_pack_avx512(type, a, stride, nrows, K, panel))
        return;
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_f_pack_avx2(type, a, stride, nrows, K, panel);
        return;
    }
#endif
    for (int r = 0; r < CLLM_GEMM_F_ROWS; r++) {
        const uint16_t *row = (const uint16_t *)((const char *)a + (size_t)r * stride);
        for (int64_t k = 0; k < K; k++) {
            float v = 0.0f;
            if (r < nrows) {
                if (type == CLLM_TYPE_F16) {
                    v = cllm_fp16_to_fp32(row[k]);
                } else {
                    const uint32_t u = (uint32_t)row[k] << 16;
                    memcpy(&v, &u, 4);
                }
            }
            panel[k * CLLM_GEMM_F_ROWS + r] = v;
        }
    }
}

int cllm_cpu_gemm_f_group(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* AVX-512 reads its 12 columns in place: not measured grouped */
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 && cllm_cpu_isa_level() < CLLM_CPU_ISA_AVX512)
        return CLLM_GEMM_F_GROUP_AVX2;
#endif
    return 1;
}

void cllm_cpu_gemm_f_group_cols(const float *x, size_t stride, int ncols, int64_t K, int group,
                                float *out) {
    CLLM_ASSERT(ncols >= 1 && ncols <= group);
    for (int j = 0; j < group; j++) {
        const float *c = (const float *)((const char *)x + (size_t)j * stride);
        if (j < ncols) {
            for (int64_t k = 0; k < K; k++) out[k * group + j] = c[k];
        } else {
            for (int64_t k = 0; k < K; k++) out[k * group + j] = 0.0f;
        }
    }
}

void cllm_cpu_gemm_f_ref(int64_t K, const float *panel, const float *cols, size_t group_stride,
                         int group, int ncols, float *out, size_t ldo, int nrows) {
    for (int j = 0; j < ncols; j++) {
        const float *c =
            (const float *)((const char *)cols + (size_t)(j / group) * group_stride) + j % group;
        for (int r = 0; r < nrows; r++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += panel[k * CLLM_GEMM_F_ROWS + r] * c[k * group];
            out[(size_t)j * ldo + (size_t)r] = acc;
        }
    }
}

void cllm_cpu_gemm_f(int64_t K, const float *panel, const float *cols, size_t group_stride,
                     int group, int ncols, float *out, size_t ldo, int nrows) {
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512 && group == 1) {
        cllm_cpu_gemm_f_avx512(K, panel, cols, group_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2 &&
        (group == 1 || group == CLLM_GEMM_F_GROUP_AVX2)) {
        cllm_cpu_gemm_f_avx2(K, panel, cols, group_stride, group, ncols, out, ldo, nrows);
        return;
    }
#endif
    cllm_cpu_gemm_f_ref(K, panel, cols, group_stride, group, ncols, out, ldo, nrows);
}

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
        decode_q4_k((const cllm_block_q4_K *)row + sb, u, sc, off);
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
 * than GEMV_ZMM_MIN_K, where taking two rows per column load pays. On an AMD
 * Zen 5 (full-width AVX-512), 1 thread, SmolLM2-135M Q4_1 generated about
 * 265-271 tokens/s with every row in the 512-bit kernel, 291-293 with its
 * 576-element rows in the 256-bit one, and the same with its 1,536-element
 * rows there too, where 4 sequences lost 3-5 % (574-580 against 590-609). */
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

void cllm_cpu_gemm(cllm_type type, int64_t K, const void *panel, const void *act, size_t act_stride,
                   int ncols, float *out, size_t ldo, int nrows) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
#if defined(__x86_64__) || defined(__i386__)
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemm_avx512(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemm_avxvnni(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
    if (cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        cllm_cpu_gemm_avx2(&f, K, panel, act, act_stride, ncols, out, ldo, nrows);
        return;
    }
#endif
    (void)f;
    cllm_cpu_gemm_ref(type, K, panel, act, act_stride, ncols, out, ldo, nrows);
}

/* ---- 16 rows in the lanes (gemm.h) ---------------------------------------------- */

bool cllm_cpu_x16_available(cllm_type type, int64_t K) {
#if defined(__x86_64__) || defined(__i386__)
    if (type != CLLM_TYPE_Q4_0 && type != CLLM_TYPE_Q4_1 && type != CLLM_TYPE_Q4_K) return false;
    return K > 0 && K % cllm_type_traits_of(type)->blck_size == 0 &&
           cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
#else
    (void)type, (void)K;
    return false;
#endif
}

/* Bytes of a block's 16 rows. */
static size_t x16_block_bytes(cllm_type type) { return type == CLLM_TYPE_Q4_1 ? 320 : 288; }

/* Row r's block b: from a group into x (the file's layout), or back: its
 * quants' 4 x 4 bytes at 64 j + 4 r in the group's block, d at 256 + 2 r,
 * Q4_1's m at 288 + 2 r. */
static inline void x16_block(cllm_type type, char *group, int64_t b, int r, char *x,
                             bool to_group) {
    const bool q41 = type == CLLM_TYPE_Q4_1;
    char *o = group + (size_t)b * x16_block_bytes(type);
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    const size_t qoff = q41 ? 4 : 2;
    for (int j = 0; j < 4; j++) X16_MOVE(64 * (size_t)j + 4 * (size_t)r, qoff + 4 * (size_t)j, 4);
    X16_MOVE(256 + 2 * (size_t)r, 0, 2);
    if (q41) X16_MOVE(288 + 2 * (size_t)r, 2, 2);
#undef X16_MOVE
}

/* Row r's Q4_K super-block b: from a group into x (the file's layout), or
 * back: its 12 scale bytes as 3 dwords at 64 w + 4 r, d at 192 + 2 r, dmin
 * at 224 + 2 r, its 32 dwords of quants at 256 + 64 P + 4 r. */
static inline void x16_block_q4_k(char *group, int64_t b, int r, char *x, bool to_group) {
    char *o = group + (size_t)b * CLLM_X16_Q4_K_BYTES;
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    X16_MOVE(192 + 2 * (size_t)r, 0, 2);
    X16_MOVE(224 + 2 * (size_t)r, 2, 2);
    for (int w = 0; w < 3; w++) X16_MOVE(64 * (size_t)w + 4 * (size_t)r, 4 + 4 * (size_t)w, 4);
    for (int p = 0; p < 32; p++)
        X16_MOVE(256 + 64 * (size_t)p + 4 * (size_t)r, 16 + 4 * (size_t)p, 4);
#undef X16_MOVE
}

/* Row r's block or super-block b (x: the file's layout). */
static void x16_any_block(cllm_type type, char *group, int64_t b, int r, char *x, bool to_group) {
    if (type == CLLM_TYPE_Q4_K) {
        x16_block_q4_k(group, b, r, x, to_group);
    } else {
        x16_block(type, group, b, r, x, to_group);
    }
}

void cllm_cpu_x16_pack(cllm_type type, int64_t K, const void *rows, size_t stride, void *group) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const size_t bsz = tt->type_size;
    const int64_t qk = tt->blck_size;
    for (int64_t b = 0; b < K / qk; b++) {
        for (int r = 0; r < CLLM_X16_ROWS; r++)
            x16_any_block(type, group, b, r, (char *)rows + (size_t)r * stride + (size_t)b * bsz,
                          true);
    }
}

void cllm_cpu_x16_unpack(cllm_type type, int64_t K, const void *group, void *rows, size_t stride) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const size_t bsz = tt->type_size;
    const int64_t qk = tt->blck_size;
    for (int r = 0; r < CLLM_X16_ROWS; r++) {
        char *row = (char *)rows + (size_t)r * stride;
        for (int64_t b = 0; b < K / qk; b++)
            x16_any_block(type, (char *)group, b, r, row + b * bsz, false);
    }
}

void cllm_cpu_x16_row_to_float(cllm_type type, int64_t K, const void *group, int r, float *out) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const int64_t qk = tt->blck_size;
    for (int64_t b = 0; b < K / qk; b++) { /* the row's block as the file has it */
        char x[sizeof(cllm_block_q4_K)];
        x16_any_block(type, (char *)group, b, r, x, false);
        tt->to_float(x, out + qk * b, qk);
    }
}

void cllm_cpu_gemm_pack_x16(cllm_type type, int64_t K, const void *group, void *panel) {
    CLLM_ASSERT(cllm_cpu_x16_available(type, K));
#if defined(__x86_64__) || defined(__i386__)
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    if (level >= CLLM_CPU_ISA_AVX512) { /* (SmolLM2 pp16 / pp512 as with 512 bits) */
        cllm_cpu_gemm_pack_x16_avx512vl(type, K, group, panel);
    } else if (level == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemm_pack_x16_avxvnni(type, K, group, panel);
    } else {
        cllm_cpu_gemm_pack_x16_avx2(type, K, group, panel);
    }
#else
    (void)group, (void)panel;
#endif
}

void cllm_cpu_gemv_x16(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                       size_t act_stride, int nc, float *out, size_t out_stride) {
    CLLM_ASSERT(cllm_cpu_x16_available(type, K));
#if defined(__x86_64__) || defined(__i386__)
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    /* (Q4_K: the 256-bit kernel at every level; it reads as fast as the
     * memory gives with 1 thread) */
    if (level >= CLLM_CPU_ISA_AVX512 && !cllm_cpu_prefer_256() && type != CLLM_TYPE_Q4_K) {
        cllm_cpu_gemv_x16_avx512(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else if (level >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemv_x16_avx512vl(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else if (level == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemv_x16_avxvnni(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else {
        cllm_cpu_gemv_x16_avx2(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    }
#else
    (void)w, (void)ngroups, (void)act, (void)act_stride, (void)nc, (void)out, (void)out_stride;
#endif
}
