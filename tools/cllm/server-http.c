/* cllm serve: the HTTP side (libmicrohttpd, a thread per connection): the
 * endpoints, request parsing and validation, and the responses, whole or
 * streamed as server-sent events (server.h). */
#include "server.h"

#include "commands.h"

#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/random.h>
#include <netinet/in.h>

struct srv_http {
    struct MHD_Daemon *d;
    srv_http_opts o;
    _Atomic(srv_engine *) engine; /* NULL while loading */
    atomic_ulong next_id;
    atomic_int n_open; /* requests received and not yet answered in full */
};

/* What the connection's handler keeps between its calls: the body so far. */
typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
} conn;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
typedef struct req_err {
    unsigned status;
    const char *type, *param, *code;
    char msg[512];
    char param_buf[72]; /* param when it is a name from the request */
} req_err;

static int fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));

static int fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
                ...) {
    er->status = status;
    er->type = status == 401   ? "authentication_error"
               : status == 404 ? "not_found_error"
               : status >= 500 ? "server_error"
                               : "invalid_request_error";
    er->param = param;
    er->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(er->msg, sizeof(er->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- responses ---------------------------------------------------------- */

/* The origin a browser request may be answered to (--cors-origin): "*",
 * the request's Origin when listed, else NULL (no CORS headers). */
static const char *cors_origin(const srv_http *h, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    for (int i = 0; i < h->o.n_cors; i++) {
        if (!strcmp(h->o.cors[i], "*")) return "*";
        if (origin && !strcmp(h->o.cors[i], origin)) return origin;
    }
    return NULL;
}

static void add_cors(const srv_http *h, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *allow = cors_origin(h, c);
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_text(const srv_http *h, struct MHD_Connection *c, unsigned status,
                                 const char *type, const char *body, size_t len,
                                 const char *retry_after) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    add_cors(h, c, r);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    const enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return res;
}

/* Sends `j` (stolen) as JSON. */
static enum MHD_Result send_json(const srv_http *h, struct MHD_Connection *c, unsigned status,
                                 json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    const enum MHD_Result r = send_text(h, c, status, "application/json", s, strlen(s), NULL);
    free(s);
    return r;
}

static json_t *error_json(const req_err *er) {
    size_t n = 0;
    char *msg = srv_utf8_clean(er->msg, strlen(er->msg), &n);
    json_t *e = json_pack("{s:{s:s?,s:s,s:s?,s:s?}}", "error", "message", msg, "type", er->type,
                          "param", er->param, "code", er->code);
    free(msg);
    return e;
}

static enum MHD_Result send_error(const srv_http *h, struct MHD_Connection *c, const req_err *er) {
    json_t *j = error_json(er);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return MHD_NO;
    const enum MHD_Result r = send_text(h, c, er->status, "application/json", s, strlen(s),
                                        er->status == 503 ? "1" : NULL);
    free(s);
    return r;
}

/* Whether the client is still there (it has not closed its end). */
static bool client_alive(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return true;
    return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits on the job's condition for at most 100 ms (the mutex held). */
static void job_wait(srv_engine *e, srv_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cond, &e->mu, &ts);
}

/* ---- request fields ----------------------------------------------------- */

/* Each returns 0 when the field is absent or null, 1 when it was read, -1
 * after filling *er. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out, req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(er, 400, key, "invalid_type", "'%s' must be a number", key);
    const double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        return fail(er, 400, key, "invalid_value", "'%s' must be in [%g, %g], got %g", key, lo, hi,
                    d);
    }
    *out = d;
    return 1;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) {
        return fail(er, 400, key, "invalid_type", "'%s' must be an integer", key);
    }
    const long long n = json_integer_value(v);
    if (n < lo || n > hi) {
        return fail(er, 400, key, "invalid_value", "'%s' must be in [%lld, %lld], got %lld", key,
                    lo, hi, n);
    }
    *out = n;
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return fail(er, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

/* "stop": a string or an array of strings. */
static int get_stop(json_t *o, srv_gen_params *gp, req_err *er) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    if (!one && !json_is_array(v)) {
        return fail(er, 400, "stop", "invalid_type",
                    "'stop' must be a string or an array of "
                    "strings");
    }
    const size_t n = one ? 1 : json_array_size(v);
    if (n > SRV_MAX_STOP) {
        return fail(er, 400, "stop", "invalid_value", "'stop' has %zu strings, at most %d", n,
                    SRV_MAX_STOP);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) {
            return fail(er, 400, "stop", "invalid_type",
                        "'stop' must be a string or an array of "
                        "strings");
        }
        const size_t len = json_string_length(s);
        if (len == 0 || len > SRV_MAX_STOP_LEN) {
            return fail(er, 400, "stop", "invalid_value",
                        "each stop string must have 1 to %d bytes", SRV_MAX_STOP_LEN);
        }
        if (!(gp->stop[gp->n_stop] = strdup(json_string_value(s)))) {
            return fail(er, 500, NULL, NULL, "out of memory");
        }
        gp->n_stop++;
    }
    return 1;
}

/* "logit_bias": {"TOKEN_ID": BIAS, ...} with BIAS in [-100, 100], as
 * OpenAI's (-100 all but bans a token, 100 all but forces it). */
static int get_logit_bias(json_t *o, int32_t n_vocab, srv_gen_params *gp, req_err *er) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) {
        return fail(er, 400, "logit_bias", "invalid_type",
                    "'logit_bias' must be an object of token ids to numbers");
    }
    const size_t n = json_object_size(v);
    if (n > (size_t)n_vocab) {
        return fail(er, 400, "logit_bias", "invalid_value", "'logit_bias' has %zu entries", n);
    }
    if (n == 0) return 0;
    if (!(gp->bias = calloc(n, sizeof(*gp->bias))))
        return fail(er, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *b;
    size_t k = 0;
    json_object_foreach(v, key, b) {
        char *end = NULL;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab) {
            return fail(er, 400, "logit_bias", "invalid_value",
                        "'logit_bias': '%.32s' is not a token id in [0, %d)", key, n_vocab);
        }
        const double d = json_is_number(b) ? json_number_value(b) : NAN;
        if (!(d >= -100 && d <= 100)) {
            return fail(er, 400, "logit_bias", "invalid_value",
                        "'logit_bias': the bias of token %ld must be a number in [-100, 100]", id);
        }
        gp->bias[k++] = (cllm_logit_bias){(int32_t)id, (float)d};
    }
    gp->rp.sampling.logit_bias = gp->bias;
    gp->rp.sampling.n_logit_bias = (int32_t)n;
    return 1;
}

