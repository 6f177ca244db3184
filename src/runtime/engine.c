/*
 * The batch engine (cllm.h): requests over a session of n_seq sequences.
 *
 * A slot is a sequence of the session with the ids its KV cache holds and
 * the state of the request it runs. A step gives waiting requests to idle
 * slots (engine_schedule), decodes the last token of every generating slot
 * and the next prompt chunk of every other busy slot (engine_decode), then
 * samples the slots whose logits are ready (slot_sample) and reports what
 * happened through the engine's event callback.
 */
#include "runtime/engine.h"
#include "core/hostmem.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/spec.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A request from its submission to its end. */
typedef struct engine_req {
    uint64_t id;
    void *user_data;
    int32_t *prompt; /* owned */
    size_t n_prompt;
    cllm_request_params p; /* p.stop points at stop[] */
    char *stop[CLLM_ENGINE_MAX_STOP];
    size_t stop_len[CLLM_ENGINE_MAX_STOP];
    cllm_sampler *borrowed; /* cllm_generate's sampler, or NULL */
    bool append;            /* continues sequence 0's context (cllm_generate) */
    bool cancel;            /* cllm_engine_cancel: ends at the next step */
    bool embed;             /* an embedding request (cllm_engine_submit_embed) */
    cllm_pooling pooling;   /* its pooling */
    double t_submit;
    struct engine_req *next; /* in the waiting list */
} engine_req;

/* A sequence of the session, and the request it runs. */
typedef struct engine_slot {
    int seq;
    int32_t *cached; /* [n_ctx]: the ids of its cache rows, the first n_known known */
    size_t n_cached; /* rows in its cache */
    size_t n_known;  /* cached[0, n_known) hold their ids (the rest: unknown) */
    size_t n_fresh;  /* the first rows, computed as a fresh read computes them */
    /* what the cache holds: rows of an answer (tokens sampled, then decoded
     * one at a time) from row first_answer on (n_ctx: none), and rows
     * [read_from, n_cached) of prompt read by its last request, after its
     * last answer row (read_from == n_cached: it ends with an answer row) */
    size_t first_answer;
    size_t read_from;
    uint64_t started; /* when its last request started (engine's count); 0: never */

    engine_req *req; /* NULL: idle */
    cllm_sampler *smp;
    cllm_detokenizer *detok;
    size_t n_fed;    /* prompt tokens in the cache */
    int32_t pending; /* sampled and not yet decoded; -1: none */
    size_t n_gen;    /* tokens generated */
    char *held;      /* text not released yet (it may begin a stop string) */
    size_t held_len, held_cap;
    cllm_token_logprob top[CLLM_ENGINE_MAX_TOP_LOGPROBS];
    cllm_request_usage usage;
    /* speculative decoding: the pending token and its draft, decoded in
     * one pass ([1 + CLLM_SPEC_MAX_DRAFT]); the length of the next draft
     * at most (adaptive), the drafts rejected whole in a row, and the
     * steps to wait before the next draft */
    int32_t *spec;
    int n_draft;
    int spec_cap, spec_miss, spec_wait;
} engine_slot;

/* What a busy slot decodes in a step: a chunk of its prompt, or the token
 * it sampled last. */
typedef struct engine_work {
    engine_slot *slot;
    const int32_t *ids;
    int64_t n;
    bool prompt; /* a prompt chunk */
    bool sample; /* the logits of its last id are sampled afterwards */
    /* a speculative pass: the logits of each of its ids (n rows), or NULL:
     * its sequence's last logits */
    const float *rows;
    cllm_status st;
    char error[256];
} engine_work;

struct cllm_engine {
    const cllm_model *model;
    cllm_session *s;
    bool own_session;
    int n_slots;
    int64_t n_ctx, n_batch;
    int32_t n_vocab;
    /* prompt chunks hold at least CLLM_SESSION_MIN_CHUNK tokens, so that a
     * cut cache can be reused as a fresh read computes it (engine_reuse) */
    bool chunked;
    cllm_event_fn on_event;
    void *ud;

    engine_slot *slots;                /* [n_slots] */
    engine_work *work;                 /* [n_slots] scratch of a step */
    cllm_seq_tokens *items;            /* [n_slots + CLLM_MAX_SEQS] scratch of a step */
    engine_req *wait_head, *wait_tail; /* first come, first served */
    int n_waiting, n_running;
    uint64_t next_id, n_started;
    float *embd; /* [n_ctx][n_embd]: an embedding request's vectors (made at its first) */
    /* speculative decoding: the logits of every item of a pass that
     * verifies drafts ([spec_rows][n_vocab], grown on demand); off for
     * good after such a pass failed, and for a pipeline's first stage */
    float *spec_logits;
    int spec_rows;
    bool spec_off;
};

static const char *const k_stop_names[] = {
    [CLLM_STOP_EOG] = "eog",
    [CLLM_STOP_LENGTH] = "length",
    [CLLM_STOP_CONTEXT_FULL] = "context_full",
    [CLLM_STOP_CALLBACK] = "callback",
    [CLLM_STOP_STRING] = "stop_string",
    [CLLM_STOP_CANCELLED] = "cancelled",
    [CLLM_STOP_ERROR] = "error",
};
_Static_assert(CLLM_ARRAY_SIZE(k_stop_names) == CLLM_STOP_COUNT, "stop reason names");

const char *cllm_stop_reason_str(cllm_stop_reason r) {
    return (unsigned)r < CLLM_STOP_COUNT ? k_stop_names[r] : "unknown";
}

cllm_request_params cllm_request_default_params(void) {
    return (cllm_request_params){
        .sampling = cllm_sampler_default_params(),
        .max_tokens = -1,
        .stop = NULL,
        .n_stop = 0,
        .logprobs = -1,
        .spec = cllm_spec_default_params(),
    };
}

/* ---- lifecycle ---------------------------------------------------------- */

