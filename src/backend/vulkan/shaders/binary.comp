#version 450
// add, mul: d[i] = a[i] (+ or *) b[i mod b.ne], b broadcast over a (p.x: 0
// add, 1 mul). One invocation per element of d (F32).
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_d.x * pc.ne_d.y * pc.ne_d.z * pc.ne_d.w;
    if (i >= n) return;
    uint i0 = i % pc.ne_d.x, i1 = (i / pc.ne_d.x) % pc.ne_d.y;
    uint i2 = (i / (pc.ne_d.x * pc.ne_d.y)) % pc.ne_d.z, i3 = i / (pc.ne_d.x * pc.ne_d.y * pc.ne_d.z);
    float x = load_a(type_a(), addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3), i0, pc.nb_a.x);
    float y = load_b(type_b(),
                     addr(pc.nb_b, pc.offs.y, 0u, i1 % pc.ne_b.y, i2 % pc.ne_b.z, i3 % pc.ne_b.w),
                     i0 % pc.ne_b.x, pc.nb_b.x);
    float r = pc.p.x == 0u ? x + y : x * y;
    D[addr(pc.nb_d, pc.offs.w, i0, i1, i2, i3) >> 2] = floatBitsToUint(r);
}
