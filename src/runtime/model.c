/* Loading a model: metadata, architecture, weights (mapped or read). */
#include "runtime/model.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "runtime/fit.h"
#include "runtime/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRESS_MIN_BYTES ((size_t)100 << 20)

cllm_model_params cllm_model_default_params(void) {
    return (cllm_model_params){.use_mmap = true, .progress = true, .plan = NULL};
}

/* The device index of weight tensor t (the CPU for the input group). */
static int weight_device(const cllm_model *m, const cllm_tensor *t) {
    const int g = cllm_fit_weight_group(t->name, m->hp.n_layer);
    if (g >= 0) return m->layer_device[g];
    return g == CLLM_FIT_GROUP_OUTPUT ? m->output_device : m->n_devices - 1;
}

/* The placement: the plan's, or every layer on the CPU. */
static cllm_status init_placement(cllm_model *m, const cllm_plan *plan) {
    const int n_layer = (int)m->hp.n_layer;
    m->layer_device = calloc((size_t)n_layer, sizeof(int));
    if (!m->layer_device) return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", m->path);
    if (!plan) {
        m->n_devices = 1;
        m->devices[0] = cllm_cpu_device();
        return CLLM_OK;
    }
    if (plan->hp.n_layer != m->hp.n_layer || plan->n_devices > CLLM_MODEL_MAX_DEVICES ||
        plan->n_devices < 1 ||
        cllm_device_kind_of(plan->devices[plan->n_devices - 1].dev) != CLLM_DEVICE_CPU) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: the plan is not one for this model", m->path);
    }
    m->n_devices = plan->n_devices;
    for (int d = 0; d < plan->n_devices; d++) m->devices[d] = plan->devices[d].dev;
    memcpy(m->layer_device, plan->layer_device, (size_t)n_layer * sizeof(int));
    m->output_device = plan->output_device;
    return CLLM_OK;
}

/* Allocates each non-CPU device's weights buffer (tensors laid out in
 * creation order, as the planner does) and places its tensors there, data
 * not yet copied. All or nothing. */
static size_t device_weights_bytes(const cllm_model *m, int d) {
    cllm_context *ctx = m->weights->ctx;
    cllm_buffer_type *buft =
        d == m->n_devices - 1 ? cllm_cpu_buffer_type() : cllm_device_buffer_type(m->devices[d]);
    const size_t align = cllm_buffer_type_alignment(buft);
    size_t size = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (weight_device(m, t) != d) continue;
        size = cllm_align_up(size, align) + cllm_buffer_type_alloc_size(buft, t);
    }
    return size;
}

static cllm_status alloc_device_weights(cllm_model *m) {
    const int cpu = m->n_devices - 1;
    for (int d = 0; d < cpu; d++) {
        cllm_buffer_type *buft = cllm_device_buffer_type(m->devices[d]);
        const size_t size = device_weights_bytes(m, d);
        if (!size) continue;
        cllm_status st =
            cllm_buffer_type_alloc(buft, size, CLLM_MEM_WEIGHTS, &m->device_weights[d]);
        if (st != CLLM_OK) {
            for (int e = 0; e < d; e++) {
                cllm_buffer_free(m->device_weights[e]);
                m->device_weights[e] = NULL;
            }
            return st;
        }
    }
    return CLLM_OK;
}

/* Places (and with `src`, fills) the tensors of the non-CPU devices: src(t)
 * is t's data on the host before the move. */
static void place_device_weights(cllm_model *m, bool copy) {
    cllm_context *ctx = m->weights->ctx;
    size_t off[CLLM_MODEL_MAX_DEVICES] = {0};
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const int d = weight_device(m, t);
        if (d == m->n_devices - 1) continue;
        cllm_buffer *buf = m->device_weights[d];
        cllm_buffer_type *buft = cllm_buffer_buft(buf);
        off[d] = cllm_align_up(off[d], cllm_buffer_type_alignment(buft));
        const void *host = t->data;
        cllm_buffer_place_tensor(buf, t, off[d]);
        if (copy) cllm_tensor_set(t, host, 0, cllm_nbytes(t));
        off[d] += cllm_buffer_type_alloc_size(buft, t);
    }
}

/* With mmap the weights buffer is the file's data section. */
size_t cllm_model_weights_bytes(const cllm_gguf *g, const cllm_weights *w, bool use_mmap) {
    if (use_mmap) {
        const uint64_t size = cllm_gguf_file_size(g), data = cllm_gguf_data_offset(g);
        return data < size ? (size_t)(size - data) : 0; /* no tensors: data may lie past the end */
    }
    return cllm_layout_measure(w->ctx, cllm_cpu_buffer_type());
}

static void progress(size_t done, size_t total, bool show) {
    if (!show) return;
    const int width = 40, filled = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled,
            "========================================", width - filled, "",
            total ? (int)(100.0 * (double)done / (double)total) : 100);
    if (done == total) fputc('\n', stderr);
}

/* Places every weight at its offset in the file's data section. */
static cllm_status place_mapped(cllm_model *m, int fd) {
    const cllm_gguf *g = m->gguf;
    const size_t size = (size_t)cllm_gguf_file_size(g);
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        return cllm_error(CLLM_ERR_IO, "%s: cannot map %zu bytes: %s", m->path, size,
                          strerror(errno));
    }
    const uint64_t data = CLLM_MIN(cllm_gguf_data_offset(g), (uint64_t)size);
    cllm_buffer *buf = NULL;
    cllm_status st =
        cllm_cpu_buffer_from_ptr((char *)map + data, size - data, CLLM_MEM_WEIGHTS, &buf);
    if (st != CLLM_OK) {
        munmap(map, size);
        return st;
    }
    cllm_context *ctx = m->weights->ctx;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        cllm_buffer_place_tensor(buf, t, (size_t)ti->offset);
    }
    m->map = map;
    m->map_size = size;
    m->weights_buf = buf;
    place_device_weights(m, true); /* copies from the mapping */
    return CLLM_OK;
}

