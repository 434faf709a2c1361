// kernels/ref: OPT-RTN's error sums, scalar (scale_search_ref.h).
#include "kernels/ref/scale_search_ref.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

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

void scale_candidates(float gmax, int half, double step, int imax, float* out) {
  auto to_f16 = [](float v) { return f16_to_f32(f32_to_f16(v)); };
  const float floor_f16 = to_f16(1e-5f);
  for (int i = -imax; i <= imax; ++i) {
    const double iscale = -(half - step * i) / gmax;
    const float s = to_f16(static_cast<float>(1.0 / iscale));
    out[i + imax] = s < 0 ? std::min(s, -floor_f16) : std::max(s, floor_f16);
  }
}

}  // namespace qs::kernels::ref
