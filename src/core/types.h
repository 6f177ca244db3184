/*
 * Element types and their traits.
 *
 * Values are the GGUF on-disk type ids and must never change. Quantized types
 * are stored in blocks: `blck_size` elements take `type_size` bytes. Types
 * whose block layout is known but whose arithmetic is not implemented yet
 * carry sizes only (to_float == NULL): files holding them can be listed and
 * sized, not computed.
 *
 *     const cllm_type_traits *tt = cllm_type_traits_of(CLLM_TYPE_F16);
 *     size_t row = cllm_row_size(CLLM_TYPE_F16, 4096);   // 8192 bytes
 *     tt->to_float(src_row, dst_f32, 4096);
 */
#ifndef CLLM_CORE_TYPES_H
#define CLLM_CORE_TYPES_H

#include "cllm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cllm_type (the GGUF on-disk type ids) is public: cllm.h. */

/* Converts n elements (n a multiple of blck_size) of a row to float. */
typedef void (*cllm_to_float_fn)(const void *src, float *dst, int64_t n);
/* Converts n floats (n a multiple of blck_size) to a row of the type. */
typedef void (*cllm_from_float_fn)(const float *src, void *dst, int64_t n);

/* *out = dot(x, y) over n elements: x a row of this type, y a row of its
 * vec_dot_type (activations converted to it with that type's from_float). */
typedef void (*cllm_vec_dot_fn)(int64_t n, float *out, const void *x, const void *y);

typedef struct cllm_type_traits {
    const char *name;  /* "f32", "q4_0", ... ; NULL: not a valid type id */
    int64_t blck_size; /* elements per block (1 for plain types) */
    size_t type_size;  /* bytes per block */
    bool is_quantized;
    cllm_to_float_fn to_float;     /* NULL: arithmetic not implemented */
    cllm_from_float_fn from_float; /* NULL: cannot be written from float */
    cllm_vec_dot_fn vec_dot;       /* NULL: no direct dot product (dequantize instead) */
    cllm_type vec_dot_type;        /* the type of the other operand of vec_dot */
} cllm_type_traits;

/* Traits of `type`; NULL when `type` is not a valid type id (e.g. from a file). */
const cllm_type_traits *cllm_type_traits_of(cllm_type type);

/* True when `type` is a valid id with a known block layout. */
bool cllm_type_is_valid(int64_t type);

/* Bytes of a row of `ne0` elements (ne0 a multiple of the block size). */
size_t cllm_row_size(cllm_type type, int64_t ne0);

/* IEEE half and bfloat16, stored as their bit patterns. */
typedef uint16_t cllm_fp16;
typedef uint16_t cllm_bf16;

float cllm_fp16_to_fp32(cllm_fp16 h);
cllm_fp16 cllm_fp32_to_fp16(float f); /* round to nearest even */
float cllm_bf16_to_fp32(cllm_bf16 h);
cllm_bf16 cllm_fp32_to_bf16(float f); /* round to nearest even, NaN kept */

#endif /* CLLM_CORE_TYPES_H */
