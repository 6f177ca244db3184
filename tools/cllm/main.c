/*
 * cllm — the command-line tool: a thin layer over the library.
 *
 *   cllm run  -m FILE -p TEXT [options]    generate text
 *   cllm info -m FILE                      metadata and tensor table
 *   cllm demo                              the engine on a small graph
 *
 * Errors: one line naming the file and the problem, exit status != 0.
 */
#include "alloc/galloc.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "runtime/chat.h"
#include "runtime/generate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *f) {
    fprintf(f, "usage: cllm <command> [options]\n"
               "\n"
               "commands:\n"
               "  run   -m FILE -p TEXT    generate text from a prompt\n"
               "  info  -m FILE            print the metadata and the tensor table\n"
               "  demo                     plan, allocate and compute a small graph\n"
               "  version                  print the version\n"
               "\n"
               "run options:\n"
               "  -n N                 tokens to generate (default 128; -1: until the end)\n"
               "  -c N                 context size (default: min(model context, 4096))\n"
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
               "  --json               print one JSON object instead of streaming text\n");
}

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

/* ---- run --------------------------------------------------------------- */

typedef struct text_sink {
    bool stream;
    char *buf; /* collected text (for --json) */
    size_t len, cap;
} text_sink;

static bool on_text(int32_t id, const char *text, size_t len, void *ud) {
    CLLM_UNUSED(id);
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

/* The prompt text: as given, or rendered through the chat template. */
static cllm_status make_prompt(const run_args *a, const cllm_model *m, char **out, bool *has_bos) {
    *has_bos = false;
    if (!a->chat) {
        *out = strdup(a->prompt);
        return *out ? CLLM_OK : cllm_error(CLLM_ERR_NOMEM, "out of memory");
    }
    const char *tmpl = NULL;
    if (cllm_gguf_find_key(m->gguf, "tokenizer.chat_template") >= 0) {
        CLLM_TRY(cllm_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl));
    }
    cllm_chat_style style;
    CLLM_TRY(cllm_chat_style_detect(tmpl, &style));
    cllm_chat_msg msgs[2];
    size_t n = 0;
    char *default_system = NULL;
    if (a->system) {
        msgs[n++] = (cllm_chat_msg){.role = "system", .content = a->system};
    } else if (cllm_chat_default_system(tmpl, &default_system) == CLLM_OK && default_system) {
        msgs[n++] = (cllm_chat_msg){.role = "system", .content = default_system};
    }
    msgs[n++] = (cllm_chat_msg){.role = "user", .content = a->prompt};
    size_t needed = 0;
    cllm_status st = cllm_chat_render(style, msgs, n, true, NULL, 0, &needed);
    char *buf = st == CLLM_OK || st == CLLM_ERR_TOO_LARGE ? malloc(needed + 1) : NULL;
    if (buf) st = cllm_chat_render(style, msgs, n, true, buf, needed + 1, &needed);
    free(default_system);
    if (!buf) return st != CLLM_OK && st != CLLM_ERR_TOO_LARGE ? st : CLLM_ERR_NOMEM;
    if (st != CLLM_OK) {
        free(buf);
        return st;
    }
    *has_bos = cllm_chat_style_has_bos_text(style);
    *out = buf;
    return CLLM_OK;
}

static size_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
}

