/* What run and chat share: the model, sampling and memory options, the
 * seed, and loading a model with its session. */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

void cli_gen_init(cli_gen *g, int n_predict) {
    memset(g, 0, sizeof(*g));
    g->n_predict = n_predict;
    g->n_batch = 512;
    g->sp = cllm_sampler_default_params();
    g->spec = cllm_spec_default_params();
    g->type_k = g->type_v = CLLM_TYPE_F16;
    g->fit = cllm_plan_default_params();
}

void cli_gen_free(cli_gen *g) {
    free(g->grammar);
    free(g->chat_template);
    g->grammar = g->chat_template = NULL;
    g->sp.grammar = NULL;
    cllm_draft_free(g->draft); /* before its model */
    cllm_model_free(g->draft_m);
    g->draft = NULL, g->draft_m = NULL;
    g->spec.draft = NULL;
}

void cli_gen_usage(FILE *f, int n_predict) {
    if (n_predict < 0) {
        fprintf(f, "  -n, --n-predict N    tokens to generate per answer (default -1: until the\n"
                   "                       model ends its turn or the context is full)\n");
    } else {
        fprintf(f, "  -n, --n-predict N    tokens to generate (default %d; -1: until the end)\n",
                n_predict);
    }
    fprintf(f,
            "  -c, --ctx-size N     context size (default: min(model context, 4096); above\n"
            "                       the model's trained context: a warning)\n"
            "  -b, --batch-size N   prompt batch size (default 512)\n"
            "  -t, --threads N      threads (default: physical cores)\n"
            "  --temp T             temperature (default 0.8; 0: greedy, deterministic)\n"
            "  --top-k K            top-k (default 40; 0: off)\n"
            "  --top-p P            top-p (default 0.95; 1: off)\n"
            "  --min-p P            min-p (default 0.05; 0: off)\n"
            "  --repeat-penalty R   repetition penalty (default 1: off)\n"
            "  --repeat-last-n N    tokens the repetition penalty looks back on (default 64)\n"
            "  --ignore-eos         go on past the model's end-of-generation tokens\n"
            "  -s, --seed S         sampling seed (default: a new random seed each run,\n"
            "                       printed by --verbose; --seed S repeats that run)\n"
            "  --grammar TEXT       constrain the output to a GBNF grammar (docs/grammar.md)\n"
            "  --grammar-file FILE  the same, from a file\n"
            "  -j, --json-schema TEXT|@FILE\n"
            "                       constrain the output to JSON that follows the schema\n"
            "  -sys, --system TEXT  the system message of the chat template\n"
            "  --chat-template NAME a built-in chat format instead of the file's template\n"
            "                       (chatml, llama2, llama3, gemma, zephyr, phi3)\n"
            "  --chat-template-file FILE\n"
            "                       render this Jinja chat template instead of the file's\n"
            "  --spec-type none|ngram-simple|draft\n"
            "                       speculative decoding: drafts from n-gram lookup in the\n"
            "                       prompt and output, verified in one pass; the output is\n"
            "                       the same (default ngram-simple; --no-spec: none)\n"
            "  -md, --model-draft FILE\n"
            "                       a draft model with the same vocabulary drafts instead\n"
            "                       (greedy; --spec-type draft); its KV cache is the\n"
            "                       target's context; the output is the same\n"
            "  --draft-max N        tokens drafted at most per step (default 8, up to 32)\n"
            "  --draft-min N        draft only N tokens or more (default 1)\n"
            "  --spec-ngram-size-n N\n"
            "                       the longest n-gram looked up (default 4)\n"
            "  --spec-ngram-min N   the shortest n-gram looked up (default 2)\n" CLI_KV_USAGE
            "  --no-mmap            read the weights instead of mapping them\n"
            "  --mem DEVICE=SIZE    place layers on devices within budgets (as cllm plan)\n"
            "  --test-device SPEC   enable the test device (debug; e.g. budget=64MiB,ops=-rope)\n"
            "  --verbose            print the seed, the tokens processed and the draft tokens\n"
            "                       verified and kept to stderr\n");
}

