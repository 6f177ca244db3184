/*
 * cllm bench -m FILE [-p 512] [-n 128] [-d 0] [-t 1,2] [-r 5] [-b 512] [-c N]
 *            [-ctk TYPE] [-ctv TYPE] [--output md|csv|json]
 *
 * Speed of one model, in the manner of llama-bench: for each thread count,
 *  - pp<P>: decode a batch of P tokens into an empty context (tokens/s);
 *  - tg<N>: decode N tokens one at a time from an empty context (tokens/s);
 *    with -np S, S sequences step together, one token each per forward pass
 *    (tg<N>x<S>: tokens/s of all of them, the throughput a server's slots
 *    share);
 *  - with --spec, tg<N>+ngram: N tokens generated greedily with n-gram
 *    speculative decoding (cllm_generate_spec, the default drafts) after a
 *    prompt that is a block of the fixed ids twice: a copying workload,
 *    where the drafts are kept; tokens/s of the generation alone, and the
 *    draft tokens kept;
 *  - with -d D (a list, as llama-bench's -d), each test again after D
 *    tokens are already in the cache (of every sequence): the cache is
 *    filled untimed before each run, then the test is timed ("pp512 @ d4096");
 * each as mean +- stddev over r repetitions after one warm-up. When the
 * model streams layers (--mem below its size), each test also reports the
 * bytes streamed per token it generated or read: a pass reads every
 * streamed layer once, however many tokens (sequences, drafts) it holds.
 * Token ids are fixed pseudo-random ids fed straight to
 * cllm_session_decode: neither tokenization nor sampling is timed (but
 * tg+ngram's greedy sampling and drafting, as generation pays them). The header names the commit
 * (env CLLM_COMMIT, else `git rev-parse` of the source tree the binary sits in), the CPU and the
 * kernel features in use.
 */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_MAX_THREADS 64
#define BENCH_MAX_DEPTHS  16
#define BENCH_MIN(a, b)   ((a) < (b) ? (a) : (b))
#define BENCH_MAX(a, b)   ((a) > (b) ? (a) : (b))

typedef enum bench_output { BENCH_MD = 0, BENCH_CSV, BENCH_JSON } bench_output;

typedef struct bench_args {
    const char *model;
    int64_t n_prompt, n_gen, n_batch, n_ctx; /* n_ctx 0: max(p, n) rounded up to 256 */
    int threads[BENCH_MAX_THREADS];
    int n_threads_list;
    int reps;
    int n_seqs;                       /* sequences of the tg test */
    bool spec;                        /* --spec: the tg+ngram test too */
    int64_t depths[BENCH_MAX_DEPTHS]; /* -d: tokens in the cache before each test */
    int n_depths;
    cllm_type type_k, type_v; /* KV cache types */
    bench_output output;
    bool use_plan;        /* --mem: load with a plan within these budgets */
    bool no_mmap;         /* --no-mmap: read the weights instead of mapping them */
    cllm_plan_params fit; /* (streams the layers that do not fit) */
} bench_args;

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: cllm bench -m FILE [options]\n"
            "\n"
            "Tokens/s of prompt processing (pp: a batch of -p tokens) and generation (tg: -n\n"
            "tokens one at a time), mean +- stddev over -r repetitions after a warm-up, for\n"
            "each thread count. Fixed pseudo-random token ids: neither tokenization nor\n"
            "sampling is timed.\n"
            "\n"
            "  -m FILE                 the model (GGUF)\n"
            "  -hf USER/NAME[:QUANT]   instead of -m: a model of the Hugging Face hub,\n"
            "                          downloaded when needed (cllm pull --help)\n"
            "  -p, --n-prompt N        prompt tokens (default 512; 0: no pp test)\n"
            "  -n, --n-gen N           generated tokens (default 128; 0: no tg test)\n"
            "  -t, --threads N[,N...]  thread counts (default: physical cores)\n"
            "  -r, --repetitions N     repetitions (default 5)\n"
            "  -b, --batch-size N      batch size (default 512)\n"
            "  -d, --n-depth N[,N...]  tokens already in the cache when a test starts\n"
            "                          (default 0): filled untimed, then the test timed\n"
            "  -c, --ctx-size N        context (default: max(p, n) + the largest -d,\n"
            "                          rounded up to 256)\n"
            "  -np, --seqs N           sequences that generate together in tg, one token\n"
            "                          each per forward pass (default 1; tokens/s of "
            "all)\n"
            "  --spec                  also tg<N>+ngram: N tokens generated greedily with\n"
            "                          n-gram speculative decoding after a prompt that\n"
            "                          repeats a block of ids (a copying workload)\n" CLI_KV_USAGE
            "  -o, --output md|csv|json   output format (default md)\n"
            "  --mem DEVICE=SIZE       load with a plan within budgets (as cllm plan; the\n"
            "                          layers that do not fit are streamed)\n"
            "  --no-mmap               read the weights into memory (on huge pages where\n"
            "                          the system gives them) instead of mapping the file\n"
            "  -h, --help              this help\n");
}

