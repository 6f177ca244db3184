/* Sessions: KV cache (state), planned compute memory, batched decoding. */
#include "core/hostmem.h"
#include "runtime/session.h"
#include "runtime/place.h"
#include "runtime/instance.h"
#include "sched/sched.h"

#include <stdatomic.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cllm_session {
    const cllm_model *model;
    cllm_session_params params;
    cllm_shape shape; /* params resolved */

    /* the KV cache (each layer's on its layer's device), the backends, the
     * scheduler and the planned compute: the fit planner's code, in alloc mode */
    cllm_instance in;
    cllm_sched *sched; /* == in.sched */
    cllm_graph *graph; /* == in.graph */

    int64_t n_past;                  /* sequence 0's tokens (the single-sequence API's) */
    int64_t seq_past[CLLM_MAX_SEQS]; /* sequences 1 .. n_seq - 1 ([0] unused) */
    /* per sequence: the end of the furthest position written since the last
     * reset, which bounds what a sliding-window ring still holds */
    int64_t seq_high[CLLM_MAX_SEQS];
    /* [n_seq][n_vocab]: the logits of each sequence's last token decoded by
     * cllm_session_decode_seqs (sequence 0's go to `logits` as well) */
    float *seq_logits;
    bool seq_has_logits[CLLM_MAX_SEQS];
    /* logits kept by the last successful decode: all_logits: [n_last][n_vocab]
     * (n_batch rows allocated), else [1][n_vocab], the last token's */
    float *logits;
    int64_t n_logits; /* rows of `logits` that are valid (0: none) */
    int64_t n_last;   /* tokens of the decode call they come from */
    float *mask_row;  /* [n_ctx]: one row of the mask, staged */
    float *embd;      /* params.embeddings: [n_batch][n_embd], a batch's hidden states */

    /* the graph last built and planned (s->graph), run again while batches
     * keep its shape: only its inputs and KV write position change */
    bool graph_ready;
    bool graph_wraps;             /* its KV writes wrap a ring: it is not moved */
    bool no_reuse;                /* tests: build and plan every batch's graph */
    cllm_batch_shape graph_shape; /* its shape; n_past is not part of it */
    cllm_graph_io io;
    uint64_t n_builds;

    /* a stage of a pipeline that is not the last: the next stage, the
     * activations of a batch staged for it ([n_batch][n_embd]), and (the
     * first stage) the logits the link receives until they are all there,
     * [max(n_seq, n_outputs)][n_vocab] */
    bool has_link;
    cllm_session_link link;
    float *act;
    float *link_logits;
};

/* A one-token batch attends to the cache rows up to the next multiple of
 * SESSION_KV_PAD (at most n_ctx), the rows past its own hidden by the mask
 * (-INFINITY: the attention skips them, the softmax gives them exactly 0).
 * Its graph's shape then changes once every SESSION_KV_PAD tokens, and token
 * generation reuses one graph in between. The worst-case graphs measured at
 * creation attend to all n_ctx rows, so a padded graph fits the plan. */
enum { SESSION_KV_PAD = 256 };

int64_t cllm_session_prompt_chunk(int64_t n_batch, int64_t left) {
    if (left <= n_batch) return left;
    /* no last batch of fewer than CLLM_SESSION_MIN_CHUNK tokens: the one
     * before gives it that many */
    if (left - n_batch < CLLM_SESSION_MIN_CHUNK && n_batch >= 2 * CLLM_SESSION_MIN_CHUNK)
        return n_batch - CLLM_SESSION_MIN_CHUNK;
    return n_batch;
}

static size_t cllm_buffer_size_or_0(const cllm_buffer *b) { return b ? cllm_buffer_size(b) : 0; }

cllm_session_params cllm_session_default_params(void) {
    return (cllm_session_params){.n_ctx = 0,
                                 .n_batch = 512,
                                 .type_k = CLLM_TYPE_F16,
                                 .type_v = CLLM_TYPE_F16,
                                 .n_threads = 0,
                                 .unfused_attn = false,
                                 .all_logits = false,
                                 .n_seq = 1};
}

/* Cache rows a sequence's batch of n tokens at n_past attends to. */
static int64_t padded_n_kv(const cllm_session *s, int64_t n_past, int64_t n) {
    const int64_t n_kv = n_past + n;
    if (n != 1) return n_kv;
    return CLLM_MIN((n_kv + SESSION_KV_PAD - 1) / SESSION_KV_PAD * SESSION_KV_PAD, s->params.n_ctx);
}

/* Whether a graph built for a serves b once its KV writes are moved: the
 * same tokens, outputs and cache rows attended, per sequence. */
static bool same_graph_shape(const cllm_batch_shape *a, const cllm_batch_shape *b) {
    if (a->n_tokens != b->n_tokens || a->n_outputs != b->n_outputs || a->n_seqs != b->n_seqs ||
        a->embd != b->embd)
        return false;
    if (a->n_seqs == 0) return a->n_kv == b->n_kv;
    for (int i = 0; i < a->n_seqs; i++) {
        const cllm_seq_shape *x = &a->seqs[i], *y = &b->seqs[i];
        if (x->seq != y->seq || x->n_tokens != y->n_tokens || x->n_kv != y->n_kv) return false;
    }
    return true;
}

/* Whether some item of the batch writes past the end of a ring (its writes
 * are then not recorded, and its graph is not reused). */
