/*
 * Static tensors (weights, KV cache): every tensor of a context laid out one
 * after another in one buffer, each at an aligned offset, all alive for the
 * buffer's lifetime. Same two steps as the graph planner: measure (no memory
 * touched) and alloc (a buffer of exactly the measured size).
 *
 *     size_t bytes = cllm_layout_measure(ctx, buft);           // no allocation
 *     cllm_buffer *buf;
 *     st = cllm_layout_alloc(ctx, buft, CLLM_MEM_WEIGHTS, &buf); // exactly `bytes`
 *     ... cllm_tensor_set(...) ...
 *     cllm_buffer_free(buf);   // tensors of ctx then dangle: free ctx too
 */
#ifndef CLLM_ALLOC_LAYOUT_H
#define CLLM_ALLOC_LAYOUT_H

#include "backend/backend.h"

/*
 * Bytes needed to place every unplaced, non-view tensor of ctx in one buffer
 * of `buft`, in creation order, each aligned to the buffer type's alignment
 * and within one piece where the buffer is larger than the type's max_size
 * (cllm_buffer_type_place_offset). Touches no memory and changes no tensor.
 */
size_t cllm_layout_measure(cllm_context *ctx, cllm_buffer_type *buft);

/*
 * Allocates one buffer of exactly cllm_layout_measure() bytes holding memory
 * of `kind`, places every unplaced non-view tensor in it and points views at
 * their sources. CLLM_ERR_TOO_LARGE for a tensor larger than one piece of
 * the type (cllm_buffer_type_piece_size). On failure nothing is placed and
 * *out is untouched.
 */
cllm_status cllm_layout_alloc(cllm_context *ctx, cllm_buffer_type *buft, cllm_mem_kind kind,
                              cllm_buffer **out);

/* As cllm_layout_alloc, into a measure-mode buffer: tensors get pointers into
 * a region that does not exist; no device memory is allocated. */
cllm_status cllm_layout_measure_place(cllm_context *ctx, cllm_buffer_type *buft, cllm_buffer **out);

#endif /* CLLM_ALLOC_LAYOUT_H */
