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
 *
 * Several sequences: stages of 3 sequences each run the same program
 * (cllm_session_decode_seqs with prompt chunks, steps of a token each, a
 * step that a chunk joins, truncations) as a local session of 3 sequences,
 * with the same positions and logits bit for bit after every call; the
 * plan of the ranks measures those sessions exactly; a link that fails
 * mid-step leaves every sequence as it was.
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
    int64_t sent;    /* batches sent by the first stage */
    int64_t waits;   /* waits called */
    int asked;       /* logits asked since the last wait */
    int64_t fail_at; /* the send that fails (-1: none) */
} chain;

static cllm_status chain_send(void *ud, int seq, int64_t n_past, int64_t n, int64_t n_outputs,
                              const float *act, float *logits) {
    chain *c = ud;
    if (c->sent == c->fail_at) return cllm_error(CLLM_ERR_IO, "chain: a send fails");
    c->sent++;
    const float *in = act;
    for (int i = 1; i < c->n; i++) {
        CLLM_TRY(cllm_session_stage_run(c->s[i], seq, n_past, n, n_outputs, in, c->buf[i]));
        in = c->buf[i];
    }
    if (logits) {
        memcpy(logits, c->buf[c->n - 1], (size_t)(n_outputs * c->n_vocab) * sizeof(float));
        c->asked++;
    }
    return CLLM_OK;
}

static cllm_status chain_wait(void *ud) {
    chain *c = ud;
    c->waits++;
    c->asked = 0;
    return CLLM_OK;
}

static cllm_session_params stage_params(void) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 8; /* several batches per prompt */
    sp.n_threads = 1;
    sp.type_k = sp.type_v = CLLM_TYPE_F32;
    return sp;
}

