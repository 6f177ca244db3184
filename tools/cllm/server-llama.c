/* cllm serve: llama-server's endpoints beside OpenAI's (server.h): POST
 * /tokenize, /detokenize and /apply-template, GET /props and /slots. Their
 * errors are OpenAI's error objects, as the other endpoints'. */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef srv_req_err req_err;

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool field_in(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(key, list[i])) return true;
    }
    return false;
}

static int tool_error(req_err *er, const srv_tool_err *te) {
    if (!te->code) return srv_fail(er, 500, NULL, NULL, "out of memory");
    return srv_fail(er, 400, te->param, te->code, "%s", te->msg);
}

/* Refuses the first member of `o` not in keys[0, n). */
static int only_fields(json_t *o, const char *const *keys, size_t n, const char *endpoint,
                       req_err *er) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (field_in(key, keys, n)) continue;
        snprintf(er->param_buf, sizeof(er->param_buf), "%s", key);
        return srv_fail(er, 400, er->param_buf, "unsupported_parameter",
                        "'%.64s' is not supported by this server's %s endpoint", key, endpoint);
    }
    return 0;
}

/* POST /tokenize {"content", "add_special" (false), "parse_special" (true),
 * "with_pieces" (false)}: {"tokens": [id, ...]} or, with pieces,
 * [{"id", "piece"}, ...] (a piece that is not whole UTF-8: its bytes). */
static enum MHD_Result ep_tokenize(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                   const char *body, size_t body_len) {
    static const char *const keys[] = {"content", "add_special", "parse_special", "with_pieces",
                                       "model"};
    req_err er = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    bool add = false, parse = true, pieces = false;
    json_t *o = srv_parse_body(body, body_len, &er);
    if (!o || only_fields(o, keys, N_OF(keys), "/tokenize", &er) < 0 ||
        srv_get_bool(o, "add_special", &add, &er) < 0 ||
        srv_get_bool(o, "parse_special", &parse, &er) < 0 ||
        srv_get_bool(o, "with_pieces", &pieces, &er) < 0) {
        goto bad;
    }
    json_t *content = json_object_get(o, "content");
    if (!json_is_string(content)) {
        srv_fail(&er, 400, "content", content ? "invalid_type" : "missing_required_parameter",
                 "'content' must be a string");
        goto bad;
    }
    if (strlen(json_string_value(content)) != json_string_length(content)) {
        srv_fail(&er, 400, "content", "invalid_value", "'content' holds a NUL character");
        goto bad;
    }
    if (srv_tokenize(e->model, json_string_value(content), add, parse, &ids, &n, &er) < 0) goto bad;
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!pieces) {
            json_array_append_new(list, json_integer(ids[i]));
            continue;
        }
        size_t len = 0;
        const char *p = cllm_token_to_piece(e->model, ids[i], true, &len);
        size_t clen = 0;
        char *clean = srv_utf8_clean(p ? p : "", p ? len : 0, &clen);
        json_t *piece;
        if (clean && clen == len && (!p || !memcmp(clean, p, len))) {
            piece = json_stringn(clean, clen);
        } else {
            piece = json_array();
            for (size_t k = 0; k < len; k++) {
                json_array_append_new(piece, json_integer((unsigned char)p[k]));
            }
        }
        free(clean);
        json_array_append_new(list, json_pack("{s:i,s:o}", "id", ids[i], "piece", piece));
    }
    free(ids);
    json_decref(o);
    return srv_send_json(h, c, 200, json_pack("{s:o}", "tokens", list));
bad:
    json_decref(o);
    return srv_send_error(h, c, &er);
}

/* POST /detokenize {"tokens": [id, ...]}: {"content"} (control tokens as
 * their text; bytes that are not UTF-8 as U+FFFD). */
static enum MHD_Result ep_detokenize(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                     const char *body, size_t body_len) {
    static const char *const keys[] = {"tokens", "model"};
    req_err er = {0};
    int32_t *ids = NULL;
    char *text = NULL;
    json_t *o = srv_parse_body(body, body_len, &er);
    if (!o || only_fields(o, keys, N_OF(keys), "/detokenize", &er) < 0) goto bad;
    json_t *list = json_object_get(o, "tokens");
    if (!json_is_array(list)) {
        srv_fail(&er, 400, "tokens", list ? "invalid_type" : "missing_required_parameter",
                 "'tokens' must be an array of token ids");
        goto bad;
    }
    const size_t n = json_array_size(list);
    const int32_t n_vocab = cllm_model_n_vocab(e->model);
    if (!(ids = malloc((n + 1) * sizeof(*ids)))) {
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(list, i);
        const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= n_vocab) {
            srv_fail(&er, 400, "tokens", "invalid_value",
                     "'tokens[%zu]' is not a token id in [0, %d)", i, n_vocab);
            goto bad;
        }
        ids[i] = (int32_t)id;
    }
    size_t len = 0;
    if (cllm_detokenize(e->model, ids, n, CLLM_DETOK_SPECIAL, NULL, 0, &len) != CLLM_OK ||
        !(text = malloc(len + 1)) ||
        cllm_detokenize(e->model, ids, n, CLLM_DETOK_SPECIAL, text, len + 1, &len) != CLLM_OK) {
        srv_fail(&er, 500, NULL, NULL, "detokenizing: %s",
                 text ? cllm_last_error() : "out of memory");
        goto bad;
    }
    size_t clen = 0;
    char *clean = srv_utf8_clean(text, len, &clen);
    free(text);
    free(ids);
    json_decref(o);
    if (!clean) return MHD_NO;
    json_t *r = json_pack("{s:s%}", "content", clean, clen);
    free(clean);
    return srv_send_json(h, c, 200, r);
