/*
 * The scheduler with the test device as a second, restricted backend: a
 * small llama model (the real graph builder) with its layers' weights and KV
 * cache on either device; results equal the CPU's alone; the expected splits
 * and copies happen; weights on the test device pull their consumers there;
 * planned compute and workspace bytes equal the allocated ones; pipeline
 * copies; allocation failures; ops nobody supports.
 */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "backend/test/test-backend.h"
#include "common/check.h"
#include "model/arch.h"
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { E = 64, H = 4, HKV = 2, HD = 16, F = 128, V = 100, L = 2, NCTX = 16 };

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* A tiny llama: weights of layer l on `layer_dev[l]`, the rest on the CPU. */
typedef struct tiny {
    cllm_hparams hp;
    cllm_weights w;
    cllm_layer_weights layers[L];
    cllm_kv_cache kv;
    cllm_tensor *k[L], *v[L];
    cllm_context *ctx[2], *kvctx[2]; /* [0]: cpu, [1]: test device */
    cllm_buffer *wbuf[2], *kvbuf[2];
} tiny;

static uint32_t name_seed(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

static void fill(cllm_tensor *t, bool norm) {
    const int64_t n = cllm_nelements(t);
    float *x = malloc((size_t)n * sizeof(float));
    uint32_t r = name_seed(t->name);
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        const float u = (float)(r >> 8) / 16777216.0f - 0.5f;
        x[i] = norm ? 1.0f + 0.2f * u : 0.3f * u;
    }
    cllm_tensor_set_all(t, x);
    free(x);
}

static cllm_tensor *wt(tiny *m, int dev, const char *name, int64_t ne0, int64_t ne1) {
    cllm_tensor *t = ne1 ? cllm_tensor_new_2d(m->ctx[dev], CLLM_TYPE_F32, ne0, ne1)
                         : cllm_tensor_new_1d(m->ctx[dev], CLLM_TYPE_F32, ne0);
    return cllm_tensor_set_name(t, "%s", name);
}

static bool tiny_init(tiny *m, const int *layer_dev, const int *kv_dev) {
    memset(m, 0, sizeof(*m));
    m->hp = (cllm_hparams){.arch = "llama",
                           .n_vocab = V,
                           .n_ctx_train = NCTX,
                           .n_embd = E,
                           .n_layer = L,
                           .n_head = H,
                           .n_head_kv = HKV,
                           .head_dim_k = HD,
                           .head_dim_v = HD,
                           .n_ff = F,
                           .norm_eps = 1e-5f,
                           .n_rot = HD,
                           .rope_mode = CLLM_ROPE_NORMAL,
                           .rope_freq_base = 10000.0f,
                           .rope_freq_scale = 1.0f};
    for (int d = 0; d < 2; d++) {
        m->ctx[d] = cllm_context_new(64);
        m->kvctx[d] = cllm_context_new(2 * L);
    }
    m->w.ctx = m->ctx[0];
    m->w.n_layer = L;
    m->w.layers = m->layers;
    m->w.tok_embd = wt(m, 0, "token_embd.weight", E, V);
    m->w.output_norm = wt(m, 0, "output_norm.weight", E, 0);
    m->w.output = wt(m, 0, "output.weight", E, V);
    char n[64];
    for (int l = 0; l < L; l++) {
        const int d = layer_dev[l];
        cllm_layer_weights *y = &m->layers[l];
#define W(field, suffix, a, b)                                                                     \
    snprintf(n, sizeof(n), "blk.%d." suffix, l);                                                   \
    y->field = wt(m, d, n, a, b)
        W(attn_norm, "attn_norm.weight", E, 0);
        W(wq, "attn_q.weight", E, H * HD);
        W(wk, "attn_k.weight", E, HKV * HD);
        W(wv, "attn_v.weight", E, HKV * HD);
        W(wo, "attn_output.weight", H * HD, E);
        W(ffn_norm, "ffn_norm.weight", E, 0);
        W(ffn_gate, "ffn_gate.weight", E, F);
        W(ffn_up, "ffn_up.weight", E, F);
        W(ffn_down, "ffn_down.weight", F, E);
#undef W
        m->k[l] = cllm_tensor_new_2d(m->kvctx[kv_dev[l]], CLLM_TYPE_F32, HKV * HD, NCTX);
        m->v[l] = cllm_tensor_new_2d(m->kvctx[kv_dev[l]], CLLM_TYPE_F32, HKV * HD, NCTX);
        cllm_tensor_set_name(m->k[l], "cache_k-%d", l);
        cllm_tensor_set_name(m->v[l], "cache_v-%d", l);
    }
    m->kv = (cllm_kv_cache){.type_k = CLLM_TYPE_F32,
                            .type_v = CLLM_TYPE_F32,
                            .n_ctx = NCTX,
                            .n_layer = L,
                            .k = m->k,
                            .v = m->v};
    cllm_buffer_type *bufts[2] = {cllm_cpu_buffer_type(),
                                  cllm_device_buffer_type(cllm_test_device())};
    for (int d = 0; d < 2; d++) {
        if (cllm_layout_alloc(m->ctx[d], bufts[d], CLLM_MEM_WEIGHTS, &m->wbuf[d]) != CLLM_OK ||
            cllm_layout_alloc(m->kvctx[d], bufts[d], CLLM_MEM_STATE, &m->kvbuf[d]) != CLLM_OK) {
            return false;
        }
        cllm_buffer_clear(m->kvbuf[d], 0);
        for (int i = 0; i < cllm_context_n_tensors(m->ctx[d]); i++) {
            cllm_tensor *t = cllm_context_tensor(m->ctx[d], i);
            fill(t, t->ne[1] == 1);
        }
    }
    return true;
}

