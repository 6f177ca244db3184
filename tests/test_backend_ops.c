/*
 * Every op the graph builders use, on every device other than the CPU,
 * against the CPU: each case is a small graph (one node, or the few nodes of
 * a shared rope table) built twice from the same seeds, once placed in the
 * device's buffers and computed by its backend, once on the CPU; the outputs
 * are compared by normalized mean squared error,
 *     nmse = sum (dev - cpu)^2 / sum cpu^2,
 * against a bound per case, and no NaN or Inf may appear where the CPU has a
 * finite value. A node the device refuses (cllm_device_supports_op) counts
 * as "unsupported", never as a failure; a table of op x type -> passed /
 * failed / unsupported per device closes the run.
 *
 * The devices: the test device "test0" (always enabled here; it computes
 * with the CPU's kernels, so everything it supports must pass) and whatever
 * backend modules the registry loads (a GPU module beside the executable or
 * in $CLLM_BACKEND_PATH is picked up with no change here).
 *
 * Weights are placed as the engine places them: flagged as mul_mat's matrix,
 * then each device's weight layout (cllm_device_init_weight / convert).
 * Quantized weights come from the project's own quantize functions (the type
 * table's from_float). Shapes are small and odd on purpose (not multiples of
 * a block, a workgroup or a subgroup; one row; one column; views and
 * permuted sources where the op takes them): a software GPU runs them too.
 *
 * CLLM_BACKEND_OPS_FILTER=regex (POSIX extended) runs only the cases whose
 * op name or description matches, e.g. "mul_mat" or "attn.*f16".
 */
#include "alloc/layout.h"
#include "backend/backend.h"
#include "common/check.h"

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers (fixed seeds) ---------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

/* splitmix64 */
static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float rng_uniform(rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next(r) >> 40) / 16777216.0);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_backend_ops: out of memory\n");
        abort();
    }
    return p;
}

/* ---- cases ----------------------------------------------------------------- */

/* How a leaf is filled once it is placed. */
typedef enum fill_kind {
    FILL_UNIFORM, /* floats in [lo, hi], converted to the type (quantized: from_float) */
    FILL_IDS,     /* int32 in [0, n) */
    FILL_POS,     /* int32 positions n, n + 1, ... */
    FILL_MASK,    /* causal mask [n_kv, n_tokens] for tokens at n_past..: 0 or -inf;
                     with a window w, only the last w positions (sliding window) */
} fill_kind;

typedef struct leaf {
    cllm_tensor *t;
    fill_kind kind;
    float lo, hi;
    int64_t n, n_past, window;
    bool weight; /* mul_mat's matrix: placed in the device's weight layout */
} leaf;

enum { MAX_LEAVES = 8, MAX_OUTS = 4 };

/* A case's graph while it is built. */
typedef struct build {
    cllm_context *ctx;
    leaf leaves[MAX_LEAVES];
    int n_leaves;
    cllm_tensor *roots[MAX_OUTS]; /* built into the graph */
    int n_roots;
    cllm_tensor *outs[MAX_OUTS]; /* read and compared (a cpy's destination, not the node) */
    int n_outs;
} build;

typedef struct op_case op_case;
typedef void (*build_fn)(build *b, const op_case *c);

struct op_case {
    const char *op;  /* the op's name, for the filter and the table */
    char type[16];   /* the type column of the table */
    char desc[128];  /* what the case is, printed on failure */
    double max_nmse; /* the bound */
    double q8_nmse;  /* on a device with 8-bit activations (int8_path): the bound; 0: max_nmse */
    build_fn fn;     /* builds the graph */
    cllm_type t;     /* a type the builder uses (weight, destination, KV) */
    int64_t i[8];    /* shapes and integer parameters, per builder */
    float f[4];      /* float parameters, per builder */
};

/* Error bounds (nmse). Exact float ops may still differ by a rounding or
 * two of a transcendental function or a reduction in another order. */
#define NMSE_EXACT  1e-7 /* element-wise, copies, norms, softmax */
#define NMSE_ROPE   1e-6 /* sines, cosines and powers computed another way */
#define NMSE_MM_F32 1e-6 /* long dot products in another order (F32 or precision F32) */
#define NMSE_MM_Q   5e-4 /* F16 / BF16 / quantized matrices: a device may round b differently */
#define NMSE_ATTN   5e-4 /* attention over an F16 or BF16 cache */
#define NMSE_ATTN32 1e-5 /* over an F32 cache: a device may still take q and k to F16 */
/* Q4_0, Q4_1, Q8_0 x F32 at the default precision on a device that also
 * quantizes b to 8 bits (Q8_0 blocks): the CPU's own kernels may quantize
 * b in other groups (its AVX2 one-column kernels do), so the sums are not
 * the same integers, yet closer than b kept in F32 (a few 1e-6 against
 * 2e-5 for Q4_0) */
#define NMSE_MM_Q8 1e-5

enum { MAX_CASES = 512 };
static op_case g_cases[MAX_CASES];
static int g_n_cases;

static op_case *add_case(const char *op, build_fn fn, double max_nmse, cllm_type t) {
    CLLM_ASSERT(g_n_cases < MAX_CASES);
    op_case *c = &g_cases[g_n_cases++];
    memset(c, 0, sizeof(*c));
    c->op = op;
    c->fn = fn;
    c->max_nmse = max_nmse;
    c->t = t;
    snprintf(c->type, sizeof(c->type), "%s", cllm_type_name(t));
    return c;
}

static void set_desc(op_case *c, const char *fmt, ...) CLLM_PRINTF(2, 3);
static void set_desc(op_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->desc, sizeof(c->desc), fmt, ap);
    va_end(ap);
}

/* A leaf filled with uniform values in [lo, hi]. */
static cllm_tensor *in_uniform(build *b, cllm_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                               float lo, float hi) {
    CLLM_ASSERT(b->n_leaves < MAX_LEAVES);
    cllm_tensor *t = cllm_tensor_new_3d(b->ctx, type, ne0, ne1, ne2);
    cllm_tensor_set_name(t, "in%d", b->n_leaves);
    b->leaves[b->n_leaves++] = (leaf){.t = t, .kind = FILL_UNIFORM, .lo = lo, .hi = hi};
    return t;
}

static cllm_tensor *in_f32(build *b, int64_t ne0, int64_t ne1, int64_t ne2) {
    return in_uniform(b, CLLM_TYPE_F32, ne0, ne1, ne2, -1.0f, 1.0f);
}

/* mul_mat's matrix: flagged as the engine flags weights. */
static cllm_tensor *in_weight(build *b, cllm_type type, int64_t k, int64_t m, int64_t n2) {
    cllm_tensor *t = in_uniform(b, type, k, m, n2, -1.0f, 1.0f);
    t->flags |= CLLM_TENSOR_FLAG_MATMUL_ONLY;
    b->leaves[b->n_leaves - 1].weight = true;
    return t;
}

static cllm_tensor *in_i32(build *b, fill_kind kind, int64_t ne0, int64_t ne1, int64_t n) {
    CLLM_ASSERT(b->n_leaves < MAX_LEAVES);
    cllm_tensor *t = cllm_tensor_new_2d(b->ctx, CLLM_TYPE_I32, ne0, ne1);
    cllm_tensor_set_name(t, "in%d", b->n_leaves);
    b->leaves[b->n_leaves++] = (leaf){.t = t, .kind = kind, .n = n};
    return t;
}

static cllm_tensor *in_mask(build *b, cllm_type type, int64_t n_kv, int64_t n_tokens,
                            int64_t n_past, int64_t window) {
    CLLM_ASSERT(b->n_leaves < MAX_LEAVES);
    cllm_tensor *t = cllm_tensor_new_2d(b->ctx, type, n_kv, n_tokens);
    cllm_tensor_set_name(t, "mask");
    b->leaves[b->n_leaves++] =
        (leaf){.t = t, .kind = FILL_MASK, .n_past = n_past, .window = window};
    return t;
}

static void out(build *b, cllm_tensor *t) {
    CLLM_ASSERT(b->n_roots < MAX_OUTS && b->n_outs < MAX_OUTS);
    b->roots[b->n_roots++] = t;
    b->outs[b->n_outs++] = t;
}

