/* cllm serve: an OpenAI-compatible HTTP server (server.h): options, loading
 * the model and the slots, and the signals that stop it. */
#include "cllm-pipeline.h"
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: cllm serve -m FILE [options]\n"
            "\n"
            "Serves the model over HTTP with OpenAI's API: POST /v1/chat/completions,\n"
            "POST /v1/completions (streamed as server-sent events with \"stream\": true),\n"
            "GET /v1/models, GET /v1/models/ID (each also without /v1), GET /health or\n"
            "/v1/health (503 while loading), GET /metrics (Prometheus, with --metrics).\n"
            "Ollama's API beside it: POST /api/chat, /api/generate (streamed as NDJSON by\n"
            "default), /api/show; GET /api/tags, /api/ps, /api/version. llama-server's\n"
            "POST /tokenize, /detokenize, /apply-template; GET /props, /slots (--slots).\n"
            "GET / is a chat page for a browser (--no-webui: off).\n"
            "\n"
            "options:\n"
            "  -m FILE              the model (GGUF)\n"
            "  -hf USER/NAME[:QUANT]\n"
            "                       instead of -m: a model of the Hugging Face hub,\n"
            "                       downloaded when needed (cllm pull --help)\n"
            "  --host ADDR          IPv4 or IPv6 address to listen on (default 127.0.0.1;\n"
            "                       0.0.0.0 or :: for every interface)\n"
            "  --port N             port (default 8080; 0: any free port, printed)\n"
            "  -np, --parallel N    slots: requests generated at once, each with its own KV\n"
            "                       cache, all in one forward pass per step (default 1, at\n"
            "                       most 64)\n"
            "  -c, --ctx-size N     the context of all slots together, split evenly (as\n"
            "                       llama-server's -c)\n"
            "  --ctx-per-slot N     the context of each slot (default, without either:\n"
            "                       min(model context, 4096) each)\n"
            "  -b, --batch-size N   prompt batch size (default 512)\n"
            "  -t, --threads N      threads (default: physical cores)\n"
            "  --mem DEVICE=SIZE    place layers on devices within budgets (as cllm "
            "plan)\n" CLI_KV_USAGE
            "  --no-mmap            read the weights instead of mapping them\n"
            "  --api-key KEY        require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                       (not for /health or the chat page's files)\n"
            "  --api-key-file F     the same, the key read from file F\n"
            "  --max-queue N        requests that may wait for a slot (default 64); more get\n"
            "                       503 with Retry-After\n"
            "  --timeout S          cancel a request that waits and runs longer than S seconds,\n"
            "                       and close a connection whose request takes longer to\n"
            "                       arrive (default 0: never)\n"
            "  --max-body BYTES     largest request body (default 8388608); larger: 413, from\n");
    fprintf(f,
            "                       Content-Length before the body is read\n"
            "  --max-connections N  connections open at once (default 512)\n"
            "  --max-conn-per-ip N  of them from one client address (default 32)\n"
            "  --http-threads N     threads that serve every connection (default 4)\n"
            "  --header-timeout S   a request's headers must arrive within S seconds,\n"
            "                       also between requests on a kept-alive connection\n"
            "                       (default 10)\n"
            "  --min-body-rate B    past --header-timeout, a body must arrive at B bytes/s\n"
            "                       at least (default 4096)\n"
            "  --idle-timeout S     close a connection that moves no byte for S seconds\n"
            "                       (default 30; not while its request is generated)\n"
            "  -n N                 max_tokens of requests that give none (default -1: until\n"
            "                       the model ends or the context is full)\n"
            "  --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty R, --seed S\n"
            "                       sampling of requests that do not set it (defaults: those of\n"
            "                       cllm run and llama.cpp: temperature 0.8, top_k 40, top_p\n"
            "                       0.95, min_p 0.05, repeat penalty 1; seed random)\n"
            "  --grammar TEXT, --grammar-file FILE, -j, --json-schema TEXT|@FILE\n"
            "                       the grammar of requests that set none (response_format,\n"
            "                       grammar, json_schema); response_format text turns it off\n"
            "  --chat-template NAME a built-in chat format instead of the file's template\n"
            "                       (chatml, llama2, llama3, gemma, zephyr, phi3)\n"
            "  --chat-template-file FILE\n"
            "                       render this Jinja chat template instead of the file's\n"
            "  --alias NAME         another name the model answers to (repeatable); listed in\n"
            "                       /v1/models after the file's name\n"
            "  --strict-model-names refuse (404) a request whose 'model' is not the file's\n"
            "                       name or an alias (default: any name is served)\n"
            "  --cors-origin ORIGIN let a web page from ORIGIN (or '*': any) call the server:\n"
            "                       Access-Control-Allow-Origin on answers, OPTIONS preflights\n"
            "                       answered (repeatable; default: none)\n"
            "  --test-device SPEC   enable the test device (debug)\n"
            "  --metrics            answer GET /metrics (Prometheus text; off by default)\n"
            "  --slots              answer GET /slots (each slot's state; off by default)\n"
            "  --no-webui           no chat page: GET / (and /webui/...) answer 404\n"
            "  --embeddings         answer POST /v1/embeddings (off by default: 501)\n"
            "  --pooling P          the embeddings' pooling: mean, cls or last (default: the\n"
            "                       file's <arch>.pooling_type, else mean)\n"
            "  --pipe-timeout S     under mpirun: give up when a rank does not answer within\n"
            "                       S seconds (default 120)\n"
            "  --spec-type none|ngram-simple|draft, --no-spec, --draft-max N, --draft-min N,\n"
            "  --spec-ngram-size-n N, --spec-ngram-min N,\n"
            "  -md, --model-draft FILE (a draft model, shared by the slots)\n"
            "                       speculative decoding of every request, as cllm run\n"
            "                       (default ngram-simple: the answers are the same)\n"
            "  --verbose            log each request and slot to stderr\n"
            "\n"
            "Under mpirun -np N the model's layers are spread over the N ranks (see cllm\n"
            "run); rank 0 serves HTTP, each rank holds a session per slot.\n");
}

