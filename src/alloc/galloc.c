/*
 * The graph memory planner: tensor lifetimes from the graph, in-place chains
 * merged into allocation blocks, then an offline greedy placement of the
 * blocks per buffer type (several orderings, the smallest plan wins).
 *
 * Everything the planner computes lives in scratch arrays owned by the
 * galloc and grown to the largest graph seen, so that laying out a graph no
 * larger than a measured one allocates nothing. The sort is our own (qsort
 * may allocate) and so is the tensor -> index hash.
 */
#include "alloc/galloc.h"
#include "core/hostmem.h"
#include "backend/backend.h" /* buffer types and buffers only (docs/DESIGN.md, layers) */

#include <stdlib.h>
#include <string.h>

/* ---- state ------------------------------------------------------------- */

enum { KIND_STATIC, KIND_PLANNED, KIND_VIEW };

/* One tensor of the graph being planned: leafs first, then nodes. */
typedef struct gtensor {
    cllm_tensor *t;
    int step;       /* node index; -1 for leafs */
    int buft;       /* buffer type id (planned tensors) */
    int kind;       /* KIND_* */
    int root;       /* views: index of view_src (-1: static, outside the graph); else itself */
    int start, end; /* planned: live steps, inclusive */
    int block;      /* planned: allocation block */
    bool io;        /* planned: input or output, never shared */
    bool consumed;  /* some node reads it */
    size_t size;    /* planned: cllm_buffer_type_alloc_size */
} gtensor;

/* An allocation block: a planned tensor, or an in-place chain of them. */
typedef struct gblock {
    int buft;
    int start, end; /* union of its tensors' lifetimes */
    size_t size;    /* aligned; the largest of its tensors */
    size_t offset;
} gblock;

/* A sort key: ascending on k[0], k[1], k[2], then id. */
typedef struct sort_item {
    uint64_t k[3];
    int id;
} sort_item;

/* Results of one plan, per buffer type. */
typedef struct plan_info {
    size_t planned, lower, naive;
    int n_tensors, n_blocks, n_inplace;
    const char *strategy;
} plan_info;

struct cllm_galloc {
    int n_bufts;
    cllm_buffer_type **bufts;   /* [n_bufts] */
    cllm_buffer **measure_bufs; /* [n_bufts] measure mode, NULL until first needed */
    cllm_buffer **bufs;         /* [n_bufts] compute buffers, NULL until reserved */
    size_t *measured;           /* [n_bufts] largest measured plan */
    plan_info *last;            /* [n_bufts] the last successful plan */
    plan_info *cur;             /* [n_bufts] the plan being made */
    int fail_after;             /* fault injection: > 0 counts down host allocations */

    /* scratch for one plan, sized for `cap` tensors (nodes + leafs) */
    int cap;
    gtensor *tensors; /* [cap] */
    gblock *blocks;   /* [cap] */
    int n_blocks;
    sort_item *items;     /* [cap] */
    sort_item *items_tmp; /* [cap] merge sort scratch */
    int *placed;          /* [cap] blocks placed so far, by offset */
    size_t *offsets;      /* [cap] a candidate placement, by block id */
    size_t *live_start;   /* [cap] bytes of blocks starting at each step */
    size_t *live_end;     /* [cap] bytes of blocks ending at each step */
    int *hash;            /* [hash_size] tensor index + 1, 0 = empty */
    size_t hash_size;
};

/* Fault injection: true when the host allocation about to be made must fail. */
static bool fail_now(cllm_galloc *ga) { return ga->fail_after > 0 && --ga->fail_after == 0; }

static void *ga_malloc(cllm_galloc *ga, size_t size) {
    return fail_now(ga) ? NULL : cllm_malloc(size ? size : 1);
}

void cllm_galloc_fail_host_alloc_after(cllm_galloc *ga, int n) { ga->fail_after = n > 0 ? n : 0; }

/* ---- lifecycle --------------------------------------------------------- */

