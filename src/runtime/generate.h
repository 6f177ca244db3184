/*
 * The generation loop: decode a prompt, then sample, stream and decode one
 * token at a time until an end-of-generation token, n_predict tokens, a full
 * context, or the callback says stop. It is one request of the batch engine
 * (engine.c) over the caller's session and sampler: the library has one
 * generation loop. The API (cllm_generate, cllm_generate_result,
 * cllm_stop_reason) is public: cllm.h.
 */
#ifndef CLLM_RUNTIME_GENERATE_H
#define CLLM_RUNTIME_GENERATE_H

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

#endif /* CLLM_RUNTIME_GENERATE_H */
