/*
 * Pipeline stages in one process, without MPI: a model split into layer
 * ranges (cllm_placement_restrict, cllm_model_load_placed), each range
 * loaded on its own, the first stage's activations handed to the next
 * through a session link, gives bit for bit the logits and greedy tokens of
 * the whole model; each stage holds only its weights (mapped or read) and
 * its layers' KV cache, planned == allocated, and the plan of the ranks
 * (cllm_pipe_plan_file, as `cllm plan --ranks N`) predicts each stage's
 * bytes per kind exactly; a budget below a rank's part names that rank.
 * Bad stage calls are errors.
 */
#include "common/check.h"
#include "common/refs.h"
#include "runtime/model.h"
#include "pipeline/pipeline-impl.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_STAGES = 4, N_GEN = 24 };

static char g_path[4096];

/* A chain of stages: stage i > 0 runs what stage i - 1 sends. */
typedef struct chain {
    int n;
    cllm_session *s[MAX_STAGES];
    float *buf[MAX_STAGES]; /* activations out of stage i, or logits of the last */
    int64_t n_vocab, n_embd;
    int64_t sent; /* batches sent by the first stage */
} chain;

static cllm_status chain_send(void *ud, int64_t n_past, int64_t n, int64_t n_outputs, bool want,
                              const float *act) {
    chain *c = ud;
    c->sent++;
    const float *in = act;
    for (int i = 1; i < c->n; i++) {
        CLLM_TRY(cllm_session_stage_run(c->s[i], n_past, n, n_outputs, in, c->buf[i]));
        in = c->buf[i];
    }
    (void)want;
    return CLLM_OK;
}

static cllm_status chain_recv(void *ud, float *logits, int64_t n_outputs) {
    chain *c = ud;
    memcpy(logits, c->buf[c->n - 1], (size_t)(n_outputs * c->n_vocab) * sizeof(float));
    return CLLM_OK;
}

static cllm_session_params stage_params(void) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 8; /* several batches per prompt */
    sp.n_threads = 1;
    sp.kv_type = CLLM_TYPE_F32;
    return sp;
}

/* Greedy generation on a session (a whole model, or a chain's first). */
static void greedy(cllm_session *s, const int32_t *prompt, int n_prompt, int32_t *out) {
    CHECKF(cllm_session_decode(s, prompt, n_prompt) == CLLM_OK, "decode: %s", cllm_last_error());
    const int64_t n_vocab = cllm_session_n_vocab(s);
    for (int i = 0; i < N_GEN; i++) {
        const float *l = cllm_session_logits(s);
        if (!l) return;
        int32_t best = 0;
        for (int64_t v = 1; v < n_vocab; v++) best = l[v] > l[best] ? (int32_t)v : best;
        out[i] = best;
        if (cllm_session_decode(s, &best, 1) != CLLM_OK) return;
    }
}