/* The fields a request may carry; anything else is refused (400,
 * "unsupported_parameter") rather than ignored, since a field that is
 * dropped silently changes the answer the client expects. "user" is an
 * identifier for the client's own tracking, which changes no output. */
static const char *const k_fields_common[] = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "ignore_eos",
    "stop",
    "logit_bias",
    "response_format",
    "grammar",
    "json_schema",
    "user",
};
static const char *const k_fields_chat[] = {"messages",     "max_completion_tokens",
                                            "top_logprobs", "tools",
                                            "tool_choice",  "parallel_tool_calls"};
static const char *const k_fields_text[] = {"prompt"};

static bool field_in(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(key, list[i])) return true;
    }
    return false;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Refuses the first member of `o` the endpoint does not handle. */
static int check_fields(json_t *o, bool chat, req_err *er) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (field_in(key, k_fields_common, N_OF(k_fields_common))) continue;
        if (chat ? field_in(key, k_fields_chat, N_OF(k_fields_chat))
                 : field_in(key, k_fields_text, N_OF(k_fields_text))) {
            continue;
        }
        /* the name outlives the request's JSON */
        snprintf(er->param_buf, sizeof(er->param_buf), "%s", key);
        return fail(er, 400, er->param_buf, "unsupported_parameter",
                    "'%.64s' is not supported by this server's %s endpoint", key,
                    chat ? "/v1/chat/completions" : "/v1/completions");
    }
    json_t *so = json_object_get(o, "stream_options");
    if (json_is_object(so)) {
        json_object_foreach(so, key, v) {
            if (strcmp(key, "include_usage") != 0) {
                return fail(er, 400, "stream_options", "unsupported_parameter",
                            "'stream_options.%.64s' is not supported", key);
            }
        }
    }
    return 0;
}

/* A JSON Schema (a JSON value) to the request's grammar. */
static int schema_grammar(json_t *schema, const char *param, srv_gen_params *gp, req_err *er) {
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return fail(er, 500, NULL, NULL, "out of memory");
    char *g = NULL;
    const cllm_status st = cllm_json_schema_to_grammar(text, &g);
    free(text);
    if (st == CLLM_ERR_NOMEM) return fail(er, 500, NULL, NULL, "out of memory");
    if (st != CLLM_OK) {
        return fail(er, 400, param, "invalid_schema", "'%s': %s", param, cllm_last_error());
    }
    gp->grammar = g;
    return 0;
}

/* The grammar of a request: "response_format" (OpenAI's: text, json_object,
 * json_schema), "grammar" (GBNF text) or "json_schema" (a schema), at most
 * one of them; else the server's (--grammar, --json-schema), unless
 * response_format says "text". Compiled here so that an error is a 400. */
static int get_grammar(json_t *o, const srv_http *h, int32_t n_vocab, srv_gen_params *gp,
                       req_err *er) {
    static const char *const keys[] = {"response_format", "grammar", "json_schema"};
    const char *given = NULL;
    for (size_t i = 0; i < N_OF(keys); i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (!v || json_is_null(v)) continue;
        if (given) {
            return fail(er, 400, keys[i], "invalid_value", "'%s' and '%s': give one of them", given,
                        keys[i]);
        }
        given = keys[i];
    }
    const char *param = given ? given : "grammar";
    if (!given) {
        /* the server's default */
    } else if (!strcmp(given, "grammar")) {
        json_t *v = json_object_get(o, "grammar");
        if (!json_is_string(v)) {
            return fail(er, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
        }
        if (strlen(json_string_value(v)) != json_string_length(v)) {
            return fail(er, 400, "grammar", "invalid_value", "'grammar' holds a NUL character");
        }
        if (!(gp->grammar = strdup(json_string_value(v)))) {
            return fail(er, 500, NULL, NULL, "out of memory");
        }
    } else if (!strcmp(given, "json_schema")) {
        json_t *v = json_object_get(o, "json_schema");
        if (!json_is_object(v) && !json_is_boolean(v)) {
            return fail(er, 400, "json_schema", "invalid_type",
                        "'json_schema' must be a JSON Schema (an object)");
        }
        if (schema_grammar(v, "json_schema", gp, er) < 0) return -1;
    } else {
        json_t *rf = json_object_get(o, "response_format");
        json_t *type = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(type)) {
            return fail(er, 400, "response_format", "invalid_type",
                        "'response_format' must be an object with a string 'type'");
        }
        const char *t = json_string_value(type);
        const char *key;
        json_t *m;
        json_object_foreach(rf, key, m) {
            if (strcmp(key, "type") && (strcmp(t, "json_schema") || strcmp(key, "json_schema"))) {
                return fail(er, 400, "response_format", "unsupported_parameter",
                            "'response_format.%.64s' is not supported with type '%.32s'", key, t);
            }
        }
        if (!strcmp(t, "text")) {
            /* no grammar: not even the server's */
        } else if (!strcmp(t, "json_object")) {
            if (!(gp->grammar = strdup(cllm_json_grammar()))) {
                return fail(er, 500, NULL, NULL, "out of memory");
            }
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!json_is_object(js)) {
                return fail(er, 400, "response_format", "missing_required_parameter",
                            "'response_format' of type 'json_schema' needs a 'json_schema' "
                            "object");
            }
            json_object_foreach(js, key, m) {
                const bool ok = !strcmp(key, "name")          ? json_is_string(m)
                                : !strcmp(key, "description") ? json_is_string(m)
                                : !strcmp(key, "strict") ? json_is_boolean(m) || json_is_null(m)
                                : !strcmp(key, "schema") ? true
                                                         : false;
                if (!ok) {
                    return fail(er, 400, "response_format", "invalid_value",
                                "'response_format.json_schema.%.64s' is not supported or has the "
                                "wrong type",
                                key);
                }
            }
            /* a missing schema is any JSON object, as OpenAI's json_object */
            json_t *schema = json_object_get(js, "schema");
            if (!schema) {
                if (!(gp->grammar = strdup(cllm_json_grammar()))) {
                    return fail(er, 500, NULL, NULL, "out of memory");
                }
            } else if (!json_is_object(schema) && !json_is_boolean(schema)) {
                return fail(er, 400, "response_format", "invalid_type",
                            "'response_format.json_schema.schema' must be a JSON Schema");
            } else if (schema_grammar(schema, "response_format", gp, er) < 0) {
                return -1;
            }
        } else {
            return fail(er, 400, "response_format", "invalid_value",
                        "'response_format': type '%.32s' is not text, json_object or json_schema",
                        t);
        }
    }
    const char *dflt = h->o.defaults.rp.sampling.grammar;
    if (!given && dflt && !(gp->grammar = strdup(dflt))) {
        return fail(er, 500, NULL, NULL, "out of memory");
    }
    gp->rp.sampling.grammar = gp->grammar;
    gp->rp.sampling.grammar_root = NULL;
    if (gp->grammar && cllm_sampler_params_check(&gp->rp.sampling, n_vocab) != CLLM_OK) {
        return fail(er, 400, param, "invalid_grammar", "'%s': %s", param, cllm_last_error());
    }
    return 0;
}

