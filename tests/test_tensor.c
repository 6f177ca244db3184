/* Tensors, views, op constructors (shapes only) and graphs. */
#include "common/check.h"
#include "core/tensor.h"

#include <stdlib.h>
#include <string.h>

static void test_shapes(void) {
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *a = cllm_tensor_new_4d(ctx, CLLM_TYPE_F32, 5, 7, 11, 13);
    CHECK(a->nb[0] == 4 && a->nb[1] == 20 && a->nb[2] == 140 && a->nb[3] == 1540);
    CHECK(cllm_nelements(a) == 5 * 7 * 11 * 13);
    CHECK(cllm_nrows(a) == 7 * 11 * 13);
    CHECK(cllm_nbytes(a) == 4u * 5 * 7 * 11 * 13);
    CHECK(cllm_is_contiguous(a));
    CHECK(a->data == NULL && a->buffer == NULL); /* metadata only */

    cllm_tensor *q = cllm_tensor_new_2d(ctx, CLLM_TYPE_Q4_0, 64, 3);
    CHECK(q->nb[0] == 18 && q->nb[1] == 36 && cllm_nbytes(q) == 108);

    cllm_tensor *empty = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 0, 3);
    CHECK(cllm_nbytes(empty) == 0 && cllm_nelements(empty) == 0);

    /* transpose: strides swap, not contiguous, same bytes */
    cllm_tensor *t = cllm_transpose(ctx, a);
    CHECK(t->ne[0] == 7 && t->ne[1] == 5 && t->nb[0] == 20 && t->nb[1] == 4);
    CHECK(!cllm_is_contiguous(t));
    CHECK(cllm_nbytes(t) == cllm_nbytes(a));
    CHECK(t->view_src == a && t->view_offs == 0 && t->op == CLLM_OP_TRANSPOSE);

    /* permute: dim i goes to axis_i */
    cllm_tensor *p = cllm_permute(ctx, a, 2, 0, 3, 1);
    CHECK(p->ne[2] == 5 && p->ne[0] == 7 && p->ne[3] == 11 && p->ne[1] == 13);
    CHECK(p->nb[2] == 4 && p->nb[0] == 20 && p->nb[3] == 140 && p->nb[1] == 1540);

    /* a view of a view points at the root with summed offsets */
    cllm_tensor *v1 = cllm_view_2d(ctx, a, 5, 3, a->nb[1], a->nb[1] * 2);
    cllm_tensor *v2 = cllm_view_1d(ctx, v1, 5, a->nb[1]);
    CHECK(v2->view_src == a && v2->view_offs == a->nb[1] * 3);
    CHECK(cllm_is_contiguous(v1));

    cllm_tensor *r = cllm_reshape_2d(ctx, a, 35, 143);
    CHECK(r->ne[0] == 35 && r->nb[1] == 140 && r->view_src == a);

    /* dims of size 1 do not break contiguity */
    cllm_tensor *row = cllm_view_2d(ctx, a, 5, 1, 9999, 0);
    CHECK(cllm_is_contiguous(row));

    cllm_context_free(ctx);
}

static void test_ops_shapes(void) {
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *w = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 64, 96); /* 96 rows of 64 */
    cllm_tensor *x = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, 64, 5, 4);
    cllm_tensor *y = cllm_mul_mat(ctx, w, x);
    CHECK(y->ne[0] == 96 && y->ne[1] == 5 && y->ne[2] == 4 && y->type == CLLM_TYPE_F32);
    CHECK(y->src[0] == w && y->src[1] == x && y->op == CLLM_OP_MUL_MAT);

    cllm_tensor *q = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, 16, 3, 8);
    cllm_tensor *k = cllm_tensor_new_3d(ctx, CLLM_TYPE_F16, 16, 10, 2);
    cllm_tensor *v = cllm_tensor_new_3d(ctx, CLLM_TYPE_F16, 12, 10, 2);
    cllm_tensor *m = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 10, 3);
    cllm_tensor *o = cllm_attn(ctx, q, k, v, m, 0.25f);
    CHECK(o->ne[0] == 12 && o->ne[1] == 8 && o->ne[2] == 3 && o->ne[3] == 1);
    CHECK(cllm_get_op_param_f32(o, 0) == 0.25f);

    cllm_tensor *pos = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 8);
    cllm_tensor *h = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, 16, 4, 8);
    cllm_tensor *rp = cllm_rope(ctx, h, pos, NULL, 8, CLLM_ROPE_NEOX, 10000.0f, 0.5f);
    CHECK(cllm_get_op_param_i32(rp, 0) == 8 && cllm_get_op_param_i32(rp, 1) == CLLM_ROPE_NEOX);
    CHECK(cllm_get_op_param_f32(rp, 2) == 10000.0f && cllm_get_op_param_f32(rp, 3) == 0.5f);

    /* cpy returns a view of its destination */
    cllm_tensor *cache = cllm_tensor_new_1d(ctx, CLLM_TYPE_F16, 1000);
    cllm_tensor *dst = cllm_view_1d(ctx, cache, 320, 100 * 2);
    cllm_tensor *src = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 64, 5);
    cllm_tensor *c = cllm_cpy(ctx, src, dst);
    CHECK(c->view_src == cache && c->view_offs == 200 && c->type == CLLM_TYPE_F16);

    cllm_tensor *ids = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 7);
    cllm_tensor *g = cllm_get_rows(ctx, w, ids);
    CHECK(g->ne[0] == 64 && g->ne[1] == 7 && g->type == CLLM_TYPE_F32);
    cllm_context_free(ctx);
}

