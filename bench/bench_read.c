/*
 * bench_read — how fast a file is read the ways the stream can read it
 * (runtime/stream.h): direct I/O at several reads in flight, buffered reads
 * from a cold page cache with the kernel's readahead (one reader and whole
 * chunks, as the stream reads where direct I/O is refused, and pieces at 8
 * in flight), and the stream's own method (CLLM_STREAM_QD readers,
 * CLLM_STREAM_PIECE bytes per read), each
 * through cllm_stream_probe_read, the probe that sets the plan's bound.
 *
 *   bench_read FILE [-s MiB read per run (256)] [-c chunk MiB (32)]
 *                   [-p piece KiB (4096; the stream's own)] [-r rounds (3)]
 *                   [-b budget MiB (0: none)] [-n tokens (8)]
 *
 * The chunk is what a ring slot takes (a streamed layer); the runs of one
 * round go one after another over the same bytes, and the rounds repeat the
 * whole set, so that a cache below the file system (a virtual disk's host)
 * serves every method alike. Prints the median MB/s (10^6 bytes/s) of the
 * rounds, and the range.
 *
 * With -b, each round also loads FILE as a model planned under a CPU
 * budget of that size (the layers that do not fit streamed), generates -n
 * tokens, and prints the rate the I/O thread's reads achieved while the
 * model computed: bytes read over the seconds spent reading
 * (cllm_stream_read_seconds; the waits for a free slot left out).
 */
#include "runtime/model.h"
#include "runtime/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CASES  16
#define MAX_ROUNDS 32

typedef struct rd_case {
    const char *name;
    int qd;
    size_t piece;
    bool buffered;
    double mbs[MAX_ROUNDS];
} rd_case;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Generates n tokens with `path` planned under a CPU budget of `budget`
 * bytes and returns the I/O thread's read rate (bytes/s), 0 on failure. */
static double io_thread_rate(const char *path, size_t budget, int n_tokens, int *n_streamed) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 256;
    fp.n_batch = 32;
    fp.use_mmap = false;
    cllm_plan_add_budget(&fp, "cpu", budget);
    cllm_plan *plan = NULL;
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    double rate = 0;
    if (cllm_plan_file(path, &fp, &plan) != CLLM_OK) goto done;
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    mp.plan = plan;
    if (cllm_model_load(path, &mp, &m) != CLLM_OK) goto done;
    if (!m->stream) {
        fprintf(stderr, "bench_read: nothing streamed under a budget of %zu MiB\n", budget >> 20);
        goto done;
    }
    *n_streamed = m->stream_lay.n_layers;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 32;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto done;
    int32_t tok = 1;
    for (int t = 0; t < n_tokens; t++) {
        if (cllm_session_decode(s, &tok, 1) != CLLM_OK) goto done;
        tok = 1 + (int32_t)((t * 37 + 11) % 1000);
    }
    uint64_t bytes = 0;
    cllm_stream_stats(m->stream, &bytes, NULL, NULL);
    const double sec = cllm_stream_read_seconds(m->stream);
    rate = sec > 0 ? (double)bytes / sec : 0;
