/*
 * The Vulkan backend: records the nodes of a graph into command buffers (a
 * barrier between dependent dispatches) and submits them in chunks as they
 * are recorded, so that the device starts while the host still records;
 * one fence on the last submission waits for them all. The recording is
 * kept (per node array the scheduler passes, a few of them) and replayed
 * while what each node's commands depend on stays bit for bit the same;
 * nodes that change from one compute to the next (the KV cache writes of a
 * reused decode graph, which move by a row per token) get command buffers
 * of their own, recorded again each time. docs/vulkan.md: "Submission".
 */
#include "backend/vulkan/vk-internal.h"
#include "core/hostmem.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- recording --------------------------------------------------------- */

typedef struct vk_range {
    VkBuffer b;
    size_t lo, hi;
} vk_range;

/* What the commands record_node records for a node depend on, of the node
 * and of each source: equal signatures (memcmp) record the same commands. */
typedef struct vk_tsig {
    uint64_t buf; /* the buffer's serial (vk_buf.serial; 0: no tensor) */
    uint64_t off; /* the tensor's byte offset in it */
    int64_t ne[CLLM_MAX_DIMS];
    uint64_t nb[CLLM_MAX_DIMS];
    int32_t type, op, flags, layout;
} vk_tsig;

typedef struct vk_nsig {
    vk_tsig t[1 + CLLM_MAX_SRC]; /* the node, then its sources */
    int32_t op_params[CLLM_MAX_OP_PARAMS];
} vk_nsig;

/* One command buffer of a recording: work nodes [first, end). */
typedef struct vk_seg {
    int first, end;
    bool dynamic; /* recorded again at every compute */
} vk_seg;

/* A graph's recording. key/n_nodes name the node array it was made for (a
 * hint: only the signatures decide whether it is replayed). */
typedef struct vk_rec {
    cllm_tensor *const *key;
    int n_nodes;
    bool valid;         /* every segment recorded, replayable */
    uint64_t used;      /* when last computed (eviction) */
    int n_work, cap;    /* nodes with work; room in the arrays below */
    cllm_tensor **work; /* [n_work]: the nodes, as last computed */
    vk_nsig *sig;       /* [n_work]: their signatures, as recorded */
    bool *dyn;          /* [n_work]: changed between two computes */
    vk_seg *segs;       /* [n_segs] */
    int n_segs;
    VkCommandBuffer *cbs; /* [n_cbs]: one per segment, allocated as needed */
    int n_cbs, cap_cbs;
    uint64_t busy; /* the timeline value after which its command buffers are free */
} vk_rec;

/* Recordings kept per backend: the scheduler passes one node array per
 * split of the device (several where other devices run nodes between). */
#define VK_RECS 4
/* Nodes of the first chunk of a recording, doubled per chunk up to the
 * last: small first chunks start the device early. */
#define VK_CHUNK_FIRST 8
#define VK_CHUNK_MAX   128

typedef struct vk_be {
    vk_dev *v;
    VkCommandPool pool;
    VkCommandBuffer cb; /* the command buffer record_node records into */
    VkFence fence;      /* a device without timeline semaphores: compute waits for it */
    /* asynchronous work (CLLM_VULKAN_ASYNC=0: off): compute returns once
     * submitted, transfers are queued; `last`: the timeline value after
     * which all that this backend queued is done; `waited`: the last value
     * synchronize waited for */
    bool async;
    uint64_t last, waited;
    /* counts, logged when the backend is freed: transfers queued, of them
     * those queued while its earlier work was not waited for (overlap),
     * and the waits of synchronize that had work to wait for */
    uint64_t n_up, n_down, n_up_behind, n_down_behind, n_waits;
    /* ranges read and written since the last barrier */
    vk_range *reads, *writes;
    int n_reads, n_writes, cap;
    bool replay; /* CLLM_VULKAN_REPLAY=0: record every compute anew */
    vk_rec recs[VK_RECS];
    uint64_t n_computes;
    /* this compute's work nodes and their signatures (scratch) */
    cllm_tensor **cur_work;
    vk_nsig *cur_sig;
    int cap_cur;
    /* counts, logged when the backend is freed: graphs recorded in full,
     * replayed, and the nodes recorded of those computed */
    uint64_t n_recorded, n_replayed, n_nodes_recorded, n_nodes_computed;
    uint64_t record_ns;      /* host time in record_seg */
    uint64_t n_attn_windows; /* attention nodes computed over a cache in windows */
    /* the backend's workspace (the attention's state over a cache bound in
     * windows) this compute, and its serial when last computed */
    const vk_buf *ws;
    uint64_t ws_serial;
} vk_be;

typedef struct vk_bind {
    VkDescriptorBufferInfo info;
    uint32_t off; /* the tensor's offset within the bound range */
} vk_bind;

/* The bytes of tensor t that a dispatch binds and may touch: from its
 * offset aligned down to minStorageBufferOffsetAlignment (where a binding
 * may start) to its last byte rounded up to a whole 32-bit word (the
 * shaders read and write words; an F16 store rewrites its neighbour's half
 * of the word). The barriers between dispatches follow these same bytes,
 * so what a dispatch is bound to is exactly what the barriers protect. */
static vk_range extent_of(const vk_dev *v, const cllm_tensor *t) {
    const vk_buf *b = t->buffer->context;
    const size_t off = vk_tensor_offset(t);
    const size_t align = v->props.limits.minStorageBufferOffsetAlignment;
    const size_t end = off + cllm_nbytes(t);
    return (vk_range){.b = b->b,
                      .lo = off - off % align,
                      .hi = (size_t)CLLM_MIN((VkDeviceSize)((end + 3) & ~(size_t)3), b->vk_size)};
}

