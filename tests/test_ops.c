/*
 * The CPU kernels against plain double-precision references written here
 * with 4-D index loops: every op on odd shapes, non-contiguous inputs
 * (permuted, transposed, offset views), broadcasting, F16 and BF16 inputs, in
 * place, with 1, 2 and 3 threads; the fused attention against the unfused
 * ops; which nodes the backend refuses; the workspace it allocates against
 * what the kernels declare. Seeds are fixed.
 *
 * Every test builds a context, places all its tensors with
 * cllm_layout_alloc, fills the inputs with cllm_tensor_set, reads the inputs
 * back as dense doubles *through their strides* (before computing: in-place
 * ops overwrite them), computes the graph, and compares with the reference.
 */
#include "alloc/layout.h"
#include "backend/cpu/cpu-ops.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "common/check.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 3
#define PI          3.14159265358979323846
static cllm_backend *g_be[MAX_THREADS + 1]; /* g_be[n] computes with n threads */

/* ---- random numbers (fixed seeds) ---------------------------------------- */

static uint64_t g_rng;

static void rng_seed(uint64_t seed) { g_rng = seed; }

/* splitmix64 */
static uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) / 16777216.0);
}

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

/* ---- tensors: fill, read back, compare ------------------------------------ */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_ops: out of memory\n");
        abort();
    }
    return p;
}

static int64_t nel(const int64_t ne[4]) { return ne[0] * ne[1] * ne[2] * ne[3]; }

/* Dense index of (i0, i1, i2, i3) in a tensor of shape ne. */
static int64_t idx4(const int64_t ne[4], int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
}

static void store_value(cllm_type type, void *p, float v) {
    switch (type) {
    case CLLM_TYPE_F32: memcpy(p, &v, 4); break;
    case CLLM_TYPE_F16: {
        const cllm_fp16 h = cllm_fp32_to_fp16(v);
        memcpy(p, &h, 2);
        break;
    }
    case CLLM_TYPE_BF16: {
        const cllm_bf16 h = cllm_fp32_to_bf16(v);
        memcpy(p, &h, 2);
        break;
    }
    case CLLM_TYPE_I32: {
        const int32_t i = (int32_t)v;
        memcpy(p, &i, 4);
        break;
    }
    default: abort();
    }
}

static double load_value(cllm_type type, const void *p) {
    switch (type) {
    case CLLM_TYPE_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case CLLM_TYPE_F16: {
        cllm_fp16 h;
        memcpy(&h, p, 2);
        return cllm_fp16_to_fp32(h);
    }
    case CLLM_TYPE_BF16: {
        cllm_bf16 h;
        memcpy(&h, p, 2);
        return cllm_bf16_to_fp32(h);
    }
    case CLLM_TYPE_I32: {
        int32_t i;
        memcpy(&i, p, 4);
        return i;
    }
    default: abort();
    }
}

/* A value of `type` rounded as storing it would. */
static double round_to(cllm_type type, double v) {
    if (type == CLLM_TYPE_I32) return v; /* copied as is */
    unsigned char b[8];
    store_value(type, b, (float)v);
    return load_value(type, b);
}

/* Sets a placed, contiguous, non-view tensor from floats (converted to its
 * type; quantized types through from_float, row by row). */
static void set_floats(cllm_tensor *t, const float *vals) {
    const size_t size = cllm_nbytes(t);
    char *buf = xmalloc(size);
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    if (tt->blck_size > 1) {
        for (int64_t r = 0; r < cllm_nrows(t); r++) {
            tt->from_float(vals + r * t->ne[0], buf + (size_t)r * t->nb[1], t->ne[0]);
        }
    } else {
        for (int64_t i = 0; i < cllm_nelements(t); i++) {
            store_value(t->type, buf + (size_t)i * tt->type_size, vals[i]);
        }
    }
    cllm_tensor_set(t, buf, 0, size);
    free(buf);
}

static void fill_uniform(cllm_tensor *t, float lo, float hi) {
    const int64_t n = cllm_nelements(t);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = rng_uniform(lo, hi);
    set_floats(t, v);
    free(v);
}

static void set_i32(cllm_tensor *t, const int32_t *vals) {
    cllm_tensor_set(t, vals, 0, (size_t)cllm_nelements(t) * sizeof(int32_t));
}

/* The elements of t (any strides, F32/F16/BF16/I32 or quantized with
 * to_float) as dense doubles, i0 fastest. Read element by element through
 * nb[] (quantized: row by row). The caller frees. */
static double *read_dense(const cllm_tensor *t) {
    const size_t size = cllm_nbytes(t);
    unsigned char *raw = xmalloc(size);
    cllm_tensor_get(t, raw, 0, size);
    double *out = xmalloc((size_t)cllm_nelements(t) * sizeof(double));
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    float *row = xmalloc((size_t)t->ne[0] * sizeof(float));
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                const size_t off =
                    (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
                const int64_t base = idx4(t->ne, 0, i1, i2, i3);
                if (tt->blck_size > 1) {
                    tt->to_float(raw + off, row, t->ne[0]);
                    for (int64_t i0 = 0; i0 < t->ne[0]; i0++) out[base + i0] = row[i0];
                    continue;
                }
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    out[base + i0] = load_value(t->type, raw + off + (size_t)i0 * t->nb[0]);
                }
            }
        }
    }
    free(row);
    free(raw);
    return out;
}

/* Checks |got - want| <= atol + rtol |want| for n values (NaN always fails);
 * one CHECK per call, naming the worst value. */
static void check_close(const char *what, const double *got, const double *want, int64_t n,
                        double atol, double rtol) {
    int64_t bad = 0, worst = -1;
    double worst_excess = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs(got[i] - want[i]);
        const double excess = err - (atol + rtol * fabs(want[i]));
        if (!(excess <= 0.0)) { /* NaN fails too */
            bad++;
            if (worst < 0 || !(excess <= worst_excess)) {
                worst = i;
                worst_excess = excess;
            }
        }
    }
    CHECKF(bad == 0, "%s: %lld of %lld values off, e.g. [%lld]: got %.9g, want %.9g", what,
           (long long)bad, (long long)n, (long long)(worst < 0 ? 0 : worst),
           worst < 0 ? 0.0 : got[worst], worst < 0 ? 0.0 : want[worst]);
}

/* ---- contexts, placement, compute ---------------------------------------- */

static cllm_context *ctx_new(void) {
    cllm_context *ctx = cllm_context_new(256);
    if (!ctx) abort();
    return ctx;
}

/* Places every tensor of ctx in one buffer (no reuse between tensors). */
static cllm_buffer *place_all(cllm_context *ctx) {
    cllm_buffer *buf = NULL;
    const cllm_status st = cllm_layout_alloc(ctx, cllm_cpu_buffer_type(), CLLM_MEM_COMPUTE, &buf);
    if (st != CLLM_OK) {
        fprintf(stderr, "test_ops: cannot place tensors\n");
        abort();
    }
    return buf;
}

static void ctx_done(cllm_context *ctx, cllm_buffer *buf) {
    cllm_buffer_free(buf);
    cllm_context_free(ctx);
}

/* dst computed in the memory of its src[0] (what the planner does in place). */
static void make_inplace(cllm_tensor *dst) {
    dst->data = dst->src[0]->data;
    dst->buffer = dst->src[0]->buffer;
}

/* Computes the graph of outs[0..n) on be. */
static cllm_status compute_n(cllm_backend *be, cllm_tensor **outs, int n) {
    cllm_graph *g = cllm_graph_new(256);
    if (!g) abort();
    for (int i = 0; i < n; i++) cllm_graph_build(g, outs[i]);
    const cllm_status st = cllm_backend_graph_compute(be, g);
    cllm_graph_free(g);
    return st;
}

static cllm_status compute(cllm_backend *be, cllm_tensor *out) { return compute_n(be, &out, 1); }

/*
 * A tensor of shape ne and type in one of several layouts:
 *   0: contiguous
 *   1: permuted (a view of a [ne2, ne0, ne3, ne1] tensor)
 *   2: offset view (rows of ne0 inside rows of ne0 + 3, two elements in)
 *   3: transposed (dims 0 and 1 swapped: nb[0] is a row of another tensor)
 */
enum { LAYOUT_CONTIGUOUS, LAYOUT_PERMUTED, LAYOUT_OFFSET, LAYOUT_TRANSPOSED, LAYOUT_COUNT };
static const char *const k_layout_names[] = {"contiguous", "permuted", "offset", "transposed"};

static cllm_tensor *new_layout(cllm_context *ctx, cllm_type type, const int64_t ne[4], int layout) {
    switch (layout) {
    case LAYOUT_PERMUTED: {
        cllm_tensor *root = cllm_tensor_new_4d(ctx, type, ne[2], ne[0], ne[3], ne[1]);
        return cllm_permute(ctx, root, 2, 0, 3, 1);
    }
    case LAYOUT_OFFSET: {
        cllm_tensor *root = cllm_tensor_new_4d(ctx, type, ne[0] + 3, ne[1], ne[2], ne[3]);
        return cllm_view_4d(ctx, root, ne[0], ne[1], ne[2], ne[3], root->nb[1], root->nb[2],
                            root->nb[3], 2 * root->nb[0]);
    }
    case LAYOUT_TRANSPOSED: {
        cllm_tensor *root = cllm_tensor_new_4d(ctx, type, ne[1], ne[0], ne[2], ne[3]);
        return cllm_transpose(ctx, root);
    }
    default: return cllm_tensor_new_4d(ctx, type, ne[0], ne[1], ne[2], ne[3]);
    }
}

/* The tensor that owns t's memory. */
static cllm_tensor *root_of(cllm_tensor *t) { return t->view_src ? t->view_src : t; }

static void fill_root_uniform(cllm_tensor *t, float lo, float hi) {
    fill_uniform(root_of(t), lo, hi);
}

/* ---- element-wise: add, mul, scale, silu, gelu ---------------------------- */

typedef enum ew_op { EW_ADD, EW_MUL, EW_SCALE, EW_SILU, EW_GELU, EW_COUNT } ew_op;
static const char *const k_ew_names[] = {"add", "mul", "scale", "silu", "gelu"};

