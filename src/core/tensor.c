/* Contexts, tensors, views and op constructors. Nothing here touches data. */
#include "core/tensor.h"
#include "core/hostmem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cllm_context {
    int n_tensors;
    int max_tensors;
    cllm_tensor tensors[]; /* max_tensors entries */
};

/*
 * Facts about each op that the planner and the backends read (tensor.h:
 * cllm_op_traits). One row per op; every backend kernel must honour them:
 *   inplace    its kernels are correct with dst == src[0] (same type, shape,
 *              contiguous), so the planner may give dst the memory of src[0];
 *   row_local  each row of dst is computed from the same row of src[0] (and
 *              broadcast or side inputs), so rows split over threads with no
 *              synchronisation;
 *   workspace  a backend may need scratch memory for it (its size is the
 *              backend's: cllm_backend_workspace_size).
 * Views (VIEW .. TRANSPOSE) and NONE compute nothing.
 */
#define OP(name_, compute_, view_, inplace_, row_local_, workspace_)                               \
    {                                                                                              \
        .name = name_, .compute = compute_, .view = view_, .inplace = inplace_,                    \
        .row_local = row_local_, .workspace = workspace_                                           \
    }
static const cllm_op_traits k_op_traits[] = {
    /*                      name        compute view   inplace row_local workspace */
    [CLLM_OP_NONE] = OP("none", false, false, false, false, false),
    [CLLM_OP_ADD] = OP("add", true, false, true, true, false),
    [CLLM_OP_MUL] = OP("mul", true, false, true, true, false),
    [CLLM_OP_SCALE] = OP("scale", true, false, true, true, false),
    [CLLM_OP_SILU] = OP("silu", true, false, true, true, false),
    [CLLM_OP_GELU] = OP("gelu", true, false, true, true, false),
    [CLLM_OP_CPY] = OP("cpy", true, false, false, false, true),
    [CLLM_OP_CONT] = OP("cont", true, false, false, false, true),
    [CLLM_OP_CONCAT] = OP("concat", true, false, false, false, false),
    [CLLM_OP_GET_ROWS] = OP("get_rows", true, false, false, false, false),
    [CLLM_OP_RMS_NORM] = OP("rms_norm", true, false, true, true, false),
    [CLLM_OP_NORM] = OP("norm", true, false, true, true, false),
    [CLLM_OP_SOFT_MAX] = OP("soft_max", true, false, true, true, false),
    [CLLM_OP_ROPE] = OP("rope", true, false, true, true, true),
    [CLLM_OP_ROPE_TABLE] = OP("rope_table", true, false, false, false, false),
    [CLLM_OP_MUL_MAT] = OP("mul_mat", true, false, false, false, true),
    [CLLM_OP_ATTN] = OP("attn", true, false, false, false, true),
    [CLLM_OP_VIEW] = OP("view", false, true, false, false, false),
    [CLLM_OP_RESHAPE] = OP("reshape", false, true, false, false, false),
    [CLLM_OP_PERMUTE] = OP("permute", false, true, false, false, false),
    [CLLM_OP_TRANSPOSE] = OP("transpose", false, true, false, false, false),
};
#undef OP
_Static_assert(CLLM_ARRAY_SIZE(k_op_traits) == CLLM_OP_COUNT, "one row of traits per op");

const cllm_op_traits *cllm_op_get_traits(cllm_op op) {
    static const cllm_op_traits unknown = {.name = "unknown"};
    if ((unsigned)op >= CLLM_OP_COUNT) return &unknown;
    return &k_op_traits[op];
}

const char *cllm_op_name(cllm_op op) { return cllm_op_get_traits(op)->name; }
bool cllm_op_is_view(cllm_op op) { return cllm_op_get_traits(op)->view; }
bool cllm_op_has_compute(cllm_op op) { return cllm_op_get_traits(op)->compute; }
bool cllm_op_can_inplace(cllm_op op) { return cllm_op_get_traits(op)->inplace; }
bool cllm_op_is_row_local(cllm_op op) { return cllm_op_get_traits(op)->row_local; }
bool cllm_op_may_need_workspace(cllm_op op) { return cllm_op_get_traits(op)->workspace; }