static int cmd_run(int argc, char **argv) {
    run_args a;
    if (!parse_run_args(argc, argv, &a)) return 2;
    if (!a.prompt) {
        fprintf(stderr, "cllm: no prompt given (-p TEXT)\n");
        return 2;
    }
    int rc = 1;
    cllm_model *m = NULL;
    cllm_tokenizer *tok = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    char *prompt = NULL;
    int32_t *ids = NULL;
    text_sink sink = {.stream = !a.json};
    cllm_generate_result res = {0};

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !a.no_mmap;
    if (cllm_model_load(a.model, &mp, &m) != CLLM_OK) goto fail;
    if (cllm_tokenizer_new_from_gguf(m->gguf, &tok) != CLLM_OK) goto fail;

    bool has_bos = false;
    if (make_prompt(&a, m, &prompt, &has_bos) != CLLM_OK) goto fail;
    const size_t len = strlen(prompt);
    size_t n_ids = 0;
    /* count first, then tokenize into an exactly sized array */
    cllm_status st = cllm_tokenizer_encode(tok, prompt, len, !has_bos, a.chat, NULL, 0, &n_ids);
    if (st != CLLM_OK && st != CLLM_ERR_TOO_LARGE) goto fail;
    ids = malloc((n_ids + 1) * sizeof(*ids));
    if (!ids) goto fail;
    if (cllm_tokenizer_encode(tok, prompt, len, !has_bos, a.chat, ids, n_ids + 1, &n_ids) !=
        CLLM_OK) {
        goto fail;
    }

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = a.n_ctx;
    sp.n_batch = a.n_batch;
    sp.n_threads = a.n_threads;
    sp.kv_type = a.kv_type;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
    if ((int64_t)n_ids > cllm_session_n_ctx(s)) {
        cllm_error(CLLM_ERR_TOO_LARGE, "%s: the prompt has %zu tokens, the context only %lld",
                   a.model, n_ids, (long long)cllm_session_n_ctx(s));
        goto fail;
    }
    if (cllm_sampler_new(&a.sp, (int32_t)m->hp.n_vocab, &smp) != CLLM_OK) goto fail;
    if (cllm_generate(s, tok, smp, ids, n_ids, a.n_predict, on_text, &sink, &res) != CLLM_OK) {
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
        fprintf(f, ",\n  \"memory\": {");
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            fprintf(f, "%s\"%s\": {\"planned\": %zu, \"allocated\": %zu}", k ? ", " : "",
                    cllm_mem_kind_str(k), mem.planned[k], mem.allocated[k]);
        }
        fprintf(f, "},\n  \"peak_rss_bytes\": %zu,\n  \"n_ctx\": %lld,\n  \"n_batch\": %lld\n}\n",
                peak_rss_bytes(), (long long)cllm_session_n_ctx(s), (long long)a.n_batch);
    } else {
        fprintf(stderr, "\n\nprompt: %zu tokens, %.1f tok/s | generation: %zu tokens, %.1f tok/s\n",
                n_ids, pp_tps, res.n_gen_decoded, tg_tps);
    }
    rc = 0;
fail:
    if (rc != 0) fprintf(stderr, "cllm: %s\n", cllm_last_error());
    cllm_generate_result_free(&res);
    free(sink.buf);
    free(ids);
    free(prompt);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    cllm_tokenizer_free(tok);
    cllm_model_free(m);
    return rc;
}

/* ---- info -------------------------------------------------------------- */

static void print_value(const cllm_gguf *g, int64_t i) {
    switch (cllm_gguf_kv_type(g, i)) {
    case CLLM_GGUF_UINT8: printf("%u", cllm_gguf_val_u8(g, i)); break;
    case CLLM_GGUF_INT8: printf("%d", cllm_gguf_val_i8(g, i)); break;
    case CLLM_GGUF_UINT16: printf("%u", cllm_gguf_val_u16(g, i)); break;
    case CLLM_GGUF_INT16: printf("%d", cllm_gguf_val_i16(g, i)); break;
    case CLLM_GGUF_UINT32: printf("%u", cllm_gguf_val_u32(g, i)); break;
    case CLLM_GGUF_INT32: printf("%d", cllm_gguf_val_i32(g, i)); break;
    case CLLM_GGUF_UINT64: printf("%llu", (unsigned long long)cllm_gguf_val_u64(g, i)); break;
    case CLLM_GGUF_INT64: printf("%lld", (long long)cllm_gguf_val_i64(g, i)); break;
    case CLLM_GGUF_FLOAT32: printf("%g", (double)cllm_gguf_val_f32(g, i)); break;
    case CLLM_GGUF_FLOAT64: printf("%g", cllm_gguf_val_f64(g, i)); break;
    case CLLM_GGUF_BOOL: printf("%s", cllm_gguf_val_bool(g, i) ? "true" : "false"); break;
    case CLLM_GGUF_STRING: {
        const char *s = cllm_gguf_val_str(g, i);
        const size_t n = strlen(s);
        printf("\"%.*s%s\"", (int)CLLM_MIN(n, 72), s, n > 72 ? "..." : "");
        break;
    }
    case CLLM_GGUF_ARRAY:
        printf("[%s x %llu]", cllm_gguf_type_name(cllm_gguf_arr_type(g, i)),
               (unsigned long long)cllm_gguf_arr_n(g, i));
        break;
    default: printf("?"); break;
    }
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            path = argv[++i];
        } else {
            fprintf(stderr, "cllm info: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "cllm info: no model given (-m FILE)\n");
        return 2;
    }
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        fprintf(stderr, "cllm: %s\n", cllm_last_error());
        return 1;
    }
    printf("file: %s\nGGUF version %u, %lld tensors, %lld keys, alignment %zu, data at %llu\n\n",
           path, cllm_gguf_version(g), (long long)cllm_gguf_n_tensors(g),
           (long long)cllm_gguf_n_kv(g), cllm_gguf_alignment(g),
           (unsigned long long)cllm_gguf_data_offset(g));
    for (int64_t i = 0; i < cllm_gguf_n_kv(g); i++) {
        printf("  %-44s = ", cllm_gguf_key(g, i));
        print_value(g, i);
        putchar('\n');
    }
    printf("\n  %-5s %-36s %-8s %-28s %12s\n", "#", "tensor", "type", "shape", "bytes");
    uint64_t total = 0;
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_gguf_tensor_info *t = cllm_gguf_tensor(g, i);
        char shape[64];
        int n = snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->n_dims; d++) {
            n += snprintf(shape + n, sizeof(shape) - (size_t)n, d ? ", %lld" : "%lld",
                          (long long)t->ne[d]);
        }
        snprintf(shape + n, sizeof(shape) - (size_t)n, "]");
        printf("  %-5lld %-36s %-8s %-28s %12zu\n", (long long)i, t->name, cllm_type_name(t->type),
               shape, t->size);
        total += t->size;
    }
    printf("\n  total tensor bytes: %llu\n", (unsigned long long)total);
    cllm_gguf_free(g);
    return 0;
}

