/* Tests of the sampler: greedy, top-k/p, min-p, penalties, logit bias, the
 * end-token mask, seeds, statistics. */
#include "common/check.h"
#include "common/refs.h"
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Errors are expected here; keep them off stderr. */
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

/* A test-local PRNG (splitmix64) for making logits. */
static uint64_t g_test_rng = 42;
static double test_uniform(void) {
    uint64_t z = (g_test_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}
static float test_normal(void) {
    double u1 = test_uniform(), u2 = test_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static cllm_sampler_params plain_params(float temperature) {
    cllm_sampler_params p = cllm_sampler_default_params();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    return p;
}

static cllm_sampler *make(const cllm_sampler_params *p, int32_t n_vocab) {
    cllm_sampler *s = NULL;
    cllm_status st = cllm_sampler_new(p, n_vocab, &s);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    CLLM_ASSERT(s != NULL);
    return s;
}

static int32_t sample1(cllm_sampler *s, const float *logits) {
    int32_t tok = 0; /* stays a valid index if sampling fails */
    cllm_status st = cllm_sampler_sample(s, logits, &tok);
    if (st != CLLM_OK) CHECKF(false, "%s", cllm_last_error()); /* count failures only */
    return tok;
}

/* Marks the support of s's distribution for `logits` in `in[n_vocab]`. */
static int32_t support(cllm_sampler *s, const float *logits, int32_t n_vocab, bool *in) {
    const cllm_sampler_cand *c = NULL;
    int32_t n = 0;
    memset(in, 0, (size_t)n_vocab * sizeof(*in));
    cllm_status st = cllm_sampler_probs(s, logits, &c, &n);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st != CLLM_OK) return 0;
    double total = 0;
    int bad = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].id < 0 || c[i].id >= n_vocab || !(c[i].p > 0.0f) || in[c[i].id]) {
            bad++; /* out of range, zero probability or duplicate */
            continue;
        }
        in[c[i].id] = true;
        total += c[i].p;
    }
    CHECKF(bad == 0, "%d bad candidates", bad);
    CHECK_NEAR(total, 1.0, 1e-5);
    return n;
}

static void test_greedy(void) {
    cllm_sampler_params p = plain_params(0.0f);
    cllm_sampler *s = make(&p, 6);
    const float l1[6] = {0.5f, -1.0f, 3.0f, 2.9f, -INFINITY, 1.0f};
    CHECK_EQ_INT(sample1(s, l1), 2);
    const float l2[6] = {1.0f, 4.0f, -2.0f, 4.0f, 4.0f, 0.0f}; /* tie: lowest id */
    CHECK_EQ_INT(sample1(s, l2), 1);
    const float l3[6] = {-INFINITY, -INFINITY, -7.0f, -INFINITY, -7.5f, -INFINITY};
    CHECK_EQ_INT(sample1(s, l3), 2);
    const float l4[6] = {-3.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f};
    CHECK_EQ_INT(sample1(s, l4), 0);

    /* The greedy distribution is the single argmax with p = 1. */
    const cllm_sampler_cand *c = NULL;
    int32_t n = 0;
    CHECK(cllm_sampler_probs(s, l1, &c, &n) == CLLM_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(c[0].id, 2);
    CHECK(c[0].p == 1.0f);
    cllm_sampler_free(s);
}

/* The greedy path against a plain scan: vocabularies that are and are not
 * multiples of the vector width, ties (the lowest id wins) inside and across
 * the vector part and the rest, masks, and the first NaN / +inf reported. */
static int32_t scan_argmax(const float *l, int n, int *bad) {
    int32_t best = -1;
    float m = -INFINITY;
    *bad = -1;
    for (int i = 0; i < n; i++) {
        if (!(l[i] < INFINITY)) {
            *bad = i;
            return -1;
        }
        if (l[i] > m) m = l[i], best = i;
    }
    return best;
}

static void test_greedy_scan(void) {
    enum { VMAX = 1003 };
    static float logits[VMAX];
    const int sizes[] = {1, 15, 16, 17, 64, 1000, 1003};
    cllm_sampler_params p = plain_params(0.0f);
    int checked = 0;
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        const int V = sizes[z];
        cllm_sampler *s = make(&p, V);
        for (int row = 0; row < 60; row++) {
            /* few distinct values: many ties */
            for (int i = 0; i < V; i++) logits[i] = (float)(int)(test_normal() * 2.0f);
            if (row % 5 == 1) logits[V - 1] = 50.0f; /* the largest last */
            if (row % 5 == 2) logits[row % V] = logits[V - 1] = 50.0f;
            if (row % 6 == 3) { /* all masked but one or none */
                for (int i = 0; i < V; i++) logits[i] = -INFINITY;
                if (row % 12 == 3) logits[(row * 7) % V] = -3.0f;
            }
            if (row % 7 == 4) logits[(row * 13) % V] = row % 14 == 4 ? NAN : INFINITY;
            if (row % 9 == 5) logits[0] = -0.0f, logits[V / 2] = 0.0f;
            int bad;
            const int32_t want = scan_argmax(logits, V, &bad);
            int32_t got = -7;
            const cllm_status st = cllm_sampler_sample(s, logits, &got);
            if (bad >= 0 || want < 0) {
                CHECKF(st == CLLM_ERR_INVALID_ARG && got == -7, "V %d row %d: accepted", V, row);
                char what[32];
                if (bad >= 0)
                    snprintf(what, sizeof what, "token %d is", bad);
                else
                    snprintf(what, sizeof what, "-inf");
                CHECKF(strstr(cllm_last_error(), what) != NULL, "V %d row %d: %s", V, row,
                       cllm_last_error());
            } else {
                CHECKF(st == CLLM_OK && got == want, "V %d row %d: %d, want %d", V, row, got, want);
            }
            checked++;
        }
        cllm_sampler_free(s);
    }
    CHECK_EQ_INT(checked, 7 * 60);
}