/* ---- contexts ---------------------------------------------------------- */

size_t cllm_context_overhead(int max_tensors) {
    return sizeof(cllm_context) + (size_t)max_tensors * sizeof(cllm_tensor);
}

cllm_context *cllm_context_new(int max_tensors) {
    CLLM_ASSERT(max_tensors >= 0);
    cllm_context *ctx = cllm_calloc(1, cllm_context_overhead(max_tensors));
    if (!ctx) return NULL;
    ctx->max_tensors = max_tensors;
    return ctx;
}

void cllm_context_free(cllm_context *ctx) { cllm_free(ctx); }

void cllm_context_reset(cllm_context *ctx) { ctx->n_tensors = 0; }

int cllm_context_n_tensors(const cllm_context *ctx) { return ctx->n_tensors; }

cllm_tensor *cllm_context_tensor(cllm_context *ctx, int i) {
    CLLM_ASSERT(i >= 0 && i < ctx->n_tensors);
    return &ctx->tensors[i];
}

cllm_tensor *cllm_context_find(cllm_context *ctx, const char *name) {
    for (int i = 0; i < ctx->n_tensors; i++) {
        if (strcmp(ctx->tensors[i].name, name) == 0) return &ctx->tensors[i];
    }
    return NULL;
}

/* ---- tensors ----------------------------------------------------------- */

static cllm_tensor *tensor_alloc(cllm_context *ctx) {
    CLLM_ASSERTF(ctx->n_tensors < ctx->max_tensors, "context full: %d tensors", ctx->max_tensors);
    cllm_tensor *t = &ctx->tensors[ctx->n_tensors++];
    memset(t, 0, sizeof(*t));
    return t;
}

/* Contiguous strides for t->ne. */
static void set_contiguous_strides(cllm_tensor *t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    t->nb[0] = tt->type_size;
    t->nb[1] = t->nb[0] * (size_t)(t->ne[0] / tt->blck_size);
    for (int i = 2; i < CLLM_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
}

cllm_tensor *cllm_tensor_new(cllm_context *ctx, cllm_type type, int n_dims, const int64_t *ne) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    CLLM_ASSERTF(tt != NULL, "tensor of invalid type %d", (int)type);
    CLLM_ASSERTF(n_dims >= 1 && n_dims <= CLLM_MAX_DIMS, "tensor with %d dims", n_dims);
    cllm_tensor *t = tensor_alloc(ctx);
    t->type = type;
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        t->ne[i] = i < n_dims ? ne[i] : 1;
        CLLM_ASSERTF(t->ne[i] >= 0, "negative dimension %d: %lld", i, (long long)t->ne[i]);
    }
    CLLM_ASSERTF(t->ne[0] % tt->blck_size == 0,
                 "%s row of %lld elements is not whole blocks of %lld", tt->name,
                 (long long)t->ne[0], (long long)tt->blck_size);
    set_contiguous_strides(t);
    return t;
}

cllm_tensor *cllm_tensor_new_1d(cllm_context *ctx, cllm_type type, int64_t ne0) {
    return cllm_tensor_new(ctx, type, 1, (int64_t[]){ne0});
}
cllm_tensor *cllm_tensor_new_2d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1) {
    return cllm_tensor_new(ctx, type, 2, (int64_t[]){ne0, ne1});
}
cllm_tensor *cllm_tensor_new_3d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1,
                                int64_t ne2) {
    return cllm_tensor_new(ctx, type, 3, (int64_t[]){ne0, ne1, ne2});
}
cllm_tensor *cllm_tensor_new_4d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1,
                                int64_t ne2, int64_t ne3) {
    return cllm_tensor_new(ctx, type, 4, (int64_t[]){ne0, ne1, ne2, ne3});
}

cllm_tensor *cllm_tensor_set_name(cllm_tensor *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    return t;
}

void cllm_tensor_set_input(cllm_tensor *t) { t->flags |= CLLM_TENSOR_FLAG_INPUT; }
void cllm_tensor_set_output(cllm_tensor *t) { t->flags |= CLLM_TENSOR_FLAG_OUTPUT; }

