/* Placement, session shapes, static layout and instances (place.h): the
 * code shared by the fit planner, model loading and sessions. */
#include "core/hostmem.h"
#include "runtime/place.h"

#include <stdlib.h>
#include <string.h>

/* ---- placement --------------------------------------------------------- */

static cllm_status placement_layers(cllm_placement *pl, int n_layer) {
    pl->n_layer = n_layer;
    pl->layer_device = cllm_calloc((size_t)CLLM_MAX(n_layer, 1), sizeof(int));
    if (!pl->layer_device) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    const int cpu = cllm_placement_cpu(pl);
    for (int l = 0; l < n_layer; l++) pl->layer_device[l] = cpu;
    pl->output_device = cpu;
    return CLLM_OK;
}

cllm_status cllm_placement_init_devices(cllm_placement *pl, int n_layer) {
    memset(pl, 0, sizeof(*pl));
    cllm_device *cpu = NULL;
    for (int i = 0; i < cllm_registry_device_count(); i++) {
        cllm_device *d = cllm_registry_device(i);
        if (cllm_device_kind_of(d) == CLLM_DEVICE_CPU) {
            if (!cpu) cpu = d;
            continue;
        }
        if (pl->n_devices < CLLM_PLACE_MAX_DEVICES - 1) pl->devices[pl->n_devices++] = d;
    }
    if (!cpu) return cllm_error(CLLM_ERR_BACKEND, "no CPU device");
    pl->devices[pl->n_devices++] = cpu;
    return placement_layers(pl, n_layer);
}

cllm_status cllm_placement_init_cpu(cllm_placement *pl, int n_layer) {
    memset(pl, 0, sizeof(*pl));
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    if (!cpu) return cllm_error(CLLM_ERR_BACKEND, "no CPU device");
    pl->devices[pl->n_devices++] = cpu;
    return placement_layers(pl, n_layer);
}

cllm_status cllm_placement_copy(cllm_placement *dst, const cllm_placement *src) {
    *dst = *src;
    dst->layer_device = NULL;
    dst->streamed = NULL;
    dst->keep = NULL;
    CLLM_TRY(placement_layers(dst, src->n_layer));
    memcpy(dst->layer_device, src->layer_device, (size_t)src->n_layer * sizeof(int));
    dst->output_device = src->output_device;
    if (src->streamed) {
        dst->streamed = cllm_malloc((size_t)CLLM_MAX(src->n_layer, 1));
        if (!dst->streamed) {
            cllm_placement_free(dst);
            return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
        }
        memcpy(dst->streamed, src->streamed, (size_t)src->n_layer);
    }
    if (src->keep) {
        dst->keep = cllm_malloc((size_t)CLLM_MAX(src->n_keep, 1));
        if (!dst->keep) {
            cllm_placement_free(dst);
            return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
        }
        memcpy(dst->keep, src->keep, (size_t)src->n_keep);
    }
    return CLLM_OK;
}

void cllm_placement_free(cllm_placement *pl) {
    if (!pl) return;
    cllm_free(pl->layer_device);
    pl->layer_device = NULL;
    cllm_free(pl->streamed);
    pl->streamed = NULL;
    cllm_free(pl->keep);
    pl->keep = NULL;
    pl->n_keep = 0;
}

cllm_status cllm_placement_set_streamed(cllm_placement *pl, int first, int n) {
    if (!pl->streamed) {
        if (n == 0) return CLLM_OK;
        pl->streamed = cllm_calloc((size_t)CLLM_MAX(pl->n_layer, 1), 1);
        if (!pl->streamed) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    }
    if (n == 0) memset(pl->streamed, 0, (size_t)pl->n_layer);
    for (int l = first; l < first + n && l < pl->n_layer; l++) pl->streamed[l] = 1;
    return CLLM_OK;
}

bool cllm_placement_weight_streamed(const cllm_placement *pl, const cllm_weights *w, int i) {
    const int g = cllm_weights_group(w, i);
    return pl->streamed && g >= 0 && g < pl->n_layer && pl->streamed[g] &&
           !(pl->keep && i < pl->n_keep && pl->keep[i]);
}

cllm_status cllm_placement_set_kept(cllm_placement *pl, const cllm_weights *w, int i, bool keep) {
    const int n = cllm_context_n_tensors(w->ctx);
    if (!pl->keep) {
        if (!keep) return CLLM_OK;
        pl->keep = cllm_calloc((size_t)CLLM_MAX(n, 1), 1);
        if (!pl->keep) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
        pl->n_keep = n;
    }
    if (i >= 0 && i < pl->n_keep) pl->keep[i] = keep;
    return CLLM_OK;
}

