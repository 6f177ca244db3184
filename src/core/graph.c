/* Graphs: the nodes and leafs reachable from the outputs, topologically sorted. */
#include "core/tensor.h"
#include "core/hostmem.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_size_for(int max_nodes) {
    size_t n = 16;
    while (n < (size_t)max_nodes * 4) n *= 2; /* nodes + leafs, load factor <= 1/2 */
    return n;
}

cllm_graph *cllm_graph_new(int max_nodes) {
    CLLM_ASSERT(max_nodes > 0);
    cllm_graph *g = cllm_calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->max_nodes = max_nodes;
    g->hash_size = hash_size_for(max_nodes);
    g->nodes = cllm_calloc((size_t)max_nodes, sizeof(*g->nodes));
    g->leafs = cllm_calloc((size_t)max_nodes, sizeof(*g->leafs));
    g->hash = cllm_calloc(g->hash_size, sizeof(*g->hash));
    if (!g->nodes || !g->leafs || !g->hash) {
        cllm_graph_free(g);
        return NULL;
    }
    return g;
}

void cllm_graph_free(cllm_graph *g) {
    if (!g) return;
    cllm_free(g->nodes);
    cllm_free(g->leafs);
    cllm_free((void *)g->hash);
    cllm_free(g);
}

void cllm_graph_reset(cllm_graph *g) {
    g->n_nodes = 0;
    g->n_leafs = 0;
    memset((void *)g->hash, 0, g->hash_size * sizeof(*g->hash));
}

/* Inserts t; returns false if it was already present. */
static bool hash_insert(cllm_graph *g, const cllm_tensor *t) {
    size_t i = cllm_hash_ptr(t, g->hash_size);
    while (g->hash[i]) {
        if (g->hash[i] == t) return false;
        i = (i + 1) & (g->hash_size - 1);
    }
    g->hash[i] = t;
    return true;
}

static void visit(cllm_graph *g, cllm_tensor *t) {
    if (!hash_insert(g, t)) return;
    for (int i = 0; i < CLLM_MAX_SRC; i++) {
        if (t->src[i]) visit(g, t->src[i]);
    }
    if (t->op == CLLM_OP_NONE) {
        CLLM_ASSERTF(g->n_leafs < g->max_nodes, "graph full: %d leafs", g->max_nodes);
        g->leafs[g->n_leafs++] = t;
    } else {
        CLLM_ASSERTF(g->n_nodes < g->max_nodes, "graph full: %d nodes", g->max_nodes);
        g->nodes[g->n_nodes++] = t;
    }
}

void cllm_graph_build(cllm_graph *g, cllm_tensor *t) { visit(g, t); }

int cllm_graph_node_index(const cllm_graph *g, const cllm_tensor *t) {
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i] == t) return i;
    }
    return -1;
}
