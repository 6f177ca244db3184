/* Token sampling: logit bias, penalties, the end-token mask, the grammar,
 * greedy, top-k, temperature, top-p, min-p. */
#include "runtime/sampler.h"
#include "core/hostmem.h"
#include "runtime/model.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

#include <float.h>
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

struct cllm_sampler {
    cllm_sampler_params params;
    int32_t n_vocab;
    /* (n_vocab) scratch. Holds, in turn: the logits indexed by id; the finite
     * candidates; their softmax weights exp((l - max) / T); the final
     * probabilities. The field `p` carries whichever of these is current. */
    cllm_sampler_cand *cand;
    uint8_t *seen;       /* ((n_vocab + 7) / 8) bits: token already penalised in this call */
    int32_t *window;     /* (repeat_last_n) ring of accepted tokens; NULL when 0 */
    int32_t window_len;  /* valid slots are [0, window_len) */
    int32_t window_head; /* next slot to write */
    uint64_t rng[4];     /* xoshiro256** state */
    /* (n_bias) the logit bias, a copy of params.logit_bias sorted by id */
    cllm_logit_bias *bias;
    /* (n_eog) the ids masked by ignore_eos; NULL without it */
    int32_t *eog;
    int32_t n_eog;
    /* OpenAI's penalties, NULL when both are 0: (n_vocab) occurrences of
     * each generated id, and (n_vocab) the distinct ids generated, n_gen of
     * them, in the order they first came */
    int32_t *counts;
    int32_t *gen;
    int32_t n_gen;
    /* (n_vocab) the row after stages 1-5; NULL when none of them can be on */
    float *row;
    /* the grammar stage, NULL when off: the compiled grammar, the state of
     * the text generated so far, the vocabulary's pieces and trie, the mask
     * ((n_vocab + 7) / 8 bits) and the end-of-generation ids (n_geog) */
    cllm_grammar *grammar;
    cllm_grammar_matcher *gm;
    cllm_grammar_vocab *gvocab;
    uint8_t *allowed;
    int32_t *geog;
    int32_t n_geog;
    /* a lazy grammar (lazy): off until a trigger came (lazy_on). The words
     * (n_trig, copies in one block) and their lengths, the trigger tokens
     * (n_trig_tok, sorted), the generated text's last tail_len bytes while
     * off (fewer than the longest word), and scratch for them and a piece */
    bool lazy, lazy_on;
    char **trig;
    size_t *trig_len;
    int32_t n_trig;
    size_t trig_max;
    int32_t *trig_tok;
    int32_t n_trig_tok;
    char *tail;
    size_t tail_len;
    char *lz_buf;
};

/* ---- PRNG: xoshiro256** (Blackman & Vigna), seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t st[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&x);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t st[4]) {
    const uint64_t result = rotl64(st[1] * 5, 7) * 9;
    const uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

/* ---- parameters ---- */

cllm_sampler_params cllm_sampler_default_params(void) {
    return (cllm_sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .ignore_eos = false,
        .grammar = NULL,
        .grammar_root = NULL,
        .grammar_triggers = NULL,
        .n_grammar_triggers = 0,
        .grammar_trigger_tokens = NULL,
        .n_grammar_trigger_tokens = 0,
    };
}

static int id_cmp(const void *pa, const void *pb) {
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static int bias_cmp(const void *pa, const void *pb) {
    const cllm_logit_bias *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

static cllm_status validate_params(const cllm_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: n_vocab %d <= 0", n_vocab);
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: temperature must be finite and >= 0 (0 = greedy), got %g",
                          (double)p->temperature);
    }
    if (p->top_k < 0) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: top_k must be >= 0 (0 = off), got %d",
                          p->top_k);
    }
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: top_p must be in (0, 1] (1 = off), got %g", (double)p->top_p);
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: min_p must be in [0, 1] (0 = off), got %g", (double)p->min_p);
    }
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: repeat_penalty must be finite and > 0 (1 = off), got %g",
                          (double)p->repeat_penalty);
    }
    if (p->repeat_last_n < 0 || p->repeat_last_n > CLLM_SAMPLER_MAX_WINDOW) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: repeat_last_n must be in [0, %d], got %d",
                          CLLM_SAMPLER_MAX_WINDOW, p->repeat_last_n);
    }
    if (!isfinite(p->frequency_penalty)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: frequency_penalty must be finite (0 = off), got %g",
                          (double)p->frequency_penalty);
    }
    if (!isfinite(p->presence_penalty)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: presence_penalty must be finite (0 = off), got %g",
                          (double)p->presence_penalty);
    }
    if (p->n_logit_bias < 0 || p->n_logit_bias > n_vocab ||
        (p->n_logit_bias > 0 && !p->logit_bias)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: n_logit_bias must be in [0, n_vocab = %d] with a logit_bias "
                          "array, got %d",
                          n_vocab, p->n_logit_bias);
    }
    if (p->n_grammar_triggers < 0 || (p->n_grammar_triggers > 0 && !p->grammar_triggers) ||
        p->n_grammar_trigger_tokens < 0 ||
        (p->n_grammar_trigger_tokens > 0 && !p->grammar_trigger_tokens)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: n_grammar_triggers and n_grammar_trigger_tokens must be >= 0, "
                          "with an array when > 0");
    }
    if ((p->n_grammar_triggers > 0 || p->n_grammar_trigger_tokens > 0) && !p->grammar) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: grammar triggers need a grammar (they make it lazy)");
    }
    for (int32_t i = 0; i < p->n_grammar_triggers; i++) {
        const char *w = p->grammar_triggers[i];
        const size_t len = w ? strlen(w) : 0;
        if (len == 0 || len > CLLM_SAMPLER_MAX_TRIGGER) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: grammar_triggers[%d] must be a word of 1 to %d bytes", i,
                              CLLM_SAMPLER_MAX_TRIGGER);
        }
    }
    for (int32_t i = 0; i < p->n_grammar_trigger_tokens; i++) {
        const int32_t id = p->grammar_trigger_tokens[i];
        if (id < 0 || id >= n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: grammar_trigger_tokens[%d]: token %d is outside [0, %d)", i,
                              id, n_vocab);
        }
    }
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const cllm_logit_bias b = p->logit_bias[i];
        if (b.id < 0 || b.id >= n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: logit_bias[%d]: token %d is outside [0, %d)", i, b.id,
                              n_vocab);
        }
        if (isnan(b.bias) || b.bias == INFINITY) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: logit_bias[%d]: the bias of token %d must be finite or "
                              "-inf, got %g",
                              i, b.id, (double)b.bias);
        }
    }
    return CLLM_OK;
}

