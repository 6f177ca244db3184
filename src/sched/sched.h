/*
 * The scheduler: one graph, several backends. It assigns every node to a
 * backend, splits the graph where the backend changes, copies each split's
 * inputs into the backend that needs them, plans every backend's compute
 * memory with one graph planner (one buffer type per backend), and runs the
 * splits in order.
 *
 *     cllm_backend *bes[] = {test_be, cpu_be};          // in order of preference, CPU last
 *     cllm_sched *s;
 *     st = cllm_sched_new(bes, 2, NULL, &s);
 *     st = cllm_sched_reserve(s, worst_prompt_graph);    // measure: no memory touched
 *     st = cllm_sched_reserve(s, worst_token_graph);
 *     st = cllm_sched_alloc_buffers(s);                  // exactly the measured bytes
 *     for (each step) {
 *         ... build g ...
 *         st = cllm_sched_alloc_graph(s, g);             // assign, split, place: no allocation
 *         ... cllm_tensor_set() the inputs ...
 *         st = cllm_sched_graph_compute(s, g);           // copies + splits in order
 *     }
 *     cllm_sched_free(s);
 *
 * Assignment, per node that computes (views live where their source does):
 *  1. where its static inputs live: a node that reads a weight (a tensor
 *     placed in a buffer the scheduler does not plan) goes to the first
 *     backend of the list on that buffer's device, if it supports the op;
 *     a cpy into a static tensor (the KV cache) must run where it lives;
 *  2. neighbours follow neighbours: unassigned nodes take the backend of the
 *     previous, then the next, node assigned to a non-last backend, if
 *     that backend supports them;
 *  3. the rest: the previous node's backend if it supports them, else the
 *     first backend of the list that does (the last, the CPU, as the last
 *     resort); none: CLLM_ERR_UNSUPPORTED naming the node.
 * Graph inputs (leafs without data) live on the backend of their first
 * consumer. Every input of a node that its backend cannot read (another
 * backend's memory, or a static tensor in a buffer type its device does not
 * support) is copied once per graph and backend into a copy tensor in the
 * consumer's compute buffer, planned by the graph planner like any tensor;
 * the copies of a split run before it.
 *
 * Scheduling rewrites the sources of g's nodes to point at the copies, so a
 * graph is scheduled once: build it again for the next step.
 * cllm_sched_reserve restores the sources before it returns.
 *
 * Pipeline copies (n_copies > 1): every copy tensor gets n_copies instances
 * that live for the whole graph; consecutive computes use them in turn, so
 * that a later asynchronous backend can fill one while another computes.
 *
 * Verbose (params.verbose or CLLM_SCHED_VERBOSE=1): every graph scheduled
 * prints its splits and copies to stderr.
 *
 * Thread safety: one thread at a time per scheduler.
 */
#ifndef CLLM_SCHED_SCHED_H
#define CLLM_SCHED_SCHED_H

#include "backend/backend.h"

#include <stdio.h>

#define CLLM_SCHED_MAX_BACKENDS 16

typedef struct cllm_sched cllm_sched;

typedef struct cllm_sched_params {
    int n_copies; /* instances of every copy tensor (>= 1; default 1) */
    bool verbose; /* print splits and copies (also CLLM_SCHED_VERBOSE=1) */
} cllm_sched_params;

cllm_sched_params cllm_sched_default_params(void);

/*
 * A scheduler over `n` backends (1..CLLM_SCHED_MAX_BACKENDS), in order of
 * preference; the last one (normally the CPU) is the last resort. The array
 * is copied; the backends must outlive the scheduler. On failure *out is
 * untouched.
 */
cllm_status cllm_sched_new(cllm_backend *const *backends, int n, const cllm_sched_params *params,
                           cllm_sched **out);
/* Frees the scheduler and its compute buffers (not the backends nor their
 * workspaces, which belong to the backends). NULL does nothing. */
void cllm_sched_free(cllm_sched *s);

