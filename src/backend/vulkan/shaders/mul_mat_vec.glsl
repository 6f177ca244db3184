// mul_mat for 1 to NC columns (decode: a token per sequence), weights read
// once for all of them. NC is the includer's: 8 in mul_mat_vec.comp, 1 in
// mul_mat_vec1.comp; a constant, so that the loops unroll and the sums stay
// in registers (columns past N compute the last one again, unwritten):
//   d[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] b[k, n, i2, i3]
// a: any weight type (dequant.glsl), b F32 (any strides), d F32. A
// workgroup computes NR rows of d for every column: its WG invocations
// take every WG-th run of 32 elements of k (a whole block of the 32-blocks,
// a sub-block of a super-block), dequantize it for each of the NR rows, 16
// weights at a time, and add their products with each column into NR x NC
// sums; the sums are added within each subgroup (subgroupAdd), then the
// subgroups' through shared memory, PART subgroups at a time (any subgroup
// size, any WG). Rows past M (the last workgroup) read row M - 1 and are
// not written. Workgroups: (x, y) the row groups, z the batches of d.
#include "common.glsl"
#include "reduce.glsl"
#include "dequant.glsl"

#define NR   4u
#define NACC (NR * NC)
#define PART 16u

shared float part[PART][NACC];
shared float tot[NACC];

void main() {
    uint K = pc.ne_a.x, M = pc.ne_d.x, N = pc.ne_d.y, t = gl_LocalInvocationID.x;
    uint m0 = flat_group() * NR;
    if (m0 >= M) return; // the whole workgroup
    uint z = gl_WorkGroupID.z, i2 = z % pc.ne_d.z, i3 = z / pc.ne_d.z;
    uint a2 = i2 / (pc.ne_d.z / pc.ne_a.z), a3 = i3 / (pc.ne_d.w / pc.ne_a.w);
    uint ta = type_a();
    uint ra[NR], rb[NC];
    for (uint r = 0u; r < NR; r++) ra[r] = addr(pc.nb_a, pc.offs.x, 0u, min(m0 + r, M - 1u), a2, a3);
    for (uint c = 0u; c < NC; c++) rb[c] = addr(pc.nb_b, pc.offs.y, 0u, min(c, N - 1u), i2, i3);

    float acc[NACC];
    for (uint a = 0u; a < NACC; a++) acc[a] = 0.0;
    for (uint k32 = t * 32u; k32 < K; k32 += WG * 32u) {
        for (uint k0 = k32; k0 < min(k32 + 32u, K); k0 += 16u) {
            float w[NR][16];
            for (uint r = 0u; r < NR; r++) deq16(ta, ra[r], k0, pc.nb_a.x, K, w[r]);
            for (uint c = 0u; c < NC; c++) { // columns past N: the last again, not written
                float x[16];
                for (uint i = 0u; i < 16u; i++) {
                    x[i] = k0 + i < K ? uintBitsToFloat(B[(rb[c] + (k0 + i) * pc.nb_b.x) >> 2]) : 0.0;
                }
                for (uint r = 0u; r < NR; r++) {
                    float s = acc[r * NC + c];
                    for (uint i = 0u; i < 16u; i++) s += w[r][i] * x[i];
                    acc[r * NC + c] = s;
                }
            }
        }
    }

    for (uint a = 0u; a < NACC; a++) acc[a] = subgroupAdd(acc[a]);
    for (uint a = t; a < NACC; a += WG) tot[a] = 0.0;
    for (uint base = 0u; base < gl_NumSubgroups; base += PART) {
        if (gl_SubgroupID >= base && gl_SubgroupID < base + PART && subgroupElect()) {
            for (uint a = 0u; a < NACC; a++) part[gl_SubgroupID - base][a] = acc[a];
        }
        barrier();
        uint n = min(PART, gl_NumSubgroups - base);
        for (uint a = t; a < NACC; a += WG) {
            float s = tot[a];
            for (uint i = 0u; i < n; i++) s += part[i][a];
            tot[a] = s;
        }
        barrier();
    }
    for (uint a = t; a < NACC; a += WG) {
        uint r = a / NC, c = a % NC;
        if (m0 + r < M && c < N) D[addr(pc.nb_d, pc.offs.w, m0 + r, c, i2, i3) >> 2] = floatBitsToUint(tot[a]);
    }
}