cllm_status cllm_sampler_params_check(const cllm_sampler_params *p, int32_t n_vocab) {
    if (!p) return CLLM_NULL_ARG("params");
    CLLM_TRY(validate_params(p, n_vocab));
    if (p->grammar) { /* compiled and dropped: its errors come now */
        cllm_grammar *g = NULL;
        CLLM_TRY(cllm_grammar_parse(p->grammar, p->grammar_root, &g));
        cllm_grammar_free(g);
    }
    return CLLM_OK;
}

/* ---- lifecycle ---- */

/* The triggers of a lazy grammar (params checked), copied into s. */
static cllm_status lazy_new(cllm_sampler *s, const cllm_sampler_params *p) {
    s->params.grammar_triggers = NULL; /* the caller's arrays */
    s->params.grammar_trigger_tokens = NULL;
    s->lazy = p->n_grammar_triggers > 0 || p->n_grammar_trigger_tokens > 0;
    if (!s->lazy) return CLLM_OK;
    size_t bytes = 0, piece_max = 0;
    for (int32_t i = 0; i < p->n_grammar_triggers; i++) {
        const size_t len = strlen(p->grammar_triggers[i]);
        bytes += len + 1;
        if (len > s->trig_max) s->trig_max = len;
    }
    for (int32_t id = 0; id < s->n_vocab; id++) {
        size_t len;
        cllm_grammar_vocab_piece(s->gvocab, id, &len);
        if (len > piece_max) piece_max = len;
    }
    const int32_t n = p->n_grammar_triggers;
    s->trig = cllm_malloc(((size_t)n + 1) * sizeof(char *) + bytes);
    s->trig_len = cllm_malloc(((size_t)n + 1) * sizeof(size_t));
    s->trig_tok = cllm_malloc(((size_t)p->n_grammar_trigger_tokens + 1) * sizeof(int32_t));
    s->tail = cllm_malloc(s->trig_max + 1);
    s->lz_buf = cllm_malloc(s->trig_max + piece_max + 1);
    if (!s->trig || !s->trig_len || !s->trig_tok || !s->tail || !s->lz_buf) return CLLM_ERR_NOMEM;
    char *at = (char *)(s->trig + n + 1);
    for (int32_t i = 0; i < n; i++) {
        s->trig_len[i] = strlen(p->grammar_triggers[i]);
        memcpy(at, p->grammar_triggers[i], s->trig_len[i] + 1);
        s->trig[i] = at;
        at += s->trig_len[i] + 1;
    }
    s->n_trig = n;
    if (p->n_grammar_trigger_tokens > 0) {
        memcpy(s->trig_tok, p->grammar_trigger_tokens,
               (size_t)p->n_grammar_trigger_tokens * sizeof(int32_t));
    }
    s->n_trig_tok = p->n_grammar_trigger_tokens;
    qsort(s->trig_tok, (size_t)s->n_trig_tok, sizeof(int32_t), id_cmp);
    return CLLM_OK;
}

/* The sampler of cllm_sampler_new and cllm_sampler_new_model: `tok` (may
 * be NULL) gives the end tokens that ignore_eos masks. */
static cllm_status sampler_new(const cllm_sampler_params *params, int32_t n_vocab,
                               const cllm_tokenizer *tok, cllm_sampler **out) {
    CLLM_ASSERT(params != NULL && out != NULL);
    cllm_status st = validate_params(params, n_vocab);
    if (st != CLLM_OK) return st;
    if (params->ignore_eos && !tok) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: ignore_eos needs the model's end tokens "
                          "(cllm_sampler_new_model, with a model that has a tokenizer)");
    }
    if (params->grammar && !tok) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: a grammar needs the model's tokens "
                          "(cllm_sampler_new_model, with a model that has a tokenizer)");
    }
    if (tok && params->grammar && cllm_tokenizer_n_vocab(tok) != n_vocab) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: the tokenizer has %d tokens, the logits %d: no grammar",
                          cllm_tokenizer_n_vocab(tok), n_vocab);
    }

    size_t cand_bytes;
    if (cllm_mul_overflow((size_t)n_vocab, sizeof(cllm_sampler_cand), &cand_bytes)) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "sampler: n_vocab %d too large", n_vocab);
    }
    cllm_sampler *s = cllm_calloc(1, sizeof(*s));
    if (!s) goto nomem;
    s->params = *params;
    s->n_vocab = n_vocab;
    s->cand = cllm_malloc(cand_bytes);
    s->seen = cllm_calloc(((size_t)n_vocab + 7) / 8, 1);
    if (!s->cand || !s->seen) goto nomem;
    if (params->repeat_last_n > 0) {
        s->window = cllm_malloc((size_t)params->repeat_last_n * sizeof(int32_t));
        if (!s->window) goto nomem;
    }
    s->params.logit_bias = NULL; /* the caller's array: s->bias is the copy */
    if (params->n_logit_bias > 0) {
        s->bias = cllm_malloc((size_t)params->n_logit_bias * sizeof(*s->bias));
        if (!s->bias) goto nomem;
        memcpy(s->bias, params->logit_bias, (size_t)params->n_logit_bias * sizeof(*s->bias));
        qsort(s->bias, (size_t)params->n_logit_bias, sizeof(*s->bias), bias_cmp);
        for (int32_t i = 1; i < params->n_logit_bias; i++) {
            if (s->bias[i].id == s->bias[i - 1].id) {
                const int32_t id = s->bias[i].id;
                cllm_sampler_free(s);
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "sampler: logit_bias: token %d is given twice", id);
            }
        }
        s->params.logit_bias = s->bias;
    }
    if (params->ignore_eos) {
        for (int32_t id = 0; id < n_vocab; id++) s->n_eog += cllm_tokenizer_is_eog(tok, id);
        s->eog = cllm_malloc(((size_t)s->n_eog + 1) * sizeof(int32_t));
        if (!s->eog) goto nomem;
        for (int32_t id = 0, k = 0; id < n_vocab; id++) {
            if (cllm_tokenizer_is_eog(tok, id)) s->eog[k++] = id;
        }
    }
    if (params->frequency_penalty != 0.0f || params->presence_penalty != 0.0f) {
        s->counts = cllm_calloc((size_t)n_vocab, sizeof(int32_t));
        s->gen = cllm_malloc((size_t)n_vocab * sizeof(int32_t));
        if (!s->counts || !s->gen) goto nomem;
    }
    s->params.grammar = NULL; /* the caller's text: s->grammar is what it compiled to */
    s->params.grammar_root = NULL;
    if (params->grammar) {
        st = cllm_grammar_parse(params->grammar, params->grammar_root, &s->grammar);
        if (st == CLLM_OK) st = cllm_grammar_matcher_new(s->grammar, &s->gm);
        if (st == CLLM_OK) st = cllm_grammar_vocab_new(tok, &s->gvocab);
        if (st != CLLM_OK) {
            cllm_sampler_free(s);
            return st;
        }
        s->allowed = cllm_malloc(((size_t)n_vocab + 7) / 8);
        for (int32_t id = 0; id < n_vocab; id++) s->n_geog += cllm_tokenizer_is_eog(tok, id);
        s->geog = cllm_malloc(((size_t)s->n_geog + 1) * sizeof(int32_t));
        if (!s->allowed || !s->geog) goto nomem;
        for (int32_t id = 0, k = 0; id < n_vocab; id++) {
            if (cllm_tokenizer_is_eog(tok, id)) s->geog[k++] = id;
        }
        if (lazy_new(s, params) != CLLM_OK) goto nomem;
    }
    if (s->counts || s->eog || s->bias || s->grammar ||
        (params->repeat_penalty != 1.0f && params->repeat_last_n > 0)) {
        s->row = cllm_malloc((size_t)n_vocab * sizeof(float));
        if (!s->row) goto nomem;
    }
    cllm_sampler_reset(s);
    *out = s;
    return CLLM_OK;