static void tiny_free(tiny *m) {
    for (int d = 0; d < 2; d++) {
        cllm_buffer_free(m->wbuf[d]);
        cllm_buffer_free(m->kvbuf[d]);
        cllm_context_free(m->ctx[d]);
        cllm_context_free(m->kvctx[d]);
    }
}

typedef struct step_graph {
    cllm_context *ctx;
    cllm_graph *g;
    cllm_graph_io io;
} step_graph;

static void build(step_graph *sg, tiny *m, int64_t n_tokens, int64_t n_past, bool unfused) {
    sg->ctx = cllm_context_new(1024);
    sg->g = cllm_graph_new(1024);
    const cllm_build_args args = {
        .hp = &m->hp,
        .w = &m->w,
        .kv = &m->kv,
        .shape = {.n_tokens = n_tokens,
                  .n_past = n_past,
                  .n_kv = n_past + n_tokens,
                  .n_outputs = 1},
        .unfused_attn = unfused,
        .ctx = sg->ctx,
        .graph = sg->g,
    };
    cllm_arch_find("llama")->build(&args, &sg->io);
    for (int i = 0; i < sg->g->n_nodes; i++) {
        if (sg->g->nodes[i]->op == CLLM_OP_MUL_MAT) {
            cllm_mul_mat_set_prec(sg->g->nodes[i], CLLM_PREC_F32);
        }
    }
}

static void build_free(step_graph *sg) {
    cllm_graph_free(sg->g);
    cllm_context_free(sg->ctx);
}

static void set_inputs(step_graph *sg, int64_t n_tokens, int64_t n_past) {
    for (int64_t i = 0; i < n_tokens; i++) {
        const int32_t tok = (int32_t)((i * 37 + n_past * 11 + 3) % V), pos = (int32_t)(n_past + i);
        cllm_tensor_set(sg->io.tokens, &tok, (size_t)i * 4, 4);
        cllm_tensor_set(sg->io.pos, &pos, (size_t)i * 4, 4);
    }
    const cllm_batch_shape sh = {
        .n_tokens = n_tokens, .n_past = n_past, .n_kv = n_past + n_tokens, .n_outputs = 1};
    float *mask = malloc((size_t)(sh.n_kv * n_tokens) * sizeof(float));
    cllm_fill_causal_mask(mask, &sh);
    cllm_tensor_set_all(sg->io.mask, mask);
    free(mask);
    const int32_t last = (int32_t)(n_tokens - 1);
    cllm_tensor_set(sg->io.out_ids, &last, 0, 4);
}

