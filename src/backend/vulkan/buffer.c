/*
 * The Vulkan device's memory: buffers of exactly the planned size, mapped
 * where device-local memory is host-visible, else written and read through
 * a staging buffer and copy commands. A buffer above maxMemoryAllocationSize
 * is made of several (the generic layer's pieces, backend.h).
 *
 * Test knobs, to meet the limits of a large GPU on a small device:
 * CLLM_VULKAN_MAX_ALLOC=SIZE and CLLM_VULKAN_MAX_RANGE=SIZE lower the
 * allocation limit and the storage-buffer range the backend uses (never
 * above the device's); cllm_registry_configure("vulkan", ...) sets the same
 * as max_alloc= and max_range= (0: the device's own), and fail_alloc=N makes
 * the N-th vkAllocateMemory of a buffer from now fail with
 * VK_ERROR_OUT_OF_DEVICE_MEMORY (0: none), as the test device's fail_alloc.
 */
#include "backend/vulkan/vk-internal.h"
#include "core/hostmem.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

const char *vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "success";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver";
    default: return "error";
    }
}

size_t vk_allocated_total(const vk_dev *v) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += cllm_device_allocated(&v->dev, k);
    return n;
}

/* ---- transfers --------------------------------------------------------- */

/* Runs what `record` records into the transfer command buffer, and waits.
 * Called with v->lock held. */
static VkResult xfer_run(vk_dev *v, void (*record)(VkCommandBuffer, void *), void *arg) {
    VkResult r = vkResetCommandBuffer(v->xfer_cb, 0);
    if (r != VK_SUCCESS) return r;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if ((r = vkBeginCommandBuffer(v->xfer_cb, &bi)) != VK_SUCCESS) return r;
    record(v->xfer_cb, arg);
    if ((r = vkEndCommandBuffer(v->xfer_cb)) != VK_SUCCESS) return r;
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .commandBufferCount = 1,
                             .pCommandBuffers = &v->xfer_cb};
    if ((r = vkQueueSubmit(v->queue, 1, &si, v->xfer_fence)) != VK_SUCCESS) return r;
    r = vkWaitForFences(v->d, 1, &v->xfer_fence, VK_TRUE, UINT64_MAX);
    vkResetFences(v->d, 1, &v->xfer_fence);
    return r;
}

typedef struct copy_args {
    VkBuffer src, dst;
    VkBufferCopy region;
} copy_args;

static void record_copy(VkCommandBuffer cb, void *arg) {
    copy_args *c = arg;
    vkCmdCopyBuffer(cb, c->src, c->dst, 1, &c->region);
}

typedef struct fill_args {
    VkBuffer b;
    VkDeviceSize size;
    uint32_t word;
} fill_args;

static void record_fill(VkCommandBuffer cb, void *arg) {
    fill_args *f = arg;
    vkCmdFillBuffer(cb, f->b, 0, f->size, f->word);
}

/* ---- asynchronous transfers -------------------------------------------- */

VkResult vk_async_init(vk_dev *v) {
    if (!v->timeline) return VK_SUCCESS;
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = v->xfer_pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = VK_ASYNC_CBS};
    return vkAllocateCommandBuffers(v->d, &cai, v->async_cbs);
}

VkResult vk_wait_value(vk_dev *v, uint64_t value) {
    if (!v->timeline || value == 0) return VK_SUCCESS;
    const VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                    .semaphoreCount = 1,
                                    .pSemaphores = &v->timeline,
                                    .pValues = &value};
    return vkWaitSemaphores(v->d, &wi, UINT64_MAX);
}

/* Waits for the oldest queued transfer and completes it. */
static VkResult pend_complete_oldest(vk_dev *v) {
    vk_pending *p = &v->pend[v->pend_first];
    const VkResult r = vk_wait_value(v, p->value);
    if (r != VK_SUCCESS) return r;
    if (p->host) memcpy(p->host, p->from, p->size);
    v->pend_first = (v->pend_first + 1) % VK_PENDING;
    v->n_pend--;
    return VK_SUCCESS;
}

VkResult vk_async_complete(vk_dev *v, uint64_t value) {
    VkResult r = vk_wait_value(v, value);
    while (r == VK_SUCCESS && v->n_pend && v->pend[v->pend_first].value <= value) {
        r = pend_complete_oldest(v);
    }
    return r;
}

