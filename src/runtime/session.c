/* Sessions: KV cache (state), planned compute memory, batched decoding. */
#include "runtime/session.h"
#include "alloc/galloc.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cllm_session {
    const cllm_model *model;
    cllm_session_params params;

    cllm_kv_cache kv;
    cllm_buffer *kv_buf; /* CLLM_MEM_STATE */

    cllm_backend *backend;
    cllm_galloc *galloc; /* owns the CLLM_MEM_COMPUTE buffer */
    cllm_context *gctx;  /* tensors of the graph being built (metadata) */
    cllm_graph *graph;

    int64_t n_past;
    float *logits; /* [n_vocab] of the last token */
    bool have_logits;
    float *mask_row; /* [n_ctx]: one row of the mask, staged */

    size_t planned[CLLM_MEM_COUNT];
};

cllm_session_params cllm_session_default_params(void) {
    return (cllm_session_params){.n_ctx = 0,
                                 .n_batch = 512,
                                 .kv_type = CLLM_TYPE_F16,
                                 .n_threads = 0,
                                 .unfused_attn = false};
}

static cllm_status kv_cache_init(cllm_session *s) {
    const cllm_hparams *hp = &s->model->hp;
    cllm_kv_cache *kv = &s->kv;
    kv->type = s->params.kv_type;
    kv->n_ctx = s->params.n_ctx;
    kv->n_layer = (int)hp->n_layer;
    kv->ctx = cllm_context_new(2 * kv->n_layer);
    kv->k = calloc((size_t)kv->n_layer, sizeof(*kv->k));
    kv->v = calloc((size_t)kv->n_layer, sizeof(*kv->v));
    if (!kv->ctx || !kv->k || !kv->v) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    for (int l = 0; l < kv->n_layer; l++) {
        kv->k[l] = cllm_tensor_new_2d(kv->ctx, kv->type, cllm_hparams_n_embd_k_gqa(hp), kv->n_ctx);
        kv->v[l] = cllm_tensor_new_2d(kv->ctx, kv->type, cllm_hparams_n_embd_v_gqa(hp), kv->n_ctx);
        cllm_tensor_set_name(kv->k[l], "cache_k-%d", l);
        cllm_tensor_set_name(kv->v[l], "cache_v-%d", l);
    }
    s->planned[CLLM_MEM_STATE] = cllm_layout_measure(kv->ctx, cllm_cpu_buffer_type());
    CLLM_TRY(cllm_layout_alloc(kv->ctx, cllm_cpu_buffer_type(), CLLM_MEM_STATE, &s->kv_buf));
    cllm_buffer_clear(s->kv_buf, 0);
    return CLLM_OK;
}

/* Builds the forward graph for `shape` into s->graph (tensors in s->gctx). */
static cllm_tensor *build_graph(cllm_session *s, const cllm_batch_shape *shape, cllm_graph_io *io) {
    cllm_context_reset(s->gctx);
    cllm_graph_reset(s->graph);
    const cllm_build_args args = {
        .hp = &s->model->hp,
        .w = s->model->weights,
        .kv = &s->kv,
        .shape = *shape,
        .unfused_attn = s->params.unfused_attn,
        .ctx = s->gctx,
        .graph = s->graph,
    };
    cllm_tensor *out = s->model->arch->build(&args, io);
    if (s->params.f32_activations) {
        for (int i = 0; i < s->graph->n_nodes; i++) {
            if (s->graph->nodes[i]->op == CLLM_OP_MUL_MAT) {
                cllm_mul_mat_set_prec(s->graph->nodes[i], CLLM_PREC_F32);
            }
        }
    }
    return out;
}