/* llama.cpp's names for the same options (llama-cli, llama-server), and
 * the name cllm knows each by. */
static const char *const k_aliases[][2] = {
    {"--ctx-size", "-c"},
    {"--batch-size", "-b"},
    {"--threads", "-t"},
    {"--n-predict", "-n"},
    {"--predict", "-n"},
    {"-s", "--seed"},
    {"-sys", "--system"},
    {"--system-prompt", "--system"},
    {"-j", "--json-schema"},
    {"--spec-draft-n-max", "--draft-max"},
    {"--draft-n", "--draft-max"},
    {"--draft", "--draft-max"},
    {"--spec-draft-n-min", "--draft-min"},
    {"--draft-n-min", "--draft-min"},
    {"--spec-ngram-simple-size-n", "--spec-ngram-size-n"},
};

const char *cli_gen_canonical(const char *o) {
    for (size_t k = 0; k < sizeof(k_aliases) / sizeof(k_aliases[0]); k++) {
        if (!strcmp(o, k_aliases[k][0])) return k_aliases[k][1];
    }
    return o;
}

/* --grammar TEXT, --grammar-file FILE, --json-schema TEXT|@FILE: one of
 * them, compiled when the sampler is made (its errors name line and column). */
static int grammar_option(const char *cmd, cli_gen *g, const char *o, const char *v) {
    if (g->grammar_opt) {
        cli_error(cmd, "%s and %s: give one grammar", g->grammar_opt, o);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    const bool from_file =
        !strcmp(o, "--grammar-file") || (!strcmp(o, "--json-schema") && v[0] == '@');
    if (from_file) {
        if (!cli_read_text(cmd, !strcmp(o, "--grammar-file") ? v : v + 1, &text, &len)) return 2;
        if (strlen(text) != len) {
            cli_error(cmd, "%s: '%s' holds a NUL byte", o, v);
            free(text);
            return 2;
        }
    } else if (!(text = strdup(v))) {
        cli_error(cmd, "out of memory");
        return 2;
    }
    if (!strcmp(o, "--json-schema")) {
        char *gbnf = NULL;
        const cllm_status st = cllm_json_schema_to_grammar(text, &gbnf);
        free(text);
        if (st != CLLM_OK) {
            cli_lib_error(cmd);
            return 2;
        }
        text = gbnf;
    }
    g->grammar = text;
    g->grammar_opt = o;
    g->sp.grammar = text;
    return 1;
}

/* --chat-template NAME (a built-in format), --chat-template-file FILE (a
 * Jinja template): one of them. */
static int template_option(const char *cmd, cli_gen *g, const char *o, const char *v) {
    if (g->chat_style || g->chat_template) {
        cli_error(cmd, "give one of --chat-template and --chat-template-file, once");
        return 2;
    }
    if (!strcmp(o, "--chat-template")) {
        cllm_chat_style style;
        if (cllm_chat_style_from_name(v, &style) != CLLM_OK) {
            cli_error(cmd,
                      "--chat-template: '%s' is not a built-in format (chatml, llama2, llama3, "
                      "gemma, zephyr, phi3); a Jinja template goes to --chat-template-file",
                      v);
            return 2;
        }
        g->chat_style = v;
        return 1;
    }
    size_t len = 0;
    if (!cli_read_text(cmd, v, &g->chat_template, &len)) return 2;
    if (strlen(g->chat_template) != len) {
        cli_error(cmd, "--chat-template-file: '%s' holds a NUL byte", v);
        free(g->chat_template);
        g->chat_template = NULL;
        return 2;
    }
    g->chat_tmpl_src = v;
    return 1;
}

int cli_gen_option(const char *cmd, cli_gen *g, int argc, char **argv, int *i) {
    const char *o = argv[*i], *c = cli_gen_canonical(o); /* messages name o */
    if (!strcmp(c, "-ngl") || !strcmp(c, "--n-gpu-layers") || !strcmp(c, "--gpu-layers")) {
        cli_error(cmd,
                  "%s: cllm places layers by memory, not by count: GPUs get as many layers as "
                  "fit by default; --mem DEVICE=SIZE sets a budget (0 keeps a device out), "
                  "and cllm plan shows the split",
                  o);
        return 2;
    }
    const int kv = cli_kv_option(cmd, o, argc, argv, i, &g->type_k, &g->type_v);
    if (kv) return kv;
    if (!strcmp(c, "-md") || !strcmp(c, "--model-draft") || !strcmp(c, "--spec-draft-model")) {
        if (!(g->draft_model = cli_value(cmd, argc, argv, i))) return 2;
        return 1;
    }
    if (!strcmp(c, "--ignore-eos")) {
        g->sp.ignore_eos = true;
        return 1;
    }
    if (!strcmp(c, "--no-mmap")) {
        g->no_mmap = true;
        return 1;
    }
    if (!strcmp(c, "--verbose")) {
        g->verbose = true;
        return 1;
    }
    if (!strcmp(c, "--no-spec")) {
        g->spec.type = CLLM_SPEC_NONE;
        return 1;
    }
    if (cli_is_hf_option(c)) {
        if (!(g->hf = cli_value(cmd, argc, argv, i))) return 2;
        return 1;
    }
    if (!cli_is_one_of(c, "-m --model --system -n -c -b -t --temp --top-k --top-p --min-p "
                          "--repeat-penalty --repeat-last-n --seed --mem --test-device "
                          "--grammar --grammar-file --json-schema --chat-template "
                          "--chat-template-file --spec-type --draft-max --draft-min "
                          "--spec-ngram-size-n --spec-ngram-min")) {
        return 0;
    }
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return 2;
    if (cli_is_one_of(c, "--grammar --grammar-file --json-schema"))
        return grammar_option(cmd, g, c, v);
    if (cli_is_one_of(c, "--chat-template --chat-template-file")) {
        return template_option(cmd, g, c, v);
    }
    long long n;
    bool ok = true;
    if (!strcmp(c, "-m") || !strcmp(c, "--model")) {
        g->model = v;
    } else if (!strcmp(c, "--system")) {
        g->system = v;
    } else if (!strcmp(c, "-n")) {
        ok = cli_int(cmd, o, v, -1, INT32_MAX, &n) && (g->n_predict = (int)n, true);
    } else if (!strcmp(c, "-c")) {
        ok = cli_int(cmd, o, v, 0, 1 << 24, &n) && (g->n_ctx = n, true);
    } else if (!strcmp(c, "-b")) {
        ok = cli_int(cmd, o, v, 1, 1 << 24, &n) && (g->n_batch = n, true);
    } else if (!strcmp(c, "-t")) {
        ok = cli_int(cmd, o, v, 0, 1024, &n) && (g->n_threads = (int)n, true);
    } else if (!strcmp(c, "--temp")) {
        ok = cli_float(cmd, o, v, &g->sp.temperature);
    } else if (!strcmp(c, "--top-k")) {
        ok = cli_int(cmd, o, v, 0, INT32_MAX, &n) && (g->sp.top_k = (int32_t)n, true);
    } else if (!strcmp(c, "--top-p")) {
        ok = cli_float(cmd, o, v, &g->sp.top_p);
    } else if (!strcmp(c, "--min-p")) {
        ok = cli_float(cmd, o, v, &g->sp.min_p);
    } else if (!strcmp(c, "--repeat-penalty")) {
        ok = cli_float(cmd, o, v, &g->sp.repeat_penalty);
    } else if (!strcmp(c, "--repeat-last-n")) {
        ok = cli_int(cmd, o, v, 0, INT32_MAX, &n) && (g->sp.repeat_last_n = (int32_t)n, true);
    } else if (!strcmp(c, "--seed")) {
        ok = cli_int(cmd, o, v, 0, INT64_MAX, &n);
        if (ok) g->sp.seed = (uint64_t)n, g->seed_given = true;
    } else if (!strcmp(c, "--spec-type")) {
        ok = cllm_spec_type_parse(v, &g->spec.type) == CLLM_OK;
        if (!ok) cli_lib_error(cmd);
        g->spec_type_given = true;
    } else if (!strcmp(c, "--draft-max")) {
        ok = cli_int(cmd, o, v, 1, CLLM_SPEC_MAX_DRAFT, &n) && (g->spec.draft_max = (int)n, true);
    } else if (!strcmp(c, "--draft-min")) {
        ok = cli_int(cmd, o, v, 1, CLLM_SPEC_MAX_DRAFT, &n) && (g->spec.draft_min = (int)n, true);
    } else if (!strcmp(c, "--spec-ngram-size-n")) {
        ok = cli_int(cmd, o, v, 1, 64, &n) && (g->spec.ngram_max = (int)n, true);
    } else if (!strcmp(c, "--spec-ngram-min")) {
        ok = cli_int(cmd, o, v, 1, 64, &n) && (g->spec.ngram_min = (int)n, true);
    } else if (!strcmp(c, "--mem")) {
        if (cllm_plan_parse_mem(&g->fit, v) != CLLM_OK) {
            cli_lib_error(cmd);
            return 2;
        }
        g->use_plan = true;
    } else if (!strcmp(c, "--test-device")) {
        if (cli_enable_test_device(cmd, v) != 0) return 2;
        g->use_plan = true;
    }
    return ok ? 1 : 2;
}

/* A seed nobody chose: from the kernel's random source, else from the
 * clock and the process id. Kept within what --seed accepts (63 bits), so
 * that any reported seed can be given back. */
static uint64_t random_seed(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    }
    return x & (uint64_t)INT64_MAX;
}

