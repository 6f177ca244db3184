/*
 * Sessions on the real stories260K model of tests/data/models: the logits of
 * every position (all_logits) equal those of token-by-token decoding, their
 * memory is planned exactly, truncating the context equals never having
 * seen the forgotten tokens (bit for bit), failed calls leave the tokens
 * and the logits as they were, and a graph reused for many tokens gives the
 * logits of graphs built for each.
 */
#include "backend/test/test-backend.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char g_path[4096];

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* A stories260K prompt (from the reference outputs) and some more text. */
static const int32_t k_tokens[] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 290,
                                   285, 268, 263, 276, 302, 266, 292, 274, 341, 269};
enum { N_TOKENS = (int)(sizeof(k_tokens) / sizeof(k_tokens[0])) };

static cllm_session *session_or_null(const cllm_model *m, int64_t n_ctx, int64_t n_batch,
                                     bool all_logits) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = n_batch;
    sp.n_threads = 2;
    sp.type_k = sp.type_v = CLLM_TYPE_F32;
    sp.all_logits = all_logits;
    cllm_session *s = NULL;
    const cllm_status st = cllm_session_new(m, &sp, &s);
    CHECKF(st == CLLM_OK, "session: %s", cllm_last_error());
    return st == CLLM_OK ? s : NULL;
}

