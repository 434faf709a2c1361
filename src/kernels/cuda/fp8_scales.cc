// kernels/cuda: FP8 W8A8 scale handling and the host references of the FP8 GEMM's kernels
// (fp8_scales.h).
#include "kernels/cuda/fp8_scales.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace qs::kernels::cuda {

Fp8WeightScales fp8_weight_scales(const float* row_scales, int64_t n) {
  Fp8WeightScales s;
  const bool same =
      std::all_of(row_scales, row_scales + n, [&](float v) { return v == row_scales[0]; });
  s.per_channel = !same;
  s.values.assign(row_scales, row_scales + (same ? 1 : n));
  return s;
}

float fp8_token_scale(float amax) {
  return std::max(amax / kE4m3Max, kFp8MinTokenScale);
}

void fp8_quantize_rows_ref(const uint16_t* x, int64_t m, int64_t k, const float* static_scale,
                           uint8_t* q, float* row_scales) {
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* row = x + r * k;
    float s = 0.0f;
    if (static_scale != nullptr) {
      s = *static_scale;
    } else {
      float amax = 0.0f;
      // std::max keeps amax when |x| is NaN, as the GPU's fmaxf does.
      for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(bf16_to_f32(row[c])));
      s = fp8_token_scale(amax);
    }
    row_scales[r] = s;
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < k; ++c) q[r * k + c] = f32_to_fp8_e4m3(bf16_to_f32(row[c]) * inv);
  }
}

void fp8_gemm_ref(const uint8_t* qx, const float* x_scales, bool x_per_token, const uint8_t* qw,
                  const Fp8WeightScales& w, int64_t m, int64_t n, int64_t k, float* y,
                  float* abs_sum) {
  // The 256 e4m3 values once, instead of a decode per product.
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
  for (int64_t r = 0; r < m; ++r) {
    const double sx = x_scales[x_per_token ? r : 0];
    for (int64_t j = 0; j < n; ++j) {
      const double sw = w.values[w.per_channel ? j : 0];
      double sum = 0.0, mag = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double p = static_cast<double>(lut[qx[r * k + c]]) * lut[qw[j * k + c]];
        sum += p;
        mag += std::fabs(p);
      }
      y[r * n + j] = static_cast<float>(sx * sw * sum);
      if (abs_sum != nullptr) abs_sum[r * n + j] = static_cast<float>(std::fabs(sx * sw) * mag);
    }
  }
}

}  // namespace qs::kernels::cuda
