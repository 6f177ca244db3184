/*
 * Speculative decoding by n-gram lookup (cllm_spec_*, cllm_generate_spec,
 * the engine's drafts):
 *
 *  - the n-gram lookup: the longest final n-gram's most recent earlier
 *    occurrence, what followed it, the limits; parameters checked; names;
 *  - greedy output bit for bit that of decoding without speculation, on
 *    every model of tests/data/models and on SmolLM2 and Gemma 3 (fetched
 *    by scripts/fetch-model; skipped without them), at several lengths, on
 *    prompts that repeat (drafts are made and kept: checked) and ones that
 *    do not; afterwards the KV cache holds what it holds without
 *    speculation: the logits of one more token are equal bit for bit;
 *  - the batch engine with several sequences: requests submitted together
 *    and one that joins while the others generate give each the tokens it
 *    gets without speculation;
 *  - sampling (temperature, top-k, top-p, min-p): the same tokens for the
 *    same seed; and the distribution of a token after drafts, over many
 *    seeds, matches plain sampling's over other seeds (a chi-square test of
 *    homogeneity, p < 0.001 fails);
 *  - a draft model (cllm_draft): the model drafting for itself (every
 *    greedy draft kept) and another with the same vocabulary give the
 *    output of decoding without speculation, greedy and seeded, alone and
 *    in the engine's several sequences; the sampled distribution with a
 *    draft model; a vocabulary that differs and a draft of too few
 *    sequences refused.
 */
#include "cllm.h"
#include "common/check.h"
#include "common/refs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* ---- the lookup ---------------------------------------------------------- */

static void test_lookup(void) {
    cllm_spec_params p = cllm_spec_default_params();
    CHECK(cllm_spec_params_check(&p) == CLLM_OK);
    CHECK_EQ_INT(p.type, CLLM_SPEC_NGRAM);
    int32_t d[CLLM_SPEC_MAX_DRAFT];
    /* 1 2 3 4 5 6 | 1 2 3: the 3-gram 1 2 3 followed by 4 5 6 1 2 3 */
    const int32_t h1[] = {1, 2, 3, 4, 5, 6, 1, 2, 3};
    int n = cllm_spec_ngram_draft(&p, h1, 9, 8, d);
    CHECK_EQ_INT(n, 6);
    CHECK(n == 6 && d[0] == 4 && d[1] == 5 && d[2] == 6 && d[3] == 1 && d[5] == 3);
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h1, 9, 2, d), 2); /* max */
    p.draft_max = 3;
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h1, 9, 8, d), 3);
    p = cllm_spec_default_params();
    /* the most recent occurrence wins: 7 8 -> 9 (later), not 1 */
    const int32_t h2[] = {7, 8, 1, 0, 7, 8, 9, 0, 7, 8};
    n = cllm_spec_ngram_draft(&p, h2, 10, 1, d);
    CHECK(n == 1 && d[0] == 9);
    /* the longest n-gram wins: 5 7 8 occurred before 2 */
    const int32_t h3[] = {5, 7, 8, 2, 0, 7, 8, 3, 5, 7, 8};
    n = cllm_spec_ngram_draft(&p, h3, 11, 1, d);
    CHECK(n == 1 && d[0] == 2);
    /* nothing matches; a 1-gram only with ngram_min 1 */
    const int32_t h4[] = {1, 2, 3, 4, 2};
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h4, 5, 8, d), 0);
    p.ngram_min = 1;
    n = cllm_spec_ngram_draft(&p, h4, 5, 8, d);
    CHECK(n == 3 && d[0] == 3 && d[1] == 4 && d[2] == 2);
    /* fewer than draft_min follow: none */
    p.draft_min = 4;
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h4, 5, 8, d), 0);
    p = cllm_spec_default_params();
    p.type = CLLM_SPEC_NONE;
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h1, 9, 8, d), 0);
    CHECK_EQ_INT(cllm_spec_ngram_draft(NULL, h1, 9, 8, d), 0);
    CHECK_EQ_INT(cllm_spec_ngram_draft(&p, h1, 0, 8, d), 0);

    /* parameters out of range */
    const cllm_spec_params ok = cllm_spec_default_params();
    cllm_spec_params bad = ok;
    bad.type = CLLM_SPEC_COUNT;
    CHECK(cllm_spec_params_check(&bad) == CLLM_ERR_INVALID_ARG);
    bad = ok, bad.ngram_max = 0;
    CHECK(cllm_spec_params_check(&bad) == CLLM_ERR_INVALID_ARG);
    bad = ok, bad.ngram_min = ok.ngram_max + 1;
    CHECK(cllm_spec_params_check(&bad) == CLLM_ERR_INVALID_ARG);
    bad = ok, bad.draft_max = CLLM_SPEC_MAX_DRAFT + 1;
    CHECK(cllm_spec_params_check(&bad) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "draft_max") != NULL);
    bad = ok, bad.draft_min = 0;
    CHECK(cllm_spec_params_check(&bad) == CLLM_ERR_INVALID_ARG);
    cllm_spec_type t = CLLM_SPEC_NGRAM;
    CHECK(cllm_spec_type_parse("none", &t) == CLLM_OK && t == CLLM_SPEC_NONE);
    CHECK(cllm_spec_type_parse("ngram-simple", &t) == CLLM_OK && t == CLLM_SPEC_NGRAM);
    CHECK(cllm_spec_type_parse("eagle", &t) == CLLM_ERR_INVALID_ARG && t == CLLM_SPEC_NGRAM);
    CHECK(!strcmp(cllm_spec_type_str(CLLM_SPEC_NONE), "none"));
    CHECK(!strcmp(cllm_spec_type_str(CLLM_SPEC_COUNT), "unknown"));
}

