/*
 * The batch engine (cllm.h: cllm_engine) on the small real model stories260K:
 *
 *  - greedy answers of several requests at once (more requests than
 *    sequences, prompts read in several chunks) equal cllm_generate's for
 *    each request alone, token for token;
 *  - prefix reuse: a prompt that shares a beginning with an idle sequence's
 *    cache whose tokens then differ reuses rows of it (at least 8 tokens
 *    left to read) and answers as a fresh read; a conversation's next turn
 *    reuses its whole cache;
 *  - stop strings across token boundaries: the text ends before the stop
 *    string and no piece of it is ever released; a string that only begins
 *    like the text is held back and then released whole;
 *  - the same prompt again after a request that stopped at its first token
 *    (prompts of 1 to 20 tokens): the same answer, its first token with the
 *    same log-probability bit for bit, as cllm_generate's alone;
 *  - cllm_generate refuses a sampler made for another vocabulary size, and
 *    a generation that fails (out of memory at each allocation in turn)
 *    leaves the sampler and the session as they were;
 *  - cancel, running and waiting; max_tokens 0; submission errors;
 *  - every text piece is valid UTF-8 (also when the tokens are stray
 *    bytes), and the streaming detokenizer completes a character cut
 *    across tokens;
 *  - usage: prompt, cached, completion and decoded token counts;
 *    log-probabilities in order.
 */
#include "cllm.h"
#include "common/check.h"
#include "core/hostmem.h"
#include "common/refs.h"
#include "text/unicode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_IDS = 256, MAX_TEXT = 4096 };

/* What one request received. */
typedef struct got {
    int32_t ids[MAX_IDS];
    double logprob[MAX_IDS]; /* when asked for */
    int n_ids;
    char text[MAX_TEXT];
    size_t len;
    int n_text;          /* TEXT events */
    bool finished;       /* FINISHED came */
    bool after_finished; /* an event after FINISHED */
    bool bad_utf8;       /* a TEXT event that is not valid UTF-8 */
    bool bad_order;      /* log-probabilities out of order */
    cllm_stop_reason reason;
    cllm_request_usage usage;
} got;

static void on_event(const cllm_event *ev, void *ud) {
    (void)ud;
    got *g = ev->user_data;
    if (g->finished) g->after_finished = true;
    switch (ev->kind) {
    case CLLM_EVENT_TOKEN:
        if (g->n_ids < MAX_IDS) {
            g->logprob[g->n_ids] = ev->logprob;
            g->ids[g->n_ids++] = ev->token;
        }
        for (int k = 1; k < ev->n_top; k++) {
            if (ev->top[k].logprob > ev->top[k - 1].logprob) g->bad_order = true;
        }
        if (ev->n_top > 0 && (ev->logprob > 0 || ev->top[0].logprob < ev->logprob)) {
            g->bad_order = true;
        }
        break;
    case CLLM_EVENT_TEXT:
        g->n_text++;
        if (ev->len == 0 || !cllm_utf8_valid(ev->text, ev->len)) g->bad_utf8 = true;
        if (g->len + ev->len < MAX_TEXT) {
            memcpy(g->text + g->len, ev->text, ev->len);
            g->len += ev->len;
            g->text[g->len] = '\0';
        }
        break;
    default:
        g->finished = true;
        g->reason = ev->reason;
        g->usage = ev->usage;
        break;
    }
}

/* Steps e until it has nothing to do (at most `max_steps`). */
static void run_all(cllm_engine *e, int max_steps) {
    for (int i = 0; i < max_steps && cllm_engine_n_waiting(e) + cllm_engine_n_running(e) > 0; i++)
        CHECK(cllm_engine_step(e) == CLLM_OK);
    CHECK_EQ_INT(cllm_engine_n_waiting(e) + cllm_engine_n_running(e), 0);
}

static size_t tokenize(const cllm_model *m, const char *text, int32_t *ids, size_t max) {
    size_t n = 0;
    CHECK(cllm_tokenize(m, text, strlen(text), true, false, ids, max, &n) == CLLM_OK);
    return n;
}

