/*
 * Model architectures: hyper-parameters from GGUF metadata, the weight
 * tensors each architecture needs (with their shapes), and a graph builder.
 * One file per architecture (llama.c, gpt2.c); adding one touches only its
 * own file and the table in arch.c.
 *
 *     const cllm_arch *arch = cllm_arch_find("llama");
 *     cllm_hparams hp;
 *     st = arch->load_hparams(gguf, &hp);
 *     cllm_weights *w;
 *     st = cllm_weights_new(gguf, arch, &hp, &w);    // metadata only: no data read
 *     ... place w->ctx's tensors (mmap or a buffer) ...
 *     cllm_graph_io io;
 *     cllm_tensor *logits = arch->build(&(cllm_build_args){...}, &io);
 *
 * A weights object ("weights tree") exists without any model or session
 * around it; sessions reference it and own only their state and compute.
 */
#ifndef CLLM_MODEL_ARCH_H
#define CLLM_MODEL_ARCH_H

#include "core/tensor.h"
#include "gguf/gguf.h"

#define CLLM_MAX_LAYERS 512

typedef struct cllm_hparams {
    char arch[32];
    int64_t n_vocab;
    int64_t n_ctx_train;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim_k; /* per-head size of q and k */
    int64_t head_dim_v; /* per-head size of v */
    int64_t n_ff;
    float norm_eps; /* rms_norm (llama) or layer norm (gpt2) epsilon */
    /* rotary embedding (n_rot == 0: none) */
    int n_rot;
    int rope_mode; /* CLLM_ROPE_NORMAL or CLLM_ROPE_NEOX */
    float rope_freq_base;
    float rope_freq_scale;    /* 1 / linear scaling factor */
    int64_t n_ctx_orig;       /* rope.scaling.original_context_length (else n_ctx_train) */
    cllm_rope_yarn rope_yarn; /* YaRN (ext_factor 1) and the magnitude factor of cos/sin */
    bool learned_pos;         /* absolute position embeddings (gpt2): n_ctx <= n_ctx_train */
    /* sliding-window attention (gemma3): n_swa == 0: none. Layer l attends
     * to the last n_swa positions only when swa_layer[l]; those layers rotate
     * with rope_freq_base_swa, the others with rope_freq_base. */
    int64_t n_swa;
    float rope_freq_base_swa;
    bool swa_layer[CLLM_MAX_LAYERS];
    float attn_scale; /* 0: 1 / sqrt(head_dim_k) */
} cllm_hparams;

/* K and V rows per token for all KV heads of one layer. */
static inline int64_t cllm_hparams_n_embd_k_gqa(const cllm_hparams *hp) {
    return hp->head_dim_k * hp->n_head_kv;
}
static inline int64_t cllm_hparams_n_embd_v_gqa(const cllm_hparams *hp) {
    return hp->head_dim_v * hp->n_head_kv;
}

/* Weight slots of one block; an architecture uses the ones it needs. The
 * matrices (wq .. wo, ffn_gate, ffn_up, ffn_down) are read only as the
 * matrix of a mul_mat, never through a view, and so is the output when it
 * is not the token embeddings: cllm_weights_new flags them
 * CLLM_TENSOR_FLAG_MATMUL_ONLY (a device may store them its own way). */
typedef struct cllm_layer_weights {
    cllm_tensor *attn_norm, *attn_norm_b;
    cllm_tensor *wq, *wk, *wv, *wqkv, *wo;
    cllm_tensor *bq, *bk, *bv, *bqkv, *bo;
    cllm_tensor *ffn_norm, *ffn_norm_b;
    cllm_tensor *ffn_gate, *ffn_up, *ffn_down;
    cllm_tensor *ffn_up_b, *ffn_down_b;
    cllm_tensor *attn_q_norm, *attn_k_norm;      /* per-head RMS norms of q and k (qwen3, gemma3) */
    cllm_tensor *attn_post_norm, *ffn_post_norm; /* norms of the blocks' outputs (gemma3) */
} cllm_layer_weights;

