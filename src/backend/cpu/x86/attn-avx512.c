/*
 * The fused attention (ops-attn.c) for AVX-512, one unit of work at a time:
 * keys go by blocks of CLLM_ATTN_KB. Per block the keys are converted to F32
 * once, transposed ([D][KB]: one dword gather gives dimensions d and d + 1
 * of 16 keys), and the values converted ([KB][Dv]); then for each query row
 * of the unit the KB scores are 16-wide FMAs over d, the mask and the online
 * softmax update are vector operations (exponential: exp512 below), and the
 * weighted values are added with FMAs into the row's accumulator. Compiled
 * for these instructions only; ops-attn.c calls it only when the CPU has
 * them and the shapes fit (cllm_cpu_attn_fast). A BF16 or quantized
 * (Q8_0, Q4_0) cache is read where it lies, 8 values at a time
 * (attn-kv.h), its keys transposed by 8 x 8 blocks.
 *
 * One token (a generation step) with rows already F32 has its own kernel
 * below (cllm_cpu_attn_token_avx512, attn.h): with one query row per head
 * of the group there is nothing to share a transpose with.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/attn.h"
#include "backend/cpu/rows.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")

#include <immintrin.h>
#include <math.h>

#include "backend/cpu/x86/attn-kv.h"
#include "backend/cpu/x86/vec-avx2.h"
#include "backend/cpu/x86/vec-avx512.h"

#define AZ_INLINE static inline __attribute__((always_inline))
#define KB        CLLM_ATTN_KB

/* 16 values of a row of type t (F32 or F16) from p, lanes outside m zero. */
AZ_INLINE __m512 az_load(cllm_type t, const char *p, __mmask16 m) {
    if (t == CLLM_TYPE_F32) return _mm512_maskz_loadu_ps(m, p);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* The online softmax update of query row `row` by one block's scores s[0,
 * nv) (scaled and masked: -inf for hidden keys): the block's weights into p
 * (16 * nv floats; exactly 0 for hidden keys), the row's running max and
 * sum updated; returns the factor its accumulator is to be scaled by. */
AZ_INLINE float az_softmax(const cllm_attn_unit *u, int64_t row, const __m512 *s, int nv,
                           float *p) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 bm = ninf;
    for (int x = 0; x < nv; x++) bm = _mm512_max_ps(bm, s[x]);
    const float bmax = _mm512_reduce_max_ps(bm);
    if (bmax == -INFINITY) { /* every key of the block masked for this row */
        for (int x = 0; x < nv; x++) _mm512_storeu_ps(p + 16 * x, _mm512_setzero_ps());
        return 1.0f;
    }
    const float m_old = u->mx[row], m_new = m_old > bmax ? m_old : bmax;
    const float cf = expf(m_old - m_new); /* 0 for the first live block */
    __m512 l = _mm512_setzero_ps();
    const __m512 mn = _mm512_set1_ps(m_new);
    for (int x = 0; x < nv; x++) {
        const __m512 e = cllm_exp512(_mm512_sub_ps(s[x], mn));
        /* masked keys: exactly 0 (the exponential of -inf is a denormal at most) */
        const __mmask16 keep = _mm512_cmp_ps_mask(s[x], ninf, _CMP_NEQ_OQ);
        const __m512 pz = _mm512_maskz_mov_ps(keep, e);
        _mm512_storeu_ps(p + 16 * x, pz);
        l = _mm512_add_ps(l, pz);
    }
    u->sum[row] = u->sum[row] * cf + _mm512_reduce_add_ps(l);
    u->mx[row] = m_new;
    return cf;
}

/* Folds one key block into nr (1 or 2) query rows: scores over d as FMAs on
 * the transposed keys, the mask, the online softmax update, the weighted
 * values. pw holds 2 x KB weights. */
