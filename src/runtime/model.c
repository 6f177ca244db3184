/* Loading a model: metadata, architecture, weights (mapped or read). */
#include "core/hostmem.h"
#include "runtime/model.h"
#include "runtime/fit.h"
#include "runtime/mapguard.h"
#include "text/tokenizer.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRESS_MIN_BYTES ((size_t)100 << 20)
#define READ_PIECE         ((size_t)4 << 20) /* page cache held at once while loading a streamed plan */

cllm_model_params cllm_model_default_params(void) {
    return (cllm_model_params){.use_mmap = true, .progress = true, .plan = NULL};
}

/* The caller's progress callback (cllm_model_params.progress_fn): bytes
 * of resident weights read (a load that reads), then laid out. */
typedef struct load_progress {
    cllm_progress_fn fn;
    void *ud;
    uint64_t done, total;
} load_progress;

static void report(load_progress *lp, uint64_t add) {
    if (!lp->fn) return;
    lp->done = add > lp->total - lp->done ? lp->total : lp->done + add;
    lp->fn(lp->done, lp->total, lp->ud);
}

/* The bytes of the weights this host holds resident. */
static uint64_t resident_bytes(const cllm_model *m) {
    uint64_t n = 0;
    cllm_context *ctx = m->weights->ctx;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        /* (a mapped weight has no buffer until the file is mapped) */
        if (cllm_placement_weight_device(&m->place, m->weights, i) != CLLM_PLACE_NONE &&
            !cllm_placement_weight_streamed(&m->place, m->weights, i)) {
            n += cllm_nbytes(cllm_context_tensor(ctx, i));
        }
    }
    return n;
}

/* The placement: the plan's (whose shape then bounds the sessions), or
 * every layer on the CPU. */
static cllm_status init_placement(cllm_model *m, const cllm_plan *plan, bool use_mmap,
                                  const cllm_placement *placed) {
    if (placed) {
        if (placed->n_layer != (int)m->hp.n_layer ||
            (placed->keep && placed->n_keep != cllm_context_n_tensors(m->weights->ctx))) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "%s: the placement is not one for this model",
                              m->path);
        }
        return cllm_placement_copy(&m->place, placed);
    }
    if (!plan) return cllm_placement_init_cpu(&m->place, (int)m->hp.n_layer);
    const cllm_placement *pp = &plan->place;
    if (plan->hp.n_layer != m->hp.n_layer || pp->n_layer != (int)m->hp.n_layer ||
        strcmp(plan->hp.arch, m->hp.arch) != 0 || plan->hp.n_embd != m->hp.n_embd) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: the plan is not one for this model", m->path);
    }
    if (plan->use_mmap != use_mmap && !plan->n_streamed) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "%s: the plan was made for %s weights, the load asks for %s", m->path,
                          plan->use_mmap ? "mapped" : "read", use_mmap ? "mapped" : "read");
    }
    if (pp->keep && pp->n_keep != cllm_context_n_tensors(m->weights->ctx)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: the plan is not one for this model", m->path);
    }
    CLLM_TRY(cllm_placement_copy(&m->place, pp));
    m->has_limit = true;
    m->limit = plan->shape;
    m->limit_sessions = plan->n_sessions;
    return CLLM_OK;
}

/* Allocates the weights buffer of every device that holds weights (the CPU
 * too when the file is read, not mapped), exactly the planned bytes, and
 * places the tensors in them (data not yet there). All or nothing. */
static cllm_status alloc_weights(cllm_model *m, bool use_mmap) {
    const cllm_placement *pl = &m->place;
    const int cpu = cllm_placement_cpu(pl);
    size_t bytes[CLLM_PLACE_MAX_DEVICES];
    CLLM_TRY(cllm_place_weights(pl, m->weights, bytes, NULL));
    uint64_t span_off, span = cllm_place_mapped_bytes(m->gguf);
    if (m->partial) cllm_place_mapped_span(pl, m->weights, m->gguf, &span_off, &span);
    for (int d = 0; d < pl->n_devices; d++) {
        m->weights_planned[d] = d == cpu && use_mmap ? (size_t)span : bytes[d];
        if (!bytes[d] || (d == cpu && use_mmap)) continue;
        const cllm_status st = cllm_buffer_type_alloc(cllm_placement_buft(pl, d), bytes[d],
                                                      CLLM_MEM_WEIGHTS, &m->weights_buf[d]);
        if (st != CLLM_OK) {
            for (int e = 0; e < d; e++) {
                cllm_buffer_free(m->weights_buf[e]);
                m->weights_buf[e] = NULL;
            }
            return st;
        }
    }
    (void)cllm_place_weights(pl, m->weights, bytes, m->weights_buf); /* checked above */
    return CLLM_OK;
}

