/*
 * cllm-pipeline-bench: drives the pipeline across hosts (cllm-pipeline.h)
 * under mpirun and prints figures; also the driver of test_mpi's
 * several-sequence case.
 *
 *   mpirun -np 2 cllm-pipeline-bench -m MODEL [-t N] [-c N] [-b N] [--pp N]
 *       [--tg N] [--seqs S] [--reps R] [--mem cpu=SIZE] [--ids] [--check]
 *
 * Rank 0 holds the pipeline's session of S sequences (--seqs, default 1)
 * and, after a warm-up, measures: prompt processing (a prompt of --pp
 * synthetic token ids on sequence 0, in micro-batches of -b), token
 * generation (--tg greedy tokens on sequence 0), and with S > 1 every
 * sequence prefilled with 8 tokens of its own and then --tg greedy steps
 * of all of them, one cllm_session_decode_seqs call a step (the pipeline
 * sends each sequence's token down the ranks before collecting the
 * logits); each --reps times, as mean ± stddev. Then every rank's time
 * waiting on the others and bytes sent, and the one-way time of a token's
 * activations and logits between ranks 0, 1. --ids prints each sequence's
 * greedy tokens (to compare runs). With -np 1 (or no mpirun) the same code
 * runs every layer in one process: the single-process figure.
 *
 * --check (test_mpi) measures nothing: rank 0 also loads the whole model
 * into a local session of the same shape and runs one program of S >= 2
 * sequences on both (prompt chunks of several sequences in one call, a
 * prompt of sequence 0 in several micro-batches, steps of a token per
 * sequence, a step that a chunk of 8 tokens joins, truncations), comparing
 * every sequence's position and logits bit for bit after each call.
 */
#include "cllm-pipeline.h"
#include "cllm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct opts {
    const char *model;
    int pp, tg, seqs, reps;
    bool ids, check;
    cllm_plan_params fp;
} opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t argmax(const float *l, int32_t n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++) best = l[v] > l[best] ? v : best;
    return best;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "median M (mean ± sd, n reps)": the machine may be shared and noisy */
static void print_figure(const char *what, double *x, int n) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    const double mean = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - mean) * (x[i] - mean);
    qsort(x, (size_t)n, sizeof(*x), cmp_double);
    const double median = n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
    printf("%s: median %.2f tokens/s (mean %.2f ± %.2f over %d)\n", what, median, mean,
           n > 1 ? sqrt(q / (n - 1)) : 0.0, n);
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != CLLM_OK) return false;                                                          \
    } while (0)

/* cllm_session_decode_seqs over items[0, n), in calls of at most n_batch
 * tokens */