int64_t cllm_nelements(const cllm_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t cllm_nrows(const cllm_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t cllm_nbytes(const cllm_tensor *t) {
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (t->ne[i] <= 0) return 0;
    }
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    size_t n;
    if (tt->blck_size == 1) {
        n = tt->type_size;
        for (int i = 0; i < CLLM_MAX_DIMS; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
    } else {
        n = (size_t)(t->ne[0] / tt->blck_size) * t->nb[0];
        for (int i = 1; i < CLLM_MAX_DIMS; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
    }
    return n;
}

size_t cllm_element_size(const cllm_tensor *t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    return tt->type_size / (size_t)tt->blck_size;
}

bool cllm_is_contiguous(const cllm_tensor *t) {
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    size_t next = tt->type_size;
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (t->ne[i] != 1) {
            if (t->nb[i] != next) return false;
            next *= (size_t)(i == 0 ? t->ne[0] / tt->blck_size : t->ne[i]);
        } else if (i == 0) {
            if (t->nb[0] != next) return false;
        }
    }
    return true;
}

bool cllm_is_contiguous_rows(const cllm_tensor *t) {
    return t->nb[0] == cllm_type_traits_of(t->type)->type_size;
}

bool cllm_same_shape(const cllm_tensor *a, const cllm_tensor *b) {
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (a->ne[i] != b->ne[i]) return false;
    }
    return true;
}

bool cllm_can_repeat(const cllm_tensor *b, const cllm_tensor *a) {
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return false;
    }
    return true;
}

const char *cllm_shape_str(const cllm_tensor *t, char *buf, size_t size) {
    snprintf(buf, size, "[%lld, %lld, %lld, %lld]", (long long)t->ne[0], (long long)t->ne[1],
             (long long)t->ne[2], (long long)t->ne[3]);
    return buf;
}

/* ---- op helpers -------------------------------------------------------- */

typedef char shape_buf[96];
#define SHAPE(t, b) cllm_shape_str((t), (b), sizeof(b))

static void set_param_f32(cllm_tensor *t, int i, float v) {
    memcpy(&t->op_params[i], &v, sizeof(v));
}

/* A new contiguous tensor of `type` and shape `ne`, computed by `op` from a. */
static cllm_tensor *new_result(cllm_context *ctx, cllm_op op, cllm_type type, const int64_t *ne,
                               cllm_tensor *a) {
    cllm_tensor *t = cllm_tensor_new(ctx, type, 4, ne);
    t->op = op;
    t->src[0] = a;
    return t;
}

static bool is_float_type(cllm_type type) {
    return type == CLLM_TYPE_F32 || type == CLLM_TYPE_F16 || type == CLLM_TYPE_BF16;
}

/* attn's k or v: a float type, or rows of whole Q8_0 / Q4_0 blocks */
static bool is_attn_kv(const cllm_tensor *t) {
    if (is_float_type(t->type)) return true;
    if (t->type != CLLM_TYPE_Q8_0 && t->type != CLLM_TYPE_Q4_0) return false;
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    return t->ne[0] % tt->blck_size == 0 && t->nb[0] == tt->type_size;
}

/* ---- views ------------------------------------------------------------- */

/* A tensor aliasing a's data at a->view_offs + offset, with the given shape
 * and strides. */
static cllm_tensor *new_view(cllm_context *ctx, cllm_op op, cllm_tensor *a, const int64_t *ne,
                             const size_t *nb, size_t offset) {
    cllm_tensor *t = tensor_alloc(ctx);
    t->type = a->type;
    memcpy(t->ne, ne, sizeof(t->ne));
    memcpy(t->nb, nb, sizeof(t->nb));
    t->op = op;
    t->src[0] = a;
    t->view_src = a->view_src ? a->view_src : a;
    t->view_offs = a->view_offs + offset;
    const size_t span = cllm_nbytes(t);
    const size_t root = cllm_nbytes(t->view_src);
    shape_buf sa, sb;
    CLLM_ASSERTF(t->view_offs + span <= root,
                 "%s of %s at offset %zu spans %zu bytes, beyond the %zu bytes of its source %s",
                 cllm_op_name(op), SHAPE(t, sa), t->view_offs, span, root, SHAPE(t->view_src, sb));
    if (a->data) {
        t->data = (char *)a->data + offset;
        t->buffer = a->buffer;
    }
    cllm_tensor_set_name(t, "%s (%s)", a->name, cllm_op_name(op));
    return t;
}

