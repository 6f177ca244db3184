#version 450
// scale (p.x 0: d = a * s, s = p.y as float bits), silu (p.x 1:
// d = a / (1 + e^-a)) and gelu (p.x 2: d = a/2 (1 + tanh(sqrt(2/pi)
// (a + 0.044715 a^3))), tanh(u) as 1 - 2 / (e^2u + 1), which stays finite
// where e^2u overflows). One invocation per element of d (F32).
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = flat_id(256u);
    uint n = pc.ne_d.x * pc.ne_d.y * pc.ne_d.z * pc.ne_d.w;
    if (i >= n) return;
    uint i0 = i % pc.ne_d.x, i1 = (i / pc.ne_d.x) % pc.ne_d.y;
    uint i2 = (i / (pc.ne_d.x * pc.ne_d.y)) % pc.ne_d.z, i3 = i / (pc.ne_d.x * pc.ne_d.y * pc.ne_d.z);
    float x = load_a(type_a(), addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3), i0, pc.nb_a.x);
    float r;
    if (pc.p.x == 0u) {
        r = x * uintBitsToFloat(pc.p.y);
    } else if (pc.p.x == 1u) {
        r = x / (1.0 + exp(-x));
    } else {
        float u = 0.79788456080286535588 * x * (1.0 + 0.044715 * x * x);
        r = 0.5 * x * (1.0 + (1.0 - 2.0 / (exp(2.0 * u) + 1.0)));
    }
    D[addr(pc.nb_d, pc.offs.w, i0, i1, i2, i3) >> 2] = floatBitsToUint(r);
}