/* ---- models ---------------------------------------------------------------- */

enum { MAX_IDS = 1024 };

static const char *const k_prompts[] = {
    /* repeats: drafts are made, and most are kept */
    "Once upon a time there was a little cat. The cat liked to play. Once upon a time there was "
    "a little dog. The dog liked to play. Once upon a time there was a little",
    "1 2 3 4 5 6 7 8 9 10 1 2 3 4 5 6 7 8 9 10 1 2 3 4 5",
    /* hardly repeats */
    "Lily went to the park with her mom.",
};

static cllm_session *new_session(const cllm_model *m, int64_t n_ctx) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 64;
    sp.n_threads = 2;
    cllm_session *s = NULL;
    const cllm_status st = cllm_session_new(m, &sp, &s);
    CHECKF(st == CLLM_OK, "session: %s", cllm_last_error());
    return st == CLLM_OK ? s : NULL;
}

typedef struct gen_out {
    int32_t ids[MAX_IDS];
    size_t n;
    size_t drafted, accepted;
    float *next; /* the logits of one more token decoded after the run */
} gen_out;

/* Generates with `spec` (NULL: off) and sampler params sp, then decodes the
 * last generated id once more to read the cache through its logits. */
static bool run_gen(const cllm_model *m, const int32_t *prompt, size_t n_prompt, int n_predict,
                    const cllm_sampler_params *sp, const cllm_spec_params *spec, gen_out *o) {
    memset(o, 0, sizeof(*o));
    cllm_session *s = new_session(m, 512);
    if (!s) return false;
    cllm_sampler *smp = NULL;
    bool ok = cllm_sampler_new_model(sp, m, &smp) == CLLM_OK;
    CHECKF(ok, "sampler: %s", cllm_last_error());
    cllm_spec_params off = cllm_spec_default_params();
    off.type = CLLM_SPEC_NONE;
    cllm_generate_result res = {0};
    if (ok) {
        const cllm_status st = cllm_generate_spec(s, smp, prompt, n_prompt, n_predict,
                                                  spec ? spec : &off, NULL, NULL, &res);
        CHECKF(st == CLLM_OK, "generate: %s", cllm_last_error());
        ok = st == CLLM_OK;
    }
    if (ok) {
        o->n = res.n_ids < MAX_IDS ? res.n_ids : MAX_IDS;
        memcpy(o->ids, res.ids, o->n * sizeof(int32_t));
        o->drafted = res.n_drafted;
        o->accepted = res.n_accepted;
        CHECK(res.n_accepted <= res.n_drafted);
        if (!spec) CHECK_EQ_INT(res.n_drafted, 0);
        const int32_t last = res.n_ids ? res.ids[res.n_ids - 1] : prompt[n_prompt - 1];
        const int64_t nv = cllm_session_n_vocab(s);
        CHECK_EQ_INT(cllm_session_n_past(s), (int64_t)(n_prompt + res.n_gen_decoded));
        if (cllm_session_decode(s, &last, 1) == CLLM_OK && (o->next = malloc((size_t)nv * 4))) {
            memcpy(o->next, cllm_session_logits(s), (size_t)nv * sizeof(float));
        }
        CHECK(o->next != NULL);
    }
    cllm_generate_result_free(&res);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    return ok;
}