cllm_tensor *cllm_view_1d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, size_t offset) {
    const size_t row = cllm_row_size(a->type, ne0);
    return new_view(ctx, CLLM_OP_VIEW, a, (int64_t[]){ne0, 1, 1, 1},
                    (size_t[]){a->nb[0], row, row, row}, offset);
}

cllm_tensor *cllm_view_2d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, size_t nb1,
                          size_t offset) {
    return new_view(ctx, CLLM_OP_VIEW, a, (int64_t[]){ne0, ne1, 1, 1},
                    (size_t[]){a->nb[0], nb1, nb1 * (size_t)ne1, nb1 * (size_t)ne1}, offset);
}

cllm_tensor *cllm_view_3d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          size_t nb1, size_t nb2, size_t offset) {
    return new_view(ctx, CLLM_OP_VIEW, a, (int64_t[]){ne0, ne1, ne2, 1},
                    (size_t[]){a->nb[0], nb1, nb2, nb2 * (size_t)ne2}, offset);
}

cllm_tensor *cllm_view_4d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset) {
    return new_view(ctx, CLLM_OP_VIEW, a, (int64_t[]){ne0, ne1, ne2, ne3},
                    (size_t[]){a->nb[0], nb1, nb2, nb3}, offset);
}

cllm_tensor *cllm_reshape_4d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1,
                             int64_t ne2, int64_t ne3) {
    shape_buf sa;
    CLLM_ASSERTF(cllm_is_contiguous(a), "reshape of non-contiguous %s %s", a->name, SHAPE(a, sa));
    CLLM_ASSERTF(ne0 * ne1 * ne2 * ne3 == cllm_nelements(a),
                 "reshape of %s to [%lld, %lld, %lld, %lld]: element counts differ", SHAPE(a, sa),
                 (long long)ne0, (long long)ne1, (long long)ne2, (long long)ne3);
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    CLLM_ASSERTF(ne0 % tt->blck_size == 0, "reshape row of %lld is not whole blocks",
                 (long long)ne0);
    size_t nb[4];
    nb[0] = tt->type_size;
    nb[1] = nb[0] * (size_t)(ne0 / tt->blck_size);
    nb[2] = nb[1] * (size_t)ne1;
    nb[3] = nb[2] * (size_t)ne2;
    return new_view(ctx, CLLM_OP_RESHAPE, a, (int64_t[]){ne0, ne1, ne2, ne3}, nb, 0);
}

cllm_tensor *cllm_reshape_2d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1) {
    return cllm_reshape_4d(ctx, a, ne0, ne1, 1, 1);
}

cllm_tensor *cllm_reshape_3d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1,
                             int64_t ne2) {
    return cllm_reshape_4d(ctx, a, ne0, ne1, ne2, 1);
}

cllm_tensor *cllm_permute(cllm_context *ctx, cllm_tensor *a, int axis0, int axis1, int axis2,
                          int axis3) {
    const int axes[4] = {axis0, axis1, axis2, axis3};
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        CLLM_ASSERTF(axes[i] >= 0 && axes[i] < 4 && !(seen & (1 << axes[i])),
                     "permute axes (%d, %d, %d, %d) are not a permutation", axis0, axis1, axis2,
                     axis3);
        seen |= 1 << axes[i];
    }
    CLLM_ASSERTF(!cllm_type_traits_of(a->type)->is_quantized || axes[0] == 0,
                 "permute would split the blocks of quantized %s", a->name);
    int64_t ne[4];
    size_t nb[4];
    for (int i = 0; i < 4; i++) {
        ne[axes[i]] = a->ne[i];
        nb[axes[i]] = a->nb[i];
    }
    cllm_tensor *t = new_view(ctx, CLLM_OP_PERMUTE, a, ne, nb, 0);
    memcpy(t->op_params, axes, sizeof(axes));
    return t;
}

