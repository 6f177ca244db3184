#version 450
// attn: the fused attention with an online softmax, as the CPU's
// ops-attn.c. One workgroup per query row (head h, token t), decode and
// batch alike; kv head g = h / (n_head / n_head_kv):
//   s_j = scale q[:, t, h] . k[:, j, g] + mask[j, t]
//   d[:, h, t] = sum_j e^(s_j - max s) v[:, j, g] / sum_j e^(s_j - max s)
// Keys go in tiles of WG, one key per invocation: its score (the dot
// product over D, q from shared memory), then the tile's maximum and sum
// (reduce.glsl, any subgroup size), and every invocation adds the tile's
// weighted v rows into its own output elements (dims tid, tid + WG, ...,
// at most ACC_MAX of them). A key masked with -inf is skipped (neither k
// nor v is read: padded cache rows may hold anything), and so is every
// key after the last one the mask shows to the row. A row masked out
// entirely gives zeros.
//
// Bindings: a q F32 [D, T, H]; b k [D, n_kv, H_kv]; c v [Dv, n_kv, H_kv]
// (F32, F16 or BF16, any strides); e the mask [n_kv, >= T] F32 or F16;
// d F32 [Dv, H, T], contiguous. Push constants: ne_a/nb_a q, ne_b/nb_b k,
// ne_d.xyz d's shape, nb_d.xyz v's strides, ne_d.w and nb_d.w the mask's
// strides, p.x scale (float bits), p.y the mask's offset in e, p.w the
// types (q, k, v, mask in bytes 0 to 3; T_NONE: no mask).
#include "common.glsl"
#include "reduce.glsl"

#define D_MAX   256u
#define ACC_MAX 32u

DEFINE_LOAD(load_c, C)
DEFINE_LOAD(load_e, E)

shared float qs[D_MAX];
shared float ps[WG]; // the tile's weights; -1: a masked key

void main() {
    uint H = pc.ne_d.y, T = pc.ne_d.z, Dk = pc.ne_a.x, Dv = pc.ne_d.x, n_kv = pc.ne_b.y;
    uint r = flat_group();
    if (r >= H * T) return;
    uint h = r % H, t = r / H, g = h / (H / pc.ne_b.z), tid = gl_LocalInvocationID.x;
    uint tk = type_b(), tv = (pc.p.w >> 16) & 0xffu, tm = pc.p.w >> 24;
    float ninf = uintBitsToFloat(0xff800000u);

    uint rq = pc.offs.x + t * pc.nb_a.y + h * pc.nb_a.z;
    for (uint i = tid; i < Dk; i += WG) qs[i] = uintBitsToFloat(A[(rq + i * pc.nb_a.x) >> 2]);
    uint rm = pc.p.y + t * pc.nb_d.w;
    // the keys up to the last one the mask shows
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
    float scale = uintBitsToFloat(pc.p.x), m = ninf, l = 0.0;
    float acc[ACC_MAX];
    for (uint c = 0u; c < ACC_MAX; c++) acc[c] = 0.0;
    for (uint j0 = 0u; j0 < n_live; j0 += WG) {
        uint j = j0 + tid;
        float s = ninf;
        bool live = false;
        if (j < n_live) {
            float mk = tm == T_NONE ? 0.0 : load_e(tm, rm, j, pc.ne_d.w);
            if (mk != ninf) {
                uint kr = rk + j * pc.nb_b.y;
                float dot = 0.0;
                for (uint i = 0u; i < Dk; i++) dot += qs[i] * load_b(tk, kr, i, pc.nb_b.x);
                s = dot * scale + mk;
                live = true;
            }
        }
        float m_new = max(m, wg_max(s));
        float p = live && s != ninf ? exp(s - m_new) : 0.0;
        float corr = m == ninf ? 0.0 : exp(m - m_new);
        l = l * corr + wg_sum(p);
        ps[tid] = live ? p : -1.0;
        barrier();
        uint n = min(WG, n_live - j0);
        for (uint c = 0u; c < ACC_MAX; c++) {
            uint dv = tid + c * WG;
            if (dv >= Dv) break;
            float a = acc[c] * corr;
            for (uint jj = 0u; jj < n; jj++) {
                float w = ps[jj];
                if (w >= 0.0) a += w * load_c(tv, rv + (j0 + jj) * pc.nb_d.y, dv, pc.nb_d.x);
            }
            acc[c] = a;
        }
        barrier(); // ps
        m = m_new;
    }
    uint rd = pc.offs.w + r * Dv * 4u;
    for (uint c = 0u; c < ACC_MAX; c++) {
        uint dv = tid + c * WG;
        if (dv >= Dv) break;
        D[(rd >> 2) + dv] = floatBitsToUint(l > 0.0 ? acc[c] / l : 0.0);
    }
}