static bool same_out(const gen_out *a, const gen_out *b, int64_t n_vocab) {
    if (a->n != b->n || memcmp(a->ids, b->ids, a->n * sizeof(int32_t)) != 0) return false;
    return a->next && b->next && memcmp(a->next, b->next, (size_t)n_vocab * sizeof(float)) == 0;
}

/* Greedy and seeded sampling, with and without speculation, on model m:
 * the same tokens and the same cache. Returns the draft tokens kept. */
static size_t check_model(const char *name, const cllm_model *m, const int *lengths, int n_len,
                          size_t n_prompts, int n_modes) {
    size_t kept = 0;
    int32_t *prompt = malloc(MAX_IDS * sizeof(int32_t));
    gen_out *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    if (!prompt || !a || !b) {
        CHECK(!"out of memory");
        free(prompt), free(a), free(b);
        return 0;
    }
    const int64_t nv = cllm_model_n_vocab(m);
    for (size_t pi = 0; pi < n_prompts; pi++) {
        size_t n_prompt = 0;
        if (cllm_tokenize(m, k_prompts[pi], strlen(k_prompts[pi]), true, false, prompt, MAX_IDS,
                          &n_prompt) != CLLM_OK) {
            CHECKF(false, "%s: tokenize: %s", name, cllm_last_error());
            continue;
        }
        for (int li = 0; li < n_len; li++) {
            for (int mode = 0; mode < 3; mode++) {
                if (n_modes < 3 && mode == 1) continue; /* the eager drafts: small models */
                cllm_sampler_params sp = cllm_sampler_default_params();
                cllm_spec_params spec = cllm_spec_default_params();
                if (mode == 0) sp.temperature = 0; /* greedy, default drafts */
                if (mode == 1) {                   /* greedy, eager drafts */
                    sp.temperature = 0;
                    spec.ngram_min = 1;
                    spec.draft_max = CLLM_SPEC_MAX_DRAFT;
                }
                if (mode == 2) sp.seed = 1234 + (uint64_t)li; /* sampled, seeded */
                if (!run_gen(m, prompt, n_prompt, lengths[li], &sp, NULL, a)) continue;
                if (!run_gen(m, prompt, n_prompt, lengths[li], &sp, &spec, b)) {
                    free(a->next);
                    continue;
                }
                CHECKF(same_out(a, b, nv),
                       "%s: prompt %zu, %d tokens, mode %d: %zu vs %zu tokens (drafted %zu)", name,
                       pi, lengths[li], mode, a->n, b->n, b->drafted);
                if (mode < 2) kept += b->accepted;
                if (getenv("SPEC_DEBUG"))
                    printf("%s p%zu n%d m%d: %zu tokens, drafted %zu kept %zu\n", name, pi,
                           lengths[li], mode, b->n, b->drafted, b->accepted);
                free(a->next), free(b->next);
            }
        }
    }
    free(prompt), free(a), free(b);
    return kept;
}

static void test_models(void) {
    static const char *const files[] = {
        "stories260K.gguf",
        "tinyllamas-stories-260k-f32.gguf",
        "TinyLLama-v0.Q4_0.gguf",
        "llama-2-tiny-random.gguf",
    };
    const int lengths[] = {100, 9, 1}; /* sanitized: the first (drafts kept) */
    for (size_t i = 0; i < N_ELEMS(files); i++) {
        const char *const one[] = {files[i], NULL};
        if (!refs_have(one)) continue;
        char path[4096];
        refs_model_path(path, sizeof(path), files[i]);
        cllm_model *m = NULL;
        if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
            CHECKF(false, "%s: %s", files[i], cllm_last_error());
            continue;
        }
        const size_t kept =
            check_model(files[i], m, lengths, CHECK_SANITIZED ? 1 : 3, N_ELEMS(k_prompts), 3);
        /* the repeating prompts make drafts that are kept (the random
         * model's output repeats too) */
        CHECKF(kept > 0, "%s: no draft token was kept", files[i]);
        cllm_model_free(m);
    }
    if (CHECK_SANITIZED) return; /* the larger models: in the release run */
    static const char *const fetched[] = {"smollm2", "gemma3"};
    const int lengths_big[] = {40};
    for (size_t i = 0; i < N_ELEMS(fetched); i++) {
        char path[4096];
        if (!refs_fetch_model(fetched[i], path, sizeof(path))) continue;
        cllm_model *m = NULL;
        if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
            CHECKF(false, "%s: %s", fetched[i], cllm_last_error());
            continue;
        }
        /* the repeating prompts, greedy and seeded */
        const size_t kept = check_model(fetched[i], m, lengths_big, 1, 2, 2);
        CHECKF(kept > 0, "%s: no draft token was kept", fetched[i]);
        cllm_model_free(m);
    }
}

