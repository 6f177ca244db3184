#version 450
// attn for batches of query rows (prompts): the fused attention with an
// online softmax, as the CPU's ops-attn.c; kv head g = h / (H / H_kv):
//   s_j = scale q[:, t, h] . k[:, j, g] + mask[j, t]
//   d[:, h, t] = sum_j e^(s_j - max s) v[:, j, g] / sum_j e^(s_j - max s)
// A workgroup (64 invocations) takes QR query rows of one kv head (its
// query heads x tokens: grouped-query heads share it too) and walks the
// keys in tiles of KT: the tile's k rows go to shared memory and each
// invocation scores one (row, key) pair; then the tile's v rows replace
// them and each invocation adds the weighted rows into its row's output
// elements (dims lane, lane + 8, ...: 8 invocations per row, at most ACC
// each). So a k or v row is read once per QR query rows. A key masked with
// -inf for a row is skipped for it, keys after the last one the mask shows
// to any row of the workgroup are not read (padded cache rows may hold
// anything), and a row masked out entirely gives zeros.
//
// Bindings: a q F32 [D, T, H]; b k [D, n_kv, H_kv]; c v [Dv, n_kv, H_kv]
// (F32, F16 or BF16, any strides); e the mask [n_kv, >= T] F32 or F16;
// d F32 [Dv, H, T], contiguous. Push constants: ne_a/nb_a q, ne_b/nb_b k,
// ne_d.xyz d's shape, nb_d.xyz v's strides, ne_d.w and nb_d.w the mask's
// strides, p.x scale (float bits), p.y the mask's offset in e, p.w the
// types (q, k, v, mask in bytes 0 to 3; T_NONE: no mask), p.z a window of
// the cache after the first (attn_window.glsl).
#include "common.glsl"
#include "reduce.glsl" // WG: 64, set by ops.c
#include "attn_window.glsl"

#define D_MAX 256u
#define QR    8u  // query rows per workgroup
#define KT    8u  // keys per tile; QR * KT = WG
#define ACC   32u // D_MAX / (WG / QR)

DEFINE_LOAD(load_c, C)
DEFINE_LOAD(load_e, E)

shared float qs[QR][D_MAX];
shared float kvs[KT][D_MAX]; // the tile's k rows, then its v rows
shared float ss[QR][KT];     // the tile's scores; -inf: masked

void main() {
    uint H = pc.ne_d.y, T = pc.ne_d.z, Dk = pc.ne_a.x, Dv = pc.ne_d.x, n_kv = pc.ne_b.y;
    uint H_kv = pc.ne_b.z, n_rep = H / H_kv, tid = gl_LocalInvocationID.x;
    uint rows = n_rep * T, per_g = (rows + QR - 1u) / QR;
    uint wg = flat_group();
    if (wg >= H_kv * per_g) return; // the whole workgroup
    uint g = wg / per_g, r0 = (wg % per_g) * QR;
    uint tk = type_b(), tv = (pc.p.w >> 16) & 0xffu, tm = pc.p.w >> 24;
    float ninf = uintBitsToFloat(0xff800000u), scale = uintBitsToFloat(pc.p.x);

    // query row i of the workgroup: head g n_rep + ri % n_rep, token ri / n_rep
    for (uint x = tid; x < QR * Dk; x += WG) {
        uint i = x / Dk, ri = min(r0 + i, rows - 1u);
        uint h = g * n_rep + ri % n_rep, t = ri / n_rep;
        qs[i][x % Dk] = uintBitsToFloat(A[(pc.offs.x + t * pc.nb_a.y + h * pc.nb_a.z + (x % Dk) * pc.nb_a.x) >> 2]);
    }
    // the keys up to the last one the mask shows to a row of the workgroup
    uint n_live = n_kv;
    if (tm != T_NONE) {
        float last = -1.0;
        for (uint x = tid; x < QR * n_kv; x += WG) {
            uint i = x / n_kv, j = x % n_kv, ri = r0 + i;
            if (ri < rows && load_e(tm, pc.p.y + (ri / n_rep) * pc.nb_d.w, j, pc.ne_d.w) != ninf) {
                last = max(last, float(j));
            }
        }
        n_live = uint(wg_max(last) + 1.0);
    }

    uint rk = pc.offs.y + g * pc.nb_b.z, rv = pc.offs.z + g * pc.nb_d.z;
    // scoring: row si, key sj of the tile; accumulating: row ai, dims al + 8 c
    uint si = tid / KT, sj = tid % KT, ai = tid / (WG / QR), al = tid % (WG / QR);
    uint s_row = r0 + si, s_rm = pc.p.y + (min(s_row, rows - 1u) / n_rep) * pc.nb_d.w;
    float m = ninf, l = 0.0;
    float acc[ACC];
    for (uint c = 0u; c < ACC; c++) acc[c] = 0.0;
    for (uint j0 = 0u; j0 < n_live; j0 += KT) {
        uint n = min(KT, n_live - j0);
        barrier(); // qs (first tile), kvs (the last tile's v rows)
        for (uint x = tid; x < n * Dk; x += WG) {
            uint jj = x / Dk, i = x % Dk;
            kvs[jj][i] = load_b(tk, rk + (j0 + jj) * pc.nb_b.y, i, pc.nb_b.x);
        }
        barrier();
        float s = ninf;
        if (sj < n && s_row < rows) {
            float mk = tm == T_NONE ? 0.0 : load_e(tm, s_rm, j0 + sj, pc.ne_d.w);
            if (mk != ninf) {
                float dot = 0.0;
                for (uint i = 0u; i < Dk; i++) dot += qs[si][i] * kvs[sj][i];
                s = dot * scale + mk;
            }
        }
        ss[si][sj] = s;
        barrier(); // ss; kvs read
        for (uint x = tid; x < n * Dv; x += WG) {
            uint jj = x / Dv, i = x % Dv;
            kvs[jj][i] = load_c(tv, rv + (j0 + jj) * pc.nb_d.y, i, pc.nb_d.x);
        }
        barrier();
        float m_new = m;
        for (uint jj = 0u; jj < n; jj++) m_new = max(m_new, ss[ai][jj]);
        if (m_new != ninf) { // else nothing is shown to this row yet
            float corr = m == ninf ? 0.0 : exp(m - m_new);
            float p[KT];
            float ps = 0.0;
            for (uint jj = 0u; jj < KT; jj++) {
                p[jj] = jj < n && ss[ai][jj] != ninf ? exp(ss[ai][jj] - m_new) : 0.0;
                ps += p[jj];
            }
            l = l * corr + ps;
            for (uint c = 0u; c < ACC; c++) {
                uint dv = al + c * (WG / QR);
                if (dv >= Dv) break;
                float a = acc[c] * corr;
                for (uint jj = 0u; jj < n; jj++) a += p[jj] * kvs[jj][dv];
                acc[c] = a;
            }
            m = m_new;
        }
    }
    uint ri = r0 + ai;
    uint h = g * n_rep + ri % n_rep, t = ri / n_rep;
    uint rd = pc.offs.w + (t * H + h) * Dv * 4u;
    WindowMerge wm;
    if (ri < rows) {
        wm = window_merge(t * H + h, m, l);
        for (uint c = 0u; c < ACC; c++) {
            uint dv = al + c * (WG / QR);
            if (dv >= Dv) break;
            D[(rd >> 2) + dv] = floatBitsToUint(window_out(wm, uintBitsToFloat(D[(rd >> 2) + dv]), acc[c]));
        }
    }
    barrier(); // every invocation has read its row's state
    if (ri < rows && al == 0u) window_state(t * H + h, wm);
}
