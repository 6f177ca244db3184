/* cllm run: generate text from a prompt (streamed, or one JSON object). */
#include "cllm.h"
#include "commands.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- argument parsing -------------------------------------------------- */

typedef struct run_args {
    const char *model;
    const char *prompt;
    const char *system;
    int n_predict;
    int64_t n_ctx, n_batch;
    int n_threads;
    cllm_sampler_params sp;
    cllm_type kv_type;
    bool chat, no_mmap, json;
    cllm_plan_params fit; /* --mem budgets */
    bool use_plan;        /* --mem or --test-device: place layers with the fit planner */
} run_args;

static bool parse_int(const char *s, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Parses argv[1..] into *a; prints the problem and returns false on error. */
static bool parse_run_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof(*a));
    a->n_predict = 128;
    a->n_batch = 512;
    a->sp = cllm_sampler_default_params();
    a->kv_type = CLLM_TYPE_F16;
    a->fit = cllm_plan_default_params();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        double d;
        bool ok = true, takes_value = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            a->model = v;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) {
            a->prompt = v;
        } else if (!strcmp(o, "--system")) {
            a->system = v;
        } else if (!strcmp(o, "-n")) {
            ok = v && parse_int(v, -1, INT32_MAX, &n) && (a->n_predict = (int)n, true);
        } else if (!strcmp(o, "-c")) {
            ok = v && parse_int(v, 0, 1 << 24, &n) && (a->n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = v && parse_int(v, 1, 1 << 24, &n) && (a->n_batch = n, true);
        } else if (!strcmp(o, "-t")) {
            ok = v && parse_int(v, 0, 1024, &n) && (a->n_threads = (int)n, true);
        } else if (!strcmp(o, "--temp")) {
            ok = v && parse_float(v, &d) && (a->sp.temperature = (float)d, true);
        } else if (!strcmp(o, "--top-k")) {
            ok = v && parse_int(v, 0, INT32_MAX, &n) && (a->sp.top_k = (int32_t)n, true);
        } else if (!strcmp(o, "--top-p")) {
            ok = v && parse_float(v, &d) && (a->sp.top_p = (float)d, true);
        } else if (!strcmp(o, "--min-p")) {
            ok = v && parse_float(v, &d) && (a->sp.min_p = (float)d, true);
        } else if (!strcmp(o, "--repeat-penalty")) {
            ok = v && parse_float(v, &d) && (a->sp.repeat_penalty = (float)d, true);
        } else if (!strcmp(o, "--seed")) {
            ok = v && parse_int(v, 0, INT64_MAX, &n) && (a->sp.seed = (uint64_t)n, true);
        } else if (!strcmp(o, "--mem")) {
            if (v && cllm_plan_parse_mem(&a->fit, v) != CLLM_OK) {
                fprintf(stderr, "cllm: %s\n", cllm_last_error());
                return false;
            }
            a->use_plan = true;
        } else if (!strcmp(o, "--test-device")) {
            if (v && cllm_cli_enable_test_device("run", v) != 0) return false;
            a->use_plan = true;
        } else if (!strcmp(o, "--kv-type")) {
            ok = v && (!strcmp(v, "f16") || !strcmp(v, "f32"));
            if (ok) a->kv_type = !strcmp(v, "f16") ? CLLM_TYPE_F16 : CLLM_TYPE_F32;
        } else {
            takes_value = false;
            if (!strcmp(o, "--chat")) {
                a->chat = true;
            } else if (!strcmp(o, "--no-mmap")) {
                a->no_mmap = true;
            } else if (!strcmp(o, "--json")) {
                a->json = true;
            } else {
                fprintf(stderr, "cllm: unknown option '%s' (see cllm --help)\n", o);
                return false;
            }
        }
        if (takes_value && !v) {
            fprintf(stderr, "cllm: option '%s' needs a value\n", o);
            return false;
        }
        if (!ok) {
            fprintf(stderr, "cllm: bad value '%s' for %s\n", v, o);
            return false;
        }
        if (takes_value) i++;
    }
    if (!a->model) {
        fprintf(stderr, "cllm: no model given (-m FILE)\n");
        return false;
    }
    return true;
}

