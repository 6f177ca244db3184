/* cllm serve: OpenAI's /v1/chat/completions and /v1/completions
 * (server-http.h): a job per prompt (one, or a list of them), answered
 * whole or streamed as server-sent events. */
#include "server-http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/random.h>

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
    srv_add_cors(h, c, resp);
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
    json_t *tools; /* the request's "tools" (a reference), for the calls' types */
    char *held;
    size_t held_len, held_sent;
    /* a stream's, under the engine's mutex: the connection is suspended
     * until the engine wakes it */
    bool suspended;
    srv_wait wait; /* a whole answer's */
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
    json_t *calls = srv_tools_extract(r->tool_format, r->tools, rest, n, r->held_sent == 0, &n);
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
        srv_job *j = r->job;
        char *text;
        size_t len;
        json_t *lp;
        bool done;
        if (!srv_job_next(r->e, j, r->c, &r->suspended, &text, &len, &lp, &done)) return 0;
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
            if (srv_job_error(j, &er)) {
                sse_put(r, srv_error_json(&er));
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
    json_decref(r->tools);
    free(r->held);
    free(r->buf);
    free(r);
}

static void stream_free(void *cls) { reply_free(cls); }

/* A stream's wake-up (under the engine's mutex): any event resumes it. */
static void stream_wake(void *arg) {
    reply *r = arg;
    if (!r->suspended) return;
    r->suspended = false;
    MHD_resume_connection(r->c);
}

/* The whole answer of a job that is not streamed, the job ended (until
 * then the connection is suspended: srv_wait). */
static enum MHD_Result reply_done(srv_wait *w) {
    reply *r = w->owner;
    srv_job *j = r->job;
    req_err er;
    enum MHD_Result res;
    if (srv_job_error(j, &er)) {
        res = srv_send_error(r->h, r->c, &er);
    } else {
        json_t *lp = j->logprobs;
        j->logprobs = NULL;
        size_t n = j->out_len;
        json_t *calls =
            r->tools_on ? srv_tools_extract(r->tool_format, r->tools, j->out, j->out_len, true, &n)
                        : NULL;
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
        res = srv_send_json(r->h, r->c, 200, env);
    }
    reply_free(r);
    return res;
}

static void reply_drop(srv_wait *w) { reply_free(w->owner); }

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

/* With tool_choice required or named, the grammar that forces a call (in
 * place of the server's default; a request's own grammar conflicts); with
 * auto and no other grammar, the lazy one that a call's opening turns on. */
static int tool_grammar(const cllm_model *m, json_t *o, const srv_tools *t, srv_gen_params *gp,
                        req_err *er) {
    const bool lazy = t->choice == SRV_TOOL_AUTO && !gp->rp.sampling.grammar;
    if (!t->tools || (t->choice != SRV_TOOL_REQUIRED && t->choice != SRV_TOOL_NAMED && !lazy))
        return 0;
    static const char *const keys[] = {"response_format", "grammar", "json_schema"};
    for (size_t i = 0; i < N_OF(keys) && !lazy; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (v && !json_is_null(v)) {
            return srv_fail(er, 400, keys[i], "invalid_value",
                            "'%s' and a forced tool call (tool_choice): give one", keys[i]);
        }
    }
    srv_tool_err te = {0};
    if (srv_tools_set_grammar(t, m, gp, &te) < 0) return srv_tool_error(er, &te);
    if (cllm_sampler_params_check(&gp->rp.sampling, cllm_model_n_vocab(m)) != CLLM_OK) {
        return srv_fail(er, 400, "tools", "invalid_schema", "the tools' grammar: %s",
                        cllm_last_error());
    }
    return 0;
}

static bool prompt_is_list(json_t *p);
static enum MHD_Result completions_list(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                        conn *cn, json_t *p, srv_gen_params *gp, bool stream,
                                        bool usage);

