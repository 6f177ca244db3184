/*
 * The CPU's weight layouts (core/tensor.h: cllm_tensor.layout): the device
 * slots behind cllm_device_init_weight and cllm_device_convert_weight
 * (backend/backend.h).
 *
 * A weight flagged CLLM_TENSOR_FLAG_MATMUL_ONLY whose type and shape the
 * one-column kernels read faster 16 rows at a time (gemm.h: CLLM_X16) is
 * stored that way: the same bytes in the same place, so a plan made before
 * loading still holds. Only the CPU's mul_mat reads such a tensor
 * (cllm_cpu_supports_op refuses every other reader). CLLM_CPU_REPACK=0
 * keeps every weight as the file stores it.
 */
#ifndef CLLM_BACKEND_CPU_REPACK_H
#define CLLM_BACKEND_CPU_REPACK_H

#include "core/tensor.h"

enum {
    CLLM_CPU_LAYOUT_ROWS = 0, /* row after row, as ne and nb say */
    CLLM_CPU_LAYOUT_X16 = 1,  /* 16 rows to a group (gemm.h: CLLM_X16) */
};

/* Whether t's data is (part of) a matrix stored 16 rows at a time. */
static inline bool cllm_cpu_is_x16(const cllm_tensor *t) {
    for (; t; t = t->view_src) {
        if (t->layout == CLLM_CPU_LAYOUT_X16) return true;
    }
    return false;
}

/* The device's init_weight: chooses t's layout (sets t->layout); true with
 * the scratch bytes of one group of 16 rows when t is to be repacked. */
bool cllm_cpu_init_weight(cllm_tensor *t, size_t *scratch);

/* The device's convert_weight: rewrites t's rows 16 to a group, in place
 * through `scratch`, or, in a mapped file, by replacing t's pages with
 * anonymous memory that holds it repacked. False (t->layout reset) when a
 * mapped tensor could not be rewritten. */
bool cllm_cpu_convert_weight(cllm_tensor *t, void *scratch, bool file_mapped);

#endif /* CLLM_BACKEND_CPU_REPACK_H */