AZ_INLINE void az_rows(int nr, const cllm_attn_unit *u, const int64_t *rows, const int64_t *tis,
                       int64_t D, int64_t Dv, int64_t nk, float scale, const float *kt,
                       const float *vf, const float *mf, float *pw) {
    __m512 s[2][KB / 16];
    for (int r = 0; r < nr; r++)
        for (int x = 0; x < KB / 16; x++) s[r][x] = _mm512_setzero_ps();
    const float *q0 = u->q + rows[0] * D, *q1 = u->q + rows[nr - 1] * D;
    for (int64_t d = 0; d < D; d++) {
        const __m512 a0 = _mm512_set1_ps(q0[d]), a1 = _mm512_set1_ps(q1[d]);
        for (int x = 0; x < KB / 16; x++) {
            const __m512 kv = _mm512_loadu_ps(kt + d * KB + 16 * x);
            s[0][x] = _mm512_fmadd_ps(a0, kv, s[0][x]);
            if (nr == 2) s[1][x] = _mm512_fmadd_ps(a1, kv, s[1][x]);
        }
    }
    float cf[2];
    for (int r = 0; r < nr; r++) {
        for (int x = 0; x < KB / 16; x++) {
            s[r][x] = _mm512_fmadd_ps(s[r][x], _mm512_set1_ps(scale),
                                      _mm512_loadu_ps(mf + tis[r] * KB + 16 * x));
        }
        cf[r] = az_softmax(u, rows[r], s[r], KB / 16, pw + r * KB);
    }
    float *acc0 = u->acc + rows[0] * Dv, *acc1 = u->acc + rows[nr - 1] * Dv;
    const __m512 c0 = _mm512_set1_ps(cf[0]), c1 = _mm512_set1_ps(cf[nr - 1]);
    for (int64_t i = 0; i < Dv; i += 64) {
        const int nv = (int)CLLM_MIN((int64_t)4, (Dv - i) / 16);
        __m512 a0[4], a1[4];
        for (int x = 0; x < nv; x++) {
            a0[x] = _mm512_mul_ps(_mm512_loadu_ps(acc0 + i + 16 * x), c0);
            if (nr == 2) a1[x] = _mm512_mul_ps(_mm512_loadu_ps(acc1 + i + 16 * x), c1);
        }
        for (int64_t jj = 0; jj < nk; jj++) {
            const __m512 w0 = _mm512_set1_ps(pw[jj]), w1 = _mm512_set1_ps(pw[KB + jj]);
            for (int x = 0; x < nv; x++) {
                const __m512 vv = _mm512_loadu_ps(vf + jj * Dv + i + 16 * x);
                a0[x] = _mm512_fmadd_ps(w0, vv, a0[x]);
                if (nr == 2) a1[x] = _mm512_fmadd_ps(w1, vv, a1[x]);
            }
        }
        for (int x = 0; x < nv; x++) {
            _mm512_storeu_ps(acc0 + i + 16 * x, a0[x]);
            if (nr == 2) _mm512_storeu_ps(acc1 + i + 16 * x, a1[x]);
        }
    }
}