static double ref_unary(ew_op op, double x, double s) {
    switch (op) {
    case EW_SCALE: return x * s;
    case EW_SILU: return x / (1.0 + exp(-x));
    case EW_GELU: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
    default: abort();
    }
}

/* out[i] = a[i] op b[i mod b.ne] (binary) or f(a[i]) (unary) */
static void ref_elementwise(ew_op op, const double *a, const int64_t *ne, const double *b,
                            const int64_t *bne, double s, double *out) {
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++)
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    const int64_t i = idx4(ne, i0, i1, i2, i3);
                    if (op == EW_ADD || op == EW_MUL) {
                        const double bv =
                            b[idx4(bne, i0 % bne[0], i1 % bne[1], i2 % bne[2], i3 % bne[3])];
                        out[i] = op == EW_ADD ? a[i] + bv : a[i] * bv;
                    } else {
                        out[i] = ref_unary(op, a[i], s);
                    }
                }
}

typedef struct ew_case {
    cllm_type a_type;
    int a_layout;
    cllm_type b_type;
    int b_layout;
    int64_t b_ne[4]; /* 0: the dimension of a */
} ew_case;

static void run_elementwise(ew_op op, const ew_case *c, int nth, bool inplace) {
    const int64_t ne[4] = {5, 7, 11, 13};
    const float s = -1.75f;
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, c->a_type, ne, c->a_layout);
    int64_t bne[4];
    for (int i = 0; i < 4; i++) bne[i] = c->b_ne[i] ? c->b_ne[i] : ne[i];
    cllm_tensor *b = new_layout(ctx, c->b_type, bne, c->b_layout);
    cllm_tensor *out = NULL;
    switch (op) {
    case EW_ADD: out = cllm_add(ctx, a, b); break;
    case EW_MUL: out = cllm_mul(ctx, a, b); break;
    case EW_SCALE: out = cllm_scale(ctx, a, s); break;
    case EW_SILU: out = cllm_silu(ctx, a); break;
    case EW_GELU: out = cllm_gelu(ctx, a); break;
    default: abort();
    }
    cllm_buffer *buf = place_all(ctx);
    if (inplace) make_inplace(out);
    fill_root_uniform(a, -4.0f, 4.0f);
    fill_root_uniform(b, -2.0f, 2.0f);
    double *da = read_dense(a), *db = read_dense(b);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(ne) * sizeof(double));
    ref_elementwise(op, da, ne, db, bne, s, want);

    char what[160];
    snprintf(what, sizeof(what), "%s a %s %s, b %s %s [%lld,%lld,%lld,%lld], %d threads%s",
             k_ew_names[op], cllm_type_name(c->a_type), k_layout_names[c->a_layout],
             cllm_type_name(c->b_type), k_layout_names[c->b_layout], (long long)bne[0],
             (long long)bne[1], (long long)bne[2], (long long)bne[3], nth,
             inplace ? ", in place" : "");
    /* add, mul, scale: one F32 rounding; silu, gelu: expf / tanhf */
    const bool transcendental = op == EW_SILU || op == EW_GELU;
    check_close(what, got, want, nel(ne), 1e-6, transcendental ? 1e-5 : 1e-6);
    free(da);
    free(db);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_elementwise(void) {
    const ew_case cases[] = {
        {CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, {0, 0, 0, 0}},
        {CLLM_TYPE_F32, LAYOUT_PERMUTED, CLLM_TYPE_F32, LAYOUT_OFFSET, {0, 1, 0, 1}},
        {CLLM_TYPE_F16, LAYOUT_CONTIGUOUS, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, {1, 0, 1, 0}},
        {CLLM_TYPE_BF16, LAYOUT_OFFSET, CLLM_TYPE_F16, LAYOUT_CONTIGUOUS, {0, 0, 0, 0}},
        {CLLM_TYPE_F32, LAYOUT_TRANSPOSED, CLLM_TYPE_BF16, LAYOUT_TRANSPOSED, {0, 0, 1, 1}},
        {CLLM_TYPE_F32, LAYOUT_OFFSET, CLLM_TYPE_F32, LAYOUT_TRANSPOSED, {0, 0, 0, 0}},
        {CLLM_TYPE_F16, LAYOUT_TRANSPOSED, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, {1, 1, 1, 1}},
    };
    rng_seed(1);
    for (int op = 0; op < EW_COUNT; op++) {
        for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
            /* unary ops: one case per a layout and type is enough */
            if (op >= EW_SCALE && cases[c].b_ne[0] == 1 && cases[c].b_ne[1] == 1) continue;
            for (int nth = 1; nth <= MAX_THREADS; nth++) run_elementwise(op, &cases[c], nth, false);
        }
    }
}

/* ---- rms_norm, norm ------------------------------------------------------- */

static void ref_norm(bool rms, const double *a, const int64_t *ne, double eps, double *out) {
    for (int64_t r = 0; r < ne[1] * ne[2] * ne[3]; r++) {
        const double *x = a + r * ne[0];
        double mean = 0.0, ss = 0.0;
        if (!rms) {
            for (int64_t i = 0; i < ne[0]; i++) mean += x[i];
            mean /= (double)ne[0];
        }
        for (int64_t i = 0; i < ne[0]; i++) ss += (x[i] - mean) * (x[i] - mean);
        const double inv = 1.0 / sqrt(ss / (double)ne[0] + eps);
        for (int64_t i = 0; i < ne[0]; i++) out[r * ne[0] + i] = (x[i] - mean) * inv;
    }
}

static void run_norm(bool rms, cllm_type type, int layout, const int64_t ne[4], float eps, int nth,
                     bool inplace) {
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, type, ne, layout);
    cllm_tensor *out = rms ? cllm_rms_norm(ctx, a, eps) : cllm_norm(ctx, a, eps);
    cllm_buffer *buf = place_all(ctx);
    if (inplace) make_inplace(out);
    fill_root_uniform(a, -3.0f, 5.0f); /* mean away from zero: norm must subtract it */
    double *da = read_dense(a);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(ne) * sizeof(double));
    ref_norm(rms, da, ne, eps, want);
    char what[160];
    snprintf(what, sizeof(what), "%s %s %s [%lld,%lld,%lld,%lld] eps %g, %d threads%s",
             rms ? "rms_norm" : "norm", cllm_type_name(type), k_layout_names[layout],
             (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], (double)eps,
             nth, inplace ? ", in place" : "");
    check_close(what, got, want, nel(ne), 1e-5, 1e-5);
    free(da);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_norm(void) {
    const int64_t shapes[][4] = {{17, 5, 3, 2}, {33, 4, 1, 1}, {1, 9, 1, 1}, {4096, 3, 1, 1}};
    const cllm_type types[] = {CLLM_TYPE_F32, CLLM_TYPE_F16, CLLM_TYPE_BF16};
    rng_seed(2);
    for (int rms = 0; rms <= 1; rms++) {
        for (size_t s = 0; s < CLLM_ARRAY_SIZE(shapes); s++) {
            for (size_t t = 0; t < CLLM_ARRAY_SIZE(types); t++) {
                for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
                    for (int nth = 1; nth <= MAX_THREADS; nth++) {
                        run_norm(rms, types[t], layout, shapes[s], rms ? 1e-6f : 1e-5f, nth, false);
                    }
                }
            }
        }
    }
}

/* ---- soft_max ------------------------------------------------------------- */

static void ref_soft_max(const double *a, const int64_t *ne, const double *mask, const int64_t *mne,
                         double scale, double *out) {
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                double *y = out + idx4(ne, 0, i1, i2, i3);
                double max = -INFINITY;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    y[i0] = a[idx4(ne, i0, i1, i2, i3)] * scale;
                    if (mask) y[i0] += mask[idx4(mne, i0, i1, i2 % mne[2], i3 % mne[3])];
                    if (y[i0] > max) max = y[i0];
                }
                if (max == -INFINITY) {
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) y[i0] = 0.0;
                    continue;
                }
                double sum = 0.0;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) sum += (y[i0] = exp(y[i0] - max));
                for (int64_t i0 = 0; i0 < ne[0]; i0++) y[i0] /= sum;
            }
}

/* A mask of shape mne: causal (key j visible to row t when j <= t + ne0 - ne1,
 * else -INFINITY) plus small values, and row `dead_row` masked out entirely
 * (none if < 0). Placed tensor m, contiguous. */
static void fill_causal_mask(cllm_tensor *m, int64_t n_rows, int64_t dead_row) {
    const int64_t n = cllm_nelements(m);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i3 = 0; i3 < m->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < m->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < m->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < m->ne[0]; i0++) {
                    const bool visible = i0 <= i1 + m->ne[0] - n_rows && i1 != dead_row;
                    v[idx4(m->ne, i0, i1, i2, i3)] = visible ? rng_uniform(-1.0f, 0.5f) : -INFINITY;
                }
    set_floats(m, v);
    free(v);
}

typedef struct sm_case {
    int a_layout;
    cllm_type mask_type; /* CLLM_TYPE_COUNT: no mask */
    int64_t mask_ne1, mask_ne2, mask_ne3;
    int64_t dead_row;
} sm_case;

