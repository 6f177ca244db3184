#version 450
// cpy / cont: element i of a (in a's order) into element i of d (in d's
// order), F32, F16 or BF16 into F32 or F16. One invocation per element.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_a.x * pc.ne_a.y * pc.ne_a.z * pc.ne_a.w;
    if (i >= n) return;
    uint a0 = i % pc.ne_a.x, a1 = (i / pc.ne_a.x) % pc.ne_a.y;
    uint a2 = (i / (pc.ne_a.x * pc.ne_a.y)) % pc.ne_a.z, a3 = i / (pc.ne_a.x * pc.ne_a.y * pc.ne_a.z);
    uint d0 = i % pc.ne_d.x, d1 = (i / pc.ne_d.x) % pc.ne_d.y;
    uint d2 = (i / (pc.ne_d.x * pc.ne_d.y)) % pc.ne_d.z, d3 = i / (pc.ne_d.x * pc.ne_d.y * pc.ne_d.z);
    float x = load_a(type_a(), addr(pc.nb_a, pc.offs.x, 0u, a1, a2, a3), a0, pc.nb_a.x);
    store_d(type_d(), addr(pc.nb_d, pc.offs.w, d0, d1, d2, d3), x);
}
