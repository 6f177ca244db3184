/* cllm serve: the HTTP side (libmicrohttpd on a few polling threads, a
 * request waiting for the engine suspended): the daemon, the routes and
 * what a request's headers decide (the key, CORS, limits), /v1/models and
 * /metrics. The requests' fields are server-request.c's, the responses
 * server-reply.c's, OpenAI's completions server-openai.c's
 * (server-http.h); the connections' limits are server-conn.c's. */
#include "server-http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>

const srv_http_opts *srv_http_options(const srv_http *h) { return &h->o; }

/* ---- other endpoints ---------------------------------------------------- */

static json_t *model_json(const char *id) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)0,
                     "owned_by", "cllm");
}

/* GET /v1/models: the file's name, then the aliases; GET /v1/models/{id}:
 * one of them. */
static enum MHD_Result models(srv_http *h, struct MHD_Connection *c, const char *id) {
    if (id) {
        if (!srv_name_served(h, id, false)) {
            req_err er = {0};
            srv_fail(&er, 404, "model", "model_not_found", "the model '%.200s' does not exist", id);
            return srv_send_error(h, c, &er);
        }
        return srv_send_json(h, c, 200, model_json(id));
    }
    json_t *list = json_array();
    json_array_append_new(list, model_json(h->o.model_id));
    for (int i = 0; i < h->o.n_aliases; i++)
        json_array_append_new(list, model_json(h->o.aliases[i]));
    return srv_send_json(h, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", list));
}

static enum MHD_Result metrics(const srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    const cllm_memory_report mem = srv_engine_memory(e);
    const cllm_stream_usage su = srv_engine_stream(e);
    pthread_mutex_lock(&e->mu);
    const srv_stats st = e->stats;
    const int queued = e->n_queued, busy = e->n_busy;
    pthread_mutex_unlock(&e->mu);
    char buf[8192];
    int n = snprintf(
        buf, sizeof(buf),
        "# HELP cllm_requests_total Completion requests accepted, by endpoint.\n"
        "# TYPE cllm_requests_total counter\n"
        "cllm_requests_total{endpoint=\"chat\"} %llu\n"
        "cllm_requests_total{endpoint=\"completions\"} %llu\n"
        "# HELP cllm_requests_rejected_total Requests answered with an error before the queue.\n"
        "# TYPE cllm_requests_rejected_total counter\ncllm_requests_rejected_total %llu\n"
        "# HELP cllm_requests_queue_full_total Requests refused (503) because the queue was full.\n"
        "# TYPE cllm_requests_queue_full_total counter\ncllm_requests_queue_full_total %llu\n"
        "# HELP cllm_requests_cancelled_total Requests cancelled (client gone, timeout, stop).\n"
        "# TYPE cllm_requests_cancelled_total counter\ncllm_requests_cancelled_total %llu\n"
        "# HELP cllm_prompt_tokens_total Prompt tokens of finished requests.\n"
        "# TYPE cllm_prompt_tokens_total counter\ncllm_prompt_tokens_total %llu\n"
        "# HELP cllm_prompt_tokens_cached_total Prompt tokens reused from a slot's KV cache.\n"
        "# TYPE cllm_prompt_tokens_cached_total counter\ncllm_prompt_tokens_cached_total %llu\n"
        "# HELP cllm_completion_tokens_total Tokens generated.\n"
        "# TYPE cllm_completion_tokens_total counter\ncllm_completion_tokens_total %llu\n"
        "# HELP cllm_queue_length Requests waiting for a slot.\n"
        "# TYPE cllm_queue_length gauge\ncllm_queue_length %d\n"
        "# HELP cllm_slots_busy Slots running a request.\n"
        "# TYPE cllm_slots_busy gauge\ncllm_slots_busy %d\n"
        "# HELP cllm_slots_total Slots (--parallel).\n"
        "# TYPE cllm_slots_total gauge\ncllm_slots_total %d\n"
        "# HELP cllm_memory_bytes Bytes of all slots by memory kind (weights once).\n"
        "# TYPE cllm_memory_bytes gauge\n",
        (unsigned long long)st.requests[0], (unsigned long long)st.requests[1],
        (unsigned long long)st.rejected, (unsigned long long)st.queue_full,
        (unsigned long long)st.cancelled, (unsigned long long)st.prompt_tokens,
        (unsigned long long)st.prompt_cached, (unsigned long long)st.completion_tokens, queued,
        busy, e->n_slots);
    for (int k = 0; k < CLLM_MEM_COUNT && n > 0 && (size_t)n < sizeof(buf); k++) {
        n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                      "cllm_memory_bytes{kind=\"%s\",what=\"planned\"} %zu\n"
                      "cllm_memory_bytes{kind=\"%s\",what=\"allocated\"} %zu\n",
                      cllm_mem_kind_str((cllm_mem_kind)k), mem.planned[k],
                      cllm_mem_kind_str((cllm_mem_kind)k), mem.allocated[k]);
    }
    /* streamed layers: bytes read over cllm_completion_tokens_total is what
     * a generated token costs in reads (docs/streaming.md) */
    if (n > 0 && (size_t)n < sizeof(buf)) {
        n += snprintf(
            buf + n, sizeof(buf) - (size_t)n,
            "# HELP cllm_stream_layers Layers streamed from the file (0: all resident).\n"
            "# TYPE cllm_stream_layers gauge\ncllm_stream_layers %d\n"
            "# HELP cllm_stream_pass_bytes Bytes a forward pass reads of the streamed layers.\n"
            "# TYPE cllm_stream_pass_bytes gauge\ncllm_stream_pass_bytes %llu\n"
            "# HELP cllm_stream_read_bytes_total Bytes of streamed layers read from the file.\n"
            "# TYPE cllm_stream_read_bytes_total counter\ncllm_stream_read_bytes_total %llu\n"
            "# HELP cllm_stream_cached_bytes_total Of those, bytes copied from the page cache.\n"
            "# TYPE cllm_stream_cached_bytes_total counter\ncllm_stream_cached_bytes_total %llu\n"
            "# HELP cllm_stream_passes_total Forward passes that read the streamed layers (one "
            "per step, whatever its slots and drafted tokens).\n"
            "# TYPE cllm_stream_passes_total counter\ncllm_stream_passes_total %llu\n"
            "# HELP cllm_stream_wait_seconds_total Seconds passes waited for a streamed layer.\n"
            "# TYPE cllm_stream_wait_seconds_total counter\ncllm_stream_wait_seconds_total %.6f\n",
            su.n_layers, (unsigned long long)su.bytes_per_pass, (unsigned long long)su.bytes_read,
            (unsigned long long)su.bytes_cached, (unsigned long long)su.passes, su.wait_s);
    }
    if (n < 0 || (size_t)n >= sizeof(buf)) return MHD_NO;
    return srv_send_raw(h, c, 200, "text/plain; version=0.0.4", buf, (size_t)n, NULL);
}