static void run_soft_max(const sm_case *c, int nth, bool inplace) {
    const int64_t ne[4] = {37, 5, 4, 2};
    const float scale = 0.35f;
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, CLLM_TYPE_F32, ne, c->a_layout);
    cllm_tensor *mask = NULL;
    if (c->mask_type != CLLM_TYPE_COUNT) {
        mask = cllm_tensor_new_4d(ctx, c->mask_type, ne[0], c->mask_ne1, c->mask_ne2, c->mask_ne3);
    }
    cllm_tensor *out = cllm_soft_max(ctx, a, mask, scale);
    cllm_buffer *buf = place_all(ctx);
    if (inplace) make_inplace(out);
    fill_root_uniform(a, -6.0f, 6.0f);
    if (mask) fill_causal_mask(mask, ne[1], c->dead_row);
    double *da = read_dense(a), *dm = mask ? read_dense(mask) : NULL;
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(ne) * sizeof(double));
    ref_soft_max(da, ne, dm, mask ? mask->ne : NULL, scale, want);
    char what[160];
    snprintf(what, sizeof(what),
             "soft_max %s, mask %s [%lld,%lld,%lld], dead row %lld, %d threads%s",
             k_layout_names[c->a_layout], mask ? cllm_type_name(mask->type) : "none",
             (long long)c->mask_ne1, (long long)c->mask_ne2, (long long)c->mask_ne3,
             (long long)c->dead_row, nth, inplace ? ", in place" : "");
    check_close(what, got, want, nel(ne), 1e-6, 1e-5);
    if (c->dead_row >= 0 && mask) {
        /* a fully masked row is exactly zero (not NaN) in every head */
        bool zeros = true;
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i0 = 0; i0 < ne[0]; i0++)
                    zeros = zeros && got[idx4(ne, i0, c->dead_row, i2, i3)] == 0.0;
        CHECKF(zeros, "%s: the masked-out row is not zeros", what);
    }
    free(da);
    free(dm);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_soft_max(void) {
    const sm_case cases[] = {
        {LAYOUT_CONTIGUOUS, CLLM_TYPE_COUNT, 0, 0, 0, -1},
        {LAYOUT_CONTIGUOUS, CLLM_TYPE_F32, 8, 1, 1, -1},
        {LAYOUT_PERMUTED, CLLM_TYPE_F16, 5, 2, 1, 2},   /* mask per pair of heads */
        {LAYOUT_TRANSPOSED, CLLM_TYPE_F32, 6, 4, 2, 0}, /* a mask per head and batch */
        {LAYOUT_OFFSET, CLLM_TYPE_F16, 7, 1, 2, 4},
    };
    rng_seed(3);
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
        for (int nth = 1; nth <= MAX_THREADS; nth++) run_soft_max(&cases[c], nth, false);
    }
}

/* ---- rope ----------------------------------------------------------------- */

/* YaRN, written from its definition: the angle blends interpolation
 * (theta * fscale) and extrapolation (theta) by a ramp over the dims whose
 * wavelength makes between beta_slow and beta_fast turns in the original
 * context; the magnitude grows by 0.1 ln(1 / fscale). */
static double ref_yarn_theta(const cllm_rope_yarn *y, int n_dims, double base, double fscale, int i,
                             double theta_e, double *m) {
    *m = y && y->attn_factor != 0.0f ? y->attn_factor : 1.0;
    if (!y || y->ext_factor == 0.0f) return theta_e * fscale;
    const double two_pi = 6.283185307179586;
    const double d_fast = n_dims * log(y->n_ctx_orig / (two_pi * y->beta_fast)) / (2 * log(base));
    const double d_slow = n_dims * log(y->n_ctx_orig / (two_pi * y->beta_slow)) / (2 * log(base));
    const double lo = floor(d_fast) < 0 ? 0 : floor(d_fast);
    const double hi = ceil(d_slow) > n_dims - 1 ? n_dims - 1 : ceil(d_slow);
    double t = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    const double mix = (1 - t) * y->ext_factor;
    *m *= 1 + 0.1 * log(1 / fscale);
    return theta_e * fscale * (1 - mix) + theta_e * mix;
}

static void ref_rope(const double *a, const int64_t *ne, const int32_t *pos, const double *ff,
                     int n_dims, int mode, double base, double fscale, const cllm_rope_yarn *yarn,
                     double *out) {
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                const double *x = a + idx4(ne, 0, i1, i2, i3);
                double *y = out + idx4(ne, 0, i1, i2, i3);
                for (int64_t i0 = 0; i0 < ne[0]; i0++) y[i0] = x[i0];
                for (int i = 0; i < n_dims / 2; i++) {
                    double theta = pos[i2] * pow(base, -2.0 * i / n_dims), m;
                    if (ff) theta /= ff[i];
                    theta = ref_yarn_theta(yarn, n_dims, base, fscale, i, theta, &m);
                    const int j0 = mode == CLLM_ROPE_NEOX ? i : 2 * i;
                    const int j1 = mode == CLLM_ROPE_NEOX ? i + n_dims / 2 : 2 * i + 1;
                    y[j0] = m * (x[j0] * cos(theta) - x[j1] * sin(theta));
                    y[j1] = m * (x[j0] * sin(theta) + x[j1] * cos(theta));
                }
            }
}

typedef struct rope_case {
    int64_t head_dim;
    int n_dims;
    int mode;
    float base, fscale;
    bool freq_factors;
    int layout; /* LAYOUT_*, or LAYOUT_COUNT: the K part of a fused QKV tensor */
    const cllm_rope_yarn *yarn;
} rope_case;

static void run_rope(const rope_case *c, int nth, bool inplace) {
    const int64_t n_head = 3, n_tokens = 5;
    const int64_t ne[4] = {c->head_dim, n_head, n_tokens, 1};
    cllm_context *ctx = ctx_new();
    cllm_tensor *a;
    if (c->layout == LAYOUT_COUNT) {
        /* qkv: [head_dim * n_head * 3, n_tokens]; K is the middle third */
        cllm_tensor *qkv =
            cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, c->head_dim * n_head * 3, n_tokens);
        a = cllm_view_3d(ctx, qkv, c->head_dim, n_head, n_tokens,
                         cllm_row_size(CLLM_TYPE_F32, c->head_dim), qkv->nb[1],
                         cllm_row_size(CLLM_TYPE_F32, c->head_dim * n_head));
    } else {
        a = new_layout(ctx, CLLM_TYPE_F32, ne, c->layout);
    }
    cllm_tensor *pos = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, n_tokens);
    cllm_tensor *ff =
        c->freq_factors ? cllm_tensor_new_1d(ctx, CLLM_TYPE_F32, c->n_dims / 2 + 1) : NULL;
    cllm_tensor *out =
        c->yarn ? cllm_rope_ext(ctx, a, pos, ff, c->n_dims, c->mode, c->base, c->fscale, c->yarn)
                : cllm_rope(ctx, a, pos, ff, c->n_dims, c->mode, c->base, c->fscale);
    /* the same rotations from a rope_table (not in place: a is read again) */
    cllm_tensor *tab =
        inplace
            ? NULL
            : cllm_rope_tab(ctx, a,
                            cllm_rope_table(ctx, pos, ff, c->n_dims, c->base, c->fscale, c->yarn),
                            c->mode);
    cllm_buffer *buf = place_all(ctx);
    if (inplace) make_inplace(out);
    fill_root_uniform(a, -1.0f, 1.0f);
    int32_t p[5];
    for (int i = 0; i < n_tokens; i++) p[i] = i == 0 ? 0 : rng_int(4000);
    set_i32(pos, p);
    if (ff) fill_uniform(ff, 1.0f, 8.0f);
    double *da = read_dense(a), *dff = ff ? read_dense(ff) : NULL;
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(ne) * sizeof(double));
    ref_rope(da, ne, p, dff, c->n_dims, c->mode, c->base, c->fscale, c->yarn, want);
    char what[200];
    snprintf(what, sizeof(what), "rope %s head %lld dims %d base %g scale %g%s%s %s, %d threads%s",
             c->mode == CLLM_ROPE_NEOX ? "neox" : "normal", (long long)c->head_dim, c->n_dims,
             (double)c->base, (double)c->fscale, ff ? " freq_factors" : "",
             c->yarn ? (c->yarn->ext_factor != 0.0f ? " yarn" : " attn_factor") : "",
             c->layout == LAYOUT_COUNT ? "qkv view" : k_layout_names[c->layout], nth,
             inplace ? ", in place" : "");
    check_close(what, got, want, nel(ne), 1e-5, 0.0);
    if (tab) { /* bit for bit the positions' */
        CHECK(compute(g_be[nth], tab) == CLLM_OK);
        double *got_tab = read_dense(tab);
        CHECKF(!memcmp(got_tab, got, (size_t)nel(ne) * sizeof(double)), "%s: from a rope_table",
               what);
        free(got_tab);
    }
    free(da);
    free(dff);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_rope(void) {
    const rope_case cases[] = {
        {64, 64, CLLM_ROPE_NORMAL, 10000.0f, 1.0f, false, LAYOUT_CONTIGUOUS, NULL},
        {64, 64, CLLM_ROPE_NEOX, 10000.0f, 1.0f, false, LAYOUT_CONTIGUOUS, NULL},
        {64, 24, CLLM_ROPE_NORMAL, 500000.0f, 0.25f, true, LAYOUT_COUNT, NULL},
        {64, 24, CLLM_ROPE_NEOX, 1000000.0f, 1.0f, true, LAYOUT_PERMUTED, NULL},
        {18, 18, CLLM_ROPE_NEOX, 10000.0f, 0.5f, false, LAYOUT_TRANSPOSED, NULL},
        {18, 2, CLLM_ROPE_NORMAL, 10000.0f, 1.0f, true, LAYOUT_OFFSET, NULL},
        {80, 40, CLLM_ROPE_NEOX, 10000.0f, 1.0f, false, LAYOUT_COUNT, NULL},
        /* YaRN (factor 4 over 64 positions: dims on both sides of the ramp),
         * and a magnitude factor alone (LongRoPE) */
        {64, 64, CLLM_ROPE_NEOX, 10000.0f, 0.25f, false, LAYOUT_CONTIGUOUS,
         &(cllm_rope_yarn){64, 1.0f, 0.9f, 32.0f, 1.0f}},
        {64, 32, CLLM_ROPE_NORMAL, 1000000.0f, 0.125f, true, LAYOUT_PERMUTED,
         &(cllm_rope_yarn){256, 1.0f, 1.0f, 32.0f, 1.0f}},
        {48, 48, CLLM_ROPE_NEOX, 10000.0f, 1.0f, true, LAYOUT_CONTIGUOUS,
         &(cllm_rope_yarn){4096, 0.0f, 1.19f, 0.0f, 0.0f}},
    };
    rng_seed(4);
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
        for (int nth = 1; nth <= MAX_THREADS; nth++) run_rope(&cases[c], nth, false);
    }
}

/* ---- mul_mat -------------------------------------------------------------- */

