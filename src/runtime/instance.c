#include "runtime/instance.h"
#include "core/hostmem.h"

#include <stdlib.h>
#include <string.h>

/* ---- the KV cache ------------------------------------------------------ */

cllm_status cllm_kv_cache_init(cllm_kv_cache *kv, const cllm_hparams *hp, const cllm_shape *sh) {
    memset(kv, 0, sizeof(*kv));
    kv->type_k = sh->type_k, kv->type_v = sh->type_v;
    kv->n_ctx = sh->n_ctx;
    kv->n_ring = cllm_kv_ring_rows(hp, sh->n_ctx, sh->n_batch);
    kv->n_layer = (int)hp->n_layer;
    kv->n_seq = sh->n_seq;
    const int n = kv->n_seq * kv->n_layer;
    kv->ctx = cllm_context_new(2 * n);
    kv->k = cllm_calloc((size_t)CLLM_MAX(n, 1), sizeof(*kv->k));
    kv->v = cllm_calloc((size_t)CLLM_MAX(n, 1), sizeof(*kv->v));
    if (!kv->ctx || !kv->k || !kv->v) {
        cllm_kv_cache_free(kv);
        return cllm_error(CLLM_ERR_NOMEM, "out of host memory for a KV cache");
    }
    for (int i = 0; i < n; i++) {
        const int l = i % kv->n_layer, seq = i / kv->n_layer;
        const int64_t rows = hp->n_swa > 0 && hp->swa_layer[l] ? kv->n_ring : kv->n_ctx;
        kv->k[i] = cllm_tensor_new_2d(kv->ctx, kv->type_k, cllm_hparams_n_embd_k_gqa(hp), rows);
        kv->v[i] = cllm_tensor_new_2d(kv->ctx, kv->type_v, cllm_hparams_n_embd_v_gqa(hp), rows);
        if (seq == 0) {
            cllm_tensor_set_name(kv->k[i], "cache_k-%d", l);
            cllm_tensor_set_name(kv->v[i], "cache_v-%d", l);
        } else {
            cllm_tensor_set_name(kv->k[i], "cache_k-%d.%d", l, seq);
            cllm_tensor_set_name(kv->v[i], "cache_v-%d.%d", l, seq);
        }
    }
    return CLLM_OK;
}

void cllm_kv_cache_free(cllm_kv_cache *kv) {
    cllm_context_free(kv->ctx);
    cllm_free(kv->k);
    cllm_free(kv->v);
    memset(kv, 0, sizeof(*kv));
}

/* ---- instances --------------------------------------------------------- */

void cllm_instance_free(cllm_instance *in) {
    if (!in) return;
    cllm_sched_free(in->sched);
    for (int b = 0; b < in->n_backends; b++) {
        if (in->own_backend[b]) cllm_backend_free(in->backends[b]);
    }
    for (int d = 0; d < CLLM_PLACE_MAX_DEVICES; d++) cllm_buffer_free(in->kv_buf[d]);
    cllm_kv_cache_free(&in->kv);
    cllm_graph_free(in->graph);
    cllm_context_free(in->gctx);
    cllm_free(in->kv_writes);
    memset(in, 0, sizeof(*in));
}

/* Items a batch of a session of `shape` may hold (its sequences, and the
 * tokens of speculative drafts as items of their own). */
static int max_items(const cllm_shape *shape) { return cllm_shape_max_items(shape); }

/* Entries of cllm_instance.kv_writes: per item of a batch, per layer. */
static size_t kv_writes_count(const cllm_hparams *hp, const cllm_shape *shape) {
    return (size_t)CLLM_KV_WRITES_PER_LAYER * (size_t)CLLM_MAX(hp->n_layer, 1) *
           (size_t)max_items(shape);
}