/* The binding of tensor t: its extent (extent_of; the shaders address t
 * from `off` within it). vk_op_supported has checked that t, or each
 * window of it that record_node binds, fits maxStorageBufferRange. */
static vk_bind bind_of(const vk_dev *v, const cllm_tensor *t) {
    const vk_range r = extent_of(v, t);
    CLLM_ASSERTF(r.hi - r.lo <= v->max_range, "vulkan: %s spans %zu bytes, above the range %u",
                 t->name, r.hi - r.lo, v->max_range);
    return (vk_bind){.info = {.buffer = r.b, .offset = r.lo, .range = r.hi - r.lo},
                     .off = (uint32_t)(vk_tensor_offset(t) - r.lo)};
}

static bool overlaps(const vk_range *list, int n, const vk_range *r) {
    for (int i = 0; i < n; i++) {
        if (list[i].b == r->b && list[i].lo < r->hi && r->lo < list[i].hi) return true;
    }
    return false;
}

static bool in_device(const vk_dev *v, const cllm_tensor *t) {
    return t->buffer && !cllm_buffer_is_measure(t->buffer) &&
           cllm_buffer_buft(t->buffer) == &v->buft && t->buffer->context;
}

/* The sources of a node in binding order (bindings 0-2: sources 0-2, 3: the
 * result, 4: source 3, 5: the attention's state; a binding without a
 * tensor gets the result's). */
static void binds_of(const vk_dev *v, const cllm_tensor *node, vk_bind binds[VK_BINDINGS]) {
    binds[3] = bind_of(v, node);
    for (int i = 0; i < 3; i++) binds[i] = node->src[i] ? bind_of(v, node->src[i]) : binds[3];
    binds[4] = node->src[3] ? bind_of(v, node->src[3]) : binds[3];
    binds[5] = binds[3];
}

/* The workspace bytes of a node: the attention's state over a cache in
 * windows (shaders/attn_window.glsl), the 8-bit activations of a mul_mat
 * (shaders/quant_q8.comp); 0: none. */
static size_t ws_bytes(const vk_dev *v, const cllm_tensor *node) {
    if (node->op == CLLM_OP_ATTN) return vk_attn_state_bytes(v, node);
    if (node->op == CLLM_OP_MUL_MAT) return vk_mul_mat_q8_bytes(v, node);
    return 0;
}

/* What a node uses of the workspace, from its start (every node that uses
 * it writes it). */
static vk_range ws_of(const vk_be *be, const cllm_tensor *node) {
    const size_t n = ws_bytes(be->v, node);
    return (vk_range){.b = be->ws ? be->ws->b : VK_NULL_HANDLE, .lo = 0, .hi = n};
}

static vk_bind bind_range(const vk_range *r) {
    return (vk_bind){.info = {.buffer = r->b, .offset = r->lo, .range = r->hi - r->lo}};
}

static void barrier_compute(VkCommandBuffer cb) {
    const VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Records a dispatch of pipe with these bindings and push constants. */
static void emit(vk_be *be, vk_pipe pipe, const vk_bind binds[VK_BINDINGS], const vk_push *pc,
                 const uint32_t g[3]) {
    vk_dev *v = be->v;
    VkWriteDescriptorSet w[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++) {
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &binds[i].info};
    }
    vkCmdBindPipeline(be->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->pipes[pipe]);
    vkCmdPushDescriptorSetKHR(be->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->layout, 0, VK_BINDINGS, w);
    vkCmdPushConstants(be->cb, v->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(*pc), pc);
    vkCmdDispatch(be->cb, g[0], g[1], g[2]);
}

/* One dispatch of `node` (the node itself or a window of it): its pipeline,
 * bindings and push constants. `extra`: for get_rows, the first row of
 * src[0] that its window binds (the shader skips the ids outside it); for
 * attention, which window of the cache it is (0: the whole cache, 1: the
 * first, 2: a later one; `state`: the state's binding then). */
static void dispatch(vk_be *be, const cllm_tensor *node, uint32_t extra, const vk_range *state) {
    vk_dev *v = be->v;
    vk_push pc = {0};
    uint32_t g[3];
    const vk_pipe pipe = vk_node_dispatch(node, &pc, g);
    vk_bind binds[VK_BINDINGS];
    binds_of(v, node, binds);
    for (int i = 0; i < 4; i++) pc.offs[i] = binds[i].off;
    if (node->op == CLLM_OP_ATTN) {
        pc.p[1] = binds[4].off;
        pc.p[2] = extra;
        if (extra) binds[5] = bind_range(state);
    }
    if (node->op == CLLM_OP_GET_ROWS) pc.p[0] = extra;
    emit(be, pipe, binds, &pc, g);
}

/* t restricted to [lo, lo + n) along dimension `dim`: the same strides,
 * the data moved to element lo. */
static cllm_tensor sub_view(const cllm_tensor *t, int dim, int64_t lo, int64_t n) {
    cllm_tensor s = *t;
    s.ne[dim] = n;
    s.data = (char *)t->data + (size_t)lo * t->nb[dim];
    return s;
}