static float max_abs_diff(const float *a, const float *b, int64_t n) {
    float d = 0.0f;
    for (int64_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* all_logits: row i of one batched decode equals the logits after decoding
 * tokens 0..i one at a time; out-of-range rows are NULL; more than n_batch
 * tokens in one call is an error that changes nothing. */
static void test_all_logits(const cllm_model *m) {
    cllm_session *all = session_or_null(m, 64, 32, true);
    cllm_session *one = session_or_null(m, 64, 32, false);
    if (!all || !one) goto done;
    const int64_t n_vocab = cllm_session_n_vocab(all);

    CHECK(cllm_session_logits_ith(all, 0) == NULL && cllm_session_logits(all) == NULL);
    CHECK(cllm_session_decode(all, k_tokens, N_TOKENS) == CLLM_OK);
    CHECK(cllm_session_logits_ith(all, -1) == cllm_session_logits(all));
    CHECK(cllm_session_logits_ith(all, N_TOKENS - 1) == cllm_session_logits(all));
    CHECK(cllm_session_logits_ith(all, -N_TOKENS) == cllm_session_logits_ith(all, 0));
    CHECK(cllm_session_logits_ith(all, N_TOKENS) == NULL);
    CHECK(cllm_session_logits_ith(all, -N_TOKENS - 1) == NULL);
    float worst = 0.0f;
    for (int i = 0; i < N_TOKENS; i++) {
        CHECK(cllm_session_decode(one, &k_tokens[i], 1) == CLLM_OK);
        const float *row = cllm_session_logits_ith(all, i);
        CHECK(row != NULL);
        if (row) worst = fmaxf(worst, max_abs_diff(row, cllm_session_logits(one), n_vocab));
    }
    /* the same maths; only the kernels' summation order may differ */
    CHECKF(worst < 1e-3f, "all logits vs one at a time: max |diff| %g", (double)worst);

    /* without all_logits only the last token's logits are kept */
    cllm_session_reset(one);
    CHECK(cllm_session_logits(one) == NULL);
    CHECK(cllm_session_decode(one, k_tokens, N_TOKENS) == CLLM_OK);
    CHECK(cllm_session_logits_ith(one, -1) == cllm_session_logits(one));
    CHECK(cllm_session_logits_ith(one, N_TOKENS - 1) == cllm_session_logits(one));
    CHECK(cllm_session_logits_ith(one, 0) == NULL && cllm_session_logits_ith(one, -2) == NULL);
    CHECK(max_abs_diff(cllm_session_logits(one), cllm_session_logits(all), n_vocab) < 1e-3f);

    /* more than n_batch tokens in one call */
    float *before = malloc((size_t)n_vocab * N_TOKENS * sizeof(float));
    int32_t many[40];
    for (int i = 0; i < 40; i++) many[i] = k_tokens[i % N_TOKENS];
    if (before) {
        for (int i = 0; i < N_TOKENS; i++) {
            memcpy(before + (size_t)i * (size_t)n_vocab, cllm_session_logits_ith(all, i),
                   (size_t)n_vocab * sizeof(float));
        }
        cllm_log_set(quiet, NULL);
        CHECK(cllm_session_decode(all, many, 33) == CLLM_ERR_TOO_LARGE);
        cllm_log_set(NULL, NULL);
        CHECK(strstr(cllm_last_error(), "batch size") != NULL);
        CHECK(cllm_session_n_past(all) == N_TOKENS);
        for (int i = 0; i < N_TOKENS; i++) {
            const float *row = cllm_session_logits_ith(all, i);
            CHECK(row && !memcmp(row, before + (size_t)i * (size_t)n_vocab,
                                 (size_t)n_vocab * sizeof(float)));
        }
        free(before);
    }
    /* exactly n_batch tokens is fine, and then every one of them is kept */
    cllm_session_reset(all);
    CHECK(cllm_session_decode(all, many, 32) == CLLM_OK);
    CHECK(cllm_session_logits_ith(all, 31) != NULL && cllm_session_logits_ith(all, 32) == NULL);

    /* memory: planned equals allocated; the compute buffer holds the full
     * logits [n_vocab, n_batch] (the planner may reuse freed bytes for them,
     * so it grows by less than their size). Without all_logits the plan
     * holds a logit row per item of a speculative draft's pass (n_seq +
     * CLLM_SPEC_MAX_DRAFT, at most n_batch): here as many as with them. */
    const cllm_memory_report ra = cllm_session_memory(all), ro = cllm_session_memory(one);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(ra.planned[k] == ra.allocated[k]);
    CHECKF(ra.planned[CLLM_MEM_COMPUTE] >= (size_t)(32 * n_vocab) * sizeof(float) &&
               ra.planned[CLLM_MEM_COMPUTE] >= ro.planned[CLLM_MEM_COMPUTE],
           "compute %zu with all logits, %zu without", ra.planned[CLLM_MEM_COMPUTE],
           ro.planned[CLLM_MEM_COMPUTE]);
done:
    cllm_session_free(all);
    cllm_session_free(one);
}

/* Copies the logits of the last n tokens of the last decode. */
static void save_rows(const cllm_session *s, int n, float *out) {
    const int64_t n_vocab = cllm_session_n_vocab(s);
    for (int i = 0; i < n; i++) {
        const float *row = cllm_session_logits_ith(s, i - n);
        CHECK(row != NULL);
        if (row) memcpy(out + (size_t)i * (size_t)n_vocab, row, (size_t)n_vocab * sizeof(float));
    }
}

/* Decode A, B; truncate to |A|; decode C: the logits of C and of the tokens
 * generated after it are those of a fresh session that decoded A, C. */
static void test_truncate(const cllm_model *m, bool one_call, int64_t n_batch) {
    /* all logits when every call fits a batch, else the last token's */
    const bool all = n_batch >= 16;
    cllm_session *s = session_or_null(m, 64, n_batch, all);
    cllm_session *fresh = session_or_null(m, 64, n_batch, all);
    const int64_t n_vocab = m->hp.n_vocab;
    const int n_a = 6, n_b = 9, n_c = 5, n_rows = all ? n_c : 1;
    const int32_t *a = k_tokens, *b = k_tokens + n_a, *c = k_tokens + n_a + n_b;
    float *got = malloc((size_t)n_vocab * (size_t)n_c * sizeof(float));
    float *want = malloc((size_t)n_vocab * (size_t)n_c * sizeof(float));
    if (!s || !fresh || !got || !want) goto done;

    if (one_call) {
        CHECK(cllm_session_decode(s, a, n_a + n_b) == CLLM_OK);
    } else {
        CHECK(cllm_session_decode(s, a, n_a) == CLLM_OK);
        CHECK(cllm_session_decode(s, b, n_b) == CLLM_OK);
    }
    cllm_log_set(quiet, NULL);
    CHECK(cllm_session_truncate(s, -1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_truncate(s, n_a + n_b + 1) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    CHECK(cllm_session_n_past(s) == n_a + n_b && cllm_session_logits(s) != NULL);
    CHECK(cllm_session_truncate(s, n_a + n_b) == CLLM_OK); /* keeps all */
    CHECK(cllm_session_logits(s) == NULL);
    CHECK(cllm_session_truncate(s, n_a) == CLLM_OK);
    CHECK(cllm_session_n_past(s) == n_a && cllm_session_logits_ith(s, 0) == NULL);
    CHECK(cllm_session_decode(s, c, n_c) == CLLM_OK);
    save_rows(s, n_rows, got);

    CHECK(cllm_session_decode(fresh, a, n_a) == CLLM_OK);
    if (one_call) {
        /* the same batch shapes: A+B's first rows were A's, in one batch */
        CHECK(cllm_session_truncate(fresh, 0) == CLLM_OK);
        CHECK(cllm_session_decode(fresh, a, n_a + n_b) == CLLM_OK);
        CHECK(cllm_session_truncate(fresh, n_a) == CLLM_OK);
    }
    CHECK(cllm_session_decode(fresh, c, n_c) == CLLM_OK);
    save_rows(fresh, n_rows, want);
    const size_t bytes = (size_t)n_vocab * (size_t)n_rows * sizeof(float);
    CHECKF(memcmp(got, want, bytes) == 0, "truncate (one call %d, batch %lld): max |diff| %g",
           one_call, (long long)n_batch, (double)max_abs_diff(got, want, n_vocab * n_rows));

    /* and a fresh session that never saw B at all, fed A then C: the same
     * tokens in the same batches, so the same bits */
    if (!one_call) {
        cllm_session_reset(fresh);
        CHECK(cllm_session_decode(fresh, a, n_a) == CLLM_OK);
        CHECK(cllm_session_decode(fresh, c, n_c) == CLLM_OK);
        save_rows(fresh, n_rows, want);
        CHECK(memcmp(got, want, bytes) == 0);
    }
    /* truncating to 0 is a reset */
    CHECK(cllm_session_truncate(s, 0) == CLLM_OK && cllm_session_n_past(s) == 0);
    CHECK(cllm_session_decode(s, a, n_a) == CLLM_OK);
done:
    free(got);
    free(want);
    cllm_session_free(s);
    cllm_session_free(fresh);
}

/* A decode that fails inside the forward pass (here: the test device that
 * holds the layers stops supporting the ops it was planned with, so the
 * graph no longer fits the planned memory or cannot run) keeps the tokens
 * and the logits of the call before it. */
static void test_failed_decode_keeps_logits(void) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = (size_t)64 << 20;
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 64;
    fp.n_batch = 16;
    fp.n_threads = 2;
    fp.type_k = fp.type_v = CLLM_TYPE_F32;
    fp.use_mmap = false;
    cllm_plan *plan = NULL;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    float *first = NULL;
    cllm_status st = cllm_plan_file(g_path, &fp, &plan);
    CHECKF(st == CLLM_OK, "plan: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    CHECK(plan->devices[0].n_layers == 5);
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    st = cllm_model_load(g_path, &mp, &m);
    CHECKF(st == CLLM_OK, "load: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    s = session_or_null(m, 64, 16, false);
    if (!s) goto done;
    const int64_t n_vocab = cllm_session_n_vocab(s);
    first = malloc((size_t)n_vocab * sizeof(float));
    CHECK(cllm_session_decode(s, k_tokens, 5) == CLLM_OK);
    if (!first || !cllm_session_logits(s)) goto done;
    memcpy(first, cllm_session_logits(s), (size_t)n_vocab * sizeof(float));

    /* the device now supports no op at all */
    cllm_test_device_config off = cfg;
    off.ops_disabled = ~(uint64_t)0;
    CHECK(cllm_test_device_enable(&off, NULL) == CLLM_OK);
    cllm_log_set(quiet, NULL);
    st = cllm_session_decode(s, k_tokens + 5, 15);
    cllm_log_set(NULL, NULL);
    CHECKF(st != CLLM_OK, "decode on a device without ops: status %d", (int)st);
    CHECK(cllm_session_n_past(s) == 5);
    CHECK(cllm_session_logits(s) != NULL &&
          memcmp(first, cllm_session_logits(s), (size_t)n_vocab * sizeof(float)) == 0);

    /* with the ops back, the session goes on as if nothing had happened */
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);
    CHECK(cllm_session_decode(s, k_tokens + 5, 1) == CLLM_OK);
    CHECK(cllm_session_n_past(s) == 6);
done:
    free(first);
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
    cllm_test_device_disable();
}

static int argmax(const float *x, int64_t n) {
    int best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = (int)i;
    }
    return best;
}

/* Cache rows a one-token batch at n_past attends to: padded to 256, at most
 * n_ctx (session.c). */
static int64_t padded_n_kv(int64_t n_past, int64_t n_ctx) {
    const int64_t n_kv = (n_past + 1 + 255) / 256 * 256;
    return n_kv < n_ctx ? n_kv : n_ctx;
}

/* One token from `tok` into both sessions: their logits must be the same
 * bits; the reusing session builds a graph only when the padded shape
 * differs from *last_n_kv (that of the previous one-token call; 0 after
 * another batch), which it updates. Returns the greedy next token. */
static int32_t step_both(cllm_session *reuse, cllm_session *rebuild, int32_t tok,
                         int64_t *last_n_kv) {
    const int64_t n_vocab = cllm_session_n_vocab(reuse), p = cllm_session_n_past(reuse);
    const int64_t n_kv = padded_n_kv(p, cllm_session_n_ctx(reuse));
    const uint64_t builds = cllm_session_graph_builds(reuse);
    CHECK(cllm_session_decode(reuse, &tok, 1) == CLLM_OK);
    CHECK(cllm_session_decode(rebuild, &tok, 1) == CLLM_OK);
    const uint64_t built = cllm_session_graph_builds(reuse) - builds;
    CHECKF(built == (n_kv != *last_n_kv ? 1u : 0u),
           "graph reuse: the token at %lld built %llu graphs (padded shape %lld, last %lld)",
           (long long)p, (unsigned long long)built, (long long)n_kv, (long long)*last_n_kv);
    *last_n_kv = n_kv;
    const float *a = cllm_session_logits(reuse), *b = cllm_session_logits(rebuild);
    if (!a || !b) return 0;
    CHECKF(memcmp(a, b, (size_t)n_vocab * sizeof(float)) == 0,
           "graph reuse: token at %lld: max |diff| %g from a graph built for it", (long long)p,
           (double)max_abs_diff(a, b, n_vocab));
    return (int32_t)argmax(a, n_vocab);
}

/* Token generation reuses one planned graph per padded cache shape: its
 * logits are bit for bit those of a session that builds and plans the graph
 * of every token, across the padding boundaries (255 -> 256, 511 -> 512)
 * and the clamp to n_ctx, after a truncation back over a boundary, and the
 * memory stays exactly as planned. */
static void test_graph_reuse(const cllm_model *m) {
    const int64_t n_ctx = 600;
    cllm_session *reuse = session_or_null(m, n_ctx, 32, false);
    cllm_session *rebuild = session_or_null(m, n_ctx, 32, false);
    if (!reuse || !rebuild) goto done;
    cllm_session_set_graph_reuse(rebuild, false);

    CHECK(cllm_session_decode(reuse, k_tokens, N_TOKENS) == CLLM_OK);
    CHECK(cllm_session_decode(rebuild, k_tokens, N_TOKENS) == CLLM_OK);
    const uint64_t builds0 = cllm_session_graph_builds(reuse);
    CHECK(builds0 == 1 && cllm_session_graph_builds(rebuild) == 1);
    int32_t tok = (int32_t)argmax(cllm_session_logits(reuse), cllm_session_n_vocab(reuse));
    int64_t last_n_kv = 0;
    /* greedy to the end of the context: padded shapes 256, 512, then 600 */
    while (cllm_session_n_past(reuse) < n_ctx && g_checks_failed == 0) {
        tok = step_both(reuse, rebuild, tok, &last_n_kv);
    }
    CHECK(cllm_session_n_past(reuse) == n_ctx);
    CHECKF(cllm_session_graph_builds(reuse) == builds0 + 3,
           "graph reuse: %llu graphs built for three padded shapes",
           (unsigned long long)(cllm_session_graph_builds(reuse) - builds0));
    CHECK(cllm_session_graph_builds(rebuild) == 1 + (uint64_t)(n_ctx - N_TOKENS));

    /* back over the first boundary: the write position moves down, and the
     * same graphs serve again */
    CHECK(cllm_session_truncate(reuse, 250) == CLLM_OK);
    CHECK(cllm_session_truncate(rebuild, 250) == CLLM_OK);
    for (int i = 0; i < 12 && g_checks_failed == 0; i++) {
        tok = step_both(reuse, rebuild, tok, &last_n_kv);
    }
    CHECK(cllm_session_n_past(reuse) == 262);

    /* a batch in between (another shape), then one token at a time again */
    CHECK(cllm_session_decode(reuse, k_tokens, 5) == CLLM_OK);
    CHECK(cllm_session_decode(rebuild, k_tokens, 5) == CLLM_OK);
    last_n_kv = 0;
    for (int i = 0; i < 3 && g_checks_failed == 0; i++) {
        tok = step_both(reuse, rebuild, tok, &last_n_kv);
    }

    const cllm_memory_report r = cllm_session_memory(reuse);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(r.planned[k] == r.allocated[k]);
done:
    cllm_session_free(reuse);
    cllm_session_free(rebuild);
}

/* The same on a model whose layers live on the test device: the reused
 * graph has splits and copies between the two backends, which run again
 * at every token. */
static void test_graph_reuse_split(void) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = (size_t)64 << 20;
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 300;
    fp.n_sessions = 2;
    fp.n_batch = 16;
    fp.n_threads = 2;
    fp.type_k = fp.type_v = CLLM_TYPE_F32;
    fp.use_mmap = false;
    cllm_plan *plan = NULL;
    cllm_model *m = NULL;
    cllm_session *reuse = NULL, *rebuild = NULL;
    cllm_status st = cllm_plan_file(g_path, &fp, &plan);
    CHECKF(st == CLLM_OK, "plan: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    CHECK(plan->devices[0].n_layers == 5);
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    st = cllm_model_load(g_path, &mp, &m);
    CHECKF(st == CLLM_OK, "load: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    reuse = session_or_null(m, 300, 16, false);
    rebuild = session_or_null(m, 300, 16, false);
    if (!reuse || !rebuild) goto done;
    cllm_session_set_graph_reuse(rebuild, false);
    CHECK(cllm_session_decode(reuse, k_tokens, 16) == CLLM_OK);
    CHECK(cllm_session_decode(rebuild, k_tokens, 16) == CLLM_OK);
    int32_t tok = (int32_t)argmax(cllm_session_logits(reuse), cllm_session_n_vocab(reuse));
    int64_t last_n_kv = 0;
    /* over the boundary at 256 and the clamp to 300 */
    while (cllm_session_n_past(reuse) < 300 && g_checks_failed == 0) {
        tok = step_both(reuse, rebuild, tok, &last_n_kv);
    }
    CHECK(cllm_session_n_past(reuse) == 300);
    CHECK(cllm_session_graph_builds(reuse) == 3);
done:
    cllm_session_free(reuse);
    cllm_session_free(rebuild);
    cllm_model_free(m);
    cllm_plan_free(plan);
    cllm_test_device_disable();
}

int main(void) {
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_session");
    refs_model_path(g_path, sizeof(g_path), "stories260K.gguf");
    cllm_model *m = NULL;
    const cllm_status st = cllm_model_load(g_path, NULL, &m);
    CHECKF(st == CLLM_OK, "load %s: %s", g_path, cllm_last_error());
    if (st != CLLM_OK) return check_summary("test_session");
    test_all_logits(m);
    test_truncate(m, false, 32);
    test_truncate(m, true, 32);
    test_truncate(m, false, 4); /* A, B and C each in several batches */
    test_graph_reuse(m);
    cllm_model_free(m);
    test_failed_decode_keeps_logits();
    test_graph_reuse_split();
    return check_summary("test_session");
}