nomem:
    cllm_sampler_free(s);
    return cllm_error(CLLM_ERR_NOMEM, "sampler: out of memory for n_vocab %d", n_vocab);
}

cllm_status cllm_sampler_new(const cllm_sampler_params *params, int32_t n_vocab,
                             cllm_sampler **out) {
    if (!params || !out) return CLLM_NULL_ARG("params or out");
    return sampler_new(params, n_vocab, NULL, out);
}

cllm_status cllm_sampler_new_model(const cllm_sampler_params *params, const cllm_model *m,
                                   cllm_sampler **out) {
    if (!params || !m || !out) return CLLM_NULL_ARG("params, the model or out");
    return sampler_new(params, (int32_t)m->hp.n_vocab, m->tok, out);
}

void cllm_sampler_free(cllm_sampler *s) {
    if (!s) return;
    cllm_free(s->cand);
    cllm_free(s->seen);
    cllm_free(s->window);
    cllm_free(s->bias);
    cllm_free(s->eog);
    cllm_free(s->counts);
    cllm_free(s->gen);
    cllm_free(s->row);
    cllm_grammar_matcher_free(s->gm);
    cllm_grammar_vocab_free(s->gvocab);
    cllm_grammar_free(s->grammar);
    cllm_free(s->allowed);
    cllm_free(s->geog);
    cllm_free(s->trig);
    cllm_free(s->trig_len);
    cllm_free(s->trig_tok);
    cllm_free(s->tail);
    cllm_free(s->lz_buf);
    cllm_free(s);
}

int32_t cllm_sampler_n_vocab(const cllm_sampler *s) { return s ? s->n_vocab : 0; }

cllm_status cllm_sampler_save(const cllm_sampler *s, cllm_sampler_saved *out) {
    memset(out, 0, sizeof(*out));
    const size_t cap = (size_t)s->params.repeat_last_n;
    if (s->window && !(out->window = cllm_malloc(cap * sizeof(int32_t)))) goto nomem;
    if (s->counts && !(out->counts = cllm_malloc((size_t)s->n_vocab * sizeof(int32_t)))) {
        goto nomem;
    }
    if (out->window) memcpy(out->window, s->window, cap * sizeof(int32_t));
    if (out->counts) memcpy(out->counts, s->counts, (size_t)s->n_vocab * sizeof(int32_t));
    out->window_len = s->window_len;
    out->window_head = s->window_head;
    out->n_gen = s->n_gen;
    memcpy(out->rng, s->rng, sizeof(out->rng));
    return CLLM_OK;

nomem:
    cllm_sampler_saved_free(out);
    return cllm_error(CLLM_ERR_NOMEM, "sampler: out of memory to save its state");
}

void cllm_sampler_restore(cllm_sampler *s, const cllm_sampler_saved *saved) {
    const size_t cap = (size_t)s->params.repeat_last_n;
    if (s->window && saved->window) memcpy(s->window, saved->window, cap * sizeof(int32_t));
    if (s->counts && saved->counts) {
        memcpy(s->counts, saved->counts, (size_t)s->n_vocab * sizeof(int32_t));
    }
    s->window_len = saved->window_len;
    s->window_head = saved->window_head;
    s->n_gen = saved->n_gen; /* gen[] only grows: its first n_gen are as they were */
    memcpy(s->rng, saved->rng, sizeof(s->rng));
}

void cllm_sampler_saved_free(cllm_sampler_saved *saved) {
    if (!saved) return;
    cllm_free(saved->window);
    cllm_free(saved->counts);
    memset(saved, 0, sizeof(*saved));
}

void cllm_sampler_reset(cllm_sampler *s) {
    if (!s) return;
    s->window_len = 0;
    s->window_head = 0;
    for (int32_t i = 0; i < s->n_gen; i++) s->counts[s->gen[i]] = 0;
    s->n_gen = 0;
    rng_seed(s->rng, s->params.seed);
    if (s->gm) cllm_grammar_matcher_reset(s->gm);
    s->lazy_on = false;
    s->tail_len = 0;
}

/* Whether the grammar constrains the next token. */
static bool grammar_on(const cllm_sampler *s) { return s->gm && (!s->lazy || s->lazy_on); }

bool cllm_sampler_grammar_on(const cllm_sampler *s) { return s && grammar_on(s); }

/* Whether `id` is a trigger token of a lazy grammar. */
static bool lazy_is_trigger_token(const cllm_sampler *s, int32_t id) {
    return s->n_trig_tok > 0 &&
           bsearch(&id, s->trig_tok, (size_t)s->n_trig_tok, sizeof(int32_t), id_cmp) != NULL;
}

/* A lazy grammar that is off, and token `id` (not a trigger token) next:
 * s->lz_buf[0, *len) becomes the text's tail and the token's bytes, and
 * *at where the first trigger word that ends in the token's bytes begins
 * (*len when none does). */
