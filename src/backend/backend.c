/* The generic backend layer: wrappers that apply defaults, memory accounting
 * per device and kind, measure-mode buffers, tensor I/O, the registry. */
#include "backend/backend-impl.h"
#include "core/hostmem.h"

#include <dirent.h>
#include <limits.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const k_device_kind_names[] = {
    [CLLM_DEVICE_CPU] = "cpu",
    [CLLM_DEVICE_GPU] = "gpu",
    [CLLM_DEVICE_ACCEL] = "accel",
};
_Static_assert(CLLM_ARRAY_SIZE(k_device_kind_names) == CLLM_DEVICE_KIND_COUNT, "device kinds");

const char *cllm_device_kind_str(cllm_device_kind kind) {
    if ((unsigned)kind >= CLLM_DEVICE_KIND_COUNT) return "unknown";
    return k_device_kind_names[kind];
}

/* ---- buffer types ------------------------------------------------------ */

const char *cllm_buffer_type_name(const cllm_buffer_type *buft) {
    return buft->iface.get_name(buft);
}

size_t cllm_buffer_type_alignment(const cllm_buffer_type *buft) {
    return buft->iface.get_alignment(buft);
}

size_t cllm_buffer_type_max_size(const cllm_buffer_type *buft) {
    return buft->iface.get_max_size ? buft->iface.get_max_size(buft) : SIZE_MAX;
}

size_t cllm_buffer_type_alloc_size(const cllm_buffer_type *buft, const cllm_tensor *t) {
    return buft->iface.get_alloc_size ? buft->iface.get_alloc_size(buft, t) : cllm_nbytes(t);
}

bool cllm_buffer_type_is_host(const cllm_buffer_type *buft) {
    return buft->iface.is_host ? buft->iface.is_host(buft) : false;
}

cllm_device *cllm_buffer_type_device(const cllm_buffer_type *buft) { return buft->device; }

size_t cllm_buffer_type_piece_size(const cllm_buffer_type *buft) {
    const size_t max = cllm_buffer_type_max_size(buft);
    if (max == SIZE_MAX) return SIZE_MAX;
    return max - max % cllm_buffer_type_alignment(buft);
}

size_t cllm_buffer_type_place_offset(const cllm_buffer_type *buft, size_t offset, size_t size) {
    const size_t piece = cllm_buffer_type_piece_size(buft);
    if (piece == SIZE_MAX || piece == 0 || size == 0 || size > piece) return offset;
    const size_t in = offset % piece;
    return in + size > piece ? offset - in + piece : offset;
}

/* ---- buffers in pieces ------------------------------------------------- */

/* A buffer larger than its type's max_size: pieces of piece_size bytes
 * (the last one smaller), each a buffer of the type, allocated and counted
 * like any other; the buffer itself owns no memory and is not counted. A
 * tensor placed in it is placed in the piece that holds its offset, so that
 * its buffer is the piece (the planners keep a tensor within one piece:
 * cllm_buffer_type_place_offset). */
typedef struct split_ctx {
    size_t piece;
    int n;
    cllm_buffer *pieces[];
} split_ctx;

static void split_free(cllm_buffer *buf) {
    split_ctx *s = buf->context;
    for (int i = 0; i < s->n; i++) cllm_buffer_free(s->pieces[i]);
    cllm_free(s);
}

static bool is_split(const cllm_buffer *buf) { return buf->iface.free_buffer == split_free; }

/* No address of its own: every tensor lives in a piece. */
static void *split_get_base(const cllm_buffer *buf) {
    CLLM_UNUSED(buf);
    return NULL;
}

static void split_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                             size_t size) {
    CLLM_UNUSED(data), CLLM_UNUSED(offset), CLLM_UNUSED(size);
    CLLM_ASSERTF(false, "%s: %s is placed in a buffer of pieces, not in a piece",
                 cllm_buffer_type_name(buf->buft), t->name);
}

static void split_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                             size_t size) {
    CLLM_UNUSED(data), CLLM_UNUSED(offset), CLLM_UNUSED(size);
    CLLM_ASSERTF(false, "%s: %s is placed in a buffer of pieces, not in a piece",
                 cllm_buffer_type_name(buf->buft), t->name);
}

