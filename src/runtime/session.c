/* Sessions: KV cache (state), planned compute memory, batched decoding. */
#include "runtime/session.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cllm_session {
    const cllm_model *model;
    cllm_session_params params;

    /* the KV cache: each layer's K and V on the device of its layer */
    cllm_kv_cache kv;
    cllm_context *kv_ctx[CLLM_MODEL_MAX_DEVICES];
    cllm_buffer *kv_buf[CLLM_MODEL_MAX_DEVICES]; /* CLLM_MEM_STATE */

    /* one backend per device that holds part of the model (the CPU last) */
    int n_backends;
    cllm_backend *backends[CLLM_MODEL_MAX_DEVICES];
    int backend_device[CLLM_MODEL_MAX_DEVICES]; /* index into model->devices */
    cllm_sched *sched;                          /* owns the CLLM_MEM_COMPUTE buffers */
    cllm_context *gctx;                         /* tensors of the graph being built (metadata) */
    cllm_graph *graph;

    int64_t n_past;
    float *logits; /* [n_vocab] of the last token */
    bool have_logits;
    float *mask_row; /* [n_ctx]: one row of the mask, staged */

    size_t planned[CLLM_MODEL_MAX_DEVICES][CLLM_MEM_COUNT];
};

static size_t cllm_buffer_size_or_0(const cllm_buffer *b) { return b ? cllm_buffer_size(b) : 0; }

cllm_session_params cllm_session_default_params(void) {
    return (cllm_session_params){.n_ctx = 0,
                                 .n_batch = 512,
                                 .kv_type = CLLM_TYPE_F16,
                                 .n_threads = 0,
                                 .unfused_attn = false};
}

static cllm_status kv_cache_init(cllm_session *s) {
    const cllm_model *m = s->model;
    const cllm_hparams *hp = &m->hp;
    cllm_kv_cache *kv = &s->kv;
    kv->type = s->params.kv_type;
    kv->n_ctx = s->params.n_ctx;
    kv->n_layer = (int)hp->n_layer;
    kv->k = calloc((size_t)kv->n_layer, sizeof(*kv->k));
    kv->v = calloc((size_t)kv->n_layer, sizeof(*kv->v));
    if (!kv->k || !kv->v) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    for (int d = 0; d < m->n_devices; d++) {
        s->kv_ctx[d] = cllm_context_new(2 * kv->n_layer);
        if (!s->kv_ctx[d]) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    }
    /* per device in layer order: the layout the fit planner predicts */
    for (int l = 0; l < kv->n_layer; l++) {
        cllm_context *ctx = s->kv_ctx[m->layer_device[l]];
        kv->k[l] = cllm_tensor_new_2d(ctx, kv->type, cllm_hparams_n_embd_k_gqa(hp), kv->n_ctx);
        kv->v[l] = cllm_tensor_new_2d(ctx, kv->type, cllm_hparams_n_embd_v_gqa(hp), kv->n_ctx);
        cllm_tensor_set_name(kv->k[l], "cache_k-%d", l);
        cllm_tensor_set_name(kv->v[l], "cache_v-%d", l);
    }
    for (int d = 0; d < m->n_devices; d++) {
        if (cllm_context_n_tensors(s->kv_ctx[d]) == 0) continue;
        cllm_buffer_type *buft =
            d == m->n_devices - 1 ? cllm_cpu_buffer_type() : cllm_device_buffer_type(m->devices[d]);
        s->planned[d][CLLM_MEM_STATE] = cllm_layout_measure(s->kv_ctx[d], buft);
        CLLM_TRY(cllm_layout_alloc(s->kv_ctx[d], buft, CLLM_MEM_STATE, &s->kv_buf[d]));
        cllm_buffer_clear(s->kv_buf[d], 0);
    }
    return CLLM_OK;
}

/* A backend for every device that holds weights or state (the CPU always,
 * last), as the fit planner's probes have them. */
