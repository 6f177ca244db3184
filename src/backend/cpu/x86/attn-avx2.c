/*
 * The fused attention (ops-attn.c) for AVX2 + FMA + F16C, one unit of work
 * at a time: the AVX-512 kernel's way (attn-avx512.c) at 256 bits. Keys go
 * by blocks of AY_KB; per block the keys are converted to F32 and
 * transposed into [D][KB] by 8 x 8 register transposes of whole rows (AVX2
 * gathers are slower still), the values converted ([KB][Dv]); then for each
 * pair of query rows the scores are FMAs over d on 8 keys at a time, the
 * mask and the online softmax update are vector operations (exponential:
 * cllm_exp256), and the weighted values are added with FMAs into the rows'
 * accumulators. Blocks of 32 keys keep two rows' scores in 8 of the 16
 * registers. Keys and values may be F32, F16, BF16 or the blocks of a
 * quantized cache (Q8_0, Q4_0), converted where they lie 8 values at a time
 * (attn-kv.h): no converted copy of the cache, the same values as the
 * type's to_float. Compiled for these instructions only; ops-attn.c calls it
 * only at the AVX2 level and where the shapes fit (cllm_cpu_attn_fast).
 *
 * A unit of one token (generation: a kv head's few query rows) skips the
 * transposes: each score is a dot product of the row with the key where
 * it lies, in 8 lanes over d summed at the end (ay_scores_rows): in the
 * cache, or in the rows that ops-attn.c converted whole for a key chunk
 * (cllm_cpu_attn_rows_avx2, cllm_attn_unit.kf and .vf): with a few query
 * rows per kv head, transposing the keys costs more than it saves.
 */
#include "backend/cpu/x86/target.h"
#include "backend/cpu/attn.h"
#include "backend/cpu/rows.h"

#if defined(__x86_64__) || defined(__i386__)

CLLM_X86_TARGET_BEGIN("avx2,fma,f16c")

#include <immintrin.h>
#include <math.h>

#include "backend/cpu/x86/attn-kv.h"
#include "backend/cpu/x86/vec-avx2.h"

#define AY_INLINE static inline __attribute__((always_inline))
#define KB        32 /* keys per block */
_Static_assert(KB <= CLLM_ATTN_KB, "the scratch (cllm_attn_fast_scratch) holds CLLM_ATTN_KB keys");