static void lazy_find(cllm_sampler *s, int32_t id, size_t *at, size_t *len) {
    size_t plen;
    const char *piece = cllm_grammar_vocab_piece(s->gvocab, id, &plen);
    char *b = s->lz_buf;
    memcpy(b, s->tail, s->tail_len);
    memcpy(b + s->tail_len, piece, plen);
    const size_t n = s->tail_len + plen;
    size_t best = n;
    for (int32_t i = 0; i < s->n_trig && plen > 0; i++) {
        const size_t w = s->trig_len[i];
        /* a word that ends in the piece begins past tail_len - w */
        const size_t from = s->tail_len >= w ? s->tail_len - w + 1 : 0;
        if (from >= n) continue;
        const char *hit = memmem(b + from, n - from, s->trig[i], w);
        if (hit && (size_t)(hit - b) < best) best = (size_t)(hit - b);
    }
    *at = best;
    *len = n;
}

/* A lazy grammar that is off: whether token `id` may come (*ok): not when
 * it brings a trigger word with bytes after it the grammar refuses. */
static cllm_status lazy_allows(cllm_sampler *s, int32_t id, bool *ok) {
    *ok = true;
    if (lazy_is_trigger_token(s, id)) return CLLM_OK;
    size_t at, len;
    lazy_find(s, id, &at, &len);
    if (at == len) return CLLM_OK;
    return cllm_grammar_matcher_try(s->gm, s->lz_buf + at, len - at, ok);
}

/* A lazy grammar that is off and token `id` generated: the grammar on
 * after a trigger token, or from a trigger word's first byte on (those
 * bytes read); else the tail of the text moves on. CLLM_ERR_INVALID_ARG
 * when the grammar refuses what follows the word (nothing changes). */
static cllm_status lazy_accept(cllm_sampler *s, int32_t id) {
    if (lazy_is_trigger_token(s, id)) {
        s->lazy_on = true;
        return CLLM_OK;
    }
    size_t at, len;
    lazy_find(s, id, &at, &len);
    if (at < len) {
        const cllm_status st = cllm_grammar_matcher_accept(s->gm, s->lz_buf + at, len - at);
        if (st == CLLM_ERR_INVALID_ARG) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: token %d brings a grammar trigger the grammar cannot "
                              "follow",
                              id);
        }
        if (st != CLLM_OK) return st;
        s->lazy_on = true;
        return CLLM_OK;
    }
    const size_t keep = s->trig_max > 0 ? s->trig_max - 1 : 0;
    const size_t from = len > keep ? len - keep : 0;
    memcpy(s->tail, s->lz_buf + from, len - from);
    s->tail_len = len - from;
    return CLLM_OK;
}

/* Whether `id` is one of the end-of-generation tokens the grammar stage
 * knows (few: a linear search). */
static bool grammar_is_eog(const cllm_sampler *s, int32_t id) {
    for (int32_t i = 0; i < s->n_geog; i++) {
        if (s->geog[i] == id) return true;
    }
    return false;
}

/* Whether the grammar lets token `id` come next (*ok): an end token where
 * the text so far is complete, another token when its bytes (not empty)
 * can continue the text. */
static cllm_status grammar_allows(cllm_sampler *s, int32_t id, bool *ok) {
    if (!grammar_on(s)) {
        if (grammar_is_eog(s, id)) {
            *ok = true;
            return CLLM_OK;
        }
        return lazy_allows(s, id, ok);
    }
    if (grammar_is_eog(s, id)) {
        *ok = cllm_grammar_matcher_done(s->gm);
        return CLLM_OK;
    }
    size_t len;
    const char *piece = cllm_grammar_vocab_piece(s->gvocab, id, &len);
    if (len == 0) {
        *ok = false;
        return CLLM_OK;
    }
    return cllm_grammar_matcher_try(s->gm, piece, len, ok);
}

/* Appends `token` (in range) to the repetition window. */
static void window_push(cllm_sampler *s, int32_t token) {
    const int32_t cap = s->params.repeat_last_n;
    if (cap == 0) return;
    s->window[s->window_head] = token;
    s->window_head = s->window_head + 1 == cap ? 0 : s->window_head + 1;
    if (s->window_len < cap) s->window_len++;
}

cllm_status cllm_sampler_accept(cllm_sampler *s, int32_t token) {
    if (!s) return CLLM_NULL_ARG("the sampler");
    if (token < 0 || token >= s->n_vocab) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: token %d out of range [0, %d)", token,
                          s->n_vocab);
    }
    if (s->gm && !grammar_on(s)) {
        if (!grammar_is_eog(s, token)) CLLM_TRY(lazy_accept(s, token));
    } else if (s->gm) { /* first, so that a refused token changes nothing */
        if (grammar_is_eog(s, token)) {
            if (!cllm_grammar_matcher_done(s->gm)) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "sampler: end token %d before the grammar is complete", token);
            }
        } else {
            size_t len;
            const char *piece = cllm_grammar_vocab_piece(s->gvocab, token, &len);
            const cllm_status st =
                len ? cllm_grammar_matcher_accept(s->gm, piece, len) : CLLM_ERR_INVALID_ARG;
            if (st == CLLM_ERR_INVALID_ARG) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "sampler: token %d cannot continue the grammar", token);
            }
            if (st != CLLM_OK) return st;
        }
    }
    window_push(s, token);
    if (s->counts && s->counts[token]++ == 0) s->gen[s->n_gen++] = token;
    return CLLM_OK;
}

cllm_status cllm_sampler_accept_prompt(cllm_sampler *s, const int32_t *tokens, size_t n) {
    if (!s || (!tokens && n > 0)) return CLLM_NULL_ARG("the sampler or tokens");
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "sampler: prompt token %zu is %d, out of range [0, %d)", i, tokens[i],
                              s->n_vocab);
        }
    }
    /* only the last repeat_last_n stay in the window */
    const size_t cap = (size_t)s->params.repeat_last_n;
    for (size_t i = n > cap ? n - cap : 0; i < n; i++) window_push(s, tokens[i]);
    return CLLM_OK;
}

/* ---- pipeline stages ---- */

