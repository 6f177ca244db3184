/*
 * cllm perplexity: the perplexity of a model on a text, computed the way
 * llama.cpp's llama-perplexity computes it, so that the two can be compared
 * on the same file:
 *
 *  - the whole text is tokenized once (BOS added when the vocabulary adds
 *    one; one trailing newline dropped, as llama-perplexity reads its file);
 *  - it is cut into n_chunks = n_tokens / n_ctx chunks of n_ctx tokens (the
 *    remainder is not used); each chunk is decoded from an empty context,
 *    its first token replaced by BOS when the vocabulary adds one;
 *  - only the second half of each chunk is scored, so every scored token has
 *    at least n_ctx / 2 tokens of context: with first = n_ctx / 2, the logits
 *    at positions first .. n_ctx - 2 predict tokens first + 1 .. n_ctx - 1,
 *    each adding nll = -log softmax(logits)[next token] (in double);
 *  - after each chunk the running value exp(mean nll) is printed as
 *    "[k]value,"; at the end the estimate and its standard error
 *    ppl * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)).
 */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ppl_args {
    const char *model;
    const char *file; /* "-": standard input */
    int64_t n_ctx;    /* tokens per chunk (default 512) */
    int64_t n_batch;  /* 0: min(512, n_ctx) */
    int64_t n_chunks; /* -1: all */
    int n_threads;
    bool no_mmap;
    cllm_type type_k, type_v; /* KV cache types */
} ppl_args;

static void ppl_usage(FILE *f) {
    fprintf(f, "usage: cllm perplexity -m FILE -f TEXT [options]\n"
               "\n"
               "Perplexity over chunks of the text, as llama.cpp's llama-perplexity computes it:\n"
               "each chunk of -c tokens starts from an empty context (its first token replaced by\n"
               "BOS when the vocabulary adds one) and the second half of it is scored.\n"
               "\n"
               "  -m FILE        the model (GGUF)\n"
               "  -hf USER/NAME[:QUANT]\n"
               "                 instead of -m: a model of the Hugging Face hub,\n"
               "                 downloaded when needed (cllm pull --help)\n"
               "  -f FILE        the text (-: standard input; one trailing newline dropped)\n"
               "  -c N           tokens per chunk (default 512, llama-perplexity's default; above\n"
               "                 the model's trained context: a warning)\n"
               "  -b N           tokens per forward pass (default min(512, -c))\n"
               "  -t N           threads (default: physical cores)\n"
               "  --chunks N     score only the first N chunks (default: all)\n"
               "  --no-mmap      read the weights instead of mapping them\n" CLI_KV_USAGE
               "  -h, --help     this help\n");
}

/* Parses argv[1..] into *a: 0; -1 after printing the help; 2 after
 * printing the problem. */
static int parse_ppl_args(int argc, char **argv, ppl_args *a) {
    memset(a, 0, sizeof(*a));
    const char *hf = NULL;
    a->n_ctx = 512;
    a->n_chunks = -1;
    a->type_k = a->type_v = CLLM_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            ppl_usage(stdout);
            return -1;
        } else if (!strcmp(o, "--no-mmap")) {
            a->no_mmap = true;
            continue;
        }
        if (cli_is_hf_option(o)) {
            if (!(hf = cli_value("perplexity", argc, argv, &i))) return 2;
            continue;
        }
        const int kv = cli_kv_option("perplexity", o, argc, argv, &i, &a->type_k, &a->type_v);
        if (kv == 2) return 2;
        if (kv) continue;
        /* the other options take a value */
        if (!cli_is_one_of(o, "-m --model -f --file -c -b -t --chunks")) {
            cli_error("perplexity", "unknown option '%s' (see cllm perplexity --help)", o);
            return 2;
        }
        const char *v = cli_value("perplexity", argc, argv, &i);
        if (!v) return 2;
        long long n;
        bool ok = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            a->model = v;
        } else if (!strcmp(o, "-f") || !strcmp(o, "--file")) {
            a->file = v;
        } else if (!strcmp(o, "-c")) {
            ok = cli_int("perplexity", o, v, 4, 1 << 24, &n) && (a->n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = cli_int("perplexity", o, v, 1, 1 << 24, &n) && (a->n_batch = n, true);
        } else if (!strcmp(o, "-t")) {
            ok = cli_int("perplexity", o, v, 0, 1024, &n) && (a->n_threads = (int)n, true);
        } else { /* --chunks */
            ok = cli_int("perplexity", o, v, -1, INT32_MAX, &n) && (a->n_chunks = n, true);
            if (ok && n == 0) {
                cli_error("perplexity", "%s 0: nothing to score (-1: all chunks)", o);
                ok = false;
            }
        }
        if (!ok) return 2;
    }
    if (!a->file) {
        cli_error("perplexity", "needs a text (-f FILE)");
        return 2;
    }
    if (a->n_batch == 0) a->n_batch = a->n_ctx < 512 ? a->n_ctx : 512;
    return cli_model_arg("perplexity", hf, &a->model);
}