bad:
    free(text);
    free(ids);
    json_decref(o);
    return srv_send_error(h, c, &er);
}

/* POST /apply-template {"messages", "tools"...}: {"prompt"}, the text a
 * chat request would be generated from. */
static enum MHD_Result ep_apply_template(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                         const char *body, size_t body_len) {
    static const char *const keys[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                       "model"};
    req_err er = {0};
    char *text = NULL;
    bool bos = false;
    srv_tools tools = {0};
    srv_tool_err te = {0};
    json_t *o = srv_parse_body(body, body_len, &er);
    if (!o || only_fields(o, keys, N_OF(keys), "/apply-template", &er) < 0) goto bad;
    if (srv_tools_parse(o, &tools, &te) < 0) {
        tool_error(&er, &te);
        goto bad;
    }
    if (srv_chat_prompt(h, e->model, o, &tools, &text, &bos, &er) < 0) goto bad;
    json_decref(o);
    size_t clen = 0;
    char *clean = srv_utf8_clean(text, strlen(text), &clen);
    free(text);
    if (!clean) return MHD_NO;
    json_t *r = json_pack("{s:s%}", "prompt", clean, clen);
    free(clean);
    return srv_send_json(h, c, 200, r);
bad:
    json_decref(o);
    return srv_send_error(h, c, &er);
}

/* A float as the decimal it was written as (0.8, not 0.800000011920929). */
static double dec(float f) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%g", (double)f);
    return strtod(buf, NULL);
}

/* GET /props: the defaults of a request, the context of a slot, the slots,
 * the chat template. */
static enum MHD_Result ep_props(srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    const srv_http_opts *o = srv_http_options(h);
    const cllm_sampler_params *sp = &o->defaults.rp.sampling;
    const char *tmpl = o->chat_template ? o->chat_template : cllm_model_chat_template(e->model);
    json_t *params = json_pack(
        "{s:i,s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:b,s:s?}", "n_predict", o->defaults.rp.max_tokens,
        "temperature", dec(sp->temperature), "top_k", sp->top_k, "top_p", dec(sp->top_p), "min_p",
        dec(sp->min_p), "repeat_penalty", dec(sp->repeat_penalty), "repeat_last_n",
        sp->repeat_last_n, "presence_penalty", dec(sp->presence_penalty), "frequency_penalty",
        dec(sp->frequency_penalty), "ignore_eos", sp->ignore_eos, "grammar", sp->grammar);
    if (params && o->seed_given) {
        json_object_set_new(params, "seed", json_integer((json_int_t)sp->seed));
    }
    json_t *r = json_pack("{s:{s:I,s:o},s:i,s:s,s:s?,s:s?,s:s,s:b,s:b}",
                          "default_generation_settings", "n_ctx", (json_int_t)e->n_ctx, "params",
                          params, "total_slots", e->n_slots, "model", o->model_id, "chat_template",
                          tmpl, "chat_format", o->chat_style, "build_info", cllm_version(),
                          "slots_endpoint", o->slots, "metrics_endpoint", o->metrics);
    return srv_send_json(h, c, 200, r);
}

/* GET /slots (--slots): each slot, and the requests queued. The engine
 * gives waiting requests to whichever sequence suits them (prefix reuse)
 * and does not say which: the busy slots are the first ones listed. */
static enum MHD_Result ep_slots(srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    pthread_mutex_lock(&e->mu);
    const int busy = e->n_busy, queued = e->n_queued;
    pthread_mutex_unlock(&e->mu);
    json_t *list = json_array();
    for (int i = 0; i < e->n_slots; i++) {
        json_array_append_new(list, json_pack("{s:i,s:I,s:b}", "id", i, "n_ctx",
                                              (json_int_t)e->n_ctx, "is_processing", i < busy));
    }
    json_t *r = json_pack("{s:o,s:i,s:i}", "slots", list, "busy", busy, "queued", queued);
    return srv_send_json(h, c, 200, r);
}

enum MHD_Result srv_llama(srv_http *h, srv_engine *e, struct MHD_Connection *c, const char *url,
                          const char *body, size_t body_len) {
    if (!strcmp(url, "/tokenize")) return ep_tokenize(h, e, c, body, body_len);
    if (!strcmp(url, "/detokenize")) return ep_detokenize(h, e, c, body, body_len);
    if (!strcmp(url, "/apply-template")) return ep_apply_template(h, e, c, body, body_len);
    if (!strcmp(url, "/props")) return ep_props(h, e, c);
    return ep_slots(h, e, c);
}
