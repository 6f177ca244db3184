/* cllm serve: the HTTP side (libmicrohttpd on a few polling threads, a
 * request waiting for the engine suspended): the endpoints, request parsing
 * and validation, and the responses, whole or streamed as server-sent
 * events (server.h). The connections' limits are server-conn.c's. */
#include "server.h"

#include "server-conn.h"

#include "commands.h"

#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
    srv_conns *conns;  /* the connections' limits */
    /* the longest token piece of the model (0: not known yet): a prompt
     * of n bytes has at least n / max_piece tokens */
    atomic_size_t max_piece;
};

typedef struct reply reply;

/* What the request's handler keeps between its calls. */
typedef struct conn {
    char *body; /* the body so far */
    size_t len, cap;
    bool answered;  /* a response was queued from the headers alone */
    reply *pending; /* a whole answer the engine has not finished (suspended) */
    bool blocked;   /* the handler returned once without an answer */
} conn;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
typedef srv_req_err req_err;

static void fail_v(req_err *er, unsigned status, const char *param, const char *code,
                   const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void fail_v(req_err *er, unsigned status, const char *param, const char *code,
                   const char *fmt, va_list ap) {
    er->status = status;
    er->type = status == 401   ? "authentication_error"
               : status == 404 ? "not_found_error"
               : status >= 500 ? "server_error"
                               : "invalid_request_error";
    er->param = param;
    er->code = code;
    vsnprintf(er->msg, sizeof(er->msg), fmt, ap);
}

static int fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));

static int fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
                ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(er, status, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_fail(req_err *er, unsigned status, const char *param, const char *code, const char *fmt,
             ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(er, status, param, code, fmt, ap);
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

void srv_gen_defaults(const srv_http *h, srv_gen_params *gp) {
    *gp = h->o.defaults;
    gp->n_stop = 0;
    gp->bias = NULL;
    gp->grammar = NULL;
    gp->rp.sampling.grammar = NULL;
    if (!h->o.seed_given) {
        uint64_t x = 0;
        if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
            x = (uint64_t)(cllm_time_ms() * 1e6);
        }
        gp->rp.sampling.seed = x;
    }
}

/* The generation settings of a request over the server's defaults. */
static int parse_gen(const srv_http *h, json_t *o, bool chat, int32_t n_vocab, srv_gen_params *gp,
                     bool *stream, bool *usage, req_err *er) {
    srv_gen_defaults(h, gp);
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

/* The longest piece of a token of m, in bytes (control tokens' text
 * included), computed once. */
static size_t max_piece(srv_http *h, const cllm_model *m) {
    size_t mp = atomic_load(&h->max_piece);
    if (mp) return mp;
    const int32_t n = cllm_model_n_vocab(m);
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        if (cllm_token_to_piece(m, id, true, &len) && len > mp) mp = len;
    }
    if (mp == 0) mp = 1;
    atomic_store(&h->max_piece, mp);
    return mp;
}

/* The tokens of a prompt that must leave a token of the context free.
 * Every byte of the text is in the piece of some token (the tokenizers,
 * SentencePiece and byte-level BPE, lose no byte), so a text of n bytes
 * has at least n / max_piece tokens: a text that cannot fit is refused
 * before tokenizing it, and the rest is tokenized once, with the ids
 * capped at the context. */
static int tokenize_prompt(srv_http *h, const cllm_model *m, int64_t n_ctx, const char *text,
                           bool add_special, bool parse_special, const char *param, int32_t **ids,
                           size_t *n, req_err *er) {
    const size_t len = strlen(text), mp = max_piece(h, m);
    if (len / mp >= (size_t)n_ctx) {
        return fail(er, 400, param, "context_length_exceeded",
                    "the prompt has at least %zu tokens (%zu bytes, at most %zu bytes a token); "
                    "the context of a slot holds %lld (-c), and at least one must be left to "
                    "generate",
                    len / mp, len, mp, (long long)n_ctx);
    }
    const size_t cap = (size_t)n_ctx;
    *ids = malloc(cap * sizeof(int32_t));
    if (!*ids) return fail(er, 500, NULL, NULL, "out of memory");
    const cllm_status st = cllm_tokenize(m, text, len, add_special, parse_special, *ids, cap, n);
    if (st == CLLM_ERR_TOO_LARGE && *n >= cap) {
        free(*ids);
        *ids = NULL;
        return fail(er, 400, param, "context_length_exceeded",
                    "the prompt has %zu tokens; the context of a slot holds %lld (-c), and at "
                    "least one must be left to generate",
                    *n, (long long)n_ctx);
    }
    if (st != CLLM_OK) {
        free(*ids);
        *ids = NULL;
        return fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    }
    return 0;
}

/* The tokens of a text, uncapped (/tokenize, Ollama's prompts, lists of
 * prompts: their bodies are bounded by --max-body). */
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
        *ids = NULL;
        return fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    }
    return 0;
}

