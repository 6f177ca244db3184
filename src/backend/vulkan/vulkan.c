/*
 * The Vulkan backend, a loadable module (cllm-backend-vulkan.so): one device
 * "vulkanN" per physical device with a compute queue, its memory as buffers
 * of exactly the planned size, and a backend that records the nodes of a
 * graph it supports into one command buffer (a barrier between dependent
 * dispatches), submits it and waits on a fence.
 *
 * The module opens the Vulkan loader itself (dlopen of libvulkan.so.1): a
 * machine without one loads the module and finds no device. The shaders
 * (GLSL, in shaders/) are compiled to SPIR-V at build time and embedded.
 *
 * Memory: device-local buffers. Where device-local memory is host-visible
 * (lavapipe, integrated GPUs) it is mapped and tensors are read and written
 * in place; else through a staging buffer of VK_STAGING_BYTES and a copy
 * command. CLLM_VULKAN_STAGING=1 takes the staging path everywhere (to test
 * it on a machine whose memory is host-visible).
 *
 * Environment: CLLM_VULKAN_VALIDATE=1 enables VK_LAYER_KHRONOS_validation
 * with a debug-utils messenger that logs each error (CLLM_LOG_ERROR,
 * "vulkan validation: ..."); CLLM_VULKAN_WG sets the workgroup size of the
 * reducing shaders (rms_norm, soft_max, mul_mat; default 64), so that the
 * tests run them with one subgroup per workgroup and with several.
 *
 * Not thread-safe beyond what the interfaces promise: one backend computes
 * at a time per backend object; transfers and submits of a device take its
 * lock.
 */
#include "backend/vulkan/vk-funcs.h"
#include "backend/backend-impl.h"
#include "core/hostmem.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.spv.h"
#include "binary.spv.h"
#include "concat.spv.h"
#include "cpy.spv.h"
#include "get_rows.spv.h"
#include "mul_mat.spv.h"
#include "rms_norm.spv.h"
#include "rope.spv.h"
#include "rope_table.spv.h"
#include "soft_max.spv.h"
#include "unary.spv.h"

#define VK_REG_NAME      "vulkan"
#define VK_MAX_DEVICES   8
#define VK_STAGING_BYTES ((size_t)4 << 20)
#define VK_WG_DEFAULT    64u
#define VK_GRID_MAX      65535u
#define VK_MIN_ALIGNMENT 64

/* ---- the loader -------------------------------------------------------- */

#define VK_DECLARE(name) static PFN_##name name;
VK_GLOBAL_FUNCS(VK_DECLARE)
VK_INSTANCE_FUNCS(VK_DECLARE)
VK_EXT_FUNCS(VK_DECLARE)
#undef VK_DECLARE
static PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;

/* ---- objects ----------------------------------------------------------- */

/* The shaders, one pipeline each; the types they read are push constants. */
typedef enum vk_pipe {
    VK_PIPE_BINARY,
    VK_PIPE_UNARY,
    VK_PIPE_CPY,
    VK_PIPE_GET_ROWS,
    VK_PIPE_RMS_NORM,
    VK_PIPE_SOFT_MAX,
    VK_PIPE_ROPE,
    VK_PIPE_MUL_MAT,
    VK_PIPE_CONCAT,
    VK_PIPE_ROPE_TABLE,
    VK_PIPE_ATTN,
    VK_PIPE_COUNT
} vk_pipe;

static const struct {
    const uint32_t *code;
    size_t size;
    bool reduces; /* takes the workgroup size as specialization constant 0 */
} k_shaders[VK_PIPE_COUNT] = {
    [VK_PIPE_BINARY] = {binary_spv, sizeof(binary_spv), false},
    [VK_PIPE_UNARY] = {unary_spv, sizeof(unary_spv), false},
    [VK_PIPE_CPY] = {cpy_spv, sizeof(cpy_spv), false},
    [VK_PIPE_GET_ROWS] = {get_rows_spv, sizeof(get_rows_spv), false},
    [VK_PIPE_RMS_NORM] = {rms_norm_spv, sizeof(rms_norm_spv), true},
    [VK_PIPE_SOFT_MAX] = {soft_max_spv, sizeof(soft_max_spv), true},
    [VK_PIPE_ROPE] = {rope_spv, sizeof(rope_spv), false},
    [VK_PIPE_MUL_MAT] = {mul_mat_spv, sizeof(mul_mat_spv), true},
    [VK_PIPE_CONCAT] = {concat_spv, sizeof(concat_spv), false},
    [VK_PIPE_ROPE_TABLE] = {rope_table_spv, sizeof(rope_table_spv), false},
    [VK_PIPE_ATTN] = {attn_spv, sizeof(attn_spv), true},
};
_Static_assert(sizeof(k_shaders) / sizeof(k_shaders[0]) == VK_PIPE_COUNT, "a shader per pipe");

/* Type codes of the shaders (shaders/common.glsl: T_*). */
enum {
    VK_T_F32,
    VK_T_F16,
    VK_T_BF16,
    VK_T_Q8_0,
    VK_T_Q4_0,
    VK_T_Q4_1,
    VK_T_I32,
    VK_T_Q5_0,
    VK_T_Q5_1,
    VK_T_Q2_K,
    VK_T_Q3_K,
    VK_T_Q4_K,
    VK_T_Q5_K,
    VK_T_Q6_K,
    VK_T_NONE
};