static cllm_status engine_make(const cllm_model *m, cllm_session *s, bool own,
                               cllm_event_fn on_event, void *ud, cllm_engine **out) {
    if (!m->tok) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "%s: engine: the model has no tokenizer (tokenizer.ggml.*)", m->path);
    }
    const int n = cllm_session_n_seq(s);
    const int64_t n_ctx = cllm_session_n_ctx(s);
    cllm_engine *e = cllm_calloc(1, sizeof(*e));
    if (!e) goto nomem;
    e->model = m;
    e->s = s;
    e->own_session = own;
    e->n_ctx = n_ctx;
    e->n_batch = cllm_session_n_batch(s);
    e->n_vocab = (int32_t)m->hp.n_vocab;
    e->chunked = e->n_batch >= 2 * CLLM_SESSION_MIN_CHUNK;
    e->on_event = on_event;
    e->ud = ud;
    e->slots = cllm_calloc((size_t)n, sizeof(*e->slots));
    e->work = cllm_calloc((size_t)n, sizeof(*e->work));
    e->items = cllm_calloc((size_t)n + CLLM_MAX_SEQS, sizeof(*e->items));
    if (!e->slots || !e->work || !e->items) goto nomem;
    e->spec_off = m->partial;
    for (int i = 0; i < n; i++) {
        engine_slot *sl = &e->slots[i];
        e->n_slots = i + 1;
        sl->seq = i;
        sl->pending = -1;
        /* whatever a caller's session holds is unknown: nothing reused */
        sl->n_cached = (size_t)cllm_session_seq_n_past(s, i);
        sl->first_answer = (size_t)n_ctx;
        sl->read_from = sl->n_cached;
        sl->cached = cllm_malloc((size_t)n_ctx * sizeof(int32_t));
        sl->spec = cllm_malloc((1 + CLLM_SPEC_MAX_DRAFT) * sizeof(int32_t));
        if (!sl->cached || !sl->spec || cllm_detokenizer_new_tok(m->tok, 0, &sl->detok) != CLLM_OK)
            goto nomem;
    }
    e->next_id = 1;
    *out = e;
    return CLLM_OK;

nomem:
    if (e) e->own_session = false; /* the caller frees what it made */
    cllm_engine_free(e);
    return cllm_error(CLLM_ERR_NOMEM, "engine: out of host memory for %d sequences", n);
}

cllm_status cllm_engine_new(const cllm_model *model, const cllm_session_params *params,
                            cllm_event_fn on_event, void *user_data, cllm_engine **out) {
    if (!model || !on_event || !out) return CLLM_NULL_ARG("the model, on_event or out");
    cllm_session_params sp = params ? *params : cllm_session_default_params();
    const int n_seq = sp.n_seq > 0 ? sp.n_seq : 1;
    /* a step of every sequence's token fits one pass */
    if (sp.n_batch > 0 && sp.n_batch < n_seq) sp.n_batch = n_seq;
    if (!model->tok) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "%s: engine: the model has no tokenizer (tokenizer.ggml.*)", model->path);
    }
    cllm_session *s = NULL;
    CLLM_TRY(cllm_session_new(model, &sp, &s));
    const cllm_status st = engine_make(model, s, true, on_event, user_data, out);
    if (st != CLLM_OK) cllm_session_free(s);
    return st;
}

cllm_status cllm_engine_new_session(cllm_session *s, cllm_event_fn on_event, void *user_data,
                                    cllm_engine **out) {
    if (!s || !on_event || !out) return CLLM_NULL_ARG("the session, on_event or out");
    return engine_make(cllm_session_model(s), s, false, on_event, user_data, out);
}

static void req_free(engine_req *r) {
    if (!r) return;
    cllm_free((void *)r->p.sampling.logit_bias); /* the request's copy */
    cllm_free((void *)r->p.sampling.grammar);    /* and of the grammar */
    cllm_free((void *)r->p.sampling.grammar_root);
    cllm_free((void *)r->p.sampling.grammar_triggers); /* one block with the words */
    cllm_free((void *)r->p.sampling.grammar_trigger_tokens);
    for (int i = 0; i < CLLM_ENGINE_MAX_STOP; i++) cllm_free(r->stop[i]);
    cllm_free(r->prompt);
    cllm_free(r);
}

void cllm_engine_free(cllm_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_slots; i++) {
        engine_slot *sl = &e->slots[i];
        if (sl->req && !sl->req->borrowed) cllm_sampler_free(sl->smp);
        req_free(sl->req);
        cllm_detokenizer_free(sl->detok);
        cllm_free(sl->cached);
        cllm_free(sl->spec);
        cllm_free(sl->held);
    }
    for (engine_req *r = e->wait_head, *next; r; r = next) {
        next = r->next;
        req_free(r);
    }
    if (e->own_session) cllm_session_free(e->s);
    cllm_free(e->slots);
    cllm_free(e->work);
    cllm_free(e->items);
    cllm_free(e->embd);
    cllm_free(e->spec_logits);
    cllm_free(e);
}

int cllm_engine_n_waiting(const cllm_engine *e) { return e ? e->n_waiting : 0; }
int cllm_engine_n_running(const cllm_engine *e) { return e ? e->n_running : 0; }
cllm_session *cllm_engine_session(cllm_engine *e) { return e ? e->s : NULL; }

/* ---- requests ----------------------------------------------------------- */

static cllm_status check_request(const cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                                 const cllm_request_params *p, bool check_sampling) {
    if (n_prompt == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "engine: empty prompt");
    if (n_prompt > (size_t)e->n_ctx) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "engine: the prompt has %zu tokens, the context of a sequence %lld",
                          n_prompt, (long long)e->n_ctx);
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "engine: prompt token %zu is %d, outside [0, %d)", i, prompt[i],
                              e->n_vocab);
        }
    }
    if (p->max_tokens < -1) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "engine: max_tokens must be >= 0 (or -1: no limit), got %d",
                          p->max_tokens);
    }
    if (p->n_stop < 0 || p->n_stop > CLLM_ENGINE_MAX_STOP || (p->n_stop > 0 && !p->stop)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "engine: n_stop must be in [0, %d] with a stop array, got %d",
                          CLLM_ENGINE_MAX_STOP, p->n_stop);
    }
    for (int i = 0; i < p->n_stop; i++) {
        const size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (len == 0 || len > CLLM_ENGINE_MAX_STOP_LEN || !cllm_utf8_valid(p->stop[i], len)) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "engine: stop[%d] must be valid UTF-8 of 1 to %d bytes", i,
                              CLLM_ENGINE_MAX_STOP_LEN);
        }
    }
    if (p->logprobs < -1 || p->logprobs > CLLM_ENGINE_MAX_TOP_LOGPROBS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "engine: logprobs must be in [-1, %d], got %d",
                          CLLM_ENGINE_MAX_TOP_LOGPROBS, p->logprobs);
    }
    CLLM_TRY(cllm_spec_params_check(&p->spec));
    return check_sampling ? cllm_sampler_params_check(&p->sampling, e->n_vocab) : CLLM_OK;
}