/* Compares the whole of both strings, in time that depends on their
 * lengths only. */
static bool key_equal(const char *a, const char *b) {
    const size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < nb; i++) diff |= (unsigned char)(a[i < na ? i : 0] ^ b[i]);
    return na > 0 && diff == 0;
}

/* The endpoint of a path: the OpenAI routes with or without /v1. */
typedef enum endpoint {
    EP_NONE,
    EP_HEALTH,
    EP_CHAT,
    EP_COMPLETIONS,
    EP_MODELS,
    EP_MODEL, /* /v1/models/{id} */
    EP_METRICS,
    EP_OLLAMA, /* /api/... (server-ollama.c) */
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_APPLY_TEMPLATE,
    EP_PROPS,
    EP_SLOTS,
    EP_EMBEDDINGS /* server-embed.c */
} endpoint;

/* llama-server's small endpoints, and Ollama's under /api/. */
static endpoint endpoint_extra(const char *url) {
    if (!strncmp(url, "/api/", 5)) return EP_OLLAMA;
    if (!strcmp(url, "/tokenize")) return EP_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return EP_DETOKENIZE;
    if (!strcmp(url, "/apply-template")) return EP_APPLY_TEMPLATE;
    if (!strcmp(url, "/props")) return EP_PROPS;
    if (!strcmp(url, "/slots")) return EP_SLOTS;
    return EP_NONE;
}