/* "1,2,4" -> threads[] */
static bool parse_threads(const char *o, const char *s, bench_args *a) {
    a->n_threads_list = 0;
    char buf[256];
    if (strlen(s) >= sizeof(buf) || !*s) {
        cli_error("bench", "%s: '%s' is not a list of thread counts (1,2,4)", o, s);
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (!cli_int("bench", o, tok, 1, 1024, &v)) return false;
        if (a->n_threads_list == BENCH_MAX_THREADS) {
            cli_error("bench", "%s: more than %d thread counts", o, BENCH_MAX_THREADS);
            return false;
        }
        a->threads[a->n_threads_list++] = (int)v;
    }
    if (a->n_threads_list == 0) {
        cli_error("bench", "%s: '%s' is not a list of thread counts (1,2,4)", o, s);
        return false;
    }
    return true;
}

/* "0,512,4096" -> depths[] */
static bool parse_depths(const char *o, const char *s, bench_args *a) {
    a->n_depths = 0;
    char buf[256];
    if (strlen(s) >= sizeof(buf) || !*s) {
        cli_error("bench", "%s: '%s' is not a list of depths (0,512,4096)", o, s);
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (!cli_int("bench", o, tok, 0, 1 << 24, &v)) return false;
        if (a->n_depths == BENCH_MAX_DEPTHS) {
            cli_error("bench", "%s: more than %d depths", o, BENCH_MAX_DEPTHS);
            return false;
        }
        a->depths[a->n_depths++] = v;
    }
    if (a->n_depths == 0) {
        cli_error("bench", "%s: '%s' is not a list of depths (0,512,4096)", o, s);
        return false;
    }
    return true;
}

static int64_t max_depth(const bench_args *a) {
    int64_t d = 0;
    for (int i = 0; i < a->n_depths; i++) d = BENCH_MAX(d, a->depths[i]);
    return d;
}

/* The ids of the block that the tg+ngram test's prompt repeats twice. */
#define SPEC_BLOCK 48

/* The context of the sessions: -c, else the largest test after the largest
 * depth (or tg+ngram's prompt and tokens), rounded up to 256. */
static int64_t bench_ctx(const bench_args *a) {
    if (a->n_ctx) return a->n_ctx;
    int64_t n = BENCH_MAX(a->n_prompt, a->n_gen) + max_depth(a);
    if (a->spec) n = BENCH_MAX(n, 2 * SPEC_BLOCK + a->n_gen);
    return (n + 255) / 256 * 256;
}

/* The batch of the sessions: the prompt's (at most -b), one token of each
 * sequence, and the cache filled -b at a time. */
static int64_t bench_batch(const bench_args *a) {
    int64_t b = BENCH_MIN(a->n_batch, BENCH_MAX(a->n_prompt, 1));
    if (max_depth(a) > 0) b = BENCH_MAX(b, BENCH_MIN(a->n_batch, max_depth(a)));
    /* tg+ngram: the prompt in one pass, and room for a draft */
    if (a->spec) b = BENCH_MAX(b, 2 * SPEC_BLOCK);
    return BENCH_MAX(b, a->n_seqs);
}

/* Parses argv[1..] into *a: 0; -1 after printing the help; 2 after printing
 * the problem. */