typedef struct run_cfg {
    int layer_dev[L], kv_dev[L];
    bool unfused;
    int n_copies;
    bool with_test; /* backends {test, cpu}, else {cpu} */
} run_cfg;

typedef struct run_result {
    float logits[2][V]; /* prompt of 5, then one token */
    int n_splits[2], n_copies[2];
    int mul_mat_on_test, rope_on_test, rope_total;
    bool ok;
} run_result;

static void run(const run_cfg *c, run_result *out) {
    memset(out, 0, sizeof(*out));
    tiny m;
    if (!tiny_init(&m, c->layer_dev, c->kv_dev)) {
        CHECKF(false, "tiny_init: %s", cllm_last_error());
        tiny_free(&m);
        return;
    }
    cllm_device *test = cllm_test_device();
    cllm_backend *bes[2] = {NULL, NULL};
    int nb = 0;
    if (c->with_test) CHECK(cllm_device_init_backend(test, NULL, &bes[nb++]) == CLLM_OK);
    CHECK(cllm_backend_cpu_new(2, &bes[nb++]) == CLLM_OK);
    cllm_sched_params sp = cllm_sched_default_params();
    sp.n_copies = c->n_copies ? c->n_copies : 1;
    cllm_sched *s = NULL;
    CHECK(cllm_sched_new(bes, nb, &sp, &s) == CLLM_OK);
    /* worst cases: a full batch at a full context, one token at a full context */
    const int64_t worst[2][2] = {{8, NCTX - 8}, {1, NCTX - 1}};
    for (int i = 0; i < 2; i++) {
        step_graph sg;
        build(&sg, &m, worst[i][0], worst[i][1], c->unfused);
        CHECKF(cllm_sched_reserve(s, sg.g) == CLLM_OK, "reserve: %s", cllm_last_error());
        build_free(&sg);
    }
    size_t test_before = cllm_device_allocated(test, CLLM_MEM_COMPUTE);
    CHECKF(cllm_sched_alloc_buffers(s) == CLLM_OK, "alloc: %s", cllm_last_error());
    for (int b = 0; b < nb; b++) {
        CHECK(cllm_sched_compute_planned(s, b) == cllm_sched_compute_allocated(s, b));
        CHECK(cllm_sched_workspace_planned(s, b) == cllm_sched_workspace_allocated(s, b));
    }
    if (c->with_test) {
        CHECK(cllm_device_allocated(test, CLLM_MEM_COMPUTE) - test_before ==
              cllm_sched_compute_planned(s, 0));
        CHECK(cllm_device_allocated(test, CLLM_MEM_WORKSPACE) ==
              cllm_sched_workspace_planned(s, 0));
    }
    const int64_t steps[2][2] = {{5, 0}, {1, 5}};
    out->ok = true;
    for (int i = 0; i < 2; i++) {
        step_graph sg;
        build(&sg, &m, steps[i][0], steps[i][1], c->unfused);
        cllm_status st = cllm_sched_alloc_graph(s, sg.g);
        CHECKF(st == CLLM_OK, "alloc_graph: %s", cllm_last_error());
        if (st == CLLM_OK) {
            set_inputs(&sg, steps[i][0], steps[i][1]);
            st = cllm_sched_graph_compute(s, sg.g);
            CHECKF(st == CLLM_OK, "compute: %s", cllm_last_error());
        }
        out->ok = out->ok && st == CLLM_OK;
        if (st == CLLM_OK) cllm_tensor_get_all(sg.io.logits, out->logits[i]);
        out->n_splits[i] = cllm_sched_n_splits(s);
        out->n_copies[i] = cllm_sched_n_copies(s);
        for (int k = 0; k < sg.g->n_nodes; k++) {
            const cllm_tensor *t = sg.g->nodes[k];
            const int b = cllm_sched_node_backend(s, t);
            if (c->with_test && t->op == CLLM_OP_MUL_MAT &&
                strncmp(t->src[0]->name, "blk.", 4) == 0)
                out->mul_mat_on_test += b == 0;
            if (t->op == CLLM_OP_ROPE) {
                out->rope_total++;
                out->rope_on_test += c->with_test && b == 0;
            }
        }
        build_free(&sg);
    }
    cllm_sched_free(s);
    for (int b = 0; b < nb; b++) cllm_backend_free(bes[b]);
    tiny_free(&m);
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

static void test_llama_split(bool unfused) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = 64 << 20;
    cfg.ops_disabled = ((uint64_t)1 << CLLM_OP_ROPE) | ((uint64_t)1 << CLLM_OP_SOFT_MAX);
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);

    static run_result ref, r;
    run_cfg c = {.layer_dev = {0, 0}, .kv_dev = {0, 0}, .unfused = unfused};
    run(&c, &ref); /* the CPU alone */
    CHECK(ref.ok && ref.n_splits[0] == 1 && ref.n_copies[0] == 0);

    /* every layer on the test device: its matmuls run there, rope (and
     * soft_max) fall back to the CPU, with copies both ways */
    c = (run_cfg){.layer_dev = {1, 1}, .kv_dev = {1, 1}, .unfused = unfused, .with_test = true};
    run(&c, &r);
    CHECK(r.ok);
    for (int i = 0; i < 2; i++) {
        const float d = max_diff(ref.logits[i], r.logits[i], V);
        CHECKF(d < 1e-4f, "unfused %d step %d: logits differ by %g", unfused, i, (double)d);
    }
    CHECKF(r.mul_mat_on_test == 2 * 7 * L, "%d matmuls on the test device", r.mul_mat_on_test);
    CHECK(r.rope_on_test == 0 && r.rope_total == 2 * 2 * L);
    /* per layer: test (norm, q, k, v) | cpu (rope) | test (...) ; output on the cpu */
    CHECKF(r.n_splits[0] >= 2 * L + 1 && r.n_copies[0] >= 2 * L, "%d splits, %d copies",
           r.n_splits[0], r.n_copies[0]);

    /* layer 0 on the test device, layer 1 on the CPU */
    c = (run_cfg){.layer_dev = {1, 0}, .kv_dev = {1, 0}, .unfused = unfused, .with_test = true};
    run(&c, &r);
    CHECK(r.ok);
    for (int i = 0; i < 2; i++) CHECK(max_diff(ref.logits[i], r.logits[i], V) < 1e-4f);
    CHECK(r.mul_mat_on_test == 2 * 7);

    /* weights on the CPU: their consumers stay there */
    c = (run_cfg){.layer_dev = {0, 0}, .kv_dev = {0, 0}, .unfused = unfused, .with_test = true};
    run(&c, &r);
    CHECK(r.ok && r.mul_mat_on_test == 0);
    for (int i = 0; i < 2; i++) CHECK(max_diff(ref.logits[i], r.logits[i], V) < 1e-4f);

    /* two pipeline copies: same results */
    c = (run_cfg){.layer_dev = {1, 1},
                  .kv_dev = {1, 1},
                  .unfused = unfused,
                  .with_test = true,
                  .n_copies = 2};
    run(&c, &r);
    CHECK(r.ok);
    for (int i = 0; i < 2; i++) CHECK(max_diff(ref.logits[i], r.logits[i], V) < 1e-4f);
    cllm_test_device_disable();
}

