/*
 * The graph memory planner ("galloc"): an offset for every transient tensor
 * of a graph, in one buffer per buffer type, planned offline from the
 * tensors' lifetimes, with in-place reuse. Two steps, like the static layout
 * (layout.h): measure (plans and places into measure-mode buffers; no device
 * memory touched), then alloc (lays a graph into buffers of exactly the
 * largest measured size, with no allocation).
 *
 *     cllm_buffer_type *bufts[] = {cllm_cpu_buffer_type()};
 *     cllm_galloc *ga = cllm_galloc_new(bufts, 1);
 *     if (!ga) ...;                                         // out of host memory
 *     // the worst cases: the longest prompt, then the one-token graph
 *     st = cllm_galloc_measure(ga, prompt_graph, NULL, NULL);
 *     st = cllm_galloc_measure(ga, token_graph, NULL, NULL);
 *     printf("compute: %zu bytes\n", cllm_galloc_measured_size(ga, 0));
 *     st = cllm_galloc_reserve(ga);                         // exactly that many bytes
 *     for (each step) {
 *         ... build graph g (new tensors, no data) ...
 *         st = cllm_galloc_alloc_graph(ga, g, NULL, NULL);  // no allocation
 *         ... cllm_tensor_set() the inputs, compute, read the outputs ...
 *     }
 *     cllm_galloc_free(ga);  // frees the compute buffers: placed tensors dangle
 *
 * What is planned. A tensor of the graph (a node, or a leaf: op NONE) is
 *  - static when it already has data in a buffer this planner does not own
 *    (weights, KV cache placed by layout.h): never planned, never moved;
 *  - a view when t->view_src != NULL (view, reshape, permute, transpose, and
 *    cpy, whose result is a view of its destination): it gets its data with
 *    cllm_tensor_init_view once its source is placed;
 *  - planned otherwise (no data yet, or data placed by this planner before):
 *    nodes, and leafs without data, which are the graph's inputs.
 *
 * Lifetimes, in steps (node indices). A planned node is live from its step
 * to the last step that reads it, directly or through views of it (a view
 * keeps its root source alive until the view's last use). Inputs (planned
 * leafs, and nodes flagged CLLM_TENSOR_FLAG_INPUT) are live for the whole
 * graph. Outputs (flagged CLLM_TENSOR_FLAG_OUTPUT, nodes that no node reads,
 * and the sources of such views) are live until the end of the graph. Inputs
 * and outputs are never overwritten or given to another tensor.
 *
 * In-place reuse. The result of an op with the in-place trait
 * (cllm_op_can_inplace, core/tensor.h: add, mul, scale, silu, gelu,
 * rms_norm, norm, soft_max, rope) takes the memory of its src[0] when src[0] is planned, is
 * not a view, an input or an output, has the same buffer type, is last read
 * by this node (no later reads, also through views), has at least as many
 * bytes, both are contiguous with the same type and shape, and no other
 * source of the node reads src[0]'s memory. Every backend's kernels of those
 * ops are correct when dst == src[0]. A chain of in-place results is one allocation block.
 *
 * The plan. Per buffer type, the blocks are placed by a few greedy orderings
 * (by size, by size x lifetime, by lifetime, in graph order), each either at
 * the lowest aligned offset or in the smallest gap where the block does not
 * overlap any placed block whose lifetime intersects its own; the smallest
 * plan wins, and the search stops at the first plan that reaches the lower
 * bound below (no plan can be smaller). Block sizes are cllm_buffer_type_alloc_size rounded up to
 * cllm_buffer_type_alignment, so every offset is aligned. Where a buffer
 * type limits one allocation (cllm_buffer_type_max_size), no block crosses
 * the end of a piece (cllm_buffer_type_place_offset): the compute buffer is
 * then allocated in pieces, each tensor within one, and a tensor larger than
 * a piece is refused (CLLM_ERR_TOO_LARGE, when measured or laid out). The lower bound is
 * the largest sum of block sizes live at one step: no plan of these blocks
 * can be smaller.
 *
 * Thread safety: a galloc is not thread-safe; use one per thread (or
 * scheduler). Graphs passed to it must not be used concurrently elsewhere.
 * cllm_galloc_check is thread-safe for graphs that nobody modifies.
 */
#ifndef CLLM_ALLOC_GALLOC_H
#define CLLM_ALLOC_GALLOC_H

#include "backend/backend.h"

typedef struct cllm_galloc cllm_galloc;

/*
 * A planner for graphs whose tensors live in buffers of the `n_bufts` buffer
 * types `bufts` (buffer type id i is bufts[i]). The array is copied; the
 * buffer types must outlive the planner. n_bufts >= 1 (asserted). Returns
 * NULL if a host allocation fails.
 */
cllm_galloc *cllm_galloc_new(cllm_buffer_type *const *bufts, int n_bufts);

/* Frees the planner, its measure buffers and its compute buffers (tensors
 * placed in them then dangle). NULL does nothing. */
void cllm_galloc_free(cllm_galloc *ga);

/* Number of buffer types the planner was created with. */
int cllm_galloc_n_bufts(const cllm_galloc *ga);

