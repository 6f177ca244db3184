#version 450
// mul_mat: d[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] *
// b[k, n, i2, i3]; a F32, F16, BF16, Q8_0, Q4_0 or Q4_1 rows, b F32 (any
// strides), d F32. One workgroup per element of d: its invocations take
// every WG-th k, then a workgroup sum. Workgroups (x: m, y: n, z: the
// batches of d) loop over m and n where d has more than a grid dimension.
#include "common.glsl"
#include "reduce.glsl"

void main() {
    uint K = pc.ne_a.x, M = pc.ne_d.x, N = pc.ne_d.y, t = gl_LocalInvocationID.x;
    uint z = gl_WorkGroupID.z, i2 = z % pc.ne_d.z, i3 = z / pc.ne_d.z;
    uint a2 = i2 / (pc.ne_d.z / pc.ne_a.z), a3 = i3 / (pc.ne_d.w / pc.ne_a.w);
    uint ta = type_a();
    for (uint m = gl_WorkGroupID.x; m < M; m += gl_NumWorkGroups.x) {
        uint ra = addr(pc.nb_a, pc.offs.x, 0u, m, a2, a3);
        for (uint n = gl_WorkGroupID.y; n < N; n += gl_NumWorkGroups.y) {
            uint rb = addr(pc.nb_b, pc.offs.y, 0u, n, i2, i3);
            float s = 0.0;
            for (uint k = t; k < K; k += WG) {
                s += load_a(ta, ra, k, pc.nb_a.x) * uintBitsToFloat(B[(rb + k * pc.nb_b.x) >> 2]);
            }
            s = wg_sum(s);
            if (t == 0u) D[addr(pc.nb_d, pc.offs.w, m, n, i2, i3) >> 2] = floatBitsToUint(s);
        }
    }
}
