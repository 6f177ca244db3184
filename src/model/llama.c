/*
 * llama: Llama 1/2/3, Mistral, TinyLlama, SmolLM/SmolLM2, the stories models.
 *
 * Per block (x: [n_embd, n_tokens]):
 *   h   = rms_norm(x) * attn_norm
 *   q,k = rope(Wq h), rope(Wk h)          (adjacent pairs rotated: mode NORMAL,
 *   v   = Wv h                             since GGUF stores llama's Q/K permuted)
 *   x   = x + Wo attention(q, k, v)        (GQA: n_head_kv <= n_head)
 *   h   = rms_norm(x) * ffn_norm
 *   x   = x + W_down (silu(W_gate h) * (W_up h))
 * then logits = output · (rms_norm(x) * output_norm), output tied to
 * token_embd when the file has no output.weight.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cllm_status llama_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    const char *a = "llama";
    cllm_hparams h = {0};
    snprintf(h.arch, sizeof(h.arch), "%s", a);
    CLLM_TRY(cllm_hp_get_vocab(g, a, &h.n_vocab));
    CLLM_TRY(cllm_hp_get_int(g, a, "context_length", 1, INT32_MAX, &h.n_ctx_train));
    CLLM_TRY(cllm_hp_get_int(g, a, "embedding_length", 1, 1 << 20, &h.n_embd));
    CLLM_TRY(cllm_hp_get_int(g, a, "block_count", 1, CLLM_MAX_LAYERS, &h.n_layer));
    CLLM_TRY(cllm_hp_get_int(g, a, "feed_forward_length", 1, 1 << 22, &h.n_ff));
    CLLM_TRY(cllm_hp_get_int(g, a, "attention.head_count", 1, 1 << 14, &h.n_head));
    h.n_head_kv = h.n_head;
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "attention.head_count_kv", 1, h.n_head, &h.n_head_kv));
    if (h.n_head % h.n_head_kv != 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %lld heads do not group into %lld KV heads",
                          cllm_gguf_name(g), (long long)h.n_head, (long long)h.n_head_kv);
    }
    /* the head size is n_embd / n_head unless the file gives it */
    if (cllm_gguf_find_key(g, "llama.attention.key_length") < 0 && h.n_embd % h.n_head != 0) {
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: llama.embedding_length %lld is not a multiple of "
                          "llama.attention.head_count %lld (and llama.attention.key_length, the "
                          "head size, is not set)",
                          cllm_gguf_name(g), (long long)h.n_embd, (long long)h.n_head);
    }
    h.head_dim_k = h.n_embd / h.n_head;
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "attention.key_length", 1, 1 << 14, &h.head_dim_k));
    h.head_dim_v = h.head_dim_k;
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "attention.value_length", 1, 1 << 14, &h.head_dim_v));
    if (h.head_dim_k == 0 || h.head_dim_v == 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: head size is zero", cllm_gguf_name(g));
    }
    CLLM_TRY(cllm_hp_get_f32(g, a, "attention.layer_norm_rms_epsilon", &h.norm_eps));
    int64_t n_rot = h.head_dim_k;
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "rope.dimension_count", 2, h.head_dim_k, &n_rot));
    if (n_rot % 2 != 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: llama.rope.dimension_count = %lld is odd",
                          cllm_gguf_name(g), (long long)n_rot);
    }
    h.n_rot = (int)n_rot;
    h.rope_mode = CLLM_ROPE_NORMAL;
    h.rope_freq_base = 10000.0f;
    h.rope_freq_scale = 1.0f;
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, "rope.freq_base", &h.rope_freq_base));
    const char *scaling = NULL;
    if (cllm_gguf_find_key(g, "llama.rope.scaling.type") >= 0) {
        CLLM_TRY(cllm_gguf_get_str(g, "llama.rope.scaling.type", &scaling));
    }
    if (scaling && strcmp(scaling, "linear") == 0) {
        float factor = 1.0f;
        CLLM_TRY(cllm_hp_get_f32_opt(g, a, "rope.scaling.factor", &factor));
        if (!(factor > 0.0f)) {
            return cllm_error(CLLM_ERR_FORMAT, "%s: llama.rope.scaling.factor must be positive",
                              cllm_gguf_name(g));
        }
        h.rope_freq_scale = 1.0f / factor;
    } else if (scaling && strcmp(scaling, "none") != 0) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: rope scaling \"%s\" is not supported",
                          cllm_gguf_name(g), scaling);
    }
    if (!(h.rope_freq_base > 0.0f) || !(h.norm_eps >= 0.0f)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: rope base or norm epsilon out of range",
                          cllm_gguf_name(g));
    }
    *hp = h;
    return CLLM_OK;
}

