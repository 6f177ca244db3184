/*
 * Tensors, contexts, op constructors and graphs.
 *
 * A context holds tensor *metadata* only: creating a tensor never allocates
 * its data. Data lives in backend buffers and is assigned later by the graph
 * memory planner (transient tensors) or a static layout (weights, KV cache).
 * An op constructor only records a node; building a graph never executes it.
 *
 *     cllm_context *ctx = cllm_context_new(64);
 *     cllm_tensor *x = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 4096, n_tokens);
 *     cllm_tensor *w = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 4096, 4096);
 *     cllm_tensor_set_input(x);
 *     cllm_tensor *y = cllm_silu(ctx, cllm_mul_mat(ctx, w, x)); // [4096, n_tokens]
 *     cllm_graph *g = cllm_graph_new(64);
 *     cllm_graph_build(g, y);
 *     ... plan memory (alloc/galloc.h), compute on a backend ...
 *     cllm_graph_free(g);
 *     cllm_context_free(ctx);
 *
 * Shapes: ne[0] is the innermost (contiguous) dimension, as in GGUF. A matrix
 * of M rows of K elements has ne = {K, M}. nb[i] is the byte stride of
 * dimension i; for quantized types nb[0] is the block size in bytes and rows
 * are whole blocks.
 *
 * Shape mismatches passed to op constructors are programmer errors: an
 * always-on assert names the op and the shapes. Shapes that come from files
 * must be validated before they reach these constructors.
 */
#ifndef CLLM_CORE_TENSOR_H
#define CLLM_CORE_TENSOR_H

#include "core/common.h"
#include "core/types.h"

#define CLLM_MAX_DIMS      4
#define CLLM_MAX_SRC       5
#define CLLM_MAX_OP_PARAMS 16 /* int32 slots */
#define CLLM_MAX_NAME      64

typedef enum cllm_op {
    CLLM_OP_NONE = 0, /* a leaf: input, weight or state; no computation */

    /* element-wise and broadcasting */
    CLLM_OP_ADD,   /* a + b, b broadcast over a */
    CLLM_OP_MUL,   /* a * b, b broadcast over a */
    CLLM_OP_SCALE, /* a * s */
    CLLM_OP_SILU,  /* x * sigmoid(x) */
    CLLM_OP_GELU,  /* tanh approximation */

    /* copies */
    CLLM_OP_CPY,    /* copy a into b (types may differ); the result is a view of b */
    CLLM_OP_CONT,   /* a contiguous copy of a */
    CLLM_OP_CONCAT, /* the rows of a, then the rows of b */

    /* row-wise */
    CLLM_OP_GET_ROWS,   /* rows of a selected by int32 ids */
    CLLM_OP_RMS_NORM,   /* x / sqrt(mean(x^2) + eps) */
    CLLM_OP_NORM,       /* (x - mean) / sqrt(var + eps) */
    CLLM_OP_SOFT_MAX,   /* softmax(a * scale + mask) */
    CLLM_OP_ROPE,       /* rotary position embedding */
    CLLM_OP_ROPE_TABLE, /* a rope's cos and sin per position, shared by rope nodes */

    /* matrix */
    CLLM_OP_MUL_MAT, /* a^T b batched over dims 2-3 with broadcasting of a */
    CLLM_OP_ATTN,    /* fused softmax(q k^T * scale + mask) v, online softmax */

    /* views: no computation, the result aliases its source */
    CLLM_OP_VIEW,
    CLLM_OP_RESHAPE,
    CLLM_OP_PERMUTE,
    CLLM_OP_TRANSPOSE,

    CLLM_OP_COUNT
} cllm_op;

/*
 * What the planner and the backends may assume of an op: one table in
 * tensor.c, indexed by the op (an op out of range reads as "unknown", with
 * every flag false). Thread-safe (constant).
 */
typedef struct cllm_op_traits {
    const char *name; /* "mul_mat", ... */
    bool compute;     /* computes something (not NONE, not a view) */
    bool view;        /* the result aliases its source's data */
    bool inplace;     /* kernels are correct with dst == src[0] (the planner may share) */
    bool row_local;   /* each dst row from the same row of src[0]: rows split freely */
    bool workspace;   /* a backend may need scratch memory for it */
} cllm_op_traits;

