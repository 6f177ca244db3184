/*
 * The CPU thread pool: every thread runs every job, with the right ith and
 * nth; barriers order the phases of a job (no thread starts phase p + 1
 * before every thread finished phase p); pools of 1..4 threads are created,
 * used and freed repeatedly, also after the workers have gone to sleep, and
 * with threads that arrive late at a barrier or at the end of a job (the
 * others go to sleep there). A pool of 64 threads, more than this machine's
 * CPUs, finishes hundreds of jobs. Thread counts above the CPUs are clamped
 * where a session's shape is resolved, with a warning, so that a plan, a
 * model loaded with it and its sessions agree on the per-thread workspace.
 *
 * Threads record what they see in atomics; the checks run on the main
 * thread afterwards (the CHECK counters are not thread-safe).
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "backend/cpu/threadpool.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/place.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS     64
#define SMALL_THREADS   4 /* pools of 1..SMALL_THREADS threads */
#define OVERSUB_THREADS 64
#define N_PHASES        24

typedef struct phase_job {
    cllm_threadpool *tp;
    int n_threads;
    int n_phases;                         /* <= N_PHASES */
    int late_thread;                      /* -1, or a thread that sleeps before the first barrier */
    int last_thread;                      /* -1, or a thread that sleeps after the last barrier */
    _Atomic int done[N_PHASES];           /* threads that finished each phase */
    _Atomic int ran[MAX_THREADS];         /* jobs each thread ran */
    _Atomic int phases_seen[MAX_THREADS]; /* phases each thread went through */
    _Atomic int errors;                   /* ordering or argument violations */
    int slot[N_PHASES][MAX_THREADS];      /* written by one thread per phase, read after */
} phase_job;

