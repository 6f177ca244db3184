/* The registry and the test device: devices found at run time, the test
 * device's budget, op subset, non-host memory and fault injection, options,
 * registries added by the program. (The test device as a loadable module:
 * test_module.) */
#include "alloc/layout.h"
#include "backend/backend-impl.h"
#include "backend/cpu/cpu.h"
#include "backend/test/test-backend.h"
#include "common/check.h"

#include <stdlib.h>
#include <string.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static void test_options(void) {
    cllm_test_device_config c;
    CHECK(cllm_test_device_config_parse("budget=64MiB,ops=-rope-soft_max,fail_alloc=3", &c) ==
          CLLM_OK);
    CHECK(c.budget == (size_t)64 << 20 && c.fail_alloc == 3);
    CHECK(c.ops_disabled == (((uint64_t)1 << CLLM_OP_ROPE) | ((uint64_t)1 << CLLM_OP_SOFT_MAX)));
    CHECK(cllm_test_device_config_parse("ops=mul_mat+add", &c) == CLLM_OK);
    CHECK(!(c.ops_disabled & ((uint64_t)1 << CLLM_OP_MUL_MAT)));
    CHECK(c.ops_disabled & ((uint64_t)1 << CLLM_OP_ROPE));
    CHECK(cllm_test_device_config_parse("", &c) == CLLM_OK && c.budget == (size_t)1 << 30);
    size_t n = 0;
    CHECK(cllm_parse_size("1.5K", &n) && n == 1536);
    CHECK(cllm_parse_size("2GiB", &n) && n == (size_t)2 << 30);
    CHECK(cllm_parse_size("4096", &n) && n == 4096);
    CHECK(!cllm_parse_size("lots", &n) && !cllm_parse_size("-1G", &n) && !cllm_parse_size("", &n) &&
          !cllm_parse_size("1Q", &n) && !cllm_parse_size("1e30G", &n));
    cllm_log_set(quiet, NULL);
    c.budget = 7;
    CHECK(cllm_test_device_config_parse("budget=lots", &c) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "lots") != NULL && c.budget == 7);
    CHECK(cllm_test_device_config_parse("ops=-nope", &c) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_test_device_config_parse("ops=-rope-", &c) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_test_device_config_parse("colour=red", &c) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_test_device_config_parse("budget", &c) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
}

static void test_test_device(void) {
    CHECK(cllm_registry_device_by_name("test0") == NULL); /* not a user feature */
    const int before = cllm_registry_device_count();
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = 4096;
    cfg.ops_disabled = (uint64_t)1 << CLLM_OP_ROPE;
    cllm_device *dev = NULL;
    CHECK(cllm_test_device_enable(&cfg, &dev) == CLLM_OK && dev);
    CHECK(cllm_registry_device_count() == before + 1);
    CHECK(cllm_registry_device_by_name("test0") == dev);
    CHECK(cllm_registry_device_by_kind(CLLM_DEVICE_ACCEL) == dev);
    CHECK(cllm_registry_device(0) == cllm_cpu_device());
    CHECK(cllm_device_kind_of(dev) == CLLM_DEVICE_ACCEL);

    cllm_buffer_type *buft = cllm_device_buffer_type(dev);
    CHECK(!cllm_buffer_type_is_host(buft));
    CHECK(!cllm_device_supports_buft(cllm_cpu_device(), buft));
    CHECK(!cllm_device_supports_buft(dev, cllm_cpu_buffer_type()));
    size_t fr = 0, tot = 0;
    cllm_device_memory(dev, &fr, &tot);
    CHECK(fr == 4096 && tot == 4096);

    /* a budget: allocations beyond it fail, nothing changes */
    cllm_buffer *a = NULL, *b = (cllm_buffer *)0x1;
    CHECK(cllm_buffer_type_alloc(buft, 3000, CLLM_MEM_WEIGHTS, &a) == CLLM_OK);
    cllm_device_memory(dev, &fr, &tot);
    CHECK(fr == 1096);
    cllm_log_set(quiet, NULL);
    CHECK(cllm_buffer_type_alloc(buft, 2000, CLLM_MEM_STATE, &b) == CLLM_ERR_DEVICE_MEMORY);
    CHECK(b == (cllm_buffer *)0x1 && strstr(cllm_last_error(), "1096") != NULL);
    CHECK(cllm_device_allocated(dev, CLLM_MEM_STATE) == 0);
    /* fault injection: the 2nd allocation from now fails */
    cllm_test_device_fail_alloc(2);
    cllm_buffer *c1 = NULL, *c2 = (cllm_buffer *)0x1, *c3 = NULL;
    CHECK(cllm_buffer_type_alloc(buft, 10, CLLM_MEM_COMPUTE, &c1) == CLLM_OK);
    CHECK(cllm_buffer_type_alloc(buft, 10, CLLM_MEM_COMPUTE, &c2) == CLLM_ERR_DEVICE_MEMORY);
    CHECK(c2 == (cllm_buffer *)0x1 && strstr(cllm_last_error(), "injected") != NULL);
    CHECK(cllm_buffer_type_alloc(buft, 10, CLLM_MEM_COMPUTE, &c3) == CLLM_OK);
    cllm_log_set(NULL, NULL);
    CHECK(cllm_device_allocated(dev, CLLM_MEM_COMPUTE) == 20);
    cllm_buffer_free(c1);
    cllm_buffer_free(c3);
    cllm_buffer_free(a);
    cllm_device_memory(dev, &fr, &tot);
    CHECK(fr == 4096);

    /* compute on its own memory; the CPU backend refuses that memory */
    cllm_context *ctx = cllm_context_new(16);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 8);
    cllm_tensor *y = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 8);
    cllm_tensor *z = cllm_add(ctx, cllm_mul(ctx, x, y), x);
    cllm_buffer *buf = NULL;
    CHECK(cllm_layout_alloc(ctx, buft, CLLM_MEM_COMPUTE, &buf) == CLLM_OK);
    CHECK((uintptr_t)z->data % cllm_buffer_type_alignment(buft) == 0);
    float xs[8], ys[8], zs[8];
    for (int i = 0; i < 8; i++) xs[i] = (float)i, ys[i] = 0.5f * (float)i;
    cllm_tensor_set_all(x, xs);
    cllm_tensor_set_all(y, ys);
    cllm_graph *g = cllm_graph_new(16);
    cllm_graph_build(g, z);
    cllm_backend *be = NULL, *cpu = NULL;
    CHECK(cllm_device_init_backend(dev, NULL, &be) == CLLM_OK);
    CHECK(cllm_backend_graph_compute(be, g) == CLLM_OK);
    cllm_tensor_get_all(z, zs);
    int bad = 0;
    for (int i = 0; i < 8; i++) bad += zs[i] != xs[i] * ys[i] + xs[i];
    CHECK(bad == 0);
    CHECK(cllm_backend_cpu_new(1, &cpu) == CLLM_OK);
    cllm_log_set(quiet, NULL);
    CHECK(cllm_backend_graph_compute(cpu, g) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "host memory") != NULL);
    cllm_log_set(NULL, NULL);

    /* an op it does not support */
    cllm_tensor *pos = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 1);
    cllm_tensor *q = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, 4, 2, 1);
    cllm_tensor *r = cllm_rope(ctx, q, pos, NULL, 4, CLLM_ROPE_NORMAL, 10000.0f, 1.0f);
    CHECK(!cllm_device_supports_op(dev, r));
    CHECK(cllm_device_supports_op(dev, z));
    CHECK(cllm_device_supports_op(cllm_cpu_device(), r));

    cllm_backend_free(be);
    cllm_backend_free(cpu);
    cllm_graph_free(g);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(cllm_device_allocated(dev, k) == 0);
    cllm_test_device_disable();
    CHECK(cllm_registry_device_by_name("test0") == NULL);
    CHECK(cllm_registry_device_count() == before);
}