/* ---- a callback that stops ---------------------------------------------------- */

static bool stop_at_5(int32_t id, const char *text, size_t len, void *ud) {
    (void)id, (void)text, (void)len;
    return ++*(int *)ud < 5;
}

/* cllm_generate's callback refuses the 5th token's text: the ids and the
 * session's context are those without speculation (the refused token is
 * not decoded, nor is any draft token after it). */
static void test_callback(void) {
    const char *const one[] = {"stories260K.gguf", NULL};
    if (!refs_have(one)) return;
    char path[4096];
    refs_model_path(path, sizeof(path), one[0]);
    cllm_model *m = NULL;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
        CHECKF(false, "%s", cllm_last_error());
        return;
    }
    int32_t prompt[MAX_IDS];
    size_t n_prompt = 0;
    CHECK(cllm_tokenize(m, k_prompts[1], strlen(k_prompts[1]), true, false, prompt, MAX_IDS,
                        &n_prompt) == CLLM_OK);
    size_t n_ids[2] = {0, 0}, drafted = 0;
    int64_t past[2] = {-1, -1};
    int32_t ids[2][16];
    for (int spec = 0; spec < 2; spec++) {
        cllm_session *s = new_session(m, 256);
        cllm_sampler_params sp = cllm_sampler_default_params();
        sp.temperature = 0;
        cllm_sampler *smp = NULL;
        if (!s || cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK) {
            cllm_session_free(s);
            continue;
        }
        cllm_spec_params p = cllm_spec_default_params();
        p.ngram_min = 1;
        if (!spec) p.type = CLLM_SPEC_NONE;
        int calls = 0;
        cllm_generate_result res = {0};
        CHECK(cllm_generate_spec(s, smp, prompt, n_prompt, 40, &p, stop_at_5, &calls, &res) ==
              CLLM_OK);
        CHECK(res.stop == CLLM_STOP_CALLBACK);
        n_ids[spec] = res.n_ids;
        memcpy(ids[spec], res.ids, (res.n_ids < 16 ? res.n_ids : 16) * sizeof(int32_t));
        past[spec] = cllm_session_n_past(s);
        drafted += res.n_drafted;
        cllm_generate_result_free(&res);
        cllm_sampler_free(smp);
        cllm_session_free(s);
    }
    CHECKF(n_ids[0] == n_ids[1] && past[0] == past[1] && n_ids[0] <= 16 &&
               !memcmp(ids[0], ids[1], n_ids[0] * sizeof(int32_t)),
           "stopped by the callback: %zu vs %zu ids, context %lld vs %lld", n_ids[0], n_ids[1],
           (long long)past[0], (long long)past[1]);
    CHECKF(drafted > 0, "no drafts before the callback stopped");
    cllm_model_free(m);
}

/* ---- the engine: several sequences ------------------------------------------ */

enum { N_REQ = 4, ENGINE_TOKENS = 48 };

typedef struct eng_out {
    int32_t ids[N_REQ][ENGINE_TOKENS + 1];
    int n[N_REQ];
    bool done[N_REQ];
    size_t drafted, accepted;
} eng_out;

static void on_event(const cllm_event *ev, void *ud) {
    eng_out *o = ud;
    const int r = (int)(intptr_t)ev->user_data;
    if (ev->kind == CLLM_EVENT_TOKEN && o->n[r] < ENGINE_TOKENS + 1) {
        o->ids[r][o->n[r]++] = ev->token;
    } else if (ev->kind == CLLM_EVENT_FINISHED) {
        CHECKF(ev->reason != CLLM_STOP_ERROR, "request %d: %s", r, ev->error ? ev->error : "");
        o->done[r] = true;
        o->drafted += ev->usage.n_drafted;
        o->accepted += ev->usage.n_accepted;
    }
}

/* Requests 0..2 submitted together, request 3 after 5 steps (its prompt
 * joins the others' generation), over 3 sequences. */