static int parse_bench_args(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof(*a));
    const char *hf = NULL;
    a->n_prompt = 512;
    a->n_gen = 128;
    a->n_batch = 512;
    a->reps = 5;
    a->n_seqs = 1;
    a->fit = cllm_plan_default_params();
    a->threads[0] = cllm_cpu_physical_cores();
    a->n_threads_list = 1;
    a->n_depths = 1; /* depth 0 */
    a->type_k = a->type_v = CLLM_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            bench_usage(stdout);
            return -1;
        }
        if (!strcmp(o, "--no-mmap")) {
            a->no_mmap = true;
            continue;
        }
        if (!strcmp(o, "--spec")) {
            a->spec = true;
            continue;
        }
        if (!strcmp(o, "-s")) {
            cli_error("bench", "-s is llama.cpp's seed, which bench does not use; sequences "
                               "generating together: -np N or --seqs N");
            return 2;
        }
        /* every other option but -h takes a value */
        if (cli_is_hf_option(o)) {
            if (!(hf = cli_value("bench", argc, argv, &i))) return 2;
            continue;
        }
        const int kv = cli_kv_option("bench", o, argc, argv, &i, &a->type_k, &a->type_v);
        if (kv == 2) return 2;
        if (kv) continue;
        if (!cli_is_one_of(o, "-m --model -p --n-prompt -n --n-gen -b --batch-size -c --ctx-size "
                              "-r --repetitions -t --threads -o --output -np --seqs --mem "
                              "-d --n-depth")) {
            cli_error("bench", "unknown option '%s' (see cllm bench --help)", o);
            return 2;
        }
        const char *v = cli_value("bench", argc, argv, &i);
        if (!v) return 2;
        long long n;
        bool ok;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            ok = (a->model = v) != NULL;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--n-prompt")) {
            ok = cli_int("bench", o, v, 0, 1 << 20, &n) && ((a->n_prompt = n), true);
        } else if (!strcmp(o, "-n") || !strcmp(o, "--n-gen")) {
            ok = cli_int("bench", o, v, 0, 1 << 20, &n) && ((a->n_gen = n), true);
        } else if (!strcmp(o, "-b") || !strcmp(o, "--batch-size")) {
            ok = cli_int("bench", o, v, 1, 1 << 20, &n) && ((a->n_batch = n), true);
        } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx-size")) {
            ok = cli_int("bench", o, v, 1, 1 << 24, &n) && ((a->n_ctx = n), true);
        } else if (!strcmp(o, "-r") || !strcmp(o, "--repetitions")) {
            ok = cli_int("bench", o, v, 1, 1000, &n) && ((a->reps = (int)n), true);
        } else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) {
            ok = parse_threads(o, v, a);
        } else if (!strcmp(o, "-d") || !strcmp(o, "--n-depth")) {
            ok = parse_depths(o, v, a);
        } else if (!strcmp(o, "-np") || !strcmp(o, "--seqs")) {
            ok = cli_int("bench", o, v, 1, 64, &n) && ((a->n_seqs = (int)n), true);
        } else if (!strcmp(o, "--mem")) {
            ok = cllm_plan_parse_mem(&a->fit, v) == CLLM_OK;
            if (!ok) cli_lib_error("bench");
            a->use_plan = true;
        } else { /* -o, --output */
            ok = true;
            if (!strcmp(v, "md")) {
                a->output = BENCH_MD;
            } else if (!strcmp(v, "csv")) {
                a->output = BENCH_CSV;
            } else if (!strcmp(v, "json")) {
                a->output = BENCH_JSON;
            } else {
                cli_error("bench", "%s: '%s' is not md, csv or json", o, v);
                ok = false;
            }
        }
        if (!ok) return 2;
    }
    if (a->n_prompt == 0 && a->n_gen == 0) {
        cli_error("bench", "nothing to run (-p 0 -n 0)");
        return 2;
    }
    return cli_model_arg("bench", hf, &a->model);
}

/* The commit: env CLLM_COMMIT, else git of the tree above the binary. */
static void find_commit(char *out, size_t size) {
    const char *env = getenv("CLLM_COMMIT");
    snprintf(out, size, "%s", env && *env ? env : "unknown");
    if (env && *env) return;
    char exe[PATH_MAX];
    if (!realpath("/proc/self/exe", exe)) return;
    char cmd[PATH_MAX + 96];
    snprintf(cmd, sizeof(cmd), "git -C '%s/..' rev-parse --short HEAD 2>/dev/null", dirname(exe));
    if (strchr(exe, '\'')) return; /* do not build a broken shell line */
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char line[64];
    if (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) snprintf(out, size, "%s", line);
    }
    pclose(p);
}

