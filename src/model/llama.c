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
 *
 * Llama 3.x rope scaling comes as rope_freqs.weight ([n_rot/2] factors that
 * divide each frequency). Mistral files are llama files; llama.cpp's llama
 * graph has no sliding window either (attention sees the whole context).
 *
 * The same graph, with options, runs the members of the family that differ
 * in small ways (each registered under its own name, keys "<arch>.*"):
 *   qwen2: q, k, v have biases; rope rotates NeoX halves.
 *   qwen3: q and k get a per-head RMS norm before rope (attn_q_norm,
 *          attn_k_norm, [head_dim]); no biases; NeoX rope.
 *   phi3:  q | k | v in one matrix (attn_qkv, [n_embd, Q + K + V]) and gate
 *          | up in one (ffn_up, [n_embd, 2 n_ff]): the graph takes views of
 *          their products; NeoX rope with LongRoPE's factors
 *          (rope_factors_short, or _long for a context past the original).
 *          llama.cpp disables Phi's sliding window too (full attention).
 * Rope scaling from the metadata (any member): none, linear, yarn,
 * longrope (see rope_scaling below).
 */
#include "model/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/*
 * Rope scaling, as llama.cpp reads it: rope.scaling.type (none, linear,
 * yarn, longrope; absent means linear), rope.scaling.factor (or the old
 * rope.scale_linear; absent or 0 means 1) divides the frequencies unless the
 * type is none, rope.scaling.attn_factor (default 1) scales cos and sin, and
 * rope.scaling.original_context_length (default context_length) is YaRN's
 * original context and LongRoPE's switch from short to long factors. YaRN
 * ramps between interpolation and extrapolation (beta_fast 32, beta_slow
 * 1) and multiplies cos and sin by 0.1 ln(factor) + 1 (llama.cpp's
 * attention factor with no log multiplier).
 */
static cllm_status rope_scaling(const cllm_gguf *g, const char *a, cllm_hparams *h) {
    char key[128];
    const char *type = "linear";
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    if (cllm_gguf_find_key(g, key) >= 0) CLLM_TRY(cllm_gguf_get_str(g, key, &type));
    float factor = 0.0f, attn_factor = 1.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", a);
    const bool has_factor = cllm_gguf_find_key(g, key) >= 0;
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, has_factor ? "rope.scaling.factor" : "rope.scale_linear",
                                 &factor));
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, "rope.scaling.attn_factor", &attn_factor));
    h->n_ctx_orig = h->n_ctx_train;
    CLLM_TRY(cllm_hp_get_int_opt(g, a, "rope.scaling.original_context_length", 1, INT32_MAX,
                                 &h->n_ctx_orig));
    if (factor < 0.0f || !(attn_factor > 0.0f)) {
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: %s.rope.scaling.factor (%g) and attn_factor (%g) must be positive",
                          cllm_gguf_name(g), a, (double)factor, (double)attn_factor);
    }
    h->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    h->rope_yarn = (cllm_rope_yarn){.n_ctx_orig = (int)h->n_ctx_orig, .attn_factor = attn_factor};
    if (strcmp(type, "none") == 0) {
        h->rope_freq_scale = 1.0f;
    } else if (strcmp(type, "yarn") == 0) {
        const float f = 1.0f / h->rope_freq_scale;
        const float mscale = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        h->rope_yarn.ext_factor = 1.0f;
        h->rope_yarn.beta_fast = 32.0f;
        h->rope_yarn.beta_slow = 1.0f;
        /* the kernel multiplies by 1 + 0.1 ln(f) again: llama.cpp divides it out */
        h->rope_yarn.attn_factor = attn_factor * mscale / (1.0f + 0.1f * logf(f));
    } else if (strcmp(type, "linear") != 0 && strcmp(type, "longrope") != 0) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "%s: %s.rope.scaling.type \"%s\" is not supported (supported: none, "
                          "linear, yarn, longrope)",
                          cllm_gguf_name(g), a, type);
    }
    return CLLM_OK;
}