static void run_engine(const cllm_model *m, const cllm_spec_params *spec, bool sampled,
                       eng_out *o) {
    memset(o, 0, sizeof(*o));
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.n_seq = 3;
    sp.n_threads = 2;
    cllm_engine *e = NULL;
    if (cllm_engine_new(m, &sp, on_event, o, &e) != CLLM_OK) {
        CHECKF(false, "engine: %s", cllm_last_error());
        return;
    }
    int32_t prompt[MAX_IDS];
    for (int r = 0; r < N_REQ; r++) {
        if (r == 3) {
            for (int k = 0; k < 5; k++) cllm_engine_step(e);
        }
        const char *text = k_prompts[r % N_ELEMS(k_prompts)];
        size_t n = 0;
        CHECK(cllm_tokenize(m, text, strlen(text), true, false, prompt, MAX_IDS, &n) == CLLM_OK);
        cllm_request_params rp = cllm_request_default_params();
        rp.max_tokens = ENGINE_TOKENS - 4 * r;
        if (!sampled) rp.sampling.temperature = 0;
        rp.sampling.seed = 99 + (uint64_t)r;
        if (spec)
            rp.spec = *spec;
        else
            rp.spec.type = CLLM_SPEC_NONE;
        CHECK(cllm_engine_submit(e, prompt, n, &rp, (void *)(intptr_t)r, NULL) == CLLM_OK);
    }
    for (int k = 0; k < 10000 && (cllm_engine_n_running(e) || cllm_engine_n_waiting(e)); k++)
        cllm_engine_step(e);
    for (int r = 0; r < N_REQ; r++) CHECK(o->done[r]);
    cllm_engine_free(e);
}

static void test_engine(void) {
    const char *const one[] = {"stories260K.gguf", NULL};
    if (!refs_have(one)) return;
    char path[4096];
    refs_model_path(path, sizeof(path), one[0]);
    cllm_model *m = NULL;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
        CHECKF(false, "%s", cllm_last_error());
        return;
    }
    eng_out *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    for (int sampled = 0; sampled < 2 && a && b; sampled++) {
        const cllm_spec_params def = cllm_spec_default_params();
        run_engine(m, NULL, sampled, a);
        run_engine(m, &def, sampled, b);
        CHECK_EQ_INT(a->drafted, 0);
        if (!sampled) CHECKF(b->accepted > 0, "no draft token kept in the engine");
        for (int r = 0; r < N_REQ; r++) {
            CHECKF(a->n[r] == b->n[r] && !memcmp(a->ids[r], b->ids[r], (size_t)a->n[r] * 4),
                   "engine, %s: request %d differs with speculation (%d vs %d tokens)",
                   sampled ? "sampled" : "greedy", r, a->n[r], b->n[r]);
        }
    }
    free(a), free(b);
    cllm_model_free(m);
}

/* ---- a draft model ------------------------------------------------------------ */

static cllm_model *load_data_model(const char *file) {
    const char *const one[] = {file, NULL};
    if (!refs_have(one)) return NULL;
    char path[4096];
    refs_model_path(path, sizeof(path), file);
    cllm_model *m = NULL;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
        CHECKF(false, "%s: %s", file, cllm_last_error());
        return NULL;
    }
    return m;
}

/* A draft model for target: `draft`'s weights with a session of n_seq
 * sequences of 512 tokens. */
static cllm_draft *new_draft(const cllm_model *target, const cllm_model *draft, int n_seq) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 512;
    sp.n_batch = 64;
    sp.n_threads = 2;
    sp.n_seq = n_seq;
    cllm_draft *d = NULL;
    const cllm_status st = cllm_draft_new(target, draft, &sp, &d);
    CHECKF(st == CLLM_OK, "draft: %s", cllm_last_error());
    return st == CLLM_OK ? d : NULL;
}

/* Greedy and seeded output of target with draft model `dm` drafting, at
 * several lengths and on every prompt, against decoding without
 * speculation: the same tokens and the same cache. One draft serves every
 * run (its cache is reused where the prompt allows). Returns the drafted
 * and kept tokens of the greedy runs. */
