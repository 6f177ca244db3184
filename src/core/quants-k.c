/*
 * Reference kernels of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and of
 * Q8_K, the activation type of their dot products.
 *
 * A K-quant super-block holds 256 elements in sub-blocks of 16 or 32, each
 * with its own small integer scale (and min) in units of the super-block's
 * fp16 d (and dmin). The element order of each layout is spelled out in
 * quants.h; the loops below follow it literally.
 *
 * Quantization, per super-block:
 *   1. fit each sub-block on its own: the float scale (and min) that minimise
 *      the squared error over a small set of candidate grids (fit_sym,
 *      fit_affine: least squares for the quants each candidate rounds to);
 *   2. d = largest sub-block scale / largest integer scale (dmin likewise),
 *      rounded to fp16; the integer scales round to nearest in units of the
 *      stored d;
 *   3. requantize every element to the nearest point of the grid actually
 *      stored (d * sc, dmin * mn), so that decode(encode(x)) is as close to x
 *      as the stored scales allow.
 *
 * Dot products unpack a super-block's quants to int8, sum q * y in int32 per
 * sub-block, scale by the integer sub-block scale, and apply d * d_y once per
 * super-block; the mins use Q8_K's bsums (sums of 16 activation quants).
 */
#include "core/quants.h"
#include "core/common.h"

#include <math.h>

static inline float fp16_f32(cllm_fp16 h) { return cllm_quant_fp16_to_fp32(h); }

/* Candidate grids per sub-block fit: FIT_STEPS on each side of the plain
 * "extreme value on the last grid point" scale, FIT_STEP apart (in units of
 * quantization levels). */
#define FIT_STEPS 10
#define FIT_STEP  0.1f

/*
 * Symmetric fit of one sub-block: x[j] ~ d * L[j], L integer in
 * [-nmax, nmax - 1]. Returns the d (either sign) of least squared error over
 * the candidates iscale = t / max, max the value of largest magnitude and
 * t around -nmax (max on the longer, negative side) or nmax - 1. For fixed L
 * the best d is sum(x L) / sum(L L), with error sum(x x) - sum(x L)^2 / sum(L L).
 */
static float fit_sym(const float *x, int n, int nmax) {
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax < 1e-20f) return 0.0f;          /* below any fp16 grid; avoids t / max overflowing */
    float best_d = 0.0f, best_score = -1.0f; /* score: sum(x L)^2 / sum(L L) */
    const float bases[2] = {(float)-nmax, (float)(nmax - 1)};
    for (int b = 0; b < 2; b++) {
        for (int k = -FIT_STEPS; k <= FIT_STEPS; k++) {
            const float iscale = (bases[b] + FIT_STEP * (float)k) / max;
            float sxl = 0.0f;
            int32_t sll = 0;
            for (int j = 0; j < n; j++) {
                const int l =
                    cllm_quant_round_clamp(x[j] * iscale, (float)-nmax, (float)(nmax - 1));
                sxl += x[j] * (float)l;
                sll += l * l;
            }
            if (sll > 0 && sxl * sxl > best_score * (float)sll) {
                best_score = sxl * sxl / (float)sll;
                best_d = sxl / (float)sll;
            }
        }
    }
    return best_d;
}

/*
 * Affine fit of one sub-block: x[j] ~ d * L[j] - m, L integer in [0, nmax],
 * d >= 0, m >= 0 (the formats store m unsigned, so the grid always reaches
 * down to zero or below). Candidates iscale = (nmax + t) / (hi - lo) with
 * lo = min(x, 0), hi = max(x); for each, (d, -m) is the least-squares line
 * through (L, x), with m clamped to >= 0, and its error
 *   sum (d L + mn - x)^2 = d^2 S(LL) + 2 d mn S(L) + n mn^2 - 2 d S(xL) - 2 mn S(x) + S(xx)
 * (mn = -m) comes from the same sums. Returns d, *m_out = m.
 */
