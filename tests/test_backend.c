/* The generic backend layer and the CPU device: registry, buffers, memory
 * accounting per kind, measure mode, static layout, device properties,
 * buffers over host memory, weight layouts, error paths. */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/repack.h"
#include "common/check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    CHECK(cllm_device_buffer_from_host_ptr(cpu, mem, 256, CLLM_MEM_WEIGHTS, &wrapped) == CLLM_OK);
    CHECK(cllm_device_allocated(cpu, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS] + 256);
    CHECK(cllm_buffer_base(wrapped) == mem);
    CHECK(cllm_buffer_kind(wrapped) == CLLM_MEM_WEIGHTS);
    CHECK(cllm_buffer_buft(wrapped) == cllm_device_host_ptr_buffer_type(cpu));
    CHECK(cllm_buffer_type_alignment(cllm_buffer_buft(wrapped)) == 1); /* tensors at file offsets */
    CHECK(cllm_buffer_type_is_host(cllm_buffer_buft(wrapped)));
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
    cllm_backend_params bp = {.n_threads = 3};
    CHECK(cllm_device_init_backend(cllm_cpu_device(), &bp, &be) == CLLM_OK);
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
    bp.n_threads = -4;
    CHECK(cllm_device_init_backend(cllm_cpu_device(), &bp, &be) == CLLM_ERR_INVALID_ARG);
    bp.n_threads = 1025;
    CHECK(cllm_device_init_backend(cllm_cpu_device(), &bp, &be) == CLLM_ERR_INVALID_ARG);
    CHECK(be == NULL);
    cllm_log_set(NULL, NULL);
}

/* What the layers above ask the CPU device through the registry. */
static void test_device_props(void) {
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    cllm_device_props props;
    cllm_device_get_props(cpu, &props);
    CHECK(props.n_cores >= 1 && props.n_threads_max >= 1);
    CHECK(props.features && strcmp(props.features, cllm_cpu_features_str()) == 0);
    CHECK(cllm_cpu_physical_cores() == props.n_cores); /* the public API: the same answer */
    CHECK(strcmp(cllm_cpu_features(), props.features) == 0);
}

/* Random bytes for n rows of K elements of `type`, with finite fp16 scales
 * (the bytes are only moved, never computed with, but for the dot check). */
static void fill_rows(cllm_type type, int64_t K, int64_t n, char *out, unsigned seed) {
    const size_t rb = cllm_row_size(type, K);
    float *row = malloc((size_t)K * sizeof(float));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t k = 0; k < K; k++) {
            seed = seed * 1103515245u + 12345u;
            row[k] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
        cllm_type_traits_of(type)->from_float(row, out + (size_t)r * rb, K);
    }
    free(row);
}

/*
 * mul_mat of w (stored 16 rows to a group) against 1, 3 (one-column
 * kernels) and 9 columns (the panel GEMM) equals mul_mat of the same rows
 * as the file has them (plain): within a bound relative to the largest
 * result for the one-column kernels (another order of the float sums), bit
 * for bit for the panels (the same panel, gemm.h).
 */
