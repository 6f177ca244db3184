/*
 * gemma3: Gemma 3 (text), e.g. gemma-3-270m.
 *
 *   x   = token_embd[tokens] * sqrt(n_embd)
 * per block (x: [n_embd, n_tokens]):
 *   h   = rms_norm(x) * attn_norm
 *   q   = rope(rms_norm(Wq h) * attn_q_norm)   (per head; NEOX pairs)
 *   k   = rope(rms_norm(Wk h) * attn_k_norm)
 *   v   = Wv h
 *   x   = x + rms_norm(Wo attention(q, k, v)) * attn_post_norm
 *   h   = rms_norm(x) * ffn_norm
 *   x   = x + rms_norm(W_down (gelu(W_gate h) * (W_up h))) * ffn_post_norm
 * then logits = output · (rms_norm(x) * output_norm), output tied to
 * token_embd when the file has no output.weight.
 *
 * Gemma's RMS norms multiply by (1 + w); GGUF files store w + 1 already (the
 * converter adds it: gemma-3-270m's attn_norm weights average about 13), so
 * the norms here are plain rms_norm(x) * w.
 *
 * Local and global layers: with <arch>.attention.sliding_window = n_swa,
 * layer l is a sliding-window layer unless l % pattern == pattern - 1
 * (<arch>.attention.sliding_window_pattern, 6 when absent, or a bool array
 * of one flag per layer). A sliding-window layer lets the token at position p
 * see positions p - n_swa + 1 .. p (its mask is a graph input of its own,
 * io->swa_mask) and rotates with rope base <arch>.rope.freq_base_swa (10000
 * when absent); the global layers see every earlier position and rotate with
 * <arch>.rope.freq_base. The attention scale is 1 / sqrt(head_dim), as for
 * every Gemma 3 size but 27B, which scales by 1 / sqrt(n_embd / n_head).
 */
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cllm_status gemma3_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    const char *a = "gemma3";
    const char *name = cllm_gguf_name(g);
    cllm_hparams h;
    CLLM_TRY(cllm_hp_llama_family(g, a, CLLM_ROPE_NEOX, &h));
    /* the graph scales the global layers' positions linearly, nothing else */
    const char *scaling = NULL;
    if (cllm_gguf_find_key(g, "gemma3.rope.scaling.type") >= 0) {
        CLLM_TRY(cllm_gguf_get_str(g, "gemma3.rope.scaling.type", &scaling));
    }
    if (scaling && strcmp(scaling, "linear") != 0 && strcmp(scaling, "none") != 0) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: rope scaling \"%s\" is not supported", name,
                          scaling);
    }
    float softcap = 0.0f;
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, "final_logit_softcapping", &softcap));
    if (softcap != 0.0f) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "%s: gemma3.final_logit_softcapping (%g) is not supported", name,
                          (double)softcap);
    }

    /* sliding-window layers */
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "attention.sliding_window", 0, INT32_MAX, &h.n_swa));
    h.rope_freq_base_swa = 10000.0f;
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, "rope.freq_base_swa", &h.rope_freq_base_swa));
    if (h.n_swa > 0) {
        const char *pkey = "gemma3.attention.sliding_window_pattern";
        const int64_t k = cllm_gguf_find_key(g, pkey);
        if (k >= 0 && cllm_gguf_kv_type(g, k) == CLLM_GGUF_ARRAY) {
            if (cllm_gguf_arr_type(g, k) != CLLM_GGUF_BOOL ||
                cllm_gguf_arr_n(g, k) != (uint64_t)h.n_layer) {
                return cllm_error(CLLM_ERR_FORMAT,
                                  "%s: %s must be an integer or an array of %lld bools (one per "
                                  "layer)",
                                  name, pkey, (long long)h.n_layer);
            }
            const uint8_t *flags = cllm_gguf_arr_data(g, k);
            for (int64_t l = 0; l < h.n_layer; l++) h.swa_layer[l] = flags[l] != 0;
        } else {
            int64_t pattern = 6;
            CLLM_TRY(cllm_hp_get_int_opt(g, a, "attention.sliding_window_pattern", 0, INT32_MAX,
                                         &pattern));
            /* pattern 0: every layer slides; else the last of each group of
             * `pattern` layers is global */
            for (int64_t l = 0; l < h.n_layer; l++) {
                h.swa_layer[l] = pattern == 0 || l % pattern < pattern - 1;
            }
        }
    }
    const int64_t n_embd_head = h.n_layer == 62 ? h.n_embd / h.n_head : h.head_dim_k; /* 27B */
    h.attn_scale = 1.0f / sqrtf((float)n_embd_head);

    if (!(h.rope_freq_base > 0.0f) || !(h.rope_freq_base_swa > 0.0f) || !(h.norm_eps >= 0.0f)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: rope base or norm epsilon out of range", name);
    }
    *hp = h;
    return CLLM_OK;
}

