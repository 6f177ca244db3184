/* The test device as a loadable backend module (cllm-backend-test.so, next to
 * this executable): the registry loads it on first use, it reads
 * CLLM_TEST_DEVICE then, and its device computes in its own memory. This
 * program exports its symbols (CMakeLists.txt) and does not link the test
 * device itself, so "test0" can only come from the module. */
#include "alloc/layout.h"
#include "backend/backend.h"
#include "common/check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static void test_module(void) {
    bool found = false;
    for (int i = 0; i < cllm_registry_count(); i++) {
        found = found || strcmp(cllm_backend_reg_name(cllm_registry_get(i)), "test") == 0;
    }
    CHECKF(found, "the test backend module was not loaded");
    CHECK(strcmp(cllm_backend_reg_name(cllm_registry_get(0)), "cpu") == 0);
    cllm_device *dev = cllm_registry_device_by_name("test0");
    CHECK(dev != NULL);
    if (!dev) return;
    size_t fr = 0, tot = 0;
    cllm_device_memory(dev, &fr, &tot);
    CHECK(tot == (size_t)1 << 20 && fr == tot); /* budget=1MiB from the environment */
    CHECK(cllm_device_kind_of(dev) == CLLM_DEVICE_ACCEL);
    CHECK(!cllm_buffer_type_is_host(cllm_device_buffer_type(dev)));

    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 4);
    cllm_tensor *z = cllm_scale(ctx, x, 3.0f);
    cllm_buffer *buf = NULL;
    CHECK(cllm_layout_alloc(ctx, cllm_device_buffer_type(dev), CLLM_MEM_COMPUTE, &buf) == CLLM_OK);
    CHECK(cllm_device_allocated(dev, CLLM_MEM_COMPUTE) == cllm_buffer_size(buf));
    const float xs[4] = {1, 2, 3, 4};
    float zs[4];
    cllm_tensor_set_all(x, xs);
    cllm_graph *g = cllm_graph_new(8);
    cllm_graph_build(g, z);
    cllm_backend *be = NULL;
    CHECK(cllm_device_init_backend(dev, NULL, &be) == CLLM_OK);
    CHECK(be && cllm_backend_graph_compute(be, g) == CLLM_OK);
    cllm_tensor_get_all(z, zs);
    CHECK(zs[0] == 3 && zs[3] == 12);
    cllm_backend_free(be);
    cllm_graph_free(g);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
    CHECK(cllm_device_allocated(dev, CLLM_MEM_COMPUTE) == 0);

    /* reconfigured through the registry, as cllm_device_enable_test does */
    CHECK(cllm_registry_configure("test", "budget=2MiB") == CLLM_OK);
    CHECK(cllm_registry_device_by_name("test0") == dev);
    cllm_device_memory(dev, &fr, &tot);
    CHECK(tot == (size_t)2 << 20);
    cllm_log_set(quiet, NULL);
    CHECK(cllm_registry_configure("test", "budget=lots") == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    cllm_device_memory(dev, &fr, &tot);
    CHECK(tot == (size_t)2 << 20); /* unchanged by the refused options */
}

/* Loading fails cleanly: a missing file, a missing directory, the same
 * backend twice (the registry is unchanged each time). */
static void test_load_errors(void) {
    cllm_log_set(quiet, NULL);
    const int n = cllm_registry_count();
    CHECK(cllm_registry_load_module("does/not/exist/cllm-backend-x.so") == CLLM_ERR_IO);
    CHECK(cllm_registry_load_modules("does/not/exist") == 0);
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    CHECK(len > 0);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        CHECK(slash != NULL);
        if (slash) {
            *slash = '\0';
            char path[4200];
            snprintf(path, sizeof(path), "%s/cllm-backend-test.so", exe);
            CHECK(cllm_registry_load_module(path) == CLLM_ERR_INVALID_ARG); /* already there */
            CHECK(cllm_registry_load_modules(exe) == 0);
        }
    }
    CHECK(cllm_registry_count() == n);
    cllm_log_set(NULL, NULL);
}

int main(void) {
    /* before the registry's first use: the module reads it when loaded */
    setenv("CLLM_TEST_DEVICE", "budget=1MiB", 1);
    unsetenv("CLLM_BACKEND_PATH");
    test_module();
    test_load_errors();
    return check_summary("test_module");
}