static cllm_status decode_items(cllm_session *s, const cllm_seq_tokens *items, int n,
                                int64_t n_batch) {
    for (int i = 0, j; i < n; i = j) {
        int64_t total = 0;
        for (j = i; j < n && (j == i || total + items[j].n_tokens <= n_batch); j++)
            total += items[j].n_tokens;
        const cllm_status st = cllm_session_decode_seqs(s, items + i, j - i);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;
}

/* Rank 0's measurements; false after a failure (cllm_last_error()). */
static bool bench(cllm_pipe *p, const opts *o) {
    cllm_session *s0 = cllm_pipe_session(p);
    const int64_t nb = cllm_pipe_get_plan(p)->n_batch;
    const int32_t n_vocab = cllm_model_n_vocab(cllm_pipe_model(p));
    int32_t *prompt = malloc((size_t)(o->pp > 0 ? o->pp : 1) * sizeof(int32_t));
    if (!prompt) return false;
    for (int i = 0; i < o->pp; i++) prompt[i] = i == 0 ? 1 : (int32_t)((i * 7919 + 13) % n_vocab);
    double pp[16], tg[16], agg[16];
    const int reps = o->reps;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        cllm_session_reset(s0);
        double t0 = now_s();
        if (o->pp > 0) TRY(cllm_session_decode(s0, prompt, o->pp));
        const double t_pp = now_s() - t0;
        if (r >= 0) pp[r] = o->pp / t_pp;
        int32_t tok = o->pp > 0 ? argmax(cllm_session_logits(s0), n_vocab) : 1;
        t0 = now_s();
        for (int i = 0; i < o->tg; i++) {
            if (o->ids && r == reps - 1) printf("%s%d", i ? " " : "seq 0 alone:", tok);
            TRY(cllm_session_decode(s0, &tok, 1));
            tok = argmax(cllm_session_logits(s0), n_vocab);
        }
        if (o->ids && r == reps - 1) printf("\n");
        if (r >= 0) tg[r] = o->tg / (now_s() - t0);

        if (o->seqs < 2) continue;
        int32_t next[CLLM_PIPE_MAX_SEQS], pre[CLLM_PIPE_MAX_SEQS][8];
        cllm_seq_tokens items[CLLM_PIPE_MAX_SEQS];
        cllm_session_reset(s0);
        for (int q = 0; q < o->seqs; q++) {
            for (int i = 0; i < 8; i++)
                pre[q][i] = i == 0 ? 1 : (int32_t)((q * 131 + i * 17) % n_vocab);
            /* a batch of its own each, at most n_batch tokens */
            for (int64_t i = 0; i < 8; i += nb) {
                const cllm_seq_tokens it = {q, pre[q] + i, 8 - i < nb ? 8 - i : nb};
                TRY(cllm_session_decode_seqs(s0, &it, 1));
            }
            next[q] = argmax(cllm_session_seq_logits(s0, q), n_vocab);
        }
        int32_t *hist = calloc((size_t)o->seqs * (size_t)o->tg, sizeof(int32_t));
        if (!hist) return false;
        t0 = now_s();
        for (int i = 0; i < o->tg; i++) {
            for (int q = 0; q < o->seqs; q++) {
                hist[q * o->tg + i] = next[q];
                items[q] = (cllm_seq_tokens){q, &next[q], 1};
            }
            if (decode_items(s0, items, o->seqs, nb) != CLLM_OK) {
                free(hist);
                return false;
            }
            for (int q = 0; q < o->seqs; q++) {
                next[q] = argmax(cllm_session_seq_logits(s0, q), n_vocab);
            }
        }
        if (r >= 0) agg[r] = (double)o->seqs * o->tg / (now_s() - t0);
        for (int q = 0; o->ids && r == reps - 1 && q < o->seqs; q++) {
            printf("seq %d:", q);
            for (int i = 0; i < o->tg; i++) printf(" %d", hist[q * o->tg + i]);
            printf("\n");
        }
        free(hist);
    }
    free(prompt);
    char what[64];
    if (o->pp > 0) {
        snprintf(what, sizeof(what), "pp%d", o->pp);
        print_figure(what, pp, reps);
    }
    snprintf(what, sizeof(what), "tg%d", o->tg);
    print_figure(what, tg, reps);
    if (o->seqs > 1) {
        snprintf(what, sizeof(what), "%d sequences x tg%d, in all", o->seqs, o->tg);
        print_figure(what, agg, reps);
    }
    return true;
}

/* ---- --check ---- */

typedef struct check {
    cllm_session *pip, *loc; /* the pipeline's session, a local one */
    int n_seq;
    int64_t n_vocab, n_batch;
    int calls, rows; /* calls made, logits rows compared */
} check;

/* Whether both sessions hold the same positions and logits, bit for bit. */
static bool check_same(check *c, const char *what) {
    c->calls++;
    for (int q = 0; q < c->n_seq; q++) {
        const float *a = cllm_session_seq_logits(c->pip, q),
                    *b = cllm_session_seq_logits(c->loc, q);
        const int64_t na = cllm_session_seq_n_past(c->pip, q);
        const int64_t nl = cllm_session_seq_n_past(c->loc, q);
        if (na != nl || !a != !b || (a && memcmp(a, b, (size_t)c->n_vocab * sizeof(float)) != 0)) {
            printf("check: %s: sequence %d differs (pipeline at %lld%s, local at %lld%s)\n", what,
                   q, (long long)na, a ? "" : " without logits", (long long)nl,
                   b ? "" : " without logits");
            return false;
        }
        c->rows += a != NULL;
    }
    return true;
}

/* Runs the call on both sessions (s names the one), then compares. */
#define BOTH(c, call, what)                                                                        \
    do {                                                                                           \
        for (int k_ = 0; k_ < 2; k_++) {                                                           \
            cllm_session *s = k_ ? (c)->loc : (c)->pip;                                            \
            if ((call) != CLLM_OK) {                                                               \
                printf("check: %s (%s): %s\n", what, k_ ? "local" : "pipeline",                    \
                       cllm_last_error());                                                         \
                return false;                                                                      \
            }                                                                                      \
        }                                                                                          \
        if (!check_same(c, what)) return false;                                                    \
    } while (0)

/* One token per sequence, greedy from the local session's logits. */
static bool check_step(check *c, const char *what) {
    int32_t next[CLLM_PIPE_MAX_SEQS];
    cllm_seq_tokens items[CLLM_PIPE_MAX_SEQS];
    for (int q = 0; q < c->n_seq; q++) {
        const float *l = cllm_session_seq_logits(c->loc, q); /* NULL after a truncation */
        next[q] = l ? argmax(l, (int32_t)c->n_vocab) : 1 + q;
        items[q] = (cllm_seq_tokens){q, &next[q], 1};
    }
    BOTH(c, decode_items(s, items, c->n_seq, c->n_batch), what);
    return true;
}

