/*
 * bench_bandwidth — the machine's memory read bandwidth, the roofline of
 * token generation (every weight is read once per token).
 *
 *   bench_bandwidth [-s MiB (default 1024)] [-t 1,2,...] [-r reps (default 9)]
 *
 * Each thread reads its own contiguous slice of one large buffer (far larger
 * than the caches) with a vectorisable XOR reduction; a run is timed from a
 * common start (barrier) until the last thread is done. Prints, per thread
 * count, the median GB/s (10^9 bytes/s) of the repetitions and their range:
 *
 *   read  1 thread(s): 24.10 GB/s median (min 23.80, max 24.35), 9 x 1024 MiB
 *
 * Default thread counts: 1 and every online CPU.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BW_MAX_THREADS 256
#define BW_LANES       8

static volatile uint64_t g_sink;

typedef struct bw_shared {
    const uint64_t *buf;
    size_t n_words;
    int n_threads;
    pthread_barrier_t start, done;
    uint64_t sink[BW_MAX_THREADS];
} bw_shared;

typedef struct bw_thread {
    bw_shared *sh;
    int ith;
} bw_thread;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Software prefetch distance in bytes, as the generation kernels use: one
 * core keeps too few misses in flight with the hardware prefetcher alone,
 * and the roofline should be what a kernel can actually reach. */
#define BW_PREFETCH 4096

/* XOR of the slice in BW_LANES independent lanes (vectorised by the
 * compiler); the result is kept so the reads cannot be dropped. */
static uint64_t read_slice(const uint64_t *p, size_t n) {
    uint64_t lane[BW_LANES] = {0};
    size_t i = 0;
    for (; i + BW_LANES <= n; i += BW_LANES) {
        __builtin_prefetch((const char *)(p + i) + BW_PREFETCH);
        for (int j = 0; j < BW_LANES; j++) lane[j] ^= p[i + j];
    }
    uint64_t x = 0;
    for (; i < n; i++) x ^= p[i];
    for (int j = 0; j < BW_LANES; j++) x ^= lane[j];
    return x;
}

static void slice_of(const bw_shared *sh, int ith, size_t *w0, size_t *w1) {
    const size_t per = (sh->n_words + (size_t)sh->n_threads - 1) / (size_t)sh->n_threads;
    *w0 = per * (size_t)ith < sh->n_words ? per * (size_t)ith : sh->n_words;
    *w1 = *w0 + per < sh->n_words ? *w0 + per : sh->n_words;
}

static void *worker(void *arg) {
    bw_thread *t = arg;
    bw_shared *sh = t->sh;
    size_t w0, w1;
    slice_of(sh, t->ith, &w0, &w1);
    pthread_barrier_wait(&sh->start);
    sh->sink[t->ith] = read_slice(sh->buf + w0, w1 - w0);
    pthread_barrier_wait(&sh->done);
    return NULL;
}

/* One timed read of the whole buffer by n threads (the caller is thread 0). */
static double run_once(bw_shared *sh, int n) {
    pthread_t th[BW_MAX_THREADS];
    bw_thread args[BW_MAX_THREADS];
    sh->n_threads = n;
    pthread_barrier_init(&sh->start, NULL, (unsigned)n);
    pthread_barrier_init(&sh->done, NULL, (unsigned)n);
    for (int i = 1; i < n; i++) {
        args[i] = (bw_thread){sh, i};
        if (pthread_create(&th[i], NULL, worker, &args[i]) != 0) {
            fprintf(stderr, "bench_bandwidth: cannot start a thread\n");
            exit(1);
        }
    }
    size_t w0, w1;
    slice_of(sh, 0, &w0, &w1);
    pthread_barrier_wait(&sh->start);
    const double t0 = now_s();
    sh->sink[0] = read_slice(sh->buf + w0, w1 - w0);
    pthread_barrier_wait(&sh->done);
    const double dt = now_s() - t0;
    for (int i = 1; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&sh->start);
    pthread_barrier_destroy(&sh->done);
    return (double)(sh->n_words * sizeof(uint64_t)) / dt / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long mib = 1024, reps = 9;
    int threads[BW_MAX_THREADS], n_list = 0;
    for (int i = 1; i < argc; i += 2) { /* option, value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "-s") && v) {
            mib = strtol(v, NULL, 10);
        } else if (!strcmp(argv[i], "-r") && v) {
            reps = strtol(v, NULL, 10);
        } else if (!strcmp(argv[i], "-t") && v) {
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n_list < 64;
                 tok = strtok_r(NULL, ",", &save)) {
                threads[n_list++] = (int)strtol(tok, NULL, 10);
            }
        } else {
            fprintf(stderr, "usage: bench_bandwidth [-s MiB] [-t 1,2,...] [-r reps]\n");
            return 2;
        }
    }
    if (mib < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_bandwidth: bad -s or -r\n");
        return 2;
    }
    if (n_list == 0) {
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads[n_list++] = 1;
        if (ncpu > 1) threads[n_list++] = (int)(ncpu < BW_MAX_THREADS ? ncpu : BW_MAX_THREADS);
    }
    for (int i = 0; i < n_list; i++) {
        if (threads[i] < 1 || threads[i] > BW_MAX_THREADS) {
            fprintf(stderr, "bench_bandwidth: bad thread count %d\n", threads[i]);
            return 2;
        }
    }

    bw_shared *sh = calloc(1, sizeof(*sh));
    const size_t bytes = (size_t)mib << 20;
    uint64_t *buf = NULL;
    if (!sh || posix_memalign((void **)&buf, 4096, bytes) != 0) {
        fprintf(stderr, "bench_bandwidth: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    sh->n_words = bytes / sizeof(uint64_t);
    for (size_t i = 0; i < sh->n_words; i++) buf[i] = i * 0x9e3779b97f4a7c15ULL; /* fault in */
    sh->buf = buf;

    double *x = malloc((size_t)reps * sizeof(*x));
    if (!x) return 1;
    uint64_t sink = 0;
    for (int l = 0; l < n_list; l++) {
        run_once(sh, threads[l]); /* warm-up */
        for (long r = 0; r < reps; r++) x[r] = run_once(sh, threads[l]);
        for (int i = 0; i < threads[l]; i++) sink ^= sh->sink[i];
        qsort(x, (size_t)reps, sizeof(*x), cmp_double);
        printf("read %2d thread(s): %.2f GB/s median (min %.2f, max %.2f), %ld x %ld MiB\n",
               threads[l], x[reps / 2], x[0], x[reps - 1], reps, mib);
        fflush(stdout);
    }
    free(x);
    free(buf);
    free(sh);
    g_sink = sink; /* keeps the reads alive */
    return 0;
}