/* Stage i of n_stages of the model at g_path: its layers only, on the CPU. */
static bool load_stage(int n_layer, int n_stages, int i, const cllm_model_params *mp,
                       cllm_model **out) {
    int b, e;
    cllm_pipe_split(n_layer, n_stages, i, &b, &e);
    cllm_placement pl;
    CHECK(cllm_placement_init_cpu(&pl, n_layer) == CLLM_OK);
    cllm_placement_restrict(&pl, b, e);
    const cllm_status st = cllm_model_load_placed(g_path, mp, &pl, out);
    cllm_placement_free(&pl);
    CHECKF(st == CLLM_OK, "stage %d: %s", i, cllm_last_error());
    return st == CLLM_OK;
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
    fp.type_k = sp.type_k, fp.type_v = sp.type_v;
    cllm_pipe_plan plan;
    const bool planned = cllm_pipe_plan_file(g_path, &fp, n_stages, &plan) == CLLM_OK;
    CHECKF(planned, "plan of %d ranks: %s", n_stages, cllm_last_error());
    for (int i = 0; i < n_stages; i++) {
        if (!load_stage(n_layer, n_stages, i, &mp, &m[i])) goto done;
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
            int b, e;
            cllm_pipe_split(n_layer, n_stages, i, &b, &e);
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
    CHECK(cllm_session_stage_run(c.s[0], 0, 0, 1, 1, c.buf[0], c.buf[1]) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_stage_run(c.s[1], 0, 60, 8, 1, c.buf[0], c.buf[1]) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_stage_run(c.s[1], 1, 0, 1, 1, c.buf[0], c.buf[1]) ==
          CLLM_ERR_INVALID_ARG); /* one sequence */
    CHECK(cllm_session_stage_run(c.s[1], 0, 4, 1, 1, c.buf[0], c.buf[1]) ==
          CLLM_ERR_INVALID_ARG); /* a gap */
    cllm_session_reset(c.s[0]);

    c.fail_at = -1;
    cllm_session_set_link(c.s[0],
                          &(cllm_session_link){.ud = &c, .send = chain_send, .wait = chain_wait});
    greedy(c.s[0], prompt, n_prompt, got);
    CHECKF(memcmp(want, got, sizeof(want)) == 0, "%d stages (%s): greedy tokens differ", n_stages,
           use_mmap ? "mapped" : "read");
    CHECK(c.sent == (n_prompt + sp.n_batch - 1) / sp.n_batch + N_GEN);
    CHECK(c.waits == 1 + N_GEN); /* once per decode */
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

/* ---- several sequences ---- */

enum { N_SEQ = 3 };

/* Whether a and b hold the same positions and logits (bit for bit) in
 * every sequence; `what` names the step. */
static void same_seqs(cllm_session *a, cllm_session *b, int64_t n_vocab, const char *what) {
    for (int q = 0; q < N_SEQ; q++) {
        const float *la = cllm_session_seq_logits(a, q), *lb = cllm_session_seq_logits(b, q);
        CHECKF(cllm_session_seq_n_past(a, q) == cllm_session_seq_n_past(b, q),
               "%s: sequence %d at %lld and %lld", what, q,
               (long long)cllm_session_seq_n_past(a, q), (long long)cllm_session_seq_n_past(b, q));
        CHECKF(!la == !lb && (!la || !memcmp(la, lb, (size_t)n_vocab * sizeof(float))),
               "%s: sequence %d's logits differ", what, q);
    }
}

static int32_t argmax_of(const float *l, int64_t n_vocab) {
    int32_t best = 0;
    for (int64_t v = 1; l && v < n_vocab; v++) best = l[v] > l[best] ? (int32_t)v : best;
    return best;
}

/* The program both sessions run; every call compared. */
static void seqs_program(cllm_session *loc, cllm_session *pip, int64_t n_vocab) {
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = (int32_t)(1 + (i * 37 + 11) % (n_vocab - 1));
    cllm_session *ss[2] = {loc, pip};
#define BOTH(call, what)                                                                           \
    do {                                                                                           \
        for (int k_ = 0; k_ < 2; k_++) {                                                           \
            cllm_session *s = ss[k_];                                                              \
            CHECKF((call) == CLLM_OK, "%s (%s): %s", what, k_ ? "stages" : "local",                \
                   cllm_last_error());                                                             \
        }                                                                                          \
        same_seqs(loc, pip, n_vocab, what);                                                        \
    } while (0)
    /* prompt chunks of 8 tokens or more, two sequences in one call */
    const cllm_seq_tokens pre[2] = {{1, t, 8}, {2, t + 8, 10}};
    BOTH(cllm_session_decode_seqs(s, pre, 2), "two prompts");
    BOTH(cllm_session_decode(s, t + 18, 12), "sequence 0's prompt");
    /* steps of a token per sequence, greedy */
    for (int step = 0; step < 5; step++) {
        int32_t next[N_SEQ];
        cllm_seq_tokens it[N_SEQ];
        for (int q = 0; q < N_SEQ; q++) {
            next[q] = argmax_of(cllm_session_seq_logits(loc, q), n_vocab);
            it[q] = (cllm_seq_tokens){q, &next[q], 1};
        }
        BOTH(cllm_session_decode_seqs(s, it, N_SEQ), "a step");
    }
    /* a step that a chunk joins: the one-token items first */
    const cllm_seq_tokens mix[3] = {{0, t + 30, 1}, {2, t + 31, 1}, {1, t, 8}};
    BOTH(cllm_session_decode_seqs(s, mix, 3), "a step with a chunk");
    /* back to 4 tokens, and to none */
    BOTH(cllm_session_seq_truncate(s, 1, 4), "truncate sequence 1");
    const cllm_seq_tokens again[1] = {{1, t + 4, 9}};
    BOTH(cllm_session_decode_seqs(s, again, 1), "sequence 1 again");
    BOTH(cllm_session_seq_truncate(s, 2, 0), "truncate sequence 2 to 0");
    const cllm_seq_tokens fresh[2] = {{0, t + 32, 1}, {2, t + 20, 9}};
    BOTH(cllm_session_decode_seqs(s, fresh, 2), "sequence 2 from the start");
#undef BOTH
}

static void test_seqs(const cllm_model *whole, int n_stages) {
    const int n_layer = (int)whole->hp.n_layer;
    cllm_session_params sp = stage_params();
    sp.n_batch = 32;
    sp.n_seq = N_SEQ;
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = sp.n_ctx, fp.n_batch = sp.n_batch, fp.n_threads = sp.n_threads;
    fp.type_k = sp.type_k, fp.type_v = sp.type_v, fp.n_sessions = N_SEQ;
    cllm_pipe_plan plan;
    CHECKF(cllm_pipe_plan_file(g_path, &fp, n_stages, &plan) == CLLM_OK, "plan: %s",
           cllm_last_error());
    CHECK(plan.n_seq == N_SEQ);

    cllm_session *loc = NULL;
    cllm_model *m[MAX_STAGES] = {NULL};
    chain c = {.n = n_stages, .n_vocab = whole->hp.n_vocab, .fail_at = -1};
    CHECK(cllm_session_new(whole, &sp, &loc) == CLLM_OK);
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.progress = false;
    for (int i = 0; i < n_stages; i++) {
        if (!load_stage(n_layer, n_stages, i, &mp, &m[i])) goto done;
        CHECKF(cllm_session_new(m[i], &sp, &c.s[i]) == CLLM_OK, "stage %d of %d sequences: %s", i,
               N_SEQ, cllm_last_error());
        if (!c.s[i]) goto done;
        c.buf[i] =
            malloc((size_t)(sp.n_batch * (whole->hp.n_vocab + whole->hp.n_embd)) * sizeof(float));
        const cllm_memory_report r = cllm_session_memory(c.s[i]);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            CHECKF(r.planned[k] == r.allocated[k] && plan.ranks[i].bytes[k] == r.allocated[k],
                   "stage %d of %d, %d sequences, %s: planned %zu, allocated %zu, the plan of the "
                   "ranks %zu",
                   i, n_stages, N_SEQ, cllm_mem_kind_str(k), r.planned[k], r.allocated[k],
                   plan.ranks[i].bytes[k]);
        }
    }
    /* without a link the first stage cannot decode; a later one never */
    const int32_t tok = 1;
    const cllm_seq_tokens one[2] = {{1, &tok, 1}, {2, &tok, 1}};
    CHECK(cllm_session_decode_seqs(c.s[0], one, 2) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_session_decode_seqs(c.s[1], one, 2) == CLLM_ERR_INVALID_ARG);
    cllm_session_set_link(c.s[0],
                          &(cllm_session_link){.ud = &c, .send = chain_send, .wait = chain_wait});
    seqs_program(loc, c.s[0], c.n_vocab);
    CHECK(c.asked == 0);

    /* a send that fails mid-step: no sequence changes, the link waited */
    int32_t next[N_SEQ];
    cllm_seq_tokens it[N_SEQ];
    for (int q = 0; q < N_SEQ; q++) {
        next[q] = argmax_of(cllm_session_seq_logits(loc, q), c.n_vocab);
        it[q] = (cllm_seq_tokens){q, &next[q], 1};
    }
    c.fail_at = c.sent + 1;
    const int64_t waits = c.waits;
    CHECK(cllm_session_decode_seqs(c.s[0], it, N_SEQ) == CLLM_ERR_IO);
    CHECK(c.waits == waits + 1);
    same_seqs(loc, c.s[0], c.n_vocab, "a failed step");
    c.fail_at = -1;
    /* and it goes on as the local session (the stages go back with the
     * position of the next batch) */
    for (int k = 0; k < 2; k++) {
        CHECK(cllm_session_decode_seqs(k ? c.s[0] : loc, it, N_SEQ) == CLLM_OK);
    }
    same_seqs(loc, c.s[0], c.n_vocab, "the step again");
done:
    for (int i = 0; i < n_stages; i++) {
        cllm_session_free(c.s[i]);
        cllm_model_free(m[i]);
        free(c.buf[i]);
    }
    cllm_session_free(loc);
}

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
        test_seqs(whole, 2);
        test_seqs(whole, 3);
        test_budget();
    }
    cllm_model_free(whole);
    return check_summary("test_stage");
}
