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

struct cllm_plan;

/* cllm_model_params and the loading functions are public (cllm.h); this is
 * the layout behind the handle. */

#define CLLM_MODEL_MAX_DEVICES 16

struct cllm_model {
    char *path;
    cllm_gguf *gguf;            /* metadata, kept for `info` and metadata lookups */
    struct cllm_tokenizer *tok; /* from the file's tokenizer.* keys; NULL without them */
    const cllm_arch *arch;
    cllm_hparams hp;
    cllm_weights *weights;
    cllm_buffer *weights_buf; /* mapped or allocated; CLLM_MEM_WEIGHTS */
    void *map;                /* the file mapping (NULL when read) */
    size_t map_size;
    size_t weights_planned; /* bytes the plan predicted for weights_buf */

    /* placement: the devices (the CPU last), each layer's device, and the
     * weights buffers of the other devices (CLLM_MEM_WEIGHTS, exactly the
     * plan's bytes) */
    int n_devices;
    cllm_device *devices[CLLM_MODEL_MAX_DEVICES];
    cllm_buffer *device_weights[CLLM_MODEL_MAX_DEVICES]; /* NULL for the CPU */
    int *layer_device;                                   /* [hp.n_layer] */
    int output_device;
};

/* Bytes of the weights as planned from the metadata alone (no I/O). */
size_t cllm_model_weights_bytes(const cllm_gguf *g, const cllm_weights *w, bool use_mmap);

#endif /* CLLM_RUNTIME_MODEL_H */
