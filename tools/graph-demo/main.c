/*
 * cllm-graph-demo: a developer tool of the engine internals (not part of the
 * user CLI): the tensor-graph engine without a model.
 */
#include "alloc/galloc.h"
#include "alloc/layout.h"
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The engine without a model: y = silu(W x) + x for a 256x256 W, planned in
 * measure mode, allocated exactly, computed, checked against plain C. */
int main(int argc, char **argv) {
    CLLM_UNUSED(argc), CLLM_UNUSED(argv);
    enum { N = 256, T = 8 };
    int rc = 1;
    cllm_context *wctx = cllm_context_new(4), *ctx = cllm_context_new(16);
    cllm_graph *g = cllm_graph_new(16);
    cllm_buffer *wbuf = NULL;
    cllm_backend *be = NULL;
    cllm_buffer_type *buft = cllm_cpu_buffer_type();
    cllm_galloc *ga = cllm_galloc_new(&buft, 1);
    float *w = malloc(sizeof(float) * N * N), *x = malloc(sizeof(float) * N * T);
    float *y = malloc(sizeof(float) * N * T);
    if (!wctx || !ctx || !g || !ga || !w || !x || !y) goto done;

    cllm_tensor *W = cllm_tensor_set_name(cllm_tensor_new_2d(wctx, CLLM_TYPE_F32, N, N), "W");
    if (cllm_layout_alloc(wctx, buft, CLLM_MEM_WEIGHTS, &wbuf) != CLLM_OK) goto done;
    cllm_tensor *X = cllm_tensor_set_name(cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, N, T), "x");
    cllm_tensor_set_input(X);
    cllm_tensor *Y = cllm_add(ctx, cllm_silu(ctx, cllm_mul_mat(ctx, W, X)), X);
    cllm_tensor_set_output(Y);
    cllm_graph_build(g, Y);

    if (cllm_galloc_measure(ga, g, NULL, NULL) != CLLM_OK) goto done;
    const size_t measured = cllm_galloc_measured_size(ga, 0);
    printf("graph: %d nodes, %d leafs\n", g->n_nodes, g->n_leafs);
    printf("measure mode: %zu bytes planned (lower bound %zu); device memory touched: %zu bytes\n",
           measured, cllm_galloc_lower_bound(ga, 0),
           cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE));
    if (cllm_galloc_reserve(ga) != CLLM_OK) goto done;
    if (cllm_galloc_alloc_graph(ga, g, NULL, NULL) != CLLM_OK) goto done;
    printf("alloc mode:   %zu bytes allocated for compute\n",
           cllm_device_allocated(cllm_cpu_device(), CLLM_MEM_COMPUTE));

    for (int i = 0; i < N * N; i++) w[i] = (float)((i * 7919) % 201 - 100) / 1000.0f;
    for (int i = 0; i < N * T; i++) x[i] = (float)((i * 104729) % 101 - 50) / 50.0f;
    cllm_tensor_set_all(W, w);
    cllm_tensor_set_all(X, x);
    if (cllm_backend_cpu_new(0, &be) != CLLM_OK) goto done;
    if (cllm_backend_graph_compute(be, g) != CLLM_OK) goto done;
    cllm_tensor_get_all(Y, y);

    double max_err = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < N; r++) {
            double acc = 0;
            for (int k = 0; k < N; k++) acc += (double)w[r * N + k] * x[t * N + k];
            const double ref = acc / (1 + exp(-acc)) + x[t * N + r];
            max_err = fmax(max_err, fabs(ref - y[t * N + r]));
        }
    }
    printf("computed with %d threads: max |error| vs plain C = %.2e\n",
           cllm_backend_cpu_n_threads(be), max_err);
    rc = max_err < 1e-4 ? 0 : 1;
done:
    if (rc) fprintf(stderr, "cllm-graph-demo: failed: %s\n", cllm_last_error());
    cllm_backend_free(be);
    cllm_galloc_free(ga);
    cllm_buffer_free(wbuf);
    cllm_graph_free(g);
    cllm_context_free(ctx);
    cllm_context_free(wctx);
    free(w);
    free(x);
    free(y);
    return rc;
}
