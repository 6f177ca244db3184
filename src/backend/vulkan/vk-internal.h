/*
 * The Vulkan backend's shared declarations: the device, buffer and push
 * constant types, the loaded Vulkan functions, and what each file of the
 * module offers the others (vulkan.c: loader, discovery, devices and the
 * registry; buffer.c: memory and transfers; ops.c: what runs on the device
 * and how each node is dispatched; graph.c: recording and submitting a
 * graph).
 */
#ifndef CLLM_BACKEND_VULKAN_VK_INTERNAL_H
#define CLLM_BACKEND_VULKAN_VK_INTERNAL_H

#include "backend/vulkan/vk-funcs.h"
#include "backend/backend-impl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VK_REG_NAME      "vulkan"
#define VK_MAX_DEVICES   8
#define VK_STAGING_BYTES ((size_t)4 << 20)
#define VK_WG_DEFAULT    64u
#define VK_GRID_MAX      65535u
#define VK_MIN_ALIGNMENT 64
/* Storage buffers of every shader (shaders/common.glsl; 5: the attention's
 * state, shaders/attn_window.glsl) */
#define VK_BINDINGS 6

/* ---- the loader (vulkan.c defines them) ---------------------------------- */

#define VK_DECLARE(name) extern PFN_##name name;
VK_GLOBAL_FUNCS(VK_DECLARE)
VK_INSTANCE_FUNCS(VK_DECLARE)
VK_EXT_FUNCS(VK_DECLARE)
#undef VK_DECLARE

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
    VK_PIPE_MUL_MAT_VEC1, /* mul_mat of one column */
    VK_PIPE_MUL_MAT_VEC,  /* mul_mat of 2 .. VK_MMV_COLS columns */
    VK_PIPE_MUL_MM,       /* mul_mat of more: tiled */
    VK_PIPE_CONCAT,
    VK_PIPE_ROPE_TABLE,
    VK_PIPE_ATTN,       /* batches of query rows */
    VK_PIPE_ATTN_VEC,   /* one query row (decode) */
    VK_PIPE_QUANT_Q8,   /* mul_mat's activations to 8 bits (int8 path) */
    VK_PIPE_MUL_MAT_Q8, /* mul_mat with them: packed int8 dot products */
    VK_PIPE_COUNT
} vk_pipe;

/* The specialization constants a shader takes (vk_pipe_spec). */
typedef enum vk_spec {
    VK_SPEC_NONE,
    VK_SPEC_WG,   /* 0: the workgroup size of the reducing shaders (vk_dev.wg) */
    VK_SPEC_ATTN, /* 0: the attention's workgroup size; 1: accumulators per lane */
} vk_spec;

/* The shaders' SPIR-V, one per pipe (ops.c). */
typedef struct vk_shader {
    const uint32_t *code;
    size_t size;
    vk_spec spec;
    bool int8; /* needs shaderIntegerDotProduct (made only where vk_dev.int8) */
} vk_shader;
extern const vk_shader vk_shaders[VK_PIPE_COUNT];

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

/* Command buffers of queued transfers, reused round robin. */
#define VK_ASYNC_CBS 16
/* Transfers queued and not yet completed on the host side, at most. */
#define VK_PENDING 64

/* A queued transfer (buffer.c): done once the timeline reaches `value`;
 * a staged one holds staging bytes [off, off + size) until then; a
 * download's host copy (`size` bytes from `from` to `host`) is made when it
 * is completed. */
typedef struct vk_pending {
    uint64_t value;
    size_t off, size;
    bool staged;
    void *host;       /* a download's destination (NULL: an upload) */
    const void *from; /* its source: the staging bytes or mapped memory */
} vk_pending;

typedef struct vk_dev {
    cllm_device dev;
    cllm_buffer_type buft;
    char name[16];
    char desc[1024];
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    uint32_t subgroup_size;
    VkDeviceSize max_alloc;    /* maxMemoryAllocationSize (or less: max_alloc=, tests) */
    VkDeviceSize hw_max_alloc; /* the device's own */
    uint32_t max_range;        /* maxStorageBufferRange (or less: max_range=, tests) */
    _Atomic int allocs_left;   /* fail_alloc=N: the N-th vkAllocateMemory from now fails */
    VkDeviceSize heap_size;    /* the device-local heap the buffers come from */
    uint32_t heap_index;
    uint32_t mem_type;     /* device-local (and host-visible when mapped) */
    uint32_t staging_type; /* host-visible, coherent */
    bool mapped;           /* tensors are read and written in place */
    bool has_budget;       /* VK_EXT_memory_budget */
    bool software;         /* PHYSICAL_DEVICE_TYPE_CPU */
    bool has_int8;         /* shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product) */
    bool int8; /* mul_mat with 8-bit activations: has_int8 unless CLLM_VULKAN_INT8=0 or int8=0 */
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
    /* asynchronous work (buffer.c): the timeline semaphore every queued
     * graph and transfer signals (VK_NULL_HANDLE: the device has none, and
     * everything waits as it goes), under `lock` */
    VkSemaphore timeline;
    uint64_t tl_last; /* the last value a submission signals */
    VkCommandBuffer async_cbs[VK_ASYNC_CBS];
    uint64_t async_cb_value[VK_ASYNC_CBS]; /* when each is free again */
    int async_cb_next;
    vk_pending pend[VK_PENDING]; /* a ring, oldest first */
    int pend_first, n_pend;
    size_t ring_head; /* where the next staging region starts */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipes[VK_PIPE_COUNT];
} vk_dev;

