/* The table of architectures and the helpers they share: typed
 * hyper-parameter look-ups, weight tensors checked against the file, masks. */
#include "model/arch.h"
#include "core/hostmem.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const cllm_arch cllm_arch_llama;
extern const cllm_arch cllm_arch_gpt2;
extern const cllm_arch cllm_arch_gemma3;
extern const cllm_arch cllm_arch_qwen2;
extern const cllm_arch cllm_arch_qwen3;
extern const cllm_arch cllm_arch_phi3;

static const cllm_arch *const k_archs[] = {
    &cllm_arch_llama, &cllm_arch_gpt2,  &cllm_arch_gemma3,
    &cllm_arch_qwen2, &cllm_arch_qwen3, &cllm_arch_phi3,
};

const cllm_arch *cllm_arch_find(const char *name) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_archs); i++) {
        if (strcmp(k_archs[i]->name, name) == 0) return k_archs[i];
    }
    return NULL;
}

const char *cllm_arch_names(char *buf, size_t size) {
    size_t n = 0;
    if (size) buf[0] = '\0';
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_archs) && n < size; i++) {
        n += (size_t)snprintf(buf + n, size - n, i ? ", %s" : "%s", k_archs[i]->name);
    }
    return buf;
}

/* ---- hyper-parameters -------------------------------------------------- */

static void key_of(char *key, size_t size, const char *arch, const char *suffix) {
    snprintf(key, size, "%s.%s", arch, suffix);
}

cllm_status cllm_hp_get_int_opt(const cllm_gguf *g, const char *arch, const char *suffix,
                                int64_t min, int64_t max, int64_t *out) {
    char key[128];
    key_of(key, sizeof(key), arch, suffix);
    if (cllm_gguf_find_key(g, key) < 0) return CLLM_OK;
    int64_t v;
    cllm_status st = cllm_gguf_get_i64(g, key, &v);
    if (st != CLLM_OK) return st;
    if (v < min || v > max) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s = %lld is outside [%lld, %lld]",
                          cllm_gguf_name(g), key, (long long)v, (long long)min, (long long)max);
    }
    *out = v;
    return CLLM_OK;
}

cllm_status cllm_hp_get_int(const cllm_gguf *g, const char *arch, const char *suffix, int64_t min,
                            int64_t max, int64_t *out) {
    char key[128];
    key_of(key, sizeof(key), arch, suffix);
    if (cllm_gguf_find_key(g, key) < 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: missing key %s", cllm_gguf_name(g), key);
    }
    return cllm_hp_get_int_opt(g, arch, suffix, min, max, out);
}

cllm_status cllm_hp_get_f32_opt(const cllm_gguf *g, const char *arch, const char *suffix,
                                float *out) {
    char key[128];
    key_of(key, sizeof(key), arch, suffix);
    if (cllm_gguf_find_key(g, key) < 0) return CLLM_OK;
    float v;
    cllm_status st = cllm_gguf_get_f32(g, key, &v);
    if (st != CLLM_OK) return st;
    if (!isfinite(v)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s is not finite", cllm_gguf_name(g), key);
    }
    *out = v;
    return CLLM_OK;
}

cllm_status cllm_hp_get_f32(const cllm_gguf *g, const char *arch, const char *suffix, float *out) {
    char key[128];
    key_of(key, sizeof(key), arch, suffix);
    if (cllm_gguf_find_key(g, key) < 0) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: missing key %s", cllm_gguf_name(g), key);
    }
    return cllm_hp_get_f32_opt(g, arch, suffix, out);
}