static void mul_mat_as_rows(cllm_tensor *w, cllm_tensor *plain) {
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    cllm_backend *be = NULL;
    CHECK(cllm_backend_cpu_new(2, &be) == CLLM_OK);
    const int64_t K = w->ne[0], M = w->ne[1];
    const int cols[] = {1, 3, 9};
    for (size_t ci = 0; ci < sizeof(cols) / sizeof(cols[0]); ci++) {
        const int n = cols[ci];
        cllm_context *g = cllm_context_new(8);
        cllm_tensor *act = cllm_tensor_new_2d(g, CLLM_TYPE_F32, K, n);
        cllm_tensor *y = cllm_mul_mat(g, w, act), *want = cllm_mul_mat(g, plain, act);
        cllm_buffer *buf = NULL;
        CHECK(cllm_layout_alloc(g, cllm_device_buffer_type(cpu), CLLM_MEM_COMPUTE, &buf) ==
              CLLM_OK);
        float *x = malloc((size_t)(K * n) * sizeof(float));
        unsigned seed = 99u + (unsigned)n;
        for (int64_t i = 0; i < K * n; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
        cllm_tensor_set(act, x, 0, (size_t)(K * n) * sizeof(float));
        cllm_graph *gr = cllm_graph_new(8);
        cllm_graph_build(gr, y);
        cllm_graph_build(gr, want);
        CHECK(cllm_backend_graph_compute(be, gr) == CLLM_OK);
        float *a = malloc((size_t)(M * n) * sizeof(float)), *b = malloc((size_t)(M * n) * 4);
        cllm_tensor_get(y, a, 0, (size_t)(M * n) * sizeof(float));
        cllm_tensor_get(want, b, 0, (size_t)(M * n) * sizeof(float));
        float amax = 0.0f;
        for (int64_t i = 0; i < M * n; i++) amax = fmaxf(amax, fabsf(b[i]));
        for (int64_t i = 0; i < M * n; i++) {
            if (n >= CLLM_GEMM_MIN_COLS) {
                CHECKF(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                       "%s x16 mul_mat %d cols [%lld]: %.9g vs %.9g", cllm_type_name(w->type), n,
                       (long long)i, a[i], b[i]);
            } else {
                CHECKF(fabsf(a[i] - b[i]) <= 1e-5f * amax,
                       "%s x16 mul_mat %d cols [%lld]: %.9g vs %.9g", cllm_type_name(w->type), n,
                       (long long)i, a[i], b[i]);
            }
        }
        free(x), free(a), free(b);
        cllm_graph_free(gr);
        cllm_buffer_free(buf);
        cllm_context_free(g);
    }
    cllm_backend_free(be);
}

/*
 * The CPU's weight layout through the device's slots: a matrix flagged
 * CLLM_TENSOR_FLAG_MATMUL_ONLY of Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K in whole groups of 16
 * rows is rewritten 16 rows to a group (gemm.h: its unpack gives the file's
 * rows back) in memory the process owns and in a private mapping of a file
 * (which stays as it was); any other weight, or any weight with
 * CLLM_CPU_REPACK=0, keeps its layout. Only mul_mat may read it.
 */
static void test_weight_layout(void) {
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    static const cllm_type types[] = {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1, CLLM_TYPE_Q4_K,
                                      CLLM_TYPE_Q5_K, CLLM_TYPE_Q6_K, CLLM_TYPE_Q8_0};
    const int64_t K = 512;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const cllm_type type = types[ti];
        const bool x16 = cllm_cpu_x16_available(type, K); /* from AVX2 on, these types */
        CHECK(type != CLLM_TYPE_Q8_0 || !x16);
        const size_t rb = cllm_row_size(type, K), n = 2 * CLLM_X16_ROWS * rb;
        char *file = malloc(n), *back = malloc(n);
        fill_rows(type, K, 2 * CLLM_X16_ROWS, file, 7u + (unsigned)ti);

        cllm_context *ctx = cllm_context_new(8);
        cllm_tensor *w = cllm_tensor_new_2d(ctx, type, K, 2 * CLLM_X16_ROWS);
        cllm_tensor *odd = cllm_tensor_new_2d(ctx, type, K, CLLM_X16_ROWS + 8);
        cllm_tensor *plain = cllm_tensor_new_2d(ctx, type, K, 2 * CLLM_X16_ROWS);
        w->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        odd->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        cllm_buffer *buf = NULL;
        CHECK(cllm_buffer_type_alloc(cllm_device_buffer_type(cpu), 4 * n, CLLM_MEM_WEIGHTS, &buf) ==
              CLLM_OK);
        cllm_buffer_place_tensor(buf, w, 0);
        cllm_buffer_place_tensor(buf, odd, n);
        cllm_buffer_place_tensor(buf, plain, 2 * n);
        cllm_tensor_set(w, file, 0, n);
        cllm_tensor_set(plain, file, 0, n);
        size_t scratch = 1;
        CHECK(!cllm_device_init_weight(cpu, plain, &scratch) && scratch == 0 && !plain->layout);
        CHECK(!cllm_device_init_weight(cpu, odd, &scratch) && scratch == 0 && !odd->layout);
        CHECK(cllm_device_convert_weight(cpu, plain, NULL, false)); /* nothing to do */
        CHECK(memcmp(plain->data, file, n) == 0);

        CHECK(cllm_device_init_weight(cpu, w, &scratch) == x16);
        CHECK(scratch == (x16 ? CLLM_X16_ROWS * rb : 0));
        CHECK((w->layout == CLLM_CPU_LAYOUT_X16) == x16);
        void *tmp = scratch ? malloc(scratch) : NULL;
        CHECK(cllm_device_convert_weight(cpu, w, tmp, false));
        for (int g = 0; g < 2 && x16; g++) {
            cllm_cpu_x16_unpack(type, K, (char *)w->data + g * CLLM_X16_ROWS * rb,
                                back + g * CLLM_X16_ROWS * rb, rb);
        }
        CHECK(memcmp(x16 ? back : w->data, file, n) == 0);
        if (x16) {
            CHECK(memcmp(w->data, file, n) != 0); /* rewritten */
            /* only mul_mat reads it, as its matrix */
            cllm_context *g = cllm_context_new(8);
            cllm_tensor *act = cllm_tensor_new_2d(g, CLLM_TYPE_F32, K, 3);
            CHECK(cllm_device_supports_op(cpu, cllm_mul_mat(g, w, act)));
            cllm_tensor *idx = cllm_tensor_new_1d(g, CLLM_TYPE_I32, 2);
            CHECK(!cllm_device_supports_op(cpu, cllm_get_rows(g, w, idx)));
            cllm_context_free(g);
            mul_mat_as_rows(w, plain);
        }

        /* a private mapping of a file: its pages replaced, the file as it was */
        char path[] = "/tmp/cllm-test-backend-XXXXXX";
        const int fd = mkstemp(path);
        char head[100];
        memset(head, 'h', sizeof(head));
        CHECK(fd >= 0 && write(fd, head, 100) == 100 && write(fd, file, n) == (ssize_t)n);
        void *map = mmap(NULL, n + 100, PROT_READ, MAP_PRIVATE, fd, 0);
        CHECK(map != MAP_FAILED);
        cllm_buffer *mbuf = NULL;
        CHECK(cllm_device_buffer_from_host_ptr(cpu, map, n + 100, CLLM_MEM_WEIGHTS, &mbuf) ==
              CLLM_OK);
        cllm_tensor *mw = cllm_tensor_new_2d(ctx, type, K, 2 * CLLM_X16_ROWS);
        mw->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        cllm_buffer_place_tensor(mbuf, mw, 100);
        CHECK(cllm_device_init_weight(cpu, mw, &scratch) == x16);
        CHECK(cllm_device_convert_weight(cpu, mw, tmp, true));
        CHECK(memcmp(mw->data, w->data, n) == 0); /* what the owned copy holds */
        CHECK(memcmp(map, head, 100) == 0);       /* the bytes around it kept */
        char *again = malloc(n);
        CHECK(pread(fd, again, n, 100) == (ssize_t)n && memcmp(again, file, n) == 0);
        free(again);
        cllm_buffer_free(mbuf);
        munmap(map, n + 100);
        close(fd);
        unlink(path);

        /* CLLM_CPU_REPACK=0: every weight as the file stores it */
        setenv("CLLM_CPU_REPACK", "0", 1);
        CHECK(!cllm_device_init_weight(cpu, w, &scratch) && scratch == 0 && !w->layout);
        unsetenv("CLLM_CPU_REPACK");

        free(tmp);
        cllm_buffer_free(buf);
        cllm_context_free(ctx);
        free(file);
        free(back);
    }
}