/* A [ne0, ne1] view of the first ne0 elements of each row of a wider
 * tensor, `skip` elements in: rows not contiguous with each other. */
static cllm_tensor *row_view(build *b, cllm_tensor *wide, int64_t ne0, int64_t skip) {
    return cllm_view_2d(b->ctx, wide, ne0, wide->ne[1], wide->nb[1], (size_t)skip * wide->nb[0]);
}

/* ---- builders (shapes in c->i, see the table in add_cases) ------------------ */

/* add / mul: a [i0, i1, i2]; b of shape [i0, i3 ? 1 : i1, i4 ? 1 : i2], or
 * [i0] when i5; i6: a is a row view of a wider tensor; i7: b is a transpose. */
static void b_binary(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *a =
        i[6] ? row_view(b, in_f32(b, i[0] + 5, i[1], 1), i[0], 3) : in_f32(b, i[0], i[1], i[2]);
    cllm_tensor *y;
    if (i[7]) {
        y = cllm_transpose(b->ctx, in_uniform(b, c->t, a->ne[1], a->ne[0], 1, -1.0f, 1.0f));
    } else if (i[5]) {
        y = in_uniform(b, c->t, i[0], 1, 1, -1.0f, 1.0f);
    } else {
        y = in_uniform(b, c->t, i[0], i[3] ? 1 : a->ne[1], i[4] ? 1 : a->ne[2], -1.0f, 1.0f);
    }
    out(b, strcmp(c->op, "add") == 0 ? cllm_add(b->ctx, a, y) : cllm_mul(b->ctx, a, y));
}

/* scale / silu / gelu / rms_norm / norm: x c->t [i0, i1, i2], or a row view
 * of a wider tensor when i3; f0: the scale or eps. */
static void b_unary(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *x = i[3] ? row_view(b, in_uniform(b, c->t, 2 * i[0], i[1], 1, -3, 3), i[0], i[0])
                          : in_uniform(b, c->t, i[0], i[1], i[2], -3.0f, 3.0f);
    cllm_tensor *y = NULL;
    if (strcmp(c->op, "scale") == 0) y = cllm_scale(b->ctx, x, c->f[0]);
    if (strcmp(c->op, "silu") == 0) y = cllm_silu(b->ctx, x);
    if (strcmp(c->op, "gelu") == 0) y = cllm_gelu(b->ctx, x);
    if (strcmp(c->op, "rms_norm") == 0) y = cllm_rms_norm(b->ctx, x, c->f[0]);
    if (strcmp(c->op, "norm") == 0) y = cllm_norm(b->ctx, x, c->f[0]);
    CLLM_ASSERT(y);
    out(b, y);
}

/* rms_norm of per-head views of a fused q|k|v product [i0 * (i1 + 2 i2), i3]
 * (head dim i0, i1 q heads, i2 kv heads): the k heads, as qwen3 normalizes
 * them. */
static void b_norm_heads(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *qkv = in_f32(b, i[0] * (i[1] + 2 * i[2]), i[3], 1);
    const size_t es = sizeof(float);
    cllm_tensor *k = cllm_view_3d(b->ctx, qkv, i[0], i[2], i[3], (size_t)i[0] * es, qkv->nb[1],
                                  (size_t)(i[0] * i[1]) * es);
    out(b, cllm_rms_norm(b->ctx, k, c->f[0]));
}

/* The KV write: src F32 [i0 * i1, i2] (or the first i3 token rows of a
 * [i0, i1, i2] tensor when i3, or the v heads of a fused q|k|v [i0 * (i4 +
 * 2 i1), i2] when i4) into rows [i6, ..) of a cache c->t [i0 * i1, i5]. The
 * whole cache is compared: the rows outside the write stay as they were. */
static void b_kv_write(build *b, const op_case *c) {
    const int64_t *i = c->i;
    const int64_t rows = i[3] ? i[3] : i[2];
    cllm_tensor *src;
    if (i[4]) {
        cllm_tensor *qkv = in_f32(b, i[0] * (i[4] + 2 * i[1]), i[2], 1);
        src = cllm_view_3d(b->ctx, qkv, i[0], i[1], i[2], (size_t)i[0] * sizeof(float), qkv->nb[1],
                           (size_t)(i[0] * (i[4] + i[1])) * sizeof(float));
    } else if (i[3]) {
        cllm_tensor *x = in_f32(b, i[0], i[1], i[2]);
        src = cllm_view_3d(b->ctx, x, i[0], i[1], rows, x->nb[1], x->nb[2], 0);
    } else {
        src = in_f32(b, i[0] * i[1], i[2], 1);
    }
    cllm_tensor *cache = in_uniform(b, c->t, i[0] * i[1], i[5], 1, -1.0f, 1.0f);
    cllm_tensor *dst =
        cllm_view_2d(b->ctx, cache, cache->ne[0], rows, cache->nb[1], (size_t)i[6] * cache->nb[1]);
    b->roots[b->n_roots++] = cllm_cpy(b->ctx, src, dst);
    b->outs[b->n_outs++] = cache;
}

/* cpy of x c->t [i0, i1] (transposed [i1, i0] when i3) into a [i0, i1]
 * tensor of F16 (i2) or F32. */
static void b_cpy(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *x = i[3] ? cllm_transpose(b->ctx, in_uniform(b, c->t, i[1], i[0], 1, -2, 2))
                          : in_uniform(b, c->t, i[0], i[1], 1, -2.0f, 2.0f);
    cllm_tensor *dst = in_uniform(b, i[2] ? CLLM_TYPE_F16 : CLLM_TYPE_F32, i[0], i[1], 1, -1, 1);
    b->roots[b->n_roots++] = cllm_cpy(b->ctx, x, dst);
    b->outs[b->n_outs++] = dst;
}

/* cont of x c->t [i0, i1, i2] permuted (0, 2, 1, 3), or transposed when i3. */
static void b_cont(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *x = in_uniform(b, c->t, i[0], i[1], i[2], -1.0f, 1.0f);
    out(b,
        cllm_cont(b->ctx, i[3] ? cllm_transpose(b->ctx, x) : cllm_permute(b->ctx, x, 0, 2, 1, 3)));
}

/* concat_rows of a [i0, i1, i3] and b [i0, i2, i3]; a a row view when i4. */
static void b_concat(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *x = i[4] ? cllm_view_3d(b->ctx, in_f32(b, i[0] + 3, i[1], i[3]), i[0], i[1], i[3],
                                         (size_t)(i[0] + 3) * sizeof(float),
                                         (size_t)((i[0] + 3) * i[1]) * sizeof(float), 0)
                          : in_f32(b, i[0], i[1], i[3]);
    out(b, cllm_concat_rows(b->ctx, x, in_f32(b, i[0], i[2], i[3])));
}

/* get_rows of a c->t [i0, i1, i3] by ids [i2, i3] in [0, i1). */
static void b_get_rows(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *a = in_uniform(b, c->t, i[0], i[1], i[3], -1.0f, 1.0f);
    out(b, cllm_get_rows(b->ctx, a, in_i32(b, FILL_IDS, i[2], i[3], i[1])));
}

/* soft_max of a [i0, i1, i2] with a mask of type c->t (none when i3 < 0)
 * for tokens at position i3.. (sliding window i4); f0: the scale. */
static void b_soft_max(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *a = in_uniform(b, CLLM_TYPE_F32, i[0], i[1], i[2], -4.0f, 4.0f);
    cllm_tensor *mask = i[3] >= 0 ? in_mask(b, c->t, i[0], i[1], i[3], i[4]) : NULL;
    out(b, cllm_soft_max(b->ctx, a, mask, c->f[0]));
}

/* Rope parameters of a case: n_dims i3, mode i4, freq factors when i5,
 * YaRN when i6 (n_ctx_orig i6, ext_factor 1); f0 base, f1 freq_scale, f2
 * attn_factor. */
static cllm_rope_yarn case_yarn(const op_case *c) {
    return (cllm_rope_yarn){.n_ctx_orig = (int)c->i[6],
                            .ext_factor = c->i[6] ? 1.0f : 0.0f,
                            .attn_factor = c->f[2],
                            .beta_fast = 32.0f,
                            .beta_slow = 1.0f};
}

