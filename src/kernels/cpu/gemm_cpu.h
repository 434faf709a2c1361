// kernels/cpu: SIMD f32 GEMM C[m, n] (+)= A[m, k] * B[k, n] (kernels/gemm_args.h), one file per
// ISA (gemm_avx2.cc, gemm_avx512.cc). Register tiles of MR rows x two vectors of columns: a
// 256-deep block of B's columns is packed once into a contiguous panel that every row tile
// reuses from L1, and A(i, p) is broadcast straight from A. Any A strides work, but a
// transposed A (column stride != 1) is slow here: ops::gemm copies it row-major first. On
// AVX-512, one thread, 512 x 4864 x 896: about 3/4 of the packed linear GEMM's speed
// (bench/gemm_bench). Trusts its arguments like every kernel.
#pragma once

#include <cstdint>

#include "kernels/gemm_args.h"

namespace qs::kernels::cpu {

// Rows handed to one thread should be multiples of this (the larger register tile height).
constexpr int64_t kGemmRowGrain = 8;

void gemm_f32_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end);
void gemm_f32_avx2(const GemmArgs& g, int64_t i_begin, int64_t i_end);

}  // namespace qs::kernels::cpu