cllm_tensor *cllm_instance_build(cllm_instance *in, const cllm_batch_shape *b, cllm_graph_io *io) {
    cllm_context_reset(in->gctx);
    cllm_graph_reset(in->graph);
    memset(in->kv_writes, 0, kv_writes_count(in->a.hp, &in->a.shape) * sizeof(*in->kv_writes));
    int l0, l1;
    cllm_placement_layer_range(in->a.pl, &l0, &l1);
    const cllm_build_args args = {
        .layer_begin = l0,
        .layer_end = l1,
        .hp = in->a.hp,
        .w = in->a.w,
        .kv = &in->kv,
        .shape = *b,
        .unfused_attn = in->a.unfused_attn,
        .ctx = in->gctx,
        .graph = in->graph,
        .kv_writes = in->kv_writes,
    };
    cllm_tensor *out = in->a.arch->build(&args, io);
    /* a step of several sequences, one token each: every sequence's columns
     * as they would be alone, so that none depends on the others; when
     * other sequences' chunks of several tokens follow the one-token ones
     * (prompts that join a step), the one-token columns of every product
     * of the token rows as alone, the rest as in a batch of their own */
    int64_t n_alone = 0;
    if (b->n_seqs > 1) {
        while (n_alone < b->n_seqs && b->seqs[n_alone].n_tokens == 1) n_alone++;
    }
    for (int i = 0; i < in->graph->n_nodes; i++) {
        cllm_tensor *t = in->graph->nodes[i];
        if (t->op != CLLM_OP_MUL_MAT) continue;
        if (in->a.f32_activations) cllm_mul_mat_set_prec(t, CLLM_PREC_F32);
        if (b->n_seqs > 1 && n_alone == b->n_seqs) {
            cllm_mul_mat_set_cols_alone(t, true);
        } else if (n_alone > 0 && t->src[1]->ne[1] == b->n_tokens && t->src[1]->ne[2] == 1 &&
                   t->src[1]->ne[3] == 1) {
            cllm_mul_mat_set_n_alone(t, n_alone); /* a weight times the token rows */
        }
    }
    /* several sequences, one logit row each (prompts read together): each
     * row through the output as a batch of its own sends its one row, so
     * that with chunks aligned to 8 columns (the kernels' groups) a prompt
     * read with others gives bit for bit what it gives alone */
    if (b->n_seqs > 1 && !b->embd && io->logits && io->logits->ne[1] == b->n_seqs) {
        cllm_mul_mat_set_cols_alone(io->logits, true);
    }
    return out;
}

void cllm_instance_set_write_pos(cllm_instance *in, int item, int64_t n_past) {
    int l0, l1; /* a stage of a pipeline writes only its layers */
    cllm_placement_layer_range(in->a.pl, &l0, &l1);
    const size_t layer0 = (size_t)item * (size_t)CLLM_MAX(in->a.hp->n_layer, 1) + (size_t)l0;
    cllm_kv_writes_move(in->kv_writes + layer0 * CLLM_KV_WRITES_PER_LAYER, l1 - l0, n_past);
}

/* The state buffers, per device: measure-mode or real (cleared). */
static cllm_status kv_place(cllm_instance *in) {
    const cllm_placement *pl = in->a.pl;
    size_t bytes[CLLM_PLACE_MAX_DEVICES];
    CLLM_TRY(cllm_place_kv(pl, in->kv.ctx, bytes, NULL));
    for (int d = 0; d < pl->n_devices; d++) {
        in->bytes[d][CLLM_MEM_STATE] = bytes[d];
        if (!bytes[d]) continue;
        cllm_buffer_type *buft = cllm_placement_buft(pl, d);
        if (in->a.measure) {
            in->kv_buf[d] = cllm_buffer_new_measure(buft, bytes[d]);
            if (!in->kv_buf[d]) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
        } else {
            CLLM_TRY(cllm_buffer_type_alloc(buft, bytes[d], CLLM_MEM_STATE, &in->kv_buf[d]));
            cllm_buffer_clear(in->kv_buf[d], 0);
        }
    }
    (void)cllm_place_kv(pl, in->kv.ctx, bytes, in->kv_buf); /* checked above */
    return CLLM_OK;
}

