/*
 * What the Vulkan device computes (supports_op) and how each node is
 * dispatched: its pipeline, push constants and grid.
 */
#include "backend/vulkan/vk-internal.h"
#include "core/hostmem.h"

#include <math.h>
#include <string.h>

#include "attn.spv.h"
#include "attn_vec.spv.h"
#include "binary.spv.h"
#include "concat.spv.h"
#include "cpy.spv.h"
#include "get_rows.spv.h"
#include "mul_mat_vec.spv.h"
#include "mul_mat_vec1.spv.h"
#include "mul_mat_q8.spv.h"
#include "mul_mm.spv.h"
#include "quant_q8.spv.h"
#include "rms_norm.spv.h"
#include "rope.spv.h"
#include "rope_table.spv.h"
#include "soft_max.spv.h"
#include "unary.spv.h"

const vk_shader vk_shaders[VK_PIPE_COUNT] = {
    [VK_PIPE_BINARY] = {binary_spv, sizeof(binary_spv), VK_SPEC_NONE},
    [VK_PIPE_UNARY] = {unary_spv, sizeof(unary_spv), VK_SPEC_NONE},
    [VK_PIPE_CPY] = {cpy_spv, sizeof(cpy_spv), VK_SPEC_NONE},
    [VK_PIPE_GET_ROWS] = {get_rows_spv, sizeof(get_rows_spv), VK_SPEC_NONE},
    [VK_PIPE_RMS_NORM] = {rms_norm_spv, sizeof(rms_norm_spv), VK_SPEC_WG},
    [VK_PIPE_SOFT_MAX] = {soft_max_spv, sizeof(soft_max_spv), VK_SPEC_WG},
    [VK_PIPE_ROPE] = {rope_spv, sizeof(rope_spv), VK_SPEC_NONE},
    [VK_PIPE_MUL_MAT_VEC1] = {mul_mat_vec1_spv, sizeof(mul_mat_vec1_spv), VK_SPEC_WG},
    [VK_PIPE_MUL_MAT_VEC] = {mul_mat_vec_spv, sizeof(mul_mat_vec_spv), VK_SPEC_WG},
    [VK_PIPE_MUL_MM] = {mul_mm_spv, sizeof(mul_mm_spv), VK_SPEC_NONE},
    [VK_PIPE_CONCAT] = {concat_spv, sizeof(concat_spv), VK_SPEC_NONE},
    [VK_PIPE_ROPE_TABLE] = {rope_table_spv, sizeof(rope_table_spv), VK_SPEC_NONE},
    [VK_PIPE_ATTN] = {attn_spv, sizeof(attn_spv), VK_SPEC_ATTN},
    [VK_PIPE_ATTN_VEC] = {attn_vec_spv, sizeof(attn_vec_spv), VK_SPEC_ATTN},
    [VK_PIPE_QUANT_Q8] = {quant_q8_spv, sizeof(quant_q8_spv), VK_SPEC_NONE},
    [VK_PIPE_MUL_MAT_Q8] = {mul_mat_q8_spv, sizeof(mul_mat_q8_spv), VK_SPEC_WG, .int8 = true},
};
_Static_assert(sizeof(vk_shaders) / sizeof(vk_shaders[0]) == VK_PIPE_COUNT, "a shader per pipe");

int vk_type_of(cllm_type t) {
    switch (t) {
    case CLLM_TYPE_F32: return VK_T_F32;
    case CLLM_TYPE_F16: return VK_T_F16;
    case CLLM_TYPE_BF16: return VK_T_BF16;
    case CLLM_TYPE_Q8_0: return VK_T_Q8_0;
    case CLLM_TYPE_Q4_0: return VK_T_Q4_0;
    case CLLM_TYPE_Q4_1: return VK_T_Q4_1;
    case CLLM_TYPE_I32: return VK_T_I32;
    case CLLM_TYPE_Q5_0: return VK_T_Q5_0;
    case CLLM_TYPE_Q5_1: return VK_T_Q5_1;
    case CLLM_TYPE_Q2_K: return VK_T_Q2_K;
    case CLLM_TYPE_Q3_K: return VK_T_Q3_K;
    case CLLM_TYPE_Q4_K: return VK_T_Q4_K;
    case CLLM_TYPE_Q5_K: return VK_T_Q5_K;
    case CLLM_TYPE_Q6_K: return VK_T_Q6_K;
    default: return VK_T_NONE;
    }
}