static bool batch_wraps(const cllm_session *s, const cllm_batch_shape *shape) {
    for (int i = 0; i < CLLM_MAX(shape->n_seqs, 1); i++) {
        const cllm_seq_shape sq = cllm_batch_seq(shape, i);
        if (cllm_kv_write_wraps(&s->in.kv, sq.n_past, sq.n_tokens)) return true;
    }
    return false;
}

/* Makes s->graph (s->io its inputs and output) the planned graph of
 * `shape`: the last one, its KV writes moved to each sequence's n_past,
 * when the shape is the same, else a new one built and planned. */
static cllm_status prepare_graph(cllm_session *s, const cllm_batch_shape *shape) {
    const bool wraps = batch_wraps(s, shape);
    if (s->graph_ready && !s->no_reuse && !s->graph_wraps && !wraps &&
        same_graph_shape(&s->graph_shape, shape)) {
        for (int i = 0; i < CLLM_MAX(shape->n_seqs, 1); i++)
            cllm_instance_set_write_pos(&s->in, i, cllm_batch_seq(shape, i).n_past);
        return CLLM_OK;
    }
    s->graph_ready = false;
    cllm_instance_build(&s->in, shape, &s->io);
    s->n_builds++;
    CLLM_TRY(cllm_sched_alloc_graph(s->sched, s->graph));
    s->graph_shape = *shape;
    s->graph_wraps = wraps;
    s->graph_ready = true;
    return CLLM_OK;
}

/* Fills row t of the masks of a batch's sequence whose tokens end at
 * position `end` (exclusive): the causal one over n_kv rows and, for the
 * sliding-window layers, theirs over their ring. A mask that no layer reads
 * (the causal one of a Gemma 3 whose layers all slide) is not placed in the
 * graph's memory, and not written. */
static void fill_masks(cllm_session *s, cllm_tensor *mask, cllm_tensor *swa_mask, int64_t t,
                       int64_t pos, int64_t end) {
    if (mask && !mask->data) mask = NULL;
    if (swa_mask && !swa_mask->data) swa_mask = NULL;
    if (mask) {
        const int64_t n_kv = mask->ne[0];
        cllm_fill_mask_row(s->mask_row, n_kv, pos, 0);
        cllm_tensor_set(mask, s->mask_row, (size_t)t * mask->nb[1], (size_t)n_kv * sizeof(float));
    }
    if (swa_mask) {
        const int64_t n = swa_mask->ne[0];
        cllm_fill_swa_row(s->mask_row, n, s->in.kv.n_ring, end, pos, s->model->hp.n_swa);
        cllm_tensor_set(swa_mask, s->mask_row, (size_t)t * swa_mask->nb[1],
                        (size_t)n * sizeof(float));
    }
}

cllm_status cllm_session_new(const cllm_model *model, const cllm_session_params *params,
                             cllm_session **out) {
    if (!model || !out) return CLLM_NULL_ARG("the model or out");
    const cllm_session_params p = params ? *params : cllm_session_default_params();
    const cllm_hparams *hp = &model->hp;
    const cllm_shape_params shp = {.n_ctx = p.n_ctx,
                                   .n_batch = p.n_batch,
                                   .type_k = p.type_k,
                                   .type_v = p.type_v,
                                   .n_threads = p.n_threads,
                                   .all_logits = p.all_logits,
                                   .n_seq = p.n_seq,
                                   .embeddings = p.embeddings};
    cllm_shape shape;
    CLLM_TRY(cllm_shape_resolve(hp, &shp, "session", &shape));
    if (p.unfused_attn && ((shape.type_k != CLLM_TYPE_F16 && shape.type_k != CLLM_TYPE_F32) ||
                           (shape.type_v != CLLM_TYPE_F16 && shape.type_v != CLLM_TYPE_F32))) {
        return cllm_error(
            CLLM_ERR_INVALID_ARG,
            "session: the unfused attention reads only F16 or F32 caches (K %s, V %s)",
            cllm_type_name(shape.type_k), cllm_type_name(shape.type_v));
    }
    if (model->has_limit) {
        CLLM_TRY(cllm_shape_check_within(&shape, &model->limit, "session"));
        if (atomic_load(&model->n_sessions) >= model->limit_sessions) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "session: %d sessions are open, the model's plan was made for %d",
                              atomic_load(&model->n_sessions), model->limit_sessions);
        }
    }

    cllm_session *s = cllm_calloc(1, sizeof(*s));
    if (!s) return cllm_error(CLLM_ERR_NOMEM, "out of host memory for a session");
    s->model = model;
    s->params = p;
    s->params.n_ctx = shape.n_ctx;
    s->params.n_batch = shape.n_batch;
    s->shape = shape;
    cllm_status st = CLLM_ERR_NOMEM;
    s->logits = cllm_malloc((size_t)shape.n_outputs * (size_t)hp->n_vocab * sizeof(float));
    s->mask_row = cllm_malloc((size_t)shape.n_ctx * sizeof(float));
    s->seq_logits = cllm_malloc((size_t)shape.n_seq * (size_t)hp->n_vocab * sizeof(float));
    if (p.embeddings) {
        s->embd = cllm_malloc((size_t)shape.n_batch * (size_t)hp->n_embd * sizeof(float));
        if (!s->embd) {
            cllm_error(st, "out of host memory for a session");
            goto fail;
        }
    }
    if (model->partial) {
        s->act = cllm_malloc((size_t)shape.n_batch * (size_t)hp->n_embd * sizeof(float));
        const int64_t rows = CLLM_MAX((int64_t)shape.n_seq, shape.n_outputs);
        s->link_logits = cllm_malloc((size_t)rows * (size_t)hp->n_vocab * sizeof(float));
    }
    if (!s->logits || !s->mask_row || !s->seq_logits ||
        (model->partial && (!s->act || !s->link_logits))) {
        cllm_error(st, "out of host memory for a session");
        goto fail;
    }
    const cllm_instance_args ia = {.arch = model->arch,
                                   .hp = hp,
                                   .w = model->weights,
                                   .pl = &model->place,
                                   .shape = shape,
                                   .measure = false,
                                   .unfused_attn = p.unfused_attn,
                                   .f32_activations = p.f32_activations};
    if ((st = cllm_instance_init(&s->in, &ia)) != CLLM_OK) goto fail;
    s->sched = s->in.sched;
    s->graph = s->in.graph;
    /* the model's count of sessions is its only state that sessions change */
    atomic_fetch_add(&((cllm_model *)model)->n_sessions, 1);
    *out = s;
    return CLLM_OK;
