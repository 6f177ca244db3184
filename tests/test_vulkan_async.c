/*
 * The Vulkan backend's submission (docs/vulkan.md: "Submission"): graphs
 * recorded in chunks, and recordings replayed while their nodes stay the
 * same, with the validation layer on and its synchronization validation
 * too (every error fails the test).
 *  - moving views: a graph whose KV-like write moves by a row per compute
 *    (recorded again each time) and whose static node's source moves once
 *    (the replay cannot express it: recorded anew), against host maths;
 *  - stories260K and TinyLLama-v0 all on the device, token by token with
 *    two-token batches between (another graph in the same node array):
 *    the logits bit for bit those of a session that records every compute
 *    (CLLM_VULKAN_REPLAY=0) and of one that builds every graph anew, and
 *    most computes replayed;
 *  - asynchronous transfers (docs/vulkan.md, "Submission"): stories260K
 *    and TinyLLama-v0 split between the device and the CPU, token by token
 *    with two-token batches between: the logits bit for bit those of a
 *    session whose device waits for every compute and copies synchronously
 *    (CLLM_VULKAN_ASYNC=0), and copies queued behind work not waited for
 *    (the backends count them), so that the test fails if every copy waits;
 *  - the scheduler on a graph whose CPU split starts with nodes that do not
 *    need the device's result: they run while the device computes, the
 *    download is waited for before the first node that reads it; against
 *    host maths and bit for bit against CLLM_VULKAN_ASYNC=0.
 * Skipped (77) without a Vulkan device.
 */
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/session.h"
#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* errors logged by the backend and the validation layer, every hazard
 * that synchronization validation reports included (within a command
 * buffer, between command buffers and between submissions) */
static int g_errors;

/* what the backends said when freed: graphs recorded and replayed */
static unsigned long long g_recorded, g_replayed, g_nodes_recorded, g_nodes;

/* what they said of their transfers: queued, and queued behind work not
 * waited for */
static unsigned long long g_up, g_down, g_up_behind, g_down_behind;

static void on_transfers(const char *msg) {
    unsigned long long up, down, upb, downb;
    const char *p = strstr(msg, ": ");
    if (p && sscanf(p, ": %llu uploads and %llu downloads queued, %llu and %llu of them behind",
                    &up, &down, &upb, &downb) == 4) {
        g_up += up;
        g_down += down;
        g_up_behind += upb;
        g_down_behind += downb;
    }
}

static void on_log(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level == CLLM_LOG_ERROR &&
        (!strncmp(msg, "vulkan validation", 17) || !strncmp(msg, "vulkan", 6))) {
        g_errors++;
        fprintf(stderr, "error: %s\n", msg);
    }
    unsigned long long rec, rep, nr, n;
    const char *p = strstr(msg, ": ");
    if (level == CLLM_LOG_DEBUG && !strncmp(msg, "vulkan", 6) && p &&
        sscanf(p, ": %llu graphs recorded, %llu replayed; %llu of %llu nodes recorded", &rec, &rep,
               &nr, &n) == 4) {
        g_recorded += rec;
        g_replayed += rep;
        g_nodes_recorded += nr;
        g_nodes += n;
    }
    if (level == CLLM_LOG_DEBUG && !strncmp(msg, "vulkan", 6)) on_transfers(msg);
}

static void counts_reset(void) {
    g_recorded = g_replayed = g_nodes_recorded = g_nodes = 0;
    g_up = g_down = g_up_behind = g_down_behind = 0;
}

static cllm_device *g_vk;

/* ---- moving views ------------------------------------------------------ */

enum { ROW = 40, ROWS = 9, STEPS = 8, MOVE_AT = 5 };

static float val(int step, int i) { return (float)(step * 100 + i) * 0.25f - 3.0f; }