#ifndef CLLM_HAVE_SERVE

int cli_cmd_serve(int argc, char **argv) {
    if (argc > 1 && cli_is_help(argv[1])) {
        serve_usage(stdout);
        return 0;
    }
    cli_error("serve", "this cllm was built without libmicrohttpd and jansson (install "
                       "libmicrohttpd-dev and libjansson-dev and build again)");
    return 1;
}

#else

#include "server.h"

#include <pthread.h>
#include <signal.h>

typedef struct serve_args {
    cli_gen g;
    srv_http_opts http;
    int parallel, max_queue;
    long long ctx_total, ctx_per_slot; /* -c, --ctx-per-slot; 0: not given */
    const char *api_key_file;
    float pipe_timeout;
} serve_args;

/* The key in file `path`, without trailing white space; NULL after printing
 * why. */
static char *read_key(const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (!cli_read_text("serve", path, &text, &len)) return NULL;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
                       text[len - 1] == '\t')) {
        text[--len] = '\0';
    }
    if (len == 0 || strlen(text) != len) {
        cli_error("serve", "%s: no API key in the file (or a NUL byte)", path);
        free(text);
        return NULL;
    }
    return text;
}

/* 0 to go on, -1 after --help, 2 on bad usage. */
static int parse_serve_args(int argc, char **argv, serve_args *a) {
    memset(a, 0, sizeof(*a));
    cli_gen_init(&a->g, -1);
    a->parallel = 1;
    a->max_queue = 64;
    a->http.host = "127.0.0.1";
    a->http.port = 8080;
    a->http.max_body = (size_t)8 << 20;
    a->http.lim = (srv_limits){.max_conns = 512,
                               .max_per_client = 32,
                               .threads = 4,
                               .header_s = 10,
                               .idle_s = 30,
                               .min_rate = 4096};
    a->http.pooling = -1; /* the model's */
    a->http.webui = true;
    srv_gen_params *d = &a->http.defaults;
    d->rp = cllm_request_default_params();
    cllm_sampler_params *dsp = &d->rp.sampling;
    /* the defaults of cllm run (and llama.cpp's): the sampler's own */
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i], *o = cli_gen_canonical(name); /* llama.cpp's names too */
        if (!strcmp(o, "-np")) o = "--parallel";
        if (cli_is_help(o)) {
            serve_usage(stdout);
            return -1;
        }
        if (cli_is_one_of(o, "-m --model -hf -hfr --hf-repo -b -t --mem " CLI_KV_OPTIONS
                             " --no-mmap --test-device "
                             "--verbose -ngl --n-gpu-layers --gpu-layers --grammar "
                             "--grammar-file --json-schema --chat-template "
                             "--chat-template-file --spec-type --no-spec --draft-max --draft-min "
                             "--spec-ngram-size-n --spec-ngram-min -md --model-draft "
                             "--spec-draft-model")) {
            const int r = cli_gen_option("serve", &a->g, argc, argv, &i);
            if (r != 1) return 2;
            continue;
        }
        if (!strcmp(o, "--metrics")) {
            a->http.metrics = true;
            continue;
        }
        if (!strcmp(o, "--no-webui")) {
            a->http.webui = false;
            continue;
        }
        if (!strcmp(o, "--slots")) {
            a->http.slots = true;
            continue;
        }
        if (!strcmp(o, "--embeddings") || !strcmp(o, "--embedding")) {
            a->http.embeddings = true;
            continue;
        }
        if (!strcmp(o, "--pooling")) {
            const char *v = cli_value("serve", argc, argv, &i);
            if (!v) return 2;
            cllm_pooling p;
            if (cllm_pooling_parse(v, &p) != CLLM_OK) {
                cli_error("serve", "--pooling '%s': one of none, mean, cls, last", v);
                return 2;
            }
            a->http.pooling = (int)p;
            continue;
        }
        if (!strcmp(o, "--strict-model-names")) {
            a->http.strict_names = true;
            continue;
        }
        if (!cli_is_one_of(
                o, "--host --port --parallel --api-key --api-key-file "
                   "--max-queue --timeout --max-body -n --temp --top-k --top-p "
                   "--min-p --repeat-penalty --seed --pipe-timeout --alias --cors-origin -c "
                   "--ctx-per-slot --max-connections --max-conn-per-ip --http-threads "
                   "--header-timeout --min-body-rate --idle-timeout")) {
            cli_error("serve", "unknown option '%s' (see cllm serve --help)", name);
            return 2;
        }
        const char *v = cli_value("serve", argc, argv, &i);
        if (!v) return 2;
        long long n = 0;
        bool ok = true;
        if (!strcmp(o, "--host")) {
            a->http.host = v;
        } else if (!strcmp(o, "--port")) {
            ok = cli_int("serve", name, v, 0, 65535, &n) && (a->http.port = (int)n, true);
        } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx-per-slot")) {
            ok = cli_int("serve", name, v, 1, 1 << 24, &n);
            if (ok) *(!strcmp(o, "-c") ? &a->ctx_total : &a->ctx_per_slot) = n;
        } else if (!strcmp(o, "--parallel")) {
            ok = cli_int("serve", name, v, 1, 64, &n) && (a->parallel = (int)n, true);
        } else if (!strcmp(o, "--api-key")) {
            ok = v[0] != '\0';
            if (!ok) cli_error("serve", "--api-key: the key is empty");
            a->http.api_key = v;
        } else if (!strcmp(o, "--alias") || !strcmp(o, "--cors-origin")) {
            const bool alias = !strcmp(o, "--alias");
            int *n_names = alias ? &a->http.n_aliases : &a->http.n_cors;
            ok = v[0] != '\0' && *n_names < SRV_MAX_NAMES;
            if (!ok) cli_error("serve", "%s: an empty name, or more than %d", o, SRV_MAX_NAMES);
            if (ok) (alias ? a->http.aliases : a->http.cors)[(*n_names)++] = v;
        } else if (!strcmp(o, "--api-key-file")) {
            a->api_key_file = v;
        } else if (!strcmp(o, "--max-queue")) {
            ok = cli_int("serve", name, v, 0, 1 << 20, &n) && (a->max_queue = (int)n, true);
        } else if (!strcmp(o, "--timeout")) {
            float t = 0;
            ok = cli_float("serve", name, v, &t);
            if (ok && t < 0) {
                cli_error("serve", "--timeout: %s is negative", v);
                ok = false;
            }
            a->http.timeout_s = t;
            a->http.lim.read_s = t;
        } else if (!strcmp(o, "--max-connections")) {
            ok =
                cli_int("serve", name, v, 1, 1 << 16, &n) && (a->http.lim.max_conns = (int)n, true);
        } else if (!strcmp(o, "--max-conn-per-ip")) {
            ok = cli_int("serve", name, v, 1, 1 << 16, &n) &&
                 (a->http.lim.max_per_client = (int)n, true);
        } else if (!strcmp(o, "--http-threads")) {
            ok = cli_int("serve", name, v, 1, 64, &n) && (a->http.lim.threads = (int)n, true);
        } else if (!strcmp(o, "--header-timeout") || !strcmp(o, "--idle-timeout") ||
                   !strcmp(o, "--min-body-rate")) {
            float t = 0;
            ok = cli_float("serve", name, v, &t);
            if (ok && !(t > 0 && t <= 1e9f)) {
                cli_error("serve", "%s wants a number > 0, not '%s'", o, v);
                ok = false;
            }
            if (ok) {
                *(!strcmp(o, "--header-timeout") ? &a->http.lim.header_s
                  : !strcmp(o, "--idle-timeout") ? &a->http.lim.idle_s
                                                 : &a->http.lim.min_rate) = t;
            }
        } else if (!strcmp(o, "--pipe-timeout")) {
            ok = cli_float("serve", name, v, &a->pipe_timeout);
            if (ok && !(a->pipe_timeout > 0)) {
                cli_error("serve", "--pipe-timeout wants seconds > 0, not '%s'", v);
                ok = false;
            }
        } else if (!strcmp(o, "--max-body")) {
            ok =
                cli_int("serve", name, v, 1, 1LL << 30, &n) && (a->http.max_body = (size_t)n, true);
        } else if (!strcmp(o, "-n")) {
            ok = cli_int("serve", name, v, -1, 1 << 30, &n) && (d->rp.max_tokens = (int)n, true);
        } else if (!strcmp(o, "--temp")) {
            ok = cli_float("serve", name, v, &dsp->temperature);
        } else if (!strcmp(o, "--top-k")) {
            ok = cli_int("serve", name, v, 0, INT32_MAX, &n) && (dsp->top_k = (int32_t)n, true);
        } else if (!strcmp(o, "--top-p")) {
            ok = cli_float("serve", name, v, &dsp->top_p);
        } else if (!strcmp(o, "--min-p")) {
            ok = cli_float("serve", name, v, &dsp->min_p);
        } else if (!strcmp(o, "--repeat-penalty")) {
            ok = cli_float("serve", name, v, &dsp->repeat_penalty);
        } else { /* --seed */
            ok = cli_int("serve", name, v, 0, INT64_MAX, &n);
            dsp->seed = (uint64_t)n;
            a->http.seed_given = true;
        }
        if (!ok) return 2;
    }
    if (a->ctx_total && a->ctx_per_slot) {
        cli_error("serve", "-c (all slots) and --ctx-per-slot: give one");
        return 2;
    }
    a->g.n_ctx = a->ctx_per_slot ? a->ctx_per_slot : a->ctx_total / a->parallel;
    if (a->ctx_total && a->g.n_ctx < 16) {
        cli_error("serve", "-c %lld over %d slots leaves %lld tokens each (at least 16)",
                  a->ctx_total, a->parallel, (long long)a->g.n_ctx);
        return 2;
    }
    if (a->http.api_key && a->api_key_file) {
        cli_error("serve", "--api-key and --api-key-file: give one");
        return 2;
    }
    /* the defaults must make a valid sampler */
    cllm_sampler *probe = NULL;
    if (cllm_sampler_new(dsp, 2, &probe) != CLLM_OK) {
        cli_lib_error("serve");
        return 2;
    }
    cllm_sampler_free(probe);
    /* checked with the model's tokens once it is loaded */
    dsp->grammar = a->g.grammar;
    a->http.chat_style = a->g.chat_style;
    a->http.chat_template = a->g.chat_template;
    a->g.seed_given = true; /* seeds are per request */
    if (!cli_gen_finish("serve", &a->g)) return 2;
    d->rp.spec = a->g.spec; /* speculative decoding of every request */
    a->http.verbose = a->g.verbose;
    return 0;
}