static void ref_mul_mat(const double *a, const int64_t *ane, const double *b, const int64_t *bne,
                        double *out) {
    const int64_t K = ane[0], M = ane[1], N = bne[1];
    const int64_t r2 = bne[2] / ane[2], r3 = bne[3] / ane[3];
    const int64_t one[4] = {M, N, bne[2], bne[3]};
    for (int64_t i3 = 0; i3 < bne[3]; i3++)
        for (int64_t i2 = 0; i2 < bne[2]; i2++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++) {
                    double sum = 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        sum += a[idx4(ane, k, m, i2 / r2, i3 / r3)] * b[idx4(bne, k, n, i2, i3)];
                    }
                    out[idx4(one, m, n, i2, i3)] = sum;
                }
}

typedef struct mm_case {
    cllm_type a_type;
    int a_layout;
    int b_layout;
    int64_t K, M, N, A2, A3, B2, B3;
} mm_case;

static void run_mul_mat(const mm_case *c, int nth) {
    const int64_t ane[4] = {c->K, c->M, c->A2, c->A3};
    const int64_t bne[4] = {c->K, c->N, c->B2, c->B3};
    const int64_t one[4] = {c->M, c->N, c->B2, c->B3};
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, c->a_type, ane, c->a_layout);
    cllm_tensor *b = new_layout(ctx, CLLM_TYPE_F32, bne, c->b_layout);
    cllm_tensor *out = cllm_mul_mat(ctx, a, b);
    cllm_buffer *buf = place_all(ctx);
    fill_root_uniform(a, -1.0f, 1.0f);
    fill_root_uniform(b, -1.0f, 1.0f);
    double *da = read_dense(a), *db = read_dense(b);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(one) * sizeof(double));
    ref_mul_mat(da, ane, db, bne, want);
    char what[200];
    snprintf(what, sizeof(what),
             "mul_mat a %s %s [%lld,%lld,%lld,%lld], b %s [%lld,%lld,%lld,%lld], %d threads",
             cllm_type_name(c->a_type), k_layout_names[c->a_layout], (long long)ane[0],
             (long long)ane[1], (long long)ane[2], (long long)ane[3], k_layout_names[c->b_layout],
             (long long)bne[0], (long long)bne[1], (long long)bne[2], (long long)bne[3], nth);
    /* F32 sums of K products of values in [-1, 1] */
    check_close(what, got, want, nel(one), 1e-6 * (double)c->K, 1e-6);
    free(da);
    free(db);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_mul_mat(void) {
    const mm_case cases[] = {
        /* type, a layout, b layout, K, M, N, A2, A3, B2, B3 */
        {CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS, 33, 17, 1, 1, 1, 1, 1},
        {CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS, 33, 17, 5, 2, 1, 6, 2},
        {CLLM_TYPE_F16, LAYOUT_CONTIGUOUS, LAYOUT_PERMUTED, 33, 17, 5, 2, 2, 6, 2},
        {CLLM_TYPE_BF16, LAYOUT_OFFSET, LAYOUT_CONTIGUOUS, 47, 13, 3, 3, 1, 3, 1},
        {CLLM_TYPE_F32, LAYOUT_TRANSPOSED, LAYOUT_CONTIGUOUS, 19, 11, 40, 2, 1, 4, 1},
        {CLLM_TYPE_F16, LAYOUT_TRANSPOSED, LAYOUT_TRANSPOSED, 21, 9, 7, 1, 1, 2, 3},
        {CLLM_TYPE_F32, LAYOUT_PERMUTED, LAYOUT_TRANSPOSED, 16, 1, 29, 1, 1, 1, 1},
        {CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, LAYOUT_OFFSET, 1, 7, 3, 1, 1, 1, 1},
        {CLLM_TYPE_BF16, LAYOUT_PERMUTED, LAYOUT_OFFSET, 300, 23, 2, 1, 1, 1, 1},
        {CLLM_TYPE_F16, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS, 64, 2, 1, 1, 1, 1, 1},
    };
    rng_seed(5);
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
        for (int nth = 1; nth <= MAX_THREADS; nth++) run_mul_mat(&cases[c], nth);
    }
}

/* Every quantized type that can be written (from_float) and read (to_float):
 * a [256, 9] quantized by from_float; the reference uses a as to_float reads
 * it. A type with vec_dot multiplies b converted to its vec_dot_type: the
 * reference rounds b the same way (from_float, then to_float), so the
 * tolerance covers only the kernels' F32 arithmetic. */
static void test_mul_mat_quantized(void) {
    const int64_t K = 256, M = 9, N = 3;
    rng_seed(6);
    for (int type = 0; type < CLLM_TYPE_COUNT; type++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)type);
        if (!tt || !tt->is_quantized || !tt->to_float || !tt->from_float) continue;
        const cllm_type_traits *vt = tt->vec_dot && tt->vec_dot_type != CLLM_TYPE_F32
                                         ? cllm_type_traits_of(tt->vec_dot_type)
                                         : NULL;
        if (vt && (!vt->from_float || !vt->to_float || cllm_row_size(tt->vec_dot_type, K) > 1024)) {
            continue; /* b's rounding unknown */
        }
        for (int nth = 1; nth <= MAX_THREADS; nth++) {
            cllm_context *ctx = ctx_new();
            cllm_tensor *a = cllm_tensor_new_2d(ctx, (cllm_type)type, K, M);
            cllm_tensor *bt = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, N, K);
            cllm_tensor *b =
                nth == 2 ? cllm_transpose(ctx, bt) : cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, K, N);
            cllm_tensor *out = cllm_mul_mat(ctx, a, b);
            cllm_buffer *buf = place_all(ctx);
            fill_uniform(a, -1.0f, 1.0f);
            fill_root_uniform(b, -1.0f, 1.0f);
            double *da = read_dense(a), *db = read_dense(b);
            if (vt) {
                /* b as the kernel sees it: each row through vec_dot_type, or
                 * the one-column kernel's own form (Q4_0 / Q4_1) */
                float row[256];
                unsigned char q[1280];
                const bool gemv = cllm_cpu_gemv_available((cllm_type)type, K);
                CHECK(cllm_cpu_gemv_act_size((cllm_type)type, K) <= sizeof(q));
                for (int64_t n = 0; n < N; n++) {
                    for (int64_t k = 0; k < K; k++) row[k] = (float)db[n * K + k];
                    if (gemv) {
                        cllm_cpu_gemv_quantize((cllm_type)type, row, q, K);
                        cllm_cpu_gemv_act_to_float((cllm_type)type, q, row, K);
                    } else {
                        vt->from_float(row, q, K);
                        vt->to_float(q, row, K);
                    }
                    for (int64_t k = 0; k < K; k++) db[n * K + k] = row[k];
                }
            }
            CHECK(cllm_cpu_supports_op(out));
            CHECK(compute(g_be[nth], out) == CLLM_OK);
            double *got = read_dense(out);
            double want[27];
            ref_mul_mat(da, a->ne, db, b->ne, want);
            char what[120];
            snprintf(what, sizeof(what), "mul_mat %s [256, 9] by %s f32 [256, 3]%s, %d threads",
                     tt->name, nth == 2 ? "transposed" : "contiguous", vt ? " (vec_dot)" : "", nth);
            check_close(what, got, want, M * N, 1e-4, 1e-5);
            free(da);
            free(db);
            free(got);
            ctx_done(ctx, buf);
        }
    }
}

/* want[r * M + m] for the row kernels: b's rows converted as the kernel
 * converts them, each dot by the kernel's own vec_dot. */
static void row_kernel_reference(const cllm_tensor *a, const cllm_tensor *b,
                                 const cllm_cpu_type_kernels *k, int64_t K, int64_t M, int64_t rows,
                                 double *want) {
    const size_t brs = cllm_row_size(k->vec_dot_type, K);
    unsigned char *bq = malloc((size_t)rows * brs);
    CHECK(bq != NULL);
    for (int64_t r = 0; r < rows; r++) {
        const float *row = (const float *)((const char *)b->data + r * b->nb[1]);
        if (k->from_float) {
            k->from_float(row, bq + r * brs, K);
        } else {
            memcpy(bq + r * brs, row, brs);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t m = 0; m < M; m++) {
            float v;
            k->vec_dot(K, &v, (const char *)a->data + m * a->nb[1], bq + r * brs);
            want[r * M + m] = v;
        }
    }
    free(bq);
}

/* An activation form of a mul_mat plan: its quantizer and what it decodes to. */
typedef struct act_form {
    size_t (*size)(cllm_type type, int64_t K);
    void (*quantize)(cllm_type type, const float *x, void *act, int64_t K);
    void (*to_float)(cllm_type type, const void *act, float *x, int64_t K);
} act_form;

static const act_form k_gemm_form = {cllm_cpu_gemm_act_size, cllm_cpu_gemm_quantize,
                                     cllm_cpu_gemm_act_to_float};
static const act_form k_gemv_form = {cllm_cpu_gemv_act_size, cllm_cpu_gemv_quantize,
                                     cllm_cpu_gemv_act_to_float};

/* want[r * M + m] for the panel GEMM or the one-column kernels: the
 * dequantized weights against b's rows as the plan's activation quantizer
 * leaves them, summed in double. */
static void quantized_reference(const act_form *form, const cllm_tensor *a, const cllm_tensor *b,
                                cllm_type type, int64_t K, int64_t M, int64_t rows, double *want) {
    unsigned char *act = malloc(form->size(type, K));
    float *bf = malloc((size_t)(K * rows) * sizeof(float));
    float *af = malloc((size_t)(K * M) * sizeof(float));
    CHECK(act && bf && af);
    for (int64_t r = 0; r < rows; r++) {
        form->quantize(type, (const float *)((const char *)b->data + r * b->nb[1]), act, K);
        form->to_float(type, act, bf + r * K, K);
    }
    for (int64_t m = 0; m < M; m++)
        cllm_type_traits_of(type)->to_float((const char *)a->data + m * a->nb[1], af + m * K, K);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t m = 0; m < M; m++) {
            double v = 0.0;
            for (int64_t i = 0; i < K; i++) v += (double)af[m * K + i] * bf[r * K + i];
            want[r * M + m] = v;
        }
    }
    free(act);
    free(bf);
    free(af);
}

