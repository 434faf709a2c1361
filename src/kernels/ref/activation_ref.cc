// kernels/ref: scalar activations (see activation_ref.h).
#include "kernels/ref/activation_ref.h"

#include <cmath>

namespace qs::kernels::ref {

void gelu_erf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
}

void gelu_tanh(float* x, int64_t n) {
  // sqrt(2 / pi) and 0.044715 as in torch's tanh approximation.
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

void quick_gelu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
}

void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void relu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

}  // namespace qs::kernels::ref