/* A mapped matrix large enough to be repacked by several threads (each a
 * share of its groups; an odd count of groups) holds what one thread's
 * repack in place makes of it, and the file stays as it was. */
static void test_weight_layout_threaded(void) {
    cllm_device *cpu = cllm_cpu_device();
    static const cllm_type types[] = {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_K};
    const int64_t K = 512, rows = 259 * CLLM_X16_ROWS;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const cllm_type type = types[ti];
        if (!cllm_cpu_x16_available(type, K)) continue; /* below AVX2: nothing repacked */
        const size_t rb = cllm_row_size(type, K), n = (size_t)rows * rb;
        CHECK(n >= ((size_t)1 << 20)); /* repack.c: REPACK_THREADED_MIN */
        char *file = malloc(n);
        fill_rows(type, K, rows, file, 31u + (unsigned)ti);
        cllm_context *ctx = cllm_context_new(4);
        cllm_tensor *w = cllm_tensor_new_2d(ctx, type, K, rows);
        cllm_tensor *mw = cllm_tensor_new_2d(ctx, type, K, rows);
        w->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        mw->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
        cllm_buffer *buf = NULL;
        CHECK(cllm_buffer_type_alloc(cllm_device_buffer_type(cpu), n, CLLM_MEM_WEIGHTS, &buf) ==
              CLLM_OK);
        cllm_buffer_place_tensor(buf, w, 0);
        cllm_tensor_set(w, file, 0, n);
        size_t scratch = 0;
        CHECK(cllm_device_init_weight(cpu, w, &scratch));
        void *tmp = malloc(scratch);
        CHECK(cllm_device_convert_weight(cpu, w, tmp, false));

        char path[] = "/tmp/cllm-test-backend-XXXXXX";
        const int fd = mkstemp(path);
        CHECK(fd >= 0 && write(fd, file, n) == (ssize_t)n);
        void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        CHECK(map != MAP_FAILED);
        cllm_buffer *mbuf = NULL;
        CHECK(cllm_device_buffer_from_host_ptr(cpu, map, n, CLLM_MEM_WEIGHTS, &mbuf) == CLLM_OK);
        cllm_buffer_place_tensor(mbuf, mw, 0);
        CHECK(cllm_device_init_weight(cpu, mw, &scratch));
        CHECK(cllm_device_convert_weight(cpu, mw, tmp, true));
        CHECK(memcmp(mw->data, w->data, n) == 0);
        CHECK(memcmp(mw->data, file, n) != 0); /* rewritten */
        char *again = malloc(n);
        CHECK(pread(fd, again, n, 0) == (ssize_t)n && memcmp(again, file, n) == 0);
        free(again);
        cllm_buffer_free(mbuf);
        munmap(map, n);
        close(fd);
        unlink(path);
        free(tmp);
        cllm_buffer_free(buf);
        cllm_context_free(ctx);
        free(file);
    }
}

