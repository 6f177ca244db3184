/* What the plan (pipeline.c) and the transport (pipeline-mpi.c) of a
 * pipeline across hosts share: the split of the layers and the sizes of the
 * buffers the ranks exchange through, one function each, so that the bytes
 * planned are the bytes allocated. */
#ifndef CLLM_PIPELINE_PIPELINE_IMPL_H
#define CLLM_PIPELINE_PIPELINE_IMPL_H

#include "cllm-pipeline.h"

/* A batch message: a header of 8 int64 (op, n_past, n_tokens, n_outputs,
 * want logits, reserved x 3), then n_tokens rows of n_embd f32. */
enum { CLLM_PIPE_HEADER_BYTES = 8 * 8 };

/* Rank r's layers of n_layer over n_ranks: [*begin, *end). */
void cllm_pipe_split(int n_layer, int n_ranks, int r, int *begin, int *end);

/* The largest batch message (a full batch). */
size_t cllm_pipe_msg_bytes(const cllm_pipe_plan *plan);

/* Rank r's exchange buffers: a message received (r > 0), two in flight to
 * the next rank (all but the last), the logits row sent back (the last). */
size_t cllm_pipe_exchange_bytes(const cllm_pipe_plan *plan, int r);

#endif /* CLLM_PIPELINE_PIPELINE_IMPL_H */
