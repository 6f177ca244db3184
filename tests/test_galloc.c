/*
 * The graph memory planner: hand-made graphs with known plans, thousands of
 * random graphs through the overlap checker, llama-shaped graphs, measure ->
 * reserve -> alloc exactness, failure paths (too large, out of host memory,
 * bad arguments), the checker catching broken placements, and computing
 * graphs laid out by the planner against the same graphs without reuse.
 */
#include "alloc/galloc.h"
#include "alloc/layout.h"
#include "backend/backend-impl.h" /* a second, test buffer type */
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/llama_graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* ---- random numbers (fixed seeds) -------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

static bool rng_chance(rng *r, int percent) { return rng_int(r, 100) < percent; }

static float rng_float(rng *r) {
    return (float)(rng_next(r) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* ---- a second buffer type: host memory, 256-byte alignment, padded ----- */

#define TEST_ALIGN 256
#define TEST_PAD   40

static bool g_test_buft_fail;
static cllm_device g_test_dev; /* only its counters are used */

static const char *test_buft_name(const cllm_buffer_type *buft) {
    (void)buft;
    return "test256";
}

static void test_buf_free(cllm_buffer *buf) { free(buf->context); }

static void *test_buf_base(const cllm_buffer *buf) {
    return buf->context ? buf->context : (void *)(uintptr_t)TEST_ALIGN;
}

static void test_buf_set(cllm_buffer *buf, cllm_tensor *t, const void *data, size_t off,
                         size_t size) {
    (void)buf;
    memcpy((char *)t->data + off, data, size);
}

static void test_buf_get(cllm_buffer *buf, const cllm_tensor *t, void *data, size_t off,
                         size_t size) {
    (void)buf;
    memcpy(data, (const char *)t->data + off, size);
}

static void test_buf_clear(cllm_buffer *buf, uint8_t value) {
    if (buf->context) memset(buf->context, value, buf->size);
}

static cllm_status test_buft_alloc(cllm_buffer_type *buft, size_t size, cllm_buffer **out) {
    static const struct cllm_buffer_i iface = {
        .free_buffer = test_buf_free,
        .get_base = test_buf_base,
        .init_tensor = NULL, /* host memory */
        .set_tensor = test_buf_set,
        .get_tensor = test_buf_get,
        .clear = test_buf_clear,
    };
    if (g_test_buft_fail) return cllm_error(CLLM_ERR_DEVICE_MEMORY, "test256: allocation refused");
    void *mem = size ? aligned_alloc(TEST_ALIGN, cllm_align_up(size, TEST_ALIGN)) : NULL;
    if (size && !mem) return cllm_error(CLLM_ERR_DEVICE_MEMORY, "test256: out of memory");
    cllm_buffer *buf = cllm_buffer_init(buft, iface, mem, size);
    if (!buf) {
        free(mem);
        return cllm_error(CLLM_ERR_NOMEM, "test256: out of host memory");
    }
    *out = buf;
    return CLLM_OK;
}

static size_t test_buft_alignment(const cllm_buffer_type *buft) {
    (void)buft;
    return TEST_ALIGN;
}

static size_t test_buft_alloc_size(const cllm_buffer_type *buft, const cllm_tensor *t) {
    (void)buft;
    return cllm_nbytes(t) + TEST_PAD;
}

static bool test_buft_is_host(const cllm_buffer_type *buft) {
    (void)buft;
    return true;
}

static cllm_buffer_type g_test_buft = {
    .iface =
        {
            .get_name = test_buft_name,
            .alloc_buffer = test_buft_alloc,
            .get_alignment = test_buft_alignment,
            .get_max_size = NULL, /* no limit */
            .get_alloc_size = test_buft_alloc_size,
            .is_host = test_buft_is_host,
        },
    .device = &g_test_dev,
    .context = NULL,
};

/* ---- helpers ----------------------------------------------------------- */

static size_t offset_of(const cllm_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)cllm_buffer_base(t->buffer));
}

static bool overlap(const cllm_tensor *a, const cllm_tensor *b) {
    if (a->buffer != b->buffer) return false;
    const size_t oa = offset_of(a), ob = offset_of(b);
    return oa < ob + cllm_nbytes(b) && ob < oa + cllm_nbytes(a);
}

static bool check_graph(const cllm_graph *g, const char *what, unsigned long long seed) {
    char err[512] = "";
    const bool ok = cllm_galloc_check(g, err, sizeof(err));
    CHECKF(ok, "%s (seed %llu): %s", what, seed, err);
    return ok;
}

/* planned >= lower bound, planned <= the no-reuse sum, and every planned
 * tensor of g (not a view, not in the static buffers) lies within
 * [0, planned) of its buffer type. */
static void check_sizes(const cllm_galloc *ga, cllm_buffer_type *const *bufts, const cllm_graph *g,
                        const cllm_buffer *sbuf, const cllm_buffer *wbuf, unsigned long long seed) {
    for (int b = 0; b < cllm_galloc_n_bufts(ga); b++) {
        cllm_galloc_stats st;
        cllm_galloc_get_stats(ga, b, &st);
        CHECKF(st.planned >= st.lower_bound, "seed %llu: planned %zu < lower bound %zu", seed,
               st.planned, st.lower_bound);
        CHECKF(st.planned <= st.naive, "seed %llu: planned %zu > naive %zu", seed, st.planned,
               st.naive);
        CHECK(st.planned == cllm_galloc_planned_size(ga, b));
        CHECK(st.lower_bound == cllm_galloc_lower_bound(ga, b));
        CHECK(st.n_blocks + st.n_inplace == st.n_tensors);
    }
    for (int k = 0; k < g->n_leafs + g->n_nodes; k++) {
        const cllm_tensor *t = k < g->n_leafs ? g->leafs[k] : g->nodes[k - g->n_leafs];
        if (t->view_src || t->buffer == sbuf || t->buffer == wbuf) continue;
        int id = -1;
        for (int b = 0; b < cllm_galloc_n_bufts(ga); b++) {
            if (bufts[b] == cllm_buffer_buft(t->buffer)) id = b;
        }
        CHECK(id >= 0);
        if (id < 0) continue;
        const size_t end = offset_of(t) + cllm_buffer_type_alloc_size(bufts[id], t);
        CHECKF(end <= cllm_galloc_planned_size(ga, id), "seed %llu: %s ends at %zu, beyond %zu",
               seed, t->name, end, cllm_galloc_planned_size(ga, id));
    }
}

/* ---- random graphs ----------------------------------------------------- */

#define RG_MAX 1024

typedef struct rgraph {
    cllm_context *ctx;  /* graph tensors */
    cllm_context *sctx; /* static tensors (weights, state) */
    cllm_buffer *sbuf;
    cllm_graph *g;
    cllm_tensor *pool[RG_MAX]; /* float tensors usable as sources */
    int n_pool;
    cllm_tensor *ints[RG_MAX]; /* i32 inputs, filled with values in [0, int_mod) */
    int32_t int_mod[RG_MAX];
    int n_ints;
    bool computable; /* every node supported by the CPU kernels */
} rgraph;

static void rand_shape(rng *r, int64_t ne[4]) {
    static const int64_t d0[] = {2, 4, 6, 8, 16, 32, 64};
    ne[0] = d0[rng_int(r, 7)];
    ne[1] = 1 + rng_int(r, 6);
    ne[2] = rng_chance(r, 30) ? 1 + rng_int(r, 3) : 1;
    ne[3] = rng_chance(r, 10) ? 2 : 1;
    if (rng_chance(r, 5)) ne[0] *= 64; /* a few large ones */
}

static cllm_tensor *pool_pick(rgraph *rg, rng *r) { return rg->pool[rng_int(r, rg->n_pool)]; }

static cllm_tensor *pool_pick_f32(rgraph *rg, rng *r) {
    for (int tries = 0; tries < 16; tries++) {
        cllm_tensor *t = pool_pick(rg, r);
        if (t->type == CLLM_TYPE_F32) return t;
    }
    return NULL;
}

