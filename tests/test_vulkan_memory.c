/*
 * The Vulkan backend's memory at the device's limits, with the validation
 * layer on (any error it reports fails the test). The limits of a large GPU
 * are met on a small device through the backend's test knobs
 * (cllm_registry_configure("vulkan", "max_alloc=..,max_range=..,fail_alloc=..")):
 *  - buffers above the allocation limit made of pieces, each within it,
 *    counted to the byte; a tensor never crosses a piece; one larger than a
 *    piece refused as a status;
 *  - stories260K with the limit below its weights, state and compute on the
 *    device: planned == allocated per kind with several allocations each,
 *    and the CPU's logits;
 *  - get_rows and mul_mat over matrices larger than the storage-buffer
 *    range, recorded in windows, against the CPU; other ops over such
 *    tensors refused (the scheduler leaves them to the CPU);
 *  - stories260K's KV cache layers larger than a binding: the attention
 *    over them in windows of the cache's rows, token by token, with the
 *    logits of the run over whole bindings;
 *  - Gemma 3's token embedding (larger than lavapipe's real 128 MiB range)
 *    gathered and multiplied on the device, against the CPU (not again
 *    with CLLM_VULKAN_STAGING=1: the windows above are staged then too, and
 *    the 178 MB product takes lavapipe minutes);
 *  - a model load and session whose N-th device allocation fails, for
 *    every N in turn: a status, nothing left allocated.
 * Skipped (77) without a Vulkan device.
 */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/refs.h"
#include "gguf/gguf.h"
#include "runtime/fit.h"
#include "runtime/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_errors; /* errors logged by the validation layer */
/* attention nodes computed over a cache in windows (the backends say so
 * when freed) */
static unsigned long long g_attn_windows;

static void on_log(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level == CLLM_LOG_ERROR && !strncmp(msg, "vulkan validation", 17)) {
        g_errors++;
        fprintf(stderr, "error: %s\n", msg);
    }
    const char *p = strstr(msg, " nodes recorded in ");
    unsigned long long n;
    if (level == CLLM_LOG_DEBUG && !strncmp(msg, "vulkan", 6) && p && (p = strstr(p, "; ")) &&
        sscanf(p, "; %llu attention nodes over a cache in windows", &n) == 1) {
        g_attn_windows += n;
    }
}

static cllm_device *g_vk;

static void configure(const char *params) {
    CHECKF(cllm_registry_configure("vulkan", params) == CLLM_OK, "configure %s: %s", params,
           cllm_last_error());
}

static size_t allocated_total(cllm_device *dev) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += cllm_device_allocated(dev, k);
    return n;
}

/* ---- buffers in pieces ------------------------------------------------- */