cllm_galloc *cllm_galloc_new(cllm_buffer_type *const *bufts, int n_bufts) {
    CLLM_ASSERTF(bufts != NULL && n_bufts >= 1, "galloc_new: %d buffer types", n_bufts);
    for (int i = 0; i < n_bufts; i++)
        CLLM_ASSERTF(bufts[i], "galloc_new: buffer type %d is NULL", i);
    cllm_galloc *ga = cllm_calloc(1, sizeof(*ga));
    if (!ga) return NULL;
    const size_t n = (size_t)n_bufts;
    ga->n_bufts = n_bufts;
    ga->bufts = cllm_calloc(n, sizeof(*ga->bufts));
    ga->measure_bufs = cllm_calloc(n, sizeof(*ga->measure_bufs));
    ga->bufs = cllm_calloc(n, sizeof(*ga->bufs));
    ga->measured = cllm_calloc(n, sizeof(*ga->measured));
    ga->last = cllm_calloc(n, sizeof(*ga->last));
    ga->cur = cllm_calloc(n, sizeof(*ga->cur));
    if (!ga->bufts || !ga->measure_bufs || !ga->bufs || !ga->measured || !ga->last || !ga->cur)
        goto fail;
    memcpy(ga->bufts, bufts, n * sizeof(*bufts));
    return ga;
fail:
    cllm_galloc_free(ga);
    return NULL;
}

static void free_scratch(cllm_galloc *ga) {
    cllm_free(ga->tensors);
    cllm_free(ga->blocks);
    cllm_free(ga->items);
    cllm_free(ga->items_tmp);
    cllm_free(ga->placed);
    cllm_free(ga->offsets);
    cllm_free(ga->live_start);
    cllm_free(ga->live_end);
    cllm_free(ga->hash);
}

void cllm_galloc_free(cllm_galloc *ga) {
    if (!ga) return;
    for (int i = 0; ga->bufs && i < ga->n_bufts; i++) cllm_buffer_free(ga->bufs[i]);
    for (int i = 0; ga->measure_bufs && i < ga->n_bufts; i++) cllm_buffer_free(ga->measure_bufs[i]);
    free_scratch(ga);
    cllm_free(ga->bufts);
    cllm_free(ga->measure_bufs);
    cllm_free(ga->bufs);
    cllm_free(ga->measured);
    cllm_free(ga->last);
    cllm_free(ga->cur);
    cllm_free(ga);
}

int cllm_galloc_n_bufts(const cllm_galloc *ga) { return ga->n_bufts; }

/* Grows the scratch to hold a graph of n tensors; all or nothing. */
static cllm_status reserve_scratch(cllm_galloc *ga, int n) {
    if (n <= ga->cap) return CLLM_OK;
    int cap = CLLM_MAX(n, 64);
    if (ga->cap <= (1 << 29) && cap < 2 * ga->cap) cap = 2 * ga->cap;
    const size_t c = (size_t)cap;
    size_t hash_size = 16;
    while (hash_size < 2 * c) hash_size *= 2; /* load factor <= 1/2 */

    cllm_galloc next = {0};
    next.tensors = ga_malloc(ga, c * sizeof(*next.tensors));
    next.blocks = ga_malloc(ga, c * sizeof(*next.blocks));
    next.items = ga_malloc(ga, c * sizeof(*next.items));
    next.items_tmp = ga_malloc(ga, c * sizeof(*next.items_tmp));
    next.placed = ga_malloc(ga, c * sizeof(*next.placed));
    next.offsets = ga_malloc(ga, c * sizeof(*next.offsets));
    next.live_start = ga_malloc(ga, c * sizeof(*next.live_start));
    next.live_end = ga_malloc(ga, c * sizeof(*next.live_end));
    next.hash = ga_malloc(ga, hash_size * sizeof(*next.hash));
    if (!next.tensors || !next.blocks || !next.items || !next.items_tmp || !next.placed ||
        !next.offsets || !next.live_start || !next.live_end || !next.hash) {
        free_scratch(&next);
        return cllm_error(CLLM_ERR_NOMEM, "galloc: out of host memory planning %d tensors", n);
    }
    free_scratch(ga);
    ga->cap = cap;
    ga->tensors = next.tensors;
    ga->blocks = next.blocks;
    ga->items = next.items;
    ga->items_tmp = next.items_tmp;
    ga->placed = next.placed;
    ga->offsets = next.offsets;
    ga->live_start = next.live_start;
    ga->live_end = next.live_end;
    ga->hash = next.hash;
    ga->hash_size = hash_size;
    return CLLM_OK;
}

