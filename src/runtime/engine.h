/*
 * The batch engine: requests over a session of n_seq sequences, one forward
 * pass per step for every busy sequence. The API (cllm_engine, its requests
 * and events) is public: cllm.h. This header adds what the library's own
 * generation loop (cllm_generate, generate.c) needs.
 */
#ifndef CLLM_RUNTIME_ENGINE_H
#define CLLM_RUNTIME_ENGINE_H

#include "core/common.h"

/*
 * cllm_generate's request: as cllm_engine_submit, but it continues what
 * sequence 0 holds (nothing is truncated, nothing reused) and samples with
 * `smp`, which stays the caller's (its state goes on; the engine neither
 * resets nor frees it); params->sampling is not used. The request waits
 * while sequence 0 is busy. The caller checks that the prompt fits the
 * room left in the context.
 */
cllm_status cllm_engine_submit_append(cllm_engine *e, const int32_t *prompt, size_t n_prompt,
                                      const cllm_request_params *params, cllm_sampler *smp,
                                      void *user_data, uint64_t *id);

#endif /* CLLM_RUNTIME_ENGINE_H */