/* get_rows and mul_mat over a matrix src[0] that one binding cannot hold
 * (vk_window_rows): one dispatch per window of its rows, each binding only
 * its window; mul_mat's result is then written in windows of its rows too
 * (d[m, n] with m the matrix's row), and in windows of its columns (with
 * src[1]'s) where the result or src[1] is larger than a binding. Every
 * window is a node of the same op over sub-views, so any kernel that
 * honours its push constants' shapes and strides computes it. */
static void dispatch_windows(vk_be *be, const cllm_tensor *node) {
    vk_dev *v = be->v;
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    const bool mm = node->op == CLLM_OP_MUL_MAT;
    const int64_t rows = a->ne[1], win_r = vk_window_rows(v, a);
    const int64_t cols = mm ? node->ne[1] : 1;
    const int64_t win_c = mm ? CLLM_MIN(vk_window_rows(v, b), vk_window_rows(v, node)) : 1;
    CLLM_ASSERTF(win_r > 0 && win_c > 0, "vulkan: %s has no window (vk_op_supported)", node->name);
    for (int64_t r0 = 0; r0 < rows; r0 += win_r) {
        const int64_t nr = CLLM_MIN(win_r, rows - r0);
        cllm_tensor wa = sub_view(a, 1, r0, nr);
        for (int64_t c0 = 0; c0 < cols; c0 += win_c) {
            const int64_t nc = CLLM_MIN(win_c, cols - c0);
            cllm_tensor wb, wd = *node;
            wd.src[0] = &wa;
            if (mm) {
                wb = sub_view(b, 1, c0, nc);
                wd = sub_view(node, 1, c0, nc);
                wd = sub_view(&wd, 0, r0, nr);
                wd.src[0] = &wa;
                wd.src[1] = &wb;
            }
            dispatch(be, &wd, (uint32_t)r0, NULL);
        }
    }
}

/* A cpy of rows larger than a binding (vk_cpy_rows: the KV cache write of
 * a long prompt): one dispatch per window of its rows, source and
 * destination bound to the window only. */
static void dispatch_cpy_windows(vk_be *be, const cllm_tensor *node) {
    vk_dev *v = be->v;
    const cllm_tensor *a = node->src[0], *dst = node->src[1];
    const int da = vk_outer_dim(a), dd = vk_outer_dim(node);
    const int64_t rows = node->ne[dd];
    int64_t win = CLLM_MIN(vk_cpy_window(v, a), vk_cpy_window(v, node));
    if (dst) win = CLLM_MIN(win, vk_cpy_window(v, dst));
    CLLM_ASSERTF(win > 0, "vulkan: %s has no window (vk_op_supported)", node->name);
    for (int64_t r0 = 0; r0 < rows; r0 += win) {
        const int64_t nr = CLLM_MIN(win, rows - r0);
        cllm_tensor wa = sub_view(a, da, r0, nr), wd = sub_view(node, dd, r0, nr), wt;
        wd.src[0] = &wa;
        if (dst) {
            wt = sub_view(dst, vk_outer_dim(dst), r0, nr);
            wd.src[1] = &wt;
        }
        dispatch(be, &wd, 0, NULL);
    }
}

/* mul_mat with 8-bit activations (vk_mul_mat_q8): src[1] quantized into
 * the workspace (shaders/quant_q8.comp), a barrier, then the product of
 * the weights with those blocks (shaders/mul_mat_q8.comp). */
static void dispatch_mul_mat_q8(vk_be *be, const cllm_tensor *node) {
    vk_dev *v = be->v;
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    const vk_range q8 = ws_of(be, node);
    vk_bind binds[VK_BINDINGS];
    binds_of(v, node, binds);
    const uint64_t blocks = (uint64_t)(a->ne[0] / 32) * (uint64_t)cllm_nrows(b);
    uint32_t g[3];

    vk_push pq = {0};
    vk_bind bq[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++) bq[i] = binds[1];
    bq[3] = bind_range(&q8);
    pq.offs[0] = binds[1].off;
    for (int i = 0; i < 4; i++) {
        pq.ne_a[i] = (uint32_t)b->ne[i];
        pq.nb_a[i] = (uint32_t)b->nb[i];
    }
    g[0] = (uint32_t)CLLM_MIN((blocks + 63) / 64, (uint64_t)VK_GRID_MAX);
    g[1] = (uint32_t)(((blocks + 63) / 64 + g[0] - 1) / g[0]);
    g[2] = 1;
    emit(be, VK_PIPE_QUANT_Q8, bq, &pq, g);
    barrier_compute(be->cb);

    vk_push pc = {0};
    (void)vk_node_dispatch(node, &pc, g); /* the shapes and types */
    binds[1] = bind_range(&q8);
    pc.offs[0] = binds[0].off;
    pc.offs[1] = 0;
    pc.offs[3] = binds[3].off;
    const uint64_t groups = ((uint64_t)node->ne[0] + 3) / 4 * (((uint64_t)node->ne[1] + 7) / 8);
    g[0] = (uint32_t)CLLM_MIN(groups, (uint64_t)VK_GRID_MAX);
    g[1] = (uint32_t)((groups + g[0] - 1) / g[0]);
    g[2] = (uint32_t)(node->ne[2] * node->ne[3]);
    emit(be, VK_PIPE_MUL_MAT_Q8, binds, &pc, g);
}

/* The attention over a KV cache that one binding cannot hold
 * (vk_attn_window): one dispatch per window of the cache's rows, k, v and
 * the mask's columns bound to the window only, each merging its part into
 * the result and the state (shaders/attn_window.glsl) after a barrier. */