/* Size, parameters and the weight type holding the most bytes. */
typedef struct model_desc {
    uint64_t bytes, params;
    cllm_type type;
} model_desc;

static model_desc describe(const cllm_model *m) {
    uint64_t by_type[CLLM_TYPE_COUNT] = {0};
    model_desc d = {0};
    const cllm_gguf *g = cllm_model_gguf(m);
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_tensor_desc t = cllm_gguf_tensor_desc(g, i);
        d.bytes += t.bytes;
        d.params += (uint64_t)(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
        if ((unsigned)t.type < CLLM_TYPE_COUNT) by_type[t.type] += t.bytes;
    }
    for (int t = 0; t < CLLM_TYPE_COUNT; t++)
        if (by_type[t] > by_type[d.type]) d.type = (cllm_type)t;
    return d;
}

typedef struct bench_result {
    const char *test_kind; /* "pp" or "tg" */
    int64_t n;
    int threads;
    int n_seqs;      /* tg: sequences stepping together */
    int64_t depth;   /* tokens in the cache before the test (-d) */
    double mean, sd; /* tokens/s */
    bool spec;       /* tg+ngram */
    /* streamed layers: bytes read and passes per token over the timed
     * runs (tg+ngram: the prompt's pass left out); draft tokens verified
     * and kept (tg+ngram) */
    double stream_bpt, passes_pt;
    uint64_t drafted, accepted;
} bench_result;

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0.0;
}

/* Every sequence's cache filled with fill[0..depth), n_batch tokens a pass
 * (one sequence's, with several). */
static bool fill_cache(cllm_session *s, const int32_t *fill, int64_t depth, int n_seqs,
                       int64_t n_batch) {
    if (n_seqs == 1) return depth == 0 || cllm_session_decode(s, fill, depth) == CLLM_OK;
    for (int k = 0; k < n_seqs; k++) {
        for (int64_t at = 0; at < depth; at += n_batch) {
            const cllm_seq_tokens item = {k, fill + at, BENCH_MIN(n_batch, depth - at)};
            if (cllm_session_decode_seqs(s, &item, 1) != CLLM_OK) return false;
        }
    }
    return true;
}

/* Every sequence's cache back to fill[0..depth): cut back to it when the
 * cache holds it (*held: the depth filled, -1 when it holds something
 * else), else filled again from empty. */
static bool set_depth(cllm_session *s, const int32_t *fill, int64_t depth, int n_seqs,
                      int64_t n_batch, int64_t *held) {
    if (*held == depth && depth > 0) {
        bool cut = true;
        for (int k = 0; cut && k < n_seqs; k++)
            cut = (n_seqs == 1 ? cllm_session_truncate(s, depth)
                               : cllm_session_seq_truncate(s, k, depth)) == CLLM_OK;
        if (cut) return true; /* else (a sliding window's ring): from empty */
    }
    *held = -1;
    cllm_session_reset(s);
    if (!fill_cache(s, fill, depth, n_seqs, n_batch)) return false;
    *held = depth;
    return true;
}

/* One timed run after the cache is set to fill[0..depth), untimed:
 * pp decodes ids[0..n) at once, tg one at a time (with n_seqs > 1, one
 * token of each sequence per pass, each its own ids). Returns tokens/s of
 * all sequences, or -1 on error. */
static double run_once(cllm_session *s, const int32_t *ids, int64_t n, bool batch, int n_seqs,
                       const int32_t *fill, int64_t depth, int64_t n_batch, int64_t *held) {
    if (!set_depth(s, fill, depth, n_seqs, n_batch, held)) return -1;
    const double t0 = cllm_time_ms();
    if (batch) {
        if (cllm_session_decode(s, ids, n) != CLLM_OK) return -1;
    } else if (n_seqs == 1) {
        for (int64_t i = 0; i < n; i++)
            if (cllm_session_decode(s, &ids[i], 1) != CLLM_OK) return -1;
    } else {
        cllm_seq_tokens items[64];
        for (int64_t i = 0; i < n; i++) {
            for (int k = 0; k < n_seqs; k++) items[k] = (cllm_seq_tokens){k, &ids[(i + k) % n], 1};
            if (cllm_session_decode_seqs(s, items, n_seqs) != CLLM_OK) return -1;
        }
    }
    const double ms = cllm_time_ms() - t0;
    return ms > 0 ? (double)n * (batch ? 1 : n_seqs) * 1000.0 / ms : 0.0;
}