/* Every queued transfer completed (before the staging buffer is used
 * whole). */
static VkResult pend_drain(vk_dev *v) {
    VkResult r = VK_SUCCESS;
    while (r == VK_SUCCESS && v->n_pend) r = pend_complete_oldest(v);
    if (r == VK_SUCCESS) v->ring_head = 0;
    return r;
}

static VkResult pend_push(vk_dev *v, const vk_pending *p) {
    VkResult r = VK_SUCCESS;
    if (v->n_pend == VK_PENDING) r = pend_complete_oldest(v);
    if (r == VK_SUCCESS) v->pend[(v->pend_first + v->n_pend++) % VK_PENDING] = *p;
    return r;
}

/* `size` bytes of the staging buffer (at most all of it) that no queued
 * transfer uses: those that do are waited for, oldest first. */
static VkResult ring_alloc(vk_dev *v, size_t size, size_t *off) {
    size_t at = (v->ring_head + 63) & ~(size_t)63;
    if (at + size > VK_STAGING_BYTES) at = 0;
    for (;;) {
        bool busy = false;
        for (int i = 0; i < v->n_pend && !busy; i++) {
            const vk_pending *p = &v->pend[(v->pend_first + i) % VK_PENDING];
            busy = p->staged && p->off < at + size && at < p->off + p->size;
        }
        if (!busy) break;
        const VkResult r = pend_complete_oldest(v);
        if (r != VK_SUCCESS) return r;
    }
    *off = at;
    v->ring_head = at + size;
    return VK_SUCCESS;
}

/* Queues a copy of `size` bytes between buffers, signalling the next
 * timeline value (*value). */
static VkResult submit_copy(vk_dev *v, VkBuffer src, size_t src_off, VkBuffer dst, size_t dst_off,
                            size_t size, uint64_t *value) {
    const int i = v->async_cb_next;
    v->async_cb_next = (i + 1) % VK_ASYNC_CBS;
    VkResult r = vk_wait_value(v, v->async_cb_value[i]); /* its last use */
    const VkCommandBuffer cb = v->async_cbs[i];
    if (r == VK_SUCCESS) r = vkResetCommandBuffer(cb, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS) return r;
    /* after what ran before on the queue: its writes, and its reads of
     * what the copy overwrites (an execution dependency) */
    const VkMemoryBarrier before = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, NULL, 0, NULL);
    const VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off, .size = size};
    vkCmdCopyBuffer(cb, src, dst, 1, &region);
    /* for the dispatches, the transfers and the host after it */
    const VkMemoryBarrier after = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                   .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                                   .dstAccessMask =
                                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                       VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                             VK_PIPELINE_STAGE_HOST_BIT,
                         0, 1, &after, 0, NULL, 0, NULL);
    if ((r = vkEndCommandBuffer(cb)) != VK_SUCCESS) return r;
    const uint64_t val = v->tl_last + 1;
    const VkTimelineSemaphoreSubmitInfo ti = {.sType =
                                                  VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                              .signalSemaphoreValueCount = 1,
                                              .pSignalSemaphoreValues = &val};
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .pNext = &ti,
                             .commandBufferCount = 1,
                             .pCommandBuffers = &cb,
                             .signalSemaphoreCount = 1,
                             .pSignalSemaphores = &v->timeline};
    if ((r = vkQueueSubmit(v->queue, 1, &si, VK_NULL_HANDLE)) != VK_SUCCESS) return r;
    v->tl_last = val;
    v->async_cb_value[i] = val;
    *value = val;
    return VK_SUCCESS;
}

VkResult vk_async_upload(vk_dev *v, vk_buf *b, size_t off, const void *data, size_t size,
                         uint64_t after, uint64_t *value) {
    if (b->map) {
        /* the host writes device memory: what was queued before may still
         * read or write these bytes */
        const VkResult r = vk_async_complete(v, after);
        if (r == VK_SUCCESS) memcpy((char *)b->map + off, data, size);
        *value = after;
        return r;
    }
    /* through the staging buffer, in pieces of half of it (one is copied
     * while the next is written) */
    VkResult r = VK_SUCCESS;
    for (size_t done = 0; done < size && r == VK_SUCCESS;) {
        const size_t n = CLLM_MIN(size - done, VK_STAGING_BYTES / 2);
        size_t at = 0;
        r = ring_alloc(v, n, &at);
        if (r != VK_SUCCESS) break;
        memcpy((char *)v->staging_map + at, (const char *)data + done, n);
        r = submit_copy(v, v->staging, at, b->b, off + done, n, value);
        const vk_pending p = {.value = *value,
                              .off = at,
                              .size = n,
                              .staged = true,
                              .from = (char *)v->staging_map + at};
        if (r == VK_SUCCESS) r = pend_push(v, &p);
        done += n;
    }
    return r;
}