fail:
    cllm_session_free(s);
    return st;
}

void cllm_session_free(cllm_session *s) {
    if (!s) return;
    if (s->sched) atomic_fetch_sub(&((cllm_model *)s->model)->n_sessions, 1);
    cllm_instance_free(&s->in);
    cllm_free(s->logits);
    cllm_free(s->mask_row);
    cllm_free(s->embd);
    cllm_free(s->seq_logits);
    cllm_free(s->act);
    cllm_free(s->link_logits);
    cllm_free(s);
}

static cllm_status stage_batch(cllm_session *s, int seq, const int32_t *tokens, const float *act_in,
                               int64_t n, int64_t n_outputs, bool embd, float *logits,
                               float *act_out);

/* Sequence seq's tokens in its cache. */
static int64_t *seq_past(cllm_session *s, int seq) {
    return seq == 0 ? &s->n_past : &s->seq_past[seq];
}

/* Computes the graph last prepared; with streamed layers the pass waits
 * for each one's weights and frees its slot after it (runtime/stream.h). */
static cllm_status session_compute(cllm_session *s) {
    /* weights read from a file that was truncated or changed in place are
     * refused, before the pass and after it (model.h) */
    CLLM_TRY(cllm_model_weights_ok(s->model));
    cllm_stream *st = s->model->stream;
    cllm_status rc;
    if (!st) {
        rc = cllm_sched_graph_compute(s->sched, s->graph);
    } else {
        CLLM_TRY(cllm_stream_begin(st, s->sched, s->graph));
        rc = cllm_sched_graph_compute(s->sched, s->graph);
        cllm_stream_end(st, s->sched, rc == CLLM_OK);
    }
    return rc == CLLM_OK ? cllm_model_weights_ok(s->model) : rc;
}

/* Runs one batch of sequence 0's n tokens at n_past. With `keep`, the
 * logits of the batch's outputs (all its tokens with all_logits, else the
 * last one) are kept: in s->logits once the graph has run, so a failure
 * leaves the previous logits untouched, or, linked, in s->link_logits once
 * the link's wait returns. Does not change n_past. */
static cllm_status decode_batch(cllm_session *s, const int32_t *tokens, int64_t n, bool keep) {
    const int64_t n_outputs = s->params.all_logits ? n : 1;
    float *logits = !keep ? NULL : s->has_link ? s->link_logits : s->logits;
    CLLM_TRY(stage_batch(s, 0, tokens, NULL, n, n_outputs, false, logits, NULL));
    if (keep && !s->has_link) {
        s->n_logits = n_outputs;
        s->n_last = n;
    }
    return CLLM_OK;
}

/*
 * One batch of n tokens of sequence seq at its position, which it does not
 * change, for every stage of a pipeline too: the input is tokens or (a
 * later stage) the activations act_in. Sequence 0 takes the
 * single-sequence graph, another one a batch of that sequence alone (as
 * cllm_session_decode_seqs builds it). The output: a stage that is not the
 * last copies its activations to act_out, or sends them through its link
 * (`logits`: where the link puts the batch's logits); else the logits of
 * the n_outputs last rows go to act_out (a last stage) or `logits` (NULL:
 * not kept), once the graph has run. With `embd` (a last stage only), the
 * rows' hidden states after the output norm go to `logits` instead,
 * [n_outputs][n_embd].
 */