static bool collect(int32_t id, const char *text, size_t len, void *ud) {
    (void)id;
    got *g = ud;
    if (g->len + len < MAX_TEXT) {
        memcpy(g->text + g->len, text, len);
        g->len += len;
        g->text[g->len] = '\0';
    }
    return true;
}

/* The greedy answer of ids alone, through cllm_generate on a fresh
 * session of n_batch. */
static void alone(const cllm_model *m, const int32_t *ids, size_t n, int max_tokens,
                  int64_t n_batch, got *out) {
    memset(out, 0, sizeof(*out));
    cllm_session_params sp = cllm_session_default_params();
    sp.n_batch = n_batch;
    cllm_session *s = NULL;
    cllm_sampler_params smp = cllm_sampler_default_params();
    smp.temperature = 0;
    cllm_sampler *sa = NULL;
    cllm_generate_result res = {0};
    if (cllm_session_new(m, &sp, &s) != CLLM_OK || cllm_sampler_new(&smp, 512, &sa) != CLLM_OK ||
        cllm_generate(s, sa, ids, n, max_tokens, collect, out, &res) != CLLM_OK) {
        CHECKF(false, "alone: %s", cllm_last_error());
    } else {
        for (size_t i = 0; i < res.n_ids && i < MAX_IDS; i++) out->ids[out->n_ids++] = res.ids[i];
        out->reason = res.stop;
    }
    cllm_generate_result_free(&res);
    cllm_sampler_free(sa);
    cllm_session_free(s);
}

static cllm_request_params greedy(int max_tokens) {
    cllm_request_params rp = cllm_request_default_params();
    rp.sampling.temperature = 0;
    rp.max_tokens = max_tokens;
    return rp;
}

static bool same_ids(const got *a, const got *b) {
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof(int32_t));
}

static const char *const k_prompts[] = {
    "Once upon a time, there was a little girl named Lily who loved to play outside in the sun",
    "The dog",
    "Tom and his friend Sam went to the park to play with a big red ball. They ran and ran",
    "One day, a cat",
    "The sun was shining and the birds were singing in the tall green trees near the river",
    "Lily saw a bird",
};
enum { N_PROMPTS = 6 };

/* Several requests at once (more than sequences), greedy: each as alone. */
static void test_concurrent(const cllm_model *m, int64_t n_batch) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = 3;
    sp.n_ctx = 256;
    sp.n_batch = n_batch;
    cllm_engine *e = NULL;
    CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
    if (!e) return;
    static got g[N_PROMPTS], want[N_PROMPTS];
    int32_t ids[N_PROMPTS][128];
    size_t n[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        memset(&g[i], 0, sizeof(g[i]));
        n[i] = tokenize(m, k_prompts[i], ids[i], 128);
        const cllm_request_params rp = greedy(20 + 3 * i);
        CHECK(cllm_engine_submit(e, ids[i], n[i], &rp, &g[i], NULL) == CLLM_OK);
    }
    CHECK_EQ_INT(cllm_engine_n_waiting(e), N_PROMPTS);
    run_all(e, 1000);
    for (int i = 0; i < N_PROMPTS; i++) {
        alone(m, ids[i], n[i], 20 + 3 * i, n_batch, &want[i]);
        CHECKF(g[i].finished && !g[i].after_finished && same_ids(&g[i], &want[i]),
               "n_batch %lld, prompt %d: '%s' vs alone '%s'", (long long)n_batch, i, g[i].text,
               want[i].text);
        CHECKF(!strcmp(g[i].text, want[i].text), "text '%s' vs '%s'", g[i].text, want[i].text);
        CHECK(!g[i].bad_utf8);
        /* usage */
        const cllm_request_usage *u = &g[i].usage;
        CHECK(u->started && u->n_prompt == n[i] && u->n_completion == (size_t)g[i].n_ids);
        if (g[i].reason == CLLM_STOP_LENGTH) {
            CHECK_EQ_INT(g[i].n_ids, 20 + 3 * i);
            CHECK_EQ_INT(u->n_gen_decoded, (size_t)g[i].n_ids - 1);
        }
        CHECK(u->n_cached < n[i] && u->prompt_ms > 0);
    }
    cllm_engine_free(e);
}