/* Measures the worst-case graphs, then allocates exactly what they need. */
static cllm_status plan_compute(cllm_session *s) {
    const int64_t n_ctx = s->params.n_ctx, n_batch = s->params.n_batch;
    const cllm_batch_shape worst[] = {
        {.n_tokens = n_batch, .n_past = n_ctx - n_batch, .n_kv = n_ctx, .n_outputs = 1},
        {.n_tokens = 1, .n_past = n_ctx - 1, .n_kv = n_ctx, .n_outputs = 1},
    };
    size_t workspace = 0;
    int widest = 0;
    for (int i = 0; i < (int)CLLM_ARRAY_SIZE(worst); i++) {
        cllm_graph_io io;
        build_graph(s, &worst[i], &io);
        CLLM_TRY(cllm_galloc_measure(s->galloc, s->graph, NULL, NULL));
        const size_t ws = cllm_backend_workspace_size(s->backend, s->graph);
        if (ws > workspace) {
            workspace = ws;
            widest = i;
        }
    }
    s->planned[CLLM_MEM_COMPUTE] = cllm_galloc_measured_size(s->galloc, 0);
    s->planned[CLLM_MEM_WORKSPACE] = workspace;
    CLLM_TRY(cllm_galloc_reserve(s->galloc));
    cllm_graph_io io;
    build_graph(s, &worst[widest], &io);
    return cllm_backend_reserve_workspace(s->backend, s->graph);
}

cllm_status cllm_session_new(const cllm_model *model, const cllm_session_params *params,
                             cllm_session **out) {
    cllm_session_params p = params ? *params : cllm_session_default_params();
    const cllm_hparams *hp = &model->hp;
    if (p.n_ctx == 0) p.n_ctx = CLLM_MIN(hp->n_ctx_train, 4096);
    if (p.n_ctx < 1 || p.n_ctx > (1 << 24)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "context size %lld is out of range",
                          (long long)p.n_ctx);
    }
    if (hp->learned_pos && p.n_ctx > hp->n_ctx_train) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "context size %lld exceeds the %lld positions %s was trained with",
                          (long long)p.n_ctx, (long long)hp->n_ctx_train, model->path);
    }
    if (p.n_batch < 1) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "batch size %lld is out of range",
                          (long long)p.n_batch);
    }
    p.n_batch = CLLM_MIN(p.n_batch, p.n_ctx);
    if (p.kv_type != CLLM_TYPE_F16 && p.kv_type != CLLM_TYPE_F32) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "KV cache type %s is not supported (f16 or f32)",
                          cllm_type_name(p.kv_type));
    }

    cllm_session *s = calloc(1, sizeof(*s));
    if (!s) return cllm_error(CLLM_ERR_NOMEM, "out of host memory for a session");
    s->model = model;
    s->params = p;
    cllm_status st = CLLM_ERR_NOMEM;
    const int graph_size = model->arch->graph_size(hp);
    s->gctx = cllm_context_new(graph_size);
    s->graph = cllm_graph_new(graph_size);
    s->logits = malloc((size_t)hp->n_vocab * sizeof(float));
    s->mask_row = malloc((size_t)p.n_ctx * sizeof(float));
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    s->galloc = cllm_galloc_new(&buft, 1);
    if (!s->gctx || !s->graph || !s->logits || !s->mask_row || !s->galloc) {
        cllm_error(st, "out of host memory for a session");
        goto fail;
    }
    if ((st = kv_cache_init(s)) != CLLM_OK) goto fail;
    if ((st = cllm_backend_cpu_new(p.n_threads, &s->backend)) != CLLM_OK) goto fail;
    if ((st = plan_compute(s)) != CLLM_OK) goto fail;
    s->planned[CLLM_MEM_WEIGHTS] = model->weights_planned;
    *out = s;
    return CLLM_OK;
fail:
    cllm_session_free(s);
    return st;
}

void cllm_session_free(cllm_session *s) {
    if (!s) return;
    cllm_galloc_free(s->galloc);
    cllm_backend_free(s->backend);
    cllm_buffer_free(s->kv_buf);
    cllm_context_free(s->kv.ctx);
    free(s->kv.k);
    free(s->kv.v);
    cllm_graph_free(s->graph);
    cllm_context_free(s->gctx);
    free(s->logits);
    free(s->mask_row);
    free(s);
}

