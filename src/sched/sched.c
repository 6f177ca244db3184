/* The scheduler (sched.h): assignment, splits, copies, planning, running. */
#include "sched/sched.h"
#include "core/hostmem.h"
#include "alloc/galloc.h"
#include "backend/backend-impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct sched_copy {
    cllm_tensor *src;  /* what is copied (a node, an input, a view or a weight) */
    cllm_tensor **dst; /* [n_copies] instances in the consumer's compute buffer */
    void *dst0_data;   /* instance 0's placement, restored between rotations */
    int backend;
    int split;
    /* asynchronous copies (docs/vulkan.md, "Submission"): `from`, the
     * backend whose memory holds src (-1: none of ours); issued after split
     * `issue_after` (-1: before the first) once src is final there and the
     * consumer's backend has no split left before `split` (so nothing
     * between uses dst's bytes); `first_reader`: the first node of `split`
     * that reads it, before which a download is waited for */
    int from;
    int issue_after;
    int first_reader;
    bool waits; /* this run: a download from `from`, waited for at first_reader */
} sched_copy;

typedef struct sched_split {
    int backend;
    int first, n;   /* range in s->split_nodes */
    int first_copy; /* copies [first_copy, first_copy + n_copies) run before it */
    int n_copies;
    size_t copy_bytes;
    int prev_same; /* the split before it on the same backend (-1: none) */
} sched_split;

typedef struct rewire {
    cllm_tensor *node;
    int j;
    cllm_tensor *orig;
} rewire;

/* tensor -> value, open addressing */
typedef struct ptr_map {
    const cllm_tensor **keys;
    int *vals;
    size_t size; /* power of two */
} ptr_map;

struct cllm_sched {
    int n_backends;
    cllm_backend *backends[CLLM_SCHED_MAX_BACKENDS];
    cllm_buffer_type *bufts[CLLM_SCHED_MAX_BACKENDS];
    cllm_sched_params params;
    cllm_galloc *galloc;

    size_t ws_planned[CLLM_SCHED_MAX_BACKENDS];

    /* the graph last scheduled */
    cllm_graph *g;
    cllm_context *cctx; /* copy tensors */
    int cctx_cap;
    ptr_map where;         /* tensor -> backend (nodes, planned leafs) */
    ptr_map written;       /* root tensor -> the last split so far that writes it */
    ptr_map planned_leafs; /* leafs planned last time (data there is ours) */

    sched_copy *copies;
    int n_copies, cap_copies;
    sched_split *splits;
    int n_splits, cap_splits;
    cllm_tensor **split_nodes; /* compute nodes, split by split */
    int n_split_nodes, cap_split_nodes;
    rewire *rewires;
    int n_rewires, cap_rewires;

    cllm_graph *cg; /* the combined graph given to the planner */
    int *node_buft, *leaf_buft;
    int cg_cap;

    uint64_t n_runs;

    /* (optional) gates of the graph computed next (cllm_sched_set_gates) */
    const cllm_sched_gate *gates;
    int n_gates;
    cllm_sched_gate_fn gate_fn;
    void *gate_user;
};

/* ---- small containers -------------------------------------------------- */

static cllm_status map_reset(ptr_map *m, size_t n) {
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    if (size > m->size) {
        const cllm_tensor **k = cllm_calloc(size, sizeof(*k));
        int *v = cllm_calloc(size, sizeof(*v));
        if (!k || !v) {
            cllm_free(k);
            cllm_free(v);
            return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
        }
        cllm_free(m->keys);
        cllm_free(m->vals);
        m->keys = k;
        m->vals = v;
        m->size = size;
    } else {
        memset(m->keys, 0, m->size * sizeof(*m->keys));
    }
    return CLLM_OK;
}