/* Prefix reuse from an idle sequence whose cache goes on differently, and
 * a conversation's next turn. */
static void test_reuse(const cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = 2;
    sp.n_ctx = 256;
    sp.n_batch = 16; /* the prompts are read in several chunks */
    cllm_engine *e = NULL;
    CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
    if (!e) return;
    int32_t a[128], b[128], c[128], d[256];
    const size_t na = tokenize(m, k_prompts[0], a, 128);
    const size_t nb = tokenize(m, k_prompts[2], b, 128);
    /* a's first 12 tokens, then a different 14 */
    const size_t nc = 12 + tokenize(m, k_prompts[4], c + 12, 116) - 1;
    memcpy(c, a, 12 * sizeof(int32_t));
    memmove(c + 12, c + 13, (nc - 12) * sizeof(int32_t)); /* drop the second BOS */
    CHECK(nc > 20 && na > 20);
    got ga = {0}, gb = {0}, gc = {0}, gd = {0}, want;
    const cllm_request_params rp = greedy(12);
    /* together: a sequence each */
    CHECK(cllm_engine_submit(e, a, na, &rp, &ga, NULL) == CLLM_OK);
    CHECK(cllm_engine_submit(e, b, nb, &rp, &gb, NULL) == CLLM_OK);
    run_all(e, 1000);
    CHECK(ga.usage.n_cached == 0 && gb.usage.n_cached == 0);
    CHECK(cllm_engine_submit(e, c, nc, &rp, &gc, NULL) == CLLM_OK);
    run_all(e, 1000);
    /* a's sequence: 12 tokens in common, rows read as a fresh read reads
     * them (in chunks of at least 8), at least 8 tokens left to read */
    CHECKF(gc.usage.n_cached >= 8 && gc.usage.n_cached <= 12, "reused %zu", gc.usage.n_cached);
    alone(m, c, nc, 12, 16, &want);
    CHECKF(same_ids(&gc, &want), "reused: '%s' vs alone '%s'", gc.text, want.text);
    /* the next turn of b's conversation: its prompt, its answer, more */
    memcpy(d, b, nb * sizeof(int32_t));
    memcpy(d + nb, gb.ids, (size_t)gb.n_ids * sizeof(int32_t));
    size_t nd = nb + (size_t)gb.n_ids;
    nd += tokenize(m, k_prompts[5], d + nd, 256 - nd) - 1;
    memmove(d + nb + gb.n_ids, d + nb + gb.n_ids + 1,
            (nd - nb - (size_t)gb.n_ids) * sizeof(int32_t));
    CHECK(cllm_engine_submit(e, d, nd, &rp, &gd, NULL) == CLLM_OK);
    run_all(e, 1000);
    /* all but the last answer token (sampled, never decoded) */
    CHECKF(gd.usage.n_cached == nb + (size_t)gb.n_ids - 1, "next turn reused %zu of %zu",
           gd.usage.n_cached, nb + (size_t)gb.n_ids);
    CHECK(gd.finished && gd.n_ids == 12);
    cllm_engine_free(e);
}

/* A request that stops at its first token (max_tokens 1, a stop string, a
 * cancel) leaves its prompt in the cache and no answer row: the same prompt
 * again must be read as the first time, not reuse all but its last token
 * (decoded alone, it would round differently from the chunk it was in). */