/* Runs one batch of n tokens at n_past; the logits of its last token land in
 * s->logits. Does not change n_past. */
static cllm_status decode_batch(cllm_session *s, const int32_t *tokens, int64_t n) {
    const cllm_batch_shape shape = {
        .n_tokens = n, .n_past = s->n_past, .n_kv = s->n_past + n, .n_outputs = 1};
    cllm_graph_io io;
    build_graph(s, &shape, &io);
    CLLM_TRY(cllm_galloc_alloc_graph(s->galloc, s->graph, NULL, NULL));

    cllm_tensor_set(io.tokens, tokens, 0, (size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        const int32_t pos = (int32_t)(s->n_past + i);
        cllm_tensor_set(io.pos, &pos, (size_t)i * sizeof(pos), sizeof(pos));
        for (int64_t j = 0; j < shape.n_kv; j++) {
            s->mask_row[j] = j <= s->n_past + i ? 0.0f : -INFINITY;
        }
        cllm_tensor_set(io.mask, s->mask_row, (size_t)i * io.mask->nb[1],
                        (size_t)shape.n_kv * sizeof(float));
    }
    const int32_t last = (int32_t)(n - 1);
    cllm_tensor_set(io.out_ids, &last, 0, sizeof(last));

    CLLM_TRY(cllm_backend_graph_compute(s->backend, s->graph));
    cllm_tensor_get(io.logits, s->logits, 0, (size_t)s->model->hp.n_vocab * sizeof(float));
    return CLLM_OK;
}

cllm_status cllm_session_decode(cllm_session *s, const int32_t *tokens, int64_t n) {
    const int64_t n_vocab = s->model->hp.n_vocab;
    if (n <= 0) return cllm_error(CLLM_ERR_INVALID_ARG, "decode: no tokens");
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "decode: token %lld is %d, outside [0, %lld)",
                              (long long)i, tokens[i], (long long)n_vocab);
        }
    }
    if (n > s->params.n_ctx - s->n_past) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "context full: %lld tokens + %lld new exceed the context of %lld",
                          (long long)s->n_past, (long long)n, (long long)s->params.n_ctx);
    }
    const int64_t start = s->n_past;
    for (int64_t i = 0; i < n; i += s->params.n_batch) {
        const int64_t chunk = CLLM_MIN(s->params.n_batch, n - i);
        const cllm_status st = decode_batch(s, tokens + i, chunk);
        if (st != CLLM_OK) {
            s->n_past = start;
            s->have_logits = false;
            return st;
        }
        s->n_past += chunk;
    }
    s->have_logits = true;
    return CLLM_OK;
}

const float *cllm_session_logits(const cllm_session *s) {
    return s->have_logits ? s->logits : NULL;
}

int64_t cllm_session_n_past(const cllm_session *s) { return s->n_past; }
int64_t cllm_session_n_ctx(const cllm_session *s) { return s->params.n_ctx; }
int64_t cllm_session_n_vocab(const cllm_session *s) { return s->model->hp.n_vocab; }

void cllm_session_reset(cllm_session *s) {
    s->n_past = 0;
    s->have_logits = false;
}

cllm_memory_report cllm_session_memory(const cllm_session *s) {
    cllm_memory_report r;
    memcpy(r.planned, s->planned, sizeof(r.planned));
    r.allocated[CLLM_MEM_WEIGHTS] = cllm_buffer_size(s->model->weights_buf);
    r.allocated[CLLM_MEM_STATE] = cllm_buffer_size(s->kv_buf);
    const cllm_buffer *compute = cllm_galloc_buffer(s->galloc, 0);
    r.allocated[CLLM_MEM_COMPUTE] = compute ? cllm_buffer_size(compute) : 0;
    r.allocated[CLLM_MEM_WORKSPACE] = cllm_backend_workspace_allocated(s->backend);
    return r;
}
