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

/* The session API is public (cllm.h); the layout lives in session.c. */

#endif /* CLLM_RUNTIME_SESSION_H */