cllm_status cllm_hp_get_vocab(const cllm_gguf *g, const char *arch, int64_t *out) {
    const char *key = "tokenizer.ggml.tokens";
    const int64_t k = cllm_gguf_find_key(g, key);
    if (k < 0) {
        /* a bare weights file: the size alone */
        char vkey[128];
        key_of(vkey, sizeof(vkey), arch, "vocab_size");
        if (cllm_gguf_find_key(g, vkey) < 0) {
            return cllm_error(CLLM_ERR_FORMAT, "%s: no vocabulary: neither %s nor %s is set",
                              cllm_gguf_name(g), key, vkey);
        }
        return cllm_hp_get_int(g, arch, "vocab_size", 1, INT32_MAX, out);
    }
    /* the token list, when there is one, is the vocabulary */
    if (cllm_gguf_kv_type(g, k) != CLLM_GGUF_ARRAY) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s has type %s, expected an array of strings",
                          cllm_gguf_name(g), key, cllm_gguf_type_name(cllm_gguf_kv_type(g, k)));
    }
    if (cllm_gguf_arr_type(g, k) != CLLM_GGUF_STRING) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s is an array of %s, expected an array of strings",
                          cllm_gguf_name(g), key, cllm_gguf_type_name(cllm_gguf_arr_type(g, k)));
    }
    const uint64_t n = cllm_gguf_arr_n(g, k);
    if (n == 0 || n > INT32_MAX - 1) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: %s holds %llu tokens (expected 1 to %d)",
                          cllm_gguf_name(g), key, (unsigned long long)n, INT32_MAX - 1);
    }
    *out = (int64_t)n;
    return CLLM_OK;
}

/* ---- weights ----------------------------------------------------------- */

static const char *dims_str(char *buf, size_t size, int n_dims, const int64_t *ne) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n_dims && n < size; i++) {
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)ne[i]);
    }
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

cllm_status cllm_weights_tensor(cllm_weights *w, const cllm_gguf *g, int flags, cllm_tensor **out,
                                int n_dims, const int64_t *ne, const char *fmt, ...) {
    char name[CLLM_MAX_NAME];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);

    const int64_t i = cllm_gguf_find_tensor(g, name);
    if (i < 0) {
        if (flags & CLLM_W_OPTIONAL) {
            *out = NULL;
            return CLLM_OK;
        }
        return cllm_error(CLLM_ERR_FORMAT, "%s: missing tensor %s", cllm_gguf_name(g), name);
    }
    const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
    bool same = true;
    for (int d = 0; d < 4; d++) same = same && ti->ne[d] == (d < n_dims ? ne[d] : 1);
    if (!same) {
        char want[96], have[96];
        return cllm_error(CLLM_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s",
                          cllm_gguf_name(g), name, dims_str(have, sizeof(have), ti->n_dims, ti->ne),
                          dims_str(want, sizeof(want), n_dims, ne));
    }
    const cllm_type_traits *tt = cllm_type_traits_of(ti->type);
    if (ti->ne[0] % tt->blck_size != 0) {
        /* old writers only required whole blocks per tensor, not per row */
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "%s: tensor %s has rows of %lld elements, not whole %s blocks of %lld",
                          cllm_gguf_name(g), name, (long long)ti->ne[0], tt->name,
                          (long long)tt->blck_size);
    }
    if (!tt->to_float) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which is not supported",
                          cllm_gguf_name(g), name, tt->name);
    }
    /* Mapped weights are read in place: the file offset must suit the
     * type. A block struct's size is a multiple of its alignment, so the
     * largest power of two dividing the block size (at most 8, the largest
     * scalar in a block) is enough; GGUF's alignment (a multiple of 8) always
     * gives it, general.alignment 1, 2 or 4 may not. */
    const size_t need = CLLM_MIN(tt->type_size & (~tt->type_size + 1), (size_t)8);
    const uint64_t at = cllm_gguf_data_offset(g) + ti->offset;
    if (at % need != 0) {
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: tensor %s: its data starts at byte %llu of the file, which is not "
                          "a multiple of the %zu bytes type %s needs (general.alignment is %zu; "
                          "GGUF asks for a multiple of 8)",
                          cllm_gguf_name(g), name, (unsigned long long)at, need, tt->name,
                          cllm_gguf_alignment(g));
    }
    if (cllm_context_n_tensors(w->ctx) >= (int)cllm_gguf_n_tensors(g)) {
        return cllm_error(CLLM_ERR_FORMAT, "%s: more weights requested than the file has",
                          cllm_gguf_name(g));
    }
    w->group[cllm_context_n_tensors(w->ctx)] = w->cur_group;
    cllm_tensor *t = cllm_tensor_new(w->ctx, ti->type, 4, ti->ne);
    cllm_tensor_set_name(t, "%s", name);
    *out = t;
    return CLLM_OK;
}