/* "pp512", "tg128", "tg128x4", "pp512 @ d4096" (a ring of buffers). */
static const char *test_name(const bench_result *r) {
    static char ring[4][64];
    static int next;
    char *b = ring[next++ % 4];
    char depth[32] = "";
    if (r->depth > 0) snprintf(depth, sizeof(depth), " @ d%lld", (long long)r->depth);
    if (r->spec) {
        snprintf(b, sizeof(ring[0]), "%s%lld+ngram", r->test_kind, (long long)r->n);
    } else if (r->n_seqs > 1) {
        snprintf(b, sizeof(ring[0]), "%s%lldx%d%s", r->test_kind, (long long)r->n, r->n_seqs,
                 depth);
    } else {
        snprintf(b, sizeof(ring[0]), "%s%lld%s", r->test_kind, (long long)r->n, depth);
    }
    return b;
}

/* A quoted CSV field (quotes doubled), then `sep`. */
static void csv_field(const char *s, const char *sep) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    printf("\"%s", sep);
}

/* The streamed layers' reads so far (zeros without). */
static cllm_stream_usage stream_now(const cllm_model *m) {
    cllm_stream_usage u;
    if (cllm_model_stream_usage(m, &u) != CLLM_OK) memset(&u, 0, sizeof(u));
    return u;
}

/* Bytes streamed and passes from u0 to u1, over `tokens` tokens, less
 * `skip_passes` passes (a prompt's), into r. */
static void stream_per_token(const cllm_stream_usage *u0, const cllm_stream_usage *u1,
                             double tokens, uint64_t skip_passes, bench_result *r) {
    if (!u1->n_layers || tokens <= 0) return;
    uint64_t passes = u1->passes - u0->passes;
    double bytes = (double)(u1->bytes_read - u0->bytes_read);
    skip_passes = BENCH_MIN(skip_passes, passes);
    passes -= skip_passes;
    if (u1->n_layers > u1->n_slots) bytes -= (double)skip_passes * (double)u1->bytes_per_pass;
    r->stream_bpt = BENCH_MAX(bytes, 0.0) / tokens;
    r->passes_pt = (double)passes / tokens;
}

/* One timed tg+ngram run: the block of ids twice as the prompt, then n
 * tokens generated greedily with n-gram drafts. Tokens/s of the
 * generation, or -1 on error; the tokens generated, drafted and kept are
 * added to *n_tok, *drafted and *kept. */
static double run_spec_once(cllm_session *s, cllm_sampler *smp, const int32_t *block, int64_t n,
                            uint64_t *n_tok, uint64_t *drafted, uint64_t *kept) {
    int32_t prompt[2 * SPEC_BLOCK];
    for (int i = 0; i < 2 * SPEC_BLOCK; i++) prompt[i] = block[i % SPEC_BLOCK];
    cllm_session_reset(s);
    cllm_sampler_reset(smp);
    cllm_generate_result res = {0};
    if (cllm_generate_spec(s, smp, prompt, 2 * SPEC_BLOCK, (int)n, NULL, NULL, NULL, &res) !=
        CLLM_OK)
        return -1;
    const double tps = res.gen_ms > 0 ? (double)res.n_ids * 1000.0 / res.gen_ms : 0.0;
    *n_tok += res.n_ids;
    *drafted += res.n_drafted;
    *kept += res.n_accepted;
    cllm_generate_result_free(&res);
    return tps;
}