static void map_free(ptr_map *m) {
    cllm_free(m->keys);
    cllm_free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* Callers size maps for every key they insert (load factor <= 1/2). */
static void map_set(ptr_map *m, const cllm_tensor *t, int v) {
    size_t i = cllm_hash_ptr(t, m->size);
    while (m->keys[i] && m->keys[i] != t) i = (i + 1) & (m->size - 1);
    m->keys[i] = t;
    m->vals[i] = v;
}

static int map_get(const ptr_map *m, const cllm_tensor *t, int dflt) {
    if (!m->size) return dflt;
    size_t i = cllm_hash_ptr(t, m->size);
    while (m->keys[i]) {
        if (m->keys[i] == t) return m->vals[i];
        i = (i + 1) & (m->size - 1);
    }
    return dflt;
}

/* Grows *arr (of *cap elements of `elem` bytes) to hold n. */
static cllm_status grow(void **arr, int *cap, int n, size_t elem) {
    if (n <= *cap) return CLLM_OK;
    int c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    void *p = cllm_realloc(*arr, (size_t)c * elem);
    if (!p) return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    *arr = p;
    *cap = c;
    return CLLM_OK;
}

/* ---- lifecycle --------------------------------------------------------- */

cllm_sched_params cllm_sched_default_params(void) {
    return (cllm_sched_params){.n_copies = 1, .verbose = false};
}

cllm_status cllm_sched_new(cllm_backend *const *backends, int n, const cllm_sched_params *params,
                           cllm_sched **out) {
    const cllm_sched_params p = params ? *params : cllm_sched_default_params();
    if (n < 1 || n > CLLM_SCHED_MAX_BACKENDS) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sched: %d backends (1..%d)", n,
                          CLLM_SCHED_MAX_BACKENDS);
    }
    if (p.n_copies < 1 || p.n_copies > 8) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sched: %d pipeline copies (1..8)", p.n_copies);
    }
    cllm_sched *s = cllm_calloc(1, sizeof(*s));
    if (!s) return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    s->n_backends = n;
    s->params = p;
    const char *env = getenv("CLLM_SCHED_VERBOSE");
    if (env && strcmp(env, "0") != 0 && *env) s->params.verbose = true;
    for (int i = 0; i < n; i++) {
        s->backends[i] = backends[i];
        s->bufts[i] = cllm_device_buffer_type(cllm_backend_device(backends[i]));
    }
    s->galloc = cllm_galloc_new(s->bufts, n);
    if (!s->galloc) {
        cllm_free(s);
        return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    }
    *out = s;
    return CLLM_OK;
}

static void free_copies(cllm_sched *s) {
    for (int i = 0; i < s->n_copies; i++) cllm_free(s->copies[i].dst);
    s->n_copies = 0;
}

void cllm_sched_free(cllm_sched *s) {
    if (!s) return;
    free_copies(s);
    cllm_galloc_free(s->galloc);
    cllm_context_free(s->cctx);
    map_free(&s->where);
    map_free(&s->written);
    map_free(&s->planned_leafs);
    cllm_free(s->copies);
    cllm_free(s->splits);
    cllm_free(s->split_nodes);
    cllm_free(s->rewires);
    cllm_graph_free(s->cg);
    cllm_free(s->node_buft);
    cllm_free(s->leaf_buft);
    cllm_free(s);
}

/* ---- assignment -------------------------------------------------------- */

static cllm_tensor *root_of(cllm_tensor *t) {
    while (t->view_src) t = t->view_src;
    return t;
}

static bool is_compute(const cllm_tensor *t) { return !cllm_op_is_view(t->op); }

/* A tensor with data the scheduler does not plan: weights, KV cache. */
static bool is_static(const cllm_sched *s, const cllm_tensor *r) {
    if (r->op != CLLM_OP_NONE || !r->data || !r->buffer) return false;
    return map_get(&s->planned_leafs, r, 0) == 0;
}

static cllm_device *dev_of(const cllm_sched *s, int b) {
    return cllm_backend_device(s->backends[b]);
}

static bool supports(const cllm_sched *s, int b, const cllm_tensor *node) {
    return cllm_device_supports_op(dev_of(s, b), node);
}

/* The first backend on the device of static tensor r's buffer, or -1. */
static int backend_of_static(const cllm_sched *s, const cllm_tensor *r) {
    const cllm_device *d = cllm_buffer_type_device(cllm_buffer_buft(r->buffer));
    for (int b = 0; b < s->n_backends; b++) {
        if (dev_of(s, b) == d) return b;
    }
    return -1;
}

/* The first backend that can read static tensor r in place, or -1. */
static int backend_reading_static(const cllm_sched *s, const cllm_tensor *r) {
    int b = backend_of_static(s, r);
    if (b >= 0) return b;
    for (b = 0; b < s->n_backends; b++) {
        if (cllm_device_supports_buft(dev_of(s, b), cllm_buffer_buft(r->buffer))) return b;
    }
    return -1;
}

