/* The generation loop of one request: cllm_generate, a request of a batch
 * engine (engine.c) over the caller's session, with the caller's sampler. */
#include "runtime/generate.h"
#include "core/hostmem.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cllm_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void cllm_generate_result_free(cllm_generate_result *res) {
    if (!res) return;
    cllm_free(res->ids);
    memset(res, 0, sizeof(*res));
}

/* The state of one cllm_generate between the engine's events. */
typedef struct gen_run {
    cllm_engine *e;
    uint64_t id;
    cllm_on_text_fn on_text;
    void *ud;
    cllm_generate_result r;
    size_t cap;
    /* the last token reported, whose text has not been given to on_text
     * yet (-1: none): it gets "" when no text comes for it */
    int32_t untold;
    bool stopped; /* on_text returned false */
    bool finished, oom;
    cllm_status status;
} gen_run;

/* Calls on_text for token `id` (-1: the final text, whose answer does not
 * matter); a false answer cancels the request, which ends at the next step
 * before any decoding. */
static void tell(gen_run *g, int32_t id, const char *text, size_t len) {
    if (!g->on_text || (g->stopped && id >= 0)) return;
    if (!g->on_text(id, text, len, g->ud) && id >= 0) {
        g->stopped = true;
        (void)cllm_engine_cancel(g->e, g->id); /* finished already: nothing to cancel */
    }
}

/* The token reported last gets "" when no text came for it. */
static void tell_untold(gen_run *g) {
    if (g->untold < 0) return;
    const int32_t id = g->untold;
    g->untold = -1;
    tell(g, id, "", 0);
}

static void on_event(const cllm_event *ev, void *ud) {
    gen_run *g = ud;
    switch (ev->kind) {
    case CLLM_EVENT_TOKEN:
        tell_untold(g);
        if (g->r.n_ids == g->cap) {
            const size_t cap = g->cap ? 2 * g->cap : 64;
            int32_t *ids = cllm_realloc(g->r.ids, cap * sizeof(*ids));
            if (!ids) {
                g->oom = true;
                (void)cllm_engine_cancel(g->e, g->id);
                return;
            }
            g->r.ids = ids;
            g->cap = cap;
        }
        g->r.ids[g->r.n_ids++] = ev->token;
        g->untold = ev->token;
        break;
    case CLLM_EVENT_TEXT:
        if (ev->token < 0 || ev->token != g->untold) tell_untold(g);
        if (ev->token == g->untold) g->untold = -1;
        tell(g, ev->token, ev->text, ev->len);
        break;
    default: /* CLLM_EVENT_FINISHED */
        tell_untold(g);
        g->finished = true;
        g->r.stop = ev->reason;
        g->r.prompt_ms = ev->usage.prompt_ms;
        g->r.gen_ms = ev->usage.gen_ms;
        g->r.n_gen_decoded = ev->usage.n_gen_decoded;
        g->r.n_drafted = ev->usage.n_drafted;
        g->r.n_accepted = ev->usage.n_accepted;
        if (ev->reason == CLLM_STOP_ERROR) {
            g->status = cllm_error(ev->status, "%s", ev->error ? ev->error : "generation failed");
        }
        break;
    }
}

cllm_status cllm_generate(cllm_session *s, cllm_sampler *smp, const int32_t *prompt,
                          size_t n_prompt, int n_predict, cllm_on_text_fn on_text, void *user_data,
                          cllm_generate_result *res) {
    return cllm_generate_spec(s, smp, prompt, n_prompt, n_predict, NULL, on_text, user_data, res);
}

cllm_status cllm_generate_spec(cllm_session *s, cllm_sampler *smp, const int32_t *prompt,
                               size_t n_prompt, int n_predict, const cllm_spec_params *spec,
                               cllm_on_text_fn on_text, void *user_data,
                               cllm_generate_result *res) {
    if (!res) return cllm_error(CLLM_ERR_INVALID_ARG, "generate: res is NULL");
    memset(res, 0, sizeof(*res));
    if (!s || !smp) return cllm_error(CLLM_ERR_INVALID_ARG, "generate: session or sampler is NULL");
    if (spec) CLLM_TRY(cllm_spec_params_check(spec));
    if (n_prompt == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "generate: empty prompt");
    if (!prompt) return cllm_error(CLLM_ERR_INVALID_ARG, "generate: prompt is NULL");
    if (cllm_sampler_n_vocab(smp) != cllm_session_n_vocab(s)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "generate: the sampler was made for %d tokens, the model has %lld",
                          cllm_sampler_n_vocab(smp), (long long)cllm_session_n_vocab(s));
    }
    const cllm_model *m = cllm_session_model(s);
    if (!m->tok) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: generate: the model has no tokenizer",
                          m->path);
    }
    const int64_t room = cllm_session_n_ctx(s) - cllm_session_n_past(s);
    if ((int64_t)n_prompt > room) {
        return cllm_error(
            CLLM_ERR_TOO_LARGE, "context full: %lld tokens + %zu new exceed the context of %lld",
            (long long)cllm_session_n_past(s), n_prompt, (long long)cllm_session_n_ctx(s));
    }
    /* a failure leaves the sampler and the session as they were */
    const int64_t past = cllm_session_seq_n_past(s, 0);
    cllm_sampler_saved saved;
    CLLM_TRY(cllm_sampler_save(smp, &saved));
    gen_run g = {.on_text = on_text, .ud = user_data, .untold = -1, .status = CLLM_OK};
    const cllm_status made = cllm_engine_new_session(s, on_event, &g, &g.e);
    if (made != CLLM_OK) {
        cllm_sampler_saved_free(&saved);
        return made;
    }
    cllm_request_params rp = cllm_request_default_params();
    rp.max_tokens = n_predict < 0 ? -1 : n_predict;
    if (spec) rp.spec = *spec;
    cllm_status st = cllm_engine_submit_append(g.e, prompt, n_prompt, &rp, smp, &g, &g.id);
    while (st == CLLM_OK && !g.finished) {
        cllm_engine_step(g.e);
        tell_untold(&g); /* before the next step decodes that token */
    }
    cllm_engine_free(g.e);
    if (st == CLLM_OK && g.oom) st = cllm_error(CLLM_ERR_NOMEM, "generate: out of host memory");
    if (st == CLLM_OK) st = g.status;
    if (st != CLLM_OK) {
        cllm_free(g.r.ids);
        cllm_sampler_restore(smp, &saved);
        cllm_sampler_saved_free(&saved);
        if (cllm_session_seq_n_past(s, 0) != past) {
            char why[512];
            snprintf(why, sizeof(why), "%s", cllm_last_error());
            /* sliding-window layers may no longer hold the rows before:
             * then the session keeps what was decoded */
            if (cllm_session_seq_truncate(s, 0, past) != CLLM_OK) (void)cllm_error(st, "%s", why);
        }
        return st;
    }
    cllm_sampler_saved_free(&saved);
    if (g.stopped) g.r.stop = CLLM_STOP_CALLBACK;
    *res = g.r;
    return CLLM_OK;
}
