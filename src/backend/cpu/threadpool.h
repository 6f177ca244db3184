/*
 * A persistent thread pool for graph compute: worker threads are created
 * once, wait for a job, run it, and meet at barriers inside it. No thread is
 * created per token or per node. Every wait spins a bounded time, then sleeps
 * (none spins in a pool with more threads than CPUs): a machine busier than
 * the pool slows it down in proportion, not by a time slice per barrier.
 *
 *     cllm_threadpool *tp = cllm_threadpool_new(4);     // the caller + 3 workers
 *     cllm_threadpool_run(tp, job, &args);             // job(0..3) in parallel
 *     cllm_threadpool_free(tp);
 *
 * Inside a job, cllm_threadpool_barrier(tp) waits until all n threads reach it.
 */
#ifndef CLLM_BACKEND_CPU_THREADPOOL_H
#define CLLM_BACKEND_CPU_THREADPOOL_H

typedef struct cllm_threadpool cllm_threadpool;

typedef void (*cllm_threadpool_job)(int ith, int nth, void *arg);

/* A pool of n_threads (>= 1; the calling thread is thread 0, so n_threads - 1
 * workers are started). NULL if threads or memory cannot be had. */
cllm_threadpool *cllm_threadpool_new(int n_threads);
/* Stops and joins the workers; NULL does nothing. */
void cllm_threadpool_free(cllm_threadpool *tp);
int cllm_threadpool_n_threads(const cllm_threadpool *tp);

/* Runs job(ith, n, arg) on every thread, the caller as thread 0, and returns
 * when all have returned. Not reentrant: one run at a time per pool. */
void cllm_threadpool_run(cllm_threadpool *tp, cllm_threadpool_job job, void *arg);

/* Called by every thread of a running job: returns when all have called it. */
void cllm_threadpool_barrier(cllm_threadpool *tp);

/* Number of physical cores (distinct core ids), at least 1. */
int cllm_physical_cores(void);

/* Number of CPUs this process may run on (its affinity mask; else the online
 * CPUs), at least 1: the most threads that can run at once. */
int cllm_cpu_count(void);

#endif /* CLLM_BACKEND_CPU_THREADPOOL_H */