cllm_status cllm_hp_llama_family(const cllm_gguf *g, const char *a, int rope_mode,
                                 cllm_hparams *hp) {
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
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.key_length", a);
    if (cllm_gguf_find_key(g, key) < 0 && h.n_embd % h.n_head != 0) {
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: %s.embedding_length %lld is not a multiple of "
                          "%s.attention.head_count %lld (and %s, the head size, is not set)",
                          cllm_gguf_name(g), a, (long long)h.n_embd, a, (long long)h.n_head, key);
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
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s.rope.dimension_count = %lld is odd",
                          cllm_gguf_name(g), a, (long long)n_rot);
    }
    h.n_rot = (int)n_rot;
    h.rope_mode = rope_mode;
    h.rope_freq_base = 10000.0f;
    CLLM_TRY(cllm_hp_get_f32_opt(g, a, "rope.freq_base", &h.rope_freq_base));
    CLLM_TRY(rope_scaling(g, a, &h));
    if (!(h.rope_freq_base > 0.0f) || !(h.norm_eps >= 0.0f)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: rope base or norm epsilon out of range",
                          cllm_gguf_name(g));
    }
    *hp = h;
    return CLLM_OK;
}

/* What a member of the family adds to llama's weights. */
enum {
    FAM_QKV_BIAS = 1 << 0, /* attn_q/k/v.bias required (qwen2) */
    FAM_QK_NORM = 1 << 1,  /* attn_q_norm / attn_k_norm [head_dim] required (qwen3) */
    FAM_FUSED = 1 << 2,    /* attn_qkv (or q/k/v) and ffn_up [n_embd, 2 n_ff] = gate | up;
                            * rope_factors_long/short (phi3) */
};

