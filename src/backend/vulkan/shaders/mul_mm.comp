#version 450
// mul_mat for more than a few columns (prompts), tiled:
//   d[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] b[k, n, i2, i3]
// a: any weight type (dequant.glsl), b F32 (any strides), d F32. A
// workgroup of 64 computes a BM x BN tile of d: per step of BK along k,
// each invocation dequantizes 16 weights of one of the tile's BM rows into
// shared memory and loads 16 elements of one of its BN columns of b, then
// each invocation adds the products into its 4 x 4 outputs (rows tr + 8 i,
// columns tc + 8 j). Past M, N or K the tile holds clamped rows (never
// written) and zeros. Workgroups: (x, y) the tiles, z the batches of d.
#include "common.glsl"
#include "dequant.glsl"

#define BM 32u
#define BN 32u
#define BK 32u

layout(local_size_x = 64) in;

shared float as_[BK][BM + 1u];
shared float bs_[BK][BN + 1u];

void main() {
    uint K = pc.ne_a.x, M = pc.ne_d.x, N = pc.ne_d.y, t = gl_LocalInvocationID.x;
    uint tiles_m = (M + BM - 1u) / BM, tile = flat_group();
    uint m0 = (tile % tiles_m) * BM, n0 = (tile / tiles_m) * BN;
    if (n0 >= N) return; // the whole workgroup
    uint z = gl_WorkGroupID.z, i2 = z % pc.ne_d.z, i3 = z / pc.ne_d.z;
    uint a2 = i2 / (pc.ne_d.z / pc.ne_a.z), a3 = i3 / (pc.ne_d.w / pc.ne_a.w);
    uint ta = type_a();
    // what this invocation loads: row / column lr of the tile, half hf of BK
    uint lr = t >> 1, hf = (t & 1u) * 16u;
    uint ra = addr(pc.nb_a, pc.offs.x, 0u, min(m0 + lr, M - 1u), a2, a3);
    uint rb = addr(pc.nb_b, pc.offs.y, 0u, min(n0 + lr, N - 1u), i2, i3);
    // what it computes
    uint tr = t & 7u, tc = t >> 3;

    float acc[16];
    for (uint i = 0u; i < 16u; i++) acc[i] = 0.0;
    for (uint k0 = 0u; k0 < K; k0 += BK) {
        uint kh = k0 + hf;
        float w[16];
        if (kh < K) {
            deq16(ta, ra, kh, pc.nb_a.x, K, w);
        } else {
            for (uint i = 0u; i < 16u; i++) w[i] = 0.0;
        }
        for (uint i = 0u; i < 16u; i++) {
            as_[hf + i][lr] = w[i];
            bs_[hf + i][lr] = kh + i < K ? uintBitsToFloat(B[(rb + (kh + i) * pc.nb_b.x) >> 2]) : 0.0;
        }
        barrier();
        for (uint k = 0u; k < BK; k++) {
            float x[4], y[4];
            for (uint i = 0u; i < 4u; i++) x[i] = as_[k][tr + 8u * i];
            for (uint j = 0u; j < 4u; j++) y[j] = bs_[k][tc + 8u * j];
            for (uint i = 0u; i < 4u; i++) {
                for (uint j = 0u; j < 4u; j++) acc[i * 4u + j] += x[i] * y[j];
            }
        }
        barrier();
    }
    for (uint i = 0u; i < 4u; i++) {
        for (uint j = 0u; j < 4u; j++) {
            uint m = m0 + tr + 8u * i, n = n0 + tc + 8u * j;
            if (m < M && n < N) D[addr(pc.nb_d, pc.offs.w, m, n, i2, i3) >> 2] = floatBitsToUint(acc[i * 4u + j]);
        }
    }
}
