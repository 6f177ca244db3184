/* The CPU backend: host buffers, the device, and graph compute on the thread
 * pool. The kernels live in ops-*.c (see cpu-ops.h). */
#include "backend/cpu/cpu.h"
#include "core/hostmem.h"
#include "backend/backend-impl.h"
#include "backend/cpu/cpu-ops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/memlimit.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- buffers ----------------------------------------------------------- */

typedef struct cpu_buffer_ctx {
    void *data;
    bool owned;
} cpu_buffer_ctx;

static void cpu_buffer_free(cllm_buffer *buf) {
    cpu_buffer_ctx *ctx = buf->context;
    if (ctx->owned) cllm_free(ctx->data);
    cllm_free(ctx);
}

static void *cpu_buffer_get_base(const cllm_buffer *buf) {
    const cpu_buffer_ctx *ctx = buf->context;
    /* a zero-sized buffer still has a valid, aligned, never-dereferenced base */
    return ctx->data ? ctx->data : (void *)(uintptr_t)CLLM_CPU_ALIGNMENT;
}

static void cpu_buffer_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                                  size_t size) {
    CLLM_UNUSED(buf);
    memcpy((char *)t->data + offset, data, size);
}

static void cpu_buffer_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                                  size_t size) {
    CLLM_UNUSED(buf);
    memcpy(data, (const char *)t->data + offset, size);
}

static void cpu_buffer_clear(cllm_buffer *buf, uint8_t value) {
    cpu_buffer_ctx *ctx = buf->context;
    if (ctx->data) memset(ctx->data, value, buf->size);
}

static const struct cllm_buffer_i k_cpu_buffer_iface = {
    .free_buffer = cpu_buffer_free,
    .get_base = cpu_buffer_get_base,
    .init_tensor = NULL, /* host memory needs no per-tensor set-up */
    .set_tensor = cpu_buffer_set_tensor,
    .get_tensor = cpu_buffer_get_tensor,
    .clear = cpu_buffer_clear,
};

static cllm_status wrap_buffer(cllm_buffer_type *buft, void *data, size_t size, bool owned,
                               cllm_buffer **out) {
    cpu_buffer_ctx *ctx = cllm_malloc(sizeof(*ctx));
    cllm_buffer *buf = ctx ? cllm_buffer_init(buft, k_cpu_buffer_iface, ctx, size) : NULL;
    if (!buf) {
        cllm_free(ctx);
        return cllm_error(CLLM_ERR_NOMEM, "cpu: out of host memory for a buffer descriptor");
    }
    ctx->data = data;
    ctx->owned = owned;
    *out = buf;
    return CLLM_OK;
}

static const char *cpu_buft_get_name(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return "cpu";
}

static cllm_status cpu_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out) {
    void *data = NULL;
    if (size > 0) {
        /* host memory through the allocator hook (core/hostmem.h), on huge
         * pages where the system gives them: weights read (not mapped) are
         * streamed through by every token, and huge pages spare those reads
         * most of their TLB misses */
        if (!(data = cllm_aligned_alloc_huge(CLLM_CPU_ALIGNMENT, size))) {
            return cllm_error(CLLM_ERR_DEVICE_MEMORY, "cpu: cannot allocate a %zu-byte buffer",
                              size);
        }
    }
    cllm_status st = wrap_buffer(buft, data, size, true, out);
    if (st != CLLM_OK) cllm_free(data);
    return st;
}

static size_t cpu_buft_get_alignment(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return CLLM_CPU_ALIGNMENT;
}

static bool cpu_buft_is_host(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return true;
}

static cllm_device g_cpu_device;

static cllm_buffer_type g_cpu_buft = {
    .iface =
        {
            .get_name = cpu_buft_get_name,
            .alloc_buffer = cpu_buft_alloc,
            .get_alignment = cpu_buft_get_alignment,
            .get_max_size = NULL,   /* no limit but the host's memory */
            .get_alloc_size = NULL, /* tensors take exactly their bytes */
            .is_host = cpu_buft_is_host,
        },
    .device = &g_cpu_device,
    .context = NULL,
};

cllm_buffer_type *cllm_cpu_buffer_type(void) { return &g_cpu_buft; }

static const char *cpu_mapped_buft_get_name(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return "cpu_mapped";
}

static size_t cpu_mapped_buft_get_alignment(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return 1;
}

