// What every compute shader of the Vulkan backend shares: five storage
// buffers bound as 32-bit words (a, b, c: sources; d: the result; e: a
// fourth source, attn's mask) and one
// block of push constants that ops.c fills (vk_push in vk-internal.h).
// The sources are read-only, so that synchronization validation (and a
// driver) takes a dispatch to read them and to write d only; each binding
// holds the bytes of its tensor only (graph.c: extent_of).
//
// Tensors are addressed in bytes: offs[i] is where binding i's tensor starts
// within the bound range, ne the elements per dimension, nb the byte strides
// (as core/tensor.h). Types are read element by element, so any stride the
// CPU accepts works here too.

layout(std430, binding = 0) readonly buffer BufA { uint A[]; };
layout(std430, binding = 1) readonly buffer BufB { uint B[]; };
layout(std430, binding = 2) readonly buffer BufC { uint C[]; };
layout(std430, binding = 3) buffer BufD { uint D[]; };
layout(std430, binding = 4) readonly buffer BufE { uint E[]; };

layout(push_constant) uniform Push {
    uvec4 offs; // byte offset of a, b, c, d in their bound ranges
    uvec4 ne_a;
    uvec4 nb_a;
    uvec4 ne_b;
    uvec4 nb_b;
    uvec4 ne_d;
    uvec4 nb_d;
    uvec4 p; // op parameters; p.w holds the types (vk_type: a in bits 0-7, b in 8-15, d in 16-23)
} pc;

// the VK_T_* enum in vk-internal.h
#define T_F32  0u
#define T_F16  1u
#define T_BF16 2u
#define T_Q8_0 3u
#define T_Q4_0 4u
#define T_Q4_1 5u
#define T_I32  6u
#define T_Q5_0 7u
#define T_Q5_1 8u
#define T_Q2_K 9u
#define T_Q3_K 10u
#define T_Q4_K 11u
#define T_Q5_K 12u
#define T_Q6_K 13u
#define T_NONE 14u

uint type_a() { return pc.p.w & 0xffu; }
uint type_b() { return (pc.p.w >> 8) & 0xffu; }
uint type_d() { return (pc.p.w >> 16) & 0xffu; }

float half_of(uint w, uint off) { return unpackHalf2x16((off & 2u) != 0u ? w >> 16 : w).x; }
float bf16_of(uint w, uint off) {
    return uintBitsToFloat((off & 2u) != 0u ? (w & 0xffff0000u) : (w << 16));
}
uint byte_of(uint w, uint off) { return (w >> ((off & 3u) * 8u)) & 0xffu; }
int sbyte_of(uint w, uint off) { return int(byte_of(w, off) << 24) >> 24; }

