/*
 * A loaded model: the GGUF metadata, the architecture and its
 * hyper-parameters, and the weights — one object, loaded once, shared by any
 * number of sessions (runtime/session.h), which reference it read-only.
 *
 *     cllm_model_params mp = cllm_model_default_params();
 *     cllm_model *m;
 *     if (cllm_model_load("model.gguf", &mp, &m) != CLLM_OK) ... cllm_last_error() ...
 *     ... sessions ...
 *     cllm_model_free(m);   // after every session that uses it
 *
 * Weights are mapped from the file (zero copy, read-only) by default, or read
 * into an allocated CPU buffer with use_mmap = false. Either way their bytes
 * are counted as CLLM_MEM_WEIGHTS on the CPU device. With a plan that
 * streams layers, the resident weights are always read (an allocated buffer
 * is exactly what the plan counts; a mapping's pages would be the kernel's
 * to keep or drop), the streamed ones pass through the ring, and the file
 * pages read while loading are dropped from the page cache.
 */
#ifndef CLLM_RUNTIME_MODEL_H
#define CLLM_RUNTIME_MODEL_H

#include "backend/backend.h"
#include "model/arch.h"
#include "runtime/place.h"
#include "runtime/stream.h"

struct cllm_plan;

/* cllm_model_params and the loading functions are public (cllm.h); this is
 * the layout behind the handle. */

struct cllm_model {
    char *path;
    cllm_gguf *gguf;            /* metadata, kept for `info` and metadata lookups */
    struct cllm_tokenizer *tok; /* from the file's tokenizer.* keys; NULL without them */
    const cllm_arch *arch;
    cllm_hparams hp;
    cllm_weights *weights;
    void *map; /* the file mapping (NULL when read) */
    size_t map_size;

    /* the placement (the plan's, or all on the CPU) and, per device, the
     * weights buffer (CLLM_MEM_WEIGHTS; on the CPU the mapped data section
     * or the CPU's tensors read) and the bytes planned for it */
    cllm_placement place;
    cllm_buffer *weights_buf[CLLM_PLACE_MAX_DEVICES];
    size_t weights_planned[CLLM_PLACE_MAX_DEVICES];

    /* streamed layers (a plan's place.streamed): their slot layout and the
     * ring with its I/O thread (runtime/stream.h); NULL without */
    cllm_stream_layout stream_lay;
    struct cllm_stream *stream;

    /* with a plan: the largest session shape and count it was made for */
    bool has_limit;
    cllm_shape limit;
    int limit_sessions;
    _Atomic int n_sessions; /* open sessions */
    bool partial;           /* a stage of a pipeline: some layers are elsewhere */

    /* the file, while the weights are its mapped pages: kept open, with
     * what it was when loaded, to see it change in place; and the flag a
     * fault in the mapping raises (runtime/mapguard.h). (Streamed layers
     * check their reads themselves: stream.h.) */
    int fd; /* -1 when the weights were read */
    uint64_t file_dev, file_ino;
    int64_t file_size, file_mtime_ns;
    _Atomic int faulted;
};

/*
 * Whether the mapped weights can still be trusted: CLLM_OK, or CLLM_ERR_IO
 * with the reason when a read of the mapping faulted (the file was
 * truncated) or the file was changed in place since the load (its size or
 * modification time differ). One fstat; thread-safe. Sessions call it
 * around every pass; cllm_model_check (cllm.h) adds the streamed layers'
 * last failure.
 */
cllm_status cllm_model_weights_ok(const cllm_model *m);

/*
 * Loads the part of a model that placement `pl` keeps on this host (a stage
 * of a pipeline, cllm_placement_restrict): only its weights are read, or
 * mapped (then only the span of the file that holds them,
 * cllm_place_mapped_span); sessions of the model compute its layer range.
 * `pl` is copied. p->plan must be NULL.
 */
cllm_status cllm_model_load_placed(const char *path, const cllm_model_params *p,
                                   const cllm_placement *pl, cllm_model **out);

#endif /* CLLM_RUNTIME_MODEL_H */