/* Total order used everywhere: larger value first, then lower id. */
static bool cand_better(const cllm_sampler_cand *a, const cllm_sampler_cand *b) {
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cand_cmp_desc(const void *pa, const void *pb) {
    const cllm_sampler_cand *a = pa, *b = pb;
    if (cand_better(a, b)) return -1;
    if (cand_better(b, a)) return 1;
    return 0;
}

static void cand_swap(cllm_sampler_cand *a, cllm_sampler_cand *b) {
    cllm_sampler_cand t = *a;
    *a = *b;
    *b = t;
}

static cllm_status bad_logit(int32_t i, float l);

/* Whether logit l is NaN or +inf (-inf is a mask). */
static bool is_bad(float l) { return isnan(l) || l == INFINITY; }

/*
 * Stages 1-4 on a copy of the row: s->row = logits with the logit bias
 * added (-inf masks), OpenAI's penalties (l -= frequency * count +
 * presence, over the generated tokens), the end tokens masked and the
 * repetition penalty on each distinct token of the window. A result above
 * FLT_MAX is FLT_MAX (+inf is no logit). The logits these stages touch are
 * checked first (a bias or a mask must not hide a NaN or +inf); the others
 * are checked where the row is read.
 */
static cllm_status apply_stages(cllm_sampler *s, const float *logits, bool repeat) {
    for (int32_t i = 0; i < s->params.n_logit_bias; i++) {
        if (is_bad(logits[s->bias[i].id])) return bad_logit(s->bias[i].id, logits[s->bias[i].id]);
    }
    for (int32_t i = 0; i < s->n_gen; i++) {
        if (is_bad(logits[s->gen[i]])) return bad_logit(s->gen[i], logits[s->gen[i]]);
    }
    for (int32_t i = 0; i < s->n_eog; i++) {
        if (is_bad(logits[s->eog[i]])) return bad_logit(s->eog[i], logits[s->eog[i]]);
    }
    for (int32_t i = 0; repeat && i < s->window_len; i++) {
        if (is_bad(logits[s->window[i]])) return bad_logit(s->window[i], logits[s->window[i]]);
    }
    float *row = s->row;
    memcpy(row, logits, (size_t)s->n_vocab * sizeof(float));
    for (int32_t i = 0; i < s->params.n_logit_bias; i++) {
        float *l = &row[s->bias[i].id];
        *l += s->bias[i].bias;
        if (*l > FLT_MAX) *l = FLT_MAX;
    }
    const float fp = s->params.frequency_penalty, pp = s->params.presence_penalty;
    for (int32_t i = 0; i < s->n_gen; i++) {
        const int32_t t = s->gen[i];
        float *l = &row[t];
        *l -= (float)s->counts[t] * fp + pp;
        if (*l > FLT_MAX) *l = FLT_MAX;
    }
    for (int32_t i = 0; i < s->n_eog; i++) row[s->eog[i]] = -INFINITY;
    if (!repeat) return CLLM_OK;
    const float pen = s->params.repeat_penalty;
    for (int32_t i = 0; i < s->window_len; i++) {
        const int32_t t = s->window[i];
        const uint8_t bit = (uint8_t)(1u << (t & 7));
        if (s->seen[t >> 3] & bit) continue;
        s->seen[t >> 3] |= bit;
        float *l = &row[t];
        *l = *l > 0.0f ? *l / pen : *l * pen;
        if (*l > FLT_MAX) *l = FLT_MAX; /* a penalty < 1 must not create +inf */
    }
    for (int32_t i = 0; i < s->window_len; i++) s->seen[s->window[i] >> 3] = 0;
    return CLLM_OK;
}

/* Min-heap on cand_better: the root is the worst of h[0, n). */
static void heap_sift_down(cllm_sampler_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t worst = i;
        const int32_t l = 2 * i + 1, r = 2 * i + 2;
        if (l < n && cand_better(&h[worst], &h[l])) worst = l;
        if (r < n && cand_better(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        cand_swap(&h[i], &h[worst]);
        i = worst;
    }
}

/* Stage 3. Leaves the k best of c[0, n) in c[0, k), sorted best first.
 * O(n log k) with a k-element heap; no sort of the whole row. */
static void select_top_k(cllm_sampler_cand *c, int32_t n, int32_t k) {
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (cand_better(&c[i], &c[0])) {
            c[0] = c[i];
            heap_sift_down(c, k, 0);
        }
    }
    /* Heap sort: moving the worst to the end each time leaves c[0, k) best first. */
    for (int32_t end = k - 1; end > 0; end--) {
        cand_swap(&c[0], &c[end]);
        heap_sift_down(c, end, 0);
    }
}

/*
 * Stage 6 helper, for an unsorted c[0, n) of weights summing to `sum`. Moves
 * a set of candidates that contains the nucleus to the front and returns its
 * size; only that set then needs sorting.
 *
 * The set is {i : w[i] >= t} for a threshold t. The tokens below t weigh less
 * than n * t in total, so t_safe = (1 - top_p) * sum / n always works. LLM
 * distributions are peaked, so first try t = 2^-5, 2^-10, ... (the largest
 * weight is exactly 1) and take the first whose set reaches top_p * sum;
 * each try is one counting pass.
 */
static int32_t gather_nucleus(cllm_sampler_cand *c, int32_t n, double sum, double top_p) {
    const double target = top_p * sum;
    const double t_safe = (1.0 - top_p) * sum / (double)n;
    double t = 1.0;
    for (;;) {
        t *= 1.0 / 32.0;
        if (t <= t_safe) {
            t = t_safe;
            break;
        }
        double mass = 0.0;
        for (int32_t i = 0; i < n; i++) {
            if (c[i].p >= t) mass += c[i].p;
        }
        if (mass >= target) break;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].p >= t) cand_swap(&c[m++], &c[i]);
    }
    return m;
}

/*
 * Stage 3 straight from the row: c[0, k) = the k best finite logits of
 * logits[0, n), sorted best first, as copying every finite logit and then
 * select_top_k would leave them (the same heap, fed in the same order:
 * ids only grow, so a logit equal to the heap's worst never enters it),
 * without writing the whole row out. Once the heap is full, blocks of 16
 * logits are compared with its worst at once and most are passed over.
 * False, with c undefined, when some logit is NaN or +inf (the caller's
 * own pass reports it) or when no more than k are finite (no top-k
 * there).
 */