// One element of a plain or block type at byte `row` + element i (blocks of
// 32 or super-blocks of 256 elements: the block holding i, whose layouts
// are core/quants.h's; the products are `precise` so that no fused
// multiply-add changes them from the CPU's dequantization).
#define DEFINE_LOAD(NAME, BUF)                                                                    \
    uint NAME##_u8(uint o) { return byte_of(BUF[o >> 2], o); }                                    \
    float NAME##_f16(uint o) { return half_of(BUF[o >> 2], o); }                                  \
    float NAME##_q(uint t, uint row, uint i) {                                                    \
        uint j = i & 31u;                                                                         \
        if (t == T_Q8_0) {                                                                        \
            uint blk = row + (i >> 5) * 34u;                                                      \
            return NAME##_f16(blk) * float(int(NAME##_u8(blk + 2u + j) << 24) >> 24);            \
        }                                                                                         \
        if (t == T_Q4_0 || t == T_Q4_1) {                                                         \
            uint blk = row + (i >> 5) * (t == T_Q4_0 ? 18u : 20u);                                \
            uint qs = blk + (t == T_Q4_0 ? 2u : 4u);                                              \
            uint q = NAME##_u8(qs + (j & 15u));                                                   \
            q = j < 16u ? (q & 15u) : (q >> 4);                                                   \
            float d = NAME##_f16(blk);                                                            \
            if (t == T_Q4_0) return d * float(int(q) - 8);                                        \
            precise float r = d * float(q);                                                       \
            return r + NAME##_f16(blk + 2u);                                                      \
        }                                                                                         \
        if (t == T_Q5_0 || t == T_Q5_1) {                                                         \
            uint blk = row + (i >> 5) * (t == T_Q5_0 ? 22u : 24u);                                \
            uint qh = blk + (t == T_Q5_0 ? 2u : 4u);                                              \
            uint q = NAME##_u8(qh + 4u + (j & 15u));                                              \
            q = (j < 16u ? (q & 15u) : (q >> 4)) | ((NAME##_u8(qh + (j >> 3)) >> (j & 7u)) & 1u) << 4; \
            float d = NAME##_f16(blk);                                                            \
            if (t == T_Q5_0) return d * float(int(q) - 16);                                       \
            precise float r = d * float(q);                                                       \
            return r + NAME##_f16(blk + 2u);                                                      \
        }                                                                                         \
        uint e = i & 255u, h = e >> 7, l = e & 31u, k = (e >> 5) & 3u;                            \
        if (t == T_Q2_K) { /* scales[16] qs[64] d dmin */                                         \
            uint blk = row + (i >> 8) * 84u;                                                      \
            uint sc = NAME##_u8(blk + (e >> 4));                                                  \
            uint q = (NAME##_u8(blk + 16u + 32u * h + l) >> (2u * k)) & 3u;                       \
            precise float x = NAME##_f16(blk + 80u) * float(sc & 15u) * float(q);                 \
            precise float mn = NAME##_f16(blk + 82u) * float(sc >> 4);                            \
            return x - mn;                                                                        \
        }                                                                                         \
        if (t == T_Q3_K) { /* hmask[32] qs[64] scales[12] d */                                    \
            uint blk = row + (i >> 8) * 110u, s = e >> 4;                                         \
            uint lo = (NAME##_u8(blk + 32u + 32u * h + l) >> (2u * k)) & 3u;                      \
            uint hi = (NAME##_u8(blk + l) >> (4u * h + k)) & 1u;                                  \
            uint sl = s < 8u ? NAME##_u8(blk + 96u + s) & 15u : NAME##_u8(blk + 88u + s) >> 4;    \
            uint sh = (NAME##_u8(blk + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;                 \
            precise float dl = NAME##_f16(blk + 108u) * float(int(sl | sh << 4) - 32);           \
            return dl * float(int(lo | hi << 2) - 4);                                             \
        }                                                                                         \
        if (t == T_Q4_K || t == T_Q5_K) { /* d dmin scales[12] (qh[32]) qs[128] */                \
            uint blk = row + (i >> 8) * (t == T_Q4_K ? 144u : 176u), s = e >> 5;                  \
            uint qs = blk + (t == T_Q4_K ? 16u : 48u);                                            \
            uint q = (NAME##_u8(qs + 32u * (e >> 6) + l) >> (4u * (s & 1u))) & 15u;               \
            if (t == T_Q5_K) q |= ((NAME##_u8(blk + 16u + l) >> s) & 1u) << 4;                    \
            uint sc, mn;                                                                          \
            if (s < 4u) {                                                                         \
                sc = NAME##_u8(blk + 4u + s) & 63u;                                               \
                mn = NAME##_u8(blk + 8u + s) & 63u;                                               \
            } else {                                                                              \
                sc = (NAME##_u8(blk + 8u + s) & 15u) | (NAME##_u8(blk + s) >> 6) << 4;            \
                mn = (NAME##_u8(blk + 8u + s) >> 4) | (NAME##_u8(blk + 4u + s) >> 6) << 4;        \
            }                                                                                     \
            precise float dl = NAME##_f16(blk) * float(sc);                                       \
            precise float ml = NAME##_f16(blk + 2u) * float(mn);                                  \
            precise float x = dl * float(q);                                                      \
            return x - ml;                                                                        \
        }                                                                                         \
        /* T_Q6_K: ql[128] qh[64] scales[16] (int8) d */                                          \
        uint blk = row + (i >> 8) * 210u;                                                         \
        uint lo = (NAME##_u8(blk + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1))) & 15u;       \
        uint hi = (NAME##_u8(blk + 128u + 32u * h + l) >> (2u * k)) & 3u;                         \
        int sc = int(NAME##_u8(blk + 192u + (e >> 4)) << 24) >> 24;                               \
        precise float dl = NAME##_f16(blk + 208u) * float(sc);                                    \
        return dl * float(int(lo | hi << 4) - 32);                                                \
    }                                                                                             \
    float NAME(uint t, uint row, uint i, uint nb0) {                                              \
        if (t == T_F32) return uintBitsToFloat(BUF[(row + i * nb0) >> 2]);                        \
        if (t == T_F16) return NAME##_f16(row + i * nb0);                                         \
        if (t == T_BF16) {                                                                        \
            uint o = row + i * nb0;                                                               \
            return bf16_of(BUF[o >> 2], o);                                                       \
        }                                                                                         \
        if (t == T_I32) return float(int(BUF[(row + i * nb0) >> 2]));                              \
        return NAME##_q(t, row, i);                                                               \
    }

DEFINE_LOAD(load_a, A)
DEFINE_LOAD(load_b, B)

// f32 -> f16 rounded to nearest even, as the CPU's conversion (packHalf2x16
// leaves the rounding to the implementation).
uint f16_bits(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xffu;
    uint m = x & 0x7fffffu;
    if (e == 0xffu) return sign | 0x7c00u | (m != 0u ? 0x200u | (m >> 13) : 0u);
    int ex = int(e) - 112; // rebias 127 -> 15
    if (ex >= 31) return sign | 0x7c00u;
    if (ex <= 0) {
        if (ex < -10) return sign;
        m |= 0x800000u;
        uint shift = uint(14 - ex);
        uint h = m >> shift;
        uint rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) h++;
        return sign | h;
    }
    uint h = sign | (uint(ex) << 10) | (m >> 13);
    uint rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return h;
}

// Writes one F32 or F16 element of d at byte o (an F16 element shares its
// word with a neighbour another invocation may write: atomics).
void store_d(uint t, uint o, float v) {
    if (t == T_F32) {
        D[o >> 2] = floatBitsToUint(v);
        return;
    }
    uint h = f16_bits(v), sh = (o & 2u) * 8u;
    atomicAnd(D[o >> 2], ~(0xffffu << sh));
    atomicOr(D[o >> 2], h << sh);
}

// The flat index of this invocation over a grid of (x, y) workgroups.
uint flat_id(uint wg) {
    return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * wg;
}

// The flat index of this workgroup over a grid of (x, y) workgroups.
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

uint addr(uvec4 nb, uint off, uint i0, uint i1, uint i2, uint i3) {
    return off + i0 * nb.x + i1 * nb.y + i2 * nb.z + i3 * nb.w;
}
