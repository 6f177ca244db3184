/*
 * cllm embed: the embedding of each text given, as llama.cpp's
 * llama-embedding computes it: the text tokenized with the vocabulary's
 * special tokens (BOS, and EOS where the file asks for it), the hidden
 * state after the model's output norm for every token, pooled (--pooling;
 * default: the file's <arch>.pooling_type, else mean) and normalized
 * (--embd-normalize; default 2, the Euclidean norm). Without pooling
 * ("none") every token's vector is printed.
 */
#include "cllm.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EMBED_MAX_TEXTS = 256 };

typedef struct embed_args {
    const char *model;
    const char *texts[EMBED_MAX_TEXTS]; /* -p, in order */
    int n_texts;
    const char *file; /* -f: one text per line */
    bool pooling_given;
    cllm_pooling pooling;
    int normalize; /* --embd-normalize */
    int64_t n_ctx, n_batch;
    int n_threads;
    bool json, no_mmap;
} embed_args;

static void embed_usage(FILE *f) {
    fprintf(f, "usage: cllm embed -m FILE -p TEXT [-p TEXT ...] [options]\n"
               "\n"
               "The embedding of each text: the hidden states after the model's output norm,\n"
               "pooled and normalized as llama.cpp's llama-embedding computes them.\n"
               "\n"
               "  -m FILE              the model (GGUF)\n"
               "  -p TEXT              a text (may be given up to 256 times)\n"
               "  -f FILE              texts, one per line (-: standard input)\n"
               "  --pooling P          none, mean, cls or last (default: the file's\n"
               "                       <arch>.pooling_type, else mean); none prints a vector\n"
               "                       per token\n"
               "  --embd-normalize N   -1: none, 0: largest magnitude 32760, 1: taxicab,\n"
               "                       2: Euclidean (default), N > 2: p-norm\n"
               "  --json               an OpenAI-style list of embeddings on standard output\n"
               "  -c N                 context (default: the longest text's tokens)\n"
               "  -b N                 tokens per forward pass (default min(512, -c))\n"
               "  -t N                 threads (default: physical cores)\n"
               "  --no-mmap            read the weights instead of mapping them\n"
               "  -h, --help           this help\n");
}

/* Parses argv[1..] into *a: 0; -1 after printing the help; 2 after
 * printing the problem. */
static int parse_embed_args(int argc, char **argv, embed_args *a) {
    memset(a, 0, sizeof(*a));
    a->normalize = 2;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (cli_is_help(o)) {
            embed_usage(stdout);
            return -1;
        } else if (!strcmp(o, "--no-mmap")) {
            a->no_mmap = true;
            continue;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        if (!cli_is_one_of(o, "-m --model -p --prompt -f --file --pooling --embd-normalize -c "
                              "--ctx-size -b -t")) {
            cli_error("embed", "unknown option '%s' (see cllm embed --help)", o);
            return 2;
        }
        const char *v = cli_value("embed", argc, argv, &i);
        if (!v) return 2;
        long long n;
        bool ok = true;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) {
            a->model = v;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) {
            if (a->n_texts == EMBED_MAX_TEXTS) {
                cli_error("embed", "more than %d texts (-p)", EMBED_MAX_TEXTS);
                return 2;
            }
            a->texts[a->n_texts++] = v;
        } else if (!strcmp(o, "-f") || !strcmp(o, "--file")) {
            a->file = v;
        } else if (!strcmp(o, "--pooling")) {
            if (cllm_pooling_parse(v, &a->pooling) != CLLM_OK) {
                cli_error("embed", "--pooling '%s': one of none, mean, cls, last", v);
                return 2;
            }
            a->pooling_given = true;
        } else if (!strcmp(o, "--embd-normalize")) {
            ok = cli_int("embed", o, v, -1, 1000, &n) && (a->normalize = (int)n, true);
        } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx-size")) {
            ok = cli_int("embed", o, v, 1, 1 << 24, &n) && (a->n_ctx = n, true);
        } else if (!strcmp(o, "-b")) {
            ok = cli_int("embed", o, v, 1, 1 << 24, &n) && (a->n_batch = n, true);
        } else { /* -t */
            ok = cli_int("embed", o, v, 0, 1024, &n) && (a->n_threads = (int)n, true);
        }
        if (!ok) return 2;
    }
    if (!a->model || (a->n_texts == 0 && !a->file)) {
        cli_error("embed", "needs a model (-m FILE) and a text (-p TEXT or -f FILE)");
        return 2;
    }
    if (a->n_texts > 0 && a->file) {
        cli_error("embed", "give the texts with -p or with -f, not both");
        return 2;
    }
    return 0;
}