static endpoint endpoint_of(const char *url, const char **id) {
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) return EP_HEALTH;
    if (!strcmp(url, "/metrics")) return EP_METRICS;
    const endpoint extra = endpoint_extra(url);
    if (extra != EP_NONE) return extra;
    const char *p = !strncmp(url, "/v1/", 4) ? url + 3 : url;
    if (!strcmp(p, "/chat/completions")) return EP_CHAT;
    if (!strcmp(p, "/completions")) return EP_COMPLETIONS;
    if (!strcmp(p, "/models")) return EP_MODELS;
    if (!strcmp(p, "/embeddings")) return EP_EMBEDDINGS;
    if (!strncmp(p, "/models/", 8) && p[8]) {
        *id = p + 8;
        return EP_MODEL;
    }
    return EP_NONE;
}

/* The key of a request: 'Authorization: Bearer KEY' or 'x-api-key: KEY'. */
static const char *request_key(struct MHD_Connection *c) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncmp(auth, "Bearer ", 7)) return auth + 7;
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return x ? x : "";
}

/* A browser's preflight (OPTIONS with an allowed Origin): 204 with the
 * methods and headers it may use. */
static enum MHD_Result preflight(const srv_http *h, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    srv_add_cors(h, c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const char *want =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want && *want ? want : "Authorization, Content-Type, x-api-key");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    const enum MHD_Result res = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return res;
}

/* The method an endpoint takes (OPTIONS aside). */
static const char *endpoint_method(endpoint ep) {
    return ep == EP_CHAT || ep == EP_COMPLETIONS || ep == EP_EMBEDDINGS || ep == EP_TOKENIZE ||
                   ep == EP_DETOKENIZE || ep == EP_APPLY_TEMPLATE
               ? "POST"
               : "GET";
}

/* Sends a 405 with the Allow header. */
static enum MHD_Result send_405(const srv_http *h, struct MHD_Connection *c, const char *url,
                                const char *method, const char *allow) {
    req_err er = {0};
    srv_fail(&er, 405, NULL, "method_not_allowed", "%.200s takes %s, not %.32s", url, allow,
             method);
    json_t *j = srv_error_json(&er);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    struct MHD_Response *r =
        s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    srv_add_cors(h, c, r);
    const enum MHD_Result res = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    return res;
}

/* Everything a request's headers decide, before any byte of its body is
 * read: the framing (400), a preflight, /health, the key (401), the path
 * (404), the method (405) and the declared length (413). Queues the answer
 * in *res and returns true when the headers decide it. */