static void split_clear(cllm_buffer *buf, uint8_t value) {
    split_ctx *s = buf->context;
    for (int i = 0; i < s->n; i++) cllm_buffer_clear(s->pieces[i], value);
}

static cllm_status split_alloc(cllm_buffer_type *buft, size_t size, cllm_mem_kind kind,
                               size_t piece, cllm_buffer **out) {
    static const struct cllm_buffer_i split_iface = {
        .free_buffer = split_free,
        .get_base = split_get_base,
        .init_tensor = NULL, /* the pieces' own */
        .set_tensor = split_set_tensor,
        .get_tensor = split_get_tensor,
        .clear = split_clear,
    };
    const size_t n = size / piece + (size % piece != 0);
    if (n > INT_MAX)
        return cllm_error(CLLM_ERR_TOO_LARGE, "%s: too many pieces", buft->iface.get_name(buft));
    split_ctx *s = cllm_calloc(1, sizeof(*s) + n * sizeof(s->pieces[0]));
    if (!s) return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    s->piece = piece;
    for (size_t i = 0; i < n; i++) {
        const size_t bytes = CLLM_MIN(piece, size - i * piece);
        const cllm_status st = cllm_buffer_type_alloc(buft, bytes, kind, &s->pieces[i]);
        if (st != CLLM_OK) {
            for (int j = 0; j < s->n; j++) cllm_buffer_free(s->pieces[j]);
            cllm_free(s);
            return st;
        }
        s->n++;
    }
    cllm_buffer *buf = cllm_buffer_init(buft, split_iface, s, size);
    if (!buf) {
        for (int j = 0; j < s->n; j++) cllm_buffer_free(s->pieces[j]);
        cllm_free(s);
        return cllm_error(CLLM_ERR_NOMEM, "out of host memory");
    }
    buf->kind = kind;
    *out = buf;
    return CLLM_OK;
}

int cllm_buffer_n_pieces(const cllm_buffer *buf) {
    return is_split(buf) ? ((const split_ctx *)buf->context)->n : 1;
}

cllm_buffer *cllm_buffer_piece(cllm_buffer *buf, int i) {
    if (!is_split(buf)) return i == 0 ? buf : NULL;
    split_ctx *s = buf->context;
    return i >= 0 && i < s->n ? s->pieces[i] : NULL;
}

bool cllm_buffer_holds(const cllm_buffer *buf, const cllm_buffer *other) {
    if (!buf || !other) return false;
    if (buf == other) return true;
    if (!is_split(buf)) return false;
    const split_ctx *s = buf->context;
    for (int i = 0; i < s->n; i++) {
        if (s->pieces[i] == other) return true;
    }
    return false;
}

cllm_status cllm_buffer_type_alloc(cllm_buffer_type *buft, size_t size, cllm_mem_kind kind,
                                   cllm_buffer **out) {
    CLLM_ASSERT((unsigned)kind < CLLM_MEM_COUNT);
    const size_t max = cllm_buffer_type_max_size(buft);
    if (size > max) {
        const size_t piece = cllm_buffer_type_piece_size(buft);
        if (piece == 0) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "%s: a %zu-byte %s buffer exceeds the %zu-byte limit",
                              cllm_buffer_type_name(buft), size, cllm_mem_kind_str(kind), max);
        }
        return split_alloc(buft, size, kind, piece, out);
    }
    cllm_buffer *buf = NULL;
    cllm_status st = buft->iface.alloc_buffer(buft, size, &buf);
    if (st != CLLM_OK) return st;
    buf->kind = kind;
    atomic_fetch_add(&buft->device->allocated[kind], buf->size);
    *out = buf;
    return CLLM_OK;
}

/* ---- buffers ----------------------------------------------------------- */

cllm_buffer *cllm_buffer_init(cllm_buffer_type *buft, struct cllm_buffer_i iface, void *context,
                              size_t size) {
    cllm_buffer *buf = cllm_calloc(1, sizeof(*buf));
    if (!buf) return NULL;
    buf->iface = iface;
    buf->buft = buft;
    buf->context = context;
    buf->size = size;
    buf->kind = CLLM_MEM_COMPUTE;
    return buf;
}