static void dispatch_attn_windows(vk_be *be, const cllm_tensor *node) {
    const cllm_tensor *k = node->src[1], *val = node->src[2], *mask = node->src[3];
    const int64_t n_kv = k->ne[1], win = vk_attn_window(be->v, node);
    CLLM_ASSERTF(win > 0, "vulkan: %s has no window (vk_op_supported)", node->name);
    const vk_range state = ws_of(be, node);
    for (int64_t j0 = 0; j0 < n_kv; j0 += win) {
        const int64_t n = CLLM_MIN(win, n_kv - j0);
        cllm_tensor wk = sub_view(k, 1, j0, n), wv = sub_view(val, 1, j0, n), wm, wd = *node;
        wd.src[1] = &wk;
        wd.src[2] = &wv;
        if (mask) {
            wm = sub_view(mask, 0, j0, n);
            wd.src[3] = &wm;
        }
        if (j0 > 0) barrier_compute(be->cb); /* the result and the state */
        dispatch(be, &wd, j0 == 0 ? 1 : 2, &state);
    }
}

static void record_node(vk_be *be, cllm_tensor *node) {
    vk_dev *v = be->v;
    /* the barrier: from the whole tensors' extents, also for a node
     * recorded in windows (its windows bind parts of them and never
     * depend on each other) */
    const cllm_tensor *srcs[4] = {node->src[0], node->src[1], node->src[2], node->src[3]};
    vk_range reads[4];
    const vk_range write = extent_of(v, node);
    bool barrier =
        overlaps(be->writes, be->n_writes, &write) || overlaps(be->reads, be->n_reads, &write);
    for (int i = 0; i < 4; i++) {
        if (!srcs[i]) continue;
        reads[i] = extent_of(v, srcs[i]);
        barrier = barrier || overlaps(be->writes, be->n_writes, &reads[i]);
    }
    /* an attention in windows writes its state in the workspace, a mul_mat
     * with 8-bit activations those */
    const bool uses_ws = ws_bytes(v, node) > 0;
    const vk_range state = uses_ws ? ws_of(be, node) : write;
    barrier = barrier || overlaps(be->writes, be->n_writes, &state) ||
              overlaps(be->reads, be->n_reads, &state);
    if (barrier) {
        barrier_compute(be->cb);
        be->n_reads = be->n_writes = 0;
    }
    for (int i = 0; i < 4; i++) {
        if (srcs[i]) be->reads[be->n_reads++] = reads[i];
    }
    be->writes[be->n_writes++] = write;
    if (uses_ws) be->writes[be->n_writes++] = state;
    if (uses_ws && node->op == CLLM_OP_ATTN) {
        dispatch_attn_windows(be, node);
        return;
    }
    if (uses_ws) {
        dispatch_mul_mat_q8(be, node);
        return;
    }

    if (vk_cpy_rows(node) &&
        (vk_cpy_window(v, node->src[0]) < node->src[0]->ne[vk_outer_dim(node->src[0])] ||
         vk_cpy_window(v, node) < node->ne[vk_outer_dim(node)] ||
         (node->src[1] &&
          vk_cpy_window(v, node->src[1]) < node->src[1]->ne[vk_outer_dim(node->src[1])]))) {
        dispatch_cpy_windows(be, node);
        return;
    }
    const bool windows =
        (node->op == CLLM_OP_GET_ROWS || node->op == CLLM_OP_MUL_MAT) &&
        (vk_window_rows(v, node->src[0]) < node->src[0]->ne[1] ||
         (node->op == CLLM_OP_MUL_MAT && (vk_window_rows(v, node->src[1]) < node->src[1]->ne[1] ||
                                          vk_window_rows(v, node) < node->ne[1])));
    if (windows) {
        dispatch_windows(be, node);
    } else {
        dispatch(be, node, 0, NULL);
    }
}

/* ---- recordings -------------------------------------------------------- */

static void tsig_of(vk_tsig *s, const cllm_tensor *t) {
    if (!t) return; /* zeros */
    const vk_buf *b = t->buffer->context;
    s->buf = b->serial;
    s->off = vk_tensor_offset(t);
    for (int d = 0; d < CLLM_MAX_DIMS; d++) {
        s->ne[d] = t->ne[d];
        s->nb[d] = t->nb[d];
    }
    s->type = (int32_t)t->type;
    s->op = (int32_t)t->op;
    s->flags = t->flags;
    s->layout = t->layout;
}

static void nsig_of(vk_nsig *s, const cllm_tensor *node) {
    memset(s, 0, sizeof(*s));
    tsig_of(&s->t[0], node);
    for (int j = 0; j < CLLM_MAX_SRC; j++) tsig_of(&s->t[1 + j], node->src[j]);
    memcpy(s->op_params, node->op_params, sizeof(s->op_params));
}

static void rec_free(vk_rec *rec) {
    cllm_free(rec->work);
    cllm_free(rec->sig);
    cllm_free(rec->dyn);
    cllm_free(rec->segs);
    cllm_free(rec->cbs); /* the command buffers go with the pool */
}

/* Room for n work nodes (what the arrays held is lost when they grow). */
static bool rec_reserve(vk_rec *rec, int n) {
    if (rec->cap >= n) return true;
    cllm_tensor **work = cllm_malloc((size_t)n * sizeof(*work));
    vk_nsig *sig = cllm_malloc((size_t)n * sizeof(*sig));
    bool *dyn = cllm_malloc((size_t)n * sizeof(*dyn));
    vk_seg *segs = cllm_malloc((size_t)n * sizeof(*segs));
    if (!work || !sig || !dyn || !segs) {
        cllm_free(work);
        cllm_free(sig);
        cllm_free(dyn);
        cllm_free(segs);
        return false;
    }
    cllm_free(rec->work);
    cllm_free(rec->sig);
    cllm_free(rec->dyn);
    cllm_free(rec->segs);
    rec->work = work;
    rec->sig = sig;
    rec->dyn = dyn;
    rec->segs = segs;
    rec->cap = n;
    return true;
}