static bool run_test(const cllm_model *m, cllm_session *s, cllm_sampler *smp, const int32_t *ids,
                     int64_t n, bool batch, int n_seqs, int reps, const int32_t *fill,
                     int64_t n_batch, int64_t *held, bench_result *r) {
    uint64_t n_tok = 0, drafted = 0, kept = 0;
    /* warm-up: the whole batch for pp; a few tokens for tg */
    const double w = r->spec ? run_spec_once(s, smp, ids, BENCH_MIN(n, 16), &n_tok, &drafted, &kept)
                             : run_once(s, ids, batch ? n : BENCH_MIN(n, 16), batch, n_seqs, fill,
                                        r->depth, n_batch, held);
    if (w < 0) return false;
    n_tok = drafted = kept = 0;
    double *x = malloc((size_t)reps * sizeof(*x));
    if (!x) return false;
    const cllm_stream_usage u0 = stream_now(m);
    for (int i = 0; i < reps; i++) {
        x[i] = r->spec ? run_spec_once(s, smp, ids, n, &n_tok, &drafted, &kept)
                       : run_once(s, ids, n, batch, n_seqs, fill, r->depth, n_batch, held);
        if (x[i] < 0) {
            free(x);
            return false;
        }
    }
    const cllm_stream_usage u1 = stream_now(m);
    /* tg+ngram's prompt is a pass of its own: left out. A depth is
     * filled again, in passes that read too, only where the cache could
     * not be cut back to it: then the test's bytes are not told apart
     * (the passes are not the test's alone) */
    const uint64_t test_passes =
        (uint64_t)reps * (uint64_t)(batch ? (n + n_batch - 1) / n_batch : n);
    if (r->spec) {
        stream_per_token(&u0, &u1, (double)n_tok, (uint64_t)reps, r);
    } else if (u1.passes - u0.passes == test_passes) {
        stream_per_token(&u0, &u1, (double)n * (batch ? 1 : n_seqs) * reps, 0, r);
    }
    r->drafted = drafted, r->accepted = kept;
    mean_sd(x, reps, &r->mean, &r->sd);
    free(x);
    return true;
}