static cllm_status assign(cllm_sched *s, cllm_graph *g) {
    const int n = g->n_nodes, last = s->n_backends - 1;
    ptr_map *w = &s->where;
    /* 1. static inputs pin their consumers; cpy into a static tensor must
     *    run where it lives */
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = g->nodes[i];
        if (!is_compute(t)) continue;
        if (t->op == CLLM_OP_CPY && t->src[1]) {
            cllm_tensor *r = root_of(t->src[1]);
            if (is_static(s, r)) {
                const int b = backend_reading_static(s, r);
                if (b < 0 || !supports(s, b, t)) {
                    return cllm_error(CLLM_ERR_UNSUPPORTED,
                                      "sched: no backend can write %s (%s) into %s on %s", t->name,
                                      cllm_op_name(t->op), r->name,
                                      cllm_buffer_type_name(cllm_buffer_buft(r->buffer)));
                }
                map_set(w, t, b);
            }
            continue;
        }
        int best = -1;
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            if (!t->src[j]) continue;
            cllm_tensor *r = root_of(t->src[j]);
            if (!is_static(s, r)) continue;
            const int b = backend_of_static(s, r);
            if (b >= 0 && (best < 0 || b < best) && supports(s, b, t)) best = b;
        }
        if (best >= 0) map_set(w, t, best);
    }
    /* 2. neighbours follow neighbours (not the last resort) */
    for (int pass = 0; pass < 2; pass++) {
        int cur = -1;
        for (int k = 0; k < n; k++) {
            cllm_tensor *t = g->nodes[pass == 0 ? k : n - 1 - k];
            if (!is_compute(t)) continue;
            const int b = map_get(w, t, -1);
            if (b >= 0) {
                cur = b == last ? -1 : b;
            } else if (cur >= 0 && supports(s, cur, t)) {
                map_set(w, t, cur);
            }
        }
    }
    /* 3. the rest: the previous node's backend, else the first that can */
    int prev = -1;
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = g->nodes[i];
        if (!is_compute(t)) continue;
        int b = map_get(w, t, -1);
        if (b < 0) {
            if (prev >= 0 && supports(s, prev, t)) {
                b = prev;
            } else {
                for (int c = 0; c < s->n_backends && b < 0; c++) {
                    if (supports(s, c, t)) b = c;
                }
            }
            if (b < 0) {
                return cllm_error(CLLM_ERR_UNSUPPORTED, "sched: no backend can compute %s (%s)",
                                  t->name, cllm_op_name(t->op));
            }
            map_set(w, t, b);
        }
        /* a cpy into a computed tensor runs where that tensor lives */
        if (t->op == CLLM_OP_CPY && t->src[1] && !is_static(s, root_of(t->src[1]))) {
            const cllm_tensor *r = root_of(t->src[1]);
            const int rb = map_get(w, r, -1);
            if (rb >= 0 && rb != b) {
                if (!supports(s, rb, t)) {
                    return cllm_error(
                        CLLM_ERR_UNSUPPORTED, "sched: %s cannot compute %s (%s) into %s",
                        cllm_backend_name(s->backends[rb]), t->name, cllm_op_name(t->op), r->name);
                }
                b = rb;
                map_set(w, t, b);
            }
        }
        prev = b;
    }
    /* graph inputs live with their first consumer */
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = g->nodes[i];
        if (!is_compute(t)) continue;
        const int b = map_get(w, t, -1);
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            if (!t->src[j]) continue;
            cllm_tensor *r = root_of(t->src[j]);
            if (r->op == CLLM_OP_NONE && !is_static(s, r) && map_get(w, r, -1) < 0) {
                map_set(w, r, b);
            }
        }
    }
    for (int i = 0; i < g->n_leafs; i++) {
        cllm_tensor *l = g->leafs[i];
        if (!is_static(s, l) && map_get(w, l, -1) < 0) map_set(w, l, last);
    }
    /* views: where their root is */
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = g->nodes[i];
        if (is_compute(t)) continue;
        cllm_tensor *r = root_of(t);
        const int b = is_static(s, r) ? backend_reading_static(s, r) : map_get(w, r, -1);
        map_set(w, t, b);
    }
    return CLLM_OK;
}

/* ---- splits and copies ------------------------------------------------- */

/* Whether backend b can read t (a source) where it is. */
static bool can_read(const cllm_sched *s, int b, cllm_tensor *t) {
    cllm_tensor *r = root_of(t);
    if (is_static(s, r))
        return cllm_device_supports_buft(dev_of(s, b), cllm_buffer_buft(r->buffer));
    const int rb = map_get(&s->where, r, -1);
    return rb == b || (rb >= 0 && cllm_device_supports_buft(dev_of(s, b), s->bufts[rb]));
}