static void test_split(const cllm_model *whole, int n_stages, bool use_mmap) {
    const int n_layer = (int)whole->hp.n_layer;
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 290, 285, 268};
    const int n_prompt = (int)(sizeof(prompt) / sizeof(prompt[0]));
    cllm_session_params sp = stage_params();

    cllm_session *ref = NULL;
    CHECK(cllm_session_new(whole, &sp, &ref) == CLLM_OK);
    int32_t want[N_GEN] = {0}, got[N_GEN] = {0};
    if (ref) greedy(ref, prompt, n_prompt, want);

    cllm_model *m[MAX_STAGES] = {NULL};
    chain c = {.n = n_stages, .n_vocab = whole->hp.n_vocab, .n_embd = whole->hp.n_embd};
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = use_mmap;
    mp.progress = false;
    /* the plan of the ranks, for the same shape (it reads, never maps) */
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = sp.n_ctx, fp.n_batch = sp.n_batch, fp.n_threads = sp.n_threads;
    fp.kv_type = sp.kv_type;
    cllm_pipe_plan plan;
    const bool planned = cllm_pipe_plan_file(g_path, &fp, n_stages, &plan) == CLLM_OK;
    CHECKF(planned, "plan of %d ranks: %s", n_stages, cllm_last_error());
    for (int i = 0; i < n_stages; i++) {
        int b, e;
        cllm_pipe_split(n_layer, n_stages, i, &b, &e);
        cllm_placement pl;
        CHECK(cllm_placement_init_cpu(&pl, n_layer) == CLLM_OK);
        cllm_placement_restrict(&pl, b, e);
        const cllm_status st = cllm_model_load_placed(g_path, &mp, &pl, &m[i]);
        cllm_placement_free(&pl);
        CHECKF(st == CLLM_OK, "stage %d: %s", i, cllm_last_error());
        if (st != CLLM_OK) goto done;
        CHECK(cllm_session_new(m[i], &sp, &c.s[i]) == CLLM_OK);
        if (!c.s[i]) goto done;
        CHECK(cllm_session_is_last_stage(c.s[i]) == (i == n_stages - 1));
        c.buf[i] =
            malloc((size_t)(sp.n_batch * (whole->hp.n_vocab + whole->hp.n_embd)) * sizeof(float));
        /* its weights only: less than the whole model's */
        const cllm_memory_report r = cllm_session_memory(c.s[i]);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            CHECKF(r.planned[k] == r.allocated[k], "stage %d %s: planned %zu, allocated %zu", i,
                   cllm_mem_kind_str(k), r.planned[k], r.allocated[k]);
        }
        if (planned && !use_mmap) {
            CHECK(plan.ranks[i].layer_begin == b && plan.ranks[i].layer_end == e);
            for (int k = 0; k < CLLM_MEM_COUNT; k++) {
                CHECKF(plan.ranks[i].bytes[k] == r.allocated[k],
                       "rank %d of %d, %s: the plan says %zu, the stage allocated %zu", i, n_stages,
                       cllm_mem_kind_str(k), plan.ranks[i].bytes[k], r.allocated[k]);
            }
        }
        const cllm_memory_report rw = cllm_session_memory(ref);
        CHECKF(r.planned[CLLM_MEM_WEIGHTS] < rw.planned[CLLM_MEM_WEIGHTS] &&
                   r.planned[CLLM_MEM_STATE] < rw.planned[CLLM_MEM_STATE],
               "stage %d of %d holds %zu weight and %zu state bytes, the whole model %zu and %zu",
               i, n_stages, r.planned[CLLM_MEM_WEIGHTS], r.planned[CLLM_MEM_STATE],
               rw.planned[CLLM_MEM_WEIGHTS], rw.planned[CLLM_MEM_STATE]);
    }
    /* a later stage takes activations, and the first needs its link */
    CHECK(cllm_session_decode(c.s[1], prompt, 1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_decode(c.s[0], prompt, 1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_stage_run(c.s[0], 0, 1, 1, c.buf[0], c.buf[1]) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_stage_run(c.s[1], 60, 8, 1, c.buf[0], c.buf[1]) == CLLM_ERR_INVALID_ARG);
    cllm_session_reset(c.s[0]);

    cllm_session_set_link(
        c.s[0], &(cllm_session_link){.ud = &c, .send = chain_send, .recv_logits = chain_recv});
    greedy(c.s[0], prompt, n_prompt, got);
    CHECKF(memcmp(want, got, sizeof(want)) == 0, "%d stages (%s): greedy tokens differ", n_stages,
           use_mmap ? "mapped" : "read");
    CHECK(c.sent == (n_prompt + sp.n_batch - 1) / sp.n_batch + N_GEN);
    /* the logits themselves, bit for bit */
    if (ref && cllm_session_logits(ref) && cllm_session_logits(c.s[0])) {
        CHECK(memcmp(cllm_session_logits(ref), cllm_session_logits(c.s[0]),
                     (size_t)c.n_vocab * sizeof(float)) == 0);
    }
done:
    for (int i = 0; i < n_stages; i++) {
        cllm_session_free(c.s[i]);
        cllm_model_free(m[i]);
        free(c.buf[i]);
    }
    cllm_session_free(ref);
}

/* A budget below one rank's part: CLLM_ERR_TOO_LARGE naming the rank and
 * the bytes short; the plan is still filled in. */
static void test_budget(void) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 256, fp.n_batch = 32, fp.n_threads = 1;
    cllm_pipe_plan plan;
    CHECK(cllm_pipe_plan_file(g_path, &fp, 2, &plan) == CLLM_OK);
    /* between the two ranks' needs: only the larger one is short */
    const size_t lo = CLLM_MIN(plan.ranks[0].total, plan.ranks[1].total);
    const size_t hi = CLLM_MAX(plan.ranks[0].total, plan.ranks[1].total);
    const int big = plan.ranks[0].total > plan.ranks[1].total ? 0 : 1;
    CHECK(lo < hi);
    CHECK(cllm_plan_add_budget(&fp, "cpu", (lo + hi) / 2) == CLLM_OK);
    CHECK(cllm_pipe_plan_file(g_path, &fp, 2, &plan) == CLLM_ERR_TOO_LARGE);
    char want[64];
    snprintf(want, sizeof(want), "rank %d (layers %d-%d)", big, plan.ranks[big].layer_begin,
             plan.ranks[big].layer_end - 1);
    CHECKF(strstr(cllm_last_error(), want) && strstr(cllm_last_error(), "short"), "%s",
           cllm_last_error());
    CHECK(cllm_pipe_plan_file(g_path, &fp, 6, &plan) == CLLM_ERR_INVALID_ARG); /* 5 layers */
}

int main(void) {
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_stage");
    refs_model_path(g_path, sizeof(g_path), "stories260K.gguf");
    cllm_model *whole = NULL;
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    const cllm_status st = cllm_model_load(g_path, &mp, &whole);
    CHECKF(st == CLLM_OK, "load: %s", cllm_last_error());
    if (whole) {
        test_split(whole, 2, true);
        test_split(whole, 3, true);
        test_split(whole, 3, false);
        test_split(whole, 2, false);
        test_budget();
    }
    cllm_model_free(whole);
    return check_summary("test_stage");
}
