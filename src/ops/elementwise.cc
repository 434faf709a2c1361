// ops: per-token ops, dispatched once per call to the scalar oracle (kernels/ref/
// elementwise_ref.cc) for QS_KERNEL=ref, else to the Highway kernels (kernels/cpu/
// elementwise_hwy.cc) of the target the active ISA maps to.
#include "ops/elementwise.h"

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/elementwise_ref.h"

namespace qs::ops {

using kernels::Isa;

void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y) {
  if (kernels::active_isa() == Isa::kRef) return kernels::ref::rms_norm(x, m, d, weight, eps, y);
  return kernels::cpu::elementwise_hwy_active().rms_norm(x, m, d, weight, eps, y);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  if (kernels::active_isa() == Isa::kRef) return kernels::ref::silu_mul(gate, up, n, out);
  return kernels::cpu::elementwise_hwy_active().silu_mul(gate, up, n, out);
}

void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin) {
  if (kernels::active_isa() == Isa::kRef)
    return kernels::ref::rope_rotate_half(x, n_tokens, n_heads, head_dim, cos, sin);
  return kernels::cpu::elementwise_hwy_active().rope_rotate_half(x, n_tokens, n_heads, head_dim,
                                                                 cos, sin);
}

void softmax(float* x, int64_t n) {
  if (kernels::active_isa() == Isa::kRef) return kernels::ref::softmax(x, n);
  return kernels::cpu::elementwise_hwy_active().softmax(x, n);
}

float exp_sub(const float* x, int64_t n, float shift, float* out) {
  if (kernels::active_isa() == Isa::kRef) return kernels::ref::exp_sub(x, n, shift, out);
  return kernels::cpu::elementwise_hwy_active().exp_sub(x, n, shift, out);
}

void add_inplace(float* y, const float* x, int64_t n) {
  if (kernels::active_isa() == Isa::kRef) return kernels::ref::add_inplace(y, x, n);
  return kernels::cpu::elementwise_hwy_active().add_inplace(y, x, n);
}

}  // namespace qs::ops
