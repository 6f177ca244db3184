/* cllm run: generate text from a prompt (streamed, or one JSON object). */
#include "cllm-pipeline.h"
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- argument parsing -------------------------------------------------- */

typedef struct run_args {
    cli_gen g;               /* model, sampling, memory */
    const char *prompt;      /* -p */
    const char *prompt_file; /* -f: "-" is standard input */
    bool chat, json;
    double pipe_timeout; /* --pipe-timeout: seconds (under mpirun) */
} run_args;

static void run_usage(FILE *f) {
    fprintf(f, "usage: cllm run -m FILE (-p TEXT | -f FILE) [options]\n"
               "       cllm run FILE [PROMPT] [options]\n"
               "\n"
               "Generates text from a prompt and streams it to standard output as the model\n"
               "writes it (the timings go to standard error).\n"
               "\n"
               "  -m FILE              the model (GGUF)\n"
               "  -hf USER/NAME[:QUANT]\n"
               "                       instead of -m: a model of the Hugging Face hub,\n"
               "                       downloaded when needed (cllm pull --help)\n"
               "  -p TEXT              the prompt\n"
               "  -f FILE              the prompt from a file (-: standard input), without one\n"
               "                       trailing newline; for prompts longer than a command line\n");
    cli_gen_usage(f, -1);
    fprintf(f, "  --chat               wrap the prompt in the model's chat template\n"
               "  --pipe-timeout S     under mpirun: give up when a rank does not answer\n"
               "                       within S seconds (default 120)\n"
               "  --json               print one JSON object instead of streaming text\n"
               "  -h, --help           this help\n"
               "\n"
               "For a conversation of several turns, see cllm chat.\n");
}

/* Parses argv[1..] into *a: 0; -1 after printing the help; 2 after printing
 * the problem. */
static int parse_run_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof(*a));
    cli_gen_init(&a->g, -1);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            run_usage(stdout);
            return -1;
        }
        if (!strcmp(o, "--chat")) {
            a->chat = true;
            continue;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        const int taken = cli_gen_option("run", &a->g, argc, argv, &i);
        if (taken == 2) return 2;
        if (taken == 1) continue;
        /* the positional forms: the model's file, then the prompt */
        if (o[0] != '-' && !a->g.model && !a->g.hf) {
            a->g.model = o;
            continue;
        }
        if (o[0] != '-' && !a->prompt) {
            a->prompt = o;
            continue;
        }
        if (!cli_is_one_of(o, "-p --prompt -f --file --pipe-timeout")) {
            cli_error("run",
                      o[0] == '-' ? "unknown option '%s' (see cllm run --help)"
                                  : "'%s': the model and the prompt are given already",
                      o);
            return 2;
        }
        const char *v = cli_value("run", argc, argv, &i);
        if (!v) return 2;
        if (!strcmp(o, "--pipe-timeout")) {
            char *end = NULL;
            a->pipe_timeout = strtod(v, &end);
            if (!end || *end || !(a->pipe_timeout > 0)) {
                cli_error("run", "--pipe-timeout wants seconds > 0, not '%s'", v);
                return 2;
            }
        } else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) {
            a->prompt = v;
        } else {
            a->prompt_file = v;
        }
    }
    if (!cli_gen_finish("run", &a->g)) return 2;
    if (!a->prompt == !a->prompt_file) {
        cli_error("run", a->prompt ? "give the prompt once: -p TEXT or -f FILE, not both"
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
    char last; /* the last byte streamed */
    char *buf; /* collected text (for --json) */
    size_t len, cap;
} text_sink;

static bool on_text(int32_t id, const char *text, size_t len, void *ud) {
    (void)id;
    text_sink *sink = ud;
    if (sink->stream) {
        if (len > 0) sink->last = text[len - 1];
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
            cli_error("run", "out of memory for the prompt");
            return false;
        }
        memcpy(*out, a->prompt, *len + 1);
        return true;
    }
    if (!cli_read_text("run", a->prompt_file, out, len)) return false;
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
    if (a->g.system) msgs[n++] = (cllm_chat_msg){.role = "system", .content = a->g.system};
    msgs[n++] = (cllm_chat_msg){.role = "user", .content = *text};
    char *out = NULL;
    const cllm_status st =
        cli_chat_prompt(m, a->g.chat_style, a->g.chat_template, msgs, n, &out, has_bos);
    if (st != CLLM_OK) return st;
    free(*text);
    *text = out;
    *len = strlen(out);
    return CLLM_OK;
}

static size_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
}

static int run(run_args *ap);

int cli_cmd_run(int argc, char **argv) {
    run_args a;
    const int parsed = parse_run_args(argc, argv, &a);
    int rc = parsed < 0 ? 0 : parsed;
    if (parsed == 0) rc = cli_model_from_hf("run", a.g.hf, &a.g.model) ? run(&a) : 1;
    cli_gen_free(&a.g);
    return rc;
}

