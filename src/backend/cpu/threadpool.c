/* The CPU thread pool: persistent workers, spin-then-sleep waits, a
 * sense-reversing barrier. */
#include "backend/cpu/threadpool.h"
#include "core/hostmem.h"
#include "core/common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before sleeping (waiting for a job) or yielding (at a barrier). */
#define SPIN_WAIT_JOB     (1 << 16)
#define SPIN_WAIT_BARRIER (1 << 10)

typedef struct worker {
    cllm_threadpool *tp;
    int ith;
    pthread_t thread;
} worker;

struct cllm_threadpool {
    int n_threads;
    worker *workers; /* n_threads - 1 */

    pthread_mutex_t mutex;
    pthread_cond_t cond;
    _Atomic int generation; /* incremented for every job */
    _Atomic int n_done;     /* workers done with the current job */
    _Atomic bool stop;
    cllm_threadpool_job job;
    void *arg;

    /* barrier */
    _Atomic int barrier_count;
    _Atomic int barrier_phase;
};

static void *worker_main(void *p) {
    worker *w = p;
    cllm_threadpool *tp = w->tp;
    int seen = 0;
    for (;;) {
        /* wait for a new generation: spin, then sleep on the condition */
        int spins = 0;
        while (atomic_load_explicit(&tp->generation, memory_order_acquire) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_acquire)) {
            if (++spins < SPIN_WAIT_JOB) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mutex);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop)) {
                pthread_cond_wait(&tp->cond, &tp->mutex);
            }
            pthread_mutex_unlock(&tp->mutex);
        }
        if (atomic_load(&tp->stop)) break;
        seen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        tp->job(w->ith, tp->n_threads, tp->arg);
        atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_release);
    }
    return NULL;
}

cllm_threadpool *cllm_threadpool_new(int n_threads) {
    CLLM_ASSERT(n_threads >= 1);
    cllm_threadpool *tp = cllm_calloc(1, sizeof(*tp));
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    tp->workers = cllm_calloc((size_t)n_threads, sizeof(*tp->workers));
    if (!tp->workers) goto fail_alloc;
    if (pthread_mutex_init(&tp->mutex, NULL) != 0) goto fail_alloc;
    if (pthread_cond_init(&tp->cond, NULL) != 0) goto fail_mutex;
    int started = 0;
    for (; started < n_threads - 1; started++) {
        worker *w = &tp->workers[started];
        w->tp = tp;
        w->ith = started + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
    }
    if (started < n_threads - 1) {
        tp->n_threads = started + 1; /* stop only what was started */
        cllm_threadpool_free(tp);
        return NULL;
    }
    return tp;

fail_mutex:
    pthread_mutex_destroy(&tp->mutex);
fail_alloc:
    cllm_free(tp->workers);
    cllm_free(tp);
    return NULL;
}

void cllm_threadpool_free(cllm_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mutex);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->mutex);
    for (int i = 0; i < tp->n_threads - 1; i++) pthread_join(tp->workers[i].thread, NULL);
    pthread_cond_destroy(&tp->cond);
    pthread_mutex_destroy(&tp->mutex);
    cllm_free(tp->workers);
    cllm_free(tp);
}

int cllm_threadpool_n_threads(const cllm_threadpool *tp) { return tp->n_threads; }

void cllm_threadpool_run(cllm_threadpool *tp, cllm_threadpool_job job, void *arg) {
    if (tp->n_threads == 1) {
        job(0, 1, arg);
        return;
    }
    tp->job = job;
    tp->arg = arg;
    atomic_store(&tp->n_done, 0);
    atomic_store(&tp->barrier_count, 0);
    pthread_mutex_lock(&tp->mutex);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->mutex);

    job(0, tp->n_threads, arg);

    int spins = 0;
    while (atomic_load_explicit(&tp->n_done, memory_order_acquire) < tp->n_threads - 1) {
        if (++spins < SPIN_WAIT_BARRIER) {
            CPU_RELAX();
        } else {
            sched_yield();
        }
    }
}

void cllm_threadpool_barrier(cllm_threadpool *tp) {
    if (tp->n_threads == 1) return;
    const int phase = atomic_load_explicit(&tp->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->barrier_count, 1, memory_order_acq_rel) ==
        tp->n_threads - 1) {
        atomic_store_explicit(&tp->barrier_count, 0, memory_order_relaxed);
        atomic_store_explicit(&tp->barrier_phase, phase + 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&tp->barrier_phase, memory_order_acquire) == phase) {
        if (++spins < SPIN_WAIT_BARRIER) {
            CPU_RELAX();
        } else {
            sched_yield();
        }
    }
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