/* ---- tensor -> index --------------------------------------------------- */

/* Index of t among the graph's tensors, or -1. */
static int lookup(const cllm_galloc *ga, const cllm_tensor *t) {
    size_t i = cllm_hash_ptr(t, ga->hash_size);
    while (ga->hash[i]) {
        const int k = ga->hash[i] - 1;
        if (ga->tensors[k].t == t) return k;
        i = (i + 1) & (ga->hash_size - 1);
    }
    return -1;
}

static void hash_insert(cllm_galloc *ga, int k) {
    size_t i = cllm_hash_ptr(ga->tensors[k].t, ga->hash_size);
    while (ga->hash[i]) {
        CLLM_ASSERTF(ga->tensors[ga->hash[i] - 1].t != ga->tensors[k].t,
                     "galloc: tensor %s appears twice in the graph", ga->tensors[k].t->name);
        i = (i + 1) & (ga->hash_size - 1);
    }
    ga->hash[i] = k + 1;
}

/* ---- sorting (stable, bottom-up merge; no allocation) ------------------ */

static bool item_less(const sort_item *a, const sort_item *b) {
    for (int i = 0; i < 3; i++) {
        if (a->k[i] != b->k[i]) return a->k[i] < b->k[i];
    }
    return a->id < b->id;
}

static void sort_items(sort_item *a, sort_item *tmp, int n) {
    for (int width = 1; width < n; width *= 2) {
        for (int lo = 0; lo < n; lo += 2 * width) {
            const int mid = CLLM_MIN(lo + width, n), hi = CLLM_MIN(lo + 2 * width, n);
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = item_less(&a[j], &a[i]) ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof(*a));
    }
}

/* ---- lifetimes and in-place blocks ------------------------------------- */

static bool owns_buffer(const cllm_galloc *ga, const cllm_buffer *buf) {
    if (!buf) return false;
    for (int i = 0; i < ga->n_bufts; i++) {
        if (cllm_buffer_holds(ga->bufs[i], buf) || buf == ga->measure_bufs[i]) return true;
    }
    return false;
}

/* Whether planned node k may take the memory of its src[0] (see galloc.h). */
static bool can_inplace(const cllm_galloc *ga, int k) {
    const gtensor *r = &ga->tensors[k];
    const cllm_tensor *t = r->t;
    if (!cllm_op_can_inplace(t->op) || !t->src[0] || r->start != r->step) return false;
    const int ks = lookup(ga, t->src[0]);
    const gtensor *s = &ga->tensors[ks];
    if (s->kind != KIND_PLANNED || s->io || s->buft != r->buft || s->end != r->step ||
        s->size < r->size) {
        return false;
    }
    const cllm_tensor *a = s->t;
    if (a->type != t->type || !cllm_same_shape(a, t) || !cllm_is_contiguous(a) ||
        !cllm_is_contiguous(t)) {
        return false;
    }
    for (int j = 1; j < CLLM_MAX_SRC; j++) {
        if (t->src[j] && ga->tensors[lookup(ga, t->src[j])].root == ks) return false;
    }
    return true;
}

static size_t align_of(const cllm_galloc *ga, int buft) {
    return cllm_buffer_type_alignment(ga->bufts[buft]);
}