/* The push constants of every shader (shaders/common.glsl: Push), 128 bytes,
 * the least every device offers. */
typedef struct vk_push {
    uint32_t offs[4];
    uint32_t ne_a[4], nb_a[4];
    uint32_t ne_b[4], nb_b[4];
    uint32_t ne_d[4], nb_d[4];
    uint32_t p[4];
} vk_push;
_Static_assert(sizeof(vk_push) == 128, "push constants: 128 bytes");

typedef struct vk_dev {
    cllm_device dev;
    cllm_buffer_type buft;
    char name[16];
    char desc[1024];
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    uint32_t subgroup_size;
    VkDeviceSize max_alloc; /* maxMemoryAllocationSize */
    VkDeviceSize heap_size; /* the device-local heap the buffers come from */
    uint32_t heap_index;
    uint32_t mem_type;     /* device-local (and host-visible when mapped) */
    uint32_t staging_type; /* host-visible, coherent */
    bool mapped;           /* tensors are read and written in place */
    bool has_budget;       /* VK_EXT_memory_budget */
    bool software;         /* PHYSICAL_DEVICE_TYPE_CPU */
    size_t alignment;
    uint32_t wg; /* workgroup size of the reducing shaders */
    VkDevice d;
    VkQueue queue;
    uint32_t queue_family;
    pthread_mutex_t lock;    /* the queue, the transfer objects, the pipelines */
    VkCommandPool xfer_pool; /* transfers (staging copies, clears) */
    VkCommandBuffer xfer_cb;
    VkFence xfer_fence;
    VkBuffer staging;
    VkDeviceMemory staging_mem;
    void *staging_map;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipes[VK_PIPE_COUNT];
} vk_dev;

typedef struct vk_buf {
    VkBuffer b;
    VkDeviceMemory mem;
    void *map;
    VkDeviceSize vk_size; /* the VkBuffer's size: the bytes rounded up to whole words */
} vk_buf;

static struct {
    bool init;
    void *lib;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    int n_devices;
    vk_dev devs[VK_MAX_DEVICES];
} g_vk;

static cllm_backend_reg g_vk_reg;

static vk_dev *dev_of(const cllm_device *dev) { return (vk_dev *)dev->context; }

/* ---- helpers ----------------------------------------------------------- */

static const char *vk_result_str(VkResult r) {
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

static size_t allocated_total(const vk_dev *v) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += cllm_device_allocated(&v->dev, k);
    return n;
}

static int vk_type_of(cllm_type t) {
    switch (t) {
    case CLLM_TYPE_F32: return VK_T_F32;
    case CLLM_TYPE_F16: return VK_T_F16;
    case CLLM_TYPE_BF16: return VK_T_BF16;
    case CLLM_TYPE_Q8_0: return VK_T_Q8_0;
    case CLLM_TYPE_Q4_0: return VK_T_Q4_0;
    case CLLM_TYPE_Q4_1: return VK_T_Q4_1;
    case CLLM_TYPE_I32: return VK_T_I32;
    case CLLM_TYPE_Q5_0: return VK_T_Q5_0;
    case CLLM_TYPE_Q5_1: return VK_T_Q5_1;
    case CLLM_TYPE_Q2_K: return VK_T_Q2_K;
    case CLLM_TYPE_Q3_K: return VK_T_Q3_K;
    case CLLM_TYPE_Q4_K: return VK_T_Q4_K;
    case CLLM_TYPE_Q5_K: return VK_T_Q5_K;
    case CLLM_TYPE_Q6_K: return VK_T_Q6_K;
    default: return VK_T_NONE;
    }
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

/* Copies `size` bytes between host memory and byte `off` of buffer b
 * through the staging buffer, in pieces. Device errors are logged (the
 * buffer interface's set and get return nothing). */
static void staging_copy(vk_dev *v, vk_buf *b, size_t off, void *host, size_t size, bool upload) {
    pthread_mutex_lock(&v->lock);
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

static size_t tensor_offset(const cllm_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)cllm_buffer_base(t->buffer));
}

static void vk_buffer_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                                 size_t size) {
    vk_buf *b = buf->context;
    if (b->map) {
        memcpy((char *)t->data + offset, data, size);
        return;
    }
    staging_copy(buf_dev(buf), b, tensor_offset(t) + offset, (void *)(uintptr_t)data, size, true);
}

