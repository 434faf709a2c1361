// kernels/cpu: SIMD f32 GEMM C[m, n] (+)= A[m, k] * B[k, n] (kernels/gemm_args.h), one file per
// ISA (gemm_avx2.cc, gemm_avx512.cc). Register tiles of MR rows x two vectors of columns: B's
// row segment is loaded once per p and A(i, p) broadcast, so neither operand is packed and a
// transposed A costs only a strided scalar load. k is blocked so that the B block a tile
// streams stays in L1/L2. Trusts its arguments like every kernel.
#pragma once

#include <cstdint>

#include "kernels/gemm_args.h"

namespace qs::kernels::cpu {

// Rows handed to one thread should be multiples of this (the larger register tile height).
constexpr int64_t kGemmRowGrain = 8;

void gemm_f32_avx512(const GemmArgs& g, int64_t i_begin, int64_t i_end);
void gemm_f32_avx2(const GemmArgs& g, int64_t i_begin, int64_t i_end);

}  // namespace qs::kernels::cpu