static cllm_status stage_batch(cllm_session *s, int seq, const int32_t *tokens, const float *act_in,
                               int64_t n, int64_t n_outputs, bool embd, float *logits,
                               float *act_out) {
    const int64_t past = *seq_past(s, seq);
    cllm_batch_shape shape = {.n_tokens = n, .n_outputs = n_outputs, .embd = embd};
    if (seq == 0) {
        shape.n_past = past;
        shape.n_kv = padded_n_kv(s, past, n);
    } else {
        shape.n_seqs = 1;
        shape.seqs[0] = (cllm_seq_shape){
            .seq = seq, .n_tokens = n, .n_past = past, .n_kv = padded_n_kv(s, past, n)};
    }
    CLLM_TRY(prepare_graph(s, &shape));
    const cllm_graph_io io = s->io;
    cllm_tensor *mask = seq == 0 ? io.mask : io.seq_mask[0];
    cllm_tensor *swa_mask = seq == 0 ? io.swa_mask : io.seq_swa_mask[0];
    /* the rows are written even when the pass fails later */
    s->seq_high[seq] = CLLM_MAX(s->seq_high[seq], past + n);

    /* every input is set in full: a reused graph holds the last batch's */
    const size_t act_bytes = (size_t)n * (size_t)s->model->hp.n_embd * sizeof(float);
    if (io.tokens) {
        cllm_tensor_set(io.tokens, tokens, 0, (size_t)n * sizeof(int32_t));
    } else {
        cllm_tensor_set(io.act_in, act_in, 0, act_bytes);
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t pos = (int32_t)(past + i);
        cllm_tensor_set(io.pos, &pos, (size_t)i * sizeof(pos), sizeof(pos));
        fill_masks(s, mask, swa_mask, i, pos, past + n);
    }
    /* output row r is batch row n - n_outputs + r: all rows, or the last */
    for (int64_t r = 0; io.out_ids && r < n_outputs; r++) {
        const int32_t row = (int32_t)(n - n_outputs + r);
        cllm_tensor_set(io.out_ids, &row, (size_t)r * sizeof(row), sizeof(row));
    }

    const cllm_status st = session_compute(s);
    if (st != CLLM_OK) {
        s->graph_ready = false; /* built again next time */
        return st;
    }
    if (io.act_out) { /* a stage that is not the last */
        if (act_out) {
            cllm_tensor_get(io.act_out, act_out, 0, act_bytes);
            return CLLM_OK;
        }
        if (!s->has_link) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "decode: the model holds only some layers and the session has no "
                              "link to the next stage");
        }
        cllm_tensor_get(io.act_out, s->act, 0, act_bytes);
        return s->link.send(s->link.ud, seq, past, n, n_outputs, s->act, logits);
    }
    if (act_out || logits) {
        const int64_t width = embd ? s->model->hp.n_embd : s->model->hp.n_vocab;
        cllm_tensor_get(io.logits, act_out ? act_out : logits, 0,
                        (size_t)n_outputs * (size_t)width * sizeof(float));
    }
    return CLLM_OK;
}

/*
 * Whether sequence seq can go back to n_keep tokens. A sliding-window
 * layer's ring must still hold the n_swa - 1 positions before n_keep, and
 * the rows it holds from the positions past n_keep (up to seq_high) must
 * look out of every later window to cllm_fill_swa_row: both hold while
 * nothing was overwritten (seq_high <= n_ring), or when the positions
 * dropped are at most a batch (n_ring - n_swa + 1) past n_keep.
 */
static bool can_keep(const cllm_session *s, int seq, int64_t n_keep) {
    const cllm_kv_cache *kv = &s->in.kv;
    const int64_t high = s->seq_high[seq], slack = kv->n_ring - s->model->hp.n_swa + 1;
    return kv->n_ring >= kv->n_ctx || high <= kv->n_ring || high - n_keep <= slack;
}

/* can_keep, or CLLM_ERR_UNSUPPORTED saying why not. */
static cllm_status check_keep(const cllm_session *s, int seq, int64_t n_keep) {
    if (can_keep(s, seq, n_keep)) return CLLM_OK;
    const cllm_kv_cache *kv = &s->in.kv;
    const int64_t high = s->seq_high[seq], slack = kv->n_ring - s->model->hp.n_swa + 1;
    return cllm_error(CLLM_ERR_UNSUPPORTED,
                      "truncate: the sliding-window layers keep the last %lld positions of the "
                      "%lld decoded, no longer the window before position %lld (keep at least "
                      "%lld tokens, or none)",
                      (long long)kv->n_ring, (long long)high, (long long)n_keep,
                      (long long)(high - slack));
}

void cllm_session_set_link(cllm_session *s, const cllm_session_link *link) {
    s->has_link = link != NULL;
    if (link) s->link = *link;
}

bool cllm_session_is_last_stage(const cllm_session *s) {
    return s->model->place.output_device != CLLM_PLACE_NONE;
}

cllm_status cllm_session_stage_run(cllm_session *s, int seq, int64_t n_past, int64_t n,
                                   int64_t n_outputs, const float *act_in, float *out) {
    if (seq < 0 || seq >= s->shape.n_seq || n < 1 || n > s->params.n_batch || n_past < 0 ||
        n_past > s->params.n_ctx - n || n_outputs < 1 || n_outputs > n ||
        n_outputs > s->shape.n_outputs) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "stage: a batch of %lld tokens of sequence %d at %lld with %lld outputs "
                          "does not fit the session (%d sequences, context %lld, batch %lld)",
                          (long long)n, seq, (long long)n_past, (long long)n_outputs,
                          s->shape.n_seq, (long long)s->params.n_ctx, (long long)s->params.n_batch);
    }
    if (!s->model->place.no_input) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "stage: the first stage decodes tokens");
    }
    int64_t *past = seq_past(s, seq);
    if (n_past > *past) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "stage: sequence %d holds %lld tokens, a batch at %lld would leave a gap",
                          seq, (long long)*past, (long long)n_past);
    }
    /* a batch before the sequence's end follows a truncation on the first
     * stage, which checked the same: every stage wrote the same rows. At 0
     * nothing of the rings is seen again (as cllm_session_seq_truncate). */
    if (n_past == 0) s->seq_high[seq] = 0;
    if (n_past < *past) CLLM_TRY(check_keep(s, seq, n_past));
    *past = n_past;
    CLLM_TRY(stage_batch(s, seq, NULL, act_in, n, n_outputs, false, NULL, out));
    *past = n_past + n;
    return CLLM_OK;
}