static cllm_status submit(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                          const cllm_request_params *params, cllm_sampler *smp, bool append,
                          void *user_data, uint64_t *id) {
    if (!e || (!prompt && n_prompt > 0)) return CLLM_NULL_ARG("the engine or prompt");
    const cllm_request_params p = params ? *params : cllm_request_default_params();
    CLLM_TRY(check_request(e, prompt, n_prompt, &p, smp == NULL));
    /* a draft model drafts for every sequence the request may run on
     * (cllm_generate's: sequence 0) */
    if (p.spec.type == CLLM_SPEC_DRAFT)
        CLLM_TRY(cllm_draft_fits(p.spec.draft, e->model, append ? 1 : e->n_slots));
    engine_req *r = cllm_calloc(1, sizeof(*r));
    if (!r) goto nomem;
    r->prompt = cllm_malloc(n_prompt * sizeof(int32_t));
    if (!r->prompt) goto nomem;
    memcpy(r->prompt, prompt, n_prompt * sizeof(int32_t));
    r->n_prompt = n_prompt;
    r->p = p;
    /* the sampler copies its logit bias when it is made (at the start):
     * until then the request keeps none of the caller's pointers */
    r->p.sampling.logit_bias = NULL;
    r->p.sampling.grammar = r->p.sampling.grammar_root = NULL;
    r->p.sampling.grammar_triggers = NULL;
    r->p.sampling.grammar_trigger_tokens = NULL;
    if (p.sampling.n_logit_bias > 0) {
        /* kept in the stop strings' place would be a second array: the
         * bias goes with the request as a copy of its own */
        const size_t bytes = (size_t)p.sampling.n_logit_bias * sizeof(cllm_logit_bias);
        cllm_logit_bias *b = cllm_malloc(bytes);
        if (!b) goto nomem;
        memcpy(b, p.sampling.logit_bias, bytes);
        r->p.sampling.logit_bias = b;
    }
    /* the grammar too: the sampler is made when the request starts */
    if (p.sampling.grammar && !(r->p.sampling.grammar = cllm_strdup(p.sampling.grammar))) {
        goto nomem;
    }
    if (p.sampling.grammar_root &&
        !(r->p.sampling.grammar_root = cllm_strdup(p.sampling.grammar_root))) {
        goto nomem;
    }
    if (p.sampling.n_grammar_triggers > 0) { /* the pointers and the words in one block */
        const size_t n = (size_t)p.sampling.n_grammar_triggers;
        size_t bytes = n * sizeof(char *);
        for (size_t i = 0; i < n; i++) bytes += strlen(p.sampling.grammar_triggers[i]) + 1;
        char **w = cllm_malloc(bytes);
        if (!w) goto nomem;
        char *at = (char *)(w + n);
        for (size_t i = 0; i < n; i++) {
            const size_t len = strlen(p.sampling.grammar_triggers[i]) + 1;
            memcpy(at, p.sampling.grammar_triggers[i], len);
            w[i] = at;
            at += len;
        }
        r->p.sampling.grammar_triggers = (const char *const *)w;
    }
    if (p.sampling.n_grammar_trigger_tokens > 0) {
        const size_t bytes = (size_t)p.sampling.n_grammar_trigger_tokens * sizeof(int32_t);
        int32_t *t = cllm_malloc(bytes);
        if (!t) goto nomem;
        memcpy(t, p.sampling.grammar_trigger_tokens, bytes);
        r->p.sampling.grammar_trigger_tokens = t;
    }
    for (int i = 0; i < p.n_stop; i++) {
        r->stop_len[i] = strlen(p.stop[i]);
        if (!(r->stop[i] = cllm_strdup(p.stop[i]))) goto nomem;
    }
    r->p.stop = (const char *const *)r->stop;
    r->borrowed = smp;
    r->append = append;
    r->user_data = user_data;
    r->id = e->next_id++;
    r->t_submit = cllm_time_ms();
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    if (id) *id = r->id;
    return CLLM_OK;

nomem:
    req_free(r);
    return cllm_error(CLLM_ERR_NOMEM, "engine: out of host memory for a request of %zu tokens",
                      n_prompt);
}

cllm_status cllm_engine_submit(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                               const cllm_request_params *params, void *user_data, uint64_t *id) {
    return submit(e, prompt, n_prompt, params, NULL, false, user_data, id);
}

cllm_status cllm_engine_submit_append(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                                      const cllm_request_params *params, cllm_sampler *smp,
                                      void *user_data, uint64_t *id) {
    CLLM_ASSERT(smp != NULL);
    return submit(e, prompt, n_prompt, params, smp, true, user_data, id);
}

cllm_status cllm_engine_submit_embed(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                                     cllm_pooling pooling, void *user_data, uint64_t *id) {
    if (!e) return CLLM_NULL_ARG("the engine");
    if (!prompt) return CLLM_NULL_ARG("prompt");
    if ((unsigned)pooling >= CLLM_POOLING_COUNT) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "engine: pooling %d is not one of none, mean, "
                          "cls, last",
                          (int)pooling);
    }
    if (!cllm_session_has_embeddings(e->s)) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "engine: the session was made without embeddings "
                                                "(cllm_session_params.embeddings)");
    }
    CLLM_TRY(submit(e, prompt, n_prompt, NULL, NULL, false, user_data, id));
    e->wait_tail->embed = true; /* the request just queued */
    e->wait_tail->pooling = pooling;
    return CLLM_OK;
}