/* Measure mode: a region that does not exist. The base is a fixed address in
 * the first page, which is never mapped; nothing may dereference it. */
#define MEASURE_BASE ((uintptr_t)0x1000)

static void *measure_get_base(const cllm_buffer *buf) {
    CLLM_UNUSED(buf);
    return (void *)MEASURE_BASE;
}

static void measure_set_tensor(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t offset,
                               size_t size) {
    CLLM_UNUSED(buf), CLLM_UNUSED(t), CLLM_UNUSED(data), CLLM_UNUSED(offset), CLLM_UNUSED(size);
}

static void measure_get_tensor(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t offset,
                               size_t size) {
    CLLM_UNUSED(buf), CLLM_UNUSED(t), CLLM_UNUSED(offset);
    memset(data, 0, size);
}

static void measure_clear(cllm_buffer *buf, uint8_t value) { CLLM_UNUSED(buf), CLLM_UNUSED(value); }

cllm_buffer *cllm_buffer_new_measure(cllm_buffer_type *buft, size_t size) {
    static const struct cllm_buffer_i measure_iface = {
        .free_buffer = NULL, /* nothing behind it */
        .get_base = measure_get_base,
        .init_tensor = NULL, /* no device-side state to set up */
        .set_tensor = measure_set_tensor,
        .get_tensor = measure_get_tensor,
        .clear = measure_clear,
    };
    cllm_buffer *buf = cllm_buffer_init(buft, measure_iface, NULL, size);
    if (buf) buf->is_measure = true;
    return buf;
}

void cllm_buffer_measure_grow(cllm_buffer *buf, size_t size) {
    CLLM_ASSERTF(buf->is_measure, "measure_grow: not a measure buffer");
    buf->size = CLLM_MAX(buf->size, size);
}

void cllm_buffer_free(cllm_buffer *buf) {
    if (!buf) return;
    if (!buf->is_measure && !is_split(buf))
        atomic_fetch_sub(&buf->buft->device->allocated[buf->kind], buf->size);
    if (buf->iface.free_buffer) buf->iface.free_buffer(buf);
    cllm_free(buf);
}

size_t cllm_buffer_size(const cllm_buffer *buf) { return buf->size; }
void *cllm_buffer_base(const cllm_buffer *buf) { return buf->iface.get_base(buf); }
cllm_mem_kind cllm_buffer_kind(const cllm_buffer *buf) { return buf->kind; }
bool cllm_buffer_is_measure(const cllm_buffer *buf) { return buf->is_measure; }
cllm_buffer_type *cllm_buffer_buft(const cllm_buffer *buf) { return buf->buft; }
void cllm_buffer_clear(cllm_buffer *buf, uint8_t value) { buf->iface.clear(buf, value); }

void cllm_buffer_place_tensor(cllm_buffer *buf, cllm_tensor *t, size_t offset) {
    CLLM_ASSERTF(t->view_src == NULL, "place_tensor: %s is a view", t->name);
    const size_t need = cllm_buffer_type_alloc_size(buf->buft, t);
    CLLM_ASSERTF(offset <= buf->size && need <= buf->size - offset,
                 "place_tensor: %s (%zu bytes) at offset %zu overflows a %zu-byte buffer", t->name,
                 need, offset, buf->size);
    CLLM_ASSERTF(offset % cllm_buffer_type_alignment(buf->buft) == 0,
                 "place_tensor: %s at unaligned offset %zu", t->name, offset);
    if (is_split(buf)) {
        split_ctx *s = buf->context;
        const int i = (int)CLLM_MIN(offset / s->piece, (size_t)(s->n - 1));
        const size_t in = offset - (size_t)i * s->piece;
        CLLM_ASSERTF(need <= s->pieces[i]->size - in,
                     "place_tensor: %s (%zu bytes) at offset %zu crosses the end of a %zu-byte "
                     "piece",
                     t->name, need, offset, s->piece);
        cllm_buffer_place_tensor(s->pieces[i], t, in);
        return;
    }
    t->buffer = buf;
    t->data = (char *)cllm_buffer_base(buf) + offset;
    if (buf->iface.init_tensor) buf->iface.init_tensor(buf, t);
}

