/* The generic backend layer and the CPU device: registry, buffers, memory
 * accounting per kind, measure mode, static layout, error paths. */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "common/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static void test_registry(void) {
    CHECK(cllm_registry_device_count() >= 1);
    cllm_device *cpu = cllm_registry_device(0);
    CHECK(cpu == cllm_cpu_device());
    CHECK(cllm_registry_device_by_name("cpu") == cpu);
    CHECK(cllm_registry_device_by_name("nope") == NULL);
    CHECK(cllm_registry_device_by_kind(CLLM_DEVICE_CPU) == cpu);
    CHECK(cllm_device_kind_of(cpu) == CLLM_DEVICE_CPU);
    size_t free_b = 0, total_b = 0;
    cllm_device_memory(cpu, &free_b, &total_b);
    CHECK(total_b > 0 && free_b > 0 && free_b <= total_b);
    CHECK(strlen(cllm_device_description(cpu)) > 0);
    CHECK(cllm_device_supports_buft(cpu, cllm_cpu_buffer_type()));
}

static void test_accounting(void) {
    cllm_device *cpu = cllm_cpu_device();
    cllm_buffer_type *buft = cllm_device_buffer_type(cpu);
    size_t before[CLLM_MEM_COUNT];
    for (int k = 0; k < CLLM_MEM_COUNT; k++) before[k] = cllm_device_allocated(cpu, k);

    cllm_buffer *w = NULL, *s = NULL, *z = NULL;
    CHECK(cllm_buffer_type_alloc(buft, 1000, CLLM_MEM_WEIGHTS, &w) == CLLM_OK);
    CHECK(cllm_buffer_type_alloc(buft, 333, CLLM_MEM_STATE, &s) == CLLM_OK);
    CHECK(cllm_buffer_type_alloc(buft, 0, CLLM_MEM_COMPUTE, &z) == CLLM_OK);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS] + 1000);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_STATE) == before[CLLM_MEM_STATE] + 333);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_COMPUTE) == before[CLLM_MEM_COMPUTE]);
    CHECK(cllm_buffer_size(w) == 1000 && cllm_buffer_kind(s) == CLLM_MEM_STATE);
    CHECK((uintptr_t)cllm_buffer_base(w) % CLLM_CPU_ALIGNMENT == 0);
    cllm_buffer_clear(w, 0xab);
    CHECK(((unsigned char *)cllm_buffer_base(w))[999] == 0xab);
    cllm_buffer_free(w);
    cllm_buffer_free(s);
    cllm_buffer_free(z);
    cllm_buffer_free(NULL);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(cllm_device_allocated(cpu, k) == before[k]);

    /* an allocation that cannot succeed is an error status, not an abort */
    cllm_log_set(quiet, NULL);
    cllm_buffer *huge = (cllm_buffer *)0x1;
    CHECK(cllm_buffer_type_alloc(buft, SIZE_MAX / 2, CLLM_MEM_WEIGHTS, &huge) ==
          CLLM_ERR_DEVICE_MEMORY);
    CHECK(huge == (cllm_buffer *)0x1); /* output untouched */
    CHECK(strstr(cllm_last_error(), "cannot allocate") != NULL);
    cllm_log_set(NULL, NULL);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS]);

    /* a wrapped pointer is counted, and not freed by the buffer */
    char *mem = aligned_alloc(64, 256);
    cllm_buffer *wrapped = NULL;
    CHECK(cllm_cpu_buffer_from_ptr(mem, 256, CLLM_MEM_WEIGHTS, &wrapped) == CLLM_OK);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS] + 256);
    CHECK(cllm_buffer_base(wrapped) == mem);
    cllm_buffer_free(wrapped);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS]);
    mem[255] = 1; /* still ours */
    free(mem);
}