static void test_pieces(void) {
    const size_t max = 64 << 10;
    configure("max_alloc=64KiB");
    cllm_buffer_type *buft = cllm_device_buffer_type(g_vk);
    const size_t align = cllm_buffer_type_alignment(buft);
    CHECK(cllm_buffer_type_max_size(buft) == max);
    CHECK(cllm_buffer_type_piece_size(buft) == max - max % align);
    const size_t before = allocated_total(g_vk);

    /* 3 pieces and a bit, counted to the byte */
    cllm_buffer *buf = NULL;
    const size_t size = 3 * max + 13;
    CHECK(cllm_buffer_type_alloc(buft, size, CLLM_MEM_STATE, &buf) == CLLM_OK);
    CHECK(allocated_total(g_vk) - before == size);
    CHECK_EQ_INT(cllm_buffer_n_pieces(buf), 4);
    size_t sum = 0;
    for (int i = 0; i < cllm_buffer_n_pieces(buf); i++) {
        const size_t n = cllm_buffer_size(cllm_buffer_piece(buf, i));
        CHECK(n <= max);
        sum += n;
    }
    CHECK(sum == size && cllm_buffer_size(buf) == size);
    cllm_buffer_free(buf);
    CHECK(allocated_total(g_vk) == before);

    /* a layout of tensors of 24 KiB: each within one piece, set and read back */
    cllm_context *ctx = cllm_context_new(16);
    for (int i = 0; i < 11; i++) cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 6 << 10);
    const size_t want = cllm_layout_measure(ctx, buft);
    CHECK(want > 11 * (size_t)(24 << 10)); /* padded where a tensor would cross a piece */
    CHECK(cllm_layout_alloc(ctx, buft, CLLM_MEM_WEIGHTS, &buf) == CLLM_OK);
    CHECK(cllm_buffer_size(buf) == want && allocated_total(g_vk) - before == want);
    CHECK(cllm_buffer_n_pieces(buf) > 1);
    float *in = malloc((size_t)(24 << 10)), *out = malloc((size_t)(24 << 10));
    for (int i = 0; i < 11; i++) {
        cllm_tensor *t = cllm_context_tensor(ctx, i);
        CHECK(t->buffer != buf && cllm_buffer_holds(buf, t->buffer));
        const size_t off = (size_t)((char *)t->data - (char *)cllm_buffer_base(t->buffer));
        CHECK(off + cllm_nbytes(t) <= cllm_buffer_size(t->buffer));
        for (int j = 0; j < (6 << 10); j++) in[j] = (float)(i * 10000 + j);
        cllm_tensor_set_all(t, in);
    }
    for (int i = 0; i < 11; i++) {
        cllm_tensor_get_all(cllm_context_tensor(ctx, i), out);
        CHECKF(out[0] == (float)(i * 10000) && out[(6 << 10) - 1] == (float)(i * 10000 + 6143),
               "tensor %d: %g .. %g", i, out[0], out[(6 << 10) - 1]);
    }
    free(in);
    free(out);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
    CHECK(allocated_total(g_vk) == before);

    /* a tensor larger than one piece: a status, nothing allocated */
    ctx = cllm_context_new(2);
    cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 32 << 10); /* 128 KiB */
    buf = (cllm_buffer *)0x1;
    CHECK(cllm_layout_alloc(ctx, buft, CLLM_MEM_WEIGHTS, &buf) == CLLM_ERR_TOO_LARGE);
    CHECK(buf == (cllm_buffer *)0x1 && allocated_total(g_vk) == before);
    cllm_context_free(ctx);
    configure("max_alloc=0");
    CHECK(cllm_buffer_type_max_size(buft) > max);
}

/* ---- a model with every kind in several allocations -------------------- */

static cllm_plan *plan_on_device(const char *path) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 256;
    fp.n_batch = 64;
    fp.n_threads = 2;
    fp.use_mmap = false;
    char mem[96];
    snprintf(mem, sizeof(mem), "%s=1GiB", cllm_device_name(g_vk));
    CHECK(cllm_plan_parse_mem(&fp, mem) == CLLM_OK);
    cllm_plan *plan = NULL;
    const cllm_status st = cllm_plan_file(path, &fp, &plan);
    CHECKF(st == CLLM_OK, "plan: %s", cllm_last_error());
    return st == CLLM_OK ? plan : NULL;
}

static int vk_index(const cllm_plan *plan) {
    for (int d = 0; d < plan->n_devices; d++) {
        if (plan->devices[d].dev == g_vk) return d;
    }
    return -1;
}

static cllm_status open_session(const char *path, const cllm_plan *plan, cllm_model **m,
                                cllm_session **s) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.progress = false;
    mp.plan = plan;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.n_threads = 2;
    *m = NULL;
    *s = NULL;
    cllm_status st = cllm_model_load(path, &mp, m);
    if (st == CLLM_OK) st = cllm_session_new(*m, &sp, s);
    return st;
}

static const char k_text[] = "Once upon a time, there was a little girl named Lily.";