/* Fills ga->tensors and ga->blocks for g; changes no tensor. */
static cllm_status analyse(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                           const int *leaf_buft) {
    const int n_leafs = g->n_leafs, n = g->n_leafs + g->n_nodes;
    const int last = CLLM_MAX(g->n_nodes, 1) - 1;

    for (int i = 0; i < g->n_nodes; i++) {
        const int id = node_buft ? node_buft[i] : 0;
        if (id < 0 || id >= ga->n_bufts) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "galloc: node %d (%s) has buffer type id %d of %d", i,
                              g->nodes[i]->name, id, ga->n_bufts);
        }
    }
    for (int i = 0; i < n_leafs; i++) {
        const int id = leaf_buft ? leaf_buft[i] : 0;
        if (id < 0 || id >= ga->n_bufts) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "galloc: leaf %d (%s) has buffer type id %d of %d", i,
                              g->leafs[i]->name, id, ga->n_bufts);
        }
    }

    memset(ga->hash, 0, ga->hash_size * sizeof(*ga->hash));
    for (int k = 0; k < n; k++) {
        const bool leaf = k < n_leafs;
        gtensor *x = &ga->tensors[k];
        *x = (gtensor){
            .t = leaf ? g->leafs[k] : g->nodes[k - n_leafs],
            .step = leaf ? -1 : k - n_leafs,
            .buft =
                leaf ? (leaf_buft ? leaf_buft[k] : 0) : (node_buft ? node_buft[k - n_leafs] : 0),
            .root = k,
            .block = -1,
        };
        hash_insert(ga, k);
    }

    /* what is planned, what is static, where views point */
    for (int k = 0; k < n; k++) {
        gtensor *x = &ga->tensors[k];
        const cllm_tensor *t = x->t;
        if (t->view_src) {
            x->kind = KIND_VIEW;
            x->root = lookup(ga, t->view_src);
            if (x->root < 0 && (!t->view_src->data || owns_buffer(ga, t->view_src->buffer))) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "galloc: the source %s of view %s is not in the graph",
                                  t->view_src->name, t->name);
            }
        } else if (!t->data || owns_buffer(ga, t->buffer)) {
            x->kind = KIND_PLANNED;
            x->size = cllm_buffer_type_alloc_size(ga->bufts[x->buft], t);
            const size_t piece = cllm_buffer_type_piece_size(ga->bufts[x->buft]);
            if (x->size > piece) {
                return cllm_error(CLLM_ERR_TOO_LARGE,
                                  "galloc: %s (%zu bytes) exceeds the %zu-byte allocations of %s",
                                  t->name, x->size, piece,
                                  cllm_buffer_type_name(ga->bufts[x->buft]));
            }
            const bool input = x->step < 0 || (t->flags & CLLM_TENSOR_FLAG_INPUT);
            x->start = input ? 0 : x->step;
            x->end = input ? last : x->step;
            x->io = input;
        } else {
            x->kind = KIND_STATIC;
        }
    }
    for (int k = 0; k < n; k++) {
        const gtensor *x = &ga->tensors[k];
        CLLM_ASSERTF(x->kind != KIND_VIEW || x->root < 0 || ga->tensors[x->root].kind != KIND_VIEW,
                     "galloc: view %s has a view as its root", x->t->name);
    }

    /* last uses: a read of a view is a read of its root; so is the view node itself */
    for (int k = n_leafs; k < n; k++) {
        gtensor *x = &ga->tensors[k];
        const int step = x->step;
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            const cllm_tensor *s = x->t->src[j];
            if (!s) continue;
            const int ks = lookup(ga, s);
            CLLM_ASSERTF(ks >= 0, "galloc: source %s of %s is not in the graph", s->name,
                         x->t->name);
            ga->tensors[ks].consumed = true;
            const int r = ga->tensors[ks].root;
            if (r >= 0 && ga->tensors[r].kind == KIND_PLANNED) {
                ga->tensors[r].end = CLLM_MAX(ga->tensors[r].end, step);
            }
        }
        if (x->kind == KIND_VIEW && x->root >= 0 && ga->tensors[x->root].kind == KIND_PLANNED) {
            ga->tensors[x->root].end = CLLM_MAX(ga->tensors[x->root].end, step);
        }
    }

    /* inputs and outputs, also through views */
    for (int k = 0; k < n; k++) {
        const gtensor *x = &ga->tensors[k];
        const int r = x->root;
        if (r < 0 || ga->tensors[r].kind != KIND_PLANNED) continue;
        gtensor *root = &ga->tensors[r];
        if (x->t->flags & CLLM_TENSOR_FLAG_INPUT) {
            root->start = 0;
            root->end = last;
            root->io = true;
        }
        if ((x->t->flags & CLLM_TENSOR_FLAG_OUTPUT) || (x->step >= 0 && !x->consumed)) {
            root->end = last;
            root->io = true;
        }
    }

    /* allocation blocks: leafs, then nodes in order, in-place chains merged */
    ga->n_blocks = 0;
    for (int b = 0; b < ga->n_bufts; b++) ga->cur[b] = (plan_info){0};
    for (int k = 0; k < n; k++) {
        gtensor *x = &ga->tensors[k];
        if (x->kind != KIND_PLANNED) continue;
        plan_info *info = &ga->cur[x->buft];
        const size_t asize = cllm_align_up(x->size, align_of(ga, x->buft));
        info->n_tensors++;
        info->naive += asize;
        if (x->step >= 0 && can_inplace(ga, k)) {
            const int b = ga->tensors[lookup(ga, x->t->src[0])].block;
            x->block = b;
            ga->blocks[b].end = CLLM_MAX(ga->blocks[b].end, x->end);
            ga->blocks[b].size = CLLM_MAX(ga->blocks[b].size, asize);
            info->n_inplace++;
            continue;
        }
        x->block = ga->n_blocks;
        ga->blocks[ga->n_blocks++] =
            (gblock){.buft = x->buft, .start = x->start, .end = x->end, .size = asize, .offset = 0};
        info->n_blocks++;
    }

    /* lower bound: the largest sum of block bytes live at one step */
    for (int b = 0; b < ga->n_bufts; b++) {
        memset(ga->live_start, 0, (size_t)(last + 1) * sizeof(*ga->live_start));
        memset(ga->live_end, 0, (size_t)(last + 1) * sizeof(*ga->live_end));
        for (int i = 0; i < ga->n_blocks; i++) {
            const gblock *bl = &ga->blocks[i];
            if (bl->buft != b) continue;
            ga->live_start[bl->start] += bl->size;
            ga->live_end[bl->end] += bl->size;
        }
        size_t live = 0, lower = 0;
        for (int s = 0; s <= last; s++) {
            live += ga->live_start[s];
            lower = CLLM_MAX(lower, live);
            live -= ga->live_end[s];
        }
        ga->cur[b].lower = lower;
    }
    return CLLM_OK;
}