bool vk_has_work(const cllm_tensor *t) {
    return cllm_op_has_compute(t->op) && cllm_nelements(t) > 0;
}

int64_t vk_window_rows(const vk_dev *v, const cllm_tensor *t) {
    const size_t range = v->max_range;
    const size_t align = v->props.limits.minStorageBufferOffsetAlignment;
    if (cllm_nbytes(t) + align <= range) return t->ne[1];
    cllm_tensor row = *t;
    row.ne[1] = 1;
    const size_t one = cllm_nbytes(&row);
    if (one + align > range || t->nb[1] == 0) return 0;
    return CLLM_MIN(t->ne[1], 1 + (int64_t)((range - align - one) / t->nb[1]));
}

/* Operand `which` of node (-1: the node itself, else src[which]) as the
 * shaders address it: 32-bit element counts and byte strides, within one
 * bound range of at most maxStorageBufferRange (from its offset aligned
 * down to minStorageBufferOffsetAlignment). Where a node is recorded in
 * windows (graph.c: get_rows' and mul_mat's matrix by its rows, mul_mat's
 * src[1] and result by their columns), one window of a row is enough. */
static bool addressable(const vk_dev *v, const cllm_tensor *node, int which) {
    const cllm_tensor *t = which < 0 ? node : node->src[which];
    if (!t) return true;
    for (int i = 0; i < CLLM_MAX_DIMS; i++) {
        if (t->ne[i] > UINT32_MAX || t->nb[i] > UINT32_MAX) return false;
    }
    const bool mm = node->op == CLLM_OP_MUL_MAT;
    const bool windowed = ((mm || node->op == CLLM_OP_GET_ROWS) && which == 0) ||
                          (mm && (which == 1 || which < 0)) ||
                          (node->op == CLLM_OP_ATTN && (which == 1 || which == 2));
    if (vk_cpy_rows(node)) return vk_cpy_window(v, t) > 0;
    return windowed ? vk_window_rows(v, t) > 0 : vk_window_rows(v, t) == t->ne[1];
}

int vk_outer_dim(const cllm_tensor *t) {
    int d = CLLM_MAX_DIMS - 1;
    while (d > 0 && t->ne[d] == 1) d--;
    return d;
}

int64_t vk_cpy_window(const vk_dev *v, const cllm_tensor *t) {
    const int d = vk_outer_dim(t);
    const size_t range = v->max_range, align = v->props.limits.minStorageBufferOffsetAlignment;
    cllm_tensor row = *t;
    row.ne[d] = 1;
    const size_t one = cllm_nbytes(&row);
    if (one + align > range || t->nb[d] == 0) return t->ne[d] == 1 && one + align <= range;
    return CLLM_MIN(t->ne[d], 1 + (int64_t)((range - align - one) / t->nb[d]));
}

bool vk_cpy_rows(const cllm_tensor *node) {
    if (node->op != CLLM_OP_CPY && node->op != CLLM_OP_CONT) return false;
    const cllm_tensor *a = node->src[0];
    if (!a) return false;
    const int da = vk_outer_dim(a), dd = vk_outer_dim(node);
    return da > 0 && dd > 0 && a->ne[da] == node->ne[dd] &&
           cllm_nelements(a) == cllm_nelements(node);
}

static bool is_f32(const cllm_tensor *t) { return t && t->type == CLLM_TYPE_F32; }
static bool is_float(const cllm_tensor *t) {
    return t && (t->type == CLLM_TYPE_F32 || t->type == CLLM_TYPE_F16 || t->type == CLLM_TYPE_BF16);
}
/* Whole blocks (of 32, or super-blocks of 256: a quantized row is read
 * block by block). */
