#version 450
// scale (p.x 0: d = a * s, s = p.y as float bits) and silu (p.x 1:
// d = a / (1 + e^-a)). One invocation per element of d (F32).
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_d.x * pc.ne_d.y * pc.ne_d.z * pc.ne_d.w;
    if (i >= n) return;
    uint i0 = i % pc.ne_d.x, i1 = (i / pc.ne_d.x) % pc.ne_d.y;
    uint i2 = (i / (pc.ne_d.x * pc.ne_d.y)) % pc.ne_d.z, i3 = i / (pc.ne_d.x * pc.ne_d.y * pc.ne_d.z);
    float x = load_a(type_a(), addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3), i0, pc.nb_a.x);
    float r = pc.p.x == 0u ? x * uintBitsToFloat(pc.p.y) : x / (1.0 + exp(-x));
    D[addr(pc.nb_d, pc.offs.w, i0, i1, i2, i3) >> 2] = floatBitsToUint(r);
}