static float fit_affine(const float *x, int n, int nmax, float *m_out) {
    float lo = 0.0f, hi = x[0];
    double sx = 0.0, sxx = 0.0;
    for (int j = 0; j < n; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
        sx += x[j];
        sxx += (double)x[j] * x[j];
    }
    if (hi - lo < 1e-20f) { /* constant (or below any fp16 grid): all on the min */
        *m_out = -lo;
        return 0.0f;
    }
    /* the plain candidate: lo and hi on the ends of the grid */
    float best_d = (hi - lo) / (float)nmax, best_mn = lo;
    double best_err = 0.0;
    for (int j = 0; j < n; j++) {
        const float l = (float)cllm_quant_round_clamp((x[j] - lo) / best_d, 0.0f, (float)nmax);
        const double e = (double)best_d * l + lo - x[j];
        best_err += e * e;
    }
    const double fn = n;
    for (int k = -FIT_STEPS; k <= FIT_STEPS; k++) {
        const float iscale = ((float)nmax + FIT_STEP * (float)k) / (hi - lo);
        int32_t sl = 0, sll = 0;
        float sxl = 0.0f;
        for (int j = 0; j < n; j++) {
            const int l = cllm_quant_round_clamp((x[j] - lo) * iscale, 0.0f, (float)nmax);
            sl += l;
            sll += l * l;
            sxl += x[j] * (float)l;
        }
        const double det = fn * sll - (double)sl * sl;
        if (det <= 0.0) continue; /* all L equal: no line through them */
        double d = (fn * sxl - sl * sx) / det;
        double mn = (sll * sx - sl * (double)sxl) / det;
        if (mn > 0.0) { /* the min must be <= 0: fit d alone */
            mn = 0.0;
            d = sxl / (double)sll;
        }
        if (!(d > 0.0)) continue;
        const double err =
            d * d * sll + 2.0 * d * mn * sl + fn * mn * mn - 2.0 * d * sxl - 2.0 * mn * sx + sxx;
        if (err < best_err) {
            best_err = err;
            best_d = (float)d;
            best_mn = (float)mn;
        }
    }
    *m_out = -best_mn;
    return best_d;
}

/* Super-block scale for sub-block scales v[0..n): largest / qmax, as fp16. */
static cllm_fp16 super_scale(const float *v, int n, float qmax) {
    float max = 0.0f;
    for (int j = 0; j < n; j++) max = v[j] > max ? v[j] : max;
    return cllm_quant_scale_to_fp16(max / qmax);
}

/* Signed variant: the sub-block scale of largest magnitude maps to qmin
 * (the longer, negative end of a signed range); the result may be negative. */
static cllm_fp16 super_scale_signed(const float *v, int n, float qmin) {
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(v[j]) > amax) {
            amax = fabsf(v[j]);
            max = v[j];
        }
    }
    return cllm_quant_scale_to_fp16(max / qmin);
}

/* round(v / d) clamped to [lo, hi]; 0 when d is 0. */
static inline int quant_scale(float v, float d, float lo, float hi) {
    return d != 0.0f ? cllm_quant_round_clamp(v / d, lo, hi) : 0;
}

/* ---- Q2_K ------------------------------------------------------------------
 * 16 sub-blocks of 16: x = d * sc * q - dmin * mn, sc and mn 4 bits, q 2 bits.
 * scales[s] = sc | mn << 4; q of e = 128h + 32j + l is bits 2j..2j+1 of
 * qs[32h + l]. */

void cllm_quantize_row_q2_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q2_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float *x = src + ib * CLLM_QK_K;
        float sd[16], sm[16];
        for (int s = 0; s < 16; s++) sd[s] = fit_affine(x + 16 * s, 16, 3, &sm[s]);
        y[ib].d = super_scale(sd, 16, 15.0f);
        y[ib].dmin = super_scale(sm, 16, 15.0f);
        const float d = fp16_f32(y[ib].d), dmin = fp16_f32(y[ib].dmin);
        uint8_t q[CLLM_QK_K];
        for (int s = 0; s < 16; s++) {
            const int sc = quant_scale(sd[s], d, 0.0f, 15.0f);
            const int mn = quant_scale(sm[s], dmin, 0.0f, 15.0f);
            y[ib].scales[s] = (uint8_t)(sc | (mn << 4));
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            const float il = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int l = 0; l < 16; l++) {
                q[16 * s + l] =
                    (uint8_t)cllm_quant_round_clamp((x[16 * s + l] + ml) * il, 0.0f, 3.0f);
            }
        }
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = q + 128 * h + l;
                y[ib].qs[32 * h + l] = (uint8_t)(e[0] | e[32] << 2 | e[64] << 4 | e[96] << 6);
            }
        }
    }
}