cllm_tensor *cllm_transpose(cllm_context *ctx, cllm_tensor *a) {
    cllm_tensor *t = cllm_permute(ctx, a, 1, 0, 2, 3);
    t->op = CLLM_OP_TRANSPOSE;
    cllm_tensor_set_name(t, "%s (%s)", a->name, cllm_op_name(t->op));
    return t;
}

/* ---- ops --------------------------------------------------------------- */

static cllm_tensor *binary_op(cllm_context *ctx, cllm_op op, cllm_tensor *a, cllm_tensor *b) {
    shape_buf sa, sb;
    CLLM_ASSERTF(cllm_can_repeat(b, a), "%s: %s cannot be broadcast over %s", cllm_op_name(op),
                 SHAPE(b, sb), SHAPE(a, sa));
    CLLM_ASSERTF(is_float_type(a->type) && is_float_type(b->type), "%s of %s and %s",
                 cllm_op_name(op), cllm_type_name(a->type), cllm_type_name(b->type));
    cllm_tensor *t = new_result(ctx, op, CLLM_TYPE_F32, a->ne, a);
    t->src[1] = b;
    return t;
}

cllm_tensor *cllm_add(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b) {
    return binary_op(ctx, CLLM_OP_ADD, a, b);
}

cllm_tensor *cllm_mul(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b) {
    return binary_op(ctx, CLLM_OP_MUL, a, b);
}

static cllm_tensor *unary_op(cllm_context *ctx, cllm_op op, cllm_tensor *a) {
    CLLM_ASSERTF(is_float_type(a->type), "%s of %s", cllm_op_name(op), cllm_type_name(a->type));
    return new_result(ctx, op, CLLM_TYPE_F32, a->ne, a);
}

cllm_tensor *cllm_scale(cllm_context *ctx, cllm_tensor *a, float s) {
    cllm_tensor *t = unary_op(ctx, CLLM_OP_SCALE, a);
    set_param_f32(t, 0, s);
    return t;
}

cllm_tensor *cllm_silu(cllm_context *ctx, cllm_tensor *a) { return unary_op(ctx, CLLM_OP_SILU, a); }

cllm_tensor *cllm_gelu(cllm_context *ctx, cllm_tensor *a) { return unary_op(ctx, CLLM_OP_GELU, a); }

cllm_tensor *cllm_cpy(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b) {
    shape_buf sa, sb;
    CLLM_ASSERTF(cllm_nelements(a) == cllm_nelements(b), "cpy of %s into %s: element counts differ",
                 SHAPE(a, sa), SHAPE(b, sb));
    CLLM_ASSERTF(!cllm_type_traits_of(a->type)->is_quantized || a->type == b->type,
                 "cpy from quantized %s to %s", cllm_type_name(a->type), cllm_type_name(b->type));
    cllm_tensor *t = new_view(ctx, CLLM_OP_CPY, b, b->ne, b->nb, 0);
    t->src[0] = a;
    t->src[1] = b;
    cllm_tensor_set_name(t, "%s (copy of %s)", b->name, a->name);
    return t;
}

cllm_tensor *cllm_cont(cllm_context *ctx, cllm_tensor *a) {
    return new_result(ctx, CLLM_OP_CONT, a->type, a->ne, a);
}

cllm_tensor *cllm_concat_rows(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b) {
    shape_buf sa, sb;
    CLLM_ASSERTF(a->type == CLLM_TYPE_F32 && b->type == CLLM_TYPE_F32 && a->ne[0] == b->ne[0] &&
                     a->ne[2] == b->ne[2] && a->ne[3] == b->ne[3],
                 "concat_rows: %s and %s", SHAPE(a, sa), SHAPE(b, sb));
    cllm_tensor *t = new_result(ctx, CLLM_OP_CONCAT, CLLM_TYPE_F32,
                                (int64_t[]){a->ne[0], a->ne[1] + b->ne[1], a->ne[2], a->ne[3]}, a);
    t->src[1] = b;
    return t;
}

