#version 450
// soft_max: per row, v = a * scale + mask (scale: p.x as float bits; mask
// b, F32 or F16, when p.y is 1), d = exp(v - max v) / sum exp(v - max v); a
// row masked out entirely gives zeros. One workgroup per row; d may be a's
// memory (every invocation reads its elements before it writes them, after
// the reductions).
#include "common.glsl"
#include "reduce.glsl"

float value(uint ra, uint rm, uint i) {
    float v = uintBitsToFloat(A[(ra + i * pc.nb_a.x) >> 2]) * uintBitsToFloat(pc.p.x);
    if (pc.p.y != 0u) v += load_b(type_b(), rm, i, pc.nb_b.x);
    return v;
}

void main() {
    uint r = flat_group();
    uint rows = pc.ne_d.y * pc.ne_d.z * pc.ne_d.w, n = pc.ne_d.x, t = gl_LocalInvocationID.x;
    if (r >= rows) return;
    uint i1 = r % pc.ne_d.y, i2 = (r / pc.ne_d.y) % pc.ne_d.z, i3 = r / (pc.ne_d.y * pc.ne_d.z);
    uint ra = addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3);
    uint rd = addr(pc.nb_d, pc.offs.w, 0u, i1, i2, i3);
    uint rm = pc.p.y != 0u ? addr(pc.nb_b, pc.offs.y, 0u, i1, i2 % pc.ne_b.z, i3 % pc.ne_b.w) : 0u;
    float m = uintBitsToFloat(0xff800000u); // -inf
    for (uint i = t; i < n; i += WG) m = max(m, value(ra, rm, i));
    m = wg_max(m);
    float s = 0.0;
    if (!isinf(m) || m > 0.0) {
        for (uint i = t; i < n; i += WG) s += exp(value(ra, rm, i) - m);
    }
    s = wg_sum(s);
    if (isinf(m) && m < 0.0) {
        for (uint i = t; i < n; i += WG) D[(rd + i * pc.nb_d.x) >> 2] = 0u;
        return;
    }
    float inv = 1.0 / s;
    for (uint i = t; i < n; i += WG) {
        float e = exp(value(ra, rm, i) - m);
        D[(rd + i * pc.nb_d.x) >> 2] = floatBitsToUint(e * inv);
    }
}