static void check_draft(const char *name, const cllm_model *target, const cllm_model *dm,
                        size_t *drafted, size_t *kept) {
    *drafted = *kept = 0;
    cllm_draft *d = new_draft(target, dm, 1);
    int32_t *prompt = malloc(MAX_IDS * sizeof(int32_t));
    gen_out *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    const int lengths[] = {60, 7, 1};
    const int n_len = CHECK_SANITIZED ? 1 : 3;
    const int64_t nv = cllm_model_n_vocab(target);
    for (size_t pi = 0; d && prompt && a && b && pi < N_ELEMS(k_prompts); pi++) {
        size_t n_prompt = 0;
        if (cllm_tokenize(target, k_prompts[pi], strlen(k_prompts[pi]), true, false, prompt,
                          MAX_IDS, &n_prompt) != CLLM_OK) {
            CHECKF(false, "%s: tokenize: %s", name, cllm_last_error());
            continue;
        }
        for (int li = 0; li < n_len; li++) {
            for (int mode = 0; mode < 2; mode++) {
                cllm_sampler_params sp = cllm_sampler_default_params();
                if (mode == 0) sp.temperature = 0;
                if (mode == 1) sp.seed = 777 + (uint64_t)li;
                cllm_spec_params spec = cllm_spec_default_params();
                spec.type = CLLM_SPEC_DRAFT;
                spec.draft = d;
                spec.draft_max = 6;
                if (!run_gen(target, prompt, n_prompt, lengths[li], &sp, NULL, a)) continue;
                if (!run_gen(target, prompt, n_prompt, lengths[li], &sp, &spec, b)) {
                    free(a->next);
                    continue;
                }
                CHECKF(same_out(a, b, nv),
                       "%s: prompt %zu, %d tokens, mode %d: %zu vs %zu tokens (drafted %zu)", name,
                       pi, lengths[li], mode, a->n, b->n, b->drafted);
                if (mode == 0) *drafted += b->drafted, *kept += b->accepted;
                if (getenv("SPEC_DEBUG"))
                    printf("draft %s p%zu n%d m%d: %zu tokens, drafted %zu kept %zu\n", name, pi,
                           lengths[li], mode, b->n, b->drafted, b->accepted);
                free(a->next), free(b->next);
            }
        }
    }
    free(prompt), free(a), free(b);
    cllm_draft_free(d);
}

static bool gen_model(const char *gen, const char *vocab, const char *path, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' --vocab '%s' --out '%s' %s >/dev/null", gen, vocab, path,
             args);
    const bool ok = system(cmd) == 0;
    CHECKF(ok, "%s", cmd);
    return ok;
}

