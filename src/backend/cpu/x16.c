/*
 * Matrices stored 16 rows to a group (gemm.h: CLLM_X16): which types and
 * levels have it, the layout's pack and unpack, and the dispatch of its
 * one-column and panel-packing kernels to the level in use (x86/).
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "core/common.h"
#include "core/quants.h"

#include <string.h>

/* ---- 16 rows in the lanes (gemm.h) ---------------------------------------------- */

bool cllm_cpu_x16_available(cllm_type type, int64_t K) {
#if defined(__x86_64__) || defined(__i386__)
    if (type != CLLM_TYPE_Q4_0 && type != CLLM_TYPE_Q4_1 && type != CLLM_TYPE_Q4_K &&
        type != CLLM_TYPE_Q5_K && type != CLLM_TYPE_Q6_K)
        return false;
    return K > 0 && K % cllm_type_traits_of(type)->blck_size == 0 &&
           cllm_cpu_isa_level() >= CLLM_CPU_ISA_AVX2;
#else
    (void)type, (void)K;
    return false;
#endif
}

/* Bytes of a block's 16 rows. */
static size_t x16_block_bytes(cllm_type type) { return type == CLLM_TYPE_Q4_1 ? 320 : 288; }

/* Row r's block b: from a group into x (the file's layout), or back: its
 * quants' 4 x 4 bytes at 64 j + 4 r in the group's block, d at 256 + 2 r,
 * Q4_1's m at 288 + 2 r. */
static inline void x16_block(cllm_type type, char *group, int64_t b, int r, char *x,
                             bool to_group) {
    const bool q41 = type == CLLM_TYPE_Q4_1;
    char *o = group + (size_t)b * x16_block_bytes(type);
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    const size_t qoff = q41 ? 4 : 2;
    for (int j = 0; j < 4; j++) X16_MOVE(64 * (size_t)j + 4 * (size_t)r, qoff + 4 * (size_t)j, 4);
    X16_MOVE(256 + 2 * (size_t)r, 0, 2);
    if (q41) X16_MOVE(288 + 2 * (size_t)r, 2, 2);
#undef X16_MOVE
}

/* Row r's Q4_K super-block b: from a group into x (the file's layout), or
 * back: its 12 scale bytes as 3 dwords at 64 w + 4 r, d at 192 + 2 r, dmin
 * at 224 + 2 r, its 32 dwords of quants at 256 + 64 P + 4 r. */
static inline void x16_block_q4_k(char *group, int64_t b, int r, char *x, bool to_group) {
    char *o = group + (size_t)b * CLLM_X16_Q4_K_BYTES;
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    X16_MOVE(192 + 2 * (size_t)r, 0, 2);
    X16_MOVE(224 + 2 * (size_t)r, 2, 2);
    for (int w = 0; w < 3; w++) X16_MOVE(64 * (size_t)w + 4 * (size_t)r, 4 + 4 * (size_t)w, 4);
    for (int p = 0; p < 32; p++)
        X16_MOVE(256 + 64 * (size_t)p + 4 * (size_t)r, 16 + 4 * (size_t)p, 4);
#undef X16_MOVE
}

/* Row r's Q5_K super-block b: its scale bytes, d and dmin where Q4_K's
 * are, its 8 dwords of qh at 256 + 64 Q + 4 r, its 32 dwords of quants at
 * 768 + 64 P + 4 r. */
static inline void x16_block_q5_k(char *group, int64_t b, int r, char *x, bool to_group) {
    char *o = group + (size_t)b * CLLM_X16_Q5_K_BYTES;
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    X16_MOVE(192 + 2 * (size_t)r, 0, 2);
    X16_MOVE(224 + 2 * (size_t)r, 2, 2);
    for (int w = 0; w < 3; w++) X16_MOVE(64 * (size_t)w + 4 * (size_t)r, 4 + 4 * (size_t)w, 4);
    for (int q = 0; q < 8; q++)
        X16_MOVE(256 + 64 * (size_t)q + 4 * (size_t)r, 16 + 4 * (size_t)q, 4);
    for (int p = 0; p < 32; p++)
        X16_MOVE(768 + 64 * (size_t)p + 4 * (size_t)r, 48 + 4 * (size_t)p, 4);
#undef X16_MOVE
}

/* Row r's Q6_K super-block b: from a group into x (the file's layout), or
 * back: its 32 dwords of ql at 64 P + 4 r, its 16 dwords of qh at 2048 +
 * 64 Q + 4 r, its 16 scale bytes as 4 dwords at 3072 + 64 w + 4 r, d at
 * 3328 + 2 r. */