/*
 * cache [ROW, ROWS] (zeros), x [ROW] and src [ROW, 2] set from the host;
 * per step p: cpy(x, cache row p) (dynamic), twice the whole cache after
 * it, and three times row q of src, q = 0 before step MOVE_AT and 1 from
 * there (a node that did not change before: the replay cannot express it).
 */
static void test_moving_views(void) {
    cllm_context *ctx = cllm_context_new(16);
    cllm_tensor *cache = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, ROW, ROWS);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, ROW);
    cllm_tensor *src = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, ROW, 2);
    const size_t row = (size_t)ROW * sizeof(float);
    cllm_tensor *dst = cllm_view_1d(ctx, cache, ROW, 0);
    cllm_tensor *wr = cllm_cpy(ctx, x, dst);
    cllm_tensor *twice = cllm_scale(ctx, cache, 2.0f);
    cllm_tensor *sv = cllm_view_1d(ctx, src, ROW, 0);
    cllm_tensor *thrice = cllm_scale(ctx, sv, 3.0f);
    cllm_buffer *buf = NULL;
    cllm_backend *be = NULL;
    cllm_graph *g = cllm_graph_new(16);
    if (cllm_layout_alloc(ctx, cllm_device_buffer_type(g_vk), CLLM_MEM_COMPUTE, &buf) != CLLM_OK ||
        cllm_device_init_backend(g_vk, NULL, &be) != CLLM_OK) {
        CHECKF(false, "%s", cllm_last_error());
        goto done;
    }
    counts_reset();
    float host[ROWS][ROW] = {{0}}, in[2][ROW], out[ROWS * ROW];
    cllm_buffer_clear(buf, 0);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < ROW; i++) in[r][i] = val(-1 - r, i);
    }
    cllm_tensor_set_all(src, in);
    cllm_graph_build(g, wr);
    cllm_graph_build(g, twice);
    cllm_graph_build(g, thrice);
    for (int p = 0; p < STEPS; p++) {
        const int at = p % ROWS, q = p >= MOVE_AT;
        dst->view_offs = wr->view_offs = (size_t)at * row;
        cllm_tensor_init_view(dst);
        cllm_tensor_init_view(wr);
        sv->view_offs = (size_t)q * row;
        cllm_tensor_init_view(sv);
        for (int i = 0; i < ROW; i++) host[at][i] = val(p, i);
        cllm_tensor_set_all(x, host[at]);
        const cllm_status st = cllm_backend_graph_compute(be, g);
        CHECKF(st == CLLM_OK, "step %d: %s", p, cllm_last_error());
        if (st != CLLM_OK) break;
        int bad = 0;
        cllm_tensor_get_all(cache, out);
        bad += memcmp(out, host, sizeof(host)) != 0;
        cllm_tensor_get_all(twice, out);
        for (int i = 0; i < ROWS * ROW; i++) bad += out[i] != 2.0f * host[i / ROW][i % ROW];
        cllm_tensor_get_all(thrice, out);
        for (int i = 0; i < ROW; i++) bad += out[i] != 3.0f * in[q][i];
        CHECKF(bad == 0, "step %d: %d values differ from the host's", p, bad);
    }
    cllm_backend_free(be);
    be = NULL;
    /* 0: fresh; 1: the write changed (dynamic); then replays until the
     * static node moves (recorded) and after */
    fprintf(stderr, "moving views: %llu computes recorded, %llu replayed\n", g_recorded,
            g_replayed);
    CHECKF(g_recorded == 3 && g_replayed == STEPS - 3, "recorded %llu, replayed %llu", g_recorded,
           g_replayed);
done:
    cllm_graph_free(g);
    cllm_backend_free(be);
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
}

/* ---- the scheduler: a download waited for at its first reader ----------- */

enum { BK = 96, BM = 40, BRUNS = 3 };