/* Clearing to zero: a buffer of several pages (huge ones and a ragged
 * tail) reads zero in every byte, also after a second clear of pages
 * already touched; a buffer over the caller's memory is written, its bytes
 * around it untouched. */
static void test_clear_zero(void) {
    cllm_device *cpu = cllm_cpu_device();
    cllm_buffer_type *buft = cllm_device_buffer_type(cpu);
    const size_t n = (size_t)3 << 20 | 4097; /* huge pages and a ragged tail */
    cllm_buffer *b = NULL;
    CHECK(cllm_buffer_type_alloc(buft, n, CLLM_MEM_STATE, &b) == CLLM_OK);
    for (int round = 0; round < 2; round++) {
        unsigned char *p = cllm_buffer_base(b);
        memset(p, 0x5a, n);
        cllm_buffer_clear(b, 0);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += p[i] != 0;
        CHECK(bad == 0);
    }
    cllm_buffer_free(b);

    const size_t m = (size_t)64 << 10;
    unsigned char *mem = aligned_alloc(4096, m + 8192);
    memset(mem, 0x77, m + 8192);
    cllm_buffer *w = NULL;
    CHECK(cllm_device_buffer_from_host_ptr(cpu, mem + 4096, m, CLLM_MEM_STATE, &w) == CLLM_OK);
    cllm_buffer_clear(w, 0);
    size_t bad = 0;
    for (size_t i = 0; i < m + 8192; i++) {
        bad += mem[i] != (i >= 4096 && i < 4096 + m ? 0 : 0x77);
    }
    CHECK(bad == 0);
    cllm_buffer_free(w);
    free(mem);
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
    test_device_props();
    test_weight_layout();
    test_weight_layout_threaded();
    test_clear_zero();
    test_status_strings();
    return check_summary("test_backend");
}
