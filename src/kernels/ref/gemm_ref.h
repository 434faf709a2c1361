// kernels/ref: the scalar oracle for the f32 GEMM (kernels/gemm_args.h). Obvious loops, f32
// accumulation in p order; the SIMD variants are tested against it.
#pragma once

#include <cstdint>

#include "kernels/gemm_args.h"

namespace qs::kernels::ref {

// Computes rows [i_begin, i_end) of C.
void gemm_f32(const GemmArgs& g, int64_t i_begin, int64_t i_end);

// The same with both operands rounded to bf16 (nearest even) before they multiply: the oracle of
// the bf16-product kernels. Each product of two bf16 values is exact in f32, so only the order
// of the f32 sums differs from theirs.
void gemm_bf16(const GemmArgs& g, int64_t i_begin, int64_t i_end);

}  // namespace qs::kernels::ref