static cllm_status backends_init(cllm_session *s) {
    const cllm_model *m = s->model;
    const int cpu = m->n_devices - 1;
    for (int d = 0; d < cpu; d++) {
        if (!m->device_weights[d] && !s->kv_buf[d]) continue;
        CLLM_TRY(cllm_device_init_backend(m->devices[d], NULL, &s->backends[s->n_backends]));
        s->backend_device[s->n_backends++] = d;
    }
    CLLM_TRY(cllm_backend_cpu_new(s->params.n_threads, &s->backends[s->n_backends]));
    s->backend_device[s->n_backends++] = cpu;
    return cllm_sched_new(s->backends, s->n_backends, NULL, &s->sched);
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
    for (int i = 0; i < (int)CLLM_ARRAY_SIZE(worst); i++) {
        cllm_graph_io io;
        build_graph(s, &worst[i], &io);
        CLLM_TRY(cllm_sched_reserve(s->sched, s->graph));
    }
    for (int b = 0; b < s->n_backends; b++) {
        const int d = s->backend_device[b];
        s->planned[d][CLLM_MEM_COMPUTE] = cllm_sched_compute_planned(s->sched, b);
        s->planned[d][CLLM_MEM_WORKSPACE] = cllm_sched_workspace_planned(s->sched, b);
    }
    return cllm_sched_alloc_buffers(s->sched);
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
    if (!s->gctx || !s->graph || !s->logits || !s->mask_row) {
        cllm_error(st, "out of host memory for a session");
        goto fail;
    }
    if ((st = kv_cache_init(s)) != CLLM_OK) goto fail;
    if ((st = backends_init(s)) != CLLM_OK) goto fail;
    if ((st = plan_compute(s)) != CLLM_OK) goto fail;
    for (int d = 0; d < model->n_devices; d++) {
        s->planned[d][CLLM_MEM_WEIGHTS] = d == model->n_devices - 1
                                              ? model->weights_planned
                                              : cllm_buffer_size_or_0(model->device_weights[d]);
    }
    *out = s;
    return CLLM_OK;
fail:
    cllm_session_free(s);
    return st;
}

void cllm_session_free(cllm_session *s) {
    if (!s) return;
    cllm_sched_free(s->sched);
    for (int b = 0; b < s->n_backends; b++) cllm_backend_free(s->backends[b]);
    for (int d = 0; d < CLLM_MODEL_MAX_DEVICES; d++) {
        cllm_buffer_free(s->kv_buf[d]);
        cllm_context_free(s->kv_ctx[d]);
    }
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
    CLLM_TRY(cllm_sched_alloc_graph(s->sched, s->graph));

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

    CLLM_TRY(cllm_sched_graph_compute(s->sched, s->graph));
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

cllm_memory_report cllm_session_memory_on(const cllm_session *s, const cllm_device *dev) {
    cllm_memory_report r = {0};
    const cllm_model *m = s->model;
    int d = -1;
    for (int i = 0; i < m->n_devices && d < 0; i++) {
        if (m->devices[i] == dev) d = i;
    }
    if (d < 0) return r;
    memcpy(r.planned, s->planned[d], sizeof(r.planned));
    r.allocated[CLLM_MEM_WEIGHTS] = d == m->n_devices - 1
                                        ? cllm_buffer_size_or_0(m->weights_buf)
                                        : cllm_buffer_size_or_0(m->device_weights[d]);
    r.allocated[CLLM_MEM_STATE] = cllm_buffer_size_or_0(s->kv_buf[d]);
    for (int b = 0; b < s->n_backends; b++) {
        if (s->backend_device[b] != d) continue;
        r.allocated[CLLM_MEM_COMPUTE] = cllm_sched_compute_allocated(s->sched, b);
        r.allocated[CLLM_MEM_WORKSPACE] = cllm_backend_workspace_allocated(s->backends[b]);
    }
    return r;
}

cllm_memory_report cllm_session_memory(const cllm_session *s) {
    return cllm_session_memory_on(s, s->model->devices[s->model->n_devices - 1]);
}

const cllm_model *cllm_session_model(const cllm_session *s) { return s->model; }