/* The copy of `src` on backend b (s->copies[*k]), made before split
 * `split` if new. */
static cllm_status get_copy(cllm_sched *s, cllm_tensor *src, int b, int split, cllm_tensor **out,
                            int *k_out) {
    for (int k = 0; k < s->n_copies; k++) {
        if (s->copies[k].src == src && s->copies[k].backend == b) {
            *out = s->copies[k].dst[0];
            *k_out = k;
            return CLLM_OK;
        }
    }
    CLLM_TRY(grow((void **)&s->copies, &s->cap_copies, s->n_copies + 1, sizeof(*s->copies)));
    const int nc = s->params.n_copies;
    if (cllm_context_n_tensors(s->cctx) + nc > s->cctx_cap) {
        return cllm_error(CLLM_ERR_NOMEM, "sched: more copies than planned (%d)", s->cctx_cap);
    }
    cllm_tensor *r = root_of(src);
    const int ready = map_get(&s->written, r, -1);
    sched_copy c = {.src = src,
                    .backend = b,
                    .split = split,
                    .from = is_static(s, r) ? backend_of_static(s, r) : map_get(&s->where, r, -1),
                    .issue_after = CLLM_MAX(ready, s->splits[split].prev_same),
                    .first_reader = -1};
    c.dst = cllm_calloc((size_t)nc, sizeof(*c.dst));
    if (!c.dst) return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    for (int i = 0; i < nc; i++) {
        cllm_tensor *d = cllm_tensor_new(s->cctx, src->type, 4, src->ne);
        memcpy(d->nb, src->nb, sizeof(d->nb)); /* same layout: a byte copy */
        cllm_tensor_set_name(d, "%.40s#%s#%d", src->name, cllm_backend_name(s->backends[b]), i);
        if (i == 0) {
            /* a node reading src, so that src lives until the copy */
            d->op = CLLM_OP_CONT;
            d->src[0] = src;
        }
        if (nc > 1) cllm_tensor_set_input(d); /* instances never share memory */
        c.dst[i] = d;
        map_set(&s->where, d, b);
    }
    *k_out = s->n_copies;
    s->copies[s->n_copies++] = c;
    *out = c.dst[0];
    return CLLM_OK;
}

static void restore_sources(cllm_sched *s) {
    for (int i = s->n_rewires - 1; i >= 0; i--) {
        s->rewires[i].node->src[s->rewires[i].j] = s->rewires[i].orig;
    }
    s->n_rewires = 0;
}

static cllm_status split_graph(cllm_sched *s, cllm_graph *g) {
    const int n = g->n_nodes;
    free_copies(s);
    s->n_splits = 0;
    s->n_split_nodes = 0;
    s->n_rewires = 0;
    s->g = g;
    /* nodes, leafs and every copy instance (at most one per node source) */
    const size_t keys =
        ((size_t)n + (size_t)g->n_leafs) * (1 + CLLM_MAX_SRC * (size_t)s->params.n_copies) + 16;
    CLLM_TRY(map_reset(&s->where, keys));
    CLLM_TRY(map_reset(&s->written, 2 * (size_t)n + 16)); /* nodes and cpy targets */
    int last_of[CLLM_SCHED_MAX_BACKENDS];
    for (int b = 0; b < CLLM_SCHED_MAX_BACKENDS; b++) last_of[b] = -1;
    /* at most one copy per source per backend, bounded by the sources */
    const int cap = (int)CLLM_MIN((int64_t)(n * CLLM_MAX_SRC + 16) * s->params.n_copies,
                                  (int64_t)INT32_MAX / 2);
    if (!s->cctx || s->cctx_cap < cap) {
        cllm_context_free(s->cctx);
        s->cctx = cllm_context_new(cap);
        s->cctx_cap = s->cctx ? cap : 0;
        if (!s->cctx) return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    } else {
        cllm_context_reset(s->cctx);
    }
    CLLM_TRY(assign(s, g));

    CLLM_TRY(grow((void **)&s->split_nodes, &s->cap_split_nodes, n, sizeof(*s->split_nodes)));
    int cur = -1;
    for (int i = 0; i < n; i++) {
        cllm_tensor *t = g->nodes[i];
        if (!is_compute(t)) continue;
        const int b = map_get(&s->where, t, -1);
        if (b != cur) {
            CLLM_TRY(
                grow((void **)&s->splits, &s->cap_splits, s->n_splits + 1, sizeof(*s->splits)));
            s->splits[s->n_splits++] = (sched_split){.backend = b,
                                                     .first = s->n_split_nodes,
                                                     .first_copy = s->n_copies,
                                                     .prev_same = last_of[b]};
            last_of[b] = s->n_splits - 1;
            cur = b;
        }
        sched_split *sp = &s->splits[s->n_splits - 1];
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            cllm_tensor *src = t->src[j];
            if (!src || (t->op == CLLM_OP_CPY && j == 1)) continue; /* cpy writes where it runs */
            if (can_read(s, b, src)) continue;
            const int before = s->n_copies;
            cllm_tensor *c = NULL;
            int k = 0;
            CLLM_TRY(get_copy(s, src, b, s->n_splits - 1, &c, &k));
            sp = &s->splits[s->n_splits - 1];
            if (s->n_copies > before) {
                sp->n_copies++;
                sp->copy_bytes += cllm_nbytes(src);
            }
            sched_copy *ck = &s->copies[k];
            if (ck->split == s->n_splits - 1 && ck->first_reader < 0) ck->first_reader = sp->n;
            CLLM_TRY(
                grow((void **)&s->rewires, &s->cap_rewires, s->n_rewires + 1, sizeof(*s->rewires)));
            s->rewires[s->n_rewires++] = (rewire){.node = t, .j = j, .orig = src};
            t->src[j] = c;
        }
        s->split_nodes[s->n_split_nodes++] = t;
        sp->n++;
        /* what the split writes: the node, and a cpy's destination */
        map_set(&s->written, root_of(t), s->n_splits - 1);
        if (t->op == CLLM_OP_CPY && t->src[1])
            map_set(&s->written, root_of(t->src[1]), s->n_splits - 1);
    }
    return CLLM_OK;
}