static cllm_tensor *case_ff(build *b, const op_case *c) {
    return c->i[5] ? in_uniform(b, CLLM_TYPE_F32, c->i[3] / 2, 1, 1, 1.0f, 4.0f) : NULL;
}

/* x [i0, i1, i2] (head dim, heads, tokens), or when i7 the i1 k heads of a
 * fused q|k|v [i0 * (i7 + 2 i1), i2] (a non-contiguous view). */
static cllm_tensor *rope_input(build *b, const op_case *c) {
    const int64_t *i = c->i;
    if (!i[7]) return in_uniform(b, CLLM_TYPE_F32, i[0], i[1], i[2], -2.0f, 2.0f);
    cllm_tensor *qkv = in_uniform(b, CLLM_TYPE_F32, i[0] * (i[7] + 2 * i[1]), i[2], 1, -2, 2);
    return cllm_view_3d(b->ctx, qkv, i[0], i[1], i[2], (size_t)i[0] * sizeof(float), qkv->nb[1],
                        (size_t)(i[0] * i[7]) * sizeof(float));
}

/* rope with positions (cllm_rope_ext), positions from 37 on. */
static void b_rope(build *b, const op_case *c) {
    cllm_tensor *x = rope_input(b, c);
    cllm_tensor *pos = in_i32(b, FILL_POS, c->i[2], 1, 37);
    const cllm_rope_yarn y = case_yarn(c);
    out(b, cllm_rope_ext(b->ctx, x, pos, case_ff(b, c), (int)c->i[3], (int)c->i[4], c->f[0],
                         c->f[1], &y));
}

/* The shared rotation table: a rope_table node that two rope nodes read
 * (a layer's q [i0, i1 + 1, i2] and k, rope_input), as the builders do;
 * the table and both results are compared. */
static void b_rope_shared(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *pos = in_i32(b, FILL_POS, i[2], 1, 11);
    const cllm_rope_yarn y = case_yarn(c);
    cllm_tensor *tab = cllm_rope_table(b->ctx, pos, case_ff(b, c), (int)i[3], c->f[0], c->f[1], &y);
    cllm_tensor *q = in_uniform(b, CLLM_TYPE_F32, i[0], i[1] + 1, i[2], -2.0f, 2.0f);
    cllm_tensor *k = rope_input(b, c);
    out(b, tab);
    out(b, cllm_rope_tab(b->ctx, q, tab, (int)i[4]));
    out(b, cllm_rope_tab(b->ctx, k, tab, (int)i[4]));
}

/* mul_mat of a c->t [i0, i1, i2] by b F32 [i0, i3, i2 * i4] (i4: batches of
 * b per batch of a; b a transpose of [i3, i0, ..] when i7); precision F32
 * when i5; every column alone when i6. */
static void b_mul_mat(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *a = in_weight(b, c->t, i[0], i[1], i[2]);
    cllm_tensor *x = i[7] ? cllm_transpose(b->ctx, in_f32(b, i[3], i[0], i[2] * i[4]))
                          : in_f32(b, i[0], i[3], i[2] * i[4]);
    cllm_tensor *y = cllm_mul_mat(b->ctx, a, x);
    if (i[5]) cllm_mul_mat_set_prec(y, CLLM_PREC_F32);
    if (i[6]) cllm_mul_mat_set_cols_alone(y, true);
    out(b, y);
}

/* The unfused attention's products over a c->t cache [i0 * i2, i5] of
 * head dim i0, i1 heads, i2 kv heads, i3 tokens, n_kv i4: kq = K^T q with q
 * a permuted [i0, i1, i3] (i6 == 0), or kqv = V^T kq with V transposed (a
 * non-contiguous matrix, i6 == 1). */
static void b_mul_mat_kv(build *b, const op_case *c) {
    const int64_t *i = c->i;
    cllm_tensor *cache = in_uniform(b, c->t, i[0] * i[2], i[5], 1, -1.0f, 1.0f);
    const size_t es = cllm_element_size(cache);
    cllm_tensor *kv =
        cllm_view_3d(b->ctx, cache, i[0], i[4], i[2], cache->nb[1], (size_t)i[0] * es, 0);
    if (i[6] == 0) {
        cllm_tensor *q = cllm_permute(b->ctx, in_f32(b, i[0], i[1], i[3]), 0, 2, 1, 3);
        out(b, cllm_mul_mat(b->ctx, kv, q));
    } else {
        cllm_tensor *kq = in_uniform(b, CLLM_TYPE_F32, i[4], i[3], i[1], 0.0f, 0.2f);
        out(b, cllm_mul_mat(b->ctx, cllm_transpose(b->ctx, kv), kq));
    }
}

/* Fused attention as the builders call it: caches c->t [i0 * i2, i5] (head
 * dim i0, i2 kv heads), q a permuted [i0, i1, i3] (i1 heads, i3 tokens at
 * positions i4..), n_kv = i4 + i3 rows attended to, a causal mask (sliding
 * window i6; none when i7 == 1, F16 when i7 == 2). */
static void b_attn(build *b, const op_case *c) {
    const int64_t *i = c->i;
    const int64_t n_kv = i[4] + i[3];
    cllm_tensor *kc = in_uniform(b, c->t, i[0] * i[2], i[5], 1, -1.0f, 1.0f);
    cllm_tensor *vc = in_uniform(b, c->t, i[0] * i[2], i[5], 1, -1.0f, 1.0f);
    const size_t es = cllm_element_size(kc);
    cllm_tensor *k = cllm_view_3d(b->ctx, kc, i[0], n_kv, i[2], kc->nb[1], (size_t)i[0] * es, 0);
    cllm_tensor *v = cllm_view_3d(b->ctx, vc, i[0], n_kv, i[2], vc->nb[1], (size_t)i[0] * es, 0);
    cllm_tensor *q = cllm_permute(b->ctx, in_f32(b, i[0], i[1], i[3]), 0, 2, 1, 3);
    cllm_tensor *mask =
        i[7] == 1 ? NULL
                  : in_mask(b, i[7] == 2 ? CLLM_TYPE_F16 : CLLM_TYPE_F32, n_kv, i[3], i[4], i[6]);
    out(b, cllm_attn(b->ctx, q, k, v, mask, 1.0f / sqrtf((float)i[0])));
}

/* ---- the table of cases ------------------------------------------------------ */

static op_case *with_i(op_case *c, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4,
                       int64_t i5, int64_t i6, int64_t i7) {
    const int64_t v[8] = {i0, i1, i2, i3, i4, i5, i6, i7};
    memcpy(c->i, v, sizeof(v));
    return c;
}

static const cllm_type k_weight_types[] = {
    CLLM_TYPE_F32,  CLLM_TYPE_F16,  CLLM_TYPE_BF16, CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_1,
    CLLM_TYPE_Q5_0, CLLM_TYPE_Q5_1, CLLM_TYPE_Q8_0, CLLM_TYPE_Q2_K, CLLM_TYPE_Q3_K,
    CLLM_TYPE_Q4_K, CLLM_TYPE_Q5_K, CLLM_TYPE_Q6_K,
};
#define N_WEIGHT_TYPES ((int)(sizeof(k_weight_types) / sizeof(k_weight_types[0])))

