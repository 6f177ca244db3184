/* cllm run: generate text from a prompt (streamed, or one JSON object). */
#include "cllm.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- argument parsing -------------------------------------------------- */

typedef struct run_args {
    const char *model;
    const char *prompt;
    const char *prompt_file; /* -f: "-" is standard input */
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

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: cllm run -m FILE (-p TEXT | -f FILE) [options]\n"
            "\n"
            "Generates text from a prompt and streams it to standard output as the model\n"
            "writes it (the timings go to standard error).\n"
            "\n"
            "  -m FILE              the model (GGUF)\n"
            "  -p TEXT              the prompt\n"
            "  -f FILE              the prompt from a file (-: standard input), without one\n"
            "                       trailing newline; for prompts longer than a command line\n"
            "  -n N                 tokens to generate (default 128; -1: until the end)\n"
            "  -c N                 context size (default: min(model context, 4096); above the\n"
            "                       model's trained context: a warning)\n"
            "  -b N                 prompt batch size (default 512)\n"
            "  -t N                 threads (default: physical cores)\n"
            "  --temp T             temperature (default 0.8; 0: greedy)\n"
            "  --top-k K            top-k (default 40; 0: off)\n"
            "  --top-p P            top-p (default 0.95; 1: off)\n"
            "  --min-p P            min-p (default 0.05; 0: off)\n"
            "  --repeat-penalty R   repetition penalty (default 1: off)\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --chat               wrap the prompt in the model's chat template\n"
            "  --system TEXT        system message for --chat\n"
            "  --kv-type f16|f32    KV cache type (default f16)\n"
            "  --no-mmap            read the weights instead of mapping them\n"
            "  --json               print one JSON object instead of streaming text\n"
            "  --mem DEVICE=SIZE    place layers on devices within budgets (as cllm plan)\n"
            "  --test-device SPEC   enable the test device (debug; e.g. budget=64MiB,ops=-rope)\n"
            "  -h, --help           this help\n");
}

/* Parses argv[1..] into *a: 0; -1 after printing the help; 2 after printing
 * the problem. */