VkResult vk_async_download(vk_dev *v, vk_buf *b, size_t off, void *data, size_t size,
                           uint64_t *value) {
    if (b->map) {
        /* copied from the mapped memory once everything queued is done */
        const vk_pending p = {.value = v->tl_last,
                              .off = 0,
                              .size = size,
                              .host = data,
                              .from = (char *)b->map + off};
        *value = v->tl_last;
        return pend_push(v, &p);
    }
    VkResult r = VK_SUCCESS;
    for (size_t done = 0; done < size && r == VK_SUCCESS;) {
        const size_t n = CLLM_MIN(size - done, VK_STAGING_BYTES / 2);
        size_t at = 0;
        r = ring_alloc(v, n, &at);
        if (r == VK_SUCCESS) r = submit_copy(v, b->b, off + done, v->staging, at, n, value);
        const vk_pending p = {.value = *value,
                              .off = at,
                              .size = n,
                              .staged = true,
                              .host = (char *)data + done,
                              .from = (char *)v->staging_map + at};
        if (r == VK_SUCCESS) r = pend_push(v, &p);
        done += n;
    }
    return r;
}

/* Copies `size` bytes between host memory and byte `off` of buffer b
 * through the staging buffer, in pieces. Device errors are logged (the
 * buffer interface's set and get return nothing). */
static void staging_copy(vk_dev *v, vk_buf *b, size_t off, void *host, size_t size, bool upload) {
    pthread_mutex_lock(&v->lock);
    /* the staging bytes of queued transfers are theirs until they are done */
    const VkResult rd = pend_drain(v);
    if (rd != VK_SUCCESS) {
        cllm_log(CLLM_LOG_ERROR, "%s: waiting for transfers failed: %s", v->name,
                 vk_result_str(rd));
        size = 0;
    }
    for (size_t done = 0; done < size;) {
        const size_t n = CLLM_MIN(size - done, VK_STAGING_BYTES);
        copy_args c = {.region = {.size = n}};
        if (upload) {
            memcpy(v->staging_map, (char *)host + done, n);
            c.src = v->staging;
            c.dst = b->b;
            c.region.dstOffset = off + done;
        } else {
            c.src = b->b;
            c.dst = v->staging;
            c.region.srcOffset = off + done;
        }
        const VkResult r = xfer_run(v, record_copy, &c);
        if (r != VK_SUCCESS) {
            cllm_log(CLLM_LOG_ERROR, "%s: a staging copy failed: %s", v->name, vk_result_str(r));
            break;
        }
        if (!upload) memcpy((char *)host + done, v->staging_map, n);
        done += n;
    }
    pthread_mutex_unlock(&v->lock);
}

/* ---- limits and faults ------------------------------------------------- */

/* The least range max_range= sets: a lowered range still binds a few
 * aligned rows. */
#define VK_MIN_RANGE ((size_t)4096)

static void set_max_alloc(vk_dev *v, size_t bytes) {
    v->max_alloc = bytes ? CLLM_MIN((VkDeviceSize)bytes, v->hw_max_alloc) : v->hw_max_alloc;
}

static void set_max_range(vk_dev *v, size_t bytes) {
    const size_t hw = v->props.limits.maxStorageBufferRange;
    v->max_range = (uint32_t)(bytes ? CLLM_MIN(CLLM_MAX(bytes, VK_MIN_RANGE), hw) : hw);
}

static size_t env_size(const char *name) {
    const char *e = getenv(name);
    size_t n = 0;
    if (e && *e && !cllm_parse_size(e, &n)) {
        CLLM_LOG_WARN("vulkan: %s=%s is not a size: ignored", name, e);
        n = 0;
    }
    return n;
}