static void vk_buffer_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                                 size_t size) {
    vk_buf *b = buf->context;
    if (b->map) {
        memcpy(data, (const char *)t->data + offset, size);
        return;
    }
    staging_copy(buf_dev(buf), b, tensor_offset(t) + offset, data, size, false);
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

static const char *vk_buft_get_name(const cllm_buffer_type *buft) {
    return dev_of(buft->device)->name;
}

static cllm_status vk_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out) {
    vk_dev *v = dev_of(buft->device);
    const size_t used = allocated_total(v);
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
            r = vkAllocateMemory(v->d, &ai, NULL, &b->mem);
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

static size_t vk_buft_get_alignment(const cllm_buffer_type *buft) {
    return dev_of(buft->device)->alignment;
}

/* One allocation's limit: a larger buffer is refused with the limit named
 * (splitting it over several allocations is a later stage). */
static size_t vk_buft_get_max_size(const cllm_buffer_type *buft) {
    const vk_dev *v = dev_of(buft->device);
    return (size_t)CLLM_MIN(v->max_alloc, (VkDeviceSize)SIZE_MAX);
}

static bool vk_buft_is_host(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return false; /* device memory, even where it is mapped */
}

/* ---- what the device computes ------------------------------------------ */

static bool has_work(const cllm_tensor *t) {
    return cllm_op_has_compute(t->op) && cllm_nelements(t) > 0;
}

/* A tensor the shaders can address: 32-bit byte offsets and strides within
 * one bound range of at most maxStorageBufferRange. */
static bool addressable(const vk_dev *v, const cllm_tensor *t) {
    if (!t) return true;
    const size_t range = v->props.limits.maxStorageBufferRange;
    const size_t align = v->props.limits.minStorageBufferOffsetAlignment;
    if (cllm_nbytes(t) + align > range) return false;
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (t->ne[i] > UINT32_MAX || t->nb[i] > UINT32_MAX) return false;
    }
    return true;
}

static bool is_f32(const cllm_tensor *t) { return t && t->type == CLLM_TYPE_F32; }
static bool is_float(const cllm_tensor *t) {
    return t && (t->type == CLLM_TYPE_F32 || t->type == CLLM_TYPE_F16 || t->type == CLLM_TYPE_BF16);
}
/* Whole blocks (of 32, or super-blocks of 256: a quantized row is read
 * block by block). */
static bool rows_readable(const cllm_tensor *a) {
    const int vt = vk_type_of(a->type);
    if (vt == VK_T_NONE || vt == VK_T_I32 || a->layout != 0) return false;
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    if (tt->blck_size > 1) return a->nb[0] == tt->type_size && a->ne[0] % tt->blck_size == 0;
    return a->nb[0] % 2 == 0;
}

/* The limits of shaders/attn.comp: q in shared memory, each invocation
 * holding up to VK_ATTN_ACC elements of the output row. */
#define VK_ATTN_D_MAX 256
#define VK_ATTN_ACC   32

static bool attn_supported(const vk_dev *v, const cllm_tensor *node) {
    const cllm_tensor *q = node->src[0], *k = node->src[1], *val = node->src[2];
    const cllm_tensor *mask = node->src[3];
    const int64_t dv = node->ne[0];
    return is_f32(node) && node->nb[0] == sizeof(float) &&
           node->nb[1] == (size_t)dv * sizeof(float) && node->nb[2] == node->nb[1] * node->ne[1] &&
           is_f32(q) && is_float(k) && is_float(val) && k->nb[0] % 2 == 0 && val->nb[0] % 2 == 0 &&
           q->ne[0] <= VK_ATTN_D_MAX && dv <= (int64_t)v->wg * VK_ATTN_ACC &&
           (!mask ||
            ((mask->type == CLLM_TYPE_F32 || mask->type == CLLM_TYPE_F16) && mask->nb[0] % 2 == 0));
}

static bool op_supported(const vk_dev *v, const cllm_tensor *node) {
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    for (int i = 0; i < 4; i++) {
        if (!addressable(v, node->src[i])) return false;
    }
    if (!addressable(v, node)) return false;
    if (node->op == CLLM_OP_ATTN) return attn_supported(v, node);
    if (node->src[3]) return false;
    switch (node->op) {
    case CLLM_OP_ADD:
    case CLLM_OP_MUL: return is_f32(node) && is_float(a) && is_float(b) && !node->src[2];
    case CLLM_OP_SCALE:
    case CLLM_OP_SILU:
    case CLLM_OP_GELU:
    case CLLM_OP_RMS_NORM:
    case CLLM_OP_NORM: return is_f32(node) && is_float(a) && !b;
    case CLLM_OP_CONCAT: return is_f32(node) && is_f32(a) && is_f32(b) && !node->src[2];
    case CLLM_OP_ROPE_TABLE:
        return is_f32(node) && a && a->type == CLLM_TYPE_I32 && (!b || is_f32(b)) &&
               node->ne[0] == cllm_get_op_param_i32(node, 0) && node->ne[0] % 2 == 0 &&
               node->nb[0] == sizeof(float);
    case CLLM_OP_CPY:
    case CLLM_OP_CONT:
        return is_float(a) && (node->type == CLLM_TYPE_F32 || node->type == CLLM_TYPE_F16) &&
               cllm_nelements(a) == cllm_nelements(node) && node->nb[0] % 2 == 0;
    case CLLM_OP_GET_ROWS:
        return is_f32(node) && a && rows_readable(a) && b && b->type == CLLM_TYPE_I32 &&
               a->ne[3] == 1 && b->ne[2] == 1 && b->ne[3] == 1 && node->ne[3] == 1 &&
               b->ne[1] == a->ne[2];
    case CLLM_OP_SOFT_MAX:
        return is_f32(node) && is_f32(a) &&
               (!b || b->type == CLLM_TYPE_F32 || b->type == CLLM_TYPE_F16) && !node->src[2];
    case CLLM_OP_ROPE: {
        /* only by a rope_table's rows (the graphs of src/model build it so) */
        const int n_dims = cllm_get_op_param_i32(node, 0);
        const int mode = cllm_get_op_param_i32(node, 1);
        return is_f32(node) && is_f32(a) && is_f32(b) && b->ne[0] == n_dims &&
               b->ne[1] == a->ne[2] && b->nb[0] == sizeof(float) && n_dims % 2 == 0 &&
               n_dims <= a->ne[0] && (mode == CLLM_ROPE_NORMAL || mode == CLLM_ROPE_NEOX);
    }
    case CLLM_OP_MUL_MAT:
        return is_f32(node) && a && rows_readable(a) && is_f32(b) && !node->src[2] &&
               node->ne[2] * node->ne[3] <= VK_GRID_MAX && b->ne[2] % a->ne[2] == 0 &&
               b->ne[3] % a->ne[3] == 0;
    default: return false;
    }
}