static void test_layout(void) {
    cllm_device *cpu = cllm_cpu_device();
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_context *ctx = cllm_context_new(16);
    cllm_tensor *a = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 3);      /* 12 bytes */
    cllm_tensor *b = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 7, 5);   /* 70 bytes */
    cllm_tensor *c = cllm_tensor_new_2d(ctx, CLLM_TYPE_Q8_0, 64, 2); /* 136 bytes */
    cllm_tensor *v = cllm_view_1d(ctx, b, 7, b->nb[1] * 2);          /* view: no bytes */
    const size_t want = 64 + 128 + 136;                              /* aligned to 64 */
    CHECK(cllm_layout_measure(ctx, buft) == want);

    /* measure mode: pointers into a region that does not exist, nothing counted */
    const size_t before = cllm_device_allocated(cpu, CLLM_MEM_STATE);
    cllm_buffer *mbuf = NULL;
    CHECK(cllm_layout_measure_place(ctx, buft, &mbuf) == CLLM_OK);
    CHECK(cllm_buffer_is_measure(mbuf) && cllm_buffer_size(mbuf) == want);
    CHECK(a->data != NULL && (char *)b->data - (char *)a->data == 64);
    CHECK((char *)v->data - (char *)b->data == (ptrdiff_t)(b->nb[1] * 2));
    const float ones[3] = {1, 1, 1};
    float got[3] = {5, 5, 5};
    cllm_tensor_set(a, ones, 0, sizeof(ones)); /* no-op */
    cllm_tensor_get(a, got, 0, sizeof(got));   /* zeros */
    CHECK(got[0] == 0 && got[2] == 0);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_STATE) == before);

    /* compute refuses a graph placed in measure mode */
    cllm_backend *be = NULL;
    CHECK(cllm_backend_cpu_new(1, &be) == CLLM_OK);
    cllm_context *octx = cllm_context_new(4);
    cllm_tensor *sum = cllm_add(octx, a, a);
    sum->buffer = mbuf;
    sum->data = a->data;
    cllm_graph *g = cllm_graph_new(4);
    cllm_graph_build(g, sum);
    cllm_log_set(quiet, NULL);
    CHECK(cllm_backend_graph_compute(be, g) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    cllm_graph_free(g);
    cllm_context_free(octx);
    cllm_backend_free(be);
    cllm_buffer_free(mbuf);

    /* alloc mode: exactly the measured bytes, counted as the given kind */
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        t->data = NULL;
        t->buffer = NULL;
    }
    cllm_buffer *buf = NULL;
    CHECK(cllm_layout_alloc(ctx, buft, CLLM_MEM_STATE, &buf) == CLLM_OK);
    CHECK(cllm_buffer_size(buf) == want);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_STATE) == before + want);
    CHECK((uintptr_t)c->data % CLLM_CPU_ALIGNMENT == 0 && c->buffer == buf);
    const uint16_t row[7] = {1, 2, 3, 4, 5, 6, 7};
    cllm_tensor_set(v, row, 0, sizeof(row));
    uint16_t back[7] = {0};
    cllm_tensor_get(b, back, b->nb[1] * 2, sizeof(back));
    CHECK(memcmp(row, back, sizeof(row)) == 0);
    cllm_buffer_free(buf);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_STATE) == before);
    cllm_context_free(ctx);
}

static void test_backend_params(void) {
    cllm_backend *be = NULL;
    CHECK(cllm_device_init_backend(cllm_cpu_device(), "threads=3", &be) == CLLM_OK);
    CHECK(cllm_backend_cpu_n_threads(be) == 3);
    CHECK(strcmp(cllm_backend_name(be), "cpu") == 0);
    CHECK(cllm_backend_device(be) == cllm_cpu_device());
    cllm_backend_free(be);
    be = NULL;
    CHECK(cllm_device_init_backend(cllm_cpu_device(), NULL, &be) == CLLM_OK);
    CHECK(cllm_backend_cpu_n_threads(be) >= 1);
    cllm_backend_free(be);
    cllm_backend_free(NULL);
    cllm_log_set(quiet, NULL);
    be = NULL;
    CHECK(cllm_device_init_backend(cllm_cpu_device(), "threads=two", &be) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_device_init_backend(cllm_cpu_device(), "threads=-4", &be) == CLLM_ERR_INVALID_ARG);
    CHECK(be == NULL);
    cllm_log_set(NULL, NULL);
}

static void test_status_strings(void) {
    for (int s = 0; s < CLLM_STATUS_COUNT; s++) CHECK(strlen(cllm_status_str(s)) > 0);
    CHECK(strcmp(cllm_status_str((cllm_status)999), "unknown status") == 0);
    CHECK(strcmp(cllm_mem_kind_str(CLLM_MEM_WORKSPACE), "workspace") == 0);
}

int main(void) {
    test_registry();
    test_accounting();
    test_layout();
    test_backend_params();
    test_status_strings();
    return check_summary("test_backend");
}