static cllm_status gemma3_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff, D = hp->head_dim_k;
    const int64_t Q = hp->head_dim_k * hp->n_head, K = cllm_hparams_n_embd_k_gqa(hp);
    const int64_t KV = cllm_hparams_n_embd_v_gqa(hp), O = hp->head_dim_v * hp->n_head;
    const int R = CLLM_W_REQUIRED, OPT = CLLM_W_OPTIONAL;
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->tok_embd, 2, SHAPE(E, V), "token_embd.weight"));
    cllm_weights_set_group(w, CLLM_WEIGHT_OUTPUT);
    CLLM_TRY(cllm_weights_tensor(w, g, R, &w->output_norm, 1, SHAPE(E), "output_norm.weight"));
    CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->output, 2, SHAPE(E, V), "output.weight"));
    if (!w->output) w->output = w->tok_embd; /* tied */
    for (int l = 0; l < w->n_layer; l++) {
        cllm_layer_weights *L = &w->layers[l];
        cllm_weights_set_group(w, l);
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->attn_norm, 1, SHAPE(E), "blk.%d.attn_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wq, 2, SHAPE(E, Q), "blk.%d.attn_q.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wk, 2, SHAPE(E, K), "blk.%d.attn_k.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->wv, 2, SHAPE(E, KV), "blk.%d.attn_v.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->attn_q_norm, 1, SHAPE(D),
                                     "blk.%d.attn_q_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->attn_k_norm, 1, SHAPE(D),
                                     "blk.%d.attn_k_norm.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->wo, 2, SHAPE(O, E), "blk.%d.attn_output.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->attn_post_norm, 1, SHAPE(E),
                                     "blk.%d.post_attention_norm.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_norm, 1, SHAPE(E), "blk.%d.ffn_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_gate, 2, SHAPE(E, F),
                                     "blk.%d.ffn_gate.weight", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_up, 2, SHAPE(E, F), "blk.%d.ffn_up.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_down, 2, SHAPE(F, E),
                                     "blk.%d.ffn_down.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_post_norm, 1, SHAPE(E),
                                     "blk.%d.post_ffw_norm.weight", l));
    }
#undef SHAPE
    return CLLM_OK;
}

/* rms_norm(x) * w, per row of x */
static cllm_tensor *norm(cllm_context *ctx, cllm_tensor *x, cllm_tensor *w, float eps) {
    return cllm_mul(ctx, cllm_rms_norm(ctx, x, eps), w);
}

static cllm_tensor *gemma3_build(const cllm_build_args *args, cllm_graph_io *io) {
    cllm_context *ctx = args->ctx;
    const cllm_hparams *hp = args->hp;
    const cllm_weights *w = args->w;
    const int64_t T = args->shape.n_tokens;
    const float eps = hp->norm_eps;

    cllm_build_inputs(args, io);
    cllm_tensor *x = cllm_get_rows(ctx, w->tok_embd, io->tokens); /* [n_embd, T] */
    x = cllm_scale(ctx, x, sqrtf((float)hp->n_embd));

    /* the sliding-window layers attend with their own masks */
    cllm_graph_io swa_io = *io;
    if (hp->n_swa > 0) {
        swa_io.mask = io->swa_mask;
        memcpy(swa_io.seq_mask, io->seq_swa_mask, sizeof(swa_io.seq_mask));
    }

    /* the angles of the global layers and of the sliding-window ones (their
     * own base), each computed once for all the layers that use them */
    cllm_tensor *rope[2] = {NULL, NULL};
    for (int l = 0; l < w->n_layer; l++) {
        const cllm_layer_weights *L = &w->layers[l];
        const bool swa = hp->n_swa > 0 && hp->swa_layer[l];
        const float base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
        const float fscale = swa ? 1.0f : hp->rope_freq_scale;
        cllm_tensor *h = norm(ctx, x, L->attn_norm, eps);

        cllm_tensor *q = cllm_mul_mat(ctx, L->wq, h);
        cllm_tensor *k = cllm_mul_mat(ctx, L->wk, h);
        cllm_tensor *v = cllm_mul_mat(ctx, L->wv, h);
        q = cllm_reshape_3d(ctx, q, hp->head_dim_k, hp->n_head, T);
        k = cllm_reshape_3d(ctx, k, hp->head_dim_k, hp->n_head_kv, T);
        v = cllm_reshape_3d(ctx, v, hp->head_dim_v, hp->n_head_kv, T);
        q = norm(ctx, q, L->attn_q_norm, eps); /* per head */
        k = norm(ctx, k, L->attn_k_norm, eps);
        if (!rope[swa])
            rope[swa] = cllm_rope_table(ctx, io->pos, NULL, hp->n_rot, base, fscale, NULL);
        q = cllm_rope_tab(ctx, q, rope[swa], hp->rope_mode);
        k = cllm_rope_tab(ctx, k, rope[swa], hp->rope_mode);

        cllm_tensor *a = cllm_build_attention(args, swa ? &swa_io : io, l, q, k, v, hp->attn_scale);
        x = cllm_add(ctx, x, norm(ctx, cllm_mul_mat(ctx, L->wo, a), L->attn_post_norm, eps));

        h = norm(ctx, x, L->ffn_norm, eps);
        cllm_tensor *gate = cllm_gelu(ctx, cllm_mul_mat(ctx, L->ffn_gate, h));
        cllm_tensor *up = cllm_mul_mat(ctx, L->ffn_up, h);
        cllm_tensor *f = cllm_mul_mat(ctx, L->ffn_down, cllm_mul(ctx, gate, up));
        x = cllm_add(ctx, x, norm(ctx, f, L->ffn_post_norm, eps));
        cllm_tensor_set_name(x, "x-%d", l);
    }

    x = cllm_get_rows(ctx, x, io->out_ids); /* only the rows that need logits */
    x = norm(ctx, x, w->output_norm, eps);
    return cllm_build_logits(args, io, x);
}

static int gemma3_graph_size(const cllm_hparams *hp) { return 96 * (int)hp->n_layer + 64; }

const cllm_arch cllm_arch_gemma3 = {
    .name = "gemma3",
    .load_hparams = gemma3_hparams,
    .create_weights = gemma3_weights,
    .build = gemma3_build,
    .graph_size = gemma3_graph_size,
};