void cllm_cpu_attn_unit_avx512(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = k->ne[0], Dv = v->ne[0], n_kv = u->n_kv, nt = u->nt, nh = u->nh;
    float *kt = scratch;      /* [D][KB] */
    float *vf = kt + D * KB;  /* [KB][Dv] */
    float *mf = vf + KB * Dv; /* [nt][KB] mask (+ -inf beyond the keys) */
    float *pw = mf + 8 * KB;  /* [2][KB] weights of two rows */
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i kidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int32_t)k->nb[1]));

    for (int64_t j0 = u->k0; j0 < n_kv; j0 += KB) {
        const int64_t nk = CLLM_MIN((int64_t)KB, n_kv - j0);
        bool live[8], any = false;
        for (int64_t ti = 0; ti < nt; ti++) {
            __m512 mx = ninf;
            for (int64_t c = 0; c < KB; c += 16) {
                const __mmask16 m = cllm_lanes16(nk - c);
                __m512 mv = _mm512_setzero_ps();
                if (mask)
                    mv = az_load(mask->type, cllm_cpu_elem(mask, j0 + c, u->t0 + ti, 0, 0), m);
                mv = _mm512_mask_blend_ps(m, ninf, mv);
                _mm512_storeu_ps(mf + ti * KB + c, mv);
                mx = _mm512_max_ps(mx, mv);
            }
            live[ti] = _mm512_reduce_max_ps(mx) != -INFINITY;
            any = any || live[ti];
        }
        if (!any) continue; /* hidden from every token of the unit */

        /* keys, transposed, F32; lanes beyond nk zero */
        for (int64_t c = 0; c < KB; c += 16) {
            const __mmask16 m = cllm_lanes16(nk - c);
            const char *base = cllm_cpu_elem(k, 0, j0 + c, u->g, 0);
            if (k->type == CLLM_TYPE_F16) {
                for (int64_t d = 0; d < D; d += 2) {
                    const __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, kidx,
                                                                  base + 2 * d, 1);
                    _mm512_storeu_ps(kt + d * KB + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w)));
                    _mm512_storeu_ps(kt + (d + 1) * KB + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                                                                _mm512_srli_epi32(w, 16))));
                }
            } else if (k->type != CLLM_TYPE_F32) {
                /* BF16 or blocks (a quantized cache), read in place: 8
                 * values of 8 keys at a time, 8 x 8 transposes */
                for (int64_t c8 = 0; c8 < 16; c8 += 8) {
                    const char *rows[8];
                    for (int i = 0; i < 8; i++) {
                        rows[i] =
                            c + c8 + i < nk ? cllm_cpu_elem(k, 0, j0 + c + c8 + i, u->g, 0) : NULL;
                    }
                    for (int64_t d = 0; d < D; d += 8) {
                        __m256 r[8];
                        for (int i = 0; i < 8; i++)
                            r[i] =
                                rows[i] ? cllm_attn_kv8(k->type, rows[i], d) : _mm256_setzero_ps();
                        cllm_transpose8_ps(r);
                        for (int i = 0; i < 8; i++)
                            _mm256_storeu_ps(kt + (d + i) * KB + c + c8, r[i]);
                    }
                }
            } else {
                for (int64_t d = 0; d < D; d++) {
                    _mm512_storeu_ps(
                        kt + d * KB + c,
                        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, kidx, base + 4 * d, 1));
                }
            }
        }
        for (int64_t jj = 0; jj < nk; jj++) {
            const char *vr = cllm_cpu_elem(v, 0, j0 + jj, u->g, 0);
            if (v->type == CLLM_TYPE_F16 || v->type == CLLM_TYPE_F32) {
                const size_t es = cllm_type_traits_of(v->type)->type_size;
                for (int64_t i = 0; i < Dv; i += 16) {
                    _mm512_storeu_ps(vf + jj * Dv + i,
                                     az_load(v->type, vr + (size_t)i * es, 0xffff));
                }
            } else { /* BF16 or blocks, in place */
                for (int64_t i = 0; i < Dv; i += 8)
                    _mm256_storeu_ps(vf + jj * Dv + i, cllm_attn_kv8(v->type, vr, i));
            }
        }

        /* the query rows of live tokens, two at a time (shared key and
         * value loads, twice the independent FMA chains) */
        int64_t rows[2], tis[2];
        int nr = 0;
        for (int64_t ti = 0; ti < nt; ti++) {
            if (!live[ti]) continue;
            for (int64_t h = 0; h < nh; h++) {
                rows[nr] = ti * nh + h;
                tis[nr] = ti;
                if (++nr == 2) {
                    az_rows(2, u, rows, tis, D, Dv, nk, scale, kt, vf, mf, pw);
                    nr = 0;
                }
            }
        }
        if (nr == 1) az_rows(1, u, rows, tis, D, Dv, nk, scale, kt, vf, mf, pw);
    }
}

/* ---- one token (a generation step) ------------------------------------- */

/* The sums of the 16 lanes of each of p[0..15] in lanes 0..15 of one
 * vector: pairs interleaved, then halves of 128-bit lanes, then 128-bit
 * lanes of two vectors, then of the two halves (45 operations). */
AZ_INLINE __m512 az_sum16(const __m512 p[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) {
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(p[2 * i], p[2 * i + 1]),
                             _mm512_unpackhi_ps(p[2 * i], p[2 * i + 1]));
    }
    for (int i = 0; i < 4; i++) { /* 128-bit lane l: keys 4i..4i+3, each summed */
        const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
        b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++) {
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    }
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                         _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
}

/* The 16 scores (before scale and mask) of query row q against the keys
 * at kr[0..15]: q in nd (a constant after inlining) registers, each key's
 * FMAs reading its row in place. */
AZ_INLINE __m512 az_token_scores(int nd, const float *q, const float *const *kr) {
    __m512 qv[8], p[16];
    for (int d = 0; d < nd; d++) qv[d] = _mm512_loadu_ps(q + 16 * d);
    for (int j = 0; j < 16; j++) {
        __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kr[j]));
        for (int d = 1; d < nd; d++) a = _mm512_fmadd_ps(qv[d], _mm512_loadu_ps(kr[j] + 16 * d), a);
        p[j] = a;
    }
    return az_sum16(p);
}

/* Rows r0 .. r0 + nr - 1 (nr <= 4, a constant after inlining) of a one-token
 * unit against a block of 16 keys (kr, vr: their F32 rows; mv the mask,
 * -inf past the block's keys): scores, online softmax, values. */
