#version 450
// mul_mat of 2 to 8 columns (mul_mat_vec.glsl)
#define NC 8u
#include "mul_mat_vec.glsl"
