/*
 * Grammar-constrained generation against unconstrained generation on the
 * same model and prompt: tokens/s of the generated tokens, decoding and
 * sampling together (the grammar's cost is in the sampling), as mean ±
 * stddev over repetitions after a warm-up, and the time to make a sampler
 * with a grammar (compiling it and laying out the vocabulary's trie).
 * Then the same generations token by token, the time of each step split
 * into the forward pass (cllm_session_decode) and the sampler
 * (cllm_sampler_sample + cllm_sampler_accept): what the grammar stage and
 * the sampler's work over the vocabulary cost per token, apart from the
 * forward pass, and the slowest sampler step (where the grammar had to
 * mask the whole vocabulary). Prints tables; never fails.
 *
 *     bench_grammar [model.gguf] [repetitions] [threads]
 *
 * Without a model path it uses SmolLM2 (scripts/fetch-model smollm2).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "cllm.h"
#include "common/refs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char k_schema[] =
    "{\"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\", "
    "\"minimum\": 0, \"maximum\": 130}, \"hobbies\": {\"type\": \"array\", \"items\": {\"type\": "
    "\"string\"}}, \"email\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}}, "
    "\"required\": [\"name\", \"age\", \"hobbies\", \"email\"], \"type\": \"object\"}";

typedef struct mode {
    const char *name;
    const char *grammar; /* NULL: unconstrained */
} mode;

/* One generation: tokens generated and milliseconds spent after the prompt
 * (decoding and sampling). */
static bool run_once(const cllm_model *m, cllm_session *s, const int32_t *ids, size_t n,
                     const mode *md, uint64_t seed, size_t *n_gen, double *ms) {
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.seed = seed;
    sp.grammar = md->grammar;
    sp.ignore_eos = md->grammar == NULL; /* a fixed length without a grammar */
    cllm_sampler *smp = NULL;
    cllm_generate_result res = {0};
    bool ok =
        cllm_session_truncate(s, 0) == CLLM_OK && cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK;
    const double t0 = now_ms();
    ok = ok && cllm_generate(s, smp, ids, n, 128, NULL, NULL, &res) == CLLM_OK;
    const double t1 = now_ms();
    if (!ok) fprintf(stderr, "bench_grammar: %s\n", cllm_last_error());
    *n_gen = res.n_ids;
    *ms = t1 - t0 - res.prompt_ms;
    cllm_generate_result_free(&res);
    cllm_sampler_free(smp);
    return ok && *n_gen > 0;
}

/* One generation token by token: the forward pass and the sampler timed
 * apart. Prints a row: tokens, ms per token of each, the slowest sampler
 * step. */
static void step_costs(const cllm_model *m, cllm_session *s, const int32_t *ids, size_t n,
                       const mode *md, int reps) {
    double dec = 0.0, smp_ms = 0.0, worst = 0.0;
    size_t tokens = 0;
    for (int r = 0; r < reps; r++) {
        cllm_sampler_params sp = cllm_sampler_default_params();
        sp.seed = (uint64_t)r;
        sp.grammar = md->grammar;
        sp.ignore_eos = md->grammar == NULL;
        cllm_sampler *smp = NULL;
        if (cllm_session_truncate(s, 0) != CLLM_OK ||
            cllm_sampler_new_model(&sp, m, &smp) != CLLM_OK ||
            cllm_session_decode(s, ids, (int64_t)n) != CLLM_OK) {
            fprintf(stderr, "bench_grammar: %s\n", cllm_last_error());
            cllm_sampler_free(smp);
            return;
        }
        for (int i = 0; i < 128; i++) {
            int32_t id;
            const double t0 = now_ms();
            if (cllm_sampler_sample(smp, cllm_session_logits(s), &id) != CLLM_OK ||
                cllm_sampler_accept(smp, id) != CLLM_OK) {
                break;
            }
            const double t1 = now_ms();
            smp_ms += t1 - t0;
            worst = fmax(worst, t1 - t0);
            tokens++;
            if (cllm_token_is_eog(m, id) || i == 127) break;
            if (cllm_session_decode(s, &id, 1) != CLLM_OK) break;
            dec += now_ms() - t1;
        }
        cllm_sampler_free(smp);
    }
    if (tokens == 0) return;
    printf("%-14s %8zu %12.3f %12.3f %10.3f\n", md->name, tokens, dec / (double)tokens,
           smp_ms / (double)tokens, worst);
}

/* A token the grammar refuses on top, inside a JSON string (after
 * `{"name": "Al`, a newline): the time of cllm_sampler_sample, which draws
 * it, refuses it and draws again from what the grammar allows, with top-k
 * 40 (the best allowed candidates tested one by one) and without top-k
 * (the whole vocabulary masked). Synthetic logits, the same for both. */
