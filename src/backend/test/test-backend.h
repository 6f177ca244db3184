/*
 * The test device: a second backend that runs anywhere, so that the
 * scheduler's splits, copies and fallbacks, memory budgets and allocation
 * failures can be tested on a machine without a GPU. Not a user feature and
 * not part of the library: the tests link it as a static library
 * (cllm-test-device), and programs that load backend modules find it as
 * cllm-backend-test.so (CMakeLists.txt builds both).
 *
 *     cllm_test_device_config cfg;
 *     cllm_test_device_config_parse("budget=64MiB,ops=-rope-soft_max", &cfg);
 *     cllm_device *dev;
 *     st = cllm_test_device_enable(&cfg, &dev);   // "test0" joins the registry
 *     ... buffers of cllm_device_buffer_type(dev), backends, the scheduler ...
 *     cllm_test_device_disable();                 // after every buffer is freed
 *
 * Or, as the module, from the environment (read when the registry loads the
 * module, the first time it is used):
 *     CLLM_TEST_DEVICE="budget=64MiB,ops=-rope-soft_max,fail_alloc=3"
 * or through the registry, once it is registered (what the public
 * cllm_device_enable_test and the CLI's --test-device do):
 *     cllm_registry_configure("test", "budget=64MiB");
 *
 * What it is: device "test0", kind CLLM_DEVICE_ACCEL, with its own memory:
 *  - its buffer type ("test0") is not host memory: the CPU backend refuses
 *    tensors in it, and data moves in and out only through cllm_tensor_set /
 *    cllm_tensor_get (the bytes are really host memory, labelled otherwise);
 *  - a memory budget: cllm_device_memory reports total = budget and free =
 *    budget minus every byte allocated on it; an allocation beyond the free
 *    bytes fails with CLLM_ERR_DEVICE_MEMORY;
 *  - a configurable subset of the CPU's ops (the rest are unsupported);
 *  - fault injection: the n-th allocation from now fails (fail_alloc=n);
 *  - compute with the CPU kernels, single-threaded, on its own memory, with a
 *    declared workspace (the kernels' needs, plus `workspace=` extra bytes).
 *
 * Option string: comma-separated key=value pairs.
 *   budget=SIZE       bytes, with an optional K/M/G/KiB/MiB/GiB suffix (default 1GiB)
 *   ops=-a-b          every CPU op except a and b (op names: cllm_op_name)
 *   ops=a+b           only a and b
 *   fail_alloc=N      the N-th allocation (1-based) fails; 0: none
 *   workspace=SIZE    extra workspace bytes declared per graph (default 0)
 *
 * Thread safety: enable/disable/configure at start-up; allocation is
 * thread-safe only with respect to the accounting, not the budget check.
 */
#ifndef CLLM_BACKEND_TEST_BACKEND_H
#define CLLM_BACKEND_TEST_BACKEND_H

#include "backend/backend.h"

typedef struct cllm_test_device_config {
    size_t budget;         /* total bytes (0: 1 GiB) */
    uint64_t ops_disabled; /* bit (1 << op) set: op unsupported */
    int fail_alloc;        /* the n-th allocation from now fails (0: none) */
    size_t workspace;      /* extra workspace bytes per graph */
} cllm_test_device_config;

/* Defaults: 1 GiB, every CPU op, no failure, no extra workspace. */
cllm_test_device_config cllm_test_device_config_default(void);

/* Parses an option string (above) into *out, starting from the defaults.
 * CLLM_ERR_INVALID_ARG naming the bad item; *out untouched on failure. */
cllm_status cllm_test_device_config_parse(const char *s, cllm_test_device_config *out);

/*
 * Enables (or reconfigures) the test device "test0": from now on the
 * registry lists it (after the built-in backends and the modules; the first
 * call adds it with cllm_registry_add, whose failure it returns). Resets the
 * allocation counter used by fail_alloc. *out (if not NULL) receives the
 * device.
 */
cllm_status cllm_test_device_enable(const cllm_test_device_config *cfg, cllm_device **out);

/* Removes "test0" from the registry (its memory must be freed first). */
void cllm_test_device_disable(void);

/* The test device if enabled, else NULL. */
cllm_device *cllm_test_device(void);

/* The n-th allocation from now on fails (n <= 0: none). */
void cllm_test_device_fail_alloc(int n);

#endif /* CLLM_BACKEND_TEST_BACKEND_H */
