// kernels/ref: scalar per-token ops, the oracle for kernels/cpu/elementwise_*.cc.
#include "kernels/ref/elementwise_ref.h"

#include <algorithm>
#include <cmath>

namespace qs::kernels::ref {

void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
    for (int64_t j = 0; j < d; ++j) yi[j] = weight[j] * (xi[j] * inv);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = v[j], x2 = v[j + half];
        v[j] = x1 * c[j] - x2 * s[j];
        v[j + half] = x2 * c[j] + x1 * s[j];
      }
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float exp_sub(const float* x, int64_t n, float shift, float* out) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    if (out != nullptr) out[i] = e;
    sum += e;
  }
  return sum;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace qs::kernels::ref
