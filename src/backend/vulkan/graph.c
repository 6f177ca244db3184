/*
 * The Vulkan backend: records the nodes of a graph into one command buffer
 * (a barrier between dependent dispatches), submits it and waits on a fence.
 */
#include "backend/vulkan/vk-internal.h"
#include "core/hostmem.h"

#include <string.h>

/* ---- recording --------------------------------------------------------- */

typedef struct vk_range {
    VkBuffer b;
    size_t lo, hi;
} vk_range;

typedef struct vk_be {
    vk_dev *v;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    /* ranges read and written since the last barrier */
    vk_range *reads, *writes;
    int n_reads, n_writes, cap;
} vk_be;

typedef struct vk_bind {
    VkDescriptorBufferInfo info;
    uint32_t off; /* the tensor's offset within the bound range */
    vk_range range;
} vk_bind;

/* The binding of tensor t: from its offset aligned down to
 * minStorageBufferOffsetAlignment, at most maxStorageBufferRange bytes (the
 * shaders address t from `off` within it; vk_op_supported has checked that
 * t, or each window of it that record_node binds, lies within the range). */
static vk_bind bind_of(const vk_dev *v, const cllm_tensor *t) {
    const vk_buf *b = t->buffer->context;
    const size_t off = vk_tensor_offset(t);
    const size_t align = v->props.limits.minStorageBufferOffsetAlignment;
    const size_t start = off - off % align;
    const VkDeviceSize range = CLLM_MIN(b->vk_size - start, (VkDeviceSize)v->max_range);
    return (vk_bind){.info = {.buffer = b->b, .offset = start, .range = range},
                     .off = (uint32_t)(off - start),
                     .range = {.b = b->b, .lo = off, .hi = off + cllm_nbytes(t)}};
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
 * result, 4: source 3; a binding without a tensor gets the result's). */
static void binds_of(const vk_dev *v, const cllm_tensor *node, vk_bind binds[5]) {
    binds[3] = bind_of(v, node);
    for (int i = 0; i < 3; i++) binds[i] = node->src[i] ? bind_of(v, node->src[i]) : binds[3];
    binds[4] = node->src[3] ? bind_of(v, node->src[3]) : binds[3];
}

/* One dispatch of `node` (the node itself or a window of it): its pipeline,
 * bindings and push constants. `row0`: the first row of src[0] that a
 * get_rows window binds (the shader skips the ids outside it). */
static void dispatch(vk_be *be, const cllm_tensor *node, uint32_t row0) {
    vk_dev *v = be->v;
    vk_push pc = {0};
    uint32_t g[3];
    const vk_pipe pipe = vk_node_dispatch(node, &pc, g);
    vk_bind binds[5];
    binds_of(v, node, binds);
    for (int i = 0; i < 4; i++) pc.offs[i] = binds[i].off;
    if (node->op == CLLM_OP_ATTN) pc.p[1] = binds[4].off;
    if (node->op == CLLM_OP_GET_ROWS) pc.p[0] = row0;
    VkWriteDescriptorSet w[5];
    for (int i = 0; i < 5; i++) {
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &binds[i].info};
    }
    vkCmdBindPipeline(be->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->pipes[pipe]);
    vkCmdPushDescriptorSetKHR(be->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->layout, 0, 5, w);
    vkCmdPushConstants(be->cb, v->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    vkCmdDispatch(be->cb, g[0], g[1], g[2]);
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
            dispatch(be, &wd, (uint32_t)r0);
        }
    }
}

static void record_node(vk_be *be, cllm_tensor *node) {
    vk_dev *v = be->v;
    /* the barrier: from the whole tensors' bytes, also for a node
     * recorded in windows (its windows never depend on each other) */
    vk_bind binds[5];
    binds_of(v, node, binds);
    const cllm_tensor *srcs[5] = {node->src[0], node->src[1], node->src[2], NULL, node->src[3]};
    bool barrier = overlaps(be->writes, be->n_writes, &binds[3].range) ||
                   overlaps(be->reads, be->n_reads, &binds[3].range);
    for (int i = 0; i < 5 && !barrier; i++) {
        if (srcs[i]) barrier = overlaps(be->writes, be->n_writes, &binds[i].range);
    }
    if (barrier) {
        const VkMemoryBarrier mb = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
        vkCmdPipelineBarrier(be->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
        be->n_reads = be->n_writes = 0;
    }
    for (int i = 0; i < 5; i++) {
        if (srcs[i]) be->reads[be->n_reads++] = binds[i].range;
    }
    be->writes[be->n_writes++] = binds[3].range;

    const bool windows =
        (node->op == CLLM_OP_GET_ROWS || node->op == CLLM_OP_MUL_MAT) &&
        (vk_window_rows(v, node->src[0]) < node->src[0]->ne[1] ||
         (node->op == CLLM_OP_MUL_MAT && (vk_window_rows(v, node->src[1]) < node->src[1]->ne[1] ||
                                          vk_window_rows(v, node) < node->ne[1])));
    if (windows) {
        dispatch_windows(be, node);
    } else {
        dispatch(be, node, 0);
    }
}

static const char *vk_backend_get_name(const cllm_backend *be) { return dev_of(be->device)->name; }

static void vk_backend_free(cllm_backend *be) {
    vk_be *ctx = be->context;
    vk_dev *v = ctx->v;
    if (ctx->fence) vkDestroyFence(v->d, ctx->fence, NULL);
    if (ctx->pool) vkDestroyCommandPool(v->d, ctx->pool, NULL);
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
    }
    if (!n_work) return CLLM_OK;
    if (ctx->cap < 4 * n_work) {
        vk_range *r = cllm_malloc((size_t)4 * (size_t)n_work * sizeof(*r));
        vk_range *w = cllm_malloc((size_t)n_work * sizeof(*w));
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
    ctx->n_reads = ctx->n_writes = 0;
    VkResult r = vkResetCommandBuffer(ctx->cb, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(ctx->cb, &bi);
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot record: %s", v->name, vk_result_str(r));
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (vk_has_work(g->nodes[i])) record_node(ctx, g->nodes[i]);
    }
    if ((r = vkEndCommandBuffer(ctx->cb)) != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot record: %s", v->name, vk_result_str(r));
    }
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .commandBufferCount = 1,
                             .pCommandBuffers = &ctx->cb};
    pthread_mutex_lock(&v->lock);
    r = vkQueueSubmit(v->queue, 1, &si, ctx->fence);
    pthread_mutex_unlock(&v->lock);
    if (r == VK_SUCCESS) {
        r = vkWaitForFences(v->d, 1, &ctx->fence, VK_TRUE, UINT64_MAX);
        vkResetFences(v->d, 1, &ctx->fence);
    }
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: compute failed: %s", v->name, vk_result_str(r));
    }
    return CLLM_OK;
}

static const struct cllm_backend_i k_vk_backend_iface = {
    .get_name = vk_backend_get_name,
    .free = vk_backend_free,
    .get_workspace_size = NULL, /* no workspace */
    .graph_compute = vk_backend_graph_compute,
    .synchronize = NULL, /* compute waits for its fence */
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
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = v->queue_family};
    VkResult r = vkCreateCommandPool(v->d, &cpi, NULL, &ctx->pool);
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = ctx->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(v->d, &cai, &ctx->cb);
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = vkCreateFence(v->d, &fci, NULL, &ctx->fence);
    be->iface = k_vk_backend_iface;
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
