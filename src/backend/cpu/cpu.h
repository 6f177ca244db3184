/*
 * The CPU backend: always present, device name "cpu". Its files are in
 * layers, each calling only those below it: README.md in this folder.
 *
 *     cllm_backend *be;
 *     cllm_status st = cllm_backend_cpu_new(4, &be);      // 4 threads (0: physical cores)
 *     st = cllm_backend_graph_compute(be, graph);
 *     cllm_backend_free(be);
 */
#ifndef CLLM_BACKEND_CPU_H
#define CLLM_BACKEND_CPU_H

#include "backend/backend.h"

/* A CPU backend computing with n_threads threads (0: one per physical core). */
cllm_status cllm_backend_cpu_new(int n_threads, cllm_backend **out);
int cllm_backend_cpu_n_threads(const cllm_backend *be);

/* The CPU device (also device 0 of the registry). The layers above the
 * backends find it through the registry (cllm_registry_device_by_kind). */
cllm_device *cllm_cpu_device(void);

/* The CPU's buffer type: host memory aligned to CLLM_CPU_ALIGNMENT. */
cllm_buffer_type *cllm_cpu_buffer_type(void);
#define CLLM_CPU_ALIGNMENT 64

/* The CPU backend's registry entry (one device, "cpu"); a built-in backend
 * (CLLM_BUILTIN_BACKENDS in CMakeLists.txt), so the registry lists it first. */
cllm_backend_reg *cllm_cpu_reg(void);

#endif /* CLLM_BACKEND_CPU_H */