/* The token embedding and the output head are [n_embd, n_vocab] in every
 * architecture; a row count that differs from the vocabulary is named as
 * such, not as a bad shape. */
static cllm_status check_vocab_rows(const cllm_gguf *g, const cllm_hparams *hp) {
    static const char *const names[] = {"token_embd.weight", "output.weight"};
    for (size_t k = 0; k < CLLM_ARRAY_SIZE(names); k++) {
        const int64_t i = cllm_gguf_find_tensor(g, names[k]);
        if (i < 0) continue;
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
        if (ti->n_dims != 2 || ti->ne[0] != hp->n_embd || ti->ne[1] == hp->n_vocab) continue;
        char vkey[128];
        const bool listed = cllm_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0;
        key_of(vkey, sizeof(vkey), hp->arch, "vocab_size");
        return cllm_error(CLLM_ERR_FORMAT,
                          "%s: the vocabulary has %lld tokens (%s) but %s has %lld rows, one per "
                          "token",
                          cllm_gguf_name(g), (long long)hp->n_vocab,
                          listed ? "tokenizer.ggml.tokens" : vkey, names[k], (long long)ti->ne[1]);
    }
    return CLLM_OK;
}

/* The layer of a "blk.N...." name, or -1 (N saturates at INT32_MAX). */
static int64_t blk_layer(const char *name) {
    if (strncmp(name, "blk.", 4) != 0 || name[4] < '0' || name[4] > '9') return -1;
    int64_t n = 0;
    const char *p = name + 4;
    for (; *p >= '0' && *p <= '9'; p++) n = CLLM_MIN(n * 10 + (*p - '0'), (int64_t)INT32_MAX);
    return *p == '.' || *p == '\0' ? n : -1;
}

/* Every tensor of the file should be a weight of the model. One of a layer
 * past block_count means the metadata and the tensors disagree (an error);
 * any other unused tensor is a warning. */
static cllm_status check_unused(const cllm_gguf *g, const cllm_weights *w, const cllm_hparams *hp) {
    const int64_t n = cllm_gguf_n_tensors(g);
    if (cllm_context_n_tensors(w->ctx) == n) return CLLM_OK; /* names are unique */
    bool *used = cllm_calloc((size_t)n, sizeof(*used));
    if (!used) return cllm_error(CLLM_ERR_NOMEM, "out of host memory for weights");
    for (int i = 0; i < cllm_context_n_tensors(w->ctx); i++) {
        const int64_t j = cllm_gguf_find_tensor(g, cllm_context_tensor(w->ctx, i)->name);
        if (j >= 0) used[j] = true;
    }
    int64_t n_unused = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        if (used[i]) continue;
        const char *name = cllm_gguf_tensor(g, i)->name;
        const int64_t layer = blk_layer(name);
        if (layer >= hp->n_layer) {
            cllm_free(used);
            return cllm_error(
                CLLM_ERR_FORMAT, "%s: tensor %s belongs to layer %lld, but %s.block_count is %lld",
                cllm_gguf_name(g), name, (long long)layer, hp->arch, (long long)hp->n_layer);
        }
        if (first < 0) first = i;
        n_unused++;
    }
    cllm_free(used);
    CLLM_LOG_WARN("%s: %lld tensor%s of the file %s not used by the %s model (the first: %s)",
                  cllm_gguf_name(g), (long long)n_unused, n_unused == 1 ? "" : "s",
                  n_unused == 1 ? "is" : "are", hp->arch, cllm_gguf_tensor(g, first)->name);
    return CLLM_OK;
}

/* Flags the weights that graphs read only as mul_mat's matrix (arch.h:
 * the matrix slots of a layer, and the output unless it is the token
 * embeddings, which the input gathers rows of). */
