// Sixteen consecutive weights of a row of a (binding 0) at a time, for the
// mat-vec and the tiled matmul: the block's scales once, its quants as
// whole 32-bit words (four words hold the 16 bytes that carry 16 quants of
// every type), not byte by byte. Element k0 (a multiple of 16) onwards of
// the row at byte `row`; the layouts are core/quants.h's and the arithmetic
// is common.glsl's element loader's (the same `precise` products), so both
// paths dequantize to the same floats.

// The 32-bit word at byte o of a (o need not be aligned: blocks of 18, 22
// or 110 bytes are not).
uint a_u32(uint o) {
    uint s = (o & 3u) * 8u, w = A[o >> 2];
    return s == 0u ? w : (w >> s) | (A[(o >> 2) + 1u] << (32u - s));
}

// 16 bytes at byte o of a.
uvec4 a_b16(uint o) { return uvec4(a_u32(o), a_u32(o + 4u), a_u32(o + 8u), a_u32(o + 12u)); }

uint b16_at(uvec4 v, uint i) { return (v[i >> 2] >> ((i & 3u) * 8u)) & 0xffu; }

// w[i] = a[k0 + i] of the row at byte `row` (elements nb0 bytes apart for
// the plain types, which may end anywhere: past K, zeros).
void deq16(uint t, uint row, uint k0, uint nb0, uint K, out float w[16]) {
    if (t == T_F32 || t == T_F16 || t == T_BF16) {
        for (uint i = 0u; i < 16u; i++) w[i] = k0 + i < K ? load_a(t, row, k0 + i, nb0) : 0.0;
        return;
    }
    uint j0 = k0 & 31u;
    if (t == T_Q8_0) {
        uint blk = row + (k0 >> 5) * 34u;
        float d = load_a_f16(blk);
        uvec4 q = a_b16(blk + 2u + j0);
        for (uint i = 0u; i < 16u; i++) w[i] = d * float(int(b16_at(q, i) << 24) >> 24);
        return;
    }
    if (t == T_Q4_0 || t == T_Q4_1) {
        uint blk = row + (k0 >> 5) * (t == T_Q4_0 ? 18u : 20u);
        float d = load_a_f16(blk), m = t == T_Q4_1 ? load_a_f16(blk + 2u) : 0.0;
        uvec4 q = a_b16(blk + (t == T_Q4_0 ? 2u : 4u));
        uint sh = j0 >> 2; // 0: low nibbles, 4: high
        for (uint i = 0u; i < 16u; i++) {
            uint qi = (b16_at(q, i) >> sh) & 15u;
            if (t == T_Q4_0) {
                w[i] = d * float(int(qi) - 8);
            } else {
                precise float r = d * float(qi);
                w[i] = r + m;
            }
        }
        return;
    }
    if (t == T_Q5_0 || t == T_Q5_1) {
        uint blk = row + (k0 >> 5) * (t == T_Q5_0 ? 22u : 24u);
        uint o = t == T_Q5_0 ? 2u : 4u;
        float d = load_a_f16(blk), m = t == T_Q5_1 ? load_a_f16(blk + 2u) : 0.0;
        uint qh = a_u32(blk + o) >> j0;
        uvec4 q = a_b16(blk + o + 4u);
        uint sh = j0 >> 2;
        for (uint i = 0u; i < 16u; i++) {
            uint qi = ((b16_at(q, i) >> sh) & 15u) | ((qh >> i) & 1u) << 4;
            if (t == T_Q5_0) {
                w[i] = d * float(int(qi) - 16);
            } else {
                precise float r = d * float(qi);
                w[i] = r + m;
            }
        }
        return;
    }
    // super-blocks of 256: element e0 of block ib; the 16 quants sit at
    // bytes l0 .. l0 + 15 of a 32-byte run, at bit offset 2 kk (or 4 kk)
    uint ib = k0 >> 8, e0 = k0 & 255u, h = e0 >> 7, kk = (e0 >> 5) & 3u, l0 = e0 & 31u;
    if (t == T_Q2_K) { // scales[16] qs[64] d dmin
        uint blk = row + ib * 84u;
        uint sc = load_a_u8(blk + (e0 >> 4));
        float d = load_a_f16(blk + 80u), dmin = load_a_f16(blk + 82u);
        uvec4 q = a_b16(blk + 16u + 32u * h + l0);
        for (uint i = 0u; i < 16u; i++) {
            precise float x = d * float(sc & 15u) * float((b16_at(q, i) >> (2u * kk)) & 3u);
            precise float mn = dmin * float(sc >> 4);
            w[i] = x - mn;
        }
        return;
    }
    if (t == T_Q3_K) { // hmask[32] qs[64] scales[12] d
        uint blk = row + ib * 110u, s = e0 >> 4;
        uint sl = s < 8u ? load_a_u8(blk + 96u + s) & 15u : load_a_u8(blk + 88u + s) >> 4;
        uint sh = (load_a_u8(blk + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
        precise float dl = load_a_f16(blk + 108u) * float(int(sl | sh << 4) - 32);
        uvec4 lo = a_b16(blk + 32u + 32u * h + l0), hm = a_b16(blk + l0);
        for (uint i = 0u; i < 16u; i++) {
            uint q = ((b16_at(lo, i) >> (2u * kk)) & 3u) | ((b16_at(hm, i) >> (4u * h + kk)) & 1u) << 2;
            w[i] = dl * float(int(q) - 4);
        }
        return;
    }
    if (t == T_Q4_K || t == T_Q5_K) { // d dmin scales[12] (qh[32]) qs[128]
        uint blk = row + ib * (t == T_Q4_K ? 144u : 176u), s = e0 >> 5;
        uint sc, mn;
        if (s < 4u) {
            sc = load_a_u8(blk + 4u + s) & 63u;
            mn = load_a_u8(blk + 8u + s) & 63u;
        } else {
            sc = (load_a_u8(blk + 8u + s) & 15u) | (load_a_u8(blk + s) >> 6) << 4;
            mn = (load_a_u8(blk + 8u + s) >> 4) | (load_a_u8(blk + 4u + s) >> 6) << 4;
        }
        precise float dl = load_a_f16(blk) * float(sc);
        precise float ml = load_a_f16(blk + 2u) * float(mn);
        uvec4 q = a_b16(blk + (t == T_Q4_K ? 16u : 48u) + 32u * (e0 >> 6) + l0);
        uvec4 qh = t == T_Q5_K ? a_b16(blk + 16u + l0) : uvec4(0u);
        for (uint i = 0u; i < 16u; i++) {
            uint qi = (b16_at(q, i) >> (4u * (s & 1u))) & 15u;
            qi |= ((b16_at(qh, i) >> s) & 1u) << 4;
            precise float x = dl * float(qi);
            w[i] = x - ml;
        }
        return;
    }
    // T_Q6_K: ql[128] qh[64] scales[16] (int8) d
    uint blk = row + ib * 210u;
    int sc = int(load_a_u8(blk + 192u + (e0 >> 4)) << 24) >> 24;
    precise float dl = load_a_f16(blk + 208u) * float(sc);
    uvec4 lo = a_b16(blk + 64u * h + 32u * (kk & 1u) + l0), hi = a_b16(blk + 128u + 32u * h + l0);
    for (uint i = 0u; i < 16u; i++) {
        uint q = ((b16_at(lo, i) >> (4u * (kk >> 1))) & 15u) | ((b16_at(hi, i) >> (2u * kk)) & 3u) << 4;
        w[i] = dl * float(int(q) - 32);
    }
}