bool cli_gen_finish(const char *cmd, cli_gen *g) {
    if (g->hf && g->model) {
        cli_error(cmd, "give the model once: -m FILE or -hf USER/NAME[:QUANT], not both");
        return false;
    }
    if (!g->model && !g->hf) {
        cli_error(cmd, "no model given (-m FILE or -hf USER/NAME[:QUANT]; see cllm %s --help)",
                  cmd);
        return false;
    }
    if (!g->seed_given) g->sp.seed = random_seed();
    /* the n-gram sizes and draft lengths against each other (a smaller
     * maximum given alone lowers the default minimum) */
    const cllm_spec_params def = cllm_spec_default_params();
    if (g->spec.ngram_min == def.ngram_min && g->spec.ngram_max < def.ngram_min)
        g->spec.ngram_min = g->spec.ngram_max;
    if (g->spec.draft_min > g->spec.draft_max) {
        cli_error(cmd, "--draft-min %d is above --draft-max %d", g->spec.draft_min,
                  g->spec.draft_max);
        return false;
    }
    if (g->draft_model && g->spec.type == CLLM_SPEC_NONE) {
        cli_error(cmd,
                  "-md %s: a draft model with speculative decoding off (--no-spec or "
                  "--spec-type none)",
                  g->draft_model);
        return false;
    }
    if (g->draft_model && g->spec.type == CLLM_SPEC_NGRAM && g->spec_type_given) {
        cli_error(cmd, "-md %s: a draft model with --spec-type ngram-simple: choose one",
                  g->draft_model);
        return false;
    }
    if (!g->draft_model && g->spec.type == CLLM_SPEC_DRAFT) {
        cli_error(cmd, "--spec-type draft needs a draft model (-md FILE)");
        return false;
    }
    if (g->draft_model) g->spec.type = CLLM_SPEC_NONE; /* checked below without it */
    if (cllm_spec_params_check(&g->spec) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    if (g->draft_model) g->spec.type = CLLM_SPEC_DRAFT; /* spec.draft: cli_gen_draft */
    return true;
}

/* Whether the CPU has less memory than the machine: a memory cgroup (a
 * container, a systemd slice) limits the process. */
static bool cpu_memory_limited(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < cllm_device_count() && pages > 0 && page > 0; i++) {
        cllm_device *d = cllm_device_get(i);
        if (cllm_device_kind_of(d) != CLLM_DEVICE_CPU) continue;
        size_t fr = 0, tot = 0;
        cllm_device_memory(d, &fr, &tot);
        return tot < (size_t)pages * (size_t)page;
    }
    return false;
}