static void mark_matrices(cllm_weights *w) {
    for (int l = 0; l < w->n_layer; l++) {
        cllm_layer_weights *L = &w->layers[l];
        cllm_tensor *const m[] = {L->wq, L->wk,       L->wv,     L->wqkv,
                                  L->wo, L->ffn_gate, L->ffn_up, L->ffn_down};
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(m); i++) {
            if (m[i]) m[i]->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        }
    }
    if (w->output && w->output != w->tok_embd) w->output->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
}

cllm_status cllm_weights_new(const cllm_gguf *g, const cllm_arch *arch, const cllm_hparams *hp,
                             cllm_weights **out) {
    CLLM_TRY(check_vocab_rows(g, hp));
    cllm_weights *w = cllm_calloc(1, sizeof(*w));
    if (!w) return cllm_error(CLLM_ERR_NOMEM, "out of host memory for weights");
    cllm_status st = CLLM_ERR_NOMEM;
    w->n_layer = (int)hp->n_layer;
    w->layers = cllm_calloc((size_t)hp->n_layer, sizeof(*w->layers));
    w->ctx = cllm_context_new((int)cllm_gguf_n_tensors(g));
    w->group = cllm_calloc((size_t)CLLM_MAX(cllm_gguf_n_tensors(g), 1), sizeof(*w->group));
    w->cur_group = CLLM_WEIGHT_INPUT;
    if (!w->layers || !w->ctx || !w->group) {
        cllm_error(st, "out of host memory for weights");
        goto fail;
    }
    st = arch->create_weights(w, g, hp);
    if (st == CLLM_OK) st = check_unused(g, w, hp);
    if (st != CLLM_OK) goto fail;
    mark_matrices(w);
    *out = w;
    return CLLM_OK;
fail:
    cllm_weights_free(w);
    return st;
}

void cllm_weights_free(cllm_weights *w) {
    if (!w) return;
    cllm_context_free(w->ctx);
    cllm_free(w->group);
    cllm_free(w->layers);
    cllm_free(w);
}

void cllm_fill_causal_mask(float *dst, const cllm_batch_shape *shape) {
    for (int64_t t = 0; t < shape->n_tokens; t++) {
        for (int64_t j = 0; j < shape->n_kv; j++) {
            dst[t * shape->n_kv + j] = j <= shape->n_past + t ? 0.0f : -INFINITY;
        }
    }
}

void cllm_fill_mask_row(float *dst, int64_t n_kv, int64_t pos, int64_t n_swa) {
    for (int64_t j = 0; j < n_kv; j++) {
        const bool seen = j <= pos && (n_swa == 0 || pos - j < n_swa);
        dst[j] = seen ? 0.0f : -INFINITY;
    }
}

void cllm_fill_swa_row(float *dst, int64_t n_kv, int64_t n_ring, int64_t end, int64_t pos,
                       int64_t n_swa) {
    for (int64_t j = 0; j < n_kv; j++) {
        /* the last position before `end` that lands in row j */
        const int64_t p = end - 1 - ((end - 1 - j) % n_ring + n_ring) % n_ring;
        const bool seen = p >= 0 && p <= pos && pos - p < n_swa;
        dst[j] = seen ? 0.0f : -INFINITY;
    }
}

/* ---- shared graph pieces ----------------------------------------------- */

void cllm_kv_writes_move(cllm_tensor *const *writes, int n_layer, int64_t n_past) {
    for (int i = 0; i < n_layer * CLLM_KV_WRITES_PER_LAYER; i++) {
        cllm_tensor *t = writes[i];
        CLLM_ASSERTF(t && t->view_src, "kv writes: write %d of %d was not recorded", i,
                     n_layer * CLLM_KV_WRITES_PER_LAYER);
        const cllm_tensor *cache = t->view_src; /* a layer's K or V, [n_embd_gqa, rows] */
        /* rows == n_ctx > n_past, or a ring */
        const int64_t row = n_past >= 0 ? n_past % cache->ne[1] : -1;
        CLLM_ASSERTF(cache->data && row >= 0 && row + t->ne[1] <= cache->ne[1],
                     "kv writes: %lld rows at %lld in %s", (long long)t->ne[1], (long long)n_past,
                     cache->name);
        t->view_offs = (size_t)row * cache->nb[1];
        t->data = (char *)cache->data + t->view_offs;
    }
}

