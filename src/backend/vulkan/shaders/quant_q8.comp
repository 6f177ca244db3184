#version 450
// The F32 activations b [K, N, B2, B3] (any strides) of a mul_mat with
// 8-bit activations (mul_mat_q8.comp), quantized to blocks of 32 as the
// CPU's Q8_0 activations (core/quants.c):
//   d = amax / 127 rounded to fp16, q_j = round-to-even(x_j / d) in -127..127
// Block (kb, n, i2, i3) is block ((i3 B2 + i2) N + n) KB + kb of d, 10 words
// each: d (the float of the fp16 value), the sum of its quants (int), and
// the 32 quants, 4 to a word (int8, the first in the low byte). One
// invocation per block.
#include "common.glsl"
layout(local_size_x = 64) in;

// a / b rounded to nearest as the CPU's division (a shader's division may
// be off by an ulp or two): the quotient corrected by its exact remainder
float div_rn(float a, float b) {
    precise float q = a / b;
    precise float r = fma(-q, b, a);
    return fma(r, 1.0 / b, q);
}

void main() {
    uint KB = pc.ne_a.x / 32u, N = pc.ne_a.y, B2 = pc.ne_a.z, B3 = pc.ne_a.w;
    uint i = flat_id(64u);
    if (i >= KB * N * B2 * B3) return;
    uint kb = i % KB, n = (i / KB) % N, i2 = (i / (KB * N)) % B2, i3 = i / (KB * N * B2);
    uint row = addr(pc.nb_a, pc.offs.x, kb * 32u, n, i2, i3);
    float x[32];
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        x[j] = uintBitsToFloat(A[(row + j * pc.nb_a.x) >> 2]);
        amax = max(amax, abs(x[j]));
    }
    float d = unpackHalf2x16(f16_bits(min(div_rn(amax, 127.0), 65504.0))).x;
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    int s = 0;
    uint w[8];
    for (uint k = 0u; k < 8u; k++) w[k] = 0u;
    for (uint j = 0u; j < 32u; j++) {
        int q = int(roundEven(clamp(x[j] * id, -127.0, 127.0)));
        s += q;
        w[j >> 2] |= (uint(q) & 0xffu) << ((j & 3u) * 8u);
    }
    uint o = i * 10u;
    D[o] = floatBitsToUint(d);
    D[o + 1u] = uint(s);
    for (uint k = 0u; k < 8u; k++) D[o + 2u + k] = w[k];
}