bool cli_gen_load(const char *cmd, cli_gen *g, cllm_model **m_out) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !g->no_mmap;
    cllm_plan *plan = NULL;
    /* under a memory limit, plan within it as --mem would (streaming layers
     * that do not fit, or refusing with the numbers) rather than be killed
     * by the kernel part-way */
    if (!g->use_plan && cpu_memory_limited()) g->use_plan = true;
    if (g->use_plan) {
        /* the session has the same shape as the plan */
        g->fit.n_ctx = g->n_ctx, g->fit.n_batch = g->n_batch, g->fit.n_threads = g->n_threads;
        g->fit.type_k = g->type_k, g->fit.type_v = g->type_v, g->fit.use_mmap = mp.use_mmap;
        if (cllm_plan_file(g->model, &g->fit, &plan) != CLLM_OK) {
            cli_lib_error(cmd);
            return false;
        }
        mp.plan = plan;
    }
    cli_load_bar bar;
    cli_load_progress(&mp, &bar);
    const cllm_status st = cllm_model_load(g->model, &mp, m_out);
    cllm_plan_free(plan); /* the model keeps the placement */
    if (st != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    return true;
}

/* The session shape of the options, with n_seq sequences. */
static cllm_session_params session_params(const cli_gen *g, int n_seq) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = g->n_ctx;
    sp.n_batch = g->n_batch;
    sp.n_threads = g->n_threads;
    sp.type_k = g->type_k, sp.type_v = g->type_v;
    sp.n_seq = n_seq;
    return sp;
}