static void test_replay(const cllm_model *m) {
    int32_t all[128];
    const size_t n_all = tokenize(m, k_prompts[0], all, 128);
    CHECK(n_all >= 20);
    for (int64_t n_batch = 16; n_batch <= 512; n_batch *= 32) {
        cllm_session_params sp = cllm_session_default_params();
        sp.n_seq = 1;
        sp.n_ctx = 128;
        sp.n_batch = n_batch;
        cllm_engine *e = NULL;
        CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
        if (!e) return;
        for (size_t n = 1; n <= 20 && n <= n_all; n++) {
            static got first, again, want;
            memset(&first, 0, sizeof(first));
            memset(&again, 0, sizeof(again));
            cllm_request_params rp = greedy(1);
            rp.logprobs = 0;
            CHECK(cllm_engine_submit(e, all, n, &rp, &first, NULL) == CLLM_OK);
            run_all(e, 100);
            rp.max_tokens = 8;
            CHECK(cllm_engine_submit(e, all, n, &rp, &again, NULL) == CLLM_OK);
            run_all(e, 100);
            alone(m, all, n, 8, n_batch, &want);
            CHECKF(first.n_ids == 1 && again.n_ids >= 1 && again.ids[0] == first.ids[0] &&
                       again.logprob[0] == first.logprob[0],
                   "n_batch %lld, %zu tokens: first token %d (%.17g), again %d (%.17g)",
                   (long long)n_batch, n, first.ids[0], first.logprob[0], again.ids[0],
                   again.logprob[0]);
            CHECKF(same_ids(&again, &want), "n_batch %lld, %zu tokens: '%s' vs alone '%s'",
                   (long long)n_batch, n, again.text, want.text);
        }
        cllm_engine_free(e);
    }
}

/* Whether samplers a and b give the same candidates and the same draws
 * for one row of logits (their windows, penalty counts and PRNG agree). */
static bool same_sampler(cllm_sampler *a, cllm_sampler *b, const float *logits) {
    const cllm_sampler_cand *ca = NULL, *cb = NULL;
    int32_t na = 0, nb = 0;
    if (cllm_sampler_probs(a, logits, &ca, &na) != CLLM_OK) return false;
    static cllm_sampler_cand keep[512];
    if (na > 512) return false;
    memcpy(keep, ca, (size_t)na * sizeof(*ca));
    if (cllm_sampler_probs(b, logits, &cb, &nb) != CLLM_OK || na != nb) return false;
    if (memcmp(keep, cb, (size_t)na * sizeof(*cb)) != 0) return false;
    for (int i = 0; i < 4; i++) {
        int32_t ta = -1, tb = -2;
        if (cllm_sampler_sample(a, logits, &ta) != CLLM_OK ||
            cllm_sampler_sample(b, logits, &tb) != CLLM_OK || ta != tb) {
            return false;
        }
    }
    return true;
}

static void test_generate_failures(const cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 128;
    cllm_session *s = NULL;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (!s) return;
    int32_t ids[128];
    const size_t n = tokenize(m, k_prompts[3], ids, 128);
    cllm_sampler_params smp = cllm_sampler_default_params();
    smp.temperature = 0.8f;
    smp.seed = 7;
    smp.repeat_penalty = 1.3f;
    smp.frequency_penalty = 0.5f;
    smp.presence_penalty = 0.25f;
    const int32_t n_vocab = cllm_model_n_vocab(m);
    /* another vocabulary size: refused, nothing read out of bounds */
    for (int32_t nv = n_vocab / 2; nv <= 2 * n_vocab; nv += 3 * n_vocab / 2) {
        cllm_sampler *other = NULL;
        CHECK(cllm_sampler_new(&smp, nv, &other) == CLLM_OK);
        cllm_generate_result res = {.n_ids = 99};
        CHECKF(cllm_generate(s, other, ids, n, 4, NULL, NULL, &res) == CLLM_ERR_INVALID_ARG &&
                   res.n_ids == 0 && strstr(cllm_last_error(), "sampler"),
               "n_vocab %d: %s", nv, cllm_last_error());
        CHECK(cllm_session_n_past(s) == 0);
        cllm_sampler_free(other);
    }
    /* a row of logits where the prompt's tokens and some others lead */
    static float row[512];
    for (int32_t i = 0; i < n_vocab && i < 512; i++) row[i] = (float)(i % 17) * 0.1f;
    for (size_t i = 0; i < n; i++) row[ids[i]] = 2.0f;
    /* out of memory at the k-th allocation, for every k until one runs
     * through: the failed runs change neither the sampler nor the session */
    int failures = 0;
    for (int64_t k = 1; k < 400; k++) {
        cllm_sampler *a = NULL, *b = NULL;
        CHECK(cllm_sampler_new(&smp, n_vocab, &a) == CLLM_OK);
        CHECK(cllm_sampler_new(&smp, n_vocab, &b) == CLLM_OK);
        if (!a || !b) break;
        cllm_generate_result res;
        cllm_hostmem_fail_at(k, false);
        const cllm_status st = cllm_generate(s, a, ids, n, 8, NULL, NULL, &res);
        const int64_t injected = cllm_hostmem_failures();
        cllm_hostmem_fail_at(-1, false);
        if (st == CLLM_OK) {
            cllm_generate_result_free(&res);
            cllm_session_reset(s);
        } else {
            failures++;
            CHECKF(injected > 0, "allocation %lld: %s without a failure", (long long)k,
                   cllm_status_str(st));
            CHECKF(cllm_session_n_past(s) == 0, "allocation %lld: the session holds %lld",
                   (long long)k, (long long)cllm_session_n_past(s));
            CHECKF(same_sampler(a, b, row), "allocation %lld failed (%s): the sampler changed",
                   (long long)k, cllm_last_error());
        }
        cllm_sampler_free(a);
        cllm_sampler_free(b);
        if (st == CLLM_OK && injected == 0) break;
    }
    CHECKF(failures >= 3, "only %d failed runs", failures);
    cllm_session_free(s);
}

