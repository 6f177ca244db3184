/* cllm serve: Ollama's API beside OpenAI's, over the same engine and slots
 * (server.h): POST /api/chat and /api/generate (streamed as newline-delimited
 * JSON unless "stream": false), POST /api/show, GET /api/tags, /api/ps and
 * /api/version. Requests are read into the same generation settings as the
 * OpenAI endpoints; a field or option that cannot be honoured is refused
 * (400) rather than ignored. Errors are Ollama's {"error": "message"}. */
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef srv_req_err req_err;

static json_t *oll_error_json(const req_err *er) {
    size_t n = 0;
    char *msg = srv_utf8_clean(er->msg, strlen(er->msg), &n);
    json_t *j = msg ? json_pack("{s:s%}", "error", msg, n) : NULL;
    free(msg);
    return j;
}

static enum MHD_Result oll_send_error(srv_http *h, struct MHD_Connection *c, const req_err *er) {
    json_t *j = oll_error_json(er);
    return j ? srv_send_json(h, c, er->status, j) : MHD_NO;
}

/* Time t (UTC) as RFC 3339 with nanoseconds, as Ollama writes it. */
static void rfc3339(const struct timespec *t, char *buf, size_t size) {
    struct tm tm;
    gmtime_r(&t->tv_sec, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%09ldZ", day, t->tv_nsec);
}

static json_t *now_json(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    char buf[64];
    rfc3339(&t, buf, sizeof(buf));
    return json_string(buf);
}

/* ---- the model ---------------------------------------------------------- */

/* llama.cpp's general.file_type values (the GGUF convention): the name
 * Ollama shows as the quantization level. */
static const char *file_type_name(long long t) {
    static const struct {
        int id;
        const char *name;
    } k[] = {{0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
             {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
             {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
             {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
             {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
             {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
             {36, "TQ1_0"},   {37, "TQ2_0"}};
    for (size_t i = 0; i < N_OF(k); i++) {
        if (k[i].id == t) return k[i].name;
    }
    return "unknown";
}

/* "details": the family (architecture), the parameter count as Ollama
 * writes it ("135M", "1.7B") and the quantization level. */
static json_t *details_json(const cllm_model *m) {
    const cllm_gguf *g = cllm_model_gguf(m);
    double params = 0;
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_tensor_desc d = cllm_gguf_tensor_desc(g, i);
        double n = 1;
        for (int k = 0; k < d.n_dims; k++) n *= (double)d.ne[k];
        params += n;
    }
    char size[32];
    if (params >= 1e9) {
        snprintf(size, sizeof(size), "%.1fB", params / 1e9);
    } else if (params >= 1e6) {
        snprintf(size, sizeof(size), "%.0fM", params / 1e6);
    } else {
        snprintf(size, sizeof(size), "%.0fK", params / 1e3);
    }
    char ft[32];
    const char *quant = "unknown";
    if (cllm_model_meta_str(m, "general.file_type", ft, sizeof(ft)) > 0) {
        quant = file_type_name(strtoll(ft, NULL, 10));
    }
    const char *arch = cllm_model_arch(m) ? cllm_model_arch(m) : "unknown";
    return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", "gguf", "family",
                     arch, "families", arch, "parameter_size", size, "quantization_level", quant);
}

/* The file's size and time; a cheap stable id in place of Ollama's sha256
 * of the file (hashing gigabytes per request is not worth it): FNV-1a of
 * the name, the size and the time, 16 hex digits. */
typedef struct file_info {
    long long size;
    struct timespec mtime;
    char digest[17];
} file_info;

static void file_info_of(const srv_http_opts *o, file_info *fi) {
    memset(fi, 0, sizeof(*fi));
    struct stat st;
    if (o->model_path && stat(o->model_path, &st) == 0) {
        fi->size = (long long)st.st_size;
        fi->mtime = st.st_mtim;
    }
    char key[512];
    snprintf(key, sizeof(key), "%s\n%lld\n%lld.%09ld", o->model_id, fi->size,
             (long long)fi->mtime.tv_sec, fi->mtime.tv_nsec);
    uint64_t hsh = 1469598103934665603ULL;
    for (const char *p = key; *p; p++) hsh = (hsh ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(fi->digest, sizeof(fi->digest), "%016llx", (unsigned long long)hsh);
}

/* One entry of /api/tags or /api/ps. */
static json_t *model_entry(const cllm_model *m, const char *name, const file_info *fi) {
    char when[64];
    rfc3339(&fi->mtime, when, sizeof(when));
    return json_pack("{s:s,s:s,s:s,s:I,s:s,s:o}", "name", name, "model", name, "modified_at", when,
                     "size", (json_int_t)fi->size, "digest", fi->digest, "details",
                     details_json(m));
}

/* GET /api/tags: the model under its file's name, then its aliases. */
static enum MHD_Result api_tags(srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    const srv_http_opts *o = srv_http_options(h);
    file_info fi;
    file_info_of(o, &fi);
    json_t *list = json_array();
    json_array_append_new(list, model_entry(e->model, o->model_id, &fi));
    for (int i = 0; i < o->n_aliases; i++) {
        json_array_append_new(list, model_entry(e->model, o->aliases[i], &fi));
    }
    return srv_send_json(h, c, 200, json_pack("{s:o}", "models", list));
}

/* GET /api/ps: the model, loaded for as long as the server runs; its size
 * is the memory of the weights and every slot. */
static enum MHD_Result api_ps(srv_http *h, srv_engine *e, struct MHD_Connection *c) {
    const srv_http_opts *o = srv_http_options(h);
    file_info fi;
    file_info_of(o, &fi);
    const cllm_memory_report mem = srv_engine_memory(e);
    size_t bytes = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) bytes += mem.allocated[k];
    json_t *one = model_entry(e->model, o->model_id, &fi);
    json_object_del(one, "modified_at");
    json_object_set_new(one, "size", json_integer((json_int_t)bytes));
    json_object_set_new(one, "size_vram", json_integer(0));
    json_object_set_new(one, "expires_at", json_string("9999-12-31T23:59:59Z"));
    json_object_set_new(one, "context_length", json_integer((json_int_t)e->n_ctx));
    return srv_send_json(h, c, 200, json_pack("{s:[o]}", "models", one));
}

/* The model's metadata for /api/show: numbers as numbers, strings and
 * booleans as such; arrays (the vocabulary) as null, as Ollama does, and
 * with "verbose" as their type and length ("[string x 49152]"), not their
 * elements. */
static json_t *model_info_json(const cllm_model *m, bool verbose) {
    const cllm_gguf *g = cllm_model_gguf(m);
    json_t *info = json_object();
    char small[512];
    for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
        const char *key = cllm_gguf_key(g, i), *type = cllm_gguf_kv_type_str(g, i);
        json_t *v;
        if (!strcmp(type, "array") && !verbose) {
            v = json_null();
        } else {
            const size_t need = cllm_gguf_val_to_str(g, i, small, sizeof(small));
            char *text = small;
            if (need >= sizeof(small) && (text = malloc(need + 1))) {
                cllm_gguf_val_to_str(g, i, text, need + 1);
            }
            if (!text) text = small;
            if (!strcmp(type, "string") || !strcmp(type, "array")) {
                size_t n = 0;
                char *clean = srv_utf8_clean(text, strlen(text), &n);
                v = clean ? json_stringn(clean, n) : json_null();
                free(clean);
            } else if (!strcmp(type, "bool")) {
                v = json_boolean(!strcmp(text, "true"));
            } else if (!strncmp(type, "float", 5)) {
                v = json_real(strtod(text, NULL));
            } else {
                v = json_integer((json_int_t)strtoll(text, NULL, 10));
            }
            if (text != small) free(text);
        }
        json_object_set_new(info, key, v);
    }
    return info;
}

/* POST /api/show {"model", "verbose"}: the template, the default
 * parameters, the details and the metadata. */
static enum MHD_Result api_show(srv_http *h, srv_engine *e, struct MHD_Connection *c, json_t *o) {
    req_err er = {0};
    const srv_http_opts *opt = srv_http_options(h);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (strcmp(key, "model") && strcmp(key, "name") && strcmp(key, "verbose")) {
            srv_fail(&er, 400, NULL, NULL, "'%.64s' is not supported by /api/show", key);
            return oll_send_error(h, c, &er);
        }
    }
    json_t *name = json_object_get(o, "model");
    if (!name) name = json_object_get(o, "name");
    bool verbose = false;
    if (srv_get_bool(o, "verbose", &verbose, &er) < 0) return oll_send_error(h, c, &er);
    if (!json_is_string(name)) {
        srv_fail(&er, 400, NULL, NULL, "'model' must be a string");
        return oll_send_error(h, c, &er);
    }
    if (!srv_name_served(h, json_string_value(name), true)) {
        srv_fail(&er, 404, NULL, NULL, "model '%.200s' not found", json_string_value(name));
        return oll_send_error(h, c, &er);
    }
    const char *tmpl = opt->chat_template ? opt->chat_template : cllm_model_chat_template(e->model);
    const cllm_sampler_params *sp = &opt->defaults.rp.sampling;
    char params[512];
    snprintf(params, sizeof(params),
             "temperature %g\ntop_k %d\ntop_p %g\nmin_p %g\nrepeat_penalty %g\nrepeat_last_n "
             "%d\nnum_ctx %lld\nnum_predict %d",
             (double)sp->temperature, sp->top_k, (double)sp->top_p, (double)sp->min_p,
             (double)sp->repeat_penalty, sp->repeat_last_n, (long long)e->n_ctx,
             opt->defaults.rp.max_tokens);
    char modelfile[600];
    snprintf(modelfile, sizeof(modelfile), "# served by cllm\nFROM %.200s\n", opt->model_id);
    file_info fi;
    file_info_of(opt, &fi);
    char when[64];
    rfc3339(&fi.mtime, when, sizeof(when));
    json_t *caps = json_pack("[s]", "completion");
    if (tmpl && strstr(tmpl, "tools")) json_array_append_new(caps, json_string("tools"));
    size_t tn = 0;
    char *tclean = srv_utf8_clean(tmpl ? tmpl : "", tmpl ? strlen(tmpl) : 0, &tn);
    json_t *r = json_pack("{s:s,s:s,s:s%,s:o,s:o,s:o,s:s}", "modelfile", modelfile, "parameters",
                          params, "template", tclean ? tclean : "", tclean ? tn : 0, "details",
                          details_json(e->model), "model_info", model_info_json(e->model, verbose),
                          "capabilities", caps, "modified_at", when);
    free(tclean);
    return srv_send_json(h, c, 200, r);
}

/* ---- chat and generate: the request ------------------------------------- */

/* "options": Ollama's sampling settings onto gp. Those that would change
 * how the server was started (threads, GPUs, batch) and samplers this
 * engine lacks are refused unless they ask for what it does anyway. */
static int get_options(json_t *o, int64_t n_ctx, srv_gen_params *gp, int64_t *num_ctx,
                       req_err *er) {
    *num_ctx = n_ctx;
    json_t *opts = json_object_get(o, "options");
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) return srv_fail(er, 400, NULL, NULL, "'options' must be an object");
    static const char *const known[] = {
        "temperature",       "top_k",   "top_p",          "min_p",         "seed",
        "num_predict",       "stop",    "repeat_penalty", "repeat_last_n", "presence_penalty",
        "frequency_penalty", "num_ctx", "typical_p",      "tfs_z",         "mirostat",
        "penalize_newline"};
    const char *key;
    json_t *v;
    json_object_foreach(opts, key, v) {
        bool ok = false;
        for (size_t i = 0; i < N_OF(known); i++) ok = ok || !strcmp(key, known[i]);
        if (!ok) {
            return srv_fail(er, 400, NULL, NULL,
                            "option '%.64s' is not supported by this server (settings of the "
                            "model's loading are cllm serve's options)",
                            key);
        }
    }
    cllm_sampler_params *sp = &gp->rp.sampling;
    double d;
    long long n;
    int r;
    /* what Ollama's own default does: no typical-p, tail-free or mirostat */
    if ((r = srv_get_num(opts, "typical_p", 0, 1, &d, er)) < 0) return -1;
    if (r && d != 1) return srv_fail(er, 400, NULL, NULL, "option 'typical_p' is not supported");
    if ((r = srv_get_num(opts, "tfs_z", 0, 1e9, &d, er)) < 0) return -1;
    if (r && d != 1) return srv_fail(er, 400, NULL, NULL, "option 'tfs_z' is not supported");
    if ((r = srv_get_int(opts, "mirostat", 0, 2, &n, er)) < 0) return -1;
    if (r && n != 0) return srv_fail(er, 400, NULL, NULL, "option 'mirostat' is not supported");
    bool pn = false;
    if (srv_get_bool(opts, "penalize_newline", &pn, er) < 0) return -1;
    if (pn) return srv_fail(er, 400, NULL, NULL, "option 'penalize_newline' is not supported");

    if ((r = srv_get_num(opts, "temperature", 0, 100, &d, er)) < 0) return -1;
    if (r) sp->temperature = (float)d;
    if ((r = srv_get_int(opts, "top_k", 0, INT32_MAX, &n, er)) < 0) return -1;
    if (r) sp->top_k = (int32_t)n;
    if ((r = srv_get_num(opts, "top_p", 0, 1, &d, er)) < 0) return -1;
    if (r) sp->top_p = d > 0 ? (float)d : 1e-6f;
    if ((r = srv_get_num(opts, "min_p", 0, 1, &d, er)) < 0) return -1;
    if (r) sp->min_p = (float)d;
    if ((r = srv_get_int(opts, "seed", INT64_MIN, INT64_MAX, &n, er)) < 0) return -1;
    if (r) sp->seed = (uint64_t)n;
    if ((r = srv_get_num(opts, "repeat_penalty", 1e-3, 100, &d, er)) < 0) return -1;
    if (r) sp->repeat_penalty = (float)d;
    if ((r = srv_get_num(opts, "presence_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) sp->presence_penalty = (float)d;
    if ((r = srv_get_num(opts, "frequency_penalty", -2, 2, &d, er)) < 0) return -1;
    if (r) sp->frequency_penalty = (float)d;
    /* num_ctx first: repeat_last_n -1 means all of it */
    if ((r = srv_get_int(opts, "num_ctx", 1, INT32_MAX, &n, er)) < 0) return -1;
    if (r && n > n_ctx) {
        return srv_fail(er, 400, NULL, NULL,
                        "option num_ctx %lld is larger than the context of a slot (%lld tokens: "
                        "the server's --ctx-per-slot or -c)",
                        n, (long long)n_ctx);
    }
    if (r) *num_ctx = n;
    if ((r = srv_get_int(opts, "repeat_last_n", -1, CLLM_SAMPLER_MAX_WINDOW, &n, er)) < 0)
        return -1;
    if (r) {
        const int64_t all = *num_ctx < CLLM_SAMPLER_MAX_WINDOW ? *num_ctx : CLLM_SAMPLER_MAX_WINDOW;
        sp->repeat_last_n = (int32_t)(n < 0 ? all : n);
    }
    /* -1: no limit; -2: until the context is full, the same here */
    if ((r = srv_get_int(opts, "num_predict", -2, 1 << 30, &n, er)) < 0) return -1;
    if (r) gp->rp.max_tokens = n < 0 ? -1 : (int)n;
    if (srv_get_stop(opts, gp, er) < 0) return -1;
    return 0;
}

/* "format": "json" (any JSON value), a JSON Schema, or "" / absent (the
 * server's --grammar or --json-schema, if any). */
static int get_format(srv_http *h, json_t *o, int32_t n_vocab, srv_gen_params *gp, req_err *er) {
    json_t *f = json_object_get(o, "format");
    const srv_http_opts *opt = srv_http_options(h);
    if (json_is_object(f) || json_is_boolean(f)) {
        return srv_schema_grammar(f, "format", n_vocab, gp, er);
    }
    const char *grammar = NULL;
    if (json_is_string(f) && !strcmp(json_string_value(f), "json")) {
        grammar = cllm_json_grammar();
    } else if (f && !json_is_null(f) && !(json_is_string(f) && json_string_length(f) == 0)) {
        return srv_fail(er, 400, NULL, NULL,
                        "'format' must be \"json\" or a JSON Schema (an object)");
    } else {
        grammar = opt->defaults.rp.sampling.grammar;
    }
    if (!grammar) return 0;
    if (!(gp->grammar = strdup(grammar))) return srv_fail(er, 500, NULL, NULL, "out of memory");
    gp->rp.sampling.grammar = gp->grammar;
    gp->rp.sampling.grammar_root = NULL;
    if (cllm_sampler_params_check(&gp->rp.sampling, n_vocab) != CLLM_OK) {
        return srv_fail(er, 400, NULL, NULL, "'format': %s", cllm_last_error());
    }
    return 0;
}

/* Whether v is absent, null, false, "" or []: a field left at its
 * default. */
static bool unset(json_t *v) {
    return !v || json_is_null(v) || json_is_false(v) ||
           (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

/* An Ollama message in OpenAI's shape (new), for the chat template:
 * tool_calls given ids, tool_name as name; images and thinking refused. */
static json_t *message_openai(json_t *m, size_t i, req_err *er) {
    if (!json_is_object(m)) {
        srv_fail(er, 400, NULL, NULL, "messages[%zu] must be an object", i);
        return NULL;
    }
    json_t *out = json_object();
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (!strcmp(key, "role") || !strcmp(key, "content")) {
            json_object_set(out, key, v);
        } else if (!strcmp(key, "tool_name")) {
            json_object_set(out, "name", v);
        } else if (!strcmp(key, "images") || !strcmp(key, "thinking")) {
            if (unset(v)) continue;
            srv_fail(er, 400, NULL, NULL, "messages[%zu]: '%s' is not supported (%s)", i, key,
                     !strcmp(key, "images") ? "the model reads text only"
                                            : "the server has no thinking mode");
            json_decref(out);
            return NULL;
        } else if (!strcmp(key, "tool_calls")) {
            if (unset(v)) continue;
            if (!json_is_array(v)) {
                srv_fail(er, 400, NULL, NULL, "messages[%zu]: 'tool_calls' must be an array", i);
                json_decref(out);
                return NULL;
            }
            json_t *calls = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(v, k, call) {
                char id[48];
                snprintf(id, sizeof(id), "call_%zu_%zu", i, k);
                json_t *fn = json_object_get(call, "function");
                json_array_append_new(calls, json_pack("{s:s,s:s,s:O*}", "id", id, "type",
                                                       "function", "function", fn));
            }
            json_object_set_new(out, "tool_calls", calls);
        } else {
            srv_fail(er, 400, NULL, NULL, "messages[%zu]: '%.64s' is not supported", i, key);
            json_decref(out);
            return NULL;
        }
    }
    if (!json_object_get(out, "content")) json_object_set_new(out, "content", json_string(""));
    return out;
}

/* What a chat or generate request asks for. */
typedef struct oll_req {
    bool chat, stream, raw;
    srv_gen_params gp;
    int64_t num_ctx;
    json_t *prompt_req; /* {"messages", "tools"} for the template, or NULL (raw) */
    const char *raw_text;
    bool empty; /* no prompt: Ollama's way to load a model, answered at once */
    bool tools_on;
    srv_tool_format tool_format; /* with tools_on */
} oll_req;

static const char *const k_fields_both[] = {"model",      "stream", "format",   "options",
                                            "keep_alive", "think",  "logprobs", "top_logprobs"};
static const char *const k_fields_chat[] = {"messages", "tools"};
static const char *const k_fields_gen[] = {"prompt", "system",   "raw",    "images",
                                           "suffix", "template", "context"};

static int read_request(srv_http *h, srv_engine *e, json_t *o, oll_req *q, req_err *er) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool ok = false;
        for (size_t i = 0; i < N_OF(k_fields_both); i++) ok = ok || !strcmp(key, k_fields_both[i]);
        const char *const *more = q->chat ? k_fields_chat : k_fields_gen;
        const size_t n_more = q->chat ? N_OF(k_fields_chat) : N_OF(k_fields_gen);
        for (size_t i = 0; i < n_more; i++) ok = ok || !strcmp(key, more[i]);
        if (!ok) {
            return srv_fail(er, 400, NULL, NULL, "'%.64s' is not supported by /api/%s", key,
                            q->chat ? "chat" : "generate");
        }
    }
    json_t *model = json_object_get(o, "model");
    if (!json_is_string(model)) return srv_fail(er, 400, NULL, NULL, "'model' must be a string");
    if (!srv_name_served(h, json_string_value(model), true)) {
        return srv_fail(er, 404, NULL, NULL, "model '%.200s' not found", json_string_value(model));
    }
    q->stream = true; /* Ollama's default */
    if (srv_get_bool(o, "stream", &q->stream, er) < 0) return -1;
    json_t *ka = json_object_get(o, "keep_alive");
    if (ka && !json_is_null(ka) && !json_is_number(ka) && !json_is_string(ka)) {
        return srv_fail(er, 400, NULL, NULL, "'keep_alive' must be a duration or a number");
    }
    if (!unset(json_object_get(o, "think"))) {
        return srv_fail(er, 400, NULL, NULL, "'think' is not supported (no thinking mode)");
    }
    if (!q->chat) {
        static const char *const refused[] = {"images", "suffix", "template", "context"};
        for (size_t i = 0; i < N_OF(refused); i++) {
            if (!unset(json_object_get(o, refused[i]))) {
                return srv_fail(er, 400, NULL, NULL, "'%s' is not supported by this server",
                                refused[i]);
            }
        }
    }
    srv_gen_defaults(h, &q->gp);
    const int32_t n_vocab = cllm_model_n_vocab(e->model);
    if (get_options(o, e->n_ctx, &q->gp, &q->num_ctx, er) < 0) return -1;
    if (cllm_sampler_params_check(&q->gp.rp.sampling, n_vocab) != CLLM_OK) {
        return srv_fail(er, 400, NULL, NULL, "options: %s", cllm_last_error());
    }
    bool lp = false;
    long long n = 0;
    int r;
    if (srv_get_bool(o, "logprobs", &lp, er) < 0) return -1;
    if ((r = srv_get_int(o, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &n, er)) < 0) return -1;
    if (r && n > 0 && !lp) return srv_fail(er, 400, NULL, NULL, "'top_logprobs' needs 'logprobs'");
    q->gp.logprobs = lp;
    q->gp.top_logprobs = r ? (int)n : 0;
    if (get_format(h, o, n_vocab, &q->gp, er) < 0) return -1;

    if (q->chat) {
        json_t *msgs = json_object_get(o, "messages");
        if (msgs && !json_is_null(msgs) && !json_is_array(msgs)) {
            return srv_fail(er, 400, NULL, NULL, "'messages' must be an array");
        }
        if (json_array_size(msgs) == 0) {
            q->empty = true;
            return 0;
        }
        json_t *list = json_array();
        q->prompt_req = json_pack("{s:o}", "messages", list);
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            json_t *mm = message_openai(m, i, er);
            if (!mm) return -1;
            json_array_append_new(list, mm);
        }
        json_t *tools = json_object_get(o, "tools");
        if (!unset(tools)) {
            json_object_set(q->prompt_req, "tools", tools);
            q->tools_on = true;
        }
        return 0;
    }
    json_t *prompt = json_object_get(o, "prompt"), *system = json_object_get(o, "system");
    if ((prompt && !json_is_null(prompt) && !json_is_string(prompt)) ||
        (system && !json_is_null(system) && !json_is_string(system))) {
        return srv_fail(er, 400, NULL, NULL, "'prompt' and 'system' must be strings");
    }
    if (srv_get_bool(o, "raw", &q->raw, er) < 0) return -1;
    if (!json_is_string(prompt) || json_string_length(prompt) == 0) {
        q->empty = true;
        return 0;
    }
    if (strlen(json_string_value(prompt)) != json_string_length(prompt)) {
        return srv_fail(er, 400, NULL, NULL, "'prompt' holds a NUL character");
    }
    if (q->raw) {
        if (json_is_string(system) && json_string_length(system) > 0) {
            return srv_fail(er, 400, NULL, NULL, "'system' has no place in a raw prompt");
        }
        q->raw_text = json_string_value(prompt);
        return 0;
    }
    json_t *list = json_array();
    if (json_is_string(system) && json_string_length(system) > 0) {
        json_array_append_new(list, json_pack("{s:s,s:O}", "role", "system", "content", system));
    }
    json_array_append_new(list, json_pack("{s:s,s:O}", "role", "user", "content", prompt));
    q->prompt_req = json_pack("{s:o}", "messages", list);
    return 0;
}

/* The prompt's tokens, checked against the context (num_ctx). */
static int request_tokens(srv_http *h, srv_engine *e, oll_req *q, int32_t **ids, size_t *n_ids,
                          req_err *er) {
    if (q->raw_text) {
        if (srv_tokenize(e->model, q->raw_text, true, true, ids, n_ids, er) < 0) return -1;
    } else {
        srv_tools tools = {0};
        srv_tool_err te = {0};
        if (srv_tools_parse(q->prompt_req, &tools, &te) < 0) {
            if (!te.code) return srv_fail(er, 500, NULL, NULL, "out of memory");
            return srv_fail(er, 400, NULL, NULL, "%s", te.msg);
        }
        tools.format = q->tool_format = srv_http_tool_format(h, e->model);
        if (tools.tools && !q->gp.rp.sampling.grammar) {
            /* as under tool_choice auto on /v1/chat/completions: the opening
             * of a call turns on the grammar of the tools' calls */
            if (srv_tools_set_grammar(&tools, e->model, &q->gp, &te) < 0) {
                if (!te.code) return srv_fail(er, 500, NULL, NULL, "out of memory");
                return srv_fail(er, 400, NULL, NULL, "%s", te.msg);
            }
            if (cllm_sampler_params_check(&q->gp.rp.sampling, cllm_model_n_vocab(e->model)) !=
                CLLM_OK) {
                return srv_fail(er, 400, NULL, NULL, "the tools' grammar: %s", cllm_last_error());
            }
        }
        char *text = NULL;
        bool bos = false;
        if (srv_chat_prompt(h, e->model, q->prompt_req, &tools, &text, &bos, er) < 0) return -1;
        const int rc = srv_tokenize(e->model, text, !bos, true, ids, n_ids, er);
        free(text);
        if (rc < 0) return -1;
    }
    if (*n_ids == 0) return srv_fail(er, 400, NULL, NULL, "the prompt has no tokens");
    if ((int64_t)*n_ids >= q->num_ctx) {
        return srv_fail(er, 400, NULL, NULL,
                        "the prompt has %zu tokens; the context (num_ctx) holds %lld, and at least "
                        "one must be left to generate",
                        *n_ids, (long long)q->num_ctx);
    }
    /* generation stops where num_ctx ends, as Ollama's would (it has no
     * context shift here) */
    const int64_t room = q->num_ctx - (int64_t)*n_ids;
    if (q->num_ctx < e->n_ctx && (q->gp.rp.max_tokens < 0 || q->gp.rp.max_tokens > room)) {
        q->gp.rp.max_tokens = (int32_t)room;
    }
    if (q->gp.rp.max_tokens >= 0 && (int64_t)*n_ids + q->gp.rp.max_tokens > e->n_ctx) {
        return srv_fail(er, 400, NULL, NULL,
                        "the context of a slot holds %lld tokens, but %zu prompt tokens and "
                        "num_predict %d were asked for",
                        (long long)e->n_ctx, *n_ids, q->gp.rp.max_tokens);
    }
    return 0;
}

/* ---- chat and generate: the answer -------------------------------------- */

typedef struct oll_ctx {
    bool chat, stream, tools_on;
    srv_tool_format tool_format; /* with tools_on */
    json_t *tools;               /* the request's "tools" (a reference), with tools_on */
    char model[256];             /* as the request named it */
    double t0_ms;                /* when the request arrived */
    size_t n_prompt;
    srv_buf text;     /* the whole text (whole answers; streamed with tools: held back) */
    json_t *logprobs; /* whole answers: every entry */
} oll_ctx;

static void oll_ctx_free(void *p) {
    oll_ctx *x = p;
    free(x->text.data);
    json_decref(x->logprobs);
    json_decref(x->tools);
    free(x);
}

/* The object of one line: model, created_at, the text as "response" or
 * "message", done. */
static json_t *oll_object(const oll_ctx *x, const char *text, size_t len, bool done) {
    size_t n = 0;
    char *clean = srv_utf8_clean(text, len, &n);
    if (!clean) return NULL;
    json_t *j = json_pack("{s:s,s:o}", "model", x->model, "created_at", now_json());
    if (x->chat) {
        json_object_set_new(j, "message",
                            json_pack("{s:s,s:s%}", "role", "assistant", "content", clean, n));
    } else {
        json_object_set_new(j, "response", json_stringn(clean, n));
    }
    free(clean);
    json_object_set_new(j, "done", json_boolean(done));
    return j;
}

static bool oll_part(void *ctx, srv_buf *out, const char *text, size_t len, json_t *lp) {
    oll_ctx *x = ctx;
    if (!x->stream || x->tools_on) {
        if (lp && !x->stream) {
            if (!x->logprobs) x->logprobs = json_array();
            json_array_extend(x->logprobs, lp);
            json_decref(lp);
            lp = NULL;
        }
        if (!srv_buf_put(&x->text, text, len)) {
            json_decref(lp);
            return false;
        }
        if (!lp) return true;
        text = "", len = 0; /* streamed with tools: the log-probabilities go now */
    }
    json_t *j = oll_object(x, text, len, false);
    if (j && lp)
        json_object_set_new(j, "logprobs", lp);
    else
        json_decref(lp);
    return j && srv_buf_put_line(out, j);
}

/* Ollama's tool calls ({"function": {"name", "arguments": {...}}}) of
 * OpenAI's (arguments as JSON text); stolen. */
static json_t *calls_ollama(json_t *calls) {
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *obj = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
        json_array_append_new(out, json_pack("{s:{s:O,s:o}}", "function", "name",
                                             json_object_get(fn, "name"), "arguments",
                                             obj ? obj : json_object()));
    }
    json_decref(calls);
    return out;
}

static bool oll_end(void *ctx, srv_buf *out, const srv_job *j, const req_err *er) {
    oll_ctx *x = ctx;
    if (er) {
        return srv_buf_put_line(out, oll_error_json(er));
    }
    size_t n = x->text.len;
    json_t *calls = x->tools_on && x->chat
                        ? srv_tools_extract(x->tool_format, x->tools,
                                            x->text.data ? x->text.data : "", x->text.len, true, &n)
                        : NULL;
    const bool whole_text = !x->stream || x->tools_on;
    json_t *o = oll_object(x, whole_text ? (x->text.data ? x->text.data : "") : "",
                           whole_text ? n : 0, true);
    if (!o) {
        json_decref(calls);
        return false;
    }
    if (calls) {
        json_object_set_new(json_object_get(o, "message"), "tool_calls", calls_ollama(calls));
    }
    if (x->logprobs) {
        json_object_set_new(o, "logprobs", x->logprobs);
        x->logprobs = NULL;
    }
    const double total_ms = cllm_time_ms() - x->t0_ms;
    json_object_set_new(o, "done_reason",
                        json_string(j->finish == SRV_FINISH_LENGTH ? "length" : "stop"));
    json_object_set_new(o, "total_duration", json_integer((json_int_t)(total_ms * 1e6)));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)x->n_prompt));
    json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)(j->prompt_ms * 1e6)));
    json_object_set_new(o, "eval_count", json_integer((json_int_t)j->n_completion));
    json_object_set_new(o, "eval_duration", json_integer((json_int_t)(j->gen_ms * 1e6)));
    return srv_buf_put_line(out, o);
}

