/*
 * Speculative decoding: what the engine (engine.c) needs of a draft model
 * (cllm_draft, spec.c). The API is public: cllm.h.
 */
#ifndef CLLM_RUNTIME_SPEC_H
#define CLLM_RUNTIME_SPEC_H

#include "core/common.h"

/* CLLM_OK when draft d may draft for an engine of n_seq sequences on
 * `target`: the same vocabulary (checked at cllm_draft_new for its target;
 * another model is compared anew) and a sequence for each; otherwise
 * CLLM_ERR_INVALID_ARG saying why. */
cllm_status cllm_draft_fits(const cllm_draft *d, const cllm_model *target, int n_seq);

/*
 * The greedy draft of the draft model for sequence `seq`: hist[0, n) are the
 * ids the sequence holds and the token about to be decoded (its last). The
 * draft's sequence keeps its longest prefix in common with hist, decodes
 * the rest (rows before n_chunked in prompt chunks, the others one token
 * each, as the target computed them), then drafts up to `max` tokens into out (stopping after an
 * end-of-generation token or at the end of its context), decoding each but
 * the last. Returns their number (0 below `min`), or -1 when a decode
 * failed (its sequence is then emptied). *ms: the time it took.
 */
int cllm_draft_propose(cllm_draft *d, int seq, const int32_t *hist, size_t n, size_t n_chunked,
                       int max, int min, int32_t *out, double *ms);

#endif /* CLLM_RUNTIME_SPEC_H */