/* Stop strings matched across tokens; text held back while it could begin
 * one. */
static void test_stop_strings(const cllm_model *m) {
    int32_t ids[128];
    const size_t n = tokenize(m, k_prompts[0], ids, 128);
    got full;
    alone(m, ids, n, 40, 512, &full);
    /* a stop string across a token boundary: the end of one token's piece
     * and the beginning of the next one's */
    size_t at = 0, cut = 0;
    char stop[16] = "";
    for (int i = 4; i + 1 < full.n_ids && !stop[0]; i++) {
        size_t l1 = 0, l2 = 0;
        const char *p1 = cllm_token_to_piece(m, full.ids[i], false, &l1);
        const char *p2 = cllm_token_to_piece(m, full.ids[i + 1], false, &l2);
        at += l1;
        if (l1 >= 2 && l2 >= 2 && p1[l1 - 2] != ' ') {
            snprintf(stop, sizeof(stop), "%.2s%.2s", p1 + l1 - 2, p2);
            cut = (size_t)(strstr(full.text, stop) - full.text);
        }
    }
    (void)at;
    CHECKF(stop[0] && strlen(full.text) > 20, "no stop string found in '%s'", full.text);
    if (!stop[0]) return;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = 2;
    sp.n_ctx = 256;
    cllm_engine *e = NULL;
    CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
    if (!e) return;
    const char *stops[2] = {"qqqq", stop};
    cllm_request_params rp = greedy(40);
    rp.stop = stops, rp.n_stop = 2;
    got g = {0}, h = {0};
    CHECK(cllm_engine_submit(e, ids, n, &rp, &g, NULL) == CLLM_OK);
    /* a stop string that only begins like the text: held, then released */
    char almost[16];
    snprintf(almost, sizeof(almost), "%.3s\x01", full.text + 10);
    const char *stops2[1] = {almost};
    rp.stop = stops2, rp.n_stop = 1;
    CHECK(cllm_engine_submit(e, ids, n, &rp, &h, NULL) == CLLM_OK);
    run_all(e, 1000);
    CHECKF(g.reason == CLLM_STOP_STRING && g.len == cut && !strncmp(g.text, full.text, cut),
           "stop '%s': '%s' (%s), want '%.*s'", stop, g.text, cllm_stop_reason_str(g.reason),
           (int)cut, full.text);
    CHECK(!g.bad_utf8 && !g.after_finished);
    CHECKF(h.reason == CLLM_STOP_LENGTH && !strcmp(h.text, full.text), "'%s' vs '%s'", h.text,
           full.text);
    cllm_engine_free(e);
}

