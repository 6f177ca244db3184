/*
 * The fit planner: where every weight and KV-cache tensor of a model goes,
 * and how many bytes of each memory kind every device will hold, from the
 * GGUF metadata alone (no weight is read), within the devices' budgets.
 *
 *     cllm_plan_params fp = cllm_plan_default_params();
 *     fp.n_ctx = 4096;
 *     cllm_plan_add_budget(&fp, "test0", (size_t)6 << 30);   // else: free memory
 *     cllm_plan *plan;
 *     if (cllm_plan_file("model.gguf", &fp, &plan) != CLLM_OK) ... cllm_last_error() ...
 *     cllm_plan_print(plan, stdout, false);
 *     cllm_plan_free(plan);
 *
 * Placement. Devices other than the CPU come first, in registry order; the
 * CPU is the last. Layers (a layer's weights and its KV cache) go to the
 * first device, taken from the end of the model, as many as fit; then to the
 * next device; the rest stay on the CPU. The output layer (output norm and
 * output matrix) goes with the last layer when every layer fits on that
 * device, else to the CPU; the token embeddings stay on the CPU.
 *
 * A probe of a placement builds the worst-case graphs (a full batch at a
 * full context, and one token at a full context) with weights and cache
 * placed in measure-mode buffers of their devices, and measures them through
 * the scheduler (sched.h): compute bytes per device from the graph planner,
 * workspace bytes declared by each device's backend. No device memory is
 * touched. A device fits when weights + state + compute + workspace <=
 * budget. State, compute and workspace are per session (x n_sessions);
 * weights are shared.
 *
 * CPU weights: with use_mmap (the default, as for cllm_model_load) the
 * file's whole data section, which the CPU maps; else the bytes of the
 * tensors placed on the CPU, laid out as cllm_layout_alloc would.
 */
#ifndef CLLM_RUNTIME_FIT_H
#define CLLM_RUNTIME_FIT_H

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/place.h"
#include "sched/sched.h"

#include <stdio.h>

#define CLLM_PLAN_MAX_BUDGETS 16

typedef struct cllm_plan_budget {
    char device[32];
    size_t bytes;
} cllm_plan_budget;

typedef struct cllm_plan_params {
    int64_t n_ctx;     /* 0: min(model context, 4096) */
    int64_t n_batch;   /* default 512 (at most n_ctx) */
    int n_sessions;    /* default 1 */
    cllm_type kv_type; /* default F16 */
    int n_threads;     /* CPU backend threads (workspace); 0: physical cores */
    bool use_mmap;     /* default true: CPU weights are the mapped file's data section */
    int n_budgets;
    cllm_plan_budget budgets[CLLM_PLAN_MAX_BUDGETS]; /* overrides of free memory */
} cllm_plan_params;

cllm_plan_params cllm_plan_default_params(void);

/* Adds a budget for `device` (replacing one given before).
 * CLLM_ERR_INVALID_ARG if the name is too long or too many are given. */
cllm_status cllm_plan_add_budget(cllm_plan_params *p, const char *device, size_t bytes);

/* Parses "DEVICE=SIZE" (e.g. "test0=64MiB", "cpu=16GiB") into p's budgets.
 * CLLM_ERR_INVALID_ARG with a message for a missing '=', an empty device or
 * a malformed, negative or overflowing size. Unknown devices are reported
 * by the planner. */
cllm_status cllm_plan_parse_mem(cllm_plan_params *p, const char *arg);

typedef struct cllm_plan_device {
    cllm_device *dev;
    const char *name;
    size_t budget;
    bool budget_given; /* by the caller, not free memory */
    size_t bytes[CLLM_MEM_COUNT];
    int n_layers;
} cllm_plan_device;

typedef struct cllm_plan_tensor {
    const cllm_tensor *t; /* in the plan's weights tree (or KV cache) */
    int device;           /* index into devices */
    size_t bytes;         /* on that device */
    bool state;           /* KV cache, else a weight */
} cllm_plan_tensor;

typedef struct cllm_plan {
    char model[256];
    cllm_hparams hp;
    int64_t n_ctx, n_batch;
    int n_sessions;
    cllm_type kv_type;
    bool use_mmap;
    int n_devices; /* the CPU is the last */
    cllm_plan_device devices[CLLM_PLACE_MAX_DEVICES];
    int *layer_device; /* [hp.n_layer] (== place.layer_device) */
    int output_device;
    int input_device;
    int n_tensors;
    cllm_plan_tensor *tensors;
    int n_probes;
    double plan_ms;       /* wall time of the planning (probes included) */
    cllm_placement place; /* layer_device and output_device are its */
    cllm_shape shape;     /* the session shape planned (limits the model's sessions) */
    /* owned: the tensors of the map */
    cllm_weights *weights;
    cllm_kv_cache kv;
} cllm_plan;

/*
 * Plans the model whose metadata `g` holds (the file is not read further).
 * CLLM_ERR_INVALID_ARG for bad parameters or a budget naming an unknown
 * device; CLLM_ERR_TOO_LARGE when the CPU (the last resort) cannot hold the
 * rest: the message names the device, the bytes needed and the budget, how
 * many bytes are short, and the largest context that would fit (or that
 * nothing does). On failure *out is untouched.
 */
cllm_status cllm_plan_new(const cllm_gguf *g, const cllm_plan_params *p, cllm_plan **out);
/* As cllm_plan_new, opening the file's metadata. */
cllm_status cllm_plan_file(const char *path, const cllm_plan_params *p, cllm_plan **out);
void cllm_plan_free(cllm_plan *plan);

/* Sum of the four kinds on device i. */
size_t cllm_plan_device_total(const cllm_plan *plan, int i);

/* The per-device table, a bar per device, the layer map, the planning time;
 * with `verbose`, one line per tensor. */
void cllm_plan_print(const cllm_plan *plan, FILE *f, bool verbose);
/* The same as one JSON object. */
void cllm_plan_print_json(const cllm_plan *plan, FILE *f, bool verbose);

/* "1.50 GiB", "512 MiB", "100 B" into buf; returns buf. */
const char *cllm_format_size(size_t bytes, char *buf, size_t size);

#endif /* CLLM_RUNTIME_FIT_H */