/* Rows a sliding-window layer attends to when the others attend to n_kv:
 * at most its ring. */
static int64_t swa_n_kv(const cllm_kv_cache *kv, int64_t n_kv) {
    return n_kv < kv->n_ring ? n_kv : kv->n_ring;
}

void cllm_build_inputs(const cllm_build_args *args, cllm_graph_io *io) {
    cllm_context *ctx = args->ctx;
    const cllm_batch_shape *sh = &args->shape;
    memset(io, 0, sizeof(*io));
    io->tokens =
        cllm_tensor_set_name(cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, sh->n_tokens), "tokens");
    io->pos = cllm_tensor_set_name(cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, sh->n_tokens), "pos");
    if (sh->n_seqs == 0) {
        io->mask = cllm_tensor_set_name(
            cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, sh->n_kv, sh->n_tokens), "mask");
        cllm_tensor_set_input(io->mask);
        if (args->hp->n_swa > 0) {
            io->swa_mask = cllm_tensor_set_name(
                cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, swa_n_kv(args->kv, sh->n_kv), sh->n_tokens),
                "swa-mask");
            cllm_tensor_set_input(io->swa_mask);
        }
    }
    for (int i = 0; i < sh->n_seqs; i++) {
        const cllm_seq_shape q = sh->seqs[i];
        io->seq_mask[i] = cllm_tensor_set_name(
            cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, q.n_kv, q.n_tokens), "mask-%d", i);
        cllm_tensor_set_input(io->seq_mask[i]);
        if (args->hp->n_swa > 0) {
            io->seq_swa_mask[i] = cllm_tensor_set_name(
                cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, swa_n_kv(args->kv, q.n_kv), q.n_tokens),
                "swa-mask-%d", i);
            cllm_tensor_set_input(io->seq_swa_mask[i]);
        }
    }
    io->out_ids =
        cllm_tensor_set_name(cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, sh->n_outputs), "out_ids");
    cllm_tensor_set_input(io->tokens);
    cllm_tensor_set_input(io->pos);
    cllm_tensor_set_input(io->out_ids);
}

cllm_tensor *cllm_build_stage_in(const cllm_build_args *args, cllm_graph_io *io) {
    if (args->layer_begin <= 0) return NULL;
    io->act_in = cllm_tensor_set_name(
        cllm_tensor_new_2d(args->ctx, CLLM_TYPE_F32, args->hp->n_embd, args->shape.n_tokens),
        "act_in");
    cllm_tensor_set_input(io->act_in);
    io->tokens = NULL;
    return io->act_in;
}

cllm_tensor *cllm_build_stage_out(const cllm_build_args *args, cllm_graph_io *io, cllm_tensor *x) {
    io->act_out = cllm_tensor_set_name(x, "act_out");
    cllm_tensor_set_output(io->act_out);
    io->out_ids = NULL;
    io->logits = NULL;
    cllm_graph_build(args->graph, io->act_out);
    return io->act_out;
}

cllm_tensor *cllm_build_logits(const cllm_build_args *args, cllm_graph_io *io, cllm_tensor *x) {
    io->logits = args->shape.embd
                     ? cllm_tensor_set_name(x, "embd")
                     : cllm_tensor_set_name(cllm_mul_mat(args->ctx, args->w->output, x), "logits");
    cllm_tensor_set_output(io->logits);
    cllm_graph_build(args->graph, io->logits);
    return io->logits;
}

/* Rows [t0, t0 + n) of x [a, b, T] (dim 2): a view. */
static cllm_tensor *token_rows(cllm_context *ctx, cllm_tensor *x, int64_t t0, int64_t n) {
    return cllm_view_3d(ctx, x, x->ne[0], x->ne[1], n, x->nb[1], x->nb[2], (size_t)t0 * x->nb[2]);
}