cllm_status cllm_session_decode(cllm_session *s, const int32_t *tokens, int64_t n) {
    if (!s || !tokens) return CLLM_NULL_ARG("the session or tokens");
    const int64_t n_vocab = s->model->hp.n_vocab;
    if (n <= 0) return cllm_error(CLLM_ERR_INVALID_ARG, "decode: no tokens");
    if (s->model->place.no_input) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "decode: a later stage of a pipeline takes activations, not tokens");
    }
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
    if (s->params.all_logits && n > s->params.n_batch) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "decode: %lld tokens in one call with all logits kept; at most the "
                          "batch size, %lld",
                          (long long)n, (long long)s->params.n_batch);
    }
    const int64_t start = s->n_past, nb = s->params.n_batch;
    cllm_status st = CLLM_OK;
    int64_t last = 0; /* tokens of the last batch */
    for (int64_t i = 0; i < n && st == CLLM_OK; i += last) {
        last = cllm_session_prompt_chunk(nb, n - i);
        /* only the last batch's logits are kept: earlier ones would be
         * overwritten, and a failure must leave the previous ones */
        st = decode_batch(s, tokens + i, last, i + last == n);
        if (st == CLLM_OK) s->n_past += last;
    }
    if (s->has_link) {
        /* the batches went down the stages one after the other; the last
         * one's logits come back */
        const cllm_status w = s->link.wait(s->link.ud);
        if (st == CLLM_OK) st = w;
        if (st == CLLM_OK) {
            const int64_t n_outputs = s->params.all_logits ? last : 1;
            memcpy(s->logits, s->link_logits, (size_t)n_outputs * (size_t)n_vocab * sizeof(float));
            s->n_logits = n_outputs;
            s->n_last = last;
        }
    }
    if (st != CLLM_OK) {
        s->n_past = start;
        if (!can_keep(s, 0, start)) {
            /* the batches that ran overwrote the window before `start`
             * in the sliding-window rings: the context is lost */
            char why[512];
            snprintf(why, sizeof(why), "%s", cllm_last_error());
            cllm_session_reset(s);
            return cllm_error(st,
                              "%s (the sliding-window layers no longer hold the context: it "
                              "was cleared)",
                              why);
        }
        return st;
    }
    return CLLM_OK;
}

const float *cllm_session_logits(const cllm_session *s) { return cllm_session_logits_ith(s, -1); }

const float *cllm_session_logits_ith(const cllm_session *s, int64_t i) {
    if (!s || s->n_logits == 0) return NULL;
    if (i < 0) i += s->n_last;
    /* rows n_last - n_logits .. n_last - 1 of the last decode are kept */
    const int64_t r = i - (s->n_last - s->n_logits);
    if (i >= s->n_last || r < 0) return NULL;
    return s->logits + r * s->model->hp.n_vocab;
}

int64_t cllm_session_n_past(const cllm_session *s) { return s ? s->n_past : 0; }
int64_t cllm_session_n_ctx(const cllm_session *s) { return s ? s->params.n_ctx : 0; }
int64_t cllm_session_n_batch(const cllm_session *s) { return s ? s->params.n_batch : 0; }
int64_t cllm_session_n_vocab(const cllm_session *s) { return s ? s->model->hp.n_vocab : 0; }

void cllm_session_reset(cllm_session *s) {
    if (!s) return;
    s->n_past = 0;
    s->n_logits = 0;
    memset(s->seq_past, 0, sizeof(s->seq_past));
    memset(s->seq_high, 0, sizeof(s->seq_high));
    memset(s->seq_has_logits, 0, sizeof(s->seq_has_logits));
}

cllm_status cllm_session_truncate(cllm_session *s, int64_t n_keep) {
    if (!s) return CLLM_NULL_ARG("the session");
    if (n_keep < 0 || n_keep > s->n_past) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "truncate: %lld tokens to keep, outside [0, %lld]",
                          (long long)n_keep, (long long)s->n_past);
    }
    if (n_keep == 0) s->seq_high[0] = 0; /* nothing of the ring is seen again */
    CLLM_TRY(check_keep(s, 0, n_keep));
    /* the cache rows from n_keep on are stale: the next decode writes its
     * rows there before it attends to them, and the mask hides the rows
     * past its own (a one-token batch attends to a padded range) */
    s->n_past = n_keep;
    s->n_logits = 0;
    s->seq_has_logits[0] = false;
    return CLLM_OK;
}

/* ---- several sequences ------------------------------------------------- */

int cllm_session_n_seq(const cllm_session *s) { return s ? s->shape.n_seq : 0; }

int64_t cllm_session_seq_n_past(const cllm_session *s, int seq) {
    if (!s || seq < 0 || seq >= s->shape.n_seq) return -1;
    return seq == 0 ? s->n_past : s->seq_past[seq];
}

const float *cllm_session_seq_logits(const cllm_session *s, int seq) {
    if (!s || seq < 0 || seq >= s->shape.n_seq) return NULL;
    if (seq == 0) return cllm_session_logits(s);
    return s->seq_has_logits[seq] ? s->seq_logits + (size_t)seq * (size_t)s->model->hp.n_vocab
                                  : NULL;
}

