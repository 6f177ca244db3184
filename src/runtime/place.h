/*
 * Placement and static memory: the one path by which the fit planner
 * predicts memory and the model and its sessions allocate it.
 *
 *   placement  which device holds each layer (its weights and KV cache) and
 *              the output layer; the input layer stays on the CPU, and the
 *              CPU is the last device (cllm_placement_cpu()).
 *   shape      a session's context, batch, KV type, logit rows and threads,
 *              resolved (defaults applied) and checked once.
 *   layout     static tensors laid out per device in creation order, each
 *              aligned for its device's buffer type: the same function
 *              sizes measure buffers (plans) and fills real ones (loading).
 *
 * The KV cache, backends and scheduler of one shape under a placement are
 * an instance (runtime/instance.h).
 *
 *     cllm_placement pl;
 *     st = cllm_placement_init_cpu(&pl, hp.n_layer);            // or from a plan
 *     size_t wbytes[CLLM_PLACE_MAX_DEVICES];
 *     cllm_place_weights(&pl, w, wbytes, NULL);                  // sizes only
 *     ... buffers of wbytes[d] (measure or real) ...
 *     cllm_place_weights(&pl, w, wbytes, bufs);                  // placed
 *     cllm_shape sh;
 *     st = cllm_shape_resolve(&hp, &(cllm_shape_params){.n_ctx = 2048}, "session", &sh);
 *     cllm_placement_free(&pl);
 */
#ifndef CLLM_RUNTIME_PLACE_H
#define CLLM_RUNTIME_PLACE_H

#include "backend/backend.h"
#include "model/arch.h"
#include "sched/sched.h"

#define CLLM_PLACE_MAX_DEVICES CLLM_SCHED_MAX_BACKENDS

/* A layer (or the output layer) held by another host of a pipeline
 * (include/cllm-pipeline.h): its weights and KV cache are not placed here. */
enum { CLLM_PLACE_NONE = -1 };

typedef struct cllm_placement {
    int n_devices; /* the CPU is the last */
    cllm_device *devices[CLLM_PLACE_MAX_DEVICES];
    int n_layer;
    int *layer_device; /* [n_layer]: index into devices, or CLLM_PLACE_NONE */
    int output_device; /* or CLLM_PLACE_NONE */
    /* a stage of a pipeline after the first: the token embeddings are on
     * another host (kept here all the same when the output is tied to them
     * and output_device is not CLLM_PLACE_NONE) */
    bool no_input;
    /* [n_layer], or NULL when none: layers whose weights are not laid out
     * with their device's weights but read per pass into a ring of slots
     * (runtime/stream.h); their KV cache stays on their device (the CPU) */
    unsigned char *streamed;
    /* [n_keep], or NULL when none: per weight of the model (creation order),
     * 1 for a weight of a streamed layer that stays resident all the same
     * (laid out with the CPU's weights): the layer streams only the rest of
     * its weights. A streamed layer keeps at least one weight streamed. */
    unsigned char *keep;
    int n_keep;
} cllm_placement;

/* Keeps only layers [begin, end) here (a stage of a pipeline): the other
 * layers become CLLM_PLACE_NONE, the output layer too unless end is the
 * last, and the token embeddings unless begin is 0. */
void cllm_placement_restrict(cllm_placement *pl, int begin, int end);

/* The layers held here: [*begin, *end), contiguous (0, n_layer without a
 * restriction). */
void cllm_placement_layer_range(const cllm_placement *pl, int *begin, int *end);

/* Every device of the registry, the CPU last (the only place that decides
 * the order), with every layer on the CPU. CLLM_ERR_BACKEND without a CPU. */
cllm_status cllm_placement_init_devices(cllm_placement *pl, int n_layer);
/* The CPU alone, every layer on it. */
cllm_status cllm_placement_init_cpu(cllm_placement *pl, int n_layer);
/* A deep copy of src into dst (dst uninitialised). */
cllm_status cllm_placement_copy(cllm_placement *dst, const cllm_placement *src);
void cllm_placement_free(cllm_placement *pl);

static inline int cllm_placement_cpu(const cllm_placement *pl) { return pl->n_devices - 1; }

/* Marks layers [first, first + n) streamed (allocating pl->streamed on first
 * use; n = 0 clears every mark). CLLM_ERR_NOMEM. */
cllm_status cllm_placement_set_streamed(cllm_placement *pl, int first, int n);
/* Whether the i-th weight of w is streamed: it belongs to a streamed layer
 * and is not one that layer keeps resident (pl->keep). */
bool cllm_placement_weight_streamed(const cllm_placement *pl, const cllm_weights *w, int i);
/* Keeps weight i of w resident (keep true) or streams it with its layer;
 * allocates pl->keep (every weight of w) on first use. CLLM_ERR_NOMEM. */
cllm_status cllm_placement_set_kept(cllm_placement *pl, const cllm_weights *w, int i, bool keep);
/* Clears every kept weight (pl->keep stays allocated). */
void cllm_placement_clear_kept(cllm_placement *pl);
/* Whether layer l is streamed and keeps some of its weights resident. */
bool cllm_placement_layer_partial(const cllm_placement *pl, const cllm_weights *w, int l);
int cllm_placement_n_streamed(const cllm_placement *pl);

/* The device index of the i-th weight of w (creation order), from the layer
 * the architecture recorded for it; CLLM_PLACE_NONE when another host of a
 * pipeline holds it. */
int cllm_placement_weight_device(const cllm_placement *pl, const cllm_weights *w, int i);

