#version 450
// mul_mat of one column, a token's decode (mul_mat_vec.glsl)
#define NC 1u
#include "mul_mat_vec.glsl"
