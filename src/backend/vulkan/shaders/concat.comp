#version 450
// concat_rows: a F32 [K, N, B, C], b F32 [K, M, B, C], any strides;
//   d[:, n, b, c] = n < N ? a[:, n, b, c] : b[:, n - N, b, c]
// d F32 [K, N + M, B, C]. One invocation per element of d.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_d.x * pc.ne_d.y * pc.ne_d.z * pc.ne_d.w;
    if (i >= n) return;
    uint i0 = i % pc.ne_d.x, i1 = (i / pc.ne_d.x) % pc.ne_d.y;
    uint i2 = (i / (pc.ne_d.x * pc.ne_d.y)) % pc.ne_d.z, i3 = i / (pc.ne_d.x * pc.ne_d.y * pc.ne_d.z);
    uint w;
    if (i1 < pc.ne_a.y) {
        w = A[addr(pc.nb_a, pc.offs.x, i0, i1, i2, i3) >> 2];
    } else {
        w = B[addr(pc.nb_b, pc.offs.y, i0, i1 - pc.ne_a.y, i2, i3) >> 2];
    }
    D[addr(pc.nb_d, pc.offs.w, i0, i1, i2, i3) >> 2] = w;
}