void cllm_tensor_init_view(cllm_tensor *t) {
    CLLM_ASSERTF(t->view_src != NULL && t->view_src->data != NULL,
                 "init_view: %s has no placed source", t->name);
    t->buffer = t->view_src->buffer;
    t->data = (char *)t->view_src->data + t->view_offs;
    if (t->buffer->iface.init_tensor) t->buffer->iface.init_tensor(t->buffer, t);
}

static void check_io(const cllm_tensor *t, size_t offset, size_t size, const char *what) {
    CLLM_ASSERTF(t->buffer != NULL && t->data != NULL, "%s: tensor %s is not placed", what,
                 t->name);
    const size_t n = cllm_nbytes(t);
    CLLM_ASSERTF(offset <= n && size <= n - offset,
                 "%s: %zu bytes at offset %zu outside the %zu bytes of %s", what, size, offset, n,
                 t->name);
}

void cllm_tensor_set(cllm_tensor *t, const void *data, size_t offset, size_t size) {
    check_io(t, offset, size, "tensor_set");
    if (size) t->buffer->iface.set_tensor(t->buffer, t, data, offset, size);
}

void cllm_tensor_get(const cllm_tensor *t, void *data, size_t offset, size_t size) {
    check_io(t, offset, size, "tensor_get");
    if (size) t->buffer->iface.get_tensor(t->buffer, t, data, offset, size);
}

void cllm_tensor_set_all(cllm_tensor *t, const void *data) {
    CLLM_ASSERTF(cllm_is_contiguous(t), "tensor_set_all: %s is not contiguous", t->name);
    cllm_tensor_set(t, data, 0, cllm_nbytes(t));
}

void cllm_tensor_get_all(const cllm_tensor *t, void *data) {
    CLLM_ASSERTF(cllm_is_contiguous(t), "tensor_get_all: %s is not contiguous", t->name);
    cllm_tensor_get(t, data, 0, cllm_nbytes(t));
}

/* ---- devices ----------------------------------------------------------- */

const char *cllm_device_name(const cllm_device *dev) {
    return dev ? dev->iface.get_name(dev) : NULL;
}

const char *cllm_device_description(const cllm_device *dev) {
    return dev ? dev->iface.get_description(dev) : NULL;
}

cllm_device_kind cllm_device_kind_of(const cllm_device *dev) {
    return dev ? dev->iface.get_kind(dev) : (cllm_device_kind)0;
}

void cllm_device_memory(cllm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    size_t f = 0, t = 0;
    if (dev) dev->iface.get_memory(dev, &f, &t);
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
}

cllm_buffer_type *cllm_device_buffer_type(cllm_device *dev) {
    return dev->iface.get_buffer_type(dev);
}

bool cllm_device_supports_op(cllm_device *dev, const cllm_tensor *node) {
    return dev->iface.supports_op(dev, node);
}

bool cllm_device_supports_buft(cllm_device *dev, const cllm_buffer_type *buft) {
    if (dev->iface.supports_buft) return dev->iface.supports_buft(dev, buft);
    return buft == cllm_device_buffer_type(dev);
}

size_t cllm_device_allocated(const cllm_device *dev, cllm_mem_kind kind) {
    CLLM_ASSERT((unsigned)kind < CLLM_MEM_COUNT);
    return atomic_load(&((cllm_device *)dev)->allocated[kind]);
}

void cllm_device_get_props(cllm_device *dev, cllm_device_props *props) {
    *props = (cllm_device_props){.n_cores = 1, .n_threads_max = 1, .features = "", .opt_in = false};
    if (dev->iface.get_props) dev->iface.get_props(dev, props);
}

cllm_status cllm_device_init_backend(cllm_device *dev, const cllm_backend_params *params,
                                     cllm_backend **out) {
    static const cllm_backend_params defaults = {.n_threads = 0};
    return dev->iface.init_backend(dev, params ? params : &defaults, out);
}

