// What every compute shader of the Vulkan backend shares: five storage
// buffers bound as 32-bit words (a, b, c: sources; d: the result; e: a
// fourth source, attn's mask) and one
// block of push constants that vulkan.c fills (vk_push in vulkan.c).
//
// Tensors are addressed in bytes: offs[i] is where binding i's tensor starts
// within the bound range, ne the elements per dimension, nb the byte strides
// (as core/tensor.h). Types are read element by element, so any stride the
// CPU accepts works here too.

layout(std430, binding = 0) buffer BufA { uint A[]; };
layout(std430, binding = 1) buffer BufB { uint B[]; };
layout(std430, binding = 2) buffer BufC { uint C[]; };
layout(std430, binding = 3) buffer BufD { uint D[]; };
layout(std430, binding = 4) buffer BufE { uint E[]; };

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

// vk_type in vulkan.c
#define T_F32  0u
#define T_F16  1u
#define T_BF16 2u
#define T_Q8_0 3u
#define T_Q4_0 4u
#define T_Q4_1 5u
#define T_I32  6u

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
// 32: the block at i / 32, whose layouts are core/quants.h's).
#define DEFINE_LOAD(NAME, BUF)                                                                    \
    float NAME(uint t, uint row, uint i, uint nb0) {                                              \
        if (t == T_F32) return uintBitsToFloat(BUF[(row + i * nb0) >> 2]);                        \
        if (t == T_F16) {                                                                         \
            uint o = row + i * nb0;                                                               \
            return half_of(BUF[o >> 2], o);                                                       \
        }                                                                                         \
        if (t == T_BF16) {                                                                        \
            uint o = row + i * nb0;                                                               \
            return bf16_of(BUF[o >> 2], o);                                                       \
        }                                                                                         \
        if (t == T_I32) return float(int(BUF[(row + i * nb0) >> 2]));                              \
        uint j = i & 31u;                                                                         \
        if (t == T_Q8_0) {                                                                        \
            uint blk = row + (i >> 5) * 34u;                                                      \
            float d = half_of(BUF[blk >> 2], blk);                                                \
            uint o = blk + 2u + j;                                                                \
            return d * float(sbyte_of(BUF[o >> 2], o));                                           \
        }                                                                                         \
        if (t == T_Q4_0) {                                                                        \
            uint blk = row + (i >> 5) * 18u;                                                      \
            float d = half_of(BUF[blk >> 2], blk);                                                \
            uint o = blk + 2u + (j & 15u);                                                        \
            uint q = byte_of(BUF[o >> 2], o);                                                     \
            q = j < 16u ? (q & 15u) : (q >> 4);                                                   \
            return d * float(int(q) - 8);                                                         \
        }                                                                                         \
        /* T_Q4_1 */                                                                              \
        uint blk = row + (i >> 5) * 20u;                                                          \
        float d = half_of(BUF[blk >> 2], blk);                                                    \
        float m = half_of(BUF[(blk + 2u) >> 2], blk + 2u);                                        \
        uint o = blk + 4u + (j & 15u);                                                            \
        uint q = byte_of(BUF[o >> 2], o);                                                         \
        q = j < 16u ? (q & 15u) : (q >> 4);                                                       \
        precise float r = d * float(q);                                                           \
        return r + m;                                                                             \
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