/* gen: cllm-gen-model (random draft models), or NULL */
static void test_draft(const char *gen) {
    cllm_model *m = load_data_model("stories260K.gguf");
    if (!m) return;
    /* the parameters: a draft for type draft, and only for it */
    cllm_spec_params p = cllm_spec_default_params();
    p.type = CLLM_SPEC_DRAFT;
    CHECK(cllm_spec_params_check(&p) == CLLM_ERR_INVALID_ARG);
    cllm_spec_type t = CLLM_SPEC_NONE;
    CHECK(cllm_spec_type_parse("draft", &t) == CLLM_OK && t == CLLM_SPEC_DRAFT);
    CHECK(!strcmp(cllm_spec_type_str(CLLM_SPEC_DRAFT), "draft"));

    /* the model drafting for itself: every greedy draft is kept (its
     * columns compute as the target's do), the output is the same */
    size_t drafted = 0, kept = 0;
    check_draft("stories260K for itself", m, m, &drafted, &kept);
    CHECKF(drafted > 0 && kept == drafted, "drafting for itself: %zu drafted, %zu kept", drafted,
           kept);
    cllm_draft *d = new_draft(m, m, 1);
    if (d) {
        p.draft = d;
        CHECK(cllm_spec_params_check(&p) == CLLM_OK);
        p.type = CLLM_SPEC_NGRAM;
        CHECK(cllm_spec_params_check(&p) == CLLM_ERR_INVALID_ARG);
        CHECK(cllm_draft_session(d) != NULL);
        /* its KV cache as planned, and allocated as planned */
        const cllm_memory_report r = cllm_session_memory(cllm_draft_session(d));
        CHECK(r.planned[CLLM_MEM_STATE] > 0);
        CHECK(r.planned[CLLM_MEM_STATE] == r.allocated[CLLM_MEM_STATE]);
    }

    /* random models with the target's vocabulary draft (a llama, and a
     * Gemma 3 whose sliding-window layers cannot keep a cut prefix; with 3
     * layers all of them slide, and no layer reads the causal mask):
     * drafts are rejected, the output is the same */
    cllm_model *other = NULL, *swa = NULL;
    if (gen) {
        char dir[512], llama[1024], gemma[1024], vocab[4096];
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/cllm-test-spec-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
        CHECK(mkdtemp(dir) != NULL);
        snprintf(llama, sizeof(llama), "%s/draft-llama.gguf", dir);
        snprintf(gemma, sizeof(gemma), "%s/draft-gemma3.gguf", dir);
        refs_model_path(vocab, sizeof(vocab), "stories260K.gguf");
        if (gen_model(gen, vocab, llama,
                      "--n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --n-ctx 512 "
                      "--type f32 --seed 11") &&
            cllm_model_load(llama, NULL, &other) != CLLM_OK) {
            CHECKF(false, "%s", cllm_last_error());
        }
        if (gen_model(gen, vocab, gemma,
                      "--arch gemma3 --n-embd 64 --n-layer 3 --n-head 2 --n-head-kv 1 --n-ff 128 "
                      "--n-ctx 512 --swa 8 --type f32 --seed 12") &&
            cllm_model_load(gemma, NULL, &swa) != CLLM_OK) {
            CHECKF(false, "%s", cllm_last_error());
        }
        remove(llama), remove(gemma), remove(dir);
    }
    if (other) {
        check_draft("random llama for stories260K", m, other, &drafted, &kept);
        CHECKF(drafted > 0, "the random model drafted nothing");
        CHECKF(kept < drafted, "the random model's drafts were all kept");
    }
    if (swa) {
        check_draft("random gemma3 for stories260K", m, swa, &drafted, &kept);
        CHECKF(drafted > 0, "the random sliding-window model drafted nothing");
    }

    /* a vocabulary that is not the target's is refused, saying so */
    cllm_model *big = load_data_model("llama-2-tiny-random.gguf");
    if (big) {
        cllm_draft *bad = NULL;
        CHECK(cllm_draft_new(m, big, NULL, &bad) == CLLM_ERR_INVALID_ARG && bad == NULL);
        CHECKF(strstr(cllm_last_error(), "vocabulary") != NULL, "message: %s", cllm_last_error());
    }

    /* the engine: three sequences share the draft model's session (one
     * sequence each); a draft of fewer sequences is refused */
    eng_out *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    cllm_draft *d3 = new_draft(m, other ? other : m, 3);
    for (int sampled = 0; sampled < 2 && a && b && d3; sampled++) {
        cllm_spec_params sp = cllm_spec_default_params();
        sp.type = CLLM_SPEC_DRAFT;
        sp.draft = d3;
        run_engine(m, NULL, sampled, a);
        run_engine(m, &sp, sampled, b);
        CHECKF(b->drafted > 0, "engine: nothing drafted");
        for (int r = 0; r < N_REQ; r++) {
            CHECKF(a->n[r] == b->n[r] && !memcmp(a->ids[r], b->ids[r], (size_t)a->n[r] * 4),
                   "engine, %s: request %d differs with a draft model (%d vs %d tokens)",
                   sampled ? "sampled" : "greedy", r, a->n[r], b->n[r]);
        }
    }
    if (d) {
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = 64;
        sp.n_seq = 2;
        cllm_engine *e = NULL;
        if (cllm_engine_new(m, &sp, on_event, b, &e) == CLLM_OK) {
            cllm_request_params rp = cllm_request_default_params();
            rp.spec.type = CLLM_SPEC_DRAFT;
            rp.spec.draft = d; /* one sequence */
            const int32_t ids[2] = {1, 2};
            CHECK(cllm_engine_submit(e, ids, 2, &rp, NULL, NULL) == CLLM_ERR_INVALID_ARG);
            CHECKF(strstr(cllm_last_error(), "sequences") != NULL, "message: %s",
                   cllm_last_error());
            cllm_engine_free(e);
        }
    }
    free(a), free(b);
    cllm_draft_free(d3);
    cllm_draft_free(d);
    cllm_model_free(big);
    cllm_model_free(other);
    cllm_model_free(swa);
    cllm_model_free(m);
}

/* ---- the distribution of sampled tokens ------------------------------------- */

/* The upper tail of the chi-square distribution with k degrees of freedom
 * at p = 0.001 (Wilson-Hilferty: z = 3.0902). */
static double chi2_crit(int k) {
    const double z = 3.0902, a = 2.0 / (9.0 * k);
    const double c = 1 - a + z * sqrt(a);
    return k * c * c * c;
}

enum { N_SEEDS = 400, POS = 6, N_TOK = 8 };

/* The chi-square test of homogeneity of two histograms of a token: the
 * tokens seen 10 times or more in both together are bins, the rest one
 * bin; p < 0.001 fails. */