static bool rows_readable(const cllm_tensor *a) {
    const int vt = vk_type_of(a->type);
    if (vt == VK_T_NONE || vt == VK_T_I32 || a->layout != 0) return false;
    const cllm_type_traits *tt = cllm_type_traits_of(a->type);
    if (tt->blck_size > 1) return a->nb[0] == tt->type_size && a->ne[0] % tt->blck_size == 0;
    return a->nb[0] % 2 == 0;
}

/* The tiles of mul_mat: shaders/mul_mat_vec.comp computes VK_MMV_ROWS rows
 * of d for up to VK_MMV_COLS columns per workgroup (NR, NC there), and
 * shaders/mul_mm.comp a VK_MM_TILE x VK_MM_TILE tile (BM, BN). */
#define VK_MMV_ROWS 4
#define VK_MMV_COLS 8
#define VK_MM_TILE  32

/* The attention kernels (shaders/attn.comp for batches of query rows,
 * attn_vec.comp for one): workgroups of VK_ATTN_WG invocations, q and the
 * key/value tiles in shared memory for head sizes up to VK_ATTN_D_MAX. */
#define VK_ATTN_WG     64u
#define VK_ATTN_D_MAX  256
#define VK_ATTN_ROWS   8u /* query rows per workgroup of attn.comp (QR) */
#define VK_ATTN_SHARED (17u * VK_ATTN_D_MAX * sizeof(float) + 1024u) /* attn.comp's, the larger */

/* Invocations in the smallest subgroup of an attn_vec workgroup (all
 * subgroups full but the last). */
static uint32_t attn_vec_lanes(const vk_dev *v) {
    const uint32_t s = CLLM_MAX(v->subgroup_size, 1u);
    return VK_ATTN_WG % s ? VK_ATTN_WG % s : CLLM_MIN(s, VK_ATTN_WG);
}

uint32_t vk_pipe_spec(const vk_dev *v, vk_pipe p, uint32_t spec[2]) {
    switch (vk_shaders[p].spec) {
    case VK_SPEC_WG: spec[0] = v->wg; return 1;
    case VK_SPEC_ATTN:
        spec[0] = VK_ATTN_WG;
        spec[1] = (VK_ATTN_D_MAX + attn_vec_lanes(v) - 1) / attn_vec_lanes(v);
        return 2;
    case VK_SPEC_NONE: return 0;
    }
    return 0;
}

int64_t vk_attn_window(const vk_dev *v, const cllm_tensor *node) {
    return CLLM_MIN(vk_window_rows(v, node->src[1]), vk_window_rows(v, node->src[2]));
}

size_t vk_attn_state_bytes(const vk_dev *v, const cllm_tensor *node) {
    if (vk_attn_window(v, node) >= node->src[1]->ne[1]) return 0;
    return (size_t)node->ne[1] * (size_t)node->ne[2] * 2 * sizeof(float);
}

static bool attn_supported(const vk_dev *v, const cllm_tensor *node) {
    const cllm_tensor *q = node->src[0], *k = node->src[1], *val = node->src[2];
    const cllm_tensor *mask = node->src[3];
    const int64_t dv = node->ne[0];
    /* a cache larger than a binding: in windows of its rows (graph.c), the
     * softmax state of every query row in one binding of the workspace */
    if (vk_attn_state_bytes(v, node) > v->max_range) return false;
    return is_f32(node) && node->nb[0] == sizeof(float) &&
           node->nb[1] == (size_t)dv * sizeof(float) && node->nb[2] == node->nb[1] * node->ne[1] &&
           is_f32(q) && is_float(k) && is_float(val) && k->nb[0] % 2 == 0 && val->nb[0] % 2 == 0 &&
           q->ne[0] <= VK_ATTN_D_MAX && dv <= VK_ATTN_D_MAX &&
           v->props.limits.maxComputeSharedMemorySize >= VK_ATTN_SHARED &&
           v->props.limits.maxComputeWorkGroupSize[0] >= VK_ATTN_WG &&
           (!mask ||
            ((mask->type == CLLM_TYPE_F32 || mask->type == CLLM_TYPE_F16) && mask->nb[0] % 2 == 0));
}

