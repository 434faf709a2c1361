// ops: activations and normalizations for the image pipeline (see activation.h).
#include "ops/activation.h"

#include "core/check.h"

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/activation_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"

namespace qs::ops {

void gelu_erf(float* x, int64_t n) {
  if (kernels::active_isa() == kernels::Isa::kRef) return kernels::ref::gelu_erf(x, n);
  return kernels::cpu::elementwise_hwy_active().gelu_erf(x, n);
}
void gelu_tanh(float* x, int64_t n) {
  kernels::ref::gelu_tanh(x, n);
}
void quick_gelu(float* x, int64_t n) {
  kernels::ref::quick_gelu(x, n);
}
void silu(float* x, int64_t n) {
  kernels::ref::silu(x, n);
}
void relu(float* x, int64_t n) {
  kernels::ref::relu(x, n);
}

void layer_norm(const float* x, int64_t m, int64_t d, const float* weight, const float* bias,
                float eps, float* y) {
  kernels::ref::layer_norm(x, m, d, weight, bias, eps, y);
}

void group_norm(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups,
                const float* weight, const float* bias, float eps, float* y) {
  QS_CHECK(groups > 0 && c % groups == 0);
  kernels::ref::group_norm(x, n, c, hw, groups, weight, bias, eps, y);
}

void rope_interleaved(float* x, int64_t n_tokens, int64_t stride, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin) {
  kernels::ref::rope_interleaved(x, n_tokens, stride, n_heads, head_dim, cos, sin);
}

}  // namespace qs::ops