static void sleep_ms(int ms) {
    const struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Each phase: check that the previous phase is complete everywhere, mark
 * this one, meet at the barrier, then check that nobody is missing. */
static void phase_run(int ith, int nth, void *arg) {
    phase_job *job = arg;
    if (nth != job->n_threads || ith < 0 || ith >= nth) {
        atomic_fetch_add(&job->errors, 1);
        return; /* a wrong nth would deadlock the barriers: give up */
    }
    atomic_fetch_add(&job->ran[ith], 1);
    if (ith == job->late_thread) sleep_ms(3); /* the others sleep at the barrier */
    for (int p = 0; p < job->n_phases; p++) {
        if (p > 0 && atomic_load(&job->done[p - 1]) != nth) atomic_fetch_add(&job->errors, 1);
        if (atomic_load(&job->done[p]) >= nth) atomic_fetch_add(&job->errors, 1);
        job->slot[p][ith] = p * 100 + ith; /* plain writes, published by the barrier */
        atomic_fetch_add(&job->done[p], 1);
        cllm_threadpool_barrier(job->tp);
        if (atomic_load(&job->done[p]) != nth) atomic_fetch_add(&job->errors, 1);
        /* after the barrier every thread's plain write of this phase is visible */
        for (int t = 0; t < nth; t++) {
            if (job->slot[p][t] != p * 100 + t) atomic_fetch_add(&job->errors, 1);
        }
        atomic_fetch_add(&job->phases_seen[ith], 1);
        /* barriers back to back: the phase counter must keep them apart */
        cllm_threadpool_barrier(job->tp);
    }
    if (ith == job->last_thread) sleep_ms(3); /* the caller sleeps until it is done */
}

static void reset_job(phase_job *job, cllm_threadpool *tp, int n, int n_phases) {
    job->tp = tp;
    job->n_threads = n;
    job->n_phases = n_phases;
    job->late_thread = job->last_thread = -1;
    for (int p = 0; p < N_PHASES; p++) atomic_store(&job->done[p], 0);
    atomic_store(&job->errors, 0);
    memset(job->slot, 0xff, sizeof(job->slot));
}

/* Many runs of a job of n_phases phases on one pool of n threads; now and
 * then the workers fall asleep between jobs, a thread comes late to the
 * first barrier, or a worker finishes long after the caller. */
static void test_phases(int n, int runs, int n_phases) {
    cllm_threadpool *tp = cllm_threadpool_new(n);
    CHECK(tp != NULL);
    if (!tp) return;
    CHECK_EQ_INT(cllm_threadpool_n_threads(tp), n);
    static phase_job job;
    for (int t = 0; t < MAX_THREADS; t++) {
        atomic_store(&job.ran[t], 0);
        atomic_store(&job.phases_seen[t], 0);
    }
    int errors = 0, incomplete = 0;
    for (int r = 0; r < runs; r++) {
        reset_job(&job, tp, n, n_phases);
        if (r % 40 == 20) sleep_ms(30);
        if (r % 40 == 10) job.late_thread = r / 40 % n;
        if (r % 40 == 30 && n > 1) job.last_thread = 1 + r / 40 % (n - 1);
        cllm_threadpool_run(tp, phase_run, &job);
        errors += atomic_load(&job.errors);
        /* run returned: every thread finished every phase of this run */
        for (int p = 0; p < n_phases; p++) incomplete += atomic_load(&job.done[p]) != n;
    }
    CHECKF(errors == 0, "%d threads: %d ordering violations", n, errors);
    CHECKF(incomplete == 0, "%d threads: %d phases incomplete when run returned", n, incomplete);
    for (int t = 0; t < n; t++) {
        CHECKF(atomic_load(&job.ran[t]) == runs, "%d threads: thread %d ran %d of %d jobs", n, t,
               atomic_load(&job.ran[t]), runs);
        CHECKF(atomic_load(&job.phases_seen[t]) == runs * n_phases,
               "%d threads: thread %d saw %d of %d phases", n, t, atomic_load(&job.phases_seen[t]),
               runs * n_phases);
    }
    cllm_threadpool_free(tp);
}

typedef struct count_job {
    _Atomic int hits[MAX_THREADS];
    _Atomic int bad;
    int n;
} count_job;

static void count_run(int ith, int nth, void *arg) {
    count_job *job = arg;
    if (nth != job->n || ith < 0 || ith >= nth) {
        atomic_fetch_add(&job->bad, 1);
        return;
    }
    atomic_fetch_add(&job->hits[ith], 1);
}

static void empty_run(int ith, int nth, void *arg) {
    (void)ith;
    (void)nth;
    (void)arg;
}

/* Pools created, used a little, and freed, over and over. */
static void test_create_free(int n, int rounds) {
    int failed = 0, wrong = 0;
    for (int i = 0; i < rounds; i++) {
        cllm_threadpool *tp = cllm_threadpool_new(n);
        if (!tp) {
            failed++;
            continue;
        }
        count_job job;
        memset(&job, 0, sizeof(job));
        job.n = n;
        const int runs = i % 3; /* also freed without ever running a job */
        for (int r = 0; r < runs; r++) cllm_threadpool_run(tp, count_run, &job);
        wrong += atomic_load(&job.bad);
        for (int t = 0; t < n; t++) wrong += atomic_load(&job.hits[t]) != runs;
        cllm_threadpool_free(tp);
    }
    CHECKF(failed == 0, "%d threads: %d of %d pools not created", n, failed, rounds);
    CHECKF(wrong == 0, "%d threads: %d wrong job counts", n, wrong);
}

/* ---- clamping to the CPUs ----------------------------------------------- */

typedef struct log_capture {
    int n_warnings;
    char last[512];
} log_capture;

static void capture(cllm_log_level level, const char *msg, void *ud) {
    log_capture *c = ud;
    if (level != CLLM_LOG_WARN) return;
    c->n_warnings++;
    snprintf(c->last, sizeof(c->last), "%s", msg);
}

/* The shape of `requested` threads: its resolved count, and whether a
 * warning naming both counts was logged. */
static int resolve_threads(int requested, bool *warned) {
    const cllm_hparams hp = {.n_ctx_train = 64};
    const cllm_shape_params sp = {.n_ctx = 16,
                                  .n_batch = 8,
                                  .type_k = CLLM_TYPE_F16,
                                  .type_v = CLLM_TYPE_F16,
                                  .n_threads = requested};
    log_capture c = {0};
    cllm_log_set(capture, &c);
    cllm_shape sh = {.n_threads = -1};
    const cllm_status st = cllm_shape_resolve(&hp, &sp, "session", &sh);
    cllm_log_set(NULL, NULL);
    CHECKF(st == CLLM_OK, "%d threads: %s", requested, cllm_last_error());
    char want[32];
    snprintf(want, sizeof(want), "%d threads", requested);
    *warned = c.n_warnings == 1 && strstr(c.last, want) != NULL;
    return sh.n_threads;
}

/* More threads than CPUs are clamped to the CPUs with one warning; up to
 * the CPUs, and the default (physical cores), are kept without one. */
static void test_clamp(void) {
    const int cpus = cllm_cpu_count();
    CHECK(cpus >= 1 && cpus >= cllm_physical_cores());
    bool warned = false;
    const int over[] = {cpus + 1, 2 * cpus + 3, 1024};
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        if (over[i] > 1024) continue; /* out of range: an error, tested elsewhere */
        const int got = resolve_threads(over[i], &warned);
        CHECKF(got == cpus, "%d threads on %d CPUs resolved to %d", over[i], cpus, got);
        CHECKF(warned, "%d threads on %d CPUs: no warning naming the request", over[i], cpus);
    }
    for (int n = 1; n <= cpus && n <= 4; n++) {
        const int got = resolve_threads(n, &warned);
        CHECKF(got == n && !warned, "%d threads on %d CPUs: %d, %s", n, cpus, got,
               warned ? "warned" : "no warning");
    }
    const int got = resolve_threads(0, &warned);
    CHECKF(got == cllm_physical_cores() && !warned, "default threads: %d, %s", got,
           warned ? "warned" : "no warning");
}

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* A plan for 1024 threads is made for the CPUs; a model loaded with it
 * accepts a session of 1024 threads, whose workspace (planned per thread)
 * is that of a session with one thread per CPU, and which decodes. */
