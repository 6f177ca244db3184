/*
 * The overlap checker: proves a placement of a graph safe from the graph and
 * the tensors' addresses alone. It shares no code with the planner on
 * purpose; it recomputes every lifetime the simple way (O(n^2)).
 */
#include "alloc/galloc.h"
#include "core/hostmem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ctensor {
    const cllm_tensor *t;
    int step;       /* node index, -1 for leafs */
    int start, end; /* live steps, inclusive (non-views) */
    bool input;     /* live from the start, never an in-place source */
    bool output;    /* live until the end, never an in-place source */
    size_t offset;  /* bytes from the buffer's base */
    size_t size;    /* cllm_buffer_type_alloc_size */
} ctensor;

static bool fail(char *err, size_t err_size, const char *fmt, ...) CLLM_PRINTF(3, 4);

static bool fail(char *err, size_t err_size, const char *fmt, ...) {
    if (err && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

static const cllm_tensor *root_of(const cllm_tensor *t) { return t->view_src ? t->view_src : t; }

/* Whether r (a result) may share the memory of s (its src[0]): the in-place
 * rule of galloc.h, on the recomputed lifetimes. */
static bool inplace_pair(const ctensor *r, const ctensor *s) {
    const cllm_tensor *rt = r->t, *st = s->t;
    if (r->step < 0 || !cllm_op_can_inplace(rt->op) || rt->src[0] != st) return false;
    if (s->step < 0 || s->input || s->output || r->input) return false;
    if (s->end != r->step || r->start != r->step) return false;
    if (rt->data != st->data || rt->buffer != st->buffer || r->size > s->size) return false;
    if (rt->type != st->type || !cllm_same_shape(rt, st) || !cllm_is_contiguous(rt) ||
        !cllm_is_contiguous(st)) {
        return false;
    }
    for (int j = 1; j < CLLM_MAX_SRC; j++) {
        if (rt->src[j] && root_of(rt->src[j]) == st) return false;
    }
    return true;
}

bool cllm_galloc_check(const cllm_graph *g, char *err, size_t err_size) {
    const int n_leafs = g->n_leafs, n = g->n_leafs + g->n_nodes;
    const int last = CLLM_MAX(g->n_nodes, 1) - 1;
    ctensor *ts = cllm_calloc((size_t)CLLM_MAX(n, 1), sizeof(*ts));
    if (!ts) return fail(err, err_size, "galloc_check: out of host memory");
    for (int k = 0; k < n; k++) {
        ts[k].t = k < n_leafs ? g->leafs[k] : g->nodes[k - n_leafs];
        ts[k].step = k < n_leafs ? -1 : k - n_leafs;
    }
    bool ok = true;

    /* placement: every tensor placed, within its buffer, aligned; views at
     * their source + offset */
    for (int k = 0; k < n && ok; k++) {
        ctensor *c = &ts[k];
        const cllm_tensor *t = c->t;
        if (!t->data || !t->buffer) {
            ok = fail(err, err_size, "%s (%s) is not placed", t->name, cllm_op_name(t->op));
            break;
        }
        if (t->view_src) {
            const cllm_tensor *src = t->view_src;
            if (t->buffer != src->buffer || t->data != (char *)src->data + t->view_offs) {
                ok = fail(err, err_size, "view %s does not point at its source %s + %zu", t->name,
                          src->name, t->view_offs);
            }
            continue;
        }
        const cllm_buffer_type *buft = cllm_buffer_buft(t->buffer);
        const uintptr_t base = (uintptr_t)cllm_buffer_base(t->buffer);
        const uintptr_t addr = (uintptr_t)t->data;
        const size_t bsize = cllm_buffer_size(t->buffer);
        c->size = cllm_buffer_type_alloc_size(buft, t);
        if (addr < base || addr - base > bsize || c->size > bsize - (addr - base)) {
            ok = fail(err, err_size, "%s (%zu bytes at %+td) lies outside its %zu-byte buffer",
                      t->name, c->size, (ptrdiff_t)(addr - base), bsize);
            break;
        }
        c->offset = addr - base;
        if (c->offset % cllm_buffer_type_alignment(buft) != 0) {
            ok = fail(err, err_size, "%s at offset %zu is not aligned to %zu", t->name, c->offset,
                      cllm_buffer_type_alignment(buft));
        }
    }

    /* lifetimes, recomputed: a tensor is read by a node that has it, or a
     * view of it, as a source, and by a view node of it */
    for (int k = 0; k < n && ok; k++) {
        ctensor *c = &ts[k];
        if (c->t->view_src) continue;
        c->input = c->step < 0;
        c->start = c->input ? 0 : c->step;
        c->end = c->input ? last : c->step;
        for (int u = 0; u < n; u++) {
            const cllm_tensor *x = ts[u].t;
            if (root_of(x) != c->t) continue;
            /* x is c or a view of c: its flags, its readers and whether anyone reads it */
            if (x->flags & CLLM_TENSOR_FLAG_INPUT) c->input = true;
            if (x->flags & CLLM_TENSOR_FLAG_OUTPUT) c->output = true;
            if (x->view_src && ts[u].step >= 0) c->end = CLLM_MAX(c->end, ts[u].step);
            bool read = false;
            for (int j = 0; j < g->n_nodes; j++) {
                for (int s = 0; s < CLLM_MAX_SRC; s++) {
                    if (g->nodes[j]->src[s] == x) {
                        read = true;
                        c->end = CLLM_MAX(c->end, j);
                    }
                }
            }
            if (!read && ts[u].step >= 0) c->output = true;
        }
        if (c->input) c->start = 0, c->end = last;
        if (c->output) c->end = last;
    }

    /* no two tensors live at the same step share a byte, but in-place pairs */
    for (int a = 0; a < n && ok; a++) {
        const ctensor *x = &ts[a];
        if (x->t->view_src || x->size == 0) continue;
        for (int b = a + 1; b < n && ok; b++) {
            const ctensor *y = &ts[b];
            if (y->t->view_src || y->size == 0 || x->t->buffer != y->t->buffer) continue;
            const int from = CLLM_MAX(x->start, y->start), to = CLLM_MIN(x->end, y->end);
            if (from > to) continue;
            if (x->offset >= y->offset + y->size || y->offset >= x->offset + x->size) continue;
            if (inplace_pair(x, y) || inplace_pair(y, x)) continue;
            ok = fail(err, err_size,
                      "at step %d, %s%s (bytes %zu..%zu, live %d..%d) and %s%s (bytes %zu..%zu, "
                      "live %d..%d) overlap in buffer %s",
                      from, x->t->name,
                      x->input    ? " [input]"
                      : x->output ? " [output]"
                                  : "",
                      x->offset, x->offset + x->size, x->start, x->end, y->t->name,
                      y->input    ? " [input]"
                      : y->output ? " [output]"
                                  : "",
                      y->offset, y->offset + y->size, y->start, y->end,
                      cllm_buffer_type_name(cllm_buffer_buft(x->t->buffer)));
        }
    }
    cllm_free(ts);
    return ok;
}