static void add_elementwise_cases(void) {
    /* add / mul: a shape, b's broadcast, views; b F16 as a norm weight may be */
    static const struct {
        int64_t ne0, ne1, ne2, b1, b2, row, view, tr;
        const char *what;
    } bin[] = {
        {67, 5, 3, 0, 0, 0, 0, 0, "same shape"},
        {67, 5, 3, 0, 0, 1, 0, 0, "b one row"},
        {67, 5, 3, 1, 0, 0, 0, 0, "b broadcast over dim 1"},
        {67, 5, 3, 1, 1, 0, 0, 0, "b broadcast over dims 1, 2"},
        {1, 1, 1, 0, 0, 0, 0, 0, "one element"},
        {300, 1, 1, 0, 0, 1, 0, 0, "one row"},
        {67, 5, 1, 0, 0, 0, 1, 0, "a a row view"},
        {67, 5, 1, 0, 0, 0, 0, 1, "b transposed"},
    };
    const char *ops[] = {"add", "mul"};
    for (int o = 0; o < 2; o++) {
        for (size_t k = 0; k < sizeof(bin) / sizeof(bin[0]); k++) {
            op_case *c = with_i(add_case(ops[o], b_binary, NMSE_EXACT, CLLM_TYPE_F32), bin[k].ne0,
                                bin[k].ne1, bin[k].ne2, bin[k].b1, bin[k].b2, bin[k].row,
                                bin[k].view, bin[k].tr);
            set_desc(c, "%s [%lld, %lld, %lld], %s", ops[o], (long long)bin[k].ne0,
                     (long long)bin[k].ne1, (long long)bin[k].ne2, bin[k].what);
        }
    }
    /* b F16 or BF16 (norm weights may be), one row or broadcast */
    const cllm_type half_types[] = {CLLM_TYPE_F16, CLLM_TYPE_BF16};
    op_case *c = NULL;
    for (int t = 0; t < 2; t++) {
        const char *tn = cllm_type_name(half_types[t]);
        c = with_i(add_case("mul", b_binary, NMSE_EXACT, half_types[t]), 67, 5, 3, 0, 0, 1, 0, 0);
        set_desc(c, "mul [67, 5, 3] by an %s row", tn);
        c = with_i(add_case("add", b_binary, NMSE_EXACT, half_types[t]), 67, 5, 3, 1, 0, 0, 0, 0);
        set_desc(c, "add [67, 5, 3] and %s broadcast over dim 1", tn);
    }

    static const struct {
        int64_t ne0, ne1, ne2, view;
    } un[] = {{67, 5, 3, 0}, {1, 1, 1, 0}, {1000, 2, 1, 0}, {67, 5, 1, 1}};
    const char *uops[] = {"scale", "silu", "gelu", "rms_norm", "norm"};
    for (int o = 0; o < 5; o++) {
        for (size_t k = 0; k < sizeof(un) / sizeof(un[0]); k++) {
            if (un[k].ne0 == 1 && o >= 3) continue; /* a norm of one element is 0 or 1 */
            c = with_i(add_case(uops[o], b_unary, NMSE_EXACT, CLLM_TYPE_F32), un[k].ne0, un[k].ne1,
                       un[k].ne2, un[k].view, 0, 0, 0, 0);
            c->f[0] = o == 0 ? 0.37f : 1e-5f;
            set_desc(c, "%s [%lld, %lld, %lld]%s", uops[o], (long long)un[k].ne0,
                     (long long)un[k].ne1, (long long)un[k].ne2, un[k].view ? ", a row view" : "");
        }
        /* an F16 or BF16 source, whole and as a row view */
        for (int t = 0; t < 2; t++) {
            for (int view = 0; view < 2; view++) {
                c = with_i(add_case(uops[o], b_unary, NMSE_EXACT, half_types[t]), 67, 5,
                           view ? 1 : 3, view, 0, 0, 0, 0);
                c->f[0] = o == 0 ? 0.37f : 1e-5f;
                set_desc(c, "%s of %s [67, 5, %d]%s", uops[o], cllm_type_name(half_types[t]),
                         view ? 1 : 3, view ? ", a row view" : "");
            }
        }
    }
    c = with_i(add_case("rms_norm", b_norm_heads, NMSE_EXACT, CLLM_TYPE_F32), 64, 4, 2, 5, 0, 0, 0,
               0);
    c->f[0] = 1e-6f;
    set_desc(c, "rms_norm of the k heads of a fused q|k|v (views)");
}

static void add_copy_cases(void) {
    const cllm_type kv_types[] = {CLLM_TYPE_F16, CLLM_TYPE_F32};
    for (int t = 0; t < 2; t++) {
        const cllm_type kt = kv_types[t];
        op_case *c = with_i(add_case("cpy", b_kv_write, NMSE_EXACT, kt), 64, 2, 7, 0, 0, 40, 30, 0);
        set_desc(c, "kv write of 7 rows of [128] into %s cache rows 30..", cllm_type_name(kt));
        c = with_i(add_case("cpy", b_kv_write, NMSE_EXACT, kt), 40, 3, 1, 0, 0, 19, 18, 0);
        set_desc(c, "kv write of one row of [120] into the last row of a %s cache",
                 cllm_type_name(kt));
        c = with_i(add_case("cpy", b_kv_write, NMSE_EXACT, kt), 64, 2, 7, 4, 0, 40, 0, 0);
        set_desc(c, "kv write of 4 of 7 token rows (a ring's wrap) into %s", cllm_type_name(kt));
        c = with_i(add_case("cpy", b_kv_write, NMSE_EXACT, kt), 32, 2, 5, 0, 4, 40, 9, 0);
        set_desc(c, "kv write of the v heads of a fused q|k|v (views) into %s", cllm_type_name(kt));
    }
    /* between the float types: F32, F16, BF16 into F32 or F16, plain or
     * from a transpose */
    const cllm_type float_types[] = {CLLM_TYPE_F32, CLLM_TYPE_F16, CLLM_TYPE_BF16};
    op_case *c = NULL;
    for (int t = 0; t < 3; t++) {
        for (int v = 0; v < 4; v++) {
            const int to_f16 = v & 1, tr = v >> 1;
            c = with_i(add_case("cpy", b_cpy, NMSE_EXACT, float_types[t]), 67, 5, to_f16, tr, 0, 0,
                       0, 0);
            set_desc(c, "cpy %s [67, 5]%s into %s", cllm_type_name(float_types[t]),
                     tr ? " (a transpose)" : "", to_f16 ? "f16" : "f32");
        }
        c = with_i(add_case("cont", b_cont, NMSE_EXACT, float_types[t]), 64, 7, 4, 0, 0, 0, 0, 0);
        set_desc(c, "cont of a permuted %s [64, 7, 4]", cllm_type_name(float_types[t]));
        c = with_i(add_case("cont", b_cont, NMSE_EXACT, float_types[t]), 37, 5, 1, 1, 0, 0, 0, 0);
        set_desc(c, "cont of a transposed %s [37, 5]", cllm_type_name(float_types[t]));
    }

    c = with_i(add_case("concat", b_concat, NMSE_EXACT, CLLM_TYPE_F32), 64, 3, 5, 4, 0, 0, 0, 0);
    set_desc(c, "concat_rows [64, 3, 4] and [64, 5, 4]");
    c = with_i(add_case("concat", b_concat, NMSE_EXACT, CLLM_TYPE_F32), 67, 1, 2, 1, 1, 0, 0, 0);
    set_desc(c, "concat_rows of a row view [67, 1] and [67, 2]");
    c = with_i(add_case("concat", b_concat, NMSE_EXACT, CLLM_TYPE_F32), 33, 1, 1, 3, 0, 0, 0, 0);
    set_desc(c, "concat_rows [33, 1, 3] and [33, 1, 3]");
}

static void add_get_rows_cases(void) {
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const cllm_type wt = k_weight_types[t];
        const int64_t blck = cllm_type_traits_of(wt)->blck_size;
        const int64_t k = blck == 256 ? 256 : blck == 32 ? 96 : 67;
        op_case *c =
            with_i(add_case("get_rows", b_get_rows, NMSE_EXACT, wt), k, 37, 5, 1, 0, 0, 0, 0);
        set_desc(c, "get_rows of 5 of 37 rows of %s [%lld]", cllm_type_name(wt), (long long)k);
        c = with_i(add_case("get_rows", b_get_rows, NMSE_EXACT, wt), k, 11, 1, 2, 0, 0, 0, 0);
        set_desc(c, "get_rows of one row per batch of 2, %s [%lld, 11]", cllm_type_name(wt),
                 (long long)k);
        /* rows of several blocks (super-blocks), a table of one row read thrice */
        const int64_t k2 = blck == 256 ? 512 : blck == 32 ? 160 : 131;
        c = with_i(add_case("get_rows", b_get_rows, NMSE_EXACT, wt), k2, 1, 3, 1, 0, 0, 0, 0);
        set_desc(c, "get_rows of the one row of %s [%lld, 1], three times", cllm_type_name(wt),
                 (long long)k2);
    }
}