/* 8 values of a row of type t (F32 or F16) at p, as F32. */
AY_INLINE __m256 ay_load8(cllm_type t, const char *p) {
    if (t == CLLM_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AY_INLINE float ay_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AY_INLINE float ay_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The mask of token t for keys j0 + c .. j0 + c + 7, -inf past the block's
 * nk keys (0 without a mask). */
AY_INLINE __m256 ay_mask8(const cllm_tensor *mask, int64_t j0, int64_t c, int64_t nk, int64_t t) {
    const int64_t n = nk - c;
    if (n >= 8) {
        return mask ? ay_load8(mask->type, cllm_cpu_elem(mask, j0 + c, t, 0, 0))
                    : _mm256_setzero_ps();
    }
    float m[8];
    for (int64_t i = 0; i < 8; i++) {
        m[i] = i >= n ? -INFINITY
               : mask ? cllm_cpu_load(mask->type, cllm_cpu_elem(mask, j0 + c + i, t, 0, 0))
                      : 0.0f;
    }
    return _mm256_loadu_ps(m);
}

/* The 4 sums of the lanes of a, b, c and d. */
AY_INLINE __m128 ay_hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* The dot products of nr (1 or 2) query rows with the block's keys where
 * they lie (kr: the nk rows, of type kt_type and element size kes), in 8
 * lanes over d summed at the end; lanes past nk are 0. */
AY_INLINE void ay_scores_rows(int nr, const float *q0, const float *q1, cllm_type kt_type,
                              size_t kes, const char *const *kr, int64_t D, int64_t nk,
                              __m256 s[2][KB / 8]) {
    for (int x = 0; x < KB / 8; x++) {
        __m128 h[2][2];
        for (int y = 0; y < 2; y++) {
            const int64_t j = 8 * x + 4 * y;
            if (j >= nk) {
                h[0][y] = h[1][y] = _mm_setzero_ps();
                continue;
            }
            /* keys past nk repeat the block's first: their lanes are masked */
            const char *k4[4];
            for (int i = 0; i < 4; i++) k4[i] = kr[j + i < nk ? j + i : 0];
            __m256 a[2][4];
            for (int i = 0; i < 4; i++) a[0][i] = a[1][i] = _mm256_setzero_ps();
            for (int64_t d = 0; d < D; d += 8) {
                const __m256 qa = _mm256_loadu_ps(q0 + d), qb = _mm256_loadu_ps(q1 + d);
                for (int i = 0; i < 4; i++) {
                    const __m256 kv = ay_load8(kt_type, k4[i] + (size_t)d * kes);
                    a[0][i] = _mm256_fmadd_ps(kv, qa, a[0][i]);
                    if (nr == 2) a[1][i] = _mm256_fmadd_ps(kv, qb, a[1][i]);
                }
            }
            for (int r = 0; r < nr; r++) h[r][y] = ay_hsum4(a[r][0], a[r][1], a[r][2], a[r][3]);
        }
        for (int r = 0; r < nr; r++) s[r][x] = _mm256_set_m128(h[r][1], h[r][0]);
    }
}

/* The weighted values of a block's nk keys (vf: their rows, Dv apart)
 * added into 8 nv elements of nr (1 or 2) rows' accumulators, first scaled
 * by the rows' softmax corrections c0, c1; pw holds the weights, KB apart.
 * nv is a constant where it is called (4, then 1 for the rest), so the
 * accumulators stay in registers: with nv computed per call they lived on
 * the stack, every FMA waited on a store, and their last store became a
 * memcpy (rep movsq: a tenth of the kernel's time in a SmolLM2 prompt). */
AY_INLINE void ay_values(int nr, int nv, float *acc0, float *acc1, __m256 c0, __m256 c1,
                         const float *pw, const float *vf, int64_t Dv, int64_t nk) {
    __m256 a0[4], a1[4];
    for (int x = 0; x < nv; x++) {
        a0[x] = _mm256_mul_ps(_mm256_loadu_ps(acc0 + 8 * x), c0);
        a1[x] = nr == 2 ? _mm256_mul_ps(_mm256_loadu_ps(acc1 + 8 * x), c1) : a0[x];
    }
    for (int64_t jj = 0; jj < nk; jj++) {
        const __m256 w0 = _mm256_set1_ps(pw[jj]), w1 = _mm256_set1_ps(pw[KB + jj]);
        for (int x = 0; x < nv; x++) {
            const __m256 vv = _mm256_loadu_ps(vf + jj * Dv + 8 * x);
            a0[x] = _mm256_fmadd_ps(w0, vv, a0[x]);
            if (nr == 2) a1[x] = _mm256_fmadd_ps(w1, vv, a1[x]);
        }
    }
    for (int x = 0; x < nv; x++) {
        _mm256_storeu_ps(acc0 + 8 * x, a0[x]);
        if (nr == 2) _mm256_storeu_ps(acc1 + 8 * x, a1[x]);
    }
}

/* Folds one key block into nr (1 or 2) query rows: the scores, as FMAs over
 * d on the transposed keys kt or, without kt, from the cache rows kr
 * (ay_scores_rows), the mask, the online softmax update, the weighted
 * values. pw holds 2 x KB weights. */
AY_INLINE void ay_rows(int nr, const cllm_attn_unit *u, const int64_t *rows, const int64_t *tis,
                       int64_t D, int64_t Dv, int64_t nk, float scale, const float *kt,
                       cllm_type k_type, size_t kes, const char *const *kr, const float *vf,
                       const float *mf, float *pw) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 s[2][KB / 8];
    const float *q0 = u->q + rows[0] * D, *q1 = u->q + rows[nr - 1] * D;
    if (kt) {
        for (int r = 0; r < nr; r++)
            for (int x = 0; x < KB / 8; x++) s[r][x] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d++) {
            const __m256 a0 = _mm256_set1_ps(q0[d]), a1 = _mm256_set1_ps(q1[d]);
            for (int x = 0; x < KB / 8; x++) {
                const __m256 kv = _mm256_loadu_ps(kt + d * KB + 8 * x);
                s[0][x] = _mm256_fmadd_ps(a0, kv, s[0][x]);
                if (nr == 2) s[1][x] = _mm256_fmadd_ps(a1, kv, s[1][x]);
            }
        }
    } else {
        ay_scores_rows(nr, q0, q1, k_type, kes, kr, D, nk, s);
    }
    float cf[2];
    for (int r = 0; r < nr; r++) {
        const int64_t row = rows[r];
        __m256 bm = ninf;
        for (int x = 0; x < KB / 8; x++) {
            s[r][x] = _mm256_fmadd_ps(s[r][x], _mm256_set1_ps(scale),
                                      _mm256_loadu_ps(mf + tis[r] * KB + 8 * x));
            bm = _mm256_max_ps(bm, s[r][x]);
        }
        const float bmax = ay_hmax(bm);
        float *p = pw + r * KB;
        if (bmax == -INFINITY) { /* every key of the block masked for this row */
            for (int x = 0; x < KB / 8; x++) _mm256_storeu_ps(p + 8 * x, _mm256_setzero_ps());
            cf[r] = 1.0f;
            continue;
        }
        const float m_old = u->mx[row], m_new = m_old > bmax ? m_old : bmax;
        cf[r] = expf(m_old - m_new); /* 0 for the first live block */
        __m256 l = _mm256_setzero_ps();
        const __m256 mn = _mm256_set1_ps(m_new);
        for (int x = 0; x < KB / 8; x++) {
            const __m256 e = cllm_exp256(_mm256_sub_ps(s[r][x], mn));
            /* masked keys: exactly 0 */
            const __m256 keep = _mm256_cmp_ps(s[r][x], ninf, _CMP_NEQ_OQ);
            const __m256 pz = _mm256_and_ps(keep, e);
            _mm256_storeu_ps(p + 8 * x, pz);
            l = _mm256_add_ps(l, pz);
        }
        u->sum[row] = u->sum[row] * cf[r] + ay_hsum(l);
        u->mx[row] = m_new;
    }
    float *acc0 = u->acc + rows[0] * Dv, *acc1 = u->acc + rows[nr - 1] * Dv;
    const __m256 c0 = _mm256_set1_ps(cf[0]), c1 = _mm256_set1_ps(cf[nr - 1]);
    int64_t i = 0;
    for (; i + 32 <= Dv; i += 32) ay_values(nr, 4, acc0 + i, acc1 + i, c0, c1, pw, vf + i, Dv, nk);
    for (; i < Dv; i += 8) ay_values(nr, 1, acc0 + i, acc1 + i, c0, c1, pw, vf + i, Dv, nk);
}