/* ---- demo -------------------------------------------------------------- */

/* The engine without a model: y = silu(W x) + x for a 256x256 W, planned in
 * measure mode, allocated exactly, computed, checked against plain C. */
static int cmd_demo(void) {
    enum { N = 256, T = 8 };
    int rc = 1;
    cllm_context *wctx = cllm_context_new(4), *ctx = cllm_context_new(16);
    cllm_graph *g = cllm_graph_new(16);
    cllm_buffer *wbuf = NULL;
    cllm_backend *be = NULL;
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_galloc *ga = cllm_galloc_new(&buft, 1);
    float *w = malloc(sizeof(float) * N * N), *x = malloc(sizeof(float) * N * T);
    float *y = malloc(sizeof(float) * N * T);
    if (!wctx || !ctx || !g || !ga || !w || !x || !y) goto done;

    cllm_tensor *W = cllm_tensor_set_name(cllm_tensor_new_2d(wctx, CLLM_TYPE_F32, N, N), "W");
    if (cllm_layout_alloc(wctx, buft, CLLM_MEM_WEIGHTS, &wbuf) != CLLM_OK) goto done;
    cllm_tensor *X = cllm_tensor_set_name(cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, N, T), "x");
    cllm_tensor_set_input(X);
    cllm_tensor *Y = cllm_add(ctx, cllm_silu(ctx, cllm_mul_mat(ctx, W, X)), X);
    cllm_tensor_set_output(Y);
    cllm_graph_build(g, Y);

    if (cllm_galloc_measure(ga, g, NULL, NULL) != CLLM_OK) goto done;
    const size_t measured = cllm_galloc_measured_size(ga, 0);
    printf("graph: %d nodes, %d leafs\n", g->n_nodes, g->n_leafs);
    printf("measure mode: %zu bytes planned (lower bound %zu); device memory touched: %zu bytes\n",
           measured, cllm_galloc_lower_bound(ga, 0),
           cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE));
    if (cllm_galloc_reserve(ga) != CLLM_OK) goto done;
    if (cllm_galloc_alloc_graph(ga, g, NULL, NULL) != CLLM_OK) goto done;
    printf("alloc mode:   %zu bytes allocated for compute\n",
           cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE));

    for (int i = 0; i < N * N; i++) w[i] = (float)((i * 7919) % 201 - 100) / 1000.0f;
    for (int i = 0; i < N * T; i++) x[i] = (float)((i * 104729) % 101 - 50) / 50.0f;
    cllm_tensor_set_all(W, w);
    cllm_tensor_set_all(X, x);
    if (cllm_backend_cpu_new(0, &be) != CLLM_OK) goto done;
    if (cllm_backend_graph_compute(be, g) != CLLM_OK) goto done;
    cllm_tensor_get_all(Y, y);

    double max_err = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < N; r++) {
            double acc = 0;
            for (int k = 0; k < N; k++) acc += (double)w[r * N + k] * x[t * N + k];
            const double ref = acc / (1 + exp(-acc)) + x[t * N + r];
            max_err = fmax(max_err, fabs(ref - y[t * N + r]));
        }
    }
    printf("computed with %d threads: max |error| vs plain C = %.2e\n",
           cllm_backend_cpu_n_threads(be), max_err);
    rc = max_err < 1e-4 ? 0 : 1;
done:
    if (rc) fprintf(stderr, "cllm demo: failed: %s\n", cllm_last_error());
    cllm_backend_free(be);
    cllm_galloc_free(ga);
    cllm_buffer_free(wbuf);
    cllm_graph_free(g);
    cllm_context_free(ctx);
    cllm_context_free(wctx);
    free(w);
    free(x);
    free(y);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo();
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("cllm %s\n", cllm_version());
        return 0;
    }
    fprintf(stderr, "cllm: unknown command '%s' (see cllm --help)\n", cmd);
    return 2;
}