/* ---- placement --------------------------------------------------------- */

enum { ORDER_SIZE, ORDER_AREA, ORDER_LIFETIME, ORDER_GRAPH, ORDER_COUNT };

static const char *const k_strategy_names[ORDER_COUNT][2] = {
    [ORDER_SIZE] = {"size/first-fit", "size/best-fit"},
    [ORDER_AREA] = {"size*lifetime/first-fit", "size*lifetime/best-fit"},
    [ORDER_LIFETIME] = {"lifetime/first-fit", "lifetime/best-fit"},
    [ORDER_GRAPH] = {"graph-order/first-fit", "graph-order/best-fit"},
};

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Sorts the blocks of buffer type `buft` into ga->items by `order`;
 * returns how many there are. */
static int order_blocks(cllm_galloc *ga, int buft, int order) {
    int n = 0;
    for (int i = 0; i < ga->n_blocks; i++) {
        const gblock *b = &ga->blocks[i];
        if (b->buft != buft) continue;
        const uint64_t size = b->size, len = (uint64_t)(b->end - b->start + 1);
        const uint64_t start = (uint64_t)b->start;
        sort_item it = {.id = i};
        switch (order) {
        case ORDER_SIZE: it.k[0] = ~size, it.k[1] = ~len, it.k[2] = start; break;
        case ORDER_AREA: it.k[0] = ~sat_mul(size, len), it.k[1] = ~size, it.k[2] = start; break;
        case ORDER_LIFETIME: it.k[0] = ~len, it.k[1] = ~size, it.k[2] = start; break;
        default: it.k[0] = start, it.k[1] = 0, it.k[2] = 0; break;
        }
        ga->items[n++] = it;
    }
    sort_items(ga->items, ga->items_tmp, n);
    return n;
}

/*
 * Places the n blocks of ga->items, in that order, into ga->offsets: each at
 * the lowest offset (first fit) or in the smallest gap (best fit) where it
 * overlaps no placed block whose lifetime intersects its own, else above
 * them all; never across the end of a piece of buffer type `buft`
 * (cllm_buffer_type_place_offset). Sizes are aligned, so offsets are too.
 * Returns the end of the highest block.
 */
