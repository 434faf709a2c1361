// kernels/cpu: SIMD f32 GEMM C[m, n] (+)= A[m, k] * B[k, n] (kernels/gemm_args.h), one file per
// ISA (gemm_avx2.cc, gemm_avx512.cc). Register tiles of MR rows x two vectors of columns over
// B packed into panels that stay in L1.
// - AVX-512 blocks for every cache level (gemm_avx512.cc): A is packed too, a row block at a
//   time, through its strides, so any A layout runs at the same speed. It needs the caller's
//   scratch, gemm_f32_avx512_scratch_floats(g) floats per thread.
// - AVX2 broadcasts A(i, p) straight from A, so a transposed A (column stride != 1) is slow
//   there: ops::gemm copies it row-major first.
// Trusts its arguments like every kernel.
#pragma once

#include <cstdint>

#include "kernels/gemm_args.h"

namespace qs::kernels::cpu {

// Rows handed to one thread should be multiples of this (both register tile heights divide it).
constexpr int64_t kGemmRowGrain = 12;

int64_t gemm_f32_avx512_scratch_floats(const GemmArgs& g);
void gemm_f32_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end, float* scratch);
void gemm_f32_avx2(const GemmArgs& g, int64_t i_begin, int64_t i_end);

// bf16 products (gemm_bf16_avx512.cc): C (+)= bf16(A) * bf16(B), f32 accumulation, through
// vdpbf16ps; reads both operands through both strides. Needs gemm_bf16_avx512_supported()
// (AVX512-BF16) and the caller's scratch, gemm_bf16_avx512_scratch_dwords(g) per thread.
bool gemm_bf16_avx512_supported();
int64_t gemm_bf16_avx512_scratch_dwords(const GemmArgs& g);
void gemm_bf16_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end, uint32_t* scratch);

}  // namespace qs::kernels::cpu