cllm_status cllm_session_seq_truncate(cllm_session *s, int seq, int64_t n_keep) {
    if (!s) return CLLM_NULL_ARG("the session");
    if (seq == 0) return cllm_session_truncate(s, n_keep);
    if (seq < 0 || seq >= cllm_session_n_seq(s)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "truncate: sequence %d of %d", seq, s->shape.n_seq);
    }
    if (n_keep < 0 || n_keep > s->seq_past[seq]) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "truncate: %lld tokens of sequence %d to keep, outside [0, %lld]",
                          (long long)n_keep, seq, (long long)s->seq_past[seq]);
    }
    if (n_keep == 0) s->seq_high[seq] = 0;
    CLLM_TRY(check_keep(s, seq, n_keep));
    s->seq_past[seq] = n_keep;
    s->seq_has_logits[seq] = false;
    return CLLM_OK;
}

/* ---- embeddings -------------------------------------------------------- */

cllm_status cllm_session_seq_embed(cllm_session *s, int seq, const int32_t *tokens, int64_t n,
                                   cllm_pooling pooling, float *out) {
    if (!s) return CLLM_NULL_ARG("the session");
    if (!tokens) return CLLM_NULL_ARG("tokens");
    if (!out) return CLLM_NULL_ARG("out");
    const cllm_hparams *hp = &s->model->hp;
    if (!s->embd) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "embed: the session was made without embeddings "
                                                "(cllm_session_params.embeddings)");
    }
    if (s->model->place.no_input || !cllm_session_is_last_stage(s) || s->has_link) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "embed: the model holds only some of its layers (a pipeline stage)");
    }
    if (seq < 0 || seq >= s->shape.n_seq) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "embed: sequence %d of %d", seq, s->shape.n_seq);
    }
    if ((unsigned)pooling >= CLLM_POOLING_COUNT) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "embed: pooling %d is not one of none, mean, "
                          "cls, last",
                          (int)pooling);
    }
    if (n <= 0) return cllm_error(CLLM_ERR_INVALID_ARG, "embed: no tokens");
    if (n > s->params.n_ctx) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "embed: %lld tokens exceed the context of %lld",
                          (long long)n, (long long)s->params.n_ctx);
    }
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "embed: token %lld is %d, outside [0, %lld)",
                              (long long)i, tokens[i], (long long)hp->n_vocab);
        }
    }
    /* the sequence starts anew; what it held is dropped */
    int64_t *past = seq_past(s, seq);
    *past = 0;
    s->seq_high[seq] = 0;
    s->seq_has_logits[seq] = false;
    if (seq == 0) s->n_logits = 0;

    const int64_t E = hp->n_embd;
    double *sum = NULL; /* mean: in double, so that the order of the rows hardly matters */
    if (pooling == CLLM_POOLING_MEAN) {
        sum = cllm_calloc((size_t)E, sizeof(double));
        if (!sum) return cllm_error(CLLM_ERR_NOMEM, "embed: out of host memory");
    }
    cllm_status st = CLLM_OK;
    int64_t chunk = 0;
    for (int64_t i = 0; i < n && st == CLLM_OK; i += chunk) {
        chunk = cllm_session_prompt_chunk(s->params.n_batch, n - i);
        st = stage_batch(s, seq, tokens + i, NULL, chunk, chunk, true, s->embd, NULL);
        if (st != CLLM_OK) break;
        *past += chunk;
        /* s->embd: [chunk][E], the rows of tokens i .. i + chunk - 1 */
        const size_t row = (size_t)E * sizeof(float);
        if (pooling == CLLM_POOLING_MEAN) {
            for (int64_t r = 0; r < chunk; r++)
                for (int64_t k = 0; k < E; k++) sum[k] += s->embd[r * E + k];
        } else if (pooling == CLLM_POOLING_NONE) {
            memcpy(out + i * E, s->embd, (size_t)chunk * row);
        } else if (pooling == CLLM_POOLING_CLS && i == 0) {
            memcpy(out, s->embd, row);
        } else if (pooling == CLLM_POOLING_LAST && i + chunk == n) {
            memcpy(out, s->embd + (chunk - 1) * E, row);
        }
    }
    if (st != CLLM_OK) { /* the rows written are not a prefix anyone knows */
        *past = 0;
        s->seq_high[seq] = 0;
        cllm_free(sum);
        return st;
    }
    if (sum) {
        for (int64_t k = 0; k < E; k++) out[k] = (float)(sum[k] / (double)n);
    }
    cllm_free(sum);
    return CLLM_OK;
}

bool cllm_session_has_embeddings(const cllm_session *s) {
    return s->embd && !s->model->place.no_input && cllm_session_is_last_stage(s) && !s->has_link;
}

cllm_status cllm_session_embed(cllm_session *s, const int32_t *tokens, int64_t n,
                               cllm_pooling pooling, float *out) {
    return cllm_session_seq_embed(s, 0, tokens, n, pooling, out);
}

/* Checks a batch of several sequences (see cllm_session_decode_seqs) and
 * fills its shape. */