/* The logits of the text's last token (malloc'd), or NULL. */
static float *logits_of(cllm_model *m, cllm_session *s, int64_t *n_vocab) {
    int32_t ids[64];
    size_t n = 0;
    CHECK(cllm_tokenize(m, k_text, strlen(k_text), true, false, ids, 64, &n) == CLLM_OK);
    const cllm_status st = cllm_session_decode(s, ids, n);
    CHECKF(st == CLLM_OK, "decode: %s", cllm_last_error());
    if (st != CLLM_OK) return NULL;
    *n_vocab = cllm_session_n_vocab(s);
    float *l = malloc((size_t)*n_vocab * sizeof(float));
    memcpy(l, cllm_session_logits(s), (size_t)*n_vocab * sizeof(float));
    return l;
}

static void test_model_pieces(const char *path) {
    /* below every kind the device holds, above its largest tensor */
    const size_t max = 128 << 10;
    configure("max_alloc=128KiB");
    cllm_plan *plan = plan_on_device(path);
    const int vk = plan ? vk_index(plan) : -1;
    CHECKF(vk >= 0 && plan->devices[vk].n_layers == plan->hp.n_layer, "layers on %s",
           cllm_device_name(g_vk));
    for (int k = 0; vk >= 0 && k < CLLM_MEM_COUNT; k++) {
        fprintf(stderr, "stories260K on %s, %s: %zu bytes planned\n", cllm_device_name(g_vk),
                cllm_mem_kind_str(k), plan->devices[vk].bytes[k]);
    }
    if (vk < 0) {
        cllm_plan_free(plan);
        configure("max_alloc=0");
        return;
    }
    const cllm_mem_kind kinds[3] = {CLLM_MEM_WEIGHTS, CLLM_MEM_STATE, CLLM_MEM_COMPUTE};
    for (int i = 0; i < 3; i++) {
        CHECKF(plan->devices[vk].bytes[kinds[i]] > max, "%s: %zu bytes planned",
               cllm_mem_kind_str(kinds[i]), plan->devices[vk].bytes[kinds[i]]);
    }
    size_t before[CLLM_MEM_COUNT];
    for (int k = 0; k < CLLM_MEM_COUNT; k++) before[k] = cllm_device_allocated(g_vk, k);
    cllm_model *m, *mc;
    cllm_session *s, *sc;
    cllm_status st = open_session(path, plan, &m, &s);
    CHECKF(st == CLLM_OK, "load: %s", cllm_last_error());
    if (st == CLLM_OK) {
        /* planned == allocated; above the limit, so in several allocations */
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            const size_t got = cllm_device_allocated(g_vk, k) - before[k];
            CHECKF(got == plan->devices[vk].bytes[k], "%s: allocated %zu, planned %zu",
                   cllm_mem_kind_str(k), got, plan->devices[vk].bytes[k]);
        }
        CHECK(open_session(path, NULL, &mc, &sc) == CLLM_OK);
        int64_t nv = 0, nc = 0;
        float *ld = logits_of(m, s, &nv), *lc = logits_of(mc, sc, &nc);
        if (ld && lc && nv == nc) {
            float scale = 0.0f, worst = 0.0f;
            for (int64_t i = 0; i < nv; i++) scale = fmaxf(scale, fabsf(lc[i]));
            for (int64_t i = 0; i < nv; i++) worst = fmaxf(worst, fabsf(lc[i] - ld[i]));
            CHECKF(worst <= 0.01f * scale, "logits differ by %g (scale %g)", worst, scale);
        }
        free(ld);
        free(lc);
        cllm_session_free(sc);
        cllm_model_free(mc);
    }
    cllm_session_free(s);
    cllm_model_free(m);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(cllm_device_allocated(g_vk, k) == before[k]);

    /* a limit below the largest tensor: the plan fails and names it */
    configure("max_alloc=4KiB");
    cllm_plan_params fp = cllm_plan_default_params();
    fp.use_mmap = false;
    char mem[96];
    snprintf(mem, sizeof(mem), "%s=1GiB", cllm_device_name(g_vk));
    CHECK(cllm_plan_parse_mem(&fp, mem) == CLLM_OK);
    cllm_plan *none = NULL;
    st = cllm_plan_file(path, &fp, &none);
    CHECKF(st == CLLM_ERR_TOO_LARGE && strstr(cllm_last_error(), "exceeds the 4096-byte"),
           "status %d: %s", (int)st, cllm_last_error());
    cllm_plan_free(none);
    cllm_plan_free(plan);
    configure("max_alloc=0");
}