const cllm_op_traits *cllm_op_get_traits(cllm_op op);

/* Accessors of cllm_op_get_traits(op). */
const char *cllm_op_name(cllm_op op);
bool cllm_op_is_view(cllm_op op);
bool cllm_op_has_compute(cllm_op op);
bool cllm_op_can_inplace(cllm_op op);
bool cllm_op_is_row_local(cllm_op op);
bool cllm_op_may_need_workspace(cllm_op op);

/* Rope modes. */
enum {
    CLLM_ROPE_NORMAL = 0, /* rotates adjacent pairs (x[2i], x[2i+1]) (llama) */
    CLLM_ROPE_NEOX = 2,   /* rotates (x[i], x[i + n_dims/2]) (GPT-NeoX, qwen2, ...) */
};

enum cllm_tensor_flag {
    CLLM_TENSOR_FLAG_INPUT = 1,  /* set by the caller before compute; never overwritten */
    CLLM_TENSOR_FLAG_OUTPUT = 2, /* read by the caller after compute; never overwritten */
    /* a weight that every graph reads only as the first source of mul_mat,
     * itself (never through a view): set by the model layer on its
     * matrices, so that a device may store such a weight in a layout of
     * its own (backend.h: cllm_device_init_weight) */
    CLLM_TENSOR_FLAG_MATMUL_ONLY = 4,
};

typedef struct cllm_buffer cllm_buffer;

typedef struct cllm_tensor {
    cllm_type type;
    int64_t ne[CLLM_MAX_DIMS]; /* elements per dimension */
    size_t nb[CLLM_MAX_DIMS];  /* byte strides */

    cllm_op op;
    int32_t op_params[CLLM_MAX_OP_PARAMS];
    int32_t flags;
    struct cllm_tensor *src[CLLM_MAX_SRC];

    /* views: the tensor whose data this one aliases, and the byte offset */
    struct cllm_tensor *view_src;
    size_t view_offs;

    cllm_buffer *buffer; /* NULL until allocated */
    void *data;          /* NULL until allocated */
    /* how the device that holds the data stores it: 0 as ne and nb say,
     * else a value private to that device's backend (its weight layout,
     * backend.h: cllm_device_init_weight) */
    int32_t layout;

    char name[CLLM_MAX_NAME];
} cllm_tensor;

/* ---- contexts ---------------------------------------------------------- */

typedef struct cllm_context cllm_context;

/*
 * A context that can hold up to `max_tensors` tensors (metadata only).
 * Returns NULL if the host allocation fails. Exceeding the capacity is a
 * programmer error (asserted).
 */
cllm_context *cllm_context_new(int max_tensors);
void cllm_context_free(cllm_context *ctx);
/* Forgets every tensor of the context (keeps its capacity). */
void cllm_context_reset(cllm_context *ctx);
int cllm_context_n_tensors(const cllm_context *ctx);
/* The i-th tensor created in ctx, in creation order. */
cllm_tensor *cllm_context_tensor(cllm_context *ctx, int i);
/* The first tensor named `name`, or NULL. */
cllm_tensor *cllm_context_find(cllm_context *ctx, const char *name);
/* Bytes of host memory the context itself uses (metadata). */
size_t cllm_context_overhead(int max_tensors);

/* ---- tensors ----------------------------------------------------------- */

cllm_tensor *cllm_tensor_new(cllm_context *ctx, cllm_type type, int n_dims, const int64_t *ne);
cllm_tensor *cllm_tensor_new_1d(cllm_context *ctx, cllm_type type, int64_t ne0);
cllm_tensor *cllm_tensor_new_2d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1);
cllm_tensor *cllm_tensor_new_3d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1,
                                int64_t ne2);
cllm_tensor *cllm_tensor_new_4d(cllm_context *ctx, cllm_type type, int64_t ne0, int64_t ne1,
                                int64_t ne2, int64_t ne3);

/* printf-style name; returns t */
cllm_tensor *cllm_tensor_set_name(cllm_tensor *t, const char *fmt, ...) CLLM_PRINTF(2, 3);
void cllm_tensor_set_input(cllm_tensor *t);
void cllm_tensor_set_output(cllm_tensor *t);