/* A command buffer per segment. */
static VkResult rec_reserve_cbs(vk_be *be, vk_rec *rec, int n) {
    if (rec->n_cbs >= n) return VK_SUCCESS;
    if (rec->cap_cbs < n) {
        const int cap = CLLM_MAX(n, 2 * rec->cap_cbs);
        VkCommandBuffer *cbs = cllm_malloc((size_t)cap * sizeof(*cbs));
        if (!cbs) return VK_ERROR_OUT_OF_HOST_MEMORY;
        if (rec->n_cbs) memcpy(cbs, rec->cbs, (size_t)rec->n_cbs * sizeof(*cbs));
        cllm_free(rec->cbs);
        rec->cbs = cbs;
        rec->cap_cbs = cap;
    }
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = be->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = (uint32_t)(n - rec->n_cbs)};
    const VkResult r = vkAllocateCommandBuffers(be->v->d, &cai, rec->cbs + rec->n_cbs);
    if (r == VK_SUCCESS) rec->n_cbs = n;
    return r;
}

/* Cuts the work nodes into segments: every run of dynamic nodes, and the
 * static ones between in chunks of VK_CHUNK_FIRST nodes, doubling. */
static void rec_segment(vk_rec *rec) {
    const int n = rec->n_work;
    int chunk = VK_CHUNK_FIRST;
    rec->n_segs = 0;
    for (int i = 0; i < n;) {
        const bool dyn = rec->dyn[i];
        int end = i + 1;
        if (dyn) {
            while (end < n && rec->dyn[end]) end++;
        } else {
            while (end < n && !rec->dyn[end] && end - i < chunk) end++;
            chunk = CLLM_MIN(2 * chunk, VK_CHUNK_MAX);
        }
        rec->segs[rec->n_segs++] = (vk_seg){.first = i, .end = end, .dynamic = dyn};
        i = end;
    }
}

/* The recording of node array g->nodes: the one made for it, else the one
 * used longest ago, emptied. */
static vk_rec *rec_for(vk_be *be, const cllm_graph *g) {
    vk_rec *old = &be->recs[0];
    for (int i = 0; i < VK_RECS; i++) {
        vk_rec *rec = &be->recs[i];
        if (rec->key == g->nodes && rec->n_nodes == g->n_nodes) return rec;
        if (rec->used < old->used) old = rec;
    }
    old->key = g->nodes;
    old->n_nodes = g->n_nodes;
    old->valid = false;
    return old;
}

/* ---- recording and submitting ------------------------------------------ */

/* At the start of every command buffer: what ran before on the queue
 * (dispatches of earlier segments or graphs, transfers) is done with the
 * memory that the dispatches after it read or write. */
static void barrier_in(VkCommandBuffer cb) {
    const VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* After the last node: the results are the host's (mapped memory) and the
 * transfers' (staged reads, and writes into what the graph read). */
static void barrier_out(VkCommandBuffer cb) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT |
                                                 VK_ACCESS_TRANSFER_READ_BIT |
                                                 VK_ACCESS_TRANSFER_WRITE_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                         NULL, 0, NULL);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Records segment s of rec into its command buffer. */
static VkResult record_seg(vk_be *be, vk_rec *rec, int s) {
    const uint64_t t0 = now_ns();
    const vk_seg *sg = &rec->segs[s];
    const VkCommandBuffer cb = rec->cbs[s];
    VkResult r = vkResetCommandBuffer(cb, 0);
    /* replayed command buffers are submitted more than once */
    const VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = be->replay ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS) return r;
    be->cb = cb;
    barrier_in(cb);
    be->n_reads = be->n_writes = 0;
    for (int i = sg->first; i < sg->end; i++) record_node(be, rec->work[i]);
    if (sg->end == rec->n_work) barrier_out(cb);
    be->n_nodes_recorded += (uint64_t)(sg->end - sg->first);
    r = vkEndCommandBuffer(cb);
    be->record_ns += now_ns() - t0;
    return r;
}

/* Submits n command buffers; the last submission of a graph signals the
 * next timeline value (rec->busy, be->last), or without timeline
 * semaphores the fence, which then covers every earlier one on the queue. */
static VkResult submit(vk_be *be, vk_rec *rec, const VkCommandBuffer *cbs, int n, bool last) {
    vk_dev *v = be->v;
    pthread_mutex_lock(&v->lock);
    const uint64_t val = v->tl_last + 1;
    const bool signal = last && v->timeline;
    const VkTimelineSemaphoreSubmitInfo ti = {.sType =
                                                  VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                              .signalSemaphoreValueCount = 1,
                                              .pSignalSemaphoreValues = &val};
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .pNext = signal ? &ti : NULL,
                             .commandBufferCount = (uint32_t)n,
                             .pCommandBuffers = cbs,
                             .signalSemaphoreCount = signal ? 1 : 0,
                             .pSignalSemaphores = signal ? &v->timeline : NULL};
    const VkResult r =
        vkQueueSubmit(v->queue, 1, &si, last && !v->timeline ? be->fence : VK_NULL_HANDLE);
    if (r == VK_SUCCESS && signal) {
        v->tl_last = val;
        rec->busy = val;
        be->last = val;
    }
    pthread_mutex_unlock(&v->lock);
    return r;
}