static const srv_writer k_oll_writer = {.part = oll_part, .end = oll_end, .free = oll_ctx_free};

static enum MHD_Result api_generate(srv_http *h, srv_engine *e, struct MHD_Connection *c,
                                    srv_conn *cn, json_t *o, bool chat) {
    const double t0 = cllm_time_ms();
    req_err er = {0};
    oll_req q = {.chat = chat};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    enum MHD_Result res;
    if (read_request(h, e, o, &q, &er) < 0) goto bad;
    if (q.empty) {
        /* Ollama answers an empty prompt by loading the model: it is */
        oll_ctx x = {.chat = chat};
        snprintf(x.model, sizeof(x.model), "%s", json_string_value(json_object_get(o, "model")));
        json_t *r = oll_object(&x, "", 0, true);
        if (r) json_object_set_new(r, "done_reason", json_string("load"));
        json_decref(q.prompt_req);
        srv_gen_params_free(&q.gp);
        return r ? srv_send_json(h, c, 200, r) : MHD_NO;
    }
    if (request_tokens(h, e, &q, &ids, &n_ids, &er) < 0) goto bad;
    oll_ctx *x = calloc(1, sizeof(*x));
    if (!x) {
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        goto bad;
    }
    *x = (oll_ctx){.chat = chat,
                   .stream = q.stream,
                   .tools_on = q.tools_on,
                   .tool_format = q.tool_format,
                   .tools = json_incref(json_object_get(q.prompt_req, "tools")),
                   .t0_ms = t0,
                   .n_prompt = n_ids};
    snprintf(x->model, sizeof(x->model), "%s", json_string_value(json_object_get(o, "model")));
    json_decref(q.prompt_req);
    const srv_http_opts *opt = srv_http_options(h);
    const double deadline = opt->timeout_s > 0 ? cllm_time_ms() + opt->timeout_s * 1e3 : 0;
    srv_job *j = srv_job_new(ids, n_ids, &q.gp, deadline); /* owns ids and gp's strings */
    if (!j) {
        oll_ctx_free(x);
        srv_fail(&er, 500, NULL, NULL, "out of memory");
        return oll_send_error(h, c, &er);
    }
    j->stream = q.stream;
    return srv_http_answer(h, e, c, cn, j, chat, q.stream,
                           q.stream ? "application/x-ndjson" : "application/json", &k_oll_writer, x,
                           oll_error_json);
bad:
    pthread_mutex_lock(&e->mu);
    e->stats.rejected++;
    pthread_mutex_unlock(&e->mu);
    free(ids);
    json_decref(q.prompt_req);
    srv_gen_params_free(&q.gp);
    res = oll_send_error(h, c, &er);
    return res;
}

