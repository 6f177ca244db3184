#version 450
#extension GL_EXT_spirv_intrinsics : require
// mul_mat of Q4_0, Q4_1, Q8_0 or Q4_K weights a with 8-bit activations
// (the blocks of quant_q8.comp in b), as the CPU computes them by default
// (core/quants.c: vec_dot_q4_0_q8_0 and its neighbours), per block of 32:
//   Q4_0: dx dy (sum_j nx_j qy_j - 8 sum_j qy_j)   nx_j the nibble (0..15)
//   Q4_1: dx dy sum_j nx_j qy_j + mx dy sum_j qy_j
//   Q8_0: dx dy sum_j qx_j qy_j
//   Q4_K: as Q4_1 with dx = d sc, mx = -dmin m of the block's 6-bit scale
//         and minimum in its super-block of 256 (the CPU's own kernel
//         quantizes b per 256 instead, Q8_K: close, not the same integers)
// with the sums over j in exact integer arithmetic, four products at a time
// by the device's packed int8 dot product (OpSDot,
// VK_KHR_shader_integer_dot_product). A workgroup computes NR rows of d for
// NC columns (x, y: the row and column groups; z: the batches of d); its
// WG invocations take every WG-th block of k, and the sums are added in
// each subgroup, then the subgroups' through shared memory (as
// mul_mat_vec.glsl). ne_b, nb_b: b's shape (the blocks are contiguous).
#include "common.glsl"
#include "reduce.glsl"

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int packed_format);

#define NR   4u
#define NC   8u
#define NACC (NR * NC)
#define PART 16u

shared float part[PART][NACC];
shared float tot[NACC];

// the 32-bit word at byte o of a (o a multiple of 2)
uint word_a(uint o) {
    uint w = A[o >> 2];
    return (o & 3u) == 0u ? w : (w >> 16) | (A[(o >> 2) + 1u] << 16);
}

// byte o of a
uint byte_a(uint o) { return (A[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }

void main() {
    uint K = pc.ne_a.x, M = pc.ne_d.x, N = pc.ne_d.y, KB = K / 32u, t = gl_LocalInvocationID.x;
    uint groups_m = (M + NR - 1u) / NR, wg = flat_group();
    uint m0 = (wg % groups_m) * NR, n0 = (wg / groups_m) * NC;
    if (n0 >= N) return; // the whole workgroup
    uint z = gl_WorkGroupID.z, i2 = z % pc.ne_d.z, i3 = z / pc.ne_d.z;
    uint a2 = i2 / (pc.ne_d.z / pc.ne_a.z), a3 = i3 / (pc.ne_d.w / pc.ne_a.w);
    uint ta = type_a();
    uint bsize = ta == T_Q4_0 ? 18u : ta == T_Q4_1 ? 20u : 34u;
    uint ra[NR], rb[NC];
    for (uint r = 0u; r < NR; r++) ra[r] = addr(pc.nb_a, pc.offs.x, 0u, min(m0 + r, M - 1u), a2, a3);
    for (uint c = 0u; c < NC; c++) rb[c] = (((i3 * pc.ne_b.z + i2) * pc.ne_b.y + min(n0 + c, N - 1u)) * KB) * 10u;

    float acc[NACC];
    for (uint a = 0u; a < NACC; a++) acc[a] = 0.0;
    for (uint kb = t; kb < KB; kb += WG) {
        for (uint r = 0u; r < NR; r++) {
            uint blk = ra[r] + kb * bsize;
            float dx, mx;
            uint qx[8];
            if (ta == T_Q4_K) {
                // super-block: d, dmin (f16), 12 bytes of scales, 128 of quants
                uint sb = ra[r] + (kb >> 3) * 144u, j = kb & 7u, s = sb + 4u;
                vec2 dm = unpackHalf2x16(word_a(sb));
                uint sc, mn;
                if (j < 4u) {
                    sc = byte_a(s + j) & 63u;
                    mn = byte_a(s + j + 4u) & 63u;
                } else {
                    sc = (byte_a(s + j + 4u) & 15u) | (byte_a(s + j - 4u) >> 6) << 4;
                    mn = (byte_a(s + j + 4u) >> 4) | (byte_a(s + j) >> 6) << 4;
                }
                dx = dm.x * float(sc);
                mx = -(dm.y * float(mn));
                // blocks 2i and 2i + 1: the low and high nibbles of 32 bytes
                uint qs = sb + 16u + (j >> 1) * 32u, sh = (j & 1u) * 4u;
                for (uint k = 0u; k < 8u; k++) qx[k] = (word_a(qs + 4u * k) >> sh) & 0x0f0f0f0fu;
            } else if (ta == T_Q8_0) {
                dx = unpackHalf2x16(word_a(blk)).x;
                mx = 0.0;
                for (uint k = 0u; k < 8u; k++) qx[k] = word_a(blk + 2u + 4u * k);
            } else {
                dx = unpackHalf2x16(word_a(blk)).x;
                mx = ta == T_Q4_1 ? unpackHalf2x16(word_a(blk) >> 16).x : 0.0;
                uint qs = blk + (ta == T_Q4_0 ? 2u : 4u);
                for (uint k = 0u; k < 4u; k++) {
                    uint w = word_a(qs + 4u * k);
                    qx[k] = w & 0x0f0f0f0fu;
                    qx[k + 4u] = (w >> 4) & 0x0f0f0f0fu;
                }
            }
            for (uint c = 0u; c < NC; c++) { // columns past N: the last again, not written
                uint yb = rb[c] + kb * 10u;
                float dy = uintBitsToFloat(B[yb]);
                int sy = int(B[yb + 1u]);
                int sumi = 0;
                for (uint k = 0u; k < 8u; k++) sumi += sdot4x8(qx[k], B[yb + 2u + k], 0);
                if (ta == T_Q4_0) sumi -= 8 * sy;
                precise float p = dx * dy;
                precise float v = p * float(sumi);
                if (ta == T_Q4_1 || ta == T_Q4_K) {
                    precise float pm = mx * dy;
                    precise float vm = pm * float(sy);
                    v = v + vm;
                }
                acc[r * NC + c] += v;
            }
        }
    }

    for (uint a = 0u; a < NACC; a++) acc[a] = subgroupAdd(acc[a]);
    for (uint a = t; a < NACC; a += WG) tot[a] = 0.0;
    for (uint base = 0u; base < gl_NumSubgroups; base += PART) {
        if (gl_SubgroupID >= base && gl_SubgroupID < base + PART && subgroupElect()) {
            for (uint a = 0u; a < NACC; a++) part[gl_SubgroupID - base][a] = acc[a];
        }
        barrier();
        uint n = min(PART, gl_NumSubgroups - base);
        for (uint a = t; a < NACC; a += WG) {
            float s = tot[a];
            for (uint i = 0u; i < n; i++) s += part[i][a];
            tot[a] = s;
        }
        barrier();
    }
    for (uint a = t; a < NACC; a += WG) {
        uint r = a / NC, c = a % NC;
        if (m0 + r < M && n0 + c < N) D[addr(pc.nb_d, pc.offs.w, m0 + r, n0 + c, i2, i3) >> 2] = floatBitsToUint(tot[a]);
    }
}
