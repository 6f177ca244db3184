/* The test device as a loadable backend module (cllm-backend-test.so, next to
 * this executable): the registry loads it on first use, it reads
 * CLLM_TEST_DEVICE then, and its device computes in its own memory. This
 * program exports its symbols (CMakeLists.txt) and does not link the test
 * device itself, so "test0" can only come from the module. Modules built
 * for another backend ABI (tests/module/other-abi.c, in the folder argv[1])
 * are refused with a message, and the registry goes on without them. */
#include "alloc/layout.h"
#include "backend/backend-impl.h"
#include "backend/backend.h"
#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* The log lines of a step, kept by `record`. */
static char g_log[8192];

static void record(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)ud;
    const size_t n = strlen(g_log);
    snprintf(g_log + n, sizeof(g_log) - n, "%s\n", msg);
}

/* 3 * (1, 2, 3, 4) on device test0, in its own memory. */
static bool test0_computes(void) {
    cllm_device *dev = cllm_registry_device_by_name("test0");
    if (!dev) return false;
    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 4);
    cllm_tensor *z = cllm_scale(ctx, x, 3.0f);
    cllm_buffer *buf = NULL;
    cllm_graph *g = cllm_graph_new(8);
    cllm_backend *be = NULL;
    bool ok =
        cllm_layout_alloc(ctx, cllm_device_buffer_type(dev), CLLM_MEM_COMPUTE, &buf) == CLLM_OK &&
        cllm_device_init_backend(dev, NULL, &be) == CLLM_OK;
    if (ok) {
        const float xs[4] = {1, 2, 3, 4};
        float zs[4];
        cllm_tensor_set_all(x, xs);
        cllm_graph_build(g, z);
        ok = cllm_backend_graph_compute(be, g) == CLLM_OK;
        cllm_tensor_get_all(z, zs);
        ok = ok && zs[0] == 3 && zs[3] == 12;
    }
    cllm_backend_free(be);
    cllm_graph_free(g);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
    return ok;
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

static bool has_backend(const char *name) {
    for (int i = 0; i < cllm_registry_count(); i++) {
        if (strcmp(cllm_backend_reg_name(cllm_registry_get(i)), name) == 0) return true;
    }
    return false;
}

/* Modules of another backend API version, or of the same version with a
 * registry entry of another size, are refused: the message names the
 * module's path and both versions, the registry is unchanged and its
 * devices still compute. */
static void test_other_abi(const char *dir) {
    static const struct {
        const char *file;
        int version; /* the module's */
        size_t reg_size;
    } k_modules[] = {
        {"cllm-backend-other-version.so", CLLM_BACKEND_API_VERSION + 1,
         sizeof(struct cllm_backend_reg)},
        {"cllm-backend-other-size.so", CLLM_BACKEND_API_VERSION,
         sizeof(struct cllm_backend_reg) + 8},
    };
    const int n = cllm_registry_count();
    char want[256];
    for (size_t i = 0; i < sizeof(k_modules) / sizeof(k_modules[0]); i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, k_modules[i].file);
        if (access(path, R_OK) != 0) {
            check_missing(path);
            continue;
        }
        g_log[0] = '\0';
        cllm_log_set(record, NULL);
        const cllm_status st = cllm_registry_load_module(path);
        cllm_log_set(NULL, NULL);
        CHECKF(st == CLLM_ERR_UNSUPPORTED, "%s: status %d", path, (int)st);
        CHECKF(strstr(g_log, path) != NULL, "the message names no path: %s", g_log);
        snprintf(want, sizeof(want), "built for backend API version %d (entry %zu bytes",
                 k_modules[i].version, k_modules[i].reg_size);
        CHECKF(strstr(g_log, want) != NULL, "no '%s' in: %s", want, g_log);
        snprintf(want, sizeof(want), "this library has version %d (%zu,", CLLM_BACKEND_API_VERSION,
                 sizeof(struct cllm_backend_reg));
        CHECKF(strstr(g_log, want) != NULL, "no '%s' in: %s", want, g_log);
        CHECK(strstr(cllm_last_error(), path) != NULL);
        CHECK(cllm_registry_count() == n && !has_backend("other-abi"));
    }
    /* discovery in a folder skips both, each with its message */
    g_log[0] = '\0';
    cllm_log_set(record, NULL);
    CHECK(cllm_registry_load_modules(dir) == 0);
    cllm_log_set(NULL, NULL);
    for (size_t i = 0; i < sizeof(k_modules) / sizeof(k_modules[0]); i++) {
        CHECKF(strstr(g_log, k_modules[i].file) != NULL, "%s not named in: %s", k_modules[i].file,
               g_log);
    }
    CHECK(cllm_registry_count() == n && !has_backend("other-abi"));
    /* the rest still works: the CPU, and the test module's device */
    CHECK(strcmp(cllm_backend_reg_name(cllm_registry_get(0)), "cpu") == 0);
    CHECK(has_backend("test"));
    CHECK(test0_computes());
}

int main(int argc, char **argv) {
    /* before the registry's first use: the module reads it when loaded */
    setenv("CLLM_TEST_DEVICE", "budget=1MiB", 1);
    unsetenv("CLLM_BACKEND_PATH");
    test_module();
    test_load_errors();
    if (argc > 1) {
        test_other_abi(argv[1]);
    } else {
        check_missing("the folder of the modules built for another ABI (argv[1])");
    }
    return check_summary("test_module");
}