/* ---- embeddings ---------------------------------------------------------- */

/* What an Ollama embedding answer keeps of its request. */
typedef struct oll_embed {
    bool legacy;
    double t0_ms;
    json_t *model; /* the request's "model" (a string), or NULL: the server's */
} oll_embed;

static void oll_embed_free(void *ctx) {
    oll_embed *x = ctx;
    if (x) json_decref(x->model);
    free(x);
}

/* /v1/embeddings' answer `a` (taken) with its status, in Ollama's shape. */
static enum MHD_Result embed_fin(srv_http *h, struct MHD_Connection *c, json_t *a, unsigned status,
                                 void *ctx) {
    const oll_embed *x = ctx;
    req_err er = {0};
    if (!a) return MHD_NO;
    if (status != 200) { /* OpenAI's error object: its message, Ollama's shape */
        const char *msg =
            json_string_value(json_object_get(json_object_get(a, "error"), "message"));
        srv_fail(&er, status, NULL, NULL, "%s", msg ? msg : "embedding failed");
        json_decref(a);
        return oll_send_error(h, c, &er);
    }
    json_t *list = json_array();
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(a, "data"), i, d) {
        json_array_append(list, json_object_get(d, "embedding"));
    }
    const json_int_t n_prompt =
        json_integer_value(json_object_get(json_object_get(a, "usage"), "prompt_tokens"));
    json_decref(a);
    json_t *r;
    if (x->legacy) {
        r = json_pack("{s:O}", "embedding", json_array_get(list, 0));
        json_decref(list);
    } else {
        r = json_pack("{s:s,s:o,s:I,s:I,s:I}", "model",
                      x->model ? json_string_value(x->model) : srv_http_options(h)->model_id,
                      "embeddings", list, "total_duration",
                      (json_int_t)((cllm_time_ms() - x->t0_ms) * 1e6), "load_duration",
                      (json_int_t)0, "prompt_eval_count", n_prompt);
    }
    return r ? srv_send_json(h, c, 200, r) : MHD_NO;
}

