#version 450
// rms_norm: per row, d = a / sqrt(mean(a^2) + eps) (eps: p.x as float
// bits). One workgroup per row; a F32, F16 or BF16, any strides.
#include "common.glsl"
#include "reduce.glsl"

void main() {
    uint r = flat_group();
    uint rows = pc.ne_d.y * pc.ne_d.z * pc.ne_d.w, n = pc.ne_d.x, t = gl_LocalInvocationID.x;
    if (r >= rows) return;
    uint i1 = r % pc.ne_d.y, i2 = (r / pc.ne_d.y) % pc.ne_d.z, i3 = r / (pc.ne_d.y * pc.ne_d.z);
    uint ra = addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3);
    uint rd = addr(pc.nb_d, pc.offs.w, 0u, i1, i2, i3);
    float s = 0.0;
    for (uint i = t; i < n; i += WG) {
        float x = load_a(type_a(), ra, i, pc.nb_a.x);
        s += x * x;
    }
    s = wg_sum(s);
    float scale = 1.0 / sqrt(s / float(n) + uintBitsToFloat(pc.p.x));
    for (uint i = t; i < n; i += WG) {
        D[(rd + i * pc.nb_d.x) >> 2] = floatBitsToUint(load_a(type_a(), ra, i, pc.nb_a.x) * scale);
    }
}