AZ_INLINE void az_token_rows(int nr, const cllm_attn_unit *u, int64_t r0, int64_t D, int64_t Dv,
                             float scale, const float *const *kr, const float *const *vr, __m512 mv,
                             float *pw) {
    float cf[4];
    for (int r = 0; r < nr; r++) {
        const float *q = u->q + (r0 + r) * D;
        __m512 raw;
        if (D == 64) {
            raw = az_token_scores(4, q, kr);
        } else if (D == 128) {
            raw = az_token_scores(8, q, kr);
        } else {
            __m512 p[16];
            for (int j = 0; j < 16; j++) {
                __m512 a = _mm512_setzero_ps();
                for (int64_t d = 0; d < D; d += 16)
                    a = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(kr[j] + d), a);
                p[j] = a;
            }
            raw = az_sum16(p);
        }
        const __m512 s = _mm512_fmadd_ps(raw, _mm512_set1_ps(scale), mv);
        cf[r] = az_softmax(u, r0 + r, &s, 1, pw + 16 * r);
    }
    for (int64_t x0 = 0; x0 < Dv; x0 += 64) { /* 4 vectors of each row's accumulator */
        const int nx = (int)CLLM_MIN((int64_t)4, (Dv - x0) / 16);
        __m512 acc[4][4];
        for (int r = 0; r < nr; r++) {
            const __m512 c = _mm512_set1_ps(cf[r]);
            for (int x = 0; x < 4; x++) {
                acc[r][x] =
                    x < nx ? _mm512_mul_ps(_mm512_loadu_ps(u->acc + (r0 + r) * Dv + x0 + 16 * x), c)
                           : _mm512_setzero_ps();
            }
        }
        for (int j = 0; j < 16; j++) {
            for (int x = 0; x < 4; x++) {
                if (x >= nx) continue;
                const __m512 vv = _mm512_loadu_ps(vr[j] + x0 + 16 * x);
                for (int r = 0; r < nr; r++)
                    acc[r][x] = _mm512_fmadd_ps(_mm512_set1_ps(pw[16 * r + j]), vv, acc[r][x]);
            }
        }
        for (int r = 0; r < nr; r++) {
            for (int x = 0; x < 4; x++) {
                if (x < nx) _mm512_storeu_ps(u->acc + (r0 + r) * Dv + x0 + 16 * x, acc[r][x]);
            }
        }
    }
}

void cllm_cpu_attn_token_avx512(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch) {
    const cllm_tensor *mask = dst->src[3];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = dst->src[1]->ne[0], Dv = dst->src[2]->ne[0], n_kv = u->n_kv, nh = u->nh;
    float *pw = scratch; /* [4][16] weights of up to 4 rows */
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t j0 = u->k0; j0 < n_kv; j0 += 16) {
        const int64_t nk = CLLM_MIN((int64_t)16, n_kv - j0);
        const __mmask16 live = cllm_lanes16(nk);
        __m512 mv = _mm512_setzero_ps();
        if (mask) mv = az_load(mask->type, cllm_cpu_elem(mask, j0, u->t0, 0, 0), live);
        mv = _mm512_mask_blend_ps(live, ninf, mv);
        if (_mm512_reduce_max_ps(mv) == -INFINITY) continue; /* every key hidden */
        /* past nk: the block's last key again (its weight is 0) */
        const float *kr[16], *vr[16];
        for (int64_t j = 0; j < 16; j++) {
            const int64_t i = j0 - u->k0 + (j < nk ? j : nk - 1);
            kr[j] = u->kf + i * D;
            vr[j] = u->vf + i * Dv;
        }
        int64_t r0 = 0;
        for (; r0 + 4 <= nh; r0 += 4) az_token_rows(4, u, r0, D, Dv, scale, kr, vr, mv, pw);
        switch (nh - r0) {
        case 1: az_token_rows(1, u, r0, D, Dv, scale, kr, vr, mv, pw); break;
        case 2: az_token_rows(2, u, r0, D, Dv, scale, kr, vr, mv, pw); break;
        case 3: az_token_rows(3, u, r0, D, Dv, scale, kr, vr, mv, pw); break;
        default: break;
        }
    }
}

CLLM_X86_TARGET_END

#else
typedef int cllm_attn_avx512_unused; /* not x86: nothing to build */
#endif