/*
 * Weights Wd [BK, BM], Wd2 [BM, BM] on the device, Wc [BK, BM] and s [BM]
 * on the CPU; x [BK] an input, twice (xd read by the device, xh by the
 * CPU: no copy). a = Wd xd (device, first in the graph); b = Wc xh,
 * b2 = b * s, c = b2 + a, c2 = c * s (CPU: b and b2 before the first
 * reader of a); out = Wd2 c2 (device). Splits: device, CPU, device.
 * res[BRUNS][BM] (out) and c[BRUNS][BM] of BRUNS computes with other
 * inputs.
 */
static void branches_run(bool async, float res[BRUNS][BM], float cval[BRUNS][BM], const float *wd,
                         const float *wd2, const float *wc, const float *sv) {
    if (!async) setenv("CLLM_VULKAN_ASYNC", "0", 1);
    cllm_backend *bes[2] = {NULL, NULL};
    const cllm_status sb = cllm_device_init_backend(g_vk, NULL, &bes[0]);
    unsetenv("CLLM_VULKAN_ASYNC");
    CHECK(sb == CLLM_OK && cllm_backend_cpu_new(1, &bes[1]) == CLLM_OK);
    cllm_context *wv = cllm_context_new(4), *wcpu = cllm_context_new(4);
    cllm_tensor *Wd = cllm_tensor_new_2d(wv, CLLM_TYPE_F32, BK, BM);
    cllm_tensor *Wd2 = cllm_tensor_new_2d(wv, CLLM_TYPE_F32, BM, BM);
    cllm_tensor *Wc = cllm_tensor_new_2d(wcpu, CLLM_TYPE_F32, BK, BM);
    cllm_tensor *S = cllm_tensor_new_1d(wcpu, CLLM_TYPE_F32, BM);
    cllm_buffer *bv = NULL, *bc = NULL;
    cllm_sched *s = NULL;
    CHECK(cllm_layout_alloc(wv, cllm_device_buffer_type(g_vk), CLLM_MEM_WEIGHTS, &bv) == CLLM_OK);
    CHECK(cllm_layout_alloc(wcpu, cllm_device_buffer_type(cllm_cpu_device()), CLLM_MEM_WEIGHTS,
                            &bc) == CLLM_OK);
    if (!bv || !bc || !bes[0] || !bes[1] || cllm_sched_new(bes, 2, NULL, &s) != CLLM_OK) {
        CHECKF(false, "branches: %s", cllm_last_error());
        goto done;
    }
    cllm_tensor_set_all(Wd, wd);
    cllm_tensor_set_all(Wd2, wd2);
    cllm_tensor_set_all(Wc, wc);
    cllm_tensor_set_all(S, sv);
    for (int pass = 0; pass <= BRUNS; pass++) {
        /* pass 0: reserve; then one compute per graph, each built anew */
        cllm_context *ctx = cllm_context_new(16);
        cllm_graph *g = cllm_graph_new(16);
        cllm_tensor *xd = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, BK);
        cllm_tensor *xh = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, BK);
        cllm_tensor_set_input(xd);
        cllm_tensor_set_input(xh);
        cllm_tensor *a = cllm_mul_mat(ctx, Wd, xd);
        cllm_tensor *b2 = cllm_mul(ctx, cllm_mul_mat(ctx, Wc, xh), S);
        cllm_tensor *c = cllm_add(ctx, b2, a);
        cllm_tensor *out = cllm_mul_mat(ctx, Wd2, cllm_mul(ctx, c, S));
        cllm_tensor_set_output(c);
        cllm_tensor_set_output(out);
        cllm_graph_build(g, a); /* the device's node first */
        cllm_graph_build(g, out);
        cllm_status st = CLLM_OK;
        if (pass == 0) {
            st = cllm_sched_reserve(s, g);
            if (st == CLLM_OK) st = cllm_sched_alloc_buffers(s);
        } else {
            st = cllm_sched_alloc_graph(s, g);
            float xs[BK];
            for (int k = 0; k < BK; k++) xs[k] = (float)((k * 7 + pass * 3) % 11) * 0.125f - 0.5f;
            if (st == CLLM_OK) {
                cllm_tensor_set_all(xd, xs);
                cllm_tensor_set_all(xh, xs);
            }
            if (st == CLLM_OK) st = cllm_sched_graph_compute(s, g);
            if (st == CLLM_OK) {
                cllm_tensor_get_all(out, res[pass - 1]);
                cllm_tensor_get_all(c, cval[pass - 1]);
            }
            const int n = cllm_sched_n_splits(s);
            CHECKF(n == 3 && cllm_sched_get_split(s, 0).backend == 0 &&
                       cllm_sched_get_split(s, 1).backend == 1 &&
                       cllm_sched_get_split(s, 2).backend == 0,
                   "branches: %d splits, not device / CPU / device", n);
        }
        CHECKF(st == CLLM_OK, "branches: pass %d: %s", pass, cllm_last_error());
        cllm_graph_free(g);
        cllm_context_free(ctx);
        if (st != CLLM_OK) break;
    }