/* ---- a KV cache larger than a binding ----------------------------------- */

enum { KV_STEPS = 64 };

/* stories260K all on the device with the storage range lowered to `range`
 * (0: the device's), fed the text token by token (again from its start
 * when it ends) for KV_STEPS steps: the logits of every step (malloc'd,
 * [KV_STEPS, n_vocab]), or NULL. */
static float *kv_run(const char *path, size_t range, int64_t *n_vocab) {
    char params[64];
    snprintf(params, sizeof(params), "max_range=%zu", range);
    configure(params);
    float *out = NULL;
    cllm_plan *plan = plan_on_device(path);
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    const int vk = plan ? vk_index(plan) : -1;
    CHECKF(vk >= 0 && plan->devices[vk].n_layers == plan->hp.n_layer, "layers on %s",
           cllm_device_name(g_vk));
    if (vk < 0 || open_session(path, plan, &m, &s) != CLLM_OK) {
        CHECKF(vk < 0, "load: %s", cllm_last_error());
        goto done;
    }
    int32_t ids[64];
    size_t n = 0;
    CHECK(cllm_tokenize(m, k_text, strlen(k_text), true, false, ids, 64, &n) == CLLM_OK && n > 1);
    *n_vocab = cllm_session_n_vocab(s);
    out = malloc((size_t)KV_STEPS * (size_t)*n_vocab * sizeof(float));
    for (int step = 0; step < KV_STEPS; step++) {
        const cllm_status st = cllm_session_decode(s, &ids[(size_t)step % n], 1);
        CHECKF(st == CLLM_OK, "decode %d: %s", step, cllm_last_error());
        if (st != CLLM_OK) {
            free(out);
            out = NULL;
            break;
        }
        memcpy(out + (size_t)step * (size_t)*n_vocab, cllm_session_logits(s),
               (size_t)*n_vocab * sizeof(float));
    }
done:
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
    configure("max_range=0");
    return out;
}

/* A layer of the KV cache (256 rows of 64 bytes: 16 KiB) larger than a
 * 4 KiB binding: the writes into it are the rows of a token, and the
 * attention reads the cache in windows of its rows, merged on the device.
 * Every other node of a token fits or is recorded in windows that compute
 * it bit for bit, so the logits are those of the run with the device's own
 * range but for the order of the softmax's sums. */
static void test_kv_windows(const char *path) {
    int64_t nv = 0, nw = 0;
    float *want = kv_run(path, 0, &nv);
    g_attn_windows = 0;
    float *got = kv_run(path, 4096, &nw);
    CHECKF(g_attn_windows > 0, "%llu attention nodes in windows", g_attn_windows);
    if (want && got && nv == nw) {
        float worst = 0.0f;
        int worst_step = 0, argmax_diff = 0;
        for (int step = 0; step < KV_STEPS; step++) {
            const float *a = want + (size_t)step * (size_t)nv, *b = got + (size_t)step * (size_t)nv;
            float scale = 0.0f, d = 0.0f;
            int64_t ia = 0, ib = 0;
            for (int64_t i = 0; i < nv; i++) {
                const float e = fabsf(a[i] - b[i]);
                scale = fmaxf(scale, fabsf(a[i]));
                if (!(e <= d)) d = e; /* NaN counts as worst */
                if (a[i] > a[ia]) ia = i;
                if (b[i] > b[ib]) ib = i;
            }
            if (!(d <= worst * scale) && scale > 0.0f) worst = d / scale, worst_step = step;
            argmax_diff += ia != ib;
        }
        fprintf(stderr,
                "KV cache in windows: %llu attention nodes, logits within %g of the "
                "whole cache's (step %d), %d greedy choices differ\n",
                g_attn_windows, worst, worst_step, argmax_diff);
        /* windows merge partial softmax sums in another order than one
         * pass over the whole cache: a few ulps per step, growing with the
         * context (3e-5 of the scale by step 60 on lavapipe); a window read
         * wrong moves logits by whole units */
        CHECKF(worst <= 1e-4f, "logits differ by %g of their scale at step %d", worst, worst_step);
        CHECKF(argmax_diff == 0, "%d greedy choices differ", argmax_diff);
    } else {
        CHECK(false);
    }
    free(want);
    free(got);
}