/* n elements (a multiple of 8) of row r of type T (a constant where
 * called: the type's branch of cllm_attn_kv8 only), as F32. */
AY_INLINE void ay_row_as(cllm_type T, const char *r, int64_t n, float *out) {
    if (T == CLLM_TYPE_Q8_0 || T == CLLM_TYPE_Q4_0) { /* a block's scale once */
        const size_t bs = T == CLLM_TYPE_Q8_0 ? sizeof(cllm_block_q8_0) : sizeof(cllm_block_q4_0);
        for (int64_t d = 0; d < n; d += 32, r += bs) {
            const __m256 s = cllm_attn_kv_scale(r);
            for (int64_t o = 0; o < 32; o += 8) {
                _mm256_storeu_ps(out + d + o, T == CLLM_TYPE_Q8_0 ? cllm_attn_q8_0_8(r, o, s)
                                                                  : cllm_attn_q4_0_8(r, o, s));
            }
        }
        return;
    }
    for (int64_t d = 0; d < n; d += 8) _mm256_storeu_ps(out + d, cllm_attn_kv8(T, r, d));
}

/* Row j of kv head g of cache t (F16, BF16, Q8_0 or Q4_0), n elements, as
 * F32. */
static void ay_row_f32(const cllm_tensor *t, int64_t j, int64_t g, int64_t n, float *out) {
    const char *r = cllm_cpu_elem(t, 0, j, g, 0);
    switch (t->type) {
    case CLLM_TYPE_Q8_0: ay_row_as(CLLM_TYPE_Q8_0, r, n, out); break;
    case CLLM_TYPE_Q4_0: ay_row_as(CLLM_TYPE_Q4_0, r, n, out); break;
    case CLLM_TYPE_BF16: ay_row_as(CLLM_TYPE_BF16, r, n, out); break;
    default: ay_row_as(CLLM_TYPE_F16, r, n, out); break;
    }
}

void cllm_cpu_attn_rows_avx2(const cllm_tensor *k, const cllm_tensor *v, int64_t k0, int64_t n,
                             float *kf, float *vf) {
    const int64_t D = k->ne[0], Dv = v->ne[0], n_head = k->ne[2];
    for (int64_t j = 0; j < n; j++) {
        /* the rows come from memory (see attn.h); 8 rows ahead, past the
         * chunk's end too: a thread's next chunk is usually the next rows */
        for (int64_t g = 0; g < n_head; g++) cllm_attn_prefetch(k, v, g, k0 + j + 8, 1);
        for (int64_t g = 0; g < n_head; g++) ay_row_f32(k, k0 + j, g, D, kf + (g * n + j) * D);
        for (int64_t g = 0; g < n_head; g++) ay_row_f32(v, k0 + j, g, Dv, vf + (g * n + j) * Dv);
    }
}