/* Rows of one sequence's layer cache c that its attention reads: at most
 * all of them. */
static int64_t seq_kv_rows(const cllm_seq_shape *sq, const cllm_tensor *c) {
    return sq->n_kv < c->ne[1] ? sq->n_kv : c->ne[1];
}

/* Writes one sequence's k and v (its n_tokens rows) into its layer caches kc
 * and vc at position n_past (a ring wraps them, see cllm_kv_cache). With
 * `writes`, records the writes there (cllm_kv_writes_move) unless they wrap.
 * The copies go into the graph before any read of the caches (attend_cache),
 * so every later read comes after them. */
static void kv_write(const cllm_build_args *args, cllm_tensor *kc, cllm_tensor *vc,
                     const cllm_seq_shape *sq, cllm_tensor *k, cllm_tensor *v,
                     cllm_tensor **writes) {
    cllm_context *ctx = args->ctx;
    const cllm_hparams *hp = args->hp;
    const int64_t rows = kc->ne[1], n = sq->n_tokens;
    const bool ring = rows < args->kv->n_ctx;
    CLLM_ASSERTF(ring ? n + hp->n_swa - 1 <= rows : sq->n_past + n <= rows,
                 "attention: %lld + %lld tokens in a %s of %lld rows", (long long)sq->n_past,
                 (long long)n, ring ? "ring" : "cache", (long long)rows);
    /* the rows past a ring's end go to its start */
    const int64_t at = sq->n_past % rows;
    const int64_t n1 = at + n <= rows ? n : rows - at; /* before the end */
    cllm_tensor *src[2] = {k, v}, *cache[2] = {kc, vc};
    for (int i = 0; i < 2; i++) {
        cllm_tensor *c = cache[i];
        cllm_tensor *dst = cllm_view_2d(ctx, c, c->ne[0], n1, c->nb[1], (size_t)at * c->nb[1]);
        cllm_tensor *part = n1 == n ? src[i] : token_rows(ctx, src[i], 0, n1);
        cllm_tensor *cpy = cllm_cpy(ctx, part, dst);
        cllm_graph_build(args->graph, cpy);
        if (writes && n1 == n) writes[2 * i] = dst, writes[2 * i + 1] = cpy;
        if (n1 < n) {
            cllm_tensor *dst2 = cllm_view_2d(ctx, c, c->ne[0], n - n1, c->nb[1], 0);
            cllm_graph_build(args->graph, cllm_cpy(ctx, token_rows(ctx, src[i], n1, n - n1), dst2));
        }
    }
}

/* One sequence's attention over the first n_kv rows of its layer caches kc
 * and vc (written by kv_write) with `mask`. Returns
 * [head_dim_v * n_head, n_tokens]. */
static cllm_tensor *attend_cache(const cllm_build_args *args, int layer, cllm_tensor *kc,
                                 cllm_tensor *vc, const cllm_seq_shape *sq, cllm_tensor *q,
                                 cllm_tensor *mask, float scale) {
    cllm_context *ctx = args->ctx;
    const cllm_hparams *hp = args->hp;
    const int64_t hd_k = hp->head_dim_k, hd_v = hp->head_dim_v, n_kv = seq_kv_rows(sq, kc);
    CLLM_ASSERTF(mask->ne[0] == n_kv, "attention: a mask of %lld rows for %lld",
                 (long long)mask->ne[0], (long long)n_kv);

    /* [head_dim, n_kv, n_head_kv] views of the cache (a head of a block
     * type is whole blocks: cllm_shape_resolve checks it) */
    const size_t k_head = cllm_row_size(kc->type, hd_k), v_head = cllm_row_size(vc->type, hd_v);
    cllm_tensor *K = cllm_view_3d(ctx, kc, hd_k, n_kv, hp->n_head_kv, kc->nb[1], k_head, 0);
    cllm_tensor *V = cllm_view_3d(ctx, vc, hd_v, n_kv, hp->n_head_kv, vc->nb[1], v_head, 0);
    cllm_tensor *qp = cllm_permute(ctx, q, 0, 2, 1, 3); /* [hd, n_tokens, n_head] */

    cllm_tensor *out;
    if (!args->unfused_attn) {
        out = cllm_attn(ctx, qp, K, V, mask, scale); /* [hd_v, n_head, n_tokens] */
    } else {
        cllm_tensor *kq = cllm_mul_mat(ctx, K, qp); /* [n_kv, n_tokens, n_head] */
        kq = cllm_soft_max(ctx, kq, mask, scale);
        cllm_tensor *kqv =
            cllm_mul_mat(ctx, cllm_transpose(ctx, V), kq); /* [hd_v, n_tokens, n_head] */
        out = cllm_cont(ctx, cllm_permute(ctx, kqv, 0, 2, 1, 3));
    }
    cllm_tensor_set_name(out, "attn-%d", layer);
    return cllm_reshape_2d(ctx, out, hd_v * hp->n_head, sq->n_tokens);
}