/* The ring of the streamed layers: laid out, allocated (counted as the
 * CPU's weights, planned and allocated), its I/O thread started, and the
 * streamed tensors placed in it. */
static cllm_status start_stream(cllm_model *m, int n_slots) {
    const int cpu = cllm_placement_cpu(&m->place);
    CLLM_TRY(cllm_stream_layout_init(&m->stream_lay, m->gguf, m->weights, &m->place, n_slots));
    CLLM_TRY(
        cllm_stream_new(m->path, m->place.devices[cpu], m->weights, &m->stream_lay, &m->stream));
    m->weights_planned[cpu] += m->stream_lay.ring_bytes;
    return CLLM_OK;
}

/*
 * Lets each device store the weights it holds in a layout of its own
 * (backend.h: cllm_device_init_weight), now that their bytes are in place:
 * the resident ones here, the streamed ones in the ring each time the I/O
 * thread fills a slot (stream.c). The layouts leave every planned size as
 * it is. A mapped tensor that cannot be rewritten keeps the file's layout.
 */
static cllm_status init_layouts(cllm_model *m, load_progress *lp) {
    const cllm_placement *pl = &m->place;
    cllm_context *ctx = m->weights->ctx;
    size_t scratch_size = 0;
    bool any = false;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const int d = cllm_placement_weight_device(pl, m->weights, i);
        if (d == CLLM_PLACE_NONE || !t->buffer || cllm_placement_weight_streamed(pl, m->weights, i))
            continue;
        size_t need = 0;
        if (cllm_device_init_weight(pl->devices[d], t, &need)) any = true;
        scratch_size = CLLM_MAX(scratch_size, need);
    }
    if (!any) {
        report(lp, lp->total);
        return CLLM_OK;
    }
    void *scratch = NULL;
    if (scratch_size && !(scratch = cllm_malloc(scratch_size))) {
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", m->path);
    }
    const int cpu = cllm_placement_cpu(pl);
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const int d = cllm_placement_weight_device(pl, m->weights, i);
        if (d == CLLM_PLACE_NONE || !t->buffer || cllm_placement_weight_streamed(pl, m->weights, i))
            continue;
        /* the CPU's weights of a mapped file lie in the mapping */
        (void)cllm_device_convert_weight(pl->devices[d], t, scratch, m->map && d == cpu);
        report(lp, cllm_nbytes(t));
    }
    cllm_free(scratch);
    return CLLM_OK;
}

static void progress(size_t done, size_t total, bool show) {
    if (!show) return;
    const int width = 40, filled = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled,
            "========================================", width - filled, "",
            total ? (int)(100.0 * (double)done / (double)total) : 100);
    if (done == total) fputc('\n', stderr);
}

/* Maps the file: CPU weights sit at their offsets in its data section; the
 * other devices' weights (already placed) are copied from the mapping. */