done:
    cllm_sched_free(s);
    cllm_buffer_free(bv);
    cllm_buffer_free(bc);
    cllm_context_free(wv);
    cllm_context_free(wcpu);
    cllm_backend_free(bes[0]);
    cllm_backend_free(bes[1]);
}

static void test_branches(void) {
    static float wd[BM * BK], wd2[BM * BM], wc[BM * BK], sv[BM];
    for (int i = 0; i < BM * BK; i++) {
        wd[i] = (float)((i * 13) % 17) * 0.0625f - 0.5f;
        wc[i] = (float)((i * 5) % 19) * 0.0625f - 0.5f;
    }
    for (int i = 0; i < BM * BM; i++) wd2[i] = (float)((i * 3) % 7) * 0.125f - 0.375f;
    for (int i = 0; i < BM; i++) sv[i] = 0.5f + 0.01f * (float)i;
    static float out[2][BRUNS][BM], cval[2][BRUNS][BM];
    counts_reset();
    branches_run(true, out[0], cval[0], wd, wd2, wc, sv);
    const unsigned long long down_behind = g_down_behind;
    branches_run(false, out[1], cval[1], wd, wd2, wc, sv);
    CHECKF(memcmp(out[0], out[1], sizeof(out[0])) == 0 &&
               memcmp(cval[0], cval[1], sizeof(cval[0])) == 0,
           "branches: asynchronous and synchronous results differ");
    /* c against host maths (every product of the graph in F32) */
    double worst = 0;
    for (int r = 0; r < BRUNS; r++) {
        float xs[BK];
        for (int k = 0; k < BK; k++) xs[k] = (float)((k * 7 + (r + 1) * 3) % 11) * 0.125f - 0.5f;
        for (int m = 0; m < BM; m++) {
            double a = 0, b = 0;
            for (int k = 0; k < BK; k++) {
                a += (double)wd[m * BK + k] * xs[k];
                b += (double)wc[m * BK + k] * xs[k];
            }
            const double want = b * sv[m] + a;
            worst = CLLM_MAX(worst, fabs(want - cval[0][r][m]));
        }
    }
    fprintf(stderr,
            "branches: device / CPU / device, %d computes: %llu downloads behind the device's "
            "compute; c within %.2g of host maths\n",
            BRUNS, down_behind, worst);
    CHECKF(worst < 1e-3, "branches: c differs from host maths by %g", worst);
    CHECKF(down_behind >= BRUNS, "branches: %llu of %d downloads queued behind the compute",
           down_behind, BRUNS);
}

/* ---- models: replayed against recorded --------------------------------- */

static const char k_text[] = "Once upon a time, there was a little girl named Lily. She loved to "
                             "play outside in the park with her friends.";

typedef struct run {
    cllm_model *m;
    cllm_session *s;
} run;