/* Memory the CPU did not allocate itself (a mapped file): tensors sit where
 * the file puts them, so no alignment is imposed. */
static cllm_buffer_type g_cpu_mapped_buft = {
    .iface =
        {
            .get_name = cpu_mapped_buft_get_name,
            .alloc_buffer = cpu_buft_alloc,
            .get_alignment = cpu_mapped_buft_get_alignment,
            .get_max_size = NULL,   /* no limit but the host's memory */
            .get_alloc_size = NULL, /* tensors take exactly their bytes */
            .is_host = cpu_buft_is_host,
        },
    .device = &g_cpu_device,
    .context = NULL,
};

/* ---- backend ----------------------------------------------------------- */

typedef struct cpu_backend_ctx {
    int n_threads;
    cllm_threadpool *pool;
    /* the graph being computed, shared with the pool's threads */
    cllm_graph *graph;
    void *wdata;
    size_t wsize;
} cpu_backend_ctx;

static const char *cpu_backend_get_name(const cllm_backend *be) {
    CLLM_UNUSED(be);
    return "cpu";
}

static void cpu_backend_free(cllm_backend *be) {
    cpu_backend_ctx *ctx = be->context;
    cllm_threadpool_free(ctx->pool);
    cllm_free(ctx);
    cllm_free(be);
}

static bool node_has_work(const cllm_tensor *t) {
    return cllm_op_has_compute(t->op) && cllm_nelements(t) > 0;
}

/* The first node with work from i on (g->n_nodes if none). */
static int next_work(const cllm_graph *g, int i) {
    while (i < g->n_nodes && !node_has_work(g->nodes[i])) i++;
    return i;
}

/* The attention nodes that run as one group from node i (a node with work)
 * into group[] (cllm_cpu_attn_joins, each with the one before it); returns
 * their count (0 when node i starts no group of two or more) and sets *next
 * to the first node with work after them. */
static int attn_group(const cllm_graph *g, int i, cllm_tensor **group, int *next) {
    int n = 0, j = i;
    group[n++] = g->nodes[i];
    for (int k = next_work(g, i + 1); k < g->n_nodes && n < CLLM_CPU_ATTN_GROUP_MAX &&
                                      cllm_cpu_attn_joins(g->nodes[j], g->nodes[k]);
         k = next_work(g, k + 1)) {
        group[n++] = g->nodes[k];
        j = k;
    }
    *next = next_work(g, j + 1);
    return n >= 2 ? n : 0;
}

static size_t cpu_backend_workspace_size(cllm_backend *be, const cllm_graph *g) {
    const cpu_backend_ctx *ctx = be->context;
    size_t size = 0;
    cllm_tensor *group[CLLM_CPU_ATTN_GROUP_MAX];
    for (int i = 0; i < g->n_nodes; i++) {
        size = CLLM_MAX(size, cllm_cpu_op_workspace(g->nodes[i], ctx->n_threads));
        int next;
        const int n = g->nodes[i]->op == CLLM_OP_ATTN && node_has_work(g->nodes[i])
                          ? attn_group(g, i, group, &next)
                          : 0;
        if (n) size = CLLM_MAX(size, cllm_cpu_attn_group_workspace(group, n, ctx->n_threads));
    }
    return size;
}

/* Whether thread 0 alone computes `node`: a row-local kernel (it splits the
 * rows of dst over the threads, cllm_cpu_split, with no barrier) that uses no
 * workspace, on a single row (one token): the other threads do nothing. */
static bool node_on_thread0(const cllm_tensor *t) {
    return cllm_op_is_row_local(t->op) && !cllm_op_may_need_workspace(t->op) && cllm_nrows(t) == 1;
}

/*
 * Every thread walks the whole graph; a barrier separates nodes with work,
 * except between two nodes that thread 0 computes alone (a chain of
 * single-row element-wise ops while generating): thread 0 runs them in
 * order, the others touch no memory until the barrier after the chain.
 * One-token attention nodes of several sequences run as one group
 * (cllm_cpu_attn_group). Every thread takes the same decisions from the
 * same graph.
 */