bool vk_op_supported(const vk_dev *v, const cllm_tensor *node) {
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    for (int i = -1; i < 4; i++) {
        if (!addressable(v, node, i)) return false;
    }
    if (node->op == CLLM_OP_ATTN) return attn_supported(v, node);
    if (node->src[3]) return false;
    switch (node->op) {
    case CLLM_OP_ADD:
    case CLLM_OP_MUL: return is_f32(node) && is_float(a) && is_float(b) && !node->src[2];
    case CLLM_OP_SCALE:
    case CLLM_OP_SILU:
    case CLLM_OP_GELU:
    case CLLM_OP_RMS_NORM:
    case CLLM_OP_NORM: return is_f32(node) && is_float(a) && !b;
    case CLLM_OP_CONCAT: return is_f32(node) && is_f32(a) && is_f32(b) && !node->src[2];
    case CLLM_OP_ROPE_TABLE:
        return is_f32(node) && a && a->type == CLLM_TYPE_I32 && (!b || is_f32(b)) &&
               node->ne[0] == cllm_get_op_param_i32(node, 0) && node->ne[0] % 2 == 0 &&
               node->nb[0] == sizeof(float);
    case CLLM_OP_CPY:
    case CLLM_OP_CONT:
        return is_float(a) && (node->type == CLLM_TYPE_F32 || node->type == CLLM_TYPE_F16) &&
               cllm_nelements(a) == cllm_nelements(node) && node->nb[0] % 2 == 0;
    case CLLM_OP_GET_ROWS:
        return is_f32(node) && a && rows_readable(a) && b && b->type == CLLM_TYPE_I32 &&
               a->ne[3] == 1 && b->ne[2] == 1 && b->ne[3] == 1 && node->ne[3] == 1 &&
               b->ne[1] == a->ne[2];
    case CLLM_OP_SOFT_MAX:
        return is_f32(node) && is_f32(a) &&
               (!b || b->type == CLLM_TYPE_F32 || b->type == CLLM_TYPE_F16) && !node->src[2];
    case CLLM_OP_ROPE: {
        /* only by a rope_table's rows (the graphs of src/model build it so) */
        const int n_dims = cllm_get_op_param_i32(node, 0);
        const int mode = cllm_get_op_param_i32(node, 1);
        return is_f32(node) && is_f32(a) && is_f32(b) && b->ne[0] == n_dims &&
               b->ne[1] == a->ne[2] && b->nb[0] == sizeof(float) && n_dims % 2 == 0 &&
               n_dims <= a->ne[0] && (mode == CLLM_ROPE_NORMAL || mode == CLLM_ROPE_NEOX);
    }
    case CLLM_OP_MUL_MAT:
        return is_f32(node) && a && rows_readable(a) && is_f32(b) && !node->src[2] &&
               node->ne[2] * node->ne[3] <= VK_GRID_MAX && b->ne[2] % a->ne[2] == 0 &&
               b->ne[3] % a->ne[3] == 0;
    default: return false;
    }
}

bool vk_mul_mat_q8(const vk_dev *v, const cllm_tensor *node) {
    if (!v->int8 || node->op != CLLM_OP_MUL_MAT || cllm_mul_mat_prec(node) != CLLM_PREC_DEFAULT) {
        return false;
    }
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    const cllm_type t = a->type;
    if (t != CLLM_TYPE_Q4_0 && t != CLLM_TYPE_Q4_1 && t != CLLM_TYPE_Q8_0 && t != CLLM_TYPE_Q4_K) {
        return false;
    }
    /* whole: no windows, and the blocks in one binding */
    const uint64_t blocks = (uint64_t)(a->ne[0] / 32) * (uint64_t)cllm_nrows(b);
    return vk_window_rows(v, a) == a->ne[1] && vk_window_rows(v, b) == b->ne[1] &&
           vk_window_rows(v, node) == node->ne[1] && blocks * 40 <= v->max_range &&
           blocks <= (uint64_t)VK_GRID_MAX * VK_GRID_MAX;
}

