/* The CPU thread pool: persistent workers, every wait an adaptive spin then
 * a sleep on a condition variable, a sense-reversing barrier. */
#include "backend/cpu/threadpool.h"
#include "core/hostmem.h"
#include "core/common.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/*
 * Every wait (a worker for a job, a thread at a barrier, the caller for the
 * workers) spins, then sleeps until woken. Spinning catches the short waits
 * of an idle machine without a system call; sleeping keeps a waiting thread
 * from holding a CPU that a thread with work needs when the machine is busier
 * than the pool (another process on the cores, or more threads than CPUs):
 * the sleeper leaves its CPU and its share of CPU time to others, and the
 * kernel runs the thread that holds the work there. Spinning or yielding
 * without bound would cost such a thread a scheduler time slice at every
 * barrier.
 *
 * How long to spin adapts to the machine, per pool and kind of wait. A
 * wait that ends while spinning lets the next one spin 1/8 longer. One that
 * has to sleep decides by why it slept:
 *  - the thread was preempted since its last sleep (getrusage: an
 *    involuntary context switch): the machine is busier than the pool, and
 *    the spin drops to the minimum. Its waits end soon only because the
 *    sleeper gave its CPU to the late thread, so their length says nothing;
 *  - else, woken within WAKE_SOON_NS: the other thread was just a little
 *    late (the uneven end of a node on an idle machine), and the spin
 *    doubles (up to the maximum), so that the next such wait is caught
 *    without a sleep and a wake-up. (Halving it for these instead sinks it
 *    to the minimum on an idle machine, where 2 threads then sleep and are
 *    woken at almost every barrier, and generation slows down by about a
 *    quarter.);
 *  - else, asleep longer than WAKE_LATE_NS: the spin drops to the minimum.
 * A pool with more threads than CPUs does not spin at all: some of its
 * threads are never running.
 *
 * A pause takes 10 to 50 ns depending on the CPU: the maximum for barriers is
 * some 40 to 200 us, far longer than the imbalance between threads at the end
 * of a node, far shorter than a time slice (milliseconds).
 */
#define SPIN_MAX_JOB  (1 << 16)
#define SPIN_MAX_WAIT (1 << 12) /* at a barrier, or for the workers */
#define SPIN_MIN      64
#define WAKE_SOON_NS  200000L  /* 200 us */
#define WAKE_LATE_NS  1000000L /* 1 ms: a scheduler time slice is longer */

typedef struct spin_limit {
    _Atomic int limit; /* CPU_RELAX()es before sleeping; updated racily */
    int min, max;
} spin_limit;

/*
 * A place to sleep until an atomic word changes. The waker changes the word
 * (sequentially consistent), then broadcasts only if someone sleeps; the
 * sleeper counts itself (sequentially consistent) under the mutex before it
 * looks at the word again: either the waker sees the count, or the sleeper
 * sees the new value.
 */
typedef struct waitq {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    _Atomic int n_sleeping;
} waitq;

typedef struct worker {
    cllm_threadpool *tp;
    int ith;
    pthread_t thread;
} worker;

struct cllm_threadpool {
    int n_threads;
    worker *workers; /* n_threads - 1 */
    spin_limit spin_job, spin_wait;

    /* counters that only ever grow (unsigned: they wrap around) */
    _Atomic unsigned generation; /* incremented for every job, and to stop */
    _Atomic unsigned done_phase; /* incremented when the last worker is done */
    _Atomic int n_done;          /* workers done with the current job */
    _Atomic bool stop;
    cllm_threadpool_job job;
    void *arg;

    /* barrier */
    _Atomic int barrier_count;
    _Atomic unsigned barrier_phase;

    waitq q_job;     /* workers waiting for a job (generation) */
    waitq q_barrier; /* threads waiting at a barrier (barrier_phase) */
    waitq q_done;    /* the caller waiting for the workers (done_phase) */
};