/* The part of the model a weight belongs to: a layer index (0 .. n_layer-1)
 * or one of these. Recorded by the architecture when it creates the weight;
 * the placement puts the input group on the CPU. */
enum { CLLM_WEIGHT_INPUT = -1, CLLM_WEIGHT_OUTPUT = -2, CLLM_WEIGHT_SHARED = -3 };
/* CLLM_WEIGHT_SHARED: read by every layer (rope frequency factors); kept
 * wherever any layer is, e.g. by every stage of a pipeline (include/cllm-pipeline.h). */

typedef struct cllm_weights {
    cllm_context *ctx; /* weight tensors (metadata only) */
    int *group;        /* per tensor of ctx (creation order): layer or CLLM_WEIGHT_* */
    int cur_group;     /* the group of the weights created next */
    cllm_tensor *tok_embd, *pos_embd;
    cllm_tensor *output_norm, *output_norm_b;
    cllm_tensor *output;     /* == tok_embd when the output is tied */
    cllm_tensor *rope_freqs; /* optional frequency factors (llama-3 rope scaling) */
    /* optional LongRoPE factors (phi3): long for a context past n_ctx_orig */
    cllm_tensor *rope_long, *rope_short;
    int n_layer;
    cllm_layer_weights *layers; /* n_layer */
} cllm_weights;

/* Sequences of one session at most: each has a KV cache of its own, and a
 * batch may hold tokens of several (each at its own positions). */
#define CLLM_MAX_SEQS 64

/*
 * The KV cache of one session: per sequence and layer K and V rows,
 * [n_embd_gqa, rows]; sequence s, layer l at k[s * n_layer + l].
 *
 * A layer that attends to the whole context has n_ctx rows, position p in
 * row p. A sliding-window layer (hp->n_swa > 0) has n_ring rows, a ring:
 * position p in row p % n_ring. A batch of n <= n_batch tokens ending at
 * position `end` (exclusive) needs, for its first token, the n_swa - 1
 * positions before it, so n_swa + n_batch - 1 rows hold all it can see
 * (cllm_kv_ring_rows); the mask tells each row's position (cllm_fill_swa_row).
 */
typedef struct cllm_kv_cache {
    cllm_context *ctx;
    cllm_type type_k, type_v; /* F16 by default; F32, BF16, Q8_0 or Q4_0 */
    int64_t n_ctx;            /* per sequence */
    int64_t n_ring;           /* rows of a sliding-window layer's cache (n_ctx: no ring) */
    int n_layer;
    int n_seq;
    cllm_tensor **k; /* n_seq * n_layer */
    cllm_tensor **v; /* n_seq * n_layer */
} cllm_kv_cache;

/* Rows of a sliding-window layer's cache for a context of n_ctx positions
 * decoded at most n_batch at a time: n_swa + n_batch - 1, or n_ctx when that
 * is no more (every position has its own row then). n_ctx without a window. */
static inline int64_t cllm_kv_ring_rows(const cllm_hparams *hp, int64_t n_ctx, int64_t n_batch) {
    if (hp->n_swa <= 0) return n_ctx;
    const int64_t ring = hp->n_swa + n_batch - 1;
    return ring < n_ctx ? ring : n_ctx;
}

/* Whether writing n rows at position n_past wraps around the end of a
 * sliding-window layer's ring (two copies instead of one). */
static inline bool cllm_kv_write_wraps(const cllm_kv_cache *kv, int64_t n_past, int64_t n) {
    return kv->n_ring < kv->n_ctx && n_past % kv->n_ring + n > kv->n_ring;
}

/* One sequence's part of a batch of several. */
typedef struct cllm_seq_shape {
    int seq;          /* its KV cache: 0 .. n_seq - 1 */
    int64_t n_tokens; /* its tokens: the next n_tokens rows of the batch */
    int64_t n_past;   /* its tokens already in its cache (write position) */
    int64_t n_kv;     /* its cache rows attended to: >= n_past + n_tokens */
} cllm_seq_shape;