size_t vk_mul_mat_q8_bytes(const vk_dev *v, const cllm_tensor *node) {
    if (!vk_mul_mat_q8(v, node)) return 0;
    return (size_t)(node->src[0]->ne[0] / 32) * (size_t)cllm_nrows(node->src[1]) * 40;
}

static void shape_of(const cllm_tensor *t, uint32_t ne[4], uint32_t nb[4]) {
    for (int i = 0; i < 4; i++) {
        ne[i] = (uint32_t)t->ne[i];
        nb[i] = (uint32_t)t->nb[i];
    }
}

/* A grid of workgroups for `n` of them (x, then y; each at most 65535). */
static void grid_of(uint64_t n, uint32_t g[3]) {
    g[0] = (uint32_t)CLLM_MIN(n, (uint64_t)VK_GRID_MAX);
    g[1] = (uint32_t)((n + g[0] - 1) / CLLM_MAX(g[0], 1u));
    g[2] = 1;
}

static uint32_t f32_bits(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* YaRN's correction dim: where a dim's wavelength is beta rotations over
 * the original context (as the CPU's ops-rope.c). */
static double yarn_corr_dim(int n_dims, int n_ctx_orig, double beta, double base) {
    return n_dims * log(n_ctx_orig / (beta * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

/* rope_table's parameters (shaders/rope_table.comp): what depends on the
 * op params only is computed here in double, as the CPU does. */
static void rope_table_params(const cllm_tensor *node, vk_push *pc) {
    const int n_dims = cllm_get_op_param_i32(node, 0);
    const double base = cllm_get_op_param_f32(node, 2);
    const double scale = cllm_get_op_param_f32(node, 3);
    const double ext = cllm_get_op_param_f32(node, 5);
    double mscale = cllm_get_op_param_f32(node, 6), lo = 0.0, hi = 0.0;
    if (ext != 0.0) {
        const int n_ctx_orig = cllm_get_op_param_i32(node, 4);
        const double beta_fast = cllm_get_op_param_f32(node, 7);
        const double beta_slow = cllm_get_op_param_f32(node, 8);
        lo = fmax(0.0, floor(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, base)));
        hi = fmin(n_dims - 1, ceil(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, base)));
        mscale *= 1.0 + 0.1 * log(1.0 / scale);
    }
    pc->p[0] = (uint32_t)n_dims;
    pc->p[1] = node->src[1] != NULL;
    pc->p[2] = f32_bits(ext);
    pc->nb_b[1] = f32_bits(base);
    pc->nb_b[2] = f32_bits(scale);
    pc->nb_b[3] = f32_bits(mscale);
    pc->ne_b[2] = f32_bits(lo);
    pc->ne_b[3] = f32_bits(hi);
}

/* The pipeline, push constants and grid of a node. */
vk_pipe vk_node_dispatch(const cllm_tensor *node, vk_push *pc, uint32_t g[3]) {
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    shape_of(node, pc->ne_d, pc->nb_d);
    if (a) shape_of(a, pc->ne_a, pc->nb_a);
    if (b) shape_of(b, pc->ne_b, pc->nb_b);
    const uint32_t ta = a ? (uint32_t)vk_type_of(a->type) : 0;
    const uint32_t tb = b ? (uint32_t)vk_type_of(b->type) : 0;
    pc->p[3] = ta | tb << 8 | (uint32_t)vk_type_of(node->type) << 16;
    const uint64_t n = (uint64_t)cllm_nelements(node);
    switch (node->op) {
    case CLLM_OP_ADD:
    case CLLM_OP_MUL:
        pc->p[0] = node->op == CLLM_OP_MUL;
        grid_of((n + 255) / 256, g);
        return VK_PIPE_BINARY;
    case CLLM_OP_SCALE:
    case CLLM_OP_SILU:
    case CLLM_OP_GELU:
        pc->p[0] = node->op == CLLM_OP_SCALE ? 0 : node->op == CLLM_OP_SILU ? 1 : 2;
        pc->p[1] = (uint32_t)node->op_params[0];
        grid_of((n + 255) / 256, g);
        return VK_PIPE_UNARY;
    case CLLM_OP_CONCAT: grid_of((n + 255) / 256, g); return VK_PIPE_CONCAT;
    case CLLM_OP_ROPE_TABLE:
        rope_table_params(node, pc);
        grid_of((n / 2 + 255) / 256, g);
        return VK_PIPE_ROPE_TABLE;
    case CLLM_OP_CPY:
    case CLLM_OP_CONT: grid_of((n + 255) / 256, g); return VK_PIPE_CPY;
    case CLLM_OP_GET_ROWS: grid_of((n + 255) / 256, g); return VK_PIPE_GET_ROWS;
    case CLLM_OP_RMS_NORM:
    case CLLM_OP_NORM:
        pc->p[0] = (uint32_t)node->op_params[0];
        pc->p[1] = node->op == CLLM_OP_NORM;
        grid_of((uint64_t)cllm_nrows(node), g);
        return VK_PIPE_RMS_NORM;
    case CLLM_OP_SOFT_MAX:
        pc->p[0] = (uint32_t)node->op_params[0];
        pc->p[1] = b != NULL;
        grid_of((uint64_t)cllm_nrows(node), g);
        return VK_PIPE_SOFT_MAX;
    case CLLM_OP_ROPE: {
        const int64_t n_dims = cllm_get_op_param_i32(node, 0);
        pc->p[0] = (uint32_t)n_dims;
        pc->p[1] = (uint32_t)cllm_get_op_param_i32(node, 1);
        const uint64_t per_row = (uint64_t)(n_dims / 2 + node->ne[0] - n_dims);
        grid_of((per_row * (uint64_t)cllm_nrows(node) + 255) / 256, g);
        return VK_PIPE_ROPE;
    }
    case CLLM_OP_ATTN: {
        const cllm_tensor *val = node->src[2], *mask = node->src[3];
        for (int i = 0; i < 3; i++) pc->nb_d[i] = (uint32_t)val->nb[i];
        pc->ne_d[3] = mask ? (uint32_t)mask->nb[0] : 0;
        pc->nb_d[3] = mask ? (uint32_t)mask->nb[1] : 0;
        pc->p[0] = (uint32_t)node->op_params[0];
        /* p[1]: the mask's offset, record_node's */
        pc->p[3] = ta | tb << 8 | (uint32_t)vk_type_of(val->type) << 16 |
                   (uint32_t)(mask ? vk_type_of(mask->type) : VK_T_NONE) << 24;
        if (node->ne[2] == 1) { /* one token: a workgroup per query row */
            grid_of((uint64_t)node->ne[1], g);
            return VK_PIPE_ATTN_VEC;
        }
        /* the query rows of a kv head, VK_ATTN_ROWS to a workgroup */
        const uint64_t rows = (uint64_t)(node->ne[1] / node->src[1]->ne[2] * node->ne[2]);
        grid_of((uint64_t)node->src[1]->ne[2] * ((rows + VK_ATTN_ROWS - 1) / VK_ATTN_ROWS), g);
        return VK_PIPE_ATTN;
    }
    case CLLM_OP_MUL_MAT: {
        const uint64_t batches = (uint64_t)(node->ne[2] * node->ne[3]);
        if (node->ne[1] <= VK_MMV_COLS) {
            grid_of(((uint64_t)node->ne[0] + VK_MMV_ROWS - 1) / VK_MMV_ROWS, g);
            g[2] = (uint32_t)batches;
            return node->ne[1] == 1 ? VK_PIPE_MUL_MAT_VEC1 : VK_PIPE_MUL_MAT_VEC;
        }
        const uint64_t tiles_m = ((uint64_t)node->ne[0] + VK_MM_TILE - 1) / VK_MM_TILE;
        const uint64_t tiles_n = ((uint64_t)node->ne[1] + VK_MM_TILE - 1) / VK_MM_TILE;
        grid_of(tiles_m * tiles_n, g);
        g[2] = (uint32_t)batches;
        return VK_PIPE_MUL_MM;
    }
    default: CLLM_ASSERTF(false, "vulkan: no shader for %s", cllm_op_name(node->op));
    }
    return VK_PIPE_COUNT;
}
