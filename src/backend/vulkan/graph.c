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

static vk_bind bind_of(const vk_dev *v, const cllm_tensor *t) {
    const vk_buf *b = t->buffer->context;
    const size_t off = vk_tensor_offset(t);
    const size_t align = v->props.limits.minStorageBufferOffsetAlignment;
    const size_t start = off - off % align;
    const VkDeviceSize range =
        CLLM_MIN(b->vk_size - start, (VkDeviceSize)v->props.limits.maxStorageBufferRange);
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

static void record_node(vk_be *be, cllm_tensor *node) {
    vk_dev *v = be->v;
    vk_push pc = {0};
    uint32_t g[3];
    const vk_pipe pipe = vk_node_dispatch(node, &pc, g);
    /* bindings 0-2: sources 0-2, 3: the result, 4: source 3 */
    vk_bind binds[5];
    binds[3] = bind_of(v, node);
    for (int i = 0; i < 3; i++) binds[i] = node->src[i] ? bind_of(v, node->src[i]) : binds[3];
    binds[4] = node->src[3] ? bind_of(v, node->src[3]) : binds[3];
    for (int i = 0; i < 4; i++) pc.offs[i] = binds[i].off;
    if (node->op == CLLM_OP_ATTN) pc.p[1] = binds[4].off;
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
