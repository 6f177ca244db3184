/*
 * Internal: the SIMD levels of the CPU row kernels (kernels.h).
 *
 * kernels-avx2.c and kernels-avx512.c compile their functions for their
 * instruction sets only (GCC target pragmas, no global -march), so the rest
 * of the library stays portable and one binary runs on any x86-64 CPU;
 * kernels.c calls a fill function only after CPUID (and XGETBV: the OS saves
 * the registers) says the CPU can run it.
 *
 * A fill function overwrites the entries of `tab` (indexed by cllm_type) that
 * its level implements and leaves the others as they are, so the caller fills
 * the portable table first, then each level up to the one chosen.
 */
#ifndef CLLM_BACKEND_CPU_KERNELS_IMPL_H
#define CLLM_BACKEND_CPU_KERNELS_IMPL_H

#include "backend/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#define CLLM_CPU_X86 1
/* AVX2 + FMA + F16C. */
void cllm_cpu_kernels_fill_avx2(cllm_cpu_type_kernels tab[CLLM_TYPE_COUNT]);
/* AVX-512 F/BW/VL/DQ + VNNI (256-bit VNNI for the integer dots, 512-bit for
 * the float kernels unless prefer_256, and for the activation quantizers). */
/* prefer_256 (cllm_cpu_prefer_256): the float dots stay at 256 bits. */
void cllm_cpu_kernels_fill_avx512(cllm_cpu_type_kernels tab[CLLM_TYPE_COUNT], bool prefer_256);
#else
#define CLLM_CPU_X86 0
#endif

#endif /* CLLM_BACKEND_CPU_KERNELS_IMPL_H */