cllm_status cllm_engine_cancel(cllm_engine *e, uint64_t id) {
    if (!e) return CLLM_NULL_ARG("the engine");
    for (int i = 0; i < e->n_slots; i++) {
        if (e->slots[i].req && e->slots[i].req->id == id) {
            e->slots[i].req->cancel = true;
            return CLLM_OK;
        }
    }
    for (engine_req *r = e->wait_head; r; r = r->next) {
        if (r->id == id) {
            r->cancel = true;
            return CLLM_OK;
        }
    }
    return cllm_error(CLLM_ERR_INVALID_ARG, "engine: no request %llu is waiting or running",
                      (unsigned long long)id);
}

/* ---- events ------------------------------------------------------------- */

static void emit(cllm_engine *e, const engine_req *r, cllm_event *ev) {
    ev->request = r->id;
    ev->user_data = r->user_data;
    e->on_event(ev, e->ud);
}

/* Hands held[0, n) of slot sl to its request as text released by `token`,
 * and keeps the rest. */
static void release(cllm_engine *e, engine_slot *sl, size_t n, int32_t token) {
    if (n == 0) return;
    cllm_event ev = {.kind = CLLM_EVENT_TEXT, .token = token, .text = sl->held, .len = n};
    emit(e, sl->req, &ev);
    memmove(sl->held, sl->held + n, sl->held_len - n);
    sl->held_len -= n;
}

/* Appends text[0, n) to what slot sl holds back; false when out of memory. */
static bool hold(engine_slot *sl, const char *text, size_t n) {
    if (n == 0) return true;
    if (sl->held_len + n > sl->held_cap) {
        const size_t cap = (sl->held_len + n) * 2 + 64;
        char *nb = cllm_realloc(sl->held, cap);
        if (!nb) return false;
        sl->held = nb;
        sl->held_cap = cap;
    }
    memcpy(sl->held + sl->held_len, text, n);
    sl->held_len += n;
    return true;
}

/*
 * Releases the text of slot sl that is decided. A stop string can only
 * begin in what is held (what was released could not begin one): the
 * first one found ends the text before it (returns true; the rest is
 * dropped). Otherwise, unless `final`, the longest end of the held text
 * that begins a stop string stays held. Stop strings and the text are
 * valid UTF-8, so every cut falls between characters.
 */
static bool release_decided(cllm_engine *e, engine_slot *sl, int32_t token, bool final) {
    const engine_req *r = sl->req;
    size_t first = SIZE_MAX;
    for (int i = 0; i < r->p.n_stop && sl->held_len > 0; i++) {
        const char *hit = memmem(sl->held, sl->held_len, r->stop[i], r->stop_len[i]);
        if (hit && (size_t)(hit - sl->held) < first) first = (size_t)(hit - sl->held);
    }
    if (first != SIZE_MAX) {
        release(e, sl, first, token);
        sl->held_len = 0;
        return true;
    }
    size_t keep = 0;
    for (int i = 0; i < r->p.n_stop && !final; i++) {
        for (size_t k = CLLM_MIN(r->stop_len[i] - 1, sl->held_len); k > keep; k--) {
            if (!memcmp(sl->held + sl->held_len - k, r->stop[i], k)) {
                keep = k;
                break;
            }
        }
    }
    release(e, sl, sl->held_len - keep, token);
    return false;
}

/* Ends the request of slot sl: the text it holds back released (a cut
 * character as U+FFFD, up to a stop string it completes), then FINISHED.
 * The slot keeps its cache. */
static void slot_finish(cllm_engine *e, engine_slot *sl, cllm_stop_reason why, cllm_status status,
                        const char *error) {
    engine_req *r = sl->req;
    if (why != CLLM_STOP_ERROR) {
        const char *text;
        size_t len;
        cllm_detokenizer_flush(sl->detok, &text, &len);
        if (hold(sl, text, len)) {
            if (release_decided(e, sl, -1, true) && why != CLLM_STOP_CANCELLED) {
                why = CLLM_STOP_STRING;
            }
        }
    }
    cllm_detokenizer_reset(sl->detok);
    sl->held_len = 0;
    sl->usage.n_completion = sl->n_gen;
    cllm_event ev = {.kind = CLLM_EVENT_FINISHED,
                     .token = -1,
                     .reason = why,
                     .usage = sl->usage,
                     .status = why == CLLM_STOP_ERROR ? status : CLLM_OK,
                     .error = why == CLLM_STOP_ERROR ? error : NULL};
    if (!r->borrowed) cllm_sampler_free(sl->smp);
    sl->smp = NULL;
    sl->req = NULL;
    e->n_running--;
    emit(e, r, &ev);
    req_free(r);
}

/* slot_finish with CLLM_STOP_ERROR and a message made from fmt. */
static void slot_fail(cllm_engine *e, engine_slot *sl, cllm_status st, const char *fmt,
                      const char *detail) {
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, detail);
    slot_finish(e, sl, CLLM_STOP_ERROR, st, msg);
}

/* ---- scheduling ----------------------------------------------------------- */

/*
 * The prompt tokens slot sl can reuse for request r, decided from what its
 * cache holds (never from the length of the prompt):
 *
 * - with n_batch 1, the longest common prefix: every row, prompt or answer,
 *   was computed one token at a time, as a fresh read computes it.
 * - a cache that holds rows of an answer and that the prompt extends: a
 *   conversation's next turn. Those rows were computed one token at a
 *   time, which the kernels round differently from a prompt chunk, so the
 *   answer is that of this conversation in this order (as with any chat
 *   engine), not always bit for bit that of a fresh read of the prompt. It
 *   is reused whole when it ends with an answer row, or when at least
 *   CLLM_SESSION_MIN_CHUNK tokens are left to read. Else it ends with the
 *   prompt its last request read (from read_from; that request stopped at
 *   its first token: max_tokens 1, a stop string, a cancel), and reused
 *   whole the same prompt again would have its last token decoded alone,
 *   and its answer could differ from the first one's: it is cut back to
 *   read_from, and that prompt is read again as it was read then.
 * - otherwise (n_batch >= 2 * CLLM_SESSION_MIN_CHUNK) the longest common
 *   prefix, cut back to rows computed as a fresh read of the prompt
 *   computes them (n_fresh), with at least CLLM_SESSION_MIN_CHUNK tokens
 *   left to decode. Prompt chunks hold at least that many tokens
 *   (cllm_session_prompt_chunk), and decoding the same tokens in any such
 *   chunks, wherever they start, gives the same rows and logits bit for
 *   bit (from 8 columns on, the kernels sum every column the same way
 *   whatever columns share its pass; test_seqs checks it), so such a reuse
 *   does not change any answer: a shared system prompt, a regenerated or
 *   edited last message. A cache of prompt rows only (a request stopped
 *   before its answer was decoded) is reused this way only, whatever the
 *   prompt's length.
 *
 * Other batch sizes reuse nothing but a cache the prompt extends.
 */