/* The texts of a file, one per non-empty line, into a->texts (pointers into
 * `text`, whose newlines become NULs); false after printing the problem. */
static bool split_lines(embed_args *a, char *text) {
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            if (a->n_texts == EMBED_MAX_TEXTS) {
                cli_error("embed", "%s: more than %d lines", a->file, EMBED_MAX_TEXTS);
                return false;
            }
            a->texts[a->n_texts++] = line;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (a->n_texts == 0) {
        cli_error("embed", "%s: no text", a->file);
        return false;
    }
    return true;
}

static void print_vector(const float *v, int64_t n, bool json) {
    for (int64_t k = 0; k < n; k++)
        printf(json ? "%s%.9g" : "%s%.6f", k ? (json ? "," : " ") : "", (double)v[k]);
}

int cli_cmd_embed(int argc, char **argv) {
    embed_args a;
    const int parsed = parse_embed_args(argc, argv, &a);
    if (parsed != 0) return parsed < 0 ? 0 : parsed;
    int rc = 1;
    bool said = false; /* the problem is printed already */
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    char *file_text = NULL;
    int32_t *ids[EMBED_MAX_TEXTS] = {0};
    size_t n_ids[EMBED_MAX_TEXTS] = {0};
    float *out = NULL;

    if (a.file) {
        size_t len = 0;
        if (!cli_read_text("embed", a.file, &file_text, &len) || !split_lines(&a, file_text)) {
            said = true;
            goto fail;
        }
    }
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = !a.no_mmap;
    if (cllm_model_load(a.model, &mp, &m) != CLLM_OK) goto fail;
    const cllm_pooling pooling = a.pooling_given ? a.pooling : cllm_model_pooling(m);

    /* every text tokenized first: the longest one sizes the context */
    size_t longest = 0, total = 0;
    for (int t = 0; t < a.n_texts; t++) {
        const size_t len = strlen(a.texts[t]);
        size_t n = 0;
        if (cllm_tokenize(m, a.texts[t], len, true, true, NULL, 0, &n) != CLLM_OK) goto fail;
        ids[t] = malloc((n + 1) * sizeof(int32_t));
        if (!ids[t]) {
            cli_error("embed", "out of memory for %zu tokens", n), said = true;
            goto fail;
        }
        if (cllm_tokenize(m, a.texts[t], len, true, true, ids[t], n + 1, &n_ids[t]) != CLLM_OK)
            goto fail;
        if (n_ids[t] == 0) {
            cli_error("embed", "text %d has no tokens", t + 1), said = true;
            goto fail;
        }
        longest = n_ids[t] > longest ? n_ids[t] : longest;
        total += n_ids[t];
    }
    if (a.n_ctx > 0 && (int64_t)longest > a.n_ctx) {
        cli_error("embed", "a text of %zu tokens does not fit the context of %lld (-c)", longest,
                  (long long)a.n_ctx);
        said = true;
        goto fail;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = a.n_ctx > 0 ? a.n_ctx : (int64_t)longest;
    sp.n_batch = a.n_batch > 0 ? a.n_batch : (sp.n_ctx < 512 ? sp.n_ctx : 512);
    sp.n_threads = a.n_threads;
    sp.embeddings = true;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto fail;
    const int64_t E = cllm_model_n_embd(m);
    out = malloc((size_t)longest * (size_t)E * sizeof(float));
    if (!out) {
        cli_error("embed", "out of memory"), said = true;
        goto fail;
    }

    if (a.json) printf("{\"object\":\"list\",\"data\":[");
    int index = 0;
    for (int t = 0; t < a.n_texts; t++) {
        if (cllm_session_embed(s, ids[t], (int64_t)n_ids[t], pooling, out) != CLLM_OK) goto fail;
        const int64_t rows = pooling == CLLM_POOLING_NONE ? (int64_t)n_ids[t] : 1;
        for (int64_t r = 0; r < rows; r++, index++) {
            float *v = out + r * E;
            cllm_embd_normalize(v, E, a.normalize);
            if (a.json) {
                printf("%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":[", index ? "," : "",
                       index);
                print_vector(v, E, true);
                printf("]}");
            } else {
                print_vector(v, E, false);
                printf("\n");
            }
        }
    }
    if (a.json) {
        printf("],\"model\":");
        cli_json_str(stdout, a.model, strlen(a.model));
        printf(",\"pooling\":\"%s\",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}\n",
               cllm_pooling_str(pooling), total, total);
    }
    fflush(stdout);
    rc = 0;
fail:
    if (rc != 0 && !said) cli_lib_error("embed");
    for (int t = 0; t < EMBED_MAX_TEXTS; t++) free(ids[t]);
    free(out);
    free(file_text);
    cllm_session_free(s);
    cllm_model_free(m);
    return rc;
}
