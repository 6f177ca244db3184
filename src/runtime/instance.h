/*
 * An instance: the KV cache, the backends and the scheduler of one session
 * shape under one placement (runtime/place.h), with compute memory measured
 * from the worst-case graphs. In measure mode (the fit planner's probes) no
 * memory is touched; in alloc mode (sessions) every buffer has exactly the
 * measured size.
 *
 *     cllm_instance in;
 *     st = cllm_instance_init(&in, &(cllm_instance_args){..., .measure = true});
 *     ... in.bytes[d][kind] ...
 *     cllm_instance_free(&in);
 */
#ifndef CLLM_RUNTIME_INSTANCE_H
#define CLLM_RUNTIME_INSTANCE_H

#include "runtime/place.h"

/* ---- the KV cache ------------------------------------------------------ */

/* Creates the K and V tensors of every sequence and layer ([n_embd_gqa,
 * n_ctx] of the shape's KV type, named cache_k-L / cache_v-L, and
 * cache_k-L.S for sequence S >= 1; K then V per layer, sequence by
 * sequence) in a new context kv->ctx; nothing placed. */
cllm_status cllm_kv_cache_init(cllm_kv_cache *kv, const cllm_hparams *hp, const cllm_shape *sh);
void cllm_kv_cache_free(cllm_kv_cache *kv);

/* ---- an instance: state + compute of one shape under one placement ----- */

typedef struct cllm_instance_args {
    const cllm_arch *arch;
    const cllm_hparams *hp;
    const cllm_weights *w; /* placed (measure-mode or real buffers) */
    const cllm_placement *pl;
    cllm_shape shape;
    bool measure;         /* measure mode: no memory touched */
    bool unfused_attn;    /* reference attention (bigger compute) */
    bool f32_activations; /* matmul activations kept in F32 */
    /* (optional) backends per device index, kept by the caller; the others
     * are created (and freed) by the instance */
    cllm_backend *const *backends;
} cllm_instance_args;

typedef struct cllm_instance {
    cllm_instance_args a;
    cllm_kv_cache kv;
    cllm_buffer *kv_buf[CLLM_PLACE_MAX_DEVICES]; /* CLLM_MEM_STATE, per device */
    int n_backends; /* devices that hold weights or state, and the CPU (last) */
    cllm_backend *backends[CLLM_PLACE_MAX_DEVICES];
    bool own_backend[CLLM_PLACE_MAX_DEVICES];
    int backend_device[CLLM_PLACE_MAX_DEVICES];
    cllm_sched *sched; /* owns the CLLM_MEM_COMPUTE buffers */
    cllm_context *gctx;
    cllm_graph *graph;
    /* [max(n_seq, 1)][n_layer][CLLM_KV_WRITES_PER_LAYER]: the KV writes of
     * the graph last built, per item of its batch (cllm_instance_set_write_pos) */
    cllm_tensor **kv_writes;
    /* items a batch may hold (graph and kv_writes are sized for them):
     * n_seq, and the tokens of a draft as items of one sequence
     * (cllm_session_decode_items), at most CLLM_MAX_SEQS */
    int max_items;
    /* per device: weights (of w under the placement), state, compute and
     * workspace bytes of this instance */
    size_t bytes[CLLM_PLACE_MAX_DEVICES][CLLM_MEM_COUNT];
} cllm_instance;

/*
 * Creates the KV cache (laid out per device), a backend per device that
 * holds weights or state (the CPU always), the scheduler, and measures the
 * worst-case graphs of the shape. In alloc mode it then allocates the state
 * and compute buffers, exactly the bytes measured. On failure nothing stays
 * allocated and *in is zeroed.
 */
cllm_status cllm_instance_init(cllm_instance *in, const cllm_instance_args *args);
void cllm_instance_free(cllm_instance *in);

/* Builds the forward graph of batch `b` into in->graph (in->gctx holds its
 * tensors); returns the logits tensor. */
cllm_tensor *cllm_instance_build(cllm_instance *in, const cllm_batch_shape *b, cllm_graph_io *io);

/* Moves the KV cache writes of the graph last built (alloc mode) to cache
 * row n_past: the graph then runs as one built for the same batch shape
 * with n_past there, without being built or planned again. For a batch of
 * several sequences, item `item`'s writes (into its own cache); else item
 * 0. */
void cllm_instance_set_write_pos(cllm_instance *in, int item, int64_t n_past);

#endif /* CLLM_RUNTIME_INSTANCE_H */