static void redraw_cost(const cllm_model *m, int reps) {
    const int32_t n_vocab = cllm_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    int32_t pre[32], nl[4];
    size_t n_pre = 0, n_nl = 0;
    const char *text = "{\"name\": \"Al";
    if (!logits || cllm_tokenize(m, text, strlen(text), false, false, pre, 32, &n_pre) != CLLM_OK ||
        cllm_tokenize(m, "\n", 1, false, false, nl, 4, &n_nl) != CLLM_OK || n_nl != 1) {
        fprintf(stderr, "bench_grammar: re-draw: %s\n", cllm_last_error());
        free(logits);
        return;
    }
    uint64_t x = 42;
    for (int32_t i = 0; i < n_vocab; i++) { /* a spread like a model's: about N(0, 3) */
        float u = 0.0f;
        for (int k = 0; k < 4; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            u += (float)(x >> 40) / (float)(1u << 24);
        }
        logits[i] = (u - 2.0f) * 5.2f;
    }
    logits[nl[0]] = 40.0f;
    printf("\na refused token on top inside a JSON string, one sample (ms):\n");
    const int top_ks[] = {40, 0};
    for (int j = 0; j < 2; j++) {
        cllm_sampler_params sp = cllm_sampler_default_params();
        sp.grammar = cllm_json_grammar();
        sp.top_k = top_ks[j];
        cllm_sampler *smp = NULL;
        bool ok = cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK;
        for (size_t i = 0; ok && i < n_pre; i++) ok = cllm_sampler_accept(smp, pre[i]) == CLLM_OK;
        int32_t id = -1;
        const int n = reps * 20;
        const double t0 = now_ms();
        for (int r = 0; ok && r < n; r++) ok = cllm_sampler_sample(smp, logits, &id) == CLLM_OK;
        const double t1 = now_ms();
        if (ok) {
            printf("top-k %-3d %10.3f\n", top_ks[j], (t1 - t0) / n);
        } else {
            fprintf(stderr, "bench_grammar: re-draw: %s\n", cllm_last_error());
        }
        cllm_sampler_free(smp);
    }
    free(logits);
}

int main(int argc, char **argv) {
    char path[4096];
    if (argc > 1 && argv[1][0]) {
        snprintf(path, sizeof(path), "%s", argv[1]);
    } else if (!refs_fetch_model("smollm2", path, sizeof(path))) {
        fprintf(stderr, "bench_grammar: no model (give a path, or scripts/fetch-model smollm2)\n");
        return 0;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    cllm_model *m = NULL;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) {
        fprintf(stderr, "bench_grammar: %s\n", cllm_last_error());
        return 0;
    }
    char *schema_gbnf = NULL;
    if (cllm_json_schema_to_grammar(k_schema, &schema_gbnf) != CLLM_OK) {
        fprintf(stderr, "bench_grammar: %s\n", cllm_last_error());
        cllm_model_free(m);
        return 0;
    }
    cllm_session_params ssp = cllm_session_default_params();
    ssp.n_ctx = 1024;
    if (argc > 3) ssp.n_threads = atoi(argv[3]);
    cllm_session *s = NULL;
    cllm_chat_msg msg = {"user", "Describe a person as a JSON object: name, age, hobbies, email."};
    char *prompt = NULL;
    cllm_chat_style style;
    int32_t ids[512];
    size_t n = 0;
    if (cllm_session_new(m, &ssp, &s) != CLLM_OK ||
        cllm_chat_apply(m, NULL, &msg, 1, true, &prompt, NULL, &style) != CLLM_OK ||
        cllm_tokenize(m, prompt, strlen(prompt), !cllm_chat_style_has_bos_text(style), true, ids,
                      512, &n) != CLLM_OK) {
        fprintf(stderr, "bench_grammar: %s\n", cllm_last_error());
        goto done;
    }
    const mode modes[] = {
        {"unconstrained", NULL},
        {"JSON grammar", cllm_json_grammar()},
        {"JSON Schema", schema_gbnf},
    };
    printf("bench_grammar: %s, %d repetitions after a warm-up, seeded sampling (T 0.8)\n", path,
           reps);
    printf("%-14s %10s %18s %8s\n", "mode", "tokens", "tokens/s", "ratio");
    double base = 0.0;
    for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
        size_t ng;
        double ms, sum = 0.0, sum2 = 0.0;
        size_t tokens = 0;
        (void)run_once(m, s, ids, n, &modes[k], 1000, &ng, &ms); /* warm-up */
        int ok = 0;
        for (int r = 0; r < reps; r++) {
            if (!run_once(m, s, ids, n, &modes[k], (uint64_t)r, &ng, &ms)) continue;
            const double tps = (double)ng / (ms / 1e3);
            sum += tps, sum2 += tps * tps, tokens += ng, ok++;
        }
        if (ok == 0) continue;
        const double mean = sum / ok, sd = sqrt(fmax(0.0, sum2 / ok - mean * mean));
        if (k == 0) base = mean;
        printf("%-14s %10zu %10.1f ± %5.1f %7.2fx\n", modes[k].name, tokens, mean, sd,
               base > 0 ? mean / base : 0.0);
    }
    printf("\nper token, the forward pass and the sampler apart (ms):\n");
    printf("%-14s %8s %12s %12s %10s\n", "mode", "tokens", "decode", "sampler", "slowest");
    for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
        step_costs(m, s, ids, n, &modes[k], reps);
    }
    redraw_cost(m, reps);
    /* making a sampler with a grammar: compile + the vocabulary's trie */
    double t_new = 0.0;
    for (int r = 0; r < reps; r++) {
        cllm_sampler_params sp = cllm_sampler_default_params();
        sp.grammar = schema_gbnf;
        cllm_sampler *smp = NULL;
        const double t0 = now_ms();
        if (cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK) t_new += now_ms() - t0;
        cllm_sampler_free(smp);
    }
    printf("sampler with the schema's grammar: %.2f ms to make (%d vocabulary entries)\n",
           t_new / reps, cllm_model_n_vocab(m));
done:
    free(prompt);
    free(schema_gbnf);
    cllm_session_free(s);
    cllm_model_free(m);
    return 0;
}