void cllm_dequantize_row_q2_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q2_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float d = fp16_f32(x[ib].d), dmin = fp16_f32(x[ib].dmin);
        float *y = dst + ib * CLLM_QK_K;
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) {
                    const int e = 128 * h + 32 * j + l;
                    const int sc = x[ib].scales[e / 16];
                    const int q = (x[ib].qs[32 * h + l] >> (2 * j)) & 3;
                    y[e] = d * (float)(sc & 0xF) * (float)q - dmin * (float)(sc >> 4);
                }
            }
        }
    }
}

/* dot = sum over super-blocks of dy * (d * sum_s sc[s] * sum_{e in s} q[e] y[e]
 *                                      - dmin * sum_s mn[s] * bsums[s]) */
void cllm_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q2_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                for (int l = 0; l < 32; l++) {
                    q[128 * h + 32 * j + l] = (int8_t)((x[ib].qs[32 * h + l] >> (2 * j)) & 3);
                }
            }
        }
        int32_t sumi = 0, summ = 0;
        for (int s = 0; s < 16; s++) {
            int32_t si = 0;
            for (int l = 0; l < 16; l++) si += q[16 * s + l] * y[ib].qs[16 * s + l];
            sumi += (x[ib].scales[s] & 0xF) * si;
            summ += (x[ib].scales[s] >> 4) * y[ib].bsums[s];
        }
        sum += y[ib].d * (fp16_f32(x[ib].d) * (float)sumi - fp16_f32(x[ib].dmin) * (float)summ);
    }
    *out = sum;
}

/* ---- Q3_K ------------------------------------------------------------------
 * 16 sub-blocks of 16: x = d * (sc - 32) * (q - 4), sc 6 bits, q 3 bits: the
 * low 2 bits of e = 128h + 32j + l in bits 2j..2j+1 of qs[32h + l], the high
 * bit in bit 4h + j of hmask[l]. The 16 6-bit scales are packed in 12 bytes:
 * low nibbles in scales[0..7] (s < 8 low half, s >= 8 high half of byte
 * s - 8), the top 2 bits in scales[8 + s % 4] at bits 2 * (s / 4). */

static void q3k_unpack_scales(const uint8_t b[12], int sc[16]) {
    for (int s = 0; s < 16; s++) {
        const int low = s < 8 ? b[s] & 0xF : b[s - 8] >> 4;
        const int high = (b[8 + s % 4] >> (2 * (s / 4))) & 3;
        sc[s] = (low | high << 4) - 32;
    }
}

static void q3k_pack_scales(const int sc[16], uint8_t b[12]) {
    memset(b, 0, 12);
    for (int s = 0; s < 16; s++) {
        const int v = sc[s] + 32; /* 0..63 */
        b[s % 8] |= (uint8_t)((v & 0xF) << (s < 8 ? 0 : 4));
        b[8 + s % 4] |= (uint8_t)((v >> 4) << (2 * (s / 4)));
    }
}

void cllm_quantize_row_q3_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q3_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float *x = src + ib * CLLM_QK_K;
        float sd[16];
        for (int s = 0; s < 16; s++) sd[s] = fit_sym(x + 16 * s, 16, 4);
        y[ib].d = super_scale_signed(sd, 16, -32.0f);
        const float d = fp16_f32(y[ib].d);
        int sc[16];
        uint8_t q[CLLM_QK_K]; /* 0..7, i.e. L + 4 */
        for (int s = 0; s < 16; s++) {
            sc[s] = quant_scale(sd[s], d, -32.0f, 31.0f);
            const float dl = d * (float)sc[s];
            const float il = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int l = 0; l < 16; l++) {
                q[16 * s + l] =
                    (uint8_t)(cllm_quant_round_clamp(x[16 * s + l] * il, -4.0f, 3.0f) + 4);
            }
        }
        q3k_pack_scales(sc, y[ib].scales);
        memset(y[ib].hmask, 0, sizeof(y[ib].hmask));
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = q + 128 * h + l;
                y[ib].qs[32 * h + l] =
                    (uint8_t)((e[0] & 3) | (e[32] & 3) << 2 | (e[64] & 3) << 4 | (e[96] & 3) << 6);
                for (int j = 0; j < 4; j++) {
                    y[ib].hmask[l] |= (uint8_t)((e[32 * j] >> 2) << (4 * h + j));
                }
            }
        }
    }
}

