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

/* The fewest tokens a batch of a longer prompt holds: from 8 columns on,
 * the CPU's products use the panel kernels, and the rows and logits of a
 * prompt do not depend on where its batches start; with fewer they would
 * take the one-column kernels, rounded otherwise. The batch engine
 * (engine.c) reads its prompts by the same rule and reuses a cut cache
 * only where at least this many tokens are left to read. */
enum { CLLM_SESSION_MIN_CHUNK = 8 };

/* The tokens of the next batch of a prompt with `left` tokens to read, at
 * most n_batch at a time: all of them when they fit; else n_batch, less
 * CLLM_SESSION_MIN_CHUNK when fewer than that would be left for the last
 * batch (n_batch >= 2 * CLLM_SESSION_MIN_CHUNK). cllm_session_decode cuts
 * prompts so, and so does the engine. Pure. */
int64_t cllm_session_prompt_chunk(int64_t n_batch, int64_t left);

/*
 * As cllm_session_decode_seqs, but a sequence may come back in later items
 * of one token each, after items of its own of one token (the tokens that
 * follow its last one, in order; at most cllm_session_max_items): the
 * verification pass of speculative decoding (engine.c), where every token
 * of a draft is a column of its own, computed bit for bit as it would be
 * decoded alone. item_logits: NULL, or [n][n_vocab] for every item's
 * logits. A pipeline's first stage refuses repeats (CLLM_ERR_UNSUPPORTED).
 */
cllm_status cllm_session_decode_items(cllm_session *s, const cllm_seq_tokens *items, int n,
                                      float *item_logits);
/* The items cllm_session_decode_items takes at most: n_seq +
 * CLLM_SPEC_MAX_DRAFT, at most CLLM_MAX_SEQS. */
int cllm_session_max_items(const cllm_session *s);

/* Whether s was made with embeddings (cllm_session_params.embeddings) and
 * computes them (not a stage of a pipeline): cllm_session_seq_embed can run. */
bool cllm_session_has_embeddings(const cllm_session *s);

/* For tests: the graphs s has built and planned so far (a graph run again
 * for a batch of the same shape is not counted). */
uint64_t cllm_session_graph_builds(const cllm_session *s);

/* For tests: with reuse off, every batch builds and plans its graph anew
 * (the reference that reuse must match bit for bit); on by default. */
void cllm_session_set_graph_reuse(cllm_session *s, bool reuse);

/* ---- a stage of a pipeline over several hosts (src/pipeline/) -----------
 *
 * A session of a model loaded with some of its layers (cllm_model_load_placed)
 * computes only those. The first stage (which holds the token embeddings)
 * decodes with the ordinary API, every sequence of it: each batch's
 * activations go to the next stage through its link, and the logits of the
 * batches that keep them come back through it. The later stages run their
 * part with cllm_session_stage_run. The session knows nothing of the
 * transport: the link is a few functions and their user data.
 *
 * A linked session decodes one sequence per batch. cllm_session_decode
 * sends its prompt's batches one after the other and waits once for the
 * logits of the last; cllm_session_decode_seqs sends each item as a batch
 * of its own (its sequence, its tokens) and then waits once for all their
 * logits, so that the stages work on different sequences at the same
 * time. Truncation needs no message: every batch carries its sequence's
 * position, and a later stage goes back to it (cllm_session_stage_run). */

typedef struct cllm_session_link {
    void *ud;
    /* Sends the activations of a batch of sequence `seq`, act [n][n_embd]
     * f32, of n tokens at n_past with n_outputs logit rows; act is only
     * valid during the call. `logits`: NULL, or where the logits of this
     * batch go, [n_outputs][n_vocab]: they are there once `wait` returns
     * CLLM_OK (the buffer stays valid until then). */
    cllm_status (*send)(void *ud, int seq, int64_t n_past, int64_t n, int64_t n_outputs,
                        const float *act, float *logits);
    /* Waits for the logits of every batch sent with a buffer since the last
     * wait. The session calls it once after the sends of a decode, also
     * when a send failed (the link gives up what is still posted). */
    cllm_status (*wait)(void *ud);
} cllm_session_link;

/* Sets the link of a first stage (copied); NULL removes it. */
void cllm_session_set_link(cllm_session *s, const cllm_session_link *link);

/*
 * A later stage: runs its layers for sequence `seq` on the activations of a
 * batch, act_in [n][n_embd] f32, of n tokens at n_past (the first stage's
 * position of that sequence; the session's own follows it: a batch before
 * it is a truncation, checked as cllm_session_seq_truncate), with
 * n_outputs logit rows. out receives the activations to send on
 * ([n][n_embd]), or, at the last stage, the logits [n_outputs][n_vocab].
 * CLLM_ERR_INVALID_ARG for a sequence, position or size outside the
 * session's.
 */
cllm_status cllm_session_stage_run(cllm_session *s, int seq, int64_t n_past, int64_t n,
                                   int64_t n_outputs, const float *act_in, float *out);

/* Whether the session's model holds the last layer (computes logits). */
bool cllm_session_is_last_stage(const cllm_session *s);

#endif /* CLLM_RUNTIME_SESSION_H */