static void add_soft_max_cases(void) {
    static const struct {
        int64_t n_kv, n_tok, n_head, n_past, window;
        cllm_type mask;
        const char *what;
    } sm[] = {
        {37, 7, 4, 30, 0, CLLM_TYPE_F32, "causal mask"},
        {37, 7, 4, 30, 5, CLLM_TYPE_F32, "sliding-window mask"},
        {37, 7, 4, 30, 0, CLLM_TYPE_F16, "causal F16 mask"},
        {37, 1, 3, 36, 0, CLLM_TYPE_F32, "one token"},
        {300, 3, 1, -1, 0, CLLM_TYPE_F32, "no mask"},
        {1000, 2, 1, 998, 0, CLLM_TYPE_F32, "long rows"},
        {37, 1, 3, 36, 8, CLLM_TYPE_F16, "one token, sliding-window F16 mask"},
        {1, 1, 2, 0, 0, CLLM_TYPE_F32, "one key"},
    };
    for (size_t k = 0; k < sizeof(sm) / sizeof(sm[0]); k++) {
        op_case *c = with_i(add_case("soft_max", b_soft_max, NMSE_EXACT, sm[k].mask), sm[k].n_kv,
                            sm[k].n_tok, sm[k].n_head, sm[k].n_past, sm[k].window, 0, 0, 0);
        c->f[0] = 0.125f;
        set_desc(c, "soft_max [%lld, %lld, %lld], %s", (long long)sm[k].n_kv,
                 (long long)sm[k].n_tok, (long long)sm[k].n_head, sm[k].what);
    }
}

static void add_rope_cases(void) {
    /* head dim, heads, tokens, n_dims, mode, ff, yarn n_ctx_orig, q|k|v view;
     * base, freq_scale, attn_factor */
    static const struct {
        int64_t hd, nh, nt, n_dims, mode, ff, yarn, fused;
        float base, scale, attn;
        const char *what;
    } r[] = {
        {64, 4, 5, 64, CLLM_ROPE_NORMAL, 0, 0, 0, 10000.0f, 1.0f, 1.0f, "normal"},
        {64, 4, 5, 64, CLLM_ROPE_NEOX, 0, 0, 0, 10000.0f, 1.0f, 1.0f, "neox"},
        {80, 3, 1, 32, CLLM_ROPE_NORMAL, 0, 0, 0, 10000.0f, 1.0f, 1.0f, "normal, partial, 1 token"},
        {80, 3, 7, 32, CLLM_ROPE_NEOX, 0, 0, 0, 10000.0f, 1.0f, 1.0f, "neox, partial"},
        {64, 2, 5, 64, CLLM_ROPE_NORMAL, 1, 0, 0, 500000.0f, 1.0f, 1.0f, "freq factors (llama 3)"},
        {64, 2, 5, 64, CLLM_ROPE_NEOX, 0, 0, 0, 1000000.0f, 0.25f, 1.0f, "linear scaling"},
        {64, 2, 5, 64, CLLM_ROPE_NEOX, 0, 32, 0, 10000.0f, 0.25f, 1.0f, "yarn"},
        {96, 2, 3, 96, CLLM_ROPE_NEOX, 1, 0, 0, 10000.0f, 1.0f, 1.19f,
         "longrope factors and attn factor"},
        {64, 2, 5, 64, CLLM_ROPE_NEOX, 0, 0, 4, 10000.0f, 1.0f, 1.0f, "k heads of a fused q|k|v"},
    };
    for (size_t k = 0; k < sizeof(r) / sizeof(r[0]); k++) {
        op_case *c = with_i(add_case("rope", b_rope, NMSE_ROPE, CLLM_TYPE_F32), r[k].hd, r[k].nh,
                            r[k].nt, r[k].n_dims, r[k].mode, r[k].ff, r[k].yarn, r[k].fused);
        c->f[0] = r[k].base, c->f[1] = r[k].scale, c->f[2] = r[k].attn;
        set_desc(c, "rope [%lld, %lld, %lld] n_dims %lld, %s", (long long)r[k].hd,
                 (long long)r[k].nh, (long long)r[k].nt, (long long)r[k].n_dims, r[k].what);
        /* the same through a shared table (rope_table, then rope of q and k) */
        op_case *s = add_case("rope_table", b_rope_shared, NMSE_ROPE, CLLM_TYPE_F32);
        memcpy(s->i, c->i, sizeof(c->i));
        memcpy(s->f, c->f, sizeof(c->f));
        set_desc(s, "rope_table and two ropes of it, [%lld, ., %lld] n_dims %lld, %s",
                 (long long)r[k].hd, (long long)r[k].nt, (long long)r[k].n_dims, r[k].what);
    }
}

static void add_mul_mat_cases(void) {
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const cllm_type wt = k_weight_types[t];
        const double bound = wt == CLLM_TYPE_F32 ? NMSE_MM_F32 : NMSE_MM_Q;
        const int64_t blck = cllm_type_traits_of(wt)->blck_size;
        /* K, M, N: one column, a few, many; 64 rows (the CPU's 16-row
         * layout), an odd count, one row */
        const int64_t shapes[][3] = {{256, 64, 1}, {256, 67, 7}, {256, 1, 33}, {512, 33, 17}};
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            op_case *c = with_i(add_case("mul_mat", b_mul_mat, bound, wt), shapes[s][0],
                                shapes[s][1], 1, shapes[s][2], 1, 0, 0, 0);
            set_desc(c, "mul_mat %s [%lld, %lld] x F32 [%lld, %lld]", cllm_type_name(wt),
                     (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][0],
                     (long long)shapes[s][2]);
        }
        if (blck < 256) { /* K a few blocks, not a power of two */
            const int64_t k = blck == 32 ? 96 : 67;
            op_case *c = with_i(add_case("mul_mat", b_mul_mat, bound, wt), k, 67, 1, 5, 1, 0, 0, 0);
            set_desc(c, "mul_mat %s [%lld, 67] x F32 [%lld, 5]", cllm_type_name(wt), (long long)k,
                     (long long)k);
        }
        /* precision F32: b stays F32 and rows of a are dequantized, on
         * every device; only the order of the sums differs */
        op_case *c =
            with_i(add_case("mul_mat", b_mul_mat, NMSE_MM_F32, wt), 256, 67, 1, 7, 1, 1, 0, 0);
        set_desc(c, "mul_mat %s [256, 67] x F32 [256, 7], precision F32", cllm_type_name(wt));
        c = with_i(add_case("mul_mat", b_mul_mat, NMSE_MM_F32, wt), 256, 1, 1, 1, 1, 1, 0, 0);
        set_desc(c, "mul_mat %s [256, 1] x F32 [256, 1], precision F32", cllm_type_name(wt));
        /* b a transpose (not contiguous along k) */
        c = with_i(add_case("mul_mat", b_mul_mat, bound, wt), 256, 37, 1, 5, 1, 0, 0, 1);
        set_desc(c, "mul_mat %s [256, 37] x F32 [256, 5] transposed", cllm_type_name(wt));
        if (wt == CLLM_TYPE_Q4_0 || wt == CLLM_TYPE_Q4_K || wt == CLLM_TYPE_F16) {
            c = with_i(add_case("mul_mat", b_mul_mat, bound, wt), 256, 64, 1, 7, 1, 0, 1, 0);
            set_desc(c, "mul_mat %s [256, 64] x F32 [256, 7], columns alone", cllm_type_name(wt));
        }
    }
    /* more rows than a grid dimension of a GPU (65535): a vocabulary of
     * 128 Ki or 256 Ki tokens */
    op_case *wide = with_i(add_case("mul_mat", b_mul_mat, NMSE_MM_F32, CLLM_TYPE_Q4_0), 32, 65543,
                           1, 1, 1, 1, 0, 0);
    set_desc(wide, "mul_mat q4_0 [32, 65543] x F32 [32, 1], precision F32");
    /* batched with broadcasting (grouped-query attention's batches) */
    const cllm_type bt[] = {CLLM_TYPE_F32, CLLM_TYPE_F16};
    for (int t = 0; t < 2; t++) {
        op_case *c = with_i(add_case("mul_mat", b_mul_mat, t ? NMSE_MM_Q : NMSE_MM_F32, bt[t]), 64,
                            37, 2, 5, 2, 0, 0, 0);
        set_desc(c, "mul_mat %s [64, 37, 2] x F32 [64, 5, 4] (broadcast)", cllm_type_name(bt[t]));
        /* the unfused attention's K^T q and V^T kq over cache views */
        c = with_i(add_case("mul_mat", b_mul_mat_kv, t ? NMSE_MM_Q : NMSE_MM_F32, bt[t]), 64, 4, 2,
                   7, 37, 40, 0, 0);
        set_desc(c, "mul_mat K^T q, K a view of a %s cache, q permuted", cllm_type_name(bt[t]));
        c = with_i(add_case("mul_mat", b_mul_mat_kv, t ? NMSE_MM_Q : NMSE_MM_F32, bt[t]), 64, 4, 2,
                   7, 37, 40, 1, 0);
        set_desc(c, "mul_mat V^T kq, V a transposed view of a %s cache", cllm_type_name(bt[t]));
    }
}