void cllm_placement_clear_kept(cllm_placement *pl) {
    if (pl->keep) memset(pl->keep, 0, (size_t)pl->n_keep);
}

bool cllm_placement_layer_partial(const cllm_placement *pl, const cllm_weights *w, int l) {
    if (!pl->streamed || !pl->keep || l < 0 || l >= pl->n_layer || !pl->streamed[l]) return false;
    for (int i = 0; i < pl->n_keep && i < cllm_context_n_tensors(w->ctx); i++) {
        if (pl->keep[i] && cllm_weights_group(w, i) == l) return true;
    }
    return false;
}

int cllm_placement_n_streamed(const cllm_placement *pl) {
    int n = 0;
    for (int l = 0; pl->streamed && l < pl->n_layer; l++) n += pl->streamed[l] != 0;
    return n;
}

int cllm_placement_weight_device(const cllm_placement *pl, const cllm_weights *w, int i) {
    const int g = cllm_weights_group(w, i);
    if (g >= 0) return pl->layer_device[g];
    if (g == CLLM_WEIGHT_OUTPUT) return pl->output_device;
    if (g == CLLM_WEIGHT_INPUT && pl->no_input) {
        /* the last stage computes the logits with embeddings tied to them */
        const bool tied = w->output == w->tok_embd && pl->output_device != CLLM_PLACE_NONE;
        return tied ? pl->output_device : CLLM_PLACE_NONE;
    }
    return cllm_placement_cpu(pl);
}

void cllm_placement_restrict(cllm_placement *pl, int begin, int end) {
    for (int l = 0; l < pl->n_layer; l++) {
        if (l < begin || l >= end) pl->layer_device[l] = CLLM_PLACE_NONE;
    }
    if (end < pl->n_layer) pl->output_device = CLLM_PLACE_NONE;
    pl->no_input = begin > 0;
}

void cllm_placement_layer_range(const cllm_placement *pl, int *begin, int *end) {
    int b = 0, e = pl->n_layer;
    while (b < e && pl->layer_device[b] == CLLM_PLACE_NONE) b++;
    while (e > b && pl->layer_device[e - 1] == CLLM_PLACE_NONE) e--;
    *begin = b;
    *end = e;
}

cllm_buffer_type *cllm_placement_buft(const cllm_placement *pl, int d) {
    return cllm_device_buffer_type(pl->devices[d]);
}

/* Static tensors of ctx laid out per device, in creation order, each within
 * one piece of its device's allocations (a buffer above the buffer type's
 * max_size is allocated in pieces). CLLM_ERR_TOO_LARGE, before anything is
 * placed, for a tensor larger than a piece. */
static cllm_status lay_out(const cllm_placement *pl, cllm_context *ctx,
                           int (*dev_of)(const void *, int), const void *ud, size_t *bytes,
                           cllm_buffer *const *bufs) {
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const int d = dev_of(ud, i);
        if (d < 0) continue;
        cllm_buffer_type *buft = cllm_placement_buft(pl, d);
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        const size_t size = cllm_buffer_type_alloc_size(buft, t);
        if (size > cllm_buffer_type_piece_size(buft)) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "%s: %s (%zu bytes) exceeds the %zu-byte allocations of %s",
                              cllm_device_name(pl->devices[d]), t->name, size,
                              cllm_buffer_type_piece_size(buft), cllm_buffer_type_name(buft));
        }
    }
    size_t off[CLLM_PLACE_MAX_DEVICES] = {0};
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const int d = dev_of(ud, i);
        if (d < 0) continue; /* another host's (CLLM_PLACE_NONE), or streamed */
        cllm_buffer_type *buft = cllm_placement_buft(pl, d);
        const size_t size = cllm_buffer_type_alloc_size(buft, t);
        off[d] = cllm_buffer_type_place_offset(
            buft, cllm_align_up(off[d], cllm_buffer_type_alignment(buft)), size);
        if (bufs && bufs[d]) cllm_buffer_place_tensor(bufs[d], t, off[d]);
        off[d] += size;
    }
    for (int d = 0; d < CLLM_PLACE_MAX_DEVICES; d++) bytes[d] = d < pl->n_devices ? off[d] : 0;
    return CLLM_OK;
}