static cllm_status seqs_shape(const cllm_session *s, const cllm_seq_tokens *items, int n,
                              bool repeats, cllm_batch_shape *shape) {
    const int64_t n_vocab = s->model->hp.n_vocab;
    const int max = repeats ? s->in.max_items : s->shape.n_seq;
    if (n < 1 || n > max) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "decode: %d %s in a batch, outside [1, %d]", n,
                          repeats ? "items" : "sequences", max);
    }
    *shape = (cllm_batch_shape){.n_seqs = n, .n_outputs = n};
    bool seen[CLLM_MAX_SEQS] = {false};
    int64_t added[CLLM_MAX_SEQS] = {0};  /* repeats: tokens of the earlier items */
    bool multi[CLLM_MAX_SEQS] = {false}; /* repeats: a sequence's item of several tokens */
    for (int i = 0; i < n; i++) {
        const cllm_seq_tokens *it = &items[i];
        const bool again = it->seq >= 0 && it->seq < s->shape.n_seq && seen[it->seq];
        /* an item that repeats a sequence: one token after one-token items */
        if (again && repeats && it->n_tokens == 1 && !multi[it->seq]) {
            /* (checked as any other item below) */
        } else if (it->seq < 0 || it->seq >= s->shape.n_seq || seen[it->seq]) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "decode: item %d names sequence %d (of %d%s)",
                              i, it->seq, s->shape.n_seq,
                              it->seq >= 0 && it->seq < s->shape.n_seq ? ", already in this batch"
                                                                       : "");
        }
        seen[it->seq] = true;
        if (it->n_tokens != 1) multi[it->seq] = true;
        if (it->n_tokens <= 0 || !it->tokens) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "decode: no tokens for sequence %d", it->seq);
        }
        for (int64_t j = 0; j < it->n_tokens; j++) {
            if (it->tokens[j] < 0 || it->tokens[j] >= n_vocab) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "decode: token %lld of sequence %d is %d, outside [0, %lld)",
                                  (long long)j, it->seq, it->tokens[j], (long long)n_vocab);
            }
        }
        const int64_t past = cllm_session_seq_n_past(s, it->seq) + added[it->seq];
        added[it->seq] += it->n_tokens;
        if (it->n_tokens > s->params.n_ctx - past) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "context full: sequence %d holds %lld tokens, + %lld new exceed the "
                              "context of %lld",
                              it->seq, (long long)past, (long long)it->n_tokens,
                              (long long)s->params.n_ctx);
        }
        shape->seqs[i] = (cllm_seq_shape){.seq = it->seq,
                                          .n_tokens = it->n_tokens,
                                          .n_past = past,
                                          .n_kv = padded_n_kv(s, past, it->n_tokens)};
        shape->n_tokens += it->n_tokens;
        if (shape->n_tokens > s->params.n_batch) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "decode: %lld tokens or more in one batch of several sequences, "
                              "more than the batch size %lld",
                              (long long)shape->n_tokens, (long long)s->params.n_batch);
        }
    }
    return CLLM_OK;
}

/*
 * cllm_session_decode_seqs on the first stage of a pipeline: each item is a
 * batch of its own (its sequence alone), sent down the stages before the
 * logits of all of them come back, so that the stages work on different
 * sequences at the same time. Each item's logits are those it gets alone,
 * which a local session's batch gives too, bit for bit, in the cases
 * cllm.h names.
 */
static cllm_status decode_seqs_linked(cllm_session *s, const cllm_seq_tokens *items, int n) {
    if (s->model->place.no_input) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "decode: a later stage of a pipeline takes activations, not tokens");
    }
    if (!s->has_link) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "decode: the model holds only some layers and the session has no link "
                          "to the next stage");
    }
    const size_t row = (size_t)s->model->hp.n_vocab;
    cllm_status st = CLLM_OK;
    int ran = 0; /* items computed and sent */
    for (; ran < n && st == CLLM_OK; ran++) {
        const cllm_seq_tokens *it = &items[ran];
        st = stage_batch(s, it->seq, it->tokens, NULL, it->n_tokens, 1, false,
                         s->link_logits + (size_t)ran * row, NULL);
        if (st != CLLM_OK) break;
        *seq_past(s, it->seq) += it->n_tokens;
    }
    const cllm_status w = s->link.wait(s->link.ud);
    if (st == CLLM_OK) st = w;
    if (st != CLLM_OK) {
        /* no sequence changes: each went back at most a batch, which the
         * sliding-window rings still hold (the later stages go back with
         * the position of the next batch) */
        for (int i = 0; i < ran; i++) *seq_past(s, items[i].seq) -= items[i].n_tokens;
        return st;
    }
    for (int i = 0; i < n; i++) {
        const int q = items[i].seq;
        if (q == 0) {
            memcpy(s->logits, s->link_logits + (size_t)i * row, row * sizeof(float));
            s->n_logits = 1;
            s->n_last = items[i].n_tokens;
        } else {
            memcpy(s->seq_logits + (size_t)q * row, s->link_logits + (size_t)i * row,
                   row * sizeof(float));
            s->seq_has_logits[q] = true;
        }
    }
    return CLLM_OK;
}

/* cllm_session_decode_seqs, and with `repeats` cllm_session_decode_items
 * (item_logits: NULL, or where each item's logits go). */