cllm_tensor *cllm_get_rows(cllm_context *ctx, cllm_tensor *a, cllm_tensor *ids) {
    shape_buf sa, sb;
    CLLM_ASSERTF(ids->type == CLLM_TYPE_I32, "get_rows: ids are %s, not i32",
                 cllm_type_name(ids->type));
    CLLM_ASSERTF(a->ne[3] == 1 && ids->ne[2] == 1 && ids->ne[3] == 1 && ids->ne[1] == a->ne[2],
                 "get_rows: rows of %s by ids %s", SHAPE(a, sa), SHAPE(ids, sb));
    cllm_tensor *t = new_result(ctx, CLLM_OP_GET_ROWS, CLLM_TYPE_F32,
                                (int64_t[]){a->ne[0], ids->ne[0], a->ne[2], 1}, a);
    t->src[1] = ids;
    return t;
}

static cllm_tensor *norm_op(cllm_context *ctx, cllm_op op, cllm_tensor *a, float eps) {
    cllm_tensor *t = unary_op(ctx, op, a);
    set_param_f32(t, 0, eps);
    return t;
}

cllm_tensor *cllm_rms_norm(cllm_context *ctx, cllm_tensor *a, float eps) {
    return norm_op(ctx, CLLM_OP_RMS_NORM, a, eps);
}

cllm_tensor *cllm_norm(cllm_context *ctx, cllm_tensor *a, float eps) {
    return norm_op(ctx, CLLM_OP_NORM, a, eps);
}

cllm_tensor *cllm_soft_max(cllm_context *ctx, cllm_tensor *a, cllm_tensor *mask, float scale) {
    shape_buf sa, sb;
    CLLM_ASSERTF(a->type == CLLM_TYPE_F32, "soft_max of %s", cllm_type_name(a->type));
    if (mask) {
        CLLM_ASSERTF(mask->type == CLLM_TYPE_F32 || mask->type == CLLM_TYPE_F16,
                     "soft_max: mask of type %s", cllm_type_name(mask->type));
        CLLM_ASSERTF(mask->ne[0] == a->ne[0] && mask->ne[1] >= a->ne[1] &&
                         a->ne[2] % mask->ne[2] == 0 && a->ne[3] % mask->ne[3] == 0,
                     "soft_max: mask %s does not fit scores %s", SHAPE(mask, sb), SHAPE(a, sa));
    }
    cllm_tensor *t = new_result(ctx, CLLM_OP_SOFT_MAX, CLLM_TYPE_F32, a->ne, a);
    t->src[1] = mask;
    set_param_f32(t, 0, scale);
    return t;
}

/* The op params of a rope's angles (cllm_rope_ext's, in the same places). */
static void set_rope_params(cllm_tensor *t, int n_dims, int mode, float freq_base, float freq_scale,
                            const cllm_rope_yarn *yarn) {
    t->op_params[0] = n_dims;
    t->op_params[1] = mode;
    set_param_f32(t, 2, freq_base);
    set_param_f32(t, 3, freq_scale);
    t->op_params[4] = yarn->n_ctx_orig;
    set_param_f32(t, 5, yarn->ext_factor);
    set_param_f32(t, 6, yarn->attn_factor != 0.0f ? yarn->attn_factor : 1.0f);
    set_param_f32(t, 7, yarn->beta_fast);
    set_param_f32(t, 8, yarn->beta_slow);
}

cllm_tensor *cllm_rope(cllm_context *ctx, cllm_tensor *a, cllm_tensor *pos,
                       cllm_tensor *freq_factors, int n_dims, int mode, float freq_base,
                       float freq_scale) {
    return cllm_rope_ext(ctx, a, pos, freq_factors, n_dims, mode, freq_base, freq_scale, NULL);
}