typedef struct vk_buf {
    VkBuffer b;
    VkDeviceMemory mem;
    void *map;
    VkDeviceSize vk_size; /* the VkBuffer's size: the bytes rounded up to whole words */
    uint64_t serial;      /* never the same for two buffers of a process (graph.c: replay) */
} vk_buf;

static inline vk_dev *dev_of(const cllm_device *dev) { return (vk_dev *)dev->context; }

/* ---- buffer.c ---------------------------------------------------------- */

const char *vk_result_str(VkResult r);
size_t vk_allocated_total(const vk_dev *v);
/* The byte offset of a tensor within its buffer. */
size_t vk_tensor_offset(const cllm_tensor *t);
const char *vk_buft_get_name(const cllm_buffer_type *buft);
cllm_status vk_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out);
size_t vk_buft_get_alignment(const cllm_buffer_type *buft);
size_t vk_buft_get_max_size(const cllm_buffer_type *buft);
bool vk_buft_is_host(const cllm_buffer_type *buft);
/* The memory limits of device v from its properties (max_alloc set) and
 * the environment (CLLM_VULKAN_MAX_ALLOC, CLLM_VULKAN_MAX_RANGE). */
void vk_mem_init(vk_dev *v);
/* cllm_registry_configure("vulkan", "max_alloc=SIZE,max_range=SIZE,fail_alloc=N,int8=0|1")
 * on devices devs[0..n): test knobs (docs/vulkan.md, Memory; int8=1 where
 * the device has integer dot products). */
cllm_status vk_mem_set_params(vk_dev *devs, int n, const char *params);

/* Asynchronous transfers, with v->lock held (docs/vulkan.md,
 * "Submission"). vk_async_init: the transfers' command buffers.
 * vk_wait_value: waits until the timeline reaches `value`.
 * vk_async_complete: waits for `value` and completes every transfer queued
 * up to it (downloads copied to the host). vk_async_upload / download:
 * `size` bytes between host memory and byte `off` of buffer b, queued
 * after everything before on the device; *value: the timeline value after
 * which they are done (the upload's source may be reused at once; the
 * download's destination is written when completed). `after`: what the
 * caller queued and has not waited for (a mapped upload waits for it,
 * since it writes device memory from the host). */
VkResult vk_async_init(vk_dev *v);
VkResult vk_wait_value(vk_dev *v, uint64_t value);
VkResult vk_async_complete(vk_dev *v, uint64_t value);
VkResult vk_async_upload(vk_dev *v, vk_buf *b, size_t off, const void *data, size_t size,
                         uint64_t after, uint64_t *value);
VkResult vk_async_download(vk_dev *v, vk_buf *b, size_t off, void *data, size_t size,
                           uint64_t *value);

/* ---- ops.c ------------------------------------------------------------- */

/* The specialization constants of pipe p on device v (at most 2, ids 0
 * and 1); returns how many. */
uint32_t vk_pipe_spec(const vk_dev *v, vk_pipe p, uint32_t spec[2]);
/* The shaders' type code of a cllm type (VK_T_NONE: none). */
int vk_type_of(cllm_type t);
/* A node that computes something (not a view, not empty). */
bool vk_has_work(const cllm_tensor *t);
/* What supports_op answers: the device runs the node exactly so. */
bool vk_op_supported(const vk_dev *v, const cllm_tensor *node);
/* The most rows (elements along dimension 1) of t, with every other
 * dimension whole, that one binding of at most maxStorageBufferRange bytes
 * holds wherever it starts: t->ne[1] when the whole of t fits, 0 when not
 * even one row does. */
int64_t vk_window_rows(const vk_dev *v, const cllm_tensor *t);
/* The rows of the KV cache (src[1] and src[2] along dimension 1) that one
 * dispatch of attention node `node` binds: all of them where they fit. */
int64_t vk_attn_window(const vk_dev *v, const cllm_tensor *node);
/* The workspace bytes of attention node `node`: the softmax state of its
 * query rows where its cache is bound in windows, else 0. */
size_t vk_attn_state_bytes(const vk_dev *v, const cllm_tensor *node);
/* Whether mul_mat node `node` runs with 8-bit activations (its src[1]
 * quantized as the CPU's default precision does, then packed int8 dot
 * products): Q4_0, Q4_1, Q8_0 or Q4_K weights, CLLM_PREC_DEFAULT, a device with
 * integer dot products, and no windows. */
bool vk_mul_mat_q8(const vk_dev *v, const cllm_tensor *node);
/* The workspace bytes of mul_mat node `node` on the int8 path: its
 * activations' blocks (0 on the F32 path). */
size_t vk_mul_mat_q8_bytes(const vk_dev *v, const cllm_tensor *node);
/* The outermost dimension of t with more than one element (0: none). */
int vk_outer_dim(const cllm_tensor *t);
/* A cpy (or cont) whose source and result have as many rows along their
 * outermost dimensions (vk_outer_dim), each of as many elements (a KV
 * cache write: [head_dim, heads, T] into [n_embd, T]): recorded in windows
 * of those rows where they do not fit one binding. */
bool vk_cpy_rows(const cllm_tensor *node);
/* The most rows of t along its outermost dimension that one binding holds
 * wherever they start (0: not one). */
int64_t vk_cpy_window(const vk_dev *v, const cllm_tensor *t);
/* The pipeline, push constants (but the offsets) and grid of a node. */
vk_pipe vk_node_dispatch(const cllm_tensor *node, vk_push *pc, uint32_t g[3]);

/* ---- graph.c ----------------------------------------------------------- */

/* A backend of device v (its pipelines made). */
cllm_status vk_backend_new(vk_dev *v, cllm_backend **out);

#endif