/* ---- windows over matrices larger than a binding ------------------------ */

static float value(int leaf, int64_t i) {
    const uint32_t h = (uint32_t)(leaf * 2654435761u) ^ (uint32_t)(i * 2246822519u);
    return (float)((h >> 8) % 20001) / 10000.0f - 1.0f;
}

/* Every leaf from its index and element; "ids<R>" leafs: ids spread over
 * [0, R), the last one R - 1. */
static void fill(cllm_tensor *t, int leaf) {
    const int64_t n = cllm_nelements(t);
    float *f = malloc((size_t)n * sizeof(float));
    void *raw = malloc(cllm_nbytes(t));
    if (t->type == CLLM_TYPE_I32) {
        const int64_t r = atoll(t->name + 3);
        for (int64_t i = 0; i < n; i++) {
            ((int32_t *)raw)[i] = (int32_t)(i == n - 1 ? r - 1 : (i * 7919 + 3) % r);
        }
    } else {
        for (int64_t i = 0; i < n; i++) f[i] = value(leaf, i);
        cllm_type_traits_of(t->type)->from_float(f, raw, n);
    }
    cllm_tensor_set_all(t, raw);
    free(f);
    free(raw);
}

typedef cllm_tensor *(*build_fn)(cllm_context *ctx, int variant, void *ud);

/* Builds the op on `dev`, fills the leafs that have no data yet (`ud` may
 * set others), computes, returns the result as floats (malloc'd) or NULL. */
static float *run_on(cllm_device *dev, build_fn build, int variant, void *ud, int64_t *n_out) {
    cllm_context *ctx = cllm_context_new(32);
    cllm_tensor *node = build(ctx, variant, NULL);
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
    if (ud) build(ctx, variant, ud); /* sets what it owns */
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

static void compare(const char *what, build_fn build, int variant, void *ud, float tol) {
    int64_t n_cpu = 0, n_vk = 0;
    float *want = run_on(cllm_cpu_device(), build, variant, ud, &n_cpu);
    float *got = run_on(g_vk, build, variant, ud, &n_vk);
    if (want && got && n_cpu == n_vk) {
        double worst = 0.0;
        int64_t at = 0;
        for (int64_t i = 0; i < n_cpu; i++) {
            const double d = fabs((double)want[i] - got[i]) / (1.0 + fabs(want[i]));
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

static const cllm_type k_types[] = {CLLM_TYPE_F32,  CLLM_TYPE_F16,  CLLM_TYPE_Q8_0,
                                    CLLM_TYPE_Q4_1, CLLM_TYPE_Q4_K, CLLM_TYPE_Q6_K};

/* 300 rows of 256: 4 KiB bindings hold 4 to 28 of them */
static cllm_tensor *build_get_rows(cllm_context *ctx, int v, void *ud) {
    if (ud) return NULL;
    cllm_tensor *a = cllm_tensor_new_2d(ctx, k_types[v], 256, 300);
    cllm_tensor *ids = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 3); /* 3 KiB of result */
    cllm_tensor_set_name(ids, "ids300");
    return cllm_get_rows(ctx, a, ids);
}

/* d = a b with a 300 rows of 256, b 37 columns (a strided view with v >= 6):
 * windows of a's rows, and of b's and d's columns */
static cllm_tensor *build_mul_mat(cllm_context *ctx, int v, void *ud) {
    if (ud) return NULL;
    cllm_tensor *a = cllm_tensor_new_2d(ctx, k_types[v % 6], 256, 300);
    cllm_tensor *b = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 37);
    if (v >= 6)
        b = cllm_view_2d(ctx, cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 300, 37), 256, 37,
                         300 * sizeof(float), 16 * sizeof(float));
    cllm_tensor *d = cllm_mul_mat(ctx, a, b);
    cllm_mul_mat_set_prec(d, CLLM_PREC_F32);
    return d;
}

static void test_windows(void) {
    configure("max_range=4KiB");
    for (int v = 0; v < 6; v++) compare("get_rows in windows", build_get_rows, v, NULL, 0.0f);
    for (int v = 0; v < 12; v++) compare("mul_mat in windows", build_mul_mat, v, NULL, 1e-5f);
    /* other ops over a tensor larger than a binding stay on the CPU */
    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *a = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 300);
    CHECK(!cllm_device_supports_op(g_vk, cllm_add(ctx, a, a)));
    CHECK(!cllm_device_supports_op(g_vk, cllm_rms_norm(ctx, a, 1e-5f)));
    cllm_tensor *small = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 3);
    CHECK(cllm_device_supports_op(g_vk, cllm_add(ctx, small, small)));
    cllm_context_free(ctx);
    configure("max_range=0");
}