static void add_attn_cases(void) {
    /* head dim, heads, kv heads, tokens, n_past, cache rows, window, mask
     * (0: F32, 1: none, 2: F16) */
    static const struct {
        int64_t hd, nh, nkv, nt, past, rows, window, mask;
        const char *what;
    } a[] = {
        {64, 4, 2, 1, 36, 40, 0, 0, "decode"},
        {64, 4, 2, 7, 30, 40, 0, 0, "batch, causal"},
        {64, 4, 2, 7, 30, 40, 8, 0, "batch, sliding window"},
        {64, 4, 2, 1, 36, 40, 8, 0, "decode, sliding window"},
        {128, 2, 1, 3, 0, 5, 0, 0, "prompt, head dim 128"},
        {64, 4, 4, 1, 199, 210, 0, 0, "decode over 200 rows"},
        {64, 3, 1, 5, 195, 210, 0, 0, "batch over 200 rows"},
        {32, 2, 2, 3, 10, 16, 0, 1, "no mask"},
        {64, 2, 1, 1, 0, 4, 0, 0, "the first token"},
        {80, 5, 1, 1, 22, 24, 0, 0, "decode, head dim 80"},
        {256, 4, 1, 1, 36, 40, 8, 0, "decode, head dim 256, sliding window (gemma 3)"},
        {256, 4, 1, 5, 31, 40, 8, 0, "batch, head dim 256, sliding window (gemma 3)"},
        {64, 4, 2, 7, 30, 40, 8, 2, "batch, sliding-window F16 mask"},
    };
    const cllm_type kv_types[] = {CLLM_TYPE_F16, CLLM_TYPE_F32, CLLM_TYPE_BF16};
    for (int t = 0; t < 3; t++) {
        for (size_t k = 0; k < sizeof(a) / sizeof(a[0]); k++) {
            op_case *c = with_i(
                add_case("attn", b_attn, t == 1 ? NMSE_ATTN32 : NMSE_ATTN, kv_types[t]), a[k].hd,
                a[k].nh, a[k].nkv, a[k].nt, a[k].past, a[k].rows, a[k].window, a[k].mask);
            set_desc(c, "attn %s cache, head dim %lld, %lld/%lld heads, %lld tokens at %lld, %s",
                     cllm_type_name(kv_types[t]), (long long)a[k].hd, (long long)a[k].nh,
                     (long long)a[k].nkv, (long long)a[k].nt, (long long)a[k].past, a[k].what);
        }
    }
}

/* ---- filling, running, reading ----------------------------------------------- */

static void fill_leaf(const leaf *l, uint64_t seed) {
    cllm_tensor *t = l->t;
    rng r = {seed};
    const int64_t n = cllm_nelements(t);
    if (l->kind == FILL_IDS || l->kind == FILL_POS) {
        int32_t *v = xmalloc((size_t)n * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++) {
            v[i] = (int32_t)(l->kind == FILL_IDS ? (int64_t)(rng_next(&r) % (uint64_t)l->n)
                                                 : l->n + i);
        }
        cllm_tensor_set_all(t, v);
        free(v);
        return;
    }
    float *v = xmalloc((size_t)n * sizeof(float));
    if (l->kind == FILL_MASK) {
        for (int64_t tok = 0; tok < t->ne[1]; tok++) {
            const int64_t p = l->n_past + tok;
            for (int64_t j = 0; j < t->ne[0]; j++) {
                const bool seen = j <= p && (l->window == 0 || p - j < l->window);
                v[tok * t->ne[0] + j] = seen ? 0.0f : -INFINITY;
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++) v[i] = rng_uniform(&r, l->lo, l->hi);
    }
    /* converted row by row by the type table (quantized: the project's
     * quantize functions) */
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    const size_t size = cllm_nbytes(t);
    char *raw = xmalloc(size);
    for (int64_t row = 0; row < cllm_nrows(t); row++) {
        tt->from_float(v + row * t->ne[0], raw + (size_t)row * t->nb[1], t->ne[0]);
    }
    cllm_tensor_set(t, raw, 0, size);
    free(raw);
    free(v);
}

/* The values of t (F32, F16 or BF16, any strides) as dense floats. */
static float *read_floats(const cllm_tensor *t) {
    const size_t size = cllm_nbytes(t);
    unsigned char *raw = xmalloc(size);
    cllm_tensor_get(t, raw, 0, size);
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    CLLM_ASSERT(tt->blck_size == 1 && tt->to_float);
    float *v = xmalloc((size_t)cllm_nelements(t) * sizeof(float));
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    const size_t off = (size_t)i0 * t->nb[0] + (size_t)i1 * t->nb[1] +
                                       (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
                    tt->to_float(raw + off, &v[k++], 1);
                }
            }
        }
    }
    free(raw);
    return v;
}

typedef enum run_result { RUN_OK, RUN_UNSUPPORTED, RUN_ERROR } run_result;

/* One case's outputs on one device. */
typedef struct outputs {
    int n;
    float *v[MAX_OUTS];
    int64_t len[MAX_OUTS];
} outputs;

static void outputs_free(outputs *o) {
    for (int i = 0; i < o->n; i++) free(o->v[i]);
    memset(o, 0, sizeof(*o));
}

static uint64_t case_seed(int case_index, int leaf_index) {
    return 0x5eed0000ULL + (uint64_t)case_index * 1000003ULL + (uint64_t)leaf_index * 7919ULL;
}

/* Builds case ci in the memory of `dev`, asks dev whether it computes every
 * node, and if so computes it on `be` (a backend of dev); the outputs in *o
 * (freed by outputs_free). A failure to allocate or compute is an error,
 * said on stderr. */
static run_result run_case(int ci, cllm_device *dev, cllm_backend *be, outputs *o) {
    const op_case *c = &g_cases[ci];
    memset(o, 0, sizeof(*o));
    build b = {.ctx = cllm_context_new(64)};
    cllm_graph *g = cllm_graph_new(64);
    CLLM_ASSERT(b.ctx && g);
    c->fn(&b, c);
    for (int i = 0; i < b.n_roots; i++) cllm_graph_build(g, b.roots[i]);

    /* placed and filled as the engine places weights (then their layout)
     * before the device is asked: its answer may depend on the layout */
    run_result res = RUN_OK;
    cllm_buffer *buf = NULL;
    cllm_status st = cllm_layout_alloc(b.ctx, cllm_device_buffer_type(dev), CLLM_MEM_COMPUTE, &buf);
    if (st != CLLM_OK) {
        fprintf(stderr, "%s: %s: cannot allocate: %s\n", cllm_device_name(dev), c->desc,
                cllm_status_str(st));
        res = RUN_ERROR;
        goto done;
    }
    for (int i = 0; i < b.n_leaves; i++) {
        const leaf *l = &b.leaves[i];
        size_t scratch_size = 0;
        const bool convert = l->weight && cllm_device_init_weight(dev, l->t, &scratch_size);
        fill_leaf(l, case_seed(ci, i));
        if (convert) {
            void *scratch = xmalloc(scratch_size);
            cllm_device_convert_weight(dev, l->t, scratch, false);
            free(scratch);
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (cllm_op_has_compute(g->nodes[i]->op) && !cllm_device_supports_op(dev, g->nodes[i])) {
            res = RUN_UNSUPPORTED;
            goto done;
        }
    }
    st = cllm_backend_graph_compute(be, g);
    cllm_backend_synchronize(be);
    if (st != CLLM_OK) {
        fprintf(stderr, "%s: %s: compute failed: %s\n", cllm_device_name(dev), c->desc,
                cllm_status_str(st));
        res = RUN_ERROR;
        goto done;
    }
    o->n = b.n_outs;
    for (int i = 0; i < b.n_outs; i++) {
        o->v[i] = read_floats(b.outs[i]);
        o->len[i] = cllm_nelements(b.outs[i]);
    }
done:
    cllm_buffer_free(buf);
    cllm_graph_free(g);
    cllm_context_free(b.ctx);
    return res;
}

/* nmse of got against want over the values where want is finite; false
 * (with *nmse, *bad_nonfinite set) when it exceeds max or got is NaN or Inf
 * where want is finite, or got is finite where want is not. */
static bool compare(const float *got, const float *want, int64_t n, double max, double *nmse,
                    int64_t *bad_nonfinite) {
    double err = 0.0, ref = 0.0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(want[i])) {
            if (isfinite(got[i])) bad++;
            continue;
        }
        if (!isfinite(got[i])) {
            bad++;
            continue;
        }
        const double d = (double)got[i] - (double)want[i];
        err += d * d;
        ref += (double)want[i] * (double)want[i];
    }
    *nmse = ref > 0.0 ? err / ref : (err > 0.0 ? INFINITY : 0.0);
    *bad_nonfinite = bad;
    return bad == 0 && *nmse <= max;
}