cllm_tensor *cllm_rope_ext(cllm_context *ctx, cllm_tensor *a, cllm_tensor *pos,
                           cllm_tensor *freq_factors, int n_dims, int mode, float freq_base,
                           float freq_scale, const cllm_rope_yarn *yarn) {
    const cllm_rope_yarn none = {0};
    if (!yarn) yarn = &none;
    shape_buf sa, sb;
    CLLM_ASSERTF(a->type == CLLM_TYPE_F32, "rope of %s", cllm_type_name(a->type));
    CLLM_ASSERTF(mode == CLLM_ROPE_NORMAL || mode == CLLM_ROPE_NEOX, "rope: mode %d", mode);
    CLLM_ASSERTF(n_dims > 0 && n_dims % 2 == 0 && n_dims <= a->ne[0],
                 "rope: %d rotary dims for heads of %lld", n_dims, (long long)a->ne[0]);
    CLLM_ASSERTF(pos->type == CLLM_TYPE_I32 && pos->ne[0] == a->ne[2] && cllm_nrows(pos) == 1,
                 "rope: positions %s (%s) for %s", SHAPE(pos, sb), cllm_type_name(pos->type),
                 SHAPE(a, sa));
    CLLM_ASSERTF(!freq_factors ||
                     (freq_factors->type == CLLM_TYPE_F32 && freq_factors->ne[0] >= n_dims / 2),
                 "rope: frequency factors must be f32 with at least %d elements", n_dims / 2);
    cllm_tensor *t = new_result(ctx, CLLM_OP_ROPE, CLLM_TYPE_F32, a->ne, a);
    t->src[1] = pos;
    t->src[2] = freq_factors;
    set_rope_params(t, n_dims, mode, freq_base, freq_scale, yarn);
    return t;
}

cllm_tensor *cllm_rope_table(cllm_context *ctx, cllm_tensor *pos, cllm_tensor *freq_factors,
                             int n_dims, float freq_base, float freq_scale,
                             const cllm_rope_yarn *yarn) {
    const cllm_rope_yarn none = {0};
    if (!yarn) yarn = &none;
    shape_buf sb;
    CLLM_ASSERTF(n_dims > 0 && n_dims % 2 == 0, "rope table: %d rotary dims", n_dims);
    CLLM_ASSERTF(pos->type == CLLM_TYPE_I32 && cllm_nrows(pos) == 1,
                 "rope table: positions %s (%s)", SHAPE(pos, sb), cllm_type_name(pos->type));
    CLLM_ASSERTF(!freq_factors ||
                     (freq_factors->type == CLLM_TYPE_F32 && freq_factors->ne[0] >= n_dims / 2),
                 "rope table: frequency factors must be f32 with at least %d elements", n_dims / 2);
    cllm_tensor *t = new_result(ctx, CLLM_OP_ROPE_TABLE, CLLM_TYPE_F32,
                                (int64_t[]){n_dims, pos->ne[0], 1, 1}, pos);
    t->src[1] = freq_factors;
    set_rope_params(t, n_dims, CLLM_ROPE_NORMAL, freq_base, freq_scale, yarn);
    return t;
}

cllm_tensor *cllm_rope_tab(cllm_context *ctx, cllm_tensor *a, cllm_tensor *table, int mode) {
    shape_buf sa, sb;
    CLLM_ASSERTF(a->type == CLLM_TYPE_F32, "rope of %s", cllm_type_name(a->type));
    CLLM_ASSERTF(mode == CLLM_ROPE_NORMAL || mode == CLLM_ROPE_NEOX, "rope: mode %d", mode);
    CLLM_ASSERTF(table->op == CLLM_OP_ROPE_TABLE && table->ne[1] == a->ne[2] &&
                     table->ne[0] <= a->ne[0],
                 "rope: table %s for %s", SHAPE(table, sb), SHAPE(a, sa));
    cllm_tensor *t = new_result(ctx, CLLM_OP_ROPE, CLLM_TYPE_F32, a->ne, a);
    t->src[1] = table; /* F32: the rows of the angles, not positions */
    t->op_params[0] = (int32_t)table->ne[0];
    t->op_params[1] = mode;
    return t;
}

