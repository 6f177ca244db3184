/*
 * The graph memory planner on llama-shaped graphs: planned compute bytes
 * against the lower bound (the most bytes live at one step) and against no
 * reuse at all, and the time to plan. Weights and KV cache are placed in
 * measure mode, so even 7B shapes need no memory. Prints a table; never fails.
 *
 *     bench_galloc [repetitions]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "alloc/galloc.h"
#include "backend/cpu/cpu.h"
#include "common/llama_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

typedef struct shape {
    const char *name;
    int64_t n_embd, n_head, n_head_kv, n_ff, n_layer, n_vocab;
} shape;

static void run(const shape *s, bool fused, int64_t n_tokens, int64_t n_ctx, int reps) {
    llama_graph_params p = llama_graph_params_default();
    p.n_embd = s->n_embd, p.n_head = s->n_head, p.n_head_kv = s->n_head_kv;
    p.n_ff = s->n_ff, p.n_layer = s->n_layer, p.n_vocab = s->n_vocab;
    p.n_ctx = n_ctx, p.fused_attn = fused;
    llama_model_fixture m;
    llama_graph lg;
    if (llama_model_init(&m, &p, true) != CLLM_OK) {
        printf("%-14s cannot build the model: %s\n", s->name, cllm_last_error());
        return;
    }
    if (llama_graph_build(&lg, &m, n_tokens, n_ctx) != CLLM_OK) {
        printf("%-14s cannot build the graph: %s\n", s->name, cllm_last_error());
        llama_model_free(&m);
        return;
    }
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_galloc *ga = cllm_galloc_new(&buft, 1);
    double sum = 0, sum2 = 0;
    bool ok = ga != NULL;
    /* one warm-up (grows the scratch), then `reps` timed plans of the same graph */
    for (int r = 0; ok && r <= reps; r++) {
        const double t0 = now_ms();
        ok = cllm_galloc_measure(ga, lg.graph, NULL, NULL) == CLLM_OK;
        const double dt = now_ms() - t0;
        if (r > 0) sum += dt, sum2 += dt * dt;
    }
    if (!ok) {
        printf("%-14s planning failed: %s\n", s->name, cllm_last_error());
    } else {
        cllm_galloc_stats st;
        cllm_galloc_get_stats(ga, 0, &st);
        const double mean = sum / reps;
        const double sd = sqrt(fmax(sum2 / reps - mean * mean, 0.0));
        printf("%-14s %-7s %6lld %6lld %6d %12zu %12zu %7.4f %10.2f %7.1fx %6.2f ± %5.2f  %s\n",
               s->name, fused ? "fused" : "unfused", (long long)n_tokens, (long long)n_ctx,
               lg.graph->n_nodes, st.planned, st.lower_bound,
               (double)st.planned / (double)(st.lower_bound ? st.lower_bound : 1), mib(st.naive),
               (double)st.naive / (double)(st.planned ? st.planned : 1), mean, sd, st.strategy);
    }
    cllm_galloc_free(ga);
    llama_graph_free(&lg);
    llama_model_free(&m);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_galloc [repetitions >= 1]\n");
        return 0;
    }
    const shape shapes[] = {
        {"tinyllama-1.1b", 2048, 32, 4, 5632, 22, 32000},
        {"llama-7b", 4096, 32, 32, 11008, 32, 32000},
    };
    const char *commit = getenv("CLLM_COMMIT");
    printf("bench_galloc: graph memory planner, compute buffer of one forward pass\n");
    printf("machine: %s; commit: %s; plan time: mean ± stddev of %d runs after a warm-up\n",
           cllm_device_description(cllm_cpu_device()), commit ? commit : "(set CLLM_COMMIT)", reps);
    printf("%-14s %-7s %6s %6s %6s %12s %12s %7s %10s %8s %14s  %s\n", "model", "attn", "tokens",
           "n_kv", "nodes", "planned B", "lower B", "ratio", "naive MiB", "saving", "plan ms",
           "strategy");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        for (int fused = 1; fused >= 0; fused--) {
            run(&shapes[i], fused == 1, 1, 2048, reps);
            run(&shapes[i], fused == 1, 512, 2048, reps);
        }
    }
    return 0;
}