static int parse_run_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof(*a));
    a->n_predict = 128;
    a->n_batch = 512;
    a->sp = cllm_sampler_default_params();
    a->kv_type = CLLM_TYPE_F16;
    a->fit = cllm_plan_default_params();
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cllm_cli_is_help(o)) {
            run_usage(stdout);
            return -1;
        }
        if (!strcmp(o, "--chat")) {
            a->chat = true;
            continue;
        } else if (!strcmp(o, "--no-mmap")) {
            a->no_mmap = true;
            continue;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        /* the other options take a value */
        if (!cllm_cli_is_one_of(
                o, "-m --model -p --prompt -f --file --system -n -c -b -t --temp --top-k --top-p "
                   "--min-p --repeat-penalty --seed --mem --test-device --kv-type")) {
            cllm_cli_error("run", "unknown option '%s' (see cllm run --help)", o);
            return 2;
        }
        const char *v = cllm_cli_value("run", argc, argv, &i);
        if (!v) return 2;
        long long n;
        bool ok = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            a->model = v;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) {
            a->prompt = v;
        } else if (!strcmp(o, "-f") || !strcmp(o, "--file")) {
            a->prompt_file = v;
        } else if (!strcmp(o, "--system")) {
            a->system = v;
        } else if (!strcmp(o, "-n")) {
            ok = cllm_cli_int("run", o, v, -1, INT32_MAX, &n) && (a->n_predict = (int)n, true);
        } else if (!strcmp(o, "-c")) {
            ok = cllm_cli_int("run", o, v, 0, 1 << 24, &n) && (a->n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = cllm_cli_int("run", o, v, 1, 1 << 24, &n) && (a->n_batch = n, true);
        } else if (!strcmp(o, "-t")) {
            ok = cllm_cli_int("run", o, v, 0, 1024, &n) && (a->n_threads = (int)n, true);
        } else if (!strcmp(o, "--temp")) {
            ok = cllm_cli_float("run", o, v, &a->sp.temperature);
        } else if (!strcmp(o, "--top-k")) {
            ok = cllm_cli_int("run", o, v, 0, INT32_MAX, &n) && (a->sp.top_k = (int32_t)n, true);
        } else if (!strcmp(o, "--top-p")) {
            ok = cllm_cli_float("run", o, v, &a->sp.top_p);
        } else if (!strcmp(o, "--min-p")) {
            ok = cllm_cli_float("run", o, v, &a->sp.min_p);
        } else if (!strcmp(o, "--repeat-penalty")) {
            ok = cllm_cli_float("run", o, v, &a->sp.repeat_penalty);
        } else if (!strcmp(o, "--seed")) {
            ok = cllm_cli_int("run", o, v, 0, INT64_MAX, &n) && (a->sp.seed = (uint64_t)n, true);
        } else if (!strcmp(o, "--mem")) {
            if (cllm_plan_parse_mem(&a->fit, v) != CLLM_OK) {
                cllm_cli_lib_error("run");
                return 2;
            }
            a->use_plan = true;
        } else if (!strcmp(o, "--test-device")) {
            if (cllm_cli_enable_test_device("run", v) != 0) return 2;
            a->use_plan = true;
        } else { /* --kv-type */
            ok = !strcmp(v, "f16") || !strcmp(v, "f32");
            if (ok) a->kv_type = !strcmp(v, "f16") ? CLLM_TYPE_F16 : CLLM_TYPE_F32;
            if (!ok) cllm_cli_error("run", "%s: '%s' is not f16 or f32", o, v);
        }
        if (!ok) return 2;
    }
    if (!a->model) {
        cllm_cli_error("run", "no model given (-m FILE; see cllm run --help)");
        return 2;
    }
    if (!a->prompt == !a->prompt_file) {
        cllm_cli_error("run", a->prompt ? "give the prompt once: -p TEXT or -f FILE, not both"
                                        : "no prompt given (-p TEXT or -f FILE)");
        return 2;
    }
    return 0;
}

/* ---- JSON output ------------------------------------------------------- */

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
    bool oom;  /* the text did not fit in memory: generation was stopped */
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
        if (!nb) {
            sink->oom = true;
            return false;
        }
        sink->buf = nb;
        sink->cap = cap;
    }
    memcpy(sink->buf + sink->len, text, len);
    sink->len += len;
    return true;
}

/* The text of -p, or of the file of -f (one trailing newline dropped, as
 * llama.cpp's -f does) into *out and *len; false after printing why not. */
static bool read_prompt(const run_args *a, char **out, size_t *len) {
    if (a->prompt) {
        *len = strlen(a->prompt);
        *out = malloc(*len + 1);
        if (!*out) {
            cllm_cli_error("run", "out of memory for the prompt");
            return false;
        }
        memcpy(*out, a->prompt, *len + 1);
        return true;
    }
    if (!cllm_cli_read_text("run", a->prompt_file, out, len)) return false;
    if (*len > 0 && (*out)[*len - 1] == '\n') (*out)[--*len] = '\0';
    return true;
}

/* The prompt text: as given, or rendered through the chat template (with
 * the template's default system message when none is given), into *out and
 * *len (replacing them). */
static cllm_status make_prompt(const run_args *a, const cllm_model *m, char **text, size_t *len,
                               bool *has_bos) {
    *has_bos = false;
    if (!a->chat) return CLLM_OK;
    cllm_chat_msg msgs[2];
    size_t n = 0;
    if (a->system) msgs[n++] = (cllm_chat_msg){.role = "system", .content = a->system};
    msgs[n++] = (cllm_chat_msg){.role = "user", .content = *text};
    cllm_chat_style style;
    char *out = NULL;
    const cllm_status st = cllm_chat_apply(m, NULL, msgs, n, true, &out, NULL, &style);
    if (st != CLLM_OK) return st;
    free(*text);
    *text = out;
    *len = strlen(out);
    *has_bos = cllm_chat_style_has_bos_text(style);
    return CLLM_OK;
}