static void pool_add(rgraph *rg, cllm_tensor *t) {
    if (rg->n_pool < RG_MAX) rg->pool[rg->n_pool++] = t;
}

static cllm_tensor *new_input(rgraph *rg, rng *r, cllm_type type, const int64_t ne[4]) {
    cllm_tensor *t = cllm_tensor_new(rg->ctx, type, 4, ne);
    cllm_tensor_set_name(t, "in%d", cllm_context_n_tensors(rg->ctx));
    if (rng_chance(r, 50)) cllm_tensor_set_input(t);
    return t;
}

static cllm_tensor *new_static(rgraph *rg, rng *r, const int64_t ne[4]) {
    const cllm_type type = rng_chance(r, 30) ? CLLM_TYPE_F16 : CLLM_TYPE_F32;
    cllm_tensor *t = cllm_tensor_new(rg->sctx, type, 4, ne);
    cllm_tensor_set_name(t, "w%d", cllm_context_n_tensors(rg->sctx));
    return t;
}

static cllm_tensor *new_ints(rgraph *rg, int64_t n0, int64_t n1, int32_t mod) {
    cllm_tensor *t = cllm_tensor_new_2d(rg->ctx, CLLM_TYPE_I32, n0, n1);
    cllm_tensor_set_name(t, "ids%d", rg->n_ints);
    cllm_tensor_set_input(t);
    rg->ints[rg->n_ints] = t;
    rg->int_mod[rg->n_ints++] = mod;
    return t;
}

static bool is_contiguous_f(const cllm_tensor *t) {
    return cllm_is_contiguous(t) && !cllm_type_traits_of(t->type)->is_quantized;
}

/* One random op appended to rg; may do nothing if the pick does not fit. */
static void random_op(rgraph *rg, rng *r) {
    cllm_context *ctx = rg->ctx;
    cllm_tensor *a = pool_pick(rg, r), *t = NULL;
    int64_t ne[4];
    switch (rng_int(r, 17)) {
    case 0:
    case 1: {
        switch (rng_int(r, 5)) {
        case 0: t = cllm_silu(ctx, a); break;
        case 1: t = cllm_gelu(ctx, a); break;
        case 2: t = cllm_scale(ctx, a, 0.5f); break;
        case 3: t = cllm_rms_norm(ctx, a, 1e-5f); break;
        default: t = cllm_norm(ctx, a, 1e-5f); break;
        }
        break;
    }
    case 2: {
        a = pool_pick_f32(rg, r);
        if (!a) return;
        cllm_tensor *mask = NULL;
        if (rng_chance(r, 60)) {
            for (int tries = 0; tries < 16 && !mask; tries++) {
                cllm_tensor *m = pool_pick(rg, r);
                if ((m->type == CLLM_TYPE_F32 || m->type == CLLM_TYPE_F16) &&
                    m->ne[0] == a->ne[0] && m->ne[1] >= a->ne[1] && a->ne[2] % m->ne[2] == 0 &&
                    a->ne[3] % m->ne[3] == 0) {
                    mask = m;
                }
            }
            if (!mask) {
                mask = new_input(rg, r, CLLM_TYPE_F32, (int64_t[]){a->ne[0], a->ne[1], 1, 1});
            }
        }
        t = cllm_soft_max(ctx, a, mask, 0.25f);
        break;
    }
    case 3: {
        a = pool_pick_f32(rg, r);
        if (!a || a->ne[0] % 2 != 0 || a->ne[3] != 1) return;
        cllm_tensor *pos = NULL;
        for (int i = 0; i < rg->n_ints && !pos; i++) {
            if (rg->int_mod[i] == 1000 && rg->ints[i]->ne[0] == a->ne[2]) pos = rg->ints[i];
        }
        if (!pos) pos = new_ints(rg, a->ne[2], 1, 1000);
        const int n_dims = rng_chance(r, 50) ? (int)a->ne[0] : (int)(a->ne[0] / 2 + 1) / 2 * 2;
        t = cllm_rope(ctx, a, pos, NULL, n_dims,
                      rng_chance(r, 50) ? CLLM_ROPE_NORMAL : CLLM_ROPE_NEOX, 10000.0f, 1.0f);
        break;
    }
    case 4:
    case 5: {
        cllm_tensor *b = NULL;
        for (int tries = 0; tries < 16 && !b; tries++) {
            cllm_tensor *c = pool_pick(rg, r);
            if (cllm_can_repeat(c, a)) b = c;
        }
        if (!b) {
            ne[0] = a->ne[0], ne[1] = ne[2] = ne[3] = 1;
            b = rng_chance(r, 50) ? new_input(rg, r, CLLM_TYPE_F32, ne) : new_static(rg, r, ne);
        }
        t = rng_chance(r, 50) ? cllm_add(ctx, a, b) : cllm_mul(ctx, a, b);
        break;
    }
    case 6:
    case 7: {
        cllm_tensor *b = pool_pick_f32(rg, r);
        if (!b) return;
        cllm_tensor *w = NULL;
        for (int tries = 0; tries < 8 && !w && rng_chance(r, 70); tries++) {
            cllm_tensor *c = pool_pick(rg, r);
            if (c->ne[0] == b->ne[0] && b->ne[2] % c->ne[2] == 0 && b->ne[3] % c->ne[3] == 0) w = c;
        }
        if (!w) {
            static const int64_t ms[] = {1, 2, 3, 5, 8, 16, 32};
            ne[0] = b->ne[0], ne[1] = ms[rng_int(r, 7)], ne[2] = ne[3] = 1;
            w = new_static(rg, r, ne);
        }
        t = cllm_mul_mat(ctx, w, b);
        break;
    }
    case 8: {
        if (!is_contiguous_f(a)) return;
        switch (rng_int(r, 3)) {
        case 0: t = cllm_reshape_2d(ctx, a, a->ne[0] * a->ne[1], a->ne[2] * a->ne[3]); break;
        case 1: t = cllm_reshape_2d(ctx, a, a->ne[0], cllm_nrows(a)); break;
        default: t = cllm_reshape_4d(ctx, a, a->ne[0], a->ne[2], a->ne[1], a->ne[3]); break;
        }
        break;
    }
    case 9: {
        if (cllm_type_traits_of(a->type)->is_quantized) return;
        int ax[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; i--) {
            const int j = rng_int(r, i + 1), tmp = ax[i];
            ax[i] = ax[j], ax[j] = tmp;
        }
        t = rng_chance(r, 30) ? cllm_transpose(ctx, a)
                              : cllm_permute(ctx, a, ax[0], ax[1], ax[2], ax[3]);
        break;
    }
    case 10: {
        if (!is_contiguous_f(a) || cllm_nrows(a) < 2) return;
        const int64_t rows = cllm_nrows(a), k = 1 + rng_int(r, (int)rows - 1);
        const int64_t first = rng_int(r, (int)(rows - k + 1));
        const size_t row = cllm_row_size(a->type, a->ne[0]); /* nb[1] may be any if ne[1] == 1 */
        t = cllm_view_2d(ctx, a, a->ne[0], k, row, (size_t)first * row);
        break;
    }
    case 11: t = cllm_cont(ctx, a); break;
    case 12:
    case 13: {
        /* copy a into (a part of) another contiguous tensor */
        cllm_tensor *d = NULL;
        const int64_t n = cllm_nelements(a);
        for (int tries = 0; tries < 16 && !d; tries++) {
            cllm_tensor *c = pool_pick(rg, r);
            const cllm_tensor *rc = c->view_src ? c->view_src : c;
            const cllm_tensor *ra = a->view_src ? a->view_src : a;
            if (rc != ra && is_contiguous_f(c) && cllm_nelements(c) >= n) d = c;
        }
        if (!d) {
            if (!rng_chance(r, 50)) return;
            ne[0] = n, ne[1] = ne[2] = ne[3] = 1;
            d = rng_chance(r, 50) ? new_input(rg, r, CLLM_TYPE_F32, ne) : new_static(rg, r, ne);
        }
        if (cllm_nelements(d) == n && rng_chance(r, 50)) {
            t = cllm_cpy(ctx, a, d);
        } else {
            const int64_t first = rng_int(r, (int)(cllm_nelements(d) - n + 1));
            t = cllm_cpy(ctx, a, cllm_view_1d(ctx, d, n, (size_t)first * cllm_element_size(d)));
        }
        break;
    }
    case 14: {
        if (a->ne[3] != 1) return;
        cllm_tensor *ids = new_ints(rg, 1 + rng_int(r, 4), a->ne[2], (int32_t)a->ne[1]);
        t = cllm_get_rows(ctx, a, ids);
        break;
    }
    case 15: {
        /* fused attention over a cache-like static or input */
        static const int64_t ds[] = {4, 8, 16};
        const int64_t D = ds[rng_int(r, 3)], nt = 1 + rng_int(r, 4), nkv = 1 + rng_int(r, 8);
        const int64_t nhk = 1 + rng_int(r, 2), nh = nhk * (1 + rng_int(r, 2));
        cllm_tensor *q =
            cllm_scale(ctx, new_input(rg, r, CLLM_TYPE_F32, (int64_t[]){D, nt, nh, 1}), 1.0f);
        ne[0] = D, ne[1] = nkv, ne[2] = nhk, ne[3] = 1;
        cllm_tensor *k =
            rng_chance(r, 50) ? new_static(rg, r, ne) : new_input(rg, r, CLLM_TYPE_F32, ne);
        cllm_tensor *v =
            rng_chance(r, 50) ? new_static(rg, r, ne) : new_input(rg, r, CLLM_TYPE_F32, ne);
        cllm_tensor *mask =
            rng_chance(r, 50) ? new_input(rg, r, CLLM_TYPE_F32, (int64_t[]){nkv, nt, 1, 1}) : NULL;
        t = cllm_attn(ctx, q, k, v, mask, 0.5f);
        break;
    }
    default: {
        /* a fresh input or static for later ops */
        rand_shape(r, ne);
        pool_add(rg,
                 rng_chance(r, 50) ? new_input(rg, r, CLLM_TYPE_F32, ne) : new_static(rg, r, ne));
        return;
    }
    }
    if (!t->view_src && rng_chance(r, 8)) cllm_tensor_set_output(t);
    if (rng_chance(r, 3)) cllm_tensor_set_input(t); /* a node the caller may also set */
    pool_add(rg, t);
}