/* The blocked kernels path on shapes that cross its tiles: more weight rows
 * than a block, column counts that are not a multiple of the vec_dot_n
 * chunk, a batch broadcast over a, one column (generation) and few rows
 * with many columns (split by columns). The reference takes b's rows as the
 * plan in use sees them (row kernels, panel GEMM or one-column kernel), so
 * only the order of the F32 sums differs. */
static void test_mul_mat_blocked(void) {
    static const cllm_type types[] = {
        CLLM_TYPE_Q4_0, CLLM_TYPE_Q8_0, CLLM_TYPE_Q4_K, CLLM_TYPE_F16,  CLLM_TYPE_F32,
        CLLM_TYPE_Q4_1, CLLM_TYPE_Q5_0, CLLM_TYPE_Q5_1, CLLM_TYPE_Q2_K, CLLM_TYPE_Q3_K,
        CLLM_TYPE_Q5_K, CLLM_TYPE_Q6_K, CLLM_TYPE_BF16};
    /* M and N off the vec_dot_mxn tile sizes (4 weight rows x 8 columns) */
    static const int64_t shapes[][4] = {/* K, M, N, B2 (a has 1 batch, broadcast) */
                                        {256, 150, 21, 1},
                                        {512, 70, 1, 1},
                                        {256, 5, 67, 2},
                                        {256, 131, 9, 1},
                                        {256, 7, 2, 3}};
    rng_seed(12);
    for (size_t ti = 0; ti < CLLM_ARRAY_SIZE(types); ti++) {
        const cllm_type type = types[ti];
        const cllm_cpu_type_kernels *k = cllm_cpu_kernels(type);
        if (!k) continue;
        for (size_t si = 0; si < CLLM_ARRAY_SIZE(shapes); si++) {
            const int64_t K = shapes[si][0], M = shapes[si][1], N = shapes[si][2];
            const int64_t B2 = shapes[si][3];
            for (int nth = 1; nth <= MAX_THREADS; nth++) {
                cllm_context *ctx = ctx_new();
                cllm_tensor *a = cllm_tensor_new_2d(ctx, type, K, M);
                cllm_tensor *b = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, K, N, B2);
                cllm_tensor *out = cllm_mul_mat(ctx, a, b);
                cllm_buffer *buf = place_all(ctx);
                fill_uniform(a, -1.0f, 1.0f);
                fill_uniform(b, -1.0f, 1.0f);
                CHECK(cllm_cpu_supports_op(out));
                CHECK(compute(g_be[nth], out) == CLLM_OK);
                double *want = malloc((size_t)(M * N * B2) * sizeof(double));
                CHECK(want != NULL);
                if (N < CLLM_GEMM_MIN_COLS && cllm_cpu_gemv_available(type, K)) {
                    quantized_reference(&k_gemv_form, a, b, type, K, M, N * B2, want);
                } else if (N >= CLLM_GEMM_MIN_COLS && cllm_cpu_gemm_available(type, K)) {
                    /* the panel plan: activations in its own int8 form, the
                     * sums exact in double */
                    quantized_reference(&k_gemm_form, a, b, type, K, M, N * B2, want);
                } else {
                    row_kernel_reference(a, b, k, K, M, N * B2, want);
                }
                double *got = read_dense(out);
                char what[120];
                snprintf(what, sizeof(what),
                         "blocked mul_mat %s [%lld, %lld] x [%lld, %lld, %lld], %d threads",
                         cllm_type_name(type), (long long)K, (long long)M, (long long)K,
                         (long long)N, (long long)B2, nth);
                check_close(what, got, want, M * N * B2, 1e-5 * (double)K, 1e-5);
                free(want);
                free(got);
                ctx_done(ctx, buf);
            }
        }
    }
}

/* ---- get_rows ------------------------------------------------------------- */

static void run_get_rows(cllm_type type, int layout, const int64_t ane[4], int64_t n_ids, int nth) {
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, type, ane, layout);
    cllm_tensor *ids = cllm_tensor_new_2d(ctx, CLLM_TYPE_I32, n_ids, ane[2]);
    cllm_tensor *out = cllm_get_rows(ctx, a, ids);
    cllm_buffer *buf = place_all(ctx);
    fill_root_uniform(a, -10.0f, 10.0f);
    int32_t *id = xmalloc((size_t)(n_ids * ane[2]) * sizeof(int32_t));
    for (int64_t i = 0; i < n_ids * ane[2]; i++) id[i] = rng_int((int)ane[1]);
    id[0] = (int32_t)ane[1] - 1; /* the last row */
    set_i32(ids, id);
    double *da = read_dense(a);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    const int64_t one[4] = {ane[0], n_ids, ane[2], 1};
    double *want = xmalloc((size_t)nel(one) * sizeof(double));
    for (int64_t b = 0; b < ane[2]; b++)
        for (int64_t n = 0; n < n_ids; n++)
            for (int64_t k = 0; k < ane[0]; k++) {
                want[idx4(one, k, n, b, 0)] = da[idx4(ane, k, id[n + n_ids * b], b, 0)];
            }
    char what[160];
    snprintf(what, sizeof(what), "get_rows %s %s [%lld,%lld,%lld] by %lld ids, %d threads",
             cllm_type_name(type), k_layout_names[layout], (long long)ane[0], (long long)ane[1],
             (long long)ane[2], (long long)n_ids, nth);
    check_close(what, got, want, nel(one), 0.0, 0.0); /* conversions to F32 are exact */
    free(id);
    free(da);
    free(got);
    free(want);
    ctx_done(ctx, buf);
}

static void test_get_rows(void) {
    const int64_t s1[4] = {17, 9, 3, 1}, s2[4] = {33, 20, 1, 1};
    const cllm_type types[] = {CLLM_TYPE_F32, CLLM_TYPE_F16, CLLM_TYPE_BF16};
    rng_seed(7);
    for (size_t t = 0; t < CLLM_ARRAY_SIZE(types); t++) {
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            for (int nth = 1; nth <= MAX_THREADS; nth++) {
                run_get_rows(types[t], layout, s1, 5, nth);
                run_get_rows(types[t], layout, s2, 7, nth);
            }
        }
    }
    /* quantized rows, for the types that have their conversions */
    const int64_t sq[4] = {256, 6, 2, 1};
    for (int type = 0; type < CLLM_TYPE_COUNT; type++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)type);
        if (!tt || !tt->is_quantized || !tt->to_float || !tt->from_float) continue;
        run_get_rows((cllm_type)type, LAYOUT_CONTIGUOUS, sq, 4, 2);
    }
}

/* ---- concat_rows ---------------------------------------------------------- */

/* a [K, N, B, C] and b [K, M, B, C], in every layout: out holds a's rows,
 * then b's, in each (B, C) plane, exactly. */
static void run_concat(int layout_a, int layout_b, int nth) {
    const int64_t ane[4] = {7, 3, 2, 2}, bne[4] = {7, 5, 2, 2}, one[4] = {7, 8, 2, 2};
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, CLLM_TYPE_F32, ane, layout_a);
    cllm_tensor *b = new_layout(ctx, CLLM_TYPE_F32, bne, layout_b);
    cllm_tensor *out = cllm_concat_rows(ctx, a, b);
    CHECK(out->ne[0] == 7 && out->ne[1] == 8 && out->ne[2] == 2 && out->ne[3] == 2);
    cllm_buffer *buf = place_all(ctx);
    fill_root_uniform(a, -10.0f, 10.0f);
    fill_root_uniform(b, -10.0f, 10.0f);
    double *da = read_dense(a), *db = read_dense(b);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(out);
    double *want = xmalloc((size_t)nel(one) * sizeof(double));
    for (int64_t c = 0; c < 2; c++)
        for (int64_t ib = 0; ib < 2; ib++)
            for (int64_t n = 0; n < 8; n++)
                for (int64_t k = 0; k < 7; k++) {
                    want[idx4(one, k, n, ib, c)] =
                        n < 3 ? da[idx4(ane, k, n, ib, c)] : db[idx4(bne, k, n - 3, ib, c)];
                }
    char what[128];
    snprintf(what, sizeof(what), "concat_rows %s + %s, %d threads", k_layout_names[layout_a],
             k_layout_names[layout_b], nth);
    check_close(what, got, want, nel(one), 0.0, 0.0);
    free(da), free(db), free(got), free(want);
    ctx_done(ctx, buf);
}

static void test_concat(void) {
    rng_seed(11);
    for (int la = 0; la < LAYOUT_COUNT; la++) {
        for (int lb = 0; lb < LAYOUT_COUNT; lb++) {
            for (int nth = 1; nth <= MAX_THREADS; nth++) run_concat(la, lb, nth);
        }
    }
}

/* ---- cpy, cont ------------------------------------------------------------ */

/* Checks dst == src converted to dst's type, element by element in logical
 * order (exact: both sides round the same way). */
static void check_copied(const char *what, const double *src, const cllm_tensor *dst,
                         const double *got) {
    const int64_t n = cllm_nelements(dst);
    double *want = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) want[i] = round_to(dst->type, src[i]);
    check_close(what, got, want, n, 0.0, 0.0);
    free(want);
}

/* F32 -> F16 into a strided view of a KV cache: K rows at cell 4, and V
 * written transposed (llama.cpp's V layout), so both src and dst are strided.
 * The rest of the cache must stay untouched. */
