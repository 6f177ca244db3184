// Sums and maxima over a workgroup of WG invocations (specialization
// constant 0, the device sets it): a subgroup reduction, then the subgroups'
// results through shared memory, added by every invocation in the same
// order. Correct for any subgroup size, and for a workgroup of several
// subgroups or of one; call from uniform control flow.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

shared float red[WG];

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float r = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) r += red[s];
    barrier();
    return r;
}

float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float r = red[0];
    for (uint s = 1u; s < gl_NumSubgroups; s++) r = max(r, red[s]);
    barrier();
    return r;
}