/* The graph the planner sees: per split its copies, then its nodes, with
 * views where they were; the leafs, then the extra copy instances. */
static cllm_status build_combined(cllm_sched *s, cllm_graph *g) {
    const int nc = s->params.n_copies;
    const int n_nodes = g->n_nodes + s->n_copies;
    const int n_leafs = g->n_leafs + s->n_copies * (nc - 1);
    const int need = CLLM_MAX(n_nodes, n_leafs);
    if (!s->cg || s->cg_cap < need) {
        cllm_graph_free(s->cg);
        cllm_free(s->node_buft);
        cllm_free(s->leaf_buft);
        s->cg = cllm_graph_new(need);
        s->node_buft = cllm_malloc((size_t)need * sizeof(int));
        s->leaf_buft = cllm_malloc((size_t)need * sizeof(int));
        s->cg_cap = s->cg && s->node_buft && s->leaf_buft ? need : 0;
        if (!s->cg_cap) return cllm_error(CLLM_ERR_NOMEM, "sched: out of host memory");
    }
    cllm_graph *cg = s->cg;
    cg->n_nodes = 0;
    cg->n_leafs = 0;
    int split = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        cllm_tensor *t = g->nodes[i];
        if (is_compute(t) && split < s->n_splits && s->split_nodes[s->splits[split].first] == t) {
            const sched_split *sp = &s->splits[split];
            for (int k = sp->first_copy; k < sp->first_copy + sp->n_copies; k++) {
                s->node_buft[cg->n_nodes] = s->copies[k].backend;
                cg->nodes[cg->n_nodes++] = s->copies[k].dst[0];
            }
            split++;
        }
        const int b = map_get(&s->where, t, -1);
        s->node_buft[cg->n_nodes] = b < 0 ? 0 : b;
        cg->nodes[cg->n_nodes++] = t;
    }
    CLLM_ASSERT(split == s->n_splits && cg->n_nodes == n_nodes);
    for (int i = 0; i < g->n_leafs; i++) {
        const int b = map_get(&s->where, g->leafs[i], -1);
        s->leaf_buft[cg->n_leafs] = b < 0 ? 0 : b;
        cg->leafs[cg->n_leafs++] = g->leafs[i];
    }
    for (int k = 0; k < s->n_copies; k++) {
        for (int i = 1; i < nc; i++) {
            s->leaf_buft[cg->n_leafs] = s->copies[k].backend;
            cg->leafs[cg->n_leafs++] = s->copies[k].dst[i];
        }
    }
    return CLLM_OK;
}

/* Leafs planned now have data in our buffers: remembered, so that they are
 * not taken for static tensors if the graph is scheduled again. */