static void rgraph_free(rgraph *rg) {
    cllm_graph_free(rg->g);
    cllm_buffer_free(rg->sbuf);
    cllm_context_free(rg->ctx);
    cllm_context_free(rg->sctx);
    free(rg);
}

/*
 * A random graph of about n_ops ops from `seed`; its static tensors are
 * placed with cllm_layout_alloc (real memory) or in measure mode. The same
 * seed always gives the same graph.
 */
static rgraph *rgraph_new(unsigned long long seed, int n_ops, bool real_static) {
    rgraph *rg = calloc(1, sizeof(*rg));
    CLLM_ASSERT(rg);
    rng r = {seed};
    const int cap = 8 * n_ops + 64;
    rg->ctx = cllm_context_new(cap);
    rg->sctx = cllm_context_new(2 * n_ops + 16);
    rg->g = cllm_graph_new(cap);
    CLLM_ASSERT(rg->ctx && rg->sctx && rg->g);
    int64_t ne[4];
    const int n_in = 1 + rng_int(&r, 3), n_st = rng_int(&r, 4);
    for (int i = 0; i < n_in; i++) {
        rand_shape(&r, ne);
        pool_add(rg, new_input(rg, &r, CLLM_TYPE_F32, ne));
    }
    for (int i = 0; i < n_st; i++) {
        rand_shape(&r, ne);
        pool_add(rg, new_static(rg, &r, ne));
    }
    for (int i = 0; i < n_ops; i++) random_op(rg, &r);

    /* the graph: every tensor nobody reads is an output, built in random order */
    const int n = cllm_context_n_tensors(rg->ctx);
    bool *read = calloc((size_t)n + 1, sizeof(*read));
    int *sinks = calloc((size_t)n + 1, sizeof(*sinks));
    CLLM_ASSERT(read && sinks);
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = cllm_context_tensor(rg->ctx, i);
        for (int s = 0; s < CLLM_MAX_SRC; s++) {
            for (int j = 0; t->src[s] && j < n; j++) {
                if (cllm_context_tensor(rg->ctx, j) == t->src[s]) read[j] = true;
            }
        }
    }
    int n_sinks = 0;
    for (int i = 0; i < n; i++) {
        if (!read[i]) sinks[n_sinks++] = i;
    }
    for (int i = n_sinks - 1; i > 0; i--) {
        const int j = rng_int(&r, i + 1), tmp = sinks[i];
        sinks[i] = sinks[j], sinks[j] = tmp;
    }
    for (int i = 0; i < n_sinks; i++)
        cllm_graph_build(rg->g, cllm_context_tensor(rg->ctx, sinks[i]));
    free(read);
    free(sinks);

    cllm_status st =
        real_static
            ? cllm_layout_alloc(rg->sctx, cllm_cpu_buffer_type(), CLLM_MEM_WEIGHTS, &rg->sbuf)
            : cllm_layout_measure_place(rg->sctx, cllm_cpu_buffer_type(), &rg->sbuf);
    CLLM_ASSERT(st == CLLM_OK);

    rg->computable = true;
    for (int i = 0; i < rg->g->n_nodes; i++) {
        if (!cllm_device_supports_op(cllm_cpu_device(), rg->g->nodes[i])) rg->computable = false;
    }
    return rg;
}

/* Per-tensor buffer type ids: 0 (cpu) or 1 (test256) at random. */
static void random_bufts(const cllm_graph *g, rng *r, int *node_buft, int *leaf_buft) {
    for (int i = 0; i < g->n_nodes; i++) node_buft[i] = rng_int(r, 2);
    for (int i = 0; i < g->n_leafs; i++) leaf_buft[i] = rng_int(r, 2);
}

/* Offsets of every tensor of g in its buffer (SIZE_MAX: not placed). */
static void record_offsets(const cllm_graph *g, size_t *offs) {
    for (int i = 0; i < g->n_leafs; i++)
        offs[i] = g->leafs[i]->data ? offset_of(g->leafs[i]) : SIZE_MAX;
    for (int i = 0; i < g->n_nodes; i++)
        offs[g->n_leafs + i] = g->nodes[i]->data ? offset_of(g->nodes[i]) : SIZE_MAX;
}

