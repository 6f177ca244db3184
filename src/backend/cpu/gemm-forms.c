/*
 * The panel forms of the weight types (gemm.h: cllm_gemm_form) and what
 * depends on nothing but them: their decoders, the panel and activation
 * sizes, the portable packer and reference kernel. Below the x86 kernels,
 * which read the forms, and below the dispatch (gemm.c).
 */
#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/isa.h"

#include <string.h>

/* ---- forms and decoders --------------------------------------------------------
 * A decoder turns one storage block (qk elements) into u[0..qk), and one
 * scale and offset per scale block. */

typedef void (*gemm_decode_fn)(const void *blk, uint8_t *u, float *sc, float *off);

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

void cllm_cpu_gemm_decode_q4_k(const void *blk, uint8_t *u, float *sc, float *off) {
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
    case CLLM_TYPE_Q4_K:
        return (gemm_type){{32, 0, true, 256, 15, false}, cllm_cpu_gemm_decode_q4_k};
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

void cllm_cpu_gemm_act_to_float(cllm_type type, const void *act, float *x, int64_t K) {
    const cllm_gemm_form f = cllm_cpu_gemm_form(type);
    const char *in = act;
    for (int64_t b = 0; b < K / f.bs; b++, in += act_block_bytes(&f)) {
        float d;
        memcpy(&d, in + f.bs, 4);
        for (int j = 0; j < f.bs; j++) x[b * f.bs + j] = d * (float)((const int8_t *)in)[j];
    }
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