/* Unpacks the 256 quants of a Q3_K block as signed values q - 4 (-4..3). */
static void q3k_unpack_quants(const cllm_block_q3_K *b, int8_t q[CLLM_QK_K]) {
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                const int lo = (b->qs[32 * h + l] >> (2 * j)) & 3;
                const int hi = (b->hmask[l] >> (4 * h + j)) & 1;
                q[128 * h + 32 * j + l] = (int8_t)((lo | hi << 2) - 4);
            }
        }
    }
}

void cllm_dequantize_row_q3_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q3_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float d = fp16_f32(x[ib].d);
        int sc[16];
        int8_t q[CLLM_QK_K];
        q3k_unpack_scales(x[ib].scales, sc);
        q3k_unpack_quants(&x[ib], q);
        float *y = dst + ib * CLLM_QK_K;
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)sc[s];
            for (int l = 0; l < 16; l++) y[16 * s + l] = dl * (float)q[16 * s + l];
        }
    }
}

/* dot = sum over super-blocks of d * dy * sum_s (sc[s] - 32) * sum_{e in s} (q[e] - 4) y[e] */
void cllm_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q3_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int sc[16];
        int8_t q[CLLM_QK_K];
        q3k_unpack_scales(x[ib].scales, sc);
        q3k_unpack_quants(&x[ib], q);
        int32_t sumi = 0;
        for (int s = 0; s < 16; s++) {
            int32_t si = 0;
            for (int l = 0; l < 16; l++) si += q[16 * s + l] * y[ib].qs[16 * s + l];
            sumi += sc[s] * si;
        }
        sum += fp16_f32(x[ib].d) * y[ib].d * (float)sumi;
    }
    *out = sum;
}

/* ---- Q4_K / Q5_K -----------------------------------------------------------
 * 8 sub-blocks of 32: x = d * sc * q - dmin * mn, sc and mn 6 bits packed in
 * scales[12] (cllm_q4k_scale_min), q of e = 64c + 32t + l in nibble t of
 * qs[32c + l]; Q5_K adds bit e / 32 of qh[l] as bit 4 of q. */

static void q4k_pack_scales(const int sc[8], const int mn[8], uint8_t b[12]) {
    memset(b, 0, 12);
    for (int j = 0; j < 4; j++) {
        b[j] = (uint8_t)(sc[j] & 63);
        b[j + 4] = (uint8_t)(mn[j] & 63);
    }
    for (int j = 4; j < 8; j++) {
        b[j + 4] = (uint8_t)((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
        b[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        b[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
}

/* Steps 1-3 of the file comment for Q4_K (nmax 15) and Q5_K (nmax 31):
 * writes d, dmin, the packed scales and the quants q[256] (0..nmax). */
static void quantize_superblock_q45k(const float *x, int nmax, cllm_fp16 *dh, cllm_fp16 *dminh,
                                     uint8_t scales[12], uint8_t q[CLLM_QK_K]) {
    float sd[8], sm[8];
    for (int s = 0; s < 8; s++) sd[s] = fit_affine(x + 32 * s, 32, nmax, &sm[s]);
    *dh = super_scale(sd, 8, 63.0f);
    *dminh = super_scale(sm, 8, 63.0f);
    const float d = fp16_f32(*dh), dmin = fp16_f32(*dminh);
    int sc[8], mn[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = quant_scale(sd[s], d, 0.0f, 63.0f);
        mn[s] = quant_scale(sm[s], dmin, 0.0f, 63.0f);
        const float dl = d * (float)sc[s], ml = dmin * (float)mn[s];
        const float il = dl != 0.0f ? 1.0f / dl : 0.0f;
        for (int l = 0; l < 32; l++) {
            q[32 * s + l] =
                (uint8_t)cllm_quant_round_clamp((x[32 * s + l] + ml) * il, 0.0f, (float)nmax);
        }
    }
    q4k_pack_scales(sc, mn, scales);
}

void cllm_quantize_row_q4_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q4_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        uint8_t q[CLLM_QK_K];
        quantize_superblock_q45k(src + ib * CLLM_QK_K, 15, &y[ib].d, &y[ib].dmin, y[ib].scales, q);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                y[ib].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
            }
        }
    }
}

void cllm_quantize_row_q5_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q5_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        uint8_t q[CLLM_QK_K];
        quantize_superblock_q45k(src + ib * CLLM_QK_K, 31, &y[ib].d, &y[ib].dmin, y[ib].scales, q);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                y[ib].qs[32 * c + l] =
                    (uint8_t)((q[64 * c + l] & 0xF) | (q[64 * c + 32 + l] & 0xF) << 4);
            }
        }
        for (int l = 0; l < 32; l++) {
            int h = 0;
            for (int s = 0; s < 8; s++) h |= (q[32 * s + l] >> 4) << s;
            y[ib].qh[l] = (uint8_t)h;
        }
    }
}