static bool run_open(run *r, const char *path, const cllm_plan *plan) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 32;
    sp.n_threads = 2;
    cllm_status st = cllm_model_load(path, &mp, &r->m);
    if (st == CLLM_OK) st = cllm_session_new(r->m, &sp, &r->s);
    CHECKF(st == CLLM_OK, "%s: %s", path, cllm_last_error());
    return st == CLLM_OK;
}

static void run_close(run *r) {
    cllm_session_free(r->s);
    cllm_model_free(r->m);
    r->s = NULL;
    r->m = NULL;
}

/* The plan with `budget` bytes of the device, or NULL (checked). */
static cllm_plan *plan_budget(const char *path, size_t budget) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 128;
    fp.n_batch = 32;
    fp.n_threads = 2;
    fp.use_mmap = false;
    char mem[96];
    snprintf(mem, sizeof(mem), "%s=%zu", cllm_device_name(g_vk), budget);
    CHECK(cllm_plan_parse_mem(&fp, mem) == CLLM_OK);
    cllm_plan *plan = NULL;
    const cllm_status st = cllm_plan_file(path, &fp, &plan);
    CHECKF(st == CLLM_OK, "plan %s: %s", mem, cllm_last_error());
    return st == CLLM_OK ? plan : NULL;
}

/* Every layer on the device. */
static cllm_plan *plan_all(const char *path) { return plan_budget(path, (size_t)2 << 30); }

enum { VARIANTS = 3 }; /* replayed, recorded every time, graphs built every time */

/* The first n_tokens tokens of the text (all: 0), through n_variants of
 * the sessions above. */
static void test_model(const char *name, const char *path, size_t n_tokens, int n_variants) {
    cllm_plan *plan = plan_all(path);
    if (!plan) return;
    run runs[VARIANTS] = {{0}};
    bool ok = true;
    counts_reset();
    for (int k = 0; k < n_variants && ok; k++) {
        /* read when the session makes its backends */
        if (k == 1) setenv("CLLM_VULKAN_REPLAY", "0", 1);
        ok = run_open(&runs[k], path, plan);
        unsetenv("CLLM_VULKAN_REPLAY");
    }
    if (ok && n_variants > 2) cllm_session_set_graph_reuse(runs[2].s, false);
    int32_t ids[128];
    size_t n = 0;
    if (ok) {
        CHECK(cllm_tokenize(runs[0].m, k_text, strlen(k_text), true, false, ids, 128, &n) ==
              CLLM_OK);
        if (n_tokens && n > n_tokens) n = n_tokens;
    }
    const int64_t n_vocab = ok ? cllm_session_n_vocab(runs[0].s) : 0;
    int steps = 0, differ[VARIANTS] = {0};
    for (size_t i = 0; ok && i + 1 < n;) {
        /* a two-token batch now and then: another graph, then back */
        const size_t len = i % 9 == 4 && i + 2 < n ? 2 : 1;
        for (int k = 0; k < n_variants && ok; k++) {
            const cllm_status st = cllm_session_decode(runs[k].s, &ids[i], len);
            CHECKF(st == CLLM_OK, "%s: step %d: %s", name, steps, cllm_last_error());
            ok = st == CLLM_OK;
        }
        for (int k = 1; k < n_variants && ok; k++) {
            differ[k] += memcmp(cllm_session_logits(runs[0].s), cllm_session_logits(runs[k].s),
                                (size_t)n_vocab * sizeof(float)) != 0;
        }
        i += len;
        steps++;
    }
    for (int k = 0; k < VARIANTS; k++) run_close(&runs[k]);
    fprintf(stderr,
            "%-24s %d steps: logits of replayed and recorded graphs differ at %d steps, of "
            "graphs built anew at %d%s; %llu computes recorded, %llu replayed, %llu of %llu "
            "nodes recorded\n",
            name, steps, differ[1], differ[2], n_variants > 2 ? "" : " (not run)", g_recorded,
            g_replayed, g_nodes_recorded, g_nodes);
    CHECK_EQ_INT(differ[1], 0);
    CHECK_EQ_INT(differ[2], 0);
    /* the replaying session replays all but the first two computes of each
     * graph shape; the others record every one */
    CHECKF(ok && g_replayed >= (unsigned long long)steps / 2, "%s: %llu of %llu computes replayed",
           name, g_replayed, g_replayed + g_recorded);
    cllm_plan_free(plan);
}

