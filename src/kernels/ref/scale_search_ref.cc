// kernels/ref: OPT-RTN's error sums, scalar (scale_search_ref.h).
#include "kernels/ref/scale_search_ref.h"

#include <algorithm>
#include <cmath>

namespace qs::kernels::ref {

void scale_search_errors(const float* w, const float* imat, int64_t count, const float* scales,
                         int64_t n_scales, int half, double* errors) {
  const auto lo = static_cast<float>(-half), hi = static_cast<float>(half - 1);
  for (int64_t c = 0; c < n_scales; ++c) {
    const float s = scales[c];
    double err = 0;
    for (int64_t j = 0; j < count; ++j) {
      const float q = std::clamp(std::nearbyint(w[j] / s), lo, hi);
      const double d = static_cast<double>(s) * q - w[j];
      err += (imat != nullptr ? imat[j] : 1.0) * d * d;
    }
    errors[c] = err;
  }
}

}  // namespace qs::kernels::ref