static void test_top_k1_is_greedy(void) {
    enum { V = 1000 };
    static float logits[V];
    const float temps[] = {0.05f, 0.7f, 1.0f, 3.0f, 100.0f};
    cllm_sampler_params gp = plain_params(0.0f);
    cllm_sampler *greedy = make(&gp, V);
    for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++) {
        cllm_sampler_params p = plain_params(temps[t]);
        p.top_k = 1;
        p.seed = 7 + t;
        cllm_sampler *s = make(&p, V);
        for (int row = 0; row < 20; row++) {
            for (int i = 0; i < V; i++) logits[i] = test_normal() * 3.0f;
            /* Every fourth row has a tie for the maximum. */
            if (row % 4 == 0) logits[V - 3] = logits[17] = 20.0f;
            const int32_t want = sample1(greedy, logits);
            for (int k = 0; k < 5; k++) CHECK_EQ_INT(sample1(s, logits), want);
        }
        cllm_sampler_free(s);
    }
    cllm_sampler_free(greedy);
}

static void test_seeds(void) {
    enum { V = 300, N = 200 };
    static float logits[V];
    for (int i = 0; i < V; i++) logits[i] = test_normal();
    int32_t a[N], b[N], c[N], d[N];

    cllm_sampler_params p = cllm_sampler_default_params();
    p.temperature = 1.5f;
    p.top_k = 100;
    p.top_p = 0.98f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.1f;
    p.seed = 1234;
    cllm_sampler *s1 = make(&p, V), *s2 = make(&p, V);
    p.seed = 1235;
    cllm_sampler *s3 = make(&p, V);
    for (int i = 0; i < N; i++) {
        a[i] = sample1(s1, logits);
        b[i] = sample1(s2, logits);
        c[i] = sample1(s3, logits);
        cllm_sampler_accept(s1, a[i]);
        cllm_sampler_accept(s2, b[i]);
        cllm_sampler_accept(s3, c[i]);
    }
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    int same = 0;
    for (int i = 0; i < N; i++) same += a[i] == c[i];
    CHECKF(same < N / 4, "seeds 1234 and 1235 agree on %d of %d tokens", same, N);

    /* Reset replays the same sequence. */
    cllm_sampler_reset(s1);
    for (int i = 0; i < N; i++) {
        d[i] = sample1(s1, logits);
        cllm_sampler_accept(s1, d[i]);
    }
    CHECK(memcmp(a, d, sizeof(a)) == 0);
    cllm_sampler_free(s1);
    cllm_sampler_free(s2);
    cllm_sampler_free(s3);
}