/* Unpacks the 256 quants of a Q4_K (qh NULL) or Q5_K block (0..15 / 0..31). */
static void q45k_unpack_quants(const uint8_t qs[128], const uint8_t *qh, int8_t q[CLLM_QK_K]) {
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(qs[32 * c + l] & 0xF);
            q[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
        }
    }
    if (qh == NULL) return;
    for (int s = 0; s < 8; s++) {
        for (int l = 0; l < 32; l++) q[32 * s + l] |= (int8_t)(((qh[l] >> s) & 1) << 4);
    }
}

static void dequantize_superblock_q45k(float d, float dmin, const uint8_t scales[12],
                                       const int8_t q[CLLM_QK_K], float *y) {
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        cllm_q4k_scale_min(s, scales, &sc, &mn);
        const float dl = d * (float)sc, ml = dmin * (float)mn;
        for (int l = 0; l < 32; l++) y[32 * s + l] = dl * (float)q[32 * s + l] - ml;
    }
}

/* dy * (d * sum_s sc[s] * sum_{e in s} q[e] y[e] - dmin * sum_s mn[s] * (bsums[2s] + bsums[2s+1]))
 */
static float vec_dot_superblock_q45k(float d, float dmin, const uint8_t scales[12],
                                     const int8_t q[CLLM_QK_K], const cllm_block_q8_K *y) {
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        cllm_q4k_scale_min(s, scales, &sc, &mn);
        int32_t si = 0;
        for (int l = 0; l < 32; l++) si += q[32 * s + l] * y->qs[32 * s + l];
        sumi += sc * si;
        summ += mn * (y->bsums[2 * s] + y->bsums[2 * s + 1]);
    }
    return y->d * (d * (float)sumi - dmin * (float)summ);
}

void cllm_dequantize_row_q4_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q4_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        q45k_unpack_quants(x[ib].qs, NULL, q);
        dequantize_superblock_q45k(fp16_f32(x[ib].d), fp16_f32(x[ib].dmin), x[ib].scales, q,
                                   dst + ib * CLLM_QK_K);
    }
}

void cllm_dequantize_row_q5_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q5_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        q45k_unpack_quants(x[ib].qs, x[ib].qh, q);
        dequantize_superblock_q45k(fp16_f32(x[ib].d), fp16_f32(x[ib].dmin), x[ib].scales, q,
                                   dst + ib * CLLM_QK_K);
    }
}

void cllm_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q4_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        q45k_unpack_quants(x[ib].qs, NULL, q);
        sum += vec_dot_superblock_q45k(fp16_f32(x[ib].d), fp16_f32(x[ib].dmin), x[ib].scales, q,
                                       &y[ib]);
    }
    *out = sum;
}

void cllm_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q5_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        q45k_unpack_quants(x[ib].qs, x[ib].qh, q);
        sum += vec_dot_superblock_q45k(fp16_f32(x[ib].d), fp16_f32(x[ib].dmin), x[ib].scales, q,
                                       &y[ib]);
    }
    *out = sum;
}

/* ---- Q6_K ------------------------------------------------------------------
 * 16 sub-blocks of 16: x = d * scales[s] * (q - 32), scales int8, q 6 bits:
 * for e = 128h + 32k + l the low nibble is nibble k >> 1 of
 * ql[64h + 32(k & 1) + l], the top 2 bits are bits 2k..2k+1 of qh[32h + l]. */

