/* The test device (test-backend.h): host memory labelled device memory, a
 * budget, a subset of ops, fault injection, compute with the CPU kernels.
 *
 * Not part of the library. Built twice: as the test-only static library the
 * tests link (the device joins the registry through cllm_registry_add when
 * first enabled) and, with CLLM_BACKEND_MODULE defined, as the loadable
 * module cllm-backend-test.so (device "test0" when CLLM_TEST_DEVICE is set
 * or cllm_registry_configure("test", spec) is called, e.g. by the CLI's
 * --test-device) whose only exported symbol is cllm_backend_module_init. */
#include "backend/test/test-backend.h"
#include "core/hostmem.h"
#include "backend/backend-impl.h"
#include "backend/cpu/cpu-ops.h"
#include "backend/cpu/threadpool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TEST_DEVICE_NAME "test0"
#define TEST_DEVICE_ENV  "CLLM_TEST_DEVICE"
#define TEST_REG_NAME    "test"

/* Unlike the CPU's 64, so that the planners' alignment handling is tested. */
#define TEST_ALIGNMENT 256

_Static_assert(CLLM_OP_COUNT <= 64, "ops_disabled is a 64-bit mask");

typedef struct test_state {
    bool enabled;
    bool registered; /* added to the registry (static library only) */
    cllm_test_device_config cfg;
    _Atomic int allocs_left; /* fail when it reaches 0 from 1; <= 0: never */
} test_state;

static test_state g_test;
static cllm_device g_test_device;

/* ---- options ----------------------------------------------------------- */

cllm_test_device_config cllm_test_device_config_default(void) {
    return (cllm_test_device_config){
        .budget = (size_t)1 << 30, .ops_disabled = 0, .fail_alloc = 0, .workspace = 0};
}

static int op_by_name(const char *name, size_t len) {
    for (int op = 1; op < CLLM_OP_COUNT; op++) {
        const char *n = cllm_op_name((cllm_op)op);
        if (strlen(n) == len && strncmp(n, name, len) == 0) return op;
    }
    return -1;
}

/* "-a-b": all but a and b; "a+b": only a and b. */
static bool parse_ops(const char *v, uint64_t *disabled) {
    const bool subtract = *v == '-';
    uint64_t mask = 0;
    const char *p = v + (subtract ? 1 : 0);
    if (!*p) return false;
    for (;;) {
        const size_t len = strcspn(p, subtract ? "-" : "+");
        const int op = op_by_name(p, len);
        if (op < 0) return false; /* also an empty name: "a--b", "a+" */
        mask |= (uint64_t)1 << op;
        p += len;
        if (!*p) break;
        p++;
    }
    if (subtract) {
        *disabled = mask;
    } else {
        uint64_t all = 0;
        for (int op = 1; op < CLLM_OP_COUNT; op++) all |= (uint64_t)1 << op;
        *disabled = all & ~mask;
    }
    return true;
}

cllm_status cllm_test_device_config_parse(const char *s, cllm_test_device_config *out) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    char item[256];
    const char *p = s ? s : "";
    while (*p) {
        const size_t len = strcspn(p, ",");
        if (len >= sizeof(item)) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "test device: option too long in \"%s\"", s);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        p += len;
        if (*p) p++;
        if (!len) continue;
        char *eq = strchr(item, '=');
        if (!eq) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "test device: \"%s\" is not key=value", item);
        }
        *eq = '\0';
        const char *key = item, *val = eq + 1;
        bool ok;
        if (!strcmp(key, "budget")) {
            ok = cllm_parse_size(val, &cfg.budget);
        } else if (!strcmp(key, "workspace")) {
            ok = cllm_parse_size(val, &cfg.workspace);
        } else if (!strcmp(key, "ops")) {
            ok = *val && parse_ops(val, &cfg.ops_disabled);
        } else if (!strcmp(key, "fail_alloc")) {
            char *end;
            errno = 0;
            const long n = strtol(val, &end, 10);
            ok = !errno && end != val && !*end && n >= 0 && n <= 1000000000;
            if (ok) cfg.fail_alloc = (int)n;
        } else {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "test device: unknown option \"%s\" (budget, ops, fail_alloc, "
                              "workspace)",
                              key);
        }
        if (!ok) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "test device: bad value \"%s\" for %s", val,
                              key);
        }
    }
    *out = cfg;
    return CLLM_OK;
}