/* A warning for a context above the trained one; the seed with --verbose. */
static void report_context(const char *cmd, const cli_gen *g, const cllm_model *m, int64_t n_ctx) {
    const int64_t n_train = cllm_model_n_ctx_train(m);
    if (n_train > 0 && n_ctx > n_train) {
        cli_warn(cmd,
                 "%s: context %lld is larger than the %lld tokens the model was trained "
                 "with; past them the output may degrade",
                 g->model, (long long)n_ctx, (long long)n_train);
    }
    if (g->verbose) {
        fprintf(stderr, "cllm %s: seed %llu%s, context %lld tokens\n", cmd,
                (unsigned long long)g->sp.seed, g->seed_given ? "" : " (random)", (long long)n_ctx);
    }
}

bool cli_gen_session(const char *cmd, const cli_gen *g, const cllm_model *m, cllm_session **s_out,
                     cllm_sampler **smp_out) {
    const cllm_session_params sp = session_params(g, 1);
    cllm_session *s = NULL;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    cllm_sampler *smp = NULL;
    if (cllm_sampler_new_model(&g->sp, m, &smp) != CLLM_OK) {
        cli_lib_error(cmd);
        cllm_session_free(s);
        return false;
    }
    report_context(cmd, g, m, cllm_session_n_ctx(s));
    *s_out = s;
    *smp_out = smp;
    return true;
}