static void test_clamp_model(const char *path) {
    const int cpus = cllm_cpu_count();
    cllm_log_set(quiet, NULL);
    cllm_plan_params pp = cllm_plan_default_params();
    pp.n_ctx = 64;
    pp.n_batch = 8;
    pp.n_threads = 1024;
    pp.n_sessions = 2;
    cllm_plan *plan = NULL;
    cllm_model *m = NULL;
    cllm_session *s = NULL, *ref = NULL;
    cllm_status st = cllm_plan_file(path, &pp, &plan);
    CHECKF(st == CLLM_OK, "plan: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    CHECKF(plan->shape.n_threads == cpus, "plan of 1024 threads on %d CPUs: %d threads", cpus,
           plan->shape.n_threads);
    cllm_model_params mp = cllm_model_default_params();
    mp.plan = plan;
    st = cllm_model_load(path, &mp, &m);
    CHECKF(st == CLLM_OK, "load: %s", cllm_last_error());
    if (st != CLLM_OK) goto done;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 8;
    sp.n_threads = 1024;
    st = cllm_session_new(m, &sp, &s);
    CHECKF(st == CLLM_OK, "session of 1024 threads: %s", cllm_last_error());
    sp.n_threads = cpus;
    const cllm_status st_ref = cllm_session_new(m, &sp, &ref);
    CHECKF(st_ref == CLLM_OK, "session of %d threads: %s", cpus, cllm_last_error());
    if (st != CLLM_OK || st_ref != CLLM_OK) goto done;
    const cllm_memory_report a = cllm_session_memory(s), b = cllm_session_memory(ref);
    CHECKF(a.planned[CLLM_MEM_WORKSPACE] == b.planned[CLLM_MEM_WORKSPACE] &&
               a.allocated[CLLM_MEM_WORKSPACE] == a.planned[CLLM_MEM_WORKSPACE],
           "workspace of 1024 threads %zu (allocated %zu), of %d threads %zu",
           a.planned[CLLM_MEM_WORKSPACE], a.allocated[CLLM_MEM_WORKSPACE], cpus,
           b.planned[CLLM_MEM_WORKSPACE]);
    const int32_t tokens[] = {1, 403, 407, 261};
    CHECKF(cllm_session_decode(s, tokens, 4) == CLLM_OK, "decode: %s", cllm_last_error());
    CHECK(cllm_session_logits(s) != NULL);
done:
    cllm_session_free(ref);
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
    cllm_log_set(NULL, NULL);
}

int main(void) {
    cllm_threadpool_free(NULL); /* does nothing */
    CHECK(cllm_physical_cores() >= 1);
    const int cpus = cllm_cpu_count();
    for (int n = 1; n <= SMALL_THREADS; n++) {
        /* pools with more threads than CPUs do not spin: every wait sleeps */
        const bool oversubscribed = n > cpus;
        test_phases(n, oversubscribed ? 60 : 120, N_PHASES);
        test_create_free(n, 30);
        cllm_threadpool *tp = cllm_threadpool_new(n);
        CHECK(tp != NULL);
        if (tp) {
            const int runs = oversubscribed ? 100 : 500;
            for (int r = 0; r < runs; r++) cllm_threadpool_run(tp, empty_run, NULL);
            cllm_threadpool_free(tp);
        }
    }
    /* 64 threads, on most machines far more than CPUs: 300 jobs of 4 phases
     * (8 barriers each) complete, every thread in every phase */
    test_phases(OVERSUB_THREADS, 300, 4);
    test_create_free(OVERSUB_THREADS, 4);

    test_clamp();
    const char *const files[] = {"stories260K.gguf", NULL};
    if (refs_have(files)) {
        char path[4096];
        test_clamp_model(refs_model_path(path, sizeof(path), "stories260K.gguf"));
    }
    return check_summary("test_threadpool");
}