/* ---- the summary ----------------------------------------------------------- */

enum { MAX_ROWS = 128 };

typedef struct tally_row {
    const char *op;
    char type[16];
    int passed, failed, unsupported;
    double bound; /* the largest bound (nmse) of the row's cases */
    double worst; /* the largest nmse / bound of the cases compared */
} tally_row;

typedef struct tally {
    tally_row rows[MAX_ROWS];
    int n;
} tally;

static tally_row *tally_get(tally *t, const op_case *c) {
    for (int i = 0; i < t->n; i++) {
        if (strcmp(t->rows[i].op, c->op) == 0 && strcmp(t->rows[i].type, c->type) == 0) {
            return &t->rows[i];
        }
    }
    CLLM_ASSERT(t->n < MAX_ROWS);
    tally_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof(*r));
    r->op = c->op;
    snprintf(r->type, sizeof(r->type), "%s", c->type);
    return r;
}

/* The row of case c, its bound counted. */
static tally_row *tally_case(tally *t, const op_case *c) {
    tally_row *r = tally_get(t, c);
    if (c->max_nmse > r->bound) r->bound = c->max_nmse;
    return r;
}

static void tally_print(const tally *t, const char *dev) {
    int p = 0, f = 0, u = 0;
    printf("\n%s: op x type -> passed / failed / unsupported\n", dev);
    printf("  %-12s %-6s %7s %7s %12s %10s %12s\n", "op", "type", "passed", "failed", "unsupported",
           "bound", "worst/bound");
    for (int i = 0; i < t->n; i++) {
        const tally_row *r = &t->rows[i];
        printf("  %-12s %-6s %7d %7d %12d %10.1e %12.3g\n", r->op, r->type, r->passed, r->failed,
               r->unsupported, r->bound, r->worst);
        p += r->passed, f += r->failed, u += r->unsupported;
    }
    printf("  %-19s %7d %7d %12d\n", "total", p, f, u);
}

/* ---- main ---------------------------------------------------------------------- */

static bool case_selected(const op_case *c, const regex_t *re) {
    return !re || regexec(re, c->op, 0, NULL, 0) == 0 || regexec(re, c->desc, 0, NULL, 0) == 0;
}

/* The checks' own check: a result with its sign flipped, and one with a
 * NaN, must fail the comparison that the true result passes. */
static void check_comparison_catches(const float *want, int64_t n, double max) {
    float *bad = xmalloc((size_t)n * sizeof(float));
    double nmse;
    int64_t nonfinite;
    for (int64_t i = 0; i < n; i++) bad[i] = -want[i];
    CHECK(!compare(bad, want, n, max, &nmse, &nonfinite));
    memcpy(bad, want, (size_t)n * sizeof(float));
    bad[n / 2] = NAN;
    CHECK(!compare(bad, want, n, max, &nmse, &nonfinite) || !isfinite(want[n / 2]));
    free(bad);
}

/* A device's refusal is counted as such: the test device again without
 * attn and soft_max refuses every case of those ops, which then show as
 * unsupported, and still computes the others (scale here). */
static void check_refusals(const regex_t *re) {
    CHECK(cllm_device_enable_test("budget=256MiB,ops=-attn-soft_max") == CLLM_OK);
    cllm_device *test = cllm_registry_device_by_name("test0");
    cllm_backend *be = NULL;
    CHECK(test && cllm_device_init_backend(test, NULL, &be) == CLLM_OK);
    if (!be) return;
    static tally t;
    for (int ci = 0; ci < g_n_cases; ci++) {
        const op_case *c = &g_cases[ci];
        const bool refused = strcmp(c->op, "attn") == 0 || strcmp(c->op, "soft_max") == 0;
        if (!case_selected(c, re) || !(refused || strcmp(c->op, "scale") == 0)) continue;
        outputs got;
        const run_result res = run_case(ci, test, be, &got);
        CHECKF(res == (refused ? RUN_UNSUPPORTED : RUN_OK), "test0 without attn, soft_max: %s",
               c->desc);
        tally_row *row = tally_case(&t, c);
        if (res == RUN_UNSUPPORTED) {
            row->unsupported++;
        } else if (res == RUN_OK) {
            row->passed++; /* computed; compared with the CPU in the main run */
        } else {
            row->failed++;
        }
        outputs_free(&got);
    }
    cllm_backend_free(be);
    tally_print(&t, "test0 with ops=-attn-soft_max");
    CHECK(cllm_device_enable_test("budget=256MiB") == CLLM_OK);
}

/* The edges of the GPU kernels' tiles (a device's mat-vec takes a few rows
 * for up to 8 columns, its tiled matmul tiles of rows and columns, its
 * attention a few query rows or one): 2, 3 and 8 columns, the first count
 * past them (9) and several column tiles (40) over a row count that fills
 * no tile; a plain K that ends inside a block; the tiled matmul over
 * broadcast batches; attention with head size 256, grouped-query rows that
 * fill no tile, a head size that is no power of two, a sliding window over
 * a long cache, and decode without a mask. */
static void add_kernel_edge_cases(void) {
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const cllm_type wt = k_weight_types[t];
        const double bound = wt == CLLM_TYPE_F32 ? NMSE_MM_F32 : NMSE_MM_Q;
        const int64_t blck = cllm_type_traits_of(wt)->blck_size;
        const int64_t k = blck == 256 ? 512 : blck == 32 ? 96 : 67;
        const int64_t shapes[][2] = {{5, 2}, {37, 3}, {37, 8}, {37, 9}, {37, 40}};
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            op_case *c = with_i(add_case("mul_mat", b_mul_mat, bound, wt), k, shapes[s][0], 1,
                                shapes[s][1], 1, 0, 0, 0);
            set_desc(c, "mul_mat %s [%lld, %lld] x F32 [%lld, %lld], tile edges",
                     cllm_type_name(wt), (long long)k, (long long)shapes[s][0], (long long)k,
                     (long long)shapes[s][1]);
        }
    }
    const cllm_type bt[] = {CLLM_TYPE_F32, CLLM_TYPE_Q4_0};
    for (int t = 0; t < 2; t++) {
        op_case *c = with_i(add_case("mul_mat", b_mul_mat, t ? NMSE_MM_Q : NMSE_MM_F32, bt[t]), 64,
                            37, 2, 20, 2, 0, 0, 0);
        set_desc(c, "mul_mat %s [64, 37, 2] x F32 [64, 20, 4] (broadcast, tiled)",
                 cllm_type_name(bt[t]));
    }
    /* head dim, heads, kv heads, tokens, n_past, cache rows, window, no mask */
    static const struct {
        int64_t hd, nh, nkv, nt, past, rows, window, nomask;
        const char *what;
    } a[] = {
        {256, 2, 1, 1, 40, 48, 0, 0, "decode, head dim 256"},
        {256, 3, 1, 5, 20, 32, 0, 0, "batch, head dim 256, 3 heads per kv head"},
        {80, 6, 2, 9, 50, 64, 0, 0, "batch, head dim 80"},
        {64, 8, 1, 1, 300, 310, 16, 0, "decode over 300 rows, sliding window 16"},
        {64, 2, 2, 12, 0, 12, 5, 0, "prompt, sliding window 5"},
        {48, 2, 1, 1, 20, 24, 0, 1, "decode, no mask"},
    };
    const cllm_type kv_types[] = {CLLM_TYPE_F16, CLLM_TYPE_F32};
    for (int t = 0; t < 2; t++) {
        for (size_t k = 0; k < sizeof(a) / sizeof(a[0]); k++) {
            op_case *c = with_i(
                add_case("attn", b_attn, t == 0 ? NMSE_ATTN : NMSE_ATTN32, kv_types[t]), a[k].hd,
                a[k].nh, a[k].nkv, a[k].nt, a[k].past, a[k].rows, a[k].window, a[k].nomask);
            set_desc(c, "attn %s cache, head dim %lld, %lld/%lld heads, %lld tokens at %lld, %s",
                     cllm_type_name(kv_types[t]), (long long)a[k].hd, (long long)a[k].nh,
                     (long long)a[k].nkv, (long long)a[k].nt, (long long)a[k].past, a[k].what);
        }
    }
}

