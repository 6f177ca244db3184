/* The generation loop. */
#include "runtime/generate.h"
#include "core/hostmem.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_stop_names[] = {
    [CLLM_STOP_EOG] = "eog",
    [CLLM_STOP_LENGTH] = "length",
    [CLLM_STOP_CONTEXT_FULL] = "context_full",
    [CLLM_STOP_CALLBACK] = "callback",
};
_Static_assert(CLLM_ARRAY_SIZE(k_stop_names) == CLLM_STOP_COUNT, "stop reason names");

const char *cllm_stop_reason_str(cllm_stop_reason r) {
    return (unsigned)r < CLLM_STOP_COUNT ? k_stop_names[r] : "unknown";
}

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

cllm_status cllm_generate(cllm_session *s, cllm_sampler *smp, const int32_t *prompt,
                          size_t n_prompt, int n_predict, cllm_on_text_fn on_text, void *user_data,
                          cllm_generate_result *res) {
    memset(res, 0, sizeof(*res));
    if (n_prompt == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "generate: empty prompt");
    const cllm_tokenizer *tok = cllm_session_model(s)->tok;
    if (!tok) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: generate: the model has no tokenizer",
                          cllm_session_model(s)->path);
    }
    const size_t room = (size_t)(cllm_session_n_ctx(s) - cllm_session_n_past(s));
    const size_t cap = n_predict < 0 ? room : CLLM_MIN((size_t)n_predict, room);
    cllm_generate_result r = {0};
    r.ids = cllm_malloc((cap + 1) * sizeof(*r.ids));
    cllm_detokenizer *detok = NULL;
    if (!r.ids || cllm_detokenizer_new(tok, 0, &detok) != CLLM_OK) {
        cllm_free(r.ids);
        return cllm_error(CLLM_ERR_NOMEM, "generate: out of host memory");
    }
    for (size_t i = 0; i < n_prompt; i++) CLLM_UNUSED(cllm_sampler_accept(smp, prompt[i]));

    double t0 = cllm_time_ms();
    cllm_status st = cllm_session_decode(s, prompt, (int64_t)n_prompt);
    r.prompt_ms = cllm_time_ms() - t0;
    if (st != CLLM_OK) goto fail;

    r.stop = CLLM_STOP_LENGTH;
    for (;;) {
        int32_t id;
        if ((st = cllm_sampler_sample(smp, cllm_session_logits(s), &id)) != CLLM_OK) goto fail;
        if (cllm_tokenizer_is_eog(tok, id)) {
            r.stop = CLLM_STOP_EOG;
            break;
        }
        if (n_predict >= 0 && r.n_ids >= (size_t)n_predict) break;
        if (cllm_session_n_past(s) >= cllm_session_n_ctx(s)) {
            r.stop = CLLM_STOP_CONTEXT_FULL;
            break;
        }
        r.ids[r.n_ids++] = id;
        CLLM_UNUSED(cllm_sampler_accept(smp, id));
        const char *text;
        size_t len;
        if ((st = cllm_detokenizer_push(detok, id, &text, &len)) != CLLM_OK) goto fail;
        if (on_text && !on_text(id, text, len, user_data)) {
            r.stop = CLLM_STOP_CALLBACK;
            break;
        }
        if (n_predict >= 0 && r.n_ids >= (size_t)n_predict) break;
        t0 = cllm_time_ms();
        st = cllm_session_decode(s, &id, 1);
        r.gen_ms += cllm_time_ms() - t0;
        if (st != CLLM_OK) goto fail;
        r.n_gen_decoded++;
    }
    const char *text;
    size_t len;
    cllm_detokenizer_flush(detok, &text, &len);
    if (on_text && len) on_text(-1, text, len, user_data);
    cllm_detokenizer_free(detok);
    *res = r;
    return CLLM_OK;

fail:
    cllm_detokenizer_free(detok);
    cllm_free(r.ids);
    return st;
}
