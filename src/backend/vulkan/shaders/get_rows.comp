#version 450
// get_rows: d[:, n, b] = float(a[:, ids[n, b], b]); a F32, F16, BF16, Q8_0,
// Q4_0 or Q4_1 rows, ids (b) I32. One invocation per element of d.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_d.x * pc.ne_d.y * pc.ne_d.z;
    if (i >= n) return;
    uint i0 = i % pc.ne_d.x, i1 = (i / pc.ne_d.x) % pc.ne_d.y, i2 = i / (pc.ne_d.x * pc.ne_d.y);
    // p.x: the first row of a bound (graph.c binds a matrix larger than a
    // storage-buffer range in windows of rows, one dispatch each): the ids
    // outside the window are another dispatch's
    uint row = B[(pc.offs.y + i1 * pc.nb_b.x + i2 * pc.nb_b.y) >> 2] - pc.p.x;
    if (row >= pc.ne_a.y) return;
    float x = load_a(type_a(), addr(pc.nb_a, pc.offs.x, 0u, row, i2, 0u), i0, pc.nb_a.x);
    D[addr(pc.nb_d, pc.offs.w, i0, i1, i2, 0u) >> 2] = floatBitsToUint(x);
}
