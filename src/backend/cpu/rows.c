/* The row helpers of rows.h that are functions: rows as F32, the F32 dot
 * product. */
#include "backend/cpu/rows.h"

const float *cllm_cpu_row_f32(const cllm_tensor *t, const void *row, int64_t n, float *scratch) {
    const cllm_type_traits *tt = cllm_type_traits_of(t->type);
    if (t->type == CLLM_TYPE_F32 && t->nb[0] == sizeof(float)) return row;
    if (t->nb[0] == tt->type_size) {
        tt->to_float(row, scratch, n);
    } else {
        const char *p = row;
        for (int64_t i = 0; i < n; i++)
            scratch[i] = cllm_cpu_load(t->type, p + (size_t)i * t->nb[0]);
    }
    return scratch;
}

/* Sixteen independent partial sums: a loop the compiler vectorises without
 * reassociating a single sum (which -ffast-math would be needed for). */
#define DOT_LANES 16

float cllm_cpu_dot_f32(int64_t n, const float *x, const float *y) {
    float lane[DOT_LANES] = {0};
    int64_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES) {
        for (int j = 0; j < DOT_LANES; j++) lane[j] += x[i + j] * y[i + j];
    }
    float sum = 0.0f;
    for (; i < n; i++) sum += x[i] * y[i];
    for (int j = 0; j < DOT_LANES; j++) sum += lane[j];
    return sum;
}