/* ---- backend ----------------------------------------------------------- */

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
    const size_t off = tensor_offset(t);
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

static void shape_of(const cllm_tensor *t, uint32_t ne[4], uint32_t nb[4]) {
    for (int i = 0; i < 4; i++) {
        ne[i] = (uint32_t)t->ne[i];
        nb[i] = (uint32_t)t->nb[i];
    }
}

/* A grid of workgroups for `n` of them (x, then y; each at most 65535). */
static void grid_of(uint64_t n, uint32_t g[3]) {
    g[0] = (uint32_t)CLLM_MIN(n, (uint64_t)VK_GRID_MAX);
    g[1] = (uint32_t)((n + g[0] - 1) / CLLM_MAX(g[0], 1u));
    g[2] = 1;
}

static uint32_t f32_bits(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* YaRN's correction dim: where a dim's wavelength is beta rotations over
 * the original context (as the CPU's ops-rope.c). */
static double yarn_corr_dim(int n_dims, int n_ctx_orig, double beta, double base) {
    return n_dims * log(n_ctx_orig / (beta * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

/* rope_table's parameters (shaders/rope_table.comp): what depends on the
 * op params only is computed here in double, as the CPU does. */
static void rope_table_params(const cllm_tensor *node, vk_push *pc) {
    const int n_dims = cllm_get_op_param_i32(node, 0);
    const double base = cllm_get_op_param_f32(node, 2);
    const double scale = cllm_get_op_param_f32(node, 3);
    const double ext = cllm_get_op_param_f32(node, 5);
    double mscale = cllm_get_op_param_f32(node, 6), lo = 0.0, hi = 0.0;
    if (ext != 0.0) {
        const int n_ctx_orig = cllm_get_op_param_i32(node, 4);
        const double beta_fast = cllm_get_op_param_f32(node, 7);
        const double beta_slow = cllm_get_op_param_f32(node, 8);
        lo = fmax(0.0, floor(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, base)));
        hi = fmin(n_dims - 1, ceil(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, base)));
        mscale *= 1.0 + 0.1 * log(1.0 / scale);
    }
    pc->p[0] = (uint32_t)n_dims;
    pc->p[1] = node->src[1] != NULL;
    pc->p[2] = f32_bits(ext);
    pc->nb_b[1] = f32_bits(base);
    pc->nb_b[2] = f32_bits(scale);
    pc->nb_b[3] = f32_bits(mscale);
    pc->ne_b[2] = f32_bits(lo);
    pc->ne_b[3] = f32_bits(hi);
}

/* The pipeline, push constants and grid of a node. */
static vk_pipe node_dispatch(const cllm_tensor *node, vk_push *pc, uint32_t g[3]) {
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    shape_of(node, pc->ne_d, pc->nb_d);
    if (a) shape_of(a, pc->ne_a, pc->nb_a);
    if (b) shape_of(b, pc->ne_b, pc->nb_b);
    const uint32_t ta = a ? (uint32_t)vk_type_of(a->type) : 0;
    const uint32_t tb = b ? (uint32_t)vk_type_of(b->type) : 0;
    pc->p[3] = ta | tb << 8 | (uint32_t)vk_type_of(node->type) << 16;
    const uint64_t n = (uint64_t)cllm_nelements(node);
    switch (node->op) {
    case CLLM_OP_ADD:
    case CLLM_OP_MUL:
        pc->p[0] = node->op == CLLM_OP_MUL;
        grid_of((n + 255) / 256, g);
        return VK_PIPE_BINARY;
    case CLLM_OP_SCALE:
    case CLLM_OP_SILU:
    case CLLM_OP_GELU:
        pc->p[0] = node->op == CLLM_OP_SCALE ? 0 : node->op == CLLM_OP_SILU ? 1 : 2;
        pc->p[1] = (uint32_t)node->op_params[0];
        grid_of((n + 255) / 256, g);
        return VK_PIPE_UNARY;
    case CLLM_OP_CONCAT: grid_of((n + 255) / 256, g); return VK_PIPE_CONCAT;
    case CLLM_OP_ROPE_TABLE:
        rope_table_params(node, pc);
        grid_of((n / 2 + 255) / 256, g);
        return VK_PIPE_ROPE_TABLE;
    case CLLM_OP_CPY:
    case CLLM_OP_CONT: grid_of((n + 255) / 256, g); return VK_PIPE_CPY;
    case CLLM_OP_GET_ROWS: grid_of((n + 255) / 256, g); return VK_PIPE_GET_ROWS;
    case CLLM_OP_RMS_NORM:
    case CLLM_OP_NORM:
        pc->p[0] = (uint32_t)node->op_params[0];
        pc->p[1] = node->op == CLLM_OP_NORM;
        grid_of((uint64_t)cllm_nrows(node), g);
        return VK_PIPE_RMS_NORM;
    case CLLM_OP_SOFT_MAX:
        pc->p[0] = (uint32_t)node->op_params[0];
        pc->p[1] = b != NULL;
        grid_of((uint64_t)cllm_nrows(node), g);
        return VK_PIPE_SOFT_MAX;
    case CLLM_OP_ROPE: {
        const int64_t n_dims = cllm_get_op_param_i32(node, 0);
        pc->p[0] = (uint32_t)n_dims;
        pc->p[1] = (uint32_t)cllm_get_op_param_i32(node, 1);
        const uint64_t per_row = (uint64_t)(n_dims / 2 + node->ne[0] - n_dims);
        grid_of((per_row * (uint64_t)cllm_nrows(node) + 255) / 256, g);
        return VK_PIPE_ROPE;
    }
    case CLLM_OP_ATTN: {
        const cllm_tensor *val = node->src[2], *mask = node->src[3];
        for (int i = 0; i < 3; i++) pc->nb_d[i] = (uint32_t)val->nb[i];
        pc->ne_d[3] = mask ? (uint32_t)mask->nb[0] : 0;
        pc->nb_d[3] = mask ? (uint32_t)mask->nb[1] : 0;
        pc->p[0] = (uint32_t)node->op_params[0];
        /* p[1]: the mask's offset, record_node's */
        pc->p[3] = ta | tb << 8 | (uint32_t)vk_type_of(val->type) << 16 |
                   (uint32_t)(mask ? vk_type_of(mask->type) : VK_T_NONE) << 24;
        grid_of((uint64_t)(node->ne[1] * node->ne[2]), g);
        return VK_PIPE_ATTN;
    }
    case CLLM_OP_MUL_MAT:
        g[0] = (uint32_t)CLLM_MIN(node->ne[0], (int64_t)VK_GRID_MAX);
        g[1] = (uint32_t)CLLM_MIN(node->ne[1], (int64_t)VK_GRID_MAX);
        g[2] = (uint32_t)(node->ne[2] * node->ne[3]);
        return VK_PIPE_MUL_MAT;
    default: CLLM_ASSERTF(false, "vulkan: no shader for %s", cllm_op_name(node->op));
    }
    return VK_PIPE_COUNT;
}

static bool in_device(const vk_dev *v, const cllm_tensor *t) {
    return t->buffer && !cllm_buffer_is_measure(t->buffer) &&
           cllm_buffer_buft(t->buffer) == &v->buft && t->buffer->context;
}

static void record_node(vk_be *be, cllm_tensor *node) {
    vk_dev *v = be->v;
    vk_push pc = {0};
    uint32_t g[3];
    const vk_pipe pipe = node_dispatch(node, &pc, g);
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
        if (!has_work(node)) continue;
        if (!op_supported(v, node)) {
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
        if (has_work(g->nodes[i])) record_node(ctx, g->nodes[i]);
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

/* ---- device ------------------------------------------------------------ */

static cllm_status pipelines_init(vk_dev *v) {
    const VkDescriptorSetLayoutBinding bindings[5] = {
        {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {2, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {3, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {4, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
    };
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
        .bindingCount = 5,
        .pBindings = bindings};
    VkResult r = vkCreateDescriptorSetLayout(v->d, &dci, NULL, &v->dsl);
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(vk_push)};
    const VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1,
                                            .pSetLayouts = &v->dsl,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    if (r == VK_SUCCESS) r = vkCreatePipelineLayout(v->d, &lci, NULL, &v->layout);
    for (int p = 0; p < VK_PIPE_COUNT && r == VK_SUCCESS; p++) {
        const VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                              .codeSize = k_shaders[p].size,
                                              .pCode = k_shaders[p].code};
        VkShaderModule sm;
        if ((r = vkCreateShaderModule(v->d, &sci, NULL, &sm)) != VK_SUCCESS) break;
        const VkSpecializationMapEntry entry = {0, 0, sizeof(uint32_t)};
        const VkSpecializationInfo spec = {1, &entry, sizeof(uint32_t), &v->wg};
        const VkComputePipelineCreateInfo pci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = sm,
                      .pName = "main",
                      .pSpecializationInfo = k_shaders[p].reduces ? &spec : NULL},
            .layout = v->layout};
        r = vkCreateComputePipelines(v->d, VK_NULL_HANDLE, 1, &pci, NULL, &v->pipes[p]);
        vkDestroyShaderModule(v->d, sm, NULL);
    }
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot make its pipelines: %s", v->name,
                          vk_result_str(r));
    }
    return CLLM_OK;
}

static const char *vk_dev_get_name(const cllm_device *dev) { return dev_of(dev)->name; }
static const char *vk_dev_get_description(const cllm_device *dev) { return dev_of(dev)->desc; }

/* Free: the heap's budget less its usage (VK_EXT_memory_budget, which counts
 * other processes too), else the heap less what this process allocated. */
static void vk_dev_get_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    vk_dev *v = dev_of(dev);
    const size_t used = allocated_total(v);
    size_t fr = used < v->heap_size ? (size_t)v->heap_size - used : 0;
    if (v->has_budget) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 mp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &budget};
        vkGetPhysicalDeviceMemoryProperties2(v->pd, &mp);
        const VkDeviceSize b = budget.heapBudget[v->heap_index];
        const VkDeviceSize u = budget.heapUsage[v->heap_index];
        fr = (size_t)CLLM_MIN(b > u ? b - u : 0, (VkDeviceSize)fr);
    }
    *free_bytes = fr;
    *total_bytes = (size_t)v->heap_size;
}