typedef struct weights_of {
    const cllm_placement *pl;
    const cllm_weights *w;
} weights_of;

static int weight_dev(const void *ud, int i) {
    const weights_of *wo = ud;
    if (cllm_placement_weight_streamed(wo->pl, wo->w, i)) return -1;
    return cllm_placement_weight_device(wo->pl, wo->w, i);
}

cllm_status cllm_place_weights(const cllm_placement *pl, const cllm_weights *w, size_t *bytes,
                               cllm_buffer *const *bufs) {
    const weights_of wo = {pl, w};
    return lay_out(pl, w->ctx, weight_dev, &wo, bytes, bufs);
}

size_t cllm_place_mapped_bytes(const cllm_gguf *g) {
    const uint64_t size = cllm_gguf_file_size(g), data = cllm_gguf_data_offset(g);
    return data < size ? (size_t)(size - data) : 0; /* no tensors: data may lie past the end */
}

void cllm_place_mapped_span(const cllm_placement *pl, const cllm_weights *w, const cllm_gguf *g,
                            uint64_t *off, uint64_t *size) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < cllm_context_n_tensors(w->ctx); i++) {
        if (cllm_placement_weight_device(pl, w, i) == CLLM_PLACE_NONE) continue;
        const cllm_tensor *t = cllm_context_tensor(w->ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        lo = CLLM_MIN(lo, ti->offset);
        hi = CLLM_MAX(hi, ti->offset + ti->size);
    }
    *off = lo < hi ? lo : 0;
    *size = lo < hi ? hi - lo : 0;
}

/* Whether device dev writes (cpy from F32) and reads (attention, the other
 * cache F16) a KV cache of type t: asked of the device with nodes of one
 * small head, metadata only. F16 and F32 caches every device holds. */
static bool kv_type_on_device(cllm_device *dev, cllm_type t) {
    if (t == CLLM_TYPE_F16 || t == CLLM_TYPE_F32) return true;
    cllm_context *ctx = cllm_context_new(8);
    if (!ctx) return false; /* the CPU then */
    const int64_t d = 32;   /* a block of Q8_0 and Q4_0 */
    cllm_tensor *src = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, d, 1);
    cllm_tensor *row = cllm_tensor_new_2d(ctx, t, d, 1);
    cllm_tensor *q = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, d, 1, 1);
    cllm_tensor *c = cllm_tensor_new_3d(ctx, t, d, 1, 1);
    cllm_tensor *other = cllm_tensor_new_3d(ctx, CLLM_TYPE_F16, d, 1, 1);
    const bool ok = cllm_device_supports_op(dev, cllm_cpy(ctx, src, row)) &&
                    cllm_device_supports_op(dev, cllm_attn(ctx, q, c, other, NULL, 1.0f)) &&
                    cllm_device_supports_op(dev, cllm_attn(ctx, q, other, c, NULL, 1.0f));
    cllm_context_free(ctx);
    return ok;
}

int cllm_place_kv_device(const cllm_placement *pl, const cllm_tensor *t, int i) {
    const int d = pl->layer_device[(i / 2) % pl->n_layer];
    if (d < 0 || d == cllm_placement_cpu(pl)) return d;
    return kv_type_on_device(pl->devices[d], t->type) ? d : cllm_placement_cpu(pl);
}

typedef struct kv_of {
    const cllm_placement *pl;
    cllm_context *ctx;
} kv_of;

static int kv_dev(const void *ud, int i) {
    const kv_of *ko = ud;
    return cllm_place_kv_device(ko->pl, cllm_context_tensor(ko->ctx, i), i);
}

cllm_status cllm_place_kv(const cllm_placement *pl, cllm_context *kv_ctx, size_t *bytes,
                          cllm_buffer *const *bufs) {
    const kv_of ko = {pl, kv_ctx};
    return lay_out(pl, kv_ctx, kv_dev, &ko, bytes, bufs);
}

/* ---- shapes ------------------------------------------------------------ */

bool cllm_kv_type_supported(cllm_type t) {
    return t == CLLM_TYPE_F16 || t == CLLM_TYPE_F32 || t == CLLM_TYPE_BF16 || t == CLLM_TYPE_Q8_0 ||
           t == CLLM_TYPE_Q4_0;
}

/* A KV cache type for heads of head_dim values: one of the supported ones,
 * and a block type only where a head is whole blocks (attention reads a
 * head's part of a row). */