static bool scan_top_k(const float *logits, int32_t n, int32_t k, cllm_sampler_cand *c) {
    CLLM_ASSERT(k > 0);
    int32_t h = 0, n_fin = 0, i = 0;
    for (; i < n && h < k; i++) {
        const float l = logits[i];
        if (!(l < INFINITY)) return false;
        if (l == -INFINITY) continue;
        c[h++] = (cllm_sampler_cand){.id = i, .p = l};
    }
    if (h < k) return false;
    n_fin = k;
    for (int32_t j = k / 2 - 1; j >= 0; j--) heap_sift_down(c, k, j);
#if defined(__SSE2__)
    const __m128 inf = _mm_set1_ps(INFINITY), ninf = _mm_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) {
        const __m128 x0 = _mm_loadu_ps(logits + i), x1 = _mm_loadu_ps(logits + i + 4);
        const __m128 x2 = _mm_loadu_ps(logits + i + 8), x3 = _mm_loadu_ps(logits + i + 12);
        const __m128 bad = _mm_or_ps(_mm_or_ps(_mm_cmpnlt_ps(x0, inf), _mm_cmpnlt_ps(x1, inf)),
                                     _mm_or_ps(_mm_cmpnlt_ps(x2, inf), _mm_cmpnlt_ps(x3, inf)));
        if (_mm_movemask_ps(bad)) return false;
        const unsigned masked = (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x0, ninf)) |
                                (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x1, ninf)) << 4 |
                                (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x2, ninf)) << 8 |
                                (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x3, ninf)) << 12;
        n_fin += 16 - __builtin_popcount(masked);
        const __m128 w = _mm_set1_ps(c[0].p);
        unsigned gt = (unsigned)_mm_movemask_ps(_mm_cmpgt_ps(x0, w)) |
                      (unsigned)_mm_movemask_ps(_mm_cmpgt_ps(x1, w)) << 4 |
                      (unsigned)_mm_movemask_ps(_mm_cmpgt_ps(x2, w)) << 8 |
                      (unsigned)_mm_movemask_ps(_mm_cmpgt_ps(x3, w)) << 12;
        for (; gt; gt &= gt - 1) {
            const int32_t id = i + __builtin_ctz(gt);
            if (logits[id] > c[0].p) { /* the worst may have risen within the block */
                c[0] = (cllm_sampler_cand){.id = id, .p = logits[id]};
                heap_sift_down(c, k, 0);
            }
        }
    }
#endif
    for (; i < n; i++) {
        const float l = logits[i];
        if (!(l < INFINITY)) return false;
        if (l == -INFINITY) continue;
        n_fin++;
        if (l > c[0].p) {
            c[0] = (cllm_sampler_cand){.id = i, .p = l};
            heap_sift_down(c, k, 0);
        }
    }
    if (n_fin <= k) return false;
    for (int32_t end = k - 1; end > 0; end--) { /* heap sort, as select_top_k */
        cand_swap(&c[0], &c[end]);
        heap_sift_down(c, end, 0);
    }
    return true;
}

static cllm_status bad_logit(int32_t i, float l) {
    return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: logit of token %d is %s", i,
                      isnan(l) ? "NaN" : "+inf");
}

/* The largest of logits[0, n) (n a multiple of 16), or NaN if some logit is
 * NaN or +inf: four SSE2 maxima side by side. A server samples every
 * sequence of a step between two forward passes, with the compute threads
 * waiting, so this pass over the whole vocabulary is worth vectorizing. */
static float max16(const float *logits, int32_t n) {
#if defined(__SSE2__)
    const __m128 inf = _mm_set1_ps(INFINITY);
    __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0, bad = _mm_setzero_ps();
    for (int32_t i = 0; i < n; i += 16) {
        const __m128 x0 = _mm_loadu_ps(logits + i), x1 = _mm_loadu_ps(logits + i + 4);
        const __m128 x2 = _mm_loadu_ps(logits + i + 8), x3 = _mm_loadu_ps(logits + i + 12);
        /* not less than +inf: NaN or +inf */
        bad = _mm_or_ps(bad, _mm_or_ps(_mm_or_ps(_mm_cmpnlt_ps(x0, inf), _mm_cmpnlt_ps(x1, inf)),
                                       _mm_or_ps(_mm_cmpnlt_ps(x2, inf), _mm_cmpnlt_ps(x3, inf))));
        m0 = _mm_max_ps(m0, x0), m1 = _mm_max_ps(m1, x1);
        m2 = _mm_max_ps(m2, x2), m3 = _mm_max_ps(m3, x3);
    }
    if (_mm_movemask_ps(bad)) return NAN;
    float m[4];
    _mm_storeu_ps(m, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    return fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
#else
    float lmax = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (!(logits[i] < INFINITY)) return NAN;
        if (logits[i] > lmax) lmax = logits[i];
    }
    return lmax;
#endif
}

/* The first i < n with logits[i] == v (there is one). */
static int32_t first_equal(const float *logits, int32_t n, float v) {
    int32_t i = 0;
#if defined(__SSE2__)
    const __m128 vv = _mm_set1_ps(v);
    for (; i + 4 <= n; i += 4) {
        const int m = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(logits + i), vv));
        if (m) return i + __builtin_ctz((unsigned)m);
    }
#endif
    while (logits[i] != v) i++;
    return i;
}

/* Greedy without penalties: read-only, no copy. The first id of the largest
 * logit; an error at the first NaN or +inf (-inf is a mask). */
static cllm_status argmax_plain(const float *logits, int32_t n_vocab, int32_t *out) {
    const int32_t n16 = n_vocab - n_vocab % 16;
    float lmax = max16(logits, n16);
    int32_t best = -1, i = 0;
    if (isnan(lmax)) { /* find it */
        lmax = -INFINITY;
    } else {
        i = n16;
        if (lmax > -INFINITY) best = first_equal(logits, n16, lmax);
    }
    for (; i < n_vocab; i++) {
        const float l = logits[i];
        if (!(l < INFINITY)) return bad_logit(i, l);
        if (l > lmax) {
            lmax = l;
            best = i;
        }
    }
    if (best < 0) return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: every logit is -inf");
    *out = best;
    return CLLM_OK;
}

/*
 * Stage 5 on s->row: every token the grammar does not allow gets -inf (its
 * logit checked first, as a mask must not hide a NaN or +inf). The end
 * tokens keep their logits only where the text so far is complete.
 */