static void run_cpy_kv(int nth) {
    const int64_t D = 16, H = 2, n_tok = 3, n_ctx = 10, cell = 4;
    cllm_context *ctx = ctx_new();
    cllm_tensor *kc = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, D * H, n_ctx);
    cllm_tensor *vc = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, n_ctx, D * H); /* transposed V */
    cllm_tensor *k_cur = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, D, H, n_tok);
    cllm_tensor *v_cur = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, D * H, n_tok);
    cllm_tensor *k_dst = cllm_view_3d(ctx, kc, D, H, n_tok, cllm_row_size(CLLM_TYPE_F16, D),
                                      kc->nb[1], cell * kc->nb[1]);
    cllm_tensor *v_dst =
        cllm_view_2d(ctx, vc, n_tok, D * H, vc->nb[1], cell * cllm_row_size(CLLM_TYPE_F16, 1));
    cllm_tensor *v_src = cllm_transpose(ctx, v_cur); /* [n_tok, D * H], strided */
    cllm_tensor *outs[2] = {cllm_cpy(ctx, k_cur, k_dst), cllm_cpy(ctx, v_src, v_dst)};
    cllm_buffer *buf = place_all(ctx);
    fill_uniform(kc, -100.0f, 100.0f);
    fill_uniform(vc, -100.0f, 100.0f);
    fill_uniform(k_cur, -1.0f, 1.0f);
    fill_uniform(v_cur, -1.0f, 1.0f);
    double *kc0 = read_dense(kc), *vc0 = read_dense(vc);
    double *dk = read_dense(k_cur), *dv = read_dense(v_src);
    CHECK(compute_n(g_be[nth], outs, 2) == CLLM_OK);

    char what[120];
    snprintf(what, sizeof(what), "cpy f32 -> f16 K cache view, %d threads", nth);
    double *got = read_dense(outs[0]);
    check_copied(what, dk, k_dst, got);
    free(got);
    snprintf(what, sizeof(what), "cpy transposed f32 -> f16 transposed V cache view, %d threads",
             nth);
    got = read_dense(outs[1]);
    check_copied(what, dv, v_dst, got);
    free(got);

    /* outside the views the caches are unchanged: kc is [D * H, n_ctx] with
     * cells as rows, vc is [n_ctx, D * H] with cells as columns */
    double *kc1 = read_dense(kc), *vc1 = read_dense(vc);
    int64_t changed = 0;
    for (int64_t j = 0; j < n_ctx; j++)
        for (int64_t i = 0; i < D * H; i++) {
            const int64_t ki = i + D * H * j, vi = j + n_ctx * i;
            const bool in_view = j >= cell && j < cell + n_tok;
            if (!in_view) changed += (kc1[ki] != kc0[ki]) + (vc1[vi] != vc0[vi]);
        }
    CHECKF(changed == 0, "cpy into cache views, %d threads: %lld cells outside changed", nth,
           (long long)changed);
    free(kc0);
    free(vc0);
    free(kc1);
    free(vc1);
    free(dk);
    free(dv);
    ctx_done(ctx, buf);
}

/* cpy between types, layouts and shapes (same element count). */
static void run_cpy(cllm_type st, int s_layout, const int64_t sne[4], cllm_type dt, int d_layout,
                    const int64_t dne[4], int nth) {
    cllm_context *ctx = ctx_new();
    cllm_tensor *src = new_layout(ctx, st, sne, s_layout);
    cllm_tensor *dst = new_layout(ctx, dt, dne, d_layout);
    cllm_tensor *out = cllm_cpy(ctx, src, dst);
    cllm_buffer *buf = place_all(ctx);
    if (st == CLLM_TYPE_I32) {
        cllm_tensor *r = root_of(src);
        const int64_t n = cllm_nelements(r);
        int32_t *v = xmalloc((size_t)n * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(rng_next() >> 33) - (1 << 30);
        set_i32(r, v);
        free(v);
    } else {
        fill_root_uniform(src, -3.0f, 3.0f);
    }
    double *ds = read_dense(src);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    double *got = read_dense(dst);
    char what[200];
    snprintf(what, sizeof(what),
             "cpy %s %s [%lld,%lld,%lld,%lld] -> %s %s [%lld,%lld,%lld,%lld], %d threads",
             cllm_type_name(st), k_layout_names[s_layout], (long long)sne[0], (long long)sne[1],
             (long long)sne[2], (long long)sne[3], cllm_type_name(dt), k_layout_names[d_layout],
             (long long)dne[0], (long long)dne[1], (long long)dne[2], (long long)dne[3], nth);
    check_copied(what, ds, dst, got);
    free(ds);
    free(got);
    ctx_done(ctx, buf);
}

static void run_cont(cllm_type type, int layout, const int64_t ne[4], int nth) {
    cllm_context *ctx = ctx_new();
    cllm_tensor *a = new_layout(ctx, type, ne, layout);
    cllm_tensor *out = cllm_cont(ctx, a);
    cllm_buffer *buf = place_all(ctx);
    fill_root_uniform(a, -3.0f, 3.0f);
    double *da = read_dense(a);
    CHECK(compute(g_be[nth], out) == CLLM_OK);
    CHECK(cllm_is_contiguous(out) && out->type == type);
    double *got = read_dense(out);
    char what[160];
    snprintf(what, sizeof(what), "cont %s %s [%lld,%lld,%lld,%lld], %d threads",
             cllm_type_name(type), k_layout_names[layout], (long long)ne[0], (long long)ne[1],
             (long long)ne[2], (long long)ne[3], nth);
    check_copied(what, da, out, got);
    free(da);
    free(got);
    ctx_done(ctx, buf);
}

/* Quantized rows are copied as bytes (cont of a row range, cpy into a view);
 * no conversion is needed, so this runs whatever quantized arithmetic exists. */
static void run_copy_quantized_bytes(int nth) {
    const cllm_type type = CLLM_TYPE_Q8_0;
    const int64_t ne0 = 64, rows = 6;
    cllm_context *ctx = ctx_new();
    cllm_tensor *q = cllm_tensor_new_2d(ctx, type, ne0, rows);
    cllm_tensor *qv = cllm_view_2d(ctx, q, ne0, 3, q->nb[1], 2 * q->nb[1]); /* rows 2..4 */
    cllm_tensor *c = cllm_cont(ctx, qv);
    cllm_tensor *into = cllm_tensor_new_2d(ctx, type, ne0, 5);
    cllm_tensor *into_v = cllm_view_2d(ctx, into, ne0, 3, into->nb[1], into->nb[1]);
    cllm_tensor *outs[2] = {c, cllm_cpy(ctx, qv, into_v)};
    cllm_buffer *buf = place_all(ctx);
    const size_t row = cllm_row_size(type, ne0);
    unsigned char raw[6 * 68], into0[5 * 68], got[5 * 68];
    for (size_t i = 0; i < sizeof(raw); i++) raw[i] = (unsigned char)rng_next();
    for (size_t i = 0; i < sizeof(into0); i++) into0[i] = (unsigned char)rng_next();
    cllm_tensor_set(q, raw, 0, sizeof(raw));
    cllm_tensor_set(into, into0, 0, sizeof(into0));
    CHECK(compute_n(g_be[nth], outs, 2) == CLLM_OK);
    cllm_tensor_get(c, got, 0, 3 * row);
    CHECKF(memcmp(got, raw + 2 * row, 3 * row) == 0, "cont of q8_0 rows, %d threads", nth);
    cllm_tensor_get(into, got, 0, 5 * row);
    CHECKF(memcmp(got, into0, row) == 0 && memcmp(got + row, raw + 2 * row, 3 * row) == 0 &&
               memcmp(got + 4 * row, into0 + 4 * row, row) == 0,
           "cpy of q8_0 rows into a view, %d threads", nth);
    ctx_done(ctx, buf);
}

/* F32 into every quantized type that has from_float: the bytes equal
 * from_float of the same rows (here: from a transposed, strided src). */
static void run_cpy_to_quantized(int nth) {
    const int64_t ne0 = 256, rows = 3;
    for (int type = 0; type < CLLM_TYPE_COUNT; type++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)type);
        if (!tt || !tt->is_quantized || !tt->from_float) continue;
        cllm_context *ctx = ctx_new();
        cllm_tensor *srct = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, rows, ne0);
        cllm_tensor *src = cllm_transpose(ctx, srct);
        cllm_tensor *dst = cllm_tensor_new_2d(ctx, (cllm_type)type, ne0, rows);
        cllm_tensor *out = cllm_cpy(ctx, src, dst);
        cllm_buffer *buf = place_all(ctx);
        fill_uniform(srct, -2.0f, 2.0f);
        CHECK(cllm_cpu_supports_op(out));
        double *ds = read_dense(src);
        CHECK(compute(g_be[nth], out) == CLLM_OK);
        const size_t row = cllm_row_size((cllm_type)type, ne0);
        unsigned char *want = xmalloc(row * rows), *got = xmalloc(row * rows);
        float f[256];
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < ne0; i++) f[i] = (float)ds[r * ne0 + i];
            tt->from_float(f, want + r * row, ne0);
        }
        cllm_tensor_get(dst, got, 0, row * rows);
        CHECKF(memcmp(got, want, row * rows) == 0, "cpy f32 -> %s, %d threads", tt->name, nth);
        free(want);
        free(got);
        free(ds);
        ctx_done(ctx, buf);
    }
}

static void test_copy(void) {
    const int64_t s4[4] = {5, 7, 11, 13}, s2a[4] = {6, 35, 1, 1}, s2b[4] = {14, 15, 1, 1};
    const int64_t s3[4] = {3, 70, 1, 1};
    const cllm_type ft[] = {CLLM_TYPE_F32, CLLM_TYPE_F16, CLLM_TYPE_BF16};
    rng_seed(8);
    for (int nth = 1; nth <= MAX_THREADS; nth++) {
        run_cpy_kv(nth);
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(ft); i++) {
            for (size_t j = 0; j < CLLM_ARRAY_SIZE(ft); j++) {
                run_cpy(ft[i], (int)(i + j) % LAYOUT_COUNT, s4, ft[j],
                        (int)(i + 2 * j + 1) % LAYOUT_COUNT, s4, nth);
            }
            run_cont(ft[i], LAYOUT_PERMUTED, s4, nth);
            run_cont(ft[i], LAYOUT_TRANSPOSED, s4, nth);
            run_cont(ft[i], LAYOUT_OFFSET, s4, nth);
        }
        /* different shapes: elements matched in logical order */
        run_cpy(CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, s2a, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, s2b, nth);
        run_cpy(CLLM_TYPE_F32, LAYOUT_TRANSPOSED, s2a, CLLM_TYPE_F16, LAYOUT_OFFSET, s3, nth);
        run_cpy(CLLM_TYPE_BF16, LAYOUT_PERMUTED, s2b, CLLM_TYPE_F32, LAYOUT_TRANSPOSED, s2a, nth);
        run_cpy(CLLM_TYPE_I32, LAYOUT_PERMUTED, s4, CLLM_TYPE_I32, LAYOUT_OFFSET, s4, nth);
        run_cont(CLLM_TYPE_I32, LAYOUT_TRANSPOSED, s4, nth);
        run_copy_quantized_bytes(nth);
        run_cpy_to_quantized(nth);
    }
}