/* Reads every weight into one allocated buffer. */
static cllm_status place_read(cllm_model *m, int fd, bool show_progress) {
    const cllm_gguf *g = m->gguf;
    cllm_buffer *buf = NULL;
    /* the other devices' tensors are placed first: the layout skips them */
    place_device_weights(m, false);
    CLLM_TRY(cllm_layout_alloc(m->weights->ctx, cllm_cpu_buffer_type(), CLLM_MEM_WEIGHTS, &buf));
    cllm_context *ctx = m->weights->ctx;
    size_t total = 0;
    void *stage = NULL; /* host staging for tensors in device memory */
    size_t stage_size = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        total += cllm_nbytes(t);
        if (!cllm_buffer_type_is_host(cllm_buffer_buft(t->buffer))) {
            stage_size = CLLM_MAX(stage_size, cllm_nbytes(t));
        }
    }
    if (stage_size && !(stage = malloc(stage_size))) {
        cllm_buffer_free(buf);
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", m->path);
    }
    show_progress = show_progress && total >= PROGRESS_MIN_BYTES && isatty(2);
    size_t done = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        const off_t base = (off_t)(cllm_gguf_data_offset(g) + ti->offset);
        const bool host = cllm_buffer_type_is_host(cllm_buffer_buft(t->buffer));
        char *dst = host ? (char *)t->data : (char *)stage;
        for (size_t off = 0; off < ti->size;) {
            const ssize_t r = pread(fd, dst + off, ti->size - off, base + (off_t)off);
            if (r <= 0) {
                free(stage);
                cllm_buffer_free(buf);
                return cllm_error(CLLM_ERR_IO, "%s: reading tensor %s: %s", m->path, t->name,
                                  r == 0 ? "unexpected end of file" : strerror(errno));
            }
            off += (size_t)r;
        }
        if (!host) cllm_tensor_set(t, stage, 0, ti->size);
        done += ti->size;
        progress(done, total, show_progress);
    }
    progress(total, total, show_progress);
    free(stage);
    m->weights_buf = buf;
    return CLLM_OK;
}

cllm_status cllm_model_load(const char *path, const cllm_model_params *params, cllm_model **out) {
    const cllm_model_params p = params ? *params : cllm_model_default_params();
    cllm_model *m = calloc(1, sizeof(*m));
    if (!m) return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", path);
    cllm_status st = CLLM_OK;
    int fd = -1;
    m->path = strdup(path);
    if (!m->path) {
        st = cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", path);
        goto fail;
    }
    if ((st = cllm_gguf_open(path, &m->gguf)) != CLLM_OK) goto fail;

    const char *arch_name = NULL;
    if ((st = cllm_gguf_get_str(m->gguf, "general.architecture", &arch_name)) != CLLM_OK) goto fail;
    m->arch = cllm_arch_find(arch_name);
    if (!m->arch) {
        st = cllm_error(CLLM_ERR_UNSUPPORTED, "%s: architecture \"%s\" is not supported", path,
                        arch_name);
        goto fail;
    }
    if ((st = m->arch->load_hparams(m->gguf, &m->hp)) != CLLM_OK) goto fail;
    if ((st = cllm_weights_new(m->gguf, m->arch, &m->hp, &m->weights)) != CLLM_OK) goto fail;
    /* a file without tokenizer metadata (a bare weights file) still loads */
    if (cllm_gguf_find_key(m->gguf, "tokenizer.ggml.model") >= 0 &&
        (st = cllm_tokenizer_new_from_gguf(m->gguf, &m->tok)) != CLLM_OK) {
        goto fail;
    }
    if ((st = init_placement(m, p.plan)) != CLLM_OK) goto fail;
    if ((st = alloc_device_weights(m)) != CLLM_OK) goto fail;
    /* CPU weights: the mapped data section, or the CPU's tensors laid out */
    m->weights_planned = p.use_mmap ? cllm_model_weights_bytes(m->gguf, m->weights, true)
                                    : device_weights_bytes(m, m->n_devices - 1);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != cllm_gguf_file_size(m->gguf)) {
        st = cllm_error(CLLM_ERR_IO, "%s: the file changed while loading", path);
        goto fail;
    }
    st = p.use_mmap ? place_mapped(m, fd) : place_read(m, fd, p.progress);
    if (st != CLLM_OK) goto fail;
    close(fd);
    *out = m;
    return CLLM_OK;

fail:
    if (fd >= 0) close(fd);
    cllm_model_free(m);
    return st;
}

void cllm_model_free(cllm_model *m) {
    if (!m) return;
    cllm_buffer_free(m->weights_buf);
    for (int d = 0; d < CLLM_MODEL_MAX_DEVICES; d++) cllm_buffer_free(m->device_weights[d]);
    free(m->layer_device);
    if (m->map) munmap(m->map, m->map_size);
    cllm_weights_free(m->weights);
    cllm_tokenizer_free(m->tok);
    cllm_gguf_free(m->gguf);
    free(m->path);
    free(m);
}
