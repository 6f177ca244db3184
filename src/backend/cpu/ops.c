/* The CPU kernels' entry points (cpu-ops.h): which nodes they can compute,
 * the workspace each needs, and the dispatch to the op families (ops-*.c). */
#include "backend/cpu/ops-impl.h"
#include "backend/cpu/repack.h"

/* ---- cpu-ops.h --------------------------------------------------------- */

static bool is_f32(const cllm_tensor *t) { return t && t->type == CLLM_TYPE_F32; }
static bool is_i32(const cllm_tensor *t) { return t && t->type == CLLM_TYPE_I32; }
static bool is_float(const cllm_tensor *t) { return t && cllm_cpu_is_float(t->type); }
/* attention's k or v: a float type, or rows of whole Q8_0 / Q4_0 blocks (a
 * quantized KV cache, read block by block) */
static bool is_attn_kv(const cllm_tensor *t) {
    if (is_float(t)) return true;
    if (!t || (t->type != CLLM_TYPE_Q8_0 && t->type != CLLM_TYPE_Q4_0)) return false;
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    return t->ne[0] % tt->blck_size == 0 && t->nb[0] == tt->type_size;
}
/* An optional mask: absent, F32 or F16. */
static bool is_mask(const cllm_tensor *t) {
    return !t || t->type == CLLM_TYPE_F32 || t->type == CLLM_TYPE_F16;
}

bool cllm_cpu_supports_op(const cllm_tensor *node) {
    const cllm_tensor *a = node->src[0], *b = node->src[1];
    /* such a matrix is read only by mul_mat, as itself (not a view) */
    for (int i = 0; i < CLLM_MAX_SRC; i++) {
        const cllm_tensor *s = node->src[i];
        if (s && cllm_cpu_is_x16(s) &&
            !(node->op == CLLM_OP_MUL_MAT && i == 0 && s->layout == CLLM_CPU_LAYOUT_X16))
            return false;
    }
    switch (node->op) {
    case CLLM_OP_NONE:
    case CLLM_OP_VIEW:
    case CLLM_OP_RESHAPE:
    case CLLM_OP_PERMUTE:
    case CLLM_OP_TRANSPOSE: return true; /* nothing to compute */
    case CLLM_OP_ADD:
    case CLLM_OP_MUL: return is_f32(node) && is_float(a) && is_float(b);
    case CLLM_OP_SCALE:
    case CLLM_OP_SILU:
    case CLLM_OP_GELU:
    case CLLM_OP_RMS_NORM:
    case CLLM_OP_NORM: return is_f32(node) && is_float(a);
    case CLLM_OP_CPY:
    case CLLM_OP_CONT: return a && cllm_cpu_copy_supported(a, node);
    case CLLM_OP_CONCAT: return is_f32(node) && is_f32(a) && is_f32(b);
    case CLLM_OP_GET_ROWS: {
        if (!is_f32(node) || !a || !is_i32(b)) return false;
        const cllm_type_traits *tt = cllm_type_traits_of(a->type);
        /* quantized rows must be whole blocks, read as such */
        return tt && tt->to_float && (tt->blck_size == 1 || a->nb[0] == tt->type_size);
    }
    case CLLM_OP_SOFT_MAX: return is_f32(node) && is_f32(a) && is_mask(b);
    case CLLM_OP_ROPE: {
        const int mode = cllm_get_op_param_i32(node, 1);
        /* b: the positions, or a rope_table's rows (one per token) */
        const bool table = is_f32(b) && b->ne[0] == cllm_get_op_param_i32(node, 0) &&
                           b->ne[1] == a->ne[2] && b->nb[0] == sizeof(float);
        return is_f32(node) && is_f32(a) && (is_i32(b) || table) &&
               (!node->src[2] || is_f32(node->src[2])) &&
               (mode == CLLM_ROPE_NORMAL || mode == CLLM_ROPE_NEOX);
    }
    case CLLM_OP_ROPE_TABLE:
        return is_f32(node) && is_i32(a) && (!b || is_f32(b)) &&
               node->ne[0] == cllm_get_op_param_i32(node, 0) && node->ne[0] % 2 == 0;
    case CLLM_OP_MUL_MAT: return is_f32(node) && a && is_f32(b) && cllm_cpu_mul_mat_supported(node);
    case CLLM_OP_ATTN:
        return is_f32(node) && is_f32(a) && is_attn_kv(b) && is_attn_kv(node->src[2]) &&
               is_mask(node->src[3]);
    case CLLM_OP_COUNT: break;
    }
    return false;
}

size_t cllm_cpu_op_workspace(const cllm_tensor *node, int n_threads) {
    /* asked for every node before compute checks support: refused nodes need none */
    if (!cllm_op_may_need_workspace(node->op) || !cllm_cpu_supports_op(node)) return 0;
    switch (node->op) {
    case CLLM_OP_CPY:
    case CLLM_OP_CONT: return cllm_cpu_copy_workspace(node, n_threads);
    case CLLM_OP_ROPE: return cllm_cpu_rope_workspace(node, n_threads);
    case CLLM_OP_MUL_MAT: return cllm_cpu_mul_mat_workspace(node, n_threads);
    case CLLM_OP_ATTN: return cllm_cpu_attn_workspace(node, n_threads);
    default: return 0; /* the other kernels work in their dst rows */
    }
}

void cllm_cpu_compute_forward(const cllm_cpu_params *params, cllm_tensor *node) {
    switch (node->op) {
    case CLLM_OP_ADD: cllm_cpu_add(params, node); break;
    case CLLM_OP_MUL: cllm_cpu_mul(params, node); break;
    case CLLM_OP_SCALE: cllm_cpu_scale(params, node); break;
    case CLLM_OP_SILU: cllm_cpu_silu(params, node); break;
    case CLLM_OP_GELU: cllm_cpu_gelu(params, node); break;
    case CLLM_OP_CPY:
    case CLLM_OP_CONT: cllm_cpu_copy(params, node); break;
    case CLLM_OP_CONCAT: cllm_cpu_concat_rows(params, node); break;
    case CLLM_OP_GET_ROWS: cllm_cpu_get_rows(params, node); break;
    case CLLM_OP_RMS_NORM: cllm_cpu_rms_norm(params, node); break;
    case CLLM_OP_NORM: cllm_cpu_norm(params, node); break;
    case CLLM_OP_SOFT_MAX: cllm_cpu_soft_max(params, node); break;
    case CLLM_OP_ROPE: cllm_cpu_rope(params, node); break;
    case CLLM_OP_ROPE_TABLE: cllm_cpu_rope_table(params, node); break;
    case CLLM_OP_MUL_MAT: cllm_cpu_mul_mat(params, node); break;
    case CLLM_OP_ATTN: cllm_cpu_attn(params, node); break;
    case CLLM_OP_NONE:
    case CLLM_OP_VIEW:
    case CLLM_OP_RESHAPE:
    case CLLM_OP_PERMUTE:
    case CLLM_OP_TRANSPOSE: break; /* no computation */
    case CLLM_OP_COUNT:
        CLLM_ASSERTF(false, "cpu: op %d of %s is not an op", (int)node->op, node->name);
        break;
    }
}