static cllm_device_kind vk_dev_get_kind(const cllm_device *dev) {
    return dev_of(dev)->software ? CLLM_DEVICE_ACCEL : CLLM_DEVICE_GPU;
}

static cllm_buffer_type *vk_dev_get_buffer_type(cllm_device *dev) { return &dev_of(dev)->buft; }

static bool vk_dev_supports_op(cllm_device *dev, const cllm_tensor *node) {
    if (!has_work(node)) return true;
    return op_supported(dev_of(dev), node);
}

static bool vk_dev_supports_buft(cllm_device *dev, const cllm_buffer_type *buft) {
    return buft == &dev_of(dev)->buft;
}

static void vk_dev_get_props(cllm_device *dev, cllm_device_props *props) {
    const vk_dev *v = dev_of(dev);
    props->n_cores = 1;
    props->n_threads_max = 1;
    props->features = "vulkan";
    props->opt_in = v->software;
}

static cllm_status vk_dev_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                       cllm_backend **out) {
    CLLM_UNUSED(params);
    vk_dev *v = dev_of(dev);
    pthread_mutex_lock(&v->lock);
    cllm_status st = CLLM_OK;
    if (!v->pipes[0]) st = pipelines_init(v);
    pthread_mutex_unlock(&v->lock);
    CLLM_TRY(st);
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
    be->device = dev;
    be->context = ctx;
    if (r != VK_SUCCESS) {
        vk_backend_free(be);
        return cllm_error(CLLM_ERR_BACKEND, "%s: cannot create a backend: %s", v->name,
                          vk_result_str(r));
    }
    *out = be;
    return CLLM_OK;
}