cllm_tensor *cllm_mul_mat(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b) {
    shape_buf sa, sb;
    CLLM_ASSERTF(a->ne[0] == b->ne[0] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0,
                 "mul_mat: %s (%s) by %s (%s)", SHAPE(a, sa), a->name, SHAPE(b, sb), b->name);
    CLLM_ASSERTF(b->type == CLLM_TYPE_F32, "mul_mat: b (%s) is %s, not f32", b->name,
                 cllm_type_name(b->type));
    cllm_tensor *t = new_result(ctx, CLLM_OP_MUL_MAT, CLLM_TYPE_F32,
                                (int64_t[]){a->ne[1], b->ne[1], b->ne[2], b->ne[3]}, a);
    t->src[1] = b;
    return t;
}

void cllm_mul_mat_set_prec(cllm_tensor *t, int prec) {
    CLLM_ASSERTF(t->op == CLLM_OP_MUL_MAT, "set_prec on %s (%s)", t->name, cllm_op_name(t->op));
    CLLM_ASSERTF(prec == CLLM_PREC_DEFAULT || prec == CLLM_PREC_F32, "mul_mat precision %d", prec);
    t->op_params[0] = prec;
}

int cllm_mul_mat_prec(const cllm_tensor *t) { return t->op_params[0]; }

void cllm_mul_mat_set_cols_alone(cllm_tensor *t, bool alone) {
    cllm_mul_mat_set_n_alone(t, alone ? INT64_MAX : 0);
}

bool cllm_mul_mat_cols_alone(const cllm_tensor *t) { return t->op_params[1] != 0; }

void cllm_mul_mat_set_n_alone(cllm_tensor *t, int64_t n) {
    CLLM_ASSERTF(t->op == CLLM_OP_MUL_MAT, "set_n_alone on %s (%s)", t->name, cllm_op_name(t->op));
    CLLM_ASSERTF(n >= 0, "mul_mat: %lld columns alone", (long long)n);
    t->op_params[1] = (int32_t)CLLM_MIN(n, (int64_t)INT32_MAX);
}

int64_t cllm_mul_mat_n_alone(const cllm_tensor *t) {
    return CLLM_MIN((int64_t)t->op_params[1], t->src[1] ? t->src[1]->ne[1] : 0);
}

cllm_tensor *cllm_attn(cllm_context *ctx, cllm_tensor *q, cllm_tensor *k, cllm_tensor *v,
                       cllm_tensor *mask, float scale) {
    shape_buf sq, sk, sv, sm;
    CLLM_ASSERTF(q->type == CLLM_TYPE_F32 && is_attn_kv(k) && is_attn_kv(v),
                 "attn: q %s, k %s, v %s", cllm_type_name(q->type), cllm_type_name(k->type),
                 cllm_type_name(v->type));
    CLLM_ASSERTF(q->ne[0] == k->ne[0] && k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] &&
                     k->ne[2] > 0 && q->ne[2] % k->ne[2] == 0 && q->ne[3] == 1 && k->ne[3] == 1 &&
                     v->ne[3] == 1,
                 "attn: q %s, k %s, v %s", SHAPE(q, sq), SHAPE(k, sk), SHAPE(v, sv));
    if (mask) {
        CLLM_ASSERTF((mask->type == CLLM_TYPE_F32 || mask->type == CLLM_TYPE_F16) &&
                         mask->ne[0] == k->ne[1] && mask->ne[1] >= q->ne[1] && mask->ne[2] == 1 &&
                         mask->ne[3] == 1,
                     "attn: mask %s (%s) for q %s, k %s", SHAPE(mask, sm),
                     cllm_type_name(mask->type), SHAPE(q, sq), SHAPE(k, sk));
    }
    cllm_tensor *t = new_result(ctx, CLLM_OP_ATTN, CLLM_TYPE_F32,
                                (int64_t[]){v->ne[0], q->ne[2], q->ne[1], 1}, q);
    t->src[1] = k;
    t->src[2] = v;
    t->src[3] = mask;
    set_param_f32(t, 0, scale);
    return t;
}