void cllm_quantize_row_q6_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q6_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float *x = src + ib * CLLM_QK_K;
        float sd[16];
        for (int s = 0; s < 16; s++) sd[s] = fit_sym(x + 16 * s, 16, 32);
        y[ib].d = super_scale_signed(sd, 16, -128.0f);
        const float d = fp16_f32(y[ib].d);
        uint8_t q[CLLM_QK_K]; /* 0..63, i.e. L + 32 */
        for (int s = 0; s < 16; s++) {
            const int sc = quant_scale(sd[s], d, -128.0f, 127.0f);
            y[ib].scales[s] = (int8_t)sc;
            const float dl = d * (float)sc;
            const float il = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int l = 0; l < 16; l++) {
                q[16 * s + l] =
                    (uint8_t)(cllm_quant_round_clamp(x[16 * s + l] * il, -32.0f, 31.0f) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = q + 128 * h + l; /* e[32 * k]: element 128h + 32k + l */
                y[ib].ql[64 * h + l] = (uint8_t)((e[0] & 0xF) | (e[64] & 0xF) << 4);
                y[ib].ql[64 * h + 32 + l] = (uint8_t)((e[32] & 0xF) | (e[96] & 0xF) << 4);
                y[ib].qh[32 * h + l] = (uint8_t)(e[0] >> 4 | (e[32] >> 4) << 2 | (e[64] >> 4) << 4 |
                                                 (e[96] >> 4) << 6);
            }
        }
    }
}

/* Unpacks the 256 quants of a Q6_K block as signed values q - 32 (-32..31). */
static void q6k_unpack_quants(const cllm_block_q6_K *b, int8_t q[CLLM_QK_K]) {
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
                q[128 * h + 32 * k + l] = (int8_t)((lo | hi << 4) - 32);
            }
        }
    }
}

void cllm_dequantize_row_q6_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q6_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float d = fp16_f32(x[ib].d);
        int8_t q[CLLM_QK_K];
        q6k_unpack_quants(&x[ib], q);
        float *y = dst + ib * CLLM_QK_K;
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)x[ib].scales[s];
            for (int l = 0; l < 16; l++) y[16 * s + l] = dl * (float)q[16 * s + l];
        }
    }
}

/* dot = sum over super-blocks of d * dy * sum_s scales[s] * sum_{e in s} (q[e] - 32) y[e] */
void cllm_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q6_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int8_t q[CLLM_QK_K];
        q6k_unpack_quants(&x[ib], q);
        int32_t sumi = 0;
        for (int s = 0; s < 16; s++) {
            int32_t si = 0;
            for (int l = 0; l < 16; l++) si += q[16 * s + l] * y[ib].qs[16 * s + l];
            sumi += x[ib].scales[s] * si;
        }
        sum += fp16_f32(x[ib].d) * y[ib].d * (float)sumi;
    }
    *out = sum;
}

/* ---- Q8_K ------------------------------------------------------------------
 * x = d * q, d = amax / 127 (float, so no fp16 range limits), q in -127..127;
 * bsums[g] = sum of q over elements 16g..16g+15. */

void cllm_quantize_row_q8_K(const float *src, void *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    cllm_block_q8_K *y = dst;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        const float *x = src + ib * CLLM_QK_K;
        float amax = 0.0f;
        for (int j = 0; j < CLLM_QK_K; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float id = amax > 1e-30f ? 127.0f / amax : 0.0f; /* finite */
        y[ib].d = amax / 127.0f;
        for (int j = 0; j < CLLM_QK_K; j++) {
            y[ib].qs[j] = (int8_t)cllm_quant_round_clamp(x[j] * id, -127.0f, 127.0f);
        }
        for (int g = 0; g < CLLM_QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[ib].qs[16 * g + l];
            y[ib].bsums[g] = (int16_t)s;
        }
    }
}

void cllm_dequantize_row_q8_K(const void *src, float *dst, int64_t n) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q8_K *x = src;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        float *y = dst + ib * CLLM_QK_K;
        for (int j = 0; j < CLLM_QK_K; j++) y[j] = x[ib].d * (float)x[ib].qs[j];
    }
}

void cllm_vec_dot_q8_K_q8_K(int64_t n, float *out, const void *vx, const void *vy) {
    CLLM_ASSERT(n % CLLM_QK_K == 0);
    const cllm_block_q8_K *x = vx;
    const cllm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / CLLM_QK_K; ib++) {
        int32_t sumi = 0;
        for (int j = 0; j < CLLM_QK_K; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sum += x[ib].d * y[ib].d * (float)sumi;
    }
    *out = sum;
}
