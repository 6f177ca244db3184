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
 * are counted as CLLM_MEM_WEIGHTS on the CPU device.
 */
#ifndef CLLM_RUNTIME_MODEL_H
#define CLLM_RUNTIME_MODEL_H

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/place.h"

struct cllm_plan;

typedef struct cllm_model_params {
    bool use_mmap; /* map the file (default) instead of reading it */
    bool progress; /* show a progress bar on stderr while reading big files */
    /* (optional) a placement from the fit planner (runtime/fit.h) for this
     * file: the weights of layers placed on other devices are copied into
     * one weights buffer per device, and sessions put each layer's KV cache
     * on its device and compute through the scheduler. NULL: all on the CPU. */
    const struct cllm_plan *plan;
} cllm_model_params;

typedef struct cllm_model {
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

    /* with a plan: the largest session shape and count it was made for */
    bool has_limit;
    cllm_shape limit;
    int limit_sessions;
    _Atomic int n_sessions; /* open sessions */
} cllm_model;

cllm_model_params cllm_model_default_params(void);

/*
 * Loads the model at `path`: parses the metadata (hostile input), finds the
 * architecture, checks every weight's shape and type, then maps or reads the
 * weights. On failure nothing stays allocated and *out is untouched; the
 * error names the file and the problem.
 */
cllm_status cllm_model_load(const char *path, const cllm_model_params *params, cllm_model **out);
void cllm_model_free(cllm_model *m);

#endif /* CLLM_RUNTIME_MODEL_H */