void cllm_cpu_attn_unit_avx2(const cllm_tensor *dst, const cllm_attn_unit *u, float *scratch) {
    const cllm_tensor *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const float scale = cllm_get_op_param_f32(dst, 0);
    const int64_t D = k->ne[0], Dv = v->ne[0], n_kv = u->n_kv, nt = u->nt, nh = u->nh;
    /* (one token reads F16 or F32 keys in place; see direct below) */
    const size_t kes = k->type == CLLM_TYPE_F32 ? 4 : 2;
    float *kt = scratch;      /* [D][KB] */
    float *vf = kt + D * KB;  /* [KB][Dv] */
    float *mf = vf + KB * Dv; /* [nt][KB] mask (-inf beyond the keys) */
    float *pw = mf + 8 * KB;  /* [2][KB] weights of two rows */
    /* One token (a generation step) has a few query rows per unit: its dot
     * products read the keys where they lie, in 8 lanes over d, instead of
     * transposing each block first. Only a one-token q: the last unit of a
     * prompt chunk can hold one token too, and summed the other way its
     * token's bits would depend on where the chunk starts (a prompt read in
     * two chunks would not give the logits of one). */
    const bool direct = dst->src[0]->ne[1] == 1;
    const cllm_type kty = u->kf ? CLLM_TYPE_F32 : k->type; /* of the rows kr points to */
    const size_t kres = u->kf ? sizeof(float) : kes;

    for (int64_t j0 = u->k0; j0 < n_kv; j0 += KB) {
        const int64_t nk = CLLM_MIN((int64_t)KB, n_kv - j0);
        bool live[8], any = false;
        for (int64_t ti = 0; ti < nt; ti++) {
            __m256 mx = _mm256_set1_ps(-INFINITY);
            for (int64_t c = 0; c < KB; c += 8) {
                const __m256 mv = ay_mask8(mask, j0, c, nk, u->t0 + ti);
                _mm256_storeu_ps(mf + ti * KB + c, mv);
                mx = _mm256_max_ps(mx, mv);
            }
            live[ti] = ay_hmax(mx) != -INFINITY;
            any = any || live[ti];
        }
        if (!any) continue; /* hidden from every token of the unit */
        /* the next block's rows arrive while this one is computed */
        if (!u->kf) cllm_attn_prefetch(k, v, u->g, j0 + KB, CLLM_MIN((int64_t)KB, n_kv - j0 - KB));

        /* keys: for one token where they lie (ay_scores_rows: the cache,
         * or u->kf), else transposed, F32, lanes beyond nk zero */
        const char *kr[KB];
        for (int64_t c = 0; c < nk && direct; c++) {
            kr[c] = u->kf ? (const char *)(u->kf + (j0 - u->k0 + c) * D)
                          : cllm_cpu_elem(k, 0, j0 + c, u->g, 0);
        }
        for (int64_t c = 0; c < KB && !direct; c += 8) {
            const char *rows[8];
            for (int i = 0; i < 8; i++) {
                rows[i] = c + i < nk ? cllm_cpu_elem(k, 0, j0 + c + i, u->g, 0) : NULL;
            }
            for (int64_t d = 0; d < D; d += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = rows[i] ? cllm_attn_kv8(k->type, rows[i], d) : _mm256_setzero_ps();
                cllm_transpose8_ps(r);
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(kt + (d + i) * KB + c, r[i]);
            }
        }
        const float *vb = u->vf ? u->vf + (j0 - u->k0) * Dv : vf; /* [nk][Dv] */
        for (int64_t jj = 0; jj < nk && !u->vf; jj++) {
            const char *vr = cllm_cpu_elem(v, 0, j0 + jj, u->g, 0);
            for (int64_t i = 0; i < Dv; i += 8)
                _mm256_storeu_ps(vf + jj * Dv + i, cllm_attn_kv8(v->type, vr, i));
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
                    ay_rows(2, u, rows, tis, D, Dv, nk, scale, direct ? NULL : kt, kty, kres, kr,
                            vb, mf, pw);
                    nr = 0;
                }
            }
        }
        if (nr == 1) {
            ay_rows(1, u, rows, tis, D, Dv, nk, scale, direct ? NULL : kt, kty, kres, kr, vb, mf,
                    pw);
        }
    }
}

CLLM_X86_TARGET_END

#else
typedef int cllm_attn_avx2_unused; /* not x86: nothing to build */
#endif
