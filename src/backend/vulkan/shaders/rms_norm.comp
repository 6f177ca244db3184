#version 450
// Row normalisations (eps: p.x as float bits), as the CPU's ops-norm.c:
//   p.y 0, rms_norm: d = a / sqrt(mean(a^2) + eps)
//   p.y 1, norm:     d = (a - mean(a)) / sqrt(mean((a - mean(a))^2) + eps)
// One workgroup per row; a F32, F16 or BF16, any strides; d may be a's own
// memory (the whole row is read before the barriers of the last sum).
#include "common.glsl"
#include "reduce.glsl"

void main() {
    uint r = flat_group();
    uint rows = pc.ne_d.y * pc.ne_d.z * pc.ne_d.w, n = pc.ne_d.x, t = gl_LocalInvocationID.x;
    if (r >= rows) return;
    uint i1 = r % pc.ne_d.y, i2 = (r / pc.ne_d.y) % pc.ne_d.z, i3 = r / (pc.ne_d.y * pc.ne_d.z);
    uint ra = addr(pc.nb_a, pc.offs.x, 0u, i1, i2, i3);
    uint rd = addr(pc.nb_d, pc.offs.w, 0u, i1, i2, i3);
    float mean = 0.0;
    if (pc.p.y == 1u) {
        float s = 0.0;
        for (uint i = t; i < n; i += WG) s += load_a(type_a(), ra, i, pc.nb_a.x);
        mean = wg_sum(s) / float(n);
    }
    float s = 0.0;
    for (uint i = t; i < n; i += WG) {
        float x = load_a(type_a(), ra, i, pc.nb_a.x) - mean;
        s += x * x;
    }
    s = wg_sum(s);
    float scale = 1.0 / sqrt(s / float(n) + uintBitsToFloat(pc.p.x));
    for (uint i = t; i < n; i += WG) {
        float x = load_a(type_a(), ra, i, pc.nb_a.x) - mean;
        D[(rd + i * pc.nb_d.x) >> 2] = floatBitsToUint(x * scale);
    }
}