/* The buffer type static tensors use on device d. */
cllm_buffer_type *cllm_placement_buft(const cllm_placement *pl, int d);

/*
 * Lays the weights of w out per device: bytes[d] (CLLM_PLACE_MAX_DEVICES
 * entries) receives device d's size. With `bufs`, each tensor is also placed
 * in bufs[d] (measure-mode or real buffers of at least bytes[d]); devices
 * whose bufs[d] is NULL are skipped (e.g. the CPU when the file is mapped).
 * Weights of streamed layers are left out (cllm_stream_place places them).
 * A device whose buffer type limits one allocation gets each tensor within
 * one piece (cllm_buffer_type_place_offset; the padding is in bytes[d]);
 * CLLM_ERR_TOO_LARGE, with nothing placed, for a tensor larger than a piece.
 */
cllm_status cllm_place_weights(const cllm_placement *pl, const cllm_weights *w, size_t *bytes,
                               cllm_buffer *const *bufs);

/* The same for a KV cache's tensors (cllm_kv_cache_init, runtime/instance.h):
 * each layer's K and V on its layer's device, unless that device cannot
 * write or read a cache of their type (a quantized cache on a device
 * without those kernels): then on the CPU, where the scheduler runs the
 * writes and the attention of that layer (cllm_place_kv_device). */
cllm_status cllm_place_kv(const cllm_placement *pl, cllm_context *kv_ctx, size_t *bytes,
                          cllm_buffer *const *bufs);

/* The device of tensor i of a KV cache's context (K and V of layer l of
 * sequence s are tensors 2 (s n_layer + l) and one more): its layer's, or
 * the CPU's (above); CLLM_PLACE_NONE for a layer of another host. */
int cllm_place_kv_device(const cllm_placement *pl, const cllm_tensor *t, int i);

/* CPU weights of a mapped file: its whole data section. */
size_t cllm_place_mapped_bytes(const cllm_gguf *g);

/* The span of the file's data section that holds the weights placed on
 * this host (any device), [*off, *off + *size) relative to the data offset: what a stage of a
 * pipeline maps (0, 0 when it has none). */
void cllm_place_mapped_span(const cllm_placement *pl, const cllm_weights *w, const cllm_gguf *g,
                            uint64_t *off, uint64_t *size);

/* ---- the shape of a session -------------------------------------------- */

typedef struct cllm_shape_params {
    int64_t n_ctx;            /* 0: min(trained context, 4096) */
    int64_t n_batch;          /* 0: 512; at most n_ctx */
    cllm_type type_k, type_v; /* F16 (0 is F32: callers pass them explicitly) */
    bool all_logits;          /* logits of every batch row, not only the last */
    int n_threads;            /* CPU threads; 0: one per physical core */
    int n_seq;                /* sequences, each with a KV cache of n_ctx; 0: 1 */
    bool embeddings;          /* batches may output the hidden state of every row */
} cllm_shape_params;

typedef struct cllm_shape {
    int64_t n_ctx, n_batch; /* n_ctx per sequence; n_batch tokens of all of them */
    int64_t n_outputs;      /* logit rows of the largest batch: n_seq, or n_batch */
    cllm_type type_k, type_v;
    int n_threads;   /* resolved, >= 1 */
    int n_seq;       /* 1 .. CLLM_MAX_SEQS, at most n_batch */
    bool embeddings; /* batches may output the hidden state of every row */
} cllm_shape;

/* Whether t is a KV cache type (F16, F32, BF16, Q8_0, Q4_0). */
bool cllm_kv_type_supported(cllm_type t);

/*
 * Applies the defaults and checks the ranges (context 1..2^24 and within the
 * trained positions of a learned-position model, batch >= 1, KV F16 or F32,
 * threads 0..1024; more threads than the CPU runs at once (its device's
 * n_threads_max, cllm_device_get_props) are lowered to it with
 * a warning). CLLM_ERR_INVALID_ARG with a message that starts with `who`;
 * *out untouched on failure.
 */
cllm_status cllm_shape_resolve(const cllm_hparams *hp, const cllm_shape_params *p, const char *who,
                               cllm_shape *out);

/* Whether a session of shape `sh` fits in memory planned for `plan`;
 * otherwise CLLM_ERR_TOO_LARGE naming what exceeds what. */
cllm_status cllm_shape_check_within(const cllm_shape *sh, const cllm_shape *plan, const char *who);

/* The items a batch of a session of shape sh may hold: its sequences, and
 * the tokens of speculative drafts as items of one token of their own
 * (n_seq + CLLM_SPEC_MAX_DRAFT, at most CLLM_MAX_SEQS). */
int cllm_shape_max_items(const cllm_shape *sh);

/* The worst-case batches the compute memory is planned for: a full batch at
 * a full context, and one token at a full context; with several sequences
 * also a full batch of all of them (one takes what the others leave), the
 * same with the one-token sequences first (a step that a prompt chunk
 * joins), and one token of each, every one at a full context; with
 * embeddings, a full batch at a full context that outputs the hidden state
 * of every row; and the pass that verifies speculative drafts: as many
 * one-token items as a batch holds (cllm_shape_max_items, at most n_batch),
 * every one at a full context. Returns how many. */
enum { CLLM_SHAPE_N_WORST = 7 };
int cllm_shape_worst(const cllm_shape *sh, cllm_batch_shape out[CLLM_SHAPE_N_WORST]);

#endif /* CLLM_RUNTIME_PLACE_H */
