// kernels/ref: the scalar oracle for the error sums of OPT-RTN's scale search (quant/opt_rtn.h,
// autoround.md §1.5). Obvious loops in the exact arithmetic the search has always used; the
// SIMD variant must give the same doubles bit for bit, so that it picks the same scales.
#pragma once

#include <cstdint>

namespace qs::kernels::ref {

// For each candidate scale s = scales[c] (c < n_scales), errors[c] = sum over j < count, in
// that order, of imat[j] * (s * q_j - w[j])^2 in double, with q_j = clamp(round-half-even(w[j]
// / s) in f32, -half, half - 1). imat == nullptr weights every input by 1.
void scale_search_errors(const float* w, const float* imat, int64_t count, const float* scales,
                         int64_t n_scales, int half, double* errors);

// The search's candidate scales for a group whose signed value of largest magnitude is gmax
// (non-zero): out[i + imax] for i = -imax .. imax is 1 / iscale with iscale = -(half - step i)
// / gmax in double, rounded to f32, then to f16 as RTN stores scales, with AutoRound's
// magnitude floor of f16(1e-5) keeping the sign (formats/rtn.cc).
void scale_candidates(float gmax, int half, double step, int imax, float* out);

}  // namespace qs::kernels::ref
