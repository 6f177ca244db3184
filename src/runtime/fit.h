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
#include "model/arch.h"
#include "runtime/place.h"
#include "sched/sched.h"

#include <stdio.h>

/* cllm_plan_params and the plan functions are public (cllm.h); this is the
 * layout behind the handle. */

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
    bool streamed;        /* a weight of a streamed layer (read into the ring per pass) */
} cllm_plan_tensor;

struct cllm_plan {
    char model[256];
    cllm_hparams hp;
    int64_t n_ctx, n_batch;
    int n_sessions;
    cllm_type type_k, type_v;
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
    /* streaming (place.streamed marks the layers): the ring and the bound */
    int n_streamed;
    int stream_slots;
    size_t slot_bytes, ring_bytes;
    size_t stream_bytes;       /* read from the file per forward pass */
    size_t stream_bytes_whole; /* the same with whole layers streamed (0: they do not fit) */
    int n_partial;             /* streamed layers that keep some weights resident */
    size_t weight_bytes;       /* the weights' own bytes (this host's) */
    size_t resident_bytes;     /* those not streamed */
    uint64_t stream_file_lo, stream_file_hi; /* the file bytes the streamed layers span */
    double read_bw;                          /* bytes/s: given, or measured (read_bw_probed) */
    bool read_bw_probed, read_bw_direct;
    /* owned: the tensors of the map */
    cllm_weights *weights;
    cllm_kv_cache kv;
};

/* Sum of the four kinds on device i. */
size_t cllm_plan_device_total(const cllm_plan *plan, int i);

#endif /* CLLM_RUNTIME_FIT_H */