/* Records every segment of rec anew, submitting each as soon as it is
 * recorded. *submitted: whether something went to the queue. */
static VkResult record_all(vk_be *be, vk_rec *rec, bool *submitted) {
    rec_segment(rec);
    VkResult r = rec_reserve_cbs(be, rec, rec->n_segs);
    for (int s = 0; s < rec->n_segs && r == VK_SUCCESS; s++) {
        r = record_seg(be, rec, s);
        if (r == VK_SUCCESS) r = submit(be, rec, &rec->cbs[s], 1, s == rec->n_segs - 1);
        if (r == VK_SUCCESS) *submitted = true;
    }
    return r;
}

/* Records the dynamic segments of rec again and submits all of them. */
static VkResult replay(vk_be *be, vk_rec *rec, bool *submitted) {
    VkResult r = VK_SUCCESS;
    for (int s = 0; s < rec->n_segs && r == VK_SUCCESS; s++) {
        if (rec->segs[s].dynamic) r = record_seg(be, rec, s);
    }
    if (r == VK_SUCCESS) r = submit(be, rec, rec->cbs, rec->n_segs, true);
    if (r == VK_SUCCESS) *submitted = true;
    return r;
}

/* What a compute does with the recording of its node array. */
typedef enum vk_plan {
    VK_REPLAY,       /* replay it, its dynamic segments recorded again */
    VK_RECORD,       /* record it anew, some more nodes dynamic */
    VK_RECORD_FRESH, /* record it anew, no node dynamic */
} vk_plan;

/* Whether two signatures differ only in where tensors are (buffers and
 * offsets): a node moved, such as a KV cache write. */
static bool only_moved(const vk_nsig *a, const vk_nsig *b) {
    const size_t from = offsetof(vk_tsig, ne);
    for (int i = 0; i < 1 + CLLM_MAX_SRC; i++) {
        if (memcmp((const char *)&a->t[i] + from, (const char *)&b->t[i] + from,
                   sizeof(vk_tsig) - from) != 0)
            return false;
    }
    return memcmp(a->op_params, b->op_params, sizeof(a->op_params)) == 0;
}

/*
 * Compares rec, recorded before for the same node array, with this
 * compute's nodes (be->cur_sig): replayed when every node whose signature
 * changed is dynamic. Otherwise the changed nodes become dynamic, unless
 * one changed more than its place or many moved (another graph in the
 * same array, such as the next shape of a session's graph: fresh).
 */
static vk_plan plan_of(const vk_be *be, vk_rec *rec, int n_work) {
    if (!be->replay || !rec->valid || rec->n_work != n_work) return VK_RECORD_FRESH;
    int n_changed = 0, n_new = 0;
    for (int i = 0; i < n_work; i++) {
        if (memcmp(&rec->sig[i], &be->cur_sig[i], sizeof(vk_nsig)) != 0) {
            if (!only_moved(&rec->sig[i], &be->cur_sig[i])) return VK_RECORD_FRESH;
            n_changed++;
            n_new += !rec->dyn[i];
        }
    }
    if (n_new == 0) return VK_REPLAY;
    if (n_changed > VK_CHUNK_FIRST && (int64_t)n_changed * 4 > n_work) return VK_RECORD_FRESH;
    for (int i = 0; i < n_work; i++) {
        if (memcmp(&rec->sig[i], &be->cur_sig[i], sizeof(vk_nsig)) != 0) rec->dyn[i] = true;
    }
    return VK_RECORD;
}

/* The attention's state where a node's KV cache is bound in windows, a
 * mul_mat's 8-bit activations. */
static size_t vk_backend_get_workspace_size(cllm_backend *be, const cllm_graph *g) {
    const vk_be *ctx = be->context;
    size_t need = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *node = g->nodes[i];
        if (vk_has_work(node) && vk_op_supported(ctx->v, node)) {
            need = CLLM_MAX(need, ws_bytes(ctx->v, node));
        }
    }
    return need;
}

static const char *vk_backend_get_name(const cllm_backend *be) { return dev_of(be->device)->name; }

static void vk_backend_free(cllm_backend *be) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    if (v->timeline) {
        pthread_mutex_lock(&v->lock);
        (void)vk_async_complete(v, ctx->last); /* its command buffers are free */
        pthread_mutex_unlock(&v->lock);
    }
    if (ctx->n_up + ctx->n_down) {
        cllm_log(CLLM_LOG_DEBUG,
                 "%s: %llu uploads and %llu downloads queued, %llu and %llu of them behind work "
                 "not waited for; %llu waits",
                 v->name, (unsigned long long)ctx->n_up, (unsigned long long)ctx->n_down,
                 (unsigned long long)ctx->n_up_behind, (unsigned long long)ctx->n_down_behind,
                 (unsigned long long)ctx->n_waits);
    }
    if (ctx->n_recorded + ctx->n_replayed) {
        cllm_log(CLLM_LOG_DEBUG,
                 "%s: %llu graphs recorded, %llu replayed; %llu of %llu nodes recorded in %.3f ms; "
                 "%llu attention nodes over a cache in windows",
                 v->name, (unsigned long long)ctx->n_recorded, (unsigned long long)ctx->n_replayed,
                 (unsigned long long)ctx->n_nodes_recorded,
                 (unsigned long long)ctx->n_nodes_computed, (double)ctx->record_ns * 1e-6,
                 (unsigned long long)ctx->n_attn_windows);
    }
    if (ctx->fence) vkDestroyFence(v->d, ctx->fence, NULL);
    if (ctx->pool) vkDestroyCommandPool(v->d, ctx->pool, NULL);
    for (int i = 0; i < VK_RECS; i++) rec_free(&ctx->recs[i]);
    cllm_free(ctx->cur_work);
    cllm_free(ctx->cur_sig);
    cllm_free(ctx->reads);
    cllm_free(ctx->writes);
    cllm_free(ctx);
    cllm_free(be);
}