/* Whether the client of a connection that blocks on its job is still there:
 * a reset or an error says it left; a half-close (POLLRDHUP) does not, its
 * answer is still read. */
static bool client_alive(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = 0};
    if (poll(&p, 1, 0) <= 0) return true;
    return !(p.revents & (POLLHUP | POLLERR));
}

/* Waits (under the engine's mutex) for a job's next change, at most 100 ms.
 * Only the answers written through srv_http_answer (Ollama's) and lists of
 * prompts wait so, holding their polling thread; the OpenAI answers are
 * suspended until the engine wakes them. */
static void job_wait(srv_engine *e, srv_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cond, &e->mu, &ts);
}

/* ---- completions -------------------------------------------------------- */

/* Queues a 200 of server-sent events read by `rd` from `cls`; `fr` frees
 * cls, at once when the response cannot be made. */
static enum MHD_Result queue_sse(const srv_http *h, struct MHD_Connection *c,
                                 MHD_ContentReaderCallback rd, void *cls,
                                 MHD_ContentReaderFreeCallback fr) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, rd, cls, fr);
    if (!resp) {
        fr(cls);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    add_cors(h, c, resp);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}

/* What a response (whole or streamed) needs beside the job. */
struct reply {
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
    /* tools offered: the text is held back (streamed too) while it may be
     * a call in the template's form (srv_tools_plain), then sent as content
     * (held_sent bytes so far) or, at the end, read as tool calls */
    bool tools_on;
    srv_tool_format tool_format;
    char *held;
    size_t held_len, held_sent;
    /* under the engine's mutex: the connection is suspended until the
     * engine wakes it */
    bool suspended;
};

static const char *finish_str(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

static json_t *usage_json(const reply *r) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt,
                     "completion_tokens", (json_int_t)r->job->n_completion, "total_tokens",
                     (json_int_t)(r->n_prompt + r->job->n_completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)r->job->n_cached);
}

/* llama.cpp's timings of a reply: its passes, and the draft tokens of
 * speculative decoding verified and kept. */
