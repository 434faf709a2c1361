// kernels/ref: LayerNorm and GroupNorm (see norm_ref.h).
#include "kernels/ref/norm_ref.h"

#include <cmath>

namespace qs::kernels::ref {

namespace {

// Mean and 1/sqrt(var + eps) of n values.
void moments(const float* x, int64_t n, float eps, float* mean, float* inv_std) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += x[j];
  const double mu = s / static_cast<double>(n);
  double v = 0.0;
  for (int64_t j = 0; j < n; ++j) v += (x[j] - mu) * (x[j] - mu);
  *mean = static_cast<float>(mu);
  *inv_std = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(n) + eps));
}

}  // namespace

void layer_norm(const float* x, int64_t m, int64_t d, const float* weight, const float* bias,
                float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    float mean, inv;
    moments(x + i * d, d, eps, &mean, &inv);
    for (int64_t j = 0; j < d; ++j) {
      float v = (x[i * d + j] - mean) * inv;
      if (weight) v *= weight[j];
      if (bias) v += bias[j];
      y[i * d + j] = v;
    }
  }
}

void group_norm(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups,
                const float* weight, const float* bias, float eps, float* y) {
  const int64_t per = c / groups;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t off = (b * c + g * per) * hw;
      float mean, inv;
      moments(x + off, per * hw, eps, &mean, &inv);
      for (int64_t ch = 0; ch < per; ++ch) {
        const int64_t cc = g * per + ch;
        const float w = weight ? weight[cc] : 1.0f, bb = bias ? bias[cc] : 0.0f;
        for (int64_t p = 0; p < hw; ++p) {
          const int64_t i = off + ch * hw + p;
          y[i] = (x[i] - mean) * inv * w + bb;
        }
      }
    }
  }
}

}  // namespace qs::kernels::ref