enum MHD_Result srv_completions(srv_http *h, srv_engine *e, struct MHD_Connection *c, conn *cn,
                                bool chat) {
    req_err er = {0};
    json_error_t jerr;
    json_t *o = json_loadb(cn->body ? cn->body : "", cn->len, 0, &jerr);
    srv_gen_params gp = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *text = NULL;
    bool stream = false, usage = false;
    json_t *tools_arr = NULL; /* a reference, the reply's once it exists */
    if (!o) {
        if (json_error_code(&jerr) == json_error_invalid_utf8) {
            srv_fail(&er, 400, NULL, "invalid_utf8", "the request body is not valid UTF-8");
        } else {
            srv_fail(&er, 400, NULL, "invalid_json",
                     "the request body is not valid JSON: %s (at "
                     "byte %d)",
                     jerr.text, jerr.position);
        }
        goto bad;
    }
    if (!json_is_object(o)) {
        srv_fail(&er, 400, NULL, "invalid_type", "the request body must be a JSON object");
        goto bad;
    }
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            srv_fail(&er, 400, "model", "invalid_type", "'model' must be a string");
            goto bad;
        }
        if (!srv_name_served(h, json_string_value(model), true)) {
            srv_fail(&er, 404, "model", "model_not_found",
                     "the model '%.200s' does not exist (this server has '%s'%s)",
                     json_string_value(model), h->o.model_id,
                     h->o.n_aliases ? " and its aliases" : "");
            goto bad;
        }
    }
    if (srv_parse_gen(h, o, chat, cllm_model_n_vocab(e->model), &gp, &stream, &usage, &er) < 0)
        goto bad;
    bool tools_on = false;
    srv_tool_format tool_format = SRV_TOOLFMT_GENERIC;
    if (chat) {
        srv_tools tools = {0};
        srv_tool_err te = {0};
        if (srv_tools_parse(o, &tools, &te) < 0) {
            srv_tool_error(&er, &te);
            goto bad;
        }
        tools.format = srv_http_tool_format(h, e->model);
        tool_format = tools.format;
        if (tool_grammar(e->model, o, &tools, &gp, &er) < 0) goto bad;
        tools_on = tools.tools != NULL;
        tools_arr = json_incref(tools.tools);
        bool bos = false;
        if (srv_chat_prompt(h, e->model, o, &tools, &text, &bos, &er) < 0) goto bad;
        if (srv_tokenize_prompt(h, e->model, e->n_ctx, text, !bos, true, "messages", &ids, &n_ids,
                                &er) < 0) {
            goto bad;
        }
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (prompt_is_list(p)) {
            const enum MHD_Result res = completions_list(h, e, c, cn, p, &gp, stream, usage);
            json_decref(o);
            return res;
        }
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p)) {
            srv_fail(&er, 400, "prompt", p ? "invalid_type" : "missing_required_parameter",
                     "'prompt' must be a string, an array of token ids, or an array of those");
            goto bad;
        }
        if (strlen(json_string_value(p)) != json_string_length(p)) {
            srv_fail(&er, 400, "prompt", "invalid_value", "'prompt' holds a NUL character");
            goto bad;
        }
        if (srv_tokenize_prompt(h, e->model, e->n_ctx, json_string_value(p), true, false, "prompt",
                                &ids, &n_ids, &er) < 0) {
            goto bad;
        }
    }
    if (n_ids == 0) {
        srv_fail(&er, 400, chat ? "messages" : "prompt", "invalid_value",
                 "the prompt has no tokens");
        goto bad;
    }
    if ((int64_t)n_ids >= e->n_ctx) {
        srv_fail(
            &er, 400, chat ? "messages" : "prompt", "context_length_exceeded",
            "the prompt has %zu tokens; the context of a slot holds %lld (-c), and at least one "
            "must be left to generate",
            n_ids, (long long)e->n_ctx);
        goto bad;
    }
    if (gp.rp.max_tokens >= 0 && (int64_t)n_ids + gp.rp.max_tokens > e->n_ctx) {
        srv_fail(&er, 400, "max_tokens", "context_length_exceeded",
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
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    *r = (reply){.h = h,
                 .e = e,
                 .chat = chat,
                 .include_usage = usage && stream,
                 .tools_on = tools_on,
                 .tool_format = tool_format,
                 .tools = tools_arr,
                 .created = (long long)time(NULL),
                 .n_prompt = n_ids,
                 .c = c};
    response_id(h, chat ? "chatcmpl" : "cmpl", r->id, sizeof(r->id));
    j->stream = stream;
    r->job = j; /* before the engine can wake r (j not shared yet: no lock) */
    if (stream) {
        j->wake = stream_wake;
        j->wake_arg = r;
    } else {
        r->wait = (srv_wait){.h = h,
                             .e = e,
                             .c = c,
                             .jobs = &r->job,
                             .n = 1,
                             .done = reply_done,
                             .drop = reply_drop,
                             .owner = r};
        srv_wait_wake(&r->wait, j);
    }
    if (!srv_engine_submit(e, j)) {
        srv_job_release(e, j); /* never queued: both references */
        srv_job_release(e, j);
        json_decref(r->tools);
        free(r);
        srv_fail(&er, 503, NULL, "queue_full",
                 "the server is busy: every slot is taken and the queue is full; retry later");
        return srv_send_error(h, c, &er);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.requests[chat ? 0 : 1]++;
    pthread_mutex_unlock(&e->mu);
    if (!stream) return srv_wait_start(cn, &r->wait);
    return queue_sse(h, c, stream_read, r, stream_free);
bad:
    pthread_mutex_lock(&e->mu);
    e->stats.rejected++;
    pthread_mutex_unlock(&e->mu);
    json_decref(o);
    json_decref(tools_arr);
    free(text);
    free(ids);
    srv_gen_params_free(&gp);
    return srv_send_error(h, c, &er);
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
            return srv_fail(er, 400, "prompt", "invalid_value",
                            "'prompt[%zu]' holds a NUL character", i);
        }
        return srv_tokenize(m, json_string_value(p), true, false, ids, n, er);
    }
    if (!json_is_array(p)) {
        return srv_fail(er, 400, "prompt", "invalid_type",
                        "'prompt' must be a string, an array of token ids, or an array of those");
    }
    const int32_t n_vocab = cllm_model_n_vocab(m);
    const size_t k = json_array_size(p);
    if (!(*ids = malloc((k + 1) * sizeof(int32_t)))) {
        return srv_fail(er, 500, NULL, NULL, "out of memory");
    }
    for (size_t t = 0; t < k; t++) {
        json_t *v = json_array_get(p, t);
        const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= n_vocab) {
            free(*ids);
            *ids = NULL;
            return srv_fail(er, 400, "prompt", "invalid_value",
                            "'prompt[%zu]': element %zu is not a token id in [0, %d)", i, t,
                            n_vocab);
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
    srv_wait wait; /* a whole answer's */
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
        srv_job *j = l->jobs[l->cur];
        char *text;
        size_t len;
        json_t *lp;
        bool done;
        if (!srv_job_next(r->e, j, r->c, &r->suspended, &text, &len, &lp, &done)) return 0;
        if (len > 0 || lp) list_chunk(l, l->cur, text, len, logprobs_json(r, lp, 0), NULL);
        free(text);
        if (!done) continue;
        req_err er;
        if (srv_job_error(j, &er)) {
            sse_put(r, srv_error_json(&er));
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

/* Every prompt's choice at once, their jobs ended (until then the
 * connection is suspended: srv_wait). */
static enum MHD_Result list_done(srv_wait *w) {
    list_reply *l = w->owner;
    json_t *choices = json_array();
    req_err er;
    bool bad = false;
    for (size_t i = 0; i < l->n && !bad; i++) {
        srv_job *j = l->jobs[i];
        if ((bad = srv_job_error(j, &er))) break;
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
        res = srv_send_error(l->r.h, l->r.c, &er);
    } else {
        json_t *env = envelope(&l->r, false, choices);
        json_object_set_new(env, "usage", list_usage(l));
        res = srv_send_json(l->r.h, l->r.c, 200, env);
    }
    list_reply_free(l);
    return res;
}

static void list_drop(srv_wait *w) { list_reply_free(w->owner); }

/* A list stream's wake-up (under the engine's mutex): an event of any job
 * resumes it. */
static void list_stream_wake(void *arg) {
    list_reply *l = arg;
    if (!l->r.suspended) return;
    l->r.suspended = false;
    MHD_resume_connection(l->r.c);
}

/* POST /v1/completions with a list of prompts (p): a job for each, with
 * the same settings; takes gp. */
static enum MHD_Result completions_list(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                        conn *cn, json_t *p, srv_gen_params *gp, bool stream,
                                        bool usage) {
    req_err er = {0};
    list_reply *l = calloc(1, sizeof(*l));
    int32_t *ids = NULL;
    size_t n_ids = 0;
    /* a single prompt of token ids is a list of one */
    const bool one = json_is_integer(json_array_get(p, 0));
    const size_t n = one ? 1 : json_array_size(p);
    if (!l) {
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    if (n > MAX_PROMPTS) {
        srv_fail(&er, 400, "prompt", "invalid_value", "'prompt' has %zu prompts, at most %d", n,
                 MAX_PROMPTS);
        goto bad;
    }
    l->r = (reply){.h = h, .e = e, .created = (long long)time(NULL), .c = c};
    l->wait = (srv_wait){
        .h = h, .e = e, .c = c, .jobs = l->jobs, .done = list_done, .drop = list_drop, .owner = l};
    l->include_usage = usage && stream;
    response_id(h, "cmpl", l->r.id, sizeof(l->r.id));
    const double deadline = h->o.timeout_s > 0 ? cllm_time_ms() + h->o.timeout_s * 1e3 : 0;
    for (size_t i = 0; i < n; i++) {
        if (list_prompt(e->model, one ? p : json_array_get(p, i), i, &ids, &n_ids, &er) < 0) {
            goto bad;
        }
        if (n_ids == 0 || (int64_t)n_ids >= e->n_ctx) {
            srv_fail(
                &er, 400, "prompt", n_ids ? "context_length_exceeded" : "invalid_value",
                "prompt %zu has %zu tokens; the context of a slot holds %lld (-c), and at least "
                "one must be left to generate",
                i, n_ids, (long long)e->n_ctx);
            goto bad;
        }
        if (gp->rp.max_tokens >= 0 && (int64_t)n_ids + gp->rp.max_tokens > e->n_ctx) {
            srv_fail(
                &er, 400, "max_tokens", "context_length_exceeded",
                "the context of a slot holds %lld tokens (-c), but prompt %zu has %zu tokens and "
                "max_tokens is %d",
                (long long)e->n_ctx, i, n_ids, gp->rp.max_tokens);
            goto bad;
        }
        srv_gen_params own;
        if (!gen_params_copy(gp, &own)) {
            srv_fail(&er, 500, NULL, NULL, "out of memory");
            goto bad;
        }
        srv_job *j = srv_job_new(ids, n_ids, &own, deadline);
        ids = NULL;
        if (!j) {
            srv_fail(&er, 500, NULL, NULL, "out of memory");
            goto bad;
        }
        j->stream = stream;
        /* before the engine can wake it */
        if (stream) {
            j->wake = list_stream_wake;
            j->wake_arg = l;
        } else {
            srv_wait_wake(&l->wait, j);
        }
        l->n_prompt[l->n] = n_ids;
        l->jobs[l->n++] = j;
        l->wait.n = l->n;
    }
    srv_gen_params_free(gp);
    for (size_t i = 0; i < l->n; i++) {
        if (!srv_engine_submit(e, l->jobs[i])) {
            /* those not queued hold both references */
            for (size_t k = i; k < l->n; k++) srv_job_release(e, l->jobs[k]);
            list_reply_free(l);
            srv_fail(&er, 503, NULL, "queue_full",
                     "the server is busy: the queue has no room for %zu prompts; retry later", n);
            return srv_send_error(h, c, &er);
        }
    }
    pthread_mutex_lock(&e->mu);
    e->stats.requests[1]++;
    pthread_mutex_unlock(&e->mu);
    if (!stream) return srv_wait_start(cn, &l->wait);
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
    return srv_send_error(h, c, &er);
}
