/* cllm serve: POST /v1/embeddings (and /embeddings), OpenAI's embeddings
 * API over the library's batch engine (server.h). Each input is a job of
 * its own on the engine's queue, so the inputs of one request run on as
 * many slots as are idle, beside the generation requests; the vectors are
 * pooled by the engine and normalized here (Euclidean norm), as
 * llama-server does. */
#include "server-http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inputs of one request at most. */
#define SRV_EMBED_MAX_INPUTS 2048

static const char *const k_fields_embed[] = {"input", "model", "encoding_format", "dimensions",
                                             "user"};

/* {"error": {...}} with *status; NULL when out of memory. */
static json_t *embed_error(unsigned *status, unsigned code, const char *param, const char *err_code,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static json_t *embed_error(unsigned *status, unsigned code, const char *param, const char *err_code,
                           const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t n = 0;
    char *clean = srv_utf8_clean(msg, strlen(msg), &n);
    *status = code;
    const char *type = code == 501   ? "not_supported_error"
                       : code >= 500 ? "server_error"
                                     : "invalid_request_error";
    json_t *e = json_pack("{s:{s:s?,s:s,s:s?,s:s?}}", "error", "message", clean, "type", type,
                          "param", param, "code", err_code);
    free(clean);
    return e;
}

/* The base64 of n bytes (a new string). */
static char *base64(const unsigned char *p, size_t n) {
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                           (i + 2 < n ? p[i + 2] : 0);
        *o++ = k[v >> 18 & 63];
        *o++ = k[v >> 12 & 63];
        *o++ = i + 1 < n ? k[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? k[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* Whether `a` is a non-empty array of integers only (a list of token ids). */
static bool is_token_list(const json_t *a) {
    if (!json_is_array(a) || json_array_size(a) == 0) return false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        if (!json_is_integer(json_array_get(a, i))) return false;
    }
    return true;
}

/* The token ids of input `v` (a string, or a list of token ids) into a new
 * array; NULL with *err set (a message) when it cannot be. */
static int32_t *input_ids(const cllm_model *m, const json_t *v, size_t *n, const char **err) {
    int32_t *ids = NULL;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        const size_t len = json_string_length(v);
        if (cllm_tokenize(m, s, len, true, true, NULL, 0, n) != CLLM_OK) {
            *err = cllm_last_error();
            return NULL;
        }
        if (*n == 0) {
            *err = "an input has no tokens";
            return NULL;
        }
        if (!(ids = malloc(*n * sizeof(int32_t)))) {
            *err = "out of memory";
            return NULL;
        }
        if (cllm_tokenize(m, s, len, true, true, ids, *n, n) != CLLM_OK) {
            free(ids);
            *err = cllm_last_error();
            return NULL;
        }
        return ids;
    }
    if (!is_token_list(v)) {
        *err = "an input must be a string or a non-empty list of token ids";
        return NULL;
    }
    *n = json_array_size(v);
    if (!(ids = malloc(*n * sizeof(int32_t)))) {
        *err = "out of memory";
        return NULL;
    }
    const json_int_t n_vocab = cllm_model_n_vocab(m);
    for (size_t i = 0; i < *n; i++) {
        const json_int_t id = json_integer_value(json_array_get(v, i));
        if (id < 0 || id >= n_vocab) {
            free(ids);
            *err = "a token id is outside the vocabulary";
            return NULL;
        }
        ids[i] = (int32_t)id;
    }
    return ids;
}

/* One request's inputs, waited for together. */
typedef struct embed_wait {
    srv_wait w; /* w.n: the jobs made */
    srv_engine *e;
    srv_job *jobs[SRV_EMBED_MAX_INPUTS];
    size_t n_submitted; /* the first n_submitted jobs are queued */
    bool b64;
    int64_t E;
    size_t n_tokens;
    json_t *model; /* the request's "model", or NULL */
    srv_embed_fin fin;
    void *fin_ctx;
    void (*fin_free)(void *ctx);
} embed_wait;

static void embed_free(embed_wait *ew) {
    for (size_t i = 0; i < ew->w.n; i++) {
        srv_job_release(ew->e, ew->jobs[i]);
        /* never queued: both references */
        if (i >= ew->n_submitted) srv_job_release(ew->e, ew->jobs[i]);
    }
    if (ew->fin_free) ew->fin_free(ew->fin_ctx);
    json_decref(ew->model);
    free(ew);
}

/* The answer (taken) through fin, or as it is; frees fin_ctx. */
static enum MHD_Result deliver(srv_http *h, struct MHD_Connection *c, json_t *answer,
                               unsigned status, srv_embed_fin fin, void *fin_ctx,
                               void (*fin_free)(void *ctx)) {
    enum MHD_Result r;
    if (fin) {
        r = fin(h, c, answer, status, fin_ctx);
    } else {
        r = answer ? srv_send_json(h, c, status, answer) : MHD_NO;
    }
    if (fin_free) fin_free(fin_ctx);
    return r;
}

/* Every input's job ended: the vectors, or the first error. */
static enum MHD_Result embed_done(srv_wait *w) {
    embed_wait *ew = w->owner;
    const srv_http_opts *o = srv_http_options(w->h);
    unsigned st = 500, *status = &st;
    json_t *answer = NULL;
    json_t *data = json_array();
    const int64_t E = ew->E;
    for (size_t i = 0; i < ew->w.n && !answer; i++) {
        srv_job *j = ew->jobs[i];
        if (j->finish == SRV_FINISH_TIMEOUT) {
            answer = embed_error(status, 504, NULL, "timeout",
                                 "the request took longer than the server's --timeout");
        } else if (j->finish == SRV_FINISH_CANCELLED) {
            answer = embed_error(status, 503, NULL, "cancelled",
                                 "the request was cancelled (the server is stopping)");
        } else if (j->finish != SRV_FINISH_STOP || !j->embd) {
            answer = embed_error(status, 500, NULL, NULL, "%s",
                                 j->error[0] ? j->error : "the embedding failed");
        }
        if (answer) break;
        cllm_embd_normalize(j->embd, E, 2);
        json_t *vec;
        if (ew->b64) {
            char *s = base64((const unsigned char *)j->embd, (size_t)E * sizeof(float));
            vec = s ? json_string(s) : NULL;
            free(s);
        } else {
            vec = json_array();
            for (int64_t k = 0; k < E; k++) json_array_append_new(vec, json_real(j->embd[k]));
        }
        json_array_append_new(data, json_pack("{s:s,s:I,s:o?}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", vec));
    }
    if (answer) {
        json_decref(data);
    } else {
        *status = 200;
        answer = json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                           ew->model ? json_string_value(ew->model) : o->model_id, "usage",
                           "prompt_tokens", (json_int_t)ew->n_tokens, "total_tokens",
                           (json_int_t)ew->n_tokens);
    }
    srv_embed_fin fin = ew->fin;
    void *fin_ctx = ew->fin_ctx;
    void (*fin_free)(void *ctx) = ew->fin_free;
    ew->fin_free = NULL; /* deliver frees it */
    struct MHD_Connection *c = w->c;
    srv_http *h = w->h;
    embed_free(ew);
    return deliver(h, c, answer, *status, fin, fin_ctx, fin_free);
}

static void embed_drop(srv_wait *w) { embed_free(w->owner); }

enum MHD_Result srv_embeddings(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                               const char *body, size_t len, srv_embed_fin fin, void *fin_ctx,
                               void (*fin_free)(void *ctx)) {
    const srv_http_opts *o = srv_http_options(h);
    unsigned st = 500, *status = &st;
    json_t *answer = NULL, *req = NULL;
    embed_wait *ew = NULL;
    size_t n_inputs = 0;
    if (!o->embeddings) {
        answer = embed_error(status, 501, NULL, "not_supported",
                             "this server does not compute embeddings; start it with --embeddings");
        goto done;
    }
    const cllm_pooling pooling =
        o->pooling >= 0 ? (cllm_pooling)o->pooling : cllm_model_pooling(e->model);
    if (pooling == CLLM_POOLING_NONE) {
        answer = embed_error(status, 400, NULL, "invalid_value",
                             "the server's pooling is 'none' (a vector per token), which OpenAI's "
                             "embeddings API cannot return; start it with --pooling mean, cls or "
                             "last");
        goto done;
    }
    json_error_t jerr;
    req = json_loadb(body ? body : "", len, 0, &jerr);
    if (!json_is_object(req)) {
        answer = embed_error(status, 400, NULL, "invalid_json",
                             "the body is not a JSON object: %.200s", jerr.text);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(req, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof(k_fields_embed) / sizeof(k_fields_embed[0]); i++)
            known = known || !strcmp(key, k_fields_embed[i]);
        if (!known) {
            answer = embed_error(status, 400, NULL, "unsupported_parameter",
                                 "'%.64s' is not supported by this server's /v1/embeddings "
                                 "endpoint",
                                 key);
            goto done;
        }
    }
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_string(model)) {
        answer = embed_error(status, 400, "model", "invalid_type", "'model' must be a string");
        goto done;
    }
    if (model && o->strict_names) {
        bool served = !strcmp(json_string_value(model), o->model_id);
        for (int i = 0; i < o->n_aliases; i++)
            served = served || !strcmp(json_string_value(model), o->aliases[i]);
        if (!served) {
            answer = embed_error(status, 404, "model", "model_not_found",
                                 "the model '%.200s' is not served here", json_string_value(model));
            goto done;
        }
    }
    json_t *user = json_object_get(req, "user");
    if (user && !json_is_string(user)) {
        answer = embed_error(status, 400, "user", "invalid_type", "'user' must be a string");
        goto done;
    }
    bool b64 = false;
    json_t *fmt = json_object_get(req, "encoding_format");
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0)) {
            answer = embed_error(status, 400, "encoding_format", "invalid_value",
                                 "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        b64 = !strcmp(f, "base64");
    }
    const int64_t E = cllm_model_n_embd(e->model);
    json_t *dims = json_object_get(req, "dimensions");
    if (dims && (!json_is_integer(dims) || json_integer_value(dims) != E)) {
        answer = embed_error(status, 400, "dimensions", "invalid_value",
                             "'dimensions' must be the model's embedding size, %lld (vectors "
                             "are not shortened)",
                             (long long)E);
        goto done;
    }
    json_t *input = json_object_get(req, "input");
    /* one input (a string or a list of ids), or a list of them */
    const bool single = json_is_string(input) || is_token_list(input);
    n_inputs = single ? 1 : json_array_size(input);
    if (!input || (!single && (!json_is_array(input) || n_inputs == 0))) {
        answer = embed_error(status, 400, "input", "invalid_value",
                             "'input' must be a string, a list of token ids, or a non-empty list "
                             "of either");
        goto done;
    }
    if (n_inputs > SRV_EMBED_MAX_INPUTS) {
        answer =
            embed_error(status, 400, "input", "invalid_value",
                        "'input' holds %zu inputs, at most %d", n_inputs, SRV_EMBED_MAX_INPUTS);
        goto done;
    }
    if (!(ew = calloc(1, sizeof(*ew)))) {
        answer = embed_error(status, 500, NULL, NULL, "out of memory");
        goto done;
    }
    *ew = (embed_wait){.e = e,
                       .b64 = b64,
                       .E = E,
                       .model = json_incref(model),
                       .fin = fin,
                       .fin_ctx = fin_ctx,
                       .fin_free = fin_free};
    ew->w = (srv_wait){.h = h,
                       .e = e,
                       .c = c,
                       .jobs = ew->jobs,
                       .done = embed_done,
                       .drop = embed_drop,
                       .owner = ew};
    const double deadline = o->timeout_s > 0 ? cllm_time_ms() + o->timeout_s * 1e3 : 0;
    for (size_t i = 0; i < n_inputs; i++) {
        const json_t *in = single ? input : json_array_get(input, i);
        size_t n = 0;
        const char *err = NULL;
        int32_t *ids = input_ids(e->model, in, &n, &err);
        if (!ids) {
            answer = embed_error(status, 400, "input", "invalid_value", "input %zu: %s", i, err);
            goto done;
        }
        if ((int64_t)n > e->n_ctx) {
            free(ids);
            answer = embed_error(status, 400, "input", "context_length_exceeded",
                                 "input %zu has %zu tokens; the context of a slot holds %lld (-c)",
                                 i, n, (long long)e->n_ctx);
            goto done;
        }
        ew->n_tokens += n;
        srv_gen_params gp = {0};
        srv_job *j = srv_job_new(ids, n, &gp, deadline);
        if (!j) {
            answer = embed_error(status, 500, NULL, NULL, "out of memory");
            goto done;
        }
        j->embed = true;
        j->pooling = pooling;
        srv_wait_wake(&ew->w, j); /* before the engine can wake it */
        ew->jobs[ew->w.n++] = j;
    }
    /* all queued first: they run on as many slots as are idle */
    for (size_t i = 0; i < ew->w.n; i++, ew->n_submitted++) {
        if (!srv_engine_submit(e, ew->jobs[i])) {
            answer = embed_error(status, 503, NULL, "queue_full",
                                 "the server is busy: every slot is taken and the queue is full; "
                                 "retry later");
            goto done;
        }
    }
    json_decref(req);
    /* fin and its ctx are the waiter's from now */
    return srv_wait_start(cn, &ew->w);
done:
    json_decref(req);
    if (ew) ew->fin_free = NULL, embed_free(ew); /* fin_ctx is deliver's */
    return deliver(h, c, answer, *status, fin, fin_ctx, fin_free);
}