int64_t cllm_nelements(const cllm_tensor *t);
int64_t cllm_nrows(const cllm_tensor *t); /* ne1 * ne2 * ne3 */
/* Bytes spanned by the tensor's data (from data to the last byte it uses). */
size_t cllm_nbytes(const cllm_tensor *t);
size_t cllm_element_size(const cllm_tensor *t); /* type_size / blck_size for plain types */
bool cllm_is_contiguous(const cllm_tensor *t);
/* Rows (dim 0) are contiguous; higher dims may have any strides. */
bool cllm_is_contiguous_rows(const cllm_tensor *t);
bool cllm_same_shape(const cllm_tensor *a, const cllm_tensor *b);
/* b can be broadcast over a: a.ne[i] % b.ne[i] == 0 for every dim. */
bool cllm_can_repeat(const cllm_tensor *b, const cllm_tensor *a);
/* "[5, 7, 11, 13]" into buf; returns buf. */
const char *cllm_shape_str(const cllm_tensor *t, char *buf, size_t size);

/* Op parameters, stored as int32 slots. */
static inline int32_t cllm_get_op_param_i32(const cllm_tensor *t, int i) { return t->op_params[i]; }
static inline float cllm_get_op_param_f32(const cllm_tensor *t, int i) {
    float f;
    __builtin_memcpy(&f, &t->op_params[i], sizeof(f));
    return f;
}

/* ---- views (no computation; the result aliases a) ---------------------- */

cllm_tensor *cllm_view_1d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, size_t offset);
cllm_tensor *cllm_view_2d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, size_t nb1,
                          size_t offset);
cllm_tensor *cllm_view_3d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          size_t nb1, size_t nb2, size_t offset);
cllm_tensor *cllm_view_4d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset);
/* a must be contiguous; the element count must match. */
cllm_tensor *cllm_reshape_2d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1);
cllm_tensor *cllm_reshape_3d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1,
                             int64_t ne2);
cllm_tensor *cllm_reshape_4d(cllm_context *ctx, cllm_tensor *a, int64_t ne0, int64_t ne1,
                             int64_t ne2, int64_t ne3);
/* Dimension i of a becomes dimension axis_i of the result. */
cllm_tensor *cllm_permute(cllm_context *ctx, cllm_tensor *a, int axis0, int axis1, int axis2,
                          int axis3);
/* Swaps dims 0 and 1. */
cllm_tensor *cllm_transpose(cllm_context *ctx, cllm_tensor *a);

/* ---- ops (each records a node; the maths is in the comment) ------------ */

/* out[i] = a[i] + b[i mod b.ne]: b broadcast over a. F32 out, shape of a. */
cllm_tensor *cllm_add(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b);
/* out[i] = a[i] * b[i mod b.ne]: b broadcast over a. */
cllm_tensor *cllm_mul(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b);
/* out = a * s */
cllm_tensor *cllm_scale(cllm_context *ctx, cllm_tensor *a, float s);
/* out = a / (1 + exp(-a)) */
cllm_tensor *cllm_silu(cllm_context *ctx, cllm_tensor *a);
/* out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) */
cllm_tensor *cllm_gelu(cllm_context *ctx, cllm_tensor *a);

/* Copies a into b element by element (same element count, any shapes and
 * strides, type converted). Returns a view of b that depends on the copy:
 * use it to order later reads of b after the write. */
cllm_tensor *cllm_cpy(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b);
/* A contiguous copy of a, same type and shape. */
cllm_tensor *cllm_cont(cllm_context *ctx, cllm_tensor *a);
/* a: F32 [K, N, B, C], b: F32 [K, M, B, C] (any strides);
 * out[:, n, b, c] = n < N ? a[:, n, b, c] : b[:, n - N, b, c]; out is F32
 * [K, N + M, B, C], contiguous. (The tokens of several sequences, each
 * attended to on its own, joined into one batch again.) */
cllm_tensor *cllm_concat_rows(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b);

/* a: [K, R, B] any type with to_float; ids: int32 [N, B].
 * out[:, n, b] = float(a[:, ids[n, b], b]); out is F32 [K, N, B]. */
cllm_tensor *cllm_get_rows(cllm_context *ctx, cllm_tensor *a, cllm_tensor *ids);