/* What a forward pass needs to know about the batch. */
typedef struct cllm_batch_shape {
    int64_t n_tokens;  /* new tokens in this batch */
    int64_t n_past;    /* tokens already in the cache (write position) */
    int64_t n_kv;      /* cache entries attended to: >= n_past + n_tokens */
    int64_t n_outputs; /* rows that need logits (1..n_tokens) */
    /* the outputs are the hidden states after the output norm (what comes
     * into the output head, "embeddings"), f32 [n_embd, n_outputs], in
     * io->logits instead of the logits */
    bool embd;
    /* 0: the batch is sequence 0's, as the fields above say. Else the
     * tokens of n_seqs sequences (distinct), seqs[0]'s rows first; n_tokens
     * is their sum, n_past and n_kv are unused. */
    int n_seqs;
    cllm_seq_shape seqs[CLLM_MAX_SEQS];
} cllm_batch_shape;

/* Sequence i of the batch (i < max(n_seqs, 1)). */
static inline cllm_seq_shape cllm_batch_seq(const cllm_batch_shape *b, int i) {
    if (b->n_seqs == 0) {
        return (cllm_seq_shape){
            .seq = 0, .n_tokens = b->n_tokens, .n_past = b->n_past, .n_kv = b->n_kv};
    }
    return b->seqs[i];
}

/* The graph's inputs (set by the caller before compute) and its output. */
typedef struct cllm_graph_io {
    cllm_tensor *tokens;  /* i32 [n_tokens] */
    cllm_tensor *pos;     /* i32 [n_tokens] */
    cllm_tensor *mask;    /* f32 [n_kv, n_tokens]: 0 or -INFINITY (one sequence) */
    cllm_tensor *out_ids; /* i32 [n_outputs]: batch rows that get logits */
    cllm_tensor *logits;  /* f32 [n_vocab, n_outputs] */
    /* several sequences: sequence i's mask, f32 [its n_kv, its n_tokens]
     * (mask is then NULL) */
    cllm_tensor *seq_mask[CLLM_MAX_SEQS];
    /* sliding-window layers (hp->n_swa > 0), as mask and seq_mask, but
     * entry j is also hidden from the token at position p when
     * p - j >= n_swa (cllm_fill_swa_mask); NULL without a window */
    cllm_tensor *swa_mask;
    cllm_tensor *seq_swa_mask[CLLM_MAX_SEQS];
    /* a stage of a pipeline (cllm_build_args.layer_begin/end): the
     * activations received, f32 [n_embd, n_tokens] (tokens is then NULL),
     * and those to send on, f32 [n_embd, n_tokens] (logits and out_ids are
     * then NULL) */
    cllm_tensor *act_in, *act_out;
} cllm_graph_io;

typedef struct cllm_build_args {
    const cllm_hparams *hp;
    const cllm_weights *w;
    const cllm_kv_cache *kv;
    cllm_batch_shape shape;
    bool unfused_attn; /* reference path: mul_mat + soft_max + mul_mat */
    cllm_context *ctx; /* for the graph's tensors (metadata) */
    cllm_graph *graph; /* nodes are added to it (KV writes first) */
    /* (optional) [max(shape.n_seqs, 1)][n_layer][CLLM_KV_WRITES_PER_LAYER]:
     * receives, per item of the batch and layer, the tensors that place its
     * K and V rows in its cache, so that a graph can be run again at other
     * positions (cllm_kv_writes_move) */
    cllm_tensor **kv_writes;
    /* (optional) the layers of this graph, [layer_begin, layer_end); 0, 0:
     * all. A graph from layer_begin > 0 starts from the activations of
     * io->act_in, one that ends before the last layer returns io->act_out
     * (a stage of a pipeline over several hosts, include/cllm-pipeline.h). */
    int layer_begin, layer_end;
} cllm_build_args;

typedef struct cllm_arch {
    const char *name; /* general.architecture */
    /* Reads the hyper-parameters; a missing key is CLLM_ERR_FORMAT naming it. */
    cllm_status (*load_hparams)(const cllm_gguf *g, cllm_hparams *hp);
    /* Creates the weight tensors in w->ctx and fills the slots of w. */
    cllm_status (*create_weights)(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp);
    /* Builds the forward graph of one batch into args->graph; returns logits. */
    cllm_tensor *(*build)(const cllm_build_args *args, cllm_graph_io *io);
    /* Upper bound on the tensors (and graph nodes) one forward pass creates. */
    int (*graph_size)(const cllm_hparams *hp);
    /* build honours cllm_build_args.layer_begin/layer_end */
    bool layer_ranges;
} cllm_arch;