static cllm_status llama_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    const int64_t Q = hp->head_dim_k * hp->n_head, K = cllm_hparams_n_embd_k_gqa(hp);
    const int64_t KV = cllm_hparams_n_embd_v_gqa(hp), O = hp->head_dim_v * hp->n_head;
    const int R = CLLM_W_REQUIRED, OPT = CLLM_W_OPTIONAL;
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->tok_embd, 2, SHAPE(E, V), "token_embd.weight"));
    cllm_weights_set_group(w, CLLM_WEIGHT_OUTPUT);
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->output_norm, 1, SHAPE(E), "output_norm.weight"));
    CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->output, 2, SHAPE(E, V), "output.weight"));
    if (!w->output) w->output = w->tok_embd;       /* tied */
    cllm_weights_set_group(w, CLLM_WEIGHT_SHARED); /* read by every layer */
    CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->rope_freqs, 1, SHAPE(hp->n_rot / 2),
                                 "rope_freqs.weight"));
    for (int l = 0; l < w->n_layer; l++) {
        cllm_layer_weights *L = &w->layers[l];
        cllm_weights_set_group(w, l);
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->attn_norm, 1, SHAPE(E), "blk.%d.attn_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wq, 2, SHAPE(E, Q), "blk.%d.attn_q.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wk, 2, SHAPE(E, K), "blk.%d.attn_k.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wv, 2, SHAPE(E, KV), "blk.%d.attn_v.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->wo, 2, SHAPE(O, E), "blk.%d.attn_output.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->bq, 1, SHAPE(Q), "blk.%d.attn_q.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->bk, 1, SHAPE(K), "blk.%d.attn_k.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->bv, 1, SHAPE(KV), "blk.%d.attn_v.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->bo, 1, SHAPE(E), "blk.%d.attn_output.bias", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_norm, 1, SHAPE(E), "blk.%d.ffn_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_gate, 2, SHAPE(E, F),
                                     "blk.%d.ffn_gate.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_up, 2, SHAPE(E, F), "blk.%d.ffn_up.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_down, 2, SHAPE(F, E),
                                     "blk.%d.ffn_down.weight", l));
    }
#undef SHAPE
    return CLLM_OK;
}

/* y = W x (+ b) */
static cllm_tensor *linear(cllm_context *ctx, cllm_tensor *w, cllm_tensor *b, cllm_tensor *x) {
    cllm_tensor *y = cllm_mul_mat(ctx, w, x);
    return b ? cllm_add(ctx, y, b) : y;
}

static cllm_tensor *llama_build(const cllm_build_args *args, cllm_graph_io *io) {
    cllm_context *ctx = args->ctx;
    const cllm_hparams *hp = args->hp;
    const cllm_weights *w = args->w;
    const int64_t T = args->shape.n_tokens;
    const float scale = 1.0f / sqrtf((float)hp->head_dim_k);

    cllm_build_inputs(args, io);
    cllm_tensor *x = cllm_build_stage_in(args, io);          /* a later stage of a pipeline */
    if (!x) x = cllm_get_rows(ctx, w->tok_embd, io->tokens); /* [n_embd, T] */

    const int l_end = cllm_build_layer_end(args);
    for (int l = args->layer_begin; l < l_end; l++) {
        const cllm_layer_weights *L = &w->layers[l];
        cllm_tensor *h = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), L->attn_norm);

        cllm_tensor *q = linear(ctx, L->wq, L->bq, h);
        cllm_tensor *k = linear(ctx, L->wk, L->bk, h);
        cllm_tensor *v = linear(ctx, L->wv, L->bv, h);
        q = cllm_reshape_3d(ctx, q, hp->head_dim_k, hp->n_head, T);
        k = cllm_reshape_3d(ctx, k, hp->head_dim_k, hp->n_head_kv, T);
        v = cllm_reshape_3d(ctx, v, hp->head_dim_v, hp->n_head_kv, T);
        q = cllm_rope(ctx, q, io->pos, w->rope_freqs, hp->n_rot, hp->rope_mode, hp->rope_freq_base,
                      hp->rope_freq_scale);
        k = cllm_rope(ctx, k, io->pos, w->rope_freqs, hp->n_rot, hp->rope_mode, hp->rope_freq_base,
                      hp->rope_freq_scale);

        cllm_tensor *a = cllm_build_attention(args, io, l, q, k, v, scale);
        x = cllm_add(ctx, x, linear(ctx, L->wo, L->bo, a));

        h = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), L->ffn_norm);
        cllm_tensor *gate = cllm_silu(ctx, cllm_mul_mat(ctx, L->ffn_gate, h));
        cllm_tensor *up = cllm_mul_mat(ctx, L->ffn_up, h);
        x = cllm_add(ctx, x, cllm_mul_mat(ctx, L->ffn_down, cllm_mul(ctx, gate, up)));
        cllm_tensor_set_name(x, "x-%d", l);
    }

    if (l_end < w->n_layer) return cllm_build_stage_out(args, io, x); /* sent on */
    x = cllm_get_rows(ctx, x, io->out_ids); /* only the rows that need logits */
    x = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), w->output_norm);
    return cllm_build_logits(args, io, x);
}

static int llama_graph_size(const cllm_hparams *hp) { return 64 * (int)hp->n_layer + 64; }

const cllm_arch cllm_arch_llama = {
    .name = "llama",
    .load_hparams = llama_hparams,
    .create_weights = llama_weights,
    .build = llama_build,
    .graph_size = llama_graph_size,
    .layer_ranges = true,
};
