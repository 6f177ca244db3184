#version 450
// rope by a rope_table's rows (b: F32 [n_dims, n_tokens], cos then sin of
// token i2): p.x n_dims, p.y mode (0 normal, 2 NeoX). One invocation per
// rotated pair or passed-through element of a row, so that d may be a's own
// memory: each pair is read and written by one invocation.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint n_dims = pc.p.x, half_dims = n_dims / 2u, head = pc.ne_d.x;
    uint per_row = half_dims + (head - n_dims);
    uint i = flat_id(256u);
    uint rows = pc.ne_d.y * pc.ne_d.z * pc.ne_d.w;
    if (i >= per_row * rows) return;
    uint k = i % per_row, r = i / per_row;
    uint i1 = r % pc.ne_d.y, i2 = (r / pc.ne_d.y) % pc.ne_d.z, i3 = r / (pc.ne_d.y * pc.ne_d.z);
    uint ra = addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3);
    uint rd = addr(pc.nb_d, pc.offs.w, 0u, i1, i2, i3);
    if (k >= half_dims) {
        uint j = n_dims + (k - half_dims);
        D[(rd + j * pc.nb_d.x) >> 2] = A[(ra + j * pc.nb_a.x) >> 2];
        return;
    }
    uint tb = pc.offs.y + i2 * pc.nb_b.y;
    float c = uintBitsToFloat(B[(tb >> 2) + k]), s = uintBitsToFloat(B[(tb >> 2) + half_dims + k]);
    uint j0 = pc.p.y == 2u ? k : 2u * k, j1 = pc.p.y == 2u ? k + half_dims : 2u * k + 1u;
    float x0 = uintBitsToFloat(A[(ra + j0 * pc.nb_a.x) >> 2]);
    float x1 = uintBitsToFloat(A[(ra + j1 * pc.nb_a.x) >> 2]);
    precise float y0 = x0 * c - x1 * s;
    precise float y1 = x0 * s + x1 * c;
    D[(rd + j0 * pc.nb_d.x) >> 2] = floatBitsToUint(y0);
    D[(rd + j1 * pc.nb_d.x) >> 2] = floatBitsToUint(y1);
}