/* -log softmax(logits)[tok], in double. */
static double token_nll(const float *logits, int64_t n_vocab, int32_t tok) {
    double max = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    return -((double)logits[tok] - max - log(sum));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_cmd_perplexity(int argc, char **argv) {
    ppl_args a;
    const int parsed = parse_ppl_args(argc, argv, &a);
    if (parsed != 0) return parsed < 0 ? 0 : parsed;
    int rc = 1;
    bool said = false; /* the problem is printed already */
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    char *text = NULL;
    int32_t *ids = NULL, *batch = NULL;
    size_t len = 0, n_ids = 0;

    if (!cli_read_text("perplexity", a.file, &text, &len)) {
        said = true;
        goto fail;
    }
    if (len > 0 && text[len - 1] == '\n') text[--len] = '\0'; /* as llama-perplexity */

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !a.no_mmap;
    cli_load_bar bar;
    cli_load_progress(&mp, &bar);
    if (cllm_model_load(a.model, &mp, &m) != CLLM_OK) goto fail;
    const int64_t n_train = cllm_model_n_ctx_train(m);
    if (n_train > 0 && a.n_ctx > n_train) {
        cli_warn("perplexity",
                 "%s: chunks of %lld tokens (-c) are longer than the %lld tokens the model "
                 "was trained with",
                 a.model, (long long)a.n_ctx, (long long)n_train);
    }
    /* count first, then tokenize into an exactly sized array */
    if (cllm_tokenize(m, text, len, true, false, NULL, 0, &n_ids) != CLLM_OK) goto fail;
    ids = malloc((n_ids + 1) * sizeof(*ids));
    if (!ids) {
        cli_error("perplexity", "out of memory for %zu tokens", n_ids), said = true;
        goto fail;
    }
    if (cllm_tokenize(m, text, len, true, false, ids, n_ids + 1, &n_ids) != CLLM_OK) goto fail;

    const int64_t n_ctx = a.n_ctx;
    int64_t n_chunks = (int64_t)n_ids / n_ctx;
    if (n_chunks < 1) {
        cli_error("perplexity",
                  "%s: %zu tokens, fewer than one chunk of %lld (-c); give a longer text", a.file,
                  n_ids, (long long)n_ctx);
        said = true;
        goto fail;
    }
    if (a.n_chunks >= 0 && a.n_chunks < n_chunks) n_chunks = a.n_chunks;

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = a.n_batch;
    sp.n_threads = a.n_threads;
    sp.all_logits = true;
    sp.type_k = a.type_k, sp.type_v = a.type_v;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
    const int64_t n_batch = a.n_batch < n_ctx ? a.n_batch : n_ctx;
    const int64_t n_vocab = cllm_session_n_vocab(s);
    batch = malloc((size_t)n_batch * sizeof(*batch));
    if (!batch) {
        cli_error("perplexity", "out of memory"), said = true;
        goto fail;
    }
    const int32_t bos = cllm_token_bos(m);
    const bool add_bos = cllm_token_add_bos(m) && bos >= 0;
    const int64_t first = n_ctx / 2;
    fprintf(stderr,
            "perplexity: %zu tokens, %lld chunks of %lld (batch %lld), scoring positions "
            "%lld..%lld of each\n",
            n_ids, (long long)n_chunks, (long long)n_ctx, (long long)n_batch, (long long)first,
            (long long)(n_ctx - 2));

    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    const double t0 = now_s();
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *chunk = ids + c * n_ctx;
        cllm_session_reset(s);
        for (int64_t b0 = 0; b0 < n_ctx; b0 += n_batch) {
            const int64_t nb = n_ctx - b0 < n_batch ? n_ctx - b0 : n_batch;
            memcpy(batch, chunk + b0, (size_t)nb * sizeof(*batch));
            if (b0 == 0 && add_bos) batch[0] = bos;
            if (cllm_session_decode(s, batch, nb) != CLLM_OK) goto fail;
            /* the logits at position p predict token p + 1 */
            for (int64_t p = b0 > first ? b0 : first; p < b0 + nb && p < n_ctx - 1; p++) {
                const double v =
                    token_nll(cllm_session_logits_ith(s, p - b0), n_vocab, chunk[p + 1]);
                nll += v;
                nll2 += v * v;
                count++;
            }
        }
        if (c == 0) fprintf(stderr, "perplexity: %.2f s per chunk\n", now_s() - t0);
        printf("[%lld]%.4f,", (long long)(c + 1), exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    const double mean = nll / (double)count, ppl = exp(mean);
    const double var = nll2 / (double)count - mean * mean;
    if (count > 1 && var > 0) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * sqrt(var / (double)(count - 1)));
    } else {
        printf("Final estimate: PPL = %.4f\n", ppl);
    }
    fflush(stdout); /* the figures before the timing line, also through a pipe */
    fprintf(stderr, "perplexity: %lld tokens scored in %.2f s\n", (long long)count, now_s() - t0);
    rc = 0;
fail:
    if (rc != 0 && !said) cli_lib_error("perplexity");
    free(batch);
    free(ids);
    free(text);
    cllm_session_free(s);
    cllm_model_free(m);
    return rc;
}