/* The generation settings of a request over the server's defaults. */
static int parse_gen(const srv_http *h, json_t *o, bool chat, int32_t n_vocab, srv_gen_params *gp,
                     bool *stream, bool *usage, req_err *er) {
    *gp = h->o.defaults;
    gp->n_stop = 0;
    gp->bias = NULL;
    gp->grammar = NULL;
    gp->rp.sampling.grammar = NULL;
    if (check_fields(o, chat, er) < 0) return -1;
    double d;
    long long n;
    int r;
    if ((r = get_int(o, "max_tokens", 0, 1 << 30, &n, er)) < 0) return -1;
    if (r) gp->rp.max_tokens = (int)n;
    if (chat && (r = get_int(o, "max_completion_tokens", 0, 1 << 30, &n, er)) < 0) return -1;
    if (chat && r) gp->rp.max_tokens = (int)n;
    if ((r = get_num(o, "temperature", 0, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.temperature = (float)d;
    if ((r = get_num(o, "top_p", 0, 1, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.top_p = d > 0 ? (float)d : 1e-6f;
    if ((r = get_int(o, "top_k", 0, INT32_MAX, &n, er)) < 0) return -1;
    if (r) gp->rp.sampling.top_k = (int32_t)n;
    if ((r = get_num(o, "min_p", 0, 1, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.min_p = (float)d;
    if ((r = get_num(o, "repeat_penalty", 1e-3, 100, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.repeat_penalty = (float)d;
    if ((r = get_num(o, "presence_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.presence_penalty = (float)d;
    if ((r = get_num(o, "frequency_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.frequency_penalty = (float)d;
    if ((r = get_int(o, "seed", INT64_MIN, INT64_MAX, &n, er)) < 0) return -1;
    if (r) gp->rp.sampling.seed = (uint64_t)n;
    if (!r && !h->o.seed_given) {
        uint64_t x = 0;
        if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
            x = (uint64_t)(cllm_time_ms() * 1e6);
        }
        gp->rp.sampling.seed = x;
    }
    if ((r = get_int(o, "n", 1, 1, &n, er)) < 0) {
        return fail(er, 400, "n", "unsupported_value", "only n = 1 is supported");
    }
    *stream = false;
    if (get_bool(o, "stream", stream, er) < 0) return -1;
    *usage = false;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            return fail(er, 400, "stream_options", "invalid_type",
                        "'stream_options' must be an object");
        }
        if (get_bool(so, "include_usage", usage, er) < 0) return -1;
    }
    if (chat) {
        bool lp = false;
        if (get_bool(o, "logprobs", &lp, er) < 0) return -1;
        gp->logprobs = lp;
        if ((r = get_int(o, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &n, er)) < 0) return -1;
        if (r && !lp) {
            return fail(er, 400, "top_logprobs", "invalid_value",
                        "'top_logprobs' needs 'logprobs': true");
        }
        gp->top_logprobs = r ? (int)n : 0;
    } else {
        if ((r = get_int(o, "logprobs", 0, 5, &n, er)) < 0) return -1;
        gp->logprobs = r == 1;
        gp->top_logprobs = r ? (int)n : 0;
    }
    bool ignore_eos = false;
    if (get_bool(o, "ignore_eos", &ignore_eos, er) < 0) return -1;
    gp->rp.sampling.ignore_eos = ignore_eos;
    if (get_stop(o, gp, er) < 0) return -1;
    if (get_logit_bias(o, n_vocab, gp, er) < 0) return -1;
    if (get_grammar(o, h, n_vocab, gp, er) < 0) return -1;
    return 0;
}

/* The text of a message's content: a string, or an array of text parts. */
static int content_text(json_t *v, char **out, req_err *er) {
    if (json_is_null(v)) {
        *out = strdup("");
    } else if (json_is_string(v)) {
        *out = strndup(json_string_value(v), json_string_length(v));
    } else if (json_is_array(v)) {
        size_t total = 0, i;
        json_t *p;
        json_array_foreach(v, i, p) {
            json_t *t = json_object_get(p, "text");
            if (!json_is_object(p) || !json_is_string(t) ||
                strcmp(json_string_value(json_object_get(p, "type"))
                           ? json_string_value(json_object_get(p, "type"))
                           : "",
                       "text") != 0) {
                return fail(er, 400, "messages", "invalid_type",
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are "
                            "supported");
            }
            total += json_string_length(t);
        }
        *out = malloc(total + 1);
        if (*out) {
            size_t o = 0;
            json_array_foreach(v, i, p) {
                json_t *t = json_object_get(p, "text");
                memcpy(*out + o, json_string_value(t), json_string_length(t));
                o += json_string_length(t);
            }
            (*out)[o] = '\0';
        }
    } else {
        return fail(er, 400, "messages", "invalid_type",
                    "a message's 'content' must be a string or an array of text parts");
    }
    if (!*out) return fail(er, 500, NULL, NULL, "out of memory");
    if (strlen(*out) != (json_is_string(v) ? json_string_length(v) : strlen(*out))) {
        free(*out);
        return fail(er, 400, "messages", "invalid_value", "a message holds a NUL character");
    }
    return 0;
}

/* Whether the request's messages carry tool calls or tool results. */
static bool has_tool_messages(json_t *msgs) {
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls");
        if ((role && !strcmp(role, "tool")) || (calls && !json_is_null(calls))) return true;
    }
    return false;
}

static int tool_error(req_err *er, const srv_tool_err *te) {
    if (!te->code) return fail(er, 500, NULL, NULL, "out of memory");
    return fail(er, 400, te->param, te->code, "%s", te->msg);
}

/* The prompt of a chat request with tools or tool messages: the Jinja
 * template (--chat-template-file, else the file's) with OpenAI's messages
 * and the tools. */
static int tools_prompt(const srv_http *h, const cllm_model *m, json_t *msgs, const srv_tools *t,
                        char **text, bool *bos, req_err *er) {
    const char *tmpl = h->o.chat_template ? h->o.chat_template : cllm_model_chat_template(m);
    if (!tmpl || h->o.chat_style) {
        return fail(er, 400, t->tools ? "tools" : "messages", "unsupported_value",
                    "tools and tool messages need a Jinja chat template (%s)",
                    h->o.chat_style ? "the server uses a built-in format (--chat-template)"
                                    : "the model file has none; see --chat-template-file");
    }
    const bool knows_tools = strstr(tmpl, "tools") != NULL;
    json_t *list = NULL;
    srv_tool_err te = {0};
    if (srv_tools_messages(msgs, t, knows_tools, &list, &te) < 0) return tool_error(er, &te);
    size_t bl = 0, el = 0;
    const int32_t bid = cllm_token_bos(m), eid = cllm_token_eos(m);
    const char *b = bid >= 0 ? cllm_token_to_piece(m, bid, true, &bl) : NULL;
    const char *e = eid >= 0 ? cllm_token_to_piece(m, eid, true, &el) : NULL;
    json_t *ctx =
        json_pack("{s:o,s:b,s:s%,s:s%}", "messages", list, "add_generation_prompt", 1, "bos_token",
                  b ? b : "", b ? bl : 0, "eos_token", e ? e : "", e ? el : 0);
    if (ctx && t->tools && knows_tools) json_object_set(ctx, "tools", t->tools);
    char *cj = ctx ? json_dumps(ctx, JSON_COMPACT) : NULL;
    json_decref(ctx);
    if (!cj) return fail(er, 500, NULL, NULL, "out of memory");
    const cllm_status st = cllm_chat_template_render(tmpl, cj, text, NULL);
    free(cj);
    if (st == CLLM_ERR_NOMEM) return fail(er, 500, NULL, NULL, "out of memory");
    if (st != CLLM_OK) {
        return fail(er, 400, "messages", "invalid_value", "the chat template: %s",
                    cllm_last_error());
    }
    *bos = b && bl > 0 && !strncmp(*text, b, bl);
    return 0;
}

/* The prompt text of a chat request through the model's template; *bos:
 * whether the text begins with the BOS token's text. */
static int chat_prompt(const srv_http *h, const cllm_model *m, json_t *o, const srv_tools *t,
                       char **text, bool *bos, req_err *er) {
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        return fail(er, 400, "messages", msgs ? "invalid_type" : "missing_required_parameter",
                    "'messages' must be a non-empty array");
    }
    if (t->tools || has_tool_messages(msgs)) return tools_prompt(h, m, msgs, t, text, bos, er);
    const size_t n = json_array_size(msgs);
    cllm_chat_msg *cm = calloc(n, sizeof(*cm));
    char **contents = calloc(n, sizeof(*contents));
    int rc = -1;
    if (!cm || !contents) {
        fail(er, 500, NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(msgs, i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role)) {
            fail(er, 400, "messages", "invalid_type",
                 "messages[%zu] must be an object with a string 'role'", i);
            goto done;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            fail(er, 400, "messages", "invalid_value",
                 "messages[%zu]: role '%.64s' is not system, user or assistant", i, r);
            goto done;
        }
        json_t *content = json_object_get(msg, "content");
        if (!content) {
            fail(er, 400, "messages", "missing_required_parameter",
                 "messages[%zu] has no 'content'", i);
            goto done;
        }
        if (content_text(content, &contents[i], er) < 0) goto done;
        cm[i] = (cllm_chat_msg){.role = r, .content = contents[i]};
    }
    if (cli_chat_prompt(m, h->o.chat_style, h->o.chat_template, cm, n, text, bos) != CLLM_OK) {
        fail(er, 400, "messages", "invalid_value", "%s", cllm_last_error());
        goto done;
    }
    rc = 0;
done:
    for (size_t i = 0; contents && i < n; i++) free(contents[i]);
    free(contents);
    free(cm);
    return rc;
}

static int tokenize(const cllm_model *m, const char *text, bool add_special, bool parse_special,
                    int32_t **ids, size_t *n, req_err *er) {
    const size_t len = strlen(text);
    size_t need = 0;
    cllm_status st = cllm_tokenize(m, text, len, add_special, parse_special, NULL, 0, &need);
    if (st != CLLM_OK) return fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    *ids = malloc((need + 1) * sizeof(int32_t));
    if (!*ids) return fail(er, 500, NULL, NULL, "out of memory");
    st = cllm_tokenize(m, text, len, add_special, parse_special, *ids, need + 1, n);
    if (st != CLLM_OK) {
        free(*ids);
        return fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    }
    return 0;
}

/* ---- completions -------------------------------------------------------- */

/* What a response (whole or streamed) needs beside the job. */
typedef struct reply {
    srv_http *h;
    srv_engine *e;
    srv_job *job;
    bool chat, include_usage;
    char id[48];
    long long created;
    size_t n_prompt;
    struct MHD_Connection *c;
    /* streaming */
    char *buf;
    size_t len, pos, cap;
    bool role_sent, ended;
    /* tools offered: the text is held back (streamed too) until it ends,
     * to be read as tool calls or sent as content */
    bool tools_on;
    char *held;
    size_t held_len;
} reply;

static const char *finish_str(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

static json_t *usage_json(const reply *r) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt,
                     "completion_tokens", (json_int_t)r->job->n_completion, "total_tokens",
                     (json_int_t)(r->n_prompt + r->job->n_completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)r->job->n_cached);
}

/* Chat-style logprob entries (stolen) in the shape of the endpoint. */
static json_t *logprobs_json(const reply *r, json_t *entries, size_t text_offset) {
    if (!entries) return json_null();
    if (r->chat) return json_pack("{s:o}", "content", entries);
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i;
    json_t *en;
    json_array_foreach(entries, i, en) {
        json_t *tok = json_object_get(en, "token");
        json_array_append(tokens, tok);
        json_array_append(lps, json_object_get(en, "logprob"));
        json_t *top = json_object(), *t;
        size_t k;
        json_array_foreach(json_object_get(en, "top_logprobs"), k, t) {
            json_object_set(top, json_string_value(json_object_get(t, "token")),
                            json_object_get(t, "logprob"));
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)text_offset));
        text_offset += json_string_length(tok);
    }
    json_decref(entries);
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

/* One choice (or delta) object. */
static json_t *choice_json(const reply *r, const char *text, size_t len, json_t *lp,
                           const char *finish, bool stream) {
    size_t n = 0;
    char *clean = srv_utf8_clean(text ? text : "", text ? len : 0, &n);
    json_t *ch;
    if (r->chat && stream) {
        json_t *delta = json_object();
        if (!r->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
        if (n > 0 || !r->role_sent) json_object_set_new(delta, "content", json_stringn(clean, n));
        ch = json_pack("{s:i,s:o}", "index", 0, "delta", delta);
    } else if (r->chat) {
        ch = json_pack("{s:i,s:{s:s,s:s%}}", "index", 0, "message", "role", "assistant", "content",
                       clean, n);
    } else {
        ch = json_pack("{s:i,s:s%}", "index", 0, "text", clean, n);
    }
    free(clean);
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    return ch;
}

static json_t *envelope(const reply *r, bool stream, json_t *choices) {
    const char *object =
        r->chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->h->o.model_id, "choices", choices);
}

/* Appends "data: JSON\n\n" (j stolen) to the stream's buffer. */
static bool sse_put(reply *r, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return false;
    const size_t n = strlen(s);
    if (r->len + n + 8 > r->cap) {
        const size_t cap = (r->len + n + 8) * 2;
        char *nb = realloc(r->buf, cap);
        if (!nb) {
            free(s);
            return false;
        }
        r->buf = nb;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, "data: ", 6);
    memcpy(r->buf + r->len + 6, s, n);
    memcpy(r->buf + r->len + 6 + n, "\n\n", 2);
    r->len += n + 8;
    free(s);
    return true;
}

static void sse_chunk(reply *r, const char *text, size_t len, json_t *lp, const char *finish) {
    json_t *ch = choice_json(r, text, len, lp, finish, true);
    r->role_sent = true;
    json_t *env = envelope(r, true, json_pack("[o]", ch));
    if (r->include_usage) json_object_set_new(env, "usage", json_null());
    sse_put(r, env);
}

/* The end of a stream whose text was held back for tool calls: the calls
 * as tool_calls deltas (with any text before them as content), or the
 * text; then the finish reason. */
static void sse_tools_end(reply *r, const char *finish) {
    size_t n = r->held_len;
    json_t *calls = srv_tools_extract(r->held ? r->held : "", r->held_len, &n);
    if (n > 0 || !calls) sse_chunk(r, r->held, n, NULL, NULL);
    if (!calls) {
        sse_chunk(r, NULL, 0, NULL, finish);
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_t *delta = json_pack("{s:[O]}", "tool_calls", c);
        if (!r->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
        r->role_sent = true;
        json_t *ch =
            json_pack("{s:i,s:o,s:n,s:n}", "index", 0, "delta", delta, "logprobs", "finish_reason");
        json_t *env = envelope(r, true, json_pack("[o]", ch));
        if (r->include_usage) json_object_set_new(env, "usage", json_null());
        sse_put(r, env);
    }
    json_decref(calls);
    sse_chunk(r, NULL, 0, NULL, "tool_calls");
}

/* The error of a job that ended without an answer (NULL: it has one). */
static bool job_error(const srv_job *j, req_err *er) {
    switch (j->finish) {
    case SRV_FINISH_TIMEOUT:
        fail(er, 504, NULL, "timeout", "the request took longer than the server's --timeout");
        return true;
    case SRV_FINISH_CANCELLED:
        fail(er, 503, NULL, "cancelled", "the request was cancelled (the server is stopping)");
        return true;
    case SRV_FINISH_ERROR: fail(er, 500, NULL, NULL, "%s", j->error); return true;
    default: return false;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    reply *r = cls;
    for (;;) {
        if (r->pos < r->len) {
            const size_t n = r->len - r->pos < max ? r->len - r->pos : max;
            memcpy(buf, r->buf + r->pos, n);
            r->pos += n;
            return (ssize_t)n;
        }
        if (r->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        r->len = r->pos = 0;
        srv_engine *e = r->e;
        srv_job *j = r->job;
        pthread_mutex_lock(&e->mu);
        while (j->out_len == 0 && !j->logprobs && j->state != SRV_JOB_DONE) {
            job_wait(e, j);
            if (j->out_len == 0 && j->state != SRV_JOB_DONE && !client_alive(r->c)) {
                pthread_mutex_unlock(&e->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the release cancels it */
            }
        }
        char *text = j->out;
        const size_t len = j->out_len;
        json_t *lp = j->logprobs;
        j->out = NULL;
        j->out_len = j->out_cap = 0;
        j->logprobs = NULL;
        const bool done = j->state == SRV_JOB_DONE;
        pthread_mutex_unlock(&e->mu);
        if (r->tools_on && len > 0) {
            char *nb = realloc(r->held, r->held_len + len + 1);
            if (nb) {
                memcpy(nb + r->held_len, text, len);
                r->held = nb;
                r->held_len += len;
            }
            if (lp) sse_chunk(r, NULL, 0, logprobs_json(r, lp, 0), NULL);
        } else if (len > 0 || lp) {
            sse_chunk(r, text, len, logprobs_json(r, lp, 0), NULL);
        }
        free(text);
        if (done) {
            req_err er;
            if (job_error(j, &er)) {
                sse_put(r, error_json(&er));
            } else {
                if (r->tools_on) {
                    sse_tools_end(r, finish_str(j->finish));
                } else {
                    sse_chunk(r, NULL, 0, NULL, finish_str(j->finish));
                }
                if (r->include_usage) {
                    json_t *env = envelope(r, true, json_array());
                    json_object_set_new(env, "usage", usage_json(r));
                    sse_put(r, env);
                }
            }
            const size_t n = strlen("data: [DONE]\n\n");
            char *nb = r->len + n > r->cap ? realloc(r->buf, r->len + n) : r->buf;
            if (nb) {
                r->buf = nb;
                r->cap = r->cap > r->len + n ? r->cap : r->len + n;
                memcpy(r->buf + r->len, "data: [DONE]\n\n", n);
                r->len += n;
            }
            r->ended = true;
        }
    }
}

static void reply_free(reply *r) {
    if (r->job) srv_job_release(r->e, r->job);
    free(r->held);
    free(r->buf);
    free(r);
}

static void stream_free(void *cls) { reply_free(cls); }

/* The whole answer of a job that is not streamed. */
static enum MHD_Result answer_whole(reply *r) {
    srv_engine *e = r->e;
    srv_job *j = r->job;
    pthread_mutex_lock(&e->mu);
    while (j->state != SRV_JOB_DONE) {
        job_wait(e, j);
        if (j->state != SRV_JOB_DONE && !client_alive(r->c)) {
            pthread_mutex_unlock(&e->mu);
            reply_free(r); /* cancels it */
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&e->mu);
    req_err er;
    enum MHD_Result res;
    if (job_error(j, &er)) {
        res = send_error(r->h, r->c, &er);
    } else {
        json_t *lp = j->logprobs;
        j->logprobs = NULL;
        size_t n = j->out_len;
        json_t *calls = r->tools_on ? srv_tools_extract(j->out, j->out_len, &n) : NULL;
        json_t *ch = choice_json(r, j->out, n, logprobs_json(r, lp, 0),
                                 calls ? "tool_calls" : finish_str(j->finish), false);
        if (calls) {
            json_t *msg = json_object_get(ch, "message");
            if (n == 0) json_object_set_new(msg, "content", json_null());
            json_object_set_new(msg, "tool_calls", calls);
        }
        json_t *env = envelope(r, false, json_pack("[o]", ch));
        json_object_set_new(env, "usage", usage_json(r));
        res = send_json(r->h, r->c, 200, env);
    }
    reply_free(r);
    return res;
}

/* A response id unique across restarts: the prefix and 96 random bits (a
 * counter mixed in should getrandom fail). */
static void response_id(srv_http *h, const char *prefix, char *out, size_t size) {
    uint32_t w[3];
    if (getrandom(w, sizeof(w), 0) != (ssize_t)sizeof(w)) {
        const unsigned long n = atomic_fetch_add(&h->next_id, 1) + 1;
        w[0] = (uint32_t)time(NULL), w[1] = (uint32_t)n, w[2] = (uint32_t)getpid();
    }
    snprintf(out, size, "%s-%08x%08x%08x", prefix, w[0], w[1], w[2]);
}

/* Whether `name` is one this server answers to: with --strict-model-names
 * its file's name and its aliases, else any. */
static bool name_served(const srv_http *h, const char *name, bool any) {
    if (!strcmp(name, h->o.model_id)) return true;
    for (int i = 0; i < h->o.n_aliases; i++) {
        if (!strcmp(name, h->o.aliases[i])) return true;
    }
    return any && !h->o.strict_names;
}

/* With tool_choice required or named, the grammar that forces a call (in
 * place of the server's default; a request's own grammar conflicts). */
static int tool_grammar(const srv_http *h, const cllm_model *m, json_t *o, const srv_tools *t,
                        srv_gen_params *gp, req_err *er) {
    if (!t->tools || (t->choice != SRV_TOOL_REQUIRED && t->choice != SRV_TOOL_NAMED)) return 0;
    static const char *const keys[] = {"response_format", "grammar", "json_schema"};
    for (size_t i = 0; i < N_OF(keys); i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (v && !json_is_null(v)) {
            return fail(er, 400, keys[i], "invalid_value",
                        "'%s' and a forced tool call (tool_choice): give one", keys[i]);
        }
    }
    const char *tmpl = h->o.chat_template ? h->o.chat_template : cllm_model_chat_template(m);
    const bool hermes = tmpl && !h->o.chat_style && strstr(tmpl, "<tool_call>");
    const char *root = NULL;
    srv_tool_err te = {0};
    char *g = srv_tools_grammar(t, hermes, &root, &te);
    if (!g) return tool_error(er, &te);
    free(gp->grammar);
    gp->grammar = g;
    gp->rp.sampling.grammar = g;
    gp->rp.sampling.grammar_root = root; /* a constant string */
    if (cllm_sampler_params_check(&gp->rp.sampling, cllm_model_n_vocab(m)) != CLLM_OK) {
        return fail(er, 400, "tools", "invalid_schema", "the tools' grammar: %s",
                    cllm_last_error());
    }
    return 0;
}

static enum MHD_Result completions(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                   const conn *cn, bool chat) {
    req_err er = {0};
    json_error_t jerr;
    json_t *o = json_loadb(cn->body ? cn->body : "", cn->len, 0, &jerr);
    srv_gen_params gp = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    bool stream = false, usage = false;
    if (!o) {
        if (json_error_code(&jerr) == json_error_invalid_utf8) {
            fail(&er, 400, NULL, "invalid_utf8", "the request body is not valid UTF-8");
        } else {
            fail(&er, 400, NULL, "invalid_json",
                 "the request body is not valid JSON: %s (at "
                 "byte %d)",
                 jerr.text, jerr.position);
        }
        goto bad;
    }
    if (!json_is_object(o)) {
        fail(&er, 400, NULL, "invalid_type", "the request body must be a JSON object");
        goto bad;
    }
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            fail(&er, 400, "model", "invalid_type", "'model' must be a string");
            goto bad;
        }
        if (!name_served(h, json_string_value(model), true)) {
            fail(&er, 404, "model", "model_not_found",
                 "the model '%.200s' does not exist (this server has '%s'%s)",
                 json_string_value(model), h->o.model_id, h->o.n_aliases ? " and its aliases" : "");
            goto bad;
        }
    }
    if (parse_gen(h, o, chat, cllm_model_n_vocab(e->model), &gp, &stream, &usage, &er) < 0)
        goto bad;
    bool tools_on = false;
    if (chat) {
        srv_tools tools = {0};
        srv_tool_err te = {0};
        if (srv_tools_parse(o, &tools, &te) < 0) {
            tool_error(&er, &te);
            goto bad;
        }
        if (tool_grammar(h, e->model, o, &tools, &gp, &er) < 0) goto bad;
        tools_on = tools.tools != NULL;
        bool bos = false;
        if (chat_prompt(h, e->model, o, &tools, &text, &bos, &er) < 0) goto bad;
        if (tokenize(e->model, text, !bos, true, &ids, &n_ids, &er) < 0) goto bad;
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p)) {
            fail(&er, 400, "prompt", p ? "invalid_type" : "missing_required_parameter",
                 "'prompt' must be a string (or an array of one string)");
            goto bad;
        }
        if (strlen(json_string_value(p)) != json_string_length(p)) {
            fail(&er, 400, "prompt", "invalid_value", "'prompt' holds a NUL character");
            goto bad;
        }
        if (tokenize(e->model, json_string_value(p), true, false, &ids, &n_ids, &er) < 0) goto bad;
    }
    if (n_ids == 0) {
        fail(&er, 400, chat ? "messages" : "prompt", "invalid_value", "the prompt has no tokens");
        goto bad;
    }
    if ((int64_t)n_ids >= e->n_ctx) {
        fail(&er, 400, chat ? "messages" : "prompt", "context_length_exceeded",
             "the prompt has %zu tokens; the context of a slot holds %lld (-c), and at least one "
             "must be left to generate",
             n_ids, (long long)e->n_ctx);
        goto bad;
    }
    if (gp.rp.max_tokens >= 0 && (int64_t)n_ids + gp.rp.max_tokens > e->n_ctx) {
        fail(&er, 400, "max_tokens", "context_length_exceeded",
             "the context of a slot holds %lld tokens (-c), but %zu prompt tokens and %d of "
             "max_tokens were asked for",
             (long long)e->n_ctx, n_ids, gp.rp.max_tokens);
        goto bad;
    }
    free(text);
    text = NULL;
    json_decref(o);
    o = NULL;

    const double deadline = h->o.timeout_s > 0 ? cllm_time_ms() + h->o.timeout_s * 1e3 : 0;
    srv_job *j = srv_job_new(ids, n_ids, &gp, deadline);
    if (j) j->stream = stream;
    ids = NULL;
    gp.n_stop = 0; /* the job owns the stop strings, the bias and the grammar */
    gp.bias = NULL;
    gp.grammar = NULL;
    reply *r = calloc(1, sizeof(*r));
    if (!j || !r) {
        if (j) srv_job_release(e, j), srv_job_release(e, j);
        free(r);
        fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    *r = (reply){.h = h,
                 .e = e,
                 .chat = chat,
                 .include_usage = usage && stream,
                 .tools_on = tools_on,
                 .created = (long long)time(NULL),
                 .n_prompt = n_ids,
                 .c = c};
    response_id(h, chat ? "chatcmpl" : "cmpl", r->id, sizeof(r->id));
    if (!srv_engine_submit(e, j)) {
        srv_job_release(e, j); /* never queued: both references */
        srv_job_release(e, j);
        free(r);
        fail(&er, 503, NULL, "queue_full",
             "the server is busy: every slot is taken and the queue is full; retry later");
        return send_error(h, c, &er);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.requests[chat ? 0 : 1]++;
    pthread_mutex_unlock(&e->mu);
    r->job = j;
    if (!stream) return answer_whole(r);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, r, stream_free);
    if (!resp) {
        reply_free(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    add_cors(h, c, resp);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
bad:
    pthread_mutex_lock(&e->mu);
    e->stats.rejected++;
    pthread_mutex_unlock(&e->mu);
    json_decref(o);
    free(text);
    free(ids);
    srv_gen_params_free(&gp);
    return send_error(h, c, &er);
}

/* ---- other endpoints ---------------------------------------------------- */

static json_t *model_json(const char *id) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)0,
                     "owned_by", "cllm");
}

/* GET /v1/models: the file's name, then the aliases; GET /v1/models/{id}:
 * one of them. */
static enum MHD_Result models(srv_http *h, struct MHD_Connection *c, const char *id) {
    if (id) {
        if (!name_served(h, id, false)) {
            req_err er = {0};
            fail(&er, 404, "model", "model_not_found", "the model '%.200s' does not exist", id);
            return send_error(h, c, &er);
        }
        return send_json(h, c, 200, model_json(id));
    }
    json_t *list = json_array();
    json_array_append_new(list, model_json(h->o.model_id));
    for (int i = 0; i < h->o.n_aliases; i++)
        json_array_append_new(list, model_json(h->o.aliases[i]));
    return send_json(h, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", list));
}

static enum MHD_Result metrics(const srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    const cllm_memory_report mem = srv_engine_memory(e);
    pthread_mutex_lock(&e->mu);
    const srv_stats st = e->stats;
    const int queued = e->n_queued, busy = e->n_busy;
    pthread_mutex_unlock(&e->mu);
    char buf[4096];
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
    if (n < 0 || (size_t)n >= sizeof(buf)) return MHD_NO;
    return send_text(h, c, 200, "text/plain; version=0.0.4", buf, (size_t)n, NULL);
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
    EP_EMBEDDINGS /* server-embed.c */
} endpoint;

static endpoint endpoint_of(const char *url, const char **id) {
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) return EP_HEALTH;
    if (!strcmp(url, "/metrics")) return EP_METRICS;
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
    add_cors(h, c, r);
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

static enum MHD_Result route(srv_http *h, struct MHD_Connection *c, conn *cn, const char *url,
                             const char *method) {
    req_err er = {0};
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    srv_engine *e = atomic_load(&h->engine);
    const char *id = NULL;
    const endpoint ep = endpoint_of(url, &id);
    if (!strcmp(method, "OPTIONS") && ep != EP_NONE && cors_origin(h, c)) return preflight(h, c);
    if (ep == EP_HEALTH) {
        if (!e) {
            fail(&er, 503, NULL, "loading", "the model is loading");
            return send_error(h, c, &er);
        }
        return send_json(h, c, 200, json_pack("{s:s}", "status", "ok"));
    }
    if (cn->too_large) {
        fail(&er, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
             h->o.max_body);
        return send_error(h, c, &er);
    }
    if (h->o.api_key && !key_equal(request_key(c), h->o.api_key)) {
        fail(&er, 401, NULL, "invalid_api_key",
             "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        return send_error(h, c, &er);
    }
    if (ep == EP_METRICS && !h->o.metrics) {
        fail(&er, 404, NULL, "not_found", "/metrics is off (start the server with --metrics)");
        return send_error(h, c, &er);
    }
    if (ep == EP_NONE) {
        fail(&er, 404, NULL, "not_found", "no endpoint %.200s %.200s", method, url);
        return send_error(h, c, &er);
    }
    const bool takes_post = ep == EP_CHAT || ep == EP_COMPLETIONS || ep == EP_EMBEDDINGS;
    if (takes_post ? !post : !get) {
        fail(&er, 405, NULL, "method_not_allowed", "%.200s takes %s", url,
             takes_post ? "POST" : "GET");
        return send_error(h, c, &er);
    }
    if (!e) {
        fail(&er, 503, NULL, "loading", "the model is loading");
        return send_error(h, c, &er);
    }
    switch (ep) {
    case EP_CHAT: return completions(h, e, c, cn, true);
    case EP_COMPLETIONS: return completions(h, e, c, cn, false);
    case EP_MODELS: return models(h, c, NULL);
    case EP_MODEL: return models(h, c, id);
    case EP_EMBEDDINGS: {
        unsigned status = 500;
        json_t *j = srv_embeddings(e, &h->o, cn->body, cn->len, &status);
        return j ? send_json(h, c, status, j) : MHD_NO;
    }
    default: return metrics(h, e, c);
    }
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
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body) cn->too_large = true;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!cn->too_large && cn->len + *upload_size > h->o.max_body) {
            cn->too_large = true;
        }
        if (!cn->too_large) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                const size_t cap = (cn->len + *upload_size + 1) * 2;
                char *nb = realloc(cn->body, cap);
                if (!nb) return MHD_NO;
                cn->body = nb;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const enum MHD_Result r = route(h, c, cn, url, method);
    if (h->o.verbose) fprintf(stderr, "cllm serve: %s %s\n", method, url);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    srv_http *h = cls;
    conn *cn = *con_cls;
    if (cn) {
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
    /* a numeric address only: IPv4, or IPv6 (which then takes IPv6 only) */
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opts->port)};
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_ERROR_LOG | MHD_USE_ITC;
    const struct sockaddr *addr = (const struct sockaddr *)&a4;
    if (inet_pton(AF_INET6, opts->host, &a6.sin6_addr) == 1) {
        flags |= MHD_USE_IPv6;
        addr = (const struct sockaddr *)&a6;
    } else if (inet_pton(AF_INET, opts->host, &a4.sin_addr) != 1) {
        fprintf(stderr, "cllm serve: --host: '%s' is not an IPv4 or IPv6 address\n", opts->host);
        free(h);
        return NULL;
    }
    h->d = MHD_start_daemon(
        flags, (uint16_t)opts->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
        MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "cllm serve: cannot listen on %s:%d (in use, or not permitted)\n",
                opts->host, opts->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = di ? (int)di->port : opts->port;
    return h;
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
    free(h);
}