static json_t *timings_json(const reply *r) {
    const srv_job *j = r->job;
    return json_pack("{s:I,s:f,s:I,s:f,s:I,s:I}", "prompt_n",
                     (json_int_t)(r->n_prompt - j->n_cached), "prompt_ms", j->prompt_ms,
                     "predicted_n", (json_int_t)j->n_completion, "predicted_ms", j->gen_ms,
                     "draft_n", (json_int_t)j->n_drafted, "draft_n_accepted",
                     (json_int_t)j->n_accepted);
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
    const char *rest = r->held ? r->held + r->held_sent : "";
    size_t n = r->held_len - r->held_sent;
    json_t *calls = srv_tools_extract(r->tool_format, rest, n, r->held_sent == 0, &n);
    if (n > 0) sse_chunk(r, rest, n, NULL, NULL);
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
        if (j->out_len == 0 && !j->logprobs && j->state != SRV_JOB_DONE) {
            /* nothing yet: no thread waits, the engine's next event resumes
             * the connection (a client gone shows as a write error then) */
            r->suspended = true;
            MHD_suspend_connection(r->c);
            pthread_mutex_unlock(&e->mu);
            return 0;
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
            const size_t n = srv_tools_plain(r->tool_format, r->held, r->held_len);
            if (n > r->held_sent || lp) {
                const size_t k = n > r->held_sent ? n - r->held_sent : 0;
                sse_chunk(r, r->held + r->held_sent, k, logprobs_json(r, lp, 0), NULL);
                r->held_sent += k;
            }
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
                    json_object_set_new(env, "timings", timings_json(r));
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

/* The engine's wake-ups (under its mutex): a stream's connection resumes
 * on any event, a whole answer's at the end only. */
static void stream_wake(void *arg) {
    reply *r = arg;
    if (!r->suspended) return;
    r->suspended = false;
    MHD_resume_connection(r->c);
}

static void whole_wake(void *arg) {
    reply *r = arg;
    if (!r->suspended || r->job->state != SRV_JOB_DONE) return;
    r->suspended = false;
    MHD_resume_connection(r->c);
}

/* The whole answer of a job that is not streamed (cn->pending): until the
 * job ends, the connection is suspended (a half-close of the client is
 * not a reason to stop; a reset is, see server-conn.c). */
static enum MHD_Result answer_whole(conn *cn) {
    reply *r = cn->pending;
    srv_engine *e = r->e;
    srv_job *j = r->job;
    srv_conns_wait(r->h->conns, r->c, e, j);
    pthread_mutex_lock(&e->mu);
    if (j->state != SRV_JOB_DONE && !cn->blocked) {
        /* once without suspending: libmicrohttpd (0.9.75) then stops
         * reading the socket and calls again at once; suspended at once,
         * it would read after the resume, and take a half-close for the
         * client gone */
        pthread_mutex_unlock(&e->mu);
        cn->blocked = true;
        return MHD_YES;
    }
    if (j->state != SRV_JOB_DONE) {
        r->suspended = true;
        MHD_suspend_connection(r->c);
        pthread_mutex_unlock(&e->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&e->mu);
    srv_conns_phase(r->h->conns, r->c, SRV_PHASE_SEND);
    cn->pending = NULL;
    req_err er;
    enum MHD_Result res;
    if (job_error(j, &er)) {
        res = send_error(r->h, r->c, &er);
    } else {
        json_t *lp = j->logprobs;
        j->logprobs = NULL;
        size_t n = j->out_len;
        json_t *calls =
            r->tools_on ? srv_tools_extract(r->tool_format, j->out, j->out_len, true, &n) : NULL;
        json_t *ch = choice_json(r, j->out, n, logprobs_json(r, lp, 0),
                                 calls ? "tool_calls" : finish_str(j->finish), false);
        if (calls) {
            json_t *msg = json_object_get(ch, "message");
            if (n == 0) json_object_set_new(msg, "content", json_null());
            json_object_set_new(msg, "tool_calls", calls);
        }
        json_t *env = envelope(r, false, json_pack("[o]", ch));
        json_object_set_new(env, "usage", usage_json(r));
        json_object_set_new(env, "timings", timings_json(r));
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
static int tool_grammar(const cllm_model *m, json_t *o, const srv_tools *t, srv_gen_params *gp,
                        req_err *er) {
    if (!t->tools || (t->choice != SRV_TOOL_REQUIRED && t->choice != SRV_TOOL_NAMED)) return 0;
    static const char *const keys[] = {"response_format", "grammar", "json_schema"};
    for (size_t i = 0; i < N_OF(keys); i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (v && !json_is_null(v)) {
            return fail(er, 400, keys[i], "invalid_value",
                        "'%s' and a forced tool call (tool_choice): give one", keys[i]);
        }
    }
    const char *root = NULL;
    srv_tool_err te = {0};
    char *g = srv_tools_grammar(t, &root, &te);
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

static bool prompt_is_list(json_t *p);
static enum MHD_Result completions_list(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                        json_t *p, srv_gen_params *gp, bool stream, bool usage);

static enum MHD_Result completions(srv_http *h, srv_engine *e, struct MHD_Connection *c, conn *cn,
                                   bool chat) {
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
    srv_tool_format tool_format = SRV_TOOLFMT_GENERIC;
    if (chat) {
        srv_tools tools = {0};
        srv_tool_err te = {0};
        if (srv_tools_parse(o, &tools, &te) < 0) {
            tool_error(&er, &te);
            goto bad;
        }
        tools.format = srv_http_tool_format(h, e->model);
        tool_format = tools.format;
        if (tool_grammar(e->model, o, &tools, &gp, &er) < 0) goto bad;
        tools_on = tools.tools != NULL;
        bool bos = false;
        if (chat_prompt(h, e->model, o, &tools, &text, &bos, &er) < 0) goto bad;
        if (tokenize_prompt(h, e->model, e->n_ctx, text, !bos, true, "messages", &ids, &n_ids,
                            &er) < 0) {
            goto bad;
        }
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (prompt_is_list(p)) {
            const enum MHD_Result res = completions_list(h, e, c, p, &gp, stream, usage);
            json_decref(o);
            return res;
        }
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p)) {
            fail(&er, 400, "prompt", p ? "invalid_type" : "missing_required_parameter",
                 "'prompt' must be a string, an array of token ids, or an array of those");
            goto bad;
        }
        if (strlen(json_string_value(p)) != json_string_length(p)) {
            fail(&er, 400, "prompt", "invalid_value", "'prompt' holds a NUL character");
            goto bad;
        }
        if (tokenize_prompt(h, e->model, e->n_ctx, json_string_value(p), true, false, "prompt",
                            &ids, &n_ids, &er) < 0) {
            goto bad;
        }
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
                 .tool_format = tool_format,
                 .created = (long long)time(NULL),
                 .n_prompt = n_ids,
                 .c = c};
    response_id(h, chat ? "chatcmpl" : "cmpl", r->id, sizeof(r->id));
    j->stream = stream;
    j->wake = stream ? stream_wake : whole_wake; /* not shared yet: no lock */
    j->wake_arg = r;
    r->job = j; /* before the engine can wake r */
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
    if (!stream) {
        cn->pending = r;
        return answer_whole(cn);
    }
    return queue_sse(h, c, stream_read, r, stream_free);
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

/* ---- shared with the other endpoint files (server.h) -------------------- */

const srv_http_opts *srv_http_options(const srv_http *h) { return &h->o; }

bool srv_name_served(const srv_http *h, const char *name, bool any) {
    return name_served(h, name, any);
}

enum MHD_Result srv_send_text(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              const char *type, const char *body, size_t len) {
    return send_text(h, c, status, type, body, len, status == 503 ? "1" : NULL);
}

enum MHD_Result srv_send_error(const srv_http *h, struct MHD_Connection *c, const req_err *er) {
    return send_error(h, c, er);
}

enum MHD_Result srv_send_json(const srv_http *h, struct MHD_Connection *c, unsigned status,
                              json_t *j) {
    return send_json(h, c, status, j);
}

json_t *srv_parse_body(const char *body, size_t len, req_err *er) {
    json_error_t jerr;
    json_t *o = json_loadb(body ? body : "", len, 0, &jerr);
    if (!o) {
        if (json_error_code(&jerr) == json_error_invalid_utf8) {
            fail(er, 400, NULL, "invalid_utf8", "the request body is not valid UTF-8");
        } else {
            fail(er, 400, NULL, "invalid_json",
                 "the request body is not valid JSON: %s (at byte %d)", jerr.text, jerr.position);
        }
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        fail(er, 400, NULL, "invalid_type", "the request body must be a JSON object");
        return NULL;
    }
    return o;
}

int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, req_err *er) {
    return get_num(o, key, lo, hi, out, er);
}

int srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                req_err *er) {
    return get_int(o, key, lo, hi, out, er);
}

int srv_get_bool(json_t *o, const char *key, bool *out, req_err *er) {
    return get_bool(o, key, out, er);
}

int srv_get_stop(json_t *o, srv_gen_params *gp, req_err *er) { return get_stop(o, gp, er); }

int srv_schema_grammar(json_t *schema, const char *param, int32_t n_vocab, srv_gen_params *gp,
                       req_err *er) {
    if (schema_grammar(schema, param, gp, er) < 0) return -1;
    gp->rp.sampling.grammar = gp->grammar;
    gp->rp.sampling.grammar_root = NULL;
    if (cllm_sampler_params_check(&gp->rp.sampling, n_vocab) != CLLM_OK) {
        return fail(er, 400, param, "invalid_grammar", "'%s': %s", param, cllm_last_error());
    }
    return 0;
}

srv_tool_format srv_http_tool_format(const srv_http *h, const cllm_model *m) {
    if (h->o.chat_style) return SRV_TOOLFMT_GENERIC; /* a built-in style names no form */
    return srv_tools_format(h->o.chat_template ? h->o.chat_template : cllm_model_chat_template(m));
}

int srv_chat_prompt(const srv_http *h, const cllm_model *m, json_t *o, const srv_tools *t,
                    char **text, bool *bos, req_err *er) {
    return chat_prompt(h, m, o, t, text, bos, er);
}

int srv_tokenize(const cllm_model *m, const char *text, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n, req_err *er) {
    return tokenize(m, text, add_special, parse_special, ids, n, er);
}

bool srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        const size_t cap = (b->len + n + 1) * 2;
        char *nb = realloc(b->data, cap);
        if (!nb) return false;
        b->data = nb;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool srv_buf_put_line(srv_buf *b, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const bool ok = s && srv_buf_put(b, s, strlen(s)) && srv_buf_put(b, "\n", 1);
    free(s);
    return ok;
}

/* A job answered through a srv_writer (srv_http_answer). */
typedef struct answer {
    srv_http *h;
    srv_engine *e;
    srv_job *job;
    struct MHD_Connection *c;
    const srv_writer *w;
    void *ctx;
    srv_buf out;
    size_t pos;
    bool ended;
} answer;

static void answer_free(answer *a) {
    if (a->job) srv_job_release(a->e, a->job);
    if (a->w->free) a->w->free(a->ctx);
    free(a->out.data);
    free(a);
}

static void answer_free_cb(void *cls) { answer_free(cls); }

/* Takes what the job produced (the mutex held). */
static void job_take(srv_job *j, char **text, size_t *len, json_t **lp) {
    *text = j->out;
    *len = j->out_len;
    *lp = j->logprobs;
    j->out = NULL;
    j->out_len = j->out_cap = 0;
    j->logprobs = NULL;
}

static ssize_t answer_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    answer *a = cls;
    for (;;) {
        if (a->pos < a->out.len) {
            const size_t n = a->out.len - a->pos < max ? a->out.len - a->pos : max;
            memcpy(buf, a->out.data + a->pos, n);
            a->pos += n;
            return (ssize_t)n;
        }
        if (a->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        a->out.len = a->pos = 0;
        srv_engine *e = a->e;
        srv_job *j = a->job;
        pthread_mutex_lock(&e->mu);
        while (j->out_len == 0 && !j->logprobs && j->state != SRV_JOB_DONE) {
            job_wait(e, j);
            if (j->out_len == 0 && j->state != SRV_JOB_DONE && !client_alive(a->c)) {
                pthread_mutex_unlock(&e->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the release cancels it */
            }
        }
        char *text;
        size_t len;
        json_t *lp;
        job_take(j, &text, &len, &lp);
        const bool done = j->state == SRV_JOB_DONE;
        pthread_mutex_unlock(&e->mu);
        bool ok = true;
        if (len > 0 || lp) ok = a->w->part(a->ctx, &a->out, text ? text : "", len, lp);
        free(text);
        if (done) {
            req_err er;
            const bool bad = job_error(j, &er);
            ok = a->w->end(a->ctx, &a->out, j, bad ? &er : NULL) && ok;
            a->ended = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

enum MHD_Result srv_http_answer(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_job *j,
                                bool chat, bool stream, const char *type, const srv_writer *w,
                                void *ctx, json_t *(*er_fn)(const req_err *er)) {
    answer *a = calloc(1, sizeof(*a));
    req_err er = {0};
    if (!a || !srv_engine_submit(e, j)) {
        srv_job_release(e, j); /* never queued: both references */
        srv_job_release(e, j);
        if (w->free) w->free(ctx);
        if (a) {
            fail(&er, 503, NULL, "queue_full",
                 "the server is busy: every slot is taken and the queue is full; retry later");
        } else {
            fail(&er, 500, NULL, NULL, "out of memory");
        }
        free(a);
        json_t *body = er_fn ? er_fn(&er) : error_json(&er);
        char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (!s) return MHD_NO;
        const enum MHD_Result r = send_text(h, c, er.status, "application/json", s, strlen(s),
                                            er.status == 503 ? "1" : NULL);
        free(s);
        return r;
    }
    *a = (answer){.h = h, .e = e, .job = j, .c = c, .w = w, .ctx = ctx};
    pthread_mutex_lock(&e->mu);
    e->stats.requests[chat ? 0 : 1]++;
    pthread_mutex_unlock(&e->mu);
    if (stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 4096, answer_read, a, answer_free_cb);
        if (!resp) {
            answer_free(a);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", type);
        add_cors(h, c, resp);
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        const enum MHD_Result res = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return res;
    }
    pthread_mutex_lock(&e->mu);
    while (j->state != SRV_JOB_DONE) {
        job_wait(e, j);
        if (j->state != SRV_JOB_DONE && !client_alive(c)) {
            pthread_mutex_unlock(&e->mu);
            answer_free(a); /* cancels it */
            return MHD_NO;
        }
    }
    char *text;
    size_t len;
    json_t *lp;
    job_take(j, &text, &len, &lp);
    pthread_mutex_unlock(&e->mu);
    const bool bad = job_error(j, &er);
    bool ok = true;
    if (bad) {
        json_decref(lp);
    } else {
        ok = w->part(ctx, &a->out, text ? text : "", len, lp);
    }
    free(text);
    ok = w->end(ctx, &a->out, j, bad ? &er : NULL) && ok;
    enum MHD_Result res;
    if (!ok) {
        fail(&er, 500, NULL, NULL, "out of memory");
        json_t *body = er_fn ? er_fn(&er) : error_json(&er);
        a->out.len = 0;
        ok = srv_buf_put_line(&a->out, body);
    }
    res = ok ? send_text(h, c, bad ? er.status : 200, type, a->out.data, a->out.len, NULL) : MHD_NO;
    answer_free(a);
    return res;
}

/* ---- a list of prompts (/v1/completions) -------------------------------- */

/* Most prompts in one request. */
#define MAX_PROMPTS 64

/* Whether "prompt" is OpenAI's other shapes: one prompt of token ids
 * [1, 2, ...], or a list of several prompts, each a string or token ids. */
static bool prompt_is_list(json_t *p) {
    if (!json_is_array(p) || json_array_size(p) == 0) return false;
    return json_array_size(p) > 1 || !json_is_string(json_array_get(p, 0));
}

/* A deep copy of gp's stops, bias and grammar into *dst. */
static bool gen_params_copy(const srv_gen_params *src, srv_gen_params *dst) {
    *dst = *src;
    dst->n_stop = 0;
    dst->bias = NULL;
    dst->grammar = NULL;
    for (int i = 0; i < src->n_stop; i++) {
        if (!(dst->stop[i] = strdup(src->stop[i]))) return srv_gen_params_free(dst), false;
        dst->n_stop++;
    }
    const int32_t nb = src->rp.sampling.n_logit_bias;
    if (src->bias && nb > 0) {
        if (!(dst->bias = malloc((size_t)nb * sizeof(*dst->bias)))) {
            return srv_gen_params_free(dst), false;
        }
        memcpy(dst->bias, src->bias, (size_t)nb * sizeof(*dst->bias));
        dst->rp.sampling.logit_bias = dst->bias;
    }
    if (src->grammar) {
        if (!(dst->grammar = strdup(src->grammar))) return srv_gen_params_free(dst), false;
        dst->rp.sampling.grammar = dst->grammar;
    }
    return true;
}

/* The tokens of prompt i of the list: a string, or an array of token ids. */
static int list_prompt(const cllm_model *m, json_t *p, size_t i, int32_t **ids, size_t *n,
                       req_err *er) {
    if (json_is_string(p)) {
        if (strlen(json_string_value(p)) != json_string_length(p)) {
            return fail(er, 400, "prompt", "invalid_value", "'prompt[%zu]' holds a NUL character",
                        i);
        }
        return tokenize(m, json_string_value(p), true, false, ids, n, er);
    }
    if (!json_is_array(p)) {
        return fail(er, 400, "prompt", "invalid_type",
                    "'prompt' must be a string, an array of token ids, or an array of those");
    }
    const int32_t n_vocab = cllm_model_n_vocab(m);
    const size_t k = json_array_size(p);
    if (!(*ids = malloc((k + 1) * sizeof(int32_t)))) {
        return fail(er, 500, NULL, NULL, "out of memory");
    }
    for (size_t t = 0; t < k; t++) {
        json_t *v = json_array_get(p, t);
        const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= n_vocab) {
            free(*ids);
            *ids = NULL;
            return fail(er, 400, "prompt", "invalid_value",
                        "'prompt[%zu]': element %zu is not a token id in [0, %d)", i, t, n_vocab);
        }
        (*ids)[t] = (int32_t)id;
    }
    *n = k;
    return 0;
}

/* The answer to a list of prompts: a job each, choice i for prompt i. */
typedef struct list_reply {
    reply r; /* the shared fields (chat false); r.job unused */
    srv_job *jobs[MAX_PROMPTS];
    size_t n_prompt[MAX_PROMPTS];
    size_t n, cur;
    bool include_usage;
} list_reply;

static void list_reply_free(list_reply *l) {
    for (size_t i = 0; i < l->n; i++) srv_job_release(l->r.e, l->jobs[i]);
    free(l->r.buf);
    free(l);
}

static void list_reply_free_cb(void *cls) { list_reply_free(cls); }

static json_t *list_usage(const list_reply *l) {
    size_t p = 0, g = 0, cached = 0;
    for (size_t i = 0; i < l->n; i++) {
        p += l->n_prompt[i];
        g += l->jobs[i]->n_completion;
        cached += l->jobs[i]->n_cached;
    }
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p, "completion_tokens",
                     (json_int_t)g, "total_tokens", (json_int_t)(p + g), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached);
}

/* A streamed chunk of choice i. */
static void list_chunk(list_reply *l, size_t i, const char *text, size_t len, json_t *lp,
                       const char *finish) {
    json_t *ch = choice_json(&l->r, text, len, lp, finish, true);
    json_object_set_new(ch, "index", json_integer((json_int_t)i));
    json_t *env = envelope(&l->r, true, json_pack("[o]", ch));
    if (l->include_usage) json_object_set_new(env, "usage", json_null());
    sse_put(&l->r, env);
}

/* The prompts' choices streamed one after the other (they are generated
 * at once; what a later one made waits in its job). */
static ssize_t list_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    list_reply *l = cls;
    reply *r = &l->r;
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
        srv_job *j = l->jobs[l->cur];
        pthread_mutex_lock(&e->mu);
        while (j->out_len == 0 && !j->logprobs && j->state != SRV_JOB_DONE) {
            job_wait(e, j);
            if (j->out_len == 0 && j->state != SRV_JOB_DONE && !client_alive(r->c)) {
                pthread_mutex_unlock(&e->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the release cancels them */
            }
        }
        char *text;
        size_t len;
        json_t *lp;
        job_take(j, &text, &len, &lp);
        const bool done = j->state == SRV_JOB_DONE;
        pthread_mutex_unlock(&e->mu);
        if (len > 0 || lp) list_chunk(l, l->cur, text, len, logprobs_json(r, lp, 0), NULL);
        free(text);
        if (!done) continue;
        req_err er;
        if (job_error(j, &er)) {
            sse_put(r, error_json(&er));
        } else {
            list_chunk(l, l->cur, NULL, 0, NULL, finish_str(j->finish));
            if (++l->cur < l->n) continue;
            if (l->include_usage) {
                json_t *env = envelope(r, true, json_array());
                json_object_set_new(env, "usage", list_usage(l));
                sse_put(r, env);
            }
        }
        const char *end = "data: [DONE]\n\n";
        char *nb = realloc(r->buf, r->len + strlen(end));
        if (nb) {
            r->buf = nb;
            r->cap = r->len + strlen(end);
            memcpy(r->buf + r->len, end, strlen(end));
            r->len += strlen(end);
        }
        r->ended = true;
    }
}

/* Every prompt's choice at once. */
static enum MHD_Result list_whole(list_reply *l) {
    srv_engine *e = l->r.e;
    json_t *choices = json_array();
    req_err er;
    bool bad = false;
    for (size_t i = 0; i < l->n && !bad; i++) {
        srv_job *j = l->jobs[i];
        pthread_mutex_lock(&e->mu);
        while (j->state != SRV_JOB_DONE) {
            job_wait(e, j);
            if (j->state != SRV_JOB_DONE && !client_alive(l->r.c)) {
                pthread_mutex_unlock(&e->mu);
                json_decref(choices);
                list_reply_free(l); /* cancels them */
                return MHD_NO;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if ((bad = job_error(j, &er))) break;
        json_t *lp = j->logprobs;
        j->logprobs = NULL;
        json_t *ch = choice_json(&l->r, j->out, j->out_len, logprobs_json(&l->r, lp, 0),
                                 finish_str(j->finish), false);
        json_object_set_new(ch, "index", json_integer((json_int_t)i));
        json_array_append_new(choices, ch);
    }
    enum MHD_Result res;
    if (bad) {
        json_decref(choices);
        res = send_error(l->r.h, l->r.c, &er);
    } else {
        json_t *env = envelope(&l->r, false, choices);
        json_object_set_new(env, "usage", list_usage(l));
        res = send_json(l->r.h, l->r.c, 200, env);
    }
    list_reply_free(l);
    return res;
}

/* POST /v1/completions with a list of prompts (p): a job for each, with
 * the same settings; takes gp. */
static enum MHD_Result completions_list(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                        json_t *p, srv_gen_params *gp, bool stream, bool usage) {
    req_err er = {0};
    list_reply *l = calloc(1, sizeof(*l));
    int32_t *ids = NULL;
    size_t n_ids = 0;
    /* a single prompt of token ids is a list of one */
    const bool one = json_is_integer(json_array_get(p, 0));
    const size_t n = one ? 1 : json_array_size(p);
    if (!l) {
        fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    if (n > MAX_PROMPTS) {
        fail(&er, 400, "prompt", "invalid_value", "'prompt' has %zu prompts, at most %d", n,
             MAX_PROMPTS);
        goto bad;
    }
    l->r = (reply){.h = h, .e = e, .created = (long long)time(NULL), .c = c};
    l->include_usage = usage && stream;
    response_id(h, "cmpl", l->r.id, sizeof(l->r.id));
    const double deadline = h->o.timeout_s > 0 ? cllm_time_ms() + h->o.timeout_s * 1e3 : 0;
    for (size_t i = 0; i < n; i++) {
        if (list_prompt(e->model, one ? p : json_array_get(p, i), i, &ids, &n_ids, &er) < 0) {
            goto bad;
        }
        if (n_ids == 0 || (int64_t)n_ids >= e->n_ctx) {
            fail(&er, 400, "prompt", n_ids ? "context_length_exceeded" : "invalid_value",
                 "prompt %zu has %zu tokens; the context of a slot holds %lld (-c), and at least "
                 "one must be left to generate",
                 i, n_ids, (long long)e->n_ctx);
            goto bad;
        }
        if (gp->rp.max_tokens >= 0 && (int64_t)n_ids + gp->rp.max_tokens > e->n_ctx) {
            fail(&er, 400, "max_tokens", "context_length_exceeded",
                 "the context of a slot holds %lld tokens (-c), but prompt %zu has %zu tokens and "
                 "max_tokens is %d",
                 (long long)e->n_ctx, i, n_ids, gp->rp.max_tokens);
            goto bad;
        }
        srv_gen_params own;
        if (!gen_params_copy(gp, &own)) {
            fail(&er, 500, NULL, NULL, "out of memory");
            goto bad;
        }
        srv_job *j = srv_job_new(ids, n_ids, &own, deadline);
        ids = NULL;
        if (!j) {
            fail(&er, 500, NULL, NULL, "out of memory");
            goto bad;
        }
        j->stream = stream;
        l->n_prompt[l->n] = n_ids;
        l->jobs[l->n++] = j;
    }
    srv_gen_params_free(gp);
    for (size_t i = 0; i < l->n; i++) {
        if (!srv_engine_submit(e, l->jobs[i])) {
            /* those not queued hold both references */
            for (size_t k = i; k < l->n; k++) srv_job_release(e, l->jobs[k]);
            list_reply_free(l);
            fail(&er, 503, NULL, "queue_full",
                 "the server is busy: the queue has no room for %zu prompts; retry later", n);
            return send_error(h, c, &er);
        }
    }
    pthread_mutex_lock(&e->mu);
    e->stats.requests[1]++;
    pthread_mutex_unlock(&e->mu);
    if (!stream) return list_whole(l);
    return queue_sse(h, c, list_stream_read, l, list_reply_free_cb);
bad:
    pthread_mutex_lock(&e->mu);
    e->stats.rejected++;
    pthread_mutex_unlock(&e->mu);
    free(ids);
    if (l) {
        /* never queued: both references */
        for (size_t k = 0; k < l->n; k++) srv_job_release(e, l->jobs[k]);
        list_reply_free(l);
    }
    srv_gen_params_free(gp);
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
    fail(&er, 405, NULL, "method_not_allowed", "%.200s takes %s, not %.32s", url, allow, method);
    json_t *j = error_json(&er);
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
    add_cors(h, c, r);
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
        fail(&er, 400, NULL, "bad_request", "malformed request: %s", bad);
    } else if (!strcmp(method, "OPTIONS") && ep != EP_NONE && cors_origin(h, c)) {
        *res = preflight(h, c);
        return true;
    } else if (ep == EP_HEALTH) {
        if (strcmp(method, "GET") != 0) {
            *res = send_405(h, c, url, method, "GET");
            return true;
        }
        if (!e) {
            fail(&er, 503, NULL, "loading", "the model is loading");
        } else if (cllm_model_check(e->model) != CLLM_OK) {
            /* its file truncated or changed in place: every request fails */
            fail(&er, 503, NULL, "model_unavailable", "%s", cllm_last_error());
        } else {
            *res = send_json(h, c, 200, json_pack("{s:s}", "status", "ok"));
            return true;
        }
    } else if (h->o.api_key && !key_equal(request_key(c), h->o.api_key)) {
        fail(&er, 401, NULL, "invalid_api_key",
             "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
    } else if (ep == EP_METRICS && !h->o.metrics) {
        fail(&er, 404, NULL, "not_found", "/metrics is off (start the server with --metrics)");
    } else if (ep == EP_SLOTS && !h->o.slots) {
        fail(&er, 404, NULL, "not_found", "/slots is off (start the server with --slots)");
    } else if (ep == EP_NONE) {
        fail(&er, 404, NULL, "not_found", "no endpoint %.200s %.200s", method, url);
    } else if (ep != EP_OLLAMA && strcmp(method, endpoint_method(ep)) != 0) {
        /* Ollama's routes check their own methods (srv_ollama) */
        *res = send_405(h, c, url, method, endpoint_method(ep));
        return true;
    } else {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (!cl || strtoull(cl, NULL, 10) <= h->o.max_body) return false;
        fail(&er, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
             h->o.max_body);
    }
    if (e && er.status != 503) {
        pthread_mutex_lock(&e->mu);
        e->stats.rejected++;
        pthread_mutex_unlock(&e->mu);
    }
    *res = send_error(h, c, &er);
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
    if (ep == EP_OLLAMA) return srv_ollama(h, e, c, url, method, cn->body, cn->len);
    if (!e) {
        fail(&er, 503, NULL, "loading", "the model is loading");
        return send_error(h, c, &er);
    }
    switch (ep) {
    case EP_CHAT: return completions(h, e, c, cn, true);
    case EP_COMPLETIONS: return completions(h, e, c, cn, false);
    case EP_MODELS: return models(h, c, NULL);
    case EP_MODEL: return models(h, c, id);
    case EP_TOKENIZE:
    case EP_DETOKENIZE:
    case EP_APPLY_TEMPLATE:
    case EP_PROPS:
    case EP_SLOTS: return srv_llama(h, e, c, url, cn->body, cn->len);
    case EP_EMBEDDINGS: {
        unsigned status = 500;
        json_t *j = srv_embeddings(e, &h->o, cn->body, cn->len, &status);
        return j ? send_json(h, c, status, j) : MHD_NO;
    }
    default: return metrics(h, e, c);
    }
}

/* A 413 for a body that outgrew --max-body without a Content-Length that
 * said so (MHD_NO, the connection closed, when it cannot be queued yet). */
static enum MHD_Result too_large(srv_http *h, struct MHD_Connection *c) {
    req_err er = {0};
    fail(&er, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
         h->o.max_body);
    return send_error(h, c, &er);
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
    if (cn->pending) return answer_whole(cn); /* resumed */
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
        if (cn->pending) reply_free(cn->pending);
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
