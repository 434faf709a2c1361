// ops: the inner loop of OPT-RTN's scale search (quant/opt_rtn.cc): the imatrix-weighted
// reconstruction error of one group of weights under each candidate scale. Picks the kernel
// for the active ISA (AVX-512, else the scalar reference); both give the same doubles.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace qs::ops {

// errors[c] = sum_j imat[j] * (s_c * clamp(round(w[j] / s_c), -half, half - 1) - w[j])^2 for
// s_c = scales[c], c < n_scales (kernels/ref/scale_search_ref.h has the exact arithmetic).
// imat == nullptr weights every input by 1. Trusted arguments: callers are the quantizer.
void scale_search_errors(const float* w, const float* imat, int64_t count, const float* scales,
                         int64_t n_scales, int half, double* errors);

// The same on the kernel of `isa` (which this CPU must have), for tests.
void scale_search_errors_with_isa(kernels::Isa isa, const float* w, const float* imat,
                                  int64_t count, const float* scales, int64_t n_scales, int half,
                                  double* errors);

// The candidate scales of one group (kernels/ref/scale_search_ref.h: 2 imax + 1 of them into
// out, the f16 values RTN would store), the same floats on every kernel.
void scale_candidates(float gmax, int half, double step, int imax, float* out);
void scale_candidates_with_isa(kernels::Isa isa, float gmax, int half, double step, int imax,
                               float* out);

}  // namespace qs::ops