static bool check_program(check *c, int pp, int tg) {
    const int S = c->n_seq;
    int32_t t[256];
    for (int i = 0; i < 256; i++) t[i] = (int32_t)(1 + (i * 7919 + 13) % (c->n_vocab - 1));
    /* prompts of 8 tokens or more for sequences 1 .. S-1, several a call */
    cllm_seq_tokens items[CLLM_PIPE_MAX_SEQS];
    for (int q = 1; q < S; q++) items[q - 1] = (cllm_seq_tokens){q, t + 3 * q, 8 + q % 3};
    BOTH(c, decode_items(s, items, S - 1, c->n_batch), "the prompts of sequences 1 and on");
    /* sequence 0's prompt: micro-batches of n_batch */
    BOTH(c, cllm_session_decode(s, t + 100, pp), "sequence 0's prompt");
    for (int i = 0; i < tg; i++) {
        if (!check_step(c, "a step")) return false;
    }
    /* the other sequences' tokens first, then a chunk of 8 of the last */
    int32_t one[CLLM_PIPE_MAX_SEQS];
    for (int q = 0; q < S - 1; q++) {
        one[q] = t[q];
        items[q] = (cllm_seq_tokens){q, &one[q], 1};
    }
    items[S - 1] = (cllm_seq_tokens){S - 1, t + 40, 8};
    if (S - 1 + 8 <= c->n_batch) BOTH(c, cllm_session_decode_seqs(s, items, S), "a step + a chunk");
    /* back to 4 tokens, and to none, and on */
    BOTH(c, cllm_session_seq_truncate(s, 1, 4), "truncating sequence 1");
    items[0] = (cllm_seq_tokens){1, t + 60, 9};
    BOTH(c, cllm_session_decode_seqs(s, items, 1), "sequence 1 after its truncation");
    BOTH(c, cllm_session_seq_truncate(s, S - 1, 0), "truncating the last sequence to 0");
    BOTH(c, cllm_session_seq_truncate(s, 0, 2), "truncating sequence 0");
    items[0] = (cllm_seq_tokens){S - 1, t + 80, 10};
    BOTH(c, cllm_session_decode_seqs(s, items, 1), "the last sequence from the start");
    for (int i = 0; i < 2; i++) {
        if (!check_step(c, "a step after the truncations")) return false;
    }
    return true;
}

static bool run_check(cllm_pipe *p, const opts *o) {
    const cllm_pipe_plan *pl = cllm_pipe_get_plan(p);
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    cllm_model *m = NULL;
    if (cllm_model_load(o->model, &mp, &m) != CLLM_OK) return false;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = pl->n_ctx;
    sp.n_batch = pl->n_batch;
    sp.n_threads = o->fp.n_threads;
    sp.type_k = o->fp.type_k, sp.type_v = o->fp.type_v;
    sp.n_seq = o->seqs;
    check c = {.pip = cllm_pipe_session(p),
               .n_seq = o->seqs,
               .n_vocab = cllm_model_n_vocab(m),
               .n_batch = pl->n_batch};
    bool ok = cllm_session_new(m, &sp, &c.loc) == CLLM_OK;
    if (ok && (o->seqs < 2 || cllm_session_n_seq(c.pip) != o->seqs || o->pp < 1 || o->pp > 150)) {
        printf("check: --seqs 2 or more and --pp 1 to 150\n");
        ok = false;
    } else if (ok) {
        ok = check_program(&c, o->pp, o->tg);
    }
    if (ok) {
        printf("check: %d sequences, %d ranks: %d calls, %d logits rows, bit for bit the local "
               "session's\n",
               o->seqs, cllm_pipe_size(p), c.calls, c.rows);
    }
    cllm_session_free(c.loc);
    cllm_model_free(m);
    return ok;
}

static int usage(void) {
    fprintf(stderr, "usage: [mpirun -np N] cllm-pipeline-bench -m MODEL [-t N] [-c N] [-b N] "
                    "[--pp N] [--tg N] [--seqs S] [--reps R (1-16)] [--mem cpu=SIZE] [--ids] "
                    "[--check]\n");
    return 2;
}