static bool waitq_init(waitq *q) {
    atomic_init(&q->n_sleeping, 0);
    if (pthread_mutex_init(&q->mutex, NULL) != 0) return false;
    if (pthread_cond_init(&q->cond, NULL) != 0) {
        pthread_mutex_destroy(&q->mutex);
        return false;
    }
    return true;
}

static void waitq_destroy(waitq *q) {
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mutex);
}

static void spin_limit_init(spin_limit *sl, int min, int max) {
    sl->min = min;
    sl->max = max;
    atomic_init(&sl->limit, max);
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Whether the calling thread was preempted (an involuntary context switch)
 * since it last asked: the sign that other processes want the CPUs. */
static bool preempted(void) {
    static _Thread_local long seen = -1;
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return false;
    const bool more = seen >= 0 && ru.ru_nivcsw > seen;
    seen = ru.ru_nivcsw;
    return more;
}

/* Returns once *word != old: spins up to sl's limit, then sleeps on q. */
static void waitq_wait(waitq *q, _Atomic unsigned *word, unsigned old, spin_limit *sl) {
    const int limit = atomic_load_explicit(&sl->limit, memory_order_relaxed);
    for (int i = 0; i < limit; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old) {
            /* (only a change is stored: every thread's waits read this
             * line, and a store at each barrier moved it between cores) */
            const int longer = CLLM_MIN(limit + limit / 8 + 1, sl->max);
            if (longer != limit) atomic_store_explicit(&sl->limit, longer, memory_order_relaxed);
            return;
        }
        CPU_RELAX();
    }
    const long t0 = now_ns();
    pthread_mutex_lock(&q->mutex);
    atomic_fetch_add(&q->n_sleeping, 1);
    while (atomic_load(word) == old) pthread_cond_wait(&q->cond, &q->mutex);
    atomic_fetch_sub(&q->n_sleeping, 1);
    pthread_mutex_unlock(&q->mutex);
    const long slept = now_ns() - t0;
    if (preempted()) {
        /* the machine is busier than the pool: sleeping soon gives the
         * late threads a CPU (and a wait cut short by it says nothing) */
        atomic_store_explicit(&sl->limit, sl->min, memory_order_relaxed);
    } else if (slept < WAKE_SOON_NS) {
        atomic_store_explicit(&sl->limit, CLLM_MIN(2 * CLLM_MAX(limit, 1), sl->max),
                              memory_order_relaxed);
    } else if (slept > WAKE_LATE_NS) {
        atomic_store_explicit(&sl->limit, sl->min, memory_order_relaxed);
    }
}

/* Wakes the sleepers of q; call it after a sequentially consistent change of
 * the word they wait on. No system call when nobody sleeps. */
static void waitq_wake(waitq *q) {
    if (atomic_load(&q->n_sleeping) == 0) return;
    pthread_mutex_lock(&q->mutex);
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mutex);
}

static void *worker_main(void *p) {
    worker *w = p;
    cllm_threadpool *tp = w->tp;
    unsigned seen = 0;
    for (;;) {
        waitq_wait(&tp->q_job, &tp->generation, seen, &tp->spin_job);
        seen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (atomic_load(&tp->stop)) break;
        tp->job(w->ith, tp->n_threads, tp->arg);
        if (atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel) == tp->n_threads - 2) {
            atomic_fetch_add(&tp->done_phase, 1);
            waitq_wake(&tp->q_done);
        }
    }
    return NULL;
}