/* ---- Gemma 3's embedding, larger than the device's range ---------------- */

typedef struct embd {
    const cllm_gguf_tensor_info *ti;
    void *data; /* its bytes */
} embd;

static embd g_embd;

/* v 0: get_rows of ids over the whole vocabulary; 1: the output product
 * (tied) of two rows of activations. With ud: sets the matrix. */
static cllm_tensor *build_embd(cllm_context *ctx, int v, void *ud) {
    if (ud) {
        cllm_tensor_set_all(cllm_context_tensor(ctx, 0), g_embd.data);
        return NULL;
    }
    cllm_tensor *a = cllm_tensor_new_2d(ctx, g_embd.ti->type, g_embd.ti->ne[0], g_embd.ti->ne[1]);
    if (v == 0) {
        cllm_tensor *ids = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 7);
        char name[32];
        snprintf(name, sizeof(name), "ids%lld", (long long)g_embd.ti->ne[1]);
        cllm_tensor_set_name(ids, name);
        return cllm_get_rows(ctx, a, ids);
    }
    cllm_tensor *d = cllm_mul_mat(ctx, a, cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, a->ne[0], 2));
    cllm_mul_mat_set_prec(d, CLLM_PREC_F32);
    return d;
}

static void test_gemma_embedding(void) {
    char path[4096];
    if (!refs_fetch_model("gemma3", path, sizeof(path))) return;
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        CHECKF(false, "%s: %s", path, cllm_last_error());
        return;
    }
    const int64_t i = cllm_gguf_find_tensor(g, "token_embd.weight");
    CHECK(i >= 0);
    g_embd.ti = i >= 0 ? cllm_gguf_tensor(g, i) : NULL;
    FILE *f = g_embd.ti ? fopen(path, "rb") : NULL;
    if (f) {
        g_embd.data = malloc(g_embd.ti->size);
        CHECK(fseek(f, (long)(cllm_gguf_data_offset(g) + g_embd.ti->offset), SEEK_SET) == 0);
        CHECK(fread(g_embd.data, 1, g_embd.ti->size, f) == g_embd.ti->size);
        fclose(f);
        /* the real range: the matrix is larger than one binding */
        cllm_context *ctx = cllm_context_new(4);
        cllm_tensor *a =
            cllm_tensor_new_2d(ctx, g_embd.ti->type, g_embd.ti->ne[0], g_embd.ti->ne[1]);
        fprintf(stderr, "gemma3 token_embd: %s %lld x %lld, %zu bytes\n", cllm_type_name(a->type),
                (long long)a->ne[0], (long long)a->ne[1], cllm_nbytes(a));
        cllm_context_free(ctx);
        compare("gemma3 get_rows", build_embd, 0, &g_embd, 0.0f);
        compare("gemma3 output mul_mat", build_embd, 1, &g_embd, 1e-4f);
        free(g_embd.data);
    }
    cllm_gguf_free(g);
}