/* The architecture named `name`, or NULL. */
const cllm_arch *cllm_arch_find(const char *name);

/* The names of the architectures, ", "-separated, into buf (truncated to
 * size); returns buf. For error messages. */
const char *cllm_arch_names(char *buf, size_t size);

/* ---- helpers shared by the architectures (arch.c) ---------------------- */

/* The hyper-parameters of the llama family (llama, qwen2, qwen3, phi3, and
 * gemma3's common part) under the key prefix `a`: sizes, heads and head
 * sizes, norm epsilon, rope dimensions, base and scaling by type (none,
 * linear, yarn, longrope). rope_mode is the architecture's (GGUF stores
 * llama's Q/K permuted for adjacent pairs, the others keep NeoX halves). */
cllm_status cllm_hp_llama_family(const cllm_gguf *g, const char *a, int rope_mode,
                                 cllm_hparams *hp);

/* Reads "<arch>.<suffix>" as an integer in [min, max] (CLLM_ERR_FORMAT names
 * the key when it is missing, has a wrong type or is out of range). */
cllm_status cllm_hp_get_int(const cllm_gguf *g, const char *arch, const char *suffix, int64_t min,
                            int64_t max, int64_t *out);
/* As cllm_hp_get_int, but keeps *out (the default) when the key is absent. */
cllm_status cllm_hp_get_int_opt(const cllm_gguf *g, const char *arch, const char *suffix,
                                int64_t min, int64_t max, int64_t *out);
cllm_status cllm_hp_get_f32(const cllm_gguf *g, const char *arch, const char *suffix, float *out);
cllm_status cllm_hp_get_f32_opt(const cllm_gguf *g, const char *arch, const char *suffix,
                                float *out);
/* n_vocab: the length of tokenizer.ggml.tokens (a non-empty string array,
 * else an error naming it), or <arch>.vocab_size when there is no list. */
cllm_status cllm_hp_get_vocab(const cllm_gguf *g, const char *arch, int64_t *out);

enum { CLLM_W_REQUIRED = 0, CLLM_W_OPTIONAL = 1 };

/*
 * Creates the weight tensor `name` (printf-style) in w->ctx with the file's
 * type, checking that the file has it with exactly the shape ne[0..n_dims),
 * a type the engine can compute with and data at a file offset aligned for
 * that type (mapped weights are read in place), in the current group
 * (cllm_weights_set_group). *out = NULL for a missing optional tensor. Errors
 * name the file, the tensor and the problem.
 */
cllm_status cllm_weights_tensor(cllm_weights *w, const cllm_gguf *g, int flags, cllm_tensor **out,
                                int n_dims, const int64_t *ne, const char *fmt, ...)
    CLLM_PRINTF(7, 8);

/* Weights created from now on belong to `group` (a layer, CLLM_WEIGHT_INPUT
 * or CLLM_WEIGHT_OUTPUT); the first ones are CLLM_WEIGHT_INPUT. */
static inline void cllm_weights_set_group(cllm_weights *w, int group) { w->cur_group = group; }

/* The group of the i-th weight (creation order). */
static inline int cllm_weights_group(const cllm_weights *w, int i) { return w->group[i]; }

/*
 * Creates the weights tree of the file for the hyper-parameters `hp` (no
 * tensor data is read). Besides each tensor's checks: token_embd.weight and
 * output.weight must have a row per token of the vocabulary, a tensor of a
 * layer past hp->n_layer ("blk.N.*") is an error, other tensors the
 * architecture does not use are a warning. On failure *out is untouched.
 */
cllm_status cllm_weights_new(const cllm_gguf *g, const cllm_arch *arch, const cllm_hparams *hp,
                             cllm_weights **out);
void cllm_weights_free(cllm_weights *w);