/* Errors that a device's validation layer logs (a GPU module turns one on
 * from its environment, e.g. CLLM_VULKAN_VALIDATE=1) fail the run; every
 * message is printed as the default logger would. */
static int g_validation_errors;

static void on_log(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level >= cllm_log_get_level()) fprintf(stderr, "%s\n", msg);
    if (level == CLLM_LOG_ERROR && strstr(msg, "validation")) g_validation_errors++;
}

/* Whether device d computes mul_mat of Q4_0, Q4_1, Q8_0 (and Q4_K) weights
 * with 8-bit activations, as the CPU does by default: a Vulkan device with
 * integer dot products says so in its description (docs/vulkan.md). */
static bool int8_path(cllm_device *d) {
    return strstr(cllm_device_description(d), "; int8 dot products)") != NULL;
}

/* The default-precision products of those weights get the tight bound
 * there: what the int8 path computes is checked against the CPU's. Q4_K
 * keeps the quantized matrices' bound: the CPU quantizes its activations
 * per 256 (Q8_K), the device per 32 (nmse 7e-5 on lavapipe). */
static void set_q8_bounds(void) {
    for (int ci = 0; ci < g_n_cases; ci++) {
        op_case *c = &g_cases[ci];
        if (c->fn == b_mul_mat && !c->i[5] &&
            (c->t == CLLM_TYPE_Q4_0 || c->t == CLLM_TYPE_Q4_1 || c->t == CLLM_TYPE_Q8_0)) {
            c->q8_nmse = NMSE_MM_Q8;
        }
    }
}

int main(void) {
    add_elementwise_cases();
    add_copy_cases();
    add_get_rows_cases();
    add_soft_max_cases();
    add_rope_cases();
    add_mul_mat_cases();
    add_attn_cases();
    add_kernel_edge_cases();
    set_q8_bounds();
    cllm_log_set(on_log, NULL);

    regex_t re;
    const char *filter = getenv("CLLM_BACKEND_OPS_FILTER");
    const bool filtered = filter && filter[0];
    if (filtered && regcomp(&re, filter, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "test_backend_ops: CLLM_BACKEND_OPS_FILTER: bad regex \"%s\"\n", filter);
        return 1;
    }

    /* the test device is always there for the tests (its module beside
     * the executable); other devices come from the registry as they are */
    CHECK(cllm_device_enable_test("budget=256MiB") == CLLM_OK);
    cllm_device *cpu = cllm_registry_device_by_kind(CLLM_DEVICE_CPU);
    CHECK(cpu != NULL);
    cllm_backend *cpu_be = NULL;
    const cllm_backend_params one_thread = {.n_threads = 1};
    CHECK(cpu && cllm_device_init_backend(cpu, &one_thread, &cpu_be) == CLLM_OK);
    if (!cpu_be) return check_summary("test_backend_ops");

    enum { MAX_DEVS = 8 };
    cllm_device *devs[MAX_DEVS];
    cllm_backend *bes[MAX_DEVS];
    bool int8[MAX_DEVS];
    static tally tallies[MAX_DEVS];
    int n_devs = 0;
    for (int i = 0; i < cllm_registry_device_count() && n_devs < MAX_DEVS; i++) {
        cllm_device *d = cllm_registry_device(i);
        if (cllm_device_kind_of(d) == CLLM_DEVICE_CPU) continue;
        cllm_backend *be = NULL;
        const cllm_status st = cllm_device_init_backend(d, NULL, &be);
        CHECKF(st == CLLM_OK, "%s: no backend: %s", cllm_device_name(d), cllm_status_str(st));
        if (st != CLLM_OK) continue;
        devs[n_devs] = d;
        int8[n_devs] = int8_path(d);
        bes[n_devs++] = be;
        printf("device %s (%s)\n", cllm_device_name(d), cllm_device_description(d));
    }
    CHECK(cllm_registry_device_by_name("test0") != NULL);

    int n_run = 0;
    for (int ci = 0; ci < g_n_cases; ci++) {
        const op_case *c = &g_cases[ci];
        if (!case_selected(c, filtered ? &re : NULL)) continue;
        n_run++;
        outputs want;
        const run_result cres = run_case(ci, cpu, cpu_be, &want);
        /* every case is one the CPU computes: else the table is wrong */
        CHECKF(cres == RUN_OK, "cpu: %s: %s", c->desc,
               cres == RUN_UNSUPPORTED ? "unsupported" : "failed");
        if (cres != RUN_OK) continue;
        for (int o = 0; o < want.n; o++) {
            double ref = 0.0;
            for (int64_t i = 0; i < want.len[o]; i++) {
                if (isfinite(want.v[o][i])) ref += (double)want.v[o][i] * want.v[o][i];
            }
            CHECKF(ref > 0.0, "%s: output %d of the CPU is all zeros: the case tests nothing",
                   c->desc, o);
            check_comparison_catches(want.v[o], want.len[o], c->max_nmse);
        }
        for (int d = 0; d < n_devs; d++) {
            tally_row *row = tally_case(&tallies[d], c);
            const double bound = int8[d] && c->q8_nmse > 0.0 ? c->q8_nmse : c->max_nmse;
            outputs got;
            const run_result res = run_case(ci, devs[d], bes[d], &got);
            if (res == RUN_UNSUPPORTED) {
                row->unsupported++;
                continue;
            }
            bool ok = res == RUN_OK && got.n == want.n;
            for (int o = 0; ok && o < want.n; o++) {
                double nmse;
                int64_t nonfinite;
                CLLM_ASSERT(got.len[o] == want.len[o]);
                const bool close =
                    compare(got.v[o], want.v[o], want.len[o], bound, &nmse, &nonfinite);
                if (!(nmse / bound <= row->worst)) row->worst = nmse / bound;
                if (!close) {
                    fprintf(stderr, "%s: %s: output %d: nmse %.3g (max %.3g), %lld NaN/Inf\n",
                            cllm_device_name(devs[d]), c->desc, o, nmse, bound,
                            (long long)nonfinite);
                    ok = false;
                }
            }
            CHECKF(ok, "%s: %s", cllm_device_name(devs[d]), c->desc);
            if (ok) {
                row->passed++;
            } else {
                row->failed++;
            }
            outputs_free(&got);
        }
        outputs_free(&want);
    }
    printf("%d cases%s, %d devices besides the cpu\n", n_run, filtered ? " (filtered)" : "",
           n_devs);
    for (int d = 0; d < n_devs; d++) {
        tally_print(&tallies[d], cllm_device_name(devs[d]));
        cllm_backend_free(bes[d]);
    }
    check_refusals(filtered ? &re : NULL);
    CHECKF(g_validation_errors == 0, "%d errors from a validation layer", g_validation_errors);
    cllm_backend_free(cpu_be);
    if (filtered) regfree(&re);
    return check_summary("test_backend_ops");
}