cllm_tensor *cllm_build_attention(const cllm_build_args *args, cllm_graph_io *io, int layer,
                                  cllm_tensor *q, cllm_tensor *k, cllm_tensor *v, float scale) {
    const cllm_batch_shape *sh = &args->shape;
    const cllm_kv_cache *kv = args->kv;
    if (sh->n_seqs == 0) {
        const cllm_seq_shape sq = cllm_batch_seq(sh, 0);
        cllm_tensor **wr =
            args->kv_writes ? args->kv_writes + (size_t)layer * CLLM_KV_WRITES_PER_LAYER : NULL;
        kv_write(args, kv->k[layer], kv->v[layer], &sq, k, v, wr);
        return attend_cache(args, layer, kv->k[layer], kv->v[layer], &sq, q, io->mask, scale);
    }
    /* several sequences: each attends to its own cache; their rows are
     * joined again in batch order. Every sequence's writes come first, then
     * the attention nodes one after the other, which a backend may run
     * together (the CPU's one-token attention: cllm_cpu_attn_group). */
    int64_t t0 = 0;
    for (int i = 0; i < sh->n_seqs; i++) {
        const cllm_seq_shape sq = sh->seqs[i];
        CLLM_ASSERTF(sq.seq >= 0 && sq.seq < kv->n_seq, "attention: sequence %d of %d", sq.seq,
                     kv->n_seq);
        const size_t c = (size_t)sq.seq * (size_t)kv->n_layer + (size_t)layer;
        /* item i's writes: block i of kv_writes (cllm_instance_set_write_pos) */
        cllm_tensor **wr =
            args->kv_writes
                ? args->kv_writes + ((size_t)i * (size_t)args->hp->n_layer + (size_t)layer) *
                                        CLLM_KV_WRITES_PER_LAYER
                : NULL;
        kv_write(args, kv->k[c], kv->v[c], &sq, token_rows(args->ctx, k, t0, sq.n_tokens),
                 token_rows(args->ctx, v, t0, sq.n_tokens), wr);
        t0 += sq.n_tokens;
    }
    CLLM_ASSERTF(t0 == sh->n_tokens, "attention: the sequences hold %lld of %lld tokens",
                 (long long)t0, (long long)sh->n_tokens);
    cllm_tensor *att[CLLM_MAX_SEQS] = {NULL};
    t0 = 0;
    for (int i = 0; i < sh->n_seqs; i++) {
        const cllm_seq_shape sq = sh->seqs[i];
        const size_t c = (size_t)sq.seq * (size_t)kv->n_layer + (size_t)layer;
        att[i] = attend_cache(args, layer, kv->k[c], kv->v[c], &sq,
                              token_rows(args->ctx, q, t0, sq.n_tokens), io->seq_mask[i], scale);
        /* into the graph now: one after the other, before the first join */
        cllm_graph_build(args->graph, att[i]);
        t0 += sq.n_tokens;
    }
    cllm_tensor *out = att[0];
    for (int i = 1; i < sh->n_seqs; i++) out = cllm_concat_rows(args->ctx, out, att[i]);
    return out;
}