static cllm_status kv_type_check(cllm_type t, const char *which, int64_t head_dim,
                                 const char *who) {
    if ((unsigned)t >= CLLM_TYPE_COUNT || !cllm_kv_type_supported(t)) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: %s cache type %s is not supported (f16, f32, bf16, q8_0 or q4_0)",
                          who, which, (unsigned)t < CLLM_TYPE_COUNT ? cllm_type_name(t) : "?");
    }
    const int64_t blck = cllm_type_traits_of(t)->blck_size;
    if (head_dim % blck != 0) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: %s cache type %s needs a head size that is a multiple of %lld "
                          "(the model's is %lld)",
                          who, which, cllm_type_name(t), (long long)blck, (long long)head_dim);
    }
    return CLLM_OK;
}

/* Bytes of n values of KV cache type t (a multiple of its block). */
static size_t kv_bytes(cllm_type t, int64_t n) { return cllm_row_size(t, n); }

cllm_status cllm_shape_resolve(const cllm_hparams *hp, const cllm_shape_params *p, const char *who,
                               cllm_shape *out) {
    cllm_shape sh = {.n_ctx = p->n_ctx ? p->n_ctx : CLLM_MIN(hp->n_ctx_train, 4096),
                     .n_batch = p->n_batch ? p->n_batch : 512,
                     .type_k = p->type_k,
                     .type_v = p->type_v,
                     .n_threads = p->n_threads,
                     .n_seq = p->n_seq ? p->n_seq : 1};
    if (sh.n_ctx < 1 || sh.n_ctx > (1 << 24)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: context size %lld is out of range [1, %d]",
                          who, (long long)sh.n_ctx, 1 << 24);
    }
    if (hp->learned_pos && sh.n_ctx > hp->n_ctx_train) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: context size %lld exceeds the %lld positions the model was "
                          "trained with",
                          who, (long long)sh.n_ctx, (long long)hp->n_ctx_train);
    }
    if (sh.n_batch < 1) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: batch size %lld is out of range", who,
                          (long long)sh.n_batch);
    }
    CLLM_TRY(kv_type_check(sh.type_k, "K", hp->head_dim_k, who));
    CLLM_TRY(kv_type_check(sh.type_v, "V", hp->head_dim_v, who));
    if (sh.n_threads < 0 || sh.n_threads > 1024) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: %d threads is out of range [0, 1024]", who,
                          sh.n_threads);
    }
    if (sh.n_seq < 1 || sh.n_seq > CLLM_MAX_SEQS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: %d sequences is out of range [1, %d]", who,
                          sh.n_seq, CLLM_MAX_SEQS);
    }
    /* one sequence's batch fits its context; several share the batch */
    if (sh.n_seq == 1) sh.n_batch = CLLM_MIN(sh.n_batch, sh.n_ctx);
    if (sh.n_batch < sh.n_seq) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: a batch of %lld tokens cannot hold one token of each of %d "
                          "sequences",
                          who, (long long)sh.n_batch, sh.n_seq);
    }
    sh.n_outputs = p->all_logits ? sh.n_batch : sh.n_seq;
    sh.embeddings = p->embeddings;
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    if (!cpu) return cllm_error(CLLM_ERR_BACKEND, "%s: no CPU device", who);
    cllm_device_props props;
    cllm_device_get_props(cpu, &props);
    if (sh.n_threads == 0) sh.n_threads = props.n_cores;
    /* threads beyond the CPUs only wait for each other; the workspace is
     * planned per thread, so the count is settled here, for plan and session */
    const int n_cpus = props.n_threads_max;
    if (sh.n_threads > n_cpus) {
        CLLM_LOG_WARN("%s: %d threads requested but only %d CPUs available: using %d", who,
                      sh.n_threads, n_cpus, n_cpus);
        sh.n_threads = n_cpus;
    }
    *out = sh;
    return CLLM_OK;
}