/* POST /api/embed ({"input": a string or a list}: {"embeddings": [[...]]})
 * and the older /api/embeddings ({"prompt": a string}: {"embedding": [...]}),
 * computed as /v1/embeddings computes them (server-embed.c). */
static enum MHD_Result api_embed(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                                 json_t *o, bool legacy) {
    req_err er = {0};
    const double t0 = cllm_time_ms();
    const char *in_key = legacy ? "prompt" : "input";
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (!strcmp(key, in_key) || !strcmp(key, "model") || !strcmp(key, "keep_alive") ||
            (!legacy && !strcmp(key, "dimensions"))) {
            continue;
        }
        if (!strcmp(key, "truncate") && json_is_false(v)) continue;
        if (!strcmp(key, "options") && json_is_object(v) && json_object_size(v) == 0) continue;
        if (!strcmp(key, "truncate")) {
            srv_fail(&er, 400, NULL, NULL,
                     "'truncate': inputs are not cut to the context here; an input longer than "
                     "the context is refused (send \"truncate\": false or leave it out)");
        } else {
            srv_fail(&er, 400, NULL, NULL, "'%.64s' is not supported by this server's %s", key,
                     legacy ? "/api/embeddings" : "/api/embed");
        }
        return oll_send_error(h, c, &er);
    }
    json_t *input = json_object_get(o, in_key);
    if (!input || (legacy && !json_is_string(input))) {
        srv_fail(&er, 400, NULL, NULL, "'%s' must be %s", in_key,
                 legacy ? "a string" : "a string or a list of strings");
        return oll_send_error(h, c, &er);
    }
    oll_embed *x = calloc(1, sizeof(*x));
    json_t *req = x ? json_pack("{s:O}", "input", input) : NULL;
    json_t *dims = json_object_get(o, "dimensions");
    if (req && dims) json_object_set(req, "dimensions", dims);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        free(x);
        return MHD_NO;
    }
    x->legacy = legacy;
    x->t0_ms = t0;
    json_t *m = json_object_get(o, "model");
    if (json_is_string(m)) x->model = json_incref(m);
    const enum MHD_Result r =
        srv_embeddings(h, e, c, cn, body, strlen(body), embed_fin, x, oll_embed_free);
    free(body);
    return r;
}