/* ---- buffers ----------------------------------------------------------- */

static void test_buffer_free(cllm_buffer *buf) { cllm_free(buf->context); }

static void *test_buffer_get_base(const cllm_buffer *buf) {
    return buf->context ? buf->context : (void *)(uintptr_t)TEST_ALIGNMENT;
}

static void test_buffer_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data,
                                   size_t offset, size_t size) {
    CLLM_UNUSED(buf);
    memcpy((char *)t->data + offset, data, size);
}

static void test_buffer_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data,
                                   size_t offset, size_t size) {
    CLLM_UNUSED(buf);
    memcpy(data, (const char *)t->data + offset, size);
}

static void test_buffer_clear(cllm_buffer *buf, uint8_t value) {
    if (buf->context) memset(buf->context, value, buf->size);
}

static const struct cllm_buffer_i k_test_buffer_iface = {
    .free_buffer = test_buffer_free,
    .get_base = test_buffer_get_base,
    .init_tensor = NULL, /* no per-tensor state */
    .set_tensor = test_buffer_set_tensor,
    .get_tensor = test_buffer_get_tensor,
    .clear = test_buffer_clear,
};

static size_t test_allocated_total(void) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += cllm_device_allocated(&g_test_device, k);
    return n;
}

static const char *test_buft_get_name(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return TEST_DEVICE_NAME;
}

static cllm_status test_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out) {
    const int left = atomic_fetch_sub(&g_test.allocs_left, 1);
    if (left == 1) {
        return cllm_error(CLLM_ERR_DEVICE_MEMORY,
                          "%s: allocation of %zu bytes failed (injected failure)", TEST_DEVICE_NAME,
                          size);
    }
    if (left <= 0) atomic_store(&g_test.allocs_left, 0);
    const size_t used = test_allocated_total();
    const size_t avail = used < g_test.cfg.budget ? g_test.cfg.budget - used : 0;
    if (size > avail) {
        return cllm_error(CLLM_ERR_DEVICE_MEMORY,
                          "%s: cannot allocate a %zu-byte buffer: %zu of %zu bytes free",
                          TEST_DEVICE_NAME, size, avail, g_test.cfg.budget);
    }
    void *data = NULL;
    if (size > 0 && !(data = cllm_aligned_alloc(TEST_ALIGNMENT, size))) {
        return cllm_error(CLLM_ERR_DEVICE_MEMORY, "%s: cannot allocate a %zu-byte buffer",
                          TEST_DEVICE_NAME, size);
    }
    cllm_buffer *buf = cllm_buffer_init(buft, k_test_buffer_iface, data, size);
    if (!buf) {
        cllm_free(data);
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", TEST_DEVICE_NAME);
    }
    *out = buf;
    return CLLM_OK;
}

static size_t test_buft_get_alignment(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return TEST_ALIGNMENT;
}

static bool test_buft_is_host(const cllm_buffer_type *buft) {
    CLLM_UNUSED(buft);
    return false; /* the point of this device */
}

static cllm_buffer_type g_test_buft = {
    .iface =
        {
            .get_name = test_buft_get_name,
            .alloc_buffer = test_buft_alloc,
            .get_alignment = test_buft_get_alignment,
            .get_max_size = NULL,   /* the budget is checked per allocation */
            .get_alloc_size = NULL, /* tensors take exactly their bytes */
            .is_host = test_buft_is_host,
        },
    .device = &g_test_device,
    .context = NULL,
};

/* ---- backend ----------------------------------------------------------- */

typedef struct test_backend_ctx {
    cllm_threadpool *pool; /* one thread: the kernels' barriers need a pool */
    cllm_graph *graph;
    void *wdata;
    size_t wsize;
} test_backend_ctx;

static bool test_op_enabled(cllm_op op) {
    return op < 64 && !(g_test.cfg.ops_disabled & ((uint64_t)1 << op));
}

static bool has_work(const cllm_tensor *t) {
    return cllm_op_has_compute(t->op) && cllm_nelements(t) > 0;
}

static const char *test_backend_get_name(const cllm_backend *be) {
    CLLM_UNUSED(be);
    return TEST_DEVICE_NAME;
}