/* ---- fused attention ------------------------------------------------------ */

/* out[:, h, t] = sum_j softmax_j(scale q[:, t, h] . k[:, j, g] + mask[j, t]) v[:, j, g] */
static void ref_attn(const double *q, const int64_t *qne, const double *k, const int64_t *kne,
                     const double *v, const int64_t *vne, const double *mask, const int64_t *mne,
                     double scale, double *out) {
    const int64_t D = qne[0], T = qne[1], H = qne[2], n_kv = kne[1], Dv = vne[0];
    const int64_t group = H / kne[2];
    const int64_t one[4] = {Dv, H, T, 1};
    double *s = xmalloc((size_t)n_kv * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / group;
            double max = -INFINITY;
            for (int64_t j = 0; j < n_kv; j++) {
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++)
                    dot += q[idx4(qne, d, t, h, 0)] * k[idx4(kne, d, j, g, 0)];
                s[j] = dot * scale + (mask ? mask[idx4(mne, j, t, 0, 0)] : 0.0);
                if (s[j] > max) max = s[j];
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n_kv; j++)
                sum += (s[j] = max == -INFINITY ? 0.0 : exp(s[j] - max));
            for (int64_t i = 0; i < Dv; i++) {
                double acc = 0.0;
                for (int64_t j = 0; j < n_kv; j++) acc += s[j] * v[idx4(vne, i, j, g, 0)];
                out[idx4(one, i, h, t, 0)] = sum > 0.0 ? acc / sum : 0.0;
            }
        }
    free(s);
}

typedef struct attn_case {
    cllm_type kv_type;
    cllm_type mask_type; /* CLLM_TYPE_COUNT: no mask */
    int64_t D, Dv, n_tokens, n_kv;
    int64_t dead_row; /* a token whose mask row is all -INFINITY, or -1 */
    int64_t hole;     /* keys hole .. hole + 39 hidden from every token, or -1 */
    int64_t H, Hkv;   /* query and kv heads */
} attn_case;

/* The fused result with nth threads (freed by the caller). */
static double *run_attn(const attn_case *c, int nth) {
    const int64_t H = c->H, Hkv = c->Hkv;
    const int64_t n_ctx = c->n_kv > 48 ? c->n_kv : 48;
    const int64_t D = c->D, Dv = c->Dv, T = c->n_tokens, n_kv = c->n_kv;
    const float scale = 1.0f / sqrtf((float)D);
    cllm_context *ctx = ctx_new();
    /* caches [D * Hkv, n_ctx]; K and V are [D, n_kv, Hkv] views into them */
    cllm_tensor *kc = cllm_tensor_new_2d(ctx, c->kv_type, D * Hkv, n_ctx);
    cllm_tensor *vc = cllm_tensor_new_2d(ctx, c->kv_type, Dv * Hkv, n_ctx);
    cllm_tensor *k =
        cllm_view_3d(ctx, kc, D, n_kv, Hkv, kc->nb[1], cllm_row_size(c->kv_type, D), 0);
    cllm_tensor *v =
        cllm_view_3d(ctx, vc, Dv, n_kv, Hkv, vc->nb[1], cllm_row_size(c->kv_type, Dv), 0);
    /* q as rope leaves it, [D, H, T], permuted to [D, T, H] */
    cllm_tensor *q0 = cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, D, H, T);
    cllm_tensor *q = cllm_permute(ctx, q0, 0, 2, 1, 3);
    cllm_tensor *mask = NULL;
    if (c->mask_type != CLLM_TYPE_COUNT) {
        mask = cllm_tensor_new_2d(ctx, c->mask_type, n_kv, (T + 7) / 8 * 8); /* padded rows */
    }
    cllm_tensor *fused = cllm_attn(ctx, q, k, v, mask, scale);

    /* unfused: softmax(k^T q * scale + mask), then v^T times it, heads next
     * to each other (not for a block cache: its mul_mat rounds q to blocks
     * too, and v^T is not rows of blocks) */
    const bool blocks = cllm_type_traits_of(c->kv_type)->blck_size > 1;
    cllm_tensor *unfused = fused;
    if (!blocks) {
        cllm_tensor *kq = cllm_mul_mat(ctx, k, q);                    /* [n_kv, T, H] */
        cllm_tensor *sm = cllm_soft_max(ctx, kq, mask, scale);        /* [n_kv, T, H] */
        cllm_tensor *vt = cllm_transpose(ctx, v);                     /* [n_kv, Dv, Hkv], strided */
        cllm_tensor *kqv = cllm_mul_mat(ctx, vt, sm);                 /* [Dv, T, H] */
        unfused = cllm_cont(ctx, cllm_permute(ctx, kqv, 0, 2, 1, 3)); /* [Dv, H, T] */
    }

    cllm_buffer *buf = place_all(ctx);
    fill_uniform(kc, -1.0f, 1.0f);
    fill_uniform(vc, -1.0f, 1.0f);
    fill_uniform(q0, -2.0f, 2.0f);
    if (mask) fill_causal_mask(mask, T, c->dead_row);
    if (mask && c->hole >= 0) {
        double *m = read_dense(mask);
        const int64_t nm = cllm_nelements(mask);
        float *f = xmalloc((size_t)nm * sizeof(float));
        for (int64_t i = 0; i < nm; i++) {
            const int64_t j = i % mask->ne[0];
            f[i] = j >= c->hole && j < c->hole + 40 ? -INFINITY : (float)m[i];
        }
        set_floats(mask, f);
        free(f);
        free(m);
    }
    double *dq = read_dense(q), *dk = read_dense(k), *dv = read_dense(v);
    double *dm = mask ? read_dense(mask) : NULL;
    cllm_tensor *outs[2] = {fused, unfused};
    CHECK(compute_n(g_be[nth], outs, blocks ? 1 : 2) == CLLM_OK);
    double *got = read_dense(fused), *got_unfused = read_dense(unfused);
    const int64_t one[4] = {Dv, H, T, 1};
    double *want = xmalloc((size_t)nel(one) * sizeof(double));
    ref_attn(dq, q->ne, dk, k->ne, dv, v->ne, dm, mask ? mask->ne : NULL, scale, want);

    char what[200];
    snprintf(what, sizeof(what),
             "attn k/v %s, mask %s, D %lld Dv %lld T %lld n_kv %lld, %d threads",
             cllm_type_name(c->kv_type), mask ? cllm_type_name(mask->type) : "none", (long long)D,
             (long long)Dv, (long long)T, (long long)n_kv, nth);
    check_close(what, got, want, nel(one), 2e-5, 1e-5);
    char what2[240];
    snprintf(what2, sizeof(what2), "%s: fused vs unfused", what);
    check_close(what2, got, got_unfused, nel(one), 2e-5, 1e-5);
    if (mask && c->dead_row >= 0) {
        bool zeros = true;
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Dv; i++)
                zeros = zeros && got[idx4(one, i, h, c->dead_row, 0)] == 0.0;
        CHECKF(zeros, "%s: the masked-out token is not zeros", what);
    }
    free(dq);
    free(dk);
    free(dv);
    free(dm);
    free(got_unfused);
    free(want);
    ctx_done(ctx, buf);
    return got;
}

static void test_attn(void) {
    const attn_case cases[] = {
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 32, 32, 7, 40, 3, -1, 8, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F16, 32, 32, 7, 40, -1, -1, 8, 2},
        {CLLM_TYPE_F32, CLLM_TYPE_F32, 32, 24, 5, 33, 0, -1, 8, 2},
        {CLLM_TYPE_F32, CLLM_TYPE_COUNT, 24, 40, 9, 9, -1, -1, 8, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 64, 64, 16, 48, 15, -1, 8, 2},
        /* several key blocks of the SIMD kernel, a partial last one */
        {CLLM_TYPE_F16, CLLM_TYPE_F16, 64, 48, 19, 150, 4, 50, 8, 2},
        {CLLM_TYPE_F32, CLLM_TYPE_COUNT, 32, 80, 3, 130, -1, -1, 8, 2},
        /* one token (decode): key chunks of every head, then combined;
         * chunks hidden whole or in part, every key hidden */
        {CLLM_TYPE_BF16, CLLM_TYPE_F16, 16, 16, 1, 45, -1, -1, 8, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 64, 64, 1, 150, -1, -1, 8, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F16, 64, 32, 1, 150, -1, 20, 8, 2},
        {CLLM_TYPE_F32, CLLM_TYPE_COUNT, 32, 48, 1, 70, -1, -1, 8, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 32, 32, 1, 40, 0, -1, 8, 2},
        /* one token, groups of 1, 3, 5, 6 and 8 query heads per kv head
         * (the AVX-512 kernel's rows 4 at a time and the rest), head sizes
         * of its three score paths (64, 128, other), values in pieces of
         * 64 and less, blocks of 16 keys hidden whole and a last one of 1 */
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 64, 64, 1, 77, -1, 10, 9, 3},
        {CLLM_TYPE_F16, CLLM_TYPE_F16, 128, 128, 1, 40, -1, -1, 2, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 48, 80, 1, 33, -1, -1, 5, 1},
        {CLLM_TYPE_F16, CLLM_TYPE_F32, 64, 64, 1, 18, 0, -1, 12, 2},
        {CLLM_TYPE_F16, CLLM_TYPE_F16, 64, 32, 1, 150, -1, 60, 16, 2},
        /* BF16 and block caches (Q8_0, Q4_0) read in place: batches over
         * several key blocks with a hole and a dead row, one token */
        {CLLM_TYPE_Q8_0, CLLM_TYPE_F16, 64, 64, 19, 150, 4, 50, 8, 2},
        {CLLM_TYPE_Q4_0, CLLM_TYPE_F32, 64, 32, 9, 130, -1, -1, 6, 2},
        {CLLM_TYPE_BF16, CLLM_TYPE_F32, 32, 48, 12, 100, 3, 20, 8, 2},
        {CLLM_TYPE_Q8_0, CLLM_TYPE_F32, 64, 64, 1, 150, -1, 20, 8, 2},
        {CLLM_TYPE_Q4_0, CLLM_TYPE_F16, 128, 64, 1, 77, -1, -1, 9, 3},
    };
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
        const attn_case *ac = &cases[c];
        const int64_t n = ac->Dv * ac->H * ac->n_tokens; /* [Dv, H, T] */
        double *one = NULL;
        for (int nth = 1; nth <= MAX_THREADS; nth++) {
            rng_seed(9 + c); /* the same inputs for each thread count */
            double *got = run_attn(ac, nth);
            /* the threads split the work, never a row's sums: the same bits */
            if (one) {
                CHECKF(memcmp(got, one, (size_t)n * sizeof(double)) == 0,
                       "attn D %lld T %lld n_kv %lld: %d threads differ from 1", (long long)ac->D,
                       (long long)ac->n_tokens, (long long)ac->n_kv, nth);
                free(got);
            } else {
                one = got;
            }
        }
        free(one);
    }
}