/* ---- JSON output ------------------------------------------------------- */

static void json_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) {
                fprintf(f, "\\u%04x", c);
            } else {
                fputc(c, f);
            }
        }
    }
    fputc('"', f);
}

static void json_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ", %d" : "%d", ids[i]);
    fputc(']', f);
}

/* {"weights": {"planned": P, "allocated": A}, ...} */
static void json_memory(FILE *f, const cllm_memory_report *mem) {
    fputc('{', f);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        fprintf(f, "%s\"%s\": {\"planned\": %zu, \"allocated\": %zu}", k ? ", " : "",
                cllm_mem_kind_str(k), mem->planned[k], mem->allocated[k]);
    }
    fputc('}', f);
}

/* ---- run --------------------------------------------------------------- */

typedef struct text_sink {
    bool stream;
    char *buf; /* collected text (for --json) */
    size_t len, cap;
} text_sink;

static bool on_text(int32_t id, const char *text, size_t len, void *ud) {
    (void)id;
    text_sink *sink = ud;
    if (sink->stream) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        return true;
    }
    if (sink->len + len + 1 > sink->cap) {
        const size_t cap = (sink->len + len + 1) * 2;
        char *nb = realloc(sink->buf, cap);
        if (!nb) return false;
        sink->buf = nb;
        sink->cap = cap;
    }
    memcpy(sink->buf + sink->len, text, len);
    sink->len += len;
    return true;
}

/* The prompt text: as given, or rendered through the chat template (with
 * the template's default system message when none is given). */
static cllm_status make_prompt(const run_args *a, const cllm_model *m, char **out, bool *has_bos) {
    *has_bos = false;
    if (!a->chat) {
        *out = strdup(a->prompt);
        return *out ? CLLM_OK : CLLM_ERR_NOMEM;
    }
    cllm_chat_msg msgs[2];
    size_t n = 0;
    if (a->system) msgs[n++] = (cllm_chat_msg){.role = "system", .content = a->system};
    msgs[n++] = (cllm_chat_msg){.role = "user", .content = a->prompt};
    cllm_chat_style style;
    const cllm_status st = cllm_chat_apply(m, NULL, msgs, n, true, out, NULL, &style);
    if (st != CLLM_OK) return st;
    *has_bos = cllm_chat_style_has_bos_text(style);
    return CLLM_OK;
}

static size_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
}