/* Pearson's chi-square of `counts` against probabilities `p` over n bins. */
static double chi_square(const int *counts, const double *p, int n, int total) {
    double chi2 = 0;
    for (int i = 0; i < n; i++) {
        const double e = p[i] * total;
        if (e == 0) {
            CHECKF(counts[i] == 0, "bin %d has probability 0 but %d samples", i, counts[i]);
            continue;
        }
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi2;
}

static void test_frequencies(void) {
    enum { V = 8, N = 100000 };
    const float logits[V] = {1.0f, 0.2f, -0.5f, 2.0f, 1.5f, -3.0f, 0.0f, 0.7f};
    const float temps[] = {0.5f, 1.0f, 2.5f};
    for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++) {
        cllm_sampler_params p = plain_params(temps[t]);
        p.seed = 99 + t;
        cllm_sampler *s = make(&p, V);
        int counts[V] = {0};
        for (int i = 0; i < N; i++) counts[sample1(s, logits)]++;
        double want[V], z = 0;
        for (int i = 0; i < V; i++) z += want[i] = exp(logits[i] / temps[t]);
        for (int i = 0; i < V; i++) want[i] /= z;
        /* 7 degrees of freedom: P(chi2 > 29.9) = 1e-4. The seed is fixed, so
         * this is deterministic; the bound says the sampler is unbiased. */
        const double chi2 = chi_square(counts, want, V, N);
        CHECKF(chi2 < 29.9, "temperature %g: chi-square %.2f", (double)temps[t], chi2);

        /* cllm_sampler_probs gives the same distribution. */
        const cllm_sampler_cand *c = NULL;
        int32_t n = 0;
        CHECK(cllm_sampler_probs(s, logits, &c, &n) == CLLM_OK);
        CHECK_EQ_INT(n, V);
        for (int32_t i = 0; i < n; i++) CHECK_NEAR(c[i].p, want[c[i].id], 1e-6);
        cllm_sampler_free(s);
    }

    /* With top-k, top-p and min-p the draw follows the renormalised support. */
    cllm_sampler_params p = plain_params(1.0f);
    p.top_k = 6;    /* drops ids 2 (-0.5) and 5 (-3.0) */
    p.top_p = 0.9f; /* keeps ids 3, 4, 0, 7, 1 (cumulative 0.947 >= 0.9, 0.882 before) */
    p.min_p = 0.2f; /* drops id 1: exp(0.2 - 2.0) = 0.165 < 0.2 <= exp(0.7 - 2.0) */
    p.seed = 5;
    cllm_sampler *s = make(&p, V);
    int counts[V] = {0};
    for (int i = 0; i < N; i++) counts[sample1(s, logits)]++;
    const int keep[] = {3, 4, 0, 7};
    double want[V] = {0}, z = 0;
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        z += want[keep[i]] = exp(logits[keep[i]]);
    }
    for (int i = 0; i < V; i++) want[i] /= z;
    const double chi2 = chi_square(counts, want, V, N);
    CHECKF(chi2 < 21.1, "filtered: chi-square %.2f", chi2); /* 3 dof, P = 1e-4 */
    cllm_sampler_free(s);
}

static void test_top_p_small(void) {
    /* Probabilities 1/2, 1/4, 1/8, 1/16, 1/32, 1/32 at shuffled ids. */
    enum { V = 6 };
    const int ids[V] = {4, 0, 5, 2, 1, 3};
    const double probs[V] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.03125};
    float logits[V];
    for (int r = 0; r < V; r++) logits[ids[r]] = (float)log(probs[r]);
    struct {
        float top_p;
        int n_keep;
    } cases[] = {{0.01f, 1}, {0.49f, 1}, {0.51f, 2}, {0.7f, 2}, {0.8f, 3},
                 {0.9f, 4},  {0.95f, 5}, {0.99f, 6}, {1.0f, 6}};
    bool in[V];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cllm_sampler_params p = plain_params(1.0f);
        p.top_p = cases[k].top_p;
        cllm_sampler *s = make(&p, V);
        CHECK_EQ_INT(support(s, logits, V, in), cases[k].n_keep);
        for (int r = 0; r < V; r++) {
            CHECKF(in[ids[r]] == (r < cases[k].n_keep), "top_p %g, rank %d", (double)cases[k].top_p,
                   r);
        }
        /* Every draw lies in the support. */
        for (int i = 0; i < 200; i++) CHECK(in[sample1(s, logits)]);
        cllm_sampler_free(s);
    }
}

static void test_min_p(void) {
    /* Logits 0, -1, ..., -7: p_i / p_max = e^-i. */
    enum { V = 8 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[(i * 3) % V] = -(float)i;
    struct {
        float temp, min_p;
        int n_keep;
    } cases[] = {{1.0f, 0.0f, 8}, {1.0f, 0.05f, 3}, {1.0f, 0.3f, 2},
                 {1.0f, 0.5f, 1}, {1.0f, 1.0f, 1},  {2.0f, 0.3f, 3}, /* e^(-i/2) >= 0.3: i <= 2 */
                 {0.5f, 0.1f, 2}};                                   /* e^(-2i) >= 0.1: i <= 1 */
    bool in[V];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cllm_sampler_params p = plain_params(cases[k].temp);
        p.min_p = cases[k].min_p;
        cllm_sampler *s = make(&p, V);
        CHECK_EQ_INT(support(s, logits, V, in), cases[k].n_keep);
        for (int i = 0; i < V; i++) {
            CHECKF(in[(i * 3) % V] == (i < cases[k].n_keep), "min_p %g temp %g, rank %d",
                   (double)cases[k].min_p, (double)cases[k].temp, i);
        }
        cllm_sampler_free(s);
    }
}