/* A causal mask for `shape`: mask[j, t] = 0 if cache entry j may be seen by
 * batch token t (j <= n_past + t), else -INFINITY. dst holds n_kv * n_tokens. */
void cllm_fill_causal_mask(float *dst, const cllm_batch_shape *shape);

/* One row of a mask over n_kv cache entries for the token at position pos:
 * 0 where entry j is seen (j <= pos and, with n_swa > 0, pos - j < n_swa),
 * else -INFINITY. n_swa == 0 gives the causal row. */
void cllm_fill_mask_row(float *dst, int64_t n_kv, int64_t pos, int64_t n_swa);

/* One row of a sliding-window layer's mask over the first n_kv rows of its
 * ring of n_ring rows, for the token at position pos of a batch whose last
 * position is end - 1 (its rows written): row j holds the last position
 * p < end with p % n_ring == j (none when p < 0), seen when p <= pos and
 * pos - p < n_swa. Rows the ring still holds from a longer context that was
 * truncated get a position out of every window (cllm_session_truncate keeps
 * that true). With n_ring >= end this is cllm_fill_mask_row. */
void cllm_fill_swa_row(float *dst, int64_t n_kv, int64_t n_ring, int64_t end, int64_t pos,
                       int64_t n_swa);

/*
 * Shared attention block: writes k and v of this batch into the layer's KV
 * cache (at n_past), then attends over the first n_kv cache entries.
 *   q: [head_dim_k, n_head, n_tokens]; k: [head_dim_k, n_head_kv, n_tokens];
 *   v: [head_dim_v, n_head_kv, n_tokens] (any strides).
 * Returns [head_dim_v * n_head, n_tokens].
 */
cllm_tensor *cllm_build_attention(const cllm_build_args *args, cllm_graph_io *io, int layer,
                                  cllm_tensor *q, cllm_tensor *k, cllm_tensor *v, float scale);

/* The output head: logits = output · x_normed ([n_vocab, n_outputs]),
 * flagged as the graph's output and added to args->graph. With
 * args->shape.embd, x_normed itself is the output ([n_embd, n_outputs]). */
cllm_tensor *cllm_build_logits(const cllm_build_args *args, cllm_graph_io *io, cllm_tensor *x);

/* The end of the graph's layer range (cllm_build_args.layer_end, or every
 * layer). */
static inline int cllm_build_layer_end(const cllm_build_args *args) {
    return args->layer_end > 0 ? args->layer_end : args->w->n_layer;
}

/* A graph of a later stage of a pipeline (layer_begin > 0): creates
 * io->act_in, f32 [n_embd, n_tokens], the graph's input, drops io->tokens,
 * and returns it; NULL for a graph from the first layer. */
cllm_tensor *cllm_build_stage_in(const cllm_build_args *args, cllm_graph_io *io);

/* The output of a stage that ends before the last layer: x, f32 [n_embd,
 * n_tokens], flagged as the graph's output (io->act_out); io->logits and
 * io->out_ids are NULL. */
cllm_tensor *cllm_build_stage_out(const cllm_build_args *args, cllm_graph_io *io, cllm_tensor *x);

/* Per layer: the view of the K rows written, the copy into it, then the
 * same two for V (cllm_build_attention records them in args->kv_writes). */
enum { CLLM_KV_WRITES_PER_LAYER = 4 };

/*
 * Points the KV cache writes of a built graph (`writes`, as recorded in
 * cllm_build_args.kv_writes for n_layer layers) at position n_past (row
 * n_past, or n_past % n_ring in a ring that it must not wrap), so that
 * the graph, planned once, writes its batch there when it runs again: the
 * writes are views of the static cache, whose place is their offset alone,
 * and the rest of the graph reads the cache through views that start at row
 * 0. The batch's rows must fit the cache (asserted).
 */
void cllm_kv_writes_move(cllm_tensor *const *writes, int n_layer, int64_t n_past);

/* Creates the graph inputs of io (tokens, pos, mask, out_ids) in args->ctx. */
void cllm_build_inputs(const cllm_build_args *args, cllm_graph_io *io);

#endif /* CLLM_MODEL_ARCH_H */