cllm_status cllm_device_buffer_from_host_ptr(cllm_device *dev, void *ptr, size_t size,
                                             cllm_mem_kind kind, cllm_buffer **out) {
    CLLM_ASSERT((unsigned)kind < CLLM_MEM_COUNT);
    if (!dev->iface.buffer_from_host_ptr) {
        return cllm_error(CLLM_ERR_UNSUPPORTED, "%s: cannot compute from host memory in place",
                          cllm_device_name(dev));
    }
    cllm_buffer *buf = NULL;
    CLLM_TRY(dev->iface.buffer_from_host_ptr(dev, ptr, size, &buf));
    buf->kind = kind;
    atomic_fetch_add(&dev->allocated[kind], buf->size);
    *out = buf;
    return CLLM_OK;
}

cllm_buffer_type *cllm_device_host_ptr_buffer_type(cllm_device *dev) {
    return dev->iface.get_host_ptr_buffer_type ? dev->iface.get_host_ptr_buffer_type(dev) : NULL;
}

bool cllm_device_init_weight(cllm_device *dev, cllm_tensor *t, size_t *scratch) {
    *scratch = 0;
    return dev->iface.init_weight ? dev->iface.init_weight(dev, t, scratch) : false;
}

bool cllm_device_convert_weight(cllm_device *dev, cllm_tensor *t, void *scratch, bool file_mapped) {
    if (!t->layout || !dev->iface.convert_weight) return true;
    return dev->iface.convert_weight(dev, t, scratch, file_mapped);
}

/* ---- backends ---------------------------------------------------------- */

void cllm_backend_free(cllm_backend *be) {
    if (!be) return;
    (void)cllm_backend_synchronize(be); /* queued work may use the workspace */
    cllm_buffer_free(be->workspace);
    be->workspace = NULL;
    be->iface.free(be);
}

const char *cllm_backend_name(const cllm_backend *be) { return be->iface.get_name(be); }
cllm_device *cllm_backend_device(const cllm_backend *be) { return be->device; }

size_t cllm_backend_workspace_size(cllm_backend *be, const cllm_graph *g) {
    return be->iface.get_workspace_size ? be->iface.get_workspace_size(be, g) : 0;
}

size_t cllm_backend_workspace_allocated(const cllm_backend *be) {
    return be->workspace ? cllm_buffer_size(be->workspace) : 0;
}

cllm_status cllm_backend_reserve_workspace(cllm_backend *be, const cllm_graph *g) {
    return cllm_backend_reserve_workspace_bytes(be, cllm_backend_workspace_size(be, g));
}

cllm_status cllm_backend_reserve_workspace_bytes(cllm_backend *be, size_t need) {
    if (need <= cllm_backend_workspace_allocated(be)) return CLLM_OK;
    cllm_buffer *buf = NULL;
    cllm_status st =
        cllm_buffer_type_alloc(cllm_device_buffer_type(be->device), need, CLLM_MEM_WORKSPACE, &buf);
    if (st != CLLM_OK) return st;
    cllm_buffer_free(be->workspace);
    be->workspace = buf;
    return CLLM_OK;
}

cllm_status cllm_backend_graph_compute_async(cllm_backend *be, cllm_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *t = g->nodes[i];
        if (!t->data || !t->buffer || t->buffer->is_measure) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "%s: node %d (%s, %s) is not placed in a real buffer",
                              cllm_backend_name(be), i, t->name, cllm_op_name(t->op));
        }
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            const cllm_tensor *s = t->src[j];
            if (s && (!s->data || !s->buffer || s->buffer->is_measure)) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "%s: input %s of node %s is not placed in a real buffer",
                                  cllm_backend_name(be), s->name, t->name);
            }
        }
    }
    /* a new workspace replaces the one that queued work may still use */
    if (cllm_backend_workspace_size(be, g) > cllm_backend_workspace_allocated(be))
        CLLM_TRY(cllm_backend_synchronize(be));
    cllm_status st = cllm_backend_reserve_workspace(be, g);
    if (st != CLLM_OK) return st;
    return be->iface.graph_compute(be, g);
}

cllm_status cllm_backend_graph_compute(cllm_backend *be, cllm_graph *g) {
    const cllm_status st = cllm_backend_graph_compute_async(be, g);
    const cllm_status ss = cllm_backend_synchronize(be);
    return st != CLLM_OK ? st : ss;
}