static void test_top_k_support(void) {
    enum { V = 5000 };
    static float logits[V];
    static bool in[V];
    for (int i = 0; i < V; i++) logits[i] = (float)((i * 7919) % V); /* distinct, shuffled */
    const int ks[] = {1, 2, 40, 999, V - 1, V, V + 10};
    for (size_t k = 0; k < sizeof(ks) / sizeof(ks[0]); k++) {
        cllm_sampler_params p = plain_params(1000.0f); /* flat enough that nothing underflows */
        p.top_k = ks[k];
        cllm_sampler *s = make(&p, V);
        const int want = ks[k] < V ? ks[k] : V;
        CHECK_EQ_INT(support(s, logits, V, in), want);
        int bad = 0;
        for (int i = 0; i < V; i++) bad += in[i] != (logits[i] >= (float)(V - want));
        CHECKF(bad == 0, "top_k %d: %d tokens misplaced", ks[k], bad);
        cllm_sampler_free(s);
    }
}

/* Reference nucleus over a large vocabulary by a full sort, in the sampler's
 * own arithmetic (float weights, double sums). */
typedef struct ref_cand {
    float w;
    int32_t id;
} ref_cand;
static int ref_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->w != b->w) return a->w > b->w ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static void check_nucleus_large(const float *logits, int32_t V, float temp, float top_p,
                                ref_cand *ref, bool *in) {
    float lmax = -INFINITY;
    for (int32_t i = 0; i < V; i++) lmax = logits[i] > lmax ? logits[i] : lmax;
    double sum = 0;
    for (int32_t i = 0; i < V; i++) {
        ref[i].w = expf((logits[i] - lmax) / temp);
        ref[i].id = i;
        sum += ref[i].w;
    }
    qsort(ref, (size_t)V, sizeof(*ref), ref_cmp);
    double cum = 0;
    int32_t keep = V;
    for (int32_t i = 0; i < V; i++) {
        cum += ref[i].w;
        if (cum >= (double)top_p * sum) {
            keep = i + 1;
            break;
        }
    }
    while (keep > 0 && ref[keep - 1].w == 0.0f) keep--; /* underflowed weights are dropped */

    cllm_sampler_params p = plain_params(temp);
    p.top_p = top_p;
    cllm_sampler *s = make(&p, V);
    const int32_t n = support(s, logits, V, in);
    CHECKF(n == keep, "temp %g top_p %g: %d kept, reference %d", (double)temp, (double)top_p, n,
           keep);
    int bad = 0;
    for (int32_t i = 0; i < keep; i++) bad += !in[ref[i].id];
    CHECKF(bad == 0, "temp %g top_p %g: %d nucleus tokens missing", (double)temp, (double)top_p,
           bad);
    cllm_sampler_free(s);
}

static void test_top_p_large(void) {
    enum { V = 150000 };
    float *logits = malloc(V * sizeof(float));
    ref_cand *ref = malloc(V * sizeof(ref_cand));
    bool *in = malloc(V * sizeof(bool));
    CLLM_ASSERT(logits && ref && in);
    for (int i = 0; i < V; i++) logits[i] = test_normal() * 2.0f;
    for (int i = 0; i < 30; i++) logits[(i * 4099) % V] += 9.0f; /* a peaked head */
    /* Peaked (a high threshold suffices), flatter (lower thresholds), and
     * nearly uniform (the safe threshold). */
    check_nucleus_large(logits, V, 1.0f, 0.9f, ref, in);
    check_nucleus_large(logits, V, 0.3f, 0.5f, ref, in);
    check_nucleus_large(logits, V, 2.0f, 0.9f, ref, in);
    check_nucleus_large(logits, V, 50.0f, 0.95f, ref, in);
    check_nucleus_large(logits, V, 1e4f, 0.3f, ref, in);
    free(logits);
    free(ref);
    free(in);
}