static cllm_status family_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp,
                                  int fam) {
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
    if (fam & FAM_FUSED) {
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->rope_long, 1, SHAPE(hp->n_rot / 2),
                                     "rope_factors_long.weight"));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &w->rope_short, 1, SHAPE(hp->n_rot / 2),
                                     "rope_factors_short.weight"));
    }
    for (int l = 0; l < w->n_layer; l++) {
        cllm_layer_weights *L = &w->layers[l];
        cllm_weights_set_group(w, l);
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->attn_norm, 1, SHAPE(E), "blk.%d.attn_norm.weight", l));
        if (fam & FAM_FUSED) { /* phi3: fused q | k | v, or (some files) separate */
            CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->wqkv, 2, SHAPE(E, Q + K + KV),
                                         "blk.%d.attn_qkv.weight", l));
        }
        const int QKV = L->wqkv ? OPT : R;
        if (!L->wqkv) {
            CLLM_TRY(
                cllm_weights_tensor(w, g, QKV, &L->wq, 2, SHAPE(E, Q), "blk.%d.attn_q.weight", l));
            CLLM_TRY(
                cllm_weights_tensor(w, g, QKV, &L->wk, 2, SHAPE(E, K), "blk.%d.attn_k.weight", l));
            CLLM_TRY(
                cllm_weights_tensor(w, g, QKV, &L->wv, 2, SHAPE(E, KV), "blk.%d.attn_v.weight", l));
        }
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->wo, 2, SHAPE(O, E), "blk.%d.attn_output.weight", l));
        const int B = fam & FAM_QKV_BIAS ? R : OPT, N = fam & FAM_QK_NORM ? R : OPT;
        CLLM_TRY(cllm_weights_tensor(w, g, B, &L->bq, 1, SHAPE(Q), "blk.%d.attn_q.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, B, &L->bk, 1, SHAPE(K), "blk.%d.attn_k.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, B, &L->bv, 1, SHAPE(KV), "blk.%d.attn_v.bias", l));
        CLLM_TRY(cllm_weights_tensor(w, g, N, &L->attn_q_norm, 1, SHAPE(hp->head_dim_k),
                                     "blk.%d.attn_q_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, N, &L->attn_k_norm, 1, SHAPE(hp->head_dim_k),
                                     "blk.%d.attn_k_norm.weight", l));
        CLLM_TRY(cllm_weights_tensor(w, g, OPT, &L->bo, 1, SHAPE(E), "blk.%d.attn_output.bias", l));
        CLLM_TRY(
            cllm_weights_tensor(w, g, R, &L->ffn_norm, 1, SHAPE(E), "blk.%d.ffn_norm.weight", l));
        if (fam & FAM_FUSED) { /* gate | up in one matrix */
            CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_up, 2, SHAPE(E, 2 * F),
                                         "blk.%d.ffn_up.weight", l));
        } else {
            CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_gate, 2, SHAPE(E, F),
                                         "blk.%d.ffn_gate.weight", l));
            CLLM_TRY(cllm_weights_tensor(w, g, R, &L->ffn_up, 2, SHAPE(E, F),
                                         "blk.%d.ffn_up.weight", l));
        }
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

    /* frequency factors: Llama 3's, or LongRoPE's long ones for a context
     * past the original one (as llama.cpp chooses by the context size) */
    cllm_tensor *ff = w->rope_freqs;
    if (!ff) ff = args->kv->n_ctx > hp->n_ctx_orig ? w->rope_long : w->rope_short;

    cllm_build_inputs(args, io);
    cllm_tensor *x = cllm_build_stage_in(args, io);          /* a later stage of a pipeline */
    if (!x) x = cllm_get_rows(ctx, w->tok_embd, io->tokens); /* [n_embd, T] */

    /* every layer's q and k turn by the same angles: computed once */
    cllm_tensor *rope = cllm_rope_table(ctx, io->pos, ff, hp->n_rot, hp->rope_freq_base,
                                        hp->rope_freq_scale, &hp->rope_yarn);

    const int l_end = cllm_build_layer_end(args);
    for (int l = args->layer_begin; l < l_end; l++) {
        const cllm_layer_weights *L = &w->layers[l];
        cllm_tensor *h = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), L->attn_norm);

        cllm_tensor *q, *k, *v;
        if (L->wqkv) { /* [Q + K + V, T]: views of q, k and v */
            cllm_tensor *qkv = cllm_mul_mat(ctx, L->wqkv, h);
            const size_t es = cllm_element_size(qkv), nq = (size_t)(hp->head_dim_k * hp->n_head);
            const size_t nk = (size_t)cllm_hparams_n_embd_k_gqa(hp);
            q = cllm_view_3d(ctx, qkv, hp->head_dim_k, hp->n_head, T, hp->head_dim_k * es,
                             qkv->nb[1], 0);
            k = cllm_view_3d(ctx, qkv, hp->head_dim_k, hp->n_head_kv, T, hp->head_dim_k * es,
                             qkv->nb[1], nq * es);
            v = cllm_view_3d(ctx, qkv, hp->head_dim_v, hp->n_head_kv, T, hp->head_dim_v * es,
                             qkv->nb[1], (nq + nk) * es);
        } else {
            q = cllm_reshape_3d(ctx, linear(ctx, L->wq, L->bq, h), hp->head_dim_k, hp->n_head, T);
            k = cllm_reshape_3d(ctx, linear(ctx, L->wk, L->bk, h), hp->head_dim_k, hp->n_head_kv,
                                T);
            v = cllm_reshape_3d(ctx, linear(ctx, L->wv, L->bv, h), hp->head_dim_v, hp->n_head_kv,
                                T);
        }
        if (L->attn_q_norm) q = cllm_mul(ctx, cllm_rms_norm(ctx, q, hp->norm_eps), L->attn_q_norm);
        if (L->attn_k_norm) k = cllm_mul(ctx, cllm_rms_norm(ctx, k, hp->norm_eps), L->attn_k_norm);
        q = cllm_rope_tab(ctx, q, rope, hp->rope_mode);
        k = cllm_rope_tab(ctx, k, rope, hp->rope_mode);

        cllm_tensor *a = cllm_build_attention(args, io, l, q, k, v, scale);
        x = cllm_add(ctx, x, linear(ctx, L->wo, L->bo, a));

        h = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), L->ffn_norm);
        cllm_tensor *gate, *up;
        if (L->ffn_gate) {
            gate = cllm_silu(ctx, cllm_mul_mat(ctx, L->ffn_gate, h));
            up = cllm_mul_mat(ctx, L->ffn_up, h);
        } else { /* fused [2 n_ff, T]: gate rows first, then up */
            cllm_tensor *gu = cllm_mul_mat(ctx, L->ffn_up, h);
            const size_t es = cllm_element_size(gu);
            gate = cllm_silu(ctx, cllm_view_2d(ctx, gu, hp->n_ff, T, gu->nb[1], 0));
            up = cllm_view_2d(ctx, gu, hp->n_ff, T, gu->nb[1], (size_t)hp->n_ff * es);
        }
        x = cllm_add(ctx, x, cllm_mul_mat(ctx, L->ffn_down, cllm_mul(ctx, gate, up)));
        cllm_tensor_set_name(x, "x-%d", l);
    }

    if (l_end < w->n_layer) return cllm_build_stage_out(args, io, x); /* sent on */
    x = cllm_get_rows(ctx, x, io->out_ids); /* only the rows that need logits */
    x = cllm_mul(ctx, cllm_rms_norm(ctx, x, hp->norm_eps), w->output_norm);
    return cllm_build_logits(args, io, x);
}