static size_t place_blocks(cllm_galloc *ga, int buft, int n, bool best_fit) {
    const cllm_buffer_type *type = ga->bufts[buft];
    int n_placed = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const int id = ga->items[i].id;
        const gblock *b = &ga->blocks[id];
        if (b->size == 0) {
            ga->offsets[id] = 0;
            continue;
        }
        size_t cur = 0, best = 0, best_gap = SIZE_MAX;
        bool found = false;
        for (int k = 0; k < n_placed; k++) {
            const gblock *p = &ga->blocks[ga->placed[k]];
            if (p->end < b->start || p->start > b->end) continue;
            const size_t off = ga->offsets[ga->placed[k]];
            const size_t at = cllm_buffer_type_place_offset(type, cur, b->size);
            if (off >= at && off - at >= b->size) {
                if (!best_fit) {
                    found = true;
                    best = at;
                    break;
                }
                if (off - at < best_gap) {
                    found = true;
                    best_gap = off - at;
                    best = at;
                }
            }
            cur = CLLM_MAX(cur, off + p->size);
        }
        const size_t off = found ? best : cllm_buffer_type_place_offset(type, cur, b->size);
        ga->offsets[id] = off;
        total = CLLM_MAX(total, off + b->size);
        /* keep `placed` sorted by offset */
        int pos = n_placed;
        while (pos > 0 && ga->offsets[ga->placed[pos - 1]] > off) {
            ga->placed[pos] = ga->placed[pos - 1];
            pos--;
        }
        ga->placed[pos] = id;
        n_placed++;
    }
    return total;
}

/* Plans every buffer type: block offsets into ga->blocks, sizes into ga->cur. */
static void place_all(cllm_galloc *ga) {
    for (int buft = 0; buft < ga->n_bufts; buft++) {
        plan_info *info = &ga->cur[buft];
        info->planned = 0;
        info->strategy = "none";
        if (info->n_blocks == 0) continue;
        size_t best = SIZE_MAX;
        /* stops at the first placement that reaches the lower bound: none
         * can be smaller (this also makes planning a graph per token cheap) */
        for (int order = 0; order < ORDER_COUNT && best > info->lower; order++) {
            const int n = order_blocks(ga, buft, order);
            for (int fit = 0; fit < 2 && best > info->lower; fit++) {
                const size_t size = place_blocks(ga, buft, n, fit == 1);
                if (size >= best) continue;
                best = size;
                info->planned = size;
                info->strategy = k_strategy_names[order][fit];
                for (int i = 0; i < n; i++) {
                    const int id = ga->items[i].id;
                    ga->blocks[id].offset = ga->offsets[id];
                }
            }
        }
    }
}

/* Plans g into the scratch; changes no tensor. */
static cllm_status plan(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                        const int *leaf_buft) {
    cllm_status st = reserve_scratch(ga, CLLM_MAX(g->n_nodes + g->n_leafs, 1));
    if (st != CLLM_OK) return st;
    st = analyse(ga, g, node_buft, leaf_buft);
    if (st != CLLM_OK) return st;
    place_all(ga);
    return CLLM_OK;
}

/* Places the planned tensors in bufs[] (one per buffer type), then views. */
static void commit(cllm_galloc *ga, cllm_graph *g, cllm_buffer *const *bufs) {
    const int n = g->n_nodes + g->n_leafs;
    for (int k = 0; k < n; k++) {
        gtensor *x = &ga->tensors[k];
        if (x->kind != KIND_PLANNED) continue;
        cllm_buffer_place_tensor(bufs[x->buft], x->t, ga->blocks[x->block].offset);
    }
    for (int k = 0; k < n; k++) {
        gtensor *x = &ga->tensors[k];
        if (x->kind != KIND_VIEW) continue;
        const bool planned_root = x->root >= 0 && ga->tensors[x->root].kind == KIND_PLANNED;
        if (planned_root || !x->t->data) cllm_tensor_init_view(x->t);
    }
    memcpy(ga->last, ga->cur, (size_t)ga->n_bufts * sizeof(*ga->last));
}

/* ---- public API -------------------------------------------------------- */

cllm_status cllm_galloc_measure(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                                const int *leaf_buft) {
    cllm_status st = plan(ga, g, node_buft, leaf_buft);
    if (st != CLLM_OK) return st;
    for (int b = 0; b < ga->n_bufts; b++) {
        if (ga->measure_bufs[b]) continue;
        cllm_buffer *mb = fail_now(ga) ? NULL : cllm_buffer_new_measure(ga->bufts[b], 0);
        if (!mb) return cllm_error(CLLM_ERR_NOMEM, "galloc: out of host memory for a buffer");
        ga->measure_bufs[b] = mb;
    }
    for (int b = 0; b < ga->n_bufts; b++) {
        /* a region that does not exist: it grows to the largest plan measured,
         * so tensors of graphs measured before stay within it */
        cllm_buffer_measure_grow(ga->measure_bufs[b], ga->cur[b].planned);
        ga->measured[b] = CLLM_MAX(ga->measured[b], ga->cur[b].planned);
    }
    commit(ga, g, ga->measure_bufs);
    return CLLM_OK;
}