static cllm_status vk_backend_graph_compute(cllm_backend *be, cllm_graph *g) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    int n_work = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *node = g->nodes[i];
        if (!vk_has_work(node)) continue;
        if (!vk_op_supported(v, node)) {
            return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: cannot compute %s (%s)", v->name,
                              node->name, cllm_op_name(node->op));
        }
        if (!in_device(v, node)) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "%s: %s is not in %s memory", v->name,
                              node->name, v->name);
        }
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            const cllm_tensor *s = node->src[j];
            if (s && !in_device(v, s)) {
                return cllm_error(CLLM_ERR_INVALID_ARG, "%s: input %s of %s is not in %s memory",
                                  v->name, s->name, node->name, v->name);
            }
        }
        n_work++;
        if (node->op == CLLM_OP_ATTN && vk_attn_state_bytes(v, node)) ctx->n_attn_windows++;
    }
    if (!n_work) return CLLM_OK;
    if (ctx->cap < 4 * n_work) {
        vk_range *r = cllm_malloc((size_t)4 * (size_t)n_work * sizeof(*r));
        vk_range *w = cllm_malloc((size_t)2 * (size_t)n_work * sizeof(*w));
        if (!r || !w) {
            cllm_free(r);
            cllm_free(w);
            return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
        }
        cllm_free(ctx->reads);
        cllm_free(ctx->writes);
        ctx->reads = r;
        ctx->writes = w;
        ctx->cap = 4 * n_work;
    }
    if (ctx->cap_cur < n_work) {
        cllm_tensor **w = cllm_malloc((size_t)n_work * sizeof(*w));
        vk_nsig *s = cllm_malloc((size_t)n_work * sizeof(*s));
        if (!w || !s) {
            cllm_free(w);
            cllm_free(s);
            return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
        }
        cllm_free(ctx->cur_work);
        cllm_free(ctx->cur_sig);
        ctx->cur_work = w;
        ctx->cur_sig = s;
        ctx->cap_cur = n_work;
    }
    for (int i = 0, k = 0; i < g->n_nodes; i++) {
        if (!vk_has_work(g->nodes[i])) continue;
        ctx->cur_work[k] = g->nodes[i];
        nsig_of(&ctx->cur_sig[k++], g->nodes[i]);
    }

    /* the attention's state, in one allocation of this device (not a
     * buffer of pieces) */
    const size_t ws_need = vk_backend_get_workspace_size(be, g);
    const cllm_buffer *ws = be->workspace;
    if (ws_need && (!ws || cllm_buffer_buft(ws) != &v->buft || cllm_buffer_size(ws) < ws_need ||
                    cllm_buffer_size(ws) > vk_buft_get_max_size(&v->buft))) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: no workspace of %zu bytes in one allocation",
                          v->name, ws_need);
    }
    /* recordings bind the workspace: a new one records them anew */
    ctx->ws = ws_need ? ws->context : NULL;
    const uint64_t ws_serial = ctx->ws ? ctx->ws->serial : 0;
    if (ws_need && ws_serial != ctx->ws_serial) {
        for (int i = 0; i < VK_RECS; i++) ctx->recs[i].valid = false;
        ctx->ws_serial = ws_serial;
    }
    vk_rec *rec = rec_for(ctx, g);
    rec->used = ++ctx->n_computes;
    /* its command buffers, submitted before, may still run */
    VkResult r = vk_wait_value(v, rec->busy);
    if (r != VK_SUCCESS) {
        rec->valid = false;
        return cllm_error(CLLM_ERR_BACKEND, "%s: waiting failed: %s", v->name, vk_result_str(r));
    }
    const vk_plan plan = plan_of(ctx, rec, n_work);
    const bool again = plan == VK_REPLAY;
    if (!rec_reserve(rec, n_work)) {
        rec->valid = false;
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
    }
    if (plan == VK_RECORD_FRESH) memset(rec->dyn, 0, (size_t)n_work * sizeof(bool));
    /* the recording now stands for these nodes, valid once they ran */
    rec->valid = false;
    rec->n_work = n_work;
    memcpy(rec->work, ctx->cur_work, (size_t)n_work * sizeof(*rec->work));
    memcpy(rec->sig, ctx->cur_sig, (size_t)n_work * sizeof(*rec->sig));

    bool submitted = false;
    r = again ? replay(ctx, rec, &submitted) : record_all(ctx, rec, &submitted);
    if (r == VK_SUCCESS && !v->timeline) {
        r = vkWaitForFences(v->d, 1, &ctx->fence, VK_TRUE, UINT64_MAX);
        vkResetFences(v->d, 1, &ctx->fence);
    } else if (r == VK_SUCCESS && !ctx->async) {
        pthread_mutex_lock(&v->lock);
        r = vk_async_complete(v, ctx->last);
        pthread_mutex_unlock(&v->lock);
        ctx->waited = ctx->last;
    } else if (r != VK_SUCCESS && submitted) {
        /* what went to the queue must be done before its command buffers
         * are recorded again */
        pthread_mutex_lock(&v->lock);
        vkDeviceWaitIdle(v->d);
        pthread_mutex_unlock(&v->lock);
    }
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: compute failed: %s", v->name, vk_result_str(r));
    }
    rec->valid = ctx->replay;
    ctx->n_nodes_computed += (uint64_t)n_work;
    if (again) {
        ctx->n_replayed++;
    } else {
        ctx->n_recorded++;
    }
    return CLLM_OK;
}

