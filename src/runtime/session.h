/*
 * A session: one conversation over a shared model. It owns its state memory
 * (the KV cache), its compute memory (planned from its worst-case graph) and
 * its backend; the model's weights are only referenced.
 *
 *     cllm_session_params sp = cllm_session_default_params();
 *     sp.n_ctx = 2048;
 *     cllm_session *s;
 *     st = cllm_session_new(model, &sp, &s);
 *     st = cllm_session_decode(s, prompt_ids, n_prompt);   // batches of n_batch
 *     const float *logits = cllm_session_logits(s);         // [n_vocab], last token
 *     st = cllm_session_decode(s, &next_id, 1);             // one token at a time
 *     cllm_session_free(s);
 *
 * Memory: at creation the session measures its worst-case graphs (a full
 * batch at a full context, and one token at a full context) through the
 * graph planner, then allocates exactly that: cllm_session_memory() reports
 * planned and allocated bytes per kind, which are equal by construction and
 * checked by the tests.
 *
 * Thread safety: a session is used by one thread at a time; different
 * sessions of one model may run on different threads.
 */
#ifndef CLLM_RUNTIME_SESSION_H
#define CLLM_RUNTIME_SESSION_H

#include "runtime/model.h"

typedef struct cllm_session cllm_session;

typedef struct cllm_session_params {
    int64_t n_ctx;        /* 0: min(model context, 4096) */
    int64_t n_batch;      /* prompt tokens per forward pass (default 512) */
    cllm_type kv_type;    /* CLLM_TYPE_F16 (default) or CLLM_TYPE_F32 */
    int n_threads;        /* 0: one per physical core */
    bool unfused_attn;    /* reference attention (mul_mat + soft_max + mul_mat) */
    bool f32_activations; /* keep matmul activations in F32 (no Q8 quantization) */
    /* keep the logits of every token of a decode call, not only the last
     * one's (see cllm_session_logits_ith): the worst-case graph then outputs
     * n_batch rows of logits, so the compute memory grows by about
     * n_batch x n_vocab floats, and the session holds a host array of that
     * size; a decode call may then pass at most n_batch tokens */
    bool all_logits;
} cllm_session_params;

cllm_session_params cllm_session_default_params(void);

/* Bytes per memory kind for one session on one device. Weights are the
 * model's (shared), reported for completeness. */
typedef struct cllm_memory_report {
    size_t planned[CLLM_MEM_COUNT];
    size_t allocated[CLLM_MEM_COUNT];
} cllm_memory_report;

/*
 * Creates a session on `model` (which must outlive it). Validates the
 * parameters (CLLM_ERR_INVALID_ARG with a message), plans and allocates the
 * KV cache, the compute buffer and the backend workspace. On failure nothing
 * stays allocated and *out is untouched.
 */
cllm_status cllm_session_new(const cllm_model *model, const cllm_session_params *params,
                             cllm_session **out);
void cllm_session_free(cllm_session *s);

/*
 * Appends n tokens to the context and runs the model over them, n_batch at
 * a time; afterwards cllm_session_logits() holds the logits of the last one
 * (and, with all_logits, cllm_session_logits_ith() those of each one).
 * Token ids out of range: CLLM_ERR_INVALID_ARG. A context that would
 * overflow, or with all_logits more than n_batch tokens in one call:
 * CLLM_ERR_TOO_LARGE, and nothing is processed. On any error the session
 * keeps the tokens and the logits it had before the call.
 */
cllm_status cllm_session_decode(cllm_session *s, const int32_t *tokens, int64_t n);

/* Logits [n_vocab] of the last token decoded (NULL before the first decode
 * and after a reset or truncate). Valid until the next decode, reset,
 * truncate or free. */
const float *cllm_session_logits(const cllm_session *s);

/*
 * Logits [n_vocab] of token i of the last decode call: i in [0, n) for a
 * call of n tokens, or negative from the end (-1: the last token, as
 * cllm_session_logits). With all_logits every token's are kept; without it
 * only the last token's (any other i gives NULL). NULL when i is out of
 * range or nothing is kept (before the first decode, after a reset or a
 * truncate). Valid until the next decode, reset, truncate or free.
 */
const float *cllm_session_logits_ith(const cllm_session *s, int64_t i);

int64_t cllm_session_n_past(const cllm_session *s); /* tokens in the context */
int64_t cllm_session_n_ctx(const cllm_session *s);
int64_t cllm_session_n_vocab(const cllm_session *s);
/* Forgets the context (n_past = 0) and the logits; keeps all memory. */
void cllm_session_reset(cllm_session *s);
/*
 * Keeps the first n_keep tokens of the context and forgets the rest and the
 * logits; the next decode continues at position n_keep and overwrites the
 * cache from there, so its results equal those of a session that never saw
 * the forgotten tokens. CLLM_ERR_INVALID_ARG (session unchanged) unless
 * 0 <= n_keep <= n_past.
 */
cllm_status cllm_session_truncate(cllm_session *s, int64_t n_keep);

/* Planned and allocated bytes per kind on the CPU (weights from the model). */
cllm_memory_report cllm_session_memory(const cllm_session *s);
/* The same on `dev` (zeros for a device the model does not use). With a
 * model loaded with a plan, each layer's KV cache sits on its layer's
 * device and the session computes through the scheduler on every device
 * that holds part of the model. */
cllm_memory_report cllm_session_memory_on(const cllm_session *s, const cllm_device *dev);

#endif /* CLLM_RUNTIME_SESSION_H */