cllm_status cllm_galloc_reserve(cllm_galloc *ga) {
    cllm_buffer **fresh = ga_malloc(ga, (size_t)ga->n_bufts * sizeof(*fresh));
    if (!fresh) return cllm_error(CLLM_ERR_NOMEM, "galloc: out of host memory");
    for (int b = 0; b < ga->n_bufts; b++) {
        fresh[b] = NULL;
        if (ga->bufs[b] && cllm_buffer_size(ga->bufs[b]) == ga->measured[b]) continue;
        cllm_status st =
            cllm_buffer_type_alloc(ga->bufts[b], ga->measured[b], CLLM_MEM_COMPUTE, &fresh[b]);
        if (st != CLLM_OK) {
            for (int i = 0; i < b; i++) cllm_buffer_free(fresh[i]);
            cllm_free(fresh);
            return st;
        }
    }
    for (int b = 0; b < ga->n_bufts; b++) {
        if (!fresh[b]) continue;
        cllm_buffer_free(ga->bufs[b]);
        ga->bufs[b] = fresh[b];
    }
    cllm_free(fresh);
    return CLLM_OK;
}

cllm_status cllm_galloc_alloc_graph(cllm_galloc *ga, cllm_graph *g, const int *node_buft,
                                    const int *leaf_buft) {
    for (int b = 0; b < ga->n_bufts; b++) {
        if (!ga->bufs[b]) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "galloc: no compute buffer for %s: call cllm_galloc_reserve first",
                              cllm_buffer_type_name(ga->bufts[b]));
        }
    }
    cllm_status st = plan(ga, g, node_buft, leaf_buft);
    if (st != CLLM_OK) return st;
    for (int b = 0; b < ga->n_bufts; b++) {
        const size_t have = cllm_buffer_size(ga->bufs[b]);
        if (ga->cur[b].planned > have) {
            return cllm_error(CLLM_ERR_TOO_LARGE,
                              "galloc: the graph (%d nodes) needs %zu bytes of compute memory in "
                              "buffer type %s, but %zu are reserved: measure the largest graph "
                              "before cllm_galloc_reserve",
                              g->n_nodes, ga->cur[b].planned, cllm_buffer_type_name(ga->bufts[b]),
                              have);
        }
    }
    commit(ga, g, ga->bufs);
    return CLLM_OK;
}

static void check_id(const cllm_galloc *ga, int buft_id) {
    CLLM_ASSERTF(buft_id >= 0 && buft_id < ga->n_bufts, "galloc: buffer type id %d of %d", buft_id,
                 ga->n_bufts);
}

size_t cllm_galloc_planned_size(const cllm_galloc *ga, int buft_id) {
    check_id(ga, buft_id);
    return ga->last[buft_id].planned;
}

size_t cllm_galloc_lower_bound(const cllm_galloc *ga, int buft_id) {
    check_id(ga, buft_id);
    return ga->last[buft_id].lower;
}

size_t cllm_galloc_measured_size(const cllm_galloc *ga, int buft_id) {
    check_id(ga, buft_id);
    return ga->measured[buft_id];
}

void cllm_galloc_get_stats(const cllm_galloc *ga, int buft_id, cllm_galloc_stats *out) {
    check_id(ga, buft_id);
    const plan_info *p = &ga->last[buft_id];
    *out = (cllm_galloc_stats){
        .planned = p->planned,
        .lower_bound = p->lower,
        .naive = p->naive,
        .n_tensors = p->n_tensors,
        .n_blocks = p->n_blocks,
        .n_inplace = p->n_inplace,
        .strategy = p->strategy ? p->strategy : "none",
    };
}

cllm_buffer *cllm_galloc_buffer(const cllm_galloc *ga, int buft_id) {
    check_id(ga, buft_id);
    return ga->bufs[buft_id];
}