static void homogeneity(const int *h0, const int *h1, int64_t nv, const char *what, int n_seeds) {
    double n0 = 0, n1 = 0;
    for (int64_t t = 0; t < nv; t++) n0 += h0[t], n1 += h1[t];
    double chi2 = 0, o0 = 0, o1 = 0;
    int bins = 0;
    for (int64_t t = 0; t <= nv; t++) {
        double a, b;
        if (t < nv) {
            a = h0[t], b = h1[t];
            if (a + b < 10) {
                o0 += a, o1 += b;
                continue;
            }
        } else {
            a = o0, b = o1;
            if (a + b == 0) continue;
        }
        const double e0 = (a + b) * n0 / (n0 + n1), e1 = (a + b) * n1 / (n0 + n1);
        chi2 += (a - e0) * (a - e0) / e0 + (b - e1) * (b - e1) / e1;
        bins++;
    }
    if (bins >= 2 && n0 > 0 && n1 > 0) {
        const double crit = chi2_crit(bins - 1);
        printf("distribution (%s): token %d over %d seeds each: chi2 %.2f, %d bins, limit %.2f\n",
               what, POS, n_seeds, chi2, bins, crit);
        CHECKF(chi2 < crit, "%s: chi2 %.2f >= %.2f (%d bins)", what, chi2, crit, bins);
    }
    CHECKF(bins >= 2, "%s: %d bins", what, bins);
}

/* Plain sampling against sampling with n-gram drafts and with the model
 * drafting for itself, each over seeds of its own (independent samples). */
static void test_distribution(void) {
    const char *const one[] = {"stories260K.gguf", NULL};
    if (!refs_have(one)) return;
    char path[4096];
    refs_model_path(path, sizeof(path), one[0]);
    cllm_model *m = NULL;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
        CHECKF(false, "%s", cllm_last_error());
        return;
    }
    const int64_t nv = cllm_model_n_vocab(m);
    int *hist[3] = {calloc((size_t)nv, sizeof(int)), calloc((size_t)nv, sizeof(int)),
                    calloc((size_t)nv, sizeof(int))};
    int32_t prompt[MAX_IDS];
    size_t n_prompt = 0;
    const char *text = k_prompts[0];
    CHECK(cllm_tokenize(m, text, strlen(text), true, false, prompt, MAX_IDS, &n_prompt) == CLLM_OK);
    cllm_session *s = new_session(m, 256);
    cllm_draft *d = new_draft(m, m, 1);
    size_t drafted[3] = {0};
    const int n_seeds = CHECK_SANITIZED ? 60 : N_SEEDS;
    for (int spec = 0; spec < 3 && s && d && hist[0] && hist[1] && hist[2]; spec++) {
        for (int k = 0; k < n_seeds; k++) {
            cllm_sampler_params sp = cllm_sampler_default_params();
            sp.temperature = 1.0f;                   /* with top-k 40, top-p 0.95, min-p 0.05 */
            sp.seed = (uint64_t)(100000 * spec + k); /* other seeds for each */
            cllm_sampler *smp = NULL;
            if (cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK) break;
            cllm_spec_params p = cllm_spec_default_params();
            if (spec == 0) p.type = CLLM_SPEC_NONE;
            p.ngram_min = 1;
            if (spec == 2) p.type = CLLM_SPEC_DRAFT, p.draft = d;
            cllm_session_reset(s);
            cllm_generate_result res = {0};
            if (cllm_generate_spec(s, smp, prompt, n_prompt, N_TOK, &p, NULL, NULL, &res) ==
                    CLLM_OK &&
                res.n_ids > POS) {
                hist[spec][res.ids[POS]]++;
            }
            drafted[spec] += res.n_drafted;
            cllm_generate_result_free(&res);
            cllm_sampler_free(smp);
        }
    }
    CHECKF(drafted[1] > 0 && drafted[2] > 0, "no drafts while sampling (%zu n-gram, %zu draft)",
           drafted[1], drafted[2]);
    if (hist[0] && hist[1] && hist[2]) {
        homogeneity(hist[0], hist[1], nv, "n-gram drafts", n_seeds);
        homogeneity(hist[0], hist[2], nv, "draft model", n_seeds);
    }
    free(hist[0]), free(hist[1]), free(hist[2]);
    cllm_draft_free(d);
    cllm_session_free(s);
    cllm_model_free(m);
}

int main(int argc, char **argv) {
    cllm_log_set(quiet, NULL);
    test_lookup();
    test_callback();
    test_engine();
    test_distribution();
    test_draft(argc > 1 && argv[1][0] ? argv[1] : NULL);
    test_models();
    return check_summary("test_spec");
}