cllm_status cllm_backend_synchronize(cllm_backend *be) {
    return be->iface.synchronize ? be->iface.synchronize(be) : CLLM_OK;
}

bool cllm_backend_has_async(const cllm_backend *be) {
    return be->iface.set_tensor_async && be->iface.get_tensor_async;
}

cllm_status cllm_backend_tensor_set_async(cllm_backend *be, cllm_tensor *t, const void *data,
                                          size_t offset, size_t size) {
    check_io(t, offset, size, "tensor_set_async");
    if (!size) return CLLM_OK;
    if (cllm_backend_has_async(be)) return be->iface.set_tensor_async(be, t, data, offset, size);
    CLLM_TRY(cllm_backend_synchronize(be));
    cllm_tensor_set(t, data, offset, size);
    return CLLM_OK;
}

cllm_status cllm_backend_tensor_get_async(cllm_backend *be, const cllm_tensor *t, void *data,
                                          size_t offset, size_t size) {
    check_io(t, offset, size, "tensor_get_async");
    if (!size) return CLLM_OK;
    if (cllm_backend_has_async(be)) return be->iface.get_tensor_async(be, t, data, offset, size);
    CLLM_TRY(cllm_backend_synchronize(be));
    cllm_tensor_get(t, data, offset, size);
    return CLLM_OK;
}

/* ---- copies between buffers ------------------------------------------ */

cllm_status cllm_tensor_copy(const cllm_tensor *src, cllm_tensor *dst) {
    const size_t n = cllm_nbytes(src);
    CLLM_ASSERTF(src->buffer && dst->buffer && src->data && dst->data,
                 "tensor_copy: %s or %s is not placed", src->name, dst->name);
    CLLM_ASSERTF(cllm_nbytes(dst) == n, "tensor_copy: %s has %zu bytes, %s has %zu", src->name, n,
                 dst->name, cllm_nbytes(dst));
    if (n == 0 || src->data == dst->data) return CLLM_OK;
    if (cllm_buffer_type_is_host(src->buffer->buft) && !src->buffer->is_measure) {
        cllm_tensor_set(dst, src->data, 0, n);
    } else if (cllm_buffer_type_is_host(dst->buffer->buft) && !dst->buffer->is_measure) {
        cllm_tensor_get(src, dst->data, 0, n);
    } else {
        /* device to device: through host memory */
        void *tmp = cllm_malloc(n);
        if (!tmp) {
            return cllm_error(CLLM_ERR_NOMEM,
                              "tensor_copy: no host memory to stage %zu bytes of %s", n, src->name);
        }
        cllm_tensor_get(src, tmp, 0, n);
        cllm_tensor_set(dst, tmp, 0, n);
        cllm_free(tmp);
    }
    return CLLM_OK;
}

/* ---- registry ---------------------------------------------------------- */

/* Registries: the built-in backends first, in the order of their table (the
 * CPU is device 0), then loadable modules in the order found, then those the
 * program adds (cllm_registry_add). */
#define MAX_REGS 32

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    _Atomic int n_regs;
    cllm_backend_reg *regs[MAX_REGS];
    void *handles[MAX_REGS]; /* dlopen handles of modules (never closed:
                                their devices may be in use until exit) */
} g_reg = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static cllm_status add_reg(cllm_backend_reg *reg, void *handle) {
    const int n = atomic_load(&g_reg.n_regs);
    for (int i = 0; i < n; i++) {
        if (g_reg.regs[i] == reg ||
            strcmp(g_reg.regs[i]->iface.get_name(g_reg.regs[i]), reg->iface.get_name(reg)) == 0) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "registry: backend \"%s\" is already loaded",
                              reg->iface.get_name(reg));
        }
    }
    if (n >= MAX_REGS) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "registry: more than %d backends", MAX_REGS);
    }
    g_reg.regs[n] = reg;
    g_reg.handles[n] = handle;
    atomic_store(&g_reg.n_regs, n + 1); /* published after the slot is written */
    return CLLM_OK;
}