/*
 * Measure mode: plans `g` and places its planned tensors (and their views)
 * in measure-mode buffers, one per buffer type, that allocate no device
 * memory (data pointers into a region that does not exist). Remembers, per
 * buffer type, the largest plan measured so far (cllm_galloc_measured_size).
 *
 * node_buft[i] is the buffer type id of g->nodes[i] and leaf_buft[i] that of
 * g->leafs[i]; NULL means 0 for all. Only the ids of planned tensors matter;
 * views live where their source does.
 *
 * Returns CLLM_ERR_INVALID_ARG for an id out of range or a view whose
 * unplaced source is not in the graph, CLLM_ERR_NOMEM if a host allocation
 * fails; on failure no tensor is changed. The same graph may be measured
 * again, or laid out with cllm_galloc_alloc_graph afterwards (tensors placed
 * by this planner are planned again).
 */
cllm_status cllm_galloc_measure(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                                const int *leaf_buft);

/*
 * Allocates, per buffer type, one CLLM_MEM_COMPUTE buffer of exactly
 * cllm_galloc_measured_size bytes (0 if nothing was measured for it; in
 * pieces above the type's max_size). Buffers
 * already of that size are kept; those that grow (after more measures) are
 * replaced, and graphs laid into the old ones must be built and laid out
 * again. On failure
 * (CLLM_ERR_DEVICE_MEMORY, CLLM_ERR_TOO_LARGE from the buffer type) the
 * previous buffers are kept and nothing new stays allocated.
 */
cllm_status cllm_galloc_reserve(cllm_galloc *ga);

/*
 * Alloc mode: plans `g` (ids as for cllm_galloc_measure) and places its
 * planned tensors in the reserved compute buffers, views after their
 * sources. Allocates no device memory and makes no system call; host memory
 * is allocated only if `g` has more tensors than any graph planned before.
 *
 * Returns CLLM_ERR_INVALID_ARG if cllm_galloc_reserve was not called (or as
 * for measure), CLLM_ERR_TOO_LARGE (with a message naming the buffer type
 * and both sizes) if the plan needs more bytes than a reserved buffer holds:
 * the buffers never grow here. CLLM_ERR_NOMEM if a host allocation fails. On
 * failure no tensor is changed.
 */
cllm_status cllm_galloc_alloc_graph(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                                    const int *leaf_buft);

/* Bytes the last graph planned (measured or allocated) needs in buffer type
 * `buft_id`: the end of its highest block. 0 before the first plan. */
size_t cllm_galloc_planned_size(const cllm_galloc *ga, int buft_id);

/* The lower bound for the last graph planned in buffer type `buft_id`: the
 * largest sum of aligned block bytes live at one step. planned >= lower. */
size_t cllm_galloc_lower_bound(const cllm_galloc *ga, int buft_id);

/* The largest planned size over every cllm_galloc_measure so far: the bytes
 * cllm_galloc_reserve allocates. */
size_t cllm_galloc_measured_size(const cllm_galloc *ga, int buft_id);

/* Figures about the last graph planned, per buffer type. */
typedef struct cllm_galloc_stats {
    size_t planned;       /* cllm_galloc_planned_size */
    size_t lower_bound;   /* cllm_galloc_lower_bound */
    size_t naive;         /* aligned bytes of every planned tensor: the size without reuse */
    int n_tensors;        /* planned tensors */
    int n_blocks;         /* allocation blocks (an in-place chain is one block) */
    int n_inplace;        /* tensors that took their src[0]'s memory */
    const char *strategy; /* the placement that won, e.g. "size/first-fit" (static string) */
} cllm_galloc_stats;

/* Fills *out for buffer type `buft_id` (zeros before the first plan). */
void cllm_galloc_get_stats(const cllm_galloc *ga, int buft_id, cllm_galloc_stats *out);

/* The compute buffer of buffer type `buft_id`, or NULL before
 * cllm_galloc_reserve. Owned by the planner. */
cllm_buffer *cllm_galloc_buffer(const cllm_galloc *ga, int buft_id);

/*
 * For tests of failure paths: the n-th host allocation the planner makes
 * from now on fails as if the host were out of memory (n <= 0: none fails).
 */
void cllm_galloc_fail_host_alloc_after(cllm_galloc *ga, int n);

/*
 * The overlap checker. From the graph and the tensors' placed buffers and
 * addresses alone (not from the planner's state; O(n^2), for tests and
 * debugging), recomputes every lifetime and proves that:
 *  - every non-view tensor of the graph is placed, lies within its buffer
 *    and at an aligned offset, and every view points at its source + offset;
 *  - no two non-view tensors live at the same step overlap in the same
 *    buffer, except a result and its src[0] at the step of an allowed
 *    in-place op (same rules as above, data pointers equal);
 *  - inputs (leafs, CLLM_TENSOR_FLAG_INPUT) live for the whole graph and
 *    outputs until its end: none of their bytes is shared with another
 *    tensor live at the same time, and none is an in-place source.
 * Works on measure-mode placements too (addresses differ by offset). Returns
 * true if all holds; otherwise false, with the first violation in err (if
 * err_size > 0). Uses O(n) host memory for its work; false with an "out of
 * host memory" message if that allocation fails.
 */
bool cllm_galloc_check(const cllm_graph *g, char *err, size_t err_size);

#endif /* CLLM_ALLOC_GALLOC_H */