static cllm_status place_mapped(cllm_model *m, int fd) {
    const cllm_gguf *g = m->gguf;
    size_t size = (size_t)cllm_gguf_file_size(g);
    uint64_t data = CLLM_MIN(cllm_gguf_data_offset(g), (uint64_t)size);
    /* a stage of a pipeline maps only the span of its own weights: from the
     * page that holds its first byte; tensor offsets stay relative to data */
    uint64_t map_off = 0, span_off = 0, span = size - data;
    if (m->partial) {
        cllm_place_mapped_span(&m->place, m->weights, g, &span_off, &span);
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        map_off = (data + span_off) / page * page;
        size = (size_t)(data + span_off + span - map_off);
        data = data + span_off - map_off; /* the span's start in the mapping */
    }
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, (off_t)map_off) : NULL;
    if (map == MAP_FAILED) {
        return cllm_error(CLLM_ERR_IO, "%s: cannot map %zu bytes: %s", m->path, size,
                          strerror(errno));
    }
    /* a file truncated under the mapping: an error, not a SIGBUS */
    cllm_status gst = cllm_mapguard_add(map, size, &m->faulted);
    if (gst != CLLM_OK) {
        if (size) munmap(map, size);
        return gst;
    }
    const int cpu = cllm_placement_cpu(&m->place);
    cllm_buffer *buf = NULL;
    cllm_status st = cllm_device_buffer_from_host_ptr(m->place.devices[cpu], (char *)map + data,
                                                      (size_t)span, CLLM_MEM_WEIGHTS, &buf);
    if (st != CLLM_OK) {
        cllm_mapguard_remove(map);
        munmap(map, size);
        return st;
    }
    cllm_context *ctx = m->weights->ctx;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        const int d = cllm_placement_weight_device(&m->place, m->weights, i);
        if (d == CLLM_PLACE_NONE) continue; /* another host's */
        if (d == cpu) {
            cllm_buffer_place_tensor(buf, t, (size_t)(ti->offset - span_off));
        } else {
            cllm_tensor_set(t, (const char *)map + data + (ti->offset - span_off), 0,
                            cllm_nbytes(t));
        }
    }
    m->map = map;
    m->map_size = size;
    m->weights_buf[cpu] = buf;
    return CLLM_OK;
}

/* Reads every weight into its (already placed) buffer. */
static cllm_status place_read(cllm_model *m, int fd, bool show_progress, load_progress *lp) {
    const cllm_gguf *g = m->gguf;
    cllm_context *ctx = m->weights->ctx;
    size_t total = 0;
    void *stage = NULL; /* host staging for tensors in device memory */
    size_t stage_size = 0;
    const bool streaming = m->place.streamed != NULL;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        const cllm_tensor *t = cllm_context_tensor(ctx, i);
        /* another host's (a pipeline stage), or the ring's (streamed) */
        if (!t->buffer || cllm_placement_weight_streamed(&m->place, m->weights, i)) continue;
        total += cllm_nbytes(t);
        if (!cllm_buffer_type_is_host(cllm_buffer_buft(t->buffer))) {
            stage_size = CLLM_MAX(stage_size, cllm_nbytes(t));
        }
    }
    if (stage_size && !(stage = cllm_malloc(stage_size))) {
        return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", m->path);
    }
    /* with streamed layers the page cache counts against the budget too:
     * read with direct I/O through a bounce buffer where the file system
     * allows it, else in pieces dropped from the cache as they are read */
    int dfd = -1;
    void *bounce = NULL;
    if (streaming && (bounce = cllm_aligned_alloc(CLLM_STREAM_BLOCK, READ_PIECE)) &&
        (dfd = open(m->path, O_RDONLY | O_CLOEXEC | O_DIRECT)) < 0) {
        cllm_free(bounce);
        bounce = NULL;
    }
    show_progress = show_progress && !lp->fn && total >= PROGRESS_MIN_BYTES && isatty(2);
    size_t done = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (!t->buffer || cllm_placement_weight_streamed(&m->place, m->weights, i)) continue;
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, cllm_gguf_find_tensor(g, t->name));
        const off_t base = (off_t)(cllm_gguf_data_offset(g) + ti->offset);
        const bool host = cllm_buffer_type_is_host(cllm_buffer_buft(t->buffer));
        char *dst = host ? (char *)t->data : (char *)stage;
        if (dfd >= 0) {
            int err =
                cllm_stream_read_direct(dfd, bounce, READ_PIECE, (uint64_t)base, ti->size, dst);
            if (err == EINVAL) { /* refused after all: the buffered path */
                close(dfd);
                dfd = -1;
            } else if (err) {
                close(dfd);
                cllm_free(bounce);
                cllm_free(stage);
                return cllm_error(CLLM_ERR_IO, "%s: reading tensor %s: %s", m->path, t->name,
                                  err == EIO ? "unexpected end of file" : strerror(err));
            }
        }
        for (size_t off = dfd >= 0 ? ti->size : 0; off < ti->size;) {
            /* under a budget the page cache counts too: with streamed
             * layers, read in pieces and drop each from the cache */
            const size_t want = streaming ? CLLM_MIN(ti->size - off, READ_PIECE) : ti->size - off;
            const ssize_t r = pread(fd, dst + off, want, base + (off_t)off);
            if (r <= 0) {
                cllm_free(stage);
                cllm_free(bounce);
                return cllm_error(CLLM_ERR_IO, "%s: reading tensor %s: %s", m->path, t->name,
                                  r == 0 ? "unexpected end of file" : strerror(errno));
            }
            if (streaming) posix_fadvise(fd, base + (off_t)off, (off_t)r, POSIX_FADV_DONTNEED);
            off += (size_t)r;
        }
        if (!host) cllm_tensor_set(t, stage, 0, ti->size);
        done += ti->size;
        progress(done, total, show_progress);
        report(lp, cllm_nbytes(t));
    }
    progress(total, total, show_progress);
    if (dfd >= 0) close(dfd);
    cllm_free(bounce);
    cllm_free(stage);
    return CLLM_OK;
}