static void test_graph_order(void) {
    cllm_context *ctx = cllm_context_new(64);
    cllm_tensor *a = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 8);
    cllm_tensor *b = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 8);
    cllm_tensor *s = cllm_add(ctx, a, b);
    cllm_tensor *p = cllm_mul(ctx, s, a);
    cllm_tensor *q = cllm_silu(ctx, s);
    cllm_tensor *out = cllm_add(ctx, p, q);
    cllm_graph *g = cllm_graph_new(16);
    cllm_graph_build(g, out);
    cllm_graph_build(g, out); /* idempotent */
    CHECK(g->n_nodes == 4 && g->n_leafs == 2);
    /* every source comes before its consumer */
    int bad = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        for (int j = 0; j < CLLM_MAX_SRC; j++) {
            const cllm_tensor *src = g->nodes[i]->src[j];
            if (src && src->op != CLLM_OP_NONE && cllm_graph_node_index(g, src) >= i) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(g->nodes[g->n_nodes - 1] == out);
    cllm_graph_reset(g);
    CHECK(g->n_nodes == 0 && g->n_leafs == 0);
    cllm_graph_build(g, q);
    CHECK(g->n_nodes == 2 && g->n_leafs == 2);
    cllm_graph_free(g);
    cllm_graph_free(NULL);
    cllm_context_free(ctx);
    cllm_context_free(NULL);
}

static void bad_mul_mat(void) {
    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *a = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 5, 7);
    cllm_tensor *b = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 6, 7);
    cllm_mul_mat(ctx, a, b);
}

static void bad_add(void) {
    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *a = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 6, 7);
    cllm_tensor *b = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 4, 7);
    cllm_add(ctx, a, b);
}

static void bad_view(void) {
    cllm_context *ctx = cllm_context_new(8);
    cllm_tensor *a = cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, 10);
    cllm_view_1d(ctx, a, 8, 12);
}

static void test_programmer_errors(void) {
    CHECK(check_aborts_with(bad_mul_mat, "mul_mat: [5, 7, 1, 1]"));
    CHECK(check_aborts_with(bad_add, "add: [4, 7, 1, 1] cannot be broadcast over [6, 7, 1, 1]"));
    CHECK(check_aborts_with(bad_view, "beyond the 40 bytes"));
}

/* The op traits table: every op named once, and the flags consistent with
 * each other (a view or a leaf computes nothing, so it is neither in place,
 * row-local nor in need of workspace); out of range reads as "unknown". */
static void test_op_traits(void) {
    for (int op = 0; op < CLLM_OP_COUNT; op++) {
        const cllm_op_traits *t = cllm_op_get_traits((cllm_op)op);
        CHECKF(t->name && strcmp(t->name, "unknown") != 0, "op %d has no name", op);
        for (int o = 0; o < op; o++) {
            CHECKF(strcmp(t->name, cllm_op_name((cllm_op)o)) != 0, "%s twice", t->name);
        }
        CHECKF(t->compute == (op != CLLM_OP_NONE && !t->view), "%s: compute", t->name);
        CHECKF(t->compute || (!t->inplace && !t->row_local && !t->workspace), "%s", t->name);
        CHECK(cllm_op_is_view((cllm_op)op) == t->view);
        CHECK(cllm_op_has_compute((cllm_op)op) == t->compute);
        CHECK(cllm_op_can_inplace((cllm_op)op) == t->inplace);
        CHECK(cllm_op_is_row_local((cllm_op)op) == t->row_local);
        CHECK(cllm_op_may_need_workspace((cllm_op)op) == t->workspace);
    }
    CHECK(cllm_op_is_view(CLLM_OP_PERMUTE) && !cllm_op_is_view(CLLM_OP_CPY));
    CHECK(cllm_op_can_inplace(CLLM_OP_ROPE) && !cllm_op_can_inplace(CLLM_OP_MUL_MAT));
    CHECK(strcmp(cllm_op_name(CLLM_OP_COUNT), "unknown") == 0);
    CHECK(!cllm_op_has_compute((cllm_op)(CLLM_OP_COUNT + 1)) &&
          !cllm_op_can_inplace(CLLM_OP_COUNT));
}

int main(void) {
    test_op_traits();
    test_shapes();
    test_ops_shapes();
    test_graph_order();
    test_programmer_errors();
    return check_summary("test_tensor");
}