static void test_backend_free(cllm_backend *be) {
    test_backend_ctx *ctx = be->context;
    cllm_threadpool_free(ctx->pool);
    cllm_free(ctx);
    cllm_free(be);
}

static size_t test_backend_workspace_size(cllm_backend *be, const cllm_graph *g) {
    CLLM_UNUSED(be);
    size_t size = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (has_work(g->nodes[i])) size = CLLM_MAX(size, cllm_cpu_op_workspace(g->nodes[i], 1));
    }
    return size + g_test.cfg.workspace;
}

static void test_compute_job(int ith, int nth, void *arg) {
    test_backend_ctx *ctx = arg;
    const cllm_cpu_params params = {
        .ith = ith, .nth = nth, .wdata = ctx->wdata, .wsize = ctx->wsize, .pool = ctx->pool};
    for (int i = 0; i < ctx->graph->n_nodes; i++) {
        cllm_tensor *node = ctx->graph->nodes[i];
        if (!has_work(node)) continue;
        cllm_cpu_compute_forward(&params, node);
        cllm_threadpool_barrier(ctx->pool);
    }
}

static cllm_status test_backend_graph_compute(cllm_backend *be, cllm_graph *g) {
    test_backend_ctx *ctx = be->context;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *node = g->nodes[i];
        if (!has_work(node)) continue;
        if (!test_op_enabled(node->op) || !cllm_cpu_supports_op(node)) {
            return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: cannot compute %s (%s)", TEST_DEVICE_NAME,
                              node->name, cllm_op_name(node->op));
        }
        if (cllm_buffer_buft(node->buffer) != &g_test_buft) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "%s: %s is not in %s memory", TEST_DEVICE_NAME,
                              node->name, TEST_DEVICE_NAME);
        }
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            const cllm_tensor *s = node->src[j];
            if (s && cllm_buffer_buft(s->buffer) != &g_test_buft) {
                return cllm_error(CLLM_ERR_INVALID_ARG, "%s: input %s of %s is not in %s memory",
                                  TEST_DEVICE_NAME, s->name, node->name, TEST_DEVICE_NAME);
            }
        }
    }
    ctx->graph = g;
    ctx->wdata = be->workspace ? cllm_buffer_base(be->workspace) : NULL;
    ctx->wsize = cllm_backend_workspace_allocated(be);
    cllm_threadpool_run(ctx->pool, test_compute_job, ctx);
    ctx->graph = NULL;
    return CLLM_OK;
}

static const struct cllm_backend_i k_test_backend_iface = {
    .get_name = test_backend_get_name,
    .free = test_backend_free,
    .get_workspace_size = test_backend_workspace_size,
    .graph_compute = test_backend_graph_compute,
    .synchronize = NULL,      /* compute is synchronous */
    .set_tensor_async = NULL, /* cllm_tensor_set */
    .get_tensor_async = NULL, /* cllm_tensor_get */
};

/* ---- device ------------------------------------------------------------ */

static const char *test_dev_get_name(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    return TEST_DEVICE_NAME;
}

static const char *test_dev_get_description(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    return "test device (host memory labelled device memory, CPU kernels)";
}

static void test_dev_get_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    CLLM_UNUSED(dev);
    const size_t used = test_allocated_total();
    *total_bytes = g_test.cfg.budget;
    *free_bytes = used < g_test.cfg.budget ? g_test.cfg.budget - used : 0;
}

static cllm_device_kind test_dev_get_kind(const cllm_device *dev) {
    CLLM_UNUSED(dev);
    return CLLM_DEVICE_ACCEL;
}

static cllm_buffer_type *test_dev_get_buffer_type(cllm_device *dev) {
    CLLM_UNUSED(dev);
    return &g_test_buft;
}

static bool test_dev_supports_op(cllm_device *dev, const cllm_tensor *node) {
    CLLM_UNUSED(dev);
    if (!has_work(node)) return true;
    return test_op_enabled(node->op) && cllm_cpu_supports_op(node);
}

static bool test_dev_supports_buft(cllm_device *dev, const cllm_buffer_type *buft) {
    CLLM_UNUSED(dev);
    return buft == &g_test_buft;
}

/* One thread whatever params->n_threads says: the device stands for an
 * accelerator, which computes on threads of its own. */