static cllm_status model_load(const char *path, const cllm_model_params *params,
                              const cllm_placement *placed, cllm_model **out);

cllm_status cllm_model_load(const char *path, const cllm_model_params *params, cllm_model **out) {
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    return model_load(path, params, NULL, out);
}

cllm_status cllm_model_load_placed(const char *path, const cllm_model_params *p,
                                   const cllm_placement *pl, cllm_model **out) {
    if (p && p->plan) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "%s: a placed load takes no plan", path);
    }
    return model_load(path, p, pl, out);
}

static cllm_status model_load(const char *path, const cllm_model_params *params,
                              const cllm_placement *placed, cllm_model **out) {
    const cllm_model_params p = params ? *params : cllm_model_default_params();
    cllm_model *m = cllm_calloc(1, sizeof(*m));
    if (!m) return cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", path);
    cllm_status st = CLLM_OK;
    int fd = -1;
    m->fd = -1;
    m->path = cllm_strdup(path);
    if (!m->path) {
        st = cllm_error(CLLM_ERR_NOMEM, "%s: out of host memory", path);
        goto fail;
    }
    if ((st = cllm_gguf_open(path, &m->gguf)) != CLLM_OK) goto fail;
    int64_t n_split = 0; /* a part of a split file: its tensors are not all here */
    if (cllm_gguf_find_key(m->gguf, "split.count") >= 0 &&
        cllm_gguf_get_i64(m->gguf, "split.count", &n_split) == CLLM_OK && n_split > 1) {
        st = cllm_error(CLLM_ERR_UNSUPPORTED,
                        "%s is one of the %lld parts of a split GGUF file: join them into one "
                        "file first (cllm pull --join FIRST-PART)",
                        path, (long long)n_split);
        goto fail;
    }

    const char *arch_name = NULL;
    if ((st = cllm_gguf_get_str(m->gguf, "general.architecture", &arch_name)) != CLLM_OK) goto fail;
    m->arch = cllm_arch_find(arch_name);
    if (!m->arch) {
        char names[256];
        st = cllm_error(CLLM_ERR_UNSUPPORTED,
                        "%s: architecture \"%s\" is not supported (supported: %s)", path, arch_name,
                        cllm_arch_names(names, sizeof(names)));
        goto fail;
    }
    if ((st = m->arch->load_hparams(m->gguf, &m->hp)) != CLLM_OK) goto fail;
    if ((st = cllm_weights_new(m->gguf, m->arch, &m->hp, &m->weights)) != CLLM_OK) goto fail;
    /* a file without tokenizer metadata (a bare weights file) still loads */
    if (cllm_gguf_find_key(m->gguf, "tokenizer.ggml.model") >= 0 &&
        (st = cllm_tokenizer_new_from_gguf(m->gguf, &m->tok)) != CLLM_OK) {
        goto fail;
    }
    /* a plan that streams layers reads the resident ones (model.h) */
    const bool use_mmap = p.use_mmap && !(p.plan && p.plan->n_streamed);
    if ((st = init_placement(m, p.plan, use_mmap, placed)) != CLLM_OK) goto fail;
    int l0, l1;
    cllm_placement_layer_range(&m->place, &l0, &l1);
    m->partial = l0 > 0 || l1 < m->place.n_layer;
    if ((st = alloc_weights(m, use_mmap)) != CLLM_OK) goto fail;

    /* O_NONBLOCK: should the path have become a FIFO since it was parsed,
     * the open must not block (it has no effect on a regular file) */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        st = cllm_error(CLLM_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size != cllm_gguf_file_size(m->gguf)) {
        st = cllm_error(CLLM_ERR_IO, "%s: the file changed while loading", path);
        goto fail;
    }
    m->file_dev = (uint64_t)sb.st_dev;
    m->file_ino = (uint64_t)sb.st_ino;
    m->file_size = (int64_t)sb.st_size;
    m->file_mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    /* progress: the bytes read (unless mapped), then those laid out */
    load_progress lp = {.fn = p.progress_fn, .ud = p.progress_user_data};
    lp.total = resident_bytes(m) * (use_mmap ? 1 : 2);
    report(&lp, 0);
    st = use_mmap ? place_mapped(m, fd) : place_read(m, fd, p.progress, &lp);
    if (st != CLLM_OK) goto fail;
    if ((st = init_layouts(m, &lp)) != CLLM_OK) goto fail;
    if (lp.done < lp.total) report(&lp, lp.total - lp.done); /* the last call: done == total */
    if (m->place.streamed && (st = start_stream(m, p.plan->stream_slots)) != CLLM_OK) goto fail;
    if (m->map) {
        m->fd = fd; /* the weights are the file's pages: watch it */
    } else {
        close(fd);
    }
    *out = m;
    return CLLM_OK;

fail:
    if (fd >= 0) close(fd);
    cllm_model_free(m);
    return st;
}