static void test_random_graphs(void) {
    cllm_buffer_type *bufts[2] = {cllm_cpu_buffer_type(), &g_test_buft};
    const int n_graphs = 3000;
    int n_alloc = 0;
    size_t sum_planned = 0, sum_lower = 0, sum_naive = 0;
    for (int i = 0; i < n_graphs; i++) {
        const unsigned long long seed = 1000 + (unsigned long long)i;
        rng r = {seed * 7919};
        const int n_ops = 1 + rng_int(&r, i % 10 == 0 ? 200 : 60);
        rgraph *rg = rgraph_new(seed, n_ops, false);
        cllm_graph *g = rg->g;
        const bool two = i % 3 == 0;
        int *node_buft = calloc((size_t)g->n_nodes + 1, sizeof(int));
        int *leaf_buft = calloc((size_t)g->n_leafs + 1, sizeof(int));
        if (two) random_bufts(g, &r, node_buft, leaf_buft);
        cllm_galloc *ga = cllm_galloc_new(bufts, two ? 2 : 1);
        CLLM_ASSERT(ga);
        const cllm_status st = cllm_galloc_measure(ga, g, node_buft, leaf_buft);
        CHECKF(st == CLLM_OK, "seed %llu: %s", seed, cllm_last_error());
        const bool ok = check_graph(g, "random graph, measure", seed);
        check_sizes(ga, bufts, g, rg->sbuf, NULL, seed);
        for (int b = 0; b < cllm_galloc_n_bufts(ga); b++) {
            cllm_galloc_stats s;
            cllm_galloc_get_stats(ga, b, &s);
            sum_planned += s.planned, sum_lower += s.lower_bound, sum_naive += s.naive;
        }

        /* every tenth: reserve and lay out the same graph: the same offsets */
        if (ok && i % 10 == 0) {
            n_alloc++;
            const int n = g->n_leafs + g->n_nodes;
            size_t *before = calloc((size_t)n + 1, sizeof(size_t));
            size_t *after = calloc((size_t)n + 1, sizeof(size_t));
            record_offsets(g, before);
            const size_t cpu0 = cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE);
            const size_t test0 = cllm_device_allocated(&g_test_dev, CLLM_MEM_COMPUTE);
            CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
            CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) ==
                  cpu0 + cllm_galloc_measured_size(ga, 0));
            if (two) {
                CHECK(cllm_device_allocated(&g_test_dev, CLLM_MEM_COMPUTE) ==
                      test0 + cllm_galloc_measured_size(ga, 1));
            }
            CHECK(cllm_galloc_alloc_graph(ga, g, node_buft, leaf_buft) == CLLM_OK);
            record_offsets(g, after);
            CHECKF(memcmp(before, after, (size_t)n * sizeof(size_t)) == 0,
                   "seed %llu: alloc offsets differ from measured ones", seed);
            check_graph(g, "random graph, alloc", seed);
            for (int k = 0; k < g->n_nodes; k++) {
                const cllm_tensor *t = g->nodes[k];
                if (!t->view_src) CHECK(!cllm_buffer_is_measure(t->buffer));
            }
            free(before);
            free(after);
        }
        cllm_galloc_free(ga);
        free(node_buft);
        free(leaf_buft);
        rgraph_free(rg);
    }
    printf("random graphs: %d planned (%d also laid out), planned / lower bound %.4f, "
           "naive / planned %.2f\n",
           n_graphs, n_alloc, (double)sum_planned / (double)sum_lower,
           (double)sum_naive / (double)sum_planned);
}

/* ---- hand-made graphs -------------------------------------------------- */

static cllm_galloc *cpu_galloc(void) {
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_galloc *ga = cllm_galloc_new(&buft, 1);
    CLLM_ASSERT(ga);
    return ga;
}

static void test_inplace_chain(void) {
    cllm_context *ctx = cllm_context_new(32);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 1000);
    cllm_tensor *a = cllm_scale(ctx, x, 2.0f); /* x is an input: not in place */
    cllm_tensor *b = cllm_silu(ctx, a);        /* in place of a */
    cllm_tensor *c = cllm_gelu(ctx, b);        /* in place of b */
    cllm_tensor *d = cllm_add(ctx, c, x);      /* in place of c */
    cllm_tensor *e = cllm_scale(ctx, d, 3.0f); /* in place of d; e is the output */
    cllm_graph *g = cllm_graph_new(32);
    cllm_graph_build(g, e);
    cllm_galloc *ga = cpu_galloc();
    CHECK(cllm_galloc_measure(ga, g, NULL, NULL) == CLLM_OK);
    CHECK(check_graph(g, "chain", 0));
    CHECK(a->data != x->data && !overlap(a, x));
    CHECK(b->data == a->data && c->data == a->data && d->data == a->data && e->data == a->data);
    cllm_galloc_stats st;
    cllm_galloc_get_stats(ga, 0, &st);
    CHECK_EQ_INT(st.n_tensors, 6);
    CHECK_EQ_INT(st.n_inplace, 4);
    CHECK_EQ_INT(st.n_blocks, 2);
    CHECK_EQ_INT(st.planned, 2 * 4032); /* 4000 bytes, aligned to 64 */
    CHECK_EQ_INT(st.lower_bound, 2 * 4032);
    CHECK_EQ_INT(st.naive, 6 * 4032);
    CHECK_EQ_INT(cllm_galloc_measured_size(ga, 0), 2 * 4032);
    cllm_galloc_free(ga);
    cllm_graph_free(g);
    cllm_context_free(ctx);
}

static void test_no_inplace_cases(void) {
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *x = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 16, 4);
    cllm_tensor *a = cllm_scale(ctx, x, 2.0f);
    cllm_tensor *b = cllm_silu(ctx, a);   /* a is read again below: no */
    cllm_tensor *c = cllm_add(ctx, a, b); /* a's last use: in place of a */
    cllm_tensor *d = cllm_mul(ctx, c, c); /* src[1] is src[0]: no */
    cllm_tensor *e = cllm_soft_max(ctx, cllm_scale(ctx, d, 1.0f), d, 1.0f); /* mask d */
    cllm_tensor *o = cllm_scale(ctx, e, 1.0f);
    cllm_tensor_set_output(o);
    cllm_tensor *p = cllm_silu(ctx, o); /* o is an output: no */
    cllm_tensor *h = cllm_scale(ctx, p, 1.0f);
    cllm_tensor *tr = cllm_transpose(ctx, h);
    cllm_tensor *k = cllm_silu(ctx, tr); /* a view as src[0]: no */
    cllm_tensor *ct = cllm_cont(ctx, k); /* cont: not an in-place op */
    cllm_tensor *f16 = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 4, 16);
    cllm_tensor *m = cllm_mul(ctx, ct, f16); /* in place of ct */
    cllm_tensor *cf = cllm_cpy(ctx, m, f16); /* into the f16 input */
    cllm_tensor *s = cllm_silu(ctx, cf);     /* different type: no */
    cllm_graph *g = cllm_graph_new(64);
    cllm_graph_build(g, s);
    cllm_graph_build(g, o);
    cllm_galloc *ga = cpu_galloc();
    CHECK(cllm_galloc_measure(ga, g, NULL, NULL) == CLLM_OK);
    CHECK(check_graph(g, "no in-place", 0));
    CHECK(b->data != a->data);
    CHECK(c->data == a->data); /* a's last use is c */
    CHECK(d->data != c->data);
    CHECK(e->data != d->data && e->src[0]->data != d->data);
    CHECK(p->data != o->data && !overlap(p, o));
    CHECK(k->data != h->data);
    CHECK(m->data == ct->data);
    CHECK(cf->data == f16->data && s->data != f16->data);
    CHECK(!overlap(x, a) && !overlap(f16, m) && !overlap(f16, s));
    cllm_galloc_free(ga);
    cllm_graph_free(g);
    cllm_context_free(ctx);
}

static void test_view_keeps_source(void) {
    /* a is read directly early, but through a view of it at the very end */
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 256);
    cllm_tensor *w = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 256);
    cllm_tensor *a = cllm_scale(ctx, x, 2.0f);
    cllm_tensor *view = cllm_reshape_2d(ctx, a, 16, 16);
    cllm_tensor *perm = cllm_transpose(ctx, view);
    cllm_tensor *y = cllm_scale(ctx, a, 3.0f); /* a is read again later: not in place */
    cllm_tensor *mids[8];
    cllm_tensor *cur = y;
    for (int i = 0; i < 8; i++)
        cur = mids[i] = cllm_mul_mat(ctx, w, cllm_reshape_2d(ctx, cur, 256, 1));
    /* src[0] first: the chain is computed before the transposed view is read */
    cllm_tensor *late = cllm_add(ctx, cllm_reshape_2d(ctx, cur, 16, 16), cllm_cont(ctx, perm));
    cllm_graph *g = cllm_graph_new(64);
    cllm_graph_build(g, late);
    CHECK(cllm_graph_node_index(g, mids[7]) < cllm_graph_node_index(g, perm));
    cllm_galloc *ga = cpu_galloc();
    CHECK(cllm_galloc_measure(ga, g, NULL, NULL) == CLLM_OK);
    CHECK(check_graph(g, "view", 0));
    CHECK(y->data != a->data);
    for (int i = 0; i < 8; i++) CHECK(!overlap(mids[i], a));
    CHECK(view->data == a->data && perm->data == a->data);
    cllm_galloc_free(ga);
    cllm_graph_free(g);
    cllm_context_free(ctx);
}