static bool route_head(srv_http *h, struct MHD_Connection *c, const char *url, const char *method,
                       enum MHD_Result *res) {
    req_err er = {0};
    srv_engine *e = atomic_load(&h->engine);
    const char *id = NULL;
    const endpoint ep = endpoint_of(url, &id);
    const char *bad = srv_framing_error(c);
    if (bad) {
        srv_fail(&er, 400, NULL, "bad_request", "malformed request: %s", bad);
    } else if (!strcmp(method, "OPTIONS") && ep != EP_NONE && srv_cors_origin(h, c)) {
        *res = preflight(h, c);
        return true;
    } else if (h->o.webui && srv_webui_path(url)) {
        *res = srv_webui(h, c, url, method); /* the chat page: no key asked */
        return true;
    } else if (ep == EP_HEALTH) {
        if (strcmp(method, "GET") != 0) {
            *res = send_405(h, c, url, method, "GET");
            return true;
        }
        if (!e) {
            srv_fail(&er, 503, NULL, "loading", "the model is loading");
        } else if (cllm_model_check(e->model) != CLLM_OK) {
            /* its file truncated or changed in place: every request fails */
            srv_fail(&er, 503, NULL, "model_unavailable", "%s", cllm_last_error());
        } else {
            *res = srv_send_json(h, c, 200, json_pack("{s:s}", "status", "ok"));
            return true;
        }
    } else if (h->o.api_key && !key_equal(request_key(c), h->o.api_key)) {
        srv_fail(&er, 401, NULL, "invalid_api_key",
                 "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
    } else if (ep == EP_METRICS && !h->o.metrics) {
        srv_fail(&er, 404, NULL, "not_found", "/metrics is off (start the server with --metrics)");
    } else if (ep == EP_SLOTS && !h->o.slots) {
        srv_fail(&er, 404, NULL, "not_found", "/slots is off (start the server with --slots)");
    } else if (ep == EP_NONE) {
        srv_fail(&er, 404, NULL, "not_found", "no endpoint %.200s %.200s", method, url);
    } else if (ep != EP_OLLAMA && strcmp(method, endpoint_method(ep)) != 0) {
        /* Ollama's routes check their own methods (srv_ollama) */
        *res = send_405(h, c, url, method, endpoint_method(ep));
        return true;
    } else {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (!cl || strtoull(cl, NULL, 10) <= h->o.max_body) return false;
        srv_fail(&er, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
                 h->o.max_body);
    }
    if (e && er.status != 503) {
        pthread_mutex_lock(&e->mu);
        e->stats.rejected++;
        pthread_mutex_unlock(&e->mu);
    }
    *res = srv_send_error(h, c, &er);
    return true;
}

/* The request, its headers checked by route_head and its body read. */
static enum MHD_Result route(srv_http *h, struct MHD_Connection *c, conn *cn, const char *url,
                             const char *method) {
    req_err er = {0};
    srv_engine *e = atomic_load(&h->engine);
    const char *id = NULL;
    const endpoint ep = endpoint_of(url, &id);
    /* Ollama's: its own methods, errors and /api/version while loading */
    if (ep == EP_OLLAMA) return srv_ollama(h, e, c, cn, url, method, cn->body, cn->len);
    if (!e) {
        srv_fail(&er, 503, NULL, "loading", "the model is loading");
        return srv_send_error(h, c, &er);
    }
    switch (ep) {
    case EP_CHAT: return srv_completions(h, e, c, cn, true);
    case EP_COMPLETIONS: return srv_completions(h, e, c, cn, false);
    case EP_MODELS: return models(h, c, NULL);
    case EP_MODEL: return models(h, c, id);
    case EP_TOKENIZE:
    case EP_DETOKENIZE:
    case EP_APPLY_TEMPLATE:
    case EP_PROPS:
    case EP_SLOTS: return srv_llama(h, e, c, url, cn->body, cn->len);
    case EP_EMBEDDINGS: return srv_embeddings(h, e, c, cn, cn->body, cn->len, NULL, NULL, NULL);
    default: return metrics(h, e, c);
    }
}

/* A 413 for a body that outgrew --max-body without a Content-Length that
 * said so (MHD_NO, the connection closed, when it cannot be queued yet). */
static enum MHD_Result too_large(srv_http *h, struct MHD_Connection *c) {
    req_err er = {0};
    srv_fail(&er, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
             h->o.max_body);
    return srv_send_error(h, c, &er);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof(*cn)))) return MHD_NO;
        *con_cls = cn;
        atomic_fetch_add(&h->n_open, 1);
        srv_conns_phase(h->conns, c, SRV_PHASE_BODY);
        enum MHD_Result res = MHD_YES;
        if (route_head(h, c, url, method, &res)) {
            cn->answered = true;
            if (h->o.verbose) fprintf(stderr, "cllm serve: %s %s (its headers)\n", method, url);
        }
        return res;
    }
    if (cn->pending) return srv_wait_resume(cn); /* resumed */
    if (*upload_size > 0) {
        const size_t n = *upload_size;
        *upload_size = 0;
        srv_conns_body(h->conns, c, n);
        if (cn->answered) return MHD_YES; /* dropped: the answer is out */
        if (cn->len + n > h->o.max_body) {
            cn->answered = true;
            free(cn->body);
            cn->body = NULL;
            cn->len = cn->cap = 0;
            return too_large(h, c);
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = (cn->len + n + 1) * 2;
            if (cap > h->o.max_body + 1) cap = h->o.max_body + 1;
            char *nb = realloc(cn->body, cap);
            if (!nb) return MHD_NO;
            cn->body = nb;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        return MHD_YES;
    }
    if (cn->answered) return MHD_YES;
    srv_conns_phase(h->conns, c, SRV_PHASE_SEND);
    const enum MHD_Result r = route(h, c, cn, url, method);
    if (h->o.verbose) fprintf(stderr, "cllm serve: %s %s\n", method, url);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    srv_http *h = cls;
    conn *cn = *con_cls;
    /* the next request's headers are due from now (and a waiting job is
     * forgotten before it is released) */
    srv_conns_phase(h->conns, c, SRV_PHASE_HEAD);
    if (cn) {
        if (cn->pending) cn->pending->drop(cn->pending);
        free(cn->body);
        free(cn);
        *con_cls = NULL;
        atomic_fetch_sub(&h->n_open, 1);
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    const srv_http *h = cls;
    if (!h->o.verbose) return;
    fprintf(stderr, "cllm serve: http: ");
    vfprintf(stderr, fmt, ap);
}

srv_http *srv_http_start(const srv_http_opts *opts, int *port_out) {
    srv_http *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    h->o = *opts;
    atomic_init(&h->engine, NULL);
    atomic_init(&h->next_id, 0);
    atomic_init(&h->n_open, 0);
    atomic_init(&h->max_piece, 0);
    /* a numeric address only: IPv4, or IPv6 (which then takes IPv6 only) */
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opts->port)};
    /* a few polling threads (epoll where there is one) for every
     * connection; a request that waits for the engine is suspended, not
     * holding one */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_USE_ERROR_LOG;
    const struct sockaddr *addr = (const struct sockaddr *)&a4;
    if (inet_pton(AF_INET6, opts->host, &a6.sin6_addr) == 1) {
        flags |= MHD_USE_IPv6;
        addr = (const struct sockaddr *)&a6;
    } else if (inet_pton(AF_INET, opts->host, &a4.sin_addr) != 1) {
        fprintf(stderr, "cllm serve: --host: '%s' is not an IPv4 or IPv6 address\n", opts->host);
        free(h);
        return NULL;
    }
    const srv_limits *l = &opts->lim;
    if (!(h->conns = srv_conns_new(l, opts->verbose))) {
        free(h);
        return NULL;
    }
    h->d = MHD_start_daemon(
        flags, (uint16_t)opts->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        srv_conns_notify, h->conns, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)l->threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)l->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)l->max_per_client,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ceil(l->idle_s), MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "cllm serve: cannot listen on %s:%d (in use, or not permitted)\n",
                opts->host, opts->port);
        srv_conns_free(h->conns);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = di ? (int)di->port : opts->port;
    return h;
}

void srv_http_set_spec(srv_http *h, const cllm_spec_params *spec) {
    h->o.defaults.rp.spec = *spec; /* no request reads it before srv_http_ready */
}

void srv_http_ready(srv_http *h, srv_engine *e) { atomic_store(&h->engine, e); }

void srv_http_quiesce(srv_http *h) {
    if (h) (void)MHD_quiesce_daemon(h->d);
}

void srv_http_drain(srv_http *h, double max_s) {
    for (int i = 0; h && atomic_load(&h->n_open) > 0 && i < (int)(max_s * 100); i++) {
        const struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    srv_conns_free(h->conns);
    free(h);
}