static int run(run_args *ap) {
    run_args a = *ap;
    int rc = 1;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    char *prompt = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    text_sink sink = {.stream = !a.json};
    cllm_generate_result res = {0};
    cllm_pipe *pipe = NULL;
    bool piped = cllm_pipe_launched(); /* under mpirun: layers across the ranks */

    if (piped) {
        const int prc = cli_pipe_open("run", &a.g, 1, a.pipe_timeout, false, &pipe);
        if (prc >= 0) return prc; /* a rank > 0 served, or the pipeline failed */
        m = cllm_pipe_model(pipe);
    }
    if (!read_prompt(&a, &prompt, &len)) goto done;
    if (!piped && !cli_gen_load("run", &a.g, &m)) goto done;

    bool has_bos = false;
    if (make_prompt(&a, m, &prompt, &len, &has_bos) != CLLM_OK) goto fail;
    size_t n_ids = 0;
    /* count first, then tokenize into an exactly sized array */
    cllm_status st = cllm_tokenize(m, prompt, len, !has_bos, a.chat, NULL, 0, &n_ids);
    if (st != CLLM_OK && st != CLLM_ERR_TOO_LARGE) goto fail;
    ids = malloc((n_ids + 1) * sizeof(*ids));
    if (!ids) {
        cli_error("run", "out of memory for %zu tokens", n_ids);
        goto done;
    }
    if (cllm_tokenize(m, prompt, len, !has_bos, a.chat, ids, n_ids + 1, &n_ids) != CLLM_OK) {
        goto fail;
    }

    if (piped) {
        s = cllm_pipe_session(pipe);
        if (cllm_sampler_new(&a.g.sp, cllm_model_n_vocab(m), &smp) != CLLM_OK) goto fail;
    } else if (!cli_gen_session("run", &a.g, m, &s, &smp)) {
        goto done;
    }
    if (piped && a.g.draft_model) {
        cli_error("run", "-md: a draft model is not supported across ranks (mpirun)");
        goto done;
    }
    if (!cli_gen_draft("run", &a.g, m, 1, cllm_session_n_ctx(s))) goto done;
    const int64_t n_ctx = cllm_session_n_ctx(s);
    if ((int64_t)n_ids > n_ctx) {
        cli_error("run", "%s: the prompt has %zu tokens, the context only %lld (-c)", a.g.model,
                  n_ids, (long long)n_ctx);
        goto done;
    }
    if (cllm_generate_spec(s, smp, ids, n_ids, a.g.n_predict, &a.g.spec, on_text, &sink, &res) !=
        CLLM_OK) {
        goto fail;
    }
    if (sink.oom) {
        cli_error("run", "out of memory for the generated text");
        goto done;
    }
    /* a terminal's prompt starts on a line of its own */
    if (sink.stream && sink.last != '\n' && isatty(STDOUT_FILENO)) {
        fputc('\n', stdout);
        sink.last = '\n';
    }
    if (res.stop == CLLM_STOP_CONTEXT_FULL) {
        if (!a.json && sink.last != '\n') fputc('\n', stderr);
        cli_warn("run", "context full (%lld tokens): generation stopped", (long long)n_ctx);
    }

    const double pp_tps = res.prompt_ms > 0 ? (double)n_ids / (res.prompt_ms / 1e3) : 0;
    const double tg_tps = res.gen_ms > 0 ? (double)res.n_gen_decoded / (res.gen_ms / 1e3) : 0;
    const cllm_memory_report mem = cllm_session_memory(s);
    if (a.json) {
        FILE *f = stdout;
        fprintf(f, "{\n  \"model\": ");
        cli_json_str(f, a.g.model, strlen(a.g.model));
        fprintf(f, ",\n  \"prompt_ids\": ");
        json_ids(f, ids, n_ids);
        fprintf(f, ",\n  \"generated_ids\": ");
        json_ids(f, res.ids, res.n_ids);
        fprintf(f, ",\n  \"text\": ");
        cli_json_str(f, sink.buf ? sink.buf : "", sink.len);
        fprintf(f, ",\n  \"stop\": \"%s\"", cllm_stop_reason_str(res.stop));
        fprintf(f, ",\n  \"seed\": %llu", (unsigned long long)a.g.sp.seed);
        fprintf(f,
                ",\n  \"timings\": {\"prompt_tokens\": %zu, \"prompt_ms\": %.3f, "
                "\"prompt_tokens_per_s\": %.2f, \"generated_tokens\": %zu, \"generation_ms\": "
                "%.3f, \"generation_tokens_per_s\": %.2f, \"draft_tokens\": %zu, "
                "\"draft_tokens_accepted\": %zu}",
                n_ids, res.prompt_ms, pp_tps, res.n_gen_decoded, res.gen_ms, tg_tps, res.n_drafted,
                res.n_accepted);
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
            cli_json_str(f, name, strlen(name));
            fprintf(f, ": ");
            json_memory(f, &r);
            first = false;
        }
        fprintf(f, "},\n  \"peak_rss_bytes\": %zu,\n  \"n_ctx\": %lld,\n  \"n_batch\": %lld\n}\n",
                peak_rss_bytes(), (long long)cllm_session_n_ctx(s), (long long)a.g.n_batch);
    } else {
        fprintf(stderr, "\n\nprompt: %zu tokens, %.1f tok/s | generation: %zu tokens, %.1f tok/s\n",
                n_ids, pp_tps, res.n_gen_decoded, tg_tps);
        if (a.g.verbose) {
            fprintf(stderr, "speculative (%s): %zu draft tokens verified, %zu kept (%.0f%%)\n",
                    cllm_spec_type_str(a.g.spec.type), res.n_drafted, res.n_accepted,
                    res.n_drafted ? 100.0 * (double)res.n_accepted / (double)res.n_drafted : 0.0);
        }
    }
    rc = 0;
    if (piped && !cli_pipe_close("run", pipe)) rc = 1;
    goto done;
fail:
    cli_lib_error("run");
done:
    cllm_generate_result_free(&res);
    free(sink.buf);
    free(ids);
    free(prompt);
    cllm_sampler_free(smp);
    cllm_draft_free(a.g.draft); /* a copy of *ap's options: what it made here */
    cllm_model_free(a.g.draft_m);
    if (piped) {
        /* the model and session are the pipeline's; a failure on rank 0
         * takes every rank down (MPI_Abort) instead of leaving them waiting */
        cllm_pipe_free(pipe);
        cllm_pipe_finalize(rc != 0);
        return rc;
    }
    cllm_session_free(s);
    cllm_model_free(m);
    return rc;
}