void cllm_model_free(cllm_model *m) {
    if (!m) return;
    cllm_stream_free(m->stream);
    cllm_stream_layout_free(&m->stream_lay);
    for (int d = 0; d < CLLM_PLACE_MAX_DEVICES; d++) cllm_buffer_free(m->weights_buf[d]);
    cllm_placement_free(&m->place);
    if (m->map) {
        cllm_mapguard_remove(m->map);
        munmap(m->map, m->map_size);
    }
    if (m->fd >= 0) close(m->fd);
    cllm_weights_free(m->weights);
    cllm_tokenizer_free(m->tok);
    cllm_gguf_free(m->gguf);
    cllm_free(m->path);
    cllm_free(m);
}

/* ---- health -------------------------------------------------------------- */

cllm_status cllm_model_weights_ok(const cllm_model *m) {
    if (atomic_load(&((cllm_model *)m)->faulted)) {
        return cllm_error(CLLM_ERR_IO,
                          "%s: reading the mapped weights failed: the file was truncated while "
                          "in use; reload the model",
                          m->path);
    }
    if (m->fd < 0) return CLLM_OK;
    struct stat sb;
    if (fstat(m->fd, &sb) != 0) {
        return cllm_error(CLLM_ERR_IO, "%s: %s", m->path, strerror(errno));
    }
    const int64_t mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    if ((int64_t)sb.st_size != m->file_size || mtime != m->file_mtime_ns) {
        return cllm_error(CLLM_ERR_IO,
                          "%s: the file was modified in place since it was loaded (%lld bytes "
                          "then, %lld now); its weights cannot be trusted; reload the model",
                          m->path, (long long)m->file_size, (long long)sb.st_size);
    }
    return CLLM_OK;
}

cllm_status cllm_model_check(const cllm_model *m) {
    if (!m) return CLLM_NULL_ARG("m");
    CLLM_TRY(cllm_model_weights_ok(m));
    /* streamed layers: their reads check sizes and sums (stream.h) */
    return m->stream ? cllm_stream_check(m->stream) : CLLM_OK;
}

cllm_status cllm_model_stream_usage(const cllm_model *m, cllm_stream_usage *out) {
    if (!m || !out) return CLLM_NULL_ARG("m or out");
    memset(out, 0, sizeof(*out));
    if (!m->stream) return CLLM_OK;
    out->n_layers = m->stream_lay.n_layers;
    out->n_slots = m->stream_lay.n_slots;
    out->bytes_per_pass = m->stream_lay.read_bytes;
    cllm_stream_stats(m->stream, &out->bytes_read, &out->bytes_cached, &out->wait_s);
    out->passes = cllm_stream_passes(m->stream);
    out->read_s = cllm_stream_read_seconds(m->stream);
    return CLLM_OK;
}