/* ---- models split: asynchronous against synchronous --------------------- */

static size_t plan_total(const cllm_plan_device *d) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += d->bytes[k];
    return n;
}

static int vk_index(const cllm_plan *plan) {
    for (int d = 0; d < plan->n_devices; d++) {
        if (plan->devices[d].dev == g_vk) return d;
    }
    return -1;
}

/* Some layers on the device, not all: the budget of every layer halved
 * until the plan splits them. */
static cllm_plan *plan_split(const char *name, const char *path) {
    cllm_plan *plan = plan_all(path);
    const int vk = plan ? vk_index(plan) : -1;
    if (vk < 0) {
        CHECKF(false, "%s: no plan on %s", name, cllm_device_name(g_vk));
        cllm_plan_free(plan);
        return NULL;
    }
    size_t budget = plan_total(&plan->devices[vk]);
    int on = plan->hp.n_layer;
    for (int i = 0; i < 8 && on == plan->hp.n_layer; i++) {
        budget /= 2;
        cllm_plan_free(plan);
        plan = plan_budget(path, budget);
        if (!plan) return NULL;
        const int v = vk_index(plan);
        on = v >= 0 ? plan->devices[v].n_layers : 0;
    }
    CHECKF(on > 0 && on < plan->hp.n_layer, "%s: %d of %d layers on %s", name, on,
           (int)plan->hp.n_layer, cllm_device_name(g_vk));
    fprintf(stderr, "%-24s %d of %d layers on %s (%zu bytes)\n", name, on, (int)plan->hp.n_layer,
            cllm_device_name(g_vk), budget);
    if (on > 0 && on < plan->hp.n_layer) return plan;
    cllm_plan_free(plan);
    return NULL;
}

/* The first n_tokens tokens of the text through a session with
 * asynchronous transfers and one without, split between the device and
 * the CPU. */
static void test_split(const char *name, const char *path, size_t n_tokens) {
    cllm_plan *plan = plan_split(name, path);
    if (!plan) return;
    run runs[2] = {{0}};
    bool ok = true;
    counts_reset();
    for (int k = 0; k < 2 && ok; k++) {
        /* read when the session makes its backends */
        if (k == 1) setenv("CLLM_VULKAN_ASYNC", "0", 1);
        ok = run_open(&runs[k], path, plan);
        unsetenv("CLLM_VULKAN_ASYNC");
    }
    int32_t ids[128];
    size_t n = 0;
    if (ok) {
        CHECK(cllm_tokenize(runs[0].m, k_text, strlen(k_text), true, false, ids, 128, &n) ==
              CLLM_OK);
        if (n > n_tokens) n = n_tokens;
    }
    const int64_t n_vocab = ok ? cllm_session_n_vocab(runs[0].s) : 0;
    int steps = 0, differ = 0;
    for (size_t i = 0; ok && i + 1 < n;) {
        const size_t len = i % 9 == 4 && i + 2 < n ? 2 : 1;
        for (int k = 0; k < 2 && ok; k++) {
            const cllm_status st = cllm_session_decode(runs[k].s, &ids[i], len);
            CHECKF(st == CLLM_OK, "%s: step %d: %s", name, steps, cllm_last_error());
            ok = st == CLLM_OK;
        }
        if (ok) {
            differ += memcmp(cllm_session_logits(runs[0].s), cllm_session_logits(runs[1].s),
                             (size_t)n_vocab * sizeof(float)) != 0;
        }
        i += len;
        steps++;
    }
    for (int k = 0; k < 2; k++) run_close(&runs[k]);
    fprintf(stderr,
            "%-24s %d steps split: logits of asynchronous and synchronous transfers differ at %d "
            "steps; %llu uploads and %llu downloads queued, %llu and %llu behind work not waited "
            "for\n",
            name, steps, differ, g_up, g_down, g_up_behind, g_down_behind);
    CHECK_EQ_INT(differ, 0);
    /* the synchronous session queues nothing: every queued copy is the
     * asynchronous one's; a download of the device's split waits only
     * when the CPU reads it, an upload through the staging buffer is
     * queued behind the ones before */
    CHECKF(ok && steps > 0 && g_up + g_down > 0, "%s: no copy queued", name);
    CHECKF(ok && g_up_behind + g_down_behind > 0,
           "%s: every copy waited for the device's work before it", name);
    cllm_plan_free(plan);
}