/* A backend for every device that holds weights or state, the CPU last. */
static cllm_status backends_init(cllm_instance *in) {
    const cllm_placement *pl = in->a.pl;
    const int cpu = cllm_placement_cpu(pl);
    for (int d = 0; d < pl->n_devices; d++) {
        if (d != cpu && !in->bytes[d][CLLM_MEM_WEIGHTS] && !in->bytes[d][CLLM_MEM_STATE]) continue;
        const int b = in->n_backends;
        if (in->a.backends && in->a.backends[d]) {
            in->backends[b] = in->a.backends[d];
        } else {
            const cllm_backend_params bp = {.n_threads = in->a.shape.n_threads};
            const cllm_status st = cllm_device_init_backend(pl->devices[d], &bp, &in->backends[b]);
            if (st != CLLM_OK) return st;
            in->own_backend[b] = true;
        }
        in->backend_device[b] = d;
        in->n_backends++;
    }
    return cllm_sched_new(in->backends, in->n_backends, NULL, &in->sched);
}

cllm_status cllm_instance_init(cllm_instance *in, const cllm_instance_args *args) {
    memset(in, 0, sizeof(*in));
    in->a = *args;
    const cllm_placement *pl = args->pl;
    cllm_status st;
    int l0, l1;
    cllm_placement_layer_range(pl, &l0, &l1);
    if ((l0 > 0 || l1 < pl->n_layer) && !args->arch->layer_ranges) {
        memset(in, 0, sizeof(*in));
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "architecture %s cannot run a range of its layers (a pipeline stage)",
                          args->arch->name);
    }
    size_t wbytes[CLLM_PLACE_MAX_DEVICES];
    if ((st = cllm_place_weights(pl, args->w, wbytes, NULL)) != CLLM_OK) {
        memset(in, 0, sizeof(*in));
        return st;
    }
    for (int d = 0; d < pl->n_devices; d++) in->bytes[d][CLLM_MEM_WEIGHTS] = wbytes[d];

    /* with several items, each layer's attention is built per item (views,
     * the KV writes, the attention, the join): 32 tensors at most */
    in->max_items = max_items(&args->shape);
    const int gsize =
        args->arch->graph_size(args->hp) + in->max_items * (32 * (int)args->hp->n_layer + 8);
    in->gctx = cllm_context_new(gsize);
    in->graph = cllm_graph_new(gsize);
    in->kv_writes = cllm_calloc(kv_writes_count(args->hp, &args->shape), sizeof(*in->kv_writes));
    if (!in->gctx || !in->graph || !in->kv_writes) {
        st = cllm_error(CLLM_ERR_NOMEM, "out of host memory for a graph");
        goto fail;
    }
    if ((st = cllm_kv_cache_init(&in->kv, args->hp, &args->shape)) != CLLM_OK) goto fail;
    if ((st = kv_place(in)) != CLLM_OK) goto fail;
    if ((st = backends_init(in)) != CLLM_OK) goto fail;

    cllm_batch_shape worst[CLLM_SHAPE_N_WORST];
    const int n_worst = cllm_shape_worst(&args->shape, worst);
    for (int i = 0; i < n_worst; i++) {
        cllm_graph_io io;
        cllm_instance_build(in, &worst[i], &io);
        if ((st = cllm_sched_reserve(in->sched, in->graph)) != CLLM_OK) goto fail;
    }
    for (int b = 0; b < in->n_backends; b++) {
        const int d = in->backend_device[b];
        in->bytes[d][CLLM_MEM_COMPUTE] = cllm_sched_compute_planned(in->sched, b);
        in->bytes[d][CLLM_MEM_WORKSPACE] = cllm_sched_workspace_planned(in->sched, b);
    }
    if (!args->measure && (st = cllm_sched_alloc_buffers(in->sched)) != CLLM_OK) goto fail;
    return CLLM_OK;
fail:
    cllm_instance_free(in);
    return st;
}
