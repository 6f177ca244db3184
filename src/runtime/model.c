/* Loading a model: metadata, architecture, weights (mapped or read). */
#include "runtime/model.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"

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
    return (cllm_model_params){.use_mmap = true, .progress = true};
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
    return CLLM_OK;
}

/* Reads every weight into one allocated buffer. */
static cllm_status place_read(cllm_model *m, int fd, bool show_progress) {
    const cllm_gguf *g = m->gguf;
    cllm_buffer *buf = NULL;
    CLLM_TRY(cllm_layout_alloc(m->weights->ctx, cllm_cpu_buffer_type(), CLLM_MEM_WEIGHTS, &buf));
    cllm_context *ctx = m->weights->ctx;
    const size_t total = cllm_buffer_size(buf);
    show_progress = show_progress && total >= PROGRESS_MIN_BYTES && isatty(2);
    size_t done = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        const off_t base = (off_t)(cllm_gguf_data_offset(g) + ti->offset);
        for (size_t off = 0; off < ti->size;) {
            const ssize_t r = pread(fd, (char *)t->data + off, ti->size - off, base + (off_t)off);
            if (r <= 0) {
                cllm_buffer_free(buf);
                return cllm_error(CLLM_ERR_IO, "%s: reading tensor %s: %s", m->path, t->name,
                                  r == 0 ? "unexpected end of file" : strerror(errno));
            }
            off += (size_t)r;
        }
        done += ti->size;
        progress(done, total, show_progress);
    }
    progress(total, total, show_progress);
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
    m->weights_planned = cllm_model_weights_bytes(m->gguf, m->weights, p.use_mmap);

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
    if (m->map) munmap(m->map, m->map_size);
    cllm_weights_free(m->weights);
    cllm_gguf_free(m->gguf);
    free(m->path);
    free(m);
}