/* ---- in place ------------------------------------------------------------- */

/* Every op the planner may compute in place, with dst at src[0]'s address. */
static void test_inplace(void) {
    const ew_case ew = {
        CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, {0, 0, 1, 1}};
    const int64_t norm_ne[4] = {33, 7, 3, 1};
    const sm_case sm = {LAYOUT_CONTIGUOUS, CLLM_TYPE_F32, 5, 1, 1, 1};
    const rope_case ropes[] = {
        {64, 32, CLLM_ROPE_NEOX, 10000.0f, 1.0f, true, LAYOUT_CONTIGUOUS, NULL},
        {64, 64, CLLM_ROPE_NORMAL, 10000.0f, 1.0f, false, LAYOUT_CONTIGUOUS, NULL},
    };
    rng_seed(10);
    for (int nth = 1; nth <= MAX_THREADS; nth++) {
        for (int op = 0; op < EW_COUNT; op++) run_elementwise(op, &ew, nth, true);
        run_norm(true, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, norm_ne, 1e-6f, nth, true);
        run_norm(false, CLLM_TYPE_F32, LAYOUT_CONTIGUOUS, norm_ne, 1e-5f, nth, true);
        run_soft_max(&sm, nth, true);
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(ropes); i++) run_rope(&ropes[i], nth, true);
    }
}

/* ---- supports_op ---------------------------------------------------------- */

static void test_supports_op(void) {
    cllm_context *ctx = ctx_new();
    cllm_tensor *b = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 3);
    cllm_tensor *ids = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 2);
    for (int type = 0; type < CLLM_TYPE_COUNT; type++) {
        const cllm_type_traits *tt = cllm_type_traits_of((cllm_type)type);
        if (!tt) continue;
        cllm_tensor *a = cllm_tensor_new_2d(ctx, (cllm_type)type, 256, 4);
        cllm_tensor *mm = cllm_mul_mat(ctx, a, b);
        cllm_tensor *gr = cllm_get_rows(ctx, a, ids);
        CHECKF(cllm_cpu_supports_op(gr) == (tt->to_float != NULL), "get_rows of %s", tt->name);
        if (!tt->to_float && !tt->vec_dot) {
            CHECKF(!cllm_cpu_supports_op(mm), "mul_mat of %s", tt->name);
        }
        if (tt->to_float) CHECKF(cllm_cpu_supports_op(mm), "mul_mat of %s", tt->name);
        if (tt->is_quantized && !tt->to_float) {
            /* a quantized type without arithmetic, to F32: refused, not crashed */
            cllm_tensor *f = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 256, 4);
            cllm_tensor *cp = cllm_cpy(ctx, a, a);
            CHECK(cllm_cpu_supports_op(cp)); /* same type: bytes */
            cp->src[0] = f;                  /* by hand: f32 rows into blocks */
            CHECKF(cllm_cpu_supports_op(cp) == (tt->from_float != NULL), "cpy f32 -> %s", tt->name);
            cp->src[0] = a;
            cp->type = CLLM_TYPE_F32; /* blocks to f32 without to_float */
            CHECKF(!cllm_cpu_supports_op(cp), "cpy %s -> f32", tt->name);
        }
    }
    /* the types the constructors allow are all supported */
    cllm_tensor *x = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 8, 3);
    CHECK(cllm_cpu_supports_op(cllm_add(ctx, x, x)));
    CHECK(cllm_cpu_supports_op(cllm_gelu(ctx, x)));
    CHECK(cllm_cpu_supports_op(cllm_rms_norm(ctx, x, 1e-5f)));
    /* hand-made nodes the constructors would refuse */
    cllm_tensor *bad = cllm_silu(ctx, x);
    bad->src[0] = ids; /* silu of i32 */
    CHECK(!cllm_cpu_supports_op(bad));
    bad->op = CLLM_OP_COUNT;
    CHECK(!cllm_cpu_supports_op(bad));
    cllm_tensor *sm = cllm_soft_max(ctx, b, NULL, 1.0f);
    sm->src[1] = ids; /* an i32 mask */
    CHECK(!cllm_cpu_supports_op(sm));
    cllm_tensor *r = cllm_rope(ctx, cllm_tensor_new_3d(ctx, CLLM_TYPE_F32, 8, 2, 2),
                               cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 2), NULL, 8, CLLM_ROPE_NEOX,
                               10000.0f, 1.0f);
    CHECK(cllm_cpu_supports_op(r));
    r->op_params[1] = 1; /* an unknown mode */
    CHECK(!cllm_cpu_supports_op(r));

    /* computing an unsupported node fails cleanly */
    cllm_tensor *ai = cllm_tensor_new_2d(ctx, CLLM_TYPE_I32, 256, 2);
    cllm_tensor *mm = cllm_mul_mat(ctx, ai, b);
    CHECK(!cllm_cpu_supports_op(mm));
    cllm_buffer *buf = place_all(ctx);
    CHECK(compute(g_be[2], mm) == CLLM_ERR_UNSUPPORTED);
    ctx_done(ctx, buf);
}

/* ---- workspace ------------------------------------------------------------ */

/* A fresh backend allocates exactly the largest workspace a node declares. */
static void test_workspace(void) {
    rng_seed(11);
    for (int nth = 1; nth <= MAX_THREADS + 1; nth++) {
        cllm_context *ctx = ctx_new();
        cllm_tensor *w = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 96, 40);
        cllm_tensor *xt = cllm_tensor_new_2d(ctx, CLLM_TYPE_F32, 6, 96);
        cllm_tensor *x = cllm_transpose(ctx, xt); /* strided b: gathered in the workspace */
        cllm_tensor *y = cllm_mul_mat(ctx, w, x); /* [40, 6] */
        cllm_tensor *pos = cllm_tensor_new_1d(ctx, CLLM_TYPE_I32, 6);
        cllm_tensor *qk = cllm_rope(ctx, cllm_reshape_3d(ctx, y, 8, 5, 6), pos, NULL, 8,
                                    CLLM_ROPE_NORMAL, 10000.0f, 1.0f); /* [8, 5, 6] */
        cllm_tensor *kc = cllm_tensor_new_2d(ctx, CLLM_TYPE_F16, 8, 6 * 5);
        cllm_tensor *kst = cllm_cpy(ctx, qk, kc);
        cllm_tensor *k = cllm_view_3d(ctx, kst, 8, 6, 5, kc->nb[1], 6 * kc->nb[1], 0);
        cllm_tensor *q = cllm_permute(ctx, qk, 0, 2, 1, 3); /* [8, 6, 5] */
        cllm_tensor *o = cllm_attn(ctx, q, k, k, NULL, 0.3f);
        cllm_tensor *out = cllm_add(ctx, o, o);
        cllm_buffer *buf = place_all(ctx);
        fill_uniform(w, -1.0f, 1.0f);
        fill_uniform(xt, -1.0f, 1.0f);
        const int32_t p[6] = {0, 1, 2, 3, 4, 5};
        set_i32(pos, p);

        cllm_graph *g = cllm_graph_new(64);
        cllm_graph_build(g, out);
        size_t max = 0;
        for (int i = 0; i < g->n_nodes; i++)
            max = CLLM_MAX(max, cllm_cpu_op_workspace(g->nodes[i], nth));
        cllm_backend *be = NULL;
        CHECK(cllm_backend_cpu_new(nth, &be) == CLLM_OK);
        CHECK(cllm_backend_workspace_allocated(be) == 0);
        CHECK_EQ_INT(cllm_backend_workspace_size(be, g), max);
        CHECK(cllm_backend_graph_compute(be, g) == CLLM_OK);
        CHECK(max > 0);
        CHECK_EQ_INT(cllm_backend_workspace_allocated(be), max);
        /* per op: mul_mat gathers b (6 rows of 96 F32) for the F16 x F32 kernel,
         * after a cache line for its tile counter */
        const size_t mm_ws = cllm_cpu_op_workspace(y, nth);
        CHECK_EQ_INT(mm_ws, 64 + 6 * 96 * 4);
        CHECK_EQ_INT(cllm_cpu_op_workspace(out, nth), 0);
        cllm_backend_free(be);
        cllm_graph_free(g);
        ctx_done(ctx, buf);
    }
}

int main(void) {
    for (int n = 1; n <= MAX_THREADS; n++) {
        if (cllm_backend_cpu_new(n, &g_be[n]) != CLLM_OK) {
            fprintf(stderr, "test_ops: cannot create a backend with %d threads\n", n);
            return 1;
        }
    }
    test_elementwise();
    test_norm();
    test_soft_max();
    test_rope();
    test_mul_mat();
    test_mul_mat_quantized();
    test_mul_mat_blocked();
    test_get_rows();
    test_concat();
    test_copy();
    test_attn();
    test_inplace();
    test_supports_op();
    test_workspace();
    for (int n = 1; n <= MAX_THREADS; n++) cllm_backend_free(g_be[n]);
    return check_summary("test_ops");
}