cllm_threadpool *cllm_threadpool_new(int n_threads) {
    CLLM_ASSERT(n_threads >= 1);
    cllm_threadpool *tp = cllm_calloc(1, sizeof(*tp));
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    if (n_threads > cllm_cpu_count()) {
        spin_limit_init(&tp->spin_job, 0, 0);
        spin_limit_init(&tp->spin_wait, 0, 0);
    } else {
        spin_limit_init(&tp->spin_job, SPIN_MIN, SPIN_MAX_JOB);
        spin_limit_init(&tp->spin_wait, SPIN_MIN, SPIN_MAX_WAIT);
    }
    tp->workers = cllm_calloc((size_t)n_threads, sizeof(*tp->workers));
    if (!tp->workers) goto fail_alloc;
    if (!waitq_init(&tp->q_job)) goto fail_alloc;
    if (!waitq_init(&tp->q_barrier)) goto fail_q_job;
    if (!waitq_init(&tp->q_done)) goto fail_q_barrier;
    /* Workers start with every signal blocked (they inherit the mask), so
     * that a process-directed signal such as SIGINT goes to one of the
     * program's own threads, whose blocking calls it interrupts, and never
     * runs the program's handler on a worker. The signals a worker causes
     * itself stay unblocked: blocked, the kernel would kill the process
     * without running their handler, and the one for SIGBUS in a mapped
     * model file (runtime/mapguard.h) must run on the worker that read it. */
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    const bool masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    int started = 0;
    for (; started < n_threads - 1; started++) {
        worker *w = &tp->workers[started];
        w->tp = tp;
        w->ith = started + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
    }
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started < n_threads - 1) {
        tp->n_threads = started + 1; /* stop only what was started */
        cllm_threadpool_free(tp);
        return NULL;
    }
    return tp;

fail_q_barrier:
    waitq_destroy(&tp->q_barrier);
fail_q_job:
    waitq_destroy(&tp->q_job);
fail_alloc:
    cllm_free(tp->workers);
    cllm_free(tp);
    return NULL;
}

void cllm_threadpool_free(cllm_threadpool *tp) {
    if (!tp) return;
    atomic_store(&tp->stop, true);
    atomic_fetch_add(&tp->generation, 1);
    waitq_wake(&tp->q_job);
    for (int i = 0; i < tp->n_threads - 1; i++) pthread_join(tp->workers[i].thread, NULL);
    waitq_destroy(&tp->q_done);
    waitq_destroy(&tp->q_barrier);
    waitq_destroy(&tp->q_job);
    cllm_free(tp->workers);
    cllm_free(tp);
}

int cllm_threadpool_n_threads(const cllm_threadpool *tp) { return tp->n_threads; }

void cllm_threadpool_run(cllm_threadpool *tp, cllm_threadpool_job job, void *arg) {
    if (tp->n_threads == 1) {
        job(0, 1, arg);
        return;
    }
    /* every worker finished the previous job: nobody reads these now */
    tp->job = job;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->barrier_count, 0, memory_order_relaxed);
    const unsigned done = atomic_load_explicit(&tp->done_phase, memory_order_relaxed);
    atomic_fetch_add(&tp->generation, 1); /* publishes the above */
    waitq_wake(&tp->q_job);

    job(0, tp->n_threads, arg);

    waitq_wait(&tp->q_done, &tp->done_phase, done, &tp->spin_wait);
}

void cllm_threadpool_barrier(cllm_threadpool *tp) {
    if (tp->n_threads == 1) return;
    const unsigned phase = atomic_load_explicit(&tp->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->barrier_count, 1, memory_order_acq_rel) ==
        tp->n_threads - 1) {
        atomic_store_explicit(&tp->barrier_count, 0, memory_order_relaxed);
        atomic_store(&tp->barrier_phase, phase + 1);
        waitq_wake(&tp->q_barrier);
        return;
    }
    waitq_wait(&tp->q_barrier, &tp->barrier_phase, phase, &tp->spin_wait);
}

int cllm_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)CLLM_MIN(n, 1 << 20) : 1;
}

int cllm_physical_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    /* distinct (package, core) pairs among the CPUs we may run on */
    long seen[CPU_SETSIZE];
    int n_seen = 0, n_cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        n_cpus++;
        char path[128];
        long pkg = 0, core = cpu;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &core) != 1) core = cpu;
            fclose(f);
        }
        const long id = pkg * 65536 + core;
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++) dup = seen[i] == id;
        if (!dup) seen[n_seen++] = id;
    }
    if (n_seen > 0) return n_seen;
    return n_cpus > 0 ? n_cpus : 1;
}
