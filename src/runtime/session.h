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
 * Graphs: a batch's graph is built and planned once per batch shape and run
 * again while the shape stays the same (only its inputs and the KV write
 * position change); one-token batches attend to the cache padded to a
 * multiple of 256 rows, so token generation builds a graph every 256 tokens.
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

/* For tests: the graphs s has built and planned so far (a graph run again
 * for a batch of the same shape is not counted). */
uint64_t cllm_session_graph_builds(const cllm_session *s);

/* For tests: with reuse off, every batch builds and plans its graph anew
 * (the reference that reuse must match bit for bit); on by default. */
void cllm_session_set_graph_reuse(cllm_session *s, bool reuse);

#endif /* CLLM_RUNTIME_SESSION_H */