static cllm_status apply_grammar(cllm_sampler *s) {
    int32_t n_allowed = 0;
    bool done = true;
    if (grammar_on(s)) {
        CLLM_TRY(cllm_grammar_matcher_mask(s->gm, s->gvocab, s->allowed, &n_allowed));
        done = cllm_grammar_matcher_done(s->gm);
    } else { /* a lazy grammar that is off: each token checked alone */
        memset(s->allowed, 0, ((size_t)s->n_vocab + 7) / 8);
        for (int32_t id = 0; id < s->n_vocab; id++) {
            bool ok;
            CLLM_TRY(lazy_allows(s, id, &ok));
            if (ok) {
                s->allowed[id >> 3] |= (uint8_t)(1u << (id & 7));
                n_allowed++;
            }
        }
    }
    for (int32_t i = 0; i < s->n_geog; i++) { /* the end tokens by the rule above */
        const int32_t id = s->geog[i];
        if (done) {
            s->allowed[id >> 3] |= (uint8_t)(1u << (id & 7));
        } else {
            s->allowed[id >> 3] &= (uint8_t) ~(1u << (id & 7));
        }
    }
    float *row = s->row;
    bool any = false;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if ((s->allowed[i >> 3] >> (i & 7)) & 1u) {
            any = any || row[i] > -INFINITY;
            continue;
        }
        if (is_bad(row[i])) return bad_logit(i, row[i]);
        row[i] = -INFINITY;
    }
    if (!any) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "sampler: no token can continue the grammar here (%d allowed by the "
                          "grammar, all masked before it)",
                          n_allowed);
    }
    return CLLM_OK;
}

/* How many of the best candidates grammar_best tests before it leaves the
 * work to the whole mask: first twice the number it looks for (at least
 * GRAMMAR_PROBE_MIN), and where too few of those are allowed
 * GRAMMAR_PROBE_WIDE times it (at least GRAMMAR_PROBE_WIDE_MIN). A test
 * walks one token's bytes (about a microsecond); the mask walks the whole
 * trie, which where most tokens are allowed (in a JSON string) costs
 * milliseconds. The first probe is small because the heap that finds the
 * best candidates costs more the larger it is. */
enum {
    GRAMMAR_PROBE_MIN = 64,
    GRAMMAR_PROBE_WIDE = 8,
    GRAMMAR_PROBE_WIDE_MIN = 256,
};

/*
 * Stage 5 with stage 3 (top-k) or greedy, without the mask: the best
 * `want` candidates the grammar allows are, in order, the first `want`
 * allowed ones among the best candidates of the unmasked row, so only
 * those need testing. Leaves in c[0, want) exactly what masking the whole
 * row and then taking its top `want` leaves (same ids, same order, same
 * logits; c[0] the largest allowed logit). *found is false when that
 * cannot be told from the candidates tested: fewer than want + 1 allowed
 * among them (with exactly `want` allowed in all the vocabulary the masked
 * path skips top-k), a NaN or +inf logit (the masked path reports it), or
 * no more finite logits than it would test; the caller then masks the
 * whole row. For greedy
 * (want 1, exact) the first allowed one is enough.
 */
static cllm_status grammar_best(cllm_sampler *s, const float *logits, int32_t want, bool exact,
                                bool *found) {
    cllm_sampler_cand *c = s->cand;
    *found = false;
    const int32_t need = exact ? want : want + 1;
    const int32_t lim = s->n_vocab / GRAMMAR_PROBE_WIDE; /* no overflow below */
    int32_t m = 0;
    for (int pass = 0; pass < 2 && m < need; pass++) {
        int32_t probe = need > lim ? s->n_vocab : need * (pass ? GRAMMAR_PROBE_WIDE : 2);
        const int32_t lo = pass ? GRAMMAR_PROBE_WIDE_MIN : GRAMMAR_PROBE_MIN;
        if (probe < lo) probe = lo;
        if (probe >= s->n_vocab || !scan_top_k(logits, s->n_vocab, probe, c)) return CLLM_OK;
        m = 0; /* the wider probe tests the narrower one's candidates again */
        for (int32_t i = 0; i < probe && m < need; i++) {
            bool ok;
            CLLM_TRY(grammar_allows(s, c[i].id, &ok));
            if (ok) c[m++] = c[i];
        }
    }
    *found = m >= need;
    return CLLM_OK;
}

/*
 * Stages 1-7. On success c[0, *n_out) hold the surviving candidates with
 * positive weights (unnormalised) and *sum_out their sum, accumulated in
 * index order. Touches only the scratch array.
 */