static void test_static_and_views_of_static(void) {
    cllm_context *sctx = cllm_context_new(8);
    cllm_context *ctx = cllm_context_new(32);
    cllm_tensor *cache = cllm_tensor_new_2d(sctx, CLLM_TYPE_F16, 8, 16);
    cllm_tensor *w = cllm_tensor_new_2d(sctx, CLLM_TYPE_F32, 8, 8);
    /* views made before the cache is placed get their data from the planner */
    cllm_tensor *x = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 8, 2);
    cllm_tensor *dst = cllm_view_2d(ctx, cache, 8, 2, cache->nb[1], 4 * cache->nb[1]);
    cllm_tensor *cp = cllm_cpy(ctx, cllm_mul_mat(ctx, w, x), dst);
    cllm_tensor *rd = cllm_view_2d(ctx, cache, 8, 6, cache->nb[1], 0);
    cllm_tensor *y = cllm_mul_mat(ctx, rd, x);
    cllm_graph *g = cllm_graph_new(32);
    cllm_graph_build(g, cp);
    cllm_graph_build(g, y);
    cllm_buffer *sbuf = NULL;
    CHECK(cllm_layout_alloc(sctx, cllm_cpu_buffer_type(), CLLM_MEM_STATE, &sbuf) == CLLM_OK);
    CHECK(dst->data == NULL);
    void *cache_data = cache->data, *w_data = w->data;
    cllm_galloc *ga = cpu_galloc();
    CHECK(cllm_galloc_measure(ga, g, NULL, NULL) == CLLM_OK);
    CHECK(check_graph(g, "static", 0));
    CHECK(cache->data == cache_data && w->data == w_data && cache->buffer == sbuf);
    CHECK(dst->data == (char *)cache_data + 4 * cache->nb[1] && cp->data == dst->data);
    CHECK(rd->data == cache_data);
    cllm_galloc_stats st;
    cllm_galloc_get_stats(ga, 0, &st);
    CHECK_EQ_INT(st.n_tensors, 3); /* x, the product, y */
    cllm_galloc_free(ga);
    cllm_buffer_free(sbuf);
    cllm_graph_free(g);
    cllm_context_free(ctx);
    cllm_context_free(sctx);
}

/* A graph where first fit in graph order fragments (the small, long-lived a
 * comes first and splits the memory that the big b frees for the bigger c)
 * but greedy by size reaches the lower bound. */
static void test_offline_beats_graph_order(void) {
    cllm_context *sctx = cllm_context_new(8);
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *wa = cllm_tensor_new_2d(sctx, CLLM_TYPE_F32, 16, 1024);
    cllm_tensor *wb = cllm_tensor_new_2d(sctx, CLLM_TYPE_F32, 16, 2048);
    cllm_tensor *wc = cllm_tensor_new_2d(sctx, CLLM_TYPE_F32, 16, 3072);
    cllm_buffer *sbuf = NULL;
    CHECK(cllm_layout_measure_place(sctx, cllm_cpu_buffer_type(), &sbuf) == CLLM_OK);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 16);
    cllm_tensor *a = cllm_mul_mat(ctx, wa, x);                            /* 4 KiB, long */
    cllm_tensor *b = cllm_mul_mat(ctx, wb, x);                            /* 8 KiB, short */
    cllm_tensor *bs = cllm_scale(ctx, cllm_view_1d(ctx, b, 16, 0), 1.0f); /* 64 B */
    cllm_tensor *c = cllm_mul_mat(ctx, wc, bs);                           /* 12 KiB */
    cllm_tensor *out = cllm_add(ctx, cllm_cont(ctx, cllm_view_1d(ctx, c, 1024, 0)), a);
    cllm_graph *g = cllm_graph_new(64);
    cllm_graph_build(g, a); /* a first */
    cllm_graph_build(g, out);
    cllm_galloc *ga = cpu_galloc();
    CHECK(cllm_galloc_measure(ga, g, NULL, NULL) == CLLM_OK);
    CHECK(check_graph(g, "offline", 0));
    cllm_galloc_stats st;
    cllm_galloc_get_stats(ga, 0, &st);
    /* at the cont's step: x, a, c, the cont */
    CHECK_EQ_INT(st.lower_bound, 64 + 4096 + 12288 + 4096);
    CHECKF(st.planned == st.lower_bound, "planned %zu, lower bound %zu (%s)", st.planned,
           st.lower_bound, st.strategy);
    CHECK(strcmp(st.strategy, "graph-order/first-fit") != 0);
    cllm_galloc_free(ga);
    cllm_graph_free(g);
    cllm_buffer_free(sbuf);
    cllm_context_free(ctx);
    cllm_context_free(sctx);
}

/* ---- llama-shaped graphs ----------------------------------------------- */

static llama_graph_params small_llama(bool fused) {
    llama_graph_params p = llama_graph_params_default();
    p.n_embd = 64, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 160, p.n_layer = 2;
    p.n_vocab = 97, p.n_ctx = 32, p.wtype = CLLM_TYPE_F32, p.fused_attn = fused;
    return p;
}

static void test_llama_graphs(void) {
    static const int64_t tokens[][2] = {{1, 2048}, {512, 2048}, {7, 300}};
    for (int fused = 0; fused < 2; fused++) {
        llama_graph_params p = llama_graph_params_default();
        p.fused_attn = fused;
        llama_model_fixture m;
        CHECK(llama_model_init(&m, &p, true) == CLLM_OK);
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(tokens); i++) {
            llama_graph lg;
            CHECK(llama_graph_build(&lg, &m, tokens[i][0], tokens[i][1]) == CLLM_OK);
            const size_t before[] = {
                cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_WEIGHTS),
                cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_STATE),
                cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE),
                cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_WORKSPACE),
            };
            cllm_galloc *ga = cpu_galloc();
            CHECK(cllm_galloc_measure(ga, lg.graph, NULL, NULL) == CLLM_OK);
            /* measure mode allocates no device memory */
            for (int k = 0; k < CLLM_MEM_COUNT; k++) {
                CHECK(cllm_device_allocated(cllm_cpu_device(), k) == before[k]);
            }
            CHECK(cllm_buffer_is_measure(lg.logits->buffer));
            check_graph(lg.graph, fused ? "tinyllama fused" : "tinyllama unfused",
                        (unsigned long long)tokens[i][0]);
            cllm_buffer_type *cpu = cllm_cpu_buffer_type();
            check_sizes(ga, &cpu, lg.graph, m.sbuf, m.wbuf, 0);
            cllm_galloc_stats st;
            cllm_galloc_get_stats(ga, 0, &st);
            CHECKF((double)st.planned <= 1.05 * (double)st.lower_bound,
                   "tinyllama %s, %lld tokens: planned %zu > 1.05 x lower bound %zu",
                   fused ? "fused" : "unfused", (long long)tokens[i][0], st.planned,
                   st.lower_bound);
            CHECK(st.n_inplace > 0);
            cllm_galloc_free(ga);
            llama_graph_free(&lg);
        }
        llama_model_free(&m);
    }
}