static void compute_job(int ith, int nth, void *arg) {
    cpu_backend_ctx *ctx = arg;
    const cllm_cpu_params params = {
        .ith = ith, .nth = nth, .wdata = ctx->wdata, .wsize = ctx->wsize, .pool = ctx->pool};
    cllm_graph *g = ctx->graph;
    cllm_tensor *group[CLLM_CPU_ATTN_GROUP_MAX];
    int i = next_work(g, 0);
    while (i < g->n_nodes) {
        cllm_tensor *node = g->nodes[i];
        int next;
        const int n = node->op == CLLM_OP_ATTN ? attn_group(g, i, group, &next) : 0;
        if (n) {
            cllm_cpu_attn_group(&params, group, n);
            cllm_threadpool_barrier(ctx->pool);
            i = next;
            continue;
        }
        cllm_cpu_compute_forward(&params, node);
        next = next_work(g, i + 1);
        if (next == g->n_nodes || !node_on_thread0(node) || !node_on_thread0(g->nodes[next])) {
            cllm_threadpool_barrier(ctx->pool);
        }
        i = next;
    }
}

static cllm_status cpu_backend_graph_compute(cllm_backend *be, cllm_graph *g) {
    cpu_backend_ctx *ctx = be->context;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *node = g->nodes[i];
        if (node_has_work(node) && !cllm_cpu_supports_op(node)) {
            return cllm_error(CLLM_ERR_UNSUPPORTED, "cpu: cannot compute %s (%s) of type %s",
                              node->name, cllm_op_name(node->op), cllm_type_name(node->type));
        }
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            if (node->src[j] && !cllm_buffer_type_is_host(cllm_buffer_buft(node->src[j]->buffer))) {
                return cllm_error(CLLM_ERR_INVALID_ARG, "cpu: input %s of %s is not in host memory",
                                  node->src[j]->name, node->name);
            }
        }
    }
    ctx->graph = g;
    ctx->wdata = be->workspace ? cllm_buffer_base(be->workspace) : NULL;
    ctx->wsize = cllm_backend_workspace_allocated(be);
    cllm_threadpool_run(ctx->pool, compute_job, ctx);
    ctx->graph = NULL;
    return CLLM_OK;
}

static const struct cllm_backend_i k_cpu_backend_iface = {
    .get_name = cpu_backend_get_name,
    .free = cpu_backend_free,
    .get_workspace_size = cpu_backend_workspace_size,
    .graph_compute = cpu_backend_graph_compute,
    .synchronize = NULL, /* compute is synchronous */
};

cllm_status cllm_backend_cpu_new(int n_threads, cllm_backend **out) {
    if (n_threads < 0 || n_threads > 1024) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "cpu: %d threads", n_threads);
    }
    if (n_threads == 0) n_threads = cllm_physical_cores();
    cllm_backend *be = cllm_calloc(1, sizeof(*be));
    cpu_backend_ctx *ctx = cllm_calloc(1, sizeof(*ctx));
    if (!be || !ctx) goto fail;
    ctx->n_threads = n_threads;
    ctx->pool = cllm_threadpool_new(n_threads);
    if (!ctx->pool) goto fail;
    be->iface = k_cpu_backend_iface;
    be->device = &g_cpu_device;
    be->context = ctx;
    *out = be;
    return CLLM_OK;
fail:
    cllm_free(ctx);
    cllm_free(be);
    return cllm_error(CLLM_ERR_NOMEM, "cpu: cannot create a backend with %d threads", n_threads);
}

int cllm_backend_cpu_n_threads(const cllm_backend *be) {
    return ((const cpu_backend_ctx *)be->context)->n_threads;
}

/* ---- device ------------------------------------------------------------ */

static const char *cpu_dev_get_name(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    return "cpu";
}

