/*
 * concat_rows: a: F32 [K, N, B, C], b: F32 [K, M, B, C];
 *   out[:, n, b, c] = n < N ? a[:, n, b, c] : b[:, n - N, b, c]
 * Each thread takes whole rows of out.
 *
 * get_rows: a: [K, R, B] of any type with to_float; ids: int32 [N, B];
 *   out[:, n, b] = float(a[:, ids[n, b], b])      out: F32 [K, N, B]
 * Each thread takes whole rows of out. An id outside [0, R) is a broken
 * invariant (ids come from the tokenizer or the caller, checked there).
 */
#include "backend/cpu/ops-impl.h"

void cllm_cpu_get_rows(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *ids = dst->src[1];
    const int64_t K = dst->ne[0], N = dst->ne[1];
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r % N, b = r / N;
        int32_t id;
        memcpy(&id, cllm_cpu_elem(ids, n, b, 0, 0), sizeof(id));
        CLLM_ASSERTF(id >= 0 && id < a->ne[1], "get_rows: id %d of %s outside the %lld rows of %s",
                     (int)id, ids->name, (long long)a->ne[1], a->name);
        float *y = (float *)cllm_cpu_elem(dst, 0, n, b, 0);
        const float *x = cllm_cpu_row_f32(a, cllm_cpu_elem(a, 0, id, b, 0), K, y);
        if (x != y) memcpy(y, x, (size_t)K * sizeof(float));
    }
}

void cllm_cpu_concat_rows(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = dst->ne[0], N = a->ne[1], R = dst->ne[1], B = dst->ne[2];
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r % R, ib = (r / R) % B, ic = r / R / B;
        const cllm_tensor *src = n < N ? a : b;
        const int64_t sn = n < N ? n : n - N;
        float *y = (float *)cllm_cpu_elem(dst, 0, n, ib, ic);
        const char *x = cllm_cpu_elem(src, 0, sn, ib, ic);
        if (src->nb[0] == sizeof(float)) {
            memcpy(y, x, (size_t)K * sizeof(float));
        } else {
            for (int64_t k = 0; k < K; k++) memcpy(&y[k], x + k * src->nb[0], sizeof(float));
        }
    }
}