static void test_measure_reserve_alloc(void) {
    for (int fused = 0; fused < 2; fused++) {
        llama_graph_params p = small_llama(fused);
        llama_model_fixture m;
        CHECK(llama_model_init(&m, &p, true) == CLLM_OK);
        llama_graph prompt, token;
        CHECK(llama_graph_build(&prompt, &m, 16, 16) == CLLM_OK);
        CHECK(llama_graph_build(&token, &m, 1, 17) == CLLM_OK);
        const int np = prompt.graph->n_nodes + prompt.graph->n_leafs;
        const int nt = token.graph->n_nodes + token.graph->n_leafs;
        size_t *offs_p = calloc((size_t)np, sizeof(size_t));
        size_t *offs_t = calloc((size_t)nt, sizeof(size_t));
        size_t *again = calloc((size_t)CLLM_MAX(np, nt), sizeof(size_t));

        cllm_galloc *ga = cpu_galloc();
        CHECK(cllm_galloc_buffer(ga, 0) == NULL);
        CHECK(cllm_galloc_measure(ga, prompt.graph, NULL, NULL) == CLLM_OK);
        record_offsets(prompt.graph, offs_p);
        const size_t size_p = cllm_galloc_planned_size(ga, 0);
        CHECK(cllm_galloc_measure(ga, token.graph, NULL, NULL) == CLLM_OK);
        record_offsets(token.graph, offs_t);
        const size_t size_t1 = cllm_galloc_planned_size(ga, 0);
        CHECK(size_t1 < size_p);
        CHECK(cllm_galloc_measured_size(ga, 0) == size_p);
        /* the earlier graph still lies within the (grown) measure buffer */
        CHECK(check_graph(prompt.graph, "prompt after token measure", 0));

        /* alloc mode: exactly the measured bytes */
        const size_t before = cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE);
        CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
        CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == before + size_p);
        CHECK(cllm_buffer_size(cllm_galloc_buffer(ga, 0)) == size_p);
        CHECK(cllm_buffer_kind(cllm_galloc_buffer(ga, 0)) == CLLM_MEM_COMPUTE);
        cllm_buffer *buf = cllm_galloc_buffer(ga, 0);
        CHECK(cllm_galloc_reserve(ga) == CLLM_OK); /* nothing new measured: kept */
        CHECK(cllm_galloc_buffer(ga, 0) == buf);
        CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == before + size_p);

        CHECK(cllm_galloc_alloc_graph(ga, token.graph, NULL, NULL) == CLLM_OK);
        record_offsets(token.graph, again);
        CHECK(memcmp(again, offs_t, (size_t)nt * sizeof(size_t)) == 0);
        CHECK(token.logits->buffer == buf);
        CHECK(check_graph(token.graph, "token, alloc", 0));
        CHECK(cllm_galloc_alloc_graph(ga, prompt.graph, NULL, NULL) == CLLM_OK);
        record_offsets(prompt.graph, again);
        CHECK(memcmp(again, offs_p, (size_t)np * sizeof(size_t)) == 0);
        CHECK(check_graph(prompt.graph, "prompt, alloc", 0));
        CHECK(cllm_galloc_planned_size(ga, 0) == size_p);

        /* a fresh graph of the same shape: the same plan */
        llama_graph token2;
        CHECK(llama_graph_build(&token2, &m, 1, 17) == CLLM_OK);
        CHECK(cllm_galloc_alloc_graph(ga, token2.graph, NULL, NULL) == CLLM_OK);
        record_offsets(token2.graph, again);
        CHECK(memcmp(again, offs_t, (size_t)nt * sizeof(size_t)) == 0);
        llama_graph_free(&token2);

        /* a graph larger than the reservation: an error, nothing placed */
        llama_graph big;
        CHECK(llama_graph_build(&big, &m, 32, 32) == CLLM_OK);
        cllm_log_set(quiet, NULL);
        CHECK(cllm_galloc_alloc_graph(ga, big.graph, NULL, NULL) == CLLM_ERR_TOO_LARGE);
        cllm_log_set(NULL, NULL);
        CHECK(strstr(cllm_last_error(), "reserved") != NULL);
        for (int i = 0; i < big.graph->n_nodes; i++) {
            const cllm_tensor *t = big.graph->nodes[i];
            if (!t->view_src || t->view_src->buffer != m.sbuf) CHECK(t->data == NULL);
        }
        for (int i = 0; i < big.graph->n_leafs; i++) {
            const cllm_tensor *t = big.graph->leafs[i];
            if (t->buffer != m.wbuf && t->buffer != m.sbuf) CHECK(t->data == NULL);
        }
        CHECK(cllm_galloc_planned_size(ga, 0) == size_t1); /* stats of the last success */
        CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == before + size_p);

        /* measuring it and reserving again grows the buffer to exactly its size */
        CHECK(cllm_galloc_measure(ga, big.graph, NULL, NULL) == CLLM_OK);
        const size_t size_b = cllm_galloc_measured_size(ga, 0);
        CHECK(size_b > size_p);
        CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
        CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == before + size_b);
        CHECK(cllm_galloc_alloc_graph(ga, big.graph, NULL, NULL) == CLLM_OK);
        CHECK(check_graph(big.graph, "big, alloc", 0));
        llama_graph_free(&big);

        cllm_galloc_free(ga);
        CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == before);
        free(offs_p);
        free(offs_t);
        free(again);
        llama_graph_free(&prompt);
        llama_graph_free(&token);
        llama_model_free(&m);
    }
}

/* ---- failure paths ----------------------------------------------------- */

static bool nothing_placed(const rgraph *rg) {
    for (int i = 0; i < rg->g->n_nodes; i++) {
        const cllm_tensor *t = rg->g->nodes[i];
        if (t->data && (!t->view_src || t->view_src->buffer != rg->sbuf)) return false;
    }
    for (int i = 0; i < rg->g->n_leafs; i++) {
        const cllm_tensor *t = rg->g->leafs[i];
        if (t->data && t->buffer != rg->sbuf) return false;
    }
    return true;
}

static void test_out_of_host_memory(void) {
    cllm_buffer_type *bufts[2] = {cllm_cpu_buffer_type(), &g_test_buft};
    cllm_log_set(quiet, NULL);
    /* the n-th host allocation fails, for every n until none does */
    int n_failed = 0;
    for (int n = 1; n < 100; n++) {
        rgraph *rg = rgraph_new(77, 40, false);
        cllm_galloc *ga = cllm_galloc_new(bufts, 2);
        cllm_galloc_fail_host_alloc_after(ga, n);
        const cllm_status st = cllm_galloc_measure(ga, rg->g, NULL, NULL);
        if (st == CLLM_OK) {
            CHECK(check_graph(rg->g, "after injected failures", 77));
            cllm_galloc_free(ga);
            rgraph_free(rg);
            break;
        }
        n_failed++;
        CHECK(st == CLLM_ERR_NOMEM);
        CHECK(nothing_placed(rg));
        CHECK(cllm_galloc_planned_size(ga, 0) == 0 && cllm_galloc_measured_size(ga, 0) == 0);
        /* the planner still works afterwards */
        cllm_galloc_fail_host_alloc_after(ga, 0);
        CHECK(cllm_galloc_measure(ga, rg->g, NULL, NULL) == CLLM_OK);
        CHECK(check_graph(rg->g, "after a failure", 77));
        cllm_galloc_free(ga);
        rgraph_free(rg);
    }
    CHECK(n_failed >= 3); /* scratch, measure buffers */

    /* alloc mode: a graph with more tensors than any measured grows the
     * scratch, and that can fail too */
    rgraph *small = rgraph_new(5, 5, false), *large = rgraph_new(6, 150, false);
    cllm_galloc *ga = cllm_galloc_new(bufts, 1);
    CHECK(cllm_galloc_measure(ga, small->g, NULL, NULL) == CLLM_OK);
    CHECK(cllm_galloc_measure(ga, large->g, NULL, NULL) == CLLM_OK);
    CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
    rgraph_free(large);
    large = rgraph_new(8, 1000, false);
    CHECK(cllm_galloc_alloc_graph(ga, small->g, NULL, NULL) == CLLM_OK);
    cllm_galloc_fail_host_alloc_after(ga, 1);
    const cllm_status st = cllm_galloc_alloc_graph(ga, large->g, NULL, NULL);
    CHECK(st == CLLM_ERR_NOMEM);
    CHECK(nothing_placed(large));
    cllm_galloc_free(ga);
    rgraph_free(small);
    rgraph_free(large);
    cllm_log_set(NULL, NULL);
}