/* Whether `reg` was built against this library's backend structs
 * (backend-impl.h: CLLM_BACKEND_API_VERSION). Reads only the fields that keep
 * their offsets in every version; on a mismatch `status` is returned with a
 * message naming `what` and `path` (a module's) and both versions. */
static cllm_status check_abi(const cllm_backend_reg *reg, const char *what, const char *path,
                             cllm_status status) {
    if (reg->api_version == CLLM_BACKEND_API_VERSION &&
        reg->reg_size == sizeof(struct cllm_backend_reg) &&
        reg->iface_size == CLLM_BACKEND_IFACE_SIZE) {
        return CLLM_OK;
    }
    return cllm_error(status,
                      "%s%s was built for backend API version %d (entry %zu bytes, interfaces %zu "
                      "bytes); this library has version %d (%zu, %zu bytes): not loaded, rebuild "
                      "it against this library",
                      what, path, reg->api_version, reg->reg_size, reg->iface_size,
                      CLLM_BACKEND_API_VERSION, sizeof(struct cllm_backend_reg),
                      (size_t)CLLM_BACKEND_IFACE_SIZE);
}

/* Modules call back into the library: only an executable (or shared
 * library) that exports its symbols can host them. */
static bool can_host_modules(void) {
    return dlsym(RTLD_DEFAULT, "cllm_registry_load_module") != NULL;
}

static cllm_status load_module_locked(const char *path) {
    if (!can_host_modules()) {
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "cannot load backend module %s: this program does not export the "
                          "library's symbols (link it with -rdynamic)",
                          path);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return cllm_error(CLLM_ERR_IO, "cannot load backend module %s: %s", path,
                          why ? why : "unknown error");
    }
    cllm_backend_reg *(*init)(void) = NULL;
    /* POSIX guarantees that a data pointer from dlsym converts to a function pointer */
    void *sym = dlsym(h, CLLM_BACKEND_MODULE_SYMBOL);
    memcpy(&init, &sym, sizeof(init));
    if (!init) {
        dlclose(h);
        return cllm_error(CLLM_ERR_FORMAT, "backend module %s has no %s()", path,
                          CLLM_BACKEND_MODULE_SYMBOL);
    }
    cllm_backend_reg *reg = init();
    if (!reg) {
        dlclose(h);
        return cllm_error(CLLM_ERR_BACKEND, "backend module %s did not initialise", path);
    }
    cllm_status st = check_abi(reg, "backend module ", path, CLLM_ERR_UNSUPPORTED);
    if (st != CLLM_OK) {
        dlclose(h);
        return st;
    }
    if (!reg->iface.get_name || !reg->iface.get_device_count || !reg->iface.get_device) {
        dlclose(h);
        return cllm_error(CLLM_ERR_BACKEND, "backend module %s did not initialise", path);
    }
    st = add_reg(reg, h);
    if (st != CLLM_OK) dlclose(h);
    return st;
}

static bool is_module_name(const char *name) {
    const size_t n = strlen(name), np = strlen(CLLM_BACKEND_MODULE_PREFIX);
    return n > np + 3 && strncmp(name, CLLM_BACKEND_MODULE_PREFIX, np) == 0 &&
           strcmp(name + n - 3, ".so") == 0;
}

static int load_modules_locked(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[MAX_REGS];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_REGS) {
        if (!is_module_name(e->d_name)) continue;
        if ((names[n] = cllm_strdup(e->d_name)) != NULL) {
            n++;
        } else { /* discovery is best effort: the module is skipped, and said so */
            CLLM_LOG_WARN("backend modules: out of host memory, %s/%s skipped", dir, e->d_name);
        }
    }
    closedir(d);
    /* sorted, so that device order does not depend on the file system */
    for (int i = 1; i < n; i++) {
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    }
    int loaded = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < sizeof(path)) {
            if (load_module_locked(path) == CLLM_OK) loaded++; /* else skipped, logged */
        }
        cllm_free(names[i]);
    }
    return loaded;
}