/* Per row of a: out = x / sqrt(mean(x^2) + eps). */
cllm_tensor *cllm_rms_norm(cllm_context *ctx, cllm_tensor *a, float eps);
/* Per row of a: out = (x - mean(x)) / sqrt(var(x) + eps). */
cllm_tensor *cllm_norm(cllm_context *ctx, cllm_tensor *a, float eps);

/* Per row of a: out = softmax(a * scale + mask). mask (optional, F32 or F16)
 * has ne0 == a.ne0 and ne1 >= a.ne1; it is shared by dims 2-3 (broadcast
 * when mask.ne2/ne3 are 1). -INFINITY masks an element out; a row masked out
 * entirely gives zeros. */
cllm_tensor *cllm_soft_max(cllm_context *ctx, cllm_tensor *a, cllm_tensor *mask, float scale);

/*
 * Rotary position embedding. a: [head_dim, n_head, n_tokens, 1] (F32),
 * pos: int32 [n_tokens]. The first n_dims elements of each head are rotated
 * (partial rotary when n_dims < head_dim); the rest pass through.
 *   theta_i = pos * freq_scale * base^(-2i/n_dims) / ff[i]   for i < n_dims/2
 *   NORMAL: (x[2i], x[2i+1]) rotated by theta_i
 *   NEOX:   (x[i], x[i + n_dims/2]) rotated by theta_i
 * freq_factors (optional, F32 [n_dims/2]) divides each frequency (llama-3
 * rope scaling); NULL means 1.
 */
cllm_tensor *cllm_rope(cllm_context *ctx, cllm_tensor *a, cllm_tensor *pos,
                       cllm_tensor *freq_factors, int n_dims, int mode, float freq_base,
                       float freq_scale);

/* YaRN's part of a rope (cllm_rope_ext); {0} is plain rope. */
typedef struct cllm_rope_yarn {
    int n_ctx_orig;    /* the context the model was trained for */
    float ext_factor;  /* 0: off; 1: YaRN's ramp between interpolation and extrapolation */
    float attn_factor; /* multiplies cos and sin (0 means 1) */
    float beta_fast, beta_slow;
} cllm_rope_yarn;

/*
 * cllm_rope with YaRN and a magnitude factor (as llama.cpp's rope_ext):
 *   theta_e = pos * base^(-2i/n_dims) / ff[i]       (extrapolated)
 *   theta_i = freq_scale * theta_e                   (interpolated)
 *   ext_factor == 0: theta = theta_i, m = attn_factor
 *   else: dims [lo, hi] from n_ctx_orig and beta_fast / beta_slow:
 *         d(beta) = n_dims * ln(n_ctx_orig / (2 pi beta)) / (2 ln base),
 *         lo = max(0, floor(d(beta_fast))), hi = min(n_dims - 1, ceil(d(beta_slow)));
 *         r = (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)) * ext_factor,
 *         theta = theta_i (1 - r) + theta_e r,
 *         m = attn_factor * (1 + 0.1 ln(1 / freq_scale))
 *   pairs rotated by theta, then scaled by m.
 */
cllm_tensor *cllm_rope_ext(cllm_context *ctx, cllm_tensor *a, cllm_tensor *pos,
                           cllm_tensor *freq_factors, int n_dims, int mode, float freq_base,
                           float freq_scale, const cllm_rope_yarn *yarn);

/*
 * The rotations of cllm_rope_ext per position, once for every rope node
 * that shares them (a layer's q and k, and every layer of a model: their
 * sines and cosines were computed twice per layer before): F32
 * [n_dims, n_tokens], row t holding cos(theta_i) m for i < n_dims/2, then
 * sin(theta_i) m, for position pos[t] (theta, m as cllm_rope_ext).
 */
cllm_tensor *cllm_rope_table(cllm_context *ctx, cllm_tensor *pos, cllm_tensor *freq_factors,
                             int n_dims, float freq_base, float freq_scale,
                             const cllm_rope_yarn *yarn);

/* cllm_rope_ext of a by the rotations of `table` (cllm_rope_table): the
 * same values, bit for bit. */
cllm_tensor *cllm_rope_tab(cllm_context *ctx, cllm_tensor *a, cllm_tensor *table, int mode);

