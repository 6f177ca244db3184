/*
 * gpt2: learned absolute positions, pre-LayerNorm blocks, fused QKV with
 * bias, GELU MLP.
 *
 *   x   = token_embd[tokens] + position_embd[pos]
 * per block:
 *   h   = layer_norm(x) * attn_norm + attn_norm_b
 *   qkv = Wqkv h + bqkv                    ([3 n_embd, n_tokens]: q | k | v)
 *   x   = x + Wo attention(q, k, v) + bo
 *   h   = layer_norm(x) * ffn_norm + ffn_norm_b
 *   x   = x + W_down gelu(W_up h + b_up) + b_down
 * then logits = output · (layer_norm(x) * output_norm + output_norm_b),
 * output tied to token_embd when the file has no output.weight.
 */
#include "model/arch.h"

#include <math.h>
#include <stdio.h>

static cllm_status gpt2_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    const char *a = "gpt2";
    cllm_hparams h = {0};
    snprintf(h.arch, sizeof(h.arch), "%s", a);
    CLLM_TRY(cllm_hp_get_vocab(g, a, &h.n_vocab));
    CLLM_TRY(cllm_hp_get_int(g, a, "context_length", 1, INT32_MAX, &h.n_ctx_train));
    CLLM_TRY(cllm_hp_get_int(g, a, "embedding_length", 1, 1 << 20, &h.n_embd));
    CLLM_TRY(cllm_hp_get_int(g, a, "block_count", 1, CLLM_MAX_LAYERS, &h.n_layer));
    CLLM_TRY(cllm_hp_get_int(g, a, "feed_forward_length", 1, 1 << 22, &h.n_ff));
    CLLM_TRY(cllm_hp_get_int(g, a, "attention.head_count", 1, 1 << 14, &h.n_head));
    CLLM_TRY(cllm_hp_get_f32(g, a, "attention.layer_norm_epsilon", &h.norm_eps));
    if (h.n_embd % h.n_head != 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: embedding %lld is not a multiple of %lld heads",
                          cllm_gguf_name(g), (long long)h.n_embd, (long long)h.n_head);
    }
    if (!(h.norm_eps >= 0.0f)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: negative layer norm epsilon", cllm_gguf_name(g));
    }
    h.n_head_kv = h.n_head;
    h.head_dim_k = h.head_dim_v = h.n_embd / h.n_head;
    h.n_rot = 0;
    h.learned_pos = true;
    *hp = h;
    return CLLM_OK;
}

static cllm_status gpt2_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff, C = hp->n_ctx_train;
    const int R = CLLM_W_REQUIRED, OPT = CLLM_W_OPTIONAL;
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->tok_embd, 2, SHAPE(E, V), "token_embd.weight"));
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->pos_embd, 2, SHAPE(E, C), "position_embd.weight"));
    cllm_weights_set_group(w, CLLM_WEIGHT_OUTPUT);
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->output_norm, 1, SHAPE(E), "output_norm.weight"));
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->output_norm_b, 1, SHAPE(E), "output_norm.bias"));
    CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->output, 2, SHAPE(E, V), "output.weight"));
    if (!w->output) w->output = w->tok_embd; /* tied */
    for (int l = 0; l < w->n_layer; l++) {
        cllm_layer_weights *L = &w->layers[l];
        cllm_weights_set_group(w, l);
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->attn_norm, 1, SHAPE(E), "blk.%d.attn_norm.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->attn_norm_b, 1, SHAPE(E), "blk.%d.attn_norm.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wqkv, 2, SHAPE(E, 3 * E),
                                     "blk.%d.attn_qkv.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->bqkv, 1, SHAPE(3 * E), "blk.%d.attn_qkv.bias", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->wo, 2, SHAPE(E, E), "blk.%d.attn_output.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->bo, 1, SHAPE(E), "blk.%d.attn_output.bias", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_norm, 1, SHAPE(E), "blk.%d.ffn_norm.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_norm_b, 1, SHAPE(E), "blk.%d.ffn_norm.bias", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_up, 2, SHAPE(E, F), "blk.%d.ffn_up.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_up_b, 1, SHAPE(F), "blk.%d.ffn_up.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_down, 2, SHAPE(F, E),
                                     "blk.%d.ffn_down.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_down_b, 1, SHAPE(E), "blk.%d.ffn_down.bias", l));
    }
#undef SHAPE
    return CLLM_OK;
}

/* layer_norm(x) * w + b */
static cllm_tensor *layer_norm(cllm_context *ctx, cllm_tensor *x, cllm_tensor *w, cllm_tensor *b,
                               float eps) {
    return cllm_add(ctx, cllm_mul(ctx, cllm_norm(ctx, x, eps), w), b);
}

static cllm_tensor *gpt2_build(const cllm_build_args *args, cllm_graph_io *io) {
    cllm_context *ctx = args->ctx;
    const cllm_hparams *hp = args->hp;
    const cllm_weights *w = args->w;
    const int64_t T = args->shape.n_tokens, E = hp->n_embd, hd = hp->head_dim_k;
    const float scale = 1.0f / sqrtf((float)hd);

    cllm_build_inputs(args, io);
    cllm_tensor *x = cllm_add(ctx, cllm_get_rows(ctx, w->tok_embd, io->tokens),
                              cllm_get_rows(ctx, w->pos_embd, io->pos));

    for (int l = 0; l < w->n_layer; l++) {
        const cllm_layer_weights *L = &w->layers[l];
        cllm_tensor *h = layer_norm(ctx, x, L->attn_norm, L->attn_norm_b, hp->norm_eps);
        cllm_tensor *qkv = cllm_add(ctx, cllm_mul_mat(ctx, L->wqkv, h), L->bqkv); /* [3E, T] */
        const size_t es = sizeof(float);
        cllm_tensor *q = cllm_view_3d(ctx, qkv, hd, hp->n_head, T, hd * es, qkv->nb[1], 0);
        cllm_tensor *k = cllm_view_3d(ctx, qkv, hd, hp->n_head, T, hd * es, qkv->nb[1], E * es);
        cllm_tensor *v = cllm_view_3d(ctx, qkv, hd, hp->n_head, T, hd * es, qkv->nb[1], 2 * E * es);

        cllm_tensor *a = cllm_build_attention(args, io, l, q, k, v, scale);
        x = cllm_add(ctx, x, cllm_add(ctx, cllm_mul_mat(ctx, L->wo, a), L->bo));

        h = layer_norm(ctx, x, L->ffn_norm, L->ffn_norm_b, hp->norm_eps);
        h = cllm_gelu(ctx, cllm_add(ctx, cllm_mul_mat(ctx, L->ffn_up, h), L->ffn_up_b));
        x = cllm_add(ctx, x, cllm_add(ctx, cllm_mul_mat(ctx, L->ffn_down, h), L->ffn_down_b));
        cllm_tensor_set_name(x, "x-%d", l);
    }

    x = cllm_get_rows(ctx, x, io->out_ids);
    x = layer_norm(ctx, x, w->output_norm, w->output_norm_b, hp->norm_eps);
    return cllm_build_logits(args, io, x);
}

static int gpt2_graph_size(const cllm_hparams *hp) { return 64 * (int)hp->n_layer + 64; }

const cllm_arch cllm_arch_gpt2 = {
    .name = "gpt2",
    .load_hparams = gpt2_hparams,
    .create_weights = gpt2_weights,
    .build = gpt2_build,
    .graph_size = gpt2_graph_size,
};