int cli_cmd_bench(int argc, char **argv) {
    bench_args a;
    const int parsed = parse_bench_args(argc, argv, &a);
    if (parsed != 0) return parsed < 0 ? 0 : parsed;

    int rc = 1;
    cllm_model *m = NULL;
    cllm_plan *plan = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    int32_t *ids = NULL;
    bench_result res[(2 * BENCH_MAX_DEPTHS + 1) * BENCH_MAX_THREADS];
    int n_res = 0;

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !a.no_mmap;
    a.fit.use_mmap = mp.use_mmap;
    if (a.use_plan) {
        /* a plan for the largest session the runs make (layers that do not
         * fit the budgets are streamed) */
        a.fit.n_ctx = bench_ctx(&a);
        a.fit.n_batch = bench_batch(&a);
        a.fit.type_k = a.type_k, a.fit.type_v = a.type_v;
        a.fit.n_seq = a.n_seqs;
        a.fit.n_threads = 1;
        for (int i = 0; i < a.n_threads_list; i++) {
            a.fit.n_threads = BENCH_MAX(a.fit.n_threads, a.threads[i]);
        }
        if (cllm_plan_file(a.model, &a.fit, &plan) != CLLM_OK) goto fail;
        mp.plan = plan;
        mp.progress = false;
    }
    if (cllm_model_load(a.model, &mp, &m) != CLLM_OK) goto fail;
    const model_desc d = describe(m);
    const int64_t n_vocab = cllm_model_n_vocab(m);
    /* the cache's tokens (the largest depth), then the tests' */
    const int64_t n_fill = max_depth(&a),
                  n_ids = n_fill + BENCH_MAX(BENCH_MAX(a.n_prompt, a.n_gen), SPEC_BLOCK);
    ids = malloc((size_t)n_ids * sizeof(*ids));
    if (!ids) {
        cli_error("bench", "out of memory for %lld token ids", (long long)n_ids);
        goto done;
    }
    uint64_t rng = 0x2545f4914f6cdd1dULL;
    for (int64_t i = 0; i < n_ids; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        ids[i] = (int32_t)(rng % (uint64_t)n_vocab);
    }

    char commit[64];
    find_commit(commit, sizeof(commit));
    const char *cpu = "unknown";
    for (int i = 0; i < cllm_device_count(); i++) {
        if (cllm_device_kind_of(cllm_device_get(i)) == CLLM_DEVICE_CPU)
            cpu = cllm_device_description(cllm_device_get(i));
    }
    const char *features = cllm_cpu_features();
    /* a model that streams layers: each test's bytes streamed per token */
    const cllm_stream_usage su = stream_now(m);
    const bool streams = su.n_layers > 0;
    if (a.spec) {
        cllm_sampler_params spp = cllm_sampler_default_params();
        spp.temperature = 0; /* greedy: the copy is what the drafts predict */
        if (cllm_sampler_new_model(&spp, m, &smp) != CLLM_OK) goto fail;
    }
    const char *base = strrchr(a.model, '/') ? strrchr(a.model, '/') + 1 : a.model;
    /* the names as a terminal shows them (a file name may hold any byte) */
    char commit_t[4 * sizeof(commit)], cpu_t[512], base_t[4 * 256 + 1];
    cllm_escape(commit_t, sizeof(commit_t), commit, strlen(commit), CLLM_ESCAPE_TEXT);
    cllm_escape(cpu_t, sizeof(cpu_t), cpu, strlen(cpu), CLLM_ESCAPE_TEXT);
    cllm_escape(base_t, sizeof(base_t), base, strlen(base), CLLM_ESCAPE_TEXT);
    if (a.output == BENCH_MD) {
        printf("cllm %s (commit %s), CPU: %s, kernels: %s\n", cllm_version(), commit_t, cpu_t,
               features);
        printf("model: %s, %.2f GiB, %.2f B params, %s, KV cache %s/%s (K/V)\n\n", base_t,
               (double)d.bytes / (1u << 30), (double)d.params / 1e9, cllm_type_name(d.type),
               cllm_type_name(a.type_k), cllm_type_name(a.type_v));
        if (streams) {
            char c[32];
            printf("streamed: %d layers, %s per pass through a ring of %d slots\n\n", su.n_layers,
                   cllm_format_size((size_t)su.bytes_per_pass, c, sizeof(c)), su.n_slots);
        }
        printf("| model | type | size | threads | test | t/s |%s\n",
               streams ? " streamed/token | passes/token |" : "");
        printf("| --- | --- | ---: | ---: | ---: | ---: |%s\n", streams ? " ---: | ---: |" : "");
        fflush(stdout);
    } else if (a.output == BENCH_CSV) {
        printf("commit,cpu,features,model,type,size_bytes,params,threads,test,n,tps_mean,"
               "tps_stddev,n_depth,type_k,type_v,stream_bytes_per_token,stream_passes_per_token,"
               "draft_tokens,draft_tokens_accepted\n");
    }

    for (int ti = 0; ti < a.n_threads_list; ti++) {
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = bench_ctx(&a);
        sp.n_batch = bench_batch(&a);
        sp.n_threads = a.threads[ti];
        sp.n_seq = a.n_seqs;
        sp.type_k = a.type_k, sp.type_v = a.type_v;
        if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
        for (int k = 0; k < 2 * a.n_depths + (a.spec ? 1 : 0); k++) {
            const bool spec = k == 2 * a.n_depths; /* tg+ngram, last */
            const bool pp = !spec && k % 2 == 0;
            const int64_t depth = spec ? 0 : a.depths[k / 2];
            const int64_t n = pp ? a.n_prompt : a.n_gen;
            if (n == 0) continue;
            bench_result *r = &res[n_res];
            *r = (bench_result){.test_kind = pp ? "pp" : "tg",
                                .n = n,
                                .threads = a.threads[ti],
                                .depth = depth,
                                .spec = spec};
            r->n_seqs = pp || spec ? 1 : a.n_seqs;
            int64_t held = -1; /* each test fills its depth once */
            if (!run_test(m, s, smp, ids + n_fill, n, pp, r->n_seqs, a.reps, ids, sp.n_batch, &held,
                          r))
                goto fail;
            n_res++;
            if (a.output == BENCH_MD) {
                printf("| %s | %s | %.2f GiB | %d | %s | %.2f ± %.2f |", base_t,
                       cllm_type_name(d.type), (double)d.bytes / (1u << 30), r->threads,
                       test_name(r), r->mean, r->sd);
                if (streams && (r->stream_bpt > 0 || r->passes_pt > 0)) {
                    printf(" %.2f MiB | %.3f |", r->stream_bpt / (1 << 20), r->passes_pt);
                } else if (streams) {
                    printf(" - | - |"); /* a depth filled again: its passes read too */
                }
                printf("\n");
            } else if (a.output == BENCH_CSV) {
                csv_field(commit_t, ",");
                csv_field(cpu_t, ",");
                csv_field(features, ",");
                csv_field(base_t, ",");
                printf("%s,%llu,%llu,%d,%s,%lld,%.3f,%.3f,%lld,%s,%s,%.0f,%.4f,%llu,%llu\n",
                       cllm_type_name(d.type), (unsigned long long)d.bytes,
                       (unsigned long long)d.params, r->threads, test_name(r), (long long)n,
                       r->mean, r->sd, (long long)r->depth, cllm_type_name(a.type_k),
                       cllm_type_name(a.type_v), r->stream_bpt, r->passes_pt,
                       (unsigned long long)r->drafted, (unsigned long long)r->accepted);
            }
            fflush(stdout);
        }
        cllm_session_free(s);
        s = NULL;
    }

    /* where the streamed bytes came from over the whole run */
    const cllm_stream_usage su_end = stream_now(m);
    if (streams && a.output == BENCH_MD) {
        char rd[32], ca[32];
        printf("\nstreamed: %s read, %s of it (%.0f %%) copied from the page cache\n",
               cllm_format_size((size_t)su_end.bytes_read, rd, sizeof(rd)),
               cllm_format_size((size_t)su_end.bytes_cached, ca, sizeof(ca)),
               su_end.bytes_read ? 100.0 * (double)su_end.bytes_cached / (double)su_end.bytes_read
                                 : 0.0);
    }
    for (int i = 0, first = 1; i < n_res && a.output == BENCH_MD; i++) {
        if (!res[i].spec) continue;
        printf("%s%s, %d threads: %llu of %llu draft tokens kept\n", first ? "\n" : "",
               test_name(&res[i]), res[i].threads, (unsigned long long)res[i].accepted,
               (unsigned long long)res[i].drafted);
        first = 0;
    }
    if (a.output == BENCH_JSON) {
        printf("{\"commit\": ");
        cli_json_str(stdout, commit, strlen(commit));
        printf(", \"cpu\": ");
        cli_json_str(stdout, cpu, strlen(cpu));
        printf(", \"features\": ");
        cli_json_str(stdout, features, strlen(features));
        printf(", \"model\": ");
        cli_json_str(stdout, base, strlen(base));
        printf(", \"type\": \"%s\", \"size_bytes\": %llu, \"params\": %llu, \"type_k\": \"%s\", "
               "\"type_v\": \"%s\", \"stream_layers\": %d, \"stream_bytes_per_pass\": %llu, "
               "\"stream_bytes_read\": %llu, \"stream_bytes_cached\": %llu, \"results\": [",
               cllm_type_name(d.type), (unsigned long long)d.bytes, (unsigned long long)d.params,
               cllm_type_name(a.type_k), cllm_type_name(a.type_v), su.n_layers,
               (unsigned long long)su.bytes_per_pass, (unsigned long long)su_end.bytes_read,
               (unsigned long long)su_end.bytes_cached);
        for (int i = 0; i < n_res; i++) {
            printf("%s{\"threads\": %d, \"test\": \"%s\", \"n\": %lld, \"seqs\": %d, "
                   "\"depth\": %lld, \"tps_mean\": %.3f, \"tps_stddev\": %.3f, "
                   "\"stream_bytes_per_token\": %.0f, \"stream_passes_per_token\": %.4f, "
                   "\"draft_tokens\": %llu, \"draft_tokens_accepted\": %llu}",
                   i ? ", " : "", res[i].threads, test_name(&res[i]), (long long)res[i].n,
                   res[i].n_seqs, (long long)res[i].depth, res[i].mean, res[i].sd,
                   res[i].stream_bpt, res[i].passes_pt, (unsigned long long)res[i].drafted,
                   (unsigned long long)res[i].accepted);
        }
        printf("]}\n");
    }
    rc = 0;
    goto done;
fail:
    cli_lib_error("bench");
done:
    cllm_sampler_free(smp);
    cllm_session_free(s);
    free(ids);
    cllm_model_free(m);
    cllm_plan_free(plan);
    return rc;
}