/* A small graph without weights: the test device takes everything it can;
 * the expected splits and copies; verbose output. */
static void test_small_graph(void) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.ops_disabled = (uint64_t)1 << CLLM_OP_SOFT_MAX;
    cfg.workspace = 1000;
    cllm_device *test = NULL;
    CHECK(cllm_test_device_enable(&cfg, &test) == CLLM_OK);
    cllm_backend *bes[2];
    CHECK(cllm_device_init_backend(test, NULL, &bes[0]) == CLLM_OK);
    CHECK(cllm_backend_cpu_new(1, &bes[1]) == CLLM_OK);
    cllm_sched *s = NULL;
    cllm_sched_params sp = cllm_sched_default_params();
    sp.verbose = false;
    CHECK(cllm_sched_new(bes, 2, &sp, &s) == CLLM_OK);

    float xs[32], ref[32], got[32];
    for (int i = 0; i < 32; i++) xs[i] = sinf((float)i);
    /* pass 0: the CPU alone (reference); 1: worst case for s; 2: run on s */
    for (int pass = 0; pass < 3; pass++) {
        cllm_context *ctx = cllm_context_new(32);
        cllm_graph *g = cllm_graph_new(32);
        cllm_tensor *x = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 8, 4);
        cllm_tensor_set_input(x);
        cllm_tensor *a = cllm_scale(ctx, x, 2.0f);            /* test */
        cllm_tensor *b = cllm_soft_max(ctx, a, NULL, 0.5f);   /* cpu */
        cllm_tensor *c = cllm_add(ctx, cllm_silu(ctx, b), a); /* cpu: reads a */
        cllm_tensor_set_output(c);
        cllm_graph_build(g, c);
        if (pass == 0) {
            cllm_backend *cpu = bes[1];
            cllm_sched *cs = NULL;
            CHECK(cllm_sched_new(&cpu, 1, NULL, &cs) == CLLM_OK);
            CHECK(cllm_sched_reserve(cs, g) == CLLM_OK && cllm_sched_alloc_buffers(cs) == CLLM_OK);
            CHECK(cllm_sched_alloc_graph(cs, g) == CLLM_OK);
            cllm_tensor_set_all(x, xs);
            CHECK(cllm_sched_graph_compute(cs, g) == CLLM_OK);
            cllm_tensor_get_all(c, ref);
            CHECK(cllm_sched_n_splits(cs) == 1 && cllm_sched_n_copies(cs) == 0);
            cllm_sched_free(cs);
        } else if (pass == 1) {
            CHECK(cllm_sched_reserve(s, g) == CLLM_OK);
            CHECK(cllm_sched_alloc_buffers(s) == CLLM_OK);
            CHECK(cllm_sched_workspace_planned(s, 0) >= 1000);
            CHECK(cllm_sched_workspace_allocated(s, 0) == cllm_sched_workspace_planned(s, 0));
            CHECK(cllm_device_allocated(test, CLLM_MEM_WORKSPACE) ==
                  cllm_sched_workspace_planned(s, 0));
            /* the reserve restored g's sources: it can be scheduled again */
            CHECK(cllm_sched_alloc_graph(s, g) == CLLM_OK);
            CHECK(cllm_sched_graph_compute(s, g) == CLLM_OK);
        } else {
            CHECK(cllm_sched_alloc_graph(s, g) == CLLM_OK);
            cllm_tensor_set_all(x, xs);
            CHECK(cllm_sched_graph_compute(s, g) == CLLM_OK);
            cllm_tensor_get_all(c, got);
            CHECK(max_diff(ref, got, 32) < 1e-6f);
            /* soft_max falls back to the cpu, and what follows stays there
             * (the cpu supports it: no needless split back) */
            CHECK(cllm_sched_n_splits(s) == 2);
            if (cllm_sched_n_splits(s) == 2) {
                CHECK(cllm_sched_get_split(s, 0).backend == 0);
                CHECK(cllm_sched_get_split(s, 1).backend == 1);
                CHECK(cllm_sched_get_split(s, 0).n_inputs == 0);
                CHECK(cllm_sched_get_split(s, 1).n_inputs == 1); /* a, once for two readers */
                CHECK(cllm_sched_get_split(s, 1).n_nodes == 3);
            }
            CHECK(cllm_sched_n_copies(s) == 1 && cllm_sched_copy_bytes(s) == 32 * 4);
            CHECK(cllm_sched_node_backend(s, a) == 0 && cllm_sched_node_backend(s, b) == 1);
            CHECK(cllm_sched_node_backend(s, c) == 1);
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            cllm_sched_print(s, f);
            fclose(f);
            CHECKF(text && strstr(text, "2 splits") && strstr(text, "test0 -> cpu"), "%s", text);
            free(text);
        }
        cllm_graph_free(g);
        cllm_context_free(ctx);
    }
    cllm_sched_free(s);
    CHECK(cllm_device_allocated(test, CLLM_MEM_COMPUTE) == 0);
    cllm_backend_free(bes[0]);
    cllm_backend_free(bes[1]);
    CHECK(cllm_device_allocated(test, CLLM_MEM_WORKSPACE) == 0);
    cllm_test_device_disable();
}

