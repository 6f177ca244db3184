#version 450
// attn for one query row at a time (decode): the same maths as attn.comp,
//   s_j = scale q[:, t, h] . k[:, j, g] + mask[j, t]
//   d[:, h, t] = sum_j e^(s_j - max s) v[:, j, g] / sum_j e^(s_j - max s)
// with the keys split over the subgroups of a workgroup (64 invocations,
// one query row): subgroup i takes keys i, i + n_sg, ...; its lanes split
// the dot product (subgroupAdd gives the score) and the v row (lane i holds
// dims i, i + n_lanes, ..., at most ACC of them, a specialization constant
// ops.c sets from the subgroup size). Each subgroup keeps its own online
// softmax (m, l, its part of the output); then the subgroups' parts are
// scaled to the workgroup's maximum and added through shared memory, CR
// subgroups at a time. Lanes are counted, not assumed: a subgroup may be
// partial. Masked keys and keys past the last one the mask shows are not
// read; a row masked out entirely gives zeros. Bindings and push constants
// as attn.comp's (windows of the cache: attn_window.glsl).
#include "common.glsl"
#include "reduce.glsl" // WG: 64, set by ops.c
#include "attn_window.glsl"

#define D_MAX 256u
#define CR    4u // subgroups combined at a time

layout(constant_id = 1) const uint ACC = 64u;

DEFINE_LOAD(load_c, C)
DEFINE_LOAD(load_e, E)

shared float qs[D_MAX];
shared float sgm[WG]; // each subgroup's maximum, then its sum
shared float part[CR][D_MAX];

void main() {
    uint H = pc.ne_d.y, T = pc.ne_d.z, Dk = pc.ne_a.x, Dv = pc.ne_d.x, n_kv = pc.ne_b.y;
    uint r = flat_group();
    if (r >= H * T) return; // the whole workgroup
    uint h = r % H, t = r / H, g = h / (H / pc.ne_b.z), tid = gl_LocalInvocationID.x;
    uint tk = type_b(), tv = (pc.p.w >> 16) & 0xffu, tm = pc.p.w >> 24;
    float ninf = uintBitsToFloat(0xff800000u), scale = uintBitsToFloat(pc.p.x);
    uint lane = subgroupExclusiveAdd(1u), n_lanes = subgroupAdd(1u);
    uint sg = gl_SubgroupID, n_sg = gl_NumSubgroups;

    uint rq = pc.offs.x + t * pc.nb_a.y + h * pc.nb_a.z;
    for (uint i = tid; i < Dk; i += WG) qs[i] = uintBitsToFloat(A[(rq + i * pc.nb_a.x) >> 2]);
    uint rm = pc.p.y + t * pc.nb_d.w;
    uint n_live = n_kv;
    if (tm != T_NONE) {
        float last = -1.0;
        for (uint j = tid; j < n_kv; j += WG) {
            if (load_e(tm, rm, j, pc.ne_d.w) != ninf) last = float(j);
        }
        n_live = uint(wg_max(last) + 1.0);
    }
    barrier(); // qs

    uint rk = pc.offs.y + g * pc.nb_b.z, rv = pc.offs.z + g * pc.nb_d.z;
    float m = ninf, l = 0.0;
    float acc[ACC];
    for (uint c = 0u; c < ACC; c++) acc[c] = 0.0;
    for (uint j = sg; j < n_live; j += n_sg) { // uniform within the subgroup
        float mk = tm == T_NONE ? 0.0 : load_e(tm, rm, j, pc.ne_d.w);
        if (mk == ninf) continue;
        uint kr = rk + j * pc.nb_b.y, vr = rv + j * pc.nb_d.y;
        float dot = 0.0;
        for (uint i = lane; i < Dk; i += n_lanes) dot += qs[i] * load_b(tk, kr, i, pc.nb_b.x);
        float s = subgroupAdd(dot) * scale + mk;
        float m_new = max(m, s);
        float corr = m == ninf ? 0.0 : exp(m - m_new);
        float p = exp(s - m_new);
        l = l * corr + p;
        for (uint c = 0u; c < ACC; c++) {
            uint dv = lane + c * n_lanes;
            if (dv >= Dv) break;
            acc[c] = acc[c] * corr + p * load_c(tv, vr, dv, pc.nb_d.x);
        }
        m = m_new;
    }

    // the workgroup's maximum, each subgroup's part scaled to it
    if (subgroupElect()) sgm[sg] = m;
    barrier();
    float m_all = ninf;
    for (uint i = 0u; i < n_sg; i++) m_all = max(m_all, sgm[i]);
    float f = m == ninf ? 0.0 : exp(m - m_all);
    barrier(); // sgm
    if (subgroupElect()) sgm[sg] = l * f;
    float o[D_MAX / WG];
    for (uint c = 0u; c < D_MAX / WG; c++) o[c] = 0.0;
    for (uint base = 0u; base < n_sg; base += CR) {
        if (sg >= base && sg < base + CR) {
            for (uint c = 0u; c < ACC; c++) {
                uint dv = lane + c * n_lanes;
                if (dv >= Dv) break;
                part[sg - base][dv] = acc[c] * f;
            }
        }
        barrier();
        uint n = min(CR, n_sg - base);
        for (uint c = 0u; c < D_MAX / WG; c++) {
            uint dv = tid + c * WG;
            if (dv < Dv) {
                for (uint i = 0u; i < n; i++) o[c] += part[i][dv];
            }
        }
        barrier();
    }
    float l_all = 0.0;
    for (uint i = 0u; i < n_sg; i++) l_all += sgm[i];
    uint rd = pc.offs.w + r * Dv * 4u;
    WindowMerge wm = window_merge(r, m_all, l_all);
    for (uint c = 0u; c < D_MAX / WG; c++) {
        uint dv = tid + c * WG;
        if (dv < Dv) D[(rd >> 2) + dv] = floatBitsToUint(window_out(wm, uintBitsToFloat(D[(rd >> 2) + dv]), o[c]));
    }
    barrier(); // every invocation has read the row's state
    if (tid == 0u) window_state(r, wm);
}