void vk_mem_init(vk_dev *v) {
    v->hw_max_alloc = v->max_alloc;
    set_max_alloc(v, env_size("CLLM_VULKAN_MAX_ALLOC"));
    set_max_range(v, env_size("CLLM_VULKAN_MAX_RANGE"));
    atomic_store(&v->allocs_left, 0);
}

cllm_status vk_mem_set_params(vk_dev *devs, int n, const char *params) {
    bool set_alloc = false, set_range = false, set_fail = false, set_int8 = false, int8 = false;
    size_t max_alloc = 0, max_range = 0;
    long fail = 0;
    char item[128];
    for (const char *p = params ? params : ""; *p;) {
        const size_t len = strcspn(p, ",");
        if (len >= sizeof(item)) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "vulkan: option too long in \"%s\"", params);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        p += len + (p[len] != '\0');
        if (!len) continue;
        char *eq = strchr(item, '=');
        if (!eq) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "vulkan: \"%s\" is not key=value", item);
        }
        *eq = '\0';
        const char *key = item, *val = eq + 1;
        bool ok;
        if (!strcmp(key, "max_alloc")) {
            ok = set_alloc = cllm_parse_size(val, &max_alloc);
        } else if (!strcmp(key, "max_range")) {
            ok = set_range = cllm_parse_size(val, &max_range);
        } else if (!strcmp(key, "fail_alloc")) {
            char *end;
            errno = 0;
            fail = strtol(val, &end, 10);
            ok = set_fail = !errno && end != val && !*end && fail >= 0 && fail <= 1000000000;
        } else if (!strcmp(key, "int8")) {
            ok = set_int8 = !strcmp(val, "0") || !strcmp(val, "1");
            int8 = !strcmp(val, "1");
        } else {
            return cllm_error(
                CLLM_ERR_INVALID_ARG,
                "vulkan: unknown option \"%s\" (max_alloc, max_range, fail_alloc, int8)", key);
        }
        if (!ok) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "vulkan: bad value \"%s\" for %s", val, key);
        }
    }
    for (int i = 0; i < n; i++) {
        if (set_alloc) set_max_alloc(&devs[i], max_alloc);
        if (set_range) set_max_range(&devs[i], max_range);
        if (set_fail) atomic_store(&devs[i].allocs_left, (int)fail);
        if (set_int8) devs[i].int8 = int8 && devs[i].has_int8;
    }
    return CLLM_OK;
}

/* vkAllocateMemory, or the failure fail_alloc= asked for. */
static VkResult alloc_memory(vk_dev *v, const VkMemoryAllocateInfo *ai, VkDeviceMemory *mem) {
    int left = atomic_load(&v->allocs_left);
    while (left > 0 && !atomic_compare_exchange_weak(&v->allocs_left, &left, left - 1)) {
    }
    if (left == 1) return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    return vkAllocateMemory(v->d, ai, NULL, mem);
}

/* ---- buffers ----------------------------------------------------------- */

static vk_dev *buf_dev(const cllm_buffer *buf) { return dev_of(buf->buft->device); }

static void vk_buffer_free(cllm_buffer *buf) {
    vk_buf *b = buf->context;
    if (!b) return;
    vk_dev *v = buf_dev(buf);
    if (b->map) vkUnmapMemory(v->d, b->mem);
    vkDestroyBuffer(v->d, b->b, NULL);
    vkFreeMemory(v->d, b->mem, NULL);
    cllm_free(b);
}

/* Mapped memory: its address; else an address range that does not exist,
 * which only gives each tensor its offset (as a measure buffer's does). */
static void *vk_buffer_get_base(const cllm_buffer *buf) {
    const vk_buf *b = buf->context;
    if (b && b->map) return b->map;
    return (void *)(uintptr_t)buf_dev(buf)->alignment;
}

size_t vk_tensor_offset(const cllm_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)cllm_buffer_base(t->buffer));
}

static void vk_buffer_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                                 size_t size) {
    vk_buf *b = buf->context;
    if (b->map) {
        memcpy((char *)t->data + offset, data, size);
        return;
    }
    staging_copy(buf_dev(buf), b, vk_tensor_offset(t) + offset, (void *)(uintptr_t)data, size,
                 true);
}

static void vk_buffer_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                                 size_t size) {
    vk_buf *b = buf->context;
    if (b->map) {
        memcpy(data, (const char *)t->data + offset, size);
        return;
    }
    staging_copy(buf_dev(buf), b, vk_tensor_offset(t) + offset, data, size, false);
}