/* Cancel a running and a waiting request; the other one goes on. */
static void test_cancel(const cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = 1;
    sp.n_ctx = 256;
    cllm_engine *e = NULL;
    CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
    if (!e) return;
    int32_t a[128], b[128];
    const size_t na = tokenize(m, k_prompts[0], a, 128), nb = tokenize(m, k_prompts[1], b, 128);
    got ga = {0}, gb = {0}, gc = {0}, want;
    const cllm_request_params rp = greedy(30);
    uint64_t ida = 0, idb = 0, idc = 0;
    CHECK(cllm_engine_submit(e, a, na, &rp, &ga, &ida) == CLLM_OK);
    CHECK(cllm_engine_submit(e, b, nb, &rp, &gb, &idb) == CLLM_OK);
    CHECK(cllm_engine_submit(e, b, nb, &rp, &gc, &idc) == CLLM_OK);
    CHECK(ida != idb && idb != idc);
    for (int i = 0; i < 5; i++) CHECK(cllm_engine_step(e) == CLLM_OK);
    CHECK(ga.n_ids >= 3 && !ga.finished);
    CHECK(cllm_engine_cancel(e, ida) == CLLM_OK);
    CHECK(cllm_engine_cancel(e, idc) == CLLM_OK); /* waiting */
    CHECK(!ga.finished);                          /* at the next step */
    run_all(e, 1000);
    CHECK(ga.finished && ga.reason == CLLM_STOP_CANCELLED && ga.n_ids < 30);
    CHECK(gc.finished && gc.reason == CLLM_STOP_CANCELLED && !gc.usage.started && gc.n_ids == 0);
    alone(m, b, nb, 30, 512, &want);
    CHECK(gb.finished && same_ids(&gb, &want));
    CHECK(cllm_engine_cancel(e, ida) == CLLM_ERR_INVALID_ARG); /* finished */
    CHECK(cllm_engine_cancel(e, 9999) == CLLM_ERR_INVALID_ARG);
    cllm_engine_free(e);
}

/* max_tokens 0, logprobs, stray bytes as text, bad submissions, a request
 * left running when the engine is freed. */
