/*
 * The generation loop: decode a prompt, then sample, stream and decode one
 * token at a time until an end-of-generation token, n_predict tokens, a full
 * context, or the callback says stop.
 *
 *     cllm_generate_result res;
 *     st = cllm_generate(session, tok, sampler, prompt, n_prompt, 128, on_text, ud, &res);
 *     ... res.ids[0..res.n_ids), res.stop, res.prompt_ms, res.gen_ms ...
 *     cllm_generate_result_free(&res);
 */
#ifndef CLLM_RUNTIME_GENERATE_H
#define CLLM_RUNTIME_GENERATE_H

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/tokenizer.h"

typedef enum cllm_stop_reason {
    CLLM_STOP_EOG = 0,      /* the model produced an end-of-generation token */
    CLLM_STOP_LENGTH,       /* n_predict tokens were generated */
    CLLM_STOP_CONTEXT_FULL, /* the session's context is full */
    CLLM_STOP_CALLBACK,     /* the callback returned false */
    CLLM_STOP_COUNT
} cllm_stop_reason;

const char *cllm_stop_reason_str(cllm_stop_reason r);

/* Receives each piece of text as it becomes complete UTF-8 (possibly empty)
 * with the token that completed it; return false to stop. */
typedef bool (*cllm_on_text_fn)(int32_t id, const char *text, size_t len, void *user_data);

typedef struct cllm_generate_result {
    int32_t *ids; /* generated ids (not the prompt; not the final EOG token) */
    size_t n_ids;
    cllm_stop_reason stop;
    double prompt_ms;     /* decoding the prompt */
    double gen_ms;        /* decoding the generated tokens (sampling excluded) */
    size_t n_gen_decoded; /* generated tokens that went through the model */
} cllm_generate_result;

/*
 * Decodes prompt[0..n_prompt) into the session (after whatever it holds),
 * then generates up to n_predict tokens (n_predict < 0: until EOG or a full
 * context). A full context ends generation with CLLM_STOP_CONTEXT_FULL and
 * CLLM_OK; a prompt that does not fit is CLLM_ERR_TOO_LARGE. *res is filled
 * on success (free it with cllm_generate_result_free) and zeroed on failure.
 */
cllm_status cllm_generate(cllm_session *s, const cllm_tokenizer *tok, cllm_sampler *smp,
                          const int32_t *prompt, size_t n_prompt, int n_predict,
                          cllm_on_text_fn on_text, void *user_data, cllm_generate_result *res);

void cllm_generate_result_free(cllm_generate_result *res);

/* Monotonic milliseconds. */
double cllm_time_ms(void);

#endif /* CLLM_RUNTIME_GENERATE_H */
