/* cllm serve: a request's fields, its prompt and its tokens
 * (server-http.h): the generation settings OpenAI's endpoints share, their
 * checks, the chat template with tools, and the prompt's tokens against a
 * slot's context. */
#include "server-http.h"

#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/random.h>

/* ---- request fields ----------------------------------------------------- */

/* Each returns 0 when the field is absent or null, 1 when it was read, -1
 * after filling *er. */
int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return srv_fail(er, 400, key, "invalid_type", "'%s' must be a number", key);
    const double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        return srv_fail(er, 400, key, "invalid_value", "'%s' must be in [%g, %g], got %g", key, lo,
                        hi, d);
    }
    *out = d;
    return 1;
}

int srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) {
        return srv_fail(er, 400, key, "invalid_type", "'%s' must be an integer", key);
    }
    const long long n = json_integer_value(v);
    if (n < lo || n > hi) {
        return srv_fail(er, 400, key, "invalid_value", "'%s' must be in [%lld, %lld], got %lld",
                        key, lo, hi, n);
    }
    *out = n;
    return 1;
}

int srv_get_bool(json_t *o, const char *key, bool *out, req_err *er) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return srv_fail(er, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

/* "stop": a string or an array of strings. */
int srv_get_stop(json_t *o, srv_gen_params *gp, req_err *er) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    if (!one && !json_is_array(v)) {
        return srv_fail(er, 400, "stop", "invalid_type",
                        "'stop' must be a string or an array of "
                        "strings");
    }
    const size_t n = one ? 1 : json_array_size(v);
    if (n > SRV_MAX_STOP) {
        return srv_fail(er, 400, "stop", "invalid_value", "'stop' has %zu strings, at most %d", n,
                        SRV_MAX_STOP);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) {
            return srv_fail(er, 400, "stop", "invalid_type",
                            "'stop' must be a string or an array of "
                            "strings");
        }
        const size_t len = json_string_length(s);
        if (len == 0 || len > SRV_MAX_STOP_LEN) {
            return srv_fail(er, 400, "stop", "invalid_value",
                            "each stop string must have 1 to %d bytes", SRV_MAX_STOP_LEN);
        }
        if (!(gp->stop[gp->n_stop] = strdup(json_string_value(s)))) {
            return srv_fail(er, 500, NULL, NULL, "out of memory");
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
        return srv_fail(er, 400, "logit_bias", "invalid_type",
                        "'logit_bias' must be an object of token ids to numbers");
    }
    const size_t n = json_object_size(v);
    if (n > (size_t)n_vocab) {
        return srv_fail(er, 400, "logit_bias", "invalid_value", "'logit_bias' has %zu entries", n);
    }
    if (n == 0) return 0;
    if (!(gp->bias = calloc(n, sizeof(*gp->bias))))
        return srv_fail(er, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *b;
    size_t k = 0;
    json_object_foreach(v, key, b) {
        char *end = NULL;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab) {
            return srv_fail(er, 400, "logit_bias", "invalid_value",
                            "'logit_bias': '%.32s' is not a token id in [0, %d)", key, n_vocab);
        }
        const double d = json_is_number(b) ? json_number_value(b) : NAN;
        if (!(d >= -100 && d <= 100)) {
            return srv_fail(er, 400, "logit_bias", "invalid_value",
                            "'logit_bias': the bias of token %ld must be a number in [-100, 100]",
                            id);
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
        return srv_fail(er, 400, er->param_buf, "unsupported_parameter",
                        "'%.64s' is not supported by this server's %s endpoint", key,
                        chat ? "/v1/chat/completions" : "/v1/completions");
    }
    json_t *so = json_object_get(o, "stream_options");
    if (json_is_object(so)) {
        json_object_foreach(so, key, v) {
            if (strcmp(key, "include_usage") != 0) {
                return srv_fail(er, 400, "stream_options", "unsupported_parameter",
                                "'stream_options.%.64s' is not supported", key);
            }
        }
    }
    return 0;
}

/* A JSON Schema (a JSON value) to the request's grammar. */
static int schema_grammar(json_t *schema, const char *param, srv_gen_params *gp, req_err *er) {
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return srv_fail(er, 500, NULL, NULL, "out of memory");
    char *g = NULL;
    const cllm_status st = cllm_json_schema_to_grammar(text, &g);
    free(text);
    if (st == CLLM_ERR_NOMEM) return srv_fail(er, 500, NULL, NULL, "out of memory");
    if (st != CLLM_OK) {
        return srv_fail(er, 400, param, "invalid_schema", "'%s': %s", param, cllm_last_error());
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
            return srv_fail(er, 400, keys[i], "invalid_value", "'%s' and '%s': give one of them",
                            given, keys[i]);
        }
        given = keys[i];
    }
    const char *param = given ? given : "grammar";
    if (!given) {
        /* the server's default */
    } else if (!strcmp(given, "grammar")) {
        json_t *v = json_object_get(o, "grammar");
        if (!json_is_string(v)) {
            return srv_fail(er, 400, "grammar", "invalid_type",
                            "'grammar' must be a string (GBNF)");
        }
        if (strlen(json_string_value(v)) != json_string_length(v)) {
            return srv_fail(er, 400, "grammar", "invalid_value", "'grammar' holds a NUL character");
        }
        if (!(gp->grammar = strdup(json_string_value(v)))) {
            return srv_fail(er, 500, NULL, NULL, "out of memory");
        }
    } else if (!strcmp(given, "json_schema")) {
        json_t *v = json_object_get(o, "json_schema");
        if (!json_is_object(v) && !json_is_boolean(v)) {
            return srv_fail(er, 400, "json_schema", "invalid_type",
                            "'json_schema' must be a JSON Schema (an object)");
        }
        if (schema_grammar(v, "json_schema", gp, er) < 0) return -1;
    } else {
        json_t *rf = json_object_get(o, "response_format");
        json_t *type = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(type)) {
            return srv_fail(er, 400, "response_format", "invalid_type",
                            "'response_format' must be an object with a string 'type'");
        }
        const char *t = json_string_value(type);
        const char *key;
        json_t *m;
        json_object_foreach(rf, key, m) {
            if (strcmp(key, "type") && (strcmp(t, "json_schema") || strcmp(key, "json_schema"))) {
                return srv_fail(er, 400, "response_format", "unsupported_parameter",
                                "'response_format.%.64s' is not supported with type '%.32s'", key,
                                t);
            }
        }
        if (!strcmp(t, "text")) {
            /* no grammar: not even the server's */
        } else if (!strcmp(t, "json_object")) {
            if (!(gp->grammar = strdup(cllm_json_grammar()))) {
                return srv_fail(er, 500, NULL, NULL, "out of memory");
            }
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!json_is_object(js)) {
                return srv_fail(er, 400, "response_format", "missing_required_parameter",
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
                    return srv_fail(
                        er, 400, "response_format", "invalid_value",
                        "'response_format.json_schema.%.64s' is not supported or has the "
                        "wrong type",
                        key);
                }
            }
            /* a missing schema is any JSON object, as OpenAI's json_object */
            json_t *schema = json_object_get(js, "schema");
            if (!schema) {
                if (!(gp->grammar = strdup(cllm_json_grammar()))) {
                    return srv_fail(er, 500, NULL, NULL, "out of memory");
                }
            } else if (!json_is_object(schema) && !json_is_boolean(schema)) {
                return srv_fail(er, 400, "response_format", "invalid_type",
                                "'response_format.json_schema.schema' must be a JSON Schema");
            } else if (schema_grammar(schema, "response_format", gp, er) < 0) {
                return -1;
            }
        } else {
            return srv_fail(
                er, 400, "response_format", "invalid_value",
                "'response_format': type '%.32s' is not text, json_object or json_schema", t);
        }
    }
    const char *dflt = h->o.defaults.rp.sampling.grammar;
    if (!given && dflt && !(gp->grammar = strdup(dflt))) {
        return srv_fail(er, 500, NULL, NULL, "out of memory");
    }
    gp->rp.sampling.grammar = gp->grammar;
    gp->rp.sampling.grammar_root = NULL;
    if (gp->grammar && cllm_sampler_params_check(&gp->rp.sampling, n_vocab) != CLLM_OK) {
        return srv_fail(er, 400, param, "invalid_grammar", "'%s': %s", param, cllm_last_error());
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
int srv_parse_gen(const srv_http *h, json_t *o, bool chat, int32_t n_vocab, srv_gen_params *gp,
                  bool *stream, bool *usage, req_err *er) {
    srv_gen_defaults(h, gp);
    if (check_fields(o, chat, er) < 0) return -1;
    double d;
    long long n;
    int r;
    if ((r = srv_get_int(o, "max_tokens", 0, 1 << 30, &n, er)) < 0) return -1;
    if (r) gp->rp.max_tokens = (int)n;
    if (chat && (r = srv_get_int(o, "max_completion_tokens", 0, 1 << 30, &n, er)) < 0) return -1;
    if (chat && r) gp->rp.max_tokens = (int)n;
    if ((r = srv_get_num(o, "temperature", 0, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.temperature = (float)d;
    if ((r = srv_get_num(o, "top_p", 0, 1, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.top_p = d > 0 ? (float)d : 1e-6f;
    if ((r = srv_get_int(o, "top_k", 0, INT32_MAX, &n, er)) < 0) return -1;
    if (r) gp->rp.sampling.top_k = (int32_t)n;
    if ((r = srv_get_num(o, "min_p", 0, 1, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.min_p = (float)d;
    if ((r = srv_get_num(o, "repeat_penalty", 1e-3, 100, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.repeat_penalty = (float)d;
    if ((r = srv_get_num(o, "presence_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.presence_penalty = (float)d;
    if ((r = srv_get_num(o, "frequency_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) gp->rp.sampling.frequency_penalty = (float)d;
    if ((r = srv_get_int(o, "seed", INT64_MIN, INT64_MAX, &n, er)) < 0) return -1;
    if (r) gp->rp.sampling.seed = (uint64_t)n;
    if ((r = srv_get_int(o, "n", 1, 1, &n, er)) < 0) {
        return srv_fail(er, 400, "n", "unsupported_value", "only n = 1 is supported");
    }
    *stream = false;
    if (srv_get_bool(o, "stream", stream, er) < 0) return -1;
    *usage = false;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            return srv_fail(er, 400, "stream_options", "invalid_type",
                            "'stream_options' must be an object");
        }
        if (srv_get_bool(so, "include_usage", usage, er) < 0) return -1;
    }
    if (chat) {
        bool lp = false;
        if (srv_get_bool(o, "logprobs", &lp, er) < 0) return -1;
        gp->logprobs = lp;
        if ((r = srv_get_int(o, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &n, er)) < 0) return -1;
        if (r && !lp) {
            return srv_fail(er, 400, "top_logprobs", "invalid_value",
                            "'top_logprobs' needs 'logprobs': true");
        }
        gp->top_logprobs = r ? (int)n : 0;
    } else {
        if ((r = srv_get_int(o, "logprobs", 0, 5, &n, er)) < 0) return -1;
        gp->logprobs = r == 1;
        gp->top_logprobs = r ? (int)n : 0;
    }
    bool ignore_eos = false;
    if (srv_get_bool(o, "ignore_eos", &ignore_eos, er) < 0) return -1;
    gp->rp.sampling.ignore_eos = ignore_eos;
    if (srv_get_stop(o, gp, er) < 0) return -1;
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
                return srv_fail(er, 400, "messages", "invalid_type",
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
        return srv_fail(er, 400, "messages", "invalid_type",
                        "a message's 'content' must be a string or an array of text parts");
    }
    if (!*out) return srv_fail(er, 500, NULL, NULL, "out of memory");
    if (strlen(*out) != (json_is_string(v) ? json_string_length(v) : strlen(*out))) {
        free(*out);
        return srv_fail(er, 400, "messages", "invalid_value", "a message holds a NUL character");
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

int srv_tool_error(req_err *er, const srv_tool_err *te) {
    if (!te->code) return srv_fail(er, 500, NULL, NULL, "out of memory");
    return srv_fail(er, 400, te->param, te->code, "%s", te->msg);
}

/* The prompt of a chat request with tools or tool messages: the Jinja
 * template (--chat-template-file, else the file's) with OpenAI's messages
 * and the tools. */
static int tools_prompt(const srv_http *h, const cllm_model *m, json_t *msgs, const srv_tools *t,
                        char **text, bool *bos, req_err *er) {
    const char *tmpl = h->o.chat_template ? h->o.chat_template : cllm_model_chat_template(m);
    if (!tmpl || h->o.chat_style) {
        return srv_fail(er, 400, t->tools ? "tools" : "messages", "unsupported_value",
                        "tools and tool messages need a Jinja chat template (%s)",
                        h->o.chat_style ? "the server uses a built-in format (--chat-template)"
                                        : "the model file has none; see --chat-template-file");
    }
    const bool knows_tools = strstr(tmpl, "tools") != NULL;
    json_t *list = NULL;
    srv_tool_err te = {0};
    if (srv_tools_messages(msgs, t, knows_tools, &list, &te) < 0) return srv_tool_error(er, &te);
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
    if (!cj) return srv_fail(er, 500, NULL, NULL, "out of memory");
    const cllm_status st = cllm_chat_template_render(tmpl, cj, text, NULL);
    free(cj);
    if (st == CLLM_ERR_NOMEM) return srv_fail(er, 500, NULL, NULL, "out of memory");
    if (st != CLLM_OK) {
        return srv_fail(er, 400, "messages", "invalid_value", "the chat template: %s",
                        cllm_last_error());
    }
    *bos = b && bl > 0 && !strncmp(*text, b, bl);
    return 0;
}

/* The prompt text of a chat request through the model's template; *bos:
 * whether the text begins with the BOS token's text. */
int srv_chat_prompt(const srv_http *h, const cllm_model *m, json_t *o, const srv_tools *t,
                    char **text, bool *bos, req_err *er) {
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        return srv_fail(er, 400, "messages", msgs ? "invalid_type" : "missing_required_parameter",
                        "'messages' must be a non-empty array");
    }
    if (t->tools || has_tool_messages(msgs)) return tools_prompt(h, m, msgs, t, text, bos, er);
    const size_t n = json_array_size(msgs);
    cllm_chat_msg *cm = calloc(n, sizeof(*cm));
    char **contents = calloc(n, sizeof(*contents));
    int rc = -1;
    if (!cm || !contents) {
        srv_fail(er, 500, NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(msgs, i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role)) {
            srv_fail(er, 400, "messages", "invalid_type",
                     "messages[%zu] must be an object with a string 'role'", i);
            goto done;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            srv_fail(er, 400, "messages", "invalid_value",
                     "messages[%zu]: role '%.64s' is not system, user or assistant", i, r);
            goto done;
        }
        json_t *content = json_object_get(msg, "content");
        if (!content) {
            srv_fail(er, 400, "messages", "missing_required_parameter",
                     "messages[%zu] has no 'content'", i);
            goto done;
        }
        if (content_text(content, &contents[i], er) < 0) goto done;
        cm[i] = (cllm_chat_msg){.role = r, .content = contents[i]};
    }
    if (cli_chat_prompt(m, h->o.chat_style, h->o.chat_template, cm, n, text, bos) != CLLM_OK) {
        srv_fail(er, 400, "messages", "invalid_value", "%s", cllm_last_error());
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
int srv_tokenize_prompt(srv_http *h, const cllm_model *m, int64_t n_ctx, const char *text,
                        bool add_special, bool parse_special, const char *param, int32_t **ids,
                        size_t *n, req_err *er) {
    const size_t len = strlen(text), mp = max_piece(h, m);
    if (len / mp >= (size_t)n_ctx) {
        return srv_fail(
            er, 400, param, "context_length_exceeded",
            "the prompt has at least %zu tokens (%zu bytes, at most %zu bytes a token); "
            "the context of a slot holds %lld (-c), and at least one must be left to "
            "generate",
            len / mp, len, mp, (long long)n_ctx);
    }
    const size_t cap = (size_t)n_ctx;
    *ids = malloc(cap * sizeof(int32_t));
    if (!*ids) return srv_fail(er, 500, NULL, NULL, "out of memory");
    const cllm_status st = cllm_tokenize(m, text, len, add_special, parse_special, *ids, cap, n);
    if (st == CLLM_ERR_TOO_LARGE && *n >= cap) {
        free(*ids);
        *ids = NULL;
        return srv_fail(er, 400, param, "context_length_exceeded",
                        "the prompt has %zu tokens; the context of a slot holds %lld (-c), and at "
                        "least one must be left to generate",
                        *n, (long long)n_ctx);
    }
    if (st != CLLM_OK) {
        free(*ids);
        *ids = NULL;
        return srv_fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    }
    return 0;
}

/* The tokens of a text, uncapped (/tokenize, Ollama's prompts, lists of
 * prompts: their bodies are bounded by --max-body). */
int srv_tokenize(const cllm_model *m, const char *text, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n, req_err *er) {
    const size_t len = strlen(text);
    size_t need = 0;
    cllm_status st = cllm_tokenize(m, text, len, add_special, parse_special, NULL, 0, &need);
    if (st != CLLM_OK) return srv_fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    *ids = malloc((need + 1) * sizeof(int32_t));
    if (!*ids) return srv_fail(er, 500, NULL, NULL, "out of memory");
    st = cllm_tokenize(m, text, len, add_special, parse_special, *ids, need + 1, n);
    if (st != CLLM_OK) {
        free(*ids);
        *ids = NULL;
        return srv_fail(er, 400, NULL, NULL, "tokenizing: %s", cllm_last_error());
    }
    return 0;
}

/* Whether `name` is one this server answers to: with --strict-model-names
 * its file's name and its aliases, else any. */
bool srv_name_served(const srv_http *h, const char *name, bool any) {
    if (!strcmp(name, h->o.model_id)) return true;
    for (int i = 0; i < h->o.n_aliases; i++) {
        if (!strcmp(name, h->o.aliases[i])) return true;
    }
    return any && !h->o.strict_names;
}

json_t *srv_parse_body(const char *body, size_t len, req_err *er) {
    json_error_t jerr;
    json_t *o = json_loadb(body ? body : "", len, 0, &jerr);
    if (!o) {
        if (json_error_code(&jerr) == json_error_invalid_utf8) {
            srv_fail(er, 400, NULL, "invalid_utf8", "the request body is not valid UTF-8");
        } else {
            srv_fail(er, 400, NULL, "invalid_json",
                     "the request body is not valid JSON: %s (at byte %d)", jerr.text,
                     jerr.position);
        }
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        srv_fail(er, 400, NULL, "invalid_type", "the request body must be a JSON object");
        return NULL;
    }
    return o;
}

int srv_schema_grammar(json_t *schema, const char *param, int32_t n_vocab, srv_gen_params *gp,
                       req_err *er) {
    if (schema_grammar(schema, param, gp, er) < 0) return -1;
    gp->rp.sampling.grammar = gp->grammar;
    gp->rp.sampling.grammar_root = NULL;
    if (cllm_sampler_params_check(&gp->rp.sampling, n_vocab) != CLLM_OK) {
        return srv_fail(er, 400, param, "invalid_grammar", "'%s': %s", param, cllm_last_error());
    }
    return 0;
}

srv_tool_format srv_http_tool_format(const srv_http *h, const cllm_model *m) {
    if (h->o.chat_style) return SRV_TOOLFMT_GENERIC; /* a built-in style names no form */
    return srv_tools_format(h->o.chat_template ? h->o.chat_template : cllm_model_chat_template(m));
}