static void registry_init(void) {
    pthread_mutex_lock(&g_reg.lock);
    for (int i = 0; i < cllm_builtin_backend_count; i++) {
        cllm_backend_reg *reg = cllm_builtin_backends[i]();
        if (reg) add_reg(reg, NULL); /* a duplicate name is logged and skipped */
    }
    const char *env = getenv("CLLM_BACKEND_PATH");
    if (!can_host_modules()) {
        CLLM_LOG_DEBUG("backend modules: not loaded (symbols not exported)");
    } else if (env && *env) {
        load_modules_locked(env);
    } else {
        char exe[4096];
        const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (len > 0) {
            exe[len] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) {
                *slash = '\0';
                load_modules_locked(exe[0] ? exe : "/");
            }
        }
    }
    pthread_mutex_unlock(&g_reg.lock);
}

static int n_registries(void) {
    pthread_once(&g_reg.once, registry_init);
    return atomic_load(&g_reg.n_regs);
}

int cllm_registry_count(void) { return n_registries(); }

cllm_backend_reg *cllm_registry_get(int i) {
    return i >= 0 && i < n_registries() ? g_reg.regs[i] : NULL;
}

const char *cllm_backend_reg_name(const cllm_backend_reg *reg) { return reg->iface.get_name(reg); }

cllm_status cllm_registry_load_module(const char *path) {
    n_registries();
    pthread_mutex_lock(&g_reg.lock);
    const cllm_status st = load_module_locked(path);
    pthread_mutex_unlock(&g_reg.lock);
    return st;
}

cllm_status cllm_registry_add(cllm_backend_reg *reg) {
    if (reg) CLLM_TRY(check_abi(reg, "registry: a backend entry", "", CLLM_ERR_INVALID_ARG));
    if (!reg || !reg->iface.get_name || !reg->iface.get_device_count || !reg->iface.get_device) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "registry: incomplete backend registry entry");
    }
    n_registries();
    pthread_mutex_lock(&g_reg.lock);
    const cllm_status st = add_reg(reg, NULL);
    pthread_mutex_unlock(&g_reg.lock);
    return st;
}

cllm_status cllm_registry_configure(const char *reg_name, const char *params) {
    for (int i = 0; i < cllm_registry_count(); i++) {
        cllm_backend_reg *reg = cllm_registry_get(i);
        if (strcmp(reg->iface.get_name(reg), reg_name) != 0) continue;
        if (!reg->iface.set_params) {
            return cllm_error(CLLM_ERR_UNSUPPORTED, "backend \"%s\" takes no options", reg_name);
        }
        return reg->iface.set_params(reg, params ? params : "");
    }
    return cllm_error(CLLM_ERR_UNSUPPORTED,
                      "no backend \"%s\" (its module %s%s.so is neither next to the program nor "
                      "in CLLM_BACKEND_PATH)",
                      reg_name, CLLM_BACKEND_MODULE_PREFIX, reg_name);
}

int cllm_registry_load_modules(const char *dir) {
    n_registries();
    pthread_mutex_lock(&g_reg.lock);
    const int n = load_modules_locked(dir);
    pthread_mutex_unlock(&g_reg.lock);
    return n;
}

static cllm_backend_reg *registries(int i) { return i < n_registries() ? g_reg.regs[i] : NULL; }

int cllm_registry_device_count(void) {
    int n = 0;
    for (int r = 0; registries(r); r++) n += registries(r)->iface.get_device_count(registries(r));
    return n;
}

cllm_device *cllm_registry_device(int i) {
    if (i < 0) return NULL;
    for (int r = 0; registries(r); r++) {
        cllm_backend_reg *reg = registries(r);
        const int n = reg->iface.get_device_count(reg);
        if (i < n) return reg->iface.get_device(reg, i);
        i -= n;
    }
    return NULL;
}

cllm_device *cllm_registry_device_by_name(const char *name) {
    for (int i = 0; i < cllm_registry_device_count(); i++) {
        cllm_device *dev = cllm_registry_device(i);
        if (dev && strcmp(cllm_device_name(dev), name) == 0) return dev;
    }
    return NULL;
}

cllm_device *cllm_registry_device_by_kind(cllm_device_kind kind) {
    for (int i = 0; i < cllm_registry_device_count(); i++) {
        cllm_device *dev = cllm_registry_device(i);
        if (dev && cllm_device_kind_of(dev) == kind) return dev;
    }
    return NULL;
}