static size_t engine_reuse(const cllm_engine *e, const engine_slot *sl, const engine_req *r) {
    const size_t min = CLLM_SESSION_MIN_CHUNK;
    size_t lcp = 0;
    while (lcp < sl->n_known && lcp < r->n_prompt && sl->cached[lcp] == r->prompt[lcp]) lcp++;
    if (e->n_batch == 1) return lcp;
    if (!e->chunked) return lcp == sl->n_cached ? lcp : 0;
    size_t fresh = 0;
    if (r->n_prompt > min) fresh = CLLM_MIN(CLLM_MIN(lcp, sl->n_fresh), r->n_prompt - min);
    const bool answered = sl->first_answer < sl->n_cached;
    if (answered && lcp == sl->n_cached) {
        if (sl->read_from == sl->n_cached || r->n_prompt - lcp >= min) return lcp;
        return CLLM_MAX(fresh, sl->read_from);
    }
    return fresh;
}

/* Starts request r on idle slot sl, keeping the first `lcp` rows of its
 * cache (at least one prompt token is decoded anew, for the logits to
 * sample from); an append request keeps them all. */
static void slot_start(cllm_engine *e, engine_slot *sl, engine_req *r, size_t lcp) {
    if (r->append) {
        lcp = 0;
        const size_t past = (size_t)cllm_session_seq_n_past(e->s, sl->seq);
        if (past != sl->n_cached) { /* the caller decoded beside the engine */
            sl->n_cached = past;
            sl->n_known = sl->n_fresh = 0;
        }
    } else {
        if (lcp >= r->n_prompt) lcp = r->n_prompt - 1;
        if (cllm_session_seq_truncate(e->s, sl->seq, (int64_t)lcp) != CLLM_OK) {
            /* a sliding-window layer no longer holds the window before lcp */
            (void)cllm_session_seq_truncate(e->s, sl->seq, 0);
            lcp = 0;
        }
        sl->n_cached = sl->n_known = lcp;
        if (sl->n_fresh > lcp) sl->n_fresh = lcp;
        if (sl->first_answer >= lcp) sl->first_answer = (size_t)e->n_ctx;
    }
    sl->read_from = sl->n_cached;
    sl->req = r;
    sl->n_fed = lcp;
    sl->pending = -1;
    sl->n_gen = 0;
    sl->held_len = 0;
    sl->n_draft = 0;
    sl->spec_cap = r->p.spec.draft_max;
    sl->spec_miss = sl->spec_wait = 0;
    sl->started = ++e->n_started;
    sl->usage = (cllm_request_usage){.started = true,
                                     .n_prompt = r->n_prompt,
                                     .n_cached = lcp,
                                     .queued_ms = cllm_time_ms() - r->t_submit};
    e->n_running++;
    if (r->embed) return; /* computed by slot_embed: no sampler, no text */
    cllm_detokenizer_reset(sl->detok);
    if (r->borrowed) {
        sl->smp = r->borrowed;
    } else {
        const cllm_status st = cllm_sampler_new_model(&r->p.sampling, e->model, &sl->smp);
        if (st != CLLM_OK) {
            sl->smp = NULL;
            slot_fail(e, sl, st, "%s", cllm_last_error());
            return;
        }
    }
    /* the repetition window sees the prompt, as a fresh generation's does */
    (void)cllm_sampler_accept_prompt(sl->smp, r->prompt, r->n_prompt);
}

/* Ends the cancelled requests, then gives waiting requests to idle slots in
 * order, each to the idle slot of which it can reuse the most tokens; one
 * that can reuse none takes the slot used longest ago (an empty one first),
 * so that the caches of other conversations live as long as they can. */