static cllm_status decode_items(cllm_session *s, const cllm_seq_tokens *items, int n, bool repeats,
                                float *item_logits) {
    if (!s || !items) return CLLM_NULL_ARG("the session or items");
    for (int i = 0; i < n; i++) {
        if (!items[i].tokens) return CLLM_NULL_ARG("items[i].tokens");
    }
    cllm_batch_shape shape;
    CLLM_TRY(seqs_shape(s, items, n, repeats, &shape));
    const int64_t n_vocab = s->model->hp.n_vocab;
    /* sequence 0 alone: the single-sequence path, which keeps its graph for
     * the next tokens (the same computation: the padded rows are skipped) */
    if (n == 1 && items[0].seq == 0) {
        CLLM_TRY(cllm_session_decode(s, items[0].tokens, items[0].n_tokens));
        if (item_logits) {
            memcpy(item_logits, cllm_session_logits(s), (size_t)n_vocab * sizeof(float));
        }
        return CLLM_OK;
    }
    if (s->model->partial) {
        if (repeats) {
            return cllm_error(CLLM_ERR_UNSUPPORTED,
                              "decode: several items of one sequence in a pipeline's batch");
        }
        return decode_seqs_linked(s, items, n);
    }

    /* steps of one token per sequence reuse their graph while every
     * sequence's padded cache rows stay the same (as one sequence's do) */
    CLLM_TRY(prepare_graph(s, &shape));
    const cllm_graph_io io = s->io;

    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        const cllm_seq_shape *sq = &shape.seqs[i];
        cllm_tensor_set(io.tokens, items[i].tokens, (size_t)row * sizeof(int32_t),
                        (size_t)sq->n_tokens * sizeof(int32_t));
        for (int64_t t = 0; t < sq->n_tokens; t++) {
            const int32_t pos = (int32_t)(sq->n_past + t);
            cllm_tensor_set(io.pos, &pos, (size_t)(row + t) * sizeof(pos), sizeof(pos));
            fill_masks(s, io.seq_mask[i], io.seq_swa_mask[i], t, pos, sq->n_past + sq->n_tokens);
        }
        row += sq->n_tokens;
        s->seq_high[sq->seq] = CLLM_MAX(s->seq_high[sq->seq], sq->n_past + sq->n_tokens);
        const int32_t last = (int32_t)(row - 1); /* output i: the sequence's last token */
        cllm_tensor_set(io.out_ids, &last, (size_t)i * sizeof(last), sizeof(last));
    }

    CLLM_TRY(session_compute(s));
    for (int i = 0; i < n; i++) {
        const cllm_seq_shape *sq = &shape.seqs[i];
        const size_t bytes = (size_t)n_vocab * sizeof(float);
        if (item_logits)
            cllm_tensor_get(io.logits, item_logits + (size_t)i * (size_t)n_vocab, (size_t)i * bytes,
                            bytes);
        if (sq->seq == 0) {
            cllm_tensor_get(io.logits, s->logits, (size_t)i * bytes, bytes);
            s->n_logits = 1;
            s->n_last = sq->n_tokens;
            s->n_past += sq->n_tokens;
        } else {
            cllm_tensor_get(io.logits, s->seq_logits + (size_t)sq->seq * (size_t)n_vocab,
                            (size_t)i * bytes, bytes);
            s->seq_has_logits[sq->seq] = true;
            s->seq_past[sq->seq] += sq->n_tokens;
        }
    }
    return CLLM_OK;
}

cllm_status cllm_session_decode_seqs(cllm_session *s, const cllm_seq_tokens *items, int n) {
    return decode_items(s, items, n, false, NULL);
}

int cllm_session_max_items(const cllm_session *s) { return s->in.max_items; }

cllm_status cllm_session_decode_items(cllm_session *s, const cllm_seq_tokens *items, int n,
                                      float *item_logits) {
    return decode_items(s, items, n, true, item_logits);
}

cllm_memory_report cllm_session_memory_on(const cllm_session *s, const cllm_device *dev) {
    cllm_memory_report r = {0};
    if (!s || !dev) return r;
    const cllm_model *m = s->model;
    const cllm_placement *pl = &m->place;
    int d = -1;
    for (int i = 0; i < pl->n_devices && d < 0; i++) {
        if (pl->devices[i] == dev) d = i;
    }
    if (d < 0) return r;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) r.planned[k] = s->in.bytes[d][k];
    r.planned[CLLM_MEM_WEIGHTS] = m->weights_planned[d];
    r.allocated[CLLM_MEM_WEIGHTS] = cllm_buffer_size_or_0(m->weights_buf[d]);
    if (m->stream && d == cllm_placement_cpu(pl)) {
        r.allocated[CLLM_MEM_WEIGHTS] += cllm_buffer_size(cllm_stream_buffer(m->stream));
    }
    r.allocated[CLLM_MEM_STATE] = cllm_buffer_size_or_0(s->in.kv_buf[d]);
    for (int b = 0; b < s->in.n_backends; b++) {
        if (s->in.backend_device[b] != d) continue;
        r.allocated[CLLM_MEM_COMPUTE] = cllm_sched_compute_allocated(s->sched, b);
        r.allocated[CLLM_MEM_WORKSPACE] = cllm_backend_workspace_allocated(s->in.backends[b]);
    }
    return r;
}

cllm_memory_report cllm_session_memory(const cllm_session *s) {
    if (!s) return (cllm_memory_report){0};
    const cllm_placement *pl = &s->model->place;
    return cllm_session_memory_on(s, pl->devices[cllm_placement_cpu(pl)]);
}

const cllm_model *cllm_session_model(const cllm_session *s) { return s ? s->model : NULL; }

uint64_t cllm_session_graph_builds(const cllm_session *s) { return s->n_builds; }

void cllm_session_set_graph_reuse(cllm_session *s, bool reuse) {
    s->no_reuse = !reuse;
    s->graph_ready = false;
}