static cllm_status remember_planned_leafs(cllm_sched *s) {
    CLLM_TRY(map_reset(&s->planned_leafs, (size_t)s->cg->n_leafs + 16));
    for (int i = 0; i < s->cg->n_leafs; i++) {
        cllm_tensor *l = s->cg->leafs[i];
        if (map_get(&s->where, l, -1) >= 0) map_set(&s->planned_leafs, l, 1);
    }
    return CLLM_OK;
}

/* A view of split i as a graph (compute nodes only). */
static cllm_graph split_view(const cllm_sched *s, int i) {
    const sched_split *sp = &s->splits[i];
    return (cllm_graph){.n_nodes = sp->n, .max_nodes = sp->n, .nodes = s->split_nodes + sp->first};
}

/* A tensor's name, or its op for unnamed ones. */
static const char *label(const cllm_tensor *t) {
    return t->name[0] ? t->name : cllm_op_name(t->op);
}

static void print_splits(const cllm_sched *s, FILE *f) {
    fprintf(f, "sched: %d nodes in %d splits, %d copies (%zu bytes)\n", s->n_split_nodes,
            s->n_splits, s->n_copies, cllm_sched_copy_bytes(s));
    for (int i = 0; i < s->n_splits; i++) {
        const sched_split *sp = &s->splits[i];
        fprintf(f, "  split %d: %s, %d nodes (%s .. %s)", i,
                cllm_backend_name(s->backends[sp->backend]), sp->n,
                label(s->split_nodes[sp->first]), label(s->split_nodes[sp->first + sp->n - 1]));
        if (sp->n_copies) fprintf(f, ", %d inputs copied:", sp->n_copies);
        fputc('\n', f);
        for (int k = sp->first_copy; k < sp->first_copy + sp->n_copies; k++) {
            const sched_copy *c = &s->copies[k];
            const cllm_tensor *r = root_of(c->src);
            const int from = is_static(s, r) ? -1 : map_get(&s->where, r, -1);
            fprintf(f, "    %s (%zu bytes) %s -> %s\n", label(c->src), cllm_nbytes(c->src),
                    from >= 0 ? cllm_backend_name(s->backends[from])
                              : cllm_buffer_type_name(cllm_buffer_buft(r->buffer)),
                    cllm_backend_name(s->backends[c->backend]));
        }
    }
}

/* ---- public ------------------------------------------------------------ */

cllm_status cllm_sched_reserve(cllm_sched *s, cllm_graph *g) {
    cllm_status st = split_graph(s, g);
    if (st == CLLM_OK) st = build_combined(s, g);
    if (st == CLLM_OK) st = cllm_galloc_measure(s->galloc, s->cg, s->node_buft, s->leaf_buft);
    if (st == CLLM_OK) st = remember_planned_leafs(s);
    if (st == CLLM_OK) {
        for (int i = 0; i < s->n_splits; i++) {
            cllm_graph sg = split_view(s, i);
            const int b = s->splits[i].backend;
            s->ws_planned[b] =
                CLLM_MAX(s->ws_planned[b], cllm_backend_workspace_size(s->backends[b], &sg));
        }
        if (s->params.verbose) print_splits(s, stderr);
    }
    restore_sources(s);
    s->g = NULL;
    return st;
}

