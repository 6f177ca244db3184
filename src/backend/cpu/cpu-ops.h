/*
 * CPU kernels: the interface between the CPU backend (cpu.c, which walks the
 * graph on the thread pool) and the kernels (one op family per ops-*.c file).
 *
 * Every kernel computes `dst` from dst->src[] for the share of the work of
 * thread `ith` out of `nth`: all threads call it with the same dst, and a
 * barrier separates consecutive nodes. Kernels read their inputs through
 * nb[] strides (inputs may be non-contiguous views), and write dst through
 * its own strides (cpy writes into views).
 */
#ifndef CLLM_BACKEND_CPU_OPS_H
#define CLLM_BACKEND_CPU_OPS_H

#include "backend/cpu/threadpool.h"
#include "core/tensor.h"

typedef struct cllm_cpu_params {
    int ith;      /* this thread, 0 <= ith < nth */
    int nth;      /* threads working on the node */
    void *wdata;  /* the backend workspace (shared by all threads) */
    size_t wsize; /* its size in bytes, >= cllm_cpu_op_workspace(dst, nth) */
    /* for kernels that work in phases (e.g. convert the activations, then
     * multiply): cllm_threadpool_barrier(pool) waits for all nth threads */
    cllm_threadpool *pool;
} cllm_cpu_params;

/* Whether the CPU kernels can compute `node` (op and types). */
bool cllm_cpu_supports_op(const cllm_tensor *node);

/* Workspace bytes `node` needs when computed by `n_threads` threads. */
size_t cllm_cpu_op_workspace(const cllm_tensor *node, int n_threads);

/* Computes this thread's share of `node`. Must be supported. */
void cllm_cpu_compute_forward(const cllm_cpu_params *params, cllm_tensor *node);

/* One-token attention nodes of several sequences (a generation step of a
 * batch of sequences: one node per sequence, one after the other) run as
 * one: the threads share all their key chunks, then all their heads, with
 * one barrier between instead of one per node and a thread idle on short
 * caches. At most this many nodes per group. */
#define CLLM_CPU_ATTN_GROUP_MAX 64

/* Whether attention node b, the next node with work after a, may join a's
 * group: one token each, the same shapes and types, and b reads no
 * attention result (so none of the group's). */
bool cllm_cpu_attn_joins(const cllm_tensor *a, const cllm_tensor *b);

/* Workspace bytes of a group of nodes that join one another. */
size_t cllm_cpu_attn_group_workspace(cllm_tensor *const *nodes, int n, int n_threads);

/* Computes this thread's share of the group (an internal barrier; every
 * thread calls it with the same nodes). */
void cllm_cpu_attn_group(const cllm_cpu_params *params, cllm_tensor *const *nodes, int n);

/* Rows [*start, *end) of `n` for thread ith of nth, split evenly. */
static inline void cllm_cpu_split(int64_t n, int ith, int nth, int64_t *start, int64_t *end) {
    const int64_t per = (n + nth - 1) / nth;
    *start = CLLM_MIN(per * ith, n);
    *end = CLLM_MIN(*start + per, n);
}

#endif /* CLLM_BACKEND_CPU_OPS_H */