/* Registries the program adds: after the built-in ones, each name once; an
 * incomplete entry, or one built for another backend API version, is
 * refused. */
static void test_registry_add(void) {
    CHECK(cllm_registry_count() >= 2); /* cpu, and the test device added above */
    CHECK(strcmp(cllm_backend_reg_name(cllm_registry_get(0)), "cpu") == 0);
    const cllm_backend_reg *last = cllm_registry_get(cllm_registry_count() - 1);
    CHECK(strcmp(cllm_backend_reg_name(last), "test") == 0);
    CHECK(cllm_registry_get(cllm_registry_count()) == NULL && cllm_registry_get(-1) == NULL);
    const int n = cllm_registry_count();
    cllm_log_set(quiet, NULL);
    CHECK(cllm_registry_add((cllm_backend_reg *)last) == CLLM_ERR_INVALID_ARG);
    cllm_backend_reg empty = {CLLM_BACKEND_REG_ABI, .iface = {.get_name = NULL}, .context = NULL};
    CHECK(cllm_registry_add(&empty) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "incomplete") != NULL);
    cllm_backend_reg other = *last; /* complete, but of another version */
    other.api_version = CLLM_BACKEND_API_VERSION + 1;
    CHECK(cllm_registry_add(&other) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "backend API version") != NULL);
    CHECK(cllm_registry_add(NULL) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    CHECK(cllm_registry_count() == n);
    /* options through the registry: to the test device, none for the CPU */
    cllm_log_set(quiet, NULL);
    CHECK(cllm_registry_configure("test", "budget=lots") == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_registry_configure("cpu", "threads=2") == CLLM_ERR_UNSUPPORTED);
    CHECK(cllm_registry_configure("nope", "") == CLLM_ERR_UNSUPPORTED);
    CHECK(strstr(cllm_last_error(), "cllm-backend-nope.so") != NULL);
    cllm_log_set(NULL, NULL);
    CHECK(cllm_registry_configure("test", "budget=8KiB,ops=mul_mat") == CLLM_OK);
    cllm_device *test = cllm_registry_device_by_name("test0");
    size_t fr = 0, tot = 0;
    if (test) cllm_device_memory(test, &fr, &tot);
    CHECK(test && tot == 8192);
    cllm_test_device_disable();
    CHECK(cllm_registry_device_by_name("test0") == NULL);
    cllm_log_set(quiet, NULL);
    /* this program does not export its symbols: no module can be loaded */
    cllm_log_set(quiet, NULL);
    CHECK(cllm_registry_load_module("does/not/matter/cllm-backend-x.so") == CLLM_ERR_UNSUPPORTED);
    cllm_log_set(NULL, NULL);
}

int main(void) {
    test_options();
    test_test_device();
    test_registry_add();
    return check_summary("test_registry");
}
