// The attention over a KV cache larger than one binding (graph.c:
// dispatch_attn_windows): one dispatch per window of the cache's rows (k, v
// and the mask's columns bound to the window only), in order, a barrier
// between. Each keeps, per output row r (d row t * H + h), the maximum m
// and the sum l of e^(s_j - m) of the windows so far in f (binding 5, two
// floats a row), and d holds their normalized output; a window w with its
// own m_w, l_w and unnormalized output o_w merges as
//   m = max(m_prev, m_w), f_p = e^(m_prev - m), f_w = e^(m_w - m)
//   l = l_prev f_p + l_w f_w,  d = (d_prev l_prev f_p + o_w f_w) / l
// (a part that shows no key, l = 0, counts nothing). p.z: 0 for a cache in
// one binding (no state: f is then bound to d), 1 for the first window, 2
// for the others.

layout(std430, binding = 5) buffer BufF { uint F[]; };

struct WindowMerge {
    float m, l;   // the merged state
    float fp, fw; // the factors of the previous output (times l_prev) and of o_w
    float inv;    // 1 / l, 0 where no key is shown
};

WindowMerge window_merge(uint r, float m_w, float l_w) {
    WindowMerge w;
    if (pc.p.z < 2u) {
        w.m = m_w;
        w.l = l_w;
        w.fp = 0.0;
        w.fw = 1.0;
    } else {
        float m_p = uintBitsToFloat(F[2u * r]), l_p = uintBitsToFloat(F[2u * r + 1u]);
        w.m = max(m_p, m_w);
        float ep = l_p > 0.0 ? exp(m_p - w.m) : 0.0;
        w.fw = l_w > 0.0 ? exp(m_w - w.m) : 0.0;
        w.fp = l_p * ep;
        w.l = w.fp + l_w * w.fw;
    }
    w.inv = w.l > 0.0 ? 1.0 / w.l : 0.0;
    return w;
}

// The output element from the previous one (d_prev) and this window's o_w.
float window_out(WindowMerge w, float d_prev, float o_w) {
    if (pc.p.z < 2u) return w.l > 0.0 ? o_w / w.l : 0.0;
    return w.l > 0.0 ? (d_prev * w.fp + o_w * w.fw) * w.inv : 0.0;
}

void window_state(uint r, WindowMerge w) {
    if (pc.p.z == 0u) return;
    F[2u * r] = floatBitsToUint(w.m);
    F[2u * r + 1u] = floatBitsToUint(w.l);
}