static inline void x16_block_q6_k(char *group, int64_t b, int r, char *x, bool to_group) {
    char *o = group + (size_t)b * CLLM_X16_Q6_K_BYTES;
#define X16_MOVE(go, xo, n)                                                                        \
    (to_group ? memcpy(o + (go), x + (xo), n) : memcpy(x + (xo), o + (go), n))
    for (int p = 0; p < 32; p++) X16_MOVE(64 * (size_t)p + 4 * (size_t)r, 4 * (size_t)p, 4);
    for (int q = 0; q < 16; q++)
        X16_MOVE(2048 + 64 * (size_t)q + 4 * (size_t)r, 128 + 4 * (size_t)q, 4);
    for (int w = 0; w < 4; w++)
        X16_MOVE(3072 + 64 * (size_t)w + 4 * (size_t)r, 192 + 4 * (size_t)w, 4);
    X16_MOVE(3328 + 2 * (size_t)r, 208, 2);
#undef X16_MOVE
}

/* Row r's block or super-block b (x: the file's layout). */
static void x16_any_block(cllm_type type, char *group, int64_t b, int r, char *x, bool to_group) {
    if (type == CLLM_TYPE_Q6_K) {
        x16_block_q6_k(group, b, r, x, to_group);
    } else if (type == CLLM_TYPE_Q5_K) {
        x16_block_q5_k(group, b, r, x, to_group);
    } else if (type == CLLM_TYPE_Q4_K) {
        x16_block_q4_k(group, b, r, x, to_group);
    } else {
        x16_block(type, group, b, r, x, to_group);
    }
}

void cllm_cpu_x16_pack(cllm_type type, int64_t K, const void *rows, size_t stride, void *group) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const size_t bsz = tt->type_size;
    const int64_t qk = tt->blck_size;
    for (int64_t b = 0; b < K / qk; b++) {
        for (int r = 0; r < CLLM_X16_ROWS; r++)
            x16_any_block(type, group, b, r, (char *)rows + (size_t)r * stride + (size_t)b * bsz,
                          true);
    }
}

void cllm_cpu_x16_unpack(cllm_type type, int64_t K, const void *group, void *rows, size_t stride) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const size_t bsz = tt->type_size;
    const int64_t qk = tt->blck_size;
    for (int r = 0; r < CLLM_X16_ROWS; r++) {
        char *row = (char *)rows + (size_t)r * stride;
        for (int64_t b = 0; b < K / qk; b++)
            x16_any_block(type, (char *)group, b, r, row + b * bsz, false);
    }
}

void cllm_cpu_x16_row_to_float(cllm_type type, int64_t K, const void *group, int r, float *out) {
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    const int64_t qk = tt->blck_size;
    for (int64_t b = 0; b < K / qk; b++) { /* the row's block as the file has it */
        char x[sizeof(cllm_block_q6_K)];   /* (the largest of the types) */
        x16_any_block(type, (char *)group, b, r, x, false);
        tt->to_float(x, out + qk * b, qk);
    }
}

void cllm_cpu_gemm_pack_x16(cllm_type type, int64_t K, const void *group, void *panel) {
    CLLM_ASSERT(cllm_cpu_x16_available(type, K));
#if defined(__x86_64__) || defined(__i386__)
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    if (level >= CLLM_CPU_ISA_AVX512) { /* (SmolLM2 pp16 / pp512 as with 512 bits) */
        cllm_cpu_gemm_pack_x16_avx512vl(type, K, group, panel);
    } else if (level == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemm_pack_x16_avxvnni(type, K, group, panel);
    } else {
        cllm_cpu_gemm_pack_x16_avx2(type, K, group, panel);
    }
#else
    (void)group, (void)panel;
#endif
}

void cllm_cpu_gemv_x16(cllm_type type, int64_t K, const void *w, int ngroups, const void *act,
                       size_t act_stride, int nc, float *out, size_t out_stride) {
    CLLM_ASSERT(cllm_cpu_x16_available(type, K));
#if defined(__x86_64__) || defined(__i386__)
    const cllm_cpu_isa level = cllm_cpu_isa_level();
    /* (the K-quants: the 256-bit kernel at every level; Q4_K's reads as fast
     * as the memory gives with 1 thread) */
    const bool kq = type == CLLM_TYPE_Q4_K || type == CLLM_TYPE_Q5_K || type == CLLM_TYPE_Q6_K;
    if (level >= CLLM_CPU_ISA_AVX512 && !cllm_cpu_prefer_256() && !kq) {
        cllm_cpu_gemv_x16_avx512(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else if (level >= CLLM_CPU_ISA_AVX512) {
        cllm_cpu_gemv_x16_avx512vl(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else if (level == CLLM_CPU_ISA_AVXVNNI) {
        cllm_cpu_gemv_x16_avxvnni(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    } else {
        cllm_cpu_gemv_x16_avx2(type, K, w, ngroups, act, act_stride, nc, out, out_stride);
    }
#else
    (void)w, (void)ngroups, (void)act, (void)act_stride, (void)nc, (void)out, (void)out_stride;
#endif
}
