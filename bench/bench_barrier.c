/*
 * bench_barrier — the CPU thread pool's barrier (threadpool.h) alone: n
 * threads meet at cllm_threadpool_barrier again and again with no work in
 * between, which is what a graph of many small nodes asks of it (a
 * generation step of SmolLM2 meets some 600 barriers).
 *
 *   bench_barrier [-t 2,4,...] [-n barriers (default 200000)] [-r reps (default 7)]
 *
 * Prints, per thread count, ns per barrier: the median of the repetitions
 * and their range. Default thread counts: 2 and every CPU this process may
 * run on.
 */
#include "backend/cpu/threadpool.h"
#include "cllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job_args {
    cllm_threadpool *tp;
    long n;
} job_args;

static void job(int ith, int nth, void *arg) {
    (void)ith, (void)nth;
    const job_args *a = arg;
    for (long i = 0; i < a->n; i++) cllm_threadpool_barrier(a->tp);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run(int nth, long n, int reps) {
    cllm_threadpool *tp = cllm_threadpool_new(nth);
    if (!tp) {
        fprintf(stderr, "bench_barrier: no pool of %d threads\n", nth);
        return;
    }
    job_args a = {tp, n / 10};
    cllm_threadpool_run(tp, job, &a); /* warm-up: the spin limits settle */
    a.n = n;
    double ns[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        const double t0 = cllm_time_ms();
        cllm_threadpool_run(tp, job, &a);
        ns[r] = (cllm_time_ms() - t0) * 1e6 / (double)n;
    }
    qsort(ns, (size_t)reps, sizeof(double), cmp_double);
    printf("barrier %2d thread(s): %.1f ns median (min %.1f, max %.1f), %d x %ld\n", nth,
           ns[reps / 2], ns[0], ns[reps - 1], reps, n);
    cllm_threadpool_free(tp);
}

int main(int argc, char **argv) {
    long n = 200000;
    int reps = 7;
    const char *threads = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            threads = argv[++i];
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            n = atol(argv[++i]);
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_barrier [-t 2,4,...] [-n barriers] [-r reps]\n");
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "bench_barrier: -n and -r must be positive\n");
        return 2;
    }
    if (!threads) {
        run(2, n, reps);
        const int cpus = cllm_cpu_count();
        if (cpus > 2) run(cpus, n, reps);
        return 0;
    }
    for (const char *p = threads; *p;) {
        char *end;
        const long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > 1024) {
            fprintf(stderr, "bench_barrier: bad thread count in '%s'\n", threads);
            return 2;
        }
        run((int)t, n, reps);
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}