/* ---- asynchronous work ------------------------------------------------- */

static cllm_status vk_backend_synchronize(cllm_backend *be) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    if (ctx->last <= ctx->waited) return CLLM_OK;
    pthread_mutex_lock(&v->lock);
    const VkResult r = vk_async_complete(v, ctx->last);
    pthread_mutex_unlock(&v->lock);
    ctx->waited = ctx->last;
    ctx->n_waits++;
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: waiting for queued work failed: %s", v->name,
                          vk_result_str(r));
    }
    return CLLM_OK;
}

/* The device buffer of t, or NULL (a tensor of another device's memory). */
static vk_buf *async_buf(const vk_be *ctx, const cllm_tensor *t) {
    return in_device(ctx->v, t) ? t->buffer->context : NULL;
}

static cllm_status vk_backend_set_tensor_async(cllm_backend *be, cllm_tensor *t, const void *data,
                                               size_t offset, size_t size) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    vk_buf *b = async_buf(ctx, t);
    if (!b) {
        CLLM_TRY(vk_backend_synchronize(be));
        cllm_tensor_set(t, data, offset, size);
        return CLLM_OK;
    }
    pthread_mutex_lock(&v->lock);
    const bool behind = ctx->last > ctx->waited;
    uint64_t value = 0;
    const VkResult r =
        vk_async_upload(v, b, vk_tensor_offset(t) + offset, data, size, ctx->last, &value);
    pthread_mutex_unlock(&v->lock);
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: an upload of %s failed: %s", v->name, t->name,
                          vk_result_str(r));
    }
    ctx->n_up++;
    if (b->map) {
        ctx->waited = CLLM_MAX(ctx->waited, value); /* it waited, then wrote */
    } else {
        ctx->n_up_behind += behind;
        ctx->last = CLLM_MAX(ctx->last, value);
    }
    return CLLM_OK;
}

static cllm_status vk_backend_get_tensor_async(cllm_backend *be, const cllm_tensor *t, void *data,
                                               size_t offset, size_t size) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    vk_buf *b = async_buf(ctx, t);
    if (!b) {
        CLLM_TRY(vk_backend_synchronize(be));
        cllm_tensor_get(t, data, offset, size);
        return CLLM_OK;
    }
    pthread_mutex_lock(&v->lock);
    const bool behind = ctx->last > ctx->waited;
    uint64_t value = 0;
    VkResult r = vk_async_download(v, b, vk_tensor_offset(t) + offset, data, size, &value);
    /* from mapped memory after what was waited for already: at once */
    if (r == VK_SUCCESS && value <= ctx->waited) r = vk_async_complete(v, value);
    pthread_mutex_unlock(&v->lock);
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: a download of %s failed: %s", v->name, t->name,
                          vk_result_str(r));
    }
    ctx->n_down++;
    ctx->n_down_behind += behind;
    ctx->last = CLLM_MAX(ctx->last, value);
    return CLLM_OK;
}

static const struct cllm_backend_i k_vk_backend_iface = {
    .get_name = vk_backend_get_name,
    .free = vk_backend_free,
    .get_workspace_size = vk_backend_get_workspace_size,
    .graph_compute = vk_backend_graph_compute,
    .synchronize = vk_backend_synchronize,
    .set_tensor_async = vk_backend_set_tensor_async,
    .get_tensor_async = vk_backend_get_tensor_async,
};

cllm_status vk_backend_new(vk_dev *v, cllm_backend **out) {
    cllm_backend *be = cllm_calloc(1, sizeof(*be));
    vk_be *ctx = cllm_calloc(1, sizeof(*ctx));
    if (!be || !ctx) {
        cllm_free(be);
        cllm_free(ctx);
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
    }
    ctx->v = v;
    const char *replay = getenv("CLLM_VULKAN_REPLAY");
    ctx->replay = !(replay && !strcmp(replay, "0"));
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = v->queue_family};
    VkResult r = vkCreateCommandPool(v->d, &cpi, NULL, &ctx->pool);
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = vkCreateFence(v->d, &fci, NULL, &ctx->fence);
    be->iface = k_vk_backend_iface;
    /* without timeline semaphores, or CLLM_VULKAN_ASYNC=0: compute waits,
     * transfers are the buffers' own (synchronous) */
    const char *async = getenv("CLLM_VULKAN_ASYNC");
    ctx->async = v->timeline && !(async && !strcmp(async, "0"));
    if (!ctx->async) {
        be->iface.synchronize = NULL;
        be->iface.set_tensor_async = NULL;
        be->iface.get_tensor_async = NULL;
    }
    be->device = &v->dev;
    be->context = ctx;
    if (r != VK_SUCCESS) {
        vk_backend_free(be);
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot create a backend: %s", v->name,
                          vk_result_str(r));
    }
    *out = be;
    return CLLM_OK;
}