/* Failures: an op nobody supports, a device allocation that fails. */
static void test_failures(void) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.ops_disabled = (uint64_t)1 << CLLM_OP_SILU;
    cllm_device *test = NULL;
    CHECK(cllm_test_device_enable(&cfg, &test) == CLLM_OK);
    cllm_backend *be = NULL;
    CHECK(cllm_device_init_backend(test, NULL, &be) == CLLM_OK);
    cllm_context *ctx = cllm_context_new(16);
    cllm_graph *g = cllm_graph_new(16);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 1000);
    cllm_tensor *y = cllm_scale(ctx, cllm_silu(ctx, x), 3.0f);
    cllm_graph_build(g, y);
    cllm_sched *s = NULL;
    CHECK(cllm_sched_new(&be, 1, NULL, &s) == CLLM_OK);
    cllm_log_set(quiet, NULL);
    CHECK(cllm_sched_reserve(s, g) == CLLM_ERR_UNSUPPORTED);
    CHECK(strstr(cllm_last_error(), "silu") != NULL);
    cllm_sched_free(s);

    /* the compute buffer's allocation fails: nothing stays allocated */
    cfg.ops_disabled = 0;
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);
    CHECK(cllm_sched_new(&be, 1, NULL, &s) == CLLM_OK);
    CHECK(cllm_sched_reserve(s, g) == CLLM_OK);
    cllm_test_device_fail_alloc(1);
    CHECK(cllm_sched_alloc_buffers(s) == CLLM_ERR_DEVICE_MEMORY);
    CHECK(cllm_device_allocated(test, CLLM_MEM_COMPUTE) == 0);
    CHECK(cllm_sched_alloc_buffers(s) == CLLM_OK); /* and it can be retried */
    CHECK(cllm_sched_compute_allocated(s, 0) == cllm_sched_compute_planned(s, 0));
    /* a graph larger than reserved */
    cllm_context *ctx2 = cllm_context_new(16);
    cllm_graph *g2 = cllm_graph_new(16);
    cllm_tensor *x2 = cllm_tensor_new_1d(ctx2, CLLM_TYPE_F32, 100000);
    cllm_graph_build(g2, cllm_scale(ctx2, cllm_silu(ctx2, x2), 3.0f));
    CHECK(cllm_sched_alloc_graph(s, g2) == CLLM_ERR_TOO_LARGE);
    CHECK(cllm_sched_graph_compute(s, g2) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    /* bad parameters */
    cllm_sched *bad = (cllm_sched *)0x1;
    cllm_sched_params p = cllm_sched_default_params();
    p.n_copies = 0;
    cllm_log_set(quiet, NULL);
    CHECK(cllm_sched_new(&be, 1, &p, &bad) == CLLM_ERR_INVALID_ARG && bad == (cllm_sched *)0x1);
    CHECK(cllm_sched_new(&be, 0, NULL, &bad) == CLLM_ERR_INVALID_ARG);
    cllm_log_set(NULL, NULL);
    cllm_sched_free(s);
    cllm_graph_free(g2);
    cllm_context_free(ctx2);
    cllm_graph_free(g);
    cllm_context_free(ctx);
    cllm_backend_free(be);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK(cllm_device_allocated(test, k) == 0);
    cllm_test_device_disable();
}

int main(void) {
    unsetenv("CLLM_SCHED_VERBOSE");
    test_small_graph();
    test_llama_split(false);
    test_llama_split(true);
    test_failures();
    return check_summary("test_sched");
}