static void print_memory(const srv_engine *e) {
    const cllm_memory_report r = srv_engine_memory(e);
    fprintf(stderr, "cllm serve: %d slot%s of %lld tokens; memory (planned / allocated):\n",
            e->n_slots, e->n_slots == 1 ? "" : "s", (long long)e->n_ctx);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        char p[32], al[32];
        fprintf(stderr, "  %-10s %12s / %s\n", cllm_mem_kind_str((cllm_mem_kind)k),
                cllm_format_size(r.planned[k], p, sizeof(p)),
                cllm_format_size(r.allocated[k], al, sizeof(al)));
    }
}

static int serve(serve_args *a);

int cli_cmd_serve(int argc, char **argv) {
    serve_args a;
    const int parsed = parse_serve_args(argc, argv, &a);
    int rc = parsed < 0 ? 0 : parsed;
    if (parsed == 0) rc = cli_model_from_hf("serve", a.g.hf, &a.g.model) ? serve(&a) : 1;
    cli_gen_free(&a.g);
    return rc;
}

static int serve(serve_args *ap) {
    serve_args a = *ap;

    char *key = NULL;
    if (a.api_key_file) {
        if (!(key = read_key(a.api_key_file))) return 1;
        a.http.api_key = key;
    }
    const char *base = strrchr(a.g.model, '/');
    a.http.model_id = base ? base + 1 : a.g.model;
    a.http.model_path = a.g.model;

    /* SIGINT and SIGTERM go to sigwait below: blocked here, before any
     * thread starts, so that every thread inherits the mask */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1, port = 0;
    cllm_model *m = NULL;
    srv_engine e;
    bool engine_ok = false;
    srv_http *h = NULL;
    /* under mpirun: every rank loads its layers first; the ranks but 0
     * compute what rank 0 sends until it stops */
    cllm_pipe *pipe = NULL;
    if (cllm_pipe_launched()) {
        const int prc = cli_pipe_open("serve", &a.g, a.parallel, a.pipe_timeout, true, &pipe);
        if (prc >= 0) {
            free(key);
            return prc;
        }
        if (!cllm_pipe_any_thread()) {
            cli_error("serve", "the MPI library does not let the engine thread use it "
                               "(MPI_THREAD_SERIALIZED was not granted)");
            goto done;
        }
        cllm_pipe_plan_print(cllm_pipe_get_plan(pipe), stderr);
    }
    h = srv_http_start(&a.http, &port);
    if (!h) goto done;
    const bool v6 = strchr(a.http.host, ':') != NULL;
    printf("cllm serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", a.http.host, v6 ? "]" : "",
           port);
    fflush(stdout);

    if (pipe && a.http.embeddings) {
        cli_error("serve", "--embeddings: not under mpirun (the layers are spread over the ranks)");
        goto done;
    }
    a.g.fit.n_seq = a.parallel; /* one session, a sequence per slot */
    a.g.fit.embeddings = a.http.embeddings;
    if (!pipe && !cli_gen_load("serve", &a.g, &m)) goto done;
    /* the default grammar, compiled for the model's tokens */
    if (a.g.grammar && cllm_sampler_params_check(
                           &a.http.defaults.rp.sampling,
                           cllm_model_n_vocab(pipe ? cllm_pipe_model(pipe) : m)) != CLLM_OK) {
        cli_error("serve", "%s: %s", a.g.grammar_opt, cllm_last_error());
        goto done;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = a.g.n_ctx, sp.n_batch = a.g.n_batch, sp.n_threads = a.g.n_threads;
    sp.type_k = a.g.type_k, sp.type_v = a.g.type_v;
    sp.embeddings = a.http.embeddings;
    if (!srv_engine_init(&e, m, pipe, a.parallel, &sp, a.max_queue, a.g.verbose)) goto done;
    engine_ok = true;
    if (pipe && a.g.draft_model) {
        cli_error("serve", "-md: a draft model is not supported under mpirun");
        goto done;
    }
    /* one draft model for every slot: a sequence of its session each */
    if (!cli_gen_draft("serve", &a.g, m, a.parallel, e.n_ctx)) goto done;
    a.http.defaults.rp.spec = a.g.spec;
    srv_http_set_spec(h, &a.g.spec);
    print_memory(&e);
    if (!srv_engine_start(&e)) goto done;
    srv_http_ready(h, &e);
    printf("cllm serve: ready: model %s\n", a.http.model_id);
    fflush(stdout);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    srv_http_quiesce(h); /* no new connections */
    pthread_mutex_lock(&e.mu);
    const bool failed = e.failed;
    pthread_mutex_unlock(&e.mu);
    if (failed) {
        cli_error("serve", "stopping: the pipeline failed: %s", e.failure);
    } else {
        fprintf(stderr, "cllm serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        rc = 0;
    }
done:
    /* cancels every job: the connections waiting on them finish */
    if (engine_ok) srv_engine_stop(&e);
    srv_http_drain(h, 5.0); /* their answers (or errors) go out */
    srv_http_stop(h);
    if (engine_ok) srv_engine_free(&e);
    cllm_draft_free(a.g.draft); /* a copy of *ap's options: what it made here */
    cllm_model_free(a.g.draft_m);
    if (pipe) {
        /* the other ranks stop with rank 0; after a failure they are ended */
        if (rc == 0 && !cli_pipe_close("serve", pipe)) rc = 1;
        cllm_pipe_free(pipe);
        cllm_pipe_finalize(rc != 0);
    } else {
        cllm_model_free(m);
    }
    free(key);
    return rc;
}

#endif /* CLLM_HAVE_SERVE */