int cllm_cmd_run(int argc, char **argv) {
    run_args a;
    if (!parse_run_args(argc, argv, &a)) return 2;
    if (!a.prompt) {
        fprintf(stderr, "cllm: no prompt given (-p TEXT)\n");
        return 2;
    }
    int rc = 1;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    char *prompt = NULL;
    int32_t *ids = NULL;
    text_sink sink = {.stream = !a.json};
    cllm_generate_result res = {0};

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !a.no_mmap;
    cllm_plan *plan = NULL;
    if (a.use_plan) {
        /* the session below has the same shape as the plan */
        a.fit.n_ctx = a.n_ctx, a.fit.n_batch = a.n_batch, a.fit.n_threads = a.n_threads;
        a.fit.kv_type = a.kv_type, a.fit.use_mmap = mp.use_mmap;
        if (cllm_plan_file(a.model, &a.fit, &plan) != CLLM_OK) goto fail;
        mp.plan = plan;
    }
    const cllm_status load_st = cllm_model_load(a.model, &mp, &m);
    cllm_plan_free(plan); /* the model keeps the placement */
    if (load_st != CLLM_OK) goto fail;

    bool has_bos = false;
    if (make_prompt(&a, m, &prompt, &has_bos) != CLLM_OK) goto fail;
    const size_t len = strlen(prompt);
    size_t n_ids = 0;
    /* count first, then tokenize into an exactly sized array */
    cllm_status st = cllm_tokenize(m, prompt, len, !has_bos, a.chat, NULL, 0, &n_ids);
    if (st != CLLM_OK && st != CLLM_ERR_TOO_LARGE) goto fail;
    ids = malloc((n_ids + 1) * sizeof(*ids));
    if (!ids) goto fail;
    if (cllm_tokenize(m, prompt, len, !has_bos, a.chat, ids, n_ids + 1, &n_ids) != CLLM_OK) {
        goto fail;
    }

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = a.n_ctx;
    sp.n_batch = a.n_batch;
    sp.n_threads = a.n_threads;
    sp.kv_type = a.kv_type;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
    if ((int64_t)n_ids > cllm_session_n_ctx(s)) {
        fprintf(stderr, "cllm: %s: the prompt has %zu tokens, the context only %lld\n", a.model,
                n_ids, (long long)cllm_session_n_ctx(s));
        rc = 1;
        goto done;
    }
    if (cllm_sampler_new(&a.sp, cllm_model_n_vocab(m), &smp) != CLLM_OK) goto fail;
    if (cllm_generate(s, smp, ids, n_ids, a.n_predict, on_text, &sink, &res) != CLLM_OK) {
        goto fail;
    }
    if (res.stop == CLLM_STOP_CONTEXT_FULL) {
        fprintf(stderr, "\ncllm: context full (%lld tokens): generation stopped\n",
                (long long)cllm_session_n_ctx(s));
    }

    const double pp_tps = res.prompt_ms > 0 ? (double)n_ids / (res.prompt_ms / 1e3) : 0;
    const double tg_tps = res.gen_ms > 0 ? (double)res.n_gen_decoded / (res.gen_ms / 1e3) : 0;
    const cllm_memory_report mem = cllm_session_memory(s);
    if (a.json) {
        FILE *f = stdout;
        fprintf(f, "{\n  \"model\": ");
        json_str(f, a.model, strlen(a.model));
        fprintf(f, ",\n  \"prompt_ids\": ");
        json_ids(f, ids, n_ids);
        fprintf(f, ",\n  \"generated_ids\": ");
        json_ids(f, res.ids, res.n_ids);
        fprintf(f, ",\n  \"text\": ");
        json_str(f, sink.buf ? sink.buf : "", sink.len);
        fprintf(f, ",\n  \"stop\": \"%s\"", cllm_stop_reason_str(res.stop));
        fprintf(f,
                ",\n  \"timings\": {\"prompt_tokens\": %zu, \"prompt_ms\": %.3f, "
                "\"prompt_tokens_per_s\": %.2f, \"generated_tokens\": %zu, \"generation_ms\": "
                "%.3f, \"generation_tokens_per_s\": %.2f}",
                n_ids, res.prompt_ms, pp_tps, res.n_gen_decoded, res.gen_ms, tg_tps);
        fprintf(f, ",\n  \"memory\": ");
        json_memory(f, &mem);
        /* every device that holds part of the model (the CPU always does) */
        fprintf(f, ",\n  \"memory_by_device\": {");
        bool first = true;
        for (int d = 0; d < cllm_device_count(); d++) {
            const cllm_device *dev = cllm_device_get(d);
            const cllm_memory_report r = cllm_session_memory_on(s, dev);
            size_t total = 0;
            for (int k = 0; k < CLLM_MEM_COUNT; k++) total += r.planned[k] + r.allocated[k];
            if (total == 0) continue;
            fprintf(f, "%s\"%s\": ", first ? "" : ", ", cllm_device_name(dev));
            json_memory(f, &r);
            first = false;
        }
        fprintf(f, "},\n  \"peak_rss_bytes\": %zu,\n  \"n_ctx\": %lld,\n  \"n_batch\": %lld\n}\n",
                peak_rss_bytes(), (long long)cllm_session_n_ctx(s), (long long)a.n_batch);
    } else {
        fprintf(stderr, "\n\nprompt: %zu tokens, %.1f tok/s | generation: %zu tokens, %.1f tok/s\n",
                n_ids, pp_tps, res.n_gen_decoded, tg_tps);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "cllm: %s\n", cllm_last_error());
done:
    cllm_generate_result_free(&res);
    free(sink.buf);
    free(ids);
    free(prompt);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    cllm_model_free(m);
    return rc;
}