static const char *cpu_dev_get_description(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    static char desc[128];
    if (desc[0]) return desc;
    snprintf(desc, sizeof(desc), "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return desc;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                snprintf(desc, sizeof(desc), "%s", colon + 2);
                desc[strcspn(desc, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
    return desc;
}

static void cpu_dev_get_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    CLLM_UNUSED(dev);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    size_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof(line), f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (size_t)kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    if (!avail) {
        const long av = sysconf(_SC_AVPHYS_PAGES);
        avail = av > 0 && page > 0 ? (size_t)av * (size_t)page : total;
    }
    /* a memory cgroup's limit is the process's machine (memlimit.h) */
    size_t cg_limit, cg_avail;
    if (cllm_cgroup_memory(&cg_limit, &cg_avail)) {
        total = total ? CLLM_MIN(total, cg_limit) : cg_limit;
        avail = CLLM_MIN(avail, cg_avail);
    }
    *free_bytes = total ? CLLM_MIN(avail, total) : avail;
    *total_bytes = total;
}

static cllm_device_kind cpu_dev_get_kind(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    return CLLM_DEVICE_CPU;
}

static cllm_buffer_type *cpu_dev_get_buffer_type(cllm_device *dev) {
    CLLM_UNUSED(dev);
    return &g_cpu_buft;
}

static bool cpu_dev_supports_op(cllm_device *dev, const cllm_tensor *node) {
    CLLM_UNUSED(dev);
    return cllm_cpu_supports_op(node);
}

static bool cpu_dev_supports_buft(cllm_device *dev, const cllm_buffer_type *buft) {
    CLLM_UNUSED(dev);
    return cllm_buffer_type_is_host(buft);
}

static cllm_status cpu_dev_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                        cllm_backend **out) {
    CLLM_UNUSED(dev);
    return cllm_backend_cpu_new(params->n_threads, out);
}

static void cpu_dev_get_props(cllm_device *dev, cllm_device_props *props) {
    CLLM_UNUSED(dev);
    props->n_cores = cllm_physical_cores();
    props->n_threads_max = cllm_cpu_count();
    props->features = cllm_cpu_features_str();
}

/* Memory the CPU did not allocate itself (a mapped file, the ring of
 * streamed layers): the buffer does not own it. */
static cllm_status cpu_dev_buffer_from_host_ptr(cllm_device *dev, void *ptr, size_t size,
                                                cllm_buffer **out) {
    CLLM_UNUSED(dev);
    return wrap_buffer(&g_cpu_mapped_buft, ptr, size, false, out);
}

static cllm_buffer_type *cpu_dev_get_host_ptr_buffer_type(cllm_device *dev) {
    CLLM_UNUSED(dev);
    return &g_cpu_mapped_buft;
}

static bool cpu_dev_init_weight(cllm_device *dev, cllm_tensor *t, size_t *scratch) {
    CLLM_UNUSED(dev);
    return cllm_cpu_init_weight(t, scratch);
}

static bool cpu_dev_convert_weight(cllm_device *dev, cllm_tensor *t, void *scratch,
                                   bool file_mapped) {
    CLLM_UNUSED(dev);
    return cllm_cpu_convert_weight(t, scratch, file_mapped);
}

static cllm_device g_cpu_device = {
    .iface =
        {
            .get_name = cpu_dev_get_name,
            .get_description = cpu_dev_get_description,
            .get_memory = cpu_dev_get_memory,
            .get_kind = cpu_dev_get_kind,
            .get_buffer_type = cpu_dev_get_buffer_type,
            .supports_op = cpu_dev_supports_op,
            .supports_buft = cpu_dev_supports_buft,
            .init_backend = cpu_dev_init_backend,
            .get_props = cpu_dev_get_props,
            .buffer_from_host_ptr = cpu_dev_buffer_from_host_ptr,
            .get_host_ptr_buffer_type = cpu_dev_get_host_ptr_buffer_type,
            .init_weight = cpu_dev_init_weight,
            .convert_weight = cpu_dev_convert_weight,
        },
    .reg = NULL,
    .context = NULL,
};

cllm_device *cllm_cpu_device(void) { return &g_cpu_device; }

/* ---- registry ---------------------------------------------------------- */

static const char *cpu_reg_get_name(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return "cpu";
}

static int cpu_reg_get_device_count(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return 1;
}

static cllm_device *cpu_reg_get_device(cllm_backend_reg *reg, int i) {
    CLLM_UNUSED(reg);
    return i == 0 ? &g_cpu_device : NULL;
}

static cllm_backend_reg g_cpu_reg = {
    CLLM_BACKEND_REG_ABI,
    .iface =
        {
            .get_name = cpu_reg_get_name,
            .get_device_count = cpu_reg_get_device_count,
            .get_device = cpu_reg_get_device,
            .set_params = NULL, /* threads are per backend: cllm_backend_params */
        },
    .context = NULL,
};

cllm_backend_reg *cllm_cpu_reg(void) {
    g_cpu_device.reg = &g_cpu_reg;
    return &g_cpu_reg;
}