cllm_status cllm_shape_check_within(const cllm_shape *sh, const cllm_shape *plan, const char *who) {
    const char *what = NULL;
    long long have = 0, max = 0;
    if (sh->n_ctx > plan->n_ctx) {
        what = "context size", have = sh->n_ctx, max = plan->n_ctx;
    } else if (sh->n_batch > plan->n_batch) {
        what = "batch size", have = sh->n_batch, max = plan->n_batch;
    } else if (sh->n_seq > plan->n_seq) {
        what = "sequences", have = sh->n_seq, max = plan->n_seq;
    } else if (sh->embeddings && !plan->embeddings) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "%s: embeddings were not planned for (the model's plan was made "
                          "without them)",
                          who);
    } else if (sh->n_outputs > plan->n_outputs) {
        what = "logit rows per batch (all_logits)", have = sh->n_outputs, max = plan->n_outputs;
    } else if (kv_bytes(sh->type_k, 256) > kv_bytes(plan->type_k, 256) ||
               kv_bytes(sh->type_v, 256) > kv_bytes(plan->type_v, 256)) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "%s: KV cache type %s/%s (K/V) is larger than the %s/%s the plan was "
                          "made for",
                          who, cllm_type_name(sh->type_k), cllm_type_name(sh->type_v),
                          cllm_type_name(plan->type_k), cllm_type_name(plan->type_v));
    } else if (sh->n_threads > plan->n_threads) {
        what = "CPU threads (workspace)", have = sh->n_threads, max = plan->n_threads;
    }
    if (!what) return CLLM_OK;
    return cllm_error(CLLM_ERR_TOO_LARGE,
                      "%s: %s %lld exceeds the %lld the model's plan was made for", who, what, have,
                      max);
}

int cllm_shape_max_items(const cllm_shape *sh) {
    return CLLM_MIN(CLLM_MAX(sh->n_seq, 1) + CLLM_SPEC_MAX_DRAFT, CLLM_MAX_SEQS);
}

int cllm_shape_worst(const cllm_shape *sh, cllm_batch_shape out[CLLM_SHAPE_N_WORST]) {
    const int64_t n_first = CLLM_MIN(sh->n_batch, sh->n_ctx);
    out[0] = (cllm_batch_shape){.n_tokens = n_first,
                                .n_past = sh->n_ctx - n_first,
                                .n_kv = sh->n_ctx,
                                .n_outputs = CLLM_MIN(sh->n_outputs, n_first)};
    out[1] = (cllm_batch_shape){
        .n_tokens = 1, .n_past = sh->n_ctx - 1, .n_kv = sh->n_ctx, .n_outputs = 1};
    int k = 2;
    if (sh->embeddings) { /* the hidden state of every row (cllm_session_seq_embed) */
        out[k] = out[0];
        out[k].n_outputs = n_first;
        out[k++].embd = true;
    }
    /* speculative drafts: one-token items of the sequences in turn */
    const int n_items = (int)CLLM_MIN((int64_t)cllm_shape_max_items(sh), sh->n_batch);
    if (n_items >= 2) {
        cllm_batch_shape *v = &out[k++];
        *v = (cllm_batch_shape){.n_seqs = n_items, .n_tokens = n_items, .n_outputs = n_items};
        for (int i = 0; i < n_items; i++) {
            v->seqs[i] = (cllm_seq_shape){.seq = i % CLLM_MAX(sh->n_seq, 1),
                                          .n_tokens = 1,
                                          .n_past = sh->n_ctx - 1,
                                          .n_kv = sh->n_ctx};
        }
    }
    if (sh->n_seq == 1) return k;
    /* all sequences in one batch: one takes the tokens the others leave
     * (at most its context), the others one each; then one token each */
    const int S = sh->n_seq;
    cllm_batch_shape *all = &out[k], *step = &out[k + 1];
    *all = (cllm_batch_shape){.n_seqs = S};
    *step = (cllm_batch_shape){.n_seqs = S, .n_tokens = S, .n_outputs = S};
    for (int i = 0; i < S; i++) {
        const int64_t n =
            i == 0 ? CLLM_MIN(sh->n_batch - (S - 1), sh->n_ctx) : 1; /* n_batch >= S */
        all->seqs[i] =
            (cllm_seq_shape){.seq = i, .n_tokens = n, .n_past = sh->n_ctx - n, .n_kv = sh->n_ctx};
        all->n_tokens += n;
        step->seqs[i] =
            (cllm_seq_shape){.seq = i, .n_tokens = 1, .n_past = sh->n_ctx - 1, .n_kv = sh->n_ctx};
    }
    all->n_outputs = sh->n_outputs == sh->n_batch ? all->n_tokens : S;
    /* the same batch with the one-token sequences first: a step that
     * prompt chunks join (their products split, cllm_instance_build) */
    out[k + 2] = *all;
    for (int i = 0; i < S; i++) out[k + 2].seqs[i] = all->seqs[(i + 1) % S];
    return k + 3;
}