static const struct cllm_device_i k_vk_device_iface = {
    .get_name = vk_dev_get_name,
    .get_description = vk_dev_get_description,
    .get_memory = vk_dev_get_memory,
    .get_kind = vk_dev_get_kind,
    .get_buffer_type = vk_dev_get_buffer_type,
    .supports_op = vk_dev_supports_op,
    .supports_buft = vk_dev_supports_buft,
    .init_backend = vk_dev_init_backend,
    .get_props = vk_dev_get_props,
    .buffer_from_host_ptr = NULL, /* computes only from its own memory */
    .get_host_ptr_buffer_type = NULL,
    .init_weight = NULL, /* weights keep the file's layout */
    .convert_weight = NULL,
};

/* ---- discovery --------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    CLLM_UNUSED(types);
    CLLM_UNUSED(user);
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        cllm_log(CLLM_LOG_ERROR, "vulkan validation: %s", data->pMessage);
    } else {
        CLLM_LOG_WARN("vulkan validation: %s", data->pMessage);
    }
    return VK_FALSE;
}

static bool has_extension(const VkExtensionProperties *ext, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++) {
        if (!strcmp(ext[i].extensionName, name)) return true;
    }
    return false;
}

static bool env_on(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

static cllm_status instance_init(bool validate) {
    uint32_t n_layers = 0;
    vkEnumerateInstanceLayerProperties(&n_layers, NULL);
    VkLayerProperties *layers = cllm_calloc(CLLM_MAX(n_layers, 1u), sizeof(*layers));
    if (!layers) return cllm_error(CLLM_ERR_NOMEM, "vulkan: out of host memory");
    vkEnumerateInstanceLayerProperties(&n_layers, layers);
    bool have_layer = false;
    for (uint32_t i = 0; i < n_layers; i++) {
        if (!strcmp(layers[i].layerName, "VK_LAYER_KHRONOS_validation")) have_layer = true;
    }
    cllm_free(layers);
    if (validate && !have_layer) {
        cllm_log(CLLM_LOG_ERROR,
                 "vulkan: CLLM_VULKAN_VALIDATE is set but VK_LAYER_KHRONOS_validation is "
                 "not installed (Debian: vulkan-validationlayers)");
        validate = false;
    }
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "cllm",
                                   .pEngineName = "cllm",
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                      .pApplicationInfo = &app,
                                      .enabledLayerCount = validate ? 1 : 0,
                                      .ppEnabledLayerNames = &layer,
                                      .enabledExtensionCount = validate ? 1 : 0,
                                      .ppEnabledExtensionNames = &ext};
    const VkResult r = vkCreateInstance(&ici, NULL, &g_vk.instance);
    if (r != VK_SUCCESS) {
        return cllm_error(CLLM_ERR_BACKEND, "vulkan: no instance: %s", vk_result_str(r));
    }
#define VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(g_vk.instance, #name);
    VK_INSTANCE_FUNCS(VK_LOAD)
    VK_EXT_FUNCS(VK_LOAD)
#undef VK_LOAD
    if (validate && vkCreateDebugUtilsMessengerEXT) {
        const VkDebugUtilsMessengerCreateInfoEXT mci = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = on_validation};
        vkCreateDebugUtilsMessengerEXT(g_vk.instance, &mci, NULL, &g_vk.messenger);
    }
    return CLLM_OK;
}

static const char *type_str(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU-software";
    default: return "other";
    }
}

/* Makes device v of physical device pd, or says why it cannot be used. */
static bool device_init(vk_dev *v, VkPhysicalDevice pd, int index) {
    v->pd = pd;
    snprintf(v->name, sizeof(v->name), "vulkan%d", index);
    vkGetPhysicalDeviceProperties(pd, &v->props);
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &drv};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sg};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    v->subgroup_size = sg.subgroupSize;
    v->max_alloc = m3.maxMemoryAllocationSize;
    v->software = v->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const char *why = NULL;
    const VkSubgroupFeatureFlags need =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        (sg.supportedOperations & need) != need) {
        why = "no subgroup arithmetic in compute shaders";
    }

    uint32_t n_ext = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = cllm_calloc(CLLM_MAX(n_ext, 1u), sizeof(*ext));
    if (!ext) return false;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, ext);
    const bool push = has_extension(ext, n_ext, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    v->has_budget = has_extension(ext, n_ext, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    cllm_free(ext);
    if (!push && !why) why = "no VK_KHR_push_descriptor";

    uint32_t n_q = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_q, NULL);
    VkQueueFamilyProperties qf[16];
    n_q = CLLM_MIN(n_q, 16u);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_q, qf);
    int family = -1;
    for (uint32_t i = 0; i < n_q && family < 0; i++) {
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = (int)i;
    }
    if (family < 0 && !why) why = "no compute queue";

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int direct = -1, any_local = -1, staging = -1;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
        if ((f & (local | host)) == (local | host) && direct < 0) direct = (int)i;
        if ((f & local) && any_local < 0) any_local = (int)i;
        if ((f & host) == host && staging < 0) staging = (int)i;
    }
    v->mapped = direct >= 0 && !env_on("CLLM_VULKAN_STAGING");
    const int type = v->mapped ? direct : any_local;
    if ((type < 0 || staging < 0) && !why) why = "no device-local memory";
    if (why) {
        CLLM_LOG_INFO("vulkan: %s (%s) is not used: %s", v->props.deviceName,
                      type_str(v->props.deviceType), why);
        return false;
    }
    v->mem_type = (uint32_t)type;
    v->staging_type = (uint32_t)staging;
    v->heap_index = mp.memoryTypes[type].heapIndex;
    v->heap_size = mp.memoryHeaps[v->heap_index].size;
    v->queue_family = (uint32_t)family;
    v->alignment =
        CLLM_MAX((size_t)VK_MIN_ALIGNMENT, (size_t)v->props.limits.minStorageBufferOffsetAlignment);
    v->wg = VK_WG_DEFAULT;
    const char *wg = getenv("CLLM_VULKAN_WG");
    if (wg && *wg) {
        const long n = strtol(wg, NULL, 10);
        if (n >= 1 && n <= (long)v->props.limits.maxComputeWorkGroupSize[0] && n <= 1024) {
            v->wg = (uint32_t)n;
        } else {
            CLLM_LOG_WARN("vulkan: CLLM_VULKAN_WG=%s is ignored (1 .. %u)", wg,
                          CLLM_MIN(v->props.limits.maxComputeWorkGroupSize[0], 1024u));
        }
    }

    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = v->queue_family,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const char *exts[2] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME,
                           VK_EXT_MEMORY_BUDGET_EXTENSION_NAME};
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = v->has_budget ? 2 : 1,
                                    .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(pd, &dci, NULL, &v->d);
    if (r != VK_SUCCESS) {
        CLLM_LOG_WARN("vulkan: %s: no logical device: %s", v->props.deviceName, vk_result_str(r));
        return false;
    }
    vkGetDeviceQueue(v->d, v->queue_family, 0, &v->queue);
    pthread_mutex_init(&v->lock, NULL);

    /* transfers: a command buffer, a fence and the staging buffer */
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = v->queue_family};
    r = vkCreateCommandPool(v->d, &cpi, NULL, &v->xfer_pool);
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = v->xfer_pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(v->d, &cai, &v->xfer_cb);
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = vkCreateFence(v->d, &fci, NULL, &v->xfer_fence);
    if (r == VK_SUCCESS && !v->mapped) {
        const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                        .size = VK_STAGING_BYTES,
                                        .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                        .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
        r = vkCreateBuffer(v->d, &bci, NULL, &v->staging);
        VkMemoryRequirements req;
        if (r == VK_SUCCESS) {
            vkGetBufferMemoryRequirements(v->d, v->staging, &req);
            const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                             .allocationSize = req.size,
                                             .memoryTypeIndex = v->staging_type};
            r = vkAllocateMemory(v->d, &ai, NULL, &v->staging_mem);
        }
        if (r == VK_SUCCESS) r = vkBindBufferMemory(v->d, v->staging, v->staging_mem, 0);
        if (r == VK_SUCCESS) {
            r = vkMapMemory(v->d, v->staging_mem, 0, VK_WHOLE_SIZE, 0, &v->staging_map);
        }
    }
    if (r != VK_SUCCESS) {
        CLLM_LOG_WARN("vulkan: %s: cannot set up transfers: %s", v->props.deviceName,
                      vk_result_str(r));
        return false; /* the process keeps what was made: the module is never unloaded */
    }

    const uint32_t api = v->props.apiVersion;
    char alloc_s[32], range_s[32];
    cllm_format_size((size_t)v->max_alloc, alloc_s, sizeof(alloc_s));
    cllm_format_size(v->props.limits.maxStorageBufferRange, range_s, sizeof(range_s));
    snprintf(v->desc, sizeof(v->desc),
             "%s (%s; driver %s %s; Vulkan %u.%u.%u; subgroup %u; max allocation %s, max "
             "storage range %s; memory %s%s)%s",
             v->props.deviceName, type_str(v->props.deviceType), drv.driverName, drv.driverInfo,
             VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api),
             v->subgroup_size, alloc_s, range_s, v->mapped ? "mapped" : "staged",
             v->has_budget ? ", budget" : "",
             v->software ? "; software: used only when named (--mem NAME=SIZE)" : "");
    v->buft = (cllm_buffer_type){.iface =
                                     {
                                         .get_name = vk_buft_get_name,
                                         .alloc_buffer = vk_buft_alloc,
                                         .get_alignment = vk_buft_get_alignment,
                                         .get_max_size = vk_buft_get_max_size,
                                         .get_alloc_size = NULL, /* exactly their bytes */
                                         .is_host = vk_buft_is_host,
                                     },
                                 .device = &v->dev,
                                 .context = v};
    v->dev = (cllm_device){.iface = k_vk_device_iface, .reg = &g_vk_reg, .context = v};
    return true;
}

