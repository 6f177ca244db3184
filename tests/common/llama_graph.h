/*
 * A llama-shaped forward graph for tests and benchmarks: the weights and KV
 * cache of a model of any shape (static tensors, in measure mode for large
 * shapes: no memory even for 7B), and the graph of one forward pass over
 * n_tokens new tokens with n_kv tokens in the cache (those already there
 * plus the new ones).
 *
 *     llama_graph_params p = llama_graph_params_default();
 *     p.n_embd = 2048, ...;
 *     llama_model_fixture m;
 *     st = llama_model_init(&m, &p, true);          // true: measure mode
 *     llama_graph lg;
 *     st = llama_graph_build(&lg, &m, 512, 512);      // n_tokens, n_kv
 *     ... plan lg.graph (alloc/galloc.h) ...
 *     llama_graph_free(&lg);
 *     llama_model_free(&m);
 *
 * Per layer (x: [n_embd, n_tokens]):
 *   cur = rms_norm(x) * attn_norm
 *   q, k, v = wq cur, wk cur, wv cur; q, k = rope(q), rope(k)   (NORMAL)
 *   k and v are copied into the cache at positions n_kv - n_tokens ...
 *   attn = softmax(q k^T / sqrt(head_dim) + mask) v over the n_kv cached
 *          entries: fused (cllm_attn) or mul_mat, soft_max, mul_mat
 *   x = wo attn + x
 *   cur = rms_norm(x) * ffn_norm
 *   x = w_down (silu(w_gate cur) * (w_up cur)) + x
 * then logits = output (rms_norm(x) * output_norm) for the last token only.
 * Inputs: tokens (i32 [n_tokens]), positions (i32 [n_tokens]), mask (f32
 * [n_kv, n_tokens]). The caches are F16 [n_embd_kv, n_ctx] (position-major),
 * except V for unfused attention: [n_ctx, n_embd_kv] (transposed, so that
 * the scores multiply it with contiguous rows).
 */
#ifndef CLLM_TESTS_LLAMA_GRAPH_H
#define CLLM_TESTS_LLAMA_GRAPH_H

#include "backend/backend.h"

typedef struct llama_graph_params {
    int64_t n_embd, n_head, n_head_kv, n_ff, n_layer, n_vocab, n_ctx;
    cllm_type wtype;  /* matrices (norms are F32) */
    cllm_type kvtype; /* the KV cache (F16) */
    bool fused_attn;  /* cllm_attn, or mul_mat + soft_max + mul_mat */
    float rms_eps, rope_base;
} llama_graph_params;

/* TinyLlama-1.1B's shape with F16 weights, context 2048, fused attention. */
llama_graph_params llama_graph_params_default(void);

typedef struct llama_layer {
    cllm_tensor *attn_norm, *wq, *wk, *wv, *wo;
    cllm_tensor *ffn_norm, *w_gate, *w_up, *w_down;
    cllm_tensor *k_cache, *v_cache; /* state */
} llama_layer;

typedef struct llama_model_fixture {
    llama_graph_params p;
    cllm_context *wctx; /* weights */
    cllm_context *sctx; /* KV cache */
    cllm_buffer *wbuf;  /* weights buffer (measure mode or CLLM_MEM_WEIGHTS) */
    cllm_buffer *sbuf;  /* state buffer (measure mode or CLLM_MEM_STATE) */
    cllm_tensor *tok_embd, *output_norm, *output;
    llama_layer *layers; /* [n_layer] */
} llama_model_fixture;

/*
 * Creates the weights and cache of shape p on the CPU buffer type: in
 * measure mode (no memory) or in real buffers (for compute tests; contents
 * undefined). On failure everything is released and *m is zeroed.
 */
cllm_status llama_model_init(llama_model_fixture *m, const llama_graph_params *p, bool measure);
void llama_model_free(llama_model_fixture *m);

typedef struct llama_graph {
    cllm_context *ctx;
    cllm_graph *graph;
    cllm_tensor *tokens, *pos, *mask; /* inputs */
    cllm_tensor *logits;              /* output: [n_vocab, 1] */
    int64_t n_tokens, n_kv;
} llama_graph;

/*
 * Builds the forward graph for n_tokens new tokens with n_kv entries of the
 * cache attended to (n_tokens <= n_kv <= n_ctx). Graph tensors have no data.
 * CLLM_ERR_INVALID_ARG for bad counts, CLLM_ERR_NOMEM on host OOM.
 */
cllm_status llama_graph_build(llama_graph *lg, llama_model_fixture *m, int64_t n_tokens,
                              int64_t n_kv);
void llama_graph_free(llama_graph *lg);

#endif /* CLLM_TESTS_LLAMA_GRAPH_H */
