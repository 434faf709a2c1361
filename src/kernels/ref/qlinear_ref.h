// kernels/ref: the scalar oracle of the quantized linear. Two references:
//  - qlinear_exact: y = x @ dequant(W)^T in f32 from the resident layout, with x unquantized:
//    what the checkpoint means. The int8-activation kernels are tested against it with a
//    limit stated per format (the activation rounding);
//  - qlinear_int8: the same integer arithmetic as the SIMD kernels (int8 activations,
//    integer block dot products), which they must match to float rounding.
#pragma once

#include <cstdint>

#include "kernels/qmatrix.h"

namespace qs::kernels::ref {

// y[i, j] for i in [0, m), j in [n_begin, n_end); x: [m, k] f32 (natural order, unpermuted).
void qlinear_exact(const QMatrixView& w, const float* x, int64_t m, int64_t n_begin, int64_t n_end,
                   float* y);
void qlinear_int8(const QMatrixView& w, const QActsView& a, int64_t n_begin, int64_t n_end,
                  float* y);

}  // namespace qs::kernels::ref