/*
 * a: [K, M, A2, A3] (F32, F16, BF16, later quantized), b: [K, N, B2, B3] F32
 * with B2 % A2 == 0 and B3 % A3 == 0.
 *   out[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3]
 * out is F32 [M, N, B2, B3]. The broadcast maps B2/A2 consecutive batches of b
 * to one batch of a (grouped-query attention).
 */
cllm_tensor *cllm_mul_mat(cllm_context *ctx, cllm_tensor *a, cllm_tensor *b);

/* Precision of a mul_mat node (op param 0). By default a backend may
 * quantize b to the dot-product type of a (e.g. Q8_0 activations for Q4_0
 * weights); CLLM_PREC_F32 keeps b in F32 and dequantizes rows of a instead. */
enum { CLLM_PREC_DEFAULT = 0, CLLM_PREC_F32 = 1 };
void cllm_mul_mat_set_prec(cllm_tensor *t, int prec);
int cllm_mul_mat_prec(const cllm_tensor *t);

/* Columns of b computed as they would be alone (op param 1): each output
 * column bit for bit what a mul_mat with that one column gives, whatever
 * the other columns (a backend then uses its one-column kernels, however
 * many columns there are). For a step of several sequences, one token
 * each, so that no sequence's result depends on the others.
 * set_n_alone(t, n): only the first n columns (of each batch) are; the
 * others are computed as a mul_mat of those columns alone computes them
 * (a prompt chunk that joins a step: cllm_instance_build). set_cols_alone
 * (t, true) is every column; n_alone is min(n, b's columns). */
void cllm_mul_mat_set_cols_alone(cllm_tensor *t, bool alone);
bool cllm_mul_mat_cols_alone(const cllm_tensor *t);
void cllm_mul_mat_set_n_alone(cllm_tensor *t, int64_t n);
int64_t cllm_mul_mat_n_alone(const cllm_tensor *t);

/*
 * Fused attention, never storing the n_tokens x n_kv score matrix:
 *   q: [D, n_tokens, n_head, 1] F32; k: [D, n_kv, n_head_kv, 1];
 *   v: [Dv, n_kv, n_head_kv, 1] (k, v: F32, F16 or BF16, any strides; or
 *   Q8_0 / Q4_0 with whole blocks per row, blocks contiguous: a quantized
 *   KV cache);
 *   mask: optional [n_kv, >= n_tokens] F32 or F16, shared by all heads.
 *   For head h, kv head g = h / (n_head / n_head_kv):
 *   out[:, h, t] = sum_j softmax_j(scale * q[:, t, h] . k[:, j, g] + mask[j, t]) v[:, j, g]
 * out is F32 [Dv, n_head, n_tokens, 1] (heads adjacent, ready to reshape to
 * [Dv * n_head, n_tokens]). Computed with an online softmax.
 */
cllm_tensor *cllm_attn(cllm_context *ctx, cllm_tensor *q, cllm_tensor *k, cllm_tensor *v,
                       cllm_tensor *mask, float scale);

/* ---- graphs ------------------------------------------------------------ */

typedef struct cllm_graph {
    int n_nodes; /* tensors computed by ops (op != NONE), in topological order */
    int n_leafs; /* tensors with op == NONE: inputs, weights, state */
    int max_nodes;
    cllm_tensor **nodes;
    cllm_tensor **leafs;
    /* open-addressing set of visited tensors */
    size_t hash_size;
    const cllm_tensor **hash;
} cllm_graph;

/* A graph with room for `max_nodes` nodes and as many leafs. NULL on OOM. */
cllm_graph *cllm_graph_new(int max_nodes);
void cllm_graph_free(cllm_graph *g);
/* Adds `t` and everything it depends on, in topological order (sources
 * before their consumers). Can be called for several outputs. Exceeding the
 * capacity is a programmer error. */
void cllm_graph_build(cllm_graph *g, cllm_tensor *t);
/* Empties the graph (keeps its capacity). */
void cllm_graph_reset(cllm_graph *g);
/* Index of t among the nodes, or -1. */
int cllm_graph_node_index(const cllm_graph *g, const cllm_tensor *t);

#endif /* CLLM_CORE_TENSOR_H */