static cllm_status build_dist(cllm_sampler *s, const float *logits, bool masked, int32_t *n_out,
                              double *sum_out) {
    const cllm_sampler_params *prm = &s->params;
    cllm_sampler_cand *c = s->cand;
    const int32_t n_vocab = s->n_vocab;
    const bool repeat = prm->repeat_penalty != 1.0f && s->window_len > 0;
    if (repeat || prm->n_logit_bias > 0 || s->n_eog > 0 || s->n_gen > 0) {
        CLLM_TRY(apply_stages(s, logits, repeat));
        logits = s->row;
    }
    /* the masked top-k (or greedy) from the best candidates, when it can */
    bool top_done = false;
    int32_t n = 0;
    float lmax = -INFINITY;
    if (masked && (prm->temperature == 0.0f || prm->top_k > 0)) {
        const bool greedy = prm->temperature == 0.0f;
        CLLM_TRY(grammar_best(s, logits, greedy ? 1 : prm->top_k, greedy, &top_done));
        if (top_done && greedy) {
            c[0].p = 1.0f;
            *n_out = 1;
            *sum_out = 1.0;
            return CLLM_OK;
        }
        if (top_done) {
            n = prm->top_k;
            lmax = c[0].p;
        }
    }
    if (masked && !top_done) {
        if (logits != s->row) memcpy(s->row, logits, (size_t)n_vocab * sizeof(float));
        CLLM_TRY(apply_grammar(s));
        logits = s->row;
    }

    if (prm->temperature == 0.0f) {
        int32_t best = 0;
        cllm_status st = argmax_plain(logits, n_vocab, &best);
        if (st != CLLM_OK) return st;
        c[0] = (cllm_sampler_cand){.id = best, .p = 1.0f};
        *n_out = 1;
        *sum_out = 1.0;
        return CLLM_OK;
    }

    /* Top-k straight from the row where it can (the best is then c[0]) */
    if (!top_done && prm->top_k > 0 && scan_top_k(logits, n_vocab, prm->top_k, c)) {
        top_done = true;
        n = prm->top_k;
        lmax = c[0].p;
    }
    /* Else copy the finite logits into c[0, n) and find the largest (the
     * first in id order): a single pass. */
    for (int32_t i = 0; i < n_vocab && !top_done; i++) {
        const float l = logits[i];
        if (!(l < INFINITY)) return bad_logit(i, l);
        if (l == -INFINITY) continue;
        if (l > lmax) lmax = l;
        c[n++] = (cllm_sampler_cand){.id = i, .p = l};
    }
    if (n == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "sampler: every logit is -inf");

    bool sorted = top_done;
    if (!top_done && prm->top_k > 0 && prm->top_k < n) {
        select_top_k(c, n, prm->top_k);
        n = prm->top_k;
        sorted = true;
    }

    const float temp = prm->temperature;
    const bool top_p_on = prm->top_p < 1.0f && n > 1;

    /* Without top-p no total mass is needed, so tokens that min-p will drop
     * (w = exp((l - max) / T) < min_p) can go before the costly exp. The
     * margin leaves the exact test, w >= min_p, to the last stage. */
    if (!top_p_on && prm->min_p > 0.0f) {
        const float lim = logf(prm->min_p) - 1e-3f;
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) {
            if ((c[i].p - lmax) / temp >= lim) c[m++] = c[i];
        }
        n = m;
    }

    /* Temperature and softmax weights; the best token gets exactly 1. Dividing
     * (not multiplying by 1/T) keeps 0/T = 0 for tiny T. */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const float w = expf((c[i].p - lmax) / temp);
        c[i].p = w;
        sum += w;
    }

    if (top_p_on) {
        int32_t n_sort = n;
        if (!sorted) {
            n_sort = gather_nucleus(c, n, sum, prm->top_p);
            qsort(c, (size_t)n_sort, sizeof(*c), cand_cmp_desc);
        }
        const double target = (double)prm->top_p * sum;
        double cum = 0.0;
        int32_t keep = n_sort;
        for (int32_t i = 0; i < n_sort; i++) {
            cum += c[i].p;
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }

    /* min-p (p >= min_p * p_max, i.e. w >= min_p since w_max = 1), and drop
     * weights that underflowed to zero. */
    const float w_min = prm->min_p;
    int32_t m = 0;
    sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].p > 0.0f && c[i].p >= w_min) {
            c[m] = c[i];
            sum += c[m].p;
            m++;
        }
    }
    CLLM_ASSERT(m > 0); /* the best token, weight 1, always survives */
    *n_out = m;
    *sum_out = sum;
    return CLLM_OK;
}

/* ---- public entry points ---- */

cllm_status cllm_sampler_probs(cllm_sampler *s, const float *logits, const cllm_sampler_cand **out,
                               int32_t *n_out) {
    if (!s || !logits || !out || !n_out) return CLLM_NULL_ARG("the sampler, logits, out or n_out");
    int32_t n;
    double sum;
    cllm_status st = build_dist(s, logits, grammar_on(s), &n, &sum);
    if (st != CLLM_OK) return st;
    for (int32_t i = 0; i < n; i++) s->cand[i].p = (float)(s->cand[i].p / sum);
    *out = s->cand;
    *n_out = n;
    return CLLM_OK;
}

/* One token from c[0, n) of total weight `sum` (greedy: c[0]). */
static int32_t draw(cllm_sampler *s, int32_t n, double sum) {
    const cllm_sampler_cand *c = s->cand;
    if (s->params.temperature == 0.0f) return c[0].id;
    /* Inverse CDF, summing in the order build_dist summed, so the walk reaches
     * `sum` exactly; the fallback covers r rounding up to `sum`. */
    const double r = rng_uniform(s->rng) * sum;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id;
}

/*
 * With a grammar, the token is drawn from the distribution of the masked
 * row: every token the grammar refuses removed first, then top-k, top-p
 * and min-p on what is left (what cllm_sampler_probs reports).
 *
 * With top-k that distribution depends only on the k + 1 best allowed
 * tokens, which grammar_best finds by testing the best candidates one by
 * one (a walk of each token's bytes): build_dist gives it directly, and
 * the whole vocabulary is masked (one walk of the trie) only where fewer
 * than k + 1 of its best few hundred candidates are allowed.
 *
 * Greedy and without top-k: the token is drawn as without a grammar and
 * kept if the grammar allows it (one walk of its bytes); only otherwise is
 * the whole vocabulary masked and the token drawn again from the masked
 * row. Greedy, the best token kept is the best allowed one. Without any
 * truncation (top-p 1, min-p 0), drawing t with probability p(t), keeping
 * it when allowed and else drawing from the allowed tokens renormalised
 * gives each allowed t exactly p(t) / P(allowed), the masked distribution;
 * with top-p or min-p alone the kept first draw was truncated before the
 * mask, a mixture close to the masked distribution but not equal to it
 * (masking the whole vocabulary at every step would make it exact, at a
 * walk of the trie per token).
 */
static cllm_status sample_grammar(cllm_sampler *s, const float *logits, int32_t *out_token) {
    int32_t n;
    double sum;
    if (s->params.top_k > 0 && s->params.temperature != 0.0f) {
        CLLM_TRY(build_dist(s, logits, true, &n, &sum));
        *out_token = draw(s, n, sum);
        return CLLM_OK;
    }
    uint64_t rng[4];
    memcpy(rng, s->rng, sizeof(rng));
    cllm_status st = build_dist(s, logits, false, &n, &sum);
    if (st == CLLM_OK) {
        const int32_t pick = draw(s, n, sum);
        bool ok = false;
        st = grammar_allows(s, pick, &ok);
        if (st == CLLM_OK && ok) {
            *out_token = pick;
            return CLLM_OK;
        }
    }
    if (st == CLLM_OK || st == CLLM_ERR_INVALID_ARG) { /* every logit -inf: the mask decides */
        st = build_dist(s, logits, true, &n, &sum);
    }
    if (st != CLLM_OK) {
        memcpy(s->rng, rng, sizeof(rng)); /* nothing changes on failure */
        return st;
    }
    *out_token = draw(s, n, sum);
    return CLLM_OK;
}

cllm_status cllm_sampler_sample(cllm_sampler *s, const float *logits, int32_t *out_token) {
    if (!s || !logits || !out_token) return CLLM_NULL_ARG("the sampler, logits or out_token");
    if (s->gm) return sample_grammar(s, logits, out_token);
    int32_t n;
    double sum;
    cllm_status st = build_dist(s, logits, false, &n, &sum);
    if (st != CLLM_OK) return st;
    *out_token = draw(s, n, sum);
    return CLLM_OK;
}