cllm_status cllm_sched_alloc_buffers(cllm_sched *s) {
    cllm_status st = cllm_galloc_reserve(s->galloc);
    if (st != CLLM_OK) return st;
    for (int b = 0; b < s->n_backends; b++) {
        st = cllm_backend_reserve_workspace_bytes(s->backends[b], s->ws_planned[b]);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;
}

cllm_status cllm_sched_alloc_graph(cllm_sched *s, cllm_graph *g) {
    cllm_status st = split_graph(s, g);
    if (st == CLLM_OK) st = build_combined(s, g);
    if (st == CLLM_OK) st = cllm_galloc_alloc_graph(s->galloc, s->cg, s->node_buft, s->leaf_buft);
    if (st == CLLM_OK) st = remember_planned_leafs(s);
    if (st != CLLM_OK) {
        restore_sources(s);
        s->g = NULL;
        return st;
    }
    for (int k = 0; k < s->n_copies; k++) s->copies[k].dst0_data = s->copies[k].dst[0]->data;
    if (s->params.verbose) print_splits(s, stderr);
    return CLLM_OK;
}

void cllm_sched_set_gates(cllm_sched *s, const cllm_sched_gate *gates, int n, cllm_sched_gate_fn fn,
                          void *user) {
    s->gates = n > 0 ? gates : NULL;
    s->n_gates = n > 0 ? n : 0;
    s->gate_fn = fn;
    s->gate_user = user;
}

/* Runs the nodes of split view sg in pieces cut at the gates (*next: the
 * next gate not yet passed, in graph order). */
static cllm_status compute_gated(cllm_sched *s, int b, const cllm_graph *sg, int *next) {
    int from = 0;
    for (int i = 0; i < sg->n_nodes; i++) {
        const cllm_tensor *t = sg->nodes[i];
        while (*next < s->n_gates && s->gates[*next].node == t && !s->gates[*next].after) {
            if (i > from) {
                cllm_graph part = {
                    .n_nodes = i - from, .max_nodes = i - from, .nodes = sg->nodes + from};
                CLLM_TRY(cllm_backend_graph_compute(s->backends[b], &part));
                from = i;
            }
            CLLM_TRY(s->gate_fn(s->gate_user, s->gates[*next].id, false));
            (*next)++;
        }
        bool ran = false;
        while (*next < s->n_gates && s->gates[*next].node == t && s->gates[*next].after) {
            if (!ran) {
                cllm_graph part = {
                    .n_nodes = i + 1 - from, .max_nodes = i + 1 - from, .nodes = sg->nodes + from};
                CLLM_TRY(cllm_backend_graph_compute(s->backends[b], &part));
                CLLM_TRY(cllm_backend_synchronize(s->backends[b]));
                from = i + 1;
                ran = true;
            }
            CLLM_TRY(s->gate_fn(s->gate_user, s->gates[*next].id, true));
            (*next)++;
        }
    }
    if (sg->n_nodes > from) {
        cllm_graph part = {.n_nodes = sg->n_nodes - from,
                           .max_nodes = sg->n_nodes - from,
                           .nodes = sg->nodes + from};
        CLLM_TRY(cllm_backend_graph_compute(s->backends[b], &part));
    }
    return CLLM_OK;
}

/* ---- running ------------------------------------------------------------ */

/* Whether copy c is queued by a backend (an upload into a backend with
 * asynchronous transfers from host memory, or a download from one into
 * host memory) rather than made at once. */
static bool copy_is_async(const cllm_sched *s, const sched_copy *c) {
    const cllm_buffer *sb = c->src->buffer, *db = c->dst[0]->buffer;
    if (cllm_buffer_type_is_host(sb->buft) && !sb->is_measure &&
        cllm_backend_has_async(s->backends[c->backend]))
        return true;
    return cllm_buffer_type_is_host(db->buft) && !db->is_measure && c->from >= 0 &&
           cllm_backend_has_async(s->backends[c->from]);
}

/* Issues copy c: queued where a backend can (copy_is_async), else made now,
 * after both sides' queued work. */
static cllm_status issue_copy(cllm_sched *s, sched_copy *c) {
    cllm_tensor *src = c->src, *dst = c->dst[0];
    const size_t n = cllm_nbytes(src);
    c->waits = false;
    if (n == 0 || src->data == dst->data) return CLLM_OK;
    if (copy_is_async(s, c)) {
        if (cllm_buffer_type_is_host(src->buffer->buft) && !src->buffer->is_measure &&
            cllm_backend_has_async(s->backends[c->backend])) {
            return cllm_backend_tensor_set_async(s->backends[c->backend], dst, src->data, 0, n);
        }
        c->waits = true;
        return cllm_backend_tensor_get_async(s->backends[c->from], src, dst->data, 0, n);
    }
    if (c->from >= 0) {
        CLLM_TRY(cllm_backend_synchronize(s->backends[c->from]));
    } else {
        for (int b = 0; b < s->n_backends; b++) CLLM_TRY(cllm_backend_synchronize(s->backends[b]));
    }
    CLLM_TRY(cllm_backend_synchronize(s->backends[c->backend]));
    return cllm_tensor_copy(src, dst);
}

/* The queued copies to issue after split e (-1: before the first). */
static cllm_status issue_after(cllm_sched *s, int e) {
    for (int k = 0; k < s->n_copies; k++) {
        sched_copy *c = &s->copies[k];
        if (c->issue_after == e && c->split > e && copy_is_async(s, c)) CLLM_TRY(issue_copy(s, c));
    }
    return CLLM_OK;
}

/* Split i: the copies not queued before made, then its nodes, waiting for
 * the downloads into it only before the first node that reads one. */
static cllm_status run_split(cllm_sched *s, int i, int *gate) {
    const sched_split *sp = &s->splits[i];
    int first = sp->n;
    bool wait[CLLM_SCHED_MAX_BACKENDS] = {false};
    for (int k = sp->first_copy; k < sp->first_copy + sp->n_copies; k++) {
        sched_copy *c = &s->copies[k];
        if (!copy_is_async(s, c)) CLLM_TRY(issue_copy(s, c)); /* the others: queued before */
        if (c->waits) {
            wait[c->from] = true;
            if (c->first_reader >= 0) first = CLLM_MIN(first, c->first_reader);
        }
    }
    cllm_backend *be = s->backends[sp->backend];
    cllm_graph sg = split_view(s, i);
    if (s->n_gates) first = 0;
    if (first > 0) {
        cllm_graph part = {.n_nodes = first, .max_nodes = first, .nodes = sg.nodes};
        CLLM_TRY(cllm_backend_graph_compute_async(be, &part));
    }
    for (int b = 0; b < s->n_backends; b++) {
        if (wait[b]) CLLM_TRY(cllm_backend_synchronize(s->backends[b]));
    }
    if (first == sp->n) return CLLM_OK;
    cllm_graph rest = {
        .n_nodes = sp->n - first, .max_nodes = sp->n - first, .nodes = sg.nodes + first};
    if (s->n_gates) return compute_gated(s, sp->backend, &rest, gate);
    return cllm_backend_graph_compute_async(be, &rest);
}

cllm_status cllm_sched_graph_compute(cllm_sched *s, cllm_graph *g) {
    if (!g || g != s->g) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sched: compute of a graph not allocated");
    }
    int gate = 0;
    const int inst = (int)(s->n_runs++ % (uint64_t)s->params.n_copies);
    for (int k = 0; k < s->n_copies; k++) {
        sched_copy *c = &s->copies[k];
        c->dst[0]->data = inst == 0 ? c->dst0_data : c->dst[inst]->data;
        c->waits = false;
    }
    cllm_status st = issue_after(s, -1);
    for (int i = 0; i < s->n_splits && st == CLLM_OK; i++) {
        st = run_split(s, i, &gate);
        if (st == CLLM_OK) st = issue_after(s, i);
    }
    /* everything queued done (also after a failure: nothing may run on
     * into memory the caller reuses) */
    for (int b = 0; b < s->n_backends; b++) {
        const cllm_status ss = cllm_backend_synchronize(s->backends[b]);
        if (st == CLLM_OK) st = ss;
    }
    if (st != CLLM_OK) return st;
    if (gate < s->n_gates) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "sched: gate %d of %d (node %s) was not reached",
                          gate, s->n_gates, label(s->gates[gate].node));
    }
    return CLLM_OK;
}