int main(int argc, char **argv) {
    opts o = {.pp = 128, .tg = 32, .seqs = 1, .reps = 3, .fp = cllm_plan_default_params()};
    o.fp.n_ctx = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ids") || !strcmp(a, "--check")) {
            o.ids = o.ids || !strcmp(a, "--ids");
            o.check = o.check || !strcmp(a, "--check");
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "-m")) {
            o.model = v;
        } else if (!strcmp(a, "-t")) {
            o.fp.n_threads = atoi(v);
        } else if (!strcmp(a, "-c")) {
            o.fp.n_ctx = atoll(v);
        } else if (!strcmp(a, "-b")) {
            o.fp.n_batch = atoll(v);
        } else if (!strcmp(a, "--pp")) {
            o.pp = atoi(v);
        } else if (!strcmp(a, "--tg")) {
            o.tg = atoi(v);
        } else if (!strcmp(a, "--seqs")) {
            o.seqs = atoi(v);
        } else if (!strcmp(a, "--reps")) {
            o.reps = atoi(v);
        } else if (!strcmp(a, "--mem")) {
            if (cllm_plan_parse_mem(&o.fp, v) != CLLM_OK) {
                fprintf(stderr, "cllm-pipeline-bench: %s\n", cllm_last_error());
                return 2;
            }
        } else {
            return usage();
        }
    }
    if (!o.model || o.reps < 1 || o.reps > 16 || o.tg < 1 || o.pp < 0 || o.seqs < 1 ||
        o.seqs > CLLM_PIPE_MAX_SEQS) {
        return usage();
    }
    o.fp.n_sessions = o.seqs;
    o.fp.n_ctx = o.fp.n_ctx < o.pp + o.tg + 8 ? o.pp + o.tg + 8 : o.fp.n_ctx;
    if (cllm_pipe_init(&argc, &argv) != CLLM_OK) {
        fprintf(stderr, "cllm-pipeline-bench: %s\n", cllm_last_error());
        return 1;
    }
    cllm_pipe_opts po = cllm_pipe_default_opts();
    cllm_pipe *p = NULL;
    if (cllm_pipe_open(o.model, &o.fp, &po, &p) != CLLM_OK) {
        fprintf(stderr, "cllm-pipeline-bench: %s\n", cllm_last_error());
        cllm_pipe_finalize(false);
        return 1;
    }
    bool ok;
    if (cllm_pipe_rank(p) == 0) {
        const cllm_pipe_plan *pl = cllm_pipe_get_plan(p);
        printf("%s: %d rank%s, %d thread(s) each, batch %lld\n", o.model, cllm_pipe_size(p),
               cllm_pipe_size(p) == 1 ? "" : "s", o.fp.n_threads, (long long)pl->n_batch);
        ok = (o.check ? run_check(p, &o) : bench(p, &o)) && cllm_pipe_close(p) == CLLM_OK;
    } else {
        ok = cllm_pipe_serve(p) == CLLM_OK;
    }
    cllm_pipe_stats st;
    ok = ok && cllm_pipe_gather_stats(p, &st) == CLLM_OK;
    /* what one token costs on the link: its activations per hop, and the
     * logits back (measured between ranks 0 and 1) */
    const cllm_pipe_plan *plan = cllm_pipe_get_plan(p);
    double t_act = 0, t_logits = 0;
    ok = ok &&
         cllm_pipe_measure_transfer(p, plan->act_header + plan->act_row, 200, &t_act) == CLLM_OK;
    ok = ok && cllm_pipe_measure_transfer(p, plan->logits_row, 200, &t_logits) == CLLM_OK;
    if (ok && cllm_pipe_rank(p) == 0) {
        const cllm_pipe_plan *pl = cllm_pipe_get_plan(p);
        printf("bytes per token: %zu of activations per hop (%d hops), %zu of logits back\n",
               pl->act_row, pl->n_ranks - 1, pl->n_ranks > 1 ? pl->logits_row : (size_t)0);
        if (pl->n_ranks > 1) {
            const double per_token = (pl->n_ranks - 1) * t_act + t_logits;
            printf("one way, rank 0 <-> 1: a token's activations %.1f us, its logits %.1f us: "
                   "%.1f us of transfers per generated token\n",
                   t_act * 1e6, t_logits * 1e6, per_token * 1e6);
        }
        for (int r = 0; r < cllm_pipe_size(p); r++) {
            printf("rank %d: layers %d-%d, %llu batches, %llu bytes sent, %.3f s waiting on other "
                   "ranks (their compute and the transfers)\n",
                   r, pl->ranks[r].layer_begin, pl->ranks[r].layer_end - 1,
                   (unsigned long long)st.batches[r], (unsigned long long)st.bytes_sent[r],
                   st.comm_s[r]);
        }
    }
    if (!ok)
        fprintf(stderr, "cllm-pipeline-bench: rank %d: %s\n", cllm_pipe_rank(p), cllm_last_error());
    cllm_pipe_free(p);
    cllm_pipe_finalize(!ok);
    return ok ? 0 : 1;
}