static void test_edges(const cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_seq = 2;
    sp.n_ctx = 64;
    cllm_engine *e = NULL;
    CHECK(cllm_engine_new(m, &sp, on_event, NULL, &e) == CLLM_OK);
    if (!e) return;
    int32_t ids[128];
    const size_t n = tokenize(m, k_prompts[3], ids, 128);
    got g0 = {0}, gl = {0}, gb = {0};
    cllm_request_params rp = greedy(0);
    CHECK(cllm_engine_submit(e, ids, n, &rp, &g0, NULL) == CLLM_OK);
    rp = greedy(8);
    rp.logprobs = 5;
    CHECK(cllm_engine_submit(e, ids, n, &rp, &gl, NULL) == CLLM_OK);
    run_all(e, 100);
    CHECK(g0.finished && g0.reason == CLLM_STOP_LENGTH && g0.n_ids == 0 && g0.len == 0);
    CHECK(gl.finished && gl.n_ids == 8 && !gl.bad_order);
    /* a byte token forced by the bias: stray bytes come out as U+FFFD,
     * every piece valid UTF-8 */
    size_t len = 0;
    int32_t byte_e2 = -1;
    for (int32_t id = 0; id < cllm_model_n_vocab(m) && byte_e2 < 0; id++) {
        const char *p = cllm_token_to_piece(m, id, false, &len);
        if (p && len == 1 && (unsigned char)p[0] == 0xe2) byte_e2 = id;
    }
    if (byte_e2 >= 0) {
        cllm_logit_bias force = {byte_e2, 100.0f};
        rp = greedy(6);
        rp.sampling.logit_bias = &force, rp.sampling.n_logit_bias = 1;
        CHECK(cllm_engine_submit(e, ids, n, &rp, &gb, NULL) == CLLM_OK);
        run_all(e, 100);
        CHECK(gb.n_ids == 6 && gb.n_text >= 1 && !gb.bad_utf8 && strstr(gb.text, "\xef\xbf\xbd"));
        /* the public detokenizer: E2 82 AC (the euro sign) comes out whole
         * at its last byte */
        int32_t euro[3] = {byte_e2, -1, -1};
        for (int32_t id = 0; id < cllm_model_n_vocab(m); id++) {
            const char *p = cllm_token_to_piece(m, id, false, &len);
            if (p && len == 1 && (unsigned char)p[0] == 0x82) euro[1] = id;
            if (p && len == 1 && (unsigned char)p[0] == 0xac) euro[2] = id;
        }
        cllm_detokenizer *d = NULL;
        CHECK(cllm_detokenizer_new(m, 0, &d) == CLLM_OK);
        const char *t = NULL;
        size_t tl = 0;
        CHECK(cllm_detokenizer_put(d, euro[0], &t, &tl) == CLLM_OK && tl == 0);
        CHECK(cllm_detokenizer_put(d, euro[1], &t, &tl) == CLLM_OK && tl == 0);
        CHECK(cllm_detokenizer_put(d, euro[2], &t, &tl) == CLLM_OK && tl == 3 &&
              !memcmp(t, "\xe2\x82\xac", 3));
        CHECK(cllm_detokenizer_put(d, euro[0], &t, &tl) == CLLM_OK && tl == 0);
        cllm_detokenizer_flush(d, &t, &tl);
        CHECK(tl == 3 && !memcmp(t, "\xef\xbf\xbd", 3));
        CHECK(cllm_detokenizer_put(d, 512, &t, &tl) == CLLM_ERR_INVALID_ARG);
        cllm_detokenizer_free(d);
    } else {
        CHECKF(false, "stories260K has no byte token 0xE2");
    }
    /* bad submissions: nothing queued */
    const int32_t bad_id = 512;
    CHECK(cllm_engine_submit(e, ids, 0, NULL, NULL, NULL) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_engine_submit(e, &bad_id, 1, NULL, NULL, NULL) == CLLM_ERR_INVALID_ARG);
    int32_t big[65] = {0};
    CHECK(cllm_engine_submit(e, big, 65, NULL, NULL, NULL) == CLLM_ERR_TOO_LARGE);
    rp = greedy(4);
    rp.logprobs = 21;
    CHECK(cllm_engine_submit(e, ids, n, &rp, NULL, NULL) == CLLM_ERR_INVALID_ARG);
    rp = greedy(4);
    const char *bad_stop[1] = {"\xff"};
    rp.stop = bad_stop, rp.n_stop = 1;
    CHECK(cllm_engine_submit(e, ids, n, &rp, NULL, NULL) == CLLM_ERR_INVALID_ARG &&
          strstr(cllm_last_error(), "stop[0]"));
    rp = greedy(4);
    rp.sampling.top_p = 0;
    CHECK(cllm_engine_submit(e, ids, n, &rp, NULL, NULL) == CLLM_ERR_INVALID_ARG &&
          strstr(cllm_last_error(), "top_p"));
    CHECK_EQ_INT(cllm_engine_n_waiting(e), 0);
    /* freed with a request running: no event, nothing leaks */
    got left = {0};
    rp = greedy(-1);
    CHECK(cllm_engine_submit(e, ids, n, &rp, &left, NULL) == CLLM_OK);
    CHECK(cllm_engine_step(e) == CLLM_OK);
    cllm_engine_free(e);
    CHECK(!left.finished);
}

/* Errors are expected here; keep them off stderr. */
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level, (void)msg, (void)user_data;
}

int main(void) {
    cllm_log_set(quiet_log, NULL);
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_engine");
    char path[4096];
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL, &m) !=
        CLLM_OK) {
        fprintf(stderr, "test_engine: %s\n", cllm_last_error());
        return 1;
    }
    test_concurrent(m, 512);
    test_concurrent(m, 16); /* prompts in several chunks, no last one under 8 */
    test_reuse(m);
    test_replay(m);
    test_generate_failures(m);
    test_stop_strings(m);
    test_cancel(m);
    test_edges(m);
    cllm_model_free(m);
    return check_summary("test_engine");
}