static size_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
}

int cllm_cmd_run(int argc, char **argv) {
    run_args a;
    const int parsed = parse_run_args(argc, argv, &a);
    if (parsed != 0) return parsed < 0 ? 0 : parsed;
    int rc = 1;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    char *prompt = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    text_sink sink = {.stream = !a.json};
    cllm_generate_result res = {0};

    if (!read_prompt(&a, &prompt, &len)) goto done;
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
    if (make_prompt(&a, m, &prompt, &len, &has_bos) != CLLM_OK) goto fail;
    size_t n_ids = 0;
    /* count first, then tokenize into an exactly sized array */
    cllm_status st = cllm_tokenize(m, prompt, len, !has_bos, a.chat, NULL, 0, &n_ids);
    if (st != CLLM_OK && st != CLLM_ERR_TOO_LARGE) goto fail;
    ids = malloc((n_ids + 1) * sizeof(*ids));
    if (!ids) {
        cllm_cli_error("run", "out of memory for %zu tokens", n_ids);
        goto done;
    }
    if (cllm_tokenize(m, prompt, len, !has_bos, a.chat, ids, n_ids + 1, &n_ids) != CLLM_OK) {
        goto fail;
    }

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = a.n_ctx;
    sp.n_batch = a.n_batch;
    sp.n_threads = a.n_threads;
    sp.kv_type = a.kv_type;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
    const int64_t n_ctx = cllm_session_n_ctx(s), n_train = cllm_model_n_ctx_train(m);
    if (n_train > 0 && n_ctx > n_train) {
        cllm_cli_warn("run",
                      "%s: context %lld is larger than the %lld tokens the model was trained "
                      "with; past them the output may degrade",
                      a.model, (long long)n_ctx, (long long)n_train);
    }
    if ((int64_t)n_ids > n_ctx) {
        cllm_cli_error("run", "%s: the prompt has %zu tokens, the context only %lld (-c)", a.model,
                       n_ids, (long long)n_ctx);
        goto done;
    }
    if (cllm_sampler_new(&a.sp, cllm_model_n_vocab(m), &smp) != CLLM_OK) goto fail;
    if (cllm_generate(s, smp, ids, n_ids, a.n_predict, on_text, &sink, &res) != CLLM_OK) {
        goto fail;
    }
    if (sink.oom) {
        cllm_cli_error("run", "out of memory for the generated text");
        goto done;
    }
    if (res.stop == CLLM_STOP_CONTEXT_FULL) {
        if (!a.json) fputc('\n', stderr);
        cllm_cli_warn("run", "context full (%lld tokens): generation stopped", (long long)n_ctx);
    }

    const double pp_tps = res.prompt_ms > 0 ? (double)n_ids / (res.prompt_ms / 1e3) : 0;
    const double tg_tps = res.gen_ms > 0 ? (double)res.n_gen_decoded / (res.gen_ms / 1e3) : 0;
    const cllm_memory_report mem = cllm_session_memory(s);
    if (a.json) {
        FILE *f = stdout;
        fprintf(f, "{\n  \"model\": ");
        cllm_cli_json_str(f, a.model, strlen(a.model));
        fprintf(f, ",\n  \"prompt_ids\": ");
        json_ids(f, ids, n_ids);
        fprintf(f, ",\n  \"generated_ids\": ");
        json_ids(f, res.ids, res.n_ids);
        fprintf(f, ",\n  \"text\": ");
        cllm_cli_json_str(f, sink.buf ? sink.buf : "", sink.len);
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
            const char *name = cllm_device_name(dev);
            fputs(first ? "" : ", ", f);
            cllm_cli_json_str(f, name, strlen(name));
            fprintf(f, ": ");
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
    cllm_cli_lib_error("run");
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