int cllm_sched_n_backends(const cllm_sched *s) { return s->n_backends; }
cllm_backend *cllm_sched_backend(const cllm_sched *s, int i) { return s->backends[i]; }
int cllm_sched_n_splits(const cllm_sched *s) { return s->n_splits; }

cllm_sched_split cllm_sched_get_split(const cllm_sched *s, int i) {
    CLLM_ASSERT(i >= 0 && i < s->n_splits);
    const sched_split *sp = &s->splits[i];
    return (cllm_sched_split){.backend = sp->backend,
                              .n_nodes = sp->n,
                              .n_inputs = sp->n_copies,
                              .input_bytes = sp->copy_bytes};
}

int cllm_sched_n_copies(const cllm_sched *s) { return s->n_copies; }

size_t cllm_sched_copy_bytes(const cllm_sched *s) {
    size_t n = 0;
    for (int k = 0; k < s->n_copies; k++) n += cllm_nbytes(s->copies[k].src);
    return n;
}

int cllm_sched_node_backend(const cllm_sched *s, const cllm_tensor *t) {
    return map_get(&s->where, t, -1);
}

size_t cllm_sched_compute_planned(const cllm_sched *s, int i) {
    return cllm_galloc_measured_size(s->galloc, i);
}

size_t cllm_sched_compute_allocated(const cllm_sched *s, int i) {
    const cllm_buffer *b = cllm_galloc_buffer(s->galloc, i);
    return b ? cllm_buffer_size(b) : 0;
}

size_t cllm_sched_workspace_planned(const cllm_sched *s, int i) { return s->ws_planned[i]; }

size_t cllm_sched_workspace_allocated(const cllm_sched *s, int i) {
    return cllm_backend_workspace_allocated(s->backends[i]);
}

void cllm_sched_print(const cllm_sched *s, FILE *f) { print_splits(s, f); }