/* ---- device allocations failing ----------------------------------------- */

/* Loads and opens a session with the N-th device allocation failing, for
 * every N until one succeeds: each a status, nothing left allocated. With
 * pieces of 128 KiB, failures fall between the pieces of one buffer too. */
static void test_faults(const char *path) {
    configure("max_alloc=128KiB");
    cllm_plan *plan = plan_on_device(path);
    if (!plan) {
        configure("max_alloc=0");
        return;
    }
    const size_t before = allocated_total(g_vk), cpu_before = allocated_total(cllm_cpu_device());
    int n_failed = 0;
    for (int n = 1; n < 1000; n++) {
        char params[64];
        snprintf(params, sizeof(params), "fail_alloc=%d", n);
        configure(params);
        cllm_model *m;
        cllm_session *s;
        const cllm_status st = open_session(path, plan, &m, &s);
        cllm_session_free(s);
        cllm_model_free(m);
        CHECKF(allocated_total(g_vk) == before, "fail_alloc=%d: %zu bytes left on %s", n,
               allocated_total(g_vk) - before, cllm_device_name(g_vk));
        CHECKF(allocated_total(cllm_cpu_device()) == cpu_before, "fail_alloc=%d: cpu bytes left",
               n);
        if (st == CLLM_OK) break;
        CHECKF(st == CLLM_ERR_DEVICE_MEMORY, "fail_alloc=%d: status %d: %s", n, (int)st,
               cllm_last_error());
        n_failed++;
    }
    fprintf(stderr, "fault injection: %d device allocations failed in turn\n", n_failed);
    CHECKF(n_failed > 3, "only %d allocations failed", n_failed);
    configure("fail_alloc=0,max_alloc=0");
    cllm_plan_free(plan);
}

int main(void) {
    /* the validation layer with synchronization validation (windows bind
     * parts of tensors), before the registry loads the module */
    setenv("CLLM_VULKAN_VALIDATE", "1", 0);
    /* synchronization validation multiplies the driver's time on the large
     * windowed matrices here (minutes on lavapipe); test_vulkan_async holds
     * the backend to zero hazards, TEST_VULKAN_SYNC=1 adds them here */
    const char *sync = getenv("TEST_VULKAN_SYNC");
    if (sync && !strcmp(sync, "1")) {
        setenv("VK_LAYER_ENABLES",
               "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:"
               "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
               0);
    }
    cllm_log_set(on_log, NULL);
    cllm_log_set_level(CLLM_LOG_DEBUG);
    for (int i = 0; i < cllm_registry_device_count() && !g_vk; i++) {
        cllm_device *d = cllm_registry_device(i);
        if (!strncmp(cllm_device_name(d), "vulkan", 6)) g_vk = d;
    }
    if (!g_vk) {
        check_missing("a Vulkan device (cllm built with libvulkan-dev and glslc; at run time "
                      "libvulkan1 and a driver, e.g. mesa-vulkan-drivers)");
        return check_summary("test_vulkan_memory");
    }
    test_pieces();
    test_windows();
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (refs_have(files)) {
        char path[4096];
        refs_model_path(path, sizeof(path), "stories260K.gguf");
        test_model_pieces(path);
        test_kv_windows(path);
        test_faults(path);
    }
    if (!getenv("CLLM_VULKAN_STAGING")) test_gemma_embedding();
    CHECKF(g_errors == 0, "%d errors from the validation layer", g_errors);
    return check_summary("test_vulkan_memory");
}