/*
 * Measure mode: schedules g and measures each backend's compute bytes (the
 * graph planner) and workspace bytes (cllm_backend_workspace_size of each
 * split), keeping the largest so far. Allocates no device memory; g's
 * sources are restored before it returns (its tensors keep measure-mode
 * data pointers).
 */
cllm_status cllm_sched_reserve(cllm_sched *s, cllm_graph *g);

/*
 * Allocates, per backend, a compute buffer of exactly the measured bytes and
 * a workspace of exactly the measured bytes (through the backend). On
 * failure (CLLM_ERR_DEVICE_MEMORY naming the device, ...) the error is
 * returned: a compute buffer that cannot be had leaves the previous ones in
 * place (the graph planner's contract); buffers made before the failure stay
 * with the scheduler and the backends (freed with them), and the call can
 * be retried.
 */
cllm_status cllm_sched_alloc_buffers(cllm_sched *s);

/*
 * Schedules g and places its planned tensors in the compute buffers (no
 * allocation). CLLM_ERR_TOO_LARGE if it needs more than was reserved.
 * Afterwards set the inputs, then call cllm_sched_graph_compute(s, g).
 */
cllm_status cllm_sched_alloc_graph(cllm_sched *s, cllm_graph *g);

/* Runs the copies and splits of the graph last given to
 * cllm_sched_alloc_graph (which must be g). */
cllm_status cllm_sched_graph_compute(cllm_sched *s, cllm_graph *g);

/*
 * Gates (optional): points in the graph computed next where the executor
 * stops to call fn(user, id, after) — before the node (after == false) or
 * once the node and everything before it has run (after == true). The
 * gates are given in graph order (for one node: those before it first) and
 * name compute nodes (not views) of the graph. The nodes between two gates
 * run as one piece on their backend, so a gate costs one more dispatch. A
 * gate that returns an error stops the compute with it. Streamed layers use
 * them (runtime/stream.h): wait for a layer before its first node, release
 * its slot after its last. The array is the caller's and must stay valid
 * until the gates are cleared (n = 0).
 */
typedef struct cllm_sched_gate {
    const cllm_tensor *node;
    int id;
    bool after;
} cllm_sched_gate;
typedef cllm_status (*cllm_sched_gate_fn)(void *user, int id, bool after);
void cllm_sched_set_gates(cllm_sched *s, const cllm_sched_gate *gates, int n, cllm_sched_gate_fn fn,
                          void *user);

/* ---- reports ----------------------------------------------------------- */

int cllm_sched_n_backends(const cllm_sched *s);
cllm_backend *cllm_sched_backend(const cllm_sched *s, int i);

typedef struct cllm_sched_split {
    int backend;  /* index into the backend list */
    int n_nodes;  /* nodes that compute (views excluded) */
    int n_inputs; /* copies made before the split */
    size_t input_bytes;
} cllm_sched_split;

/* Splits of the graph last scheduled. */
int cllm_sched_n_splits(const cllm_sched *s);
cllm_sched_split cllm_sched_get_split(const cllm_sched *s, int i);
/* Copies of the graph last scheduled (all splits), and their bytes. */
int cllm_sched_n_copies(const cllm_sched *s);
size_t cllm_sched_copy_bytes(const cllm_sched *s);
/* The backend index `t` (a node of the graph last scheduled) runs on, or -1. */
int cllm_sched_node_backend(const cllm_sched *s, const cllm_tensor *t);

/* Bytes measured (planned) and allocated for backend i. */
size_t cllm_sched_compute_planned(const cllm_sched *s, int i);
size_t cllm_sched_compute_allocated(const cllm_sched *s, int i);
size_t cllm_sched_workspace_planned(const cllm_sched *s, int i);
size_t cllm_sched_workspace_allocated(const cllm_sched *s, int i);

/* Prints the splits and copies of the graph last scheduled. */
void cllm_sched_print(const cllm_sched *s, FILE *f);

#endif /* CLLM_SCHED_SCHED_H */