bool cli_gen_draft(const char *cmd, cli_gen *g, const cllm_model *m, int n_seq, int64_t n_ctx) {
    if (!g->draft_model) return true;
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !g->no_mmap;
    if (cllm_model_load(g->draft_model, &mp, &g->draft_m) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    cllm_session_params sp = session_params(g, n_seq);
    sp.n_ctx = n_ctx; /* the draft drafts to the end of the target's context */
    if (cllm_draft_new(m, g->draft_m, &sp, &g->draft) != CLLM_OK) {
        cli_error(cmd, "-md %s: %s", g->draft_model, cllm_last_error());
        return false;
    }
    g->spec.draft = g->draft;
    g->spec.type = CLLM_SPEC_DRAFT;
    if (g->verbose) {
        const cllm_memory_report r = cllm_session_memory(cllm_draft_session(g->draft));
        fprintf(stderr,
                "%s: draft model %s: %d sequence(s) of %lld tokens; KV cache %.2f MiB "
                "planned, %.2f MiB allocated; compute %.2f MiB planned, %.2f MiB allocated\n",
                cmd, g->draft_model, n_seq, (long long)n_ctx,
                (double)r.planned[CLLM_MEM_STATE] / 1048576.0,
                (double)r.allocated[CLLM_MEM_STATE] / 1048576.0,
                (double)r.planned[CLLM_MEM_COMPUTE] / 1048576.0,
                (double)r.allocated[CLLM_MEM_COMPUTE] / 1048576.0);
    }
    return true;
}

bool cli_gen_engine(const char *cmd, const cli_gen *g, const cllm_model *m, int n_seq,
                    cllm_event_fn on_event, void *user_data, cllm_engine **out) {
    const cllm_session_params sp = session_params(g, n_seq);
    /* the sampling options must make a sampler: say so now, not per turn */
    if (cllm_sampler_params_check(&g->sp, cllm_model_n_vocab(m)) != CLLM_OK ||
        cllm_engine_new(m, &sp, on_event, user_data, out) != CLLM_OK) {
        cli_lib_error(cmd);
        return false;
    }
    report_context(cmd, g, m, cllm_session_n_ctx(cllm_engine_session(*out)));
    return true;
}

/* The text of token id (its text as a control token), or "". */
static void token_text(const cllm_model *m, int32_t id, const char **s, size_t *len) {
    *s = id >= 0 ? cllm_token_to_piece(m, id, true, len) : NULL;
    if (!*s) *s = "", *len = 0;
}

cllm_status cli_chat_prompt(const cllm_model *m, const char *style, const char *tmpl,
                            const cllm_chat_msg *msgs, size_t n, char **out, bool *has_bos) {
    if (!tmpl) {
        cllm_chat_style st;
        char *text = NULL;
        const cllm_status rc = cllm_chat_apply(m, style, msgs, n, true, &text, NULL, &st);
        if (rc != CLLM_OK) return rc;
        *out = text;
        *has_bos = cllm_chat_style_has_bos_text(st);
        return CLLM_OK;
    }
    /* the context of the template: OpenAI's messages, as Hugging Face's
     * apply_chat_template passes them */
    char *ctx = NULL;
    size_t ctx_len = 0;
    FILE *f = open_memstream(&ctx, &ctx_len);
    if (!f) return CLLM_ERR_NOMEM;
    const char *bos, *eos;
    size_t bos_len, eos_len;
    token_text(m, cllm_token_bos(m), &bos, &bos_len);
    token_text(m, cllm_token_eos(m), &eos, &eos_len);
    fputs("{\"messages\": [", f);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ", {\"role\": " : "{\"role\": ", f);
        cli_json_str(f, msgs[i].role, strlen(msgs[i].role));
        fputs(", \"content\": ", f);
        cli_json_str(f, msgs[i].content, strlen(msgs[i].content));
        fputc('}', f);
    }
    fputs("], \"add_generation_prompt\": true, \"bos_token\": ", f);
    cli_json_str(f, bos, bos_len);
    fputs(", \"eos_token\": ", f);
    cli_json_str(f, eos, eos_len);
    fputc('}', f);
    if (fclose(f) != 0 || !ctx) {
        free(ctx);
        return CLLM_ERR_NOMEM;
    }
    char *text = NULL;
    const cllm_status rc = cllm_chat_template_render(tmpl, ctx, &text, NULL);
    free(ctx);
    if (rc != CLLM_OK) return rc;
    *out = text;
    *has_bos = bos_len > 0 && !strncmp(text, bos, bos_len);
    return CLLM_OK;
}