done:
    if (rate == 0) fprintf(stderr, "bench_read: model run: %s\n", cllm_last_error());
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
    return rate;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: bench_read FILE [-s MiB] [-c chunk MiB] [-p piece KiB] [-r rounds]\n");
        return 2;
    }
    const char *path = argv[1];
    size_t mib = 256, chunk_mib = 32, piece_kib = 0, budget_mib = 0;
    int rounds = 3, n_tokens = 8;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_read: %s needs a value\n", argv[i]);
            return 2;
        }
        const long v = atol(argv[i + 1]);
        if (v <= 0) {
            fprintf(stderr, "bench_read: bad value for %s: %s\n", argv[i], argv[i + 1]);
            return 2;
        }
        if (!strcmp(argv[i], "-s")) {
            mib = (size_t)v;
        } else if (!strcmp(argv[i], "-c")) {
            chunk_mib = (size_t)v;
        } else if (!strcmp(argv[i], "-p")) {
            piece_kib = (size_t)v;
        } else if (!strcmp(argv[i], "-b")) {
            budget_mib = (size_t)v;
        } else if (!strcmp(argv[i], "-n")) {
            n_tokens = (int)v;
        } else if (!strcmp(argv[i], "-r")) {
            rounds = (int)(v < MAX_ROUNDS ? v : MAX_ROUNDS);
        } else {
            fprintf(stderr, "bench_read: unknown option %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    const size_t piece = piece_kib << 10;
    const size_t chunk = chunk_mib << 20;
    /* the queue depths in pieces of -p, else 4 MiB (the largest request
     * of many block devices: max_sectors_kb) */
    const size_t sweep_piece = piece ? piece : (size_t)4 << 20;
    rd_case cases[MAX_CASES];
    int n = 0;
    static const int qds[] = {1, 2, 4, 8, 16, 32};
    static char names[6][32];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof(names[i]), "direct qd %d", qds[i]);
        cases[n++] = (rd_case){.name = names[i], .qd = qds[i], .piece = sweep_piece};
    }
    /* one read per chunk, no pieces: as the stream read before it had pieces */
    cases[n++] = (rd_case){.name = "direct, one read per chunk", .qd = 1, .piece = chunk};
    /* one read per chunk, no pieces: plain sequential reads with readahead */
    cases[n++] =
        (rd_case){.name = "buffered sequential", .qd = 1, .piece = chunk, .buffered = true};
    cases[n++] = (rd_case){
        .name = "buffered, pieces at qd 8", .qd = 8, .piece = sweep_piece, .buffered = true};
    cases[n++] = (rd_case){.name = "the stream's method", .qd = 0, .piece = piece};
    const int model_case = budget_mib ? n : -1;
    int n_streamed = 0;
    if (budget_mib) cases[n++] = (rd_case){.name = "the I/O thread, generating"};
    if (piece) cllm_stream_reads_set(0, piece);
    for (int r = 0; r < rounds; r++) {
        for (int c = 0; c < n; c++) {
            double bps = 0;
            bool direct = false;
            if (c == model_case) {
                bps = io_thread_rate(path, budget_mib << 20, n_tokens, &n_streamed);
                if (bps <= 0) return 1;
                cases[c].mbs[r] = bps / 1e6;
                continue;
            }
            if (cllm_stream_probe_read(path, mib << 20, chunk, cases[c].qd, cases[c].piece,
                                       cases[c].buffered, &bps, &direct) != CLLM_OK) {
                fprintf(stderr, "bench_read: %s\n", cllm_last_error());
                return 1;
            }
            if (!cases[c].buffered && !direct) {
                fprintf(stderr, "bench_read: the file system refuses direct I/O\n");
                return 1;
            }
            cases[c].mbs[r] = bps / 1e6;
        }
    }
    printf("%s: %zu MiB per run in chunks of %zu MiB, qd rows in pieces of %zu KiB, the "
           "stream's in %zu KiB at qd %d, %d rounds\n",
           path, mib, chunk_mib, sweep_piece >> 10, (piece ? piece : CLLM_STREAM_PIECE) >> 10,
           CLLM_STREAM_QD, rounds);
    if (budget_mib) {
        printf("model run: budget %zu MiB, %d layers streamed, %d tokens\n", budget_mib, n_streamed,
               n_tokens);
    }
    for (int c = 0; c < n; c++) {
        qsort(cases[c].mbs, (size_t)rounds, sizeof(double), cmp_double);
        printf("  %-26s %8.0f MB/s median (min %.0f, max %.0f)\n", cases[c].name,
               cases[c].mbs[rounds / 2], cases[c].mbs[0], cases[c].mbs[rounds - 1]);
    }
    return 0;
}
