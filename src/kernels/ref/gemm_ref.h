// kernels/ref: the scalar oracle for the f32 GEMM (kernels/gemm_args.h). Obvious loops, f32
// accumulation in p order; the SIMD variants are tested against it.
#pragma once

#include <cstdint>

#include "kernels/gemm_args.h"

namespace qs::kernels::ref {

// Computes rows [i_begin, i_end) of C.
void gemm_f32(const GemmArgs& g, int64_t i_begin, int64_t i_end);

}  // namespace qs::kernels::ref