static void test_repeat_penalty(void) {
    enum { V = 8 };
    float logits[V] = {2.0f, 1.9f, 0.0f, -1.0f, -1.1f, 0.5f, 0.3f, -5.0f};
    float copy[V];
    memcpy(copy, logits, sizeof(logits));

    cllm_sampler_params p = plain_params(0.0f);
    p.repeat_penalty = 1.2f;
    p.repeat_last_n = 3;
    cllm_sampler *s = make(&p, V);
    CHECK_EQ_INT(sample1(s, logits), 0);
    CHECK(cllm_sampler_accept(s, 0) == CLLM_OK); /* 2.0 / 1.2 = 1.67 < 1.9 */
    CHECK_EQ_INT(sample1(s, logits), 1);
    CHECK(cllm_sampler_accept(s, 1) == CLLM_OK); /* 1.9 / 1.2 = 1.58 < 1.67 */
    CHECK_EQ_INT(sample1(s, logits), 0);
    CHECK(cllm_sampler_accept(s, 6) == CLLM_OK);
    CHECK(cllm_sampler_accept(s, 6) == CLLM_OK); /* window {1, 6, 6}: 0 fell out */
    CHECK_EQ_INT(sample1(s, logits), 0);
    CHECK(memcmp(logits, copy, sizeof(logits)) == 0); /* caller's logits untouched */
    cllm_sampler_reset(s);                            /* empties the window */
    CHECK_EQ_INT(sample1(s, logits), 0);
    cllm_sampler_free(s);

    /* Negative logits are multiplied: -1.0 * 1.2 = -1.2 < -1.1. */
    const float neg[V] = {-INFINITY, -INFINITY, -INFINITY, -1.0f, -1.1f, -INFINITY, -9.0f, -5.0f};
    s = make(&p, V);
    CHECK_EQ_INT(sample1(s, neg), 3);
    cllm_sampler_accept(s, 3);
    CHECK_EQ_INT(sample1(s, neg), 4);
    cllm_sampler_free(s);

    /* A token repeated in the window is penalised once: exact probabilities. */
    p = plain_params(1.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 64;
    s = make(&p, V);
    for (int i = 0; i < 5; i++) cllm_sampler_accept(s, 0);
    cllm_sampler_accept(s, 4);
    const cllm_sampler_cand *c = NULL;
    int32_t n = 0;
    CHECK(cllm_sampler_probs(s, logits, &c, &n) == CLLM_OK);
    CHECK_EQ_INT(n, V);
    float pen[V];
    memcpy(pen, logits, sizeof(pen));
    pen[0] = 2.0f / 2.0f;
    pen[4] = -1.1f * 2.0f;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(pen[i]);
    for (int32_t i = 0; i < n; i++) CHECK_NEAR(c[i].p, exp(pen[c[i].id]) / z, 1e-6);
    cllm_sampler_free(s);

    /* A penalty < 1 rewards repetition. */
    p = plain_params(0.0f);
    p.repeat_penalty = 0.5f;
    s = make(&p, V);
    cllm_sampler_accept(s, 5); /* 0.5 / 0.5 = 1.0 < 2.0: still 0 */
    CHECK_EQ_INT(sample1(s, logits), 0);
    cllm_sampler_accept(s, 1); /* 1.9 / 0.5 = 3.8 */
    CHECK_EQ_INT(sample1(s, logits), 1);
    cllm_sampler_free(s);
}

static void test_masks_and_bad_logits(void) {
    enum { V = 50 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = -INFINITY;
    logits[37] = -100.0f;

    const float temps[] = {0.0f, 0.5f, 1.0f, 10.0f};
    for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++) {
        cllm_sampler_params p = cllm_sampler_default_params(); /* top-k, top-p, min-p on */
        p.temperature = temps[t];
        cllm_sampler *s = make(&p, V);
        for (int i = 0; i < 50; i++) CHECK_EQ_INT(sample1(s, logits), 37);
        cllm_sampler_free(s);
    }

    /* A weight that underflows to 0 is not part of the distribution. */
    {
        const float far[4] = {0.0f, -200.0f, -1.0f, -INFINITY};
        cllm_sampler_params fp = plain_params(1.0f);
        cllm_sampler *fs = make(&fp, 4);
        bool in[4];
        CHECK_EQ_INT(support(fs, far, 4, in), 2);
        CHECK(in[0] && !in[1] && in[2] && !in[3]);
        cllm_sampler_free(fs);
    }

    cllm_sampler_params p = plain_params(1.0f);
    p.seed = 3;
    cllm_sampler *s = make(&p, V), *ref = make(&p, V);
    float ok[V];
    for (int i = 0; i < V; i++) ok[i] = (float)(i % 7);
    int32_t tok = 12345;

    logits[37] = -INFINITY; /* all masked */
    CHECK(cllm_sampler_sample(s, logits, &tok) == CLLM_ERR_INVALID_ARG);
    CHECK(tok == 12345);
    CHECK(strstr(cllm_last_error(), "-inf") != NULL);
    logits[3] = NAN;
    CHECK(cllm_sampler_sample(s, logits, &tok) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "NaN") != NULL);
    logits[3] = INFINITY;
    CHECK(cllm_sampler_sample(s, logits, &tok) == CLLM_ERR_INVALID_ARG);
    const cllm_sampler_cand *c = NULL;
    int32_t n = -1;
    CHECK(cllm_sampler_probs(s, logits, &c, &n) == CLLM_ERR_INVALID_ARG);
    CHECK(c == NULL && n == -1);
    CHECK(tok == 12345);

    /* Failures did not advance the PRNG. */
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(sample1(s, ok), sample1(ref, ok));

    CHECK(cllm_sampler_accept(s, -1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_sampler_accept(s, V) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_sampler_accept(s, V - 1) == CLLM_OK);
    cllm_sampler_free(s);
    cllm_sampler_free(ref);
}

static void test_invalid_params(void) {
    const cllm_sampler_params d = cllm_sampler_default_params();
    static char dummy;
    cllm_sampler *const sentinel = (cllm_sampler *)(void *)&dummy; /* outputs stay untouched */
    cllm_sampler *s = NULL;
    CHECK(cllm_sampler_new(&d, 10, &s) == CLLM_OK);
    cllm_sampler_free(s);

    struct {
        const char *field;
        cllm_sampler_params p;
        int32_t n_vocab;
    } cases[16];
    int n = 0;
#define BAD(fld, val)                                                                              \
    do {                                                                                           \
        cases[n].field = #fld;                                                                     \
        cases[n].p = d;                                                                            \
        cases[n].p.fld = (val);                                                                    \
        cases[n].n_vocab = 10;                                                                     \
        n++;                                                                                       \
    } while (0)
    BAD(temperature, -0.1f);
    BAD(temperature, NAN);
    BAD(temperature, INFINITY);
    BAD(top_k, -1);
    BAD(top_p, 0.0f);
    BAD(top_p, 1.01f);
    BAD(top_p, NAN);
    BAD(min_p, -0.01f);
    BAD(min_p, 1.5f);
    BAD(repeat_penalty, 0.0f);
    BAD(repeat_penalty, -1.0f);
    BAD(repeat_penalty, INFINITY);
    BAD(repeat_last_n, -1);
    BAD(repeat_last_n, CLLM_SAMPLER_MAX_WINDOW + 1);
#undef BAD
    cases[n].field = "n_vocab";
    cases[n].p = d;
    cases[n].n_vocab = 0;
    n++;
    for (int i = 0; i < n; i++) {
        cllm_sampler *out = sentinel;
        cllm_status st = cllm_sampler_new(&cases[i].p, cases[i].n_vocab, &out);
        CHECKF(st == CLLM_ERR_INVALID_ARG, "case %d (%s): status %d", i, cases[i].field, st);
        CHECKF(out == sentinel, "case %d: output touched", i);
        CHECKF(strstr(cllm_last_error(), cases[i].field) != NULL, "case %d: message '%s'", i,
               cllm_last_error());
    }

    /* Edge values that are valid. */
    cllm_sampler_params e = d;
    e.top_p = 1.0f;
    e.min_p = 1.0f;
    e.top_k = 1000;
    e.repeat_last_n = 0;
    e.repeat_penalty = 3.0f;
    CHECK(cllm_sampler_new(&e, 1, &s) == CLLM_OK);
    const float one = -2.0f;
    CHECK_EQ_INT(sample1(s, &one), 0);
    CHECK(cllm_sampler_accept(s, 0) == CLLM_OK); /* no window: accepted and ignored */
    CHECK_EQ_INT(sample1(s, &one), 0);
    cllm_sampler_free(s);
    cllm_sampler_free(NULL);
}

/* The probabilities cllm_sampler_probs gives, indexed by id (0 for tokens
 * out of the distribution). */
static void probs_by_id(cllm_sampler *s, const float *logits, int32_t n_vocab, double *p) {
    const cllm_sampler_cand *c = NULL;
    int32_t n = 0;
    memset(p, 0, (size_t)n_vocab * sizeof(*p));
    CHECKF(cllm_sampler_probs(s, logits, &c, &n) == CLLM_OK, "%s", cllm_last_error());
    for (int32_t i = 0; i < n; i++) p[c[i].id] = c[i].p;
}

/* softmax(l) into p (double). */
static void softmax_ref(const double *l, int32_t n, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int32_t i = 0; i < n; i++) sum += (p[i] = isinf(l[i]) ? 0 : exp(l[i] - mx));
    for (int32_t i = 0; i < n; i++) p[i] /= sum;
}