static void vk_buffer_clear(cllm_buffer *buf, uint8_t value) {
    vk_buf *b = buf->context;
    if (!b) return;
    if (b->map) {
        memset(b->map, value, buf->size);
        return;
    }
    vk_dev *v = buf_dev(buf);
    fill_args f = {.b = b->b, .size = b->vk_size, .word = value * 0x01010101u};
    pthread_mutex_lock(&v->lock);
    const VkResult r = xfer_run(v, record_fill, &f);
    pthread_mutex_unlock(&v->lock);
    if (r != VK_SUCCESS)
        cllm_log(CLLM_LOG_ERROR, "%s: clearing a buffer failed: %s", v->name, vk_result_str(r));
}

static const struct cllm_buffer_i k_vk_buffer_iface = {
    .free_buffer = vk_buffer_free,
    .get_base = vk_buffer_get_base,
    .init_tensor = NULL, /* no per-tensor state */
    .set_tensor = vk_buffer_set_tensor,
    .get_tensor = vk_buffer_get_tensor,
    .clear = vk_buffer_clear,
};

/* Buffer serials: a recorded graph names its buffers by them, since a
 * freed buffer's handles and host structs may come back for another. */
static _Atomic uint64_t g_serial;

const char *vk_buft_get_name(const cllm_buffer_type *buft) { return dev_of(buft->device)->name; }

cllm_status vk_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out) {
    vk_dev *v = dev_of(buft->device);
    const size_t used = vk_allocated_total(v);
    const size_t avail = used < v->heap_size ? (size_t)v->heap_size - used : 0;
    if (size > avail) {
        return cllm_error(
            CLLM_ERR_DEVICE_MEMORY,
            "%s: cannot allocate a %zu-byte buffer: %zu of %zu bytes of its heap free", v->name,
            size, avail, (size_t)v->heap_size);
    }
    vk_buf *b = NULL;
    if (size > 0) {
        b = cllm_calloc(1, sizeof(*b));
        if (!b) return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
        b->vk_size = (size + 3) & ~(VkDeviceSize)3;
        b->serial = atomic_fetch_add(&g_serial, 1) + 1;
        const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                        .size = b->vk_size,
                                        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                        .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
        VkResult r = vkCreateBuffer(v->d, &bci, NULL, &b->b);
        if (r == VK_SUCCESS) {
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(v->d, b->b, &req);
            const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                             .allocationSize = req.size,
                                             .memoryTypeIndex = v->mem_type};
            r = alloc_memory(v, &ai, &b->mem);
        }
        if (r == VK_SUCCESS) r = vkBindBufferMemory(v->d, b->b, b->mem, 0);
        if (r == VK_SUCCESS && v->mapped)
            r = vkMapMemory(v->d, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) {
            if (b->mem) vkFreeMemory(v->d, b->mem, NULL);
            if (b->b) vkDestroyBuffer(v->d, b->b, NULL);
            cllm_free(b);
            return cllm_error(CLLM_ERR_DEVICE_MEMORY, "%s: cannot allocate a %zu-byte buffer: %s",
                              v->name, size, vk_result_str(r));
        }
    }
    cllm_buffer *buf = cllm_buffer_init(buft, k_vk_buffer_iface, b, size);
    if (!buf) {
        if (b) {
            if (b->map) vkUnmapMemory(v->d, b->mem);
            vkDestroyBuffer(v->d, b->b, NULL);
            vkFreeMemory(v->d, b->mem, NULL);
            cllm_free(b);
        }
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", v->name);
    }
    *out = buf;
    return CLLM_OK;
}

size_t vk_buft_get_alignment(const cllm_buffer_type *buft) {
    return dev_of(buft->device)->alignment;
}

/* One allocation's limit: a larger buffer is made of pieces, each one
 * allocation (backend.h: cllm_buffer_type_alloc). */
size_t vk_buft_get_max_size(const cllm_buffer_type *buft) {
    const vk_dev *v = dev_of(buft->device);
    return (size_t)CLLM_MIN(v->max_alloc, (VkDeviceSize)SIZE_MAX);
}

bool vk_buft_is_host(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return false; /* device memory, even where it is mapped */
}
