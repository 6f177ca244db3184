#version 450
// rope_table: the rotations of each token, as the CPU's ops-rope.c (which
// computes in double; here in float, within the bounds of a sine).
// a: I32 positions [n_tokens]; b: optional F32 frequency factors
// [>= n_dims/2]; d: F32 [n_dims, n_tokens], contiguous rows:
//   theta_e = pos base^(-2i / n_dims) / ff[i],  theta = scale theta_e
//   (YaRN, ext_factor != 0: r = (1 - clamp((i - lo) / max(0.001, hi - lo),
//   0, 1)) ext_factor, theta = theta (1 - r) + theta_e r)
//   d[i] = cos(theta) mscale, d[n_dims/2 + i] = sin(theta) mscale
// Parameters (ops.c computes lo, hi and mscale as the CPU does):
// p.x n_dims, p.y ff present, p.z ext_factor; the float bits of base,
// scale, mscale in nb_b.y, nb_b.z, nb_b.w and of lo, hi in ne_b.z, ne_b.w
// (ff is read along x only). One invocation per (i, token).
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint half_dims = pc.p.x / 2u;
    uint id = flat_id(256u);
    if (id >= half_dims * pc.ne_d.y) return;
    uint i = id % half_dims, t = id / half_dims;
    int pos = int(A[(pc.offs.x + t * pc.nb_a.x) >> 2]);
    float base = uintBitsToFloat(pc.nb_b.y), scale = uintBitsToFloat(pc.nb_b.z);
    float mscale = uintBitsToFloat(pc.nb_b.w), ext = uintBitsToFloat(pc.p.z);
    float lo = uintBitsToFloat(pc.ne_b.z), hi = uintBitsToFloat(pc.ne_b.w);
    // base^(-2i / n_dims) as exp2 of a product: one rounding less than pow
    float theta_e = float(pos) * exp2(-log2(base) * float(2u * i) / float(pc.p.x));
    if (pc.p.y != 0u) theta_e /= uintBitsToFloat(B[(pc.offs.y + i * pc.nb_b.x) >> 2]);
    float theta = scale * theta_e;
    if (ext != 0.0) {
        float r = (1.0 - clamp((float(i) - lo) / max(0.001, hi - lo), 0.0, 1.0)) * ext;
        theta = theta * (1.0 - r) + theta_e * r;
    }
    uint row = (pc.offs.w + t * pc.nb_d.y) >> 2;
    D[row + i] = floatBitsToUint(cos(theta) * mscale);
    D[row + half_dims + i] = floatBitsToUint(sin(theta) * mscale);
}