static int llama_graph_size(const cllm_hparams *hp) { return 64 * (int)hp->n_layer + 64; }

static cllm_status llama_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    return cllm_hp_llama_family(g, "llama", CLLM_ROPE_NORMAL, hp);
}
static cllm_status llama_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    return family_weights(w, g, hp, 0);
}

const cllm_arch cllm_arch_llama = {
    .name = "llama",
    .load_hparams = llama_hparams,
    .create_weights = llama_weights,
    .build = llama_build,
    .graph_size = llama_graph_size,
    .layer_ranges = true,
};

/* qwen2: llama with biases on q, k and v and NeoX rope. */
static cllm_status qwen2_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    return cllm_hp_llama_family(g, "qwen2", CLLM_ROPE_NEOX, hp);
}
static cllm_status qwen2_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    return family_weights(w, g, hp, FAM_QKV_BIAS);
}

const cllm_arch cllm_arch_qwen2 = {
    .name = "qwen2",
    .load_hparams = qwen2_hparams,
    .create_weights = qwen2_weights,
    .build = llama_build,
    .graph_size = llama_graph_size,
};

/* qwen3: llama with per-head RMS norms of q and k (before rope), no biases,
 * NeoX rope; the head size is usually not n_embd / n_head (key_length). */
static cllm_status qwen3_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    return cllm_hp_llama_family(g, "qwen3", CLLM_ROPE_NEOX, hp);
}
static cllm_status qwen3_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    return family_weights(w, g, hp, FAM_QK_NORM);
}

/* phi3: fused attn_qkv and gate|up ffn_up; NeoX rope with LongRoPE's
 * frequency factors (rope_factors_short, or _long past the original
 * context) and rope.scaling.attn_factor. */
static cllm_status phi3_hparams(const cllm_gguf *g, cllm_hparams *hp) {
    return cllm_hp_llama_family(g, "phi3", CLLM_ROPE_NEOX, hp);
}
static cllm_status phi3_weights(cllm_weights *w, const cllm_gguf *g, const cllm_hparams *hp) {
    return family_weights(w, g, hp, FAM_FUSED);
}

const cllm_arch cllm_arch_phi3 = {
    .name = "phi3",
    .load_hparams = phi3_hparams,
    .create_weights = phi3_weights,
    .build = llama_build,
    .graph_size = llama_graph_size,
};

const cllm_arch cllm_arch_qwen3 = {
    .name = "qwen3",
    .load_hparams = qwen3_hparams,
    .create_weights = qwen3_weights,
    .build = llama_build,
    .graph_size = llama_graph_size,
};
