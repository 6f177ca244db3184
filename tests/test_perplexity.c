/*
 * `cllm perplexity` (the executable is argv[1]) on stories260K: its running
 * values and final estimate equal a perplexity computed here another way
 * (one token per decode, no all-position logits), with llama-perplexity's
 * convention written out plainly: each chunk of n_ctx tokens starts with
 * BOS, and the logits at positions n_ctx/2 .. n_ctx-2 score the next token.
 * Bad usage and a too-short text are errors.
 */
#include "common/check.h"
#include "common/refs.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char k_text[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her big red ball. One day, she saw a small dog under a tree. The dog was sad "
    "because it was lost. Lily said, \"Do not be sad, I will help you find your mom.\" They "
    "walked and walked until they saw a big house. The dog barked and ran to the door. A kind "
    "lady came out and hugged the dog. She said thank you to Lily and gave her a cookie. Lily "
    "was very happy and went home to tell her mom about her new friend.\n";

/* Runs `cmd`, returns its exit status and its standard output in out. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Perplexity of chunk after chunk, decoding one token at a time; the running
 * values go to running[0..n_chunks). Returns the final estimate. */
static double reference_ppl(const cllm_model *m, int64_t n_ctx, int64_t *n_chunks_out,
                            double *running, int max_chunks, double *err) {
    const cllm_tokenizer *tok = m->tok;
    size_t n_ids = 0;
    int32_t ids[1024];
    /* the command drops one trailing newline, as llama-perplexity does */
    CHECK(cllm_tokenizer_encode(tok, k_text, strlen(k_text) - 1, true, false, ids, 1024, &n_ids) ==
          CLLM_OK);
    const int64_t n_chunks = (int64_t)n_ids / n_ctx;
    *n_chunks_out = n_chunks;
    CHECK(n_chunks >= 2 && n_chunks <= max_chunks);
    CHECK(cllm_tokenizer_add_bos(tok) && ids[0] == cllm_tokenizer_bos(tok));
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 1;
    cllm_session *s = NULL;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (!s) return NAN;
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    for (int64_t c = 0; c < n_chunks && c < max_chunks; c++) {
        cllm_session_reset(s);
        for (int64_t p = 0; p < n_ctx - 1; p++) {
            const int32_t t = p == 0 ? cllm_tokenizer_bos(tok) : ids[c * n_ctx + p];
            CHECK(cllm_session_decode(s, &t, 1) == CLLM_OK);
            if (p < n_ctx / 2) continue;
            const float *l = cllm_session_logits(s);
            double max = l[0], sum = 0;
            for (int64_t i = 1; i < cllm_session_n_vocab(s); i++) max = fmax(max, l[i]);
            for (int64_t i = 0; i < cllm_session_n_vocab(s); i++) sum += exp(l[i] - max);
            const double v = -(l[ids[c * n_ctx + p + 1]] - max - log(sum));
            nll += v, nll2 += v * v, count++;
        }
        running[c] = exp(nll / (double)count);
    }
    cllm_session_free(s);
    const double mean = nll / (double)count;
    *err = exp(mean) * sqrt((nll2 / (double)count - mean * mean) / (double)(count - 1));
    return exp(mean);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_perplexity PATH-TO-CLLM\n");
        return 2;
    }
    const char *cllm = argv[1];
    char model[4096], cmd[12288], out[8192];
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_perplexity");
    refs_model_path(model, sizeof(model), "stories260K.gguf");
    const char *text_path = "test_perplexity.txt";
    FILE *f = fopen(text_path, "wb");
    CHECK(f && fwrite(k_text, 1, strlen(k_text), f) == strlen(k_text));
    if (f) fclose(f);

    cllm_model *m = NULL;
    CHECKF(cllm_model_load(model, NULL, &m) == CLLM_OK, "load: %s", cllm_last_error());
    if (!m) return check_summary("test_perplexity");
    enum { N_CTX = 32, MAX_CHUNKS = 16 };
    double running[MAX_CHUNKS], err = 0;
    int64_t n_chunks = 0;
    const double want = reference_ppl(m, N_CTX, &n_chunks, running, MAX_CHUNKS, &err);
    cllm_model_free(m);

    /* batches of 8 (four per chunk) and of the whole chunk */
    for (int b = 8; b <= N_CTX; b += N_CTX - 8) {
        snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' -f %s -c %d -b %d -t 2 2>/dev/null",
                 cllm, model, text_path, N_CTX, b);
        CHECKF(run(cmd, out, sizeof(out)) == 0, "%s", cmd);
        /* [1]v1,[2]v2,...\nFinal estimate: PPL = X +/- E */
        const char *p = out;
        for (int64_t c = 0; c < n_chunks; c++) {
            int k = 0, used = 0;
            double v = 0;
            const bool ok = sscanf(p, "[%d]%lf,%n", &k, &v, &used) == 2 && used > 0;
            CHECKF(ok && k == c + 1 && fabs(v - running[c]) < 1e-3 * running[c],
                   "-b %d: chunk %lld: '%.20s', want %.4f", b, (long long)c + 1, p, running[c]);
            if (!ok) break;
            p += used;
        }
        const char *fin = strstr(out, "Final estimate: PPL = ");
        double got = 0, got_err = 0;
        CHECKF(fin && sscanf(fin, "Final estimate: PPL = %lf +/- %lf", &got, &got_err) == 2,
               "-b %d: output '%s'", b, out);
        CHECKF(fabs(got - want) < 1e-3 * want && fabs(got_err - err) < 1e-2 * err + 1e-4,
               "-b %d: PPL %.4f +/- %.5f, want %.4f +/- %.5f", b, got, got_err, want, err);
    }
    /* --chunks 1 is the first running value */
    snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' -f %s -c %d --chunks 1 2>/dev/null", cllm,
             model, text_path, N_CTX);
    double one = 0;
    CHECK(run(cmd, out, sizeof(out)) == 0 && sscanf(out, "[1]%lf,\n", &one) == 1 &&
          fabs(one - running[0]) < 1e-3 * running[0] && !strstr(out, "[2]"));

    /* bad usage: 2; a text shorter than one chunk: 1 */
    snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' 2>/dev/null", cllm, model);
    CHECK(run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' -f %s -c 3 2>/dev/null", cllm, model,
             text_path);
    CHECK(run(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' -f %s -c 1024 2>&1", cllm, model,
             text_path);
    CHECK(run(cmd, out, sizeof(out)) == 1 && strstr(out, "fewer than one chunk") != NULL);
    snprintf(cmd, sizeof(cmd), "'%s' perplexity -m '%s' -f does-not-exist.txt 2>&1", cllm, model);
    CHECK(run(cmd, out, sizeof(out)) == 1 && strstr(out, "does-not-exist.txt") != NULL);
    remove(text_path);
    return check_summary("test_perplexity");
}
