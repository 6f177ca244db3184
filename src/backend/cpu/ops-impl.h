/*
 * Internal to the CPU kernels (ops*.c): the kernel entry points of each op
 * family and their workspace slices; the element and row helpers they share
 * are in rows.h.
 *
 * Conventions of every kernel `cllm_cpu_<op>(params, dst)`:
 *  - it computes the share of thread params->ith of params->nth, split by
 *    rows with cllm_cpu_split (mul_mat: by output rows or columns);
 *  - inputs are read through their nb[] strides;
 *  - dst is F32 and contiguous (except cpy, written through its strides);
 *  - for add, mul, scale, silu, gelu, rms_norm, norm, soft_max and rope, dst
 *    may be the very memory of src[0] (same shape and strides): a thread
 *    reads each of its rows before writing it and touches no other rows;
 *  - workspace: exactly what cllm_cpu_<op>_workspace declares, taken through
 *    cllm_cpu_ws(), which asserts that it lies within params->wsize.
 *
 *     float *acc = cllm_cpu_ws(params, dst, params->ith * slice, slice);
 *     const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, i1, i2, i3), a->ne[0], y);
 */
#ifndef CLLM_BACKEND_CPU_OPS_IMPL_H
#define CLLM_BACKEND_CPU_OPS_IMPL_H

#include "backend/cpu/cpu-ops.h"
#include "backend/cpu/rows.h"

#include <string.h>

/* Every thread's slice of the workspace starts on its own cache line. */
#define CLLM_CPU_WS_ALIGN 64

static inline size_t cllm_cpu_ws_round(size_t bytes) {
    return cllm_align_up(bytes, CLLM_CPU_WS_ALIGN);
}

/* `bytes` of the workspace at `offset` for computing dst; asserts that they
 * lie within what dst declared (cllm_cpu_op_workspace) and was allocated. */
static inline void *cllm_cpu_ws(const cllm_cpu_params *params, const cllm_tensor *dst,
                                size_t offset, size_t bytes) {
    const size_t declared = cllm_cpu_op_workspace(dst, params->nth);
    CLLM_ASSERTF(offset <= declared && bytes <= declared - offset && declared <= params->wsize,
                 "cpu: %s (%s) uses workspace [%zu, +%zu) beyond the %zu bytes it declared "
                 "(%zu allocated)",
                 dst->name, cllm_op_name(dst->op), offset, bytes, declared, params->wsize);
    return (char *)params->wdata + offset;
}

/* ---- kernels, one family per file -------------------------------------- */

/* ops-elementwise.c */
void cllm_cpu_add(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_mul(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_scale(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_silu(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_gelu(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-copy.c: cpy and cont (a cont is a copy into a contiguous tensor) */
bool cllm_cpu_copy_supported(const cllm_tensor *src, const cllm_tensor *dst);
size_t cllm_cpu_copy_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_copy(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-rows.c */
void cllm_cpu_get_rows(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_concat_rows(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-norm.c */
void cllm_cpu_rms_norm(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_norm(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-softmax.c */
void cllm_cpu_soft_max(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-rope.c */
size_t cllm_cpu_rope_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_rope(const cllm_cpu_params *params, cllm_tensor *dst);
void cllm_cpu_rope_table(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-matmul.c */
bool cllm_cpu_mul_mat_supported(const cllm_tensor *dst);
size_t cllm_cpu_mul_mat_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_mul_mat(const cllm_cpu_params *params, cllm_tensor *dst);

/* ops-attn.c */
size_t cllm_cpu_attn_workspace(const cllm_tensor *dst, int n_threads);
void cllm_cpu_attn(const cllm_cpu_params *params, cllm_tensor *dst);

#endif /* CLLM_BACKEND_CPU_OPS_IMPL_H */