/* Logit bias: -inf is never sampled, a large bias always; a finite bias
 * moves the distribution by exp(bias), as the formula says. */
static void test_logit_bias(void) {
    enum { V = 32 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = test_normal();
    logits[7] = 5.0f; /* the likeliest by far */
    /* -inf on the best: greedy and sampling never take it */
    cllm_logit_bias ban = {7, -INFINITY};
    cllm_sampler_params p = plain_params(0.0f);
    p.logit_bias = &ban, p.n_logit_bias = 1;
    cllm_sampler *s = make(&p, V);
    CHECK(sample1(s, logits) != 7);
    cllm_sampler_free(s);
    p.temperature = 1.0f;
    s = make(&p, V);
    int hits = 0;
    for (int i = 0; i < 2000; i++) hits += sample1(s, logits) == 7;
    CHECK_EQ_INT(hits, 0);
    cllm_sampler_free(s);
    /* +100 on the least likely: always it, greedy or sampled */
    int worst = 0;
    for (int i = 1; i < V; i++) worst = logits[i] < logits[worst] ? i : worst;
    cllm_logit_bias force = {worst, 100.0f};
    p.logit_bias = &force;
    s = make(&p, V);
    hits = 0;
    for (int i = 0; i < 500; i++) hits += sample1(s, logits) == worst;
    CHECK_EQ_INT(hits, 500);
    cllm_sampler_free(s);
    /* finite biases: the probabilities are softmax(l + bias) */
    cllm_logit_bias two[2] = {{3, 1.5f}, {11, -2.25f}}; /* not sorted by id: either order */
    p.logit_bias = two, p.n_logit_bias = 2;
    s = make(&p, V);
    double got[V], want[V], l[V];
    probs_by_id(s, logits, V, got);
    for (int i = 0; i < V; i++) l[i] = logits[i];
    l[3] += 1.5, l[11] -= 2.25;
    softmax_ref(l, V, want);
    double err = 0;
    for (int i = 0; i < V; i++) err = fmax(err, fabs(got[i] - want[i]));
    CHECKF(err < 1e-5, "biased distribution off by %g", err);
    cllm_sampler_free(s);
    /* the array is copied: the caller's may change after cllm_sampler_new */
    cllm_logit_bias mine = {7, -INFINITY};
    p = plain_params(0.0f);
    p.logit_bias = &mine, p.n_logit_bias = 1;
    s = make(&p, V);
    mine.id = 0;
    CHECK(sample1(s, logits) != 7);
    cllm_sampler_free(s);
    /* bad biases, each named */
    static const struct {
        cllm_logit_bias b[2];
        int32_t n;
        const char *needle;
    } bad[] = {
        {{{V, 1.0f}}, 1, "logit_bias[0]"},           {{{-1, 1.0f}}, 1, "logit_bias[0]"},
        {{{1, 1.0f}, {2, NAN}}, 2, "logit_bias[1]"}, {{{1, INFINITY}}, 1, "logit_bias[0]"},
        {{{4, 1.0f}, {4, 2.0f}}, 2, "given twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = plain_params(1.0f);
        p.logit_bias = bad[i].b, p.n_logit_bias = bad[i].n;
        cllm_sampler *t = NULL;
        CHECKF(cllm_sampler_new(&p, V, &t) == CLLM_ERR_INVALID_ARG && t == NULL &&
                   strstr(cllm_last_error(), bad[i].needle),
               "case %zu: %s", i, cllm_last_error());
    }
    p = plain_params(1.0f);
    p.n_logit_bias = 1; /* without an array */
    CHECK(cllm_sampler_params_check(&p, V) == CLLM_ERR_INVALID_ARG);
}

/* OpenAI's penalties: over the generated tokens only (not the prompt's),
 * l -= frequency * count + presence, then the rest of the chain; greedy
 * turns away from a repeated token; reset forgets the counts. */
static void test_openai_penalties(void) {
    enum { V = 16 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = test_normal();
    const float f = 0.75f, pp = 0.5f;
    cllm_sampler_params p = plain_params(1.0f);
    p.frequency_penalty = f, p.presence_penalty = pp;
    cllm_sampler *s = make(&p, V);
    const int32_t prompt[] = {9, 9, 9, 9};
    CHECK(cllm_sampler_accept_prompt(s, prompt, 4) == CLLM_OK);
    const int32_t gen[] = {3, 3, 5, 3};
    for (int i = 0; i < 4; i++) CHECK(cllm_sampler_accept(s, gen[i]) == CLLM_OK);
    double got[V], want[V], l[V];
    probs_by_id(s, logits, V, got);
    for (int i = 0; i < V; i++) l[i] = logits[i];
    l[3] -= 3 * f + pp; /* three times */
    l[5] -= 1 * f + pp; /* once; 9 only in the prompt: untouched */
    softmax_ref(l, V, want);
    double err = 0;
    for (int i = 0; i < V; i++) err = fmax(err, fabs(got[i] - want[i]));
    CHECKF(err < 1e-5, "penalised distribution off by %g", err);
    /* reset: the counts are gone */
    cllm_sampler_reset(s);
    probs_by_id(s, logits, V, got);
    for (int i = 0; i < V; i++) l[i] = logits[i];
    softmax_ref(l, V, want);
    err = 0;
    for (int i = 0; i < V; i++) err = fmax(err, fabs(got[i] - want[i]));
    CHECKF(err < 1e-5, "after reset off by %g", err);
    cllm_sampler_free(s);
    /* greedy: a presence penalty larger than the gap moves off the best */
    float two[V];
    for (int i = 0; i < V; i++) two[i] = -5.0f;
    two[1] = 1.0f, two[2] = 0.5f;
    p = plain_params(0.0f);
    p.presence_penalty = 0.6f;
    s = make(&p, V);
    CHECK_EQ_INT(sample1(s, two), 1);
    CHECK(cllm_sampler_accept(s, 1) == CLLM_OK);
    CHECK_EQ_INT(sample1(s, two), 2);
    cllm_sampler_free(s);
    /* a negative one draws a token back (OpenAI allows [-2, 2]) */
    p.presence_penalty = -0.6f;
    s = make(&p, V);
    CHECK(cllm_sampler_accept(s, 2) == CLLM_OK);
    CHECK_EQ_INT(sample1(s, two), 2);
    cllm_sampler_free(s);
    /* bad values, each named; accept_prompt checks every token first */
    p = plain_params(1.0f);
    p.frequency_penalty = NAN;
    CHECK(cllm_sampler_params_check(&p, V) == CLLM_ERR_INVALID_ARG &&
          strstr(cllm_last_error(), "frequency_penalty"));
    p.frequency_penalty = 0, p.presence_penalty = INFINITY;
    CHECK(cllm_sampler_params_check(&p, V) == CLLM_ERR_INVALID_ARG &&
          strstr(cllm_last_error(), "presence_penalty"));
    p = plain_params(1.0f);
    s = make(&p, V);
    const int32_t bad[] = {1, V};
    CHECK(cllm_sampler_accept_prompt(s, bad, 2) == CLLM_ERR_INVALID_ARG);
    cllm_sampler_free(s);
}

/* ignore_eos: the model's end tokens are never sampled; it needs the model
 * (cllm_sampler_new_model). */
static void test_ignore_eos(void) {
    cllm_sampler_params p = plain_params(0.0f);
    p.ignore_eos = true;
    cllm_sampler *s = NULL;
    CHECK(cllm_sampler_new(&p, 512, &s) == CLLM_ERR_INVALID_ARG && s == NULL &&
          strstr(cllm_last_error(), "ignore_eos"));
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return;
    char path[4096];
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL, &m) !=
        CLLM_OK) {
        CHECKF(false, "%s", cllm_last_error());
        return;
    }
    const int32_t V = cllm_model_n_vocab(m), eos = cllm_token_eos(m);
    float *logits = malloc((size_t)V * sizeof(float));
    for (int32_t i = 0; i < V; i++) logits[i] = test_normal();
    logits[eos] = 50.0f; /* by far the likeliest */
    CHECK(cllm_sampler_new_model(&p, m, &s) == CLLM_OK);
    if (s) {
        const int32_t t = sample1(s, logits);
        CHECKF(t != eos && !cllm_token_is_eog(m, t), "sampled %d", t);
        cllm_sampler_free(s);
    }
    p.temperature = 1.0f;
    CHECK(cllm_sampler_new_model(&p, m, &s) == CLLM_OK);
    int hits = 0;
    for (int i = 0; s && i < 500; i++) hits += cllm_token_is_eog(m, sample1(s, logits));
    CHECK_EQ_INT(hits, 0);
    cllm_sampler_free(s);
    /* without it, the end token wins */
    p = plain_params(0.0f);
    CHECK(cllm_sampler_new_model(&p, m, &s) == CLLM_OK);
    if (s) CHECK_EQ_INT(sample1(s, logits), eos);
    cllm_sampler_free(s);
    free(logits);
    cllm_model_free(m);
}

int main(void) {
    cllm_log_set(quiet_log, NULL);
    test_greedy();
    test_greedy_scan();
    test_top_k1_is_greedy();
    test_seeds();
    test_frequencies();
    test_top_p_small();
    test_min_p();
    test_top_k_support();
    test_top_p_large();
    test_repeat_penalty();
    test_masks_and_bad_logits();
    test_invalid_params();
    test_logit_bias();
    test_openai_penalties();
    test_ignore_eos();
    return check_summary("test_sampler");
}