static void engine_schedule(cllm_engine *e) {
    for (int i = 0; i < e->n_slots; i++) {
        engine_slot *sl = &e->slots[i];
        if (sl->req && sl->req->cancel) slot_finish(e, sl, CLLM_STOP_CANCELLED, CLLM_OK, NULL);
    }
    for (engine_req **pp = &e->wait_head, *prev = NULL; *pp;) {
        engine_req *r = *pp;
        int best = -1;
        size_t best_lcp = 0;
        if (!r->cancel && r->append) {
            best = e->slots[0].req ? -1 : 0;
        } else if (!r->cancel) {
            for (int i = 0; i < e->n_slots; i++) {
                const engine_slot *sl = &e->slots[i];
                if (sl->req) continue;
                const size_t lcp = engine_reuse(e, sl, r);
                if (best < 0 || lcp > best_lcp ||
                    (lcp == best_lcp && sl->started < e->slots[best].started)) {
                    best = i, best_lcp = lcp;
                }
            }
        }
        if (!r->cancel && best < 0) { /* no idle slot (for it): it waits */
            prev = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (e->wait_tail == r) e->wait_tail = prev;
        r->next = NULL;
        e->n_waiting--;
        if (r->cancel) {
            cllm_event ev = {
                .kind = CLLM_EVENT_FINISHED,
                .token = -1,
                .reason = CLLM_STOP_CANCELLED,
                .usage = {.n_prompt = r->n_prompt, .queued_ms = cllm_time_ms() - r->t_submit}};
            emit(e, r, &ev);
            req_free(r);
        } else {
            slot_start(e, &e->slots[best], r, best_lcp);
        }
    }
}

/* ---- one step ----------------------------------------------------------- */

/* The log-probability of `id` in the model's distribution at this position
 * (the softmax of the raw logits), and the `top` most likely tokens into
 * sl->top. */
static double slot_logprobs(const cllm_engine *e, engine_slot *sl, const float *logits, int32_t id,
                            int top) {
    const int32_t n = e->n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    int32_t best[CLLM_ENGINE_MAX_TOP_LOGPROBS];
    int nb = 0;
    for (int32_t i = 0; i < n && top > 0; i++) { /* insertion into the top list */
        if (nb == top && logits[i] <= logits[best[nb - 1]]) continue;
        int k = nb < top ? nb++ : nb - 1;
        while (k > 0 && logits[best[k - 1]] < logits[i]) best[k] = best[k - 1], k--;
        best[k] = i;
    }
    for (int k = 0; k < nb; k++) {
        sl->top[k] = (cllm_token_logprob){best[k], (double)logits[best[k]] - lse};
    }
    return (double)logits[id] - lse;
}

/* Samples the next token of slot sl from its logits and reports it and its
 * text; ends the request on an end token, a stop string, its length or a
 * full context. */
static void slot_sample(cllm_engine *e, engine_slot *sl, const float *logits) {
    const engine_req *r = sl->req;
    if (r->p.max_tokens == 0) {
        slot_finish(e, sl, CLLM_STOP_LENGTH, CLLM_OK, NULL);
        return;
    }
    if (!logits) logits = cllm_session_seq_logits(e->s, sl->seq);
    if (!logits) {
        slot_fail(e, sl, CLLM_ERR_BACKEND, "%s", "no logits after decoding");
        return;
    }
    int32_t id;
    const cllm_status st = cllm_sampler_sample(sl->smp, logits, &id);
    if (st != CLLM_OK) {
        slot_fail(e, sl, st, "sampling failed: %s", cllm_last_error());
        return;
    }
    if (cllm_tokenizer_is_eog(e->model->tok, id)) {
        slot_finish(e, sl, CLLM_STOP_EOG, CLLM_OK, NULL);
        return;
    }
    (void)cllm_sampler_accept(sl->smp, id);
    sl->n_gen++;
    sl->pending = id;
    cllm_event ev = {.kind = CLLM_EVENT_TOKEN, .token = id};
    if (r->p.logprobs >= 0) {
        ev.logprob = slot_logprobs(e, sl, logits, id, r->p.logprobs);
        ev.top = sl->top;
        ev.n_top = r->p.logprobs;
    }
    emit(e, r, &ev);
    const char *text;
    size_t len;
    (void)cllm_detokenizer_put(sl->detok, id, &text, &len); /* id is in range */
    if (!hold(sl, text, len)) {
        slot_fail(e, sl, CLLM_ERR_NOMEM, "%s", "out of memory for the text");
        return;
    }
    const bool at_length = r->p.max_tokens >= 0 && sl->n_gen >= (size_t)r->p.max_tokens;
    /* the pending token needs one more row of the context */
    const bool full = sl->n_cached + 1 > (size_t)e->n_ctx;
    if (release_decided(e, sl, id, false)) {
        slot_finish(e, sl, CLLM_STOP_STRING, CLLM_OK, NULL);
    } else if (at_length || full) {
        slot_finish(e, sl, at_length ? CLLM_STOP_LENGTH : CLLM_STOP_CONTEXT_FULL, CLLM_OK, NULL);
    }
}

/* ---- speculative decoding ------------------------------------------------ */

/* Drafts the tokens that may follow slot sl's pending token (n-gram lookup
 * in the ids its cache holds, cllm_spec_ngram_draft, or the draft model's
 * greedy continuation of them, cllm_draft_propose), at most `budget`:
 * sl->spec holds the pending token and its draft, sl->n_draft the draft's
 * length (returned). No draft while the cache holds ids the slot does not
 * know, while the slot waits after rejected drafts, or where the rows or
 * the tokens left would not take it. */
static int slot_draft(cllm_engine *e, engine_slot *sl, int budget) {
    const engine_req *r = sl->req;
    sl->n_draft = 0;
    if (e->spec_off || r->p.spec.type == CLLM_SPEC_NONE || sl->n_known != sl->n_cached) return 0;
    if (sl->spec_wait > 0) {
        sl->spec_wait--;
        return 0;
    }
    int64_t max = CLLM_MIN((int64_t)budget, (int64_t)sl->spec_cap);
    /* the pending token's row and the draft's fit the context (the
     * pending token has its row: slot_sample checked it) */
    max = CLLM_MIN(max, e->n_ctx - (int64_t)sl->n_cached - 1);
    /* a draft past the tokens left is never kept */
    if (r->p.max_tokens >= 0)
        max = CLLM_MIN(max, (int64_t)r->p.max_tokens - (int64_t)sl->n_gen - 1);
    if (max < 1) return 0;
    sl->cached[sl->n_cached] = sl->pending; /* the row it will have */
    int d;
    if (r->p.spec.type == CLLM_SPEC_DRAFT) {
        double ms = 0;
        /* the rows of this request's answer were decoded one token each */
        const size_t n_chunked = sl->n_cached - CLLM_MIN(sl->usage.n_gen_decoded, sl->n_cached);
        d = cllm_draft_propose(r->p.spec.draft, sl->seq, sl->cached, sl->n_cached + 1, n_chunked,
                               (int)max, r->p.spec.draft_min, sl->spec + 1, &ms);
        sl->usage.gen_ms += ms; /* drafting is part of generating */
        if (d < 0) d = 0;
    } else {
        d = cllm_spec_ngram_draft(&r->p.spec, sl->cached, sl->n_cached + 1, (int)max, sl->spec + 1);
    }
    sl->spec[0] = sl->pending;
    sl->n_draft = d;
    return d;
}

/*
 * After the pass that decoded slot sl's pending token and its draft
 * (w->ids, w->n = 1 + draft; w->rows the logits of each, or NULL for the
 * sequence's last logits without a draft): samples each position in turn,
 * as decoding one token at a time would, and keeps the draft up to the
 * first token sampled otherwise, which is the next pending token. The rows
 * of the draft's tokens not kept leave the cache, which then holds what
 * decoding one token at a time leaves. The next draft's length adapts.
 */
static void slot_verify(cllm_engine *e, engine_slot *sl, const engine_work *w) {
    const int d = (int)w->n - 1;
    const int draft_max = sl->req->p.spec.draft_max, draft_min = sl->req->p.spec.draft_min;
    int kept = 0;
    sl->usage.n_drafted += (size_t)d; /* before the sampling that may end the request */
    for (int j = 0;; j++) {           /* row j holds w->ids[j] */
        if (sl->n_known == sl->n_cached) sl->cached[sl->n_known++] = w->ids[j];
        if (sl->first_answer > sl->n_cached) sl->first_answer = sl->n_cached;
        sl->n_cached++;
        sl->usage.n_gen_decoded++;
        sl->read_from = sl->n_cached; /* it ends with an answer row */
        slot_sample(e, sl, w->rows ? w->rows + (size_t)j * (size_t)e->n_vocab : NULL);
        /* a request cancelled by its token's events (cllm_generate's
         * callback) ends at the next step, as without a draft */
        if (!sl->req || sl->req->cancel || j == d || sl->pending != w->ids[j + 1]) break;
        kept++;
        sl->usage.n_accepted++;
    }
    if (d == 0) return;
    (void)cllm_session_seq_truncate(e->s, sl->seq, (int64_t)sl->n_cached); /* < n_batch back */
    if (kept == d) { /* all kept: a longer one next */
        sl->spec_cap = CLLM_MIN(2 * sl->spec_cap, draft_max);
        sl->spec_miss = 0;
    } else if (kept > 0) {
        sl->spec_cap = CLLM_MIN(kept + 1, draft_max);
        sl->spec_miss = 0;
    } else { /* none kept: one token next, and after two in a row a pause */
        sl->spec_cap = 1;
        if (++sl->spec_miss >= 2) sl->spec_wait = 1 << CLLM_MIN(sl->spec_miss - 1, 6);
    }
    if (sl->spec_cap < draft_min) sl->spec_cap = draft_min;
}

/*
 * The pass of a step whose generating slots verify drafts: every slot's
 * pending token and draft, one token per item (cllm_session_decode_items:
 * each column computed as it would be decoded alone). Returns the works it
 * decoded (the generating ones, first in w), or -1 when it could not run
 * (no sequence changed).
 */
static int engine_pass_spec(cllm_engine *e, engine_work *w, int n, int n_gen) {
    cllm_seq_tokens *items = e->items;
    int k = 0;
    int64_t total = 0;
    for (int i = 0; i < n_gen; i++) {
        for (int64_t t = 0; t < w[i].n; t++)
            items[k++] = (cllm_seq_tokens){w[i].slot->seq, w[i].ids + t, 1};
        total += w[i].n;
    }
    (void)n; /* the prompt chunks have passes of their own: the plan measures
              * the drafts' pass alone (cllm_shape_worst) */
    const int j = n_gen;
    CLLM_ASSERT(total <= e->n_batch && k <= cllm_session_max_items(e->s));
    if (k > e->spec_rows) {
        float *rows = cllm_realloc(e->spec_logits, (size_t)k * (size_t)e->n_vocab * sizeof(float));
        if (!rows) return -1;
        e->spec_logits = rows;
        e->spec_rows = k;
    }
    const double t0 = cllm_time_ms();
    if (cllm_session_decode_items(e->s, items, k, e->spec_logits) != CLLM_OK) return -1;
    const double ms = cllm_time_ms() - t0;
    size_t row = 0;
    for (int i = 0; i < j; i++) {
        w[i].st = CLLM_OK;
        if (i < n_gen) {
            w[i].rows = e->spec_logits + row * (size_t)e->n_vocab;
            row += (size_t)w[i].n;
            w[i].slot->usage.gen_ms += ms;
        } else {
            row++;
            w[i].slot->usage.prompt_ms += ms;
        }
    }
    return j;
}

/* One forward pass over w[0, n) (items[0, n)); if it fails, each item alone.
 * Each item's request is charged the pass's time. */
static void engine_pass(cllm_engine *e, engine_work *w, const cllm_seq_tokens *items, int n) {
    const double t0 = cllm_time_ms();
    cllm_status st = cllm_session_decode_seqs(e->s, items, n);
    const double ms = cllm_time_ms() - t0;
    for (int i = 0; i < n; i++) {
        w[i].st = st;
        if (st != CLLM_OK && n > 1) w[i].st = cllm_session_decode_seqs(e->s, &items[i], 1);
        if (w[i].st != CLLM_OK) {
            snprintf(w[i].error, sizeof(w[i].error), "decoding failed: %s", cllm_last_error());
        }
        cllm_request_usage *u = &w[i].slot->usage;
        if (w[i].prompt)
            u->prompt_ms += ms;
        else
            u->gen_ms += ms;
    }
}

/*
 * Decodes the items of a step: the generating slots' tokens (one each, the
 * first n_gen items) and the prompt chunks of at least
 * CLLM_SESSION_MIN_CHUNK tokens that fit beside them in n_batch, in one
 * forward pass, which reads the weights once for all of them: each
 * one-token column is computed as it would be alone and attends to its own
 * KV cache, and the chunks' columns as in a pass of their own. The other
 * prompt chunks go together in passes of up to n_batch tokens: chunks of at
 * least CLLM_SESSION_MIN_CHUNK tokens get in a joint pass the logits they
 * get read alone, bit for bit (cllm_session_decode_seqs), and requests that
 * arrive together pay for the weights once instead of once each. A shorter
 * chunk (a prompt of fewer tokens) has a pass of its own. So a request's
 * answer does not depend on the others.
 */
static void engine_decode(cllm_engine *e, engine_work *w, int n, int n_gen) {
    cllm_seq_tokens *items = e->items;
    const int64_t min = CLLM_SESSION_MIN_CHUNK, nb = e->n_batch;
    int i = 0;
    bool drafts = false;
    for (int k = 0; k < n_gen; k++) drafts = drafts || w[k].n > 1;
    if (drafts && (i = engine_pass_spec(e, w, n, n_gen)) < 0) {
        /* the pass of the drafts could not run (the error was reported
         * where it failed): decode without them, and draft no more */
        CLLM_LOG_WARN("engine: speculative decoding off: %s", cllm_last_error());
        e->spec_off = true;
        for (int k = 0; k < n_gen; k++) {
            w[k].ids = &w[k].slot->pending;
            w[k].n = 1;
            w[k].slot->n_draft = 0;
        }
        i = 0;
    }
    for (int k = 0; k < n; k++) items[k] = (cllm_seq_tokens){w[k].slot->seq, w[k].ids, w[k].n};
    while (i < n_gen) { /* a caller's session may batch fewer tokens than it has sequences */
        int j = (int)CLLM_MIN((int64_t)n_gen, i + nb);
        int64_t total = j - i;
        if (j == n_gen) {
            while (j < n && items[j].n_tokens >= min && total + items[j].n_tokens <= nb)
                total += items[j++].n_tokens;
        }
        engine_pass(e, w + i, items + i, j - i);
        i = j;
    }
    while (i < n) {
        int j = i + 1;
        int64_t total = items[i].n_tokens;
        while (items[i].n_tokens >= min && j < n && items[j].n_tokens >= min &&
               total + items[j].n_tokens <= nb) {
            total += items[j++].n_tokens;
        }
        engine_pass(e, w + i, items + i, j - i);
        i = j;
    }
}

/* Computes the embedding request of slot sl (its sequence starts anew and
 * holds the text afterwards, as ids the slot does not know) and ends it
 * with its vectors or its error. */
static void slot_embed(cllm_engine *e, engine_slot *sl) {
    engine_req *r = sl->req;
    const int64_t E = e->model->hp.n_embd;
    cllm_event ev = {.kind = CLLM_EVENT_FINISHED, .token = -1, .reason = CLLM_STOP_EOG};
    char msg[512] = "";
    cllm_status st = CLLM_OK;
    if (!e->embd) {
        e->embd = cllm_malloc((size_t)e->n_ctx * (size_t)E * sizeof(float));
        if (!e->embd) st = cllm_error(CLLM_ERR_NOMEM, "out of host memory for embeddings");
    }
    const double t0 = cllm_time_ms();
    if (st == CLLM_OK) {
        st = cllm_session_seq_embed(e->s, sl->seq, r->prompt, (int64_t)r->n_prompt, r->pooling,
                                    e->embd);
    }
    sl->usage.prompt_ms = cllm_time_ms() - t0;
    sl->n_cached = (size_t)cllm_session_seq_n_past(e->s, sl->seq);
    sl->n_known = sl->n_fresh = 0; /* nothing of it is reused */
    sl->n_fed = r->n_prompt;
    ev.usage = sl->usage;
    if (st == CLLM_OK) {
        ev.embd = e->embd;
        ev.n_embd_rows = r->pooling == CLLM_POOLING_NONE ? (int64_t)r->n_prompt : 1;
    } else {
        snprintf(msg, sizeof(msg), "embedding failed: %s", cllm_last_error());
        ev.reason = CLLM_STOP_ERROR;
        ev.status = st;
        ev.error = msg;
    }
    sl->req = NULL;
    e->n_running--;
    emit(e, r, &ev);
    req_free(r);
}

cllm_status cllm_engine_step(cllm_engine *e) {
    if (!e) return CLLM_NULL_ARG("the engine");
    engine_schedule(e);
    /* a token of every generating slot, then the next chunk of every prompt
     * being read (at most n_batch tokens, as it would be alone) */
    engine_work *work = e->work;
    int n = 0, n_gen = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_slots; i++) {
            engine_slot *sl = &e->slots[i];
            const engine_req *r = sl->req;
            if (!r || r->embed || (sl->n_fed < r->n_prompt) != (pass == 1)) continue;
            engine_work *w = &work[n++];
            *w = (engine_work){.slot = sl, .prompt = pass == 1, .sample = true};
            if (pass == 1) {
                const size_t left = r->n_prompt - sl->n_fed;
                w->ids = r->prompt + sl->n_fed;
                w->n = cllm_session_prompt_chunk(e->n_batch, (int64_t)left);
                w->sample = (size_t)w->n == left;
            } else {
                w->ids = &sl->pending;
                w->n = 1;
                n_gen++;
            }
        }
    }
    /* speculative decoding: drafts while one pass takes them beside the
     * token of every generating slot */
    int budget = (int)CLLM_MIN((int64_t)cllm_session_max_items(e->s), e->n_batch) - n_gen;
    for (int i = 0; i < n_gen && budget > 0 && !e->spec_off; i++) {
        const int d = slot_draft(e, work[i].slot, budget);
        if (d > 0) {
            work[i].ids = work[i].slot->spec;
            work[i].n = 1 + d;
            budget -= d;
        }
    }
    if (n > 0) engine_decode(e, work, n, n_gen);

    for (int i = 0; i < n; i++) {
        engine_work *w = &work[i];
        engine_slot *sl = w->slot;
        if (w->st != CLLM_OK) {
            /* the sequence keeps the rows it had */
            (void)cllm_session_seq_truncate(e->s, sl->seq, (int64_t)sl->n_cached);
            slot_finish(e, sl, CLLM_STOP_ERROR, w->st, w->error);
            continue;
        }
        if (!w->prompt) { /* its token, and its draft if it has one */
            slot_verify(e, sl, w);
            continue;
        }
        if (sl->n_known == sl->n_cached) {
            memcpy(sl->cached + sl->n_cached, w->ids, (size_t)w->n * sizeof(int32_t));
            sl->n_known += (size_t)w->n;
        }
        /* a prompt chunk of CLLM_SESSION_MIN_CHUNK or more after fresh rows:
         * its rows are fresh too */
        if (w->prompt && e->chunked && sl->n_fresh == sl->n_cached &&
            w->n >= CLLM_SESSION_MIN_CHUNK) {
            sl->n_fresh += (size_t)w->n;
        }
        if (!w->prompt && sl->first_answer > sl->n_cached) sl->first_answer = sl->n_cached;
        sl->n_cached += (size_t)w->n;
        if (w->prompt) {
            sl->n_fed += (size_t)w->n;
        } else {
            sl->usage.n_gen_decoded++;
            sl->read_from = sl->n_cached; /* it ends with an answer row */
        }
        if (w->sample) slot_sample(e, sl, NULL);
    }
    /* the embedding requests that have a sequence, after the generation */
    for (int i = 0; i < e->n_slots; i++) {
        if (e->slots[i].req && e->slots[i].req->embed) slot_embed(e, &e->slots[i]);
    }
    return CLLM_OK;
}