static void test_bad_arguments(void) {
    cllm_buffer_type *bufts[2] = {cllm_cpu_buffer_type(), &g_test_buft};
    rgraph *rg = rgraph_new(99, 30, false);
    cllm_galloc *ga = cllm_galloc_new(bufts, 2);
    cllm_log_set(quiet, NULL);
    int *ids = calloc((size_t)rg->g->n_nodes + 1, sizeof(int));
    ids[rg->g->n_nodes - 1] = 2;
    CHECK(cllm_galloc_measure(ga, rg->g, ids, NULL) == CLLM_ERR_INVALID_ARG);
    ids[rg->g->n_nodes - 1] = -1;
    CHECK(cllm_galloc_measure(ga, rg->g, ids, NULL) == CLLM_ERR_INVALID_ARG);
    CHECK(nothing_placed(rg));
    /* alloc before reserve */
    CHECK(cllm_galloc_alloc_graph(ga, rg->g, NULL, NULL) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "reserve") != NULL);
    CHECK(nothing_placed(rg));

    /* a device allocation failure in reserve keeps the old buffers */
    CHECK(cllm_galloc_measure(ga, rg->g, NULL, NULL) == CLLM_OK);
    CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
    cllm_buffer *b0 = cllm_galloc_buffer(ga, 0), *b1 = cllm_galloc_buffer(ga, 1);
    rgraph *more = rgraph_new(100, 120, false);
    int *ones = malloc(((size_t)more->g->n_nodes + 1) * sizeof(int));
    int *lones = malloc(((size_t)more->g->n_leafs + 1) * sizeof(int));
    for (int i = 0; i < more->g->n_nodes; i++) ones[i] = 1;
    for (int i = 0; i < more->g->n_leafs; i++) lones[i] = i % 2;
    CHECK(cllm_galloc_measure(ga, more->g, ones, lones) == CLLM_OK);
    const size_t cpu0 = cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE);
    g_test_buft_fail = true;
    CHECK(cllm_galloc_reserve(ga) == CLLM_ERR_DEVICE_MEMORY);
    g_test_buft_fail = false;
    CHECK(cllm_galloc_buffer(ga, 0) == b0 && cllm_galloc_buffer(ga, 1) == b1);
    CHECK(cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE) == cpu0);
    CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
    CHECK(cllm_buffer_size(cllm_galloc_buffer(ga, 1)) == cllm_galloc_measured_size(ga, 1));
    CHECK(cllm_galloc_alloc_graph(ga, more->g, ones, lones) == CLLM_OK);
    CHECK(check_graph(more->g, "two buffer types", 100));
    cllm_log_set(NULL, NULL);
    free(ids);
    free(ones);
    free(lones);
    cllm_galloc_free(ga);
    rgraph_free(rg);
    rgraph_free(more);
    cllm_galloc_free(NULL);
}

/* The checker catches broken placements. */
static void test_checker_catches(void) {
    cllm_context *ctx = cllm_context_new(32);
    cllm_tensor *x = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 64);
    cllm_tensor *a = cllm_scale(ctx, x, 2.0f);
    cllm_tensor *b = cllm_scale(ctx, x, 3.0f);
    cllm_tensor *c = cllm_add(ctx, a, b);
    cllm_tensor *d = cllm_silu(ctx, c);
    cllm_graph *g = cllm_graph_new(32);
    cllm_graph_build(g, d);
    cllm_buffer *buf = NULL;
    CHECK(cllm_buffer_type_alloc(cllm_cpu_buffer_type(), 4096, CLLM_MEM_COMPUTE, &buf) == CLLM_OK);
    char err[256] = "";
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "not placed"));
    /* x, a, b, then c in place of a, d in place of c: fine */
    cllm_buffer_place_tensor(buf, x, 0);
    cllm_buffer_place_tensor(buf, a, 256);
    cllm_buffer_place_tensor(buf, b, 512);
    cllm_buffer_place_tensor(buf, c, 256);
    cllm_buffer_place_tensor(buf, d, 256);
    CHECK(cllm_galloc_check(g, err, sizeof(err)));
    /* b where a is: both live at c's step */
    cllm_buffer_place_tensor(buf, b, 256);
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "overlap"));
    /* b over the input */
    cllm_buffer_place_tensor(buf, b, 64);
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "[input]"));
    cllm_buffer_place_tensor(buf, b, 512);
    /* in place at an offset is not in place */
    cllm_buffer_place_tensor(buf, c, 320);
    CHECK(!cllm_galloc_check(g, err, sizeof(err)));
    cllm_buffer_place_tensor(buf, c, 256);
    /* unaligned, out of the buffer */
    c->data = (char *)c->data + 4;
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "aligned"));
    cllm_buffer_place_tensor(buf, c, 256);
    d->data = (char *)cllm_buffer_base(buf) + 4096 - 64;
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "outside"));
    cllm_buffer_place_tensor(buf, d, 768);
    CHECK(cllm_galloc_check(g, err, sizeof(err)));
    /* an output (d) must not be an in-place source, nor overwritten */
    cllm_tensor *e = cllm_scale(ctx, d, 1.0f);
    cllm_graph_build(g, e);
    cllm_buffer_place_tensor(buf, e, 768);
    cllm_tensor_set_output(d);
    CHECK(!cllm_galloc_check(g, err, sizeof(err)) && strstr(err, "[output]"));
    cllm_buffer_free(buf);
    cllm_graph_free(g);
    cllm_context_free(ctx);
}

/* ---- compute: planned graphs give the results of graphs without reuse -- */

static void fill_f32(rng *r, cllm_tensor *t) {
    const int64_t n = cllm_nelements(t);
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = rng_float(r);
    if (t->type == CLLM_TYPE_F32) {
        cllm_tensor_set_all(t, v);
    } else {
        cllm_fp16 *h = malloc((size_t)n * sizeof(*h));
        for (int64_t i = 0; i < n; i++) h[i] = cllm_fp32_to_fp16(v[i]);
        cllm_tensor_set_all(t, h);
        free(h);
    }
    free(v);
}

/* Statics and inputs of rg, from `seed`: the same values for the same seed. */
static void fill_random_graph(rgraph *rg, unsigned long long seed) {
    rng r = {seed};
    for (int i = 0; i < cllm_context_n_tensors(rg->sctx); i++)
        fill_f32(&r, cllm_context_tensor(rg->sctx, i));
    for (int i = 0; i < rg->g->n_leafs; i++) {
        cllm_tensor *t = rg->g->leafs[i];
        if (t->buffer == rg->sbuf) continue;
        if (t->type != CLLM_TYPE_I32) {
            fill_f32(&r, t);
            continue;
        }
        int32_t mod = 1;
        for (int k = 0; k < rg->n_ints; k++) {
            if (rg->ints[k] == t) mod = rg->int_mod[k];
        }
        const int64_t n = cllm_nelements(t);
        int32_t *v = malloc((size_t)n * sizeof(*v));
        for (int64_t k = 0; k < n; k++) v[k] = (int32_t)rng_int(&r, mod);
        cllm_tensor_set_all(t, v);
        free(v);
    }
}

/* The bytes of every output of g (nodes nobody reads, flagged outputs),
 * gathered element by element (outputs may be views), appended to out. */
static size_t gather_outputs(const cllm_graph *g, float *out, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cllm_tensor *t = g->nodes[i];
        bool read = false;
        for (int j = i + 1; j < g->n_nodes && !read; j++) {
            for (int s = 0; s < CLLM_MAX_SRC; s++) read |= g->nodes[j]->src[s] == t;
        }
        if (read && !(t->flags & CLLM_TENSOR_FLAG_OUTPUT)) continue;
        for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                        const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                        i2 * t->nb[2] + i3 * t->nb[3];
                        float f;
                        if (t->type == CLLM_TYPE_F32) {
                            memcpy(&f, p, sizeof(f));
                        } else if (t->type == CLLM_TYPE_F16) {
                            cllm_fp16 h;
                            memcpy(&h, p, sizeof(h));
                            f = cllm_fp16_to_fp32(h);
                        } else {
                            continue;
                        }
                        if (n < cap) out[n] = f;
                        n++;
                    }
    }
    return n;
}

#define OUT_CAP (1 << 20)

