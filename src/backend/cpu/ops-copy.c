/*
 * cpy and cont: element-by-element copies with type conversion.
 *
 * The elements of src and dst are matched in their logical order (i0
 * fastest, then i1, i2, i3), whatever their shapes: element e of src goes to
 * element e of dst. dst is written through its own strides (cpy writes into
 * a view of b, e.g. one row range of a KV cache); cont's dst is contiguous.
 * Each thread takes whole rows of dst, so quantized rows are written whole.
 *
 * Conversions: same type: bytes copied; plain types: through float
 * (cllm_cpu_load / cllm_cpu_store); into a quantized type: a row gathered as
 * F32, then from_float; out of a quantized type: to_float, then stored.
 */
#include "backend/cpu/kernels.h" /* cllm_cpu_isa_level */
#include "backend/cpu/ops-impl.h"

bool cllm_cpu_copy_supported(const cllm_tensor *src, const cllm_tensor *dst) {
    const cllm_type_traits *st = cllm_type_traits_of(src->type);
    const cllm_type_traits *dt = cllm_type_traits_of(dst->type);
    if (!st || !dt || cllm_nelements(src) != cllm_nelements(dst)) return false;
    const bool same_rows = src->ne[0] == dst->ne[0];
    if (src->type == dst->type) {
        /* blocks cannot be split: quantized rows are copied whole */
        return st->blck_size == 1 || same_rows;
    }
    if (st->blck_size == 1 && dt->blck_size == 1) {
        return st->to_float && dt->from_float;
    }
    if (st->blck_size == 1) return st->to_float && dt->from_float; /* into blocks */
    /* out of blocks: whole rows of src into plain rows of dst */
    return same_rows && st->to_float && dt->blck_size == 1 && dt->from_float;
}

/* A conversion into or out of a quantized type goes through one F32 row of
 * dst->ne[0] elements per thread. */
static bool needs_f32_row(const cllm_tensor *src, const cllm_tensor *dst) {
    return src->type != dst->type && (cllm_type_traits_of(src->type)->blck_size > 1 ||
                                      cllm_type_traits_of(dst->type)->blck_size > 1);
}

size_t cllm_cpu_copy_workspace(const cllm_tensor *dst, int n_threads) {
    if (!needs_f32_row(dst->src[0], dst)) return 0;
    return (size_t)n_threads * cllm_cpu_ws_round((size_t)dst->ne[0] * sizeof(float));
}

/* An index into a tensor, walked in logical order. */
typedef struct elem_iter {
    const cllm_tensor *t;
    int64_t i[CLLM_MAX_DIMS];
} elem_iter;

/* The iterator at flat element e (e = i0 + ne0 * (i1 + ne1 * (i2 + ne2 * i3))). */
static elem_iter iter_at(const cllm_tensor *t, int64_t e) {
    elem_iter it = {.t = t};
    for (int d = 0; d < CLLM_MAX_DIMS; d++) {
        it.i[d] = e % t->ne[d];
        e /= t->ne[d];
    }
    return it;
}

static const char *iter_ptr(const elem_iter *it) {
    return cllm_cpu_elem(it->t, it->i[0], it->i[1], it->i[2], it->i[3]);
}

static void iter_next(elem_iter *it) {
    for (int d = 0; d < CLLM_MAX_DIMS; d++) {
        if (++it->i[d] < it->t->ne[d]) return;
        it->i[d] = 0;
    }
}

/* One element of a plain type into one of a plain type. */
static void copy_elem(const cllm_tensor *src, const char *s, const cllm_tensor *dst, char *d) {
    if (src->type == dst->type) {
        memcpy(d, s, cllm_element_size(dst));
    } else {
        cllm_cpu_store(dst->type, d, cllm_cpu_load(src->type, s));
    }
}

/* dst row (i1, i2, i3) from the row of src with the same flat index: src and
 * dst rows have the same length. */
static void copy_row(const cllm_tensor *src, const char *srow, const cllm_tensor *dst, char *drow,
                     float *f32) {
    const cllm_type_traits *st = cllm_type_traits_of(src->type);
    const cllm_type_traits *dt = cllm_type_traits_of(dst->type);
    const int64_t n = dst->ne[0];
    const bool src_rows = src->nb[0] == st->type_size, dst_rows = dst->nb[0] == dt->type_size;
    if (src->type == dst->type && src_rows && dst_rows) {
        memcpy(drow, srow, cllm_row_size(dst->type, n));
#if defined(__x86_64__) || defined(__i386__)
    } else if (src->type == CLLM_TYPE_F32 && dst->type == CLLM_TYPE_F16 && src_rows && dst_rows &&
               cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2) {
        /* a token's keys or values into an F16 cache, 8 at a time: each
         * such row is a node of its own that one thread runs while the
         * others wait (240 of them in a step of 4 SmolLM2 sequences), so
         * the element walk below would cost every step */
        cllm_cpu_f32_to_f16_row_avx2(n, (cllm_fp16 *)drow, (const float *)srow);
#endif
    } else if (dt->blck_size > 1) {
        /* into blocks: the row as F32, then quantized whole */
        dt->from_float(cllm_cpu_row_f32(src, srow, n, f32), drow, n);
    } else if (st->blck_size > 1) {
        /* out of blocks: dequantized whole, then stored element by element */
        st->to_float(srow, f32, n);
        for (int64_t i = 0; i < n; i++)
            cllm_cpu_store(dst->type, drow + (size_t)i * dst->nb[0], f32[i]);
    } else {
        /* plain types, either side strided */
        for (int64_t i = 0; i < n; i++) {
            copy_elem(src, srow + (size_t)i * src->nb[0], dst, drow + (size_t)i * dst->nb[0]);
        }
    }
}

void cllm_cpu_copy(const cllm_cpu_params *params, cllm_tensor *dst) {
    const cllm_tensor *src = dst->src[0];
    const int64_t ne0 = dst->ne[0];
    float *f32 = NULL;
    if (needs_f32_row(src, dst)) {
        const size_t slice = cllm_cpu_ws_round((size_t)ne0 * sizeof(float));
        f32 = cllm_cpu_ws(params, dst, (size_t)params->ith * slice, slice);
    }
    const bool flat_rows =
        cllm_type_traits_of(src->type)->blck_size == 1 && cllm_is_contiguous(src);
    int64_t r0, r1;
    cllm_cpu_split(cllm_nrows(dst), params->ith, params->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *drow = cllm_cpu_row(dst, r);
        if (src->ne[0] == ne0) {
            /* rows match one to one: dst row r is src row r */
            copy_row(src, cllm_cpu_row(src, r), dst, drow, f32);
            continue;
        }
        if (flat_rows) {
            /* a contiguous plain src: dst row r is its elements from r * ne0
             * on, one run of memory (a token's heads into a cache row) */
            copy_row(src, (const char *)src->data + (size_t)(r * ne0) * src->nb[0], dst, drow, f32);
            continue;
        }
        /* rows of different lengths (plain src): walk src from element r * ne0 */
        elem_iter it = iter_at(src, r * ne0);
        const cllm_type_traits *dt = cllm_type_traits_of(dst->type);
        for (int64_t i = 0; i < ne0; i++, iter_next(&it)) {
            if (dt->blck_size > 1) {
                f32[i] = cllm_cpu_load(src->type, iter_ptr(&it));
            } else {
                copy_elem(src, iter_ptr(&it), dst, drow + (size_t)i * dst->nb[0]);
            }
        }
        if (dt->blck_size > 1) dt->from_float(f32, drow, ne0); /* the gathered row, whole */
    }
}