static cllm_status test_dev_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                         cllm_backend **out) {
    CLLM_UNUSED(params);
    cllm_backend *be = cllm_calloc(1, sizeof(*be));
    test_backend_ctx *ctx = cllm_calloc(1, sizeof(*ctx));
    if (!be || !ctx) goto fail;
    ctx->pool = cllm_threadpool_new(1);
    if (!ctx->pool) goto fail;
    be->iface = k_test_backend_iface;
    be->device = dev;
    be->context = ctx;
    *out = be;
    return CLLM_OK;
fail:
    cllm_free(ctx);
    cllm_free(be);
    return cllm_error(CLLM_ERR_NOMEM, "%s: cannot create a backend", TEST_DEVICE_NAME);
}

static cllm_device g_test_device = {
    .iface =
        {
            .get_name = test_dev_get_name,
            .get_description = test_dev_get_description,
            .get_memory = test_dev_get_memory,
            .get_kind = test_dev_get_kind,
            .get_buffer_type = test_dev_get_buffer_type,
            .supports_op = test_dev_supports_op,
            .supports_buft = test_dev_supports_buft,
            .init_backend = test_dev_init_backend,
        },
    .reg = NULL,
    .context = NULL,
};

/* ---- enabling, registry ------------------------------------------------ */

static cllm_backend_reg g_test_reg;

cllm_status cllm_test_device_enable(const cllm_test_device_config *cfg, cllm_device **out) {
#ifndef CLLM_BACKEND_MODULE
    /* the module is added by the loader; the static library adds itself */
    if (!g_test.registered) {
        CLLM_TRY(cllm_registry_add(&g_test_reg));
        g_test.registered = true;
    }
#endif
    g_test.cfg = cfg ? *cfg : cllm_test_device_config_default();
    if (g_test.cfg.budget == 0) g_test.cfg.budget = (size_t)1 << 30;
    atomic_store(&g_test.allocs_left, g_test.cfg.fail_alloc);
    g_test.enabled = true;
    g_test_device.reg = &g_test_reg;
    if (out) *out = &g_test_device;
    return CLLM_OK;
}

void cllm_test_device_disable(void) { g_test.enabled = false; }

cllm_device *cllm_test_device(void) { return g_test.enabled ? &g_test_device : NULL; }

void cllm_test_device_fail_alloc(int n) { atomic_store(&g_test.allocs_left, n > 0 ? n : 0); }

static const char *test_reg_get_name(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return TEST_REG_NAME;
}

static int test_reg_get_device_count(const cllm_backend_reg *reg) {
    CLLM_UNUSED(reg);
    return g_test.enabled ? 1 : 0;
}

static cllm_device *test_reg_get_device(cllm_backend_reg *reg, int i) {
    CLLM_UNUSED(reg);
    return g_test.enabled && i == 0 ? &g_test_device : NULL;
}

/* cllm_registry_configure("test", spec): parses and enables. */
static cllm_status test_reg_set_params(cllm_backend_reg *reg, const char *params) {
    CLLM_UNUSED(reg);
    cllm_test_device_config cfg;
    CLLM_TRY(cllm_test_device_config_parse(params, &cfg));
    return cllm_test_device_enable(&cfg, NULL);
}

static cllm_backend_reg g_test_reg = {
    CLLM_BACKEND_REG_ABI,
    .iface =
        {
            .get_name = test_reg_get_name,
            .get_device_count = test_reg_get_device_count,
            .get_device = test_reg_get_device,
            .set_params = test_reg_set_params,
        },
    .context = NULL,
};

#ifdef CLLM_BACKEND_MODULE
/* The environment enables the module's device once, when it is loaded. */
static void test_read_env(void) {
    static bool done;
    if (done) return;
    done = true;
    const char *env = getenv(TEST_DEVICE_ENV);
    if (!env) return;
    cllm_test_device_config cfg;
    if (cllm_test_device_config_parse(env, &cfg) != CLLM_OK) {
        CLLM_LOG_WARN("%s is ignored: %s", TEST_DEVICE_ENV, cllm_last_error());
        return;
    }
    cllm_test_device_enable(&cfg, NULL);
}

/* The module's entry point (see backend.h: loadable backends). */
__attribute__((visibility("default"))) cllm_backend_reg *cllm_backend_module_init(void);
cllm_backend_reg *cllm_backend_module_init(void) {
    test_read_env();
    return &g_test_reg;
}
#endif