static void test_compute_random(void) {
    cllm_backend *be = NULL;
    CHECK(cllm_backend_cpu_new(2, &be) == CLLM_OK);
    float *ref = malloc(OUT_CAP * sizeof(float)), *got = malloc(OUT_CAP * sizeof(float));
    cllm_buffer_type *bufts[2] = {cllm_cpu_buffer_type(), &g_test_buft};
    int n_done = 0, n_skipped = 0;
    for (int i = 0; i < 300; i++) {
        const unsigned long long seed = 50000 + (unsigned long long)i;
        rng r = {seed};
        const int n_ops = 1 + rng_int(&r, 40);
        /* without reuse: every tensor its own memory */
        rgraph *plain = rgraph_new(seed, n_ops, true);
        if (!plain->computable) {
            n_skipped++;
            rgraph_free(plain);
            continue;
        }
        cllm_buffer *pbuf = NULL;
        CHECK(cllm_layout_alloc(plain->ctx, cllm_cpu_buffer_type(), CLLM_MEM_COMPUTE, &pbuf) ==
              CLLM_OK);
        for (int k = 0; k < cllm_context_n_tensors(plain->ctx); k++) {
            cllm_tensor *t = cllm_context_tensor(plain->ctx, k);
            if (t->view_src && !t->data) cllm_tensor_init_view(t); /* views of statics */
        }
        fill_random_graph(plain, seed);
        CHECK(cllm_backend_graph_compute(be, plain->g) == CLLM_OK);
        const size_t n_ref = gather_outputs(plain->g, ref, OUT_CAP);

        /* planned, over one or two buffer types, with reuse */
        rgraph *planned = rgraph_new(seed, n_ops, true);
        const bool two = i % 2 == 1;
        int *node_buft = calloc((size_t)planned->g->n_nodes + 1, sizeof(int));
        int *leaf_buft = calloc((size_t)planned->g->n_leafs + 1, sizeof(int));
        if (two) random_bufts(planned->g, &r, node_buft, leaf_buft);
        cllm_galloc *ga = cllm_galloc_new(bufts, two ? 2 : 1);
        CHECK(cllm_galloc_measure(ga, planned->g, node_buft, leaf_buft) == CLLM_OK);
        CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
        for (int b = 0; b < cllm_galloc_n_bufts(ga); b++)
            cllm_buffer_clear(cllm_galloc_buffer(ga, b), 0x7f);
        CHECK(cllm_galloc_alloc_graph(ga, planned->g, node_buft, leaf_buft) == CLLM_OK);
        check_graph(planned->g, "compute", seed);
        fill_random_graph(planned, seed);
        CHECK(cllm_backend_graph_compute(be, planned->g) == CLLM_OK);
        const size_t n_got = gather_outputs(planned->g, got, OUT_CAP);
        CHECKF(n_got == n_ref &&
                   memcmp(ref, got, CLLM_MIN(n_ref, (size_t)OUT_CAP) * sizeof(float)) == 0,
               "seed %llu: results differ with memory reuse", seed);
        n_done++;
        cllm_galloc_free(ga);
        free(node_buft);
        free(leaf_buft);
        cllm_buffer_free(pbuf);
        rgraph_free(plain);
        rgraph_free(planned);
    }
    printf("compute: %d random graphs identical with and without reuse (%d skipped)\n", n_done,
           n_skipped);
    CHECK(n_done > 100);
    free(ref);
    free(got);
    cllm_backend_free(be);
}

/* Inputs of a llama graph: token ids, positions, causal mask. */
static void fill_llama_inputs(llama_graph *lg, int64_t n_vocab) {
    const int64_t nt = lg->n_tokens, nkv = lg->n_kv, past = nkv - nt;
    int32_t *ids = malloc((size_t)nt * sizeof(int32_t)),
            *pos = malloc((size_t)nt * sizeof(int32_t));
    float *mask = malloc((size_t)(nt * nkv) * sizeof(float));
    for (int64_t i = 0; i < nt; i++) {
        ids[i] = (int32_t)((i * 31 + 7) % n_vocab);
        pos[i] = (int32_t)(past + i);
        for (int64_t j = 0; j < nkv; j++) mask[i * nkv + j] = j <= past + i ? 0.0f : -INFINITY;
    }
    cllm_tensor_set_all(lg->tokens, ids);
    cllm_tensor_set_all(lg->pos, pos);
    cllm_tensor_set_all(lg->mask, mask);
    free(ids);
    free(pos);
    free(mask);
}

static void fill_llama_model(llama_model_fixture *m, unsigned long long seed) {
    rng r = {seed};
    for (int i = 0; i < cllm_context_n_tensors(m->wctx); i++)
        fill_f32(&r, cllm_context_tensor(m->wctx, i));
    for (int i = 0; i < cllm_context_n_tensors(m->sctx); i++)
        fill_f32(&r, cllm_context_tensor(m->sctx, i));
}

static void test_compute_llama(void) {
    cllm_backend *be = NULL;
    CHECK(cllm_backend_cpu_new(2, &be) == CLLM_OK);
    for (int fused = 0; fused < 2; fused++) {
        llama_graph_params p = small_llama(fused);
        llama_model_fixture m;
        CHECK(llama_model_init(&m, &p, false) == CLLM_OK);
        static const int64_t cases[][2] = {{8, 8}, {1, 9}, {5, 20}};
        for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
            float ref[97], got[97];
            /* without reuse */
            llama_graph a;
            CHECK(llama_graph_build(&a, &m, cases[c][0], cases[c][1]) == CLLM_OK);
            cllm_buffer *abuf = NULL;
            CHECK(cllm_layout_alloc(a.ctx, cllm_cpu_buffer_type(), CLLM_MEM_COMPUTE, &abuf) ==
                  CLLM_OK);
            fill_llama_model(&m, 4242);
            fill_llama_inputs(&a, p.n_vocab);
            CHECK(cllm_backend_graph_compute(be, a.graph) == CLLM_OK);
            cllm_tensor_get_all(a.logits, ref);
            /* planned */
            llama_graph b;
            CHECK(llama_graph_build(&b, &m, cases[c][0], cases[c][1]) == CLLM_OK);
            cllm_galloc *ga = cpu_galloc();
            CHECK(cllm_galloc_measure(ga, b.graph, NULL, NULL) == CLLM_OK);
            CHECK(cllm_galloc_reserve(ga) == CLLM_OK);
            cllm_buffer_clear(cllm_galloc_buffer(ga, 0), 0xff);
            CHECK(cllm_galloc_alloc_graph(ga, b.graph, NULL, NULL) == CLLM_OK);
            check_graph(b.graph, "llama compute", (unsigned long long)c);
            cllm_galloc_stats st;
            cllm_galloc_get_stats(ga, 0, &st);
            CHECK(st.planned < cllm_buffer_size(abuf));
            fill_llama_model(&m, 4242);
            fill_llama_inputs(&b, p.n_vocab);
            CHECK(cllm_backend_graph_compute(be, b.graph) == CLLM_OK);
            cllm_tensor_get_all(b.logits, got);
            CHECKF(memcmp(ref, got, sizeof(ref)) == 0, "llama %s %lld/%lld: logits differ",
                   fused ? "fused" : "unfused", (long long)cases[c][0], (long long)cases[c][1]);
            bool finite = true;
            for (int i = 0; i < 97; i++) finite &= isfinite(got[i]) != 0;
            CHECK(finite);
            cllm_galloc_free(ga);
            cllm_buffer_free(abuf);
            llama_graph_free(&a);
            llama_graph_free(&b);
        }
        llama_model_free(&m);
    }
    cllm_backend_free(be);
}

int main(void) {
    test_inplace_chain();
    test_no_inplace_cases();
    test_view_keeps_source();
    test_static_and_views_of_static();
    test_offline_beats_graph_order();
    test_checker_catches();
    test_random_graphs();
    test_llama_graphs();
    test_measure_reserve_alloc();
    test_out_of_host_memory();
    test_bad_arguments();
    test_compute_random();
    test_compute_llama();
    return check_summary("test_galloc");
}