/* Opens the loader and finds the devices, once. No loader, no instance or
 * no usable device: no device (logged at info level), not an error. */
static void vk_discover(void) {
    if (g_vk.init) return;
    g_vk.init = true;
    g_vk.lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_vk.lib) {
        CLLM_LOG_INFO("vulkan: no Vulkan loader (libvulkan.so.1: Debian's libvulkan1)");
        return;
    }
    void *sym = dlsym(g_vk.lib, "vkGetInstanceProcAddr");
    memcpy(&vkGetInstanceProcAddr, &sym, sizeof(sym)); /* ISO C: no object-to-function cast */
    if (!vkGetInstanceProcAddr) return;
#define VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(NULL, #name);
    VK_GLOBAL_FUNCS(VK_LOAD)
#undef VK_LOAD
    if (!vkCreateInstance || !vkEnumerateInstanceLayerProperties) return;
    if (instance_init(env_on("CLLM_VULKAN_VALIDATE")) != CLLM_OK) {
        CLLM_LOG_INFO("%s", cllm_last_error());
        return;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(g_vk.instance, &n, NULL);
    VkPhysicalDevice pds[VK_MAX_DEVICES];
    n = CLLM_MIN(n, (uint32_t)VK_MAX_DEVICES);
    if (n) vkEnumeratePhysicalDevices(g_vk.instance, &n, pds);
    for (uint32_t i = 0; i < n; i++) {
        if (device_init(&g_vk.devs[g_vk.n_devices], pds[i], g_vk.n_devices)) g_vk.n_devices++;
    }
}

/* ---- registry ---------------------------------------------------------- */

static const char *vk_reg_get_name(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return VK_REG_NAME;
}

static int vk_reg_get_device_count(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return g_vk.n_devices;
}

static cllm_device *vk_reg_get_device(cllm_backend_reg *reg, int i) {
    CLLM_UNUSED(reg);
    return i >= 0 && i < g_vk.n_devices ? &g_vk.devs[i].dev : NULL;
}

static cllm_backend_reg g_vk_reg = {
    CLLM_BACKEND_REG_ABI,
    .iface =
        {
            .get_name = vk_reg_get_name,
            .get_device_count = vk_reg_get_device_count,
            .get_device = vk_reg_get_device,
            .set_params = NULL, /* takes no options */
        },
    .context = NULL,
};

/* The module's entry point (see backend.h: loadable backends). */
__attribute__((visibility("default"))) cllm_backend_reg *cllm_backend_module_init(void);
cllm_backend_reg *cllm_backend_module_init(void) {
    vk_discover();
    return &g_vk_reg;
}