static void test_splits(void) {
    const bool staged = getenv("CLLM_VULKAN_STAGING") != NULL;
    static const struct {
        const char *file;
        size_t n_tokens;
    } models[] = {{"stories260K.gguf", 16}, {"TinyLLama-v0.Q4_0.gguf", 8}};
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        const char *const want[] = {models[i].file, NULL};
        if ((staged && i > 0) || !refs_have(want)) continue;
        char path[4096];
        refs_model_path(path, sizeof(path), models[i].file);
        test_split(models[i].file, path, models[i].n_tokens);
    }
}

static void test_models(void) {
    /* TinyLLama-v0 takes about 2 s a token on lavapipe: a few tokens, and
     * not again with staged transfers (stories260K covers those);
     * stories260K's first 16 tokens hold two of the two-token batches
     * (each a graph recorded anew, and the decode graph's recording
     * replayed again after it), TinyLLama's first 12 one, with enough
     * replays after it (the decode graph is recorded twice again) */
    const bool staged = getenv("CLLM_VULKAN_STAGING") != NULL;
    static const struct {
        const char *file;
        size_t n_tokens;
        int n_variants;
    } models[] = {{"stories260K.gguf", 16, VARIANTS}, {"TinyLLama-v0.Q4_0.gguf", 12, 2}};
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        const char *const want[] = {models[i].file, NULL};
        if ((staged && i > 0) || !refs_have(want)) continue;
        char path[4096];
        refs_model_path(path, sizeof(path), models[i].file);
        test_model(models[i].file, path, models[i].n_tokens, models[i].n_variants);
    }
}

int main(void) {
    /* the validation layer with synchronization validation (across
     * submissions too), before the registry loads the module */
    setenv("CLLM_VULKAN_VALIDATE", "1", 0);
    setenv("VK_LAYER_ENABLES",
           "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:"
           "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
           0);
    cllm_log_set(on_log, NULL);
    cllm_log_set_level(CLLM_LOG_DEBUG);
    for (int i = 0; i < cllm_registry_device_count() && !g_vk; i++) {
        cllm_device *d = cllm_registry_device(i);
        if (!strncmp(cllm_device_name(d), "vulkan", 6)) g_vk = d;
    }
    if (!g_vk) {
        check_missing("a Vulkan device (cllm built with libvulkan-dev and glslc; at run time "
                      "libvulkan1 and a driver, e.g. mesa-vulkan-drivers)");
        return check_summary("test_vulkan_async");
    }
    /* TEST_VULKAN_ASYNC_ONLY=split: the split models alone */
    const char *only = getenv("TEST_VULKAN_ASYNC_ONLY");
    if (!only || strcmp(only, "split") != 0) {
        test_moving_views();
        test_models();
    }
    test_branches();
    test_splits();
    CHECKF(g_errors == 0, "%d errors from the backend or the validation layer", g_errors);
    return check_summary("test_vulkan_async");
}