/* ---- routes ------------------------------------------------------------- */

enum MHD_Result srv_ollama(srv_http *h, srv_engine *e, struct MHD_Connection *c, srv_conn *cn,
                           const char *url, const char *method, const char *body, size_t len) {
    req_err er = {0};
    const char *p = url + 4; /* after "/api" */
    static const char *const gets[] = {"/tags", "/ps", "/version"};
    static const char *const posts[] = {"/chat", "/generate", "/show", "/embed", "/embeddings"};
    static const char *const managed[] = {"/pull", "/push", "/create", "/copy", "/delete"};
    bool get = false, post = false;
    for (size_t i = 0; i < N_OF(gets); i++) get = get || !strcmp(p, gets[i]);
    for (size_t i = 0; i < N_OF(posts); i++) post = post || !strcmp(p, posts[i]);
    for (size_t i = 0; i < N_OF(managed); i++) {
        if (!strcmp(p, managed[i]) || !strncmp(p, "/blobs/", 7)) {
            srv_fail(&er, 501, NULL, NULL,
                     "%.64s: this server serves the one model it was started with; models are "
                     "not managed over its API",
                     url);
            return oll_send_error(h, c, &er);
        }
    }
    if (!get && !post) {
        srv_fail(&er, 404, NULL, NULL, "no endpoint %.64s %.200s", method, url);
        return oll_send_error(h, c, &er);
    }
    if (strcmp(method, get ? "GET" : "POST") != 0) {
        srv_fail(&er, 405, NULL, NULL, "%.200s takes %s", url, get ? "GET" : "POST");
        return oll_send_error(h, c, &er);
    }
    if (!strcmp(p, "/version")) {
        return srv_send_json(h, c, 200, json_pack("{s:s}", "version", cllm_version()));
    }
    if (!e) {
        srv_fail(&er, 503, NULL, NULL, "the model is loading");
        return oll_send_error(h, c, &er);
    }
    if (!strcmp(p, "/tags")) return api_tags(h, e, c);
    if (!strcmp(p, "/ps")) return api_ps(h, e, c);
    json_t *o = srv_parse_body(body, len, &er);
    if (!o) return oll_send_error(h, c, &er);
    enum MHD_Result r;
    if (!strcmp(p, "/show")) {
        r = api_show(h, e, c, o);
    } else if (!strcmp(p, "/chat") || !strcmp(p, "/generate")) {
        r = api_generate(h, e, c, cn, o, !strcmp(p, "/chat"));
    } else {
        r = api_embed(h, e, c, cn, o, !strcmp(p, "/embeddings"));
    }
    json_decref(o);
    return r;
}
